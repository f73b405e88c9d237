"""The Megatron family's profiles: Megatron-LM 2021-22 (``MEGATRON_LM_2021``), Megatron-Core
with Transformer Engine (``MEGATRON_CORE``, the default), NeMo 2 / Megatron-Bridge (``NEMO``)
and DeepSeek's HAI-LLM (``HAI_LLM``, Megatron-Core's kernels assumed)."""
from __future__ import annotations

from dataclasses import replace

from strategies.cost.recompute import MODULES as RECOMPUTE_MODULES
from strategies.stacks.buckets import MODEL_BUCKET, NEMO_BUCKET
from strategies.stacks.expert_gemm import TE_GROUPED_GEMM, ExpertGemmLaunch
from strategies.stacks.passes import MEGATRON_CROSS_ENTROPY, LossPasses, StepPasses
from strategies.stacks.plan_defaults import StackFieldDefaults
from strategies.stacks.profile import LAUNCH_GAP_S, FrameworkProfile
from topologies.precision import DTYPES

#: why a Transformer Engine stack refuses ``fp8-rowwise`` (``topologies.precision``)
TORCHAO_ROWWISE_NOTE = ("Transformer Engine's recipes scale per tensor or per block (Megatron "
                        "--fp8-recipe delayed|tensorwise|blockwise|mxfp8); the per-row recipe "
                        "is torchao's, which torchtitan runs (--framework torchtitan)")

MEGATRON_LM_2021 = FrameworkProfile(
    name="megatron-lm-2021", dp_bucket=MODEL_BUCKET,
    description="Megatron-LM v2-v3 (Narayanan et al. 2021, Korthikanti et al. 2022): apex fused "
                "kernels, unfused softmax, blocking communication, main_grad.add_ per micro-batch",
    grad_accum_fusion=False, kernels_per_layer=20, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=False, default_overlap_grad_reduce=False,
    default_overlap_param_gather=False, default_tp_comm_overlap=False, default_recompute="full",
    zero_stages=(0, 1), zero_with_pp=1, context_parallel=False, expert_parallel=False,
    tp_comm_overlap=False, flash_attn=False, recompute_methods=("block", "uniform"),
    recompute_modules=("core_attn",), loss=MEGATRON_CROSS_ENTROPY,
    # Korthikanti et al.'s SP code reduce-scatters the input gradient beside the weight
    # gradient; Narayanan et al.'s April 2021 code all-reduced it blocking
    dgrad_overlap="sp",
    tp_end_collectives=True,   # §5.88
    qkv_split="torch",         # mpu.split_tensor_along_last_dim: torch.split (§5.167)
    precisions=("fp16", "bf16"),
    precision_source="Megatron-LM v2-v3 --fp16 / --bf16 (megatron/arguments.py, apex "
                     "mixed precision with megatron/optimizer's loss scaler)",
    precision_notes=tuple((d, "fp8 and fp4 came with Transformer Engine (2023 on): use "
                              "--framework megatron-core")
                          for d in DTYPES if d not in ("fp16", "bf16", "fp8-rowwise"))
    + (("fp8-rowwise", TORCHAO_ROWWISE_NOTE),),
    default_sources=(
        ("flash_attn", "no FlashAttention before 2023: Megatron-LM v2-v3 ran its fused "
                       "scale-mask-softmax (megatron/model/fused_softmax.py); FlashAttention "
                       "(Dao et al., May 2022) came with Transformer Engine"),
        ("overlap_grad_reduce", "gradients all-reduced after the last micro-batch's backward "
                                "(megatron/training.py, optimizer.reduce_model_grads)"),
        ("overlap_param_gather", "no parameter all-gather overlap (the distributed optimizer "
                                 "of 2022 gathers after the step)"),
        ("tp_comm_overlap", "no TP communication overlap (Transformer Engine userbuffers, 2023)"),
        ("recompute", "full-layer activation checkpointing (--checkpoint-activations, "
                      "Narayanan et al. 2021 §3.5)")),
    step=StepPasses(
        check_grad=False,
        sources=(
            ("zero_grad", "model.zero_grad_buffer() before each step zeroes the contiguous "
                          "main_grad buffer (megatron/model/distributed.py)"),
            ("scale_grad", "allreduce_gradients divides the buffer by the data-parallel size "
                           "before the all-reduce (buffer_.data /= dp)"),
            ("check_grad", "no per-bucket NaN check in 2021 (fp16's loss-scaler unscale is "
                           "not modelled)"),
            ("grad_norm", "clip_grad_norm_fp32, amp_C.multi_tensor_l2norm (--clip-grad 1.0)"),
            ("param_copy", "_copy_main_params_to_model_params after the step"),
            ("tied_reduce", "training.py all-reduces word_embeddings' gradient across the "
                            "first and last stages"))))

#: HBM bytes per ``s_q × s_k`` position of the causal mask Transformer Engine's unfused
#: attention builds on each forward call (``UnfusedDotProductAttention.forward`` →
#: ``get_full_mask``, ``dot_product_attention/utils.py`` L1090-1122 at bee4649c15a7, NeMo
#: v2.3.0's pin, ``attention/dot_product_attention/utils.py`` L1099-1131 at v2.3; called at
#: ``attention.py`` L3851 / ``backends.py`` L221; ``attention_mask`` None, causal): the int32
#: ``arange`` difference (write 4), ``swa_left``/``swa_right`` (read 4 + write 4 each), each
#: comparison (read 4 + write 1) and its ``torch.where(·, 1, 0)`` into int64 (read 1 + write
#: 8), twice, the int64 difference (read 16 + write 8) and ``logical_not`` into bool (read 8 +
#: write 1): 81 (docs/calibration.md §5.135). The fused softmax's reads of the mask are not
#: counted: one ``s_q × s_k`` bool every head reads again, its HBM share set by L2 reuse
TE_CAUSAL_MASK_BYTES = 4.0 + 2 * (4 + 4) + 2 * ((4 + 1) + (1 + 8)) + (16 + 8) + (8 + 1)

MEGATRON_CORE = FrameworkProfile(
    name="megatron-core",
    precisions=tuple(d for d in DTYPES if d != "fp8-rowwise"),
    precision_notes=(("fp8-rowwise", TORCHAO_ROWWISE_NOTE),),
    description="Megatron-Core / NeMo 2023+ with Transformer Engine: fused kernels, "
                "FlashAttention, gradient-accumulation fusion, DP and TP communication overlap",
    grad_accum_fusion=True, kernels_per_layer=16, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=True, default_overlap_grad_reduce=True,
    default_overlap_param_gather=True, default_tp_comm_overlap=True, ep_overlap=True,
    # selective core_attn reruns the fused attention forward: Attention.forward wraps
    # Transformer Engine's DotProductAttention in _checkpointed_attention_forward
    # (tensor_parallel.checkpoint) whatever the backend, and TransformerConfig only warns
    # that a fused kernel needs no core_attn recompute (docs/calibration.md §5.188)
    recompute_flash_fwd=True,
    # --num-distributed-optimizer-instances (distributed optimizer sharded over dp·cp/R);
    # routed experts over the expert-data-parallel group's R-th, the instances all-reduce
    # (core/parallel_state.py _INTRA/_INTER_PARTIAL_EXPERT_DATA_PARALLEL_GROUP, d98e8a6).
    # ZeRO-3: Megatron-FSDP's HSDP (use_megatron_fsdp, data_parallel_sharding_strategy
    # optim_grads_params sharded within one of num_distributed_optimizer_instances groups;
    # distributed/distributed_data_parallel_config.py outer_dp_sharding_strategy L165-209,
    # fsdp/mcore_fsdp_adapter.py L420, L670, d98e8a6), as Megatron-Bridge runs Nemotron 3
    # Ultra (perf_recipes/nemotronh/common.py L150-175 at 4ab94dfad; docs/calibration.md
    # §5.150: its outer "optim" sharding of the optimizer states across the instances is
    # priced as the replicas' all-reduce and its memory as the shard group's)
    hybrid_zero=(1, 3), hybrid_ep=True,
    # --cp-comm-type p2p (default) | all_gather | a2a (transformer_config.py cp_comm_type
    # L1030, d98e8a6; a2a: Transformer Engine's AttnFuncWithCPAndQKVOA2A, from TE v1.11,
    # NVIDIA/TransformerEngine#1160; a2a+p2p: --hierarchical-context-parallel-sizes, TE >= 1.12):
    # docs/calibration.md §5.134, §5.185, §5.189
    cp_comms=("p2p", "all_gather", "a2a", "a2a+p2p"),
    overlap_p2p_comm=True,
    moe_dispatchers=("alltoall", "deepep", "hybridep"), cuda_graph=True, eager_variants=True,
    param_gather_with_optimizer=True, activation_offload=True,
    grouped_mlp_casts=True, quant_padding=True, expert_gemm_launch=TE_GROUPED_GEMM,
    te_amax_reduction=True, te_linears=True,                 # §5.113
    mlp_act_casts=True,                                      # §5.118
    qkv_split="te",                                          # §5.167
    unfused_mask_bytes=TE_CAUSAL_MASK_BYTES,                 # §5.135
    recompute_methods=("block", "uniform"), recompute_modules=RECOMPUTE_MODULES,
    loss=MEGATRON_CROSS_ENTROPY, tp_end_collectives=True,   # §5.88
    sp_shard_whole_gemms=True,                              # §5.99
    default_sources=(
        ("flash_attn", "Transformer Engine's fused attention (Megatron-Core "
                       "--attention-backend auto, NeMo 2 recipes)"),
        ("overlap_grad_reduce", "NeMo performance recipes and Megatron-Core's README set "
                                "--overlap-grad-reduce (DistributedDataParallelConfig)"),
        ("overlap_param_gather", "NeMo performance recipes and Megatron-Core's README set "
                                 "--overlap-param-gather"),
        ("tp_comm_overlap", "NeMo performance recipes turn TP communication overlap on "
                            "(tp_comm_overlap=True with the userbuffers configs, with TP and SP)"),
        ("recompute", "no recomputation unless the recipe names it")),
    step=StepPasses(sources=(
        ("zero_grad", "zero_grad_buffer: _ParamAndGradBuffer.reset, grad_data.zero_() "
                      "(megatron/core/distributed/param_and_grad_buffer.py)"),
        ("scale_grad", "start_grad_sync: bucket.grad_data *= gradient_scaling_factor (1/dp) "
                       "unless --ddp-average-in-collective (off by default; NeMo 2 and "
                       "Megatron-Bridge recipes turn it on: the nemo profile)"),
        ("check_grad", "start_grad_sync: check_grads, grad_data.norm(p=2) per bucket "
                       "(--check-for-nan-in-loss-and-grad, on by default)"),
        ("grad_norm", "get_grad_norm_fp32, multi_tensor_l2norm over the main gradients "
                      "(--clip-grad 1.0); the clip multiply only when the norm exceeds it"),
        ("param_copy", "_copy_main_params_to_model_params, _multi_tensor_copy_this_to_that "
                       "(megatron/core/optimizer/optimizer.py)"),
        ("tied_reduce", "finalize_model_grads: _allreduce_word_embedding_grads over the "
                        "embedding group (first and last stage)"))))

NEMO = replace(
    MEGATRON_CORE, name="nemo", dp_bucket=NEMO_BUCKET,
    # the recipes' optimizer is Megatron-Core's distributed optimizer (ZeRO-1)
    field_defaults=StackFieldDefaults(
        zero=1, zero_with_pp=1,
        zero_source="the distributed optimizer: NVIDIA/NeMo 06cca550a nemo/collections/llm/"
                    "recipes/optim/adam.py:44 use_distributed_optimizer=True"),
    # NeMo 2's model configs set cross_entropy_loss_fusion=True (GPTConfig, NemotronConfig in
    # nemo/collections/llm/gpt/model/): Megatron's jit-fused path, whose passes depend on what
    # the fuser merges and are not counted here, so the assumed three passes each way are kept
    loss=LossPasses(),
    # ... and its tp all-reduces are the max and the concatenated [target logit, sum of
    # exponentials] (core/fusions/fused_cross_entropy.py, §5.88)
    tp_loss_allreduces=(1, 2),
    # MegatronCommOverlapCallback (nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py)
    # and Megatron-Bridge's CommOverlapConfig (megatron/bridge/training/comm_overlap.py) warn
    # "Disabling tensor parallel communication overlap due to sequence_parallel=False" and
    # turn it off, where Megatron-LM's arguments.py refuses it
    tp_overlap_without_sp="disabled",
    description="NeMo 2 / Megatron-Bridge recipes on Megatron-Core: Megatron-Core's kernels "
                "and defaults, gradients averaged in the data-parallel collective "
                "(average_in_collective=True: no 1/dp scaling pass)",
    step=replace(MEGATRON_CORE.step, scale_grad=False, sources=tuple(
        (k, v) if k != "scale_grad" else
        ("scale_grad", "NeMo 2 recipes (nemo/collections/llm/recipes, the trainer's "
                       "DistributedDataParallelConfig) and Megatron-Bridge's set "
                       "average_in_collective=True: Megatron-Core's DDP then gives the dense "
                       "buckets gradient_scaling_factor 1.0 and reduces with ReduceOp.AVG, so "
                       "start_grad_sync skips grad_data *= 1/dp (expert buckets with ep > 1 "
                       "still scale by edp/dp: not modelled)")
        for k, v in MEGATRON_CORE.step.sources)))

HAI_LLM = replace(
    MEGATRON_CORE, name="hai-llm", loss=LossPasses(),   # HAI-LLM's code is not public
    field_defaults=StackFieldDefaults(
        zero=1, zero_with_pp=1,
        zero_source="'ZeRO-1 Data Parallelism', DeepSeek-V3 report §3.2",
        moe_dispatcher="deepep",
        moe_dispatcher_source="DeepSeek-V3 report §3.2.2: each token to at most 4 nodes, sent "
                              "once per destination node over IB and forwarded over NVLink "
                              "(node-deduplicated, the design released as DeepEP)"),
    unfused_mask_bytes=0.0,                              # (its attention path not read)
    dp_bucket=MODEL_BUCKET,
    description="DeepSeek's HAI-LLM (DeepSeek-V2/V3 reports): no tensor parallelism, "
                "zero-bubble or DualPipe pipelining, expert parallelism, ZeRO-1, fused kernels",
    default_tp_comm_overlap=False, default_recompute="none",
    schedules=("1f1b", "zb-h1", "dualpipe"), zero_stages=(0, 1), zero_with_pp=1, max_tp=1,
    hybrid_zero=(),
    context_parallel=False, cp_comms=(), tp_comm_overlap=False, ep_overlap=False,
    # report §3.2.2: a token crosses IB once per destination node, then NVLink to its GPUs
    # (node-deduplicated dispatch, the design DeepSeek released as DeepEP)
    moe_dispatchers=("alltoall", "deepep"), export="none", cuda_graph=False,
    param_gather_with_optimizer=False,
    # its expert kernels are not public (not Transformer Engine's GroupedLinear): fused casts
    grouped_mlp_casts=False, quant_padding=False, te_amax_reduction=False,
    te_linears=False, mlp_act_casts=False,
    # DeepSeek on its released V3 training profile (deepseek-ai/profile-data issue #2,
    # 2025-02-28): "we launch expert GEMMs (one kernel for one expert) on two streams
    # interleavely", an earlier grouped GEMM than DeepGEMM's, kept for V3 training
    expert_gemm_launch=ExpertGemmLaunch(
        "multi_stream", 2, "deepseek-ai/profile-data issue #2 (DeepSeek, 2025-02-28): V3 "
                           "training launches one kernel per expert on two streams"),
    precisions=("bf16", "fp8-blockwise"),
    # DeepSeek-V3 report §3.3.3: activations cached in FP8 (E5M6 after the attention), the
    # AdamW moments in BF16 beside the FP32 master weights: 4 + 2 + 2 bytes per parameter
    fp8_activation_cache=True, optimizer_state_bytes=8.0,
    # §3.3.3 "Low-Precision Communication": FP8 dispatch (DeepEP's 1x128 fp32 scales), BF16
    # combine
    fp8_dispatch=True,
    precision_source="DeepSeek-V2 report (BF16 training) and DeepSeek-V3 report §3.3: "
                     "fine-grained FP8 (1x128 activation tiles, 128x128 weight blocks); "
                     "HAI-LLM's code is not public",
    precision_notes=tuple((d, "DeepSeek-V3's FP8 is block-wise: use --dtype fp8-blockwise")
                          for d in ("fp8", "fp8-delayed", "fp8-current", "mxfp8")),
    default_sources=(
        ("flash_attn", "fused attention kernels (DeepSeek-V3 report §3.2)"),
        ("overlap_grad_reduce", "DualPipe overlaps the data-parallel reductions with the "
                                "pipeline's last backward passes (DeepSeek-V3 report §3.2.1)"),
        ("overlap_param_gather", "ZeRO-1 gathers the updated parameters after the step"),
        ("tp_comm_overlap", "no tensor parallelism in training (DeepSeek-V3 report §3.2: "
                            "'without costly tensor parallelism')"),
        ("recompute", "only RMSNorm and MLA's up-projections are recomputed (report §3.2.3), "
                      "a small share of the FLOPs, charged as none")),
    step=replace(MEGATRON_CORE.step, sources=tuple(
        (k, "assumed as Megatron-Core's (HAI-LLM's code is not public)")
        for k in ("zero_grad", "scale_grad", "check_grad", "grad_norm", "param_copy",
                  "tied_reduce"))))
