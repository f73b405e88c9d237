"""A schedule's placement (the ``Placement`` mixin of ``Schedule``): which rank and model chunk
hold each position of a micro-batch's path through the pipeline (``virtual_stage``,
``rank_chunk``, ``num_virtual_stages``; default Megatron's ring: chunk ``c`` on rank ``r`` is
position ``c·pp + r``), the hops, end ranks and peers that follow from it, and the chunk ids
of a rank's order (``order_chunks``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.distinct_rows import distinct_int_rows
from strategies.schedules.per_distinct import per_distinct


class Placement:
    """``Schedule``'s placement methods (module docstring); a schedule overrides
    ``num_virtual_stages``, ``virtual_stage`` and ``rank_chunk`` together."""

    def order_chunks(self, pp: int, vpp: int) -> int:
        """Chunk ids of a rank's order (``Step.chunk``): ``vpp``, or a mirrored schedule's
        two copies (chunk 1: stage ``pp-1-r``'s, ``layout.order_chunk_kinds``) where
        ``pp > 1``."""
        return 2 if self.mirrored and pp > 1 else vpp

    def num_virtual_stages(self, pp: int, vpp: int) -> int:
        """Positions on a micro-batch's path through the pipeline."""
        return pp * vpp

    def virtual_stage(self, rank: int, chunk: int, pp: int, vpp: int,
                      microbatch: int = 0) -> int:
        """Position of ``(rank, chunk)`` on ``microbatch``'s path (ring: ``chunk·pp + rank``)."""
        return chunk * pp + rank

    def virtual_stage_array(self, rank: np.ndarray, chunk: np.ndarray, pp: int, vpp: int,
                            microbatch: np.ndarray) -> np.ndarray:
        """``virtual_stage`` over int arrays (``analysis.free_comm_order``'s steps): the ring's
        closed form where the schedule keeps it, else ``virtual_stage`` once per distinct
        ``(rank, chunk, microbatch)``."""
        if type(self).virtual_stage is Placement.virtual_stage:
            return chunk * pp + rank
        rows = np.stack([rank, chunk, microbatch], axis=1)
        if not len(rows):
            return np.zeros(0, dtype=np.int64)
        first, inv = distinct_int_rows(rows)
        got = [self.virtual_stage(r, c, pp, vpp, i) for r, c, i in rows[first].tolist()]
        return np.array(got, dtype=np.int64)[inv]

    def rank_chunk(self, position: int, pp: int, vpp: int,
                   microbatch: int = 0) -> tuple[int, int]:
        """``(rank, chunk)`` at ``position`` of ``microbatch``'s path (inverse of
        ``virtual_stage``)."""
        return position % pp, position // pp

    def path_hops(self, pp: int, vpp: int) -> tuple[tuple[int, int], ...]:
        """``(rank, next rank)`` of every message on a micro-batch's forward path (its
        backward crosses the same hops the other way): consecutive positions on different
        ranks (``rank_chunk``; the interleaved ring's wrap from rank ``pp-1`` to rank 0
        included, a V's turn on one rank not).

        >>> from strategies.schedules import get_schedule
        >>> get_schedule("interleaved").path_hops(2, 2)
        ((0, 1), (1, 0), (0, 1))
        """
        ranks = [self.rank_chunk(p, pp, vpp)[0] for p in range(self.num_virtual_stages(pp, vpp))]
        return tuple((a, b) for a, b in zip(ranks, ranks[1:]) if a != b)

    def ends(self, pp: int, vpp: int, microbatch: int = 0) -> tuple[int, int]:
        """Ranks holding the first position (the embedding) and the last (the LM head and
        the loss): ``(0, pp - 1)`` on the ring, ``(0, 0)`` on a V."""
        last = self.num_virtual_stages(pp, vpp) - 1
        return (self.rank_chunk(0, pp, vpp, microbatch)[0],
                self.rank_chunk(last, pp, vpp, microbatch)[0])

    def head_rank_array(self, pp: Any, vpp: Any) -> np.ndarray:
        """Pipeline rank holding the LM head and the loss (``ends``' second) for each
        ``(pp, vpp)``: ``pp - 1`` on the ring, 0 on a V. The embedding is on rank 0 for every
        schedule (``ends``' first). The one placement rule cost, memory and estimate read."""
        return per_distinct(lambda s, p, m, v: self.ends(p, v)[1], 0, pp, 1, vpp)

    def peer(self, rank: int, chunk: int, microbatch: int, pp: int, vpp: int,
             direction: str, sending: bool) -> int:
        """Rank at the other end of message ``(direction, microbatch, chunk)`` of ``rank``:
        ``fwd`` goes to the next position, ``bwd`` to the previous one."""
        towards_next = (direction == "fwd") == sending
        pos = self.virtual_stage(rank, chunk, pp, vpp, microbatch) + (1 if towards_next else -1)
        return self.rank_chunk(pos, pp, vpp, microbatch)[0]
