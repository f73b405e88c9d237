"""``StackLimits``: the plan features a stack runs (schedules, ZeRO stages, parallelisms and
their combinations, batch and pipeline-flush rules, dispatchers, recomputation modes,
pipeline layouts, precisions), each a base field of ``FrameworkProfile`` that
``strategies.stacks.rules.stack_rules`` turns into a refusal naming the stack."""
from __future__ import annotations

from dataclasses import dataclass

from strategies.stacks.profile_fields import LAYOUT_WAYS
from topologies.precision import DTYPES


@dataclass(frozen=True)
class StackLimits:
    """The ``FrameworkProfile`` fields that say which plans the stack runs (its limits)."""

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
    max_tp: int | None = None
    max_pp: int | None = None
    context_parallel: bool = True
    #: the K/V exchanges a plan may choose (plan ``cp_comm``, ``strategies.plan.choices.CP_COMMS``),
    #: each run as ``plan.choices.CP_IMPL_OF``: Megatron-Core's ``--cp-comm-type`` p2p and
    #: all_gather and a2a (``TransformerConfig.cp_comm_type``, Transformer Engine's
    #: ``AttnFuncWithCPAndKVP2P``, ``AttnFuncWithCPAndKVAllGather`` and
    #: ``AttnFuncWithCPAndQKVOA2A``); () where the stack
    #: runs only its own (``cp_impl``)
    cp_comms: tuple[str, ...] = ()
    #: the exchanges (``FrameworkProfile.cp_impl`` values) under which the stack runs
    #: windowed attention layers with ``cp > 1``, per window kind (``ModelSpec.window_kind``);
    #: a kind not listed is not limited. Transformer Engine's (the default): a sliding window
    #: only over its all-gather and all-to-all paths (``attn_forward_func_with_cp`` asserts
    #: ``cp_comm_type in ["a2a", "all_gather"]`` for ``window_size`` other than (-1, 0) and
    #: (-1, -1): NVIDIA/TransformerEngine d0067d0 ``transformer_engine/pytorch/attention/
    #: dot_product_attention/context_parallel.py:5054-5060``, since v1.11, 40dda924a, #1160);
    #: ``strategies.stacks.cp_windows`` (docs/calibration.md §5.196)
    #: A chunked window (Llama 4's ``attention_chunk_size``) over none: Megatron-Core
    #: (d98e8a64d) has no chunked attention and Transformer Engine (d0067d0) no chunk mask
    #: (its ``window_size`` is a band); NeMo's and Megatron-Bridge's ``Llama4SelfAttention``
    #: (``llama4_utils.py``) fold the rank's chunks into the batch (``chunkify``) before TE's
    #: attention, whose exchange then joins the CP ranks' folded chunks as one sequence
    #: (``cp_chunk_source``; docs/cli.md, `--framework`)
    cp_window_impls: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("sliding", ("allgather", "a2a")), ("chunked", ()))
    #: the exchanges under which the stack runs attention sinks (``ModelSpec.attention_sinks``,
    #: gpt-oss; Megatron-Core ``softmax_type="learnable"``) with ``cp > 1``: Transformer
    #: Engine asserts ``softmax_type == "vanilla" or cp_comm_type == "a2a"``
    #: (``context_parallel.py:5065-5067`` at d0067d0; ``softmax_type`` from TE 2.8); None:
    #: not read (no source)
    cp_sink_impls: tuple[str, ...] | None = ("a2a",)
    #: the source of ``cp_window_impls``, as the refusal states it
    cp_window_source: str = ("Transformer Engine runs a sliding window under context "
                             "parallelism only with cp_comm_type a2a or all_gather "
                             "(attn_forward_func_with_cp asserts it)")
    #: the source of ``cp_window_impls``'s chunked entry, as the refusal states it (None:
    #: ``cp_window_source`` says it)
    cp_chunk_source: str | None = (
        "Megatron-Core has no chunked attention and Transformer Engine's window_size cannot "
        "express one; NeMo's Llama4SelfAttention folds each rank's chunks into the batch "
        "before Transformer Engine's attention, whose context-parallel exchange (any "
        "cp_comm_type) then joins the ranks' folded chunks as one sequence, not Llama 4's "
        "chunk mask")
    #: runs a chunked-window model with ``cp > 1`` over any exchange where the sequence fits
    #: one chunk (``seq_length <= sliding_window``): Llama 4's mask is then the causal one.
    #: Megatron-Bridge 067f987d ``llama4_utils.py`` L295-299 folds only where the rank's
    #: tokens exceed ``attention_chunk_size``, so Transformer Engine's exchange runs causal
    #: attention over the whole sequence; torchtitan v0.2.2's Llama 4 runs CP with SDPA only
    #: (``models/llama4/model/args.py`` L79-87), whose ``is_causal`` is that mask. False:
    #: the stack refuses the chunked layers under CP whatever the length
    cp_chunk_fits: bool = True
    expert_parallel: bool = True
    sequence_parallel: bool = True
    tp_comm_overlap: bool = True
    #: what the stack does with TP overlap asked for with ``tp > 1`` and no sequence
    #: parallelism (``TP_OVERLAP_WITHOUT_SP``): ``"refused"`` (Megatron-LM
    #: ``megatron/training/arguments.py`` ``validate_args`` asserts ``--sequence-parallel``
    #: for ``--tp-comm-overlap``; async TP exists only between SP collectives): ``stack_rules``
    #: refuses it; ``"disabled"`` (NeMo 2's ``MegatronCommOverlapCallback`` and
    #: Megatron-Bridge's ``CommOverlapConfig`` log a warning and set ``tp_comm_overlap=False``):
    #: the plan runs without it (``rules.stack_tp_overlap``). The stacks' default overlap holds
    #: only with sp either way (``plan.parse.tp_overlap_default``)
    tp_overlap_without_sp: str = "refused"
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
    #: token dispatchers the stack runs (plan ``moe_dispatcher``; ``plan.DISPATCHERS``)
    moe_dispatchers: tuple[str, ...] = ("alltoall",)
    #: captures the whole training step in one CUDA graph (plan ``cuda_graph``; Megatron-Core's
    #: ``--cuda-graph-impl full_iteration``, docs/user-guide/features/cuda_graph.md)
    cuda_graph: bool = False
    #: runs Megatron-Core's ``--overlap-param-gather-with-optimizer-step`` (plan
    #: ``param_gather_with_optimizer``; ``stack_rules`` holds its limits; off unless the plan
    #: sets it, as Megatron-Core's ``OptimizerConfig`` and Megatron-Bridge's
    #: ``CommOverlapConfig``, docs/calibration.md §5.200)
    param_gather_with_optimizer: bool = False
    #: runs Megatron-Core's fine-grained activation offloading (plan ``offload_modules``;
    #: ``--fine-grained-activation-offloading``, Megatron-Core from core_v0.16.0, b97184db56;
    #: ``strategies.cost.offload``; ``stack_rules`` holds its limits), and its layer-level
    #: ``--cpu-offloading-num-layers`` (plan ``cpu_offloading_num_layers``,
    #: ``strategies.cost.layer_offload``)
    activation_offload: bool = False
    flash_attn: bool = True
    recompute: tuple[str, ...] = ("none", "selective", "full")
    #: what the stack's own recomputation is, where a mode it lacks has a near equivalent
    #: (named in the ``recompute`` refusal)
    recompute_note: str = ""
    #: methods of partial full recomputation (``recompute_layers``) the stack runs
    recompute_methods: tuple[str, ...] = ()
    #: modules it can recompute selectively by name (``recompute_modules``)
    recompute_modules: tuple[str, ...] = ()
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
