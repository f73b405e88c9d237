"""GPipe: all forwards, then all backwards (stash of ``num_microbatches``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.base import Schedule
from strategies.schedules.registry import get_schedule, register
from strategies.schedules.step import Step, check_common


@register("gpipe")
class GPipe(Schedule):
    """GPipe (Huang et al., 2019): every forward, then every backward. The last stage keeps
    every micro-batch's logits until the backwards; no steady state (the stash grows with
    ``m``); Megatron-LM and DeepSpeed have no such schedule."""

    reduces_under_forwards = False

    logits_stashed = True
    text_patterns = ("gpipe", "fill-drain", "fill drain")
    steady_state = False

    def steps(self, stage: int, pp: int, m: int, vpp: int = 1,
              group_size: int | None = None) -> list[Step]:
        """GPipe order for pipeline rank ``stage``; ``group_size`` is ignored.

        >>> [str(s) for s in get_schedule("gpipe").steps(0, 2, 2)]
        ['F0.c0', 'F1.c0', 'B0.c0', 'B1.c0']
        """
        check_common(stage, pp, m)
        self.check_plan(pp, vpp)
        return [Step("F", i, 0) for i in range(m)] + [Step("B", i, 0) for i in range(m)]

    def num_warmup(self, stage: int, pp: int, m: int, vpp: int = 1,
                   group_size: int | None = None) -> int:
        """Forwards before the first backward: all of them."""
        check_common(stage, pp, m)
        return m

    def in_flight(self, stage: int, pp: int, m: int, vpp: int = 1,
                  group_size: int | None = None) -> int:
        return m

    def in_flight_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> Any:
        return m * np.ones_like(np.asarray(stage, dtype=float))

    def megatron_args(self, job: Any) -> tuple[list[str], list[str]]:
        if job.plan.pp > 1:
            return [], ["Megatron-LM has no GPipe schedule: it will run 1F1B (same compute, "
                        "fewer micro-batches in flight)"]
        return [], []

    def deepspeed_refusal(self, job: Any) -> str | None:
        return "DeepSpeed's pipeline engine runs 1F1B, not GPipe" if job.plan.pp > 1 else None


def num_warmup_microbatches(stage: int, pp: int, num_microbatches: int) -> int:
    """Forwards before the first backward: all of them."""
    return get_schedule("gpipe").num_warmup(stage, pp, num_microbatches)
