"""The V placement of ZB-V and DualPipeV: ``2p`` stages on ``p`` ranks, rank ``r`` holding
stage ``r`` (chunk 0) and stage ``2p-1-r`` (chunk 1), so a micro-batch goes down the ranks
and back up and the first rank holds both the embedding and the loss
(torch.distributed.pipelining's ``style="v"`` stage-to-rank mapping)."""
from __future__ import annotations

from typing import Any

from strategies.schedules.base import Rule, Schedule


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
