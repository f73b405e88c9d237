"""1F1B without interleaving (Megatron ``forward_backward_pipelining_without_interleaving``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.base import Schedule
from strategies.schedules.registry import get_schedule, register
from strategies.schedules.step import Step, check_common, warmup_steady_cooldown
from strategies.schedules.exchanges import Boundary, add_exchange, split_passes


class OneFOneBWindow:
    """1F1B's warm-up and stash (a mixin before ``Schedule``): ``min(pp - stage - 1, m)``
    warm-up forwards on rank ``stage``, ``min(pp - stage, m)`` forwards whose backward
    (``B``) has not run. ZB-H1 keeps them: its ``W`` only frees the inputs of its GEMMs."""

    def num_warmup(self, stage: int, pp: int, m: int, vpp: int = 1,
                   group_size: int | None = None) -> int:
        """Warm-up forwards on rank ``stage``: ``min(pp - stage - 1, m)``."""
        check_common(stage, pp, m)
        return min(pp - stage - 1, m)

    def in_flight(self, stage: int, pp: int, m: int, vpp: int = 1,
                  group_size: int | None = None) -> int:
        """``min(pp - stage, m)``: the warm-up forwards plus the one before the first backward
        (``in_flight_array`` of one plan)."""
        return int(self.in_flight_array(stage, pp, m, vpp))

    def in_flight_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> Any:
        """``min(pp - stage, m)`` over arrays."""
        return np.minimum(pp - stage, m)


@register("1f1b")
class OneFOneB(OneFOneBWindow, Schedule):
    """1F1B (PipeDream-Flush; Narayanan et al., 2021): ``pp - stage - 1`` warm-up forwards,
    then one forward one backward, then the remaining backwards. Megatron-LM's default."""

    text_patterns = ("1f1b", "pipedream")
    figures_affine_from = 1
    messages_by_rank = True

    def steps(self, stage: int, pp: int, m: int, vpp: int = 1,
              group_size: int | None = None) -> list[Step]:
        """1F1B order for pipeline rank ``stage``; ``group_size`` is ignored.

        >>> " ".join(s.label[:2] for s in get_schedule("1f1b").steps(0, 2, 3))
        'F0 F1 B0 F2 B1 B2'
        """
        self.check_plan(pp, vpp)
        w = self.num_warmup(stage, pp, m)
        forwards = [Step("F", i, 0) for i in range(m)]
        backwards = [Step("B", i, 0) for i in range(m)]
        return warmup_steady_cooldown(forwards, backwards, w)

    def bottleneck_messages(self, m: Any, pp: Any, vpp: Any, rank: Any) -> Any:
        """Messages on the critical path (each one message's time) when rank kind ``rank``
        (0 the first, 1 a middle, 2 the last rank) bounds the steady state, from ``actions``
        (Megatron's exchanges, eager sends). The path carries micro-batch 0 up to the last
        rank, back down to the slowest rank ``j``, runs ``j``'s own steady state, then takes
        the last forward up and the last backward down to rank 0: one message per boundary
        it crosses, one per exchange it passes on ``j`` (its own send). A middle rank runs
        ``send_forward_recv_backward`` after each steady forward and
        ``send_backward_recv_forward`` after each backward, two exchanges per micro-batch;
        the end ranks one (rank 0 has nothing to send back, the last rank nothing forward):

        * last rank: ``2(p − 1)`` crossings and ``m − 1`` exchanges: ``m + 2p − 3``;
        * middle rank ``j`` (``p >= 3``; ``w = p − j − 1`` warm-up forwards):
          ``4(p − 1) − 2j`` crossings and ``2(m − 1 − w) − 1`` exchanges: ``2m + 2p − 5``,
          for every ``j``;
        * first rank: ``4(p − 1)`` crossings and ``m − p − 1`` exchanges, ``m + 3p − 5``,
          where ``m >= p``; with fewer micro-batches it runs no steady forward and the
          path is a middle rank's: ``m + 2p − 5 + min(m, p)``;
        * one micro-batch: ``2p − 2``, the one chain up and down.

        Balanced stages expose the largest, the middle rank's (``exposed_messages``); the
        simulation of a pipeline alone exposes exactly these counts
        (``experiments/p2p_exchange_count.py``, docs/calibration.md §5.21)."""
        m, pp, r = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (m, pp, rank)))
        first = m + 2 * pp - 5 + np.minimum(m, pp)
        mid = 2 * m + 2 * pp - 5
        n = np.where(r == 0, first, np.where(r == 1, mid, m + 2 * pp - 3))
        return np.where(m > 1, n, 2 * pp - 2)

    def exposed_messages(self, m: Any, pp: Any, vpp: Any) -> Any:
        """Messages on the critical path of balanced stages: the largest of
        ``bottleneck_messages``, a middle rank's ``2m + 2p − 5`` (``m >= 2``, ``p >= 3``);
        ``m + 1`` with two ranks."""
        pp = np.asarray(pp, dtype=float)
        return self.bottleneck_messages(m, pp, vpp, np.where(pp >= 3, 1, 2))

    def actions(self, stage: int, pp: int, m: int, vpp: int = 1,
                group_size: int | None = None) -> list:
        """Megatron ``forward_backward_pipelining_without_interleaving``'s exchanges: in the
        steady state a forward's send is batched with the next backward's receive, and a
        backward's send with the next forward's receive."""
        steps = self.steps(stage, pp, m, vpp, group_size)
        if pp == 1:
            return list(steps)
        ring, w = Boundary(self, stage, pp, vpp), self.num_warmup(stage, pp, m)
        fwd, bwd = split_passes(steps)
        out: list = []
        rem = m - w
        for k in range(w):
            add_exchange(out, recvs=ring.recv_in(fwd[k]))
            out.append(fwd[k])
            add_exchange(out, sends=ring.send_out(fwd[k]))
        if rem:
            add_exchange(out, recvs=ring.recv_in(fwd[w]))
        for i in range(rem):
            out += [fwd[w + i]]
            add_exchange(out, ring.send_out(fwd[w + i]), ring.recv_in(bwd[i]))
            out.append(bwd[i])
            nxt = fwd[w + i + 1] if i + 1 < rem else None
            add_exchange(out, ring.send_out(bwd[i]), ring.recv_in(nxt))
        for i in range(rem, m):
            add_exchange(out, recvs=ring.recv_in(bwd[i]))
            out.append(bwd[i])
            add_exchange(out, sends=ring.send_out(bwd[i]))
        return out


def num_warmup_microbatches(stage: int, pp: int, num_microbatches: int) -> int:
    """Warm-up forwards on rank ``stage``: ``min(pp - stage - 1, num_microbatches)``."""
    return get_schedule("1f1b").num_warmup(stage, pp, num_microbatches)
