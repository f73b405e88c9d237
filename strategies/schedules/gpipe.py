"""GPipe: all forwards, then all backwards (stash of ``num_microbatches``)."""
from __future__ import annotations

from strategies.schedules.base import Step, check_common, check_no_vpp, register


def num_warmup_microbatches(stage: int, pp: int, num_microbatches: int) -> int:
    """Forwards before the first backward: all of them."""
    check_common(stage, pp, num_microbatches)
    return num_microbatches


@register("gpipe")
def gpipe(stage: int, pp: int, num_microbatches: int, vpp: int = 1,
          group_size: int | None = None) -> list[Step]:
    """GPipe order for pipeline rank ``stage``; ``group_size`` is ignored.

    >>> [str(s) for s in gpipe(0, 2, 2)]
    ['F0.c0', 'F1.c0', 'B0.c0', 'B1.c0']
    """
    check_common(stage, pp, num_microbatches)
    check_no_vpp("gpipe", vpp)
    return ([Step("F", i, 0) for i in range(num_microbatches)]
            + [Step("B", i, 0) for i in range(num_microbatches)])
