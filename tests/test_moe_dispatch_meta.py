"""Megatron-Core's alltoall token dispatcher's small blocking collectives besides the tokens'
dispatch and combine (``ep_dispatch.dispatcher_metadata_bytes``, ``comm.dispatcher_metadata_time``):
the tokens-per-expert all-gather over ``etp·ep`` ranks and the router probabilities'
all-to-all (forward) and its gradient's (backward); none for DeepEP and HybridEP; read by the
stage-cost record's layer passes, so the estimate and the simulator move together."""
from __future__ import annotations

import numpy as np
import pytest

from strategies.cost import comm as cm
from strategies.cost import ep_dispatch
from strategies.cost.stage import stage_cost_arrays
from strategies.estimate import estimate
from strategies.job import make_job
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from simulator.simulate import simulate
from topologies.cluster import cluster_preset


def test_bytes_closed_form():
    """counts: the gathered buffer of ``etp·ep·E`` int64 counts; probs: one 16-bit value per
    routed copy of the rank's ``T/tp`` tokens (``k`` copies each)."""
    m = model_preset("gpt-oss-120b")
    c, p = ep_dispatch.dispatcher_metadata_bytes(m, 4, 1, 1, 64, 1)
    assert c == 64 * m.num_experts * 8
    assert p == pytest.approx(4 * m.seq_length * m.moe_router_topk * 2, rel=1e-15)
    c2, p2 = ep_dispatch.dispatcher_metadata_bytes(m, 4, 2, 1, 8, 2)
    assert c2 == 16 * m.num_experts * 8
    assert p2 == pytest.approx(p / 2, rel=1e-15)


def test_time_closed_form_and_zeros():
    """alltoall: forward = the all-gather over ``etp·ep`` consecutive ranks plus the probs'
    all-to-all over ``ep`` ranks ``etp`` apart, backward the all-to-all, to floating-point
    precision; 0 for DeepEP and HybridEP, with ep = 1 and for a dense model."""
    m, cl = model_preset("gpt-oss-120b").of_kind("moe"), cluster_preset("gb300-nvl72", 1)
    c, p = ep_dispatch.dispatcher_metadata_bytes(m, 4, 1, 1, 64, 1)
    f, b = cm.dispatcher_metadata_time(m, 4, 1, 1, 64, 1, 0, cl)
    ag = cm.collective_time("allgather", c, 64, 1, cl)
    a2a = cm.collective_time("alltoall", p, 64, 1, cl)
    assert ag > 0 and a2a > 0
    assert f == pytest.approx(ag + a2a, rel=1e-12)
    assert b == pytest.approx(a2a, rel=1e-12)
    assert cm.dispatcher_metadata_time(m, 4, 1, 1, 64, 1, 1, cl) == (0.0, 0.0)
    assert cm.dispatcher_metadata_time(m, 4, 1, 1, 1, 1, 0, cl) == (0.0, 0.0)
    dense = model_preset("llama3-8b")
    assert cm.dispatcher_metadata_time(dense, 4, 1, 1, 8, 1, 0, cl) == (0.0, 0.0)


def test_mean_layer_share_and_vectorised():
    """DeepSeek-V3's mean layer carries the MoE layers' share; arrays of plans give each
    plan's scalar."""
    cl = cluster_preset("dgx-b200", 8)
    ds = model_preset("deepseek-v3")
    share = ds.num_moe_layers / ds.num_layers
    one = cm.dispatcher_metadata_time(ds.of_kind("moe"), 1, 1, 1, 32, 1, 0, cl)
    mean = cm.dispatcher_metadata_time(ds, 1, 1, 1, 32, 1, 0, cl)
    assert mean[0] == pytest.approx(share * one[0], rel=1e-12)
    assert mean[1] == pytest.approx(share * one[1], rel=1e-12)
    ep = np.array([1, 8, 32, 64, 8])
    code = np.array([0, 0, 0, 0, 2])
    f, b = cm.dispatcher_metadata_time(ds, 1, 1, 1, ep, 1, code, cl)
    for i in range(len(ep)):
        fi, bi = cm.dispatcher_metadata_time(ds, 1, 1, 1, int(ep[i]), 1, int(code[i]), cl)
        assert f[i] == pytest.approx(fi, rel=1e-12) and b[i] == pytest.approx(bi, rel=1e-12)


def _job(disp: str):
    m, cl = model_preset("qwen3-30b-a3b"), cluster_preset("dgx-b200", 1)
    plan = Plan(tp=1, pp=1, dp=8, ep=8, mbs=2, gbs=32, moe_dispatcher=disp, moe_imbalance=1.0)
    return make_job(m, cl, plan, dtype="bf16")


def test_stage_record_estimate_and_simulator_read_it(monkeypatch):
    """The stage record's layer passes hold the charge; the estimate's and the simulator's
    step each grow by at least every MoE layer's charge once per micro-batch (one rank,
    no pipeline: the whole charge is on the critical path); HybridEP's steps carry its
    routing-map all-gather, forward only (§5.114)."""
    job = _job("alltoall")
    m, cl = job.model, job.cluster
    f, b = cm.dispatcher_metadata_time(m, 2, 1, 1, 8, 1, 0, cl)
    assert f > 0 and b > 0
    P = PlanArrays.of_plan(job.plan)
    with_ = stage_cost_arrays(m, cl, "bf16", P)
    est, sim = estimate(job).step_time_s, simulate(job).step_time_s
    hyb = _job("hybridep")
    est_h, sim_h = estimate(hyb).step_time_s, simulate(hyb).step_time_s
    hf, hb = cm.dispatcher_metadata_time(m, 2, 1, 1, 8, 1, 2, cl)
    assert hf > 0 and hb == 0.0
    monkeypatch.setattr(cm, "dispatcher_metadata_time",
                        lambda *a, **k: (0.0, 0.0))
    without = stage_cost_arrays(m, cl, "bf16", P)
    assert float(with_.layer_fwd - without.layer_fwd) == pytest.approx(f, rel=1e-9)
    assert float(with_.layer_bwd - without.layer_bwd) == pytest.approx(b, rel=1e-9)
    n = m.num_layers * estimate(job).num_microbatches
    assert est - estimate(job).step_time_s == pytest.approx(n * (f + b), rel=1e-6)
    assert sim - simulate(job).step_time_s >= 0.999 * n * (f + b)
    n_h = m.num_layers * estimate(hyb).num_microbatches
    assert est_h - estimate(hyb).step_time_s == pytest.approx(n_h * hf, rel=1e-6)
    assert sim_h - simulate(hyb).step_time_s >= 0.999 * n_h * hf


def test_hybridep_gathers_the_routing_map():
    """HybridEP: forward = the ring all-gather of every rank's bool routing map, ``T/tp``
    tokens by ``etp·E`` columns, over the ``etp·ep`` consecutive ranks, to floating-point
    precision; nothing in the backward; with ``ep = etp = 1`` nothing; the mean layer's share
    and arrays as the scalars."""
    m, cl = model_preset("qwen3-30b-a3b"), cluster_preset("gb200-nvl72", 2)
    nb = ep_dispatch.hybridep_map_bytes(m, 4, 1, 1, 8, 1)
    assert nb == 8 * 4 * m.seq_length * m.num_experts * ep_dispatch.HYBRIDEP_MAP_BYTES
    assert ep_dispatch.hybridep_map_bytes(m, 4, 2, 1, 8, 2) == 16 * 2 * m.seq_length * 2 * \
        m.num_experts
    f, b = cm.dispatcher_metadata_time(m, 4, 1, 1, 8, 1, 2, cl)
    assert f == pytest.approx(cm.collective_time("allgather", nb, 8, 1, cl), rel=1e-12)
    assert f > 0 and b == 0.0
    assert cm.dispatcher_metadata_time(m, 4, 1, 1, 1, 1, 2, cl) == (0.0, 0.0)
    # paired with another micro-batch's compute (ep_overlap, DualPipe): it rides the dispatch
    # on the communication stream, not the compute path; the alltoall's metadata stays
    assert cm.dispatcher_metadata_time(m, 4, 1, 1, 8, 1, 2, cl, ep_overlap=True) == (0.0, 0.0)
    assert cm.dispatcher_metadata_time(m, 4, 1, 1, 8, 1, 0, cl, ep_overlap=True) == \
        cm.dispatcher_metadata_time(m, 4, 1, 1, 8, 1, 0, cl)
    assert ep_dispatch.hybridep_map_bytes(model_preset("llama3-8b"), 4, 1, 1, 8, 1) == 0.0
    ds = model_preset("deepseek-v3")
    one = cm.dispatcher_metadata_time(ds.of_kind("moe"), 1, 1, 1, 32, 1, 2, cl)
    mean = cm.dispatcher_metadata_time(ds, 1, 1, 1, 32, 1, 2, cl)
    assert mean[0] == pytest.approx(ds.num_moe_layers / ds.num_layers * one[0], rel=1e-12)
    ep, code = np.array([8, 32, 8, 8]), np.array([2, 2, 0, 1])
    fa, ba = cm.dispatcher_metadata_time(ds, 1, 1, 1, ep, 1, code, cl)
    for i in range(len(ep)):
        fi, bi = cm.dispatcher_metadata_time(ds, 1, 1, 1, int(ep[i]), 1, int(code[i]), cl)
        assert fa[i] == pytest.approx(fi, rel=1e-12) and ba[i] == pytest.approx(bi, rel=1e-12)
