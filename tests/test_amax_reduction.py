"""Transformer Engine's amax all-reduces (``strategies.cost.amax``, ``comm.small_allreduce_time``;
docs/calibration.md §5.64): delayed scaling's one all-reduce per model-chunk pass over the
tp·cp·dp ranks of a stage, current scaling's per-layer TP all-reduces under sequence
parallelism; closed forms to floating-point precision, zero where no TE autocast reduces
(16 bits, block scaling, XLA, torchtitan), and the stage record, the estimate and the
simulator read the same seconds."""
from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.cost import amax
from strategies.cost import comm as cm
from strategies.collectives.select import tree_layouts
from strategies.cost.comm.small_allreduce import tree_latency
from strategies.cost.stage import stage_cost_arrays, stage_costs
from strategies.estimate import estimate
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

MC = get_profile("megatron-core")
LLAMA = model_preset("llama3-70b")                   # dense: 4 GEMMs a layer
QWEN = model_preset("qwen3-30b-a3b")                 # 128 experts, every layer MoE


def test_tree_latency_and_small_allreduce_closed_forms():
    """Over whole nodes: ``2((k-1)·lat_in + log2(nodes)·lat_out)`` plus the ring's bandwidth
    term times ``n/(n-1)`` plus the call's own latency (``phase.CALL_LATENCY_S``); inside one
    node the ring itself, bit for bit; 0 for one rank."""
    cl = cluster_preset("dgx-h100", 64)
    li, lo = cl.intra_node_latency, cl.inter_node_latency
    for n, nodes in ((16, 2), (64, 8), (512, 64)):
        assert tree_latency(n, 1, cl) == pytest.approx(
            2 * (7 * li + np.log2(nodes) * lo), rel=1e-12)
        assert cm.small_allreduce_time(0.0, n, 1, cl) == pytest.approx(
            tree_latency(n, 1, cl) + CALL, rel=1e-12)
        s = 4096.0
        bw = cm.collective_time("allreduce", s, n, 1, cl) \
            - cm.collective_time("allreduce", 0.0, n, 1, cl)
        assert cm.small_allreduce_time(s, n, 1, cl) == pytest.approx(
            bw * n / (n - 1) + tree_latency(n, 1, cl) + CALL, rel=1e-9)
    for n in (2, 4, 8):
        assert cm.small_allreduce_time(1152.0, n, 1, cl) == \
            cm.collective_time("allreduce", 1152.0, n, 1, cl)
    assert cm.small_allreduce_time(4.0, 1, 1, cl) == 0.0
    # never above the ring; vectorised = scalar
    n = np.array([2, 8, 16, 64, 512])
    arr = cm.small_allreduce_time(4.0, n, 1, cl)
    assert np.all(arr <= cm.collective_time("allreduce", 4.0, n, 1, cl))
    assert [cm.small_allreduce_time(4.0, int(x), 1, cl) for x in n] == list(arr)


def test_layer_gemms():
    assert amax.layer_gemms(LLAMA, 1) == 4.0
    assert amax.layer_gemms(QWEN, 8) == 2 + 2 * 128 / 8
    ds = model_preset("deepseek-v3")                  # 3 dense layers of 61, 1 shared expert
    share = ds.num_moe_layers / ds.num_layers
    assert amax.layer_gemms(ds, 64) == pytest.approx(
        2 + (1 - share) * 2 + share * (2 * 256 / 64 + 2), rel=1e-15)


def test_delayed_scaling_closed_form():
    """One all-reduce per chunk pass of ``4·3·GEMMs`` (forward) and ``4·2·GEMMs`` (backward)
    bytes of the chunk over tp·cp·dp consecutive ranks, spread over the chunk's layers."""
    cl = cluster_preset("dgx-h100", 16)
    tp, cp, dp, lc = 4, 2, 8, 10.0
    for dtype in ("fp8", "fp8-delayed"):
        f, b = amax.amax_reduction_time(LLAMA, lc, tp, cp, dp, 1, 1, dtype, MC, cl)
        assert f * lc == pytest.approx(cm.small_allreduce_time(4 * 3 * 4 * lc, 64, 1, cl),
                                       rel=1e-12)
        assert b * lc == pytest.approx(cm.small_allreduce_time(4 * 2 * 4 * lc, 64, 1, cl),
                                       rel=1e-12)
        assert f > 0 and b > 0
    # per step: micro-batches x chunks x (fwd + bwd) all-reduces, whatever the chunking
    f1, _ = amax.amax_reduction_time(LLAMA, 80.0, 8, 1, 1, 1, 1, "fp8", MC, cl)
    assert f1 * 80 == pytest.approx(cm.small_allreduce_time(4 * 3 * 4 * 80, 8, 1, cl),
                                    rel=1e-12)
    # vectorised over plans = scalar, bit for bit
    dps = np.array([1, 2, 8, 32])
    fa, ba = amax.amax_reduction_time(LLAMA, lc, tp, cp, dps, 1, 1, "fp8", MC, cl)
    for i, d in enumerate(dps):
        assert amax.amax_reduction_time(LLAMA, lc, tp, cp, int(d), 1, 1, "fp8", MC, cl) == \
            (fa[i], ba[i])
    # one rank: nothing to reduce
    assert amax.amax_reduction_time(LLAMA, lc, 1, 1, 1, 1, 1, "fp8", MC, cl) == (0.0, 0.0)


def test_current_scaling_closed_form():
    """2 TP all-reduces of 4 bytes per dense layer and pass with sequence parallelism; an
    MoE layer's routed experts none (its attention's 1); none without SP or with tp 1."""
    cl = cluster_preset("dgx-h100", 2)
    one = cm.small_allreduce_time(4.0, 4, 1, cl)
    for dtype in ("fp8-current", "nvfp4"):
        assert amax.amax_reduction_time(LLAMA, 10.0, 4, 1, 4, 1, 1, dtype, MC, cl) == \
            (2 * one, 2 * one)
        assert amax.amax_reduction_time(QWEN, 10.0, 4, 1, 4, 8, 1, dtype, MC, cl) == (one, one)
        assert amax.amax_reduction_time(LLAMA, 10.0, 4, 1, 4, 1, 0, dtype, MC, cl) == (0.0, 0.0)
        assert amax.amax_reduction_time(LLAMA, 10.0, 1, 1, 16, 1, 1, dtype, MC, cl) == \
            (0.0, 0.0)


def test_zero_for_16_bits_block_scaling_and_other_stacks():
    cl = cluster_preset("dgx-h100", 2)
    for dtype in ("bf16", "fp16", "mxfp8", "fp8-blockwise"):
        assert amax.amax_reduction_time(LLAMA, 10.0, 4, 1, 4, 1, 1, dtype, MC, cl) == (0.0, 0.0)
    for fw in ("jax-xla", "torchtitan", "pytorch-eager", "hai-llm"):
        for dtype in ("fp8", "fp8-current"):
            if fw == "torchtitan" and dtype == "fp8-current":
                continue    # torchao's float8 TP: tests/test_torchao_amax.py (§5.84)
            assert amax.amax_reduction_time(LLAMA, 10.0, 4, 1, 4, 1, 1, dtype,
                                            get_profile(fw), cl) == (0.0, 0.0)
    assert get_profile("nemo").te_amax_reduction


def _job(fw="megatron-core", dtype="fp8"):
    m = replace(LLAMA, name="llama-8l", num_layers=8)
    return make_job(m, cluster_preset("dgx-h100", 4),
                    Plan(tp=2, pp=2, dp=8, mbs=1, gbs=64, vpp=2, schedule="interleaved"),
                    dtype=dtype, framework=fw)


def test_stage_record_estimate_and_simulation_read_the_rule():
    job = _job()
    off_job = replace(job, framework=replace(job.framework, te_amax_reduction=False))
    f, b = amax.amax_reduction_time(job.model, 8 / (2 * 2), 2, 1, 8, 1, 1, "fp8",
                                    job.framework, job.cluster)
    on_sc, off_sc = stage_costs(job), stage_costs(off_job)
    assert on_sc.layer_fwd - off_sc.layer_fwd == pytest.approx(f, rel=1e-9)
    assert on_sc.layer_bwd - off_sc.layer_bwd == pytest.approx(b, rel=1e-9)
    # the search's arrays carry the same record, bit for bit
    arr = stage_cost_arrays(job.model, job.cluster, "fp8", PlanArrays.from_plans([job.plan]),
                            job.framework)
    assert float(arr.layer_fwd[0]) == on_sc.layer_fwd
    assert estimate(job).step_time_s > estimate(off_job).step_time_s
    assert simulate(job).step_time_s > simulate(off_job).step_time_s
    # bf16: nothing changes, bit for bit
    bj = _job(dtype="bf16")
    bj_off = replace(bj, framework=replace(bj.framework, te_amax_reduction=False))
    assert stage_costs(bj).layer_fwd == stage_costs(bj_off).layer_fwd
    assert estimate(bj).step_time_s == estimate(bj_off).step_time_s


def test_tree_over_groups_spanning_nodes_unevenly():
    """NCCL builds its tree over uneven nodes too (a chain of each node's members, a double
    binary tree between nodes; §5.223): ``2((k-1)·lat_in + log2i(nodes)·lat_out)`` of the
    slowest group, ``k`` its fullest node's members; the ring where the layout is unknown."""
    cl = cluster_preset("dgx-h100", 64)
    li, lo = cl.intra_node_latency, cl.inter_node_latency
    # 22 consecutive ranks start at 0 or 6 in a node: 8+8+6 (3 nodes) or 2+8+8+4 (4 nodes)
    # 12 at 0 or 4: 8+4 or 4+8; 11 ranks 2 apart (slots of 4): 3 or 4 nodes of up to 4
    for n, stride, k, nodes in ((22, 1, 8, 4), (12, 1, 8, 2), (11, 2, 4, 4)):
        tree = 2 * ((k - 1) * li + np.log2(nodes) * lo)
        assert tree_latency(n, stride, cl) == pytest.approx(tree, rel=1e-12)
        s = 4096.0
        bw = cm.collective_time("allreduce", s, n, stride, cl) \
            - cm.collective_time("allreduce", 0.0, n, stride, cl)
        assert cm.small_allreduce_time(s, n, stride, cl) == pytest.approx(
            min(bw * n / (n - 1) + tree + CALL,
                cm.collective_time("allreduce", s, n, stride, cl)),
            rel=1e-12)
        assert cm.small_allreduce_time(4.0, n, stride, cl) < \
            cm.collective_time("allreduce", 4.0, n, stride, cl)
    # a stride that does not divide the node: the ring, as before
    assert cm.small_allreduce_time(4.0, 5, 3, cl) == cm.collective_time("allreduce", 4.0, 5, 3, cl)
    # even groups: the one layout strided_layout gives, on every offset
    known, k, nodes = tree_layouts(np.array([16, 64, 4, 8]), np.array([1, 2, 8, 1]), 8)
    assert known.all() and k.shape == (4, 8)
    assert (k == [[8], [4], [1], [8]]).all() and (nodes == [[2], [16], [4], [1]]).all()
    # MLPerf's 312-rank amax group on 64-GPU NVLink domains (4.875 of them, §5.220): 5 or 6
    # domains, 64 in the fullest
    nvl = cluster_preset("gb200-nvl72", 624, 16)
    li, lo = nvl.intra_node_latency, nvl.inter_node_latency
    assert tree_latency(312, 1, nvl) == pytest.approx(2 * (63 * li + 2 * lo), rel=1e-12)
    # the ring over those uneven domains is NCCL's (§5.228: ``nodes-1`` crossings a pass,
    # the other steps at NVLink's latency, the relay's hop added), still five times the tree
    assert cm.collective_time("allreduce", 0.0, 312, 1, nvl) == pytest.approx(
        2 * (5 * (lo + li) + 306 * li) + CALL, rel=1e-12)
    assert cm.small_allreduce_time(48.0, 312, 1, nvl) < \
        cm.collective_time("allreduce", 48.0, 312, 1, nvl) / 4


def test_uneven_amax_group_stage_record_and_simulation():
    """tp·dp = 12 ranks on 8-GPU nodes (the second stage's group starts mid-node): the stage
    record carries the tree's seconds, and the simulation runs on that record."""
    m = replace(LLAMA, name="llama-8l", num_layers=8)
    job = make_job(m, cluster_preset("dgx-h100", 3), Plan(tp=2, pp=2, dp=6, mbs=1, gbs=48),
                   dtype="fp8", framework="megatron-core")
    off = replace(job, framework=replace(job.framework, te_amax_reduction=False))
    f, _ = amax.amax_reduction_time(job.model, 4.0, 2, 1, 6, 1, 1, "fp8", job.framework,
                                    job.cluster)
    cl = job.cluster
    tree = 2 * (7 * cl.intra_node_latency + 1 * cl.inter_node_latency)
    bw = cm.collective_time("allreduce", 4 * 3 * 4 * 4.0, 12, 1, cl) \
        - cm.collective_time("allreduce", 0.0, 12, 1, cl)
    assert f * 4 == pytest.approx(bw * 12 / 11 + tree + CALL, rel=1e-12)
    assert stage_costs(job).layer_fwd - stage_costs(off).layer_fwd == pytest.approx(f, rel=1e-9)
    assert simulate(job).step_time_s > simulate(off).step_time_s
