#!/usr/bin/env python
"""torchtitan's December 2024 rows, each modelled step decomposed beside its measurement
(docs/calibration.md §5.142).

    python experiments/titan_rows.py                 # every torchtitan row of the two files
    python experiments/titan_rows.py --rows 405B_t5  # rows whose id contains this

Per row, one mean layer and one micro-batch on the slowest stage, as ``layer_time.layer_time``
composes it (the same calls, the same ``StageInputs``): the GEMMs (forward, data and weight
gradient, at the fused Q/K/V and gate/up widths), what torchtitan's separate ``wq``/``wk``/``wv``
and ``w1``/``w3`` add to them (``split_projections``: their own GEMMs and the sum of their input
gradients), the attention kernel, the memory-bound kernels (``elementwise_bytes``), torchao's
float8 casts (``cast_time``), the sequence-dim layout copies or async TP's fused passes, the
launches, the gradient accumulation and ZeRO-3's copy-out, the recomputation, the exposed
TP/CP communication and the blocking amax all-reduces. Then the step as the estimate composes
it: the stage's busy seconds, the pipeline bubble, the exposed p2p, data-parallel and optimizer
seconds, the estimate and the measurement, and the seconds per layer and micro-batch the
measurement leaves unexplained (``gap/slot``: the miss over ``(m + p − 1)/v`` slots of the
slowest stage's layers, the time a per-layer term would have to add to close it).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import async_tp, elementwise_bytes  # noqa: E402
from strategies.cost import gemm_shapes  # noqa: E402
from strategies.cost.attention_time import attention_time_fwd  # noqa: E402
from strategies.cost.elementwise_time import (cast_time, launch_time,  # noqa: E402
                                              tp_layout_copy_time)
from strategies.cost.gemm_time import (fixed_shares, gemm_units, units_time_bwd,  # noqa: E402
                                       units_time_fwd, whole_split)
from strategies.cost.hbm_rate import usable_hbm  # noqa: E402
from strategies.cost.split_projections import split_projection_time  # noqa: E402
from strategies.cost.stage.inputs import stage_inputs  # noqa: E402
from strategies.cost.stage.layers import tp_collectives_per_layer  # noqa: E402
from strategies.estimate.analytic import estimate_arrays  # noqa: E402
from strategies.estimate.scalar import estimate, plan_arrays  # noqa: E402
from strategies.plan_arrays import rank_layers  # noqa: E402

DATA = os.path.join("strategies", "reference", "data")
FILES = ("published.json", "published_2026.json")


def _f(x) -> float:
    return float(np.ravel(x)[0])


def layer_parts(job) -> dict[str, float]:
    """Seconds of one mean layer and micro-batch by part (see the module docstring)."""
    m, cl, p, fw, dtype = job.model, job.cluster, job.plan, job.framework, job.dtype
    P = plan_arrays(p)
    si = stage_inputs(m, cl, dtype, P, fw, job.system)
    gpu, sy = si.gpu, si.sy
    b, tp, cp, ep, sp, tpo = P.mbs, P.tp, P.cp, P.ep, P.sp, P.tp_comm_overlap
    parts = gemm_shapes.layer_gemm_parts(m, b, tp, cp, ep, None, P.etp, si.load,
                                         whole_split(tp, sp, fw))
    units = gemm_units([g for _, g in parts], tp, gpu, dtype, tpo, fw, sy,
                       shares=fixed_shares(parts, m, ep, fw))
    counts = [g[0] for _, g in parts]
    g_f = si.slow * units_time_fwd(counts, units)
    g_b, g_w = units_time_bwd(counts, units)
    s_f, s_b, _ = split_projection_time(m, b, tp, cp, tpo, gpu, dtype, fw, sy, si.slow)
    a_f, a_b = attention_time_fwd(m, b, tp, cp, P.flash_attn, gpu, si.slow, fw, sy)
    c_f, c_b = cast_time(m, b, tp, cp, sp, gpu, dtype, sy, fw)
    e = elementwise_bytes.elementwise_bytes_fwd(m, b, tp, cp, sp, fw.elementwise_kernels) \
        / usable_hbm(gpu, sy)
    pairs = tp_collectives_per_layer(0.0, ep, m.num_shared_experts)
    y = tp_layout_copy_time(m, b, tp, cp, sp, tpo, pairs, gpu, dtype, fw, sy)
    z = async_tp.fused_pass_time(m, b, tp, cp, sp, tpo, pairs, dtype, fw, usable_hbm(gpu, sy))
    flops_f = sum(c * 2 * mm * n * k for c, (mm, n, k) in
                  ((g[0], g[1:4]) for _, g in parts))
    return {"gemm_f": _f(g_f), "gemm_b": _f(si.slow * g_b), "gemm_w": _f(si.slow * g_w),
            "split_f": _f(s_f), "split_b": _f(s_b), "attn_f": _f(a_f), "attn_b": _f(a_b),
            "elem_f": _f(e), "cast_f": _f(c_f),
            "cast_b": _f(c_b), "copy_f": _f(y[0] + z[0]), "copy_b": _f(y[1] + z[1]),
            "launch": _f(launch_time(fw, gpu=gpu)), "slow": _f(si.slow),
            "gemm_tflops_f": _f(flops_f) / 1e12, "gemm_rate_f": _f(flops_f) / _f(g_f) / 1e12}


def row(case) -> dict:
    """The decomposition of one row (seconds)."""
    job = case.job
    p = job.plan
    r = estimate_arrays(job.model, job.cluster, job.dtype, plan_arrays(p), job.framework,
                        job.system)
    sc = r["stage_costs"]
    est = estimate(job)
    bd = est.breakdown_s
    mb = float(np.ravel(r["num_microbatches"])[0])
    lay = layer_parts(job)
    n_first, n_mid, n_last, _, _ = rank_layers(job.model.num_layers, plan_arrays(p))
    n = float(max(np.ravel(n_first)[0], np.ravel(n_mid)[0], np.ravel(n_last)[0]))
    v = p.vpp
    slots = (mb + (p.pp - 1) / v) if p.pp > 1 else mb
    meas = case.measured_step_s
    return {"id": case.id, "stack": job.framework.name, "dtype": job.dtype,
            "plan": f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp} b{p.mbs} m{mb:g} v{v} "
                    f"{p.recompute} z{p.zero}{' async' if p.tp_comm_overlap else ''}",
            "layer_fwd": _f(sc.layer_fwd), "layer_bwd": _f(sc.layer_bwd),
            "layer_rc": _f(sc.layer_recompute), "layer_comm": _f(r["layer_comm_s"]),
            **lay, "layers": n, "slots": slots, "stage": _f(r["stage_time_s"]),
            "bubble": bd["bubble"], "pp": bd["pp_comm"], "dp": bd["dp_comm"],
            "opt": bd["optimizer"], "est": est.step_time_s, "meas": meas,
            "err": 100 * (est.step_time_s / meas - 1),
            "gap_slot_ms": 1e3 * (meas - est.step_time_s) / (slots * n)}


#: the printed columns: (key of ``row``'s dict, header, width, decimals, scale); the layer's
#: parts in ms, the step's in s
COLUMNS = (("layer_fwd", "fwd", 6, 1, 1e3), ("layer_bwd", "bwd", 6, 1, 1e3),
           ("layer_rc", "rc", 6, 1, 1e3), ("layer_comm", "comm", 5, 1, 1e3),
           ("gemm_f", "gemm f", 6, 1, 1e3), ("gemm_b", "b", 6, 1, 1e3),
           ("gemm_w", "w", 6, 1, 1e3), ("split_f", "split f", 7, 2, 1e3),
           ("split_b", "b", 5, 2, 1e3), ("attn_f", "attn f", 6, 1, 1e3),
           ("attn_b", "b", 6, 1, 1e3), ("elem_f", "elem", 5, 1, 1e3),
           ("cast_f", "cast f", 6, 2, 1e3), ("cast_b", "b", 5, 2, 1e3),
           ("copy_f", "copy f", 6, 2, 1e3), ("copy_b", "b", 5, 2, 1e3),
           ("gemm_rate_f", "TF/s", 5, 0, 1.0), ("stage", "| stage", 8, 3, 1.0),
           ("bubble", "bubble", 7, 3, 1.0), ("pp", "pp", 5, 3, 1.0), ("dp", "dp", 5, 3, 1.0),
           ("opt", "opt", 5, 3, 1.0), ("est", "est", 8, 3, 1.0), ("meas", "meas", 8, 3, 1.0),
           ("err", "err %", 6, 1, 1.0), ("gap_slot_ms", "gap/slot", 8, 2, 1.0))
LEGEND = ("ms per mean layer and micro-batch on the slowest stage: fwd/bwd/rc the layer's "
          "seconds as priced; gemm f/b/w (fused widths), split f/b (separate projections), "
          "attn f/b, elem (fwd; bwd is 2x), cast f/b, copy f/b their parts; comm the exposed "
          "TP/CP; TF/s the forward GEMMs' rate; then s per step; gap/slot in ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="", help="only rows whose id contains this")
    wanted = ap.parse_args(argv).rows
    print(LEGEND)
    print(f"{'row':42s} {'plan':44s} " + " ".join(f"{h:>{w}s}" for _, h, w, _, _ in COLUMNS))
    cases = [c for name in FILES for c in load_cases(os.path.join(DATA, name), tiers=None)
             if "torchtitan" in c.id and c.job is not None and wanted in c.id]
    for c in cases:
        t = row(c)
        print(f"{t['id']:42s} {t['plan']:44s} "
              + " ".join(f"{s * t[k]:{w}.{d}f}" for k, _, w, d, s in COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
