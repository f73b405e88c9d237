"""Expert parallelism as it runs (issue 14, item 3): the expert rank layout with expert tensor
parallelism, the all-to-all alone on the network against its closed form, the routed
experts' GEMMs, routing imbalance and token dropping, and the bad input that is refused."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strategies.collectives.phase import CALL_LATENCY_S as CALL
from simulator.cli.main import main
from simulator.engine.core import run
from simulator.network.backend import new_network
from simulator.program.ops import Collective, Program
from strategies import collectives as colls
from strategies import placement
from strategies.collectives import all_to_all
from strategies.cost import comm, ep_dispatch, gemm_shapes, gemm_time, moe_bytes, param_counts
from strategies.cost.comm.links import pxn_relay
from strategies.cost import token_counts
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.gpus import get_gpu
from topologies.graph import build_graph
from topologies.routing import route

REL = 1e-12
QWEN = model_preset("qwen3-30b-a3b")          # 128 experts, top-8, expert width 768


# ------------------------------------------------------------------ placement
def test_expert_layout_is_megatrons_tp_ep_dp_order():
    """Within a stage: etp consecutive ranks, then ep groups etp apart, expert DP outermost."""
    p = Plan(tp=2, pp=2, dp=8, ep=4, etp=1)
    assert placement.expert_sizes(p) == (1, 4, 4)
    assert placement.groups(p, "ep")[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert placement.groups(p, "edp")[0] == [0, 4, 8, 12]
    q = Plan(tp=1, pp=1, dp=16, ep=4, etp=2)
    assert placement.groups(q, "etp")[:2] == [[0, 1], [2, 3]]
    assert placement.groups(q, "ep")[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert placement.groups(q, "edp")[0] == [0, 8]
    for plan in (p, q):
        for dim in ("ep", "etp", "edp"):
            flat = sorted(r for g in placement.groups(plan, dim) for r in g)
            assert flat == list(range(placement.world_size(plan)))


def test_default_etp_keeps_the_dense_layout():
    """etp unset (= tp): ep groups are blocks of ep data-parallel ranks, tp apart."""
    p = Plan(tp=2, pp=2, dp=4, cp=2, ep=4)
    assert p.expert_tp == 2
    assert placement.groups(p, "ep")[0] == [0, 2, 4, 6]
    assert placement.groups(p, "etp") == placement.groups(p, "tp")


def test_deepseek_v3_ep64_fills_nodes_first():
    """tp=1, pp=16, ep=64 on 8-GPU nodes: each ep group is 8 whole nodes."""
    p = Plan(tp=1, pp=16, dp=128, ep=64)
    for g in placement.groups(p, "ep")[:4]:
        nodes = np.asarray(g) // 8
        assert len(set(nodes.tolist())) == 8 and np.all(np.bincount(nodes)[nodes] == 8)


# ------------------------------------------------------------------ all-to-all closed form
def _engine_seconds(cluster, group, nbytes):
    algo = colls.algorithm_for("alltoall", group, cluster.gpus_per_node)
    progs = {r: Program(r, 0, {"s": (Collective(0, "s", "alltoall", tuple(group), nbytes, algo,
                                                "t", "ep", "c"),)}) for r in group}
    net = new_network(build_graph(cluster), route, backend="flows")
    return run(progs, net=net).step_time_s


H800 = cluster_preset("hgx-h800", 4)
B_IN = H800.intra_node_bandwidth * comm.NVLINK_EFFICIENCY
B_OUT = H800.inter_node_bandwidth * comm.NETWORK_EFFICIENCY


@pytest.mark.parametrize("group, k", [
    (list(range(8)), 8),                       # one node: NVLink only
    (list(range(0, 8, 2)), 4),                 # half a node
    (list(range(16)), 8),                      # two whole nodes (PXN relays over NVLink)
    (list(range(0, 32, 2)), 4),                # four nodes, 4 members each
    ([0, 8, 16, 24], 1),                       # one member per node: NICs only
    (list(range(32)), 8),                      # four whole nodes
])
def test_alltoall_alone_is_the_closed_form(group, k):
    S = 64e6
    n = len(group)
    # the slowest route: across nodes through a PXN relay (NVLink, then the NIC) when k > 1
    lat = H800.intra_node_latency if n == k else H800.inter_node_latency + (
        H800.intra_node_latency if k > 1 else 0.0)
    closed = all_to_all.two_level_time(S, n, k, B_IN, B_OUT, lat, pxn_relay(H800)) + CALL
    assert _engine_seconds(H800, group, S) == pytest.approx(float(closed), rel=REL)
    # the estimate's collective_time reads the same formula for groups placement lays out
    stride = group[1] - group[0]
    assert float(comm.collective_time("alltoall", S, n, stride, H800)) == \
        pytest.approx(float(closed), rel=REL)


def test_alltoall_closed_form_limits():
    S, n = 8e6, 16
    assert all_to_all.two_level_time(S, n, n, 2.0, 1.0, 0.0, True) == (n - 1) / n * S / 2.0
    assert all_to_all.two_level_time(S, n, 1, 2.0, 1.0, 0.0, True) == (n - 1) / n * S / 1.0
    assert all_to_all.time(S, 1, 1.0, 1.0) == 0.0


# ------------------------------------------------------------------ expert GEMMs
def _routed(m, **kw):
    """The routed experts' entries of ``layer_gemms`` for a MoE layer."""
    g = gemm_shapes.layer_gemms(m, 1, kw.pop("tp", 1), 1, kw.pop("ep", 1), "moe", **kw)
    first = len(m.attention_linears())               # the routed up and down come next
    return g[first:first + 2]


@pytest.mark.parametrize("tp, ep, etp, load", [(1, 1, None, 1.0), (2, 8, None, 1.0),
                                               (2, 8, 1, 1.0), (4, 16, 2, 1.3),
                                               (1, 32, 4, 2.0)])
def test_expert_gemm_flops_closed_form(tp, ep, etp, load):
    """Summed over the local experts: ``2·T·topk·3·h·F_e·load/tp``, whatever ep and etp."""
    m = QWEN
    T = m.seq_length
    flops = sum(2.0 * c * M * N * K for c, M, N, K, _ in _routed(m, tp=tp, ep=ep, etp=etp,
                                                                  load=load))
    closed = 2.0 * T * m.moe_router_topk * 3 * m.hidden_size * m.expert_ffn * load / tp
    assert flops == pytest.approx(closed, rel=REL)
    e = etp or tp
    Me = token_counts.expert_tokens(m, 1, tp, 1, ep, etp, load)
    assert Me == pytest.approx(T * m.moe_router_topk * e * ep / (tp * m.num_experts) * load,
                               rel=REL)


def test_small_expert_gemms_run_below_the_large_shape_rate():
    """Same FLOPs, fewer tokens per expert (ep=1: 128 experts of T·8/128 rows) take longer
    than the same work in fewer, taller GEMMs (ep=16): the shape, not a constant."""
    gpu = get_gpu("H100-SXM5-80GB")
    g1, g16 = _routed(QWEN, ep=1), _routed(QWEN, ep=16)
    assert (g1[0][0], g1[0][1], g16[0][0], g16[0][1]) == (128, 256, 8, 4096)
    t1 = gemm_time.gemms_time_fwd(g1, 1, gpu, "bf16")
    t16 = gemm_time.gemms_time_fwd(g16, 1, gpu, "bf16")
    assert t16 > 0 and t1 > 1.2 * t16                   # 1.23 (docs/models.md)


# ------------------------------------------------------------------ imbalance and dropping
def test_moe_load_is_imbalance_capped_by_capacity():
    assert token_counts.moe_load(8, 1.4) == 1.4
    assert token_counts.moe_load(1, 1.4) == 1.0                 # no hottest rank with ep = 1
    assert token_counts.moe_load(8, 1.4, 1.25) == 1.25          # dropped beyond the capacity
    assert token_counts.moe_load(1, 1.0, 0.5) == 0.5


def test_imbalance_scales_the_all_to_all_and_the_expert_compute():
    cl = cluster_preset("hgx-h800", 2)
    base = make_job(QWEN, cl, parse_plan("ep=16,gbs=16,moe_imbalance=1"))   # balanced
    hot = make_job(QWEN, cl, parse_plan("ep=16,gbs=16,moe_imbalance=1.5"))
    capped = make_job(QWEN, cl, parse_plan("ep=16,gbs=16,moe_imbalance=1.5,"
                                           "moe_capacity_factor=1.2"))
    a, b, c = stage_costs(base), stage_costs(hot), stage_costs(capped)
    assert b.ep_bytes == pytest.approx(1.5 * a.ep_bytes, rel=REL)
    assert c.ep_bytes == pytest.approx(1.2 * a.ep_bytes, rel=REL)
    assert a.layer_fwd < c.layer_fwd < b.layer_fwd
    m = QWEN
    per_member = 2 * m.seq_length * m.hidden_size * m.moe_router_topk * 2  # dispatch+combine
    assert a.ep_bytes == pytest.approx(per_member, rel=REL)


def test_expert_parameters_shard_over_etp_ep():
    m = QWEN
    dense, expert = param_counts.layer_params_split(m, 2, 8, 1)
    dense2, expert2 = param_counts.layer_params_split(m, 2, 8)
    assert dense == dense2
    assert expert == pytest.approx(m.expert_params_per_layer() / 8, rel=REL)
    assert expert2 == pytest.approx(m.expert_params_per_layer() / 16, rel=REL)


def test_etp_adds_its_collectives_to_the_record():
    cl = cluster_preset("hgx-h800", 2)
    j = make_job(QWEN, cl, parse_plan("tp=2,ep=8,etp=2,sp=true,gbs=16,moe_imbalance=1"))
    c = stage_costs(j)
    assert c.etp_bytes == pytest.approx(2 * moe_bytes.routed_token_bytes(QWEN, 1, 2, 1), rel=REL)
    j1 = make_job(QWEN, cl, parse_plan("tp=2,ep=8,etp=1,sp=true,gbs=16"))
    assert stage_costs(j1).etp_bytes == 0.0


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("plan, words", [
    ("ep=3,gbs=16", ["ep=3", "num_experts=128"]),
    ("ep=16,etp=2,gbs=16", ["etp=2", "etp*ep"]),
    ("tp=1,etp=5,gbs=16", ["etp=5", "moe_ffn_hidden_size=768"]),
    ("ep=8,moe_imbalance=0.9,gbs=16", ["moe_imbalance=0.9", ">= 1"]),
    ("ep=8,moe_capacity_factor=0,gbs=16", ["moe_capacity_factor=0", "> 0"]),
    ("ep=8,moe_capacity_factor=-1,gbs=16", ["moe_capacity_factor=-1", "> 0"]),
])
def test_bad_expert_plans_exit_2(capsys, plan, words):
    rc = main(["estimate", "--model", "qwen3-30b-a3b", "--cluster", "hgx-h800:2",
               "--plan", plan])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    for w in words:
        assert w in err


def test_moe_fields_refused_on_a_dense_model():
    with pytest.raises(SpecError, match="moe_imbalance"):
        make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1),
                 parse_plan("moe_imbalance=1.2,gbs=8"))
    with pytest.raises(SpecError, match="etp"):
        make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1),
                 parse_plan("tp=2,etp=1,gbs=8"))


def test_plan_round_trips_the_expert_fields():
    p = parse_plan("tp=2,ep=4,etp=1,moe_imbalance=1.25,moe_capacity_factor=2")
    assert (p.etp, p.moe_imbalance, p.moe_capacity_factor) == (1, 1.25, 2.0)
    assert dataclasses.replace(p, etp=None).expert_tp == 2
    assert "etp1" in p.short()


# ------------------------------------------------------------------ node-limited routing
def test_alltoall_sends_one_copy_per_expert_whatever_the_groups():
    """DeepSeek-V3: 8 router groups, at most 4 per token, top-8. Megatron's ``alltoall``
    dispatcher sends one copy per (token, expert), so node-limited routing (ep=64 over 8-GPU
    nodes: 8 nodes = the groups) leaves its inter-node share at 1, and its costs equal the
    same model without groups; DeepEP and HybridEP (once per node) keep their grouped
    closed form, below the ungrouped one."""
    m = dataclasses.replace(model_preset("deepseek-v3"), num_layers=4, first_k_dense_replace=1,
                            num_nextn_predict_layers=0, seq_length=1024)
    assert (m.moe_router_num_groups, m.moe_router_group_topk, m.moe_router_topk) == (8, 4, 8)
    flat = dataclasses.replace(m, moe_router_num_groups=None, moe_router_group_topk=None)
    for ep, etp in ((64, 1), (32, 2), (32, 1)):
        assert ep_dispatch.ep_dedup(m, ep, etp, 8, 0) == (1.0, 1.0)
    cl = cluster_preset("dgx-h100", 8)
    plan = parse_plan("ep=64,gbs=64,moe_imbalance=1")
    got, ref = (stage_costs(make_job(x, cl, plan)) for x in (m, flat))
    assert got.ep_remote_scale == ref.ep_remote_scale == 1.0
    assert got.ep_bytes == pytest.approx(ref.ep_bytes, rel=REL)
    t, t0 = (estimate(make_job(x, cl, plan)).step_time_s for x in (m, flat))
    assert t == pytest.approx(t0, rel=REL)
    E, k, G, M, N = m.num_experts, m.moe_router_topk, 8, 4, 8
    for code in (1, 2):
        b, r = ep_dispatch.ep_dedup(m, 64, 1, 8, code)
        b0, r0 = ep_dispatch.ep_dedup(flat, 64, 1, 8, code)
        p_rank = ep_dispatch.expert_hit_probability(E, k, 64, G, M)
        p_node = ep_dispatch.expert_hit_probability(E, k, N, G, M)
        assert b == pytest.approx(64 * p_rank / k, rel=REL)
        assert r == pytest.approx(N * p_node / k / b, rel=REL)
        assert b * r < b0 * r0                        # fewer bytes between nodes with groups


def test_grouped_routing_copies_between_nodes_enumerated():
    """Exact enumeration of a toy group-limited router (8 experts, 4 groups = 4 nodes of one
    rank each, 2 groups per token, top-3, uniform): the mean copies a per-expert dispatcher
    sends off the token's node are ``k(N-1)/N``, as without groups (``alltoall``'s remote
    scale 1), while the distinct remote nodes a once-per-node dispatcher reaches are
    ``(N-1)·P_node`` of ``expert_hit_probability`` with the groups."""
    from itertools import combinations
    E, G, M, k = 8, 4, 2, 3
    size = E // G
    copies, nodes, cases = 0, 0, 0
    for groups in combinations(range(G), M):
        pool = [e for g in groups for e in range(g * size, (g + 1) * size)]
        for experts in combinations(pool, k):
            hit = [e // size for e in experts]     # node of each chosen expert (node 0 home)
            copies += sum(1 for n in hit if n != 0)
            nodes += len({n for n in hit if n != 0})
            cases += 1
    toy = dataclasses.replace(model_preset("deepseek-v3"), num_experts=E, moe_router_topk=k,
                              moe_router_num_groups=G, moe_router_group_topk=M)
    assert copies / cases == pytest.approx(k * (G - 1) / G, rel=REL)
    assert ep_dispatch.ep_dedup(toy, G, 8, 8, 0)[1] == 1.0          # 4 nodes of one rank
    p_node = float(ep_dispatch.expert_hit_probability(E, k, G, G, M))
    assert nodes / cases == pytest.approx((G - 1) * p_node, rel=REL)
    b, r = ep_dispatch.ep_dedup(toy, G, 8, 8, 1)
    assert b * r * k * (G - 1) / G == pytest.approx(nodes / cases, rel=REL)


@pytest.mark.parametrize("backend", ["flows", "contention-free"])
@pytest.mark.parametrize("group, k, r", [(list(range(16)), 8, 0.5), (list(range(32)), 8, 0.25),
                                         (list(range(0, 32, 2)), 4, 0.5),
                                         ([0, 8, 16, 24], 1, 0.5)])
def test_node_limited_alltoall_alone_is_the_closed_form(group, k, r, backend):
    """Flows between nodes carry ``r`` of the per-pair bytes: the engine's max-min sharing
    (flows), or the phase's own flows re-shared as each ends (contention-free,
    ``solo_seconds_sized``), ends at the closed form's busier port."""
    S, n = 64e6, len(group)
    algo = colls.algorithm_for("alltoall", group, 8)
    progs = {x: Program(x, 0, {"s": (Collective(0, "s", "alltoall", tuple(group), S, algo, "t",
                                                "ep", "c", remote_scale=r),)}) for x in group}
    got = run(progs, net=new_network(build_graph(H800), route, backend=backend)).step_time_s
    lat = H800.inter_node_latency + (H800.intra_node_latency if k > 1 else 0.0)
    closed = all_to_all.two_level_time(S, n, k, B_IN, B_OUT, lat, True, r) + CALL
    assert got == pytest.approx(float(closed), rel=REL)
    assert float(comm.collective_time("alltoall", S, n, group[1] - group[0], H800, r)) == \
        pytest.approx(float(closed), rel=REL)


def test_plan_file_keeps_the_expert_fields():
    from strategies.plan import plan_from_mapping
    from strategies.plan_file import plan_to_mapping
    p = parse_plan("tp=2,ep=4,etp=1,moe_imbalance=1.25,moe_capacity_factor=2")
    d = plan_to_mapping(p)
    assert (d["etp"], d["moe_imbalance"], d["moe_capacity_factor"]) == (1, 1.25, 2.0)
    assert plan_from_mapping(d) == p


@pytest.mark.slow
def test_lower_bound_holds_for_expert_plans():
    """The search stays exact with the new all-to-all: the bound never beats the simulation,
    node-limited (a DeepSeek-V3-shaped toy: 2 router groups = the 2 nodes of ep=16; DeepEP
    forwards once per node, alltoall sends per expert), with expert TP, and with
    imbalance."""
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.plan_arrays import PlanArrays
    m = dataclasses.replace(model_preset("deepseek-v3"), num_layers=4, first_k_dense_replace=1,
                            num_nextn_predict_layers=0, seq_length=1024,
                            moe_router_num_groups=2, moe_router_group_topk=1)
    cl = cluster_preset("hgx-h800", 2)
    plans = ["ep=16,gbs=32,moe_dispatcher=deepep", "ep=16,gbs=32", "ep=8,etp=2,gbs=32",
             "pp=2,ep=8,gbs=32,moe_imbalance=1.3"]
    jobs = [make_job(m, cl, parse_plan(p)) for p in plans]
    assert stage_costs(jobs[0]).ep_remote_scale < 1.0             # forwarded, once per node
    assert stage_costs(jobs[1]).ep_remote_scale == 1.0            # alltoall: one copy per expert
    bounds = step_time_lower_bound(m, cl, "bf16", PlanArrays.from_plans([j.plan for j in jobs]))
    for j, b in zip(jobs, bounds):
        assert b <= simulate(j).step_time_s, j.plan.short()


def test_moe_layers_under_ep_drop_the_mlp_tensor_parallel_collective():
    """With ep > 1 the routed tokens travel by the all-to-all (and the etp collectives): a
    MoE layer keeps the attention's TP collective, and the MLP's only for a shared expert."""
    cl = cluster_preset("hgx-h800", 2)
    q = stage_costs(make_job(QWEN, cl, parse_plan("tp=2,ep=8,sp=true,gbs=16")))
    assert q.tp_per_layer_fwd == q.tp_per_layer_bwd == 1.0           # every layer MoE
    q1 = stage_costs(make_job(QWEN, cl, parse_plan("tp=2,ep=1,sp=true,gbs=16")))
    assert q1.tp_per_layer_fwd == 2.0                                 # allgather dispatcher
    m = dataclasses.replace(model_preset("deepseek-v3"), num_layers=4, first_k_dense_replace=1,
                            num_nextn_predict_layers=0, seq_length=1024)
    d = stage_costs(make_job(m, cl, parse_plan("tp=2,ep=8,sp=true,gbs=16")))
    assert d.tp_per_layer_fwd == 2.0                                  # shared expert keeps it
    m0 = dataclasses.replace(m, num_shared_experts=0)
    d0 = stage_costs(make_job(m0, cl, parse_plan("tp=2,ep=8,sp=true,gbs=16")))
    assert d0.tp_per_layer_fwd == pytest.approx(2.0 - 3 / 4, rel=REL)  # 3 of 4 layers MoE
