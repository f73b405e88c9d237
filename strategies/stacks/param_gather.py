"""Where an overlapped parameter all-gather (``overlap_param_gather``) waits in a pipelined
step: the one rule the estimate (``estimate.terms.tail.step_tail``) and the simulator
(``simulator.program.builder``: its ``FillGathers`` run the gathers before each stage's first
forward, or from the step's start where the interleaved schedule dispatches them) read
(docs/calibration.md §5.194).

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
(``schedules.py`` L872-875; ``gathers_at_schedule_start``): every rank's chunks 0 and 1 at
the schedule's start, chunk ``k >= 2`` before the rank's forward ``(k - 1)·pp - rank``
(the interleaved schedule's ``forward_step_helper``, ``forward_step_helper_preprocess`` in
later releases: ``param_sync_virtual_microbatch_id = virtual_microbatch_id +
pipeline_parallel_rank``, dispatched where that id is chunk ``k - 1``'s first micro-batch,
``chunk_dispatch_forward``); each module's pre-hook then only waits for its
bucket. A rank's gathers are exposed where they outlast its wait before each chunk's first
forward (``start_gather_exposed``): for chunk ``k >= 2`` the ``group + rank`` forwards from
its dispatch to its first use, in the warm-up's lock-step (``warmup_pace``), behind the
chunk before on the stream (``start_gathers_delay``, docs/calibration.md §5.197). DualPipe's
two copies are covered by neither.

Megatron-Core's ``overlap_param_gather_with_optimizer_step`` (``gather_with_optimizer``;
core_v0.13.0 and v0.15.0 ``optimizer/__init__.py`` L483-488: chunk 0 gets an optimizer of its
own, chained before the other chunks'; ``optimizer.py`` L1141-1149
``ChainedOptimizer.step_with_ready_grads`` dispatches chunk 0's gathers,
``start_param_sync(force_dispatch=True)``, once chunk 0's optimizer has stepped, and the
schedule's ``param_sync_func[0]`` then returns without dispatching,
``distributed_data_parallel.py`` L540-544): chunk 0's gathers start the optimizer work of
the other chunks before the step's end (``optimizer_head_start``), one bucket (``training.py``
L1139-1140 and NeMo's ``megatron_parallel.py`` disable chunk 0's bucketing with it), and the
next step's first forward of chunk 0 waits for them (docs/calibration.md §5.200).
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


def gathers_at_schedule_start(pp: Any, vpp: Any, zero: Any, overlap_param_gather: Any,
                              mirrored: Any = False, interleaved: Any = True) -> Any:
    """Whether an interleaved pipeline's overlapped parameter gathers (ZeRO-1/2 with
    ``overlap_param_gather``; Megatron-Core's ``align_param_gather``) are dispatched by the
    schedule (chunks 0 and 1 at its start, later chunks as it reaches them) rather than
    after the optimizer. ``interleaved``: the schedule is Megatron-Core's interleaved 1F1B,
    whose ``align_param_gather`` this is (other schedules with two chunks a rank, ZB-V and
    DualPipeV, keep the gathers after the optimizer). Scalars or arrays over plans.

    >>> bool(gathers_at_schedule_start(4, 2, 1, True)), bool(gathers_at_schedule_start(4, 1, 1, True))
    (True, False)
    >>> bool(gathers_at_schedule_start(4, 2, 0, True)), bool(gathers_at_schedule_start(4, 2, 2, False))
    (False, False)
    """
    zero = np.asarray(zero)
    return (np.asarray(pp) > 1) & (np.asarray(vpp) > 1) & ((zero == 1) | (zero == 2)) \
        & np.asarray(overlap_param_gather, dtype=bool) & ~np.asarray(mirrored, dtype=bool) \
        & np.asarray(interleaved, dtype=bool)


def gather_with_optimizer(at_start: Any, stack_sets: Any) -> Any:
    """Whether chunk 0's overlapped parameter gathers are dispatched inside the optimizer
    step (Megatron-Core's ``overlap_param_gather_with_optimizer_step``): where the schedule
    dispatches the gathers (``gathers_at_schedule_start``: interleaved, the distributed
    optimizer, ``overlap_param_gather``; Megatron-LM's ``arguments.py`` L622-630 asks no
    more) and the plan sets it (``stack_sets``: plan ``param_gather_with_optimizer``, which
    ``stacks.rules`` allows on those plans; NeMo 2's performance scripts set it where dp, pp
    and vp > 1). Scalars or arrays over plans.

    >>> bool(gather_with_optimizer(True, True)), bool(gather_with_optimizer(False, True))
    (True, False)
    """
    return np.asarray(at_start, dtype=bool) & np.asarray(stack_sets, dtype=bool)


def optimizer_head_start(optimizer: Any, params: Any, lead: Any, trail: Any, v: Any) -> Any:
    """Seconds before the step's end that chunk 0's gathers are dispatched under
    ``gather_with_optimizer``: the optimizer update of the rank's other chunks, which steps
    after chunk 0's (``optimizer`` the rank's update, seconds, proportional to the
    parameters it steps: ``params``, of which ``lead`` the embedding's in chunk 0 and
    ``trail`` the LM head's in chunk ``v - 1``; the layers split evenly over the ``v``
    chunks). Scalars or arrays over plans.

    >>> float(optimizer_head_start(1.0, 10.0, 2.0, 0.0, 4))
    0.6
    """
    params = np.asarray(params, dtype=float)
    chunk0 = (params - lead - trail) / v + lead
    return optimizer * np.where(params > 0, 1.0 - chunk0 / np.where(params > 0, params, 1.0),
                                0.0)


def chunk_dispatch_forward(chunk: int, group: int, rank: int) -> int:
    """The index (0-based, in the rank's order of forwards) of the forward before which
    pipeline rank ``rank`` dispatches model chunk ``chunk``'s gathers: -1 (the schedule's
    start) for chunks 0 and 1, ``(chunk - 1)·group - rank`` after (Megatron-Core's
    ``param_sync_virtual_microbatch_id``; ``group`` the micro-batch group a chunk runs in a
    row, ``microbatch_group_size_per_vp_stage``, pp by default).

    >>> chunk_dispatch_forward(1, 4, 3), chunk_dispatch_forward(2, 4, 0), chunk_dispatch_forward(3, 4, 3)
    (-1, 4, 5)
    """
    return -1 if chunk < 2 else (chunk - 1) * group - rank


def start_gather_exposed(gathers: Any, fill_wait: Any) -> Any:
    """Seconds a rank's gathers dispatched at the schedule's start delay its chunk's first
    forward: what the gathers it waits for (seconds, issued together on one stream) outlast
    its wait before that forward (``fill_wait``, seconds), ``max(0, gathers - fill_wait)``.

    >>> float(start_gather_exposed(0.5, 0.25)), float(start_gather_exposed(0.25, 0.5))
    (0.25, 0.0)
    """
    return np.maximum(np.asarray(gathers, dtype=float) - fill_wait, 0.0)


def warmup_pace(taus: list, pp: Any, group: Any) -> Any:
    """Seconds between a rank's forwards in the interleaved schedule's warm-up (arrays over
    plans or scalars), from each kind of rank's chunk forward and send ``taus`` (first,
    middle, last): ``max(max_r tau_r, sum_r tau_r / group)``. Every warm-up step ends in a
    blocking exchange with both neighbours (``send_forward_recv_forward``), with
    ``overlap_p2p_comm`` too (core_v0.13.0 ``schedules.py`` L1188-1236: waited at once unless
    ``overlap_p2p_comm_warmup_flush``, off by default; docs/calibration.md §5.205), so the
    ranks go at the slowest's pace; and rank 0's first micro-batch of chunk ``c + 1`` is the last
    rank's output of chunk ``c``, ``group`` forwards later on rank 0, one forward and send
    of every rank after it (the ring).

    >>> float(warmup_pace([1.0, 2.0, 1.0], 4, 4)), float(warmup_pace([1.0, 2.0, 1.0], 8, 4))
    (2.0, 3.5)
    """
    first, mid, last = (np.asarray(t, dtype=float) for t in taus)
    pp = np.asarray(pp)
    mid = np.where(pp > 2, mid, 0.0)
    ring = (first + np.maximum(pp - 2, 0) * mid + last) / group
    return np.maximum(np.maximum(np.maximum(first, mid), last), ring)


def start_gathers_delay(gathers: list, first_exposed: list, v: Any, group: Any,
                        ranks: list, waits: list, taus: list, heads: list | None = None) -> Any:
    """Seconds the overlapped parameter gathers delay a step under the interleaved
    schedule's dispatch (``gathers_at_schedule_start``; arrays over plans or scalars), over
    the pipeline's ranks in order (``ranks``: their pipeline ranks, e.g. rank 0, 1 and the
    last). For rank ``i``: ``gathers[i][c]`` chunk ``c``'s gather (seconds, one stream, in
    chunk order; chunks at ``c >= v`` ignored); ``first_exposed[i]`` at most what chunk 0's
    exposes where its forward waits layer by layer; its forward ``n`` starts ``waits[i] +
    n·taus[i]`` (its wait before its first forward, then a chunk forward and a send each)
    plus its delay (``taus``: ``warmup_pace`` on every rank). Chunk ``c`` is dispatched at
    its ``chunk_dispatch_forward`` and waited
    for at its first forward, ``c·group``, exposing ``start_gather_exposed`` of what it
    outlasts; a rank's chunk ``c`` is also held by the rank before's (rank 0's by the last
    rank's chunk ``c - 1``). The last rank's delay at its last chunk.

    >>> float(start_gathers_delay([[1.0, 1.0, 1.0]], [1.0], 3, 2, [0], [0.0], [0.25]))
    2.0
    >>> float(start_gathers_delay([[1.0, 1.0, 1.0]], [1.0], 3, 2, [0], [0.0], [0.25], [0.75]))
    1.25
    """
    n = len(ranks)
    delay = [[0.0] * len(gathers[0]) for _ in range(n)]
    done = [-np.inf] * n
    for c in range(len(gathers[0])):
        live = np.asarray(v) > c
        for i in range(n):
            prior = delay[i][c - 1] if c else 0.0
            held = delay[i - 1][c] if i else (delay[n - 1][c - 1] if c else 0.0)
            prior = np.maximum(prior, held)
            if c < 2:
                at = -heads[i] if c == 0 and heads is not None else 0.0
            else:
                idx = np.maximum((c - 1) * group - ranks[i], 0)
                d_at = np.where(idx >= (c - 1) * group, delay[i][c - 1], delay[i][c - 2])
                at = waits[i] + idx * taus[i] + d_at
            end = np.maximum(at, done[i]) + gathers[i][c]
            need = waits[i] + c * group * taus[i] + prior
            e = start_gather_exposed(end, need)
            if c == 0:
                e = np.minimum(e, first_exposed[i])
            delay[i][c] = np.where(live, prior + e, prior if c == 0 else delay[i][c - 1])
            done[i] = np.where(live, end, done[i])
    return delay[n - 1][-1]


def fill_path_stages(pp: Any) -> tuple[Any, Any, Any]:
    """How many stages of each kind (first, middle, last) lie on the fill path of a
    ``pp``-stage pipeline: ``(1, pp - 2, 1)`` (scalars or arrays).

    >>> fill_path_stages(2), fill_path_stages(5)
    ((1, 0, 1), (1, 3, 1))
    """
    return 1, np.maximum(np.asarray(pp) - 2, 0) if np.ndim(pp) else max(pp - 2, 0), 1
