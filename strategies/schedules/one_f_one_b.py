"""1F1B without interleaving (Megatron ``forward_backward_pipelining_without_interleaving``)."""
from __future__ import annotations

from strategies.schedules.base import (Step, check_common, check_no_vpp, register,
                                       warmup_steady_cooldown)


def num_warmup_microbatches(stage: int, pp: int, num_microbatches: int) -> int:
    """Warm-up forwards on rank ``stage``: ``min(pp - stage - 1, num_microbatches)``."""
    check_common(stage, pp, num_microbatches)
    return min(pp - stage - 1, num_microbatches)


@register("1f1b")
def one_f_one_b(stage: int, pp: int, num_microbatches: int, vpp: int = 1,
                group_size: int | None = None) -> list[Step]:
    """1F1B order for pipeline rank ``stage``; ``group_size`` is ignored.

    >>> " ".join(s.label[:2] for s in one_f_one_b(0, 2, 3))
    'F0 F1 B0 F2 B1 B2'
    """
    check_no_vpp("1f1b", vpp)
    w = num_warmup_microbatches(stage, pp, num_microbatches)
    forwards = [Step("F", i, 0) for i in range(num_microbatches)]
    backwards = [Step("B", i, 0) for i in range(num_microbatches)]
    return warmup_steady_cooldown(forwards, backwards, w)
