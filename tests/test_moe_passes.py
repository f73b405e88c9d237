"""The MoE layer's own memory-bound passes and host synchronisation (Megatron-Core's token
dispatchers): each permutation pass's seconds are its bytes over the usable HBM bandwidth,
the stage record carries them per dispatcher, and a dense model is unchanged."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strategies.cost import compute as ct
from strategies.cost import counts
from strategies.cost.stage import stage_costs
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import DISPATCHERS, Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.gpus import get_gpu as gpu_preset

B, TP, CP = 4, 1, 1


def _R0(m, b=B, tp=TP, cp=CP):
    """The GPU's routed copies in bytes: T/tp tokens x k copies x h x 2 B."""
    return b * m.seq_length / cp / tp * m.moe_router_topk * m.hidden_size * 2


@pytest.mark.parametrize("ep", [1, 8, 128])
def test_alltoall_passes_closed_form(ep):
    """alltoall: permute 2R0, the two chunk sorts 4R (ep > 1 and > 1 local expert),
    unpermute R0 + R0/k; the backward adds one read of R0 for the probabilities' gradient."""
    m = model_preset("qwen3-30b-a3b").of_kind("moe")
    R0, k = _R0(m), m.moe_router_topk
    sort = 4 * R0 if 1 < ep < m.num_experts else 0.0
    f, b = counts.moe_permute_bytes(m, B, TP, CP, ep, 1.0, 0)
    assert f == pytest.approx(3 * R0 + R0 / k + sort, rel=1e-12)
    assert b == pytest.approx(f + R0, rel=1e-12)


def test_deepep_and_hybridep_closed_form():
    """deepep: the received unique tokens (dedup x R) permuted into R copies and back, the
    backward + R; hybridep: fused into the dispatch, no pass."""
    m = model_preset("qwen3-30b-a3b").of_kind("moe")
    R, dd = _R0(m) * 1.25, 0.6
    f, b = counts.moe_permute_bytes(m, B, TP, CP, 8, 1.25, 1, dd)
    assert f == pytest.approx(2 * R * (1 + dd), rel=1e-12)
    assert b == pytest.approx(f + R, rel=1e-12)
    assert counts.moe_permute_bytes(m, B, TP, CP, 8, 1.25, 2, dd) == (0.0, 0.0)


@pytest.mark.parametrize("gpu", ["H100-SXM5-80GB", "B200-SXM-180GB", "GB200"])
@pytest.mark.parametrize("code", range(len(DISPATCHERS)))
def test_pass_time_is_bytes_over_hbm(gpu, code):
    """Each pass's seconds equal its bytes over the usable HBM bandwidth to 1e-12."""
    m, g = model_preset("gpt-oss-120b"), gpu_preset(gpu)
    f, b = counts.moe_permute_bytes(m, B, TP, CP, 8, 1.0, code, 0.7)
    tf, tb = ct.moe_permute_time(m, B, TP, CP, 8, g, 1.0, code, 0.7)
    hbm = ct.usable_hbm(g)
    assert tf == pytest.approx(f / hbm, rel=1e-12, abs=0)
    assert tb == pytest.approx(b / hbm, rel=1e-12, abs=0)


def test_mean_layer_is_moe_share():
    """DeepSeek-V3 (3 dense first layers of 61): the mean layer's passes are the MoE share of
    one MoE layer's."""
    m = model_preset("deepseek-v3")
    share = m.num_moe_layers / m.num_layers
    assert share < 1
    mean = counts.moe_permute_bytes(m, 1, 1, 1, 32, 1.0, 0)
    one = counts.moe_permute_bytes(m.of_kind("moe"), 1, 1, 1, 32, 1.0, 0)
    assert mean[0] == pytest.approx(share * one[0], rel=1e-12)
    assert mean[1] == pytest.approx(share * one[1], rel=1e-12)
    fw, g = get_profile(None), gpu_preset("H100-SXM5-80GB")
    assert ct.moe_sync_time(m, fw, g) == pytest.approx(
        share * counts.MOE_SYNCS_FWD * fw.launch_gap_s, rel=1e-12)


def test_layer_time_adds_exactly_the_passes_and_the_sync():
    """The MoE layer's forward and backward under alltoall exceed HybridEP's (no pass) by the
    permutation seconds exactly; the sync is in both forwards, not in the backward."""
    m, g = model_preset("qwen3-30b-a3b").of_kind("moe"), gpu_preset("B200-SXM-180GB")
    kw = dict(b=B, tp=TP, cp=CP, ep=8, sp=False, flash=True, recompute=0, gpu=g,
              dtype="bf16")
    a2a = ct.layer_time(m, dispatcher=0, **kw)
    hyb = ct.layer_time(m, dispatcher=2, **kw)
    pf, pb = ct.moe_permute_time(m, B, TP, CP, 8, g, 1.0, 0)
    assert pf > 0
    assert a2a.fwd - hyb.fwd == pytest.approx(pf, rel=1e-9)
    assert a2a.bwd - hyb.bwd == pytest.approx(pb, rel=1e-9)
    assert a2a.wgrad == hyb.wgrad
    fw = get_profile(None)
    no_sync = ct.layer_time(m, dispatcher=2, fw=dataclasses.replace(fw, launch_gap_s=0.0),
                            **kw)
    launch0 = ct.launch_time(fw, gpu=g)
    assert hyb.fwd - no_sync.fwd == pytest.approx(launch0 + ct.moe_sync_time(m, fw, g),
                                                  rel=1e-9)
    assert hyb.bwd - no_sync.bwd == pytest.approx(2 * launch0, rel=1e-9)


def test_dense_model_unchanged():
    """A dense model has no MoE pass and no dispatcher sync: its layer is the sum of the
    pieces it had before (GEMMs, attention, elementwise, launches) whatever the dispatcher."""
    m, g = model_preset("llama3-8b"), gpu_preset("H100-SXM5-80GB")
    assert counts.moe_permute_bytes(m, 2, 2, 1, 1, 1.0, 0) == (0.0, 0.0)
    assert ct.moe_sync_time(m, get_profile(None), g) == 0.0
    kw = dict(b=2, tp=2, cp=1, ep=1, sp=True, flash=True, recompute=0, gpu=g, dtype="bf16")
    times = [ct.layer_time(m, dispatcher=c, **kw) for c in range(len(DISPATCHERS))]
    assert all(t == times[0] for t in times)
    fw = get_profile(None)
    parts = (ct.gemm_time_fwd(m, 2, 2, 1, 1, g, "bf16")
             + ct.attention_time_fwd(m, 2, 2, 1, True, g, 1.0, fw)[0]
             + counts.elementwise_bytes_fwd(m, 2, 2, 1, True) / ct.usable_hbm(g)
             + ct.launch_time(fw, gpu=g))
    assert times[0].fwd == pytest.approx(parts, rel=1e-12)


def test_stage_record_reads_the_plan_dispatcher():
    """The stage-cost record (estimate, bound and simulator read it) prices the plan's
    dispatcher: Qwen3-30B-A3B on 8 GPUs, the alltoall layer is slower than HybridEP's by the
    passes; for a dense model the dispatcher field changes nothing."""
    m, cl = model_preset("qwen3-30b-a3b"), cluster_preset("dgx-b200", 1)
    runs = {d: stage_costs(make_job(m, cl, Plan(tp=1, pp=1, dp=8, ep=8, mbs=B, gbs=64,
                                                moe_dispatcher=d), dtype="bf16"))
            for d in ("alltoall", "hybridep")}
    pf, pb = ct.moe_permute_time(m, B, 1, 1, 8, cl.gpu, 1.0, 0)
    assert runs["alltoall"].layer_fwd - runs["hybridep"].layer_fwd == pytest.approx(pf,
                                                                                   rel=1e-9)
    assert runs["alltoall"].layer_bwd - runs["hybridep"].layer_bwd == pytest.approx(pb,
                                                                                   rel=1e-9)
    d = model_preset("llama3-8b")
    assert np.isclose(counts.moe_permute_bytes(d, 1, 1, 1, 1)[0], 0.0)
