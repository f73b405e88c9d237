"""``StackComm``: how a stack runs tensor, sequence, context, pipeline and expert-parallel
communication (TP overlap and what it leaves exposed, the sequence-parallel gathers and
their copies, the context-parallel K/V exchange, the pipeline's p2p streams, the MoE
dispatch precision), base fields of ``FrameworkProfile``."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StackComm:
    """The ``FrameworkProfile`` fields that say how the stack's model-parallel collectives run."""

    #: how the stack runs context parallelism: ``"ring"``, Transformer Engine's p2p ring
    #: (K/V sends hidden under the attention core, ``SystemConfig.cp_exposed_fraction``
    #: exposed), ``"allgather"``, K/V all-gathered before the attention core and their
    #: gradients reduce-scattered after it, exposed (``cp_exposed_fraction``), or
    #: ``"torch"``, PyTorch's ``context_parallel`` (all-gather rotater, fp32 merges and
    #: dK/dV ring: ``strategies.cost.ring_attention``)
    cp_impl: str = "ring"
    #: heads of the K/V block a context-parallel rank sends (``counts.sent_kv_heads``):
    #: ``"kv"``, the model's KV heads, or ``"query"`` where the model repeats K and V to every
    #: query head before attention
    cp_kv_heads: str = "kv"
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
    #: runs the interleaved schedule with ``overlap_p2p_comm``: each steady pipeline call is
    #: issued after a pass and waited for just before the next pass of the same kind, its
    #: transfers lone ops on NCCL's per-peer streams (``strategies.schedules.p2p_streams``;
    #: docs/calibration.md §5.63, §5.68). Megatron-LM ``arguments.py``: ``overlap_p2p_comm``
    #: on by default, off without virtual stages, ``batch_p2p_comm = not overlap_p2p_comm``;
    #: NeMo's ``MegatronCommOverlapCallback`` sets it when vp > 1. False: blocking batched
    #: calls (Megatron-LM 2021's ``batch_isend_irecv``, no such option; torch pipelining)
    overlap_p2p_comm: bool = False
    #: with ``overlap_p2p_comm``, the interleaved warm-up's and cool-down's calls are posted
    #: overlapped too (Megatron-Core >= core_v0.10.0 ``overlap_p2p_comm_warmup_flush``,
    #: default False, set by no NeMo or Megatron-Bridge recipe). False: each warm-up
    #: ``send_forward_recv_forward`` and cool-down ``send_backward_recv_backward`` is waited
    #: for at once, sends and receives (core_v0.13.0 ``schedules.py`` L1188-1215, L1575;
    #: ``p2p_communication._communicate(wait_on_reqs=True)``), only the steady state's
    #: overlapped (``strategies.schedules.interleaved.Interleaved.overlapped_actions``;
    #: docs/calibration.md §5.205, §5.207)
    overlap_p2p_comm_warmup_flush: bool = False
    #: in a quantised precision, dispatches the MoE's routed tokens in that precision with
    #: their scales, the combine in 16 bits (``counts.dispatch_element_bytes``: the
    #: all-to-all's bytes, the permutations' and the send buffer's). DeepSeek-V3 (arXiv
    #: 2412.19437 §3.3.3, "Low-Precision Communication"); False: 16-bit tokens both ways
    #: (Megatron-Core passes the hidden states to DeepEP's ``Buffer.dispatch`` as they are,
    #: builds DeepEP V2's ``ElasticBuffer`` with ``use_fp8_dispatch=False`` and asserts
    #: "HybridEP dispatcher does not support fp8 dispatch now":
    #: ``megatron/core/transformer/moe/fused_a2a.py``)
    fp8_dispatch: bool = False
