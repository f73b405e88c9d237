"""The V placement of ZB-V and DualPipeV: ``2p`` stages on ``p`` ranks, rank ``r`` holding
stage ``r`` (chunk 0) and stage ``2p-1-r`` (chunk 1), so a micro-batch goes down the ranks
and back up and the first rank holds both the embedding and the loss
(torch.distributed.pipelining's ``style="v"`` stage-to-rank mapping)."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.base import Schedule
from strategies.schedules.validity import Rule


class VShape(Schedule):
    """Placement and shape rules shared by the V schedules (two chunks per rank)."""

    chunked = True
    default_vpp = 2

    def num_virtual_stages(self, pp: int, vpp: int) -> int:
        """``2·pp`` stages."""
        return 2 * pp

    def virtual_stage(self, rank: int, chunk: int, pp: int, vpp: int,
                      microbatch: int = 0) -> int:
        """Chunk 0 of rank ``r`` is stage ``r``, chunk 1 stage ``2pp-1-r``.

        >>> from strategies.schedules import get_schedule
        >>> [get_schedule("zb-v").virtual_stage(r, c, 3, 2) for c in (0, 1) for r in range(3)]
        [0, 1, 2, 5, 4, 3]
        """
        return rank if chunk == 0 else 2 * pp - 1 - rank

    def rank_chunk(self, position: int, pp: int, vpp: int,
                   microbatch: int = 0) -> tuple[int, int]:
        return (position, 0) if position < pp else (2 * pp - 1 - position, 1)

    def shape_rules(self, pp: Any, vpp: Any, group_size: Any) -> list[Rule]:
        """Exactly two chunks per rank, no micro-batch group."""
        return [("vpp", vpp, vpp == 2,
                 lambda: f"schedule={self.name} places two model chunks per rank in a V: "
                         "needs vpp=2"),
                ("microbatch_group_size", group_size, group_size is None,
                 lambda: f"does not apply to schedule={self.name}")]

    def search_vpps(self, num_layers: int, max_vpp: int | None = None,
                    fixed_vpp: int | None = None) -> list[int]:
        """None yet: the search cannot cost ``W``."""
        return []

    def replays(self, m: Any, pp: Any) -> np.ndarray:
        """Where ``pipeline_span`` replays the order (``replay.order_span``): ``pp > 1``."""
        return np.asarray(pp) > 1

    def replay_f_share(self, w_share: Any, f_share: Any) -> Any:
        """The forward's share of a chunk's seconds in the replay: ``f_share``."""
        return f_share

    def reduce_queue_tails(self, m: Any, t_max: Any, t_sum: Any, w_share: Any, f_share: Any,
                           pp: Any, rs: tuple, edge: tuple) -> tuple:
        """ZeRO-2's per-chunk reduce-scatters queued behind the order's gradient steps: each
        kind of rank's (first, middle, last) data-parallel stream's end after the span, on
        the replay ``pipeline_span`` reads (``replay.order_reduce_tails``; ``rs``/``edge``:
        a chunk's reduce-scatter and its last bucket per kind, seconds); ``-inf`` where the
        span is not replayed (``replays``). Arrays over plans; seconds."""
        from strategies.schedules.replay import order_reduce_tails
        args = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (
            m, t_max, t_sum, w_share, f_share, pp, *rs, *edge)))
        mb, tm, ts, w, f, pb = args[:6]
        out = [np.full(mb.shape, -np.inf) for _ in range(3)]
        sel = self.replays(mb, pb)
        if np.any(sel):
            got = order_reduce_tails(self, mb[sel], tm[sel], ts[sel], pb[sel], 2, w[sel],
                                     self.replay_f_share(w[sel], f[sel]),
                                     tuple(x[sel] for x in args[6:9]),
                                     tuple(x[sel] for x in args[9:12]))
            for o, g in zip(out, got):
                o[sel] = g
        return tuple(out)
