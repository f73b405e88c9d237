"""Activation memory of models that mix layer kinds (issue 14 follow-up): a rank stashes its
dense layers at a dense layer's bytes and its MoE layers at an MoE layer's
(``activations.stash_kinds``), not the model's mean layer, in the array model, the scalar
model and the simulator's activation track alike; one-kind models are unchanged."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.output.metrics_json import activation_memory_json
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.layout import stage_content
from strategies.memory import activations as act
from strategies.memory.arrays import rank_memory_arrays
from strategies.memory.scalar import memory_by_stage, memory_components
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

GIB = 2 ** 30
REL = 1e-12


def _v3_job(plan: str):
    """DeepSeek-V3 (3 dense + 58 MoE layers, one MTP module) at s = 4096, tp 1, ep 1 (no
    routed-token correction: the dispatcher's tokens are the table's) on 16 GPUs."""
    return make_job(model_preset("deepseek-v3"), cluster_preset("dgx-h100", 2),
                    parse_plan(plan))


def test_kind_bytes_and_their_mean():
    """One dense and one MoE layer of DeepSeek-V3 at s = 4096, b = 1, tp = 1 stash 1.297 and
    1.680 GiB (no dropout masks: DeepSeek trains without dropout); weighted by their counts
    (3 and 58) they give the mean layer exactly (the table is linear in the MLP width and the
    expert copies)."""
    m = model_preset("deepseek-v3")
    a_d = act.layer_activation_bytes(m.of_kind("dense"), 4096, 1)
    a_m = act.layer_activation_bytes(m.of_kind("moe"), 4096, 1)
    assert a_d / GIB == pytest.approx(1.29736328125, rel=REL)
    assert a_m / GIB == pytest.approx(1.68017578125, rel=REL)
    mean = act.layer_activation_bytes(m, 4096, 1)
    assert mean == pytest.approx((3 * a_d + 58 * a_m) / 61, rel=REL)


@pytest.mark.parametrize("sched", ["1f1b", "gpipe", "zb-h1", "zb-h2"])
@pytest.mark.parametrize("rc", ["none", "selective"])
def test_rank0_stashes_k_dense_plus_j_moe(sched, rc):
    """Rank 0 of DeepSeek-V3 on pp 16 (4 layers first, 1 and the MTP module last) holds
    3 dense layers and 1 MoE layer: its layers' activations are exactly
    ``in_flight·(3·A_dense + A_moe) + pending_w·(3·W_dense + W_moe)``, about 1.07 GiB per
    stashed micro-batch below the mean layer's ``4·A_mean``; the simulator's per-chunk
    bytes and the array model read the same."""
    job = _v3_job(f"tp=1,pp=16,dp=1,mbs=1,gbs=64,schedule={sched},recompute={rc},"
                  "first_stage_layers=4,last_stage_layers=1")
    m, p = job.model, job.plan
    assert dict(stage_content(m, job.layout, 0)) == {"dense": 3, "moe": 1}
    a = {k: act.layer_activation_bytes(m.of_kind(k), 4096, 1, recompute=rc)
         for k in ("dense", "moe")}
    w = {k: act.layer_wgrad_bytes(m.of_kind(k), 4096, 1) for k in ("dense", "moe")}
    n, pw = act.in_flight_microbatches(job, 0), act.pending_weight_grads(job, 0)
    want = n * (3 * a["dense"] + a["moe"]) + pw * (3 * w["dense"] + w["moe"])
    assert memory_components(job, 0)["layers"].activations == pytest.approx(want, rel=REL)
    assert act.chunk_layer_activation_bytes(job, 0) == pytest.approx(
        3 * a["dense"] + a["moe"], rel=REL)
    assert act.activation_bytes_per_chunk(job, 0) == pytest.approx(
        3 * a["dense"] + a["moe"] + act.embedding_activation_bytes(job), rel=REL)
    mean = act.layer_activation_bytes(m, 4096, 1, recompute=rc)
    if rc == "none":
        assert (4 * mean - 3 * a["dense"] - a["moe"]) / GIB == pytest.approx(1.0730, abs=1e-3)
    # an all-MoE middle rank: 4 MoE layers each, above the mean layer
    assert act.chunk_layer_activation_bytes(job, 1) == pytest.approx(4 * a["moe"], rel=REL)
    P = PlanArrays.from_plans([p])
    for r in (0, 1, p.pp - 1):
        assert float(rank_memory_arrays(m, P, r, job.dtype, job.system, job.cluster.gpu)[0]) \
            == pytest.approx(memory_by_stage(job)[r].total, rel=1e-9)


def test_interleaved_chunks_by_kind():
    """Interleaved, 2 chunks: rank 0 holds layer 0 (dense) in chunk 0 and two MoE layers in
    chunk 1; its mean chunk is half of its layers by kind, and each stashed entry is priced
    by its own chunk (``activations.chunk_stash``): Megatron's 46 warm-up forwards (16 of
    chunk 0, 16 of chunk 1, 14 of chunk 0) and the first steady forward leave 31 chunk-0 and
    16 chunk-1 entries, the heaviest moment of the order (the steady state swaps one
    chunk-1 entry for a chunk-0 one at most), so the layers keep ``31·A_0 + 16·A_1``, not
    47 mean chunks (0.86x of them)."""
    job = _v3_job("tp=1,pp=16,dp=1,mbs=1,gbs=64,schedule=interleaved,vpp=2,"
                  "layout=" + "|".join(["Et"] + ["tt"] * 30 + ["mL"]))
    m = job.model
    c0 = dict(stage_content(m, job.layout, 0))
    a = {k: act.layer_activation_bytes(m.of_kind(k), 4096, 1) for k in ("dense", "moe")}
    want = (c0.get("dense", 0) * a["dense"] + c0.get("moe", 0) * a["moe"]) / 2
    assert c0.get("dense", 0) > 0 and c0.get("moe", 0) > 0, c0
    assert act.chunk_layer_activation_bytes(job, 0) == pytest.approx(want, rel=REL)
    assert act.in_flight_microbatches(job, 0) == 47
    assert act.chunk_stash(job, 0)[0] == pytest.approx((a["dense"], 2 * a["moe"]), rel=REL)
    own = 31 * a["dense"] + 16 * 2 * a["moe"]
    assert memory_components(job, 0)["layers"].activations == pytest.approx(own, rel=REL)
    assert own / (47 * want) == pytest.approx(0.86, abs=0.005)


def _ds_small():
    """DeepSeek-V3's layer, 8 layers, the first 2 dense, one MTP module."""
    return replace(model_preset("deepseek-v3"), name="ds-small", num_layers=8,
                   first_k_dense_replace=2, vocab_size=32000, seq_length=1024)


RECOMPUTE = ["none", "selective", "selective,recompute_modules=mlp,layernorm", "op",
             "full", "full,recompute_layers=1", "full,recompute_method=uniform,recompute_layers=1"]
SCHEDULES = [("1f1b", 1), ("gpipe", 1), ("zb-h1", 1), ("zb-h2", 1), ("interleaved", 2),
             ("zb-v", 2), ("dualpipev", 2), ("dualpipe", 1), ("zb-1p", 1), ("zb-2p", 1)]


@pytest.mark.parametrize("sched,v", SCHEDULES)
@pytest.mark.parametrize("rc", RECOMPUTE)
def test_array_equals_scalar_every_recompute(sched, v, rc):
    """Every stage, every schedule and recomputation (op, modules, uniform blocks too):
    ``rank_memory_arrays`` equals ``memory_by_stage`` to 1e-9 on a mixed model."""
    m, cl = _ds_small(), cluster_preset("dgx-h100", 4)
    text = (f"tp=2,pp=4,dp=4,ep=4,mbs=1,gbs=64,schedule={sched},vpp={v},recompute={rc}"
            ).replace(",vpp=1,", ",")
    try:
        job = make_job(m, cl, parse_plan(text))
    except Exception as e:     # a combination the schedule refuses
        pytest.skip(str(e))
    P = PlanArrays.from_plans([job.plan])
    stages = memory_by_stage(job)
    for s, want in enumerate(stages):
        # the job's stash counts for ZB-auto's solved schedule (the array default orders
        # with unit times); the others the array model's own pick, per chunk where the
        # chunks differ (interleaved, V, DualPipe: activations.chunk_stash)
        solved = sched in ("zb-1p", "zb-2p")
        got = float(rank_memory_arrays(
            m, P, s, job.dtype, job.system, cl.gpu,
            in_flight=[act.in_flight_microbatches(job, s)] if solved else None,
            pending_w=[act.pending_weight_grads(job, s)] if solved else None)[0])
        assert got == pytest.approx(want.total, rel=1e-9), (job.plan, s)


@pytest.mark.parametrize("plan", [
    "tp=2,pp=4,dp=2,ep=2,mbs=1,gbs=16,schedule=1f1b",
    "tp=2,pp=4,dp=2,ep=2,mbs=1,gbs=16,schedule=interleaved,vpp=2,recompute=selective",
    "tp=2,pp=4,dp=2,ep=2,mbs=1,gbs=16,schedule=1f1b,recompute=full,recompute_layers=1",
])
def test_simulated_activation_peaks_equal_memory_by_stage(plan):
    """The simulator's activation track (``activation_bytes_per_chunk`` per stashed entry)
    peaks, with the transient, at ``memory_by_stage``'s activations of every simulated rank
    of a mixed model (split-backward, V and DualPipe schedules: tests/test_stash_peak.py)."""
    job = make_job(_ds_small(), cluster_preset("dgx-h100", 2), parse_plan(plan))
    res = simulate(job)
    stages = memory_by_stage(job)
    rows = activation_memory_json(res, job)
    assert rows
    for r in rows:
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=1e-12)
    # the ranks hold different kinds, and their stashes differ accordingly
    per_chunk = {act.chunk_layer_activation_bytes(job, s) for s in range(job.plan.pp)}
    assert len(per_chunk) > 1


def test_one_kind_models_unchanged():
    """A model of one kind: ``stash_kinds`` is the model itself with its layers, so its
    stash is the mean layer's (bit for bit the same computation)."""
    m = model_preset("llama3-70b")
    assert act.stash_kinds(m, {"dense": 20}, 20.0) == [(m, 20.0)]
    assert act.stash_kinds(m, None, np.array([3.0])) [0][0] is m


def test_dualpipe_rank_stashes_the_mean_of_its_two_copies_by_kind():
    """DualPipe rank 0 of an 8-layer model (first 2 dense, one MTP module) on pp 4 holds
    stage 0 (layers 0-1, dense) and stage 3 (layers 6-7 MoE and the MTP module, an MoE
    layer's stash): a micro-batch stashes the mean of the two copies, ``(2·A_dense + 3·A_moe)
    / 2`` (its pending weight gradients likewise), and a middle rank (layers 2-3 and 4-5, all MoE) ``2·A_moe``.
    Each stashed entry and pending ``W`` is priced by its own copy (``activations.chunk_stash``:
    the order's chunk 0 is stage 0, chunk 1 stage 3): direction 0's micro-batches enter at
    rank 0 (up to 4 stashed, dense), direction 1's end there (its last stage: at most one
    stashed, then its ``W`` pending), and the heaviest moment holds 4 dense entries and one
    pending MoE ``W``: ``4·2·A_dense + 3·W_moe``."""
    m = _ds_small()
    job = make_job(m, cluster_preset("dgx-h100", 1),
                   parse_plan("tp=1,pp=4,dp=2,ep=1,mbs=1,gbs=32,schedule=dualpipe"))
    a = {k: act.layer_activation_bytes(m.of_kind(k), 1024, 1) for k in ("dense", "moe")}
    assert act.chunk_layer_activation_bytes(job, 0) == pytest.approx(
        (2 * a["dense"] + 3 * a["moe"]) / 2, rel=REL)
    assert act.chunk_layer_activation_bytes(job, 1) == pytest.approx(2 * a["moe"], rel=REL)
    w = {k: act.layer_wgrad_bytes(m.of_kind(k), 1024, 1) for k in ("dense", "moe")}
    assert act.chunk_stash(job, 0) == (pytest.approx((2 * a["dense"], 3 * a["moe"]), rel=REL),
                                       pytest.approx((2 * w["dense"], 3 * w["moe"]), rel=REL))
    assert act.chunk_stash(job, 1) is None               # both copies all MoE: the mean
    assert (act.in_flight_microbatches(job, 0), act.pending_weight_grads(job, 0)) == (4, 1)
    got = memory_components(job, 0)["layers"].activations
    assert got == pytest.approx(4 * 2 * a["dense"] + 3 * w["moe"], rel=REL)
