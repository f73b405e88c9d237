"""MLA's tensor-parallel collectives per layer and micro-batch on the reference rows with tp > 1
(docs/calibration.md §5.81): the forward's column-side all-gather (SP) at the hidden width
the layer's TP term counts and at the latents' widths the code moves
(``cost.stage.attn_tp_swap``), and the seconds the rule takes off (``attn_tp_saved``) in the
forward and in a blocking backward, the rope key's own all-gather and reduce-scatter under SP
(``attn_rope_time``) and the recomputed up projections' gathers (``attn_rc_gathers``).
Contention-free collective times, microseconds.

    python experiments/mla_tp_widths.py
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.stage import (attn_rc_gathers, attn_rope_time,  # noqa: E402
                                   attn_tp_saved, attn_tp_swap, stage_costs, tp_kind_bytes)
from strategies.reference.cases import reference_cases  # noqa: E402


def main() -> None:
    for case in reference_cases():
        job = getattr(case, "job", None)
        if job is None or job.plan.tp < 2 or not job.model.kv_lora_rank:
            continue
        c, tp, sp = stage_costs(job), job.plan.tp, bool(job.plan.sp)

        def t(kind: str, nbytes: float) -> float:
            return float(cm.collective_time(kind, nbytes, tp, 1, job.cluster))
        swap = attn_tp_swap(c, True, True)
        hid = t("allgather", tp_kind_bytes(c, "allgather"))
        pieces = " + ".join(f"{t('allgather', w * tp_kind_bytes(c, 'allgather')) * 1e6:.1f}"
                            for w in swap[1])
        print(f"{case.id:48s} tp {tp} sp {sp!s:5s} "
              f"AG hidden {hid * 1e6:7.1f} latents {pieces}"
              f"  saved fwd {float(attn_tp_saved(t, c, sp, True)) * 1e6:6.1f}"
              f" bwd-blocking {float(attn_tp_saved(t, c, sp, False)) * 1e6:6.1f}"
              f" (async: {c.rd_bytes > 0})"
              f"  rope AG + RS {float(attn_rope_time(t, c, True)) * 1e6:.1f}"
              f" + {float(attn_rope_time(t, c, False)) * 1e6:.1f}"
              f"  recomputed up-proj AGs {float(attn_rc_gathers(t, c)) * 1e6:.1f}")


if __name__ == "__main__":
    main()
