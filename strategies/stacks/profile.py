"""``FrameworkProfile``: the fixed properties of a training software stack that change step
time (the sources of each: the ``strategies.stacks`` package docstring and the field notes),
``LAUNCH_GAP_S`` and ``stack_system``, the system constants as a stack's costs read them."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from strategies.stacks.buckets import MCORE_BUCKET, BucketRule
from strategies.stacks.expert_gemm import ExpertGemmLaunch
from strategies.stacks.passes import LossPasses, StepPasses
from strategies.stacks.plan_defaults import StackFieldDefaults, check_field_defaults
from strategies.stacks.profile_fields import LAYOUT_WAYS, check_profile
from topologies.precision import DTYPES

LAUNCH_GAP_S = 3e-6   # seconds of GPU idle per kernel boundary (``strategies.stacks``)


@dataclass(frozen=True)
class FrameworkProfile:
    """What a training stack does underneath a plan.

    ``grad_accum_fusion``: the weight-gradient GEMM accumulates into the fp32 main gradient
    (no separate per-micro-batch add kernel). ``kernels_per_layer``: kernels one transformer
    layer's forward launches (the backward launches twice as many). ``launch_gap_s``: GPU idle
    seconds per kernel boundary. ``attention_kernel``: ``"native"`` or ``"fa2"``
    (``GPU.flash_efficiency``). ``recompute_early_stop``: full recomputation reruns a layer's
    forward only up to its last GEMM (PyTorch's non-reentrant checkpoint, ``strategies.stacks``).
    The ``default_*`` fields are the plan switches the stack uses
    unless a source says otherwise (``strategies.reference.cases`` reads them).
    """

    name: str
    description: str
    grad_accum_fusion: bool
    kernels_per_layer: int
    launch_gap_s: float
    default_flash_attn: bool
    default_overlap_grad_reduce: bool
    default_overlap_param_gather: bool
    default_tp_comm_overlap: bool
    attention_kernel: str = "native"
    default_recompute: str = "none"
    schedules: tuple[str, ...] = ("1f1b", "interleaved")
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    zero_with_pp: int = 3
    # the ZeRO stages the stack runs with hybrid sharding (plan dp_shard < dp; sources at the
    # profiles); () none
    hybrid_zero: tuple[int, ...] = ()
    #: runs hybrid sharding with expert parallelism (``ep > 1``): the routed experts' ZeRO
    #: shards over their expert grid within a replica, all-reduced across the replicas
    #: (``placement.expert_dp_group``, ``comm.dp_groups.replica_sum``; sources at the profiles)
    hybrid_ep: bool = False
    #: hybrid sharding's all-reduce across replicas runs on a stream of its own, beside the
    #: gathers and reduce-scatters (PyTorch FSDP2 ``FSDPCommContext.all_reduce_stream``, FSDP1
    #: ``_all_reduce_stream`` under HYBRID_SHARD: "run the HSDP all-reduces concurrently with
    #: all-gather/reduce-scatter"); False: after each reduce-scatter on the same stream
    #: (Megatron-Core's ``communication_stream``, RS then AR per bucket). ``replica_lane``
    replica_stream: bool = False
    max_tp: int | None = None
    max_pp: int | None = None
    context_parallel: bool = True
    #: how the stack runs context parallelism: ``"ring"``, Transformer Engine's p2p ring
    #: (K/V sends hidden under the attention core, ``SystemConfig.cp_exposed_fraction``
    #: exposed), ``"allgather"``, K/V all-gathered before the attention core and their
    #: gradients reduce-scattered after it, exposed (``cp_exposed_fraction``), or
    #: ``"torch"``, PyTorch's ``context_parallel`` (all-gather rotater, fp32 merges and
    #: dK/dV ring: ``strategies.cost.ring_attention``)
    cp_impl: str = "ring"
    #: the K/V exchanges a plan may choose (plan ``cp_comm``, ``strategies.plan.CP_COMMS``),
    #: each run as ``plan.CP_IMPL_OF``: Megatron-Core's ``--cp-comm-type`` p2p and all_gather
    #: (``TransformerConfig.cp_comm_type``, Transformer Engine's ``AttnFuncWithCPAndKVP2P`` and
    #: ``AttnFuncWithCPAndKVAllGather``); () where the stack runs only its own (``cp_impl``)
    cp_comms: tuple[str, ...] = ()
    #: heads of the K/V block a context-parallel rank sends (``counts.sent_kv_heads``):
    #: ``"kv"``, the model's KV heads, or ``"query"`` where the model repeats K and V to every
    #: query head before attention
    cp_kv_heads: str = "kv"
    #: the memory-bound kernels of a layer (``counts.elementwise_bytes_fwd``): ``"fused"``,
    #: Megatron's fused norm, bias-dropout-add, activation and rotary kernels, or ``"eager"``,
    #: the model's own eager PyTorch ops (torchtitan's Llama without torch.compile:
    #: ``counts.eager_elementwise_bytes_fwd``), or ``"compiled"``, the same ops under
    #: torch.compile (``counts.compiled_elementwise_bytes_fwd``; ``compiled``)
    elementwise_kernels: str = "fused"
    #: each ZeRO-3 all-gather is copied out of the gathered buffer into the parameters on the
    #: compute stream (FSDP2's per-parameter sharding: ``compute.gather_copy_out_time``)
    gather_copy_out: bool = False
    #: the sequence-parallel collectives gather and scatter the activations of ``[b, s, h]``
    #: along the sequence, dim 1 (torchtitan's ``Shard(1)`` TP plan before its batch fold,
    #: 73aed7f6c, 2026-08), so each runs a full-tensor ``cat`` on the compute stream:
    #: after an all-gather, before a reduce-scatter (PyTorch ``_functional_collectives.py``
    #: ``all_gather_tensor``/``reduce_scatter_tensor`` with ``gather_dim``/``scatter_dim``
    #: != 0); Megatron's ``[s, b, h]`` gathers along dim 0, no copy.
    #: ``compute.tp_layout_copy_time`` (docs/calibration.md §5.80)
    tp_seq_dim_copies: bool = False
    #: the TP collectives outside the blocks are priced: the embedding's reduce-scatter
    #: (forward) and all-gather (backward), the output layer's all-gather and reduce-scatter
    #: and the vocabulary-parallel loss's three fp32 all-reduces (torchtitan's
    #: ``tok_embeddings``/``output`` plan and ``loss_parallel``; ``cost.tp_ends``,
    #: docs/calibration.md §5.84; Megatron's ``VocabParallelEmbedding``, vocabulary-parallel
    #: output layer and ``vocab_parallel_cross_entropy``, §5.88); False: unpriced (stacks
    #: whose code is not read: JAX/XLA, plain PyTorch)
    tp_end_collectives: bool = False
    #: fp32 elements per token of each all-reduce over tp of the vocabulary-parallel loss's
    #: forward (``cost.tp_ends``): ``(1, 1, 1)`` the max, the target logit and the sum of
    #: exponentials apart (Megatron's ``_VocabParallelCrossEntropy``, torchtitan's
    #: ``loss_parallel``); ``(1, 2)`` Megatron's fused path (``cross_entropy_loss_fusion``,
    #: ``core/fusions/fused_cross_entropy.py``: the target logit and the sum concatenated
    #: into one all-reduce; NeMo 2's model configs). docs/calibration.md §5.88
    tp_loss_allreduces: tuple[int, ...] = (1, 1, 1)
    expert_parallel: bool = True
    sequence_parallel: bool = True
    tp_comm_overlap: bool = True
    #: how the stack overlaps TP communication with the GEMMs (plan ``tp_comm_overlap``):
    #: ``"userbuffers"``, Transformer Engine's (Megatron-Core ``--tp-comm-overlap``), or
    #: ``"async-tp"``, PyTorch's micro-pipelined TP (``torch/_inductor/fx_passes/
    #: micro_pipeline_tp.py`` rewrites ``all_gather -> mm`` into ``symm_mem.
    #: fused_all_gather_matmul`` and ``mm -> reduce_scatter`` into ``fused_matmul_reduce_
    #: scatter``, one chunk per TP rank copied over symmetric memory with ``copy_``, a copy
    #: engine's ``cudaMemcpyAsync``: no SMs taken). Async TP exists only in the compiled graph
    #: and between sequence-parallel collectives: ``stack_rules`` refuses it without ``sp``
    #: (``TP_OVERLAP_IMPLS``; docs/calibration.md §5.50)
    tp_overlap: str = "userbuffers"
    #: what the stack does with TP overlap asked for with ``tp > 1`` and no sequence
    #: parallelism (``TP_OVERLAP_WITHOUT_SP``): ``"refused"`` (Megatron-LM
    #: ``megatron/training/arguments.py`` ``validate_args`` asserts ``--sequence-parallel``
    #: for ``--tp-comm-overlap``; async TP exists only between SP collectives): ``stack_rules``
    #: refuses it; ``"disabled"`` (NeMo 2's ``MegatronCommOverlapCallback`` and
    #: Megatron-Bridge's ``CommOverlapConfig`` log a warning and set ``tp_comm_overlap=False``):
    #: the plan runs without it (``rules.stack_tp_overlap``). The stacks' default overlap holds
    #: only with sp either way (``plan.tp_overlap_default``)
    tp_overlap_without_sp: str = "refused"
    #: share of a layer's backward TP collectives (``tp_per_layer_bwd``, all-reduce
    #: equivalents) that TP overlap leaves exposed: 0, every one pipelined with its GEMM
    #: (Transformer Engine's ``LayerNormLinear`` runs QKV and fc1 as one GEMM each and
    #: overlaps its dgrad reduce-scatter: ``ub_overlap_rs_dgrad``, ``ub_bulk_wgrad``); 0.5 under
    #: async TP, whose pass fuses a reduce-scatter only when its input is one matmul's output
    #: (``_find_producer_matmul``: ``mm``, ``_scaled_mm`` or ``reshape(mm(reshape))``), and
    #: the backward's reduce-scatter of a sequence-parallel input's gradient is the sum of the
    #: dgrads of the layers that read it (wq + wk + wv, w1 + w3): its two reduce-scatters of
    #: the backward's two all-gathers and two reduce-scatters run as plain collectives. The
    #: one statement the estimate, the bound and the simulator read (``StageCosts``)
    tp_overlap_bwd_exposed: float = 0.0
    #: under sequence parallelism each column-parallel linear saves the local shard of the
    #: input it all-gathered and all-gathers it again in the backward for its weight
    #: gradient, issued before and overlapped with its data-gradient GEMM (Megatron-Core
    #: ``tensor_parallel/layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication``,
    #: Transformer Engine ``layernorm_linear.py``/``layernorm_mlp.py``/``linear.py``
    #: ``ln_out_needs_gather``, ``gather_along_first_dim(..., async_op=True)``; Korthikanti
    #: et al. 2022 §4.2.2). False: the stack saves the gathered input (PyTorch's DTensor
    #: ``ColwiseParallel``: the matmul keeps the all-gather's output; XLA decides).
    #: ``cost.stage.sp_regather_exposed`` (docs/calibration.md §5.70)
    sp_regather: bool = True
    #: which tensor-parallel backward paths reduce a column-parallel linear's data gradient
    #: asynchronously while its weight-gradient GEMM runs, waiting only before returning:
    #: ``"all"`` (the reduce-scatter under SP and the all-reduce without: Megatron-Core
    #: ``tensor_parallel/layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication.
    #: backward``, Transformer Engine ``linear.py``/``layernorm_linear.py``/
    #: ``layernorm_mlp.py``, ``async_op=True``), ``"sp"`` (only the SP reduce-scatter:
    #: Megatron-LM's April 2022 SP code, whose non-SP async all-reduce came in September 2021,
    #: after the 2021 runs; NVIDIA/Megatron-LM 16c90445e7) or ``"none"`` (blocking: BigScience's
    #: Megatron-DeepSpeed ``ColumnParallelLinear``; DTensor's ``ColwiseParallel`` redistributes
    #: the input gradient after the matmul's backward has computed both GEMMs; XLA not read).
    #: ``cost.stage.dgrad_reduce_hidden`` (docs/calibration.md §5.75)
    dgrad_overlap: str = "all"
    #: how tensor parallelism runs MLA's down projections (``linear_q_down_proj``,
    #: ``linear_kv_down_proj``): ``"replicated"`` (Megatron-Core core_v0.14 on, 720c8b40d8
    #: 2025-07-29, and before 1c425a8313: ``TELinear`` with ``parallel_mode="duplicated"``,
    #: no tp collective per micro-batch) or ``"column"`` (core_v0.12.0-v0.13.1, from
    #: 1c425a8313 2025-02-24 "Use TEColumnParallelLinear instead of TELinear in MLA down
    #: proj layers": each all-gathers the hidden state under SP and its latents are gathered
    #: over tp and re-split; ``cost.stage.attn_down_ops``, docs/calibration.md §5.85)
    mla_down_proj: str = "replicated"
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
    #: under sequence parallelism the GEMMs tensor parallelism leaves whole (the MoE router,
    #: Qwen2-MoE's shared-expert gate, MLA's replicated down projections) run on the rank's
    #: sequence shard, ``T/tp`` rows: Megatron-Core hands the MoE layer and the attention the
    #: SP shard (``moe/router.py`` ``TopKRouter.gating``: ``linear(input, weight)`` on the
    #: shard, the weight ``sequence_parallel``-marked; ``moe/shared_experts.py`` the gate on
    #: the layer's input; ``transformer/multi_latent_attention.py`` ``linear_q_down_proj``/
    #: ``linear_kv_down_proj`` as ``TELinear(parallel_mode="duplicated")`` on ``[s/TP, b,
    #: h]``, core_v0.12.0 lines 378-380, core_v0.14.0 on). False: on all ``T`` rows, the
    #: input gathered first (torchtitan v0.2.2 ``models/deepseek_v3/infra/parallelize.py``:
    #: the attention's input ``Replicate()``, ``wq_a``/``wkv_a`` ``NoParallel``;
    #: ``models/llama4/infra/parallelize.py`` ``apply_moe_ep_tp``: the MoE input
    #: ``Replicate()``, "replicate computation for the router"). ``counts.whole_gemm_split``
    #: (docs/calibration.md §5.99)
    sp_shard_whole_gemms: bool = False
    #: gives data-parallel replicas different micro-batch counts (plan ``group_microbatches``,
    #: docs/heterogeneous.md); False: every replica takes the same batch (torchtitan's
    #: ``train.py``, MaxText's ``per_device_batch_size``, Composer's
    #: ``device_train_microbatch_size`` are one number for every rank)
    group_microbatches: bool = True
    #: ZeRO-0 data parallelism (``dp > 1``) is a DDP that runs only as the sole parallelism:
    #: with ``cp = 1`` the plan must have ``tp = pp = 1`` (torchtitan v0.2.2
    #: ``models/llama3/infra/parallelize.py``: ``replicate`` over the ``dp_replicate`` mesh
    #: raises "DDP has not supported > 1D parallelism" unless it spans the world; with
    #: ``cp > 1`` FSDP over ``dp_shard x cp`` runs instead, HSDP with the replicas)
    ddp_sole: bool = False
    #: expert parallelism is carved from the FSDP ranks (torchtitan v0.2.2
    #: ``distributed/parallel_dims.py``: ``efsdp = dp_shard * cp * tp / (etp * ep)`` must be a
    #: whole mesh dimension, ``dp_shard`` = dp under ZeRO-2/3 and 1 under ZeRO-0; ``etp`` is 1
    #: or tp, asserted)
    ep_from_fsdp: bool = False
    #: FSDP2's resharding follows pipelining, not the plan: ZeRO-3 without pipelining, ZeRO-2
    #: (parameters kept gathered) with it (NeMo AutoModel 89e3a9fdd components/moe/
    #: parallelizer.py apply_fsdp: ``fully_shard(..., reshard_after_forward=not pp_enabled)``)
    zero_follows_pp: bool = False
    #: the ZeRO stage, sequence parallelism and recomputation the stack runs where a plan
    #: names none (``StackFieldDefaults``; sources in ``strategies.stacks.plan_defaults``)
    field_defaults: StackFieldDefaults = StackFieldDefaults()
    #: a pipeline's micro-batches per step (``gbs / (mbs * dp)``) must be a multiple of
    #: ``pp`` (MaxText ``configs/types.py``: ``num_pipeline_microbatches`` a multiple of the
    #: stages)
    microbatches_per_pp: bool = False
    #: runs its pipeline schedule once per local batch, so a step may hold several pipeline
    #: flushes (plan ``flushes`` > 1, ``strategies.flushes``): ``torch.distributed.pipelining``'s
    #: ``schedule.step()`` per gradient-accumulation step (NeMo AutoModel; torchtitan since
    #: 8570415c3, 2025-06-05, "Support gradient accumulation": ``train_step`` calls
    #: ``forward_backward_step``, one ``pp_schedule.step()``, per gradient-accumulation step);
    #: False: one schedule over the step's micro-batches (Megatron's ``forward_backward_func``)
    pipeline_flushes: bool = False
    #: needs at least ``pp`` micro-batches per pipeline flush (AutoModel 89e3a9fdd
    #: ``recipes/llm/train_ft.py``: ``assert pp_batch_size // pp_microbatch_size >= pp_size``;
    #: torchtitan's ``build_pipeline_schedule`` only warns)
    flush_needs_pp_microbatches: bool = False
    #: expert parallelism shards the batch as data parallelism does (``ep`` divides ``dp``):
    #: MaxText's ``expert`` mesh axis is one of the batch axes (base.yml ``logical_axis_rules``)
    ep_in_dp: bool = False
    #: runs Megatron-Core's combined 1F1B (plan ``ep_overlap``; ``stack_rules`` holds its limits)
    ep_overlap: bool = False
    #: runs the interleaved schedule with ``overlap_p2p_comm``: each steady pipeline call is
    #: issued after a pass and waited for just before the next pass of the same kind, its
    #: transfers lone ops on NCCL's per-peer streams (``strategies.schedules.p2p_streams``;
    #: docs/calibration.md §5.63, §5.68). Megatron-LM ``arguments.py``: ``overlap_p2p_comm``
    #: on by default, off without virtual stages, ``batch_p2p_comm = not overlap_p2p_comm``;
    #: NeMo's ``MegatronCommOverlapCallback`` sets it when vp > 1. False: blocking batched
    #: calls (Megatron-LM 2021's ``batch_isend_irecv``, no such option; torch pipelining)
    overlap_p2p_comm: bool = False
    #: token dispatchers the stack runs (plan ``moe_dispatcher``; ``plan.DISPATCHERS``)
    moe_dispatchers: tuple[str, ...] = ("alltoall",)
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
    #: captures the whole training step in one CUDA graph (plan ``cuda_graph``; Megatron-Core's
    #: ``--cuda-graph-impl full_iteration``, docs/user-guide/features/cuda_graph.md)
    cuda_graph: bool = False
    flash_attn: bool = True
    recompute: tuple[str, ...] = ("none", "selective", "full")
    #: what the stack's own recomputation is, where a mode it lacks has a near equivalent
    #: (named in the ``recompute`` refusal)
    recompute_note: str = ""
    #: methods of partial full recomputation (``recompute_layers``) the stack runs
    recompute_methods: tuple[str, ...] = ()
    #: modules it can recompute selectively by name (``recompute_modules``)
    recompute_modules: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    #: the launch-settings exporter the stack is launched with (one of
    #: ``strategies.launch.EXPORTS``; ``"none"``: paraplan has none: HAI-LLM's code is not
    #: public, NeMo AutoModel's YAML recipe has no exporter yet)
    export: str = "megatron"
    #: the stack's own implementation of a generic schedule name a plan gives
    #: (DeepSpeed's pipeline engine runs ``schedule=1f1b`` as its ``TrainSchedule``)
    schedule_impl: tuple[tuple[str, str], ...] = ()
    #: how ZeRO-3 gathers parameters: ``"bucketed"`` (a layer's worth at a time, prefetched
    #: behind compute: Megatron-FSDP, FSDP, XLA) or ``"per-tensor"`` (one host-synchronous
    #: all-gather per parameter tensor and one reduce-scatter per gradient, exposed:
    #: DeepSpeed v0.3.13-v0.5, 2021; ``strategies.cost.param_counts.zero3_tensor_gathers``)
    zero3_gather: str = "bucketed"
    #: parameters used between two uses of a tensor below which a per-tensor stack keeps it
    #: gathered (DeepSpeed ``stage3_max_reuse_distance``, default 1e9)
    zero3_reuse_params: float = 1e9
    #: where each ``default_*`` switch (``flash_attn``, ``overlap_grad_reduce``,
    #: ``overlap_param_gather``, ``tp_comm_overlap``, ``recompute``) comes from:
    #: ``(switch, source)``; the reference reader states it with every default it applies
    default_sources: tuple[tuple[str, str], ...] = ()
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
    #: recomputes the scores itself and nothing is rerun (the model's reading of Megatron's
    #: ``core_attn`` under FlashAttention)
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
    #: in a quantised precision, dispatches the MoE's routed tokens in that precision with
    #: their scales, the combine in 16 bits (``counts.dispatch_element_bytes``: the
    #: all-to-all's bytes, the permutations' and the send buffer's). DeepSeek-V3 (arXiv
    #: 2412.19437 §3.3.3, "Low-Precision Communication"); False: 16-bit tokens both ways
    #: (Megatron-Core passes the hidden states to DeepEP's ``Buffer.dispatch`` as they are,
    #: builds DeepEP V2's ``ElasticBuffer`` with ``use_fp8_dispatch=False`` and asserts
    #: "HybridEP dispatcher does not support fp8 dispatch now":
    #: ``megatron/core/transformer/moe/fused_a2a.py``)
    fp8_dispatch: bool = False
    #: optimizer state bytes per parameter, where the stack states them (None:
    #: ``SystemConfig.optimizer_state_bytes``, fp32 master and Adam moments, 12)
    optimizer_state_bytes: float | None = None
    #: bytes of the weight the optimizer updates (the master, inside ``optimizer_state_bytes``)
    #: where the stack builds its model in 16 bits (None: ``SystemConfig.master_bytes``, fp32
    #: 4): with ``fsdp2`` the memory model counts it under params (``stack_system``)
    master_bytes: float | None = None
    #: ZeRO-2/3 is PyTorch FSDP2 (``fully_shard``) over a model built in fp32 with
    #: ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, so the memory model
    #: (``strategies.memory.arrays.state_bytes_per_param``, docs/memory.md "FSDP2") holds:
    #: the fp32 shard is the optimizer's parameter (the master; no 16-bit shard: ZeRO-3
    #: ``16/d`` bytes per parameter, not ``18/d``); the root module's parameters (embedding,
    #: final norm, head) stay gathered from the forward to the backward under ZeRO-3 (FSDP2's
    #: root is not resharded after forward); and under ``torch.distributed.pipelining``
    #: (``pp > 1``) gradient sync is off for every micro-batch's backward, so each stage's
    #: gradients accumulate unsharded in the reduce dtype (fp32) until one reduce-scatter
    #: after the last backward (``grad_sync_once``: the time model reduces those gradients
    #: once per step too, ZeRO-1's path without overlap, ``grad_path``; docs/calibration.md
    #: §3.22, §5.32, §5.34). PyTorch FSDP1 with ``MixedPrecision(param_dtype=bf16)`` over an
    #: fp32 model (Composer) holds the same state: its sharded fp32 ``FlatParameter`` is the
    #: optimizer's parameter, the bf16 shard ``_mp_shard`` is allocated for the all-gather and
    #: freed after it (``torch/distributed/fsdp/_flat_param.py``
    #: ``_use_low_precision_shard``/``_free_low_precision_sharded_param``), and the root's
    #: parameters are not freed after forward (``_runtime_utils.py`` ``_post_forward_reshard``:
    #: ``not state._is_root``); docs/calibration.md §5.46
    fsdp2: bool = False
    #: the data-parallel gradient bucket rule (``BucketRule``; docs/calibration.md §5.86)
    dp_bucket: BucketRule = MCORE_BUCKET
    #: the stack stores its weights in fp32 only and casts a transient 16-bit copy inside each
    #: layer per use, at every ZeRO stage: the fp32 master is the one stored weight, no 16-bit
    #: copy is model state (``SystemConfig.weight_copies`` 0, ``stack_system``; MaxText
    #: ``configs/base.yml`` ``weight_dtype: float32`` beside ``dtype: bfloat16``, flax's
    #: ``promote_dtype`` casting the kernel in each layer's call; docs/calibration.md §5.46)
    master_only: bool = False
    #: the passes over each micro-batch's *unsharded* 16-bit weight gradient that the stack's
    #: sharded data parallelism (ZeRO >= 2 with dp > 1) runs before and around the gradient
    #: reduce-scatter (``SHARDED_GRAD_PASSES``; bytes: ``compute.sharded_grad_pass_bytes``);
    #: empty: none beyond the reduce-scatter itself (Megatron-Core's buffers, XLA)
    sharded_grad_passes: tuple[str, ...] = ()
    #: where each of ``sharded_grad_passes`` comes from, ``(pass, source)``
    sharded_grad_sources: tuple[tuple[str, str], ...] = ()
    #: DeepSpeed's ``BF16_Optimizer`` in bf16 runs with ZeRO <= 1 (``runtime/bf16_optimizer.py``,
    #: v0.6+): each micro-batch's 16-bit gradient is cast to fp32 and added into the fp32
    #: gradient (``BF16_ACCUM_BYTES`` per parameter instead of the main_grad add's), the fp32
    #: gradients are all-reduced over dp after the schedule (``_bf16_reduce_grads``, not
    #: reduce-scattered), then each rank updates its shard and all-gathers the 16-bit weights
    bf16_optimizer: bool = False
    #: the stack keeps each micro-batch's weight gradient in the parameter's 16-bit ``.grad``
    #: (autograd adds into it) and reduces it in 16 bits, unless its BF16_Optimizer runs
    #: (``comm_rules.stack_grad_bytes``; DeepSpeed's engine, v0.5.10 ``runtime/engine.py``
    #: ``communication_data_type`` fp16/bf16 under ZeRO, ``zero/stage_1_and_2.py``
    #: ``average_tensor``, ``allreduce_bucket``; docs/calibration.md §5.115)
    grad_in_param_dtype: bool = False
    #: whose buffers the stack's ZeRO-1/2 optimizer holds beside the model state: ``""``
    #: the default model's (Megatron's gradient buffer and buckets), ``"deepspeed"``
    #: DeepSpeed's ``DeepSpeedZeroOptimizer`` (v0.5.10 ``runtime/zero/stage_1_and_2.py``:
    #: ZeRO-1's flat reduce bucket, ZeRO-2's ipg bucket and gradient partitions, the step's
    #: fp32 gradient partition; ``strategies.memory.deepspeed_zero``, docs/calibration.md
    #: §5.119), read where the gradients are 16-bit (not under its BF16_Optimizer);
    #: ``"deepspeed-halved"`` the same with BigScience's Megatron-DeepSpeed's weight-decay
    #: parameters split in two optimizer groups (541b967f, 2022-02-17; §5.129)
    zero_buffers: str = ""
    #: how the stack's ZeRO-1 reduces the gradients over dp (``ZERO1_GRAD_REDUCES``):
    #: ``"reduce_scatter"`` into each rank's optimizer shard (Megatron's distributed
    #: optimizer), or ``"allreduce"`` of the whole gradient, every rank then stepping its
    #: shard and all-gathering the weights (DeepSpeed v0.5.10 ``DeepSpeedZeroOptimizer``
    #: with ``partition_grads`` off: ``reduce_ipg_grads`` → ``buffered_reduce_fallback(None,
    #: ...)`` → ``allreduce_bucket`` → ``dist.all_reduce``, in buckets of
    #: ``reduce_bucket_size``; ``comm_rules.full_grad_reduce``, docs/calibration.md §5.121)
    zero1_grad_reduce: str = "reduce_scatter"
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
    #: the ways of giving an uneven pipeline layout the stack runs (``LAYOUT_WAYS``;
    #: default: all, Megatron-Core's); ``stack_rules`` refuses the others
    layouts: tuple[str, ...] = LAYOUT_WAYS
    #: how the stack itself splits layers over pipeline stages (named in its refusals)
    pipeline_split: str = ("Megatron's --pipeline-model-parallel-layout (any count per rank), "
                           "--decoder-first/last-pipeline-num-layers, "
                           "--account-for-embedding/loss-in-pipeline-split")
    #: the training precisions (``--dtype``, ``topologies.precision.DTYPES``) the stack runs at
    #: the version the profile describes; ``check_precision`` refuses the others
    precisions: tuple[str, ...] = DTYPES
    #: where ``precisions`` comes from (the stack's code that selects each)
    precision_source: str = ("Megatron-Core --bf16/--fp16, --fp8-format/--fp8-recipe "
                             "delayed|tensorwise|blockwise|mxfp8, --fp4-format e2m1 "
                             "--fp4-recipe nvfp4 (megatron/training/arguments.py) through "
                             "Transformer Engine's recipes (transformer_engine.common.recipe)")
    #: the stack's near equivalent of a precision it lacks, ``(dtype, note)`` (named in the
    #: refusal)
    precision_notes: tuple[tuple[str, str], ...] = ()
    #: the per-tensor fp8 recipe the stack runs when a run says only "fp8"/"float8" (its
    #: default scaling; one of ``profile_fields.UNQUALIFIED_FP8``), which the reference reader
    #: gives such a row (``strategies.reference.cases``), and where that default is set
    unqualified_fp8: str = "fp8"
    unqualified_fp8_source: str = ""

    def optimizer_bytes_or(self, default: float) -> float:
        """The stack's optimizer state bytes per parameter, else ``default``."""
        return default if self.optimizer_state_bytes is None else float(self.optimizer_state_bytes)

    def default_source(self, switch: str) -> str:
        """The source of the stack's default for plan switch ``switch`` ("" if none)."""
        return dict(self.default_sources).get(switch, "")

    def schedule_for(self, name: str) -> str:
        """The schedule this stack runs for a plan's ``schedule=name``."""
        return dict(self.schedule_impl).get(name, name)

    def runnable_schedule(self, name: str) -> str:
        """``name`` if this stack runs it (or has no schedule list), else the first schedule
        it runs (MaxText: ``gpipe``): what a plan that names no schedule gets."""
        if self.schedules and self.schedule_for(name) not in self.schedules:
            return self.schedules[0]
        return name

    def plan_defaults(self) -> dict[str, bool]:
        """The plan switches this stack turns on by default (a plan that names a switch
        overrides it)."""
        return {"flash_attn": self.default_flash_attn,
                "overlap_grad_reduce": self.default_overlap_grad_reduce,
                "overlap_param_gather": self.default_overlap_param_gather,
                "tp_comm_overlap": self.default_tp_comm_overlap}

    def __post_init__(self) -> None:
        check_profile(self)
        check_field_defaults(self)


def stack_system(fw: FrameworkProfile | None, system: Any = None) -> Any:
    """The system constants as stack ``fw``'s costs read them: its bucket rule
    (``FrameworkProfile.dp_bucket``, where ``SystemConfig.bucket_params`` does not override
    it); ``SystemConfig.master_bytes``
    replaced by the stack's (``FrameworkProfile.master_bytes``, a model built in 16 bits) where
    it states one, ``SystemConfig.weight_copies`` 0 where it stores fp32 weights only
    (``FrameworkProfile.master_only``), an unset ``grad_buffer_bytes`` the stack's
    (``comm_rules.stack_grad_bytes``, as ``make_job`` sets it), ``deepspeed_zero`` 1 where
    its ZeRO optimizer is DeepSpeed's (``FrameworkProfile.zero_buffers``). The one rule the memory model
    (scalar and arrays) and the search read."""
    from strategies.cost.system import get_system
    from strategies.stacks.comm_rules import stack_grad_bytes
    sy = get_system(system)
    if fw is not None and not sy.grad_buffer_bytes and stack_grad_bytes(fw):
        sy = replace(sy, grad_buffer_bytes=stack_grad_bytes(fw))
    if fw is not None and (sy.bucket_floor_params, sy.bucket_per_dp_params) != (
            fw.dp_bucket.floor_params, fw.dp_bucket.per_dp_params):
        sy = replace(sy, bucket_floor_params=float(fw.dp_bucket.floor_params),
                     bucket_per_dp_params=float(fw.dp_bucket.per_dp_params))
    if fw is not None and fw.zero_buffers.startswith("deepspeed") and not sy.deepspeed_zero:
        sy = replace(sy, deepspeed_zero=2.0 if fw.zero_buffers == "deepspeed-halved" else 1.0)
    mb = None if fw is None else fw.master_bytes
    if fw is not None and fw.master_only and sy.weight_copies != 0.0:
        sy = replace(sy, weight_copies=0.0)
    return sy if mb is None or mb == sy.master_bytes else replace(sy, master_bytes=float(mb))
