#!/usr/bin/env python
"""Mixtral 8x7B on 64 B200 (NeMo 25.02) against its GB200 twin (NeMo 25.04), and the two dense
tp 1 pp 1 pairs of the same two tables: where the B200 row's miss lies (docs/calibration.md
§5.100, a finding).

Run (about half a minute, analytic only):

    python experiments/mixtral_b200.py            # Markdown tables on stdout

Table 1: the three model pairs that NVIDIA ran at tp 1, pp 1 on both DGX-B200 (NeMo 25.02,
FP8 delayed scaling) and DGX-GB200 (NeMo 25.04, FP8 current scaling): measured and estimated
steps, each row's error, the measured B200/GB200 step ratio and the model's, and the ratio
of the two rows' compute factors (Table 4): the part of the B200 row's miss its GB200 twin
does not share. Whether the script captured per-layer CUDA graphs (Megatron-Core
``enable_cuda_graph``) is read from
NVIDIA/NeMo: v2.2.0 ``scripts/llm/performance/pretrain_{llama3_8b,nemotron4_15b,
mixtral_8x7b}.py`` (``enable_cuda_graph = bool(args.gpu.lower() in [...])``: ``[]`` for Llama 3
8B, ``["b200"]`` for the other two) and v2.3.0 ``scripts/performance/recommended_model_configs/
model_configs_gb200.csv`` (``cuda_graphs`` column 1 on all three).

Table 2: the model's per-part times of the Mixtral pair, per layer and micro-batch (ms), and
the time the estimate misses per layer and micro-batch, ``(measured - estimated) /
(micro-batches x layers)``.

Table 3: the B200 Mixtral row's data-parallel traffic, each collective alone on its links
(``strategies.cost.comm.dp_parts``: the dense weights over dp 64, the routed experts over their
expert-data-parallel group of 8 ranks, one per node, over the NICs), beside the seconds the
estimate leaves exposed and the miss: the bound on what the traffic over the nodes could add
if none of it hid.

Table 4: the factor on each row's estimated compute seconds that would make its estimate its
measurement (the other terms held), for the three pairs and the same B200 table's pipelined
rows (tp >= 2): what a B200 compute rate would have to be to close the rows, and what it
would do to the pipelined ones.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import Case, reference_cases  # noqa: E402

FILE = "strategies/reference/data/nemo_performance_25.json"
#: (B200 NeMo 25.02 row, GB200 NeMo 25.04 row, per-layer CUDA graphs on B200, on GB200)
PAIRS = (
    ("nemo2502_llama38b_b200_8", "nemo2504_llama38b_gb200_8", False, True),
    ("nemo2502_nemotron15b_b200_64", "nemo2504_nemotron15b_gb200_64", True, True),
    ("nemo2502_mixtral8x7b_b200_64", "nemo2504_mixtral8x7b_gb200_64", True, True),
)
MIXTRAL = PAIRS[2][:2]
#: the same table's pipelined B200 rows, tp >= 2 (Table 4's contrast)
PIPELINED = ("nemo2502_llama370b_b200_64", "nemo2502_llama3405b_b200_128",
             "nemo2502_nemotron340b_b200_128", "nemo2502_gpt3175b_b200_512")


def cases() -> dict[str, Case]:
    """The rows of ``PAIRS`` as the reader builds them."""
    want = {i for p in PAIRS for i in p[:2]} | set(PIPELINED)
    return {c.id: c for c in reference_cases([FILE]) if c.id in want and c.job is not None}


def pair_rows(cs: dict[str, Case]) -> list[dict]:
    """Table 1's figures per pair: measured and estimated seconds, errors, the two ratios."""
    out = []
    for b, g, gb, gg in PAIRS:
        eb, eg = estimate(cs[b].job).step_time_s, estimate(cs[g].job).step_time_s
        mb, mg = cs[b].measured_step_s, cs[g].measured_step_s
        out.append({"b200": b, "gb200": g, "graphs": (gb, gg), "meas": (mb, mg),
                    "est": (eb, eg), "err": (eb / mb - 1, eg / mg - 1),
                    "ratio_meas": mb / mg, "ratio_model": eb / eg,
                    "factor_ratio": compute_scale(cs[b]) / compute_scale(cs[g])})
    return out


def compute_scale(c: Case) -> float:
    """The factor on the estimate's compute seconds that would make ``c``'s estimate its
    measurement, the other terms held: ``(measured - (estimate - compute)) / compute``."""
    e = estimate(c.job)
    comp = e.breakdown_s["compute"]
    return (c.measured_step_s - (e.step_time_s - comp)) / comp


def per_layer_miss(c: Case) -> float:
    """Seconds the estimate misses per layer and micro-batch on ``c``."""
    j = c.job
    mbs = j.plan.gbs // (j.plan.mbs * j.plan.dp)
    return (c.measured_step_s - estimate(j).step_time_s) / (mbs * j.model.num_layers)


def dp_traffic(c: Case) -> dict[str, float]:
    """Seconds of ``c``'s gradient reduce-scatter and weight all-gather, the dense and the
    expert part each alone on its links, at the row's widths (bf16 gradients, FP8 gather)."""
    j, sc = c.job, stage_costs(c.job)
    P = j.plan
    (d, nd, sd), (e, ne, se) = cm.dp_parts(sc.params_by_stage[0], sc.expert_params_by_stage[0],
                                           P.tp, P.cp, P.dp, P.ep, P.etp or 1)
    gw = sc.gather_by_stage[0]
    cl = j.cluster
    return {"dense reduce-scatter": float(cm.collective_time("reduce_scatter", sc.grad_bytes * d,
                                                              nd, sd, cl)),
            "dense all-gather": float(cm.collective_time("allgather", gw * d, nd, sd, cl)),
            "expert reduce-scatter": float(cm.collective_time("reduce_scatter",
                                                               sc.grad_bytes * e, ne, se, cl)),
            "expert all-gather": float(cm.collective_time("allgather", gw * e, ne, se, cl)),
            "groups": (int(nd), int(ne))}


def main() -> None:
    cs = cases()
    print("Table 1: tp 1 pp 1 pairs, NeMo 25.02 DGX-B200 (fp8 delayed) / 25.04 DGX-GB200 "
          "(fp8 current)\n")
    print("| B200 row | graphs B200 / GB200 | measured s B200 / GB200 | estimate s | error "
          "B200 / GB200 | B200/GB200 measured | model | compute factor B200 / GB200 |")
    print("|---|---|---|---|---|---:|---:|---:|")
    for r in pair_rows(cs):
        print(f"| {r['b200']} | {'yes' if r['graphs'][0] else 'no'} / "
              f"{'yes' if r['graphs'][1] else 'no'} | {r['meas'][0]:.3f} / {r['meas'][1]:.3f} "
              f"| {r['est'][0]:.3f} / {r['est'][1]:.3f} | {100 * r['err'][0]:+.1f} / "
              f"{100 * r['err'][1]:+.1f} % | {r['ratio_meas']:.3f} | {r['ratio_model']:.3f} "
              f"| {r['factor_ratio']:.3f} |")
    b, g = (cs[i] for i in MIXTRAL)
    sb, sg = stage_costs(b.job), stage_costs(g.job)
    eb, eg = estimate(b.job), estimate(g.job)
    L = b.job.model.num_layers
    mbs = b.job.plan.gbs // (b.job.plan.mbs * b.job.plan.dp)
    print("\nTable 2: Mixtral 8x7B per layer and micro-batch, ms (B200 / GB200 / ratio)\n")
    print("| part | B200 | GB200 | ratio |")
    print("|---|---:|---:|---:|")
    parts = [("layer forward", sb.layer_fwd, sg.layer_fwd),
             ("layer backward (dgrad + wgrad)", sb.layer_bwd, sg.layer_bwd),
             ("  of which weight gradients", sb.layer_wgrad, sg.layer_wgrad),
             ("  attention core forward", sb.attn_fwd, sg.attn_fwd),
             ("  attention core backward", sb.attn_bwd, sg.attn_bwd),
             ("exposed all-to-all (ep_comm / (mb x L))", eb.breakdown_s["ep_comm"] / (mbs * L),
              eg.breakdown_s["ep_comm"] / (mbs * L)),
             ("missed (measured - estimate) / (mb x L)", per_layer_miss(b), per_layer_miss(g))]
    for name, x, y in parts:
        print(f"| {name} | {1e3 * x:.3f} | {1e3 * y:.3f} | {x / y:.3f} |")
    t = dp_traffic(b)
    nd, ne = t.pop("groups")
    print(f"\nTable 3: {b.id}'s data-parallel traffic alone on its links (dense over {nd} "
          f"ranks, experts over {ne}), s\n")
    print("| collective | seconds |")
    print("|---|---:|")
    for k, v in t.items():
        print(f"| {k} | {v:.3f} |")
    print(f"| sum | {sum(t.values()):.3f} |")
    print(f"| exposed in the estimate (dp_comm) | {eb.breakdown_s['dp_comm']:.3f} |")
    print(f"| measured - estimate | {b.measured_step_s - eb.step_time_s:.3f} |")
    print("\nTable 4: the factor on the estimate's compute that would close each row "
          "(other terms held)\n")
    print("| row | plan | error | compute factor |")
    print("|---|---|---:|---:|")
    for i in [x for p in PAIRS for x in p[:2]] + list(PIPELINED):
        c = cs[i]
        P = c.job.plan
        err = estimate(c.job).step_time_s / c.measured_step_s - 1
        print(f"| {i} | tp{P.tp} pp{P.pp} cp{P.cp} dp{P.dp} ep{P.ep} | {100 * err:+.1f} % "
              f"| {compute_scale(c):.3f} |")


if __name__ == "__main__":
    main()
