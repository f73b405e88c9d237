"""Sequence parallelism's backward re-gathers (docs/calibration.md §5.70): a column-parallel
linear under SP saves the local shard of its input and all-gathers it again in the backward
for the weight gradient, issued before the data-gradient GEMM and overlapped with it
(Megatron-Core ``LinearWithGradAccumulationAndAsyncCommunication.backward``, Transformer
Engine ``layernorm_linear.py``/``layernorm_mlp.py``). One rule,
``cost.stage.sp_regather_exposed``: each re-gather exposes ``max(0, all-gather - dgrad)``;
the estimate and the lower bound read it, the simulator compiles the same pieces."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost import gemm_shapes, gemm_time, hbm_rate, overlap_clock
from strategies.cost.stage import sp_regather_exposed, sp_regather_pieces, stage_costs
from strategies.estimate.scalar import estimate
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.pytorch import TORCHTITAN
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.errors import SpecError
from tests.tp_backward_checks import bound, layer_comm, tp_job

OFF = replace(MEGATRON_CORE, sp_regather=False)


_job, _layer_comm, _bound = tp_job, layer_comm, bound


@pytest.mark.parametrize("dtype,factor", [("bf16", 1.0), ("fp8", 0.5)])
def test_closed_form_of_one_layer(dtype: str, factor: float) -> None:
    """Llama 3 8B, tp 8 with SP, one sequence of 8192 tokens: a re-gather moves the forward
    all-gather's buffer, ``b·s·h`` elements of 2 bytes (1 byte in fp8: the quantised norm
    output is gathered); the attention's overlaps QKV's data-gradient GEMM ``(T x (a+2g)d/t)
    @ ((a+2g)d/t x h)``, the MLP's fc1's ``(T x 2F/t) @ (2F/t x h)``. The layer's exposed TP
    seconds grow by exactly ``max(0, t_ag - D_qkv) + max(0, t_ag - D_fc1)``."""
    job = _job(dtype=dtype)
    m, c = job.model, stage_costs(job)
    T, h = 8192, m.hidden_size
    assert c.rg_bytes == pytest.approx(factor * T * h * 2, rel=1e-15)
    # the dgrad seconds are the layer's own GEMM prices (gemm_units), read back here
    parts = gemm_shapes.layer_gemm_parts(m, 1, 8, 1, 1)
    units = gemm_time.gemm_units([g for _, g in parts], 8, job.cluster.gpu, dtype, False,
                                 MEGATRON_CORE,
                                 shares=gemm_time.fixed_shares(parts, m, 1, MEGATRON_CORE))
    qkv = [u for (p, g), u in zip(parts, units) if p == "attn" and g[4] is False][0]
    fc1 = [u for (p, g), u in zip(parts, units) if p == "dense_mlp" and g[4] is False][0]
    slow = float(overlap_clock.overlap_slowdown(8, False, 1, 0))
    assert parts[0][1][2] == (m.num_attention_heads + 2 * m.kv_heads) * m.head_dim / 8
    assert c.rg_attn == pytest.approx(slow * qkv[3], rel=1e-15)
    assert (c.rg_dense_n, c.rg_shared_n) == (1.0, 0.0)
    assert c.rg_dense == pytest.approx(slow * fc1[3], rel=1e-15)
    t_ag = float(cm.collective_time("allgather", c.rg_bytes, 8, 1, job.cluster))
    want = max(0.0, t_ag - c.rg_attn) + max(0.0, t_ag - c.rg_dense)
    assert float(sp_regather_exposed(
        lambda w: cm.collective_time("allgather", c.rg_bytes * w, 8, 1, job.cluster), c)
    ) == pytest.approx(want, rel=1e-15)
    if dtype == "bf16":       # here the gather outlasts QKV's dgrad, not fc1's
        assert c.rg_attn < t_ag < c.rg_dense
    off = replace(job, framework=OFF)
    assert stage_costs(off).rg_bytes == 0.0
    assert _layer_comm(job) - _layer_comm(off) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("spec,model,nodes", [
    ("tp=8,pp=1,mbs=1,gbs=4,sp=true", "llama3-8b", 1),
    ("tp=8,pp=1,mbs=1,gbs=4,sp=true,tp_comm_overlap=true", "llama3-8b", 1),
    ("tp=8,pp=2,mbs=1,gbs=8,sp=true,recompute=full", "llama3-8b", 2),
    # (gradients reduced after the step: the estimate's reduction window counts compute
    # only, so an overlapped reduction would hide the last backward's re-gathers in the
    # simulation alone; docs/calibration.md §5.70)
    ("tp=8,pp=1,mbs=1,gbs=4,sp=true,cp=2,overlap_grad_reduce=false", "llama3-8b", 2),
])
def test_estimate_meets_contention_free_simulation(spec: str, model: str, nodes: int) -> None:
    """The re-gathers add the same seconds to the estimate and to the contention-free
    simulation (the simulator carves the dgrad GEMMs out of the block and runs the
    all-gathers beside them): the step difference with and without them agrees to 1e-9;
    the lower bound rises with them and stays below the simulation. (At tp 8 the gather of
    8192 tokens outlasts QKV's data gradient: some of it is exposed in every case.)"""
    on, off = _job(spec, model, nodes=nodes), _job(spec, model, fw=OFF, nodes=nodes)
    assert stage_costs(on).rg_bytes > 0
    e_on, e_off = estimate(on).step_time_s, estimate(off).step_time_s
    s_on = simulate(on, network="contention-free").step_time_s
    s_off = simulate(off, network="contention-free").step_time_s
    assert e_on > e_off
    assert s_on - s_off == pytest.approx(e_on - e_off, rel=1e-9)
    lb_on, lb_off = _bound(on), _bound(off)
    assert lb_off <= lb_on <= s_on * (1 + 1e-9)


def test_moe_block_waits_for_the_longer_of_gather_and_dgrad() -> None:
    """A MoE layer (Qwen3-30B-A3B, tp 4 with SP, ep 2): in each backward block the carved
    data-gradient compute and the re-gather start together and the rest of the block starts
    when the longer ends (contention-free), the rule the estimate charges per layer."""
    job = _job("tp=4,pp=1,mbs=1,gbs=4,sp=true,ep=2,etp=1", "qwen3-30b-a3b", layers=2)
    c = stage_costs(job)
    t_ag = float(cm.collective_time("allgather", c.rg_bytes, 4, 1, job.cluster))
    assert t_ag > c.rg_attn > 0                     # exposed here
    res = simulate(job, network="contention-free", fold=False)
    recs = sorted(res.by_rank(0), key=lambda r: (r.start, r.end))
    for b in ("B0.c0", "B1.c0"):
        ag = next(r for r in recs if r.label == f"AG tp re-gather {b}")
        comp = [r for r in recs if r.label == b and r.kind == "backward"]
        piece, main = comp[0], comp[1]       # the first block: its carved GEMMs, its rest
        assert ag.start == pytest.approx(piece.start, rel=1e-9)
        layers = ag.duration / t_ag                  # the block's layers, each gathering once
        assert layers == pytest.approx(float(round(layers)), rel=1e-9) and round(layers) >= 1
        assert piece.duration == pytest.approx(layers * c.rg_attn, rel=1e-9)
        assert main.start == pytest.approx(max(ag.end, piece.end), rel=1e-9)
    # the whole step: the estimate's distance to the simulation (-2.05 % here without the
    # re-gathers, the MoE layer's own) does not grow with them
    errs = []
    for j in (job, replace(job, framework=OFF)):
        errs.append(estimate(j).step_time_s
                    / simulate(j, network="contention-free").step_time_s - 1)
    assert abs(errs[0]) <= abs(errs[1]) + 1e-4


def test_moe_layers_regather_attention_and_shared_experts_only() -> None:
    """A MoE layer re-gathers the attention's input and, with shared experts, theirs; the
    routed experts' tokens come from the dispatcher's gather, kept whole (no re-gather)."""
    c = stage_costs(_job("tp=2,pp=1,mbs=1,gbs=4,sp=true,ep=2,etp=1", "qwen3-30b-a3b"))
    assert c.rg_attn > 0 and (c.rg_dense_n, c.rg_shared_n) == (0.0, 0.0)
    pieces = sp_regather_pieces(c)
    assert [s for s, _, _ in pieces] == [1.0, 0.0, 0.0]
    m = model_preset("deepseek-v3")
    dk = gemm_shapes.layer_gemm_parts(m, 1, 2, 1, 8)
    assert any(p == "shared_mlp" for p, _ in dk)
    m4 = replace(m, num_layers=4, first_k_dense_replace=1, num_nextn_predict_layers=0)
    d = stage_costs(make_job(m4, cluster_preset("dgx-h100", 2),
                             parse_plan("tp=2,pp=1,mbs=1,gbs=8,sp=true,ep=8,etp=1")))
    assert d.rg_dense_n == pytest.approx(0.25) and d.rg_shared_n == pytest.approx(0.75)
    assert d.rg_shared > 0 and d.rg_dense > d.rg_shared


@pytest.mark.parametrize("spec,fw", [("tp=8,pp=1,mbs=1,gbs=4,sp=false", MEGATRON_CORE),
                                     ("tp=1,pp=1,dp=8,mbs=1,gbs=8,sp=true", MEGATRON_CORE),
                                     ("tp=8,pp=1,mbs=1,gbs=4,sp=true,zero=0", TORCHTITAN)])
def test_no_regather_without_sp_tp_or_on_dtensor(spec: str, fw) -> None:
    """No SP, no TP, or a stack that keeps the gathered input (torchtitan's DTensor): no
    bytes, and the estimate is the one without the rule, bit for bit."""
    job = _job(spec, fw=fw)
    assert stage_costs(job).rg_bytes == 0.0
    off = replace(job, framework=replace(fw, sp_regather=False))
    assert estimate(job).step_time_s == estimate(off).step_time_s


def test_flows_network_contends_and_is_deterministic() -> None:
    """On the flows network the re-gathers share the NVLink with the block's other TP
    traffic: the step is at least the contention-free one; the same job simulates to the
    same step, bit for bit."""
    job = _job("tp=8,pp=1,mbs=1,gbs=4,sp=true,tp_comm_overlap=true")
    cf = simulate(job, network="contention-free").step_time_s
    fl = simulate(job).step_time_s
    assert fl >= cf * (1 - 1e-12)
    assert simulate(job).step_time_s == fl
    res = simulate(job, network="contention-free", fold=False)
    regathers = [r for r in res.by_rank(0) if r.label.startswith("AG tp re-gather B")]
    assert regathers and all(r.stream.startswith("tp-comm") for r in regathers)


def test_hidden_regathers_are_not_compiled() -> None:
    """Where every re-gather is shorter than its GEMM (tp 4: QKV's dgrad outlasts the gather)
    nothing is exposed and nothing is compiled: the program and the step are the ones without
    the rule, bit for bit."""
    job = _job("tp=4,pp=1,mbs=1,gbs=4,sp=true")
    c = stage_costs(job)
    t_ag = float(cm.collective_time("allgather", c.rg_bytes, 4, 1, job.cluster))
    assert 0 < t_ag < min(c.rg_attn, c.rg_dense)
    off = replace(job, framework=OFF)
    a, b = simulate(job, fold=False), simulate(off, fold=False)
    assert a.step_time_s == b.step_time_s
    assert len(a.by_rank(0)) == len(b.by_rank(0))
    assert estimate(job).step_time_s == estimate(off).step_time_s


def test_profile_field_is_checked() -> None:
    with pytest.raises(SpecError, match="sp_regather"):
        replace(MEGATRON_CORE, sp_regather=1)
    assert MEGATRON_CORE.sp_regather and not TORCHTITAN.sp_regather
    assert np.all(np.asarray(sp_regather_exposed(lambda w: 0.0, stage_costs(_job()))) == 0.0)


def test_a_measured_profile_moves_estimate_and_simulation_alike() -> None:
    """With a GPU profile's measured collectives (§5.71: the fake backend's NCCL at 360 GB/s
    bus bandwidth) the re-gather's seconds are the measured ones in the estimate, the bound
    and the simulator (the op's repeat): the step difference still agrees to 1e-9."""
    from simulator.calibrate import CalibrationSpec, FakeBackend, calibrate
    from strategies.stacks.profile import LAUNCH_GAP_S
    m = replace(model_preset("llama3-8b"), num_layers=4)
    fake = FakeBackend(gemm_scale=1.0, attention_scale=1.0, hbm_fraction=hbm_rate.HBM_EFFICIENCY,
                       launch_gap=LAUNCH_GAP_S, count=8, bus_bandwidth=360e9)
    spec = CalibrationSpec(models=(m,), tps=(1,), mbs=(1,), seqs=(4096,), dtypes=("bf16",))
    base = cluster_preset("dgx-h100", 1)
    gpu = replace(base.gpu, profile=calibrate(fake, spec))
    cl = replace(base, groups=tuple(replace(g, gpu=gpu) for g in base.groups))
    plan = parse_plan("tp=8,pp=1,mbs=1,gbs=4,sp=true")
    on, off = (make_job(m, cl, plan, framework=fw) for fw in (MEGATRON_CORE, OFF))
    c = stage_costs(on)
    t_ag = float(cm.collective_time("allgather", c.rg_bytes, 8, 1, cl))
    assert t_ag != pytest.approx(float(cm.collective_time("allgather", c.rg_bytes, 8, 1, base)),
                                 rel=1e-6)                   # the profile is read
    d_est = estimate(on).step_time_s - estimate(off).step_time_s
    d_sim = (simulate(on, network="contention-free").step_time_s
             - simulate(off, network="contention-free").step_time_s)
    assert d_est > 0 and d_sim == pytest.approx(d_est, rel=1e-9)
    assert _bound(on) <= simulate(on, network="contention-free").step_time_s * (1 + 1e-9)
