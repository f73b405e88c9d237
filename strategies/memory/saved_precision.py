"""Bytes per element at which a stack keeps a GEMM's saved input for the backward in low
precision: DeepSeek-V3's fp8 activation cache (``activation_cache_bytes``, ``cache_ratios``)
and Transformer Engine's quantised saved inputs of the grouped expert GEMMs
(``expert_input_bytes``, by TE release; docs/calibration.md §5.103)."""
from __future__ import annotations

from strategies.cost import gemm_shapes
from strategies.model import ModelSpec
from strategies.stacks.profile import FrameworkProfile
from topologies.precision import get_precision


#: Bytes per element of the output projection's input (the attention's output) where a stack
#: caches it in DeepSeek-V3's customised E5M6 format: 12 bits, in 1x128 tiles with one fp32
#: scale each (arXiv 2412.19437 §3.3.3 "Low-Precision Activation" (1); the scale's storage is
#: not stated: fp32 assumed, as the fp8 tiles' ``topologies.precision`` fp8-blockwise).
E5M6_BYTES = 12 / 8 + 4 / 128


def activation_cache_bytes(cached: bool, dtype: str) -> float | None:
    """Bytes per element of a GEMM input a stack caches for the backward in low precision:
    the precision's operand bytes (one row-wise copy with its scales: ``1 + 4/128`` for
    fp8-blockwise's 1x128 tiles), where the stack caches them so
    (``FrameworkProfile.fp8_activation_cache``) and ``dtype`` is quantised; None (the
    16-bit table) otherwise. DeepSeek-V3, arXiv 2412.19437 §3.3.3: "cache activations in FP8
    format for the backward pass of the Linear operator"."""
    p = get_precision(dtype)
    return float(p.operand_bytes) if cached and p.quantised else None


def cache_ratios(model: ModelSpec, cache: float | None) -> dict[str, float]:
    """Stored over 16-bit bytes of each stash term (``layer_activation_terms``' names; absent:
    1) where GEMM inputs are cached at ``cache`` bytes per element (``activation_cache_bytes``;
    None: ``{}``, every term 16-bit). DeepSeek-V3 §3.3.3: the inputs of every Linear in the
    low format (QKV, fc1 with the MoE's dispatched tokens, fc2, MLA's normed latents), the
    output projection's input in E5M6 (``E5M6_BYTES``), the SwiGLU inputs of MoE layers in
    the low format (routed and shared experts; a dense layer's stays 16-bit), everything else
    (norm inputs, Q, K, V, the rope key, the scores) 16-bit."""
    if cache is None:
        return {}
    r = cache / 2.0
    w = gemm_shapes.mlp_part_widths(model)
    tot = sum(w.values())
    act_in = (w["dense_mlp"] + r * (w["routed_mlp"] + w["shared_mlp"])) / tot if tot else 1.0
    out = {"qkv_input": r, "proj_input": E5M6_BYTES / 2.0, "fc1_input": r,
           "activation_input": act_in, "fc2_input": r}
    if model.is_mla:   # the latents after their norms are the up projections' inputs
        lat = (model.q_lora_rank or 0) + model.kv_lora_rank
        out["mla_latents"] = ((2 * lat * (1 + r) + 2 * model.qk_rope_head_dim)
                              / (4 * lat + 2 * model.qk_rope_head_dim))
    return out


#: The per-tensor fp8 scalings (``topologies.precision.Precision.scaling``): TE's
#: ``Float8Tensor``, whose saved inputs keep one 1-byte copy (``expert_input_bytes``).
PER_TENSOR_SCALING = ("delayed", "current")


#: The Transformer Engine releases ``[from, to)`` whose ``GroupedLinear`` saves its per-tensor
#: fp8 inputs as quantised, row- and column-wise (v2.0 to v2.2: both copies where the chip
#: allocates the transpose; TE 4c9626e7e, first in v2.3, saves the column-wise copy alone;
#: TE 1.x one copy; docs/calibration.md §5.103 "Extension (teversion)")
TE_BOTH_COPIES = ((2, 0), (2, 3))


def expert_input_bytes(te_experts: bool, dtype: str, te_version: tuple[int, int] | None = None,
                       tn_only: bool = False) -> float | None:
    """Bytes per element at which Transformer Engine's grouped expert GEMMs save fc1's and
    fc2's inputs for the backward: the precision's operand bytes where the stack runs the
    routed experts through TE (``te_experts``: ``runs_te_experts``) and ``dtype`` is MXFP8
    (one column-wise copy, an E8M0 scale per 32 elements: ``1 + 1/32``) or per-tensor fp8
    (delayed or current scaling, TE's ``Float8Tensor``: one 1-byte copy, the transpose on
    Hopper, the data on Blackwell; its one fp32 scale per tensor neglected: ``1``); None
    (the 16-bit table of ``routed_token_saved_bytes``) otherwise (fp8-blockwise and nvfp4
    not read). The same on both TE paths (docs/calibration.md §5.103): the unfused
    ``GroupedLinear`` (TE v2.3 to v2.16 ``module/grouped_linear.py``: each quantised input
    ``update_usage(rowwise_usage=False, columnwise_usage=True)`` before
    ``save_for_backward``; TE 1.x saves either the fp8 data or its transpose) and the fused
    grouped MLP (MXFP8 only; TE v2.16 ``ops/fused/forward_grouped_mlp.py``, the row-wise
    data and scales set to None). Per-tensor fp8 under a ``te_version`` in
    ``TE_BOTH_COPIES`` (v2.0 to v2.2) saves the data and, where the chip's fp8 GEMMs are TN
    only (``tn_only``: ``GPU.fp8_tn_only``, Hopper), the transpose: ``Precision.copies``
    times the operand bytes (2 on Hopper, 1 on Blackwell). ``te_version`` None (not stated)
    reads TE >= 2.3."""
    p = get_precision(dtype)
    kept = p.block_format == "mxfp8" or p.scaling in PER_TENSOR_SCALING
    if not (te_experts and kept):
        return None
    lo, hi = TE_BOTH_COPIES
    if p.scaling in PER_TENSOR_SCALING and te_version is not None and \
            lo <= tuple(te_version) < hi:
        return float(p.copies(tn_only) * p.operand_bytes)
    return float(p.operand_bytes)


def runs_te_experts(fw: FrameworkProfile) -> bool:
    """The stack runs the routed experts through Transformer Engine: Megatron-Core's
    ``TEGroupedMLP`` (``grouped_mlp_casts``) or TE's fused grouped MLP
    (``fused_grouped_mlp``)."""
    return bool(fw.grouped_mlp_casts or fw.fused_grouped_mlp)
