"""Activation memory: bytes per transformer layer and per micro-batch, and the stash on a stage.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198, Sec. 4-5, Table 2), with 2-byte (bf16/fp16) activations and 1-byte dropout
masks. Every term below is one saved tensor; ``s`` sequence, ``b`` micro-batch, ``h`` hidden,
``a`` attention heads, ``d = h/a`` head dim, ``g`` KV heads (GQA), ``f`` MLP hidden size,
``k`` MoE top-k (1 when dense), ``t`` tensor parallel, ``c`` context parallel.

    tensor                   bytes             split by
    LayerNorm 1 input        2sbh              t only with sequence parallelism (SP)
    QKV input (LN1 output)   2sbh              t only with SP
    Q                        2sbh              t
    K and V                  2·2·s·b·g·d       t
    softmax output           2as²b             t   (score term)
    softmax dropout mask     as²b              t   (score term)
    dropout output (·V)      2as²b             t   (score term)
    out-projection input     2sbh              t
    attention dropout mask   sbh               t only with SP
    LayerNorm 2 input        2sbh              t only with SP
    fc1 input (LN2 output)   2sbh·k            t only with SP
    activation-fn input      2sbf·k            t   (4sbf·k gated: gate and up halves)
    fc2 input                2sbf·k            t
    MLP dropout mask         sbh               t only with SP

For GPT (``g = a``, ``f = 4h``, ``k = 1``) the replicated group sums to ``10sbh``, the
TP-split group to ``2+4+2+16 = 24sbh`` and the score term to ``5as²b``: exactly Korthikanti's
``sbh·(10 + 24/t + 5as/(ht))``; with SP the 10 becomes ``10/t`` (``34sbh/t`` in all), and
Megatron-LM's ``theoretical_memory_usage`` writes the same as ``sbh·(18 + 4f/h)`` (18 = the
replicated 10 + Q, K, V and out-projection input 8; ``4f/h`` the two MLP intermediates).
A gated (SwiGLU) MLP saves its fc1 output of width ``2f`` (both halves are needed by the
SwiGLU backward) and the product of width ``f`` (fc2's input): ``6sbf`` instead of ``4sbf``.
GQA shrinks K and V to ``g·d`` wide. A model trained without dropout (``ModelSpec.dropout``
False: Llama, Mistral, Qwen, DeepSeek, gpt-oss) keeps no dropout tensor: PyTorch's
``F.dropout(x, p=0)`` returns ``x`` itself (``aten/src/ATen/native/Dropout.cpp``,
``_dropout_impl``), so the two ``sbh`` masks, the embedding's mask, the softmax's dropout
mask and dropout output (``3as²b``, the softmax output stays) are zero (docs/calibration.md
§5.19: ``2sbh`` of Llama 3 405B's ``33.75sbh/t`` per layer, 5.9 %).

Selective recompute (Megatron's ``recompute_granularity=selective``: core attention) drops the
score term; so does FlashAttention (``flash_attn=True``, the Plan default), which never stores
the ``s×s`` matrices and regenerates its dropout mask from the RNG seed (its ``4·a·s·b``-byte
log-sum-exp statistics are neglected: < 0.1 % of the layer). Full recompute stores only the
layer input ``2sbh`` (``/t`` with SP). Op recompute (torchtitan's op-level selective
checkpointing, ``recompute=op``) stores what its policy saves: ``op_saved_bytes``. Context parallelism shards the sequence, so every term
(including ``s²``, whose query side is sharded) is divided by ``c``. MoE: each token is
dispatched to ``k`` experts, so the fc1 input and the MLP intermediates scale with ``k``
(expert parallelism does not change the per-rank average; router logits are neglected).
Where Transformer Engine runs the routed experts in MXFP8 (``GroupedLinear`` or the fused
grouped MLP) or per-tensor fp8 (``GroupedLinear``) the routed copies keep fc1's and fc2's
inputs as one quantised copy each (``routed_token_saved_bytes``, ``expert_input_bytes``;
docs/calibration.md §5.103).
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from strategies.cost import gemm_shapes, moe_bytes, param_counts, token_counts
from strategies.cost.gemm_shapes import op_sac_gemms
from strategies.cost.recompute import (DEFAULT_MODULES, PARTS, checkpoint_inputs, has_module,
                                       kept_layers, modules_mask, part_selected, rebuilt_layers)
from strategies.errors import SpecError
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.variants import runs_eager_clamp
from strategies.remat_policies import NEVER_READ, RECOMPUTED_WITH
from strategies.layout import mixed_layers, order_chunk_kinds, stage_content
from strategies.model import ModelSpec
from strategies.schedules import get_schedule, head_rank
from strategies.schedules.base import order_figure, peak_chunk_moment, peak_pair
from topologies.precision import get_precision

if TYPE_CHECKING:
    from strategies.job import Job

# tensor name -> how it is split: "seq" (by t only with SP), "tp" (by t), "score" (by t;
# dropped by selective recompute and FlashAttention).
TERM_KINDS = {
    "ln1_input": "seq", "qkv_input": "seq", "q": "tp", "k_v": "tp", "softmax_output": "score",
    "softmax_dropout_mask": "score", "attention_dropout_output": "score", "proj_input": "tp",
    "attention_dropout_mask": "seq", "ln2_input": "seq", "fc1_input": "seq",
    "activation_input": "tp", "fc2_input": "tp", "mlp_dropout_mask": "seq", "mla_latents": "seq",
}


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


def layer_activation_terms(model: ModelSpec, seq_len: int, micro_batch_size: int,
                           cache: float | None = None) -> dict[str, float]:
    """Bytes of each saved tensor of one transformer layer for one micro-batch, before any
    parallel split (see the module table). Sums to Korthikanti's ``sbh·(34 + 5as/h)`` for GPT.
    ``cache``: GEMM inputs cached at that many bytes per element (``cache_ratios``; None: the
    16-bit table).

    >>> from strategies.presets import model_preset
    >>> t = layer_activation_terms(model_preset("gpt3-175b"), 2048, 1)
    >>> sum(t.values()) / (2048 * 12288)  # 34 + 5*96*2048/12288
    114.0
    """
    s, b, h = seq_len, micro_batch_size, model.hidden_size
    sb, a = s * b, model.num_attention_heads
    sbh = sb * h
    sbf = sb * model.mean_mlp_width()         # k experts' (and the shared experts') width
    copies = model.mean_expert_copies()
    score = a * s * s * b
    drop = 1.0 if model.dropout else 0.0      # no dropout: no mask, no separate output
    out = {
        "ln1_input": 2 * sbh, "qkv_input": 2 * sbh, "q": 2 * sb * a * model.head_dim,
        "k_v": 2 * sb * model.kv_heads * (model.head_dim + model.v_dim),
        "softmax_output": 2 * score, "softmax_dropout_mask": score * drop,
        "attention_dropout_output": 2 * score * drop, "proj_input": 2 * sb * a * model.v_dim,
        "attention_dropout_mask": sbh * drop, "ln2_input": 2 * sbh, "fc1_input": 2 * sbh * copies,
        "activation_input": (4 if model.gated else 2) * sbf, "fc2_input": 2 * sbf,
        "mlp_dropout_mask": sbh * drop,
        # MLA: the q and kv latents before their norms and after (the up projections' inputs)
        # and the shared rope key; none without MLA
        "mla_latents": (2 * 2 * sb * ((model.q_lora_rank or 0) + model.kv_lora_rank)
                        + 2 * sb * model.qk_rope_head_dim) if model.is_mla else 0,
    }
    if cache is None:
        return out
    ratio = cache_ratios(model, cache)
    return {k: x * ratio.get(k, 1.0) for k, x in out.items()}


def named_remat_terms(model: ModelSpec, seq_len: int, micro_batch_size: int
                      ) -> dict[str, tuple[float, str]]:
    """Bytes (before any parallel split) and split kind of each tensor a MaxText decoder layer
    tags with ``checkpoint_name`` (``strategies.remat_policies.NAMES``) and of its input, for
    one micro-batch: the layer input ``decoder_layer_input`` (the scan carry, ``2sbh``),
    ``query_proj`` (Q, ``2sbh``), ``key_proj`` and ``value_proj`` (``2·s·b·g·d`` each),
    ``out_proj`` (the output projection's output, ``2sbh``), ``context`` (the fused attention's
    output, ``2·s·b·a·d_v``; its log-sum-exp neglected as above), ``mlpwi_0``/``mlpwi_1`` (the
    gate and up projections' outputs, ``2sbf`` each; ``mlpwi`` the one of a plain MLP) and
    ``mlpwo`` (the down projection's output, ``2sbh``). ``qkv_proj``, the fused form of Q, K and
    V, is counted by the three (0 here). Source: AI-Hypercomputer/maxtext ``layers/llama2.py``,
    ``layers/attentions.py``, ``layers/linears.py`` at 2024-12-08 (docs/memory.md)."""
    terms = layer_activation_terms(model, seq_len, micro_batch_size)
    sb = seq_len * micro_batch_size
    sbh = sb * model.hidden_size
    fc = terms["activation_input"]                    # gated: both halves
    return {
        "decoder_layer_input": (terms["ln1_input"], "seq"),
        "query_proj": (terms["q"], "tp"),
        "key_proj": (2 * sb * model.kv_heads * model.head_dim, "tp"),
        "value_proj": (2 * sb * model.kv_heads * model.v_dim, "tp"),
        "qkv_proj": (0.0, "tp"),
        "out_proj": (2 * sbh, "seq"),
        "context": (terms["proj_input"], "tp"),
        "mlpwi": (0.0 if model.gated else fc, "tp"),
        "mlpwi_0": (fc / 2 if model.gated else 0.0, "tp"),
        "mlpwi_1": (fc / 2 if model.gated else 0.0, "tp"),
        "mlpwo": (2 * sbh * model.mean_expert_copies(), "seq"),
    }


def named_remat_bytes(model: ModelSpec, seq_len: int, b, tp, sp, cp, mask):
    """Bytes one layer keeps per GPU and micro-batch under selective recomputation of the
    modules ``mask`` on a stack whose recomputation is a JAX remat policy
    (``FrameworkProfile.remat_named``; numbers or numpy arrays; ``mask`` 0: the default
    modules): its input and the named tensors the policy saves and the backward reads
    (``strategies.remat_policies.saved_names``: every name but ``context`` under ``core_attn``,
    the gate/up outputs under ``mlp`` and the never-read ``NEVER_READ``), split by ``tp`` as
    the stash is (``seq``: only with SP), ``/cp``. Nothing else: ``jax.checkpoint`` keeps no
    unnamed tensor (the norms' outputs, the activation's output, dropout masks, the scores)."""
    mask = np.where(np.asarray(mask) == 0, modules_mask(DEFAULT_MODULES), mask)
    seq_div = np.where(sp, tp, 1.0)
    total = 0.0
    for name, (nbytes, kind) in named_remat_terms(model, seq_len, 1).items():
        if name in NEVER_READ or not nbytes:
            continue
        x = nbytes / (seq_div if kind == "seq" else tp)
        if name in RECOMPUTED_WITH:
            x = np.where(has_module(mask, RECOMPUTED_WITH[name]), 0.0, x)
        total = total + x
    return b * total / cp


#: What a layer's pending weight gradient ``W`` keeps after its ``B`` has run (a schedule that
#: splits the backward): the inputs of its GEMMs and the gradients of their outputs, each
#: ``(bytes per token·micro-batch as a function of the model, split kind)``. For GPT the
#: inputs are ``2+2+2+8 = 14sbh`` and the output gradients ``6+2+8+2 = 18sbh``: ``32sbh``,
#: below the stash ``34sbh`` (without the score term), and none of it is the ``s²`` scores.
WGRAD_INPUTS = ("qkv_input", "proj_input", "fc1_input", "fc2_input", "mla_latents")


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


def routed_token_saved_bytes(model: ModelSpec, expert_input: float | None = None
                             ) -> tuple[float, float, float]:
    """``(fc1 input, activation-function input, fc2 input)``: bytes one routed token copy
    (one of its ``k`` experts) saves for the backward in the expert MLP, before any split.
    ``expert_input`` None: the module table's 16-bit ``2h``, ``4·F_e`` gated (``2·F_e``
    otherwise) and ``2·F_e``. Otherwise the GEMM inputs at ``expert_input`` bytes per
    element (``expert_input_bytes``: the one quantised copy Transformer Engine keeps)
    and the activation function's input in bf16 (Megatron-Core's ``WeightedSwiGLUFunction``
    input, the fused kernel's ``c_tensor``): ``q·h``, ``4·F_e``, ``q·F_e``. The routing
    probabilities both paths save (4 B per copy) and the unfused path's ``Fp8Padding`` rows
    (each local expert padded to a multiple of 32 rows) are neglected, as in the table."""
    h, f = model.hidden_size, model.expert_ffn
    act = (4 if model.gated else 2) * f
    if expert_input is None:
        return 2.0 * h, float(act), 2.0 * f
    return expert_input * h, float(act), expert_input * f


def routed_activation_bytes(model: ModelSpec, seq_len: int, micro_batch_size, tp=1, cp=1,
                            sp=False, etp=None, load=1.0, cache=None, expert_input=None,
                            parts=(1.0, 1.0, 1.0)) -> tuple:
    """``(as the table counts them, as they run)``: bytes per GPU and micro-batch of the mean
    layer's routed-expert tensors (numbers or numpy arrays). The table above counts the MoE
    layer's ``k`` token copies like a dense MLP's: the fc1 input ``2sbh·k`` split by ``t``
    only with SP, the activation-function and fc2 inputs ``(4 or 2 + 2)·sb·k·f_e`` split by
    ``t``. As Megatron-Core's token dispatcher runs them, the fc1 input is the permuted
    tokens the dispatch (and the expert tensor-parallel all-gather) delivered:
    ``2sbh·k·etp/t`` on every GPU, SP or not; and the hottest expert-parallel rank holds
    ``load`` (``token_counts.moe_load``) times the mean of all three. Only the MoE layers' share.
    The difference of the two is what ``memory.arrays`` adds to the table's stash. ``cache``:
    GEMM inputs cached in low precision (``cache_ratios``: the dispatched tokens, the MoE's
    SwiGLU input and fc2's input all at ``cache`` bytes per element). ``expert_input``: as
    they run, each routed copy saves ``routed_token_saved_bytes(model, expert_input)``
    (``expert_input_bytes``). ``parts``: a weight (1 or 0) for each of the three tensors
    (fc1 input, activation input, fc2 input): ``routed_stash_correction`` reads fc2's
    alone."""
    if not model.is_moe:
        return 0.0, 0.0
    etp = tp if etp is None else etp
    T = seq_len * micro_batch_size / cp
    k = model.moe_router_topk
    share = model.num_moe_layers / model.num_layers
    seq_div = np.where(sp, tp, 1.0) if np.ndim(sp) or np.ndim(tp) else (tp if sp else 1)
    r = 1.0 if cache is None else cache / 2.0

    def saved(x1, act, x2):          # the copies' bytes: fc1's input, then the MLP's inner
        return (T * k * x1 * parts[0],
                T * k * (act * parts[1] + x2 * parts[2]) / tp)

    fc1, inner = saved(*routed_token_saved_bytes(model))
    table = r * share * (fc1 / seq_div + inner)
    if expert_input is not None:
        fc1, inner = saved(*routed_token_saved_bytes(model, expert_input))
        r = 1.0
    real = r * share * load * (fc1 * etp / tp + inner)
    return table, real


def clamp_activation_bytes(model: ModelSpec, seq_len: int, micro_batch_size, tp=1, cp=1,
                           load=1.0):
    """Bytes per GPU and micro-batch that the eager activation clamp
    (``elementwise_bytes.clamp_bytes``: Megatron-Core's ``weighted_bias_quick_geglu_impl`` clamps
    the fc1 output's two halves before its fused quick-GEGLU) saves beyond the table:
    autograd's ``clamp_backward`` keeps each clamp's input, the fc1 output again, ``2·F_e``
    elements of 2 B per routed row: ``4·T·k·F_e/t`` (``T = s·b/cp``), on the MoE layers'
    share, at the hottest rank's ``load``; 0 without ``activation_clamp`` (numbers or numpy
    arrays)."""
    if model.activation_clamp is None or not model.is_moe:
        return 0.0 * np.asarray(load, dtype=float)
    T = seq_len * micro_batch_size / cp
    share = model.num_moe_layers / model.num_layers
    return share * load * 4 * T * model.moe_router_topk * model.expert_ffn / tp


def routed_stash_correction(model: ModelSpec, seq_len: int, micro_batch_size, tp, cp, sp,
                            etp, load, rc, modules, clamp=False, cache=None,
                            expert_input=None) -> tuple:
    """``(stashed, unrecomputed)``: what one layer's stash holds beyond the table for the
    routed experts (``routed_activation_bytes``: as they run minus as the table counts them),
    under recomputation ``rc`` (``RECOMPUTE_CODE``) with the selective ``modules`` mask, and
    with none. Nothing where the layer is recomputed whole (full, op) or the ``moe`` module
    redoes the routed MLP; ``moe_act`` leaves all but fc2's input (Megatron-Core's
    output-discarding checkpoint frees the activation's output, fc2's saved input, at every
    ``load``; under fp8 fc2 saves that original input, ``set_save_original_input``).
    ``clamp``: the stack runs gpt-oss's eager clamp (``framework.
    runs_eager_clamp``), whose saved inputs (``clamp_activation_bytes``) the stash also holds
    unless the layer is recomputed whole or ``moe_act``/``moe`` reruns the activation (its
    output-discarding checkpoint runs the clamp without saving). ``expert_input``: the
    routed GEMMs' saved inputs' bytes per element (``expert_input_bytes``). The memory
    arrays and ``job_layer_activation_bytes`` read this one rule."""
    args = (model, seq_len, micro_batch_size, tp, cp, sp, etp, load, cache, expert_input)
    table, real = routed_activation_bytes(*args)
    extra = real - table
    fc2_table, fc2_real = routed_activation_bytes(*args, parts=(0.0, 0.0, 1.0))
    rc = np.asarray(rc)
    whole = (rc == 2) | (rc == 3)
    dropped = whole | part_selected(rc, modules, "routed_mlp")
    act_dropped = part_selected(rc, modules, "routed_act")
    stashed = np.where(act_dropped, extra - (fc2_real - fc2_table), extra)
    cl = np.where(clamp, clamp_activation_bytes(model, seq_len, micro_batch_size, tp, cp,
                                                load), 0.0)
    cl_dropped = dropped | act_dropped
    return (np.where(dropped, 0.0, stashed) + np.where(cl_dropped, 0.0, cl))[()], extra + cl


def permutation_buffer_bytes(model: ModelSpec, seq_len: int, micro_batch_size, tp=1, cp=1,
                             load=1.0, dispatch_bytes=token_counts.ACT_BYTES):
    """Transient bytes per GPU of one MoE layer's token permutation (numbers or arrays): the
    dispatch's send buffer of the GPU's ``s·b/(t·c)`` tokens permuted into ``k`` copies at
    ``dispatch_bytes`` per element (``moe_bytes.dispatch_element_bytes``: 2, or a stack's FP8
    dispatch with its scales) and the combine's receive buffer of as many (the hottest
    rank's: ``load`` times) at ``2`` bytes, alive while the layer runs (not stashed):
    ``2·T·h·k·(dispatch_bytes/2 + load)``. 0 for a dense model."""
    if not model.is_moe:
        return 0.0
    T = seq_len * micro_batch_size / (tp * cp)
    return 2.0 * T * model.hidden_size * model.moe_router_topk \
        * (dispatch_bytes / token_counts.ACT_BYTES + load)


def layer_wgrad_terms(model: ModelSpec, seq_len: int, micro_batch_size: int,
                      cache: float | None = None) -> dict[str, tuple[float, str]]:
    """Bytes (before any parallel split) and split kind of each tensor a pending ``W`` of one
    layer keeps for one micro-batch: its GEMMs' inputs (the stash's own tensors,
    ``WGRAD_INPUTS``) and the gradients of their outputs (QKV: ``q`` and ``k_v``'s sizes,
    split by ``t``; the attention output projection and fc2: ``2sbh`` per expert copy, split
    by ``t`` only with SP; fc1: the activation function's input, split by ``t``). ``cache``:
    GEMM inputs cached in low precision (``cache_ratios``), and the output gradients kept at
    ``cache`` bytes per element too: the weight-gradient GEMM reads them quantised
    (DeepSeek-V3 §3.3, Figure 6: Wgrad takes FP8 inputs and FP8 output gradients).

    >>> from strategies.presets import model_preset
    >>> t = layer_wgrad_terms(model_preset("gpt3-175b"), 2048, 1)
    >>> sum(v for v, _ in t.values()) / (2048 * 12288)
    32.0
    """
    terms = layer_activation_terms(model, seq_len, micro_batch_size)
    cached = terms if cache is None else layer_activation_terms(model, seq_len,
                                                                micro_batch_size, cache)
    g = 1.0 if cache is None else cache / 2.0
    sbh = seq_len * micro_batch_size * model.hidden_size
    out = {name: (cached[name], TERM_KINDS[name]) for name in WGRAD_INPUTS}
    out.update({"d_qkv_output": (g * (terms["q"] + terms["k_v"]), "tp"),
                "d_proj_output": (g * 2 * sbh, "seq"),
                "d_fc1_output": (g * terms["activation_input"], "tp"),
                "d_fc2_output": (g * 2 * sbh * model.mean_expert_copies(), "seq")})
    return out


def part_activation_terms(model: ModelSpec, seq_len: int, micro_batch_size: int,
                          cache: float | None = None) -> dict[str, list[tuple[float, str]]]:
    """Bytes (before any parallel split) and split kind of what each part of a layer
    (``strategies.cost.recompute.PARTS``) keeps for backward and a selective recomputation
    of it drops, for one micro-batch: shares of the module table's tensors.

    ``scores`` the three score terms; ``norm_outputs`` the QKV input and one ``2sbh`` copy
    of the fc1 input (the norms' outputs); ``dense_mlp``, ``shared_mlp`` the activation-fn
    input (``4sb·w`` gated, else ``2sb·w``) and fc2 input (``2sb·w``) of their width ``w``
    (``gemm_shapes.mlp_part_widths``); ``routed_act`` the routed experts' fc2 input;
    ``routed_mlp`` their activation-fn input and the ``k - 1`` dispatched copies of the MoE
    input beyond the one kept; ``mla_up`` MLA's up-projected Q, K and V and the latents
    after their RMSNorms (the up projections' inputs, ``2sb·(r_q + r_kv)``), redone from the
    latents before them: Megatron-Core's MLA spec fuses those norms into the up projections
    (``linear_q_up_proj``/``linear_kv_up_proj`` are ``TELayerNormColumnParallelLinear`` with
    ``q_layernorm``/``kv_layernorm`` ``IdentityOp`` where ``qk_layernorm``,
    ``models/gpt/gpt_layer_specs.py``), so ``mla_up_proj``'s output-discarding checkpoint
    of ``qkv_up_proj_and_rope_apply`` (``multi_latent_attention.py``) keeps only its
    pre-norm inputs; DeepSeek-V3 recomputes "all RMSNorm operations and MLA
    up-projections" (arXiv 2412.19437 §3.2.3). Summed over the
    MLP parts, the widths give the table's ``activation_input`` and ``fc2_input``. ``cache``:
    each share at its term's cached bytes (``cache_ratios``: fc1 and fc2 inputs and the MoE
    parts' activation inputs in low precision, a dense MLP's activation input 16-bit).

    >>> from strategies.presets import model_preset
    >>> t = part_activation_terms(model_preset("gpt3-175b"), 2048, 1)
    >>> sum(n for n, _ in t["dense_mlp"]) / (2048 * 12288)   # 8 + 8 (f = 4h)
    16.0
    """
    terms = layer_activation_terms(model, seq_len, micro_batch_size, cache)
    sb = seq_len * micro_batch_size
    sbh = sb * model.hidden_size
    w = gemm_shapes.mlp_part_widths(model)
    g = 4 if model.gated else 2
    moe_share = model.layer_shares().get("moe", 0.0)
    k = model.moe_router_topk if model.is_moe else 1
    r = 1.0 if cache is None else cache / 2.0      # a GEMM input; an MoE's SwiGLU input

    def mlp(width, act=1.0):
        return [(act * g * sb * width, "tp"), (r * 2 * sb * width, "tp")]

    return {
        "scores": [(terms[n], "score") for n in ("softmax_output", "softmax_dropout_mask",
                                                 "attention_dropout_output")],
        "norm_outputs": [(terms["qkv_input"], "seq"), (r * 2 * sbh, "seq")],
        "dense_mlp": mlp(w["dense_mlp"]),
        "routed_act": [(r * 2 * sb * w["routed_mlp"], "tp")],
        "routed_mlp": [(r * g * sb * w["routed_mlp"], "tp"),
                       (r * 2 * sbh * moe_share * (k - 1), "seq")],
        "shared_mlp": mlp(w["shared_mlp"], r),
        "mla_up": ([(terms["q"], "tp"), (terms["k_v"], "tp"),
                    (r * 2 * sb * ((model.q_lora_rank or 0) + model.kv_lora_rank), "seq")]
                   if model.is_mla else []),
    }


def part_bytes(model: ModelSpec, seq_len: int, b, tp, sp, cp, cache=None) -> dict[str, object]:
    """Per GPU and micro-batch, the bytes of each part's ``part_activation_terms`` (split by
    ``tp`` as the stash is, ``/cp``; the score terms counted in full: callers drop them only
    where they are stored). Numbers or numpy arrays."""
    seq_div = np.where(sp, tp, 1.0)
    out = {}
    for part, terms in part_activation_terms(model, seq_len, 1, cache).items():
        out[part] = b * sum((n / (seq_div if kind == "seq" else tp) for n, kind in terms),
                            0.0) / cp
    return out


def selective_dropped_bytes(model: ModelSpec, seq_len: int, b, tp, sp, cp, rc, mask,
                            cache=None):
    """``(dropped, rebuilt)`` bytes per GPU and micro-batch of one layer under selective
    recomputation of the modules in ``mask`` (``rc`` 1; arrays): the selected parts other
    than the scores (which the stash drops by kind, ``layer_activation_bytes``), and the
    largest of them, rebuilt at once in the layer's backward (the parts are redone one
    after the other). ``cache``: as ``part_activation_terms``."""
    pb = part_bytes(model, seq_len, b, tp, sp, cp, cache)
    dropped, rebuilt = 0.0, 0.0
    for part in PARTS:
        if part == "scores":
            continue
        x = np.where(part_selected(rc, mask, part), pb[part], 0.0)
        dropped, rebuilt = dropped + x, np.maximum(rebuilt, x)
    return dropped, rebuilt


def layer_wgrad_bytes(model: ModelSpec, seq_len: int, micro_batch_size: int, tp: int = 1,
                      sp: bool = False, cp: int = 1, cache: float | None = None) -> float:
    """Bytes one layer's pending ``W`` keeps per GPU and micro-batch (``layer_wgrad_terms``
    split by ``tp`` as the stash is, ``/cp``); recomputation does not shrink it (the
    recomputed inputs stay until ``W``)."""
    seq_div = tp if sp else 1
    return sum(n / (seq_div if kind == "seq" else tp)
               for n, kind in layer_wgrad_terms(model, seq_len, micro_batch_size,
                                                cache).values()) / cp


def layer_activation_bytes(model: ModelSpec, seq_len: int, micro_batch_size: int, tp: int = 1,
                           sp: bool = False, cp: int = 1, recompute: str = "none",
                           flash_attn: bool = True,
                           modules: tuple[str, ...] | None = None,
                           remat_named: bool = False, cache: float | None = None) -> float:
    """Bytes one transformer layer keeps for backward, per GPU and micro-batch.

    ``recompute="full"`` gives the stored layer input only; the layer's working set during
    its recomputation is ``layer_activation_bytes(..., recompute="none")``. ``remat_named``
    (``FrameworkProfile.remat_named``): selective recomputation keeps what the JAX remat
    policy saves (``named_remat_bytes``) instead of the table less the selected parts.
    ``cache``: GEMM inputs cached in low precision (``cache_ratios``; full and op
    recomputation keep their 16-bit forms).

    >>> from strategies.presets import model_preset
    >>> m = model_preset("gpt3-175b")
    >>> layer_activation_bytes(m, 2048, 1, tp=8, flash_attn=False) / (2048 * 12288)  # 10+24/8+10
    23.0
    >>> layer_activation_bytes(m, 2048, 1, tp=8, sp=True, recompute="selective") * 8 / (2048 * 12288)
    34.0
    """
    s, b, h = seq_len, micro_batch_size, model.hidden_size
    seq_div = tp if sp else 1
    if recompute == "full":
        return 2 * s * b * h / seq_div / cp
    if recompute == "op":
        return float(op_saved_bytes(model, s, b, tp, sp, cp))
    terms = layer_activation_terms(model, s, b, cache)
    rc = 1 if recompute == "selective" else 0
    mask = modules_mask(modules) if modules is not None else 0
    if rc and remat_named:
        return float(named_remat_bytes(model, s, b, tp, sp, cp, mask))
    total = 0.0
    for name, nbytes in terms.items():
        kind = TERM_KINDS[name]
        if kind == "score":
            if bool(part_selected(rc, mask, "scores")) or flash_attn:
                continue
            total += nbytes / tp
        elif kind == "tp":
            total += nbytes / tp
        else:
            total += nbytes / seq_div
    return total / cp - float(selective_dropped_bytes(model, s, b, tp, sp, cp, rc, mask,
                                                      cache)[0])


def op_saved_bytes(model: ModelSpec, seq_len: int, micro_batch_size, tp=1, sp=False, cp=1):
    """Bytes one layer keeps for backward under ``recompute=op`` (torchtitan's op-level
    selective checkpointing), per GPU and micro-batch; numbers or numpy arrays.

    What the policy saves (``MUST_SAVE``) plus the checkpoint's input: the layer input
    ``2sbh`` (``/t`` with SP), the output of every saved GEMM of ``costs.op_sac_gemms``
    (``2·M·N`` as the GEMM writes it on this GPU: a row-parallel GEMM's partial sum is ``h``
    wide), the attention kernel's output ``2·s·b·a·d_v/t`` (its log-sum-exp neglected, as
    above) and, with SP, the two reduce-scatter outputs ``2sbh/t`` each. All ``/c``."""
    s, b, h = seq_len, micro_batch_size, model.hidden_size
    T = b * s / cp
    seq_div = np.where(sp, tp, 1)
    gemms = sum(2.0 * c * M * N for c, M, N, _, _, saved in
                op_sac_gemms(model, b, tp, cp, 1) if saved)
    attn_out = 2.0 * T * model.num_attention_heads * model.v_dim / tp
    rs = np.where(np.logical_and(sp, tp > 1), 2 * 2.0 * T * h / tp, 0.0)
    return 2.0 * T * h / seq_div + gemms + attn_out + rs


def stash_kinds(model: ModelSpec, content: Mapping[str, Any] | None, layers) -> list:
    """The layers a micro-batch stashes on a rank, by kind: ``[(view, count), …]``, ``view``
    the model's ``ModelSpec.of_kind`` of the kind (whose mean layer is one layer of it) and
    ``count`` its layers (numbers or arrays). ``content`` ``{"dense", "moe", "mtp": counts}``
    is what the rank holds (``layout.stage_content``; both copies where mirrored); a
    multi-token-prediction module stashes one layer of ``param_counts.mtp_layer_kind``; the counts
    are scaled to sum to ``layers`` (the layers a micro-batch stashes: the mean of a mirrored
    rank's two copies). A model of one kind without MTP modules, or no ``content``:
    ``[(model, layers)]``, its mean layer. The one rule by which the array model, the scalar
    model and the simulator's activation track price a mixed rank's stash."""
    if content is None or not mixed_layers(model):
        return [(model, layers)]
    n = {k: np.asarray(content.get(k, 0.0), dtype=float) for k in ("dense", "moe", "mtp")}
    total = n["dense"] + n["moe"] + n["mtp"]
    scale = np.divide(np.asarray(layers, dtype=float), total,
                      out=np.zeros(np.broadcast(total, np.asarray(layers)).shape),
                      where=total > 0)
    mtp_kind = param_counts.mtp_layer_kind(model)
    out = []
    for k in ("dense", "moe"):
        nk = n[k] + (n["mtp"] if k == mtp_kind else 0.0)
        if np.any(nk):
            out.append((model.of_kind(k), (nk * scale)[()]))
    return out or [(model, layers)]


def job_stash_kinds(job: Job, stage: int) -> list:
    """``stash_kinds`` of pipeline rank ``stage`` of the job's layout: what it holds
    (``layout.stage_content``, both copies where the schedule is mirrored) and the layers a
    micro-batch stashes there (``stashed_layers``)."""
    p, m = job.plan, job.model
    if not mixed_layers(m):
        return [(m, stashed_layers(job, stage))]
    mirrored = bool(get_schedule(p.schedule).mirrored) and p.pp > 1
    have: dict[str, float] = {}
    for r in ((stage, p.pp - 1 - stage) if mirrored else (stage,)):
        for k, n in stage_content(m, job.layout, r):
            have[k] = have.get(k, 0) + n
    return [(v, float(n)) for v, n in stash_kinds(m, have, stashed_layers(job, stage))]


def _kind_mean(job: Job, stage: int, per_layer) -> float:
    """The mean over the layers a micro-batch stashes on ``stage`` of ``per_layer(view)``
    (``job_stash_kinds``: each kind's layers at its view's bytes)."""
    kinds = job_stash_kinds(job, stage)
    total = sum(n for _, n in kinds)
    if len(kinds) == 1:
        return per_layer(kinds[0][0])
    return sum(n * per_layer(v) for v, n in kinds) / total if total else 0.0


def job_activation_cache(job: Job) -> float | None:
    """``activation_cache_bytes`` of the job's stack and precision."""
    return activation_cache_bytes(job.framework.fp8_activation_cache, job.dtype)


def job_expert_input_bytes(job: Job) -> float | None:
    """``expert_input_bytes`` of the job's stack (its experts, its Transformer Engine
    release) and precision, on the GPU type the memory model prices (``Cluster.gpu``)."""
    fw = job.framework
    return expert_input_bytes(runs_te_experts(fw), job.dtype, fw.te_version,
                              job.cluster.gpu.fp8_tn_only)


def job_dispatch_bytes(job: Job) -> float:
    """``moe_bytes.dispatch_element_bytes`` of the job's stack and precision."""
    return moe_bytes.dispatch_element_bytes(job.framework.fp8_dispatch, job.dtype)


def job_layer_activation_bytes(job: Job, recompute: str | None = None,
                               model: ModelSpec | None = None) -> float:
    """``layer_activation_bytes`` with the job's shapes and plan (``recompute`` overrides;
    ``model``: a layer-kind view of the job's model, ``stash_kinds``)."""
    p, fw = job.plan, job.framework
    return _layer_bytes(job.model if model is None else model, job.seq_len, p.mbs, p.tp, p.sp,
                        p.cp, recompute or p.recompute, p.flash_attn, p.recompute_modules,
                        fw.remat_named, job_activation_cache(job), p.ep, p.imbalance,
                        p.capacity_factor, p.expert_tp, runs_eager_clamp(fw),
                        job_expert_input_bytes(job))


@lru_cache(maxsize=4096, typed=True)
def _layer_bytes(mdl: ModelSpec, seq_len: int, mbs: int, tp: int, sp: bool, cp: int, rc: str,
                 flash_attn: bool, recompute_modules: tuple | None, remat_named: bool,
                 cache: float | None, ep: int, imbalance: float, capacity_factor: float,
                 expert_tp: int | None, clamp: bool, expert_input: float | None = None
                 ) -> float:
    """``job_layer_activation_bytes`` of the plan fields it reads (bytes; a pure function of
    frozen specs and numbers, memoised: a scalar estimate asks it for the same layer once
    per stage and chunk)."""
    base = layer_activation_bytes(mdl, seq_len, mbs, tp, sp, cp, rc, flash_attn,
                                  recompute_modules, remat_named, cache)
    code = {"none": 0, "selective": 1, "full": 2, "op": 3}[rc]
    mods = modules_mask(recompute_modules) if recompute_modules else 0
    load = token_counts.moe_load(ep, imbalance, capacity_factor, mdl, mbs, tp, cp, expert_tp)
    extra, _ = routed_stash_correction(mdl, seq_len, mbs, tp, cp, sp, expert_tp, load, code,
                                       mods, clamp=clamp, cache=cache,
                                       expert_input=expert_input)
    return float(base + extra)


def embedding_bytes(model: ModelSpec, seq_len: int, b, tp, sp, cp):
    """First stage, per micro-batch and GPU (numbers or numpy arrays): int64 token ids ``8sb``
    plus the embedding dropout mask ``sbh`` (``/t`` with SP; none without dropout), all
    ``/cp`` (Korthikanti Sec. 4.3; Megatron's estimator). The scalar and the array model
    read this."""
    s, h = seq_len, model.hidden_size
    seq_div = np.where(sp, tp, 1)
    mask = s * b * h / seq_div if model.dropout else 0.0
    return (8 * s * b + mask) / cp


def output_bytes(model: ModelSpec, seq_len: int, b, tp, sp, cp, logit_bytes=4.0):
    """Last stage, per micro-batch and GPU (numbers or arrays): final-norm input and
    output-projection input ``4sbh`` (``/t`` with SP) plus ``logit_bytes`` per logit element
    ``sbV/t``, all ``/cp``. With the default 4 (the fp32 logits a stashed micro-batch keeps
    for the cross-entropy's backward) this is Megatron's ``4sbh(1 + V/h)/t`` with SP
    (Korthikanti Sec. 4.3); the loss in progress holds the stack's
    ``FrameworkProfile.loss.peak_bytes`` (Megatron's 6: the 16-bit logits beside the fp32
    copy; torchtitan's eager ``F.cross_entropy(x.float())`` 12: docs/memory.md)."""
    s, h, v = seq_len, model.hidden_size, model.vocab_size
    return (4 * s * b * h / np.where(sp, tp, 1) + logit_bytes * s * b * v / tp) / cp


def embedding_activation_bytes(job: Job) -> float:
    """``embedding_bytes`` of the job's plan."""
    p = job.plan
    return float(embedding_bytes(job.model, job.seq_len, p.mbs, p.tp, p.sp, p.cp))


def output_activation_bytes(job: Job) -> float:
    """``output_bytes`` of the job's plan."""
    p = job.plan
    return float(output_bytes(job.model, job.seq_len, p.mbs, p.tp, p.sp, p.cp))


def stash_peak(job: Job, stage: int) -> tuple[int, int]:
    """``(stashed, pending)`` at pipeline rank ``stage``'s activation peak (``stash_at_peak``):
    of the pairs the order passes through (``Schedule.stash_frontier`` of the schedule as the
    job runs it: after each forward and after each backward's release), the one with the most
    bytes at ``activation_bytes_per_chunk`` per stashed ``(micro-batch, chunk)`` and
    ``wgrad_bytes_per_chunk`` per pending weight gradient (``schedules.base.peak_pair``), or,
    where the rank's chunks keep different bytes (``chunk_stash``), the counts of the order's
    moment with the most bytes, each entry at its own chunk's. The one rule the scalar and
    array memory models and the simulator's activation track share: where a pending ``W``
    keeps more than a stashed entry (full or op recomputation, MoE layers' output gradients)
    the peak is where more ``W`` wait, not where most forwards are stashed."""
    n, w, _ = stash_at_peak(job, stage)
    return n, w


def _chunk_layers(job: Job, stage: int, chunk: int) -> dict[str, int]:
    """``layout.order_chunk_kinds`` of the ``chunk`` (the order's ``Step.chunk``) of rank
    ``stage``: a mirrored schedule's chunk 1 is its copy of stage ``pp-1-stage`` (DualPipe)."""
    mirrored = bool(get_schedule(job.plan.schedule).mirrored)
    return order_chunk_kinds(job.model, job.layout, stage, chunk, mirrored)


def _layers_bytes(job: Job, content: Mapping[str, int]) -> tuple[float, float]:
    """``(stashed, pending W)`` bytes of one ``(micro-batch, chunk)`` holding ``content``
    (``{"dense", "moe", "mtp": counts}``): each kind's layers at its bytes (``stash_kinds``),
    under full recomputation the chunk's checkpointed inputs and kept layers
    (``strategies.cost.recompute``, with this chunk's layer count), as
    ``chunk_layer_activation_bytes`` and ``wgrad_bytes_per_chunk`` price the mean chunk."""
    p = job.plan
    lpc = sum(content.values())
    views = stash_kinds(job.model, content, lpc)
    act = sum(n * job_layer_activation_bytes(job, model=v) for v, n in views)
    if p.recompute == "full" and lpc:
        n_rc, uni = p.recompute_layers or 0, p.recompute_method == "uniform"
        none = sum(n * job_layer_activation_bytes(job, "none", v) for v, n in views)
        act = float(checkpoint_inputs(lpc, n_rc, uni) * act / lpc
                    + kept_layers(lpc, n_rc, uni) * none / lpc)
    wgrad = 0.0
    if get_schedule(p.schedule).splits_backward:
        wgrad = sum(n * layer_wgrad_bytes(v, job.seq_len, p.mbs, p.tp, p.sp, p.cp,
                                          job_activation_cache(job)) for v, n in views)
    return float(act), float(wgrad)


def chunk_stash(job: Job, stage: int) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """Per chunk id of rank ``stage``'s order (``Step.chunk``; DualPipe's two copies), the
    bytes its transformer layers keep per stashed entry and per pending weight gradient
    (``_layers_bytes`` of the chunk's own layers by kind, ``layout.chunk_kinds``); ``None``
    where every chunk keeps the same (one chunk, or chunks of equal content: the mean chunk
    of ``chunk_layer_activation_bytes`` is then exact and is what the model reads)."""
    p = job.plan
    _check_stage(job, stage)
    chunks = get_schedule(p.schedule).order_chunks(p.pp, p.vpp)
    if chunks == 1:
        return None
    per = [_layers_bytes(job, _chunk_layers(job, stage, c)) for c in range(chunks)]
    if all(x == per[0] for x in per):
        return None
    return tuple(a for a, _ in per), tuple(w for _, w in per)


def stash_entry_bytes(job: Job, stage: int) -> tuple[Any, Any]:
    """``(per stashed entry, per pending W)`` bytes of rank ``stage``, what the simulator's
    activation track adds and frees: ``activation_bytes_per_chunk`` and
    ``wgrad_bytes_per_chunk`` (floats), or where the chunks keep different bytes
    (``chunk_stash``) a tuple per chunk id, each entry's layers plus the embedding's and
    stashed logits' share (``stash_at_peak``'s rule)."""
    per = chunk_stash(job, stage)
    if per is None:
        return activation_bytes_per_chunk(job, stage), wgrad_bytes_per_chunk(job, stage)
    extra = _entry_extra_bytes(job, stage)
    return tuple(a + extra for a in per[0]), per[1]


def stash_at_peak(job: Job, stage: int) -> tuple[int, int, float]:
    """``(stashed, pending, layers' bytes)`` at rank ``stage``'s activation peak: the order's
    pair with the most bytes (``schedules.base.peak_pair`` of ``Schedule.stash_frontier`` at
    the mean chunk's ``activation_bytes_per_chunk`` and ``wgrad_bytes_per_chunk``), or where
    the chunks keep different bytes (``chunk_stash``: a rank of a V or an interleaved rank
    whose chunks hold dense and MoE layers or an MTP module, an uneven layout, DualPipe's two
    copies) the order's per-chunk moment with the most bytes
    (``schedules.base.peak_chunk_moment``, each stashed entry and pending ``W`` at its own
    chunk's bytes plus, per entry, the embedding's and stashed logits' share). The layers'
    bytes are the transformer layers' stash and pending ``W`` there (without the embedding,
    logits and transient)."""
    return _stash_at_peak(job, stage, chunk_stash(job, stage))


def _stash_at_peak(job: Job, stage: int, per) -> tuple[int, int, float]:
    """``stash_at_peak`` given the rank's ``chunk_stash`` ``per`` (computed once by the
    callers that also branch on it)."""
    # (one pipeline flush's micro-batches: a step of ``flushes`` runs the order once per
    # flush, ``strategies.flushes``)
    p, m = job.plan, job.num_microbatches // job.plan.flushes
    sched = get_schedule(p.schedule).for_job(job)
    # an order that depends on the job's times only (``for_job`` binds them) or a micro-batch
    # group is derived afresh; any other is read from the orders' memo (``order_figure``)
    memo = sched is get_schedule(p.schedule) and p.microbatch_group_size is None
    if per is None:
        front = (order_figure(sched, "stash_frontier")(stage, p.pp, m, p.vpp) if memo else
                 sched.stash_frontier(stage, p.pp, m, p.vpp, p.microbatch_group_size))
        a, wb = chunk_layer_activation_bytes(job, stage), wgrad_bytes_per_chunk(job, stage)
        n, w = front[0] if len(front) == 1 else peak_pair(
            front, activation_bytes_per_chunk(job, stage), wb)
        return n, w, n * a + w * wb
    acts, wgrads = per
    extra = _entry_extra_bytes(job, stage)
    moments = (order_figure(sched, "chunk_stash_moments")(stage, p.pp, m, p.vpp) if memo else
               sched.chunk_stash_moments(stage, p.pp, m, p.vpp, p.microbatch_group_size))
    ns, ws = peak_chunk_moment(moments, [a + extra for a in acts], wgrads)
    layers = sum(k * a for k, a in zip(ns, acts)) + sum(k * x for k, x in zip(ws, wgrads))
    return sum(ns), sum(ws), float(layers)


def in_flight_microbatches(job: Job, stage: int) -> int:
    """Stashed ``(microbatch, chunk)`` entries on pipeline rank ``stage`` at its activation
    peak (``stash_peak``): the schedule's ``Schedule.in_flight`` unless a split backward's
    pending weight gradients outweigh a stashed entry.

    GPipe ``m``; 1F1B ``min(p - stage, m)``; interleaved ``min(w(stage) + 1, m·v)`` with
    ``w`` Megatron's ``num_warmup_microbatches`` (each entry holds ``l/(p·v)`` layers). For
    stage 0 and ``g = p`` that is ``l·(1 + (p-1)/(p·v))`` layers: Megatron's factor.
    """
    return stash_peak(job, stage)[0]


def pending_weight_grads(job: Job, stage: int) -> int:
    """Weight gradients still to run on ``stage`` at its activation peak (``stash_peak``;
    0 unless the schedule splits the backward)."""
    return stash_peak(job, stage)[1]


def stashed_layers(job: Job, stage: int = 0) -> float:
    """Layers whose activations a micro-batch stashes on ``stage``, all its chunks: its
    transformer layers and multi-token-prediction modules (about one layer's activations
    each; ``Job.layout``); DualPipe (``Schedule.mirrored``): the mean of its two copies'
    (stages ``stage`` and ``pp-1-stage``), whose micro-batches it stashes alike."""
    p, lay = job.plan, job.layout
    if get_schedule(p.schedule).mirrored and p.pp > 1:
        copies = (stage, p.pp - 1 - stage)
        return sum(lay.layers_of_stage(s) + lay.mtp_of_stage(s) for s in copies) / 2
    return lay.layers_of_stage(stage) + lay.mtp_of_stage(stage)


def layers_per_chunk(job: Job, stage: int = 0) -> float:
    """Layers in the mean model chunk of ``stage`` (``stashed_layers`` over ``vpp``; a
    layout's chunks may differ by a layer)."""
    n, v = stashed_layers(job, stage), job.plan.vpp
    return n // v if n % v == 0 else n / v


def activation_bytes_per_chunk(job: Job, stage: int) -> float:
    """Bytes one stashed ``(microbatch, chunk)`` holds on ``stage`` from its forward until its
    backward: ``l/(p·v)`` layers, plus on the first stage the embedding activations spread
    over its ``v`` chunks (Megatron's accounting), plus on the last stage the output-layer
    activations when the schedule stashes them (``Schedule.logits_stashed``, GPipe: every
    micro-batch's logits wait for the backwards).

    The stage's activation peak is ``in_flight_microbatches × this + transient``.
    """
    _check_stage(job, stage)
    return chunk_layer_activation_bytes(job, stage) + _entry_extra_bytes(job, stage)


def _entry_extra_bytes(job: Job, stage: int) -> float:
    """What every stashed entry of ``stage`` keeps beside its chunk's layers: the
    embedding's share and the stashed logits (``activation_bytes_per_chunk`` less the
    layers)."""
    nbytes = 0.0
    if _holds_embedding(job, stage):
        # DualPipe (``Schedule.mirrored``): both end ranks embed, each half the micro-batches
        mirrored = get_schedule(job.plan.schedule).mirrored
        nbytes += embedding_activation_bytes(job) / job.plan.vpp / (2 if mirrored else 1)
    if _holds_head(job, stage) and get_schedule(job.plan.schedule).logits_stashed:
        nbytes += output_activation_bytes(job)
    return nbytes


def _partial(job: Job, stage: int) -> tuple[int, int, bool]:
    """``(layers per chunk, recompute_layers or 0, uniform)`` of ``stage``."""
    p = job.plan
    return (layers_per_chunk(job, stage), p.recompute_layers or 0,
            p.recompute_method == "uniform")


def chunk_layer_activation_bytes(job: Job, stage: int) -> float:
    """Bytes the transformer layers of one ``(microbatch, chunk)`` keep on ``stage``: every
    layer's ``job_layer_activation_bytes`` (by kind on a rank of a mixed model:
    ``job_stash_kinds``), or under full recomputation the checkpointed inputs plus, with
    ``recompute_layers`` (block), all the activations of the layers not recomputed
    (``strategies.cost.recompute``; the chunk's mean layer of each kind held)."""
    lpc = layers_per_chunk(job, stage)
    if job.plan.recompute != "full":
        return lpc * _kind_mean(job, stage, lambda v: job_layer_activation_bytes(job, model=v))
    lpc, n, uni = _partial(job, stage)
    return float(checkpoint_inputs(lpc, n, uni)
                 * _kind_mean(job, stage, lambda v: job_layer_activation_bytes(job, model=v))
                 + kept_layers(lpc, n, uni) * _kind_mean(
                     job, stage, lambda v: job_layer_activation_bytes(job, "none", v)))


def _holds_head(job: Job, stage: int) -> bool:
    """Whether pipeline rank ``stage`` holds the LM head (``Schedule.ends``: rank 0 on a V;
    both end ranks where ``Schedule.mirrored``)."""
    p = job.plan
    if get_schedule(p.schedule).mirrored and stage in (0, p.pp - 1):
        return True
    return stage == head_rank(p.schedule, p.pp, p.vpp)


def _holds_embedding(job: Job, stage: int) -> bool:
    """Whether pipeline rank ``stage`` holds the embedding (rank 0; both end ranks where
    ``Schedule.mirrored``)."""
    p = job.plan
    return stage == 0 or (get_schedule(p.schedule).mirrored and stage == p.pp - 1)


def transient_activation_bytes(job: Job, stage: int) -> float:
    """Bytes held for one micro-batch at a time, on top of the stash: the last stage's loss
    in progress (``output_bytes`` at the stack's ``loss.peak_bytes``; 1F1B/interleaved: its
    last forward is followed at once by that micro-batch's backward; less the fp32 logits
    the entries of a schedule that stashes them count), and with full recompute one layer's
    full working set (the layer being recomputed during its backward), with op recompute
    what that layer did not save."""
    _check_stage(job, stage)
    nbytes = 0.0
    if _holds_head(job, stage):
        # the loss in progress (the stack's cross-entropy, FrameworkProfile.loss.peak_bytes),
        # less the fp32 logits a schedule that stashes them counts in its entries
        p = job.plan
        nbytes += float(output_bytes(job.model, job.seq_len, p.mbs, p.tp, p.sp, p.cp,
                                     job.framework.loss.peak_bytes_at(p.tp)))
        if get_schedule(p.schedule).logits_stashed:
            nbytes -= output_activation_bytes(job)
    views = [v for v, _ in job_stash_kinds(job, stage)]   # the largest kind held rebuilds
    if job.plan.recompute == "full":     # the layers being rebuilt (one, or a uniform group)
        lpc, n, uni = _partial(job, stage)
        nbytes += float(rebuilt_layers(lpc, n, uni)) * _kind_mean(
            job, stage, lambda v: job_layer_activation_bytes(job, "none", v))
    elif job.plan.recompute == "selective":   # the largest selected part, rebuilt at once
        p = job.plan
        mask = modules_mask(p.recompute_modules) if p.recompute_modules is not None else 0
        nbytes += max(float(selective_dropped_bytes(v, job.seq_len, p.mbs, p.tp, p.sp,
                                                    p.cp, 1, mask, job_activation_cache(job))[1])
                      for v in views)
    elif job.plan.recompute == "op":          # what op did not save, rebuilt for one layer
        nbytes += max(max(job_layer_activation_bytes(job, "none", v)
                          - job_layer_activation_bytes(job, model=v), 0.0) for v in views)
    return nbytes


def wgrad_bytes_per_chunk(job: Job, stage: int) -> float:
    """Bytes one pending weight gradient ``W`` of a ``(microbatch, chunk)`` keeps on
    ``stage`` (``layer_wgrad_bytes`` of the chunk's layers); 0 unless the schedule splits the
    backward."""
    p = job.plan
    _check_stage(job, stage)
    if not get_schedule(p.schedule).splits_backward:
        return 0.0
    return layers_per_chunk(job, stage) * _kind_mean(
        job, stage, lambda v: layer_wgrad_bytes(v, job.seq_len, p.mbs, p.tp, p.sp, p.cp,
                                                job_activation_cache(job)))


def stage_activation_bytes(job: Job, stage: int) -> float:
    """Peak activation bytes on ``stage``: stash, pending weight gradients (a split
    backward, ``wgrad_bytes_per_chunk`` each; ``stash_peak``) and transient."""
    per = chunk_stash(job, stage)
    n, w, layers = _stash_at_peak(job, stage, per)
    if per is not None:                          # each entry at its own chunk's bytes
        return (layers + n * _entry_extra_bytes(job, stage)
                + transient_activation_bytes(job, stage))
    return (n * activation_bytes_per_chunk(job, stage) + w * wgrad_bytes_per_chunk(job, stage)
            + transient_activation_bytes(job, stage))


def _check_stage(job: Job, stage: int) -> None:
    if not 0 <= stage < job.plan.pp:
        raise SpecError("stage", stage, f"must be in 0..{job.plan.pp - 1} (pp={job.plan.pp})")
