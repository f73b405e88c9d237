#!/usr/bin/env python
"""The pipeline exchanges of every pipelined reference row under the stream rule of
``strategies.schedules.p2p_streams`` (docs/calibration.md §5.63).

Run (about a minute, analytic only):

    python experiments/pp_streams.py            # Markdown table on stdout
    python experiments/pp_streams.py --pp 2     # only the pp = 2 rows

Per row: the estimate's error, one message's time ``t`` (``comm.p2p_time``, the estimate's
``p2p_time_s``), the exposed exchanges the estimate charges (``pp_comm / t``), the serial
transfers per stream of one call as the code runs it (interleaved: Megatron-Core's
overlapped ``send_forward_recv_forward``, unbatched; otherwise the batched steady call: 1)
against the §5.57 lead (four for pp = 2), the forward and backward of one model chunk on
the busiest rank (``layers / (pp·v)`` times the stage-cost record's per-layer forward and
backward, recompute included), and, for the interleaved rows, what ``overlap_p2p_comm``
leaves of one steady call (``p2p_streams.overlapped_exposed`` against the other pass).
A what-if, not the model: the step if only the fill's chain of messages stayed exposed
(rank 0's warm-up chain, ``2(pp−1) + (v−1)·pp`` messages, where every steady call hides).
"""
from __future__ import annotations

import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate import estimate  # noqa: E402
from strategies.estimate.scalar import step_arrays  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402
from strategies.schedules import p2p_streams as ps  # noqa: E402

FILES = sorted(f for f in glob.glob("strategies/reference/data/*.json")
               if "schedule_studies" not in f)


def pipelined_cases():
    """``(path, entry, case, job)`` of every reference row that the reader runs, has a
    measured step and a pipeline (pp >= 2)."""
    for path in FILES:
        for entry in load_reference(path):
            try:
                case = case_from_entry(entry)
            except Exception:       # a row the reader skips (reported by validate)
                continue
            job = case.job
            if job is None or case.measured_step_s is None or job.plan.pp < 2:
                continue
            yield path, entry, case, job


def rows(only_pp: int | None = None) -> list[tuple]:
    """``(file, id, framework, schedule, pp, v, error %, t ms, exposed exchanges, serial
    per stream (code), serial (lead), F ms, B ms, exposed per steady call ms or None,
    what-if error % or None)`` of every pipelined row that runs."""
    out = []
    for path, entry, case, job in pipelined_cases():
        p = job.plan
        if only_pp is not None and p.pp != only_pp:
            continue
        est = estimate(job)
        r = step_arrays(job)
        t = float(r["p2p_time_s"])
        sc = r["stage_costs"]
        per_chunk = job.model.num_layers / (p.pp * p.vpp)
        f = per_chunk * float(sc.layer_fwd)
        b = per_chunk * float(sc.layer_bwd + sc.layer_recompute)
        pp_comm = est.breakdown_s["pp_comm"]
        inter = p.schedule == "interleaved"
        call = ps.SEND_FORWARD_RECV_FORWARD if inter else \
            ps.SEND_FORWARD_BACKWARD_RECV_FORWARD_BACKWARD
        code = ps.serial_transfers(call, p.pp, batched=not inter)
        lead = 4 if p.pp == 2 else code
        err = 100 * (est.step_time_s / case.measured_step_s - 1)
        exp_call = whatif = None
        if inter:
            t_call = float(ps.call_time(t, call, p.pp))
            exp_call = 1e3 * max(float(ps.overlapped_exposed(t_call, b)),
                                 float(ps.overlapped_exposed(t_call, f)))
            fill = 2 * (p.pp - 1) + (p.vpp - 1) * p.pp
            step = est.step_time_s - pp_comm + min(pp_comm, fill * t)
            whatif = 100 * (step / case.measured_step_s - 1)
        out.append((os.path.basename(path), entry["id"], job.framework.name, p.schedule,
                    p.pp, p.vpp, err, 1e3 * t, pp_comm / t if t > 0 else 0.0, code, lead,
                    1e3 * f, 1e3 * b, exp_call, whatif))
    return out


def main() -> None:
    only = int(sys.argv[sys.argv.index("--pp") + 1]) if "--pp" in sys.argv else None
    print("| file | run | framework | schedule | pp | v | error | t ms | exposed exchanges | "
          "serial per stream (code / lead) | F ms | B ms | overlapped call exposed ms | "
          "what-if error |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for r in rows(only):
        e = "-" if r[13] is None else f"{r[13]:.2f}"
        w = "-" if r[14] is None else f"{r[14]:+.1f} %"
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]:+.1f} % | "
              f"{r[7]:.2f} | {r[8]:.0f} | {r[9]} / {r[10]} | {r[11]:.1f} | {r[12]:.1f} | {e} | "
              f"{w} |")


if __name__ == "__main__":
    main()
