"""Rack-scale NVLink domains (GB200/GB300 NVL72), the 2026 GPU catalog and the precisions."""
from dataclasses import replace

import numpy as np
import pytest
import simpy

from simulator.network import stepwise_oracle as C
from simulator.network.flows import FlowNetwork
from simulator.simulate import simulate
from strategies.cost import elementwise_time, gemm_time, hbm_rate, layer_time
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import NodeGroup, cluster_from_mapping, cluster_preset, parse_cluster_arg
from topologies.cluster.nvlink_domain import (fits_nvlink_domain, nvlink_domain_of,
                                             same_nvlink_domain)
from topologies.errors import SpecError
from topologies.gpus import get_gpu
from topologies.graph import build_graph
from topologies.precision import PRECISIONS
from topologies.routing import path_bandwidth, path_latency, route

NVLINK5 = 900e9          # bytes/s per GPU per direction (1.8 TB/s both ways)


def test_tray_count_spreads_over_equal_racks():
    cl = parse_cluster_arg("gb200-nvl72:64")
    assert (cl.num_gpus, cl.num_nodes, cl.nvlink_domain_size) == (256, 4, 64)
    assert cl.nvlink_domain_capacity == 72 and cl.gpus_per_host == 4 and cl.num_hosts == 64
    assert cl.describe_domain() == ("4 NVLink domains of 64 GPUs (16 of 18 trays of 4 GPUs; "
                                    "8 of 72 GPU slots left empty in each)")
    full = parse_cluster_arg("gb300-nvl72:36")
    assert (full.num_nodes, full.gpus_per_node, full.gpu.name) == (2, 72, "GB300")
    assert full.inter_node_bandwidth == 800e9 / 8 and full.nics_per_node == 72
    assert "left empty" not in full.describe_domain()
    with pytest.raises(SpecError, match="give 18 or 20 trays"):
        parse_cluster_arg("gb200-nvl72:19")


def test_resizing_a_rack_cluster_names_trays():
    cl = parse_cluster_arg("gb200-nvl72:64").with_nodes(2)
    assert cl.name == "gb200-nvl72:32" and cl == parse_cluster_arg("gb200-nvl72:32")


def test_same_nvlink_domain_is_the_rack():
    cl = parse_cluster_arg("gb200-nvl72:64")
    assert same_nvlink_domain(cl, 0, 63) and not same_nvlink_domain(cl, 63, 64)
    assert list(nvlink_domain_of(cl, np.array([0, 64, 255]))) == [0, 1, 3]
    assert fits_nvlink_domain(cl, 16) and fits_nvlink_domain(cl, 64)
    assert not fits_nvlink_domain(cl, 128) and not fits_nvlink_domain(cl, 24)


def test_graph_routes_stay_on_nvlink_inside_the_rack():
    cl = parse_cluster_arg("gb200-nvl72:32")       # 2 racks of 64 GPUs
    g = build_graph(cl)
    inside = route(g, 3, 60)                        # trays 0 and 15 of rack 0
    assert inside == [3, ("nvswitch", 0), 60]
    assert path_bandwidth(g, inside) == NVLINK5
    assert path_latency(g, inside) == pytest.approx(cl.intra_node_latency, rel=1e-12)
    across = route(g, 3, 67)
    assert ("nvswitch", 0) not in across and path_bandwidth(g, across) == 400e9 / 8


@pytest.mark.parametrize("per_rack, n", [(18, 8), (18, 64), (18, 72), (12, 12), (12, 48)])
def test_allreduce_inside_a_domain_runs_at_the_nvlink5_bus_bandwidth(per_rack, n):
    """Ring all-reduce of S bytes over n GPUs of one NVL72 domain: 2(n-1)/n S / 900 GB/s
    plus 2(n-1) switch traversals; its bus bandwidth tends to NVLink 5's 900 GB/s. Also in
    racks of 12 trays (``gb200-nvl72:36x12``: 3 domains of 48 GPUs, where the fewest racks
    would be 2 of 18)."""
    cl = cluster_preset("gb200-nvl72", 36 if per_rack == 12 else 18, per_rack)
    g = build_graph(cl)
    env = simpy.Environment()
    net = FlowNetwork(env, g, route_fn=route)
    size = 4e9
    done = []
    proc = C.start_collective(net, "ring_allreduce", list(range(n)), size)
    proc.callbacks.append(lambda _e: done.append(env.now))
    env.run(proc)
    lat = cl.intra_node_latency
    assert done[0] == pytest.approx(2 * (n - 1) / n * size / NVLINK5 + 2 * (n - 1) * lat,
                                    rel=1e-12)
    busbw = 2 * (n - 1) / n * size / (done[0] - 2 * (n - 1) * lat)
    assert busbw == pytest.approx(NVLINK5, rel=1e-12)


def test_search_keeps_tp_16_and_64_inside_a_rack_without_cross_node_flag():
    m = model_preset("gpt-310.1b")                 # 128 heads: tp up to 128 divides them
    rack = enumerate_space(m, parse_cluster_arg("gb200-nvl72:32"), 128, SpaceOptions())
    dgx = enumerate_space(m, cluster_preset("dgx-b200", 16), 128, SpaceOptions())
    assert {16, 32, 64} <= set(rack.cols["tp"].tolist())
    assert 128 not in set(rack.cols["tp"].tolist())
    assert max(dgx.cols["tp"].tolist()) == 8


def test_tp16_inside_one_rack_is_faster_than_across_racks():
    m = model_preset("gpt-145.6b")
    plan = parse_plan("tp=16,pp=4,gbs=64")
    rack = cluster_preset("gb200-nvl72", 16)     # one domain of 64 GPUs
    split = cluster_from_mapping({"preset": "gb200-nvl72", "name": "racks-of-8",
                                  "gpus_per_node": 8, "nics_per_node": 8, "nodes": 8})
    assert split.num_gpus == rack.num_gpus and split.gpu == rack.gpu
    t_in = simulate(make_job(m, rack, plan)).step_time_s
    t_out = simulate(make_job(m, split, plan)).step_time_s
    assert t_in < t_out


def test_ep64_inside_one_rack_is_faster_than_across_racks():
    m = replace(model_preset("mixtral-8x7b"), num_experts=64, num_layers=8)
    plan = parse_plan("tp=1,pp=1,ep=64,gbs=64")
    rack = cluster_preset("gb200-nvl72", 16)
    split = cluster_from_mapping({"preset": "gb200-nvl72", "name": "racks-of-8",
                                  "gpus_per_node": 8, "nics_per_node": 8, "nodes": 8})
    t_in = simulate(make_job(m, rack, plan)).step_time_s
    t_out = simulate(make_job(m, split, plan)).step_time_s
    assert t_in < t_out


def test_node_larger_than_its_nvlink_domain_is_refused():
    with pytest.raises(SpecError, match="nvlink_domain_gpus=72"):
        cluster_from_mapping({"preset": "gb200-nvl72", "gpus_per_node": 80,
                              "nics_per_node": 80, "nodes": 2})
    with pytest.raises(SpecError, match="gpus_per_tray"):
        cluster_from_mapping({"preset": "gb200-nvl72", "gpus_per_node": 6,
                              "nics_per_node": 6})


def test_cluster_file_round_trip_keeps_the_domain():
    cl = parse_cluster_arg("gb300-nvl72:64")
    again = cluster_from_mapping(cl.to_dict())
    assert (again.gpus_per_tray, again.nvlink_domain_gpus, again.num_gpus) == (4, 72, 256)


# ------------------------------------------------------------------ catalog and precisions

@pytest.mark.parametrize("gpu, dtype, tflops", [
    ("B200", "nvfp4", 9000), ("B300", "nvfp4", 13500), ("GB200", "nvfp4", 10000),
    ("GB300", "nvfp4", 15000), ("GB200", "bf16", 2500), ("GB300", "mxfp8", 5000),
    ("MI355X", "mxfp8", 5033.2), ("MI355X", "bf16", 2516.6), ("MI325X", "fp8", 2614.9),
    ("H200", "fp8-current", 1978.9)])
def test_dense_rates(gpu, dtype, tflops):
    assert get_gpu(gpu).peak(dtype) == pytest.approx(tflops * 1e12, rel=1e-12)


@pytest.mark.parametrize("gpu, dtype", [("H100", "nvfp4"), ("H100", "mxfp8"),
                                        ("MI355X", "nvfp4"), ("MI325X", "mxfp8"),
                                        ("A100", "fp8-current")])
def test_precision_the_chip_lacks_is_refused_naming_gpu_and_rule(gpu, dtype):
    g = get_gpu(gpu)
    cl = replace(cluster_preset("dgx-h100"), groups=(NodeGroup(g, 1),))
    with pytest.raises(SpecError) as e:
        make_job(model_preset("llama3-8b"), cl, parse_plan("tp=8,gbs=8"), dtype=dtype)
    assert g.name in str(e.value) and dtype in str(e.value)
    assert not g.supports(dtype)


def test_every_catalog_gpu_states_tdp_and_new_parts_their_source():
    for name in ("B200", "B300", "GB200", "GB300", "MI325X", "MI355X", "H200"):
        g = get_gpu(name)
        assert g.tdp_w and ("nvidia.com" in g.source or "amd.com" in g.source), name


@pytest.mark.parametrize("dtype", ["fp8", "fp8-current", "mxfp8", "nvfp4"])
def test_gemm_rate_and_operand_bytes_follow_the_precision(dtype):
    gpu, p = get_gpu("B200"), PRECISIONS[dtype]
    rate, _, es = gemm_time._rates(gpu, dtype)
    assert rate == gpu.peak_flops[p.rate] * gpu.fp8_matmul_efficiency
    assert es == p.operand_bytes


def test_faster_formats_are_faster_and_current_scaling_costs_a_pass():
    m = model_preset("llama3-8b")
    gpu = get_gpu("B200")
    t = {d: layer_time.layer_time(m, b=1, tp=1, cp=1, ep=1, sp=False, flash=True, recompute=0,
                                  gpu=gpu, dtype=d).fwd
         for d in ("bf16", "fp8", "fp8-current", "mxfp8", "nvfp4")}
    assert t["nvfp4"] < t["fp8"] < t["bf16"]
    assert t["fp8"] < t["fp8-current"] and t["fp8"] < t["mxfp8"]
    e = {d: elementwise_time.elementwise_time_fwd(m, 1, 1, 1, False, gpu, d)
         for d in ("bf16", "fp8", "fp8-current")}
    # B200 (per-tensor fp8: one copy): inputs a norm writes (QKV and fc1: h each) cost
    # 1 - 2 B (fp8 written instead of bf16), the output projection's (a·d = h) and, on the
    # default stack (Megatron-Core's own activation, ``mlp_act_casts``, §5.118), fc2's (F) a
    # cast kernel, 2 + 1 B; current scaling adds the cast's bf16 read (2 + 1) to the fused
    # ones and an amax read (2) to the unfused ones (strategies/cost/quantise.py)
    T, h = m.seq_length, m.hidden_size
    fused, unfused = T * 2 * h, T * (h + m.ffn_hidden_size)
    hbm = hbm_rate.usable_hbm(gpu)
    assert e["fp8"] - e["bf16"] == pytest.approx((-fused + 3 * unfused) / hbm, rel=1e-12)
    assert e["fp8-current"] - e["fp8"] == pytest.approx((4 * fused + 2 * unfused) / hbm,
                                                        rel=1e-12)


def test_published_gb200_run_lands_on_nvl72_racks_with_its_precision():
    from strategies.reference.cases import case_from_entry
    from strategies.reference.entry_specs import entry_dtype
    entry = {"id": "gb200_405b", "kind": "measured", "tier": 1,
             "source": {"ref": "NVIDIA-NeMo/Megatron-Bridge",
                        "table": "docs/performance-summary.md (25.11 NeMo container)"},
             "model": {"name": "llama3.1-405b", "layers": 126, "hidden": 16384, "heads": 128,
                       "kv_heads": 8, "ffn_hidden": 53248, "vocab": 128256, "seq_len": 8192},
             "hardware": {"gpu": "GB200", "gpus_per_node": 8, "n_gpus": 256},
             "plan": {"tp": 4, "pp": 16, "dp": 4, "cp": 1, "ep": 1, "microbatch": 1,
                      "global_batch": 1536, "schedule": "interleaved 1F1B",
                      "virtual_stages": 4},
             "precision": "fp8 (current scaling)",
             "measured": {"tokens_per_s_per_gpu": 813}}
    case = case_from_entry(entry)
    assert case.job is not None, case.skipped
    cl = case.job.cluster
    assert (cl.gpu.name, cl.num_nodes, cl.nvlink_domain_size) == ("GB200", 4, 64)
    assert case.job.dtype == "fp8-current"
    assert entry_dtype({"id": "x", "precision": "mxfp8"}) == "mxfp8"
    assert entry_dtype({"id": "x", "precision": "fp8 (delayed scaling)"}) == "fp8"


def test_launch_runs_torchrun_per_tray_with_the_precision_flags():
    from strategies.export.deepspeed import deepspeed_config
    from strategies.launch import megatron_args
    job = make_job(model_preset("llama3.1-70b"), parse_cluster_arg("gb200-nvl72:64"),
                   parse_plan("tp=8,pp=4,gbs=512"), dtype="nvfp4")
    cmd, _ = megatron_args(job)
    assert "torchrun --nproc_per_node 4 --nnodes 64 " in cmd
    assert "--fp4-format e2m1" in cmd and "--fp4-recipe nvfp4" in cmd
    mx = make_job(model_preset("llama3.1-70b"), parse_cluster_arg("gb200-nvl72:64"),
                  parse_plan("tp=8,pp=4,gbs=512"), dtype="mxfp8")
    assert "--fp8-recipe mxfp8" in megatron_args(mx)[0]
    dp_only = make_job(model_preset("llama3-8b"), parse_cluster_arg("gb200-nvl72:2"),
                       parse_plan("tp=1,pp=1,gbs=8"), dtype="mxfp8")
    with pytest.raises(SpecError, match="mxfp8"):
        deepspeed_config(dp_only)
