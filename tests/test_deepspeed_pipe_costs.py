"""Megatron-DeepSpeed (BLOOM) fidelity: what the reference reader fills for the BLOOM rows and
the closed forms of the costs DeepSpeed's pipeline engine adds (docs/calibration.md)."""
from __future__ import annotations

import pytest

from strategies.cost.stage import stage_costs
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry, load_reference
from tests.test_simulate import _balanced
from topologies.cluster import cluster_preset


def _rows():
    data = load_reference()
    return data, {c["id"]: c for c in data}


def test_vocab_from_a_sibling_row_of_the_same_source():
    """The ZeRO-0/1 rows of BLOOM's chronicles do not restate the vocabulary; the 02-21 rows of
    the same document and model do ('Vocab ~250k'), so the reader takes it from them."""
    data, by_id = _rows()
    row = by_id["bloom_prequel_181B_zero0"]
    assert not row["model"]["vocab"]
    alone = case_from_entry(row)
    assert alone.job is None and "vocab_size" in alone.skipped
    case = case_from_entry(row, data)
    assert case.job is not None and case.job.model.vocab_size == 250000
    assert any("stated for the same model by bloom_prequel_181B_dp4_pp12_mbs1" in a
               for a in case.assumptions)


def test_a_duplicated_row_is_not_validated():
    """The ZeRO-1 row of the chronicles is the 02-21 dp4 pp12 mbs2 run with its two columns
    swapped (same plan, memory and pair of figures): it is skipped, naming its twin, and
    validates once, under the twin's id."""
    data, by_id = _rows()
    row = by_id["bloom_prequel_181B_zero1"]
    twin = by_id[row["duplicate_of"]]
    assert (row["measured"]["step_time_s"], row["measured"]["tflops_per_gpu"]) == (
        twin["measured"]["tflops_per_gpu"], twin["measured"]["step_time_s"])
    case = case_from_entry(row, data)
    assert case.job is None and row["duplicate_of"] in case.skipped
    assert case_from_entry(twin, data).job is not None


def test_sibling_vocab_needs_the_same_source_and_model():
    data, by_id = _rows()
    row = dict(by_id["bloom_prequel_181B_zero0"])
    row["source"] = dict(row["source"], ref="another document")
    assert case_from_entry(row, data).job is None
    row = dict(by_id["bloom_prequel_181B_zero0"])
    row["model"] = dict(row["model"], name="another model")
    assert case_from_entry(row, data).job is None


def test_deepspeed_rows_have_no_sequence_parallelism():
    """bigscience-workshop/Megatron-DeepSpeed predates Megatron-LM's --sequence-parallel: an
    unstated sp is off under the megatron-deepspeed profile (on for Megatron-Core)."""
    data, by_id = _rows()
    assert get_profile("megatron-deepspeed").sequence_parallel is False
    case = case_from_entry(by_id["bloom_prequel_181B_zero0"], data)
    assert case.job.plan.sp is False
    assert "sp=false (not stated)" in case.assumptions


# --- synchronous kernel launches (CUDA_LAUNCH_BLOCKING=1) ---------------------------------

def test_sync_launch_gap_closed_form():
    """BigScience's A/B (80 GPUs, 200B, TP=8 PP=10, MBS=1, GBS=512: 97.20 vs 91.04 TFLOP/s;
    844.81 s at 98.87 TFLOP/s for GBS=2048) over (512 + 9) slots x 8 layers x 4 x 20 kernels."""
    from strategies.stacks.profile import LAUNCH_GAP_S
    from strategies.launch_blocking import JZ_AB, SYNC_LAUNCH_GAP_S, sync_launch_gap_s
    t_async = 844.81 * (512 / 2048) * 98.87 / 97.20
    extra = t_async * (97.20 / 91.04 - 1.0)
    boundaries = (512 + 10 - 1) * (80 // 10) * 4 * 20
    assert JZ_AB.async_step_s() == pytest.approx(t_async, rel=1e-15)
    assert JZ_AB.boundaries(20) == boundaries == 333440
    assert SYNC_LAUNCH_GAP_S == pytest.approx(LAUNCH_GAP_S + extra / boundaries, rel=1e-15)
    assert sync_launch_gap_s(kernels_per_layer=40) < SYNC_LAUNCH_GAP_S   # more kernels, less each
    assert 10e-6 < SYNC_LAUNCH_GAP_S < 100e-6                            # a host operator's time


def _ds_job(blocking: bool, pp: int = 4, gbs: int = 32):
    from strategies.launch_blocking import with_launch_blocking
    fw = get_profile("megatron-deepspeed")
    m, cl = model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2)
    plan = parse_plan(f"tp=2,pp={pp},gbs={gbs},recompute=full,flash_attn=false")
    return make_job(m, cl, plan, framework=with_launch_blocking(fw) if blocking else fw)


def test_launch_blocking_charges_each_kernel_boundary():
    """Per layer and micro-batch: k boundaries forward, k recomputed, 2k backward and, in bf16,
    the BF16_Optimizer's 2T (a cast and an add per parameter tensor) and the QKV split's
    backward ``cat`` (``qkv_split.CAT_KERNELS``, §5.167), each costing SYNC - async more."""
    from strategies.cost.param_counts import layer_param_tensors
    from strategies.cost.qkv_split import CAT_KERNELS
    from strategies.launch_blocking import SYNC_LAUNCH_GAP_S
    a, b = stage_costs(_ds_job(False)), stage_costs(_ds_job(True))
    k = get_profile("megatron-deepspeed").kernels_per_layer
    T = len(layer_param_tensors(_ds_job(False).model))
    dg = SYNC_LAUNCH_GAP_S - get_profile("megatron-deepspeed").launch_gap_s
    assert b.layer_fwd - a.layer_fwd == pytest.approx(k * dg, rel=1e-9)
    assert b.layer_recompute - a.layer_recompute == pytest.approx(k * dg, rel=1e-9)
    assert b.layer_bwd - a.layer_bwd == pytest.approx((2 * k + 2 * T + CAT_KERNELS) * dg,
                                                      rel=1e-9)


@pytest.mark.parametrize("pp,gbs", [(2, 16), (4, 32)])
def test_launch_blocking_adds_its_closed_form_to_the_step(pp, gbs):
    """A balanced DeepSpeed 1F1B (TrainSchedule) pays the extra gap on every boundary of its
    critical path: (m + pp - 1) slots x L/pp layers x (4k + 2T + 1) boundaries (forward,
    recomputed forward, backward; the BF16_Optimizer's cast and add per parameter tensor; the
    QKV split's backward cat, §5.167), in the estimate and in the simulation with free
    communication."""
    from strategies.cost.param_counts import layer_param_tensors
    from strategies.cost.qkv_split import CAT_KERNELS
    from strategies.estimate.scalar import estimate
    from strategies.launch_blocking import SYNC_LAUNCH_GAP_S
    from simulator.simulate import simulate
    fw = get_profile("megatron-deepspeed")
    a, b = _ds_job(False, pp, gbs), _ds_job(True, pp, gbs)
    m, L = a.num_microbatches, a.model.num_layers // pp
    n = 4 * fw.kernels_per_layer + 2 * len(layer_param_tensors(a.model)) + CAT_KERNELS
    closed = (m + pp - 1) * L * n * (SYNC_LAUNCH_GAP_S - fw.launch_gap_s)
    sim = [simulate(j, free_comm=True, costs=_balanced(j)).step_time_s for j in (a, b)]
    assert sim[1] - sim[0] == pytest.approx(closed, rel=1e-9)
    est = [estimate(j).step_time_s for j in (a, b)]
    assert est[1] - est[0] == pytest.approx(closed, rel=1e-6)


def test_bloom_rows_run_with_synchronous_launches():
    from strategies.launch_blocking import SYNC_LAUNCH_GAP_S
    data, by_id = _rows()
    for cid in ("bloom176B_final_384gpu", "bloom_prequel_181B_dp4_pp12_mbs1"):
        case = case_from_entry(by_id[cid], data)
        assert case.job.framework.launch_gap_s == SYNC_LAUNCH_GAP_S
        assert any(a.startswith("synchronous kernel launches") for a in case.assumptions)
    other = case_from_entry(by_id["narayanan2021_t2_zero3_175B_384gpu"], data)
    assert other.job.framework.launch_gap_s == get_profile("megatron-deepspeed").launch_gap_s


def test_launch_blocking_text():
    from strategies.reference.text import launch_blocking
    assert launch_blocking("export CUDA_LAUNCH_BLOCKING=1 (slurm)")
    assert launch_blocking("cuda_launch_blocking = 1")
    assert not launch_blocking("CUDA_LAUNCH_BLOCKING=0")
    assert not launch_blocking("CUDA_LAUNCH_BLOCKING=10")
    assert not launch_blocking(None)


# --- DeepSpeed's BF16_Optimizer ---------------------------------------------------------

def _bf16_job(bf16_optimizer: bool, dtype: str = "bf16", framework: str = "megatron-deepspeed",
              system=None):
    from dataclasses import replace
    fw = replace(get_profile(framework), bf16_optimizer=bf16_optimizer)
    m, cl = model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2)
    plan = parse_plan("tp=2,pp=2,gbs=64,zero=1,recompute=full,flash_attn=false,"
                      "overlap_grad_reduce=false,overlap_param_gather=false")
    return make_job(m, cl, plan, dtype=dtype, framework=fw, system=system)


def _fp32_off(reduce: str = "allreduce"):
    """The BF16_Optimizer off with an fp32 gradient buffer stated: only the optimizer's own
    accumulation (and, with ``reduce="reduce_scatter"``, a ZeRO-1 that reduce-scatters: the
    reduction's kind) differ from the job with it on."""
    from strategies.cost.system import SystemConfig
    job = _bf16_job(False, system=SystemConfig(grad_buffer_bytes=4.0))
    return job if reduce == "allreduce" else _with_zero1(job, reduce)


def _with_zero1(job, reduce: str):
    """``job`` with its stack's ZeRO-1 reducing by ``reduce`` (``zero1_grad_reduce``)."""
    from dataclasses import replace
    return make_job(job.model, job.cluster, job.plan, dtype=job.dtype, system=job.system,
                    framework=replace(job.framework, zero1_grad_reduce=reduce))


def test_bf16_optimizer_accumulation_bytes():
    """hp_grad.add_(lp.grad.to(fp32)): 2 + 4 + 4 + 4 + 4 = 18 bytes per parameter and
    micro-batch, against Megatron's main_grad add (4 + 2 + 4 = 10); fp16 runs keep the latter."""
    from strategies.cost.grad_time import grad_accum_time
    from strategies.cost.hbm_rate import usable_hbm
    from strategies.stacks.deepspeed import BF16_ACCUM_BYTES
    gpu = cluster_preset("dgx-a100", 1).gpu
    ds = get_profile("megatron-deepspeed")
    assert BF16_ACCUM_BYTES == 2 + 4 + 4 + 4 + 4
    n = 1.23e9
    assert grad_accum_time(n, gpu, "bf16", ds) == pytest.approx(n * 18 / usable_hbm(gpu),
                                                                rel=1e-15)
    assert grad_accum_time(n, gpu, "fp16", ds) == pytest.approx(n * (2 * 2 + 2) / usable_hbm(gpu),
                                                                rel=1e-15)
    assert grad_accum_time(n, gpu, "bf16", get_profile("megatron-lm-2021")) == pytest.approx(
        n * (2 * 4 + 2) / usable_hbm(gpu), rel=1e-15)


def test_without_the_bf16_optimizer_gradients_stay_16_bit():
    """DeepSpeed's engine without its BF16_Optimizer (the BLOOM prototype's 02-21 rows): autograd
    adds each micro-batch into the 16-bit ``.grad`` (2 + 2 + 2 = 6 bytes per parameter, not the
    main_grad add's 10) and ZeRO reduces it in 16 bits; with it, or on a Megatron stack, the
    policy's fp32 buffer; a stated ``grad_buffer_bytes`` wins."""
    from strategies.cost.grad_time import grad_accum_time
    from strategies.cost.hbm_rate import usable_hbm
    from strategies.cost import param_counts
    from strategies.cost.system import SystemConfig
    from strategies.stacks.comm_rules import stack_grad_bytes
    from strategies.stacks.profile import stack_system
    off, on = _bf16_job(False), _bf16_job(True)
    assert off.system.main_grad_bytes("bf16") == 2.0 and on.system.main_grad_bytes("bf16") == 4.0
    assert _bf16_job(False, framework="megatron-lm-2021").system.main_grad_bytes("bf16") == 4.0
    assert stack_grad_bytes(off.framework) == 2.0 and stack_grad_bytes(on.framework) == 0.0
    assert stack_grad_bytes(get_profile("megatron-core")) == 0.0
    assert stack_system(off.framework).grad_buffer_bytes == 2.0      # what the search reads
    assert stack_system(on.framework).grad_buffer_bytes == 0.0
    gpu = off.cluster.gpu
    assert grad_accum_time(1e9, gpu, "bf16", off.framework, off.system) == pytest.approx(
        1e9 * 6 / usable_hbm(gpu), rel=1e-15)
    stated = make_job(off.model, off.cluster, off.plan, dtype="bf16", framework=off.framework,
                      system=SystemConfig(grad_buffer_bytes=4.0))
    assert stated.system.main_grad_bytes("bf16") == 4.0
    # a layer's backward: 4 bytes per parameter less than with the fp32 main_grad add
    params = param_counts.layer_params_per_gpu(off.model, off.plan.tp, 1, None)
    assert stage_costs(stated).layer_bwd - stage_costs(off).layer_bwd == pytest.approx(
        params * 4 / usable_hbm(gpu), rel=1e-9)


def test_bf16_optimizer_all_reduces_the_fp32_gradients():
    """Under its own ZeRO-1 the BF16_Optimizer all-reduces (not reduce-scatters) the fp32
    gradients after the schedule (DeepSpeed's ReduceGrads, not overlapped): against a stack
    whose ZeRO-1 reduce-scatters, the exposed data-parallel time grows by exactly
    t_allreduce - t_reduce_scatter; against DeepSpeed's own ZeRO-1, which all-reduces too
    (§5.121), it does not move."""
    from strategies.cost import comm as cm
    from strategies.estimate.scalar import estimate
    on, off = _bf16_job(True), _fp32_off("reduce_scatter")
    assert estimate(_fp32_off()).breakdown_s["dp_comm"] == pytest.approx(
        estimate(on).breakdown_s["dp_comm"], rel=1e-12)
    sc = stage_costs(on)
    assert (sc.grad_bytes, stage_costs(_bf16_job(False)).grad_bytes) == (4.0, 2.0)
    p, cl = on.plan, on.cluster
    params = sc.params_by_stage[0]
    t_ar = cm.collective_time("allreduce", sc.grad_bytes * params, p.dp, p.tp, cl)
    t_rs = cm.collective_time("reduce_scatter", sc.grad_bytes * params, p.dp, p.tp, cl)
    e_on, e_off = estimate(on), estimate(off)
    assert e_on.breakdown_s["dp_comm"] - e_off.breakdown_s["dp_comm"] == pytest.approx(
        t_ar - t_rs, rel=1e-9)
    # fp16: no BF16_Optimizer, nothing changes
    assert estimate(_bf16_job(True, "fp16")).step_time_s == estimate(
        _bf16_job(False, "fp16")).step_time_s
    assert estimate(_with_zero1(_bf16_job(True, "fp16"), "reduce_scatter")).step_time_s < \
        estimate(_bf16_job(True, "fp16")).step_time_s


def test_bf16_optimizer_simulated_reduction_is_an_all_reduce():
    from simulator.program.compiler import compile_job
    from simulator.program.ops import Collective

    def kinds(job):
        return {op.kind for prog in compile_job(job, ranks=[0]).values()
                for ops in prog.streams.values() for op in ops
                if isinstance(op, Collective) and len(op.group) == job.plan.dp}
    on, off = kinds(_bf16_job(True)), kinds(_bf16_job(False))
    rs = kinds(_with_zero1(_bf16_job(False), "reduce_scatter"))
    assert "allreduce" in on and "reduce_scatter" not in on
    assert "allreduce" in off and "reduce_scatter" not in off      # DeepSpeed's ZeRO-1 (§5.121)
    assert "reduce_scatter" in rs and "allreduce" not in rs


def test_bloom_rows_state_their_optimizer():
    data, by_id = _rows()
    final = case_from_entry(by_id["bloom176B_final_384gpu"], data).job.framework
    assert final.bf16_optimizer is True
    pre = case_from_entry(by_id["bloom_prequel_181B_dp4_pp12_mbs1"], data)
    assert pre.job.framework.bf16_optimizer is False
    assert any(a.startswith("bf16_optimizer=false (stated: ") for a in pre.assumptions)


def test_bf16_optimizer_text():
    from strategies.reference.text import bf16_optimizer
    assert bf16_optimizer("DeepSpeed BF16_Optimizer (slurm)") is True
    assert bf16_optimizer("ZeRO-1 without the BF16 optimizer") is False
    assert bf16_optimizer("ZeRO-1") is None


def test_full_grad_reduce_rule():
    from strategies.stacks.comm_rules import full_grad_reduce
    ds, lm = get_profile("megatron-deepspeed"), get_profile("megatron-lm-2021")
    assert full_grad_reduce(ds, "bf16", 0) and full_grad_reduce(ds, "bf16", 1)
    assert full_grad_reduce(ds, "fp16", 1) and not full_grad_reduce(lm, "bf16", 1)   # §5.121
    assert not full_grad_reduce(ds, "bf16", 2)
    assert list(full_grad_reduce(ds, "bf16", [0, 1, 2, 3])) == [True, True, False, False]


def test_bf16_optimizer_bound_stays_below_the_simulation():
    """The lower bound reads the same rule (an all-reduce's two passes) and stays a bound."""
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.estimate.scalar import plan_arrays
    from strategies.stacks.profile import stack_system
    for on in (True, False):
        job = _bf16_job(on)
        bound = float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                            plan_arrays(job.plan), job.framework,
                                            stack_system(job.framework)))
        assert 0 < bound <= simulate(job).step_time_s


def test_bf16_optimizer_launches_two_kernels_per_parameter_tensor():
    """update_hp_grads: a cast and an add per parameter tensor of the layer, after each
    backward: the layer's backward grows by 2 T launch gaps besides the bytes."""
    from strategies.cost import param_counts
    from strategies.cost.grad_time import grad_accum_time
    from strategies.cost.hbm_rate import usable_hbm
    on, off = _bf16_job(True), _fp32_off()
    a, b = stage_costs(off), stage_costs(on)
    T = len(param_counts.layer_param_tensors(on.model))
    assert T == 12          # two norms (weight, bias), QKV, projection, two MLP GEMMs, biases
    gap = on.framework.launch_gap_s
    params = param_counts.layer_params_per_gpu(on.model, on.plan.tp, 1, None)
    gpu = on.cluster.gpu
    extra_bytes = params * (18 - 10) / usable_hbm(gpu)
    assert b.layer_bwd - a.layer_bwd == pytest.approx(extra_bytes + 2 * T * gap, rel=1e-9)
    assert b.layer_wgrad - a.layer_wgrad == pytest.approx(extra_bytes + 2 * T * gap, rel=1e-9)
    assert b.layer_fwd == a.layer_fwd


def test_megatron_deepspeed_refuses_sequence_parallelism():
    from strategies.errors import SpecError
    m, cl = model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2)
    with pytest.raises(SpecError, match="megatron-deepspeed has no sequence parallelism"):
        make_job(m, cl, parse_plan("tp=2,pp=2,gbs=32,sp=true,flash_attn=false"),
                 framework="megatron-deepspeed")


def test_grad_in_param_dtype_field_is_checked():
    from dataclasses import replace
    from strategies.errors import SpecError
    with pytest.raises(SpecError, match="grad_in_param_dtype.*true or false"):
        replace(get_profile("megatron-deepspeed"), grad_in_param_dtype="yes")
    assert get_profile("megatron-deepspeed").grad_in_param_dtype
    assert not get_profile("megatron-core").grad_in_param_dtype
