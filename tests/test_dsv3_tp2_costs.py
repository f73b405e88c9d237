"""DeepSeek-V3 at tp 2 in DGX Cloud 25.05 (docs/calibration.md §5.97): the tensor-parallel
costs Megatron-Core 0.12 runs on these rows, as experiments/dsv3_tp2_costs.py prices them with
the model's functions: each figure is its closed form, the plan facts are the launcher's, and
the unpriced costs are a small share of the miss (a finding; §5.99 then priced the shapes and
the down projections' reductions beside their weight gradients)."""
from __future__ import annotations

import pytest

from experiments import dsv3_tp2_costs as d
from experiments.dgxc_deepseek_h100 import deepseek_rows, layer_microbatches
from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs, tp_kind_bytes
from strategies.estimate.scalar import estimate
from strategies.reference.cases import case_from_entry

T, E, H = 4096, 256, 7168


@pytest.fixture(scope="module")
def jobs():
    ds, allr = deepseek_rows()
    return {r["id"]: (r, case_from_entry(r, allr).job) for r in ds}


def _t(job, kind: str, nb: float) -> float:
    return float(cm.collective_time(kind, nb, job.plan.tp, 1, job.cluster))


def test_plan_facts_are_the_launchers(jobs):
    """launch.sh at v25.05.05: TP=2, ETP=1 on every row; SP on (NeMo's
    ``sequence_parallel = tp > 1``); no TP overlap; Megatron-Core 0.12's column layout.
    The expert grid fits the stage's ranks (``ep·etp <= tp·dp``)."""
    assert len(jobs) == 5
    for r, job in jobs.values():
        p = job.plan
        assert (p.tp, p.expert_tp, bool(p.sp), p.tp_comm_overlap) == (2, 1, True, False)
        assert job.framework.mla_down_proj == "column"
        assert p.ep * p.expert_tp <= p.tp * p.dp


def test_candidates_are_their_closed_forms(jobs):
    """Each candidate's seconds per MoE layer and micro-batch, recomputed from its formula."""
    for rid, (r, job) in jobs.items():
        c = stage_costs(job)
        ag = _t(job, "allgather", float(tp_kind_bytes(c, "allgather")))
        rs = _t(job, "reduce_scatter", float(tp_kind_bytes(c, "reduce_scatter")))
        layers = max(job.layers_of_stage(s) for s in range(job.plan.pp))
        mb = job.plan.gbs // (job.plan.mbs * job.plan.dp)
        got = {n: s for n, _, s in d.candidates(job, layers, mb)}
        assert got["dispatcher gather over etp (etp 1)"] == 0.0
        aux = T * E * 4.0
        assert got[f"seq_aux_loss probs AG + RS ({aux / 1e6:.2f} MB)"] == pytest.approx(
            _t(job, "allgather", aux) + _t(job, "reduce_scatter", aux), rel=1e-12)
        assert got["  (the same, whole, were no dgrad beside them)"] == pytest.approx(
            2 * ag, rel=1e-12)
        # priced (§5.97, §5.99): each re-gather beside the down projection's dgrad GEMM at
        # the code's shape, shorter than the whole one before §5.99 (more exposed)
        assert got["down projections' re-gathers exposed (priced §5.97, §5.99)"] == \
            pytest.approx(max(0.0, ag - c.rg_down_q) + max(0.0, ag - c.rg_down_kv), rel=1e-12)
        assert 0 <= got["  the same, less beside the model's dgrad GEMM before §5.99"] < 2 * ag
        assert got["shared expert's AG + RS on the side stream (forward)"] == pytest.approx(
            -(ag + rs), rel=1e-12)
        # priced (§5.99): min(t_rs, wgrad) of each down projection hidden
        assert got["down projections' reduce-scatters hidden by their wgrad (priced §5.99)"] \
            == pytest.approx(-(min(rs, c.rd_down_q) + min(rs, c.rd_down_kv)), rel=1e-12)
        assert -2 * rs <= got[
            "down projections' reduce-scatters hidden by their wgrad (priced §5.99)"] < 0
        for name in ("down projections'", "router's"):
            assert got[f"{name} GEMMs fwd + bwd at the code's shape, less the whole ones "
                       "(priced §5.99)"] < 0


def test_replicated_gemms_at_the_codes_shape(jobs):
    """The two down projections at ``N/tp`` (1536/2, 576/2) and the router at ``T/tp`` rows,
    as the model prices them since §5.99; the code's shapes cost less than the whole ones
    (half the FLOPs at tp 2)."""
    r, job = jobs["dgxc2505_deepseek_v3_671b_h100_512_bf16"]
    have, want = d.replicated_gemms(job)
    assert [g[1:4] for _, g in have] == [(T, 1536, H), (T, 576, H), (T, E, H)]
    assert [g[1:4] for _, g in want] == [(T, 768, H), (T, 288, H), (T / 2, E, H)]
    assert d._priced(job, want)[1] < d._priced(job, have)[1]


def test_unpriced_costs_are_a_small_share_of_the_miss(jobs):
    """The unpriced tp costs sum to under 1 % of the miss per layer and micro-batch on both
    GPUs; with the over-charges the model is already slower than the code, not faster."""
    for rid in ("dgxc2505_deepseek_v3_671b_h100_512_bf16",
                "dgxc2505_deepseek_v3_671b_gb200_256_bf16"):
        r, job = jobs[rid]
        layers = max(job.layers_of_stage(s) for s in range(job.plan.pp))
        mb = job.plan.gbs // (job.plan.mbs * job.plan.dp)
        cands = d.candidates(job, layers, mb)
        plus = sum(s for _, sg, s in cands if sg == "+")
        minus = sum(s for _, sg, s in cands if sg == "-")
        miss = (r["measured"]["step_time_s"] - estimate(job).step_time_s) \
            / layer_microbatches(r)
        assert miss > 0 and 0 < plus < 0.01 * miss
        assert plus + minus < 0


def test_tp1_keeps_the_gpus(jobs):
    r, job = jobs["dgxc2505_deepseek_v3_671b_gb200_128_bf16"]
    one = d.tp1_job(job)
    assert (one.plan.tp, one.plan.sp) == (1, False)
    assert one.plan.tp * one.plan.dp * one.plan.pp == job.plan.tp * job.plan.dp * job.plan.pp


def test_shared_side_stream_upper_figure(jobs):
    """The side stream's forward: the shared expert's AG + RS (table 2's figure, negated) and
    its forward GEMMs (``(T, 2·2048/2, H)`` and ``(T, H, 2048/2)`` at tp 2), both positive."""
    from strategies.cost import gemm_shapes, gemm_time
    r, job = jobs["dgxc2505_deepseek_v3_671b_h100_512_bf16"]
    c, p = stage_costs(job), job.plan
    coll, gemm = d.shared_side_stream(job)
    ag = _t(job, "allgather", float(tp_kind_bytes(c, "allgather")))
    rs = _t(job, "reduce_scatter", float(tp_kind_bytes(c, "reduce_scatter")))
    assert coll == pytest.approx(ag + rs, rel=1e-12)
    parts = gemm_shapes.layer_gemm_parts(job.model, p.mbs, p.tp, p.cp, p.ep, "moe", p.expert_tp,
                                         1.0, gemm_time.whole_split(p.tp, p.sp, job.framework))
    shared = [g for n, g in parts if n == "shared_mlp"]
    assert [g[1:4] for g in shared] == [(T, 2048, H), (T, H, 1024)]
    assert gemm == pytest.approx(float(gemm_time.gemms_time_fwd(
        shared, 2, job.cluster.gpu, job.dtype, False, job.system)), rel=1e-12)
    assert coll > 0 and gemm > 0
