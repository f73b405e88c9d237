"""Host time of the MoE expert path (``moe_time.moe_host_time``) and the full-iteration CUDA
graph (plan ``cuda_graph``): after the dispatcher's synchronisation the GPU waits for the
host where the host's seconds for the experts exceed the GPU's for the same kernels; a graph
replays the step with none of it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strategies.cost import gemm_shapes, gemm_time, layer_time, moe_bytes, moe_time
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.framework import get_profile
from strategies.stacks.rules import plan_violations
from strategies.job import make_job
from strategies.stacks.profile import LAUNCH_GAP_S
from strategies.launch_blocking import HOST_PATH_S, SYNC_LAUNCH_GAP_S
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.gpus import get_gpu

H100 = get_gpu("H100-SXM5-80GB")


def _routed(m, b, ep):
    return [g for part, g in gemm_shapes.layer_gemm_parts(m, b, 1, 1, ep, "moe")
            if part == "routed_mlp" and g[4] is not None]


def _kw(b, ep, **extra):
    return dict(b=b, tp=1, cp=1, ep=ep, gpu=H100, dtype="bf16", **extra)


def test_host_bound_closed_form():
    """Qwen3-30B-A3B at ep 1 (128 local experts of 256 rows at mbs 1): the host's
    ``128 x EXPERT_HOST_S`` exceeds the GPU's expert GEMMs, so each pass exposes exactly
    their difference (forward: the GEMMs; backward: data and weight gradients)."""
    m = model_preset("qwen3-30b-a3b").of_kind("moe")
    f, b = moe_time.moe_host_time(m, **_kw(1, 1))
    # the default stack's launches
    sh = [gemm_time.expert_fixed_share(m, 1)] * len(_routed(m, 1, 1))
    g_f = gemm_time.gemms_time_fwd(_routed(m, 1, 1), 1, H100, "bf16", shares=sh)
    g_b = gemm_time.gemms_time_bwd_split(_routed(m, 1, 1), 1, H100, "bf16", shares=sh)[0]
    h_f, h_b = 128 * moe_time.EXPERT_HOST_S[0], 128 * moe_time.EXPERT_HOST_S[1]
    assert h_f > g_f and h_b > g_b           # the host-bound regime
    assert f == pytest.approx(h_f - g_f, rel=1e-12)
    assert b == pytest.approx(h_b - g_b, rel=1e-12)


def test_gpu_bound_is_zero():
    """DeepSeek-V3 at ep 64 (4 local experts, 4 x 8,192 rows at mbs 4): the GPU's expert
    GEMMs outlast the host's 4 x EXPERT_HOST_S, nothing is exposed."""
    m = model_preset("deepseek-v3").of_kind("moe")
    h_f = 4 * moe_time.EXPERT_HOST_S[0]
    assert gemm_time.gemms_time_fwd(_routed(m, 4, 64), 1, H100, "bf16") > h_f
    assert moe_time.moe_host_time(m, **_kw(4, 64)) == (0.0, 0.0)


def test_bias_path_host_operators_and_mean_layer_share():
    """gpt-oss-120b (expert biases): the host also runs Megatron-Core's per-expert bias loop,
    one ``HOST_PATH_S`` per operator (``expert_bias_kernels``); the mean layer of DeepSeek-V3
    (3 dense first layers) is the MoE share of one MoE layer's exposure."""
    m = model_preset("gpt-oss-120b").of_kind("moe")
    f, b = moe_time.moe_host_time(m, **_kw(1, 1))
    kf, kb = moe_bytes.expert_bias_kernels(m, 1)
    # the default stack's launches
    sh = [gemm_time.expert_fixed_share(m, 1)] * len(_routed(m, 1, 1))
    g_f = gemm_time.gemms_time_fwd(_routed(m, 1, 1), 1, H100, "bf16", shares=sh)
    e = m.num_experts
    assert f == pytest.approx(max(e * moe_time.EXPERT_HOST_S[0] + kf * HOST_PATH_S - g_f, 0.0),
                              rel=1e-12)
    assert HOST_PATH_S == pytest.approx(SYNC_LAUNCH_GAP_S - LAUNCH_GAP_S, rel=1e-15)
    d = dataclasses.replace(model_preset("qwen3-30b-a3b"), first_k_dense_replace=3)
    share = d.num_moe_layers / d.num_layers
    one = moe_time.moe_host_time(d.of_kind("moe"), **_kw(1, 1))
    mean = moe_time.moe_host_time(d, **_kw(1, 1))
    assert one[0] > 0
    assert mean[0] == pytest.approx(share * one[0], rel=1e-12)
    assert mean[1] == pytest.approx(share * one[1], rel=1e-12)


def test_dense_and_graphed_are_zero_and_vectorised():
    """A dense model has no expert host time; a full-iteration graph removes it and the
    dispatcher's sync; arrays of plans give each scalar plan's value."""
    assert moe_time.moe_host_time(model_preset("llama3-8b"), **_kw(1, 1)) == (0.0, 0.0)
    m = model_preset("qwen3-30b-a3b").of_kind("moe")
    assert moe_time.moe_host_time(m, **_kw(1, 1), graphed=True) == (0.0, 0.0)
    eps = np.array([1.0, 2.0, 8.0, 128.0])
    fa, ba = moe_time.moe_host_time(m, **_kw(np.ones(4), eps))
    for i, ep in enumerate(eps):
        f, b = moe_time.moe_host_time(m, **_kw(1, ep))
        assert fa[i] == f and ba[i] == b
    kw = dict(b=1, tp=1, cp=1, ep=1, sp=False, flash=True, recompute=0, gpu=H100,
              dtype="bf16")
    eager, graph = layer_time.layer_time(m, **kw), layer_time.layer_time(m, graphed=True, **kw)
    perm = moe_time.moe_permute_time(m, 1, 1, 1, 1, H100)      # also GPU time the host hides behind
    f, b = moe_time.moe_host_time(m, **_kw(1, 1), permute=perm)
    assert f < moe_time.moe_host_time(m, **_kw(1, 1))[0]
    sync = moe_time.moe_sync_time(m, get_profile(None), H100)
    assert eager.fwd - graph.fwd == pytest.approx(f + sync, rel=1e-12)
    assert eager.bwd - graph.bwd == pytest.approx(b, rel=1e-12)


def test_plan_switch_estimate_and_stack_rule():
    """``cuda_graph=true`` parses, shows in the plan's name, lowers the estimate of a
    host-bound MoE plan by the host time and the syncs; a bad value and a stack without
    full-iteration graphs are refused naming the field."""
    p = parse_plan("ep=1,mbs=1,gbs=64,cuda_graph=true")
    assert p.cuda_graph is True and "cg" in p.short().split()
    with pytest.raises(SpecError, match="cuda_graph"):
        parse_plan("cuda_graph=maybe")
    cl = cluster_preset("dgx-h100", 1)
    m = model_preset("qwen3-30b-a3b")
    eager = estimate(make_job(m, cl, Plan(ep=1, mbs=1, gbs=64)))
    graph = estimate(make_job(m, cl, Plan(ep=1, mbs=1, gbs=64, cuda_graph=True)))
    assert graph.step_time_s < eager.step_time_s
    bad = plan_violations(get_profile("torchtitan"), Plan(cuda_graph=True))
    assert any(f == "cuda_graph" for f, _, _ in bad)
    assert not plan_violations(get_profile("megatron-core"), Plan(cuda_graph=True))
