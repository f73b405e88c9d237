"""The MoE layer's own memory-bound passes and host synchronisation (Megatron-Core's token
dispatchers): each permutation pass's seconds are its bytes over the usable HBM bandwidth,
the stage record carries them per dispatcher, and a dense model is unchanged."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strategies.cost import comm as cm
from strategies.cost import attention_time, elementwise_bytes, elementwise_time, ep_dispatch
from strategies.cost import gemm_time, hbm_rate, layer_time, measured, moe_bytes, moe_time
from strategies.cost import qkv_split
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
@pytest.mark.parametrize("tp,etp", [(1, 1), (2, 1), (2, 2), (4, None)])
def test_alltoall_passes_closed_form(ep, tp, etp):
    """alltoall: permute 2R0, the two chunk sorts 4R x etp (ep > 1 and > 1 local expert,
    after the expert-TP gather; etp default tp), unpermute R0 + R0/k; the backward runs the
    inverse permutations, the same bytes."""
    m = model_preset("qwen3-30b-a3b").of_kind("moe")
    R0, k = _R0(m, tp=tp), m.moe_router_topk
    sort = 4 * R0 * (tp if etp is None else etp) if 1 < ep < m.num_experts else 0.0
    f, b = moe_bytes.moe_permute_bytes(m, B, tp, CP, ep, 1.0, 0, etp=etp)
    assert f == pytest.approx(3 * R0 + R0 / k + sort, rel=1e-12)
    assert b == f


@pytest.mark.parametrize("code", [1, 2])
def test_flex_dispatcher_closed_form(code):
    """deepep and hybridep (unfused permute): the received unique tokens (dedup x R) permuted
    into R copies and back; the backward the same bytes."""
    m = model_preset("qwen3-30b-a3b").of_kind("moe")
    R, dd = _R0(m) * 1.25, 0.6
    f, b = moe_bytes.moe_permute_bytes(m, B, TP, CP, 8, 1.25, code, dd)
    assert f == pytest.approx(2 * R * (1 + dd), rel=1e-12)
    assert b == f


@pytest.mark.parametrize("gpu", ["H100-SXM5-80GB", "B200-SXM-180GB", "GB200"])
@pytest.mark.parametrize("code", range(len(DISPATCHERS)))
def test_pass_time_is_bytes_over_hbm(gpu, code):
    """Each pass's seconds equal its bytes over the usable HBM bandwidth to 1e-12."""
    m, g = model_preset("gpt-oss-120b"), gpu_preset(gpu)
    f, b = moe_bytes.moe_permute_bytes(m, B, TP, CP, 8, 1.0, code, 0.7)
    tf, tb = moe_time.moe_permute_time(m, B, TP, CP, 8, g, 1.0, code, 0.7)
    hbm = hbm_rate.usable_hbm(g)
    assert tf == pytest.approx(f / hbm, rel=1e-12, abs=0)
    assert tb == pytest.approx(b / hbm, rel=1e-12, abs=0)


def test_mean_layer_is_moe_share():
    """DeepSeek-V3 (3 dense first layers of 61): the mean layer's passes are the MoE share of
    one MoE layer's."""
    m = model_preset("deepseek-v3")
    share = m.num_moe_layers / m.num_layers
    assert share < 1
    mean = moe_bytes.moe_permute_bytes(m, 1, 1, 1, 32, 1.0, 0)
    one = moe_bytes.moe_permute_bytes(m.of_kind("moe"), 1, 1, 1, 32, 1.0, 0)
    assert mean[0] == pytest.approx(share * one[0], rel=1e-12)
    assert mean[1] == pytest.approx(share * one[1], rel=1e-12)
    fw, g = get_profile(None), gpu_preset("H100-SXM5-80GB")
    for code in range(len(DISPATCHERS)):
        assert moe_time.moe_sync_time(m, fw, g, code) == pytest.approx(
            share * moe_time.moe_sync_time(m.of_kind("moe"), fw, g, code), rel=1e-12)


def test_layer_time_adds_exactly_the_passes_and_the_sync():
    """An MoE layer's forward is its GEMMs, attention, elementwise kernels and launches plus
    the permutation seconds and the sync exactly; the sync is in the forward
    only; two dispatchers' backwards differ by their passes."""
    m, g = model_preset("qwen3-30b-a3b").of_kind("moe"), gpu_preset("B200-SXM-180GB")
    kw = dict(b=B, tp=TP, cp=CP, ep=8, sp=False, flash=True, recompute=0, gpu=g,
              dtype="bf16")
    fw = get_profile(None)
    for code in range(len(DISPATCHERS)):
        t = layer_time.layer_time(m, dispatcher=code, dedup=0.5, **kw)
        pf, pb = moe_time.moe_permute_time(m, B, TP, CP, 8, g, 1.0, code, 0.5)
        assert pf > 0
        # the copies around the fused QKV's split and its backward cat (§5.167)
        qs = qkv_split.qkv_split_time(m, B, TP, CP, True, g, fw)
        gap = measured.launch_gap(g, fw.launch_gap_s)
        base = (gemm_time.gemm_time_fwd(m, B, TP, CP, 8, g, "bf16")
                + attention_time.attention_time_fwd(m, B, TP, CP, True, g, 1.0, fw)[0]
                + elementwise_bytes.elementwise_bytes_fwd(m, B, TP, CP, False)
                / hbm_rate.usable_hbm(g)
                + elementwise_time.launch_time(fw, gpu=g) + qs[0])
        assert t.fwd == pytest.approx(base + pf + moe_time.moe_sync_time(m, fw, g, code), rel=1e-12)
        t0 = layer_time.layer_time(m, dispatcher=code, dedup=0.5,
                                   fw=dataclasses.replace(fw, launch_gap_s=0.0), **kw)
        assert t.bwd - t0.bwd == pytest.approx(2 * elementwise_time.launch_time(fw, gpu=g)
                                               + qkv_split.CAT_KERNELS * gap, rel=1e-9)
        assert t.fwd - t0.fwd == pytest.approx(
            elementwise_time.launch_time(fw, gpu=g) + fw.launch_gap_s
            + qkv_split.qkv_layout_copies(m, TP)[1] * gap, rel=1e-9)
    a2a = layer_time.layer_time(m, dispatcher=0, **kw)
    deep = layer_time.layer_time(m, dispatcher=1, dedup=0.5, **kw)
    assert a2a.bwd - deep.bwd == pytest.approx(
        moe_time.moe_permute_time(m, B, TP, CP, 8, g, 1.0, 0)[1]
        - moe_time.moe_permute_time(m, B, TP, CP, 8, g, 1.0, 1, 0.5)[1], rel=1e-9)


def test_dense_model_unchanged():
    """A dense model has no MoE pass and no dispatcher sync: its layer is the sum of the
    pieces it had before (GEMMs, attention, elementwise, launches) whatever the dispatcher."""
    m, g = model_preset("llama3-8b"), gpu_preset("H100-SXM5-80GB")
    assert moe_bytes.moe_permute_bytes(m, 2, 2, 1, 1, 1.0, 0) == (0.0, 0.0)
    assert moe_time.moe_sync_time(m, get_profile(None), g) == 0.0
    kw = dict(b=2, tp=2, cp=1, ep=1, sp=True, flash=True, recompute=0, gpu=g, dtype="bf16")
    times = [layer_time.layer_time(m, dispatcher=c, **kw) for c in range(len(DISPATCHERS))]
    assert all(t == times[0] for t in times)
    fw = get_profile(None)
    parts = (gemm_time.gemm_time_fwd(m, 2, 2, 1, 1, g, "bf16")
             + attention_time.attention_time_fwd(m, 2, 2, 1, True, g, 1.0, fw)[0]
             + elementwise_bytes.elementwise_bytes_fwd(m, 2, 2, 1, True) / hbm_rate.usable_hbm(g)
             + elementwise_time.launch_time(fw, gpu=g)
             + qkv_split.qkv_split_time(m, 2, 2, 1, True, g, fw)[0])     # §5.167
    assert times[0].fwd == pytest.approx(parts, rel=1e-12)


def test_stage_record_reads_the_plan_dispatcher():
    """The stage-cost record (estimate, bound and simulator read it) prices the plan's
    dispatcher: Qwen3-30B-A3B on 8 GPUs, the alltoall layer is slower than HybridEP's by the
    passes and, in the forward, the host path after its sync, and by its count all-gather
    and probabilities' all-to-alls, less HybridEP's routing-map all-gather; for a dense model
    the dispatcher field changes nothing."""
    m, cl = model_preset("qwen3-30b-a3b"), cluster_preset("dgx-b200", 1)
    runs = {d: stage_costs(make_job(m, cl, Plan(tp=1, pp=1, dp=8, ep=8, mbs=B, gbs=64,
                                                moe_dispatcher=d, moe_imbalance=1.0),
                                           dtype="bf16"))
            for d in ("alltoall", "hybridep")}
    dd = ep_dispatch.ep_dedup(m, 8, 1, cl.gpus_per_node, 2)[0]
    a, h = (moe_time.moe_permute_time(m, B, 1, 1, 8, cl.gpu, 1.0, c, dd) for c in (0, 2))
    pf, pb = a[0] - h[0], a[1] - h[1]
    fw = get_profile(None)
    sync = moe_time.moe_sync_time(m, fw, cl.gpu, 0) - moe_time.moe_sync_time(m, fw, cl.gpu, 2)
    assert sync > 0                      # the alltoall's Python operator after its sync
    # the alltoall's count all-gather and probabilities' all-to-alls (§5.58)
    mf, mb = cm.dispatcher_metadata_time(m, B, 1, 1, 8, 1, 0, cl)
    assert mf > 0 and mb > 0
    # HybridEP's routing-map all-gather before its dispatch (§5.114), forward only
    hf, hb = cm.dispatcher_metadata_time(m, B, 1, 1, 8, 1, 2, cl)
    assert hf > 0 and hb == 0.0
    assert runs["alltoall"].layer_fwd - runs["hybridep"].layer_fwd == pytest.approx(
        pf + sync + mf - hf, rel=1e-9)
    assert runs["alltoall"].layer_bwd - runs["hybridep"].layer_bwd == pytest.approx(
        pb + mb, rel=1e-9)
    d = model_preset("llama3-8b")
    assert np.isclose(moe_bytes.moe_permute_bytes(d, 1, 1, 1, 1)[0], 0.0)
