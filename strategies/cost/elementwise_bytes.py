"""HBM bytes of one layer's memory-bound kernels per GPU: norms, bias-dropout-add, the MLP
activation and rotary embedding as Megatron fuses them, torchtitan's eager and torch.compile'd
blocks, and gpt-oss's eager variants in Megatron-Core (the activation clamp, the unfused YaRN
RoPE) with their kernel counts. Units: bytes, kernels; vectorised over the plan fields."""
from __future__ import annotations

import numpy as np

from strategies.cost import dsv4_cost
from strategies.cost.gemm_shapes import mlp_part_widths
from strategies.cost.token_counts import Num, tokens_per_gpu
from strategies.model import ModelSpec


#: ``FrameworkProfile.elementwise_kernels`` values of NeMo AutoModel's blocks (TE's attention,
#: FlexAttention): ``eager_te_bytes_fwd``, ``expert_bias_bytes``
AUTOMODEL_KERNELS = ("eager_te", "eager_flex")


def elementwise_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num,
                          kernels: str = "fused") -> Num:
    """HBM bytes of the memory-bound kernels of one layer's forward, per GPU.

    Counted per token (bf16, 1-byte dropout masks), with Megatron's fusions: two LayerNorms
    (read + write h each: 4h·2 B), two bias-dropout-add (read x and residual, write out, write
    mask: 3h·2 B + h; no mask for a model trained without dropout, ``ModelSpec.dropout``),
    the MLP activation (read F or 2F if gated, write F: 2F·2 B or 3F·2 B), and rotary
    embedding on Q and K when used. Without sequence parallelism the LayerNorm and dropout
    work is replicated on every tensor-parallel rank; with it, divided by t.
    ``kernels="eager"`` (``FrameworkProfile.elementwise_kernels``): the model's own eager
    PyTorch ops instead, ``eager_elementwise_bytes_fwd``; ``kernels="compiled"``: the same
    model under torch.compile, ``compiled_elementwise_bytes_fwd``; ``kernels="eager_te"``: NeMo
    AutoModel's eager blocks with Transformer Engine's RMSNorm and attention,
    ``eager_te_bytes_fwd``, with FlexAttention ``"eager_flex"`` (a hybrid model's,
    ``eager_hybrid_bytes_fwd``, under any of the eager three).
    """
    if (kernels == "eager" or kernels in AUTOMODEL_KERNELS) and m.is_hybrid:
        return eager_hybrid_bytes_fwd(m, b, tp, cp, sp)
    if kernels in AUTOMODEL_KERNELS:
        return eager_te_bytes_fwd(m, b, tp, cp, sp, attn_copies=kernels == "eager_flex")
    if kernels == "eager":
        return eager_elementwise_bytes_fwd(m, b, tp, cp, sp)
    if kernels == "compiled":
        return compiled_elementwise_bytes_fwd(m, b, tp, cp, sp)
    T = tokens_per_gpu(b, m.seq_length, cp)
    h = m.hidden_size
    # the 1-byte mask only where the model trains with dropout (ModelSpec.dropout: with
    # p = 0 the fused bias-dropout-add reads x and the residual and writes the sum, no mask)
    # (``blocks_per_layer``: a hybrid model's layer has one norm and one residual add)
    norm_drop = (norm_bytes_per_token(m)
                 + m.blocks_per_layer * (6 * h + (h if m.dropout else 0))) * T
    act = activation_fn_bytes_fwd(m, b, tp, cp, m.mean_mlp_width())
    rope = 2 * 2 * rope_width(m) * T / tp if m.position_embedding == "rope" else 0
    if m.is_hybrid:     # and its Mamba-2 mixers' own kernels around the scan
        from strategies.cost.mamba_mixer import mixer_elementwise_bytes_fwd
        return norm_drop / seq_shard(tp, sp) + act + \
            m.mamba_share * mixer_elementwise_bytes_fwd(m, b, tp, cp)
    return norm_drop / seq_shard(tp, sp) + act + rope \
        + dsv4_cost.elementwise_bytes_fwd(m, b, tp, cp, seq_shard(tp, sp))


#: HBM bytes per hidden element of torchtitan's eager ``RMSNorm`` (2024, models/norms.py:
#: ``self._norm(x.float()).type_as(x) * self.weight``; ``torch.nn.RMSNorm``'s composite is the
#: same ops): ``x.float()`` 2 + 4, ``pow(2)`` 4 + 4, ``mean`` 4, ``x * rsqrt(...)`` 4 + 4,
#: ``type_as`` 4 + 2, ``* weight`` 2 + 2; an eager ``nn.LayerNorm`` is one kernel, 2 + 2.
EAGER_RMSNORM_BYTES = 36.0
EAGER_LAYERNORM_BYTES = 4.0
#: per element of q and k, torchtitan's ``apply_rotary_emb`` (complex multiply in fp32):
#: ``x.float()`` 2 + 4, ``x_ * freqs_cis`` 4 + 4, ``type_as`` 4 + 2.
EAGER_ROPE_BYTES = 20.0
#: per element of the MLP intermediate: ``F.silu(w1(x))`` 2 + 2, ``* w3(x)`` 2 + 2 + 2 (an
#: ungated activation is the first kernel alone).
EAGER_SWIGLU_BYTES = 10.0
EAGER_ACT_BYTES = 4.0
#: per element, a residual add ``x + f(x)``: 2 + 2 + 2.
EAGER_ADD_BYTES = 6.0


def eager_elementwise_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """HBM bytes of one layer's memory-bound forward kernels, per GPU, as torchtitan's eager
    Llama block runs them (models/llama/model.py ``TransformerBlock.forward``, no
    torch.compile): two norms (``EAGER_RMSNORM_BYTES`` per element) and two residual adds
    over ``h`` (divided by ``t`` with sequence parallelism, as ``elementwise_bytes_fwd``),
    rotary embedding on q and k (``EAGER_ROPE_BYTES``), ``repeat_kv``'s copy of K and V to
    every query head where ``g < a`` (read ``g·d``, write ``a·d``, 2 B each, twice), and the
    MLP activation (``EAGER_SWIGLU_BYTES`` over ``F``); per token, times the GPU's tokens."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    h = m.hidden_size
    norm = EAGER_RMSNORM_BYTES if m.norm == "rmsnorm" else EAGER_LAYERNORM_BYTES
    per_h = (2 * norm + 2 * EAGER_ADD_BYTES) * h * T
    rope = EAGER_ROPE_BYTES * rope_width(m) * T / tp if m.position_embedding == "rope" else 0.0
    a, g = m.num_attention_heads, m.kv_heads
    repeat = 2 * 2 * (g + a) * m.head_dim * T / tp if (g < a and not m.is_mla) else 0.0
    act = (EAGER_SWIGLU_BYTES if m.gated else EAGER_ACT_BYTES) * m.mean_mlp_width() * T / tp
    return per_h / seq_shard(tp, sp) + rope + repeat + act


def te_norm_add_bytes(m: ModelSpec) -> float:
    """HBM bytes per token of a layer's norms as Transformer Engine's fused RMSNorm and its
    eager residual adds (``EAGER_ADD_BYTES`` each over ``h``), one of each per block
    (``ModelSpec.blocks_per_layer``: one in a hybrid layer, two in a transformer's): NeMo
    AutoModel's blocks, ``eager_hybrid_bytes_fwd`` and ``eager_te_bytes_fwd``."""
    return norm_bytes_per_token(m) + m.blocks_per_layer * EAGER_ADD_BYTES * m.hidden_size


def eager_hybrid_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """HBM bytes of one hybrid layer's memory-bound forward kernels, per GPU, as NeMo
    AutoModel's eager ``NemotronV3Block`` runs them (NVIDIA-NeMo/Automodel cb9765441,
    ``components/models/nemotron_v3/layers.py`` l.586-733; the eager stack's only hybrid
    model, docs/calibration.md §5.155): one pre-norm per layer, Transformer Engine's fused
    RMSNorm (``backend.rms_norm: te`` in the three benchmark configs; read and write ``h``,
    ``norm_bytes_per_token``), not torchtitan's eager one; one eager residual add
    (``EAGER_ADD_BYTES``); the MLP and expert activation as ``eager_elementwise_bytes_fwd``'s
    (``relu2_deepep``, one compiled kernel: read and write, ``EAGER_ACT_BYTES``); the Mamba-2
    mixers' conv and gated norm inside ``mamba_split_conv1d_scan_combined``, batch-first, so
    without Megatron's layout copies (``mixer_elementwise_bytes_fwd(layout_copies=False)``);
    no rotary embedding (Nemotron-H has none) and no ``repeat_kv`` (the attention passes its
    ``g`` key-value heads to the kernel)."""
    from strategies.cost.mamba_mixer import mixer_elementwise_bytes_fwd
    T = tokens_per_gpu(b, m.seq_length, cp)
    per_h = te_norm_add_bytes(m) * T
    act = (EAGER_SWIGLU_BYTES if m.gated else EAGER_ACT_BYTES) * m.mean_mlp_width() * T / tp
    return per_h / seq_shard(tp, sp) + act + \
        m.mamba_share * mixer_elementwise_bytes_fwd(m, b, tp, cp, layout_copies=False)


#: per element of q and k, NeMo AutoModel's bf16 half-split rotary (``gpt_oss/layers.py``
#: ``_apply_rotary_emb``, which ``qwen3_moe`` imports; 89e3a9fdd): four products of a half by
#: cos or sin (each reads and writes half the elements: 2 per element), the difference and the
#: sum (each reads two halves and writes one: 3), ``torch.cat`` of the two (2 + 2): 18.
HALF_ROPE_BYTES = 18.0


def eager_te_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num,
                       attn_copies: bool = False) -> Num:
    """HBM bytes of one dense or MoE layer's memory-bound forward kernels, per GPU, as NeMo
    AutoModel's eager blocks run them with its benchmark configs' ``backend: {attn: te,
    rms_norm: te}`` (NVIDIA-NeMo/Automodel 89e3a9fdd: ``components/models/{deepseek_v3,
    qwen3_moe,gpt_oss}/model.py`` ``Block.forward``, ``components/moe/utils.py``
    ``initialize_rms_norm_module``; docs/calibration.md §5.157). The block's two RMSNorms are
    Transformer Engine's fused kernel and its two residual adds eager, as the hybrid block's
    one of each (``eager_hybrid_bytes_fwd``: ``norm_bytes_per_token`` and ``EAGER_ADD_BYTES``
    per block, over ``h``, divided by ``t`` with SP); a MoE layer with shared experts adds their
    output to the routed one (``MoE.forward``'s ``y + z``, ``EAGER_ADD_BYTES`` over ``h`` on the
    MoE layers' share); Qwen3's per-head q and k norms are TE's too (read and write ``(a+g)·d``);
    rotary embedding on q and k: MLA's ``rope_utils.apply_rotary_emb`` is torchtitan's fp32
    complex product (``EAGER_ROPE_BYTES`` over ``rope_width``), the others' the bf16 half split
    (``HALF_ROPE_BYTES``); MLA also normalises its two latents with TE (read and write
    ``q_lora_rank + kv_lora_rank``) and assembles q and k by ``torch.cat`` (q: read and write
    ``a·(d_nope + d_rope)``; k: read ``a·d_nope`` and the shared rope key, write ``a·(d_nope +
    d_rope)``); no ``repeat_kv`` (TE's ``num_gqa_groups``, flex's ``enable_gqa``); the routed
    experts' activation is one compiled kernel (``moe/megatron/moe_utils.py``
    ``weighted_swiglu``, ``quick_geglu_deepep``: ``COMPILED_SWIGLU_BYTES`` or
    ``COMPILED_ACT_BYTES`` over ``k·F_e``), the dense MLP's and the shared experts' eager
    (``MLP.forward``'s ``F.silu(gate) * up``: ``EAGER_SWIGLU_BYTES`` or ``EAGER_ACT_BYTES``).
    ``attn_copies`` (``backend.attn: flex``, gpt-oss's only backend): ``GptOssAttention.forward``
    transposes q, k and v to ``[b, a, s, d]`` and the output back by ``.contiguous()`` copies
    (read and write ``(2a + 2g)·d``). Per token, times the GPU's tokens."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    h = m.hidden_size
    moe = m.layer_shares().get("moe", 0.0) if m.is_moe else 0.0
    shared_add = EAGER_ADD_BYTES * h * moe if m.num_shared_experts else 0.0
    per_h = te_norm_add_bytes(m) + shared_add
    a, g = m.num_attention_heads, m.kv_heads
    if m.is_mla:
        d_n, d_r = m.qk_nope_head_dim, m.qk_rope_head_dim
        attn = EAGER_ROPE_BYTES * rope_width(m) + 4 * ((m.q_lora_rank or 0) + m.kv_lora_rank) \
            + 2 * 2 * a * (d_n + d_r) + 2 * (a * d_n + d_r) + 2 * a * (d_n + d_r)
    else:
        rope = HALF_ROPE_BYTES * rope_width(m) if m.position_embedding == "rope" else 0.0
        attn = rope + (4 * (a + g) * m.head_dim if m.qk_norm else 0.0) \
            + (4 * (2 * a + 2 * g) * m.head_dim if attn_copies else 0.0)
    w = mlp_part_widths(m)
    act = (COMPILED_SWIGLU_BYTES if m.gated else COMPILED_ACT_BYTES) * w["routed_mlp"] \
        + (EAGER_SWIGLU_BYTES if m.gated else EAGER_ACT_BYTES) \
        * (w["dense_mlp"] + w["shared_mlp"])
    return per_h * T / seq_shard(tp, sp) + (attn + act) * T / tp


#: HBM bytes per hidden element of one torch.compile'd torchtitan block's norm and residual
#: kernels (``TransformerBlock.forward``: ``h = x + attention(attention_norm(x))``, ``out = h +
#: feed_forward(ffn_norm(h))``, compiled per block by ``apply_compile``): inductor makes one
#: Triton kernel per fusible region and leaves the matmuls and SDPA to cuBLAS and the flash
#: kernel, so the fp32 upcasts stay in registers and what is left is each region's bf16 reads
#: and writes. ``attention_norm``: read x, write its output (2 + 2); the first residual add
#: fused into ``ffn_norm``'s kernel: read x and the attention output, write h (kept for the
#: second add and the backward) and the norm's output (2 + 2 + 2 + 2); the second add, the
#: block graph's last op after the w2 matmul (no epilogue fusion into cuBLAS by default):
#: 2 + 2 + 2. docs/calibration.md §5.69.
COMPILED_NORM_ADD_BYTES = 4.0 + 8.0 + 6.0
#: per element of the MLP intermediate: ``silu(w1(x)) * w3(x)`` one kernel, read both, write
#: the product (2 + 2 + 2); an ungated activation reads and writes (2 + 2).
COMPILED_SWIGLU_BYTES = 6.0
COMPILED_ACT_BYTES = 4.0


def compiled_elementwise_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """HBM bytes of one layer's memory-bound forward kernels, per GPU, as torchtitan's Llama
    block runs them under torch.compile (``--compile.enable``, ``apply_compile`` per
    ``TransformerBlock``; docs/calibration.md §5.69): the norms and residual adds
    (``COMPILED_NORM_ADD_BYTES`` over ``h``, divided by ``t`` with sequence parallelism);
    rotary embedding on q, read and write (2 + 2 B over ``a·d``); on k, fused with
    ``repeat_kv``'s copy where ``g < a`` (read ``g·d``, write ``a·d``, else 2 + 2 over
    ``g·d``); v's ``repeat_kv`` copy where ``g < a`` (read ``g·d``, write ``a·d``); the MLP
    activation (``COMPILED_SWIGLU_BYTES`` over ``F``); per token, times the GPU's tokens. An
    MLA model's rotary is counted as ``elementwise_bytes_fwd``'s (read and write its rope
    width), with no repeat."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    per_h = COMPILED_NORM_ADD_BYTES * m.hidden_size * T
    a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
    if m.is_mla:
        qkv = 2 * 2 * rope_width(m) if m.position_embedding == "rope" else 0.0
    else:
        rope = m.position_embedding == "rope"
        q = 2 * 2 * a * d if rope else 0.0
        if g < a:       # k (rotated in the same kernel when rope) and v, repeated to a heads
            qkv = q + 2 * 2 * (g + a) * d
        else:
            qkv = q + (2 * 2 * g * d if rope else 0.0)
    act = (COMPILED_SWIGLU_BYTES if m.gated else COMPILED_ACT_BYTES) * m.mean_mlp_width()
    return per_h / seq_shard(tp, sp) + (qkv + act) * T / tp


def seq_shard(tp: Num, sp: Num) -> Num:
    """What sequence parallelism divides the replicated per-token work by (``tp`` or 1)."""
    return np.where(sp, tp, 1) if np.ndim(sp) or np.ndim(tp) else (tp if sp else 1)


def norm_bytes_per_token(m: ModelSpec) -> float:
    """HBM bytes per token of one layer's two norms' forward: each reads and writes ``h``
    bf16 elements, ``8h`` (a hybrid model's layer has one, ``4h``)."""
    return 4 * m.blocks_per_layer * m.hidden_size


def norm_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """HBM bytes of one layer's two norms' forward per GPU (one in a hybrid model's layer) (``norm_bytes_per_token`` over
    the GPU's tokens; divided by ``t`` with SP)."""
    return norm_bytes_per_token(m) * tokens_per_gpu(b, m.seq_length, cp) / seq_shard(tp, sp)


def activation_fn_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, width: Num) -> Num:
    """HBM bytes of the MLP activation function's forward per GPU over an intermediate of
    ``width`` per token (read ``F`` or ``2F`` gated, write ``F``; bf16), split by ``t``."""
    act_elems = (3 if m.gated else 2) * width
    return 2 * act_elems * tokens_per_gpu(b, m.seq_length, cp) / tp


def rope_width(m: ModelSpec) -> int:
    """Elements per token rotary embedding rotates: q and k, ``(a + g)·d``; MLA rotates only
    the rope part of each query head and the one shared rope key, ``(a + 1)·d_rope``."""
    if m.is_mla:
        return (m.num_attention_heads + 1) * m.qk_rope_head_dim
    return (m.num_attention_heads + m.kv_heads) * m.head_dim


#: HBM bytes per element of the routed experts' intermediate (``F`` per routed row) of the
#: eager clamp Megatron-Core 0.15-0.18 runs before its fused quick-GEGLU when
#: ``activation_func_clamp_value`` is set (``fusions/fused_bias_geglu.py``
#: ``weighted_bias_quick_geglu_impl``: ``input.chunk(2, -1)``, ``x_glu.clamp(max=c)``,
#: ``x_linear.clamp(-c, c)``, ``torch.cat``, outside the compiled function). Forward: each
#: clamp reads and writes its half (2·2 B per element of ``F``), the cat reads and writes
#: both (2·2·2 B): 16. Backward (autograd's ``clamp_backward``): ``where(self <= c, g, 0)``,
#: a comparison (read 2 B, write a 1-byte mask) and a ``where`` (read mask and g, write 2 B),
#: 8; the two-sided clamp compares twice and ``logical_and_``s the masks, 14; the chunk's
#: backward ``cat``s the two halves' gradients, 8: 30.
CLAMP_BYTES = (16.0, 30.0)
#: Kernels of that clamp per MoE layer: forward 2 clamps and the cat; backward 2 + 4
#: (comparisons, ``logical_and_``, ``where``s) and the cat.
CLAMP_KERNELS = (3, 7)
#: HBM bytes per rotated element (q and k, ``rope_width``) of Megatron-Core's unfused RoPE
#: (``rope_utils._apply_rotary_pos_emb_bshd``), which it runs instead of Transformer Engine's
#: fused kernel when YaRN's attention factor is not 1 ("mscale ... is not supported by TE's
#: fused RoPE. Using unfused implementation", ``apply_rotary_pos_emb``: the dev 0.15 branch
#: the 25.11 container ships, from "Fixes for gpt-oss" #2076 of 2025-11-05, and 0.16-0.18;
#: the core_v0.15.0 tag still ran the fused kernel and dropped the factor). Forward,
#: in 2-byte elements: ``t * cos`` 2, ``-x2`` 1, ``cat((-x2, x1))`` 2, ``* sin`` 2, the add
#: 3, ``cat((t, t_pass))`` 2: 12, 24 bytes. Backward: the two products' gradients 2 + 2, the
#: negation 1, the chunk's ``cat`` 2, the empty ``t_pass`` slice's ``slice_backward`` (zeros
#: of the full tensor) 1, and the three uses' gradients of ``t`` accumulated, 3 + 3 (the
#: full slice ``t[..., :rot_dim]`` is ``t`` itself: PyTorch skips a slice of the whole
#: dimension): 14, 28 bytes. The fused kernel's (read + write, 4; backward twice, 8) is in
#: ``elementwise_bytes_fwd``.
ROPE_UNFUSED_BYTES = (24.0, 28.0)
ROPE_FUSED_BYTES = (4.0, 8.0)
#: Kernels of the unfused RoPE per rotated tensor (q, k): forward the six above and six on
#: the position table (cos, sin, their scaling and casts), backward seven; less the fused
#: kernel each replaces.
ROPE_UNFUSED_KERNELS = (12, 7)


#: HBM bytes ``(forward, backward)`` of NeMo AutoModel's per-expert bias adds
#: (``GroupedExpertsDeepEP._apply_bias``, ``components/moe/layers.py`` 89e3a9fdd; gpt-oss's
#: ``expert_bias=True``), eager, one ``torch.split`` of the rows by expert and a ``torch.cat``
#: of the per-expert results. fc1, per element of the ``2·F_e`` wide output: ``t + b`` 2 + 2,
#: the cat 2 + 2 (8, 16 per element of ``F_e``); backward: the bias's row sum 2 and the split's
#: backward, a ``cat`` of the gradients, 2 + 2 (6, 12 per element of ``F_e``). fc2, per element
#: of the ``h`` wide output, with DeepEP's fp32 ``permuted_probs`` (``token_dispatcher.py``
#: "DeepEP only supports float32 probs"): ``b * p`` written fp32 4, ``t + b·p`` 2 + 4 + 4, the
#: cat 4 + 4, ``.to(bf16)`` 4 + 2: 28; backward: the gradient to fp32 2 + 4, its cast to ``t``'s
#: bf16 4 + 2, the bias's ``(g·p)`` 4 + 4 and row sum 4, the split's ``cat`` 2 + 2: 28 (the fake
#: gate's probabilities take no gradient).
EXPERT_BIAS_FC1_BYTES = (16.0, 12.0)
EXPERT_BIAS_FC2_BYTES = (28.0, 28.0)


def expert_bias_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, load: Num = 1.0
                      ) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU of NeMo AutoModel's eager per-expert bias adds
    of the mean layer (``EXPERT_BIAS_FC1_BYTES`` per element of ``F_e`` and
    ``EXPERT_BIAS_FC2_BYTES`` per element of ``h``, per routed row: ``T/t·k·load`` rows on the
    MoE layers' share); 0 for a model without biases or experts. Vectorised."""
    z = 0.0 * np.asarray(tp, dtype=float)
    if not (m.bias and m.is_moe):
        return z[()], z[()]
    rows = np.asarray(tokens_per_gpu(b, m.seq_length, cp) / tp * m.layer_shares().get("moe", 0.0)
                      * m.moe_router_topk * load, dtype=float)
    return tuple(((f1 * m.expert_ffn + f2 * m.hidden_size) * rows)[()]
                 for f1, f2 in zip(EXPERT_BIAS_FC1_BYTES, EXPERT_BIAS_FC2_BYTES))


def clamp_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, load: Num = 1.0) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU of the mean layer's eager activation clamp
    (``CLAMP_BYTES`` per element of the routed intermediate: ``T/t·k·F_e`` elements times
    ``load``, on the MoE layers' share; the ``etp`` ranks of an expert each hold ``F_e/etp``
    of all its rows); 0 without ``activation_clamp``. Vectorised."""
    if m.activation_clamp is None:
        z = 0.0 * np.asarray(tp, dtype=float)
        return z[()], z[()]
    elems = np.asarray(tokens_per_gpu(b, m.seq_length, cp) / tp
                       * mlp_part_widths(m)["routed_mlp"] * load, dtype=float)
    f, bw = CLAMP_BYTES
    return (f * elems)[()], (bw * elems)[()]


def rope_unfused_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU that the unfused RoPE of a model with
    ``rope_attention_factor != 1`` adds over the fused kernel ``elementwise_bytes_fwd``
    prices (``ROPE_UNFUSED_BYTES - ROPE_FUSED_BYTES`` per rotated element, ``rope_width``
    per token over ``t``); 0 for plain RoPE. Vectorised."""
    z = 0.0 * np.asarray(tp, dtype=float)
    if m.rope_attention_factor == 1.0 or m.position_embedding != "rope":
        return z[()], z[()]
    elems = np.asarray(tokens_per_gpu(b, m.seq_length, cp) * rope_width(m) / tp, dtype=float)
    return tuple(((u - f) * elems)[()] for u, f in zip(ROPE_UNFUSED_BYTES, ROPE_FUSED_BYTES))


#: HBM bytes per element of the attention block's output (``h`` per token) that Megatron-Core's
#: unfused bias-dropout-add adds over the fused one ``elementwise_bytes_fwd`` prices, where the
#: output projection returns its bias (``TERowParallelLinear``, ``skip_bias_add``) and
#: ``bias_dropout_fusion`` is off (``fusions/fused_bias_dropout.py`` core_v0.17.0
#: ``_bias_dropout_add_func`` L43-52: ``x = x + bias``, then ``dropout`` at ``p = 0``, which
#: returns its input, then ``residual + out``, the fused kernel's bytes). Forward: the bias add
#: reads and writes the output, 2 + 2; backward: autograd's gradient of the broadcast bias,
#: a sum over the tokens reading the output's gradient once, 2 (the adds pass the gradient
#: through). The MLP's bias-dropout-add has no bias (the MoE layer adds its experts' biases
#: itself, ``expert_bias_bytes``).
ATTN_BIAS_ADD_BYTES = (4.0, 2.0)
#: Kernels of that bias add: the add forward, the bias gradient's reduction backward.
ATTN_BIAS_ADD_KERNELS = (1, 1)


def attn_bias_add_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU of the attention output's unfused bias add
    (``ATTN_BIAS_ADD_BYTES`` per element of ``h`` over the layer's tokens, divided by ``t``
    with SP as the bias-dropout-add's other work); the caller decides whether the stack runs
    it (``variants.runs_gpt_oss_bridge``). Vectorised."""
    elems = np.asarray(tokens_per_gpu(b, m.seq_length, cp) * m.hidden_size
                       / seq_shard(tp, sp), dtype=float)
    return tuple((x * elems)[()] for x in ATTN_BIAS_ADD_BYTES)


def eager_variant_kernels(m: ModelSpec, rope: bool = True) -> tuple[float, float]:
    """Kernels ``(forward, backward)`` the mean layer adds with the eager clamp
    (``CLAMP_KERNELS`` on the MoE layers' share) and the unfused RoPE (``ROPE_UNFUSED_KERNELS``
    less one fused kernel, for q and k); ``rope`` False: the clamp's alone."""
    f = b = 0.0
    if m.activation_clamp is not None and m.is_moe:
        share = m.layer_shares().get("moe", 0.0)
        f, b = share * CLAMP_KERNELS[0], share * CLAMP_KERNELS[1]
    if rope and m.rope_attention_factor != 1.0 and m.position_embedding == "rope":
        f += 2 * (ROPE_UNFUSED_KERNELS[0] - 1)
        b += 2 * (ROPE_UNFUSED_KERNELS[1] - 1)
    return f, b
