"""DeepSpeed's pipeline engine: ``TrainSchedule`` (``deepspeed/runtime/pipe/schedule.py``).

The order of forwards and backwards on a rank is 1F1B's, but the engine runs it in lock step:
``2(m + pp - 1)`` steps, and on step ``k`` a rank computes a forward when ``k`` and its stage
have the same parity, a backward otherwise (a slot whose micro-batch does not exist yet or
any more is idle). Neighbouring stages therefore always run opposite passes. The
point-to-point messages are blocking calls issued at the start of a step, before its
compute: a forward step first sends the gradient of the previous step's backward
(``SendGrad``) and then receives its input (``RecvActivation``); a backward step first
receives its output gradient (``RecvGrad``) and then sends the previous step's forward
output (``SendActivation``). So a forward's output leaves only when the stage starts its next
(backward) step, and each send waits for the receiver to post the matching receive
(``p2p.send`` is ``torch.distributed.send``, synchronous). Megatron's 1F1B, in contrast,
sends a forward's output as soon as it is computed, batched with the next receive.

The engine of MT-NLG (DeepSpeed 2021) and BLOOM (a 0.6-era fork) ran each step's two calls
the other way round (``RecvActivation`` before ``SendGrad``, ``SendActivation`` before
``RecvGrad``) until deepspeedai/DeepSpeed#2862 (March 2023) swapped them to stop a receive
overwriting a buffer still in use; an exchange's two blocking transfers run back to back in
either order, and the simulated message counts are identical (docs/calibration.md §5.28).

What follows from it (played out by the simulator, not assumed): a rank exchanges with one
neighbour at the start of every step; the pair meets once every two steps, each having run one
forward and one backward in between, so with instant messages the lock step costs nothing:
the step is 1F1B's ``(m + pp - 1)(t_F + t_B)`` (``tests/test_deepspeed_schedule.py``). With
messages, each exchange is two sequential blocking transfers issued after the rank's previous
pass, so a middle rank waits four message times per micro-batch and an end rank two
(``DeepSpeed1F1B.bottleneck_messages``; balanced stages: ``(m + pp - 1)(t_F + t_B) +
(4m + 2pp - 8)·t_p2p``, ``tests/test_deepspeed_messages.py``; docs/schedules.md says what a
message carries).

Memory: ``num_pipe_buffers`` is ``max(2, min(pp - stage, m))`` activation buffers, 1F1B's
count (two at least, for the send double buffer).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.registry import register
from strategies.schedules.step import Step
from strategies.schedules.exchanges import Boundary, add_exchange
from strategies.schedules.one_f_one_b import OneFOneB


def train_schedule(stage: int, pp: int, m: int) -> list[tuple[str, int] | None]:
    """The lock-step slots of rank ``stage``: per step ``("F", i)``, ``("B", i)`` or ``None``
    (an idle slot), ``2(m + pp - 1)`` of them, DeepSpeed's ``_step_to_micro_batch``.

    >>> train_schedule(0, 2, 2)
    [('F', 0), None, ('F', 1), ('B', 0), None, ('B', 1)]
    >>> train_schedule(1, 2, 2)
    [None, ('F', 0), ('B', 0), ('F', 1), ('B', 1), None]
    """
    out: list[tuple[str, int] | None] = []
    for k in range(2 * (m + pp - 1)):
        forward = (k % 2) == (stage % 2)
        if forward:
            i = (k - (k % 2)) // 2 - stage // 2
        elif k % 2 == 0:
            i = k // 2 - pp + (stage + 1) // 2
        else:
            i = (k - 1) // 2 - pp + 1 + stage // 2
        out.append((("F" if forward else "B"), i) if 0 <= i < m else None)
    return out


@register("deepspeed-1f1b")
class DeepSpeed1F1B(OneFOneB):
    """DeepSpeed pipeline engine's ``TrainSchedule``: 1F1B's order, run in lock step with
    blocking sends at the start of each step (module docstring)."""

    aliases = ("ds-1f1b",)
    blocking_sends = True
    # the engine keeps each micro-batch's output in ``pipe_buffers['outputs']`` until its
    # backward (v0.5.10 ``runtime/pipe/engine.py`` ``_exec_forward_pass``), a 1/t
    # ``PartitionedTensor`` copy where tp > 1 (``first_output.data = torch.zeros(1)``)
    keeps_stage_output = True
    # a middle rank blocks on two two-message exchanges per micro-batch, an end rank on one
    # (``bottleneck_messages``)
    messages_by_rank = True

    def bottleneck_messages(self, m: Any, pp: Any, vpp: Any, rank: Any) -> Any:
        """Messages on the critical path (each one message's time) when rank kind ``rank``
        (0 the first, 1 a middle, 2 the last rank) bounds the steady state, from ``actions``
        as the engine issues them: every exchange waits for the rank's previous pass (NCCL
        enqueues a point-to-point call behind the work already on the caller's stream) and
        each send for its receiver (``p2p.send`` is a synchronous ``dist.send``), so an
        exchange of two messages takes two message times from the later partner's arrival.

        Steady state (the max-plus cycle of the lock step): a middle rank exchanges two
        messages with its left neighbour before each forward and two with its right one
        before each backward, four per micro-batch; the first rank exchanges only at its
        backward steps and the last only at its forward steps, two per micro-batch. Counts
        (the simulation of the stream, ``experiments/p2p_exchange_count.py``, fourth table):

        * last rank: ``p − 1`` crossings up, ``2(m − 1)`` on the rank, ``p − 1`` down:
          ``2m + 2p − 4``;
        * middle rank (``p >= 3``): ``4m + 2p − 8`` (``2m + 2p − 4`` at ``m = 1``);
        * first rank: ``2m + 2p − 4 + 2·min(p − 2, m − 2)`` (``m >= 2``): the fill's
          forwards each wait for a one-message exchange up to ``p − 2`` times more;
        * two ranks: ``2m`` for every kind.

        Balanced stages expose the largest, a middle rank's (``exposed_messages``)."""
        m, pp, r = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (m, pp, rank)))
        last = 2 * m + 2 * pp - 4
        mid = np.where(pp >= 3, np.maximum(4 * m + 2 * pp - 8, last), last)
        first = last + 2 * np.clip(np.minimum(pp - 2, m - 2), 0, None)
        return np.where(r == 0, first, np.where(r == 1, mid, last))

    def exposed_messages(self, m: Any, pp: Any, vpp: Any) -> Any:
        """Messages on the critical path of balanced stages: a middle rank's
        ``4m + 2p − 8`` (``p >= 3``, ``m >= 2``); ``2m`` with two ranks."""
        pp = np.asarray(pp, dtype=float)
        return self.bottleneck_messages(m, pp, vpp, np.where(pp >= 3, 1, 2))

    def search_vpps(self, num_layers: int, max_vpp: int | None = None,
                    fixed_vpp: int | None = None) -> list[int]:
        """Not searched by name: the search enumerates ``1f1b``, which a DeepSpeed stack
        (``--framework megatron-deepspeed``) runs as this schedule."""
        return []

    def steps(self, stage: int, pp: int, m: int, vpp: int = 1,
              group_size: int | None = None) -> list[Step]:
        """The passes of ``train_schedule`` in step order (1F1B's order).

        >>> " ".join(s.label[:2] for s in DeepSpeed1F1B().steps(0, 2, 3))
        'F0 F1 B0 F2 B1 B2'
        """
        self.check_plan(pp, vpp)
        return [Step(kind, i, 0) for kind, i in
                (slot for slot in train_schedule(stage, pp, m) if slot is not None)]

    def actions(self, stage: int, pp: int, m: int, vpp: int = 1,
                group_size: int | None = None) -> list:
        """Each step's blocking calls, in DeepSpeed's order, then its pass: forward steps
        ``SendGrad(previous)``, ``RecvActivation(current)``; backward steps
        ``RecvGrad(current)``, ``SendActivation(previous)``."""
        self.check_plan(pp, vpp)
        if pp == 1:
            return self.steps(stage, pp, m, vpp)
        ring = Boundary(self, stage, pp, vpp)
        out: list = []
        prev: Step | None = None
        for k, slot in enumerate(train_schedule(stage, pp, m)):
            cur = Step(slot[0], slot[1], 0) if slot is not None else None
            forward_step = (k % 2) == (stage % 2)
            if forward_step:
                add_exchange(out, sends=ring.send_out(prev))
                add_exchange(out, recvs=ring.recv_in(cur))
            else:
                add_exchange(out, recvs=ring.recv_in(cur))
                add_exchange(out, sends=ring.send_out(prev))
            if cur is not None:
                out.append(cur)
            prev = cur
        return out
