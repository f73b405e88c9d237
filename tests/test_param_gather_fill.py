"""The overlapped parameter gathers of a one-chunk pipeline wait at each stage's first forward,
one after another on micro-batch 0's fill path (``stacks.param_gather.gathers_on_fill_path``;
docs/calibration.md §5.194): the estimate and the simulator read the one rule."""
from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs
from strategies.cost.system import SystemConfig
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.scalar import estimate, plan_arrays, rank_fields
from strategies.estimate.stage_cost_memo import StageCostMemo
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.stacks.param_gather import chunk_dispatch_forward, fill_path_stages, \
    gathers_at_schedule_start, gathers_on_fill_path, start_gather_exposed
from topologies.cluster import cluster_preset

# Llama 3 8B cut to 16 layers, a 2,048-token vocabulary and 256-token sequences
SMALL = replace(model_preset("llama3-8b"), num_layers=16, seq_length=256, vocab_size=2048)
#: one bucket a stage: every stage gathers its parameters in one call
ONE_BUCKET = SystemConfig(bucket_params=1e12)


def _job(plan: str, system=ONE_BUCKET, fw="megatron-core", nodes: int = 4):
    return make_job(SMALL, cluster_preset("dgx-h100", nodes), parse_plan(plan), framework=fw,
                    system=system)


def _t_ag_params(job, params: float) -> float:
    """One all-gather of ``params`` parameters over dp, by hand (seconds)."""
    c, p = stage_costs(job), job.plan
    return float(cm.dp_collective_time("allgather", c.param_bytes, params, 0.0, p.tp, p.cp,
                                       p.dp, 1, 1, job.cluster))


def _t_ag(job, stage: int) -> float:
    """One stage's whole parameter all-gather over dp, by hand (seconds)."""
    return _t_ag_params(job, stage_costs(job).params_by_stage[stage])


def _fill(job) -> float:
    a = estimate_arrays(job.model, job.cluster, job.dtype, plan_arrays(job.plan), job.framework,
                        job.system, rank_fields(job, None, StageCostMemo(job)))
    return float(a["param_gather_fill_s"])


def test_rule_table():
    """On the fill path: pp > 1, one chunk a rank, ZeRO-1/2, the overlap on, not DualPipe;
    arrays and scalars alike."""
    pp = np.array([1, 2, 4, 4, 4, 4, 4, 4])
    vpp = np.array([1, 1, 1, 2, 1, 1, 1, 1])
    zero = np.array([1, 1, 2, 1, 3, 0, 1, 1])
    opg = np.array([True] * 6 + [False, True])
    mirrored = np.array([False] * 7 + [True])
    want = [False, True, True, False, False, False, False, False]
    assert gathers_on_fill_path(pp, vpp, zero, opg, mirrored).tolist() == want
    for i in range(len(pp)):
        assert bool(gathers_on_fill_path(int(pp[i]), int(vpp[i]), int(zero[i]), bool(opg[i]),
                                         bool(mirrored[i]))) == want[i]
    assert fill_path_stages(2) == (1, 0, 1) and fill_path_stages(4) == (1, 2, 1)
    assert fill_path_stages(np.array([2, 6]))[1].tolist() == [0, 4]


@pytest.mark.parametrize("plan", ["tp=2,pp=2,dp=8,mbs=1,gbs=16,zero=1,sp=true",
                                  "tp=2,pp=4,dp=4,mbs=1,gbs=16,zero=1,sp=true"])
def test_one_bucket_stages_in_closed_form(plan):
    """One bucket a stage, 1F1B: each stage's whole gather waits at its first forward, so the
    step carries ``sum_s t_ag(P_s)``. The estimate's fill term is that sum (1e-9). The
    simulated program runs each gather there: one call of the stage's parameters, from the
    end of its receive of micro-batch 0 (rank 0: the step's start) to the start of its first
    forward, ``t_ag(P_s)`` long (1e-12); nothing is added after the fact, and the simulated
    step meets the estimate to 1e-9."""
    j = _job(plan)
    want = sum(_t_ag(j, s) for s in range(j.plan.pp))
    assert _fill(j) == pytest.approx(want, rel=1e-9)
    res = simulate(j, network="contention-free")
    for r in res.simulated_ranks:
        mine = res.by_rank(r)
        g = [x for x in mine if x.label.startswith("AG params")]
        assert len(g) == 1
        assert g[0].end - g[0].start == pytest.approx(_t_ag(j, g[0].stage), rel=1e-12)
        recv = [x.end for x in mine if x.label == "recv F0.c0"]
        assert g[0].start == pytest.approx(recv[0] if recv else 0.0, abs=1e-15)
        first = min((x for x in mine if x.stream == "compute"), key=lambda x: x.start)
        assert first.label == "F0.c0" and first.start == pytest.approx(g[0].end, abs=1e-15)
    # the step is the last record's end: no rank's end moved by the gathers after the fact
    assert res.step_time_s == pytest.approx(max(x.end for x in res.records), rel=1e-15)
    assert estimate(j).step_time_s == pytest.approx(res.step_time_s, rel=1e-9)


def test_one_stage_and_no_overlap_keep_the_tail():
    """pp 1 and ``overlap_param_gather`` off: nothing on the fill path (the gather stays in
    the rank's tail, as before); pp 1's estimate meets its simulation to 1e-9, its exposed
    gather the whole call after the optimizer."""
    j = _job("tp=2,pp=1,dp=16,mbs=1,gbs=16,zero=1,sp=true")
    assert _fill(j) == 0.0
    res = simulate(j, network="contention-free")
    own = max(x.end for x in res.records if not x.label.startswith("AG params"))
    assert res.step_time_s - own == pytest.approx(_t_ag(j, 0), rel=1e-9)
    assert estimate(j).step_time_s == pytest.approx(res.step_time_s, rel=1e-9)
    off = _job("tp=2,pp=2,dp=8,mbs=1,gbs=16,zero=1,sp=true,overlap_param_gather=false")
    assert _fill(off) == 0.0


def test_fill_path_with_the_stack_buckets():
    """pp 2 with the stack's buckets (rank 0: 40M buckets, rank 1: one, §5.92): the fill
    term is rank 1's whole gather plus rank 0's exposed share, which is more than nothing
    and less than its whole gather; the estimate's ``dp_comm`` holds it."""
    j = _job("tp=2,pp=2,dp=8,mbs=1,gbs=16,zero=1,sp=true", system=SystemConfig())
    a = estimate_arrays(j.model, j.cluster, j.dtype, plan_arrays(j.plan), j.framework,
                        j.system, rank_fields(j, None, StageCostMemo(j)))
    fill = float(a["param_gather_fill_s"])
    # rank 1's whole gather and rank 0's exposed share (at least its first bucket)
    assert fill > _t_ag(j, 1)
    assert fill < _t_ag(j, 0) + _t_ag(j, 1)
    assert float(a["dp_comm"]) > fill


def test_fill_gather_order_by_hand():
    """``FillGathers`` on a hand-cut chunk (4 layers of 30M, MLP 20M, embedding 50M, 40M
    buckets; backward items MLP3 attn3 MLP2 | attn2 MLP1 attn1 | MLP0 attn0 embedding, so
    buckets 0, 1, 2 close at items 2, 5, 8): the embedding and layer 0 wait for bucket 2
    (gathered first), layer 1 for bucket 1, layer 2 for bucket 1 (its MLP's bucket 0 is
    gathered beside it), the last layer for bucket 0; the forward in pieces of 1, 2, 1
    layers."""
    from types import SimpleNamespace as NS
    from simulator.program.data_parallel import FillGathers
    from simulator.program.grad_buckets import chunk_buckets
    costs = NS(layer_params=30e6, head_params=0.0, embedding_params=50e6, bucket_params=40e6)
    b = chunk_buckets(costs, True, False, 4, params=[30e6] * 4, leads=[20e6] * 4)
    assert b.buckets == ((2, 50e6), (5, 40e6), (8, 80e6))
    f = FillGathers(b, 4)
    assert f.embedding == 2 and f.head is None
    assert f.layers == [(2, 2), (1, 1), (1, 0), (0, 0)]
    assert f.counts() == [1, 2, 1]


def test_interleaved_rule_table():
    """Dispatched by the interleaved schedule: pp > 1, more than one chunk a rank, ZeRO-1/2,
    the overlap on, not DualPipe; the one-chunk rule and this one never both hold. Chunks 0
    and 1 at the start, chunk k >= 2 before the rank's forward ``(k - 1)·group - rank``."""
    # (pp, vpp, zero, overlap, DualPipe) -> dispatched by the schedule
    table = {(1, 2, 1, True, False): False, (2, 2, 1, True, False): True,
             (4, 1, 1, True, False): False, (4, 3, 2, True, False): True,
             (4, 2, 3, True, False): False, (4, 2, 0, True, False): False,
             (4, 2, 1, False, False): False, (4, 2, 1, True, True): False}
    pp, vpp, zero, opg, mirrored = (np.array(col) for col in zip(*table))
    want = list(table.values())
    assert gathers_at_schedule_start(pp, vpp, zero, opg, mirrored).tolist() == want
    assert not np.any(gathers_at_schedule_start(pp, vpp, zero, opg, mirrored)
                      & gathers_on_fill_path(pp, vpp, zero, opg, mirrored))
    assert [chunk_dispatch_forward(k, 4, 1) for k in range(4)] == [-1, -1, 3, 7]
    assert float(start_gather_exposed(np.array([0.5]), 0.75)[0]) == 0.0


def test_interleaved_one_bucket_chunks_in_closed_form():
    """pp 2, two chunks a rank, one bucket a chunk (4,096-token sequences, so every gather
    but rank 0's chunk 0 ends before the forward that needs it): each rank's chunk 0 gather
    runs from the step's start for ``t_ag(P_c0)``, its chunk 1 right after it (one stream),
    to ``t_ag(P_c0) + t_ag(P_c1)``, by hand (1e-12); each chunk's first forward starts after
    its gather (rank 0's chunk 0 at its end). So the step is the same plan's without the
    overlap less its gathers after the optimizer, plus rank 0's chunk 0 gather (1e-9), and
    the estimate's fill term is that gather (1e-9); nothing is added after the fact."""
    model = replace(SMALL, seq_length=4096)

    def job(extra: str = ""):
        plan = "tp=2,pp=2,dp=8,mbs=1,gbs=32,zero=1,sp=true,schedule=interleaved,vpp=2" + extra
        return make_job(model, cluster_preset("dgx-h100", 4), parse_plan(plan),
                        framework="megatron-core", system=ONE_BUCKET)
    j = job()
    c = stage_costs(j)

    def t_ag(params: float) -> float:
        return _t_ag_params(j, params)
    body = 4 * c.layer_params           # 16 layers over 2 stages of 2 chunks
    want = {(0, 0): t_ag(body + c.embedding_params), (0, 1): t_ag(body),
            (1, 0): t_ag(body), (1, 1): t_ag(body + c.head_params)}
    res = simulate(j, network="contention-free")
    for r in res.simulated_ranks:
        mine = res.by_rank(r)
        g = {int(x.label.split()[3]): x for x in mine if x.label.startswith("AG params")}
        assert sorted(g) == [0, 1]
        s = g[0].stage
        assert g[0].start == 0.0
        assert g[0].end == pytest.approx(want[(s, 0)], rel=1e-12)
        assert g[1].start == pytest.approx(g[0].end, abs=1e-15)
        assert g[1].end == pytest.approx(want[(s, 0)] + want[(s, 1)], rel=1e-12)
        for k in (0, 1):
            first = min(x.start for x in mine if x.stream == "compute"
                        and x.label == f"F0.c{k}")
            assert first >= g[k].end - 1e-15
        if s == 0:
            assert min(x.start for x in mine if x.stream == "compute") == \
                pytest.approx(g[0].end, abs=1e-15)
    off = simulate(job(",overlap_param_gather=false"), network="contention-free")
    base = max(x.end for x in off.records if not x.label.startswith("AG params"))
    assert res.step_time_s == pytest.approx(base + want[(0, 0)], rel=1e-9)
    assert res.step_time_s == pytest.approx(max(x.end for x in res.records), rel=1e-15)
    assert _fill(j) == pytest.approx(want[(0, 0)], rel=1e-9)


def test_interleaved_later_chunks_gather_bound_in_closed_form():
    """pp 2, four chunks a rank, one bucket a chunk, tp 1 (a layer's forward is its compute
    alone): every chunk's gather (two layers, 2.13 ms) outlasts the two forwards between its
    dispatch and its first use on rank 0, so rank 0's gathers run back to back from the
    step's start (chunk ``c >= 2`` dispatched before the rank's forward ``(c - 1)·2``, the
    first of chunk ``c - 1``, which waited for the gather before it). In the simulation
    (contention-free): rank 0's chunk ``c`` gather runs ``[S_c, S_{c+1}]``, ``S_c`` the sum
    of its chunks' gathers before ``c`` by hand, and chunk ``c``'s first forward starts at
    ``S_{c+1}`` (1e-12); the last rank's chunks 2 and 3 start no earlier than their dispatch
    forwards (1 and 3) and wait for them. The estimate's fill term is the same chain in
    closed form (§5.197): chunk 0's gather, then each later chunk's less the two forwards
    it hides under, ``A_0 + Σ_{c>=1} (A_c − 2T)``, ``T = warmup_pace`` of the ranks' chunk
    forward and send (``2·layer_fwd + t_p2p``, 0.64 ms), 1e-12. The two steps agree within
    0.1 % (−0.06 %; −2.60 % when the estimate priced chunks 0 and 1 alone)."""
    from strategies.stacks.param_gather import warmup_pace

    j = _job("tp=1,pp=2,dp=8,mbs=1,gbs=32,zero=1,schedule=interleaved,vpp=4", nodes=2)
    c, p = stage_costs(j), j.plan
    body = 2 * c.layer_params                 # 16 layers over 2 stages of 4 chunks
    a = [_t_ag_params(j, body + c.embedding_params)] + [_t_ag_params(j, body)] * 3
    t_p2p = float(cm.p2p_time(c.p2p_bytes, j.cluster, p.tp * p.dp))
    tau = 2 * c.layer_fwd + t_p2p
    pace = float(warmup_pace([tau, tau, tau], 2, 2))
    assert pace == tau and min(a[1:]) > 2 * pace          # gather-bound on rank 0
    res = simulate(j, network="contention-free")
    for r in res.simulated_ranks:
        mine = res.by_rank(r)
        g = {int(x.label.split()[3]): x for x in mine if x.label.startswith("AG params")}
        assert sorted(g) == [0, 1, 2, 3]
        firsts = {k: min(x.start for x in mine if x.stream == "compute"
                         and x.label == f"F0.c{k}") for k in range(4)}
        if g[0].stage == 0:
            for k in range(4):
                assert g[k].start == pytest.approx(sum(a[:k]), rel=1e-12, abs=1e-15)
                assert g[k].end == pytest.approx(sum(a[:k + 1]), rel=1e-12)
                if k:      # (chunk 0's forward starts with the embedding's, before it)
                    assert firsts[k] == pytest.approx(g[k].end, rel=1e-12)
        else:
            for k, n in ((2, "F1.c0"), (3, "F1.c1")):
                at = min(x.start for x in mine if x.stream == "compute" and x.label == n)
                assert g[k].start >= at - 1e-15
                assert firsts[k] >= g[k].end - 1e-15
    fill = _fill(j)
    assert fill == pytest.approx(a[0] + sum(x - 2 * pace for x in a[1:]), rel=1e-12)
    e = estimate(j).step_time_s
    assert e == pytest.approx(res.step_time_s, rel=1e-3), e / res.step_time_s - 1
