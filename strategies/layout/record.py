"""``PipelineLayout``, the record of which slots each ``(pipeline rank, chunk)`` holds, and its
placement: virtual stages in path order put on ranks and chunks by a schedule's placement
(``placed``, ``position_rank_chunk``).
"""
from __future__ import annotations

from dataclasses import dataclass

from strategies.errors import SpecError
from strategies.layout.grammar import EMBEDDING, LAYER, LOSS, MTP, layout_text
from strategies.schedules import get_schedule


@dataclass(frozen=True)
class PipelineLayout:
    """The slots each ``(pipeline rank, chunk)`` holds. ``stages``: per virtual stage in
    path order (Megatron's: position ``chunk·pp + rank`` on the interleaved ring), its slots;
    ``positions``: the ``(rank, chunk)`` of each (the schedule's placement,
    ``Schedule.rank_chunk``). ``source``: how the plan gave it (``layout``, ``first/last``,
    ``account``, ``layers_per_stage``, ``even``)."""

    pp: int
    vpp: int
    stages: tuple[tuple[str, ...], ...]
    positions: tuple[tuple[int, int], ...]
    source: str = "even"

    @property
    def text(self) -> str:
        """Megatron's ``--pipeline-model-parallel-layout`` string of this layout."""
        return layout_text(self.stages)

    @property
    def held(self) -> tuple[tuple[tuple[str, ...], ...], ...]:
        """``held[rank][chunk]``: the slots of each rank's chunks."""
        out = [[() for _ in range(self.vpp)] for _ in range(self.pp)]
        for st, (r, c) in zip(self.stages, self.positions):
            out[r][c] = st
        return tuple(tuple(h) for h in out)

    def slots(self, rank: int, chunk: int) -> tuple[str, ...]:
        return self.stages[self.positions.index((rank, chunk))]

    def layers(self, rank: int, chunk: int) -> int:
        """Transformer layers of ``rank``'s ``chunk``."""
        return self.slots(rank, chunk).count(LAYER)

    def layers_of_stage(self, rank: int) -> int:
        """Transformer layers of pipeline rank ``rank``, all its chunks."""
        return sum(st.count(LAYER) for st, (r, _) in zip(self.stages, self.positions)
                   if r == rank)

    @property
    def layers_per_stage(self) -> tuple[int, ...]:
        return tuple(self.layers_of_stage(r) for r in range(self.pp))

    def mtp_of_stage(self, rank: int) -> int:
        """Multi-token-prediction modules on pipeline rank ``rank``."""
        return sum(st.count(MTP) for st, (r, _) in zip(self.stages, self.positions)
                   if r == rank)

    def layer_ids(self, rank: int, chunk: int) -> range:
        """Indices (0-based, model order) of the transformer layers ``rank``'s ``chunk``
        holds: the layers are numbered along the path."""
        start = 0
        for st, where in zip(self.stages, self.positions):
            if where == (rank, chunk):
                return range(start, start + st.count(LAYER))
            start += st.count(LAYER)
        raise SpecError("chunk", (rank, chunk), f"not in the layout (pp={self.pp}, "
                        f"vpp={self.vpp})")

    @property
    def uniform(self) -> bool:
        """Every virtual stage holds the same number of layers, the embedding first and the
        loss last and nothing else (the even split the mean-layer formulas assume)."""
        n = {st.count(LAYER) for st in self.stages}
        extra = sum(len(st) - st.count(LAYER) for st in self.stages)
        return (len(n) == 1 and extra == 2 and self.stages[0][0] == EMBEDDING
                and self.stages[-1][-1] == LOSS)

    def table(self) -> list[str]:
        """One line per run of equal pipeline ranks: the slots of each chunk (for reports)."""
        held = self.held
        rows, r = [], 0
        while r < self.pp:
            s = r
            while s + 1 < self.pp and held[s + 1] == held[r]:
                s += 1
            ranks = f"rank {r}" if s == r else f"ranks {r}-{s}"
            rows.append(f"{ranks:<12}" + "  ".join(f"{layout_text((c,)) or '-':<7}"
                                                   for c in held[r]).rstrip())
            r = s + 1
        return rows

    def to_dict(self) -> dict:
        return {"text": self.text, "source": self.source,
                "layers_per_stage": list(self.layers_per_stage),
                "layers_per_chunk": [[self.layers(r, c) for c in range(self.vpp)]
                                     for r in range(self.pp)]}


def position_rank_chunk(schedule: str, position: int, pp: int, vpp: int) -> tuple[int, int]:
    """``(rank, chunk)`` of virtual stage ``position``: the schedule's placement where a
    micro-batch's path crosses every chunk (``num_virtual_stages = pp·vpp``: the ring, the
    V), else (DualPipe's two paths) Megatron's ring numbering of the ``pp·vpp`` chunks."""
    sched = get_schedule(schedule)
    if sched.num_virtual_stages(pp, vpp) == pp * vpp:
        r, c = sched.rank_chunk(position, pp, vpp, 0)
        return int(r), int(c)
    return position % pp, position // pp


def placed(stages: list[tuple[str, ...]], schedule: str, pp: int, vpp: int,
           source: str) -> PipelineLayout:
    """``stages`` (path order) placed on ranks and chunks by ``schedule``'s placement."""
    pos = tuple(position_rank_chunk(schedule, p, pp, vpp) for p in range(len(stages)))
    return PipelineLayout(pp, vpp, tuple(tuple(s) for s in stages), pos, source)
