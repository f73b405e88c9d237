"""Low-precision training: what each recipe casts, what a cast moves, where it is charged
(strategies/cost/quantise.py, topologies/precision.py), and the power rule of the Blackwell
catalog entries (topologies/gpus/catalog.py). Closed forms to floating-point precision."""

import numpy as np
import pytest

from strategies.cost import attention_time, elementwise_bytes, elementwise_time, gemm_time
from strategies.cost import grad_time, hbm_rate, layer_time, overlap_clock, param_counts
from strategies.cost import qkv_split, quantise
from strategies.cost.stage import stage_cost_arrays, stage_costs
from strategies.job import make_job
from strategies.memory.scalar import memory_components
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.reference.entry_specs import entry_dtype
from tests.fuzz_profile import run_cli
from topologies.cluster import cluster_preset
from topologies.errors import SpecError
from topologies.gpus import get_gpu, gpu_from_mapping, gpu_to_mapping
from topologies.gpus.sustained import B200_SUSTAINED_RATIO, sustained_ratio
from topologies.precision import PRECISIONS


@pytest.mark.parametrize("dtype, copies, fused, nbytes", [
    ("bf16", 0, False, 0.0),
    ("fp8", 1, False, 2 + 1),                  # read bf16, write one fp8 copy (Blackwell)
    ("fp8", 2, False, 2 + 2),                  # Hopper: the transposed copy too
    ("fp8", 1, True, 1 - 2),                   # the norm writes fp8 instead of bf16
    ("fp8", 2, True, 0.0),
    ("fp8-current", 1, False, 2 + 2 + 1),      # amax read, cast read, copy written
    ("fp8-current", 1, True, 2 + 1),           # the producer finds the amax; cast still reads
    ("fp8-blockwise", 2, False, 2 + 2 * (1 + 4 / 128)),
    ("mxfp8", 2, False, 2 + 2 * (1 + 1 / 32)),
    ("mxfp8", 2, True, 2 * (1 + 1 / 32) - 2),
    ("nvfp4", 2, False, 2 + 2 + 2 * (0.5 + 1 / 16)),
    # TE runs the norm/activation unfused under RHT: its own amax pass and the cast's read
    ("nvfp4", 2, True, 2 + 2 + 2 * (0.5 + 1 / 16)),
])
def test_cast_bytes_per_element(dtype, copies, fused, nbytes):
    assert PRECISIONS[dtype].cast_bytes(copies, fused) == pytest.approx(nbytes, abs=1e-15)


@pytest.mark.parametrize("gpu, dtype, copies", [
    ("H100", "bf16", 0), ("H100", "fp8", 2), ("H100", "fp8-current", 2),
    ("H200", "fp8-blockwise", 2), ("B200", "fp8", 1), ("GB200", "fp8-current", 1),
    ("B200", "mxfp8", 2), ("B200", "nvfp4", 2), ("B200", "fp8-blockwise", 2)])
def test_copies_follow_the_scaling_and_the_tensor_cores(gpu, dtype, copies):
    assert get_gpu(gpu).cast_copies(dtype) == copies


def test_layer_cast_elements_closed_form_dense_gqa():
    m = model_preset("llama3-8b")
    b, tp, cp = 2, 4, 1
    T, h, F = b * m.seq_length, m.hidden_size, m.ffn_hidden_size
    a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
    for sp, shard in ((False, 1), (True, tp)):
        (ff, fu), (bf, bu) = quantise.layer_cast_elements(m, b, tp, cp, sp)
        # forward: QKV and fc1 inputs from norms (cast on the local shard under SP), fc2's
        # from the activation; the output projection's from attention (a cast kernel)
        assert ff == pytest.approx(T * (2 * h / shard + F / tp), rel=1e-15)
        assert fu == pytest.approx(T * a * d / tp, rel=1e-15)
        # backward: fc1's dY from the activation backward (gated: 2F); QKV's dY from the
        # attention kernel, the projection's and fc2's from the residual stream
        assert bf == pytest.approx(T * 2 * F / tp, rel=1e-15)
        assert bu == pytest.approx(T * ((a + 2 * g) * d / tp + 2 * h / shard), rel=1e-15)


def test_cast_time_is_bytes_over_usable_bandwidth():
    m, gpu = model_preset("llama3-8b"), get_gpu("H100")
    hbm = hbm_rate.usable_hbm(gpu)
    for dtype in ("fp8", "fp8-current", "fp8-blockwise"):
        p, c = PRECISIONS[dtype], gpu.cast_copies(dtype)
        # the default stack (Megatron-Core) casts its MLP activation's output and gradient in
        # passes of their own (``mlp_act_casts``, §5.118)
        (ff, fu), (bf, bu) = quantise.layer_cast_elements(m, 1, 2, 1, True, False, True)
        f, b = elementwise_time.cast_time(m, 1, 2, 1, True, gpu, dtype)
        assert f == pytest.approx((ff * p.cast_bytes(c, True) + fu * p.cast_bytes(c, False))
                                  / hbm, rel=1e-15)
        assert b == pytest.approx((bf * p.cast_bytes(c, True) + bu * p.cast_bytes(c, False))
                                  / hbm, rel=1e-15)
        assert elementwise_time.weight_cast_time(1e9, gpu, dtype) == pytest.approx(
            1e9 * p.cast_bytes(c, False) / hbm, rel=1e-15)
    assert elementwise_time.cast_time(m, 1, 2, 1, True, gpu, "bf16") == (0.0, 0.0)
    assert elementwise_time.weight_cast_time(1e9, gpu, "bf16") == 0.0


def test_layer_time_adds_the_casts_to_forward_and_backward():
    m, gpu = model_preset("llama3-8b"), get_gpu("H100")
    kw = dict(b=1, tp=2, cp=1, ep=1, sp=True, flash=True, recompute=0, gpu=gpu, tpo=False)
    lt = layer_time.layer_time(m, dtype="fp8-current", **kw)
    g_f = gemm_time.gemm_time_fwd(m, 1, 2, 1, 1, gpu, "fp8-current")
    g_b = gemm_time.gemm_time_bwd(m, 1, 2, 1, 1, gpu, "fp8-current")
    a_f, a_b = attention_time.attention_time_fwd(m, 1, 2, 1, True, gpu)
    e = elementwise_bytes.elementwise_bytes_fwd(m, 1, 2, 1, True) / hbm_rate.usable_hbm(gpu)
    c_f, c_b = elementwise_time.cast_time(m, 1, 2, 1, True, gpu, "fp8-current")
    acc = grad_time.grad_accum_time(param_counts.layer_params_per_gpu(m, 2, 1), gpu, "fp8-current")
    launch = elementwise_time.launch_time(gpu=gpu)
    q_f, q_b = qkv_split.qkv_split_time(m, 1, 2, 1, True, gpu)     # §5.167
    assert lt.fwd == pytest.approx(g_f + a_f + e + c_f + launch + q_f, rel=1e-13)
    assert lt.bwd == pytest.approx(g_b + a_b + 2 * e + c_b + acc + 2 * launch + q_b, rel=1e-13)


def _job(dtype, plan="tp=2,pp=2,dp=2,mbs=1,gbs=16,sp=true", cluster="dgx-h100"):
    return make_job(model_preset("llama3-8b"), cluster_preset(cluster, 1), parse_plan(plan),
                    dtype=dtype)


def test_weights_are_cast_once_per_step_in_the_optimizer_time():
    fp8, bf16 = stage_costs(_job("fp8")), stage_costs(_job("bf16"))
    m, gpu = model_preset("llama3-8b"), get_gpu("H100")
    w = param_counts.layer_params_per_gpu(m, 2, 1) * m.num_layers / 2
    for a, b in zip(fp8.optimizer_by_stage, bf16.optimizer_by_stage):
        assert a - b == pytest.approx(elementwise_time.weight_cast_time(w, gpu, "fp8"), rel=1e-12)


def test_quantised_weight_copies_in_memory():
    m = model_preset("llama3-8b")
    for dtype, copy_bytes in (("fp8", 2.0), ("fp8-blockwise", 2 * (1 + 4 / 128))):
        q = memory_components(_job(dtype), 0)["layers"].params
        b = memory_components(_job("bf16"), 0)["layers"].params
        assert q - b == pytest.approx(copy_bytes * param_counts.layer_params_per_gpu(m, 2, 1)
                                      * m.num_layers / 2, rel=1e-12)
    z3 = "tp=1,pp=1,dp=8,mbs=1,gbs=16,zero=3"
    assert memory_components(_job("fp8", z3), 0)["layers"].params == \
        memory_components(_job("bf16", z3), 0)["layers"].params


def test_sequence_parallel_gathers_travel_quantised():
    sp, no_sp = "tp=2,pp=2,dp=2,mbs=1,gbs=16,sp=true", "tp=2,pp=2,dp=2,mbs=1,gbs=16,sp=false"
    base = stage_costs(_job("bf16", sp)).tp_bytes
    assert stage_costs(_job("fp8", sp)).tp_bytes == pytest.approx(base * 3 / 4, rel=1e-15)
    assert stage_costs(_job("fp8", no_sp)).tp_bytes == stage_costs(_job("bf16", no_sp)).tp_bytes
    mx = stage_costs(_job("mxfp8", sp, "dgx-b200")).tp_bytes
    assert mx == pytest.approx(stage_costs(_job("bf16", sp, "dgx-b200")).tp_bytes
                               * (2 + 2 * (1 + 1 / 32)) / 4, rel=1e-15)


def test_power_rule_of_the_blackwell_parts():
    assert sustained_ratio(1000, 148) == B200_SUSTAINED_RATIO == 1421 / 1745
    assert sustained_ratio(1200, 148) == pytest.approx(1421 / 1745 * 1.2 ** (1 / 3), rel=1e-15)
    assert sustained_ratio(1e5, 148) == 1.0                 # never above the burst clock
    gb300 = get_gpu("GB300")   # GB200 reads its measured ratio instead (§5.41)
    assert gb300.fp8_matmul_efficiency == pytest.approx(3615.6 / 5000 * 1421 / 1745
                                                        * (1.4 * 148 / 160) ** (1 / 3), rel=1e-15)
    # more power per SM, a higher sustained clock: GB300 > GB200 > B200 (per SM and watt)
    assert sustained_ratio(1400, 160) > sustained_ratio(1200, 148) > B200_SUSTAINED_RATIO


def test_one_microbatch_step_overlaps_dp_for_the_whole_step():
    r = 1 / overlap_clock.OVERLAP_CLOCK_RATIO
    def slowdown(plan):
        job = _job("bf16", plan)
        return float(stage_cost_arrays(job.model, job.cluster, job.dtype,
                                       PlanArrays.from_plans([job.plan])).slowdown[0])
    assert slowdown("tp=1,pp=1,dp=8,mbs=2,gbs=16") == r          # one micro-batch
    assert slowdown("tp=1,pp=1,dp=8,mbs=2,gbs=32") == 1.0        # two
    w = overlap_clock.dp_overlaps_whole_step(np.array([8, 8, 1, 8]), np.array([1, 2, 1, 1]),
                                             np.array([True, True, True, False]))
    assert list(w) == [True, False, False, False]
    assert list(overlap_clock.overlap_slowdown(1, False, 1, 1, w)) == [r, 1.0, 1.0, 1.0]


def test_precision_texts_and_custom_gpus():
    assert entry_dtype({"id": "x", "precision": "fp8 (blockwise, DeepSeek recipe)"}) == \
        "fp8-blockwise"
    assert entry_dtype({"id": "x", "precision": "fp8 (fine-grained, DeepSeek recipe)"}) == \
        "fp8-blockwise"
    assert entry_dtype({"id": "x", "precision": "fp8 (current scaling)"}) == "fp8-current"
    g = gpu_from_mapping({"name": "X", "bf16_tflops": 1000, "fp8_tflops": 2000, "hbm_gib": 80,
                          "hbm_tbps": 3, "fp8_tn_only": True})
    assert g.cast_copies("fp8") == 2 and gpu_to_mapping(g)["fp8_tn_only"] is True
    assert gpu_from_mapping(gpu_to_mapping(g)) == g
    with pytest.raises(SpecError, match="fp8_tn_only"):
        gpu_from_mapping({"name": "X", "bf16_tflops": 1000, "hbm_gib": 80, "hbm_tbps": 3,
                          "fp8_tn_only": "yes"})


def test_cli_runs_blockwise_fp8():
    rc, _, err = run_cli(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1",
                          "--plan", "tp=2,pp=1,gbs=16", "--dtype", "fp8-blockwise"])
    assert rc == 0, err
    rc, _, err = run_cli(["estimate", "--model", "llama3-8b", "--cluster", "dgx-a100:1",
                          "--plan", "tp=2,pp=1,gbs=16", "--dtype", "fp8-blockwise"])
    assert rc == 2 and "fp8" in err and "Traceback" not in err


def test_nvfp4_producer_cannot_fuse_the_post_hadamard_amax():
    """TE's NVFP4 recipe (RHT on, post-RHT amax) runs norms and activations unfused, so a
    layer's nvfp4 casts cost every cast element the unfused bytes, whichever kernel
    produced it: (forward, backward) = (all forward elements, all backward elements) x
    (amax read 2 + cast read 2 + two copies of 1/2 + 1/16 B)."""
    from dataclasses import replace
    m, gpu = model_preset("llama3-70b"), get_gpu("GB300")
    p = PRECISIONS["nvfp4"]
    assert not p.producer_amax and PRECISIONS["fp8-current"].producer_amax
    per = 2 + 2 + 2 * (0.5 + 1 / 16)
    for sp in (False, True):
        (ff, fu), (bf, bu) = quantise.layer_cast_elements(m, 1, 4, 1, sp)
        assert ff > 0 and bf > 0                      # the layer has producer-fused tensors
        f, b = quantise.layer_cast_bytes(m, 1, 4, 1, sp, gpu, "nvfp4")
        assert f == pytest.approx((ff + fu) * per, rel=1e-15)
        assert b == pytest.approx((bf + bu) * per, rel=1e-15)
    # a recipe whose producer could compute the amax (RHT off) would save the amax read only
    fusable = replace(p, producer_amax=True)
    assert p.cast_bytes(2, True) - fusable.cast_bytes(2, True) == 2.0
    assert fusable.cast_bytes(2, False) == p.cast_bytes(2, False)
