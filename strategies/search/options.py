"""The knobs of one job's plan space (``SpaceOptions``, what ``search`` and ``whatif`` are
given) and the values of its ``schedules`` knob (``SCHEDULE_SETS``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from topologies.cluster import Cluster

#: the values of ``SpaceOptions.schedules`` (``--schedules``)
SCHEDULE_SETS = ("default", "all")


@dataclass(frozen=True)
class SpaceOptions:
    """Knobs of the space. ``memory_limit_bytes`` overrides ``capacity·(1 - headroom)``;
    ``max_bubble`` bounds ``(pp-1)/(vpp·m)`` (idle over useful pipeline time)."""

    max_mbs: int = 8
    allow_cross_node_tp: bool = False
    memory_limit_bytes: float | None = None
    headroom: float = 0.05
    max_bubble: float = 0.5
    max_vpp: int | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    #: ``"default"``: each schedule's ``search_vpps`` (gpipe, 1f1b, interleaved); ``"all"``:
    #: every registered schedule with the chunk counts it is planned with
    #: (``fixed_search_vpps``: ZB-H1/H2/V and DualPipe(V) too), but those whose order is
    #: solved per job (``solved_per_job``: ZB-1p/ZB-2p)
    schedules: str = "default"
    #: propose one uneven pipeline layout per (pp, vpp) (``strategies.search.layouts``)
    layouts: bool = True
    #: also search hybrid sharding (``search --hybrid``): each row's twins with ``dp_shard``
    #: a node's worth of ranks and its power-of-two multiples below ``dp`` (``product._with_hybrid``)
    hybrid: bool = False

    def memory_limit(self, cluster: Cluster) -> float:
        if self.memory_limit_bytes is not None:
            return float(self.memory_limit_bytes)
        return cluster.min_hbm_bytes * (1.0 - self.headroom)
