"""Ring groups that a translation maps onto groups but not onto their ring order: when folding
them stays exact (``simulator.fold``).

**Where it arises.** With context and data parallelism together, a dense parameter's gradients
are reduced over the ``dpcp`` group: the ``cp·dp`` ranks of one tp and pp coordinate, cp
inner, as one ring (``strategies.placement.groups``). Moving the cp coordinate by ``k`` maps
that group onto itself as a set, but not its ring order: the edge from the last cp rank of
one dp replica to the first of the next becomes an edge inside a replica. No permutation
that moves the cp coordinate keeps both the cp rings and the dpcp ring's order (the image
of a cp ring would have to be a contiguous run of the dpcp ring, which only the cp rings
themselves are), so the translation is not a symmetry of the flow set, and before this module
cp was folded only where the dpcp group is the cp group (one data-parallel shard): on 256
HGX H800 nodes the search's plan ``tp8 pp8 dp8 cp4`` simulated 32 of 2,048 ranks, not 8. The
same holds for the stage-wide ``edp`` ring of a dense model.

**Why folding stays exact (an equitable partition, not an automorphism).** Let ``T`` be the
group of translations the steps generate; it acts freely on GPUs as network automorphisms
(``simulator.fold``'s checks), maps every group onto a group *as a set*, keeps the ring order
of every group outside ``dims``, and fixes the stage, so all ranks of an orbit run the same
program and every collective waits for the same member set. A flow's links other than the
leaf <-> spine ones (which never bind, ``simulator.fold``) are owned by three GPUs
(``topologies.routing``, checked against the routes by ``tests/test_fold_rings.py``): its
source ``a`` (the hop into the node fabric, or into its NIC), the *relay* ``r`` (``a``'s
node, ``b``'s local index) when ``routing.relays`` says the flow crosses the source node's
fabric first (NVLink into ``r``, ``r``'s NIC and uplink), and its destination ``b`` (the
downlink and NIC into ``b``, or the fabric hop into ``b`` inside a node); which links of its
owner a role uses depends only on the role, on whether the flow stays in a node and on
whether it relays. Class each ring flow of a dimension in ``dims`` by its source's orbit and
those two flags. If

- (E1) all flows of a class have their destination in one orbit and their relay in one
  orbit, and
- (E2) every GPU of an orbit is, for each class and role, the source, relay or destination
  of equally many flows of that class,

then every link of a link orbit carries, class by class, equally many flows (E2), and every
flow of a class crosses the same link orbits (E1); flows outside ``dims`` form such classes
because ``T`` maps them onto flows. By induction over the events, every rank of an orbit runs
the same timeline: if it holds up to an instant, the flows of a class have the same bytes
left, max-min progressive filling raises the flows of a class together and saturates the
links of an orbit together (a link's load is a sum over classes of count times rate), so
flows of a class get one rate and end together; a phase's latency (its slowest hop) is the
same for every group of an orbit (E1 gives the same hop kinds). The folded run starts only
the representatives' flows and maps each hop to the same hop of its owner's representative
(``simulator.fold.make_link_map``): since ``T`` is free, an orbit has ``|T|`` GPUs and a
class ``|T|`` flows, so by (E2) each real link of an orbit carries ``n`` flows of a class,
``n`` being how often one flow of the class crosses that orbit, and the representative's
link carries the class's one folded flow ``n`` times: the same counts, the same rates and
times. Closed-form timing (``simulator.engine.channels``) asks whether a channel's links
carry anything else; the tests compare the folded and unfolded records bit for bit.

When (E1) or (E2) fails the fold falls back to translations that keep every ring's order.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable

import numpy as np

from simulator.program.compiler import stats_groups
from strategies import placement
from strategies.collectives import algorithm_for, phases_of
from strategies.job import Job
from topologies.graph import rails as graph_rails
from topologies.routing import relays


def ring_flows(job: Job, dim: str) -> np.ndarray:
    """``(src, dst)`` rows of every flow of the ring collectives over the ``dim`` groups
    (``stats``: the gradient norm's, ``simulator.program.compiler.stats_groups``; the phases
    the engine runs, ``strategies.collectives.phases_of``; the flows do not depend on the kind
    or the bytes)."""
    G = job.cluster.gpus_per_node
    groups = stats_groups(job.plan) if dim == "stats" else placement.groups(job.plan, dim)
    parts = [group_flows(tuple(g), G) for g in groups if len(g) > 1]
    return np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)


@lru_cache(maxsize=4096)
def group_flows(group: tuple[int, ...], gpus_per_node: int) -> np.ndarray:
    """``(src, dst)`` rows of a ring all-reduce over ``group`` (ranks in ring order), every
    phase's (read-only); a pure function of its arguments, kept: a search's plans share
    groups (the world's, with the distributed optimizer, in every plan of one size)."""
    node_of = gpus_per_node.__rfloordiv__           # rank -> its node (r // G)
    rows = [f for ph in phases_of(algorithm_for("allreduce", group, gpus_per_node),
                                  "allreduce", group, 1.0, node_of) for f in ph.flows]
    out = np.array(rows, dtype=np.int64).reshape(-1, 2)
    out.flags.writeable = False
    return out


def equitable(job: Job, rep_of: np.ndarray, dims: Iterable[str]) -> bool:
    """Do the ring flows of every ``dims`` group satisfy (E1) and (E2) of the module doc for
    the orbits ``rep_of`` (rank -> its representative)?"""
    return all(equitable_flows(job, rep_of, ring_flows(job, d)) for d in dims)


def flow_roles(job: Job, flows: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(src, dst, intra, relay, relay GPU)`` arrays of ``flows`` (``(src, dst)`` rows):
    whether each stays in a node, whether it relays through the source node's GPU on the
    destination's rail (``topologies.routing.relays``) and that GPU (the source where it
    does not relay: unused)."""
    G = job.cluster.gpus_per_node
    a, b = flows[:, 0], flows[:, 1]
    intra = a // G == b // G
    relay = ~intra & np.asarray(relays(job.cluster.inter_node_topology, graph_rails(job.cluster),
                                       a % G, b % G), dtype=bool)
    return a, b, intra, relay, np.where(relay, a // G * G + b % G, a)


def equitable_flows(job: Job, rep_of: np.ndarray, flows: np.ndarray) -> bool:
    """(E1) and (E2) of the module doc for one dimension's ring flows (``(src, dst)`` rows)
    and the orbits ``rep_of``."""
    if not len(flows):
        return True
    n = rep_of.size
    a, b, intra, relay, r = flow_roles(job, flows)
    # a flow's class: its source's orbit, whether it stays in a node, whether it relays
    _, cls = np.unique(rep_of[a] * 4 + intra * 2 + relay, return_inverse=True)
    cls = cls.ravel()
    k = int(cls.max()) + 1
    # (E1) one destination orbit and one relay orbit per class
    far = (cls * (n + 1) + rep_of[b]) * (n + 1) + np.where(relay, rep_of[r], n)
    if np.unique(far).size != k:
        return False
    # (E2) per GPU and (class, role) the count of flows, the same on every GPU of an orbit
    gpu = np.concatenate([a, r[relay], b])
    role = np.concatenate([cls * 3, cls[relay] * 3 + 1, cls * 3 + 2])
    pairs, count = np.unique(gpu * (3 * k) + role, return_counts=True)
    top = int(count.max()) + 1
    held = np.unique((rep_of[pairs // (3 * k)] * (3 * k) + pairs % (3 * k)) * top + count,
                     return_counts=True)[1]
    return bool(np.all(held == n // np.unique(rep_of).size))
