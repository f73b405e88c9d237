"""Multi-plane scale-out networks: the rules every reader of a plane shares.

A *multi-plane* network gives each NIC one port per **plane** (ConnectX-8 as 2 x 400 Gb/s
Ethernet for Spectrum-X; Alibaba HPN's 2 x 200 Gb/s NIC ports into two independent
aggregation planes, SIGCOMM 2024), and each plane is its own switch fabric: its own leaves
and spines, no link between planes. A NIC of ``B`` bytes/s over ``k`` planes has a port of
``B / k`` on each. Traffic between GPUs of two NVLink domains is **striped** over the planes:
one transfer becomes ``k`` sub-flows, one per plane, that contend only with the traffic of
their own plane.

Striping rule (:func:`plane_shares`): each plane carries a share of the bytes proportional to
the rate its path offers (its bottleneck link alone), so a healthy network splits evenly and
a degraded plane carries less (adaptive striping over the planes' ports, as multi-plane NICs
do with per-packet spraying). With every plane's path at rate ``c_p`` a transfer of ``S``
bytes alone on the network takes ``S / sum(c_p)``: ``k`` healthy planes give exactly ``k``
times one plane's bandwidth, and a plane slowed by ``f`` leaves ``(k - 1 + 1/f) / k`` of the
NIC (:func:`striped_factor`, what the analytic estimate reads). A failed plane is a plane
degraded by the largest factor (``topologies.faults.MAX_FACTOR``).

>>> plane_shares([50.0, 50.0])
(0.5, 0.5)
>>> striped_factor(2, {1: 4.0})    # 2 planes, plane 1 at a quarter: 1 / ((1 + 1/4) / 2)
1.6
"""
from __future__ import annotations

from typing import Mapping, Sequence

from topologies.errors import SpecError

#: the most planes one NIC is split into (8 planes x 100 Gb/s is the widest public design)
MAX_PLANES = 16
#: the slowest plane port accepted, Gb/s (one 25G lane: no NIC port is narrower)
MIN_PLANE_GBPS = 25.0


def check_planes(planes: object, nic_gbps: float | None = None, field: str = "planes") -> int:
    """``planes`` as an int in ``1..MAX_PLANES`` that (given ``nic_gbps``, the NIC's Gb/s as
    the user wrote it) splits the NIC into equal whole-Gb/s ports of at least
    ``MIN_PLANE_GBPS``; ``SpecError`` otherwise."""
    if isinstance(planes, bool) or not isinstance(planes, int):
        raise SpecError(field, planes, f"must be an integer in 1..{MAX_PLANES}")
    if not 1 <= planes <= MAX_PLANES:
        raise SpecError(field, planes, f"must be an integer in 1..{MAX_PLANES} (a NIC port "
                                       "per plane)")
    if planes == 1 or nic_gbps is None:
        return planes
    port = nic_gbps / planes
    if abs(port - round(port)) > 1e-9 * max(1.0, port) or port < MIN_PLANE_GBPS:
        raise SpecError(field, planes, f"must split the {nic_gbps:g} Gb/s NIC into equal ports "
                        f"of a whole number of Gb/s, at least {MIN_PLANE_GBPS:g} "
                        f"(here {port:g} Gb/s per plane)")
    return planes


def plane_shares(rates: Sequence[float]) -> tuple[float, ...]:
    """The share of a transfer's bytes each plane carries: proportional to ``rates`` (bytes/s
    of each plane's path alone). Sums to 1."""
    total = float(sum(rates))
    if not total > 0:
        raise ValueError(f"plane rates {list(rates)!r}: need a positive total")
    return tuple(float(r) / total for r in rates)


def striped_factor(planes: int, slowdown: Mapping[int, float]) -> float:
    """The slowdown of a striped NIC whose plane ``p`` runs ``slowdown[p]`` times slower
    (others healthy): ``planes / sum(1 / f_p)``; 1 for a healthy network."""
    if not slowdown:
        return 1.0
    return planes / sum(1.0 / slowdown.get(p, 1.0) for p in range(planes))
