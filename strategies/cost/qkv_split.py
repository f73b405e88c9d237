"""The fused QKV projection's split into q, k and v, as the stacks run it
(``FrameworkProfile.qkv_split``; docs/calibration.md §5.167): the memory passes around it.

Megatron's ``linear_qkv`` writes one ``[s, b, g/t, (a/g + 2)·d]`` tensor per rank (``a``
query heads, ``g`` groups, head size ``d``, ``t`` the TP size) and the attention splits it on
the last dim into q, k and v: views, no pass, in every stack. What follows is not free:

* **the backward ``cat``** (``qkv_split_cat_bytes``): the split's backward must return one
  gradient of the fused tensor. ``torch.split``'s autograd backward is always an ``at::cat``
  of the pieces' gradients (PyTorch ``split_with_sizes_backward``): Megatron-LM's and
  Megatron-DeepSpeed's ``mpu.split_tensor_along_last_dim`` (Megatron-LM f2bf5a5 2021
  ``megatron/model/transformer.py`` L233, ``mpu/utils.py`` L46; bigscience-workshop
  Megatron-DeepSpeed ``megatron/model/transformer.py`` L229), and Megatron-Core from
  Transformer Engine 2.3 on, where ``from transformer_engine.pytorch.attention import
  _SplitAlongDim`` (core_v0.18.0 ``extensions/transformer_engine.py`` L3101-3106) fails and
  ``get_query_key_value_tensors`` falls back to ``torch.split`` (``attention.py`` L1631).
  TE's ``SplitAlongDim`` (to v2.2) returns a view instead when the gradients are adjacent
  slices of one buffer (``qkv_split_is_view``). A read and a write of ``(a + 2g)·d/t``
  16-bit elements per token, one kernel.
* **the forward copies** (``qkv_layout_copies``): Megatron-Core's q reshape and Transformer
  Engine's ``get_qkv_layout`` fallback copy the views the split made (Megatron-Core stacks,
  ``qkv_split == "te"``).

Not modelled: MLA's and DeepSeek-V4's projections (``has_fused_qkv_split``), the rerun of
TE's layout copies inside a selective ``core_attn`` recomputation. Vectorised over the plan
fields."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from strategies.cost import measured
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num, tokens_per_gpu
from strategies.framework import DEFAULT
from strategies.model import ModelSpec
from strategies.stacks.profile import FrameworkProfile

if TYPE_CHECKING:
    from topologies.gpus import GPU

#: HBM bytes per element of a copy of q, k or v, or of their gradients' ``cat``: read 2 +
#: write 2 (16-bit activations and gradients).
COPY_BYTES = 4.0
#: kernels of the backward ``cat``: one.
CAT_KERNELS = 1
#: the last Transformer Engine release whose ``transformer_engine.pytorch.attention`` defines
#: ``_SplitAlongDim``, the name Megatron-Core imports (core_r0.8.0
#: ``custom_layers/transformer_engine.py`` L894-900, core_v0.12.0-v0.18.0
#: ``extensions/transformer_engine.py``): v2.2's ``attention.py`` L3631. v2.3 (2025-04-28)
#: made ``attention`` a package exporting four other names (``attention/__init__.py``
#: L7-10) and the class ``utils.SplitAlongDim`` (v2.16 L282)
TE_LAST_SPLIT_ALONG_DIM = (2, 2)


def has_fused_qkv_split(m: ModelSpec) -> bool:
    """Whether ``m``'s attention projects q, k and v in one fused GEMM whose output the stack
    splits: not MLA's down/up projections nor DeepSeek-V4's attention (not modelled here)."""
    return not (m.is_mla or m.is_dsv4)


def qkv_split_is_view(m: ModelSpec, fw: FrameworkProfile, gpu: "GPU", flash: Any,
                      cp: Any) -> Any:
    """Whether the backward of stack ``fw``'s split returns a view of the incoming gradients,
    not their ``cat`` (bool, vectorised over ``flash`` and ``cp``). Only TE's
    ``SplitAlongDim`` ever does (``fw.qkv_split == "te"`` on a release up to
    ``TE_LAST_SPLIT_ALONG_DIM``; ``te_version`` None is read as the newest releases'):
    its backward (v1.8 ``attention.py`` L1998-2020, v2.16 ``utils.py`` L400-427) returns a
    view when every gradient has the first one's strides and storage, its own shape and its
    slice's storage offset. That holds where TE's fused attention allocates dq, dk, dv as
    slices of one buffer: the ``sbh3d`` layout (``get_qkv_layout``: one storage, equal
    strides and shapes, offsets ``0, d, 2d``; ``fused_attn_bwd``'s ``NVTE_H3D`` case, v1.8
    ``csrc/extensions/attention.cu`` L938, v2.9 ``attention.cpp`` L374-388), i.e. q, k, v
    the split's untouched views: multi-head attention, no RoPE and no q/k norm (each writes
    fresh q and k); cuDNN's kernel (FlashAttention, preferred below Hopper by
    ``get_attention_backend``, "FusedAttention preference on Hopper+", v2.9 ``utils.py``
    L1118-1124, and the unfused path allocate three gradients; ``fp8`` in the chip's peak
    table stands for sm 90+, as ``attention_grid.kernels``); no context parallelism (TE's CP
    functions allocate their own gradients). False otherwise."""
    te = fw.te_version
    shape = np.broadcast(np.asarray(flash), np.asarray(cp)).shape
    if (fw.qkv_split != "te" or te is None or tuple(te) > TE_LAST_SPLIT_ALONG_DIM
            or m.kv_heads != m.num_attention_heads or m.position_embedding == "rope"
            or m.qk_norm or gpu.vendor != "nvidia" or "fp8" not in gpu.peak_flops):
        return np.zeros(shape, dtype=bool)[()]
    return (np.asarray(flash, dtype=bool) & (np.asarray(cp) == 1))[()]


def qkv_split_cat_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """HBM bytes per GPU of the backward ``cat`` of a layer's q, k and v gradients:
    ``COPY_BYTES`` per element of ``(a + 2g)·d/t`` per token (the heads split over TP, the
    whole sequence on each rank), times the attention blocks per layer (``attention_share``);
    the caller decides whether the stack runs it. 0 without a fused QKV split."""
    if not has_fused_qkv_split(m):
        return (0.0 * np.asarray(tp, dtype=float))[()]
    width = (m.num_attention_heads + 2 * m.kv_heads) * m.head_dim * m.attention_share
    return np.asarray(COPY_BYTES * tokens_per_gpu(b, m.seq_length, cp) * width / tp,
                      dtype=float)[()]


def qkv_layout_copies(m: ModelSpec, tp: Num) -> tuple[Num, Num]:
    """``(elements per token, kernels)`` per GPU of the forward copies Megatron-Core's
    attention makes of the split's views before Transformer Engine's attention, on the
    attention blocks' share:

    * q's ``reshape`` from ``[s, b, g/t, (a/g)·d]`` to ``[s, b, a/t, d]`` copies where a group
      holds several heads and a rank several groups (``a > g`` and ``g/t > 1``: the group and
      head dims have strides ``(a/g + 2)·d`` and ``d``, which no view merges; core_v0.17.0
      ``attention.py`` L1474);
    * TE's ``get_qkv_layout`` makes q, k and v ``contiguous()`` when they match no layout it
      knows (v2.14 ``dot_product_attention/utils.py`` L2054-2055, v1.8 ``attention.py``
      L2372; called before any backend is chosen, v2.14 ``dot_product_attention.py``
      L1214-1229): with RoPE or q/k norms q and k are fresh tensors and v, a view strided
      by the fused row, is copied; without them, multi-head attention's views are the
      ``sbh3d`` layout (no copy), grouped-query attention's k and v are copied beside the
      reshaped q (their offsets match no layout), or all three where a rank holds one group.

    Each copy one kernel of ``COPY_BYTES`` per element; 0 without a fused QKV split.
    Vectorised over ``tp``."""
    z = 0.0 * np.asarray(tp, dtype=float)
    if not has_fused_qkv_split(m):
        return z[()], z[()]
    a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
    q_copy = ((a > g) & (g / np.asarray(tp, dtype=float) > 1)).astype(float)
    if m.position_embedding == "rope" or m.qk_norm:
        width, kernels = g * d + q_copy * a * d, 1.0 + q_copy
    elif a == g:
        return z[()], z[()]
    else:
        width, kernels = (a + 2 * g) * d + z, 3.0 + z
    share = m.attention_share
    return (width * share / np.asarray(tp, dtype=float))[()], (kernels * share)[()]


def qkv_split_time(m: ModelSpec, b: Num, tp: Num, cp: Num, flash: Num, gpu: "GPU",
                   fw: FrameworkProfile = DEFAULT,
                   system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` per layer and micro-batch around the stack's split of
    its fused QKV output (``fw.qkv_split``), at the usable HBM bandwidth plus a launch gap
    per kernel: forward, the layout copies (``qkv_layout_copies``) on a Megatron-Core stack
    (``"te"``); backward, the gradients' ``cat`` (``qkv_split_cat_bytes``, ``CAT_KERNELS``)
    where the split's backward is not a view (``qkv_split_is_view``). (0, 0) on a stack or
    model with no such split."""
    z = 0.0 * np.asarray(b, dtype=float) * np.asarray(tp, dtype=float) \
        * np.asarray(cp, dtype=float) * np.asarray(flash, dtype=float)
    if not (fw.qkv_split and has_fused_qkv_split(m)):
        return z[()], z[()]
    hbm, gap = usable_hbm(gpu, system), measured.launch_gap(gpu, fw.launch_gap_s)
    on = np.logical_not(qkv_split_is_view(m, fw, gpu, flash, cp))
    bwd = z + on * (qkv_split_cat_bytes(m, b, tp, cp) / hbm + CAT_KERNELS * gap)
    fwd = z
    if fw.qkv_split == "te":
        width, kernels = qkv_layout_copies(m, tp)
        fwd = z + COPY_BYTES * tokens_per_gpu(b, m.seq_length, cp) * width / hbm + kernels * gap
    return fwd[()], bwd[()]
