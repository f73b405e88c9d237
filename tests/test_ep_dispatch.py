"""Token dispatchers as they move bytes (plan ``moe_dispatcher``): DeepEP's normal kernels and
HybridEP send a token once per destination rank and once per destination node over RDMA
(``ep_dispatch.expert_hit_probability``, ``ep_dispatch.ep_dedup``), against brute-force counts; and
the Megatron-Bridge configs the reader applies to published rows."""
from __future__ import annotations

import itertools
import json
from math import comb

import pytest

from simulator.cli.main import main
from strategies.cost import ep_dispatch
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from strategies.reference.bridge_recipes import RECIPES, recipe_for
from strategies.reference.cases import case_from_entry
from topologies.cluster import cluster_preset

REF = "strategies/reference/data/megatron_bridge_2604.json"


def _brute(E, k, units, G=None, M=None):
    """Mean over every routing (uniform; group-limited: every choice of M groups, then every
    k experts among them) of the share of units hit."""
    per = E // units
    unit = [e // per for e in range(E)]
    pools = ([list(range(E))] if not G else
             [[e for g in gs for e in range(g * E // G, (g + 1) * E // G)]
              for gs in itertools.combinations(range(G), M)])
    total = n = 0
    for pool in pools:
        for pick in itertools.combinations(pool, k):
            total += len({unit[e] for e in pick})
            n += 1
    return total / n / units


@pytest.mark.parametrize("E,k,units,G,M", [(16, 4, 4, None, None), (16, 4, 8, None, None),
                                           (16, 3, 2, 4, 2), (16, 3, 4, 4, 2),
                                           (16, 3, 8, 4, 2), (12, 2, 6, 6, 3)])
def test_hit_probability_is_the_brute_force_count(E, k, units, G, M):
    assert ep_dispatch.expert_hit_probability(E, k, units, G, M) == pytest.approx(
        _brute(E, k, units, G, M), rel=1e-12)


def test_node_limited_units_are_hit_at_most_m_of_g():
    """Groups = nodes: a node is hit only when its group is chosen (M/G), then unless all k
    land in the other chosen groups."""
    E, k, G, M = 256, 8, 8, 4
    p = ep_dispatch.expert_hit_probability(E, k, 8, G, M)
    assert p == pytest.approx(M / G * (1 - comb(3 * 32, k) / comb(4 * 32, k)), rel=1e-12)


@pytest.mark.parametrize("ep,disp", [(32, "deepep"), (64, "hybridep"), (16, "deepep")])
def test_deepep_node_bytes_equal_the_formula(ep, disp):
    """Per GPU and forward layer, the bytes the record sends between nodes (ep_bytes ×
    remote scale × (N-1)/N of the flows) are one hidden vector per token per remote node
    reached, dispatch and combine: ``2·T·h·2 B·(N-1)·P_node·moe_share``; within the node
    one per destination rank, ``ep·P_rank/k`` of Megatron's per-expert copies."""
    m = model_preset("deepseek-v3")
    cl = cluster_preset("dgx-h100", 32)
    plan = Plan(tp=1, pp=1, ep=ep, dp=256, mbs=1, gbs=256, moe_dispatcher=disp,
                moe_imbalance=1.0)                # balanced: the closed form
    job = make_job(m, cl, plan)
    c = stage_costs(job)
    a2a = stage_costs(make_job(m, cl, Plan(tp=1, pp=1, ep=ep, dp=256, mbs=1, gbs=256,
                                           moe_imbalance=1.0)))
    N = ep // 8
    T, h = m.seq_length, m.hidden_size
    share = m.num_moe_layers / m.num_layers
    p_node = ep_dispatch.expert_hit_probability(m.num_experts, m.moe_router_topk, N,
                                                m.moe_router_num_groups, m.moe_router_group_topk)
    p_rank = ep_dispatch.expert_hit_probability(m.num_experts, m.moe_router_topk, ep,
                                                m.moe_router_num_groups, m.moe_router_group_topk)
    inter = c.ep_bytes * c.ep_remote_scale * (N - 1) / N
    assert inter == pytest.approx(2 * T * h * 2 * (N - 1) * p_node * share, rel=1e-12)
    scale = ep * p_rank / m.moe_router_topk
    base = ep_dispatch.ep_alltoall_bytes_fwd(m, 1, 1, 1, ep)
    assert c.ep_bytes == pytest.approx(base * scale, rel=1e-12)
    assert a2a.ep_bytes == pytest.approx(base, rel=1e-12)
    assert inter < a2a.ep_bytes * a2a.ep_remote_scale * (N - 1) / N


def test_one_node_dedup_scales_only_the_bytes():
    m = model_preset("qwen3-30b-a3b")
    b, r = ep_dispatch.ep_dedup(m, 8, 1, 8, 2)
    p = ep_dispatch.expert_hit_probability(128, 8, 8)
    assert b == pytest.approx(8 * p / 8, rel=1e-12) and r == 1.0
    assert ep_dispatch.ep_dedup(m, 8, 1, 8, 0) == (1.0, 1.0)


def test_bad_dispatcher_exits_2(capsys):
    rc = main(["estimate", "--model", "qwen3-30b-a3b", "--cluster", "hgx-h800:2",
               "--plan", "ep=8,moe_dispatcher=nccl,gbs=16"])
    err = capsys.readouterr().err
    assert rc == 2 and "moe_dispatcher" in err and "deepep" in err and "Traceback" not in err


def test_stack_without_the_dispatcher_refuses_it():
    with pytest.raises(SpecError, match="moe_dispatcher"):
        make_job(model_preset("qwen3-30b-a3b"), cluster_preset("hgx-h800", 2),
                 parse_plan("ep=8,moe_dispatcher=hybridep"), global_batch=16,
                 framework="hai-llm")


def test_export_names_the_flex_backend():
    job = make_job(model_preset("qwen3-30b-a3b"), cluster_preset("hgx-h800", 2),
                   parse_plan("ep=8,moe_dispatcher=hybridep"), global_batch=16)
    args, _ = megatron_args(job)
    assert "--moe-token-dispatcher-type flex" in args
    assert "--moe-flex-dispatcher-backend hybridep" in args


# ------------------------------------------------------------------ the reader
def _row(rid):
    return next(r for r in json.load(open(REF)) if r["id"] == rid)


def test_reader_applies_the_config_of_the_rows_layout():
    """DeepSeek-V3 on B200 (pp8 vp2 ep32): DeepEP with the overlap; Qwen3-235B on H100 (tp2
    ep32, refused with etp = tp): expert TP 1 and the overlap; each said with its file."""
    c = case_from_entry(_row("mbridge260401_deepseekv3_b200_256_mxfp8"))
    assert c.job.plan.moe_dispatcher == "deepep" and c.job.plan.ep_overlap
    assert any("deepseek_workload_base_configs.py" in a for a in c.assumptions)
    q = case_from_entry(_row("mbridge260401_qwen3235ba22b_h100_256_fp8"))
    assert q.job is not None and q.job.plan.etp == 1 and q.job.plan.ep_overlap
    assert q.job.plan.moe_dispatcher == "alltoall"
    assert any("etp=1" in a for a in q.assumptions)


def test_reader_leaves_rows_no_config_fits():
    """A row whose layout is not the config's keeps the stack's defaults."""
    r = _row("mbridge260401_deepseekv3_b200_256_mxfp8")
    moved = dict(r, plan=dict(r["plan"], microbatch=2))
    assert recipe_for(moved) is None
    c = case_from_entry(moved)
    assert c.job.plan.moe_dispatcher == "alltoall" and not c.job.plan.ep_overlap


def test_a_stated_etp_is_read():
    r = _row("mbridge260401_qwen3235ba22b_h100_256_fp8")
    stated = dict(r, plan=dict(r["plan"], etp=2, ep=16))
    c = case_from_entry(stated)
    assert c.job is not None and c.job.plan.etp == 2


def test_recipes_are_unique_per_row_key():
    keys = [(r.model, r.gpu, r.n_gpus, r.precision, r.layout) for r in RECIPES]
    assert len(keys) == len(set(keys))
