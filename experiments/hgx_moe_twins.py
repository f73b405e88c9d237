#!/usr/bin/env python
"""Megatron-Bridge MoE rows on 8-GPU HGX nodes (B200, B300) beside their NVL72 twins (GB200,
GB300), term by term: which term of the modelled step differs between a row and its twin, and
how much the HGX row would have to grow (docs/calibration.md §5.141).

Run (analytic only, about 25 s):

    python experiments/hgx_moe_twins.py           # Markdown tables on stdout

Table 1, the pairs: every MoE row of ``FILES`` on a ``dgx-b200``/``dgx-b300`` cluster and its
twin (``TWINS``: same model and table; the same precision where the table has one, else
named), measured and estimated step, ``ratio`` = measured / estimated, and the HGX row's
**excess** over its twin: ``measured - estimated x twin ratio`` (seconds the HGX row would
have to grow by beyond what its twin misses) and, per MoE layer and micro-batch on the
busiest rank, ``excess / (micro-batches x MoE layers)``.

Table 2, the modelled step decomposed (``estimate(...).breakdown_s``, exposed seconds on the
critical path, busiest rank): compute (the expert GEMMs and everything else of the layers),
recompute, the expert all-to-all (dispatch and combine, ``ep_comm``), pipeline messages
(``pp_comm``), the data-parallel tail (gradient reduce-scatter and parameter all-gather,
exposed: ``dp_comm``), bubble and optimizer.

Table 3, the data-parallel calls whole, alone on their links (``comm.dp_collective_time``
over the busiest kind of rank's parameters, as the estimate calls it): the dense gradient
reduce-scatter and parameter all-gather over ``dp`` (``RS_d``, ``AG_d``), the routed experts'
over their expert-data-parallel group (``RS_e``, ``AG_e``; ``edp`` ranks ``ep`` apart: across
the NICs on an 8-GPU node, inside NVLink on an NVL72 rack where the whole job fits one
domain), and three what-ifs of the same job: ``no opg`` (``overlap_param_gather`` off: the
whole gather after the optimizer), ``no overlap`` (both overlaps off: every data-parallel
byte exposed, the most the data-parallel calls can add), and ``one domain`` (every GPU of the
job in one NVLink domain: what crossing the NICs costs in the model, all terms together),
and ``NIC / 2`` (each NIC at half its rate: a B300 node with B200's 400 Gb/s ConnectX-7 in
place of its 800 Gb/s ConnectX-8; the only network what-if that moves the B300 rows toward
their measurements, not adopted: no source says the runs had one).
Error columns are estimate / measured - 1.

Table 4, the pairs that ran the same plan (Qwen3-30B-A3B on one 8-GPU node against two NVL72
trays): the step ratio HGX / NVL72 measured and modelled beside the modelled compute's (the
sustained clocks of the 1000 W B200 / 1100 W B300 against the 1200 W GB200 / 1400 W GB300),
eager and graphed.

Table 5, the MoE rows' analytic MAPE of each file, all of them and by kind of cluster.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import comm as cm  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.estimate.scalar import rank_fields, step_arrays  # noqa: E402
from strategies.job import Job  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402
from topologies.cluster import Cluster  # noqa: E402

DATA = "strategies/reference/data/"
FILES = ("megatron_bridge_2604", "heldout_2026b", "published_2026")
HGX = ("dgx-b200", "dgx-b300")
#: HGX row -> its NVL72 twin: the same model, table and precision (B200 with GB200, B300 with
#: GB300) where the table has it; a different precision or part is named in ``NOTES``
TWINS = {
    "mbridge260401_gptoss120b_b300_64_bf16": "mbridge260401_gptoss120b_gb300_64_bf16",
    "mbridge260401_gptoss120b_b200_64_bf16": "mbridge260401_gptoss120b_gb200_64_bf16",
    "mbridge260401_qwen330ba3b_b300_8_mxfp8": "mbridge260401_qwen330ba3b_gb300_8_mxfp8",
    "mbridge260401_qwen330ba3b_b200_8_mxfp8": "mbridge260401_qwen330ba3b_gb200_8_mxfp8",
    "mbridge260401_qwen3235ba22b_b300_256_mxfp8": "mbridge260401_qwen3235ba22b_gb300_256_mxfp8",
    "mbridge260401_qwen3235ba22b_b200_256_mxfp8": "mbridge260401_qwen3235ba22b_gb200_256_mxfp8",
    "mbridge260401_deepseekv3_b300_256_mxfp8": "mbridge260401_deepseekv3_gb300_256_mxfp8",
    "mbridge260401_deepseekv3_b200_256_mxfp8": "mbridge260401_deepseekv3_gb200_256_mxfp8",
    "mbridge2606_deepseekv3_b300_256_mxfp8": "mbridge2606_deepseekv3_gb300_256_mxfp8",
    "mbridge2606_gptoss120b_b300_64_mxfp8": "mbridge2606_gptoss120b_gb300_64_mxfp8",
    "mbridge2606_qwen330ba3b_b300_8_mxfp8": "mbridge2606_qwen330ba3b_gb300_8_mxfp8",
    "mbridge2511_dsv3_b200_256_mxfp8": "mbridge2511_dsv3_gb200_256_mxfp8",
    "mbridge2511_qwen3_235b_b200_64_mxfp8": "mbridge2511_qwen3_235b_gb200_256_bf16",
}
NOTES = {
    "mbridge2511_qwen3_235b_b200_64_mxfp8": "twin bf16 (the 25.11 table has no GB MXFP8 row)",
    "mbridge2606_gptoss120b_b300_64_mxfp8": "twin graphed + EP overlap, HGX eager (§5.90)",
    "mbridge2606_qwen330ba3b_b300_8_mxfp8": "both graphed",
    "mbridge2606_deepseekv3_b300_256_mxfp8": "twin graphed + EP overlap, HGX eager",
}
GROUPS = ("all MoE rows", "B200/B300 HGX", "NVL72", "other")
KEYS = ("compute", "recompute", "ep_comm", "pp_comm", "dp_comm", "bubble", "optimizer")


def one_domain(cl: Cluster) -> Cluster:
    """``cl`` with every GPU in one node and one NVLink domain (the same GPU, NVLink rate, and
    NICs per GPU): no collective of the job crosses a NIC (table 3's what-if)."""
    n = sum(g.num_nodes for g in cl.groups) * cl.gpus_per_node
    groups = (replace(cl.groups[0], num_nodes=1),)
    return replace(cl, gpus_per_node=n, nics_per_node=n * cl.nics_per_node // cl.gpus_per_node,
                   nvlink_domain_gpus=n, gpus_per_tray=None, groups=groups)


def _entries() -> dict[str, tuple[dict, list]]:
    out = {}
    for name in FILES:
        data = load_reference(DATA + name + ".json")
        for e in data:
            out[e["id"]] = (e, data)
    return out


def dp_calls(job: Job) -> dict[str, float]:
    """The data-parallel calls of ``job``'s busiest kind of rank (most parameters), whole and
    alone on their links, seconds: ``RS_d``/``AG_d`` the dense reduce-scatter and all-gather
    over ``dp·cp``, ``RS_e``/``AG_e`` the routed experts' over their expert-data-parallel
    group (``comm.dp_parts``), and that group's ranks ``edp`` and stride; as
    ``estimate.terms.dp_calls`` prices them (the stage-cost record's gradient bytes and
    gather width per parameter)."""
    p = job.plan
    sc = step_arrays(job)["stage_costs"]
    rf = rank_fields(job)
    k = max(("first", "mid", "last"), key=lambda x: rf[f"params_{x}"])
    pr, pe = rf[f"params_{k}"], rf[f"expert_params_{k}"]
    gather = float({"first": sc.gather_first, "mid": sc.gather_mid,
                    "last": sc.gather_last}[k])
    (d, n_d, s_d), (e, n_e, s_e) = cm.dp_parts(pr, pe, p.tp, p.cp, p.dp, p.ep, p.expert_tp)
    out = {"edp": float(n_e), "edp_stride": float(s_e), "dense_params": float(d),
           "expert_params": float(e)}
    for kind, key, width in (("reduce_scatter", "RS", float(sc.grad_bytes)),
                             ("allgather", "AG", gather)):
        out[key + "_d"] = float(cm.collective_time(kind, width * d, n_d, s_d, job.cluster))
        out[key + "_e"] = (float(cm.collective_time(kind, width * e, n_e, s_e, job.cluster))
                           if e > 0 and n_e > 1 else 0.0)
    return out


def moe_layer_s(job: Job) -> tuple[float, float]:
    """``(MoE layers on the busiest rank, micro-batches)`` of ``job``: the layers the
    per-layer miss is spread over (every MoE layer of the busiest pipeline rank, its MTP
    module's counted as one)."""
    m, p = job.model, job.plan
    dense = int(getattr(m, "first_k_dense_replace", 0) or 0)
    moe_total = m.num_layers - dense
    busiest = max(job.layers_of_stage(s) for s in range(p.pp))
    return float(min(busiest, moe_total)), float(job.num_microbatches)


def row(rid: str, entries: dict) -> dict:
    """Every column of tables 1-3 for row ``rid``."""
    e, data = entries[rid]
    case = case_from_entry(e, data)
    job = case.job
    est = estimate(job)
    ms, t = case.measured_step_s, est.step_time_s
    p = job.plan
    what = {}
    for label, j in (("no_opg", replace(job, plan=replace(p, overlap_param_gather=False))),
                     ("no_overlap", replace(job, plan=replace(p, overlap_param_gather=False,
                                                              overlap_grad_reduce=False))),
                     ("one_domain", replace(job, cluster=one_domain(job.cluster))),
                     ("half_nic", replace(job, cluster=replace(
                         job.cluster,
                         inter_node_bandwidth=job.cluster.inter_node_bandwidth / 2)))):
        what[label] = estimate(j).step_time_s
    layers, mb = moe_layer_s(job)
    return {"id": rid, "gpu": job.cluster.gpu.name, "plan": p.short(), "dtype": job.dtype,
            "local": job.model.num_experts / p.ep,
            "measured": ms, "estimate": t, "error": 100 * (t / ms - 1), "ratio": ms / t,
            "layers": layers, "mb": mb, **{k: est.breakdown_s[k] for k in KEYS},
            **dp_calls(job), **what}


def pairs() -> list[tuple[dict, dict]]:
    """``(HGX row, twin row)`` of every ``TWINS`` entry, in its order."""
    entries = _entries()
    return [(row(h, entries), row(g, entries)) for h, g in TWINS.items()]


def excess(h: dict, g: dict) -> tuple[float, float]:
    """``(seconds, ms per MoE layer and micro-batch)`` the HGX row ``h`` is measured above its
    estimate scaled by its twin ``g``'s ratio (measured / estimated)."""
    s = h["measured"] - h["estimate"] * g["ratio"]
    return s, 1e3 * s / (h["layers"] * h["mb"])


def per_extra_expert(h: dict, g: dict) -> float | None:
    """ms of ``excess`` per MoE layer and micro-batch over each local expert the HGX row holds
    beyond its twin (docs/calibration.md §5.25's per-expert reading), None where they hold as
    many."""
    extra = h["local"] - g["local"]
    return excess(h, g)[1] / extra if extra > 0 else None


def moe_mape(name: str) -> dict[str, tuple[int, float]]:
    """``{group: (rows, analytic MAPE %)}`` of file ``name``'s MoE rows (``model.is_moe``):
    all of them, those on an 8-GPU Blackwell node (``HGX`` presets), on an NVL72 rack
    (``*-nvl72``) and the rest (Hopper nodes)."""
    data = load_reference(DATA + name + ".json")
    errs: dict[str, list[float]] = {k: [] for k in GROUPS}
    for e in data:
        case = case_from_entry(e, data)
        job = case.job
        if job is None or case.measured_step_s is None or not job.model.is_moe:
            continue
        err = abs(estimate(job).step_time_s / case.measured_step_s - 1)
        errs["all MoE rows"].append(err)
        name_ = job.cluster.name.split(":")[0]
        errs["B200/B300 HGX" if name_ in HGX else "NVL72" if "nvl72" in name_
             else "other"].append(err)
    return {k: (len(v), 100 * sum(v) / len(v) if v else 0.0) for k, v in errs.items()}


def _md(text: str) -> str:
    """``text`` for a Markdown table cell (a layout's ``|`` escaped)."""
    return text.replace("|", "\\|")


def _pct(x: float, ms: float) -> str:
    return f"{100 * (x / ms - 1):+.1f} %"


def main(ps: list[tuple[dict, dict]] | None = None,
         mapes: dict[str, dict[str, tuple[int, float]]] | None = None) -> None:
    """Print the tables; ``ps``: ``pairs()`` and ``mapes``: ``{name: moe_mape(name)}`` of
    every ``FILES`` name, already computed (computed here when None)."""
    ps = pairs() if ps is None else ps
    print("Table 1. HGX MoE rows and their NVL72 twins (error = estimate / measured - 1)\n")
    print("| HGX row | plan | measured s | estimate s | error | twin | twin plan | twin error "
          "| ratio HGX / twin | excess s | excess ms / MoE layer / mb | local experts HGX / twin "
          "| ms per extra local expert | note |")
    print("|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---|---:|---|")
    for h, g in ps:
        s, per = excess(h, g)
        x = per_extra_expert(h, g)
        print(f"| {h['id']} | {_md(h['plan'])} | {h['measured']:.3f} | {h['estimate']:.3f} | "
              f"{h['error']:+.1f} % | {g['id']} | {_md(g['plan'])} | {g['error']:+.1f} % | "
              f"{h['ratio'] / g['ratio']:.3f} | {s:+.3f} | {per:+.2f} | "
              f"{h['local']:.0f} / {g['local']:.0f} | {'-' if x is None else f'{x:+.3f}'} | "
              f"{NOTES.get(h['id'], '')} |")
    print("\nTable 2. The modelled step decomposed (exposed seconds)\n")
    print("| row | GPU | " + " | ".join(KEYS) + " | micro-batches | MoE layers |")
    print("|---|---|" + "---:|" * (len(KEYS) + 2))
    for pair in ps:
        for r in pair:
            print(f"| {r['id']} | {r['gpu']} | " + " | ".join(f"{r[k]:.3f}" for k in KEYS)
                  + f" | {r['mb']:.0f} | {r['layers']:.0f} |")
    print("\nTable 3. Data-parallel calls whole (s, alone on their links), and what-ifs "
          "(error against the measurement)\n")
    print("| row | edp (stride) | expert params | RS_d | AG_d | RS_e | AG_e | dp_comm exposed | "
          "as is | no opg | no overlap | one domain | NIC / 2 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pair in ps:
        for r in pair:
            ms = r["measured"]
            print(f"| {r['id']} | {r['edp']:.0f} ({r['edp_stride']:.0f}) | "
                  f"{r['expert_params'] / 1e9:.2f}e9 | {r['RS_d']:.3f} | {r['AG_d']:.3f} | "
                  f"{r['RS_e']:.3f} | {r['AG_e']:.3f} | {r['dp_comm']:.3f} | "
                  f"{r['error']:+.1f} % | {_pct(r['no_opg'], ms)} | "
                  f"{_pct(r['no_overlap'], ms)} | {_pct(r['one_domain'], ms)} | "
                  f"{_pct(r['half_nic'], ms)} |")
    print("\nTable 4. The pairs that ran the same plan (an 8-GPU node against 8 GPUs on two "
          "NVL72 trays): the GPUs' step ratio HGX / NVL72, measured and modelled, and the "
          "modelled compute's\n")
    print("| HGX row | measured ratio | modelled ratio | modelled compute ratio | graphs |")
    print("|---|---:|---:|---:|---|")
    for h, g in ps:
        if h["plan"] == g["plan"]:
            print(f"| {h['id']} | {h['measured'] / g['measured']:.3f} | "
                  f"{h['estimate'] / g['estimate']:.3f} | {h['compute'] / g['compute']:.3f} | "
                  f"{'full iteration' if ' cg ' in h['plan'] + ' ' else 'eager'} |")
    print("\nTable 5. MoE rows' analytic MAPE by file: all, on B200/B300 nodes, on NVL72 "
          "racks, the rest (H100/H800 nodes)\n")
    print("| file | " + " | ".join(GROUPS) + " |")
    print("|---|---|---|---|---|")
    for name in FILES:
        g = moe_mape(name) if mapes is None else mapes[name]
        print(f"| {name}.json | " + " | ".join(
            f"{g[k][1]:.2f} % ({g[k][0]})" for k in GROUPS) + " |")


if __name__ == "__main__":
    main()
