"""The gradient norm's all-reduce under symmetry folding (``simulator.fold``): when folding
its ring stays exact although the ring is neither kept in order nor an equitable partition.

**The group.** A stack that clips by the global norm all-reduces one fp32 scalar over the
grad-stats group before any rank updates (``strategies.cost.norm_barrier``, §5.202): every
rank with the distributed optimizer, else each model-parallel group
(``simulator.program.compiler.stats_groups``). ``fold_spec`` checks it like the other groups
(``group_table``). A translation of the tp, cp or dp coordinate maps it onto a group as a set,
and keeps its ring order or its flows' orbits (``simulator.fold_rings``' (E1) and (E2)) in
many plans (one stage a node; model-parallel groups across nodes). With the distributed
optimizer and ``pp > 1`` it does neither where a stage spans several nodes, or several stages
share a node: the world's ring (striped over the nodes, ``strategies.collectives.ring``) goes
from the last node of stage ``s`` to the first of stage ``s+1``, and the GPUs of one orbit
(one stage) send into two destination orbits; so does a model-parallel ring whose stages
share a node when tp is folded (``0 -> 1 -> 4 -> 5``: moving tp by one sends ``1 -> 4`` to
``0 -> 5``).

**Why folding it stays exact: it runs alone.** Its flows carry a few bytes (``NORM_BYTES``
times the ring share) and start once every rank of the group has its gradients reduced, so
in the plans seen nothing else is on the network while they run. Suppose so: from the instant
its flows start to the instant the last one ends, no other flow is live. Class its flows by
*shape* (whether a flow stays in a node, whether it relays: its bytes and which of its
owners' links it crosses depend only on that, ``fold_rings``) and the links by kind. If

- (S1) every GPU of the job is, for each shape and role (source, relay, destination), the
  owner of equally many flows, and
- (S2) the folded run's flows (those whose source is a representative, each hop moved to
  its owner's representative, ``simulator.fold.make_link_map``) give every representative
  those same counts,

then in the full run each link of a kind carries, shape by shape, the same count of flows
(identical nodes: equal capacities; the leaf <-> spine links never bind), which is an
equitable partition of the flows alone: progressive filling (``simulator.network.maxmin``)
computes on every link of a kind the same shares, level after level, and gives every flow of
a shape one rate; the flows of a shape have the same bytes, so they end together, and what
is left is again a union of shapes. By (S2) the folded network's links carry the same counts,
so it runs the same arithmetic and the same rates, bit for bit. The latency before the flows
is the slowest hop's over all flows in both runs (``engine.collectives.plan_phases``), and the
collective starts when the last member arrives, the same instant in both runs (every rank runs
its representative's timeline up to then, ``simulator.fold``). With several groups (the
model-parallel ones) the premise is that all of them start together: each real group is the
image of one the folded run holds, whose members' representatives are its own members (both
checked), so it starts when that one does. The premise is checked, not assumed: the engine
watches the groups' collectives (``engine.collectives.WatchedRun``) and ``simulate`` runs the
job again without this argument if their flows did not all start at one instant with no
other flow live then, or another flow started before they ended (in the folded run; it then
holds in the full run: up to then the runs agree, and each flow the full run starts or has
live is an image of one the folded run starts or has live at the same instant).
**Nodes that differ** (``simulator.fold.network_rules``: heterogeneous nodes, or uneven
microbatches per replica) allow only within-node translations: every orbit lies in one
node (checked). Links of one kind then need equal capacities only inside a node: each node
is internally symmetric (one GPU type, one NVSwitch port rate and one NIC rate for all its
GPUs, ``topologies.cluster``'s node groups; ``tests/test_fold_hetero.py`` checks the
graph), and (S1) over the whole job fails its premise, since a kind's links in an H100 node
and in an A100 node differ. Class the flows by shape *and* by their source's and
destination's nodes (a relay lies in its source's node), and the links a GPU owns by kind
*and* by their owner's node; a flow of a class crosses, per link class, a number of links
fixed by its class (the shape fixes which links of each owner, the nodes which node the
owners are in). Under the same premise (the flows run alone), if

- (S1n) every GPU of a node owns, for each flow class and role, as many flows as every
  other GPU of the job in that node, and
- (S2n) the folded run's flows give every representative those same counts,

then by (S1n) every link of a class carries, flow class by flow class, one count, and the
two partitions are equitable: at each level of progressive filling the links of a class
have one capacity, one load already fixed and one count of flows still rising, so they get
one share and saturate together, and every flow of a class freezes at one rate (classes
through faster nodes may get other rates than those through slower ones: that is allowed
here, not in (S1)'s single rate per shape). The flows of a class carry the same bytes (one
ring phase, one shape) and start together, so they end together, and what is left is again
a union of classes: by induction every flow of a class runs one timeline. The folded run
moves each hop to the same hop of its owner's representative, which is in the owner's node
(orbits stay in nodes): a hop keeps its link class, capacity and latency, a flow its class,
so by (S2n) its links carry the full run's counts and it does the same arithmetic, with the
same rates and times. The rest (the latency, the start instant, several groups, the check
at run time) is as above. Identical nodes keep (S1) and (S2): their orbits may leave a node,
where (S1n)'s node-wise classes would not be kept.
"""
from __future__ import annotations

import numpy as np

from simulator.fold_rings import flow_roles, ring_flows
from simulator.program.compiler import stats_groups
from strategies.cost.norm_barrier import barrier_on
from strategies.job import Job

STATS = "stats"     # the group dimension's name (``simulator.program.compiler.Layout``)


def stats_checked(job: Job) -> bool:
    """Whether the job's programs hold the gradient norm's all-reduce over groups of more
    than one rank (``simulator.program.builder``: the barrier is modelled)."""
    return barrier_on(job.framework.step) and len(stats_groups(job.plan)[0]) > 1


def alone_groups(job: Job, rep_of: np.ndarray, identical_nodes: bool,
                 flows: np.ndarray | None = None) -> tuple[tuple[int, ...], ...] | None:
    """The stats groups the folded run holds (those with a representative), whose folding
    rests on their flows running alone (the module doc), where every member of such a group
    has its representative in it and (S1) and (S2) hold for the orbits ``rep_of`` (rank ->
    its representative); else None. Nodes that are not identical (``identical_nodes``
    False) need every orbit inside a node and the counts node by node ((S1n), (S2n));
    ``flows``: the groups' ring flows (``ring_flows(job, "stats")``) where the caller has
    them."""
    G = job.cluster.gpus_per_node
    if not identical_nodes and np.any(rep_of // G != np.arange(rep_of.size) // G):
        return None
    held = tuple(g for g in stats_groups(job.plan) if np.any(rep_of[list(g)] == list(g)))
    if any(not set(rep_of[list(g)].tolist()) <= set(g) for g in held):
        return None
    flows = ring_flows(job, STATS) if flows is None else flows
    return held if alone_counts_hold(job, rep_of, flows, not identical_nodes) else None


def _incidences(job: Job, flows: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each flow's owners (``fold_rings.flow_roles``): ``(gpu, role, src, dst)`` arrays with
    one entry per flow and owner role, ``role`` = shape·3 + (0 source, 1 relay, 2
    destination), shape 0 between nodes, 1 relayed, 2 in a node; ``src``, ``dst``: the
    flow's ends (``flows``' rows: ``(src, dst)``)."""
    a, b, intra, relay, r = flow_roles(job, flows)
    shape = intra * 2 + relay
    gpu = np.concatenate([a, r[relay], b])
    role = np.concatenate([shape * 3, shape[relay] * 3 + 1, shape * 3 + 2])
    return gpu, role, np.concatenate([a, a[relay], a]), np.concatenate([b, b[relay], b])


def alone_counts_hold(job: Job, rep_of: np.ndarray, flows: np.ndarray,
                      by_node: bool = False) -> bool:
    """(S1) and (S2) of the module doc for ``flows`` (``(src, dst)`` rows) and the orbits
    ``rep_of``; ``by_node``: (S1n) and (S2n) instead, the orbits each inside a node (the
    caller checks that)."""
    n = rep_of.size
    if not len(flows):
        return True
    gpu, role, src, dst = _incidences(job, flows)
    if gpu.max() >= n:
        return False                      # a relay or destination outside the job
    if by_node:
        return _node_counts_hold(job.cluster.gpus_per_node, rep_of, gpu, role, src, dst)
    real = np.zeros((n, 9), dtype=np.int64)
    np.add.at(real, (gpu, role), 1)
    if not np.all(real == real[0]):       # (S1)
        return False
    kept = rep_of[src] == src
    folded = np.zeros((n, 9), dtype=np.int64)
    np.add.at(folded, (rep_of[gpu[kept]], role[kept]), 1)
    return bool(np.all(folded[np.unique(rep_of)] == real[0]))      # (S2)


def _node_counts_hold(G: int, rep_of: np.ndarray, gpu: np.ndarray, role: np.ndarray,
                      src: np.ndarray, dst: np.ndarray) -> bool:
    """(S1n), (S2n) on ``_incidences``' arrays (``G`` GPUs a node): every GPU of a node owns,
    per role, shape and pair of nodes (the flow's source's and destination's), as many flows
    as every other GPU of the job in its node, and each representative as many in the
    folded run as in the full run."""
    n = rep_of.size
    nodes = -(-n // G)
    width = 9 * nodes * nodes             # keys: a flow class and a role
    key = (role * nodes + src // G) * nodes + dst // G
    real, count = np.unique(gpu * width + key, return_counts=True)
    # (S1n): each (node, key, count) is held by every GPU of the job in that node
    top = int(count.max()) + 1
    cell, held = np.unique((real // width // G * width + real % width) * top + count,
                           return_counts=True)
    if not np.array_equal(held, np.bincount(np.arange(n) // G)[cell // top // width]):
        return False
    # (S2n): the representatives' counts in the folded run are their counts in the full run
    kept = rep_of[src] == src
    mine = np.isin(real // width, np.unique(rep_of))
    folded, fcount = np.unique(rep_of[gpu[kept]] * width + key[kept], return_counts=True)
    return bool(np.array_equal(folded, real[mine]) and np.array_equal(fcount, count[mine]))
