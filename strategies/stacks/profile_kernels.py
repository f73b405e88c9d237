"""``StackKernels``: the kernels a stack runs and what they save (elementwise kernels,
Transformer Engine's modules and their casts, fused and eager variants, the per-step and
loss passes, what recomputation reruns, the activations cached in low precision, the
unfused attention's bias and mask bytes), base fields of ``FrameworkProfile``."""
from __future__ import annotations

from dataclasses import dataclass

from strategies.stacks.expert_gemm import ExpertGemmLaunch
from strategies.stacks.passes import LossPasses, StepPasses


@dataclass(frozen=True)
class StackKernels:
    """The ``FrameworkProfile`` fields that say which kernels the stack runs and what they save."""

    #: the memory-bound kernels of a layer (``counts.elementwise_bytes_fwd``): ``"fused"``,
    #: Megatron's fused norm, bias-dropout-add, activation and rotary kernels, or ``"eager"``,
    #: the model's own eager PyTorch ops (torchtitan's Llama without torch.compile:
    #: ``counts.eager_elementwise_bytes_fwd``), or ``"compiled"``, the same ops under
    #: torch.compile (``counts.compiled_elementwise_bytes_fwd``; ``compiled``), or
    #: ``"eager_te"``, NeMo AutoModel's eager blocks around Transformer Engine's RMSNorm and
    #: attention (``elementwise_bytes.eager_te_bytes_fwd``), ``"eager_flex"`` the same blocks
    #: around FlexAttention (its layout copies; set by the reader from ``plan.attn_impl``)
    elementwise_kernels: str = "fused"
    #: the Transformer Engine release ``(major, minor)`` the stack ran, where a reader knows it
    #: (``reference.entry_stack.NEMO_CONTAINER_TE``: a row's NeMo container); None: not
    #: stated, read as the newest releases' rules. ``memory.saved_precision.expert_input_bytes`` and
    #: ``memory.te_linear_saved.te_linear_input_bytes`` read it (what TE's grouped experts and
    #: dense modules save under per-tensor fp8, docs/calibration.md §5.103, §5.113)
    te_version: tuple[int, int] | None = None
    #: runs the layers' dense GEMMs through Transformer Engine's modules (Megatron-Core's TE
    #: spec: ``TELayerNormColumnParallelLinear`` for QKV and a dense layer's fc1,
    #: ``TERowParallelLinear`` for the output projection and fc2), whose saved inputs are
    #: quantised copies in an fp8 precision (``memory.te_linear_saved``, docs/calibration.md
    #: §5.113); False: the 16-bit table
    te_linears: bool = False
    #: runs Megatron-Core's model code for a clamped gated activation (the clamp and cat in
    #: eager PyTorch before the fused activation) and for a RoPE scaled by YaRN's attention
    #: factor (the unfused rotary path): ``counts.clamp_bytes``, ``counts.rope_unfused_bytes``
    #: (``compute.eager_variant_time``); False: a stack whose kernels for these are not
    #: modelled (charged as the plain activation and the fused RoPE)
    eager_variants: bool = False
    #: runs routed experts through Transformer Engine's ``GroupedLinear`` with the activation
    #: function in the stack's own code (Megatron-Core's ``TEGroupedMLP``): the activation
    #: writes bf16 and ``GroupedLinear`` quantises fc2's input and fc1's incoming gradient in
    #: passes of their own (``quantise.layer_cast_elements``' ``routed_unfused``); False: the
    #: activation kernels write them quantised (fused)
    grouped_mlp_casts: bool = False
    #: runs the dense MLP (and shared experts) as Megatron-Core's ``MLP``: fc1 a
    #: ``te.LayerNormLinear``, the activation its own ``bias_swiglu_impl``/``bias_gelu_impl``
    #: writing bf16, fc2 a ``te.Linear`` that quantises that input, and fc1's backward its bf16
    #: incoming gradient, in passes of their own (``quantise.layer_cast_elements``'
    #: ``mlp_unfused``; docs/calibration.md §5.118); False: the activation kernels write them
    #: quantised (TE's ``LayerNormMLP``, fused)
    mlp_act_casts: bool = False
    #: runs Transformer Engine's modules under Megatron-Core's ``fp8_autocast`` (amax group
    #: tp·cp·dp): per-tensor fp8 scaling all-reduces amaxes on the compute stream
    #: (``strategies.cost.amax``; docs/calibration.md §5.64)
    te_amax_reduction: bool = False
    #: tensorwise dynamic float8 under TP runs torchao's ``Float8ColwiseParallel``/
    #: ``Float8RowwiseParallel``/``PrepareFloat8ModuleInput``: each cast of a sharded DTensor
    #: (``tensor_to_amax``'s ``torch.max(torch.abs(x))`` of a ``Shard`` placement) all-reduces
    #: its amax over the TP group (``strategies.cost.amax``; docs/calibration.md §5.84)
    torchao_float8_tp: bool = False
    #: runs Q, K, V and a gated MLP's gate and up projections as separate linears over one
    #: input, not Megatron's fused ``linear_qkv``/``linear_fc1`` (torchtitan's Llama): their
    #: own GEMMs and the sum of their input gradients (``strategies.cost.split_projections``;
    #: docs/calibration.md §5.142)
    separate_projections: bool = False
    #: how the stack splits its fused QKV projection's output into q, k and v, hence the
    #: copies and the backward ``cat`` around it (``strategies.cost.qkv_split``;
    #: docs/calibration.md §5.167): ``""`` no fused QKV split modelled, ``"torch"``
    #: ``torch.split`` (Megatron-LM's and Megatron-DeepSpeed's ``split_tensor_along_last_dim``:
    #: autograd's split backward always ``cat``s), ``"te"`` Megatron-Core's with Transformer
    #: Engine (``SplitAlongDim`` to TE 2.2, a view where the gradients are one buffer's slices,
    #: ``qkv_split.qkv_split_is_view``; ``torch.split`` from 2.3; TE's attention's layout
    #: copies in the forward)
    qkv_split: str = ""
    #: the ``d_inner``-wide tensors a hybrid model's Mamba-2 mixer keeps for its backward
    #: beside ``zxbcdt`` (``memory.mixer_saved``): 3 on Megatron-Core's mixer (the combined
    #: function's ``out_x``, the gated norm's input, ``out_proj``'s input:
    #: ``mamba_mixer.SAVED_D_INNER``), 1 where the combined function runs the norm and
    #: ``out_proj`` itself and saves ``out_x`` only (NeMo AutoModel without context parallelism)
    mamba_saved_d_inner: int = 3
    #: in a quantised precision, copies the routed tokens into and out of per-expert buffers
    #: aligned for the quantised GEMMs (Megatron-Core's ``TEGroupedMLP`` with Transformer
    #: Engine's ``Fp8Padding``/``Fp8Unpadding``, the router not padding): ``counts.
    #: expert_pad_bytes``, ``compute.expert_pad_time``
    quant_padding: bool = False
    #: how the stack launches a grouped expert GEMM over the local experts, hence the fixed
    #: times it pays (``ExpertGemmLaunch``; ``compute.expert_fixed_share``)
    expert_gemm_launch: ExpertGemmLaunch = ExpertGemmLaunch()
    #: runs the routed experts through Transformer Engine's fused grouped MLP
    #: (``with_fused_grouped_mlp``): fc1, the gated activation with its clamp and the
    #: routing-probability scale, and fc2 in cuDNN grouped kernels, so no eager clamp
    #: (``runs_eager_clamp``)
    fused_grouped_mlp: bool = False
    #: runs the attention core in Transformer Engine's MXFP8 fused attention (``with_fp8_
    #: attention``; Megatron-Core's ``fp8_dot_product_attention``): ``strategies.cost.
    #: fp8_attention`` prices the kernel and its casts
    fp8_attention: bool = False
    #: the passes the stack runs once per step (``StepPasses``; default: Megatron-LM's)
    step: StepPasses = StepPasses()
    #: the cross-entropy's passes over the logits (``LossPasses``; default: the assumed three
    #: fp32 passes each way)
    loss: LossPasses = LossPasses()
    #: recomputation never reruns the layer's last GEMM (the dense MLP's down projection):
    #: full recomputation stops before it (PyTorch non-reentrant checkpoint with early stop;
    #: JAX's remat, whose recomputed forward is dead-code-eliminated to what the backward
    #: reads), and so does selective recomputation of the ``mlp`` module; False: the whole
    #: forward (or module) is rerun (reentrant checkpointing)
    recompute_early_stop: bool = False
    #: selective recomputation of ``core_attn`` under FlashAttention reruns the fused attention
    #: kernel's forward (the stack keeps neither its output nor its softmax statistics: MaxText's
    #: ``context`` tensor, remat unless a policy saves it); False: the fused kernel's backward
    #: recomputes the scores itself and nothing is rerun. Megatron-Core (and the stacks built
    #: on it) sets it: its ``core_attn`` checkpoint reruns the fused kernel (§5.188)
    recompute_flash_fwd: bool = False
    #: selective recomputation is a JAX remat policy (``strategies.remat_policies``): a layer
    #: keeps its input and the named tensors the policy saves and the backward reads
    #: (``remat_policies.saved_names``; the attention output only when ``core_attn`` is not
    #: selected, as ``recompute_flash_fwd`` reruns the kernel that makes it), nothing unnamed
    #: (``strategies.memory.activations.named_remat_bytes``); False: Megatron's table less the
    #: selected modules' parts
    remat_named: bool = False
    #: low-precision GEMM weights are quantised at every forward that uses them, each
    #: micro-batch's and, under recomputation, the backward's rerun (JAX's traced functions
    #: keep no quantised copy between calls: ``quantise.weight_cast_passes``); False: once
    #: per step, the copies reused by every micro-batch (Transformer Engine's
    #: ``is_first_microbatch`` under Megatron-Core)
    weight_cast_per_forward: bool = False
    #: in a quantised precision, caches the activations its GEMMs' backward reads in that
    #: precision instead of 16 bits (``strategies.memory.saved_precision.cache_ratios``: every
    #: Linear's input, the MoE's SwiGLU input, the attention output in E5M6; a pending weight
    #: gradient's output gradients too). DeepSeek-V3 (arXiv 2412.19437 §3.3.3, "Low-Precision
    #: Activation"); False: the 16-bit table (Transformer Engine's saved fp8 inputs:
    #: ``te_linears``, ``memory.saved_precision.expert_input_bytes``; docs/memory.md)
    fp8_activation_cache: bool = False
    #: HBM bytes per score element the stack spends adding ALiBi's bias into the scores of the
    #: unfused attention path (models with ``position_embedding="alibi"``, no FlashAttention;
    #: ``counts.softmax_bytes_fwd``): Megatron-DeepSpeed's ``baddbmm(alibi, q, k^T, beta=1)``
    #: copies the expanded ``(b·np, 1, s)`` bias into the score tensor (write 2) and the GEMM
    #: reads it back as its ``C`` (read 2): 4.0; 0: not read for the stack
    alibi_score_bytes: float = 0.0
    #: HBM bytes per position of the ``s_q × s_k`` causal mask the stack builds on every
    #: forward call of its unfused attention path (no FlashAttention), once per call whatever
    #: the batch and heads: Transformer Engine's ``UnfusedDotProductAttention`` rebuilds it in
    #: ``get_full_mask`` (``megatron.TE_CAUSAL_MASK_BYTES``, docs/calibration.md §5.135); 0:
    #: the stack builds none per call (or not read for it)
    unfused_mask_bytes: float = 0.0
