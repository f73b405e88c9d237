"""``collective_time``: the analytic time of a collective on a cluster, what the estimate
reads.

The algorithm ``strategies.collectives.select`` picks for the group (the compiler's rule),
timed by that algorithm's closed form (``catalog.catalog_time``). A group of ``n`` ranks with
``k`` of them per node runs a ring over NVLink when it fits in a node, a ring over the NICs
with one member per node, and with ``k > 1`` members on each of several nodes NCCL's flat ring
striped over the members for every all-reduce, all-gather and reduce-scatter
(``ring.striped_time``; docs/calibration.md §3.21); groups laid out differently from one group
to the next run NCCL's ring in as many channels as the thinnest node has members
(``ring.uneven_time``, §5.228) where ``select.uneven_layouts`` knows their layout, else
``links.group_bandwidth``'s ring.

A GPU profile's measured NCCL collectives (``paraplan calibrate``) scale the time of a
collective whose group lies within one node by measured over modelled seconds
(``profile_scale.measured_scale``; docs/calibration.md §5.71); between nodes the model stays.

Closed forms (nccl-tests PERFORMANCE.md): all-reduce ``2(n-1)/n · S/B``, reduce-scatter and
all-gather ``(n-1)/n · S/B``, with S the per-rank buffer in bytes; they are the ``time`` of
``strategies.collectives.ring`` and ``.all_to_all``, the definitions the simulator's engine runs
as flows.
"""
from __future__ import annotations

import numpy as np

from strategies.cost.comm.catalog import catalog_time
from strategies.cost.comm.links import MEMO_KEPT, exact_key, in_one_node
from strategies.cost.comm.profile_scale import measured_scale, measured_table
from strategies.cost.token_counts import Num
from topologies.cluster import Cluster


# ``collective_time`` of one collective (Python or numpy scalars, not arrays) on one cluster
# object: a scalar estimate prices the same few collectives over and over (the gradient
# buckets, the ZeRO passes, the bound's floors), each a dozen numpy calls on 0-d arrays
# (validate_published --tiers all --no-sim: 16,362 calls, 4,626 distinct). Kept by the
# cluster's id with the cluster itself (a frozen spec: its id stays its own while kept)
# and each argument's type (a 0-d array's dtype too) and exact value (``float.hex``: -0.0
# is not 0.0); the answer
# is an immutable numpy scalar, the same object a fresh call would equal bit for bit.
_SCALAR_TIMES: dict[tuple, tuple[Cluster, Num]] = {}


def collective_time(kind: str, nbytes: Num, n: Num, stride: Num, cluster: Cluster,
                    remote_scale: Num = 1.0, nvlink_share: Num = 1.0) -> Num:
    """``_collective_time`` (below), kept for scalar arguments (``_SCALAR_TIMES``)."""
    parts = (kind, id(cluster)) + tuple(map(exact_key, (nbytes, n, stride, remote_scale,
                                                        nvlink_share)))
    if None in parts:
        return _collective_time(kind, nbytes, n, stride, cluster, remote_scale, nvlink_share)
    hit = _SCALAR_TIMES.get(parts)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    out = _collective_time(kind, nbytes, n, stride, cluster, remote_scale, nvlink_share)
    if type(out) is np.float64:              # immutable: safe to hand out again
        if len(_SCALAR_TIMES) >= MEMO_KEPT:
            _SCALAR_TIMES.clear()
        _SCALAR_TIMES[parts] = (cluster, out)
    return out


def _collective_time(kind: str, nbytes: Num, n: Num, stride: Num, cluster: Cluster,
                     remote_scale: Num = 1.0, nvlink_share: Num = 1.0) -> Num:
    """``catalog_time`` times ``measured_scale`` (the GPU profile's measured collectives,
    for groups within one node: ``in_one_node``). Vectorised."""
    t = catalog_time(kind, nbytes, n, stride, cluster, remote_scale, nvlink_share)
    if measured_table(cluster) is None:
        return t
    scale = measured_scale(kind, nbytes, n, in_one_node(n, stride, cluster.gpus_per_node),
                           cluster, nvlink_share)
    return (t * scale)[()]
