#!/usr/bin/env python
"""Where the analytic estimate misses NVIDIA's Llama 4 Maverick runs (DGX Cloud 25.05, NeMo
25.04.01), beside the other NeMo 25.04/25.07 runs of the same GPUs (docs/calibration.md §5.57).

Run (a few seconds, analytic only):

    python experiments/llama4_residuals.py          # Markdown tables on stdout

Table 1, per row: measured and estimated step, error, the time the estimate misses per MoE
layer and micro-batch on the busiest pipeline rank (``experiments/moe_residuals.py``'s
measure), the estimate's exposed pipeline messages (``pp_comm``) and its exposed
expert-parallel all-to-all (``ep_comm``), and, for pipelined rows, the miss per exposed
pipeline exchange (``Schedule.exposed_messages``).

Table 2, a lead only (not in the model): Megatron-Core's interleaved schedule under NeMo's
``MegatronCommOverlapCallback`` runs with ``overlap_p2p_comm`` and without
``batch_p2p_comm`` when vpp > 1 (NeMo commit 7a8f1cc7bc40,
``nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py``), so each exchange's four
transfers are separate ``isend``/``irecv`` calls (``_p2p_ops`` in
``megatron/core/pipeline_parallel/p2p_communication.py``, Megatron commit 7094270c6fa1);
with pp = 2 all four go to or come from the one peer. The column shows the step if the four
ran one after another on the critical path (the exposed messages times 4) instead of
together (times 1): an upper bound, since ``overlap_p2p_comm`` hides part of them.
The code rules the lead out (docs/calibration.md §5.63, ``strategies/schedules/p2p_streams.py``):
with pp = 2 Megatron-Core sends each direction over its own process group, so the four never
share one stream; the column is kept as the what-if it was.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402
from strategies.schedules import get_schedule  # noqa: E402

#: (file, id prefixes): the Maverick rows, the NeMo MoE rows of the same release (Grok-1),
#: the Scout row of NeMo 25.07 and the dense GB200/H100 rows of the same release
ROWS = (("strategies/reference/data/dgxc_2505.json",
         ("dgxc2505_llama4_", "dgxc2505_grok1_", "dgxc2505_llama31_")),
        ("strategies/reference/data/nemo_performance_25.json", ("nemo2507_llama4scout",)))


def residual_rows() -> list[tuple]:
    """``(id, GPU, precision, layout, measured s, estimated s, error %, missed ms per MoE
    layer and micro-batch or None, pp_comm s, ep_comm s, exposed exchanges, missed ms per
    exchange or None, step s with four serial transfers per exchange)`` of ``ROWS``."""
    out = []
    for path, prefixes in ROWS:
        for entry in load_reference(path):
            if not entry["id"].startswith(prefixes):
                continue
            case = case_from_entry(entry)
            job = case.job
            if job is None or case.measured_step_s is None:
                continue
            p = job.plan
            est = estimate(job)
            gap = case.measured_step_s - est.step_time_s
            mb = est.num_microbatches
            per_layer = (1e3 * gap / (mb * job.model.num_moe_layers / p.pp)
                         if job.model.is_moe else None)
            br = est.breakdown_s
            n_ex = float(get_schedule(p.schedule).exposed_messages(mb, p.pp, p.vpp)) \
                if p.pp > 1 else 0.0
            per_ex = 1e3 * gap / n_ex if n_ex else None
            serial = est.step_time_s + 3.0 * br["pp_comm"]
            layout = f"tp{p.tp} pp{p.pp}" + (f" v{p.vpp}" if p.vpp > 1 else "") + \
                f" ep{p.ep} etp{p.etp} mb{mb}"
            out.append((entry["id"], job.cluster.gpu.name, job.dtype, layout,
                        case.measured_step_s, est.step_time_s,
                        100 * (est.step_time_s / case.measured_step_s - 1), per_layer,
                        br["pp_comm"], br["ep_comm"], n_ex, per_ex, serial))
    return out


def _f(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def main() -> None:
    rows = residual_rows()
    print("| run | GPU | precision | layout | measured s | estimated s | error | missed ms per "
          "MoE layer and micro-batch | pp_comm s | ep_comm s | exposed exchanges | missed ms "
          "per exchange |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.3f} | {r[5]:.3f} | {r[6]:+.1f} % "
              f"| {_f(r[7], '.2f')} | {r[8]:.3f} | {r[9]:.3f} | {r[10]:.0f} | "
              f"{_f(r[11], '.2f')} |")
    print()
    print("| pipelined run | measured s | estimated s | error | step with the exchange's four "
          "transfers serial s | error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if r[10]:
            print(f"| {r[0]} | {r[4]:.3f} | {r[5]:.3f} | {r[6]:+.1f} % | {r[12]:.3f} | "
                  f"{100 * (r[12] / r[4] - 1):+.1f} % |")


if __name__ == "__main__":
    main()
