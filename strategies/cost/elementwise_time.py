"""Seconds of one layer's memory-bound kernels on one GPU and of its kernel boundaries:
LayerNorm, dropout, activation, rotary (``strategies.cost.elementwise_bytes``), the
low-precision casts (fp8, mxfp8, fp8-blockwise, nvfp4: the bytes ``strategies.cost.quantise``
counts), the sequence-dim layout copies of torchtitan's TP plan and gpt-oss's eager variants,
each its bytes over ``HBM bandwidth · SystemConfig.hbm_efficiency`` (``hbm_rate.usable_hbm``; the
backward of an elementwise kernel moves twice its forward bytes); every kernel boundary costs
``framework.launch_gap_s``. Vectorised."""
from __future__ import annotations

import numpy as np

from strategies.cost import async_tp, comm_bytes, elementwise_bytes
from strategies.cost import measured
from strategies.cost import quantise
from strategies.cost import recompute as rcp
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num
from strategies.framework import DEFAULT
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.variants import runs_eager_clamp, runs_gpt_oss_bridge
from strategies.model import ModelSpec
from topologies.gpus import GPU


def tp_layout_copy_time(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, tpo: Num,
                        pairs: Num, gpu: GPU, dtype: str, fw: FrameworkProfile = DEFAULT,
                        system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num, Num, Num]:
    """(forward, backward, op rerun, full rerun) seconds per layer and micro-batch of the
    full-tensor copies a stack whose sequence-parallel collectives run along the sequence
    dim of ``[b, s, h]`` (``fw.tp_seq_dim_copies``: torchtitan's ``Shard(1)`` plan) runs on
    the compute stream, at the usable HBM bandwidth: PyTorch's functional collectives
    gather along dim 0 and ``torch.cat(torch.chunk(out, tp, dim=0), dim=1)`` the result, and
    ``torch.cat(torch.chunk(x, tp, dim=1))`` a reduce-scatter's input first, each a read and
    a write of the gathered tensor (``comm_bytes.tp_comm_bytes_fwd``; an all-gather's at its
    element size, ``quantise.tp_allgather_bytes_factor``: torchao's float8 TP gathers fp8).
    ``pairs`` all-gather + reduce-scatter pairs per pass (``stage.layers.tp_collectives_per_layer``).
    Forward: each pair's two copies; backward: the gradients' all-gathers' copies, and the
    data gradients' reduce-scatters' only eager (compiled, the ``cat`` of the dgrads' sum
    is that sum's own pointwise kernel, ``fw.elementwise_kernels == "compiled"``). Op-level
    recomputation reruns the forward's all-gathers' copies (its save list keeps the
    reduce-scatters' outputs); full recomputation the forward's, less the MLP's
    reduce-scatter (``pairs - 1`` of them) where the checkpoint stops early
    (``fw.recompute_early_stop``: nothing the backward needs reads that output). 0 without
    SP, tp = 1, on other stacks, and under async TP (``tpo``: Inductor's micro-pipeline
    pass lays the fused matmuls' operands out for the gather/scatter dim,
    ``restride_A_shard_for_fused_all_gather_matmul``), but for the all-gathers async TP
    leaves unfused (``async_tp.fuses_allgathers``: the rowwise recipe's, §5.147).
    docs/calibration.md §5.80."""
    base = (np.asarray(tp) > 1) & np.asarray(sp, dtype=bool) & fw.tp_seq_dim_copies
    on = base & ~np.asarray(tpo, dtype=bool)
    on_ag = on | (base & (not async_tp.fuses_allgathers(dtype)))
    x = 2.0 * comm_bytes.tp_comm_bytes_fwd(m, b, cp) / usable_hbm(gpu, system)   # read + write
    ag = x * quantise.tp_allgather_bytes_factor(dtype, sp) * on_ag    # one copy each
    rs = x * on
    last = rcp.stopped_collectives(pairs, fw.recompute_early_stop)
    fwd = pairs * (ag + rs)
    return (fwd, pairs * ag + (0.0 if fw.elementwise_kernels == "compiled" else pairs * rs),
            pairs * ag, fwd - last * rs)


def elementwise_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, gpu: GPU,
                         dtype: str, system: SystemConfig = DEFAULT_SYSTEM,
                         kernels: str = "fused") -> Num:
    """Forward seconds of the memory-bound kernels of one layer:
    ``elementwise_bytes.elementwise_bytes_fwd`` (``kernels``:
    ``FrameworkProfile.elementwise_kernels``) and, with a quantised precision, the forward casts
    (``cast_time``) at the usable HBM bandwidth."""
    plain = elementwise_bytes.elementwise_bytes_fwd(m, b, tp, cp, sp, kernels) \
        / usable_hbm(gpu, system)
    return plain + cast_time(m, b, tp, cp, sp, gpu, dtype, system)[0]


def cast_time(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, gpu: GPU, dtype: str,
              system: SystemConfig = DEFAULT_SYSTEM, fw: FrameworkProfile = DEFAULT
              ) -> tuple[Num, Num]:
    """(forward, backward) seconds of one layer's quantisation per micro-batch
    (``quantise.layer_cast_bytes`` over the usable HBM bandwidth, the routed experts'
    activation casts in passes of their own where the stack runs Transformer Engine's
    ``GroupedLinear``, ``fw.grouped_mlp_casts``, and the dense MLP's where its activation is
    the stack's own code, ``fw.mlp_act_casts``; torchao's float8 TP transposing its gathered
    fp8 tensors in the backward, ``fw.torchao_float8_tp``; the GEMMs a recipe keeps in BF16,
    ``system.quant_scope``, cast nothing; Transformer Engine before v2.14 reading each NVFP4
    tensor once more, ``quantise.splits_rht_cast(dtype, fw.te_version)``); 0 in 16 bits."""
    f, bw = quantise.layer_cast_bytes(m, b, tp, cp, sp, gpu, dtype, fw.grouped_mlp_casts,
                                      fw.torchao_float8_tp, fw.mlp_act_casts,
                                      system.quant_scope,
                                      quantise.splits_rht_cast(dtype, fw.te_version))
    hbm = usable_hbm(gpu, system)
    return f / hbm, bw / hbm


def weight_cast_time(weights: Num, gpu: GPU, dtype: str,
                     system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Seconds to quantise ``weights`` GEMM weights once per step
    (``quantise.weight_cast_bytes`` over the usable HBM bandwidth); 0 in 16 bits."""
    return quantise.weight_cast_bytes(weights, gpu, dtype) / usable_hbm(gpu, system)


def launch_time(fw: FrameworkProfile = DEFAULT, gpu: GPU | None = None) -> float:
    """GPU idle seconds per layer forward from kernel boundaries (the backward: twice); the
    gap per boundary is ``gpu``'s measured one where its profile has it."""
    return fw.kernels_per_layer * measured.launch_gap(gpu, fw.launch_gap_s)


def eager_variant_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, load: Num = 1.0,
                       fw: FrameworkProfile = DEFAULT,
                       system: SystemConfig = DEFAULT_SYSTEM,
                       rope: bool = True) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of the mean layer's eager kernels that Megatron-Core
    runs for gpt-oss's variants where the stack runs its model code (``fw.eager_variants``):
    the activation clamp (``elementwise_bytes.clamp_bytes``) and the unfused YaRN RoPE
    (``elementwise_bytes.rope_unfused_bytes``) over the usable HBM bandwidth, plus a launch gap per
    kernel (``elementwise_bytes.eager_variant_kernels``); 0 for a model with neither, or another
    stack. ``rope`` False: the clamp's alone (what a selective recomputation of the routed
    activation reruns, ``selective_time``). The clamp is not charged where the stack runs it
    inside Transformer Engine's fused grouped MLP (``framework.runs_eager_clamp``). NeMo
    AutoModel's blocks (``fw.elementwise_kernels`` ``"eager_te"``/``"eager_flex"``) add their
    eager per-expert bias adds (``elementwise_bytes.expert_bias_bytes``) instead."""
    if fw.elementwise_kernels in elementwise_bytes.AUTOMODEL_KERNELS:
        xf, xb = elementwise_bytes.expert_bias_bytes(m, b, tp, cp, load)
        hbm = usable_hbm(gpu, system)
        return xf / hbm, xb / hbm
    cf, cb = elementwise_bytes.clamp_bytes(m, b, tp, cp, load)
    rf, rb = elementwise_bytes.rope_unfused_bytes(m, b, tp, cp) if rope else (0.0, 0.0)
    kf, kb = elementwise_bytes.eager_variant_kernels(m, rope)
    hbm, gap = usable_hbm(gpu, system), measured.launch_gap(gpu, fw.launch_gap_s)
    on = 1.0 if fw.eager_variants else 0.0
    if on and not runs_eager_clamp(fw):         # the RoPE's alone
        cl_f, cl_b = elementwise_bytes.eager_variant_kernels(m, False)
        return rf / hbm + (kf - cl_f) * gap, rb / hbm + (kb - cl_b) * gap
    return on * ((cf + rf) / hbm + kf * gap), on * ((cb + rb) / hbm + kb * gap)


def attn_bias_add_time(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, gpu: GPU,
                       fw: FrameworkProfile = DEFAULT,
                       system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` per layer and micro-batch of the attention output's
    bias add that Megatron-Core runs unfused for gpt-oss (``variants.runs_gpt_oss_bridge``:
    Megatron-Bridge's bridge turns ``bias_dropout_fusion`` off and the linears have biases):
    ``elementwise_bytes.attn_bias_add_bytes`` over the usable HBM bandwidth plus a launch gap
    per kernel (``elementwise_bytes.ATTN_BIAS_ADD_KERNELS``); 0 on every other model and
    stack. docs/calibration.md §5.163."""
    if not runs_gpt_oss_bridge(m, fw):
        z = 0.0 * np.asarray(b, dtype=float) * np.asarray(tp, dtype=float)
        return z[()], z[()]
    f, bw = elementwise_bytes.attn_bias_add_bytes(m, b, tp, cp, sp)
    hbm, gap = usable_hbm(gpu, system), measured.launch_gap(gpu, fw.launch_gap_s)
    kf, kb = elementwise_bytes.ATTN_BIAS_ADD_KERNELS
    return f / hbm + kf * gap, bw / hbm + kb * gap
