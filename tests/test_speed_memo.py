"""Work done once that was done many times: the answers are the ones the repeated work gave,
bit for bit (docs/reports/speed.md; the speed branch's commits give the figures).

- ``estimate`` builds each GPU type's stage-cost record once (``stage_cost_memo.StageCostMemo``);
- ``comm.collective_time`` keeps its answer for scalar arguments on one cluster object, and
  ``catalog.link_terms`` the group's link terms (all but the buffer's bytes);
- ``stage_cost_arrays`` keeps one plan's record (0-d ``PlanArrays``, the scalar estimate's)
  within one estimate (``cost_arrays.kept_records``), which the job's stage costs, its even
  run and its tail's re-run then share;
- ``schedules.analysis.replay_free_comm`` keeps a replay of the same order and seconds;
- ``stage_cost_arrays`` skips the per-tensor ZeRO-3 walk where no plan gathers per tensor;
- the search's simulations derive only the figures they report (``figures_only``).
"""
from __future__ import annotations

import numpy as np
import pytest

import strategies.cost.stage as stage_mod
from simulator.simulate import simulate
from strategies.cost import comm
from strategies.cost.comm import collective, links
from strategies.cost.comm.links import hop_relays
from strategies.cost.stage import stage_cost_arrays, stage_costs
from strategies.cost.stage.array_record import Z3_KEYS
from strategies.estimate.scalar import estimate
from strategies.estimate.stage_cost_memo import StageCostMemo
from strategies.job import make_job
from strategies.plan import Plan, parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


def _dualpipe_uneven():
    """DeepSeek-V3's 61 layers on 16 stages (first stage 1 layer): per-chunk makespans,
    the all-to-all shift, every stage's record read."""
    return make_job(model_preset("deepseek-v3"), cluster_preset("dgx-h100", 256),
                    parse_plan("tp=1,pp=16,ep=64,mbs=1,gbs=4096,schedule=dualpipe,"
                               "first_stage_layers=1"))


def test_estimate_builds_the_stage_cost_record_once_per_gpu_type(monkeypatch):
    job = _dualpipe_uneven()
    want = estimate(job).to_json()
    calls = []
    real = stage_mod.stage_costs

    def counted(j, gpu=None):
        calls.append(gpu)
        return real(j, gpu)
    monkeypatch.setattr(stage_mod, "stage_costs", counted)
    got = estimate(job).to_json()
    assert len(calls) == 1                   # one GPU type; 16 stages, even and real splits
    assert got == want


def test_stage_cost_memo_answers_as_stage_costs():
    job = make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 2),
                   Plan(tp=2, pp=4, dp=2, gbs=32))
    memo = StageCostMemo(job)
    assert memo() is memo(job.cluster.gpu)   # None is the cluster's (slowest) GPU
    assert memo() == stage_costs(job)


@pytest.mark.parametrize("kind,nbytes,n,stride", [
    ("allreduce", 1e9, 8, 1), ("allreduce", 3.5e8, 16, 8), ("allgather", 2e8, 32, 4),
    ("reduce_scatter", 7e7, 12, 8), ("alltoall", 1e8, 16, 1), ("allreduce", 0.0, 64, 8),
])
def test_collective_time_kept_is_a_fresh_calls_answer(kind, nbytes, n, stride):
    cl = cluster_preset("dgx-a100", 8)
    fresh = collective._collective_time(kind, nbytes, n, stride, cl)
    first = comm.collective_time(kind, nbytes, n, stride, cl)
    again = comm.collective_time(kind, nbytes, n, stride, cl)
    assert type(first) is type(fresh) is type(again)
    assert float(first).hex() == float(fresh).hex() == float(again).hex()
    # the vectorised form, one entry per call, is never kept and agrees entry by entry
    arr = comm.collective_time(kind, np.array([nbytes, 2 * nbytes]), n, stride, cl)
    assert arr[0] == fresh
    # another cluster object (a spec replaced) is priced afresh
    other = cluster_preset("dgx-h100", 8)
    assert comm.collective_time(kind, nbytes, n, stride, other) == \
        collective._collective_time(kind, nbytes, n, stride, other)


def test_collective_time_key_tells_values_and_types_apart():
    assert links.exact_key(0.0) != links.exact_key(-0.0)
    assert links.exact_key(8) != links.exact_key(8.0)
    assert links.exact_key(np.int64(8)) != links.exact_key(8)
    assert links.exact_key(np.array([1.0])) is None     # arrays are not kept
    # 0-d arrays (np.where's answers: dp_parts' ranks and strides) are, by dtype and value
    assert links.exact_key(np.array(8)) == links.exact_key(np.array(8))
    assert links.exact_key(np.array(8)) != links.exact_key(np.array(8.0))
    assert links.exact_key(np.array(8.0)) != links.exact_key(8.0)
    assert links.exact_key(np.array(8.0)) != links.exact_key(np.float64(8.0))
    assert links.exact_key(np.array(0.0)) != links.exact_key(np.array(-0.0))
    assert links.exact_key(np.array(8, dtype=np.int32)) != links.exact_key(np.array(8))
    assert links.exact_key(np.array(True)) is None


@pytest.mark.parametrize("kind", ["allreduce", "reduce_scatter", "allgather", "alltoall"])
def test_link_terms_of_arrays_kept_within_a_block_are_a_fresh_calls(kind):
    """Within a ``kept_links`` block a group's link terms over arrays of plans are computed
    once (the same read-only arrays a fresh call gives, bit for bit), told apart by dtype,
    shape and every value; outside a block, and after it ends, nothing is kept."""
    from strategies.cost.comm import catalog
    cl = cluster_preset("dgx-h100", 16)
    n, stride = np.array([8.0, 16.0, 12.0, 2.0]), np.array([1.0, 8.0, 8.0, 64.0])
    assert catalog.link_terms(kind, n, stride, cl) is not catalog.link_terms(kind, n, stride, cl)
    fresh = catalog._link_terms(kind, n, stride, cl, 1.0, 1.0)
    with catalog.kept_links():
        first = catalog.link_terms(kind, n, stride, cl)
        with catalog.kept_links():                    # nested: the same memo
            assert catalog.link_terms(kind, n.copy(), stride.copy(), cl) is first
        assert catalog.link_terms(kind, n, stride, cl) is first
        for a, b in zip(first, fresh):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
            assert np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype
            assert not isinstance(a, np.ndarray) or not a.flags.writeable
        for other in (n.astype(np.int64), n[:3], n[::-1], n.reshape(2, 2)):
            assert catalog.link_terms(kind, other, stride[:other.size].reshape(other.shape),
                                      cl) is not first
        assert catalog.link_terms(kind, n, stride, cluster_preset("dgx-h100", 16)) is not first
    assert not catalog._ARRAY_LINKS
    assert catalog.link_terms(kind, n, stride, cl) is not first


def test_array_key_tells_values_types_and_shapes_apart():
    assert links.array_key(np.array([0.0])) != links.array_key(np.array([-0.0]))
    assert links.array_key(np.array([8.0])) != links.array_key(np.array([8]))
    assert links.array_key(np.array([8.0, 8.0])) != links.array_key(np.array([[8.0, 8.0]]))
    assert links.array_key(np.array([1.0, 2.0])) == links.array_key(np.array([1.0, 2.0]))
    assert links.array_key(2.0) == links.exact_key(2.0)
    assert links.array_key(np.array(["a"])) is None and links.array_key([1.0]) is None


def test_a_cost_changed_between_two_array_estimates_is_read(monkeypatch):
    """The link terms kept within one array estimate (``catalog.kept_links``) are dropped at
    its end: a group's bandwidth patched between two estimates of the same plans (an
    experiment's what-if) moves the second."""
    from strategies.cost.comm import catalog
    from strategies.estimate.analytic import estimate_arrays
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    P = PlanArrays.from_plans([parse_plan("tp=1,pp=1,dp=16,mbs=1,gbs=64,zero=2"),
                               parse_plan("tp=2,pp=1,dp=8,mbs=1,gbs=64,zero=1")])
    base = np.array(estimate_arrays(m, cl, "bf16", P)["step_time_s"])
    orig = catalog.group_bandwidth
    monkeypatch.setattr(catalog, "group_bandwidth",
                        lambda *a: (lambda bw, lat: (bw / 2, lat))(*orig(*a)))
    monkeypatch.setattr(catalog, "_SCALAR_LINKS", {})
    slow = np.array(estimate_arrays(m, cl, "bf16", P)["step_time_s"])
    assert np.all(slow >= base) and np.any(slow > base)
    monkeypatch.setattr(catalog, "group_bandwidth", orig)
    assert np.array(estimate_arrays(m, cl, "bf16", P)["step_time_s"]).tobytes() == base.tobytes()


@pytest.mark.parametrize("kind", ["allreduce", "reduce_scatter", "allgather", "alltoall"])
@pytest.mark.parametrize("n,stride", [(8, 1), (16, 8), (12, 8), (np.array(16), np.array(8)),
                                      (np.float64(32.0), 4)])
def test_link_terms_kept_are_a_fresh_calls_and_price_every_buffer(kind, n, stride):
    """The kept link terms of a group are the computed ones, read-only, and the collective
    priced from them is the vectorised form's entry for every buffer."""
    from strategies.cost.comm import catalog
    cl = cluster_preset("dgx-h100", 4)
    catalog._SCALAR_LINKS.clear()
    fresh = catalog._link_terms(kind, n, stride, cl, 1.0, 1.0)
    first = catalog.link_terms(kind, n, stride, cl)
    assert catalog.link_terms(kind, n, stride, cl) is first
    for a, b in zip(first, fresh):
        assert type(a) is type(b) and np.asarray(a).tobytes() == np.asarray(b).tobytes()
        assert not isinstance(a, np.ndarray) or not a.flags.writeable
    sizes = np.array([0.0, 1e3, 7.5e7, 3e9])
    batch = catalog.catalog_time(kind, sizes, np.full(4, n), np.full(4, stride), cl)
    for i, nb in enumerate(sizes):
        one = catalog.catalog_time(kind, float(nb), n, stride, cl)
        assert float(one).hex() == float(batch[i]).hex()


def test_one_plan_stage_costs_kept_are_a_fresh_calls():
    """Within a ``kept_records`` block one plan's stage-cost record (0-d arrays) is kept per
    argument objects and exact plan: the computed record bit for bit, read-only; another
    plan, cluster object or layout is computed afresh; an array of plans is never kept;
    outside a block nothing is."""
    from strategies.cost.stage import cost_arrays
    job = _dualpipe_uneven()
    P = PlanArrays.of_plan(job.plan)
    outside = stage_cost_arrays(job.model, job.cluster, job.dtype, P, job.framework,
                                job.system)
    assert not cost_arrays._ONE_PLAN                # no block: nothing kept
    with cost_arrays.kept_records():
        _kept_records_checks(job, P)
    assert not cost_arrays._ONE_PLAN               # the block's end drops them


def _kept_records_checks(job, P) -> None:
    from dataclasses import fields, replace

    from strategies.cost.stage import cost_arrays
    kept = stage_cost_arrays(job.model, job.cluster, job.dtype, P, job.framework, job.system)
    fresh = cost_arrays.computed_stage_costs(job.model, job.cluster, job.dtype, P,
                                             job.framework, job.system)
    assert stage_cost_arrays(job.model, job.cluster, job.dtype, PlanArrays.of_plan(job.plan),
                             job.framework, job.system, job.cluster.gpu) is kept
    for f in fields(kept):
        a, b = getattr(kept, f.name), getattr(fresh, f.name)
        if isinstance(a, np.ndarray):
            assert not a.flags.writeable and a.tobytes() == b.tobytes(), f.name
    assert kept.by_kind.keys() == fresh.by_kind.keys() and kept.by_kind
    even = replace(P, first_stage_layers=0.0)      # the layout is part of the key
    assert stage_cost_arrays(job.model, job.cluster, job.dtype, even, job.framework,
                             job.system) is not kept
    other = replace(job.cluster)                   # an equal cluster, another object
    assert stage_cost_arrays(job.model, other, job.dtype, P, job.framework,
                             job.system) is not kept
    many = PlanArrays.from_plans([job.plan])
    n = len(cost_arrays._ONE_PLAN)
    assert stage_cost_arrays(job.model, job.cluster, job.dtype, many, job.framework,
                             job.system).layer_fwd.flags.writeable
    assert len(cost_arrays._ONE_PLAN) == n


def test_estimate_computes_an_even_plans_stage_costs_once(monkeypatch):
    """A pipelined even plan's estimate: the job's stage costs, the even run and the tail's
    re-run read one computed record; the estimate is the one a cold memo gives."""
    from strategies.cost.stage import cost_arrays
    job = make_job(model_preset("llama3-70b"), cluster_preset("dgx-h100", 8),
                   parse_plan("tp=8,pp=4,dp=2,mbs=1,gbs=64,schedule=interleaved,vpp=2"))
    calls = []
    real = cost_arrays.computed_stage_costs

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(cost_arrays, "computed_stage_costs", counted)
    cold = estimate(job).to_json()
    assert len(calls) == 1 and not cost_arrays._ONE_PLAN
    assert estimate(job).to_json() == cold and len(calls) == 2   # each estimate its own


def test_a_cost_changed_between_two_estimates_is_read(monkeypatch):
    """The kept record lives for one estimate: a cost function patched between two estimates
    of the same job objects (as experiments' what-ifs and tests' monkeypatches do)
    moves the second (the embedding's forward, 1 ms more)."""
    from strategies.cost import embedding_head_time as eht
    job = make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1),
                   parse_plan("tp=2,pp=2,dp=2,mbs=1,gbs=16"))
    base = estimate(job).step_time_s
    orig = eht.embedding_time
    monkeypatch.setattr(eht, "embedding_time", lambda *a: 1e-3 + orig(*a))
    assert estimate(job).step_time_s > base
    monkeypatch.setattr(eht, "embedding_time", orig)
    assert estimate(job).step_time_s == base


@pytest.mark.parametrize("n,stride", [(np.array(16), np.array(8)), (np.array(16.0), 8),
                                      (np.array(4), np.array(1.0))])
def test_collective_time_of_0d_arrays_is_the_fresh_answer(n, stride):
    cl = cluster_preset("dgx-h100", 4)
    for kind in ("allreduce", "reduce_scatter", "allgather", "alltoall"):
        first = comm.collective_time(kind, 3e8, n, stride, cl)
        again = comm.collective_time(kind, 3e8, n, stride, cl)
        fresh = collective._collective_time(kind, 3e8, n, stride, cl)
        assert again is first                        # kept
        assert type(first) is type(fresh) and first == fresh


def test_zero3_columns_without_a_per_tensor_plan_are_the_walks_zeros():
    """A batch that mixes a per-tensor ZeRO-3 plan with others gives each plan what it gives
    alone: the skipped walk (no per-tensor plan) and the walk masked by plan agree."""
    m, cl = model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 4)
    z3 = Plan(tp=1, pp=1, dp=32, mbs=1, gbs=64, zero=3, recompute="full", flash_attn=False,
              tp_comm_overlap=False)
    z1 = Plan(tp=1, pp=1, dp=32, mbs=1, gbs=64, zero=1, recompute="full", flash_attn=False,
              tp_comm_overlap=False)
    both = stage_cost_arrays(m, cl, "bf16", PlanArrays.from_plans([z3, z1]),
                             "megatron-deepspeed")
    alone = stage_cost_arrays(m, cl, "bf16", PlanArrays.from_plans([z1]), "megatron-deepspeed")
    for k in Z3_KEYS:
        col = getattr(both, f"z3_{k}")
        assert col[0] > 0 and col[1] == 0.0
        assert getattr(alone, f"z3_{k}").shape == (1,)
        assert getattr(alone, f"z3_{k}")[0] == col[1]


@pytest.mark.parametrize("plan", ["tp=2,pp=2,gbs=64,schedule=interleaved,vpp=2",
                                  "tp=2,pp=2,ep=4,gbs=32", "tp=2,pp=2,gbs=64,flushes=2"])
def test_figures_only_is_the_full_metrics_figures(plan):
    model = "mixtral-8x7b" if "ep=" in plan else "gpt-1.7b"
    job = make_job(model_preset(model), cluster_preset("dgx-h100", 2), parse_plan(plan))
    full, light = simulate(job), simulate(job, figures_only=True)
    assert light.step_time_s == full.step_time_s and light.events == full.events
    assert light.records == full.records
    for k, v in light.metrics.items():
        assert full.metrics[k] == v, k
    assert "activation_memory" in full.metrics and "activation_memory" not in light.metrics


@pytest.mark.parametrize("schedule,pp,m,vpp", [("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2),
                                               ("zb-v", 4, 8, 2), ("dualpipe", 4, 8, 1)])
def test_free_comm_order_kept_is_the_order_worked_out_afresh(schedule, pp, m, vpp):
    """``free_comm_ranks`` on the kept order gives what it gives on a freshly built one, for
    other times too (the order holds no times)."""
    from strategies.schedules import analysis
    times = [(1.0, 2.0, 0.5), (1.3, 2.9, 0.7)]
    analysis.free_comm_order.cache_clear()
    fresh = [analysis.free_comm_ranks(schedule, pp, m, vpp, f, b, None, w) for f, b, w in times[:1]]
    assert analysis.free_comm_order.cache_info().currsize == 1
    kept = [analysis.free_comm_ranks(schedule, pp, m, vpp, f, b, None, w) for f, b, w in times]
    assert kept[0] == fresh[0]
    analysis.free_comm_order.cache_clear()
    assert analysis.free_comm_ranks(schedule, pp, m, vpp, *times[1][:2], None, times[1][2]) \
        == kept[1]


@pytest.mark.parametrize("schedule,pp,m,vpp", [("interleaved", 4, 8, 2), ("zb-v", 4, 8, 2),
                                               ("dualpipe", 4, 8, 1), ("1f1b", 3, 6, 1)])
def test_free_comm_replay_is_max_over_the_predecessors_bit_for_bit(schedule, pp, m, vpp):
    """``replay_free_comm`` (its per-order event lists and the two-predecessor max) gives
    what ``max`` over each event's predecessors gives, ties of 0.0 and -0.0 included."""
    from strategies.schedules import get_schedule
    from strategies.schedules.analysis import free_comm_order, replay_free_comm
    order = free_comm_order(get_schedule(schedule), pp, m, vpp)
    rng = np.random.default_rng(7)
    secs = {sig: float(rng.choice([0.0, -0.0, 0.5, 1.0, rng.random()]))
            for sig in order.sigs}
    got = replay_free_comm(order, pp, lambda r, g: secs[(r, g)])
    dur = [secs[sig] for sig in order.sigs]
    free, first, busy = [0.0] * pp, [None] * pp, [0.0] * pp
    ends = [0.0] * (len(order.rank) + 1)
    for e, (r, k, ps) in enumerate(zip(order.rank.tolist(), order.sig.tolist(),
                                       order.preds.tolist())):
        start = max([ends[q] for q in ps])
        first[r] = start if first[r] is None else first[r]
        free[r] = start + dur[k]
        busy[r] += free[r] - start
        ends[e] = free[r]
    want = (first, free, busy)
    assert [[x.hex() for x in v] for v in got] == [[x.hex() for x in v] for v in want]


def test_free_comm_replay_kept_is_a_fresh_replays():
    """A replay of the same order and exact seconds is kept: the fresh answer's values and
    types, in new lists each time; other seconds (-0.0 against 0.0, a numpy float against a
    float) or seconds that are not floats replay afresh."""
    from strategies.schedules import analysis, get_schedule
    order = analysis.free_comm_order(get_schedule("interleaved"), 4, 8, 2)
    secs = {sig: 0.25 + 0.125 * i for i, sig in enumerate(order.sigs)}
    analysis._REPLAYS.clear()
    fresh = analysis._replay(order, 4, [secs[s] for s in order.sigs])
    first = analysis.replay_free_comm(order, 4, lambda r, g: secs[(r, g)])
    again = analysis.replay_free_comm(order, 4, lambda r, g: secs[(r, g)])
    assert len(analysis._REPLAYS) == 1
    for a, b, c in zip(first, again, fresh):
        assert a == b == c and a is not b and type(a) is list
        assert [type(x) for x in b] == [type(x) for x in c]
    again[1][0] = -1.0                               # a caller's change stays its own
    assert analysis.replay_free_comm(order, 4, lambda r, g: secs[(r, g)]) == fresh
    np_secs = analysis.replay_free_comm(order, 4, lambda r, g: np.float64(secs[(r, g)]))
    assert len(analysis._REPLAYS) == 2 and type(np_secs[1][0]) is np.float64
    zero = {s: 0.0 for s in order.sigs}
    neg = {s: -0.0 for s in order.sigs}
    a = analysis.replay_free_comm(order, 4, lambda r, g: zero[(r, g)])
    b = analysis.replay_free_comm(order, 4, lambda r, g: neg[(r, g)])
    assert [x.hex() for x in b[1]] == [x.hex() for x in analysis._replay(
        order, 4, [-0.0] * len(order.sigs))[1]]
    assert len(analysis._REPLAYS) == 4 and a[1] == b[1]
    arr = analysis.replay_free_comm(order, 4, lambda r, g: np.asarray(secs[(r, g)]))
    assert len(analysis._REPLAYS) == 4 and arr[1] == fresh[1]


@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-a100"])
def test_hop_relays_kept_for_one_hop_is_the_fresh_answer(preset):
    """``hop_relays`` of 0-d offsets is kept per cluster object; the kept answer has the
    fresh answer's type (a numpy bool) and value, and equals the vectorised one."""
    cl = cluster_preset(preset, 4)
    offs = [(s, -(k - 1) * s) for s in (1, 2, 4, 8) for k in (1, 2, 4)]
    batch = hop_relays(cl, (np.array([a for a, _ in offs]),
                                  np.array([b for _, b in offs])))
    for i, o in enumerate(offs):
        links._SCALAR_RELAYS.clear()
        first = hop_relays(cl, o)
        again = hop_relays(cl, o)
        assert type(first) is type(again) and np.shape(first) == ()
        assert bool(first) == bool(again) == bool(batch[i])


@pytest.mark.parametrize("nics,topology", [(8, "rail_fat_tree"), (4, "rail_fat_tree"),
                                           (3, "rail_only"), (2, "fat_tree")])
def test_hop_relays_by_residue_equal_the_gpu_by_plan_form(nics, topology):
    """``hop_relays`` looks each offset's answer up by its residue mod the node: the
    same answer as checking every source GPU of every plan (``routing.relays``), for negative
    and large offsets, one or two offset arrays, 0-d offsets included."""
    from dataclasses import replace
    from topologies.routing import relays
    cl = replace(cluster_preset("dgx-h100", 4), nics_per_node=nics,
                 inter_node_topology=topology)
    G, rails = cl.gpus_per_node, min(nics, cl.gpus_per_node)
    rng = np.random.default_rng(5)
    a, b = rng.integers(-40, 40, size=200), rng.integers(-3 * G, 5 * G, size=200)
    local = np.arange(G)[:, None]

    def plain(*offs):
        return np.logical_or.reduce([np.any(relays(topology, rails, local,
                                                   np.mod(local + o, G)), axis=0)
                                     for o in offs])
    assert np.array_equal(hop_relays(cl, (a,)), plain(a))
    assert np.array_equal(hop_relays(cl, (a, b)), plain(a, b))
    for o in (0, 3, -5, 17):
        links._SCALAR_RELAYS.clear()
        got = hop_relays(cl, (np.int64(o),))
        assert np.shape(got) == () and bool(got) == bool(plain(np.array([o]))[0])


def test_strided_layout_kept_answers_are_the_fresh_ones():
    """``select.strided_layout`` keeps its answers by its arguments' bytes: a repeated call
    gives the computed answer bit for bit (arrays and 0-d alike, the same types), and an
    answer the caller writes to does not change the kept one."""
    from strategies.collectives import select
    rng = np.random.default_rng(2)
    n = rng.choice([1, 2, 4, 8, 16, 32], size=500).astype(float)
    stride = rng.choice([1, 2, 4, 8, 64, 128], size=500)
    for args in ((n, stride, 8), (4, 2, 8), (16.0, 8, 4), (n, 16, 8)):
        select._LAYOUTS.clear()
        fresh = select._strided_layout(np.asarray(args[0], dtype=float),
                                       np.asarray(args[1], dtype=float), args[2])
        first = select.strided_layout(*args)
        first[1][...] = -1.0                          # the caller's copy, written to
        again = select.strided_layout(*args)
        for a, b in zip(fresh, again):
            assert type(a) is type(b) and np.asarray(a).tobytes() == np.asarray(b).tobytes()


@pytest.mark.parametrize("codes", [np.array(3), np.array([2]), np.array([1, 1, 1]),
                                   np.array([[4, 4], [4, 4]]), np.array([3, 1, 3, 0]),
                                   np.array([], dtype=np.int64), np.array([5, 5, 6])])
def test_present_codes_are_np_uniques(codes):
    """The schedule codes a plan array holds: ``np.unique``'s values and dtype, whether read
    from one code (a plan, a plan's stages) or sorted."""
    from strategies.schedules.registry import present_codes
    got, want = present_codes(codes.astype(np.int64)), np.unique(codes.astype(np.int64))
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
