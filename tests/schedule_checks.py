"""Checks shared by the tests of the schedules that split the backward (ZB-H2, ZB-V,
DualPipe, DualPipeV): the order of every rank is a valid dependency order; the balanced
costs their closed forms are checked on."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from strategies.cost.stage import stage_costs
from strategies.schedules import get_schedule
from strategies.schedules.analysis import free_comm_ranks


def assert_valid_order(name: str, p: int, m: int, vpp: int) -> None:
    """Every ``(micro-batch, position)`` runs ``F``, ``B``, ``W`` once each, on the rank and
    chunk the placement gives, ``F`` before ``B`` before ``W`` on that rank; a forward at a
    position runs after the forward at the position before it (and ``B`` after the ``B`` at
    the position after it) when both are on one rank; and all ranks together run to the end
    (no deadlock: the free-communication simulation waits on every cross-rank dependency)."""
    sched = get_schedule(name)
    n = sched.num_virtual_stages(p, vpp)
    seen: Counter = Counter()
    for r in range(p):
        steps = sched.steps(r, p, m, vpp)
        at = {}
        for k, s in enumerate(steps):
            pos = sched.virtual_stage(r, s.chunk, p, vpp, s.microbatch)
            assert sched.rank_chunk(pos, p, vpp, s.microbatch) == (r, s.chunk)
            at[s.kind, s.microbatch, pos] = k
            seen[s.kind, s.microbatch, pos] += 1
        for (kind, i, pos), k in at.items():
            if kind == "B":
                assert at["F", i, pos] < k
            if kind == "W":
                assert at["B", i, pos] < k
            if kind == "F" and ("F", i, pos - 1) in at:
                assert at["F", i, pos - 1] < k
            if kind == "B" and ("B", i, pos + 1) in at:
                assert at["B", i, pos + 1] < k
    assert seen == Counter({(k, i, pos): 1 for k in "FBW" for i in range(m)
                            for pos in range(n)})
    free_comm_ranks(name, p, m, vpp, 1.0, 2.0, t_w=1.0)     # raises on deadlock


def assert_exchanges_pair_up(name: str, p: int, m: int, vpp: int) -> None:
    """``actions`` keeps the steps in order; every message one rank sends, its peer receives,
    none goes to the sender itself (the turn of a V is local), and no exchange falls inside
    an overlapped group."""
    from strategies.schedules import Step
    sched = get_schedule(name)
    sent, received = Counter(), Counter()
    for r in range(p):
        acts = sched.actions(r, p, m, vpp)
        assert [a for a in acts if isinstance(a, Step)] == sched.steps(r, p, m, vpp)
        for prev, a in zip(acts, acts[1:]):
            if isinstance(prev, Step) and prev.overlap:
                assert isinstance(a, Step)
        for a in acts:
            if isinstance(a, Step):
                continue
            for d, i, c in a.sends:
                peer = sched.peer(r, c, i, p, vpp, d, True)
                assert peer != r
                sent[d, i, r, peer] += 1
            for d, i, c in a.recvs:
                peer = sched.peer(r, c, i, p, vpp, d, False)
                assert peer != r
                received[d, i, peer, r] += 1
    assert sent == received and all(v == 1 for v in sent.values())


def balanced_costs(job, region: str = ""):
    """The job's costs without the embedding, the LM head, the per-step passes and the
    optimizer; ``region``
    ``"fb"``: the input gradient of a layer as long as its forward (``T_F = T_B``, ``W`` and
    recomputation kept);
    ``"fbw"``: the weight gradient too (``T_F = T_B = T_W``)."""
    c = replace(stage_costs(job), embedding_fwd=0.0, embedding_bwd=0.0, embedding_wgrad=0.0,
                head_fwd=0.0, head_bwd=0.0, head_wgrad=0.0,
                optimizer_by_stage=(0.0,) * job.plan.pp, passes_by_stage=(0.0,) * job.plan.pp)
    if region == "fbw":
        c = replace(c, layer_wgrad=c.layer_fwd)
    if region:
        c = replace(c, layer_bwd=c.layer_fwd - c.layer_recompute + c.layer_wgrad)
    return c


def balanced_free_comm(job):
    """The full simulator with free communication on ``job``'s ``balanced_costs`` (one chunk a
    stage): its result, the costs, ``m`` and a stage's ``t_f``, whole backward ``t_b``
    (``B + W``, recomputation included) and weight gradient ``t_w``, with ``t_w`` checked
    positive and no longer than the forward or ``B``."""
    from simulator.simulate import simulate
    costs = balanced_costs(job)
    res = simulate(job, free_comm=True, costs=costs)
    m, L = job.num_microbatches, job.model.num_layers // job.plan.pp
    t_f, t_w = L * costs.layer_fwd, L * costs.layer_wgrad
    t_b = L * (costs.layer_bwd + costs.layer_recompute)
    assert 0 < t_w <= min(t_f, t_b - t_w)
    return res, costs, m, t_f, t_b, t_w
