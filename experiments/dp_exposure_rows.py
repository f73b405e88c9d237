#!/usr/bin/env python
"""The one-micro-batch rows whose data-parallel group crosses nodes (docs/calibration.md
§5.227): pp 1, one micro-batch a step per replica, dp·cp > 1, ZeRO 0/1, tp·cp·dp GPUs over
more than one node. Per row: measured and estimated step, the collectives' whole time
``C`` (rank 0's reduce-scatter, or all-reduce with ZeRO-0, and, with the distributed
optimizer, its parameter gather, each as its buckets' calls: ``DpCalls.bucket_calls``), the
buckets, what the estimate exposes (``dp_comm``), rank 0's last backward and forward, and a
what-if that is *not* the model: the step with all of ``C`` exposed (``step − dp_comm +
C``). Then each file's MAPE as priced and under the what-if.

    python experiments/dp_exposure_rows.py                       (~1 min)
    python experiments/clock_duty.py --on experiments/dp_exposure_rows.py   (duty cycle on)
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import strategies.estimate.analytic as analytic  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import reference_cases, run_file_names  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data")


def _first(x) -> float:
    return float(np.atleast_1d(x)[0])


def main() -> None:
    seen: dict = {}
    orig = analytic.grad_reduce

    def spy(sc, P, profile, dtype, calls, st, win, ogr_g, t_p2p, f_layer):
        gr = orig(sc, P, profile, dtype, calls, st, win, ogr_g, t_p2p, f_layer)
        n_b = win.calls_k[0]
        last = np.minimum(1.0, win.last_k[0] / calls.pr_k[0])
        full = _first(P.zero) == 0
        grad = calls.bucket_calls("allreduce" if full else "reduce_scatter", calls.gb, 0,
                                  last, n_b)
        ag = 0.0 if full else calls.bucket_calls("allgather", sc.gather_first, 0, last, n_b)
        seen.update(C=_first(grad) + _first(ag), calls=_first(n_b),
                    bwd=_first(win.window_k[0]), fwd=_first(st.n_k[0] * sc.layer_fwd))
        return gr

    analytic.grad_reduce = spy
    print("| file | row | measured s | estimate s | err | C s | buckets | dp_comm s | "
          "last bwd s | fwd s | C exposed (what-if) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    tot: dict[str, list] = {}
    try:
        for f in run_file_names(DATA):
            for c in reference_cases([os.path.join(DATA, f)]):
                if c.skipped:
                    continue
                p, cl = c.job.plan, c.job.cluster
                seen.clear()
                e = estimate(c.job)
                m = c.measured_step_s
                err = e.step_time_s / m - 1
                one = p.pp == 1 and p.gbs == p.mbs * p.dp and p.dp * p.cp > 1 and p.zero < 2
                sel = one and p.tp * p.cp * p.dp > cl.gpus_per_node and "C" in seen
                new = err
                if sel:
                    dpc = e.breakdown_s.get("dp_comm", 0.0)
                    new = (e.step_time_s - dpc + seen["C"]) / m - 1
                    print(f"| {f} | {c.id} | {m:.4f} | {e.step_time_s:.4f} | {100 * err:+.1f} % "
                          f"| {seen['C']:.4f} | {seen['calls']:.0f} | {dpc:.4f} | "
                          f"{seen['bwd']:.4f} | {seen['fwd']:.4f} | {100 * new:+.1f} % |")
                tot.setdefault(f, []).append((abs(err), abs(new), sel))
    finally:
        analytic.grad_reduce = orig
    print()
    held = []
    for f, v in tot.items():
        a = np.array(v, dtype=float)
        if f != "published.json":
            held += v
        if a[:, 2].sum():
            print(f"{f}: {len(v)} runs, {int(a[:, 2].sum())} such rows; MAPE as priced "
                  f"{100 * a[:, 0].mean():.2f} %, what-if {100 * a[:, 1].mean():.2f} %")
    a = np.array(held, dtype=float)
    print(f"held-out pooled ({len(a)} runs): as priced {100 * a[:, 0].mean():.2f} %, "
          f"what-if {100 * a[:, 1].mean():.2f} %")


if __name__ == "__main__":
    main()
