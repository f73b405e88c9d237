"""Seconds of the gradient's and the optimizer's memory-bound work on one GPU: the unfused
accumulation of a micro-batch's weight gradient into the main gradient, a sharded stack's
passes over the unsharded gradient, FSDP2's all-gather copy-out, DeepSpeed BF16_Optimizer's
per-tensor launches, and Adam's update, each its bytes over the usable HBM bandwidth
(``hbm_rate.usable_hbm``). Vectorised."""
from __future__ import annotations

import numpy as np

from strategies.cost import param_counts
from strategies.cost import measured
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num
from strategies.framework import DEFAULT
from strategies.stacks.comm_rules import uses_bf16_optimizer
from strategies.stacks.deepspeed import BF16_ACCUM_BYTES
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from topologies.gpus import GPU


GRAD_BYTES_16 = 2.0       # a weight gradient as the GEMM writes it (bf16/fp16)
#: FSDP2's all-gather copy-out per unsharded parameter: ``foreach_all_gather_copy_out``
#: (torch/distributed/_composable/fsdp/_fsdp_collectives.py) splits the gathered bf16 buffer
#: into the parameters with ``torch.split_with_sizes_copy`` on the compute stream (read 2,
#: write 2)
GATHER_COPY_OUT_BYTES = 4.0


def accum_shard(dp: Num, zero: Num) -> Num:
    """Share of a weight gradient each GPU accumulates over micro-batches: all of it, except
    with sharded gradients (ZeRO-2, ZeRO-3/FSDP), where each micro-batch's gradient is
    reduce-scattered first and only the ``1/dp`` shard is accumulated (returns the divisor,
    ``dp`` or 1)."""
    return np.where(np.asarray(zero) >= 2, dp, 1.0)


def grad_accum_time(params: Num, gpu: GPU, dtype: str, fw: FrameworkProfile = DEFAULT,
                    system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Seconds to add one micro-batch's weight gradients of ``params`` parameters into the
    main gradient with a separate kernel (read the main gradient, read the 16-bit gradient,
    write the main gradient; DeepSpeed's BF16_Optimizer casts first:
    ``framework.BF16_ACCUM_BYTES``); 0 when the framework fuses it into the weight-gradient
    GEMM."""
    if fw.grad_accum_fusion:
        return 0.0 * params
    if uses_bf16_optimizer(fw, dtype):
        return params * BF16_ACCUM_BYTES / usable_hbm(gpu, system)
    gb = system.main_grad_bytes(dtype)
    return params * (2 * gb + GRAD_BYTES_16) / usable_hbm(gpu, system)


def sharded_grad_pass_bytes(fw: FrameworkProfile, dtype: str,
                            system: SystemConfig = DEFAULT_SYSTEM) -> float:
    """HBM bytes per unsharded gradient element and micro-batch of the passes the stack's
    sharded data parallelism runs besides the reduce-scatter (``fw.sharded_grad_passes``,
    ``framework.SHARDED_GRAD_PASSES``), with ``a`` = ``GRAD_BYTES_16`` the gradient as the
    GEMM writes it and ``g`` = ``system.main_grad_bytes(dtype)`` the reduce dtype's element:
    ``flat_grad_cat`` 2a, ``reduce_cast`` a + g (0 when g == a), ``predivide`` 2g,
    ``reduce_copy_in`` a + g. FSDP1 under Composer's DEFAULT in bf16: 4 + 6 + 8 = 18."""
    a, g = GRAD_BYTES_16, system.main_grad_bytes(dtype)
    per = {"flat_grad_cat": 2 * a, "reduce_cast": a + g if g != a else 0.0,
           "predivide": 2 * g, "reduce_copy_in": a + g}
    return float(sum(per[name] for name in fw.sharded_grad_passes))


def gather_copy_out_time(params: Num, gathered: Num, gpu: GPU, fw: FrameworkProfile = DEFAULT,
                         system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Seconds of one all-gather's copy-out of ``params`` unsharded parameters on the compute
    stream (``GATHER_COPY_OUT_BYTES`` each at the usable HBM bandwidth) where the stack copies
    them out (``fw.gather_copy_out``: FSDP2) and the plan gathers them (``gathered``: ZeRO-3
    with dp > 1); 0 elsewhere (FSDP1 and Megatron gather into the parameters' own buffer)."""
    on = np.logical_and(fw.gather_copy_out, gathered)
    return params * GATHER_COPY_OUT_BYTES / usable_hbm(gpu, system) * on


def sharded_grad_pass_time(params: Num, shard: Num, gpu: GPU, dtype: str,
                           fw: FrameworkProfile = DEFAULT,
                           system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Seconds per micro-batch of the stack's passes over the unsharded gradient of ``params``
    weights (``sharded_grad_pass_bytes`` each over the usable HBM bandwidth) where the
    gradient is sharded (``shard > 1``: ZeRO >= 2 with dp > 1, ``accum_shard``); 0 elsewhere.
    FSDP1 runs the cast and the pre-divide on its post-backward stream, beside the next
    unit's backward: charged in full, on the assumption that they take SM time the compute
    stream's kernels would use (a large GEMM's CTAs occupy every SM); an upper bound if the
    kernels overlap."""
    per = sharded_grad_pass_bytes(fw, dtype, system)
    return params * per / usable_hbm(gpu, system) * (np.asarray(shard) > 1)


def bf16_optimizer_launch_time(m: ModelSpec, fw: FrameworkProfile, dtype: str,
                               gpu: GPU | None = None) -> float:
    """GPU idle seconds per layer and micro-batch from the kernels DeepSpeed's BF16_Optimizer
    launches after each backward (``update_hp_grads``: per parameter tensor a cast to fp32
    and an add, ``param_counts.layer_param_tensors``), one launch gap each; 0 for other stacks."""
    if fw.grad_accum_fusion or not uses_bf16_optimizer(fw, dtype):
        return 0.0
    return 2 * len(param_counts.layer_param_tensors(m)) * measured.launch_gap(gpu, fw.launch_gap_s)


def optimizer_time(params_on_gpu: Num, gpu: GPU, system: SystemConfig = DEFAULT_SYSTEM,
                   fw: FrameworkProfile = DEFAULT) -> Num:
    """Adam step over the parameters this GPU updates at the usable bandwidth (seconds): one
    fused kernel, ``system.adam_step_bytes`` (28) HBM bytes per parameter (fp32 master, m and
    v read and written, the fp32 gradient read), or the stack's chain of unfused kernels,
    ``fw.step.adam_elements`` fp32 elements (4 bytes each) per parameter; the 16-bit weight
    copy is a per-step pass of the stack (``strategies.cost.step``)."""
    per = 4.0 * fw.step.adam_elements if fw.step.adam_elements else system.adam_step_bytes
    return per * params_on_gpu / usable_hbm(gpu, system)
