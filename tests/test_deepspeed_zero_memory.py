"""DeepSpeed's ZeRO-1/2 optimizer memory (``strategies.memory.deepspeed_zero``; DeepSpeed v0.5.10
``runtime/zero/stage_1_and_2.py``; docs/calibration.md §5.119): bytes per buffer as closed
forms, and the memory model charging them where the stack's gradients are 16-bit."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import param_counts
from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.memory import deepspeed_zero as dsz
from strategies.memory.arrays import peak_memory_arrays
from strategies.memory.scalar import memory_components, peak_memory
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.stacks.profile import stack_system
from topologies.cluster import cluster_preset
from topologies.gpus import GIB


def test_buffer_bytes_closed_forms():
    """ZeRO-1's flat bucket min(B, P)·g; ZeRO-2's ipg bucket (x2 with overlap_comm) and its
    16-bit partition g·P/d (x2 while accumulating); the step's (2g + 4)·P/d."""
    B, P, d, g = 5e8, 1.37e9, 4, 2.0
    assert dsz.zero1_reduce_bytes(B, P, g) == B * g
    assert dsz.zero1_reduce_bytes(B, 3e8, g) == 3e8 * g
    ipg, parts = dsz.zero2_backward_bytes(B, P, P / d, g)
    assert (float(ipg), float(parts)) == (B * g, g * P / d)
    ipg, parts = dsz.zero2_backward_bytes(B, P, P / d, g, accumulating=True, overlap_comm=True)
    assert (float(ipg), float(parts)) == (2 * B * g, 2 * g * P / d)
    assert float(dsz.step_bytes(P / d, g)) == pytest.approx((2 * g + 4) * P / d, rel=1e-15)
    # after the backward: ZeRO-1 the larger of the reduction's and the step's, ZeRO-2 the step's
    z = np.array([1, 1, 2])
    dd = np.array([4.0, 1.0, 4.0])
    got = dsz.after_backward_bytes(z, P, P / dd, B, g)
    assert got[0] == pytest.approx(g * P + B * g, rel=1e-15)          # reduce: 2P + 1e9 > 2P
    assert got[1] == pytest.approx((2 * g + 4) * P, rel=1e-15)        # d = 1: the step's 8P
    assert got[2] == pytest.approx((2 * g + 4) * P / 4, rel=1e-15)


def _job(spec: str, nodes: int = 1, bf16_optimizer: bool = False, zero_buffers: str = "deepspeed",
         dtype: str = "bf16"):
    fw = replace(get_profile("megatron-deepspeed"), bf16_optimizer=bf16_optimizer,
                 zero_buffers=zero_buffers)
    return make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", nodes),
                    parse_plan(spec + ",recompute=full,flash_attn=false"), dtype=dtype,
                    framework=fw)


def _stage_params(job, stage: int) -> float:
    dense, expert = param_counts.stage_params_split(job.model, job.plan.tp, job.plan.ep,
                                                    job.plan.pp, stage)
    return float(dense + expert)


def _reserve(job, stage: int) -> float:
    """The step's reserved segments of ``stage`` (``deepspeed_zero.step_reserve_bytes``,
    tested in tests/test_deepspeed_step_reserve.py), from the job's own shapes."""
    m, pl = job.model, job.plan
    head = param_counts.embedding_params_per_gpu(m, pl.tp) if stage == 0 else (
        m.vocab_size * m.hidden_size / pl.tp if stage == pl.pp - 1 else 0.0)
    layers = m.num_layers // pl.pp
    nmb = pl.gbs // (pl.mbs * pl.dp)
    tensors, freed = dsz.rank_tensor_sizes(m, pl.tp, pl.mbs, False, head, nmb, 2.0,
                                           stage == pl.pp - 1, layers)
    return float(dsz.step_reserve_bytes(head, layers, tensors, pl.tp, pl.dp, freed, 2.0, 4.0))


def test_zero1_after_backward_is_charged_beyond_the_activations():
    """ZeRO-1, dp = 2: the step's (2·2 + 4)·P/2 = 4P exceeds the backward's 2P of gradients;
    the part beyond the activations it replaces is the ``other`` origin's ``grads``."""
    job = _job("tp=2,pp=2,gbs=64,zero=1")
    sy = job.system
    assert job.plan.dp == 2 and sy.main_grad_bytes("bf16") == 2.0
    s, _ = peak_memory(job)
    parts = memory_components(job, s)
    P = _stage_params(job, s)
    act = sum(p.activations for p in parts.values())
    after = max(2 * P + 2 * min(5e8, P), 8 * P / 2)
    want = max(0.0, after - 2 * P - (1 + sy.fragmentation) * act)
    assert want > 0.1 * GIB
    assert parts["other"].grads == pytest.approx(want, rel=1e-12)
    # the default model's: Megatron's fp32 copy of the 16-bit gradient's shard, 4·P/d
    plain = memory_components(_job("tp=2,pp=2,gbs=64,zero=1", zero_buffers=""), s)
    assert plain["other"].grads == pytest.approx(
        max(0.0, 4 * P / 2 - (1 + sy.fragmentation) * act), rel=1e-12)
    # beside it only the step's reserved segments (§5.129)
    assert parts["other"].total - parts["other"].grads == pytest.approx(
        plain["other"].total - plain["other"].grads + _reserve(job, s), rel=1e-12)


def test_zero2_ipg_bucket_and_accumulated_partition():
    """ZeRO-2 (pp = 1, dp = 4, 16 micro-batches): one ipg bucket of min(5e8, P) 16-bit elements
    and a second g·P/d partition in ``other`` instead of the default model's two buckets at the
    gradient's bytes."""
    job = _job("tp=2,pp=1,gbs=64,zero=2")
    plain = _job("tp=2,pp=1,gbs=64,zero=2", zero_buffers="")
    P = _stage_params(job, 0)
    d = job.plan.dp
    ours, theirs = memory_components(job, 0)["other"], memory_components(plain, 0)["other"]
    assert ours.other - theirs.other == pytest.approx(
        (min(5e8, P) * 2 + 2 * P / d) - 2 * min(5e8, P) * 2 + _reserve(job, 0), rel=1e-12)
    assert ours.grads == 0.0          # the step's 8P/4 = 2P < the backward's buffers + 0.5P
    # one micro-batch per step: no accumulated partition
    one = _job("tp=2,pp=1,gbs=4,zero=2")
    assert memory_components(one, 0)["other"].other - memory_components(
        _job("tp=2,pp=1,gbs=4,zero=2", zero_buffers=""), 0)["other"].other == pytest.approx(
        min(5e8, P) * 2 - 2 * min(5e8, P) * 2 + _reserve(one, 0), rel=1e-12)


def test_bf16_optimizer_zero0_and_other_stacks_unchanged():
    """Only DeepSpeed's ZeRO optimizer with 16-bit gradients: its BF16_Optimizer (fp32
    gradients), ZeRO-0 and a Megatron stack keep the default model's figures."""
    for spec, bf16 in (("tp=2,pp=2,gbs=64,zero=1", True), ("tp=2,pp=2,gbs=64,zero=0", False)):
        a = peak_memory(_job(spec, bf16_optimizer=bf16))[1].total
        b = peak_memory(_job(spec, bf16_optimizer=bf16, zero_buffers=""))[1].total
        assert a == b
    assert stack_system(get_profile("megatron-core")).deepspeed_zero == 0.0
    assert stack_system(get_profile("megatron-deepspeed")).deepspeed_zero == 1.0
    # fp16 runs: DeepSpeed's step replaces Megatron's fp32 copy (4·P/d) by its own
    fp16 = _job("tp=2,pp=2,gbs=64,zero=1", dtype="fp16", bf16_optimizer=True)
    s, _ = peak_memory(fp16)
    parts = memory_components(fp16, s)
    P = _stage_params(fp16, s)
    act = sum(p.activations for p in parts.values())
    want = max(0.0, max(2 * P + 2 * min(5e8, P), 8 * P / 2) - 2 * P
               - (1 + fp16.system.fragmentation) * act)
    assert parts["other"].grads == pytest.approx(want, rel=1e-12)


def test_arrays_read_the_same_rule():
    """The search's array model (``stack_system`` installs the flag) equals the scalar peak."""
    for spec in ("tp=2,pp=2,gbs=64,zero=1", "tp=2,pp=1,gbs=64,zero=2"):
        job = _job(spec)
        got = peak_memory_arrays(job.model, PlanArrays.from_plans([job.plan]), job.dtype,
                                 stack_system(job.framework, job.system), job.cluster.gpu,
                                 loss_bytes=job.framework.loss)
        assert float(np.ravel(got)[0]) == pytest.approx(peak_memory(job)[1].total, rel=1e-12)


def test_zero_buffers_field_is_checked():
    with pytest.raises(SpecError, match="zero_buffers"):
        replace(get_profile("megatron-deepspeed"), zero_buffers="colossal")
    with pytest.raises(SpecError, match="deepspeed_zero"):
        replace(stack_system(get_profile("megatron-core")), deepspeed_zero=0.5)
