"""The token dispatcher's device-to-host synchronisation (``moe_time.moe_sync_time``): after
it the GPU's queue is empty, so the GPU waits, serially, for what the host runs up to its
next launch; the alltoall dispatcher runs one Python operator there (``HOST_PATH_S``),
DeepEP and HybridEP launch from the C++ that waited (the launch gap only); nothing under a
full-iteration CUDA graph."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strategies.cost import layer_time, moe_bytes, moe_time
from strategies.estimate import estimate
from strategies.framework import get_profile
from strategies.stacks.profile import LAUNCH_GAP_S
from strategies.job import make_job
from strategies.launch_blocking import HOST_PATH_S, SYNC_LAUNCH_GAP_S
from strategies.plan import DISPATCHERS, Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.gpus import get_gpu

B200 = get_gpu("B200-SXM-180GB")


def test_closed_form_syncs_times_host_path():
    """One MoE layer (no dense share): ``n_syncs x (gap + ops x HOST_PATH_S)`` per dispatcher,
    to floating-point precision; the alltoall's is exactly a synchronous launch boundary."""
    m, fw = model_preset("qwen3-30b-a3b").of_kind("moe"), get_profile(None)
    assert moe_bytes.MOE_SYNCS_FWD == 1
    assert dict(zip(DISPATCHERS, moe_bytes.MOE_SYNC_HOST_OPS)) == {
        "alltoall": 1, "deepep": 0, "hybridep": 0}
    gap = fw.launch_gap_s
    for code, ops in enumerate(moe_bytes.MOE_SYNC_HOST_OPS):
        assert moe_time.moe_sync_time(m, fw, B200, code) == pytest.approx(
            moe_bytes.MOE_SYNCS_FWD * (gap + ops * HOST_PATH_S), rel=1e-12)
    assert gap == LAUNCH_GAP_S
    assert moe_time.moe_sync_time(m, fw, B200, 0) == pytest.approx(SYNC_LAUNCH_GAP_S, rel=1e-12)
    assert moe_time.moe_sync_time(m, fw, B200, 2) == pytest.approx(LAUNCH_GAP_S, rel=1e-12)


def test_mean_layer_share_dense_and_vectorised():
    """DeepSeek-V3's mean layer carries the MoE layers' share; a dense model none; an array
    of dispatcher codes gives each code's scalar."""
    fw = get_profile(None)
    ds = model_preset("deepseek-v3")
    share = ds.num_moe_layers / ds.num_layers
    assert moe_time.moe_sync_time(ds, fw, B200, 0) == pytest.approx(
        share * moe_time.moe_sync_time(ds.of_kind("moe"), fw, B200, 0), rel=1e-12)
    assert moe_time.moe_sync_time(model_preset("llama3-8b"), fw, B200, 0) == 0.0
    m = model_preset("qwen3-30b-a3b")
    codes = np.array([0, 1, 2, 0])
    arr = moe_time.moe_sync_time(m, fw, B200, codes)
    assert arr.shape == (4,)
    for i, c in enumerate(codes):
        assert arr[i] == moe_time.moe_sync_time(m, fw, B200, int(c))


def test_stack_gap_switch():
    """The stack's launch gap is the part every dispatcher pays; the host path is the
    dispatcher's: a stack with no launch gap leaves exactly ``HOST_PATH_S`` on alltoall and
    nothing on HybridEP."""
    m = model_preset("qwen3-30b-a3b").of_kind("moe")
    fw0 = dataclasses.replace(get_profile(None), launch_gap_s=0.0)
    assert moe_time.moe_sync_time(m, fw0, B200, 0) == pytest.approx(HOST_PATH_S, rel=1e-12)
    assert moe_time.moe_sync_time(m, fw0, B200, 2) == 0.0


def test_layer_time_reads_it_and_graph_removes_it():
    """The layer's forward holds the sync of its dispatcher; the backward none. Under a
    full-iteration CUDA graph the dispatchers' forwards differ only by their permutation
    passes (no sync, no host time)."""
    m = model_preset("qwen3-30b-a3b").of_kind("moe")
    fw = get_profile(None)
    kw = dict(b=2, tp=1, cp=1, ep=8, sp=False, flash=True, recompute=0, gpu=B200,
              dtype="bf16")
    for code in range(len(DISPATCHERS)):
        eager = layer_time.layer_time(m, dispatcher=code, **kw)
        graph = layer_time.layer_time(m, dispatcher=code, graphed=True, **kw)
        perm = moe_time.moe_permute_time(m, 2, 1, 1, 8, B200, 1.0, code)
        h_f, h_b = moe_time.moe_host_time(m, b=2, tp=1, cp=1, ep=8, gpu=B200, dtype="bf16",
                                          fw=fw, permute=perm)
        assert eager.fwd - graph.fwd == pytest.approx(
            moe_time.moe_sync_time(m, fw, B200, code) + h_f, rel=1e-9)
        assert eager.bwd - graph.bwd == pytest.approx(h_b, rel=1e-9, abs=1e-15)
    g_a = layer_time.layer_time(m, dispatcher=0, graphed=True, **kw)
    g_h = layer_time.layer_time(m, dispatcher=2, graphed=True, **kw)
    pa = moe_time.moe_permute_time(m, 2, 1, 1, 8, B200, 1.0, 0)[0]
    ph = moe_time.moe_permute_time(m, 2, 1, 1, 8, B200, 1.0, 2)[0]
    assert g_a.fwd - g_h.fwd == pytest.approx(pa - ph, rel=1e-9)


def test_estimate_charges_it_per_moe_layer_and_microbatch():
    """Qwen3-30B-A3B on 8 B200, alltoall against the same plan under a full-iteration graph
    with no host time: the eager step is longer by at least every MoE layer's sync on the
    busiest rank, once per micro-batch."""
    m, cl = model_preset("qwen3-30b-a3b"), cluster_preset("dgx-b200", 1)
    plan = Plan(tp=1, pp=1, dp=8, ep=8, mbs=2, gbs=64, moe_dispatcher="alltoall")
    eager = estimate(make_job(m, cl, plan, dtype="bf16"))
    graph = estimate(make_job(m, cl, dataclasses.replace(plan, cuda_graph=True),
                              dtype="bf16"))
    per = moe_time.moe_sync_time(m.of_kind("moe"), get_profile(None), cl.gpu, 0)
    n_mb = eager.num_microbatches
    assert eager.step_time_s - graph.step_time_s >= 0.999 * per * m.num_moe_layers * n_mb
