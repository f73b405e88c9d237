#!/usr/bin/env python
"""The Megatron-Bridge Nemotron 3 rows' modelled step, term by term, and how their misses
compare across B300, GB300, GB200 and B200 (docs/calibration.md §5.172). Nothing is fitted;
no cost of the model changes.

Run (analytic only, about a minute on a shared core):

    python experiments/hybrid_step_terms.py        # Markdown tables on stdout

Table 1, the step decomposed (``estimate(...).breakdown_s`` and, per layer kind, the stage
record's ``by_kind`` layer seconds, forward + backward (the backward holds the weight
gradient) + recomputation, times the kind's layers and the micro-batches): Mamba, attention
and latent-MoE layers, the MTP block (both depths), the rest of the compute (embedding, LM
head, loss, casts outside the layers), the exposed expert all-to-all (``ep_comm``), the
exposed tensor- and data-parallel calls, and the miss (measured - estimate) in seconds and
per layer and micro-batch (every layer of the pattern plus the MTP block's, at each depth).

Table 2, the GPUs against each other: the measured step ratio of each Super row to the GB300
row of its precision beside the modelled step's and the modelled compute's, and the row's
**excess** over that twin (``measured - estimate x twin's measured / estimated``, as
``hgx_moe_twins``): seconds, per MoE layer and micro-batch (the pattern's and the MTP block's
at each depth), and per local expert the row holds beyond the twin (§5.25's and §5.90's
reading).

Table 3, what-ifs on each row (estimate / measured - 1), beside two priced terms in
seconds: ``host s``, the step's seconds of the expert path's host time as priced (the
estimate less the estimate with ``EXPERT_HOST_S`` at 0), and ``RS_e s``, the routed experts'
gradient reduce-scatter whole and alone on its links (``hgx_moe_twins.dp_calls``; the
parameter all-gather is as long); as priced; ``no overlap`` (the
data-parallel reduce-scatter and gather both unoverlapped: every data-parallel byte exposed,
the most those calls can add, as ``hgx_moe_twins``); ``one domain`` (every GPU of the job in
one NVLink domain, as ``hgx_moe_twins``); ``host/launch`` (the expert path's host time per
local expert as Transformer Engine's unfused ``GroupedLinear`` launches per expert,
``moe_expert_launches.LAUNCHES``, times one whole PyTorch ``Linear`` forward's host path on
the row's class of CPU, ``TORCH_LINEAR_HOST_S``, in place of ``moe_time.EXPERT_HOST_S``:
an assumed price per launch, not a measurement of one; not adopted, §5.29, §5.172).

Table 4, the same ``host/launch`` what-if on every MoE row of the held-out files with MoE
rows (``FILES``): each file's MoE rows' analytic MAPE as priced and under the what-if.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.hgx_moe_twins import dp_calls, one_domain  # noqa: E402
from experiments.moe_expert_launches import LAUNCHES, TORCH_LINEAR_HOST_S, host_cpu  # noqa: E402
from strategies.cost import moe_time  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.estimate.scalar import step_arrays  # noqa: E402
from strategies.job import Job  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

DIR = "strategies/reference/data/"
DATA = DIR + "hybrid_2026.json"
#: Table 4's files
FILES = ("hybrid_2026", "megatron_bridge_2604", "heldout_2026b", "published_2026",
         "automodel_perf", "dgxc_2505")
#: the Megatron-Bridge Nemotron 3 rows (the ids' prefix and model)
PREFIX, MODEL = "mbridge", "nemotron3"
KINDS = ("mamba", "attention", "moe", "mtp")
#: the Super row each Super row's ratio is taken against (Table 2): GB300, same precision
BASE = {"mxfp8": "mbridge2608_nemotron3super_gb300_64_mxfp8",
        "nvfp4": "mbridge2608_nemotron3super_gb300_64_nvfp4"}


def rows() -> dict[str, tuple[dict, Job, float]]:
    """``{id: (entry, job, measured step s)}`` of the Megatron-Bridge Nemotron 3 rows."""
    data = load_reference(DATA)
    out = {}
    for e in data:
        if e["id"].startswith(PREFIX) and MODEL in e["id"]:
            case = case_from_entry(e, data)
            out[e["id"]] = (e, case.job, case.measured_step_s)
    return out


def kind_seconds(job: Job) -> dict[str, float]:
    """Seconds of the step in each layer kind's layers (``KINDS``; the MTP block at all its
    depths as the record's one ``mtp`` entry holds them): the kind's forward, backward and
    recomputation per layer and micro-batch, times its layers and the micro-batches."""
    sc = step_arrays(job)["stage_costs"]
    counts, nmb = job.model.layer_counts(), job.num_microbatches
    out = {}
    for k in KINDS:
        a = sc.by_kind.get(k)
        n = counts.get(k, 1) if k != "mtp" else 1
        out[k] = 0.0 if a is None else \
            n * nmb * float(a.layer_fwd + a.layer_bwd + a.layer_recompute)
    return out


def layers_per_step(job: Job) -> float:
    """Layers run per micro-batch (the pattern's and the MTP block's at each depth) times the
    micro-batches: what Table 1's miss is spread over."""
    m = job.model
    mtp = len(m.mtp_block_kinds()) * m.mtp_repeats if m.num_nextn_predict_layers else 0
    return float((m.num_layers + mtp) * job.num_microbatches)


def moe_layers_per_step(job: Job) -> float:
    """MoE layers run per micro-batch (the pattern's ``E`` and the MTP block's at each depth)
    times the micro-batches: Table 2's excess per MoE layer is spread over these."""
    m = job.model
    mtp = m.mtp_block_kinds().count("moe") * m.mtp_repeats if m.num_nextn_predict_layers else 0
    return float((m.layer_counts().get("moe", 0) + mtp) * job.num_microbatches)


def excess(r: dict, twin: dict) -> tuple[float, float, float | None]:
    """``(seconds, ms per MoE layer and micro-batch, µs per extra local expert)`` that row
    ``r`` is measured above its estimate scaled by ``twin``'s measured / estimated ratio; the
    last None where ``r`` holds no more local experts than ``twin``."""
    s = r["measured"] - r["estimate"] * twin["measured"] / twin["estimate"]
    per_layer = 1e3 * s / r["moe_layers"]
    extra = r["local"] - twin["local"]
    return s, per_layer, (1e3 * per_layer / extra if extra > 0 else None)


def host_per_launch(job: Job) -> tuple[float, float]:
    """``EXPERT_HOST_S``'s what-if for ``job``: (forward, backward) host seconds per local
    expert, ``LAUNCHES`` of its precision (the other FP8 recipes as ``fp8``, NVFP4 as MXFP8:
    one quantise per split) times ``TORCH_LINEAR_HOST_S`` of its host CPU."""
    d = job.dtype if job.dtype in LAUNCHES else \
        "fp8" if job.dtype.startswith("fp8") else "mxfp8"
    s = TORCH_LINEAR_HOST_S[host_cpu(job.cluster.gpu.name)]
    f, b = LAUNCHES[d]
    return f * s, b * s


def row(rid: str, entry: dict, job: Job, measured: float) -> dict:
    """Every column of Tables 1 and 3 for one row."""
    est = estimate(job)
    b = est.breakdown_s
    ks = kind_seconds(job)
    p = job.plan
    layers = sum(ks.values())
    with mock.patch.object(moe_time, "EXPERT_HOST_S", host_per_launch(job)):
        host = estimate(job).step_time_s
    with mock.patch.object(moe_time, "EXPERT_HOST_S", (0.0, 0.0)):
        no_host = estimate(job).step_time_s
    no_overlap = estimate(replace(job, plan=replace(p, overlap_param_gather=False,
                                                    overlap_grad_reduce=False))).step_time_s
    domain = estimate(replace(job, cluster=one_domain(job.cluster))).step_time_s
    return {"id": rid, "gpu": job.cluster.gpu.name.split("-")[0],
            "host": host_cpu(job.cluster.gpu.name), "dtype": job.dtype,
            "plan": f"tp{p.tp} ep{p.ep} ({job.model.num_experts // p.ep} local) "
                    f"mb {job.num_microbatches}",
            "measured": measured, "estimate": est.step_time_s,
            **ks, "other": b["compute"] + b["recompute"] - layers,
            "ep_comm": b["ep_comm"], "tp_dp": b["tp_comm"] + b["dp_comm"],
            "miss": measured - est.step_time_s,
            "miss_ms": 1e3 * (measured - est.step_time_s) / layers_per_step(job),
            "compute": b["compute"] + b["recompute"], "local": job.model.num_experts // p.ep,
            "moe_layers": moe_layers_per_step(job),
            "no_overlap": no_overlap, "one_domain": domain, "host_launch": host,
            "host_priced": est.step_time_s - no_host, "rs_e": dp_calls(job)["RS_e"]}


def file_mape(name: str) -> tuple[int, float, float]:
    """``(MoE rows, MAPE % as priced, MAPE % under host/launch)`` of reference file ``name``."""
    data = load_reference(DIR + name + ".json")
    a0, a1 = [], []
    for e in data:
        case = case_from_entry(e, data)
        job, m = case.job, case.measured_step_s
        if job is None or m is None or not job.model.is_moe:
            continue
        a0.append(abs(estimate(job).step_time_s / m - 1))
        with mock.patch.object(moe_time, "EXPERT_HOST_S", host_per_launch(job)):
            a1.append(abs(estimate(job).step_time_s / m - 1))
    return len(a0), 100 * sum(a0) / len(a0), 100 * sum(a1) / len(a1)


def err(x: float, m: float) -> str:
    return f"{100 * (x / m - 1):+.1f} %"


def main() -> None:
    rs = {rid: row(rid, *v) for rid, v in rows().items()}
    print("Table 1: the modelled step, seconds (busiest rank)\n")
    print("| row | plan | host | measured | estimate | error | Mamba | attention | MoE | MTP "
          "| other compute | ep_comm | tp + dp | miss s | miss ms / layer / mb |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rs.values():
        print(f"| {r['id'].removeprefix(PREFIX)} | {r['plan']} | {r['host']} "
              f"| {r['measured']:.3f} | {r['estimate']:.3f} "
              f"| {err(r['estimate'], r['measured'])} | {r['mamba']:.3f} "
              f"| {r['attention']:.3f} | {r['moe']:.3f} | {r['mtp']:.3f} | {r['other']:.3f} "
              f"| {r['ep_comm']:.3f} | {r['tp_dp']:.3f} | {r['miss']:+.3f} "
              f"| {r['miss_ms']:+.2f} |")
    print("\nTable 2: Super rows against the GB300 row of the same precision\n")
    print("| row | measured ratio | modelled step ratio | modelled compute ratio "
          "| excess s | ms / MoE layer / mb | µs / extra local expert |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rs.values():
        base = rs.get(BASE.get(r["dtype"], ""))
        if "super" not in r["id"] or base is None or base is r:
            continue
        print(f"| {r['id'].removeprefix(PREFIX)} | {r['measured'] / base['measured']:.3f} "
              f"| {r['estimate'] / base['estimate']:.3f} "
              f"| {r['compute'] / base['compute']:.3f} ", end="")
        x, per_layer, per_expert = excess(r, base)
        print(f"| {x:+.3f} | {per_layer:+.2f} | "
              + ("-" if per_expert is None else f"{per_expert:+.1f}") + " |")
    print("\nTable 3: what-ifs (estimate / measured - 1)\n")
    print("| row | host s | RS_e s | as priced | no overlap | one domain | host/launch |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rs.values():
        m = r["measured"]
        print(f"| {r['id'].removeprefix(PREFIX)} | {r['host_priced']:.3f} | {r['rs_e']:.3f} "
              f"| {err(r['estimate'], m)} "
              f"| {err(r['no_overlap'], m)} | {err(r['one_domain'], m)} "
              f"| {err(r['host_launch'], m)} |")
    print("\nTable 4: MoE rows' analytic MAPE, as priced and under host/launch\n")
    print("| file | MoE rows | as priced | host/launch |")
    print("|---|---:|---:|---:|")
    for name in FILES:
        n, a, b = file_mape(name)
        print(f"| {name} | {n} | {a:.2f} % | {b:.2f} % |")


if __name__ == "__main__":
    main()
