"""What Transformer Engine's dense ``Linear`` and ``LayerNormLinear`` keep for the backward in a
quantised precision, by TE release, against the 16-bit tensor table (``layer_terms``):
Megatron-Core's TE layer spec runs QKV and a dense layer's fc1 as ``LayerNormLinear``
(``TELayerNormColumnParallelLinear``: the norm output is made inside and only its quantised
copy is saved) and the attention's output projection and fc2 as ``Linear``
(``TERowParallelLinear``: the bf16 input is quantised into a copy of its own, which is what
it saves). docs/calibration.md §5.113.

Source, NVIDIA/TransformerEngine ``transformer_engine/pytorch/module/``:

* TE 1.x (v1.13 ``linear.py``, ``layernorm_linear.py``): ``Linear`` saves
  ``saved_inputmat_t`` (the fp8 transpose from ``fp8_cast_transpose_fused``) or the fp8 data,
  one 1-byte copy; ``LayerNormLinear`` writes its norm output as ``torch.uint8`` and saves
  that ``ln_out``: one 1-byte copy.
* TE v2.0 to v2.16 ``linear.py``: before ``save_for_backward`` the quantised input is
  ``update_usage(rowwise_usage=False)`` (v2.0, v2.1) or ``update_usage(rowwise_usage=False,
  columnwise_usage=True)`` (v2.2 on) unless a column-parallel layer all-gathers it under
  sequence parallelism (not the row-parallel projection and fc2): one copy.
* TE v2.0, v2.1 ``layernorm_linear.py``: without the all-gather the norm output is quantised
  with ``columnwise=backward_needs_input`` and saved whole: per-tensor fp8 keeps the data and,
  on TN-only tensor cores (Hopper), its transpose; with sequence parallelism the quantiser is
  set ``columnwise=False`` before the gather: the row-wise copy alone. TE 8a20d666e (#1505,
  2025-03-13, first in v2.2) adds ``ln_out.update_usage(rowwise_usage=False)`` before saving
  where it is not gathered (and for MXFP8 always; from v2.9 for fp8-blockwise too): one copy
  from v2.2 on.

The attention kernel (TE's fused attention, FlashAttention) saves its own bf16 output for its
backward, so where it runs and is not recomputed the projection's quantised copy comes on
top of the table's ``proj_input``; without it (unfused attention, or Megatron's selective
recomputation of the core attention, whose checkpoint keeps no output) the copy replaces it.
Megatron-Core from core_v0.14.0 (``transformer/attention.py``) calls
``set_save_original_input(self.linear_proj)`` where the recipe is not delayed scaling and TE
is at least 2.6.0dev0 (``Linear(save_original_input=True)``, TE v2.9 ``linear.py``: the bf16
input is saved, ``inputmat = inp``): the projection then keeps the attention's own output and
the table's ``proj_input`` is exact.
"""
from __future__ import annotations

import numpy as np

from strategies.cost import gemm_shapes
from strategies.cost.recompute import part_selected
from strategies.memory.layer_terms import layer_activation_terms
from strategies.memory.saved_precision import PER_TENSOR_SCALING
from strategies.model import ModelSpec
from strategies.stacks.profile import FrameworkProfile
from topologies.precision import get_precision

#: The Transformer Engine releases ``[from, to)`` whose ``LayerNormLinear`` saves its per-tensor
#: fp8 norm output row- and column-wise where sequence parallelism does not all-gather it
#: (v2.0, v2.1; TE 8a20d666e, first in v2.2, saves the column-wise copy alone; TE 1.x one
#: ``uint8`` copy)
TE_NORM_BOTH_COPIES = ((2, 0), (2, 2))

#: The first Transformer Engine release under which Megatron-Core's output projection saves its
#: bf16 input rather than a quantised copy, for every recipe but delayed scaling
#: (``set_save_original_input``, core_v0.14.0 on; ``is_te_min_version("2.6.0dev0")``)
TE_PROJ_ORIGINAL = (2, 6)


def te_linear_input_bytes(te_linears: bool, dtype: str,
                          te_version: tuple[int, int] | None = None, tn_only: bool = False
                          ) -> tuple[float, float, float, float] | None:
    """``(Linear, LayerNormLinear without SP, LayerNormLinear with SP, projection)``: bytes
    per element at which Transformer Engine's dense modules save their GEMM input for the
    backward, where the stack runs them (``te_linears``: ``FrameworkProfile.te_linears``) and
    ``dtype`` is quantised: one copy at the precision's operand bytes (per-tensor fp8 ``1``, its one
    fp32 scale per tensor neglected; MXFP8 ``1 + 1/32``; fp8-blockwise ``1 + 4/128``), except
    a per-tensor fp8 ``LayerNormLinear`` without sequence parallelism under a ``te_version``
    in ``TE_NORM_BOTH_COPIES``: ``Precision.copies(tn_only)`` copies (2 on Hopper, 1 on
    Blackwell). The output projection's: the ``Linear`` bytes, or 0 where it saves its bf16
    input (the attention's output, no copy of its own: a recipe other than delayed scaling
    under TE >= ``TE_PROJ_ORIGINAL``). ``te_version`` None (not stated) reads the newest
    releases. None (the 16-bit table) for a stack without TE's modules, 16-bit precisions
    and nvfp4 (not read)."""
    p = get_precision(dtype)
    if not (te_linears and p.quantised) or p.block_format == "nvfp4":
        return None
    one = float(p.operand_bytes)
    norm = one
    lo, hi = TE_NORM_BOTH_COPIES
    if p.scaling in PER_TENSOR_SCALING and te_version is not None and \
            lo <= tuple(te_version) < hi:
        norm = float(p.copies(tn_only) * p.operand_bytes)
    original = p.scaling != "delayed" and (te_version is None
                                           or tuple(te_version) >= TE_PROJ_ORIGINAL)
    return one, norm, one, 0.0 if original else one


def job_te_linear_inputs(fw: FrameworkProfile, dtype: str,
                         tn_only: bool) -> tuple[float, float, float, float] | None:
    """``te_linear_input_bytes`` of a stack (its modules, its TE release) and precision on a
    GPU whose fp8 GEMMs are TN only or not."""
    return te_linear_input_bytes(fw.te_linears, dtype, fw.te_version, tn_only)


def te_linear_saved_delta(model: ModelSpec, seq_len: int, b, tp, sp, cp, rc, mask, flash,
                          te_inputs: tuple[float, float, float, float] | None):
    """Bytes per GPU and micro-batch that one layer's stash holds beyond the 16-bit table where
    Transformer Engine's dense modules save quantised inputs (``te_linear_input_bytes``;
    numbers or numpy arrays; negative where they save less): QKV's norm output (``2sbh`` at
    ``n/2``, ``n`` the ``LayerNormLinear`` bytes with or without SP), a dense layer's fc1
    input (the dense layers' share of ``2sbh``, likewise), fc2's input (the dense MLP's
    ``2sb·F`` at ``l/2``) and the output projection's copy (``2sb·a·d_v`` at ``p/2``, on top
    of the attention kernel's bf16 output where ``flash`` and the scores are not recomputed,
    instead of it otherwise; none where ``p`` is 0, the bf16 input saved), split as the table
    splits them, ``/cp``. None: 0. Nothing under full (``rc`` 2) or op (3) recomputation; a
    selective recomputation that drops the norm outputs or the dense MLP drops their terms
    (``part_selected``). MLA's latents, the MoE layers' MLP (router, shared and routed
    experts: ``moe_saved``) and a pending weight gradient's inputs are not read."""
    if te_inputs is None:
        return 0.0
    norm_delta, fc2_delta, proj_delta, _, whole = _te_deltas(model, seq_len, b, tp, sp, rc,
                                                             mask, flash, te_inputs)
    return np.where(whole, 0.0, (norm_delta + fc2_delta + proj_delta) / cp)[()]


def te_module_deltas(model: ModelSpec, seq_len: int, b, tp, sp, cp, rc, mask, flash,
                     te_inputs: tuple[float, float, float, float] | None) -> tuple:
    """``(QKV, projection)``: the two terms of ``te_linear_saved_delta`` that belong to one
    attention module each (bytes per GPU and micro-batch, numbers or arrays): the QKV
    ``LayerNormLinear``'s norm output at its saved precision beyond the table's ``qkv_input``
    (0 with MLA, whose norm output feeds its down projections), and the output projection's
    quantised copy. What Megatron-Core's fine-grained offload groups ``qkv_linear`` and
    ``attn_proj`` copy of them (``memory.offload_saved.attention_offload_bytes``). (0, 0)
    where ``te_inputs`` is None."""
    if te_inputs is None:
        return 0.0, 0.0
    _, _, proj_delta, qkv_delta, whole = _te_deltas(model, seq_len, b, tp, sp, rc, mask,
                                                    flash, te_inputs)
    return (np.where(whole, 0.0, qkv_delta / cp)[()],
            np.where(whole, 0.0, proj_delta / cp)[()])


def _te_deltas(model: ModelSpec, seq_len: int, b, tp, sp, rc, mask, flash,
               te_inputs: tuple[float, float, float, float]) -> tuple:
    """``(norms, fc2, projection, QKV norm, whole)`` of ``te_linear_saved_delta`` before the
    ``/cp`` split (``QKV norm``: the QKV ``LayerNormLinear``'s share of ``norms``; ``whole``:
    the layer recomputed whole, nothing saved). One place for each term."""
    linear, norm_local, norm_gathered, proj = te_inputs
    terms = layer_activation_terms(model, seq_len, 1)
    sb = seq_len * b
    seq_div = np.where(sp, tp, 1.0)
    norm = np.where(sp, norm_gathered, norm_local)
    dense_share = model.layer_shares().get("dense", 0.0)
    qkv_elems = 0.0 if model.is_mla else sb * model.hidden_size
    ln_elems = qkv_elems + dense_share * sb * model.hidden_size
    norm_on = np.logical_not(part_selected(rc, mask, "norm_outputs"))
    norm_delta = np.where(norm_on, (norm - 2.0) * ln_elems / seq_div, 0.0)
    qkv_delta = np.where(norm_on, (norm - 2.0) * qkv_elems / seq_div, 0.0)
    fc2_delta = np.where(part_selected(rc, mask, "dense_mlp"), 0.0,
                         (linear - 2.0) * sb * gemm_shapes.mlp_part_widths(model)["dense_mlp"]
                         / tp)
    kept = np.logical_and(flash, np.logical_not(part_selected(rc, mask, "scores")))
    proj_elems = b * terms["proj_input"] / 2.0
    proj_delta = 0.0 if not proj else (proj - np.where(kept, 0.0, 2.0)) * proj_elems / tp
    rc = np.asarray(rc)
    return norm_delta, fc2_delta, proj_delta, qkv_delta, (rc == 2) | (rc == 3)
