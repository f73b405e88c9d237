"""ZeRO-2/3's exposed data-parallel traffic: the estimate's one rule
(``strategies.estimate.terms.dp_exposure.sharded_exposed``) against closed forms and the simulation."""
from dataclasses import replace

import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs
from strategies.estimate.terms.dp_exposure import (Z2_BACK, Z2_BUSY, Z2_COOLDOWN, Z2_SPLIT,
                                                   split_tail_exposed, z2_sync_exposed)
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

from tests.norm_barrier_checks import barrier_s

# a 4-layer Llama 3 8B on two GPUs of one node (ZeRO-3's dp = 2)
TWO = replace(cluster_preset("dgx-h100", 1), gpus_per_node=2)


def _llama(seq: int):
    return replace(model_preset("llama3-8b"), num_layers=4, seq_length=seq)


def _z3(seq: int, gbs: int):
    job = make_job(_llama(seq), TWO, parse_plan(f"zero=3,mbs=1,gbs={gbs}"))
    c = stage_costs(job)
    params = c.params_by_stage[0]
    # one call per layer (FSDP's unit), each with the ring's whole latency (§5.26)
    ag = cm.collective_time("allgather", c.param_bytes * params / 4, 2, 1, TWO)
    rs = cm.collective_time("reduce_scatter", c.grad_bytes * params / 4, 2, 1, TWO)
    return job, float(ag), float(rs)


@pytest.mark.parametrize("gbs", [2, 4])
def test_zero3_comm_bound_is_the_streams_total(gbs):
    """Comm >> compute (128 tokens): the data-parallel stream never waits, so the step is
    every micro-batch's forward gather, backward gather and reduce-scatter of each layer (a
    call each, the ring's latency in every one) plus the optimizer, no layer counted twice
    (the estimate used to add one layer's 2·AG + RS)."""
    job, ag, rs = _z3(128, gbs)
    e, s = estimate(job), simulate(job)
    mb = e.num_microbatches
    assert mb * 8 * ag + e.breakdown_s["compute"] < mb * 4 * (2 * ag + rs)   # comm-bound
    # and the gradient norm's all-reduce before the optimizer (§5.202)
    closed = mb * 4 * (2 * ag + rs) + e.breakdown_s["optimizer"] + barrier_s(job)
    assert e.step_time_s == pytest.approx(closed, rel=1e-9)
    assert s.step_time_s == pytest.approx(closed, rel=1e-9)


@pytest.mark.parametrize("gbs", [2, 8])
def test_zero3_compute_bound_exposes_one_layer_per_microbatch(gbs):
    """Compute >> comm (8192 tokens): every forward's first layer waits for its gather behind
    the previous backward's last reduce-scatter, the last reduce-scatter follows the last
    backward: compute + mb·(AG + RS) of one layer (a call each) + optimizer. The simulation
    runs the first gather beside the embedding's forward, so it is below by at most that (1e-3
    relative)."""
    job, ag, rs = _z3(8192, gbs)
    e, s = estimate(job), simulate(job)
    mb = e.num_microbatches
    assert e.breakdown_s["compute"] > mb * 4 * (2 * ag + rs)             # compute-bound indeed
    closed = (e.breakdown_s["compute"] + mb * (ag + rs) + e.breakdown_s["optimizer"]
              + barrier_s(job))   # the gradient norm's all-reduce (§5.202)
    assert e.step_time_s == pytest.approx(closed, rel=1e-9)
    assert s.step_time_s == pytest.approx(closed, rel=1e-3)
    assert s.step_time_s <= closed


MIXTRAL4 = replace(model_preset("mixtral-8x7b"), num_layers=4, seq_length=1024)
LLAMA8 = replace(model_preset("llama3-8b"), num_layers=8, seq_length=2048)
DSV3_8 = replace(model_preset("deepseek-v3"), num_layers=8, first_k_dense_replace=1,
                 num_nextn_predict_layers=0, seq_length=1024)
GRID = [  # (model, cluster, plan, tolerance)
    (MIXTRAL4, "dgx-h100", "ep=1,zero=3,gbs=32", 0.02),
    (MIXTRAL4, "dgx-h100", "ep=4,zero=3,gbs=32", 0.02),
    (MIXTRAL4, "dgx-h100", "tp=2,ep=4,etp=1,zero=3,gbs=32", 0.02),
    # -2.1 % (-1.2 % when the reduce-scatters ran hierarchically; NCCL's flat ring, calibration
    # §3.21, takes the step from 0.43 to 0.30 s): the contention-free simulation is the same
    # 0.300 s and a reduce-scatter alone is exact, so the gap is the schedule's, not the ring's
    (MIXTRAL4, "dgx-h100", "ep=1,zero=2,gbs=64", 0.03),
    # -2.00 % since the attention grid (§5.130) lengthened the compute (-1.98 % before)
    (MIXTRAL4, "dgx-h100", "pp=2,ep=1,zero=2,gbs=64", 0.025),
    # -2.5 % (-1.1 % when the estimate charged 1F1B two messages per round, 18 where the
    # simulation exposes 9 (its step grows by 9 message times when they double), which
    # covered part of a shortfall elsewhere: -2.2 % against the contention-free simulation,
    # ZeRO-1 -2.5 %; docs/calibration.md §5.21)
    (MIXTRAL4, "dgx-h100", "pp=2,ep=4,zero=2,gbs=64", 0.03),
    # -2.2 % against this simulation (flows sharing links), -0.7 % against the contention-free
    # one, whose step is 1.5 % shorter: the reduce-scatters hide under the real chunks'
    # order (+0.6 % / +2.2 % when the tail was the even pipeline's; docs/calibration.md
    # §5.102, ``python experiments/uneven_tail_gaps.py --only "pp4 ep2 dense-first"``)
    (DSV3_8, "hgx-h800", "pp=4,ep=2,zero=2,gbs=32", 0.025),
    (MIXTRAL4, "dgx-h100", "pp=2,ep=1,zero=2,gbs=64,schedule=gpipe", 0.02),
    (MIXTRAL4, "dgx-h100", "pp=2,ep=4,zero=2,gbs=64,schedule=gpipe", 0.02),
    # interleaved: -2.4 % (-1.4 % when the estimate charged two messages per round, which
    # covered part of ZeRO-2's reduce-scatter tail: 0.102 s against 0.123 s simulated; the
    # same plan with ZeRO-1 -0.05 %, docs/calibration.md §5.14)
    (MIXTRAL4, "dgx-h100", "pp=2,ep=1,zero=2,gbs=64,schedule=interleaved,vpp=2", 0.03),
    (MIXTRAL4, "dgx-h100", "pp=2,ep=1,zero=2,gbs=64,schedule=zb-h1", 0.02),
    (MIXTRAL4, "dgx-h100", "pp=2,ep=1,zero=2,gbs=64,schedule=zb-v,vpp=2", 0.02),
    # ZB-H1 with ep 4: the last stage's two trailing W's reduce-scatters queue after its end
    # (``split_tail_exposed``; -3.0 % when only rank 0's last bucket was counted)
    (MIXTRAL4, "dgx-h100", "pp=2,ep=4,zero=2,gbs=64,schedule=zb-h1", 0.02),
    # DualPipe: each pair's mirror all-reduce and each rank's reduce-scatters on its own
    # layers, the step the middle pair's (four MoE layers' experts; rank 0's pair holds the
    # dense first layer): ep 2 +0.2 %, ep 4 -0.6 % (-2.7 / -2.9 % on the even split's mean
    # layer; ``tests/test_rank_params.py``)
    (DSV3_8, "hgx-h800", "pp=4,ep=2,zero=2,schedule=dualpipe,gbs=32", 0.02),
    (DSV3_8, "hgx-h800", "pp=4,ep=4,zero=2,schedule=dualpipe,gbs=32", 0.02),
    # comm-bound 1F1B: the step is rank 1's stream (four MoE layers and the head), +0.6 %
    # (-5.4 % priced on rank 0 with the even split's mean layer)
    (DSV3_8, "hgx-h800", "pp=2,ep=2,zero=2,gbs=32", 0.02),
    # interleaved pp 4: rank 0's last p chunk-0 reduce-scatters (the embedding's gradients)
    # queue behind its back-to-back chunk-0 backwards; -2.3 % (-4.7 % before), the same plan
    # with ZeRO-1 -2.0 % (the pipeline's own)
    (LLAMA8, "dgx-h100", "pp=4,zero=2,gbs=32,schedule=interleaved,vpp=2", 0.03),
    # outside 2 %: -6.3 % (-4.1 % against the simulation with network="contention-free",
    # the rest contention with the expert all-to-all). Rank 0 ends the step with its own
    # optimizer, 42 ms (the dense first layer; 67 ms on the even split's mean layer, which
    # made up for the rest: -3.2 % before); its gradient reduce-scatter (33 ms) can start
    # only when its MoE layer's backward has filled that bucket, so 27 ms are exposed behind
    # the 5 ms dense layer's backward, where the estimate hides it under two mean layers'
    # (26 ms): ZeRO-1 the same, -4.4 % (docs/calibration.md §5.11.1)
    (DSV3_8, "hgx-h800", "pp=4,ep=4,zero=2,gbs=32", 0.07),
    # the 4-stage pipeline's own error (the same plan with ZeRO-1: -2.9 %), -2.8 % here
    (MIXTRAL4, "dgx-h100", "pp=4,ep=1,zero=2,gbs=64", 0.04),
]


@pytest.mark.parametrize("model,cluster,plan,tol", GRID)
def test_zero_estimate_agrees_with_simulation(model, cluster, plan, tol):
    job = make_job(model, cluster_preset(cluster, 2), parse_plan(plan))
    est, sim = estimate(job).step_time_s, simulate(job).step_time_s
    assert abs(est / sim - 1) <= tol, (plan, est, sim)


# ZeRO-2 without overlap: every micro-batch's reduce-scatter stalls its stage's compute after
# the backward (``dp_exposure.z2_sync_exposed``)
SYNC_GRID = [  # (model, cluster, plan, tolerance)
    (LLAMA8, "dgx-h100", "pp=2,zero=2,gbs=32", 0.02),
    (LLAMA8, "dgx-h100", "pp=4,zero=2,gbs=32", 0.02),
    (LLAMA8, "dgx-h100", "pp=2,zero=2,gbs=32,schedule=gpipe", 0.02),
    (MIXTRAL4, "dgx-h100", "pp=2,ep=1,zero=2,gbs=64", 0.02),
    (MIXTRAL4, "dgx-h100", "pp=2,ep=4,zero=2,gbs=64", 0.02),
    (MIXTRAL4, "dgx-h100", "pp=4,ep=1,zero=2,gbs=64", 0.02),
    (MIXTRAL4, "dgx-h100", "pp=2,ep=1,zero=2,gbs=64,schedule=gpipe", 0.02),
    (MIXTRAL4, "dgx-h100", "pp=1,ep=1,zero=2,gbs=64", 0.02),
    (DSV3_8, "hgx-h800", "pp=4,ep=2,zero=2,gbs=32", 0.02),
    (DSV3_8, "hgx-h800", "pp=2,ep=2,zero=2,gbs=32", 0.02),
    (MIXTRAL4, "dgx-h100", "pp=2,ep=1,zero=2,gbs=64,schedule=zb-h1", 0.02),
    (MIXTRAL4, "dgx-h100", "pp=2,ep=1,zero=2,gbs=64,schedule=zb-v,vpp=2", 0.02),
    # ZB-H1: the slowest stage's own end (``Z2_SPLIT``); interleaved: the drain and rank
    # 0's cool-down (``Z2_COOLDOWN``)
    (LLAMA8, "dgx-h100", "pp=2,zero=2,gbs=32,schedule=zb-h1", 0.02),
    (MIXTRAL4, "dgx-h100", "pp=4,ep=1,zero=2,gbs=64,schedule=zb-h1", 0.02),
    (LLAMA8, "dgx-h100", "pp=2,zero=2,gbs=32,schedule=interleaved,vpp=2", 0.02),
    # -2.4 % (-1.7 % when the estimate charged two messages per round: 6.5 ms against 3.6 ms,
    # which covered part of this path's own shortfall; docs/calibration.md §5.14)
    (MIXTRAL4, "dgx-h100", "pp=2,ep=1,zero=2,gbs=64,schedule=interleaved,vpp=2", 0.03),
    (LLAMA8, "dgx-h100", "pp=4,zero=2,gbs=32,schedule=interleaved,vpp=2", 0.02),
    # the slowest stage's own end: its reduce-scatters on its own layers (167 ms per
    # micro-batch, 151 ms on the even split's mean layer: -7.0 %) and its own optimizer
    # after them, -0.2 % (docs/calibration.md §5.11.1)
    (DSV3_8, "hgx-h800", "pp=4,ep=2,zero=2,gbs=32,schedule=zb-h1", 0.02),
]


@pytest.mark.parametrize("model,cluster,plan,tol", SYNC_GRID)
def test_zero2_sync_estimate_agrees_with_simulation(model, cluster, plan, tol):
    job = make_job(model, cluster_preset(cluster, 2),
                   parse_plan(plan + ",overlap_grad_reduce=false"))
    est, sim = estimate(job).step_time_s, simulate(job).step_time_s
    assert abs(est / sim - 1) <= tol, (plan, est, sim)


def _span(m, pp):
    """1F1B's span of balanced stages: (m + pp - 1)·t."""
    return lambda t_max, t_sum: m * t_max + (t_sum - t_max)


@pytest.mark.parametrize("m,pp", [(4, 2), (8, 2), (8, 4), (16, 4)])
def test_zero2_sync_balanced_closed_form(m, pp):
    """Balanced 1F1B, forward t_f, backward t_b, reduce-scatter rs on every stage: the
    gradient's way back gives (m + p - 1)·(t + rs) - t_f, against the slowest stage's
    (m + p - 1)·t + m·rs; exposed = the larger less (m + p - 1)·t."""
    t_f, t_b = 0.010, 0.020
    t = t_f + t_b
    pipe = (m + pp - 1) * t
    for rs in (0.001, 0.005, 0.015, 0.040):
        got = float(z2_sync_exposed(_span(m, pp), pipe, t, t, t, (rs, rs, rs), t_b, m, pp,
                                    Z2_BACK))
        closed = max((m + pp - 1) * (t + rs) - t_f, pipe + m * rs) - pipe
        assert got == pytest.approx(closed, rel=1e-12)
        assert got > m * rs or rs * (pp - 1) <= t_f          # longer than the old m·rs
        # a split backward or interleaved: only the slowest stage's
        busy = float(z2_sync_exposed(_span(m, pp), pipe, t, t, t, (rs, rs, rs), t_b, m, pp,
                                     Z2_BUSY))
        assert busy == pytest.approx(m * rs, rel=1e-12)
    # no pipeline: every micro-batch's reduce-scatter, m·rs
    assert float(z2_sync_exposed(_span(m, 1), m * t, t, t, t, (0.01, 0.01, 0.01), t_b, m, 1,
                                 Z2_BACK)) == pytest.approx(m * 0.01, rel=1e-12)


@pytest.mark.parametrize("m,pp,v", [(4, 2, 2), (8, 2, 2), (8, 4, 2), (16, 4, 4)])
def test_zero2_sync_interleaved_closed_form(m, pp, v):
    """Balanced interleaved 1F1B, ``v`` chunks of forward t_f/v and backward t_b/v per rank,
    each chunk's reduce-scatter rs/v after its backward (rank 0's chunk 0: rs_c0, the
    embedding's gradients too): every stage's cool-down runs its last chunk-0 backwards back
    to back, so the drain is paced by the grown stages, ``m·rs + (p - 1)·rs/v``, and rank
    0's own cool-down by its chunk 0, ``m·rs + (p - 1)·rs_c0``: the larger."""
    t_f, t_b = 0.010, 0.020
    t = t_f + t_b
    span = lambda t_max, t_sum: m * t_max + (t_sum - t_max) / v
    pipe = span(t, pp * t)
    for rs in (0.001, 0.015, 0.040):
        for rs_c0 in (rs / v, 1.5 * rs / v, 2 * rs / v):
            got = float(z2_sync_exposed(span, pipe, t, t, t, (rs, rs, rs), t_b, m, pp,
                                        Z2_COOLDOWN, v, t_f / t, rs_c0))
            closed = m * rs + (pp - 1) * max(rs / v, rs_c0)
            assert got == pytest.approx(closed, rel=1e-12)
            assert got > (m - 1) * rs + rs or pp == 1   # more than the slowest stage's own


@pytest.mark.parametrize("m,pp", [(4, 2), (8, 4)])
def test_zero2_sync_split_closed_form(m, pp):
    """ZB-H1 (the stall follows ``W``), pipeline ``m·t_max + (t_sum - t_max)(1 - 2·w)``:
    balanced, rank 0's m reduce-scatters each after its own ``W``, ``m·rs``; a last stage
    dearer by ``d`` (the LM head) ends after its own fill and busy time, its trailing ``W``
    and reduce-scatters off the drain: ``fill + m·(t_last + rs) - pipe``, ``fill`` the
    other stages' forwards."""
    t_f, t_b, t_w = 0.010, 0.012, 0.008
    t = t_f + t_b + t_w
    w = t_w / t
    span = lambda t_max, t_sum: m * t_max + (t_sum - t_max) * (1 - 2 * w)
    rs = 0.015
    pipe = span(t, pp * t)
    got = float(z2_sync_exposed(span, pipe, t, t, t, (rs, rs, rs), t_b, m, pp, Z2_SPLIT,
                                1, t_f / t, rs, (1, pp - 1, pp)))
    assert got == pytest.approx(m * rs, rel=1e-12)
    d = 0.020
    pipe = span(t + d, pp * t + d)
    got = float(z2_sync_exposed(span, pipe, t, t, t + d, (rs, rs, rs), t_b, m, pp, Z2_SPLIT,
                                1, t_f / t, rs, (1, pp - 1, pp)))
    fill = t_f / t * (pp - 1) * t
    assert got == pytest.approx(max(fill + m * (t + d + rs) - pipe, (m - pp) * rs + rs),
                                rel=1e-12)


@pytest.mark.parametrize("m,pp", [(4, 2), (8, 4)])
def test_zero2_overlapped_split_tail_closed_form(m, pp):
    """ZB-H1 with ZeRO-2 overlapped, the last stage dearer (the LM head) and every stage's
    forward t_f, input gradient t_b, weight gradient t_w: the last stage ends its own work
    at (p - 1)·t_f + m·t_last, then its p trailing W's reduce-scatters queue with only those
    W's to hide under, at least its last bucket: against ZB-H1's pipeline
    m·t_last + (t_sum - t_last)(1 - 2·t_w/t), exposed
    (p - 1)·(t_w - t_b) + max(p·(rs - w), edge) (negative: the drain ends later)."""
    from strategies.schedules import get_schedule
    t_f, t_b, t_w, d = 0.010, 0.012, 0.008, 0.006
    t = t_f + t_b + t_w
    sched = get_schedule("zb-h1")
    trailing = tuple(float(sched.trailing_w_steps(s, pp, m)) for s in (0, pp - 2, pp - 1))
    pipe = float(sched.pipeline_span(m, t + d, pp * t + d, 1, t_w / t, 0.0, pp))
    for rs_k, w_k, edge in ((0.004, 0.009, 0.001), (0.015, 0.009, 0.001),
                            (0.010, 0.009, 0.005)):
        got = float(split_tail_exposed(pipe, t, t, t + d, pp, m, t_f / t,
                                       (0.0, 0.0, rs_k), (t_w, t_w, w_k), trailing,
                                       (0.0, 0.0, edge)))
        closed = (pp - 1) * (t_w - t_b) + max(pp * (rs_k - w_k), edge)
        assert got == pytest.approx(closed, rel=1e-12, abs=1e-15)


def test_dualpipe_zero2_gap_is_contention():
    """DeepSeek-V3 pp 4 ep 2 ZeRO-2 DualPipe: the simulation's reduce-scatters share the NICs
    with the expert all-to-all (contention-free more than 2 % faster), and the estimate, which
    prices the middle pair's tail on its own layers, is within 1 % of the simulation (+0.2 %;
    +3.0 % above the contention-free one: it starts the middle ranks' stream at mb backwards
    before their end, 170 ms, where DualPipe's first backward there is at 112 ms)."""
    job = make_job(DSV3_8, cluster_preset("hgx-h800", 2),
                   parse_plan("pp=4,ep=2,zero=2,schedule=dualpipe,gbs=32"))
    est = estimate(job).step_time_s
    free = simulate(job, network="contention-free").step_time_s
    sim = simulate(job).step_time_s
    assert sim > free * 1.02
    assert est == pytest.approx(sim, rel=1e-2)
