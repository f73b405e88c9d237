"""The simulator's speed shortcuts compute exactly what the plain forms compute, bit for bit:
max-min rates are the same for the same flows in any slot order (the rate cache keys a set of
flows by its routes), a collective run without a SimPy process and flow timers without
``Timeout`` objects put the same queue entries in the same order (records in order, event
counts), the interval algebra of the metrics equals its plain form, and the ops' constructor
builds the same frozen records."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from simpy.events import NORMAL

import simulator.engine.collectives as collectives
import simulator.network.flow_table as flow_table
import simulator.network.flows as flows
import simulator.network.maxmin as maxmin
from simulator.metrics import (BREAKDOWN_KEYS, COMM_KINDS, COMPUTE_KINDS, PRIORITY, clip,
                               intersect, measure, rank_breakdown, subtract, union)
from simulator.result import Record
from simulator.network.maxmin import max_min_rates
from simulator.program.ops import Collective, Compute, Recv, Send
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


# ----------------------------------------------------------------------- max-min rates
def test_max_min_rates_do_not_depend_on_row_order_or_padding():
    rng = np.random.default_rng(3)
    for _ in range(300):
        nlinks = int(rng.integers(2, 12))
        cap = np.append(rng.choice([1.0, 2.0, 3.0, 1e9, 2.5e11 / 3], size=nlinks), np.inf)
        nflows, hops = int(rng.integers(1, 20)), int(rng.integers(1, 5))
        links = np.full((nflows, hops), nlinks, dtype=np.int64)
        for f in range(nflows):                      # a route of 1..hops links, repeats allowed
            n = int(rng.integers(1, hops + 1))
            links[f, :n] = rng.integers(0, nlinks, size=n)
        links[rng.integers(0, nflows, size=nflows // 2)] = links[0]   # flows on one route
        perm = rng.permutation(nflows)
        wider = np.full((nflows, hops + 2), nlinks, dtype=np.int64)
        wider[:, :hops] = links[perm]
        rates = max_min_rates(cap, links)
        assert np.array_equal(max_min_rates(cap, wider), rates[perm])     # bit for bit


def _max_min_rates_every_link(capacity: np.ndarray, links: np.ndarray) -> list:
    """The plain form, in Python floats: progressive filling over every link of the network
    (``max_min_rates`` works on the links the flows cross only); a link crossed twice by one
    flow counts it twice, the padding link (the last) counts no flow."""
    pad = len(capacity) - 1
    rows = [[int(l) for l in row if l != pad] for row in links]
    spare = [float(c) for c in capacity]
    count = [0] * len(capacity)
    for row in rows:
        for l in row:
            count[l] += 1
    rates, live = [0.0] * len(rows), set(range(len(rows)))
    while live:
        share = [max(s, 0.0) / n if n > 0 else np.inf for s, n in zip(spare, count)]
        level = min(share)
        full = {l for l, x in enumerate(share) if x <= level * (1.0 + maxmin.TIE_RTOL)}
        hit = sorted(f for f in live if full.intersection(rows[f]) or (pad in full and
                                                                       len(rows[f]) < links.shape[1]))
        freed = [0] * len(capacity)
        for f in hit:
            rates[f] = level
            live.discard(f)
            for l in rows[f]:
                freed[l] += 1
        for l, n in enumerate(freed):       # a link's frozen flows' share at once
            if n:
                count[l] -= n
                spare[l] -= n * level
    return rates


def test_max_min_rates_on_the_crossed_links_equal_the_plain_form():
    """Few flows over a large network (rows of 1-10 links: narrower than, as wide as and
    wider than the solver's 8-column words; most links unused, the padding link used or not,
    links crossed twice, levels tied across links): the same rates, bit for bit."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        nlinks = int(rng.integers(2, 400))
        cap = np.append(rng.choice([1.0, 3.0, 1e9, 2.5e11 / 3, 1.2e11, 2.5e10], size=nlinks),
                        np.inf)
        nflows, hops = int(rng.integers(1, 30)), int(rng.integers(1, 11))
        links = np.full((nflows, hops), nlinks, dtype=np.int64)
        pool = rng.integers(0, nlinks, size=int(rng.integers(1, 12)))   # a few links shared
        for f in range(nflows):
            n = int(rng.integers(1, hops + 1))
            links[f, :n] = rng.choice(pool, size=n)
        got, want = max_min_rates(cap, links), _max_min_rates_every_link(cap, links)
        assert got.tolist() == want
    assert max_min_rates(np.array([2.0, np.inf]), np.array([[1], [1]])).tolist() == [np.inf] * 2


# ----------------------------------------------------------------------- queue entries
def _process_run(net, op, phases, then, blocks=None):
    """The collective run as a SimPy process (what ``collectives.CollectiveRun`` replaces; flow by
    flow, so its phases' prepared blocks are not read)."""
    env = net.env

    def proc():
        for lat, fl, nbytes in phases:
            if lat > 0:
                yield env.timeout(op.repeat * lat)
            sizes = nbytes if isinstance(nbytes, tuple) else (nbytes,) * len(fl)
            events = [net.flow(a, b, nb * op.repeat, op.tag) for (a, b), nb in zip(fl, sizes)]
            if events:
                yield env.all_of(events)
        then(None)
    env.process(proc())


def _timeout_call_at(env, delay, callback, priority=NORMAL):
    assert priority == NORMAL
    env.timeout(delay).callbacks.append(callback)


@pytest.mark.parametrize("model,cluster,nodes,plan,fold", [
    ("gpt-1.7b", "dgx-a100", 3, "tp=1,pp=2,dp=12,gbs=48", False),      # a contended dp ring
    ("mixtral-8x7b", "dgx-h100", 2, "tp=2,pp=2,ep=4,gbs=32", False),   # all-to-alls
    ("gpt-1.7b", "dgx-a100", 4, "tp=2,pp=4,gbs=64,schedule=interleaved,vpp=2", True),
])
def test_runs_without_simpy_objects_keep_every_record_in_order(monkeypatch, model, cluster,
                                                                nodes, plan, fold):
    job = make_job(model_preset(model), cluster_preset(cluster, nodes), parse_plan(plan))
    runs = []
    real = collectives.CollectiveRun
    monkeypatch.setattr(collectives, "CollectiveRun", lambda *a: runs.append(1) or real(*a))
    fast = simulate(job, fold=fold)
    assert runs                                       # collectives did run over the flows
    monkeypatch.setattr(collectives, "CollectiveRun", _process_run)
    monkeypatch.setattr(collectives, "call_at", _timeout_call_at)
    monkeypatch.setattr(flows, "call_at", _timeout_call_at)
    monkeypatch.setattr(flow_table, "call_at", _timeout_call_at)
    plain = simulate(job, fold=fold)
    assert fast.records == plain.records              # the same records in the same order
    assert (fast.events, fast.step_time_s) == (plain.events, plain.step_time_s)
    assert fast.metrics == plain.metrics


def test_lanes_keep_simpy_order_beside_urgent_heap_entries(monkeypatch):
    """A collective run's entries due now wait in the engine's lanes, merged with SimPy's heap
    in (time, priority, sequence) order: beside a ``ring_stepwise`` collective (a SimPy
    process, whose start is an urgent heap entry at the same instant) and two contending ring
    collectives started together, every record comes in the order the plain SimPy process
    gives, with the same event count."""
    import simpy

    from simulator.engine.core import run
    from simulator.network.cluster_net import SimNetwork
    from simulator.program.ops import Program
    from topologies.graph import build_graph
    from topologies.routing import route
    graph = build_graph(cluster_preset("dgx-a100", 1))
    group = (0, 1, 2, 3)

    def coll(i, stream, tag, algo, nbytes, deps=()):
        return Collective(i, stream, "allreduce", group, nbytes, algo, tag, "tp",
                          f"{tag} {i}", deps=deps)

    def progs():
        return {r: Program(r, 0, {
            "compute": (Compute(0, "compute", 1e-4 * (r + 1), "forward", "F0"),
                        Compute(1, "compute", 2e-4, "forward", "F1", deps=(3,))),
            "a-comm": (coll(2, "a-comm", "sw", "ring_stepwise", 4e6),
                       coll(5, "a-comm", "tp", "ring", 8e6, deps=(0,))),
            "b-comm": (coll(3, "b-comm", "tp", "ring", 2e6),
                       coll(4, "b-comm", "dp", "ring", 6e6, deps=(0,))),
            "c-comm": (coll(6, "c-comm", "sw2", "ring_stepwise", 1e6),)})
            for r in group}

    def once():
        return run(progs(), net=SimNetwork(simpy.Environment(), graph, route))
    runs = []
    real = collectives.CollectiveRun
    monkeypatch.setattr(collectives, "CollectiveRun", lambda *a: runs.append(1) or real(*a))
    fast = once()
    assert len(runs) >= 2                             # contending rings ran over the flows
    monkeypatch.setattr(collectives, "CollectiveRun", _process_run)
    monkeypatch.setattr(collectives, "call_at", _timeout_call_at)
    monkeypatch.setattr(flows, "call_at", _timeout_call_at)
    monkeypatch.setattr(flow_table, "call_at", _timeout_call_at)
    plain = once()
    assert fast.records == plain.records
    assert (fast.events, fast.step_time_s) == (plain.events, plain.step_time_s)


def test_lanes_merge_with_the_heap_in_simpy_order(monkeypatch):
    """The loop takes a lane's entry (here two collective runs' starts, urgent, due at 0) and
    the heap's in SimPy's order: an urgent heap entry queued before them goes first, a normal
    one at the same instant after them."""
    import simpy
    from simpy.events import URGENT

    from simulator.engine.core import run
    from simulator.network.cluster_net import SimNetwork
    from simulator.program.ops import Program
    from topologies.graph import build_graph
    from topologies.routing import route
    net = SimNetwork(simpy.Environment(), build_graph(cluster_preset("dgx-a100", 1)), route)
    seen = []
    urgent = net.env.event()
    urgent._ok, urgent._value = True, None
    urgent.callbacks.append(lambda _e: seen.append("urgent heap"))
    net.env.schedule(urgent, URGENT)
    net.env.timeout(0).callbacks.append(lambda _e: seen.append("normal heap"))
    resume = collectives.CollectiveRun.resume
    monkeypatch.setattr(collectives.CollectiveRun, "resume",
                        lambda self: seen.append("run") or resume(self))
    progs = {r: Program(r, 0, {  # two channels on the same links: both run over the flows
        s: (Collective(0, s, "allreduce", (0, 1), 8e6, "ring", s, "tp", s),)
        for s in ("a-comm", "b-comm")}) for r in (0, 1)}
    run(progs, net=net)
    assert seen[:4] == ["urgent heap", "run", "run", "normal heap"]


# ----------------------------------------------------------------------- interval algebra
def _union(intervals):
    out = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _intersect(x, y):
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if b > a:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def _subtract(x, y):
    out, j = [], 0
    for a, b in x:
        cur = a
        while j < len(y) and y[j][1] <= cur:
            j += 1
        k = j
        while k < len(y) and y[k][0] < b:
            c, d = y[k]
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def test_interval_algebra_equals_its_plain_form():
    rng = np.random.default_rng(5)

    def intervals(n):        # coarse grid: shared ends, touching and empty intervals
        starts = np.round(rng.uniform(0, 10, n), 1)
        return [(float(a), float(a + d)) for a, d in zip(starts, np.round(rng.uniform(-1, 3, n), 1))]
    for _ in range(300):
        p, q = intervals(int(rng.integers(0, 30))), intervals(int(rng.integers(0, 30)))
        x, y = union(p), union(q)
        assert x == _union(p) and y == _union(q)
        assert intersect(x, y) == _intersect(x, y)
        assert intersect(x, [(0.0, 7.3)]) == _intersect(x, [(0.0, 7.3)])
        assert subtract(x, y) == _subtract(x, y)
        assert measure(x) == sum(b - a for a, b in x)
        assert clip(x, 0.0, 7.3) == _intersect(x, [(0.0, 7.3)])
        assert clip(x, 2.0, 5.0) == _intersect(x, [(2.0, 5.0)])


def _rank_breakdown(records, step):
    """The breakdown in its plain form: every category's union met with the window."""
    window = [(0.0, step)]
    busy, comm = {}, {}
    for r in records:
        if r.stream == "compute":
            busy.setdefault(COMPUTE_KINDS.get(r.kind, "compute"), []).append((r.start, r.end))
        elif r.kind in COMM_KINDS:
            comm.setdefault(COMM_KINDS[r.kind], []).append((r.start + r.wait, r.end))
    out = {k: 0.0 for k in BREAKDOWN_KEYS}
    all_busy = []
    for k, iv in busy.items():
        merged = _intersect(_union(iv), window)
        out[k] += measure(merged)
        all_busy += merged
    all_busy = _union(all_busy)
    idle = _subtract(window, all_busy)
    for k in PRIORITY:
        covered = _intersect(idle, _union(comm.get(k, ())))
        out[k] += measure(covered)
        idle = _subtract(idle, covered)
    out["bubble"] = measure(idle)
    all_comm = _union([iv for k in comm for iv in comm[k]])
    return out, measure(_intersect(_intersect(all_comm, window), all_busy))


def test_rank_breakdown_equals_its_plain_form():
    """The breakdown skips absent categories, clips instead of meeting the window and meets
    the categories' unions with the busy time: the same floats as the plain form, on
    records that pass the step, touch, are empty or wait past their end."""
    rng = np.random.default_rng(7)
    comm = [k for k in COMM_KINDS] + ["other"]
    compute = list(COMPUTE_KINDS) + ["other"]
    for _ in range(300):
        recs = []
        for _ in range(int(rng.integers(0, 40))):
            a = float(np.round(rng.uniform(0, 12), 1))
            b = a + float(np.round(rng.uniform(-0.5, 3), 1))
            if rng.random() < 0.5:
                recs.append(Record(0, "compute", str(rng.choice(compute)), "x", 0, 0, a, b, 0,
                                   0.0, -1, 0.0))
            else:
                w = float(rng.choice([0.0, (b - a) / 3, b - a + 1]))
                recs.append(Record(0, "tp-comm", str(rng.choice(comm)), "x", 0, 0, a, b, 0,
                                   0.0, -1, w))
        step = float(rng.choice([10.0, 0.0, np.round(rng.uniform(0, 12), 1)]))
        assert repr(rank_breakdown(recs, step)) == repr(_rank_breakdown(recs, step))


# ----------------------------------------------------------------------- ops
@pytest.mark.parametrize("cls,args", [
    (Compute, (3, "compute", 1e-3, "forward", "F0.c0")),
    (Send, (4, "pp-comm", 8, 1e6, "fwd")),
    (Recv, (5, "pp-comm", 0, "fwd")),
    (Collective, (6, "tp-comm", "allreduce", (0, 1), 2e6, "ring", "tp", "tp")),
])
def test_ops_build_the_same_frozen_records(cls, args):
    names = [f.name for f in dataclasses.fields(cls)]
    op = cls(*args)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)[len(args):]}
    assert dataclasses.asdict(op) == {**dict(zip(names, args)), **defaults}
    assert cls(**dict(zip(names, args))) == op and hash(cls(*args)) == hash(op)
    assert dataclasses.replace(op, deps=(1, 2)).deps == (1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.id = 0


def test_collective_kind_is_still_checked():
    with pytest.raises(ValueError, match="kind='bogus'"):
        Collective(0, "tp-comm", "bogus", (0, 1), 1.0, "ring", "tp", "tp")
