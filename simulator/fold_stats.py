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
    rests on their flows running alone (the module doc), where the nodes are identical
    (``identical_nodes``), every member of such a group has its representative in it, and
    (S1) and (S2) hold for the orbits ``rep_of`` (rank -> its representative); else None.
    ``flows``: the groups' ring flows (``ring_flows(job, "stats")``) where the caller has
    them."""
    if not identical_nodes:
        return None
    held = tuple(g for g in stats_groups(job.plan) if np.any(rep_of[list(g)] == list(g)))
    if any(not set(rep_of[list(g)].tolist()) <= set(g) for g in held):
        return None
    flows = ring_flows(job, STATS) if flows is None else flows
    return held if alone_counts_hold(job, rep_of, flows) else None


def alone_counts_hold(job: Job, rep_of: np.ndarray, flows: np.ndarray) -> bool:
    """(S1) and (S2) of the module doc for ``flows`` (``(src, dst)`` rows) and the orbits
    ``rep_of``."""
    n = rep_of.size
    if not len(flows):
        return True
    a, b, intra, relay, r = flow_roles(job, flows)
    if r.max() >= n or b.max() >= n:
        return False                      # a relay or destination outside the job
    shape = intra * 2 + relay             # 0 between nodes, 1 relayed, 2 in a node
    gpu = np.concatenate([a, r[relay], b])
    role = np.concatenate([shape * 3, shape[relay] * 3 + 1, shape * 3 + 2])
    real = np.zeros((n, 9), dtype=np.int64)
    np.add.at(real, (gpu, role), 1)
    if not np.all(real == real[0]):       # (S1)
        return False
    kept = np.concatenate([rep_of[a] == a, (rep_of[a] == a)[relay], rep_of[a] == a])
    folded = np.zeros((n, 9), dtype=np.int64)
    np.add.at(folded, (rep_of[gpu[kept]], role[kept]), 1)
    return bool(np.all(folded[np.unique(rep_of)] == real[0]))      # (S2)
