"""What low-precision training (fp8, mxfp8, fp8-blockwise, nvfp4) casts: the tensors of one
layer quantised per micro-batch and the weights quantised per step, in HBM bytes.

Which GEMMs run in the low format (Transformer Engine and Megatron-Core, and DeepSeek-V3's
recipe, arXiv 2412.19437 §3.3): every linear layer of every transformer layer, its forward
(``X·W``), data-gradient (``dY·Wᵀ``) and weight-gradient (``Xᵀ·dY``) GEMMs. In 16 bits
stay: the attention core (scores and ``softmax·V``; TE runs it in bf16 unless FP8 attention
is asked for, DeepSeek-V3 keeps it in bf16), the embedding, the LM head and its loss, the
MoE router and every norm and activation (``strategies.cost.layer_time`` times them so).

The tensors a layer casts, per micro-batch (``layer_cast_bytes``):

* forward, the input ``X`` of each GEMM. Inputs that a norm produces (QKV, MLA's up and down
  projections, the MLP's first GEMM) or the activation function produces (the MLP's second
  GEMM) are cast by that kernel (TE ``LayerNormLinear``/``LayerNormMLP``): ``fused``; on a
  stack whose MLP runs its own activation (``mlp_unfused``, ``FrameworkProfile.mlp_act_casts``:
  Megatron-Core's ``MLP``, ``bias_swiglu_impl`` writing bf16 between ``te.LayerNormLinear``
  and ``te.Linear``, docs/calibration.md §5.118) the second GEMM's input and the first's
  ``dY`` are cast by kernels of their own, as routed experts' below. The
  output projection's input comes from the attention kernel in bf16 and routed experts'
  inputs from the token permutation: a cast kernel of their own. With sequence parallelism
  the norm's output is quantised on the local ``T/tp`` tokens and all-gathered in the low
  format (TE gathers quantised tensors, with the amax all-reduced over tp under current
  scaling).
* backward, the incoming gradient ``dY`` of each GEMM: fused for the MLP's first GEMM (TE's
  activation-backward kernels write it quantised), a cast kernel for the others (the
  residual stream's gradient, the attention kernel's ``dQ, dK, dV``); with sequence
  parallelism the row-parallel GEMMs' ``dY`` is cast on the local shard before its
  all-gather.
* routed experts on a stack that runs them through Transformer Engine's ``GroupedLinear``
  with the activation in its own model code (``routed_unfused``; Megatron-Core's
  ``TEGroupedMLP``, ``FrameworkProfile.grouped_mlp_casts``): the activation function
  (``weighted_bias_swiglu_impl`` and the like) writes bf16 and fc2's ``GroupedLinear``
  quantises that input with a pass of its own (``tex.split_quantize(inp_view, m_splits,
  input_quantizers)``, TransformerEngine ``pytorch/module/grouped_linear.py``), and so does
  fc1's backward with the activation backward's bf16 ``dY``: both a cast kernel, not fused.
  NVIDIA names this "separate quantization pass" among the three costs its fused grouped
  MLP removes (NVIDIA technical blog, "Boosting MoE Training Throughput with Advanced Fusion
  Kernels", 2026-06-15: GroupGemm + Activation + Quantize/Transpose, GroupGemm +
  dActivation + Quantize/Transpose). Default: fused, as before.

Per step (``weight_cast_bytes``): each weight is quantised once and the copies reused by
every micro-batch (TE's ``is_first_microbatch``, which Megatron-Core's TE layers pass); the
copies stay in memory beside the bf16 weights (``weight_copy_bytes``, per parameter). JAX
stacks (``FrameworkProfile.weight_cast_per_forward``) quantise at every forward instead
(``weight_cast_passes``): TE's JAX ``fp8_dot`` casts and transposes the kernel inside each
call (TransformerEngine v1.4 ``transformer_engine/jax/dot.py``; its quantised kernel is an
unnamed residual of the call, so a remat policy recomputes it for the backward), and so do
XLA's native fp8 dots (the quantise-dequantise of the kernel is part of each traced dot).

Communication (``tp_collective_bytes_factor``): under sequence parallelism the tensors
all-gathered over tp (the norm outputs in the forward, the incoming gradients of the
row-parallel GEMMs in the backward) travel quantised, since they are cast on the local shard
(TE's ``gather_along_first_dim`` with a quantizer: per-tensor fp8 sends the row-wise bytes
and builds Hopper's transpose after the gather; block formats send both scalings, which
cannot be rebuilt from each other), while the reduce-scatters carry bf16 partial sums.
DeepSeek-V3's fp8 dispatch of MoE tokens is the expert-parallel all-to-all's and not
modelled here.

Each tensor costs ``Precision.cast_bytes(GPU.cast_copies(dtype), fused)`` bytes per element
(``topologies.precision``: the amax pass of current scaling, the row- and column-wise copies
of block formats and of Hopper's TN-only fp8 GEMMs). Not modelled: delayed scaling's amax
history and scale update (one multi-tensor kernel and one small all-reduce per micro-batch,
microseconds) and current scaling's per-tensor amax all-reduce over tp (a few bytes each).
Transformer Engine before v2.14 writes an NVFP4 tensor's row-wise and Hadamard-transformed
column-wise copies in two kernels that each read it (``TE_FUSED_RHT_CAST``,
``splits_rht_cast``): 2 B more per element of every cast but the routed experts'.

Kernels (``expert_quantise_kernels``): on a stack that runs its experts through TE's
``GroupedLinear`` (``routed_unfused``), each cast of a grouped GEMM's operand is one
``tex.split_quantize`` over the ``k = E/ep`` local experts' token splits. TE's
``multi_tensor_quantize_impl`` (``pytorch/csrc/extensions/cast.cpp``, the 2025 and 2026
sources alike) launches one fused ``nvte_multi_cast_transpose`` for all ``k`` splits only
when every quantiser is delayed-scaling fp8 (``Float8Quantizer``) with both copies; any
other recipe quantises the splits one at a time: per-tensor current scaling three kernels
per split (``Float8CurrentScalingQuantizer::quantize_impl``: ``nvte_compute_amax``,
``nvte_compute_scale_from_amax``, ``nvte_quantize_v2``), fp8 block scaling and MXFP8 one
each (``nvte_quantize_v2`` into a bulk allocation: ``split_quantize``'s ``BULK_MXFP8``
allocates the splits together and quantises them in the ``UNFUSED`` loop; the row- and
column-wise copies come from the one kernel, ``MXFP8Quantizer::quantize``, TE v2.9, v2.14 and
v2.16, the 25.11, 26.04 and 26.06 containers'). The launches beyond the single one of the
fused path are each a kernel boundary the GPU idles at (``moe_time.expert_quantise_time``).
TE's grouped MXFP8 quantise (``tex.group_quantize``, the cuBLASLt grouped GEMM's input) is
taken by ``GroupedLinear`` only when asked (TE v2.17-v2.18
``_is_grouped_tensor_path_supported``: ``NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM``,
default ``"0"``; later the module's ``use_grouped_tensor``, default the same variable's
value), which no recipe read sets, and by the fused grouped MLP, which has no
``GroupedLinear`` casts (``routed_unfused`` false). NVFP4 is left out: its ``split_quantize``
runs one fused kernel for all splits (``split_quantize_nvfp4_impl``) where the inner
dimension is a multiple of 128 (docs/calibration.md §5.171).

Units: bytes, per GPU. Every function broadcasts over numpy arrays of plan fields.
"""
from __future__ import annotations

import numpy as np

from strategies.cost import quant_scope, rowwise_casts
from strategies.cost.token_counts import Num, tokens_per_gpu
from strategies.model import ModelSpec
from topologies.gpus import GPU
from topologies.precision import get_precision


def layer_cast_elements(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num,
                        routed_unfused: Num = False, mlp_unfused: Num = False,
                        scope: float = 0.0, routed: bool = True
                        ) -> tuple[tuple[Num, Num], tuple[Num, Num]]:
    """Elements one layer quantises per micro-batch on one GPU (the mean layer):
    ``((forward fused, forward unfused), (backward fused, backward unfused))`` (module doc:
    which tensors, which fused into their producer). Routed experts take ``T·topk`` tokens
    in all (``gemm_shapes.layer_gemms``' balanced routing). ``routed_unfused``: the routed
    experts' activation output (fc2's input) and activation gradient (fc1's ``dY``) are cast
    by kernels of their own (module doc, ``GroupedLinear``), not by the activation;
    ``mlp_unfused`` the same for the dense MLP and the shared experts (module doc,
    Megatron-Core's ``MLP`` with ``te.Linear`` fc2). ``scope``: ``SystemConfig.quant_scope``;
    each GEMM's casts times its quantised share (``quant_scope.quantised_share``: none in a
    BF16 layer or for a BF16 module; an ``alt`` format's casts counted here with the run's).
    ``routed`` False: the routed experts' casts left out (the other linears' alone)."""
    sc = quant_scope.scope_of(scope)
    T = tokens_per_gpu(b, m.seq_length, cp)
    h, up = m.hidden_size, (2 if m.gated else 1)
    shard = np.where(sp, tp, 1.0)
    f_fused = f_un = b_fused = b_un = 0.0
    # a hybrid model's mean layer: the attention at its share and the Mamba-2 mixers' in_proj
    # (after the fused pre-norm, as QKV) and out_proj (its input from the gated RMSNorm's
    # Triton kernel, cast by a pass of its own, as the attention's output) at theirs
    for mixer, w0, linears in m.mixer_linears():
        part = "attn" if mixer == "attention" else "mamba"
        for name, k_in, n_out, split in linears:
            w = w0 * quant_scope.quantised_share(
                m, sc, "mla_up" if name in ("q_up", "kv_up") else part, split == "row")
            if split == "row":                   # output projection: input from attention
                f_un = f_un + w * T * k_in / tp
                b_un = b_un + w * T * n_out / shard
            else:                                # after a norm; dY from the attention kernel
                f_fused = f_fused + w * T * k_in / shard
                b_un = b_un + w * T * n_out / (tp if split == "col" else 1.0)
    for kind, w in m.layer_shares().items():
        widths = [(1.0, m.ffn_hidden_size, False)] if kind == "dense" else \
            [(float(m.moe_router_topk), m.expert_ffn, True)] + \
            ([(1.0, m.num_shared_experts * m.shared_ffn, False)] if m.num_shared_experts else [])
        for copies, F, is_routed in widths:
            if is_routed and not routed:
                continue
            mlp = "dense_mlp" if kind == "dense" else "routed_mlp" if is_routed else "shared_mlp"
            t = w * copies * T * quant_scope.quantised_share(m, sc, mlp, False)
            if is_routed:                        # after the permutation (expert_hidden wide)
                f_un = f_un + t * m.expert_hidden
            else:                                # after the MLP's norm
                f_fused = f_fused + t * h / shard
            own = routed_unfused if is_routed else mlp_unfused  # the GEMMs' own passes
            f_act, b_act = t * F / tp, t * up * F / tp  # activation output, its backward
            f_fused = f_fused + np.where(own, 0.0, f_act)   # -> second GEMM
            f_un = f_un + np.where(own, f_act, 0.0)
            b_fused = b_fused + np.where(own, 0.0, b_act)   # -> first GEMM's dY
            b_un = b_un + np.where(own, b_act, 0.0)
            b_un = b_un + (t * m.expert_hidden if is_routed else t * h / shard)
    return (f_fused, f_un), (b_fused, b_un)


#: the Transformer Engine release from which one kernel writes both copies of an NVFP4 tensor
#: under the random Hadamard transform (``NVFP4Quantizer::quantize_impl``:
#: ``nvte_quantize_with_hadamard_transform``, TE 523801df7 of 2026-03-16, PR #2555, first in
#: v2.14); v2.8-v2.13 launch ``nvte_quantize_v2`` for the row-wise copy and
#: ``nvte_hadamard_transform_cast_fusion_columnwise`` for the Hadamard-transformed column-wise
#: one, each reading the bf16 tensor (``pytorch/csrc/quantizer.cpp`` at v2.13). The routed
#: experts' ``split_quantize`` had its fully fused grouped kernel in v2.13 already
#: (``nvte_group_hadamard_transform_cast_fusion``, ``extensions/cast.cpp``), so only the other
#: linears' casts pay the second read (docs/calibration.md §5.178)
TE_FUSED_RHT_CAST = (2, 14)


def splits_rht_cast(dtype: str, te_version: tuple[int, int] | None) -> bool:
    """Whether Transformer Engine ``te_version`` reads each Hadamard-transformed NVFP4 tensor
    (``Precision.producer_amax`` False) once more than ``Precision.cast_bytes`` prices: a
    release before ``TE_FUSED_RHT_CAST``; ``None`` (release not stated) reads the newest."""
    p = get_precision(dtype)
    return bool(p.quantised and p.amax_pass and not p.producer_amax and te_version is not None
                and tuple(te_version) < TE_FUSED_RHT_CAST)


def layer_cast_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, gpu: GPU,
                     dtype: str, routed_unfused: Num = False,
                     gathered_transposes: bool = False,
                     mlp_unfused: Num = False, scope: float = 0.0,
                     split_rht: bool = False) -> tuple[Num, Num]:
    """(forward, backward) HBM bytes of one layer's quantisation per micro-batch on one GPU
    (``layer_cast_elements`` priced by ``Precision.cast_bytes``; ``routed_unfused`` and
    ``mlp_unfused`` as there; ``gathered_transposes``: torchao's float8 TP,
    ``gathered_transpose_bytes`` added to the backward); 0 in 16 bits. torchao's rowwise
    recipe casts each GEMM's operands itself, the weights included, every micro-batch
    (``rowwise_casts.layer_cast_bytes``). ``scope``: ``layer_cast_elements``'. ``split_rht``
    (``splits_rht_cast``): each cast but the routed experts' reads its bf16 tensor once more
    (2 B per element)."""
    p, c = get_precision(dtype), gpu.cast_copies(dtype)
    if p.row_scaled:
        return rowwise_casts.layer_cast_bytes(m, b, tp, cp, sp, routed_unfused, mlp_unfused)
    (ff, fu), (bf, bu) = layer_cast_elements(m, b, tp, cp, sp, routed_unfused, mlp_unfused,
                                             scope)
    fused, unfused = p.cast_bytes(c, True), p.cast_bytes(c, False)
    fwd, bwd = ff * fused + fu * unfused, bf * fused + bu * unfused
    if split_rht and p.quantised:
        (lf, lu), (lbf, lbu) = layer_cast_elements(m, b, tp, cp, sp, routed_unfused,
                                                   mlp_unfused, scope, routed=False)
        fwd, bwd = fwd + 2.0 * (lf + lu), bwd + 2.0 * (lbf + lbu)
    if gathered_transposes:
        bwd = bwd + gathered_transpose_bytes(m, b, tp, cp, sp, gpu, dtype)
    return fwd, bwd


#: tensors torchao's float8 TP styles all-gather in fp8 per mean layer and micro-batch, each
#: ``T x h`` once gathered: (attention, dense feed-forward) = (its normed input, gathered by
#: ``PrepareFloat8ModuleInput`` before wq/wk/wv or w1/w3; the output gradient of wo or w2,
#: cast by ``Float8RowwiseParallel``'s ``_NoopFwToFloat8BwDynamic`` before the backward of
#: its reduce-scatter gathers it)
TORCHAO_GATHERED = (2.0, 2.0)


def gathered_transpose_elements(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """Elements (once gathered, ``T·h`` each) of the fp8 tensors torchao's float8 TP styles
    all-gather over tp per mean layer and micro-batch (``TORCHAO_GATHERED``; a MoE layer
    counts its attention's); 0 without sequence parallelism or with ``tp = 1``."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    dense = 1.0 - (m.num_moe_layers / m.num_layers if m.is_moe else 0.0)
    n = TORCHAO_GATHERED[0] + dense * TORCHAO_GATHERED[1]
    on = (np.asarray(tp) > 1) & (np.asarray(sp) > 0)
    return np.where(on, n * T * m.hidden_size, 0.0)[()]


def gathered_transpose_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, gpu: GPU,
                             dtype: str) -> Num:
    """Backward HBM bytes per mean layer and micro-batch that torchao's float8 TP adds to
    ``layer_cast_elements``' casts: the weight-gradient ``_scaled_mm`` reads each gathered
    fp8 tensor transposed, and ``float8_mm``'s operand preparation (torchao
    ``float8_ops.py`` ``preprocess_addmm``: ``a.contiguous()`` for the transposed output
    gradient, ``b.t().contiguous().t()`` for the input) copies it after the gather at its
    full ``T·h`` size, a read and a write of ``operand_bytes`` each; the cast before the
    gather writes one copy of the local ``T·h/tp`` shard, not the ``copies − 1`` transposed
    ones ``cast_bytes`` charges there. Per gathered element ``operand_bytes·(2 − (copies −
    1)/tp)``; 0 in 16 bits, for block formats (torchao's MX path is another code), for the
    rowwise recipe (torchtitan runs it under regular TP: nothing gathered in fp8) and where
    nothing is gathered (``gathered_transpose_elements``)."""
    p = get_precision(dtype)
    if not p.gathers_quantised or p.block_scaled:
        return 0.0
    c = gpu.cast_copies(dtype)
    e = gathered_transpose_elements(m, b, tp, cp, sp)
    return e * p.operand_bytes * (2.0 - (c - 1) / np.asarray(tp, dtype=float))


def tp_collective_bytes_factor(dtype: str, sp: Num) -> Num:
    """Mean bytes of one tensor-parallel collective relative to its bf16 size: with sequence
    parallelism and a quantised precision, half a layer's collectives are all-gathers of
    quantised tensors (``gathered`` bytes per element: one copy for per-tensor scaling, both
    scalings for block formats) and half are bf16 reduce-scatters, so ``(2 + gathered)/4``;
    1 otherwise. Ring all-gather and reduce-scatter times are the same affine function of
    the bytes, so four collectives of the mean size take exactly the time of the two pairs."""
    return np.where(sp, (1.0 + tp_allgather_bytes_factor(dtype, sp)) / 2.0, 1.0)


def tp_allgather_bytes_factor(dtype: str, sp: Num) -> Num:
    """Bytes of one sequence-parallel all-gather relative to its bf16 size: ``gathered/2``
    in a quantised precision (``gathered`` bytes per element: one copy for per-tensor
    scaling, both scalings for block formats; Transformer Engine gathers the quantised
    norm output, ``layernorm_linear.py`` ``gather_along_first_dim(..., quantizer=)``, and
    its backward re-gathers the saved quantised shard the same way), 1 otherwise and for
    torchao's rowwise recipe, which gathers bf16 (``Precision.gathers_quantised``)."""
    p = get_precision(dtype)
    if not p.gathers_quantised:
        return np.where(sp, 1.0, 1.0)
    gathered = (2 if p.block_scaled else 1) * p.operand_bytes
    return np.where(sp, gathered / 2.0, 1.0)


def weight_copy_bytes(dtype: str, gpu: GPU | None = None) -> float:
    """Bytes per GEMM weight of its cached quantised copies (``copies x operand_bytes``;
    ``gpu`` None: a chip that reads either layout); 0 in 16 bits and for the rowwise
    recipe, which casts the bf16 weight inside each GEMM's call and keeps no copy."""
    p = get_precision(dtype)
    if p.row_scaled:
        return 0.0
    return p.copies(bool(gpu is not None and gpu.fp8_tn_only)) * p.operand_bytes


def weight_cast_passes(per_forward: Num, microbatches: Num, recompute: Num) -> Num:
    """Times each GEMM weight is quantised per step: 1 where the copies are kept
    (``per_forward`` False); else once per forward, ``microbatches`` per step, twice each when
    the layer is recomputed (``recompute`` a ``plan_arrays.RECOMPUTE_CODE``, > 0: the rerun
    forward quantises again what the backward's GEMMs read)."""
    per_mb = 1.0 + (np.asarray(recompute) > 0)
    return np.where(per_forward, np.asarray(microbatches, dtype=float) * per_mb, 1.0)


def weight_cast_bytes(weights: Num, gpu: GPU, dtype: str) -> Num:
    """HBM bytes to quantise ``weights`` GEMM weights once per step (bf16 read, the copies
    written, the amax pass where the recipe needs one); 0 in 16 bits and for the rowwise
    recipe (its weights are cast per micro-batch with the layer's GEMMs,
    ``rowwise_casts``)."""
    p = get_precision(dtype)
    if p.row_scaled:
        return 0.0 * np.asarray(weights, dtype=float)
    return weights * p.cast_bytes(gpu.cast_copies(dtype), False)


#: kernels TE's ``split_quantize`` launches per local expert for one cast of a grouped
#: expert GEMM's operand, by precision (module doc, ``multi_tensor_quantize_impl``): absent
#: from the map, one fused kernel for all experts (delayed-scaling fp8, nvfp4's fused split
#: quantise: module doc)
SPLIT_QUANTIZE_KERNELS: dict[str, int] = {"fp8-current": 3, "fp8-blockwise": 1, "mxfp8": 1}


def expert_quantise_kernels(m: ModelSpec, ep: Num, dtype: str,
                            routed_unfused: bool = False) -> tuple[Num, Num]:
    """Kernels ``(forward, backward)`` the mean layer's routed-expert casts launch beyond one
    per cast, on a stack that runs ``GroupedLinear`` (``routed_unfused``; else 0): per MoE
    layer and pass two casts (forward: fc1's permuted input and fc2's input; backward: fc2's
    and fc1's incoming gradients), each ``n·k - 1`` extra launches for ``k = E/ep`` local
    experts and ``n = SPLIT_QUANTIZE_KERNELS[dtype]``; 0 for delayed scaling and nvfp4 (one
    fused kernel), 16 bits, a dense model. Times the MoE layers' share. Vectorised."""
    n = SPLIT_QUANTIZE_KERNELS.get(dtype, 0)
    share = m.layer_shares().get("moe", 0.0) if m.is_moe else 0.0
    if not (routed_unfused and n and share):
        z = 0.0 * np.asarray(ep, dtype=float)
        return z[()], z[()]
    local = m.num_experts / np.asarray(ep, dtype=float)
    per_pass = share * 2.0 * (n * local - 1.0)
    return per_pass[()], per_pass[()]
