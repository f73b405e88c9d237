#!/usr/bin/env python
"""Megatron-Core's EP overlap (plan ``ep_overlap``: ``overlap_moe_expert_parallel_comm``,
the combined 1F1B) against twin runs (docs/calibration.md §5.212). Analytic only.

    python experiments/ep_overlap_twins.py        # Markdown tables on stdout (about 45 s)

Table 1, **the model's credit** per reference row that runs ``ep_overlap``: the row's
estimate as read, the same job with ``ep_overlap`` (and ``delay_wgrad``, which needs it) off,
their ratio ``on/off`` (the model's credit: 1 − ratio), the exposed expert all-to-all
(``breakdown_s["ep_comm"]``) on and off, and the step with ``SystemConfig.comm_sm_share`` 1
(the dispatcher's SMs charged to the compute beside it, ``strategies.cost.sm_share``).

Table 2, **the twins**: two rows of any reference file are twins when their jobs have the
same model, GPU type and count, parallel layout (tp, pp, vp, ep, etp, cp, mbs) and global
batch, one with ``ep_overlap`` and one without (``twin_key``). The measured step ratio
``with/without`` against the model's (each row's estimate as read), and the model's own
credit on the ``with`` row (Table 1's ratio). Rows differ in what else their containers
changed (dispatcher, precision, dropless routing, release): the columns say which; a twin is
*clean* when dispatcher, precision and routing agree (only the release and the overlap differ),
and the last line counts the clean twins whose model ratio is above the measured one (the
model credits the overlap with less than the pair measured).

Table 3, **Megatron-Core's sub-module order against the lumped pair**: per ``ep_overlap`` row,
one layer's all-to-all ``t`` (one direction, dispatch + combine: the ``t_comm`` the estimate
hands ``combined.pair_exposed``, recorded), the forward and backward layer compute ``F``, ``B``
it is hidden by, the estimate's exposure ``max(F, t) + max(B, t) − F − B``, and the exposure
of the order Megatron-Core issues, replayed on its compute and communication streams with its
events (``sub_module_layers``). Dispatch = combine = ``t/2``. The routed experts' share of
each pass's non-attention-core compute is their share of the layer's GEMM FLOPs
(``gemm_shapes.layer_gemm_parts``); the weight gradient is half of each backward's GEMM
seconds. Both are approximations: the stage record does not carry the split. The last
column: what the difference adds to the step over the stage's paired layers (negative: the
lumped rule hides less than the streams do).
"""
from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import strategies.estimate.terms.layer_comm as layer_comm  # noqa: E402
from strategies.cost import gemm_shapes  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.cost.system import get_system  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import reference_cases, run_file_names  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "strategies", "reference",
                    "data")


def cases() -> list[tuple[str, object]]:
    """``(file, case)`` of every reference row with an expert-parallel job and a measured
    step (``reference_cases`` per file; the schedule studies left out, as
    ``reference_mape``)."""
    names = run_file_names(DATA)
    return [(n, c) for n in names for c in reference_cases([os.path.join(DATA, n)])
            if c.job is not None and c.measured_step_s and c.job.plan.ep > 1]


def twin_key(job) -> tuple:
    """Model, GPU type and count, layout and global batch of ``job``: equal for twins."""
    p, cl = job.plan, job.cluster
    return (job.model.name, cl.gpu.name, cl.num_gpus, p.tp, p.pp, p.vpp, p.ep, p.etp or 1,
            p.cp, p.mbs, p.gbs)


def overlap_off(job):
    """``job`` with ``ep_overlap`` and ``delay_wgrad`` off."""
    return dataclasses.replace(job, plan=dataclasses.replace(job.plan, ep_overlap=False,
                                                             delay_wgrad=False))


def sm_charged(job):
    """``job`` with ``SystemConfig.comm_sm_share`` 1."""
    return dataclasses.replace(job, system=dataclasses.replace(get_system(job.system),
                                                               comm_sm_share=1.0))


def tag(c) -> str:
    """Dispatcher, precision and routing of a case, for the twin table."""
    p = c.job.plan
    cf = p.moe_capacity_factor
    route = "dropless" if cf is None or cf == float("inf") else f"cf{cf:g}"
    return f"{p.moe_dispatcher} {c.job.dtype} {route}"


def clean(a, b) -> bool:
    """Twins whose dispatcher, precision and routing agree."""
    return tag(a) == tag(b)


def pair_inputs(job) -> tuple[float, float, float]:
    """``(t, F, B)`` the estimate of ``job`` hands ``combined.pair_exposed`` (seconds)."""
    seen: list = []
    real = layer_comm.pair_exposed

    def rec(t, f, b):
        seen.append(tuple(float(np.asarray(x, dtype=float).ravel()[0]) for x in (t, f, b)))
        return real(t, f, b)
    layer_comm.pair_exposed = rec
    try:
        estimate(job)
    finally:
        layer_comm.pair_exposed = real
    return seen[0]


def expert_share(job) -> float:
    """Routed experts' share of a layer's GEMM FLOPs (``gemm_shapes.layer_gemm_parts``)."""
    p, m = job.plan, job.model
    flops: dict[str, float] = {}
    for part, (c, M, N, K, _) in gemm_shapes.layer_gemm_parts(m, p.mbs, p.tp, p.cp, p.ep,
                                                             "moe", p.etp):
        flops[part] = flops.get(part, 0.0) + float(np.mean(2.0 * c * np.asarray(M, float) * N * K))
    return flops.get("routed_mlp", 0.0) / sum(flops.values())


def sub_module_layers(a_f: float, m_f: float, m_b: float, a_b: float, a_bw: float,
                      disp: float, comb: float, delayed: bool, layers: int = 64) -> float:
    """Seconds per layer pair of Megatron-Core's combined order, replayed on its two streams
    for ``layers`` pairs (Megatron-LM d98e8a64 ``model_chunk_schedule_plan.py`` 231-274, the
    issue order; ``pipeline_parallel/utils.py`` 324-345: a node waits for its micro-batch's
    event and records it at its end; ``models/common/utils.py`` 323-334: the delayed weight
    gradients run on the stream and record nothing). Forward: pre-dispatch ``a_f``, expert
    MLP ``m_f``; backward: expert MLP ``m_b`` (half of it weight gradient), pre-dispatch
    ``a_b`` of which ``a_bw`` weight gradient; ``disp``/``comb`` one dispatch/combine;
    ``delayed``: ``delay_wgrad_compute`` (the weight gradients off the events)."""
    comp = comm = f_ev = b_ev = 0.0
    for _ in range(layers):
        comm = b_ev = max(comm, b_ev) + comb                # combine backward
        comp = f_ev = max(comp, f_ev) + a_f                 # pre-dispatch forward
        comp = b_ev = max(comp, b_ev) + (m_b / 2 if delayed else m_b)   # mlp backward
        comm = f_ev = max(comm, f_ev) + disp                # dispatch forward
        comp += m_b / 2 if delayed else 0.0                 # mlp backward_dw
        comm = b_ev = max(comm, b_ev) + disp                # dispatch backward
        comp = f_ev = max(comp, f_ev) + m_f                 # mlp forward
        comm = f_ev = max(comm, f_ev) + comb                # combine forward
        comp = b_ev = max(comp, b_ev) + (a_b - a_bw if delayed else a_b)  # pre-dispatch bwd
        comp += a_bw if delayed else 0.0                    # its delayed weight gradient
    return max(comp, comm) / layers


def slot_table(on: list) -> None:
    """Table 3 (see the module docstring)."""
    print("\nTable 3. One layer pair: the lumped exposure against the sub-module order's\n")
    print("| row | delay_wgrad | t ms | F ms | B ms | expert share | lumped ms "
          "| sub-module ms | step + s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for _, c in on:
        t, f, b = pair_inputs(c.job)
        sc = stage_costs(c.job)
        a_f, a_b = (float(np.asarray(x, dtype=float).ravel()[0]) for x in (sc.attn_fwd,
                                                                            sc.attn_bwd))
        x = expert_share(c.job)
        m_f = (f - a_f) * x
        m_b = (b - a_b) * x
        a_bw = (b - a_b) * (1 - x) / 2
        p = c.job.plan
        lump = max(f, t) + max(b, t) - f - b
        slot = sub_module_layers(f - m_f, m_f, m_b, b - m_b, a_bw, t / 2, t / 2,
                                 bool(p.delay_wgrad)) - f - b
        pairs = c.job.model.num_layers / p.pp * (p.gbs // (p.mbs * p.dp))
        d = (max(slot, 0) - max(lump, 0)) * pairs
        print(f"| {c.id} | {p.delay_wgrad} | {t * 1e3:.2f} | {f * 1e3:.2f} | {b * 1e3:.2f} "
              f"| {x:.2f} | {max(lump, 0) * 1e3:.2f} | {max(slot, 0) * 1e3:.2f} "
              f"| {d if abs(d) >= 0.005 else 0.0:+.2f} |")


def main() -> None:
    rows = cases()
    on = [(n, c) for n, c in rows if c.job.plan.ep_overlap]
    est = {c.id: estimate(c.job) for _, c in rows}
    credit = {}
    print("Table 1. The model's EP-overlap credit per row that runs it\n")
    print("| file | row | measured s | model s (err) | overlap off s | on/off | ep_comm on, off s "
          "| comm_sm_share 1 s (err) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for n, c in on:
        e, off = est[c.id], estimate(overlap_off(c.job))
        sm = estimate(sm_charged(c.job)).step_time_s
        credit[c.id] = e.step_time_s / off.step_time_s
        m = c.measured_step_s
        print(f"| {n[:-5]} | {c.id} | {m:.2f} | {e.step_time_s:.2f} ({e.step_time_s / m - 1:+.1%}) "
              f"| {off.step_time_s:.2f} | {credit[c.id]:.3f} | {e.breakdown_s.get('ep_comm', 0):.2f}, "
              f"{off.breakdown_s.get('ep_comm', 0):.2f} | {sm:.2f} ({sm / m - 1:+.1%}) |")
    groups: dict[tuple, list] = {}
    for n, c in rows:
        groups.setdefault(twin_key(c.job), []).append((n, c))
    print("\nTable 2. Twins: same model, GPU, layout and batch, with and without ep_overlap\n")
    print("| with (file: row, tags) | without (file: row, tags) | measured with/without "
          "| model with/without | model credit on/off |")
    print("|---|---|---:|---:|---:|")
    tally: list[bool] = []
    for g in groups.values():
        for nw, w in g:
            for no, o in g:
                if w.job.plan.ep_overlap and not o.job.plan.ep_overlap:
                    mr = w.measured_step_s / o.measured_step_s
                    er = est[w.id].step_time_s / est[o.id].step_time_s
                    print(f"| {nw[:-5]}: {w.id} ({tag(w)}) | {no[:-5]}: {o.id} ({tag(o)}) "
                          f"| {mr:.3f} | {er:.3f} | {credit[w.id]:.3f} |")
                    if clean(w, o):
                        tally.append(er > mr)
    print(f"\nClean twins (dispatcher, precision, routing agree): {len(tally)}; the model's "
          f"ratio above the measured (less credit than measured): {sum(tally)}")
    slot_table(on)


if __name__ == "__main__":
    main()
