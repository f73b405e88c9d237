#!/usr/bin/env python
"""Async TP's forward against its whole step: the PyTorch post's own benchmark read beside the
model (docs/calibration.md §5.94; a check, the model is not fitted to it).

    python experiments/async_tp_forward.py

The post that introduced async TP ("[Distributed w/ TorchTitan] Introducing Async Tensor
Parallelism in PyTorch", discuss.pytorch.org/t/209487, Aug 2024; its figures are stored in
pytorch-labs/applied-ai ``assets/images/dev-discuss-asynctp/``, Figure 9 "E2E benchmark data")
measured Llama 3 70B and 8B under torchtitan with TP 8 on H100 (96 GB: peak memory 75.66 GiB is
printed as 79.64 %), each with and without async TP: the forward's duration per step and the
end-to-end words per second. ``POST`` below transcribes that table. What it says: the forward
gains 19-30 %, the step 7-9 %, and the step's saving is about the forward's (and, with full
AC, its rerun's): the backward's own TP collectives gain little.

The model's side, per layer and micro-batch, read from the heldout_2026b rows of the same stack
and machine (torchtitan June 2025, Grand Teton H100 96 GB, TP 8, compiled): the forward's
compute (``layer_time.layer_time``, which under async TP holds the split GEMMs and
``async_tp.fused_pass_time``'s passes, without under plain TP the sequence-dim copies), plus
its TP collectives: all four whole without overlap, and with async TP each fused collective
beside its own matmuls (``experiments/async_tp_windows.py``'s per-op reading: a collective of
``C`` seconds beside matmuls of ``G`` exposes ``max(C - G·(tp-1)/tp, 0)``). Printed: the
forward speed-up that gives, and the share of the model's step saving (vanilla − async
estimate) its forward and its rerun account for, against the post's, where the post's step
saving is ``T·(1 − 1/(1 + e))`` for ``e`` its E2E gain and ``T`` the vanilla step, taken as the
model's vanilla estimate of the same plan (an approximation: the post does not print its step).
Last, the post's async forward less the model's, per layer (``short``), and as a share of the
forward's four collectives' seconds (``of C``, NCCL-priced, ``comm.collective_time``).
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from async_tp_windows import _f, exposed  # noqa: E402  (the per-op reading, one place)
from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost import comm_bytes, gemm_shapes, gemm_time, layer_time  # noqa: E402
from strategies.cost import overlap_clock  # noqa: E402
from strategies.cost import quantise  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.job import make_job  # noqa: E402

DATA = os.path.join("strategies", "reference", "data", "heldout_2026b.json")

#: Figure 9 of the post: (model row of heldout_2026b to read the stack and plan from,
#: local batch, forward ms vanilla, forward ms async, E2E gain)
POST = [("torchtitan_2506_70b_256gpu_bf16_tp", 12, 5629, 4724, 0.0839),
        ("torchtitan_2506_70b_256gpu_bf16_tp", 8, 3765, 3124, 0.0883),
        ("torchtitan_2506_70b_256gpu_bf16_tp", 4, 1937, 1610, 0.0829),
        ("torchtitan_2506_8b_64gpu_bf16_tp", 12, 880, 678, 0.0801),
        ("torchtitan_2506_8b_64gpu_bf16_tp", 8, 597, 464, 0.0736)]


def with_batch(job, b: int, tpo: bool):
    """``job`` at ``b`` sequences per GPU (one micro-batch, gbs = b·dp), async TP or not."""
    p = replace(job.plan, mbs=b, gbs=b * job.plan.dp, tp_comm_overlap=tpo)
    return make_job(job.model, job.cluster, p, framework=job.framework, dtype=job.dtype,
                    system=job.system)


def forward_ms(job) -> tuple[float, float, float]:
    """(forward, recomputed forward, the forward's four collectives whole) ms per step of the
    model's layers: compute plus the forward's TP collectives (whole, or per op beside their
    matmuls under async TP)."""
    m, cl, p, fw = job.model, job.cluster, job.plan, job.framework
    tp, b, tpo = p.tp, p.mbs, p.tp_comm_overlap
    rc = {"none": 0, "selective": 1, "full": 2, "op": 3}[p.recompute]
    slow = overlap_clock.overlap_slowdown(tp, tpo, p.cp, p.zero, False)
    lt = layer_time.layer_time(m, b=b, tp=tp, cp=p.cp, ep=1, sp=p.sp, flash=True, recompute=rc,
                               gpu=cl.gpu, dtype=job.dtype, tpo=tpo, fw=fw, slow=slow,
                               system=job.system, gathered=(p.zero == 3) & (p.dp > 1))
    x = _f(comm_bytes.tp_comm_bytes_fwd(m, b, p.cp))
    ag = _f(cm.collective_time("allgather", x * _f(quantise.tp_allgather_bytes_factor(
        job.dtype, True)), tp, 1, cl))
    rs = _f(cm.collective_time("reduce_scatter", x, tp, 1, cl))
    if tpo:
        parts = gemm_shapes.layer_gemm_parts(m, b, tp, p.cp, 1)
        g = [_f(gemm_time.gemms_time_fwd([y], tp, cl.gpu, job.dtype, True, job.system))
             for _, y in parts]
        comm = exposed(ag, g[0], tp) + exposed(rs, g[1], tp) + exposed(ag, g[2], tp) \
            + exposed(rs, g[3], tp)
    else:
        comm = 2 * ag + 2 * rs
    layers = m.num_layers
    fwd = layers * (_f(lt.fwd) + comm)
    rerun = layers * (_f(lt.recompute) + (comm if rc == 2 else 0.0))
    return 1e3 * fwd, 1e3 * rerun, 1e3 * layers * (2 * ag + 2 * rs)


def main() -> int:
    cases = {c.id: c for c in load_cases(DATA, tiers=None) if c.job is not None}
    print("the post's Figure 9 (fwd ms, E2E gain) beside the model's forward on the heldout "
          "rows' stack and machine; saving shares are of the vanilla − async step")
    print(f"{'model':6s} {'lbs':>3s} {'rc':>4s} | {'post fwd':>8s} {'async':>6s} {'x':>5s} "
          f"{'E2E':>5s} {'fwd/step':>8s} | {'model fwd':>9s} {'async':>7s} {'x':>5s} "
          f"{'E2E':>5s} {'fwd/step':>8s} {'rerun/step':>10s} | {'short ms/L':>10s} "
          f"{'of C':>5s}")
    for rid, b, f0, f1, e2e in POST:
        base = cases[rid].job
        v, a = with_batch(base, b, False), with_batch(base, b, True)
        fv, rv, coll = forward_ms(v)
        fa, ra, _ = forward_ms(a)
        layers = base.model.num_layers
        tv, ta = estimate(v).step_time_s, estimate(a).step_time_s
        post_saving = tv * (1 - 1 / (1 + e2e))            # seconds, the post's gain on T
        model_saving = tv - ta
        name = "70B" if "70b" in rid else "8B"
        print(f"{name:6s} {b:3d} {base.plan.recompute:>4s} | {f0:8d} {f1:6d} {f0 / f1:5.2f} "
              f"{1 + e2e:5.3f} {1e-3 * (f0 - f1) / post_saving:8.2f} | {fv:9.0f} {fa:7.0f} "
              f"{fv / fa:5.2f} {tv / ta:5.3f} {1e-3 * (fv - fa) / model_saving:8.2f} "
              f"{1e-3 * (rv - ra) / model_saving:10.2f} | {(f1 - fa) / layers:10.2f} "
              f"{(f1 - fa) / coll:5.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
