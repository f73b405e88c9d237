"""The MoE expert path's host time (``moe_time.moe_host_time``) priced by layer kind alike in
the stage-cost record, the estimate, the simulator's compute ops and the search's lower
bound, under block partial recomputation (``recompute_layers``): a chunk of MoE layers
redoes MoE layers (``StageCosts.chunk_recompute_comm`` with the chunk's ``chunk_layers``),
not the mean layer. The plan is the one whose simulated step beat its lower bound when the
simulator priced the recomputed layer as the mean layer (0.20577 s against 0.20623 s)."""
from __future__ import annotations

import collections
from dataclasses import replace

import numpy as np
import pytest

from simulator.program.compiler import compile_job
from simulator.program.ops import Compute
from simulator.simulate import simulate
from strategies.cost import ep_dispatch, gemm_shapes, gemm_time, moe_time, token_counts
from strategies.cost.stage import stage_cost_arrays
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.chunk_correction import chunk_times
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

# Qwen3-30B-A3B cut to 10 layers, the first 2 dense: stage 0 holds 2 dense + 3 MoE layers,
# stage 1 five MoE layers; block recomputation redoes 1 layer of each 5-layer chunk
MODEL = replace(model_preset("qwen3-30b-a3b"), name="qwen3-10l-dense2", num_layers=10,
                first_k_dense_replace=2, seq_length=1024)
CLUSTER = cluster_preset("dgx-h100", 1)
PLAN = Plan(tp=1, pp=2, dp=1, cp=4, ep=2, mbs=1, gbs=8, schedule="1f1b", recompute="full",
            zero=1, recompute_layers=1, recompute_method="block")
MOE = {0: 3, 1: 5}              # MoE layers per stage
RC_SHARE = 1 / 5                # block, N = 1, of a 5-layer chunk


def _exposed_per_moe_layer() -> tuple[float, float]:
    """``(forward, backward)`` GPU idle seconds of one MoE layer, composed from the physics
    terms: ``max(0, (E/ep) x EXPERT_HOST_S - G)`` with ``G`` the routed experts' GEMMs (at
    the plan's clock slowdown), the token permutations and the bias path."""
    P = PlanArrays.from_plans([PLAN])
    fw, gpu, m = get_profile(None), CLUSTER.gpu, MODEL.of_kind("moe")
    b, tp, cp, ep = PLAN.mbs, PLAN.tp, PLAN.cp, PLAN.ep
    slow = float(stage_cost_arrays(MODEL, CLUSTER, "bf16", P).slowdown[0])
    load = token_counts.moe_load(ep, P.moe_imbalance[0], P.moe_capacity_factor[0], MODEL, b, tp, cp,
                          PLAN.expert_tp)
    dedup, _ = ep_dispatch.ep_dedup(m, ep, tp, CLUSTER.gpus_per_node, 0)
    routed = [g for part, g in gemm_shapes.layer_gemm_parts(m, b, tp, cp, ep, "moe", tp, load)
              if part == "routed_mlp" and g[4] is not None]
    p_f, p_b = moe_time.moe_permute_time(m, b, tp, cp, ep, gpu, load, 0, dedup, etp=tp)
    x_f, x_b = moe_time.expert_bias_time(m, b, tp, cp, ep, gpu, load, tp, fw)
    sh = [gemm_time.expert_fixed_share(m, ep, fw)] * len(routed)    # the stack's launches (§5.42)
    g_f = slow * gemm_time.gemms_time_fwd(routed, tp, gpu, "bf16", shares=sh) + p_f + x_f
    g_b = slow * gemm_time.gemms_time_bwd_split(routed, tp, gpu, "bf16", False, fw,
                                                shares=sh)[0] + p_b + x_b
    local = m.num_experts / ep
    return (max(0.0, local * moe_time.EXPERT_HOST_S[0] - float(g_f)),
            max(0.0, local * moe_time.EXPERT_HOST_S[1] - float(g_b)))


def _op_seconds() -> dict[int, collections.Counter]:
    """Compute-op seconds by op kind of each stage's first rank."""
    progs = compile_job(make_job(MODEL, CLUSTER, PLAN), ranks=[0, 4])
    out = {}
    for rank, prog in progs.items():
        c = collections.Counter()
        for ops in prog.streams.values():
            for o in ops:
                if isinstance(o, Compute):
                    c[o.kind] += o.seconds
        out[prog.stage] = c
    return out


def test_bound_below_simulated_step():
    """The lower bound of this plan stays below its simulated step."""
    job = make_job(MODEL, CLUSTER, PLAN)
    bound = float(step_time_lower_bound(MODEL, CLUSTER, "bf16",
                                        PlanArrays.from_plans([PLAN]))[0])
    assert 0 < bound <= simulate(job).step_time_s


def test_stage_host_seconds_by_kind(monkeypatch):
    """Each stage's host seconds (with ``EXPERT_HOST_S`` less without) equal the closed form
    ``n_moe x (host - G)+`` per micro-batch and pass in the estimate's chunk times and in the
    simulator's compute ops; the recomputed forward of the all-MoE stage 1 is one MoE
    layer's, of stage 0 its MoE layers' share (3/5) of the one recomputed layer."""
    e_f, e_b = _exposed_per_moe_layer()
    assert e_f > 0 and e_b > 0                   # the host-bound regime (mbs 1, 64 experts)
    est, ops = chunk_times(make_job(MODEL, CLUSTER, PLAN)), _op_seconds()
    monkeypatch.setattr(moe_time, "EXPERT_HOST_S", (0.0, 0.0))
    est0, ops0 = chunk_times(make_job(MODEL, CLUSTER, PLAN)), _op_seconds()
    nmb = PLAN.gbs // (PLAN.mbs * PLAN.dp)
    for s, n in MOE.items():
        rc = RC_SHARE * n * e_f                  # the chunk's recomputed forward
        f, b, w = (x - y for x, y in zip(est[s][0], est0[s][0]))
        assert f == pytest.approx(n * e_f, rel=1e-12, abs=1e-15)
        assert b == pytest.approx(n * e_b + rc, rel=1e-12, abs=1e-15)
        assert w == 0.0
        d = {k: ops[s][k] - ops0[s][k] for k in ("forward", "backward", "recompute")}
        assert d["forward"] == pytest.approx(nmb * n * e_f, rel=1e-12, abs=1e-15)
        assert d["backward"] == pytest.approx(nmb * n * e_b, rel=1e-12, abs=1e-15)
        assert d["recompute"] == pytest.approx(nmb * rc, rel=1e-12, abs=1e-15)
    assert np.isclose(RC_SHARE * MOE[1], 1.0)    # stage 1 redoes exactly one MoE layer
