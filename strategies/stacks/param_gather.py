"""Where an overlapped parameter all-gather (``overlap_param_gather``) waits in a pipelined
step: the one rule the estimate (``estimate.terms.tail.step_tail``) and the simulator
(``simulator.program.builder``: its ``FillGathers`` run the gathers before each stage's first
forward) read (docs/calibration.md §5.194).

Megatron-Core (NVIDIA/Megatron-LM core_v0.13.0, c550cf6): after the optimizer no gather is
issued while ``overlap_param_gather`` is on (``DistributedOptimizer.step_with_ready_grads``
gathers only without it); the next step's forward pre-hook of the first module using a
bucket's parameters calls ``finish_param_sync``, which dispatches that bucket's gather when
none is in flight, waits for it, then dispatches the next bucket's
(``param_and_grad_buffer.py`` L253-289, ``distributed_data_parallel.py`` pre-hook L456-484).
With one model chunk a rank (``forward_backward_pipelining_without_interleaving``) the
training arguments force ``align_param_gather = False`` (``arguments.py`` L575-582), so no
schedule dispatches the gathers early: stage ``s`` issues its first bucket's gather when its
first forward starts, after it has received micro-batch 0 from stage ``s - 1``. Each stage's
exposed gather therefore lies on micro-batch 0's fill path, one after another, and the step
grows by their sum over the stages, not by the latest rank's tail. The interleaved schedule
(``align_param_gather`` on) dispatches chunks 0 and 1 on every rank before the first forward
(``schedules.py`` L872-875) and is not covered here (the rank's tail after the optimizer,
as before); DualPipe's two copies neither.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def gathers_on_fill_path(pp: Any, vpp: Any, zero: Any, overlap_param_gather: Any,
                         mirrored: Any = False) -> Any:
    """Whether each stage's exposed parameter all-gather (ZeRO-1/2 with
    ``overlap_param_gather``) waits at the stage's first forward on micro-batch 0's fill path
    (the step adds their sum over the stages) rather than after the rank's optimizer (the
    latest rank's tail). Scalars or arrays over plans.

    >>> bool(gathers_on_fill_path(2, 1, 1, True)), bool(gathers_on_fill_path(1, 1, 1, True))
    (True, False)
    >>> bool(gathers_on_fill_path(4, 2, 1, True)), bool(gathers_on_fill_path(4, 1, 3, True))
    (False, False)
    """
    zero = np.asarray(zero)
    return (np.asarray(pp) > 1) & (np.asarray(vpp) == 1) & ((zero == 1) | (zero == 2)) \
        & np.asarray(overlap_param_gather, dtype=bool) & ~np.asarray(mirrored, dtype=bool)


def fill_path_stages(pp: Any) -> tuple[Any, Any, Any]:
    """How many stages of each kind (first, middle, last) lie on the fill path of a
    ``pp``-stage pipeline: ``(1, pp - 2, 1)`` (scalars or arrays).

    >>> fill_path_stages(2), fill_path_stages(5)
    ((1, 0, 1), (1, 3, 1))
    """
    return 1, np.maximum(np.asarray(pp) - 2, 0) if np.ndim(pp) else max(pp - 2, 0), 1
