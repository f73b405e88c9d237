"""Transformer Engine's amax reductions: the small all-reduces per-tensor FP8 scaling runs
on the compute stream (docs/calibration.md §5.64).

Delayed scaling (``fp8``, ``fp8-delayed``; TE ``DelayedScaling``, ``reduce_amax=True`` by
default). Each TE module appends its FP8 tensors' newest amaxes to a global buffer
(``FP8GlobalStateManager.add_fp8_tensors_to_global_buffer``: forward 3 per GEMM, input,
weight and output; backward 2, the gradients: ``module/base.py`` ``num_gemms * 3`` /
``* 2``). ``reduce_and_update_fp8_tensors`` concatenates them (``torch.cat``), all-reduces
the buffer with MAX over the autocast's ``fp8_group`` (``torch.distributed.all_reduce(...,
async_op=False)``: the calling (compute) stream waits for it) and updates the histories and
scales in one fused kernel: forward at the outermost ``fp8_autocast`` exit
(``autocast_exit``), backward after the backward of the region's first FP8 module
(``Linear``/``LayerNormLinear``/``LayerNormMLP``/``GroupedLinear`` ``backward``,
``ctx.reduce_and_update_bwd_fp8_tensors``). Same code in TE v1.8 (``pytorch/fp8.py``,
mid-2024) and the 2026 sources (``pytorch/quantization.py``). Megatron-Core wraps a whole
``TransformerBlock`` (one model chunk) in one autocast under delayed scaling
(``transformer_block.py``: ``use_outer_quantization_context``; other recipes enter one per
layer, which costs nothing without a global buffer) with ``fp8_group =
parallel_state.get_amax_reduction_group(with_context_parallel=True)``, the tp·cp·dp ranks of
one pipeline stage (``fp8_utils.get_fp8_context``; ``--tp-only-amax-red`` narrows it to
tp·cp, off by default). So per step and rank: one all-reduce per chunk forward and one per
chunk backward per micro-batch, ``4 · 3 · GEMMs`` and ``4 · 2 · GEMMs`` bytes of the chunk.

Current per-tensor scaling (``fp8-current``, TE ``Float8CurrentScaling``) and NVFP4's
per-tensor scale (``Precision.amax_pass``): a column-parallel linear layer's input under
sequence parallelism and a row-parallel one's incoming gradient all-reduce their 4-byte amax
over the tensor-parallel group before the cast (``module/linear.py``,
``layernorm_linear.py``, ``layernorm_mlp.py`` ``set_quantizer_amax_reduction_group``;
``csrc/quantizer.cpp`` ``Float8CurrentScalingQuantizer::quantize_impl``:
``amax_reduction_group->allreduce(...)->wait()``, the stream waits; TE v2.5 and later):
per dense layer and micro-batch 2 forward (QKV's and fc1's inputs) and 2 backward (the
projection's and fc2's output gradients); an MoE layer's routed experts reduce none
(``GroupedLinear``), its shared experts' MLP as a dense one. Nothing without sequence
parallelism or with ``tp = 1``; block-scaled recipes (amax per block) reduce nothing.

Only stacks that run TE's modules under Megatron-Core's autocast do this
(``FrameworkProfile.te_amax_reduction``); XLA computes its scales otherwise.

torchao's tensorwise dynamic float8 under TP (``FrameworkProfile.torchao_float8_tp``:
torchtitan's ``apply_tp`` with ``Float8ColwiseParallel``/``Float8RowwiseParallel``/
``PrepareFloat8ModuleInput``, ``torchao/float8/float8_tensor_parallel.py``; the reference
rows' ``fp8-current``) is the same physics with other counts: ``tensor_to_amax``
(``float8_utils.py``) takes ``torch.max(torch.abs(x))`` of a DTensor, which for a ``Shard``
placement is a ``Partial(max)`` the scale's arithmetic all-reduces over the TP mesh before
the cast (a 4-byte all-reduce the compute stream waits for). Per layer and micro-batch:
forward, the attention's and the feed-forward's ``Shard(1)`` inputs (cast before their fp8
all-gathers; ``wq``/``wk``/``wv``/``w1``/``w3`` then find them already cast) and ``wo``'s and
``w2``'s ``Shard(-1)`` inputs: 4; backward, each linear's output gradient
(``_NoopFwToFloat8BwDynamic`` in the styles' ``_prepare_output_fn``: ``Shard(-1)`` for the five
column-parallel ones, ``Shard(1)`` for ``wo`` and ``w2``): 7; recomputation (full, or op
SAC, whose ``_save_list`` keeps ``abs``/``max`` but not the all-reduce the cast reads) the
forward's 4 again, in the backward. A MoE layer counts its attention's (2, 4, 2) only. The
weights' casts are not counted (FSDP2's float8 all-gather with
``precompute_float8_dynamic_scale_for_fsdp`` computes them once per step; not read per row).
Priced as ``comm.small_allreduce_time`` each (the tree for a buffer of kilobytes over
several nodes), blocking the compute stream: the stage record's layer passes carry it as
seconds per mean layer and micro-batch. Not modelled: the full recomputation's second
forward (whether its autocast exit reduces again: not read), the ``torch.cat`` and the
fused update kernel (two launches per reduction).
"""
from __future__ import annotations

import numpy as np

from strategies.cost import comm as cm
from strategies.cost.token_counts import Num
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from topologies.cluster import Cluster
from topologies.precision import get_precision

AMAX_BYTES = 4.0                 # one fp32 amax per FP8 tensor
FWD_TENSORS_PER_GEMM = 3         # TE module/base.py: num_gemms * 3 forward (input, weight, out)
BWD_TENSORS_PER_GEMM = 2         # num_gemms * 2 backward (output gradient, input gradient)
ATTENTION_GEMMS = 2              # QKV (LayerNormLinear) and the projection (Linear)
MLP_GEMMS = 2                    # fc1 and fc2 (one expert's, a shared expert MLP's)


def layer_gemms(m: ModelSpec, ep: Num) -> Num:
    """TE GEMMs of the mean layer of ``m`` on one rank (their amaxes are the buffer): the
    attention's 2, a dense MLP's 2; an MoE layer's ``2·E/ep`` local experts
    (``GroupedLinear`` ``num_gemms``) and its shared experts' 2. Vectorised over ``ep``."""
    moe = m.num_moe_layers / m.num_layers if m.is_moe else 0.0
    experts = MLP_GEMMS * m.num_experts / np.asarray(ep, dtype=float) \
        + (MLP_GEMMS if m.num_shared_experts else 0.0)
    return ATTENTION_GEMMS + (1.0 - moe) * MLP_GEMMS + moe * experts


def tp_amax_reductions(m: ModelSpec) -> float:
    """Current scaling's TP amax all-reduces per mean layer and pass (forward = backward):
    2 per dense layer, 1 per MoE layer (its attention's; +1 with shared experts)."""
    moe = m.num_moe_layers / m.num_layers if m.is_moe else 0.0
    return 2.0 - moe * (0.0 if m.num_shared_experts else 1.0)


#: torchao's float8 TP amax all-reduces per layer and micro-batch (module doc): the
#: attention's and the feed-forward's (forward, backward)
TORCHAO_ATTN_CASTS = (2, 4)
TORCHAO_MLP_CASTS = (2, 3)


def torchao_tp_amax_reductions(m: ModelSpec) -> tuple[float, float]:
    """(forward, backward) torchao float8 TP amax all-reduces per mean layer: the
    attention's and, in dense layers, the feed-forward's (``TORCHAO_*_CASTS``)."""
    dense = 1.0 - (m.num_moe_layers / m.num_layers if m.is_moe else 0.0)
    return (TORCHAO_ATTN_CASTS[0] + dense * TORCHAO_MLP_CASTS[0],
            TORCHAO_ATTN_CASTS[1] + dense * TORCHAO_MLP_CASTS[1])


def amax_reduction_time(m: ModelSpec, layers_per_chunk: Num, tp: Num, cp: Num, dp: Num,
                        ep: Num, sp: Num, dtype: str, fw: FrameworkProfile,
                        cl: Cluster, recompute: Num = 0) -> tuple[Num, Num]:
    """(forward, backward) seconds per mean layer and micro-batch of the amax all-reduces
    (module doc) on a rank of a plan with ``layers_per_chunk`` layers in each model chunk
    (``num_layers/(pp·vpp)``): delayed scaling's one per chunk pass over the tp·cp·dp ranks
    of a stage (consecutive: ``placement``'s order), spread over the chunk's layers;
    current scaling's per layer over tp. (0, 0) for 16 bits, block scaling and stacks
    without TE's autocast. Vectorised."""
    prec = get_precision(dtype)
    if fw.torchao_float8_tp and prec.amax_pass and not prec.block_scaled:
        # torchao's float8 TP (module doc); ``recompute`` a plan_arrays.RECOMPUTE_CODE: full
        # (2) and op (3) rerun the forward's in the backward
        on = (np.asarray(tp) > 1) & (np.asarray(sp) > 0)
        n_f, n_b = torchao_tp_amax_reductions(m)
        rerun = np.isin(np.asarray(recompute), (2, 3)) * n_f
        t = np.where(on, cm.small_allreduce_time(AMAX_BYTES, tp, 1, cl), 0.0)
        return (n_f * t)[()], ((n_b + rerun) * t)[()]
    if not (fw.te_amax_reduction and prec.quantised):
        return 0.0, 0.0
    if prec.scaling == "delayed":
        lc = np.asarray(layers_per_chunk, dtype=float)
        n = np.asarray(tp) * cp * dp
        g = layer_gemms(m, ep) * lc
        f = cm.small_allreduce_time(AMAX_BYTES * FWD_TENSORS_PER_GEMM * g, n, 1, cl) / lc
        b = cm.small_allreduce_time(AMAX_BYTES * BWD_TENSORS_PER_GEMM * g, n, 1, cl) / lc
        return f, b
    if prec.amax_pass:
        on = (np.asarray(tp) > 1) & (np.asarray(sp) > 0)
        t = np.where(on, tp_amax_reductions(m) * cm.small_allreduce_time(AMAX_BYTES, tp, 1, cl),
                     0.0)[()]
        return t, t
    return 0.0, 0.0
