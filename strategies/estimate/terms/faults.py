"""What the analytic step sees of a cluster's faults (``cluster.faults``): its degraded links,
each class as slow as its worst link (``degraded_view``), and its straggling GPUs, each
stage as slow as its slowest GPU (``straggler_stages``)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from topologies.cluster import Cluster


def degraded_view(cl: Cluster) -> Cluster:
    """The cluster as the analytic model sees its degraded links (``cluster.faults``): every
    group of a class is as slow as the worst link of that class, so NVLink bandwidth is
    divided by the largest factor on an intra-node link and NIC bandwidth by the largest on
    a GPU–NIC or NIC–fabric link (a synchronous step waits for its slowest group). Links of
    the fabric core (leaf–spine) are seen by the simulation only."""
    intra, inter = cl.faults.bandwidth_factors(cl.planes)
    if intra == 1.0 and inter == 1.0:
        return cl
    return replace(cl, intra_node_bandwidth=cl.intra_node_bandwidth / intra,
                   inter_node_bandwidth=cl.inter_node_bandwidth / inter)


def straggler_stages(stragglers: tuple, per_stage: Any, pp: Any, times: tuple, compute: tuple,
                     t_max: Any, t_sum: Any) -> tuple[Any, Any]:
    """``(t_max, t_sum)`` of the pipeline formula with straggling stages: the stage of GPU
    ``g`` is ``g // per_stage`` (pp is the outermost coordinate); its compute (``compute``:
    first, middle, last, only-stage seconds per micro-batch, of which ``times`` are the
    stage times) runs ``f`` times slower, ``f`` the largest factor among its GPUs (every
    rank of a stage waits for the others: tensor-parallel collectives within a pipeline,
    the gradient reduction across them). Arrays over plans."""
    single = pp == 1
    stages = [np.floor(g / per_stage) for g, _ in stragglers]
    factors = [f for _, f in stragglers]
    extra = 0.0
    for k, s in enumerate(stages):
        f = np.max([np.where(stages[j] == s, factors[j], 1.0) for j in range(len(stages))],
                   axis=0)
        first = np.ones_like(s, dtype=bool)
        for j in range(k):
            first &= stages[j] != s
        pick = lambda xs: np.where(single, xs[3], np.where(  # noqa: E731
            s == 0, xs[0], np.where(s == pp - 1, xs[2], xs[1])))
        t_s = pick(times)
        slow = t_s + (f - 1.0) * pick(compute)
        extra = extra + np.where(first, slow - t_s, 0.0)
        t_max = np.maximum(t_max, slow)
    return t_max, t_sum + extra
