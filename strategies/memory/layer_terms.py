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

import numpy as np

from strategies.cost import gemm_shapes
from strategies.memory.saved_precision import cache_ratios
from strategies.model import ModelSpec


# tensor name -> how it is split: "seq" (by t only with SP), "tp" (by t), "score" (by t;
# dropped by selective recompute and FlashAttention).
TERM_KINDS = {
    "ln1_input": "seq", "qkv_input": "seq", "q": "tp", "k_v": "tp", "softmax_output": "score",
    "softmax_dropout_mask": "score", "attention_dropout_output": "score", "proj_input": "tp",
    "attention_dropout_mask": "seq", "ln2_input": "seq", "fc1_input": "seq",
    "activation_input": "tp", "fc2_input": "tp", "mlp_dropout_mask": "seq", "mla_latents": "seq",
    "mamba_seq": "seq", "mamba_tp": "tp",     # a hybrid model's Mamba-2 layers (mamba_mixer)
}
#: the attention block's tensors (a hybrid model keeps them in its ``*`` layers only) and the
#: MLP block's pre-norm input and mask (in its ``-`` and ``E`` layers)
_ATTENTION_TERMS = ("ln1_input", "qkv_input", "q", "k_v", "softmax_output",
                    "softmax_dropout_mask", "attention_dropout_output", "proj_input",
                    "attention_dropout_mask")


#: The table's tensors each attention-side offload group of Megatron-Core's fine-grained
#: activation offloading (``--offload-modules``, ``strategies.cost.offload``) catches: the
#: tensors autograd saves inside the module's forward (NVIDIA/Megatron-LM@d98e8a64dd
#: ``transformer/transformer_layer.py`` L709-722, L818-830; ``transformer/attention.py``
#: L1386-1395, L1552-1616, L1626-1629). ``attn_norm``: a separate input norm's input (the
#: TE spec fuses the norm into the QKV ``LayerNormLinear`` and Megatron-Core turns the group
#: off, L1547-1549, except MLA's); ``qkv_linear``: the fused ``LayerNormLinear``'s norm input
#: and its output (``inputmat``, ``ln_out``); ``core_attn``: the kernel's q, k, v, output
#: (``proj_input``) and, unfused, its scores; ``attn_proj``: the projection's input (the
#: attention's output); ``mlp_norm``: an MoE layer's pre-MLP norm input (a dense layer's norm
#: is fused into fc1, L1553-1555). ``memory.offload_saved.attention_offload_bytes`` splits
#: them by precision, parallel split and recomputation.
OFFLOAD_MODULE_TERMS = {
    "attn_norm": ("ln1_input",), "qkv_linear": ("ln1_input", "qkv_input"),
    "core_attn": ("q", "k_v", "softmax_output", "softmax_dropout_mask",
                  "attention_dropout_output", "proj_input"),
    "attn_proj": ("proj_input",), "mlp_norm": ("ln2_input",)}


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
        # a hybrid model's Mamba-2 layers (below); none in a transformer
        "mamba_seq": 0, "mamba_tp": 0,
    }
    if model.is_dsv4:       # DeepSeek-V4: n residual streams at each block's input (each
        # hyper-connection saves the n·h streams its mapping and aggregation read); one
        # key/value head (keys are values); wo_b's input; the latents, compressors' and
        # indexer's tensors (dsv4_cost.saved_elements_per_token)
        from strategies.cost.dsv4_cost import saved_elements_per_token
        for k in ("ln1_input", "ln2_input"):
            out[k] *= model.hc_streams
        out["k_v"] = 2 * sb * model.head_dim
        out["proj_input"] += 2 * sb * model.o_groups * model.o_lora_rank
        out["mla_latents"] = 2 * sb * saved_elements_per_token(model)
    if model.is_hybrid:     # the mean layer's blocks: attention, MLP, Mamba-2 (their shares)
        from strategies.cost.mamba_mixer import saved_terms
        for k in _ATTENTION_TERMS:
            out[k] *= model.attention_share
        for k in ("ln2_input", "mlp_dropout_mask"):
            out[k] *= model.mlp_share
        out.update({k: model.mamba_share * v for k, v in saved_terms(model, s, b).items()})
    if cache is None:
        return out
    ratio = cache_ratios(model, cache)
    return {k: x * ratio.get(k, 1.0) for k, x in out.items()}


#: What a layer's pending weight gradient ``W`` keeps after its ``B`` has run (a schedule that
#: splits the backward): the inputs of its GEMMs and the gradients of their outputs, each
#: ``(bytes per token·micro-batch as a function of the model, split kind)``. For GPT the
#: inputs are ``2+2+2+8 = 14sbh`` and the output gradients ``6+2+8+2 = 18sbh``: ``32sbh``,
#: below the stash ``34sbh`` (without the score term), and none of it is the ``s²`` scores.
WGRAD_INPUTS = ("qkv_input", "proj_input", "fc1_input", "fc2_input", "mla_latents")


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
        "norm_outputs": [(terms["qkv_input"], "seq"), (r * 2 * sbh * model.mlp_share, "seq")],
        "dense_mlp": mlp(w["dense_mlp"]),
        "routed_act": [(r * 2 * sb * w["routed_mlp"], "tp")],
        "routed_mlp": [(r * g * sb * w["routed_mlp"], "tp"),
                       (r * 2 * sbh * moe_share * (k - 1), "seq")],
        "shared_mlp": mlp(w["shared_mlp"], r),
        "mla_up": ([(terms["q"], "tp"), (terms["k_v"], "tp"),
                    (r * 2 * sb * ((model.q_lora_rank or 0) + model.kv_lora_rank), "seq")]
                   if model.is_mla else [(terms["q"], "tp"), (terms["k_v"], "tp")]
                   if model.is_dsv4 else []),
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


def layer_wgrad_bytes(model: ModelSpec, seq_len: int, micro_batch_size: int, tp: int = 1,
                      sp: bool = False, cp: int = 1, cache: float | None = None) -> float:
    """Bytes one layer's pending ``W`` keeps per GPU and micro-batch (``layer_wgrad_terms``
    split by ``tp`` as the stash is, ``/cp``); recomputation does not shrink it (the
    recomputed inputs stay until ``W``)."""
    seq_div = tp if sp else 1
    return sum(n / (seq_div if kind == "seq" else tp)
               for n, kind in layer_wgrad_terms(model, seq_len, micro_batch_size,
                                                cache).values()) / cp
