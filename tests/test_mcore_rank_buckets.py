"""Megatron-Core cuts only pipeline rank 0's first model chunk into gradient buckets; every
other rank's and chunk's gradient is one bucket, reduced once its whole backward has ended
(``BucketRule.chunk_bucketed`` / ``whole_share``; docs/calibration.md §5.92). One rule, read
by the simulator's buckets, the estimate and the lower bound."""
from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate, plan_arrays, rank_fields
from strategies.estimate.stage_cost_memo import StageCostMemo
from strategies.framework import PROFILES, get_profile
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

# Llama 3 8B cut to 16 layers, a 2,048-token vocabulary and 256-token sequences, so that the
# data-parallel traffic (not the embedding) decides which rank ends the step
SMALL = replace(model_preset("llama3-8b"), num_layers=16, seq_length=256, vocab_size=2048)
ONE_F_ONE_B = "tp=2,pp=2,dp=8,mbs=1,gbs=16,zero=1,sp=true"
INTERLEAVED = "tp=2,pp=2,dp=8,mbs=1,gbs=32,zero=1,sp=true,schedule=interleaved,vpp=2"


def _job(plan: str, fw="megatron-core"):
    return make_job(SMALL, cluster_preset("dgx-h100", 4), parse_plan(plan), framework=fw)


def _bucketed_everywhere(name: str):
    """The stack with its bucket size on every rank and chunk (the rule switched off)."""
    fw = get_profile(name)
    return replace(fw, dp_bucket=replace(fw.dp_bucket, first_chunk_only=False))


def _dp_time(job, kind: str, nbytes: float, params: float) -> float:
    p = job.plan
    return float(cm.dp_collective_time(kind, nbytes, params, 0.0, p.tp, p.cp, p.dp, 1, 1,
                                       job.cluster))


def test_rule_by_stack_rank_and_chunk():
    """Megatron-Core and NeMo (its DDP): only (rank 0, chunk 0) is bucketed; DualPipe's
    copies and ZeRO-2's per-micro-batch reductions keep their buckets; every other stack
    buckets everything. ``whole_share``: 1/v of a non-first rank where the rule holds."""
    for name, fw in PROFILES.items():
        rule = fw.dp_bucket
        mcore = name in ("megatron-core", "nemo")
        assert rule.first_chunk_only == mcore, name
        for r in range(3):
            for c in range(3):
                assert rule.chunk_bucketed(r, c) == (not mcore or (r == 0 and c == 0))
                assert rule.chunk_bucketed(r, c, mirrored=True)
                assert rule.chunk_bucketed(r, c, zero2=True)
    rule = get_profile("megatron-core").dp_bucket
    pp, v = np.array([1, 2, 4, 4, 4, 4]), np.array([1, 1, 1, 2, 4, 2])
    mirrored = np.array([False] * 5 + [True])
    assert rule.whole_share(pp, v, mirrored, False).tolist() == [0.0, 1.0, 1.0, 0.5, 0.25, 0.0]
    assert rule.whole_share(pp, v, mirrored, True).tolist() == [0.0] * 6
    assert get_profile("torchtitan").dp_bucket.whole_share(pp, v, mirrored, False).tolist() \
        == [0.0] * 6


def _stage(job, rank: int) -> int:
    """Pipeline stage of ``rank`` (pp outermost, the compiler's ``Layout.stage``)."""
    p = job.plan
    return rank // (p.tp * p.cp * p.dp)


def _dp_records(res, job):
    """``{stage: [(label, start, duration)]}`` of one rank per stage: its gradient buckets."""
    out = {}
    for r in sorted({x.rank for x in res.records}):
        s = _stage(job, r)
        if s not in out:
            out[s] = sorted(((x.label, x.start, x.end - x.start) for x in res.by_rank(r)
                             if x.stream == "dp-comm" and " dp bucket" in x.label),
                            key=lambda x: x[1])
    return out


def test_one_bucket_tail_in_closed_form():
    """1F1B, pp 2: rank 1 reduce-scatters its whole stage as one call that starts when its
    last backward ends and lasts ``t_rs(P_1)``; its parameters come back in one all-gather,
    ``t_ag(P_1)``, all of it exposed (one bucket). Rank 0 keeps its 40M buckets. The
    estimate's tail of rank 1 is ``t_rs`` beyond its compute's end ``slack`` before the
    pipeline's, and its gather is on the fill path (§5.194)."""
    j = _job(ONE_F_ONE_B)
    c, res = stage_costs(j), simulate(j, network="contention-free")
    p1 = c.params_by_stage[1]
    t_rs = _dp_time(j, "reduce_scatter", c.grad_bytes, p1)
    t_ag = _dp_time(j, "allgather", c.param_bytes, p1)
    recs = _dp_records(res, j)
    assert len(recs[0]) > 2                           # rank 0: its layers in 40M buckets
    assert len(recs[1]) == 1                          # rank 1: one bucket
    rank1 = next(r for r in sorted({x.rank for x in res.records}) if _stage(j, r) == 1)
    last_bwd = max(x.end for x in res.by_rank(rank1) if x.stream == "compute"
                   and x.kind != "optimizer" and x.label != "step passes")
    _, start, dur = recs[1][0]
    assert start == pytest.approx(last_bwd, rel=1e-12)
    assert dur == pytest.approx(t_rs, rel=1e-12)
    gathers = [x for x in res.by_rank(rank1) if x.stream == "dp-comm" and "AG params" in x.label]
    assert len(gathers) == 1 and gathers[0].end - gathers[0].start == pytest.approx(t_ag,
                                                                                   rel=1e-12)
    # the estimate: rank 1's whole reduce-scatter after its compute, one of the tails whose
    # latest ends the step; its whole gather at its first forward, on the fill path (§5.194:
    # beside rank 0's exposed share, ``tests/test_param_gather_fill.py``'s closed forms)
    a = estimate_arrays(j.model, j.cluster, j.dtype, plan_arrays(j.plan), j.framework, j.system,
                        rank_fields(j, None, StageCostMemo(j)))
    fill = float(a["param_gather_fill_s"])
    assert t_ag < fill < 2 * t_ag
    assert estimate(j).breakdown_s["dp_comm"] - fill >= t_rs - float(a["slack_last_s"]) - 1e-12


@pytest.mark.parametrize("fw", ["megatron-core", "nemo"])
def test_rule_moves_estimate_and_simulation_together_1f1b(fw):
    """1F1B, pp 2: with the rule the estimate meets the contention-free simulation within
    0.4 % (+0.338 % Megatron-Core, +0.352 % NeMo; +0.227 / +0.236 % before each collective
    call paid its own latency, §5.233: the TP terms, 96 calls more under SP, agree on both
    sides, the estimate's pipeline fill takes +0.128 ms of them where the simulation's bubble
    takes +0.095 ms; -0.127 / +0.158 % while the estimate
    priced each kind of rank's buckets as one call, §5.227; §5.194: the simulated program gathers
    each stage's buckets at its first forward, and the forward of the layers whose attention
    is in the last gathered bucket (at least the last layer) runs after the whole gather, on
    both sides). What is left
    (Megatron-Core, +0.124 ms): rank 0's nine reduce-scatter and nine gather calls each pay
    their latency on both sides now (the estimate's ``DpCalls.bucket_calls``, §5.227: it
    priced one call of each, -0.152 ms each, -0.069 ms left then, and the gathers' share
    is partly under the forward); the estimate's window of the last backward leaves out its exposed TP all-gathers
    and the embedding's backward, which the simulated reduction runs beside (+0.089 ms);
    the first forward's TP collectives of the layers before the last bucket run while the
    simulated rank waits for the next gather (+0.137 ms), and its embedding's forward
    before the gathers end (+0.008 ms). Both move up against bucketing everywhere (rank
    1's whole gather is exposed)."""
    on, off = _job(ONE_F_ONE_B, fw), _job(ONE_F_ONE_B, _bucketed_everywhere(fw))
    (e1, s1), (e0, s0) = ((estimate(j).step_time_s,
                           simulate(j, network="contention-free").step_time_s) for j in (on, off))
    assert e1 == pytest.approx(s1, rel=4e-3)
    assert e1 > e0 and s1 > s0


@pytest.mark.parametrize("fw", ["megatron-core", "nemo"])
def test_interleaved_plan_meets_the_contention_free_simulation(fw):
    """Interleaved, pp 2, v 2: each chunk but rank 0's first is one bucket (rank 1: two
    calls, one per chunk; rank 0: chunk 1's one call, then chunk 0's 40M or 128 Mi buckets
    and the embedding). The estimate (chunk by chunk, one call each, §5.14) meets the
    contention-free simulation within 0.3 % (+0.103 % Megatron-Core, +0.272 % NeMo;
    −0.008 / +0.137 % before each collective call paid its own latency, §5.233; 0.4 %
    from §5.194, +0.21 % and +0.36 %, until §5.197 paced the warm-up's forwards with their
    exposed TP collectives: the estimate's delay 7.00 → 6.88 ms against the simulated 6.91
    and 6.88 ms; bucketed everywhere the simulation is slower by the extra calls)."""
    j = _job(INTERLEAVED, fw)
    res = simulate(j, network="contention-free")
    recs = _dp_records(res, j)
    assert len(recs[1]) == 2
    c = stage_costs(j)
    half = (c.params_by_stage[1] - c.head_params) / 2
    assert recs[1][0][2] == pytest.approx(
        _dp_time(j, "reduce_scatter", c.grad_bytes, half + c.head_params), rel=1e-12)
    assert recs[1][1][2] == pytest.approx(_dp_time(j, "reduce_scatter", c.grad_bytes, half),
                                          rel=1e-12)
    assert len(recs[0]) > 2
    assert recs[0][0][2] == pytest.approx(                # rank 0's chunk 1, one call
        _dp_time(j, "reduce_scatter", c.grad_bytes,
                 (c.params_by_stage[0] - c.embedding_params) / 2), rel=1e-12)
    e = estimate(j).step_time_s
    assert e == pytest.approx(res.step_time_s, rel=3e-3)
    off = simulate(_job(INTERLEAVED, _bucketed_everywhere(fw)), network="contention-free")
    assert abs(e / res.step_time_s - 1) <= abs(e / off.step_time_s - 1)


def test_bound_keeps_the_window_and_stays_below_estimate_and_simulation():
    """The lower bound keeps the reduction window under the rule (a tighter floor passed a
    mixed-kind plan's estimate, tests/test_memory_mixed_layouts.py): the same with and without
    it, and below both the estimate and the simulation of the one-bucket job."""
    on, off = _job(ONE_F_ONE_B), _job(ONE_F_ONE_B, _bucketed_everywhere("megatron-core"))
    cols = PlanArrays.of_plan(on.plan)
    b1 = float(step_time_lower_bound(SMALL, on.cluster, "bf16", cols, on.framework))
    b0 = float(step_time_lower_bound(SMALL, on.cluster, "bf16", cols, off.framework))
    assert b1 == b0
    assert b1 <= estimate(on).step_time_s and b1 <= simulate(on).step_time_s
