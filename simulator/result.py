"""``SimResult``: what one simulation produced — per-rank records and the derived metrics."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

STREAMS = ("compute", "tp-comm", "cp-comm", "ep-comm", "dp-comm", "pp-comm")
KINDS = ("forward", "backward", "wgrad", "recompute", "offload", "optimizer", "embedding",
         "lm_head", "tp", "cp", "ep", "dp", "pp_send", "pp_recv", "pp_gather", "wait")


class Record(NamedTuple):
    """One interval on one rank's stream (seconds from the step's start).

    ``label`` is the schedule's name for the work, e.g. ``F3.c1`` (forward of micro-batch 3,
    model chunk 1), ``B0.c0``, ``AR dp bucket 2``; ``microbatch``/``chunk`` are -1 when not
    applicable; ``stage`` is the pipeline stage of the rank; ``nbytes`` is set for communication.
    A named tuple, not a dataclass: the engine makes one per op, and a tuple is built several
    times faster than a frozen dataclass (immutable either way).
    """

    rank: int
    stream: str
    kind: str
    label: str
    microbatch: int
    stage: int
    start: float
    end: float
    chunk: int = -1
    nbytes: float = 0.0
    peer: int = -1          # the other end of a point-to-point message, else -1
    wait: float = 0.0       # seconds at the start spent waiting for peers (rendezvous, sender)

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class SimResult:
    """The outcome of one simulated optimizer step.

    ``records`` holds the simulated ranks' intervals (with symmetry folding, only the
    representatives'; ``rank_map`` says which real ranks each one stands for). ``metrics`` holds
    the derived figures: ``bubble_fraction_by_stage``, ``exposed_comm_s``, ``overlapped_comm_s``,
    ``link_utilisation`` (top links), ``activation_memory`` (per rank: list of (time, bytes)).
    """

    step_time_s: float
    records: list[Record]
    num_ranks: int
    simulated_ranks: list[int]
    folded: bool
    events: int
    wall_s: float
    metrics: dict[str, Any] = field(default_factory=dict)
    rank_map: dict[int, list[int]] = field(default_factory=dict)

    def by_rank(self, rank: int) -> list[Record]:
        return [r for r in self.records if r.rank == rank]
