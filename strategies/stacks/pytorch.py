"""The PyTorch stacks' profiles: eager PyTorch with FSDP or DDP (``PYTORCH_EAGER``: MosaicML
Composer), torchtitan (``TORCHTITAN``) and NeMo AutoModel's MoE path (``AUTOMODEL``), with
the ``torch.distributed.pipelining`` schedules torchtitan runs."""
from __future__ import annotations

from dataclasses import replace

from strategies.stacks.buckets import MODEL_BUCKET
from strategies.stacks.expert_gemm import GROUPED_MLP_GEMM, TORCH_GROUPED_MM
from strategies.stacks.passes import (COMPOSER_ADAMW_ELEMENTS, COMPOSER_CROSS_ENTROPY,
                                      TORCH_FOREACH_ADAMW_ELEMENTS, LossPasses, StepPasses)
from strategies.stacks.plan_defaults import StackFieldDefaults
from strategies.stacks.profile import LAUNCH_GAP_S, FrameworkProfile
from strategies.stacks.profile_fields import LAYOUT_WAYS

PYTORCH_EAGER = FrameworkProfile(
    name="pytorch-eager", dp_bucket=MODEL_BUCKET,
    description="PyTorch eager with FSDP or DDP (MosaicML Composer, torchtitan without compile): "
                "FlashAttention, unfused elementwise kernels, AccumulateGrad per micro-batch",
    grad_accum_fusion=False, kernels_per_layer=30, launch_gap_s=LAUNCH_GAP_S,
    loss=COMPOSER_CROSS_ENTROPY,
    default_flash_attn=True, default_overlap_grad_reduce=True,
    default_overlap_param_gather=True, default_tp_comm_overlap=False, attention_kernel="fa2",
    schedules=(), zero_stages=(0, 2, 3), max_tp=1, max_pp=1, context_parallel=False,
    group_microbatches=False,
    field_defaults=StackFieldDefaults(
        zero=3, zero_with_pp=2,     # (never read: no pipelining, max_pp 1)
        zero_source="FSDP FULL_SHARD: llm-foundry 8c8dd48f7 scripts/train/yamls/pretrain/"
                    "mpt-7b.yaml:92 sharding_strategy: FULL_SHARD"),
    # FSDP ShardingStrategy.HYBRID_SHARD / _HYBRID_SHARD_ZERO2, FSDP2's 2-D mesh (HSDP)
    hybrid_zero=(2, 3), replica_stream=True,
    expert_parallel=False, sequence_parallel=False, tp_comm_overlap=False,
    # DTensor's ColwiseParallel: the matmul saves the all-gathered input, no re-gather
    # (torchtitan and NeMo AutoModel inherit it); its input gradient is redistributed after
    # the matmul's backward computed both GEMMs: nothing beside the reduction
    sp_regather=False, dgrad_overlap="none",
    recompute=("none", "full"), export="llm-foundry", recompute_early_stop=True, layouts=(),
    precisions=("bf16", "fp16", "fp8", "fp8-delayed"),
    precision_source="Composer's precision amp_bf16, amp_fp16 or amp_fp8 "
                     "(composer/core/precision.py); amp_fp8 is Transformer Engine's "
                     "fp8_autocast with its default DelayedScaling recipe",
    precision_notes=(("fp8-rowwise", "torchao's float8 rowwise recipe is torchtitan's "
                                     "(--framework torchtitan)"),),
    pipeline_split="no pipeline parallelism",
    # FSDP1 with Composer's MixedPrecision over an fp32 model: FSDP2's state layout (the fp32
    # shard is the master, no persistent bf16 shard, the root kept gathered; the field's
    # sources); with max_pp 1 its pipelined-gradient rule never applies. docs/calibration.md
    # §5.46
    fsdp2=True,
    sharded_grad_passes=("flat_grad_cat", "reduce_cast", "predivide"),
    sharded_grad_sources=(
        ("flat_grad_cat", "FSDP1 (PyTorch 2.1, torch/distributed/fsdp/_flat_param.py "
                          "_get_unflat_views): a unit's weights are views made by torch.split "
                          "of the unsharded FlatParameter, so autograd's SplitWithSizesBackward "
                          "concatenates (at::cat) the per-weight gradients into the flat "
                          "gradient before its AccumulateGrad; Composer wraps with "
                          "use_orig_params=True (composer/trainer/dist_strategy.py, v0.16.4), "
                          "whose forward uses the same split views"),
        ("reduce_cast", "_post_backward_hook (torch/distributed/fsdp/_runtime_utils.py): "
                        "flat_param.grad.to(handle._reduce_dtype) when the gradient's dtype "
                        "differs; Composer's mixed_precision DEFAULT (composer/trainer/"
                        "mosaic_fsdp_utils.py get_mixed_precision, v0.16.4, the MP mode of "
                        "llm-foundry's benchmark tables) is param_dtype = the precision's "
                        "(bf16), reduce_dtype float32, buffer_dtype bf16"),
        ("predivide", "FSDP1's default hook reduce_scatter_hook (torch/distributed/algorithms/"
                      "_comm_hooks/default_hooks.py): grad.div_(gradient_predivide_factor) "
                      "before reduce_scatter_tensor; DefaultState._get_gradient_predivide_factor"
                      " is > 1 for every world size >= 2 (the post-divide runs on the 1/dp "
                      "shard, not charged)")),
    default_sources=(
        ("flash_attn", "FlashAttention (MosaicML llm-foundry attn_impl: flash; torchtitan "
                       "SDPA's flash backend)"),
        ("overlap_grad_reduce", "FSDP reduce-scatters each unit's gradients in its backward "
                                "hook; DDP reduces buckets during the backward"),
        ("overlap_param_gather", "FSDP prefetches the next unit's parameters "
                                 "(backward_prefetch, forward prefetch)"),
        ("tp_comm_overlap", "no TP communication overlap in eager PyTorch (async TP needs "
                            "torch.compile)"),
        ("recompute", "no activation checkpointing unless configured")),
    step=StepPasses(
        zero_grad=False, scale_grad=False, check_grad=False, clip_scale=True,
        param_copy=False, tied_reduce=False, adam_elements=COMPOSER_ADAMW_ELEMENTS,
        sources=(
            ("adam_elements", "Composer DecoupledAdamW.adamw (llm-foundry's MPT yamls: "
                              "decoupled_adamw, weight_decay 0): one Python loop over the "
                              "parameters, unfused: exp_avg.mul_ 2, .add_ 3, exp_avg_sq.mul_ 2, "
                              ".addcmul_ 3, sqrt 2, / 2, .add_(eps) 2, param.addcdiv_ 4"),
            ("zero_grad", "optimizer.zero_grad(set_to_none=True), PyTorch's default"),
            ("scale_grad", "the 1/dp average is taken by the reduce-scatter (not a pass over "
                           "the whole buffer)"),
            ("grad_norm", "torch.nn.utils.clip_grad_norm_ (torchtitan max_norm 1.0; Composer "
                          "gradient clipping)"),
            ("clip_scale", "clip_grad_norm_ multiplies every gradient by the clamped "
                           "coefficient (_foreach_mul_) every step"),
            ("param_copy", "FSDP keeps fp32 sharded weights and casts them in the all-gather"))))

#: ``torch.distributed.pipelining`` schedule (torchtitan's ``pipeline_parallel_schedule``) of
#: each of our schedules torchtitan runs (``strategies.stacks.rules``); the pipelining module's
#: other schedules have none of ours: ``LoopedBFS`` (breadth-first), ``InterleavedZeroBubble``
#: (ZB-1p over several chunks per rank, a fixed order; our ``zb-1p`` is one chunk per rank,
#: the paper's heuristic, and torchtitan gives a multi-stage schedule >= 2 chunks per rank)
TORCHTITAN_SCHEDULE_NAMES = (("gpipe", "GPipe"), ("1f1b", "1F1B"),
                             ("interleaved", "Interleaved1F1B"), ("zb-v", "ZBVZeroBubble"),
                             ("dualpipev", "DualPipeV"))
TORCHTITAN_SCHEDULES = tuple(ours for ours, _ in TORCHTITAN_SCHEDULE_NAMES)

#: torchtitan's ZeRO stage and sequence parallelism where a plan names none
#: (``strategies.stacks.plan_defaults``, whose docstring gives the sources)
TORCHTITAN_FIELD_DEFAULTS = StackFieldDefaults(
    zero=3, zero_with_pp=2,
    zero_source="FSDP2 over the data-parallel ranks, resharded after forward unless pipelined: "
                "torchtitan b5bcd76c6 config/configs.py:133 data_parallel_shard_degree=-1, "
                ":145 fsdp_reshard_after_forward='default', distributed/fsdp.py:128-131 "
                "default -> not pp_enabled",
    sp_with_tp=True,
    sp_source="torchtitan b5bcd76c6 config/configs.py:169 enable_sequence_parallel=True; "
              "v0.2.2's apply_tp always sequence-parallel",
    recompute="op",
    recompute_source="per-op selective activation checkpointing: torchtitan b5bcd76c6 "
                     "trainer.py:108-110 activation_checkpoint default_factory="
                     "SelectiveAC.Config, distributed/activation_checkpoint.py:185 SelectiveAC")

TORCHTITAN = replace(
    PYTORCH_EAGER, name="torchtitan",
    description="torchtitan (PyTorch FSDP2, eager): FlashAttention (SDPA), unfused elementwise "
                "kernels, AccumulateGrad per micro-batch, torch.distributed.pipelining schedules",
    schedules=TORCHTITAN_SCHEDULES, zero_stages=(0, 2, 3), zero_with_pp=2,
    max_tp=None, max_pp=None, context_parallel=True, expert_parallel=True,
    sequence_parallel=True, recompute=("none", "full", "op"), export="torchtitan",
    ddp_sole=True, ep_from_fsdp=True, field_defaults=TORCHTITAN_FIELD_DEFAULTS,
    # HSDP with EP: the experts' FSDP over efsdp = dp_shard·cp·tp/ep, replicated over
    # dp_replicate (distributed/parallel_dims.py sparse mesh (pp, dp_replicate, efsdp, ep);
    # models/qwen3/parallelize.py fully_shard over ["dp_replicate", "efsdp"], b5bcd76)
    hybrid_ep=True,
    # async TP (docs/calibration.md §5.50): torchtitan 820504e (the asyncTP benchmark's commit)
    # models/llama3/parallelize_llama.py: TP always shards the norms as SequenceParallel, the
    # attention and feed-forward inputs all-gathered once (Shard(1) -> Replicate) for wq, wk,
    # wv and w1, w3; with enable_async_tp it sets torch._inductor.config._micro_pipeline_tp
    # and enable_symm_mem_for_group over the TP mesh, and raises "Async TP requires
    # --training.compile" without compile; HEAD b5bcd76c6 config/configs.py CompileConfig
    # raises the same ("Async TP requires 'model' in --compile.components and
    # --compile.enable"); enable_async_tensor_parallel defaults to False
    tp_comm_overlap=True, tp_overlap="async-tp", tp_overlap_bwd_exposed=0.5,
    default_sources=tuple((k, v) if k != "tp_comm_overlap" else (
        "tp_comm_overlap", "async TP is off unless --compile.enable_async_tensor_parallel "
                           "(config/configs.py CompileConfig, default False); it needs "
                           "torch.compile")
        for k, v in PYTORCH_EAGER.default_sources),
    # v0.2.2 models/moe/moe.py GroupedExperts(use_grouped_mm=True): torch._grouped_mm, one
    # grouped kernel for all local experts (ATen's CUTLASS bf16bf16_grouped_mm) per GEMM,
    # whose tiles from every expert share its waves on sm_90 (docs/calibration.md §5.123)
    expert_gemm_launch=TORCH_GROUPED_MM,
    # torchtitan 8570415c3 (2025-06-05) on, HEAD b5bcd76c6 trainer.py train_step: one
    # pp_schedule.step() per gradient-accumulation step (global_batch_size / (local_batch_size
    # · dp) of them, each over the local batch's micro-batches), the optimizer once after;
    # 9dec370 (Dec 2024, the reference rows) had no accumulation: one step() per step
    # (docs/calibration.md §5.46)
    pipeline_flushes=True,
    # FSDP2 over the fp32 model (9dec370 train.py: meta init, model.to_empty, fp32;
    # parallelisms/parallelize_llama.py apply_fsdp: MixedPrecisionPolicy(bf16, fp32),
    # reshard_after_forward=False under pp), docs/calibration.md §5.32
    fsdp2=True,
    # torch.distributed.tensor.experimental.context_parallel (torchtitan
    # experimental.context_parallel_degree, Dec 2024); its Llama repeats K/V before SDPA
    cp_impl="torch", cp_kv_heads="query",
    # its ring runs SDPA's is_causal only (the flash op takes no mask; the efficient and
    # cuDNN ops raise "attn_bias is not supported yet": pytorch/pytorch 0123248a4
    # torch/distributed/tensor/experimental/_attention.py _scaled_dot_product_ring_*): no
    # window of either kind under cp > 1. FlexAttention's CP (the same file's
    # _ContextParallel.flex_input_fn, K/V all-gathered), which torchtitan b5bcd76c6 requires
    # for CP (models/common/decoder.py:173-181), is not modelled (docs/calibration.md §5.196)
    cp_window_impls=(("sliding", ()), ("chunked", ())),
    cp_sink_impls=(),   # nor SDPA any sink logit
    cp_chunk_source=None,   # cp_window_source says it for both kinds
    cp_window_source=("PyTorch's ring attention runs SDPA with is_causal only, no window mask "
                      "(FlexAttention's CP is not modelled)"),
    # models/llama/model.py and models/norms.py run as eager ops (no torch.compile)
    elementwise_kernels="eager",
    gather_copy_out=True,
    # 9dec370 and 2887250bb models/llama3/infra/parallelize.py apply_tp: the blocks' inputs
    # and outputs Shard(1) of [bs, seqlen, dim] (its own note: "we can accelerate Sequence
    # Parallel by folding (and unfolding) the batch dimension and the sequence dimension",
    # pull #437: "an extra aten.cat after each collective"); the fold landed in 73aed7f6c
    # (#4121, 2026-08-20), after every reference row (docs/calibration.md §5.80)
    tp_seq_dim_copies=True,
    # the embedding's and the output's TP collectives and loss_parallel's all-reduces
    # (9dec370 / 2887250bb apply_tp; torch/distributed/tensor/parallel/loss.py), §5.84
    tp_end_collectives=True,
    # torchtitan apply_tp with float8 tensorwise: torchao's Float8 TP styles (§5.84)
    torchao_float8_tp=True,
    # 9dec370 models/llama/model.py:158-163 wq/wk/wv and 248-253 w1/w3 are separate
    # nn.Linear (v0.2.2 models/llama3/model/model.py the same), §5.142
    separate_projections=True,
    precisions=("bf16", "fp8", "fp8-delayed", "fp8-current", "fp8-rowwise", "mxfp8"),
    precision_source="torchtitan's training.mixed_precision_param bfloat16 and its torchao "
                     "converters: float8 with dynamic (tensorwise, fp8-current) or, until "
                     "torchao removed it in 2025, delayed scaling (torchtitan 2024 "
                     "float8.scaling_type_input dynamic|delayed, the torchtitan paper's "
                     "runs); float8.recipe_name rowwise (fp8-rowwise: 820504e "
                     "components/quantization/float8.py Float8LinearConfig.from_recipe_name); "
                     "quantize.linear.mx mxfp8 (v0.2.2 components/quantization/mx.py)",
    precision_notes=(
        ("fp16", "torchtitan's mixed precision is bfloat16 or float32 "
                 "(training.mixed_precision_param)"),
        ("fp8-blockwise", "torchao's float8 recipes are tensorwise and rowwise, not "
                          "DeepSeek's 1x128/128x128 blocks"),
        ("nvfp4", "torchtitan v0.2.2 has no NVFP4 training converter")),
    # a run that says only "float8" ran tensorwise dynamic scaling: torchtitan 9dec370
    # (Dec 2024) config_manager.py:552-568 defaults float8.scaling_type_input/_weight/
    # _grad_output to "dynamic", float8.py:87 "only dynamic tensor scaling (the default) is
    # supported", and llama3_405b.toml's enable_fsdp_float8_all_gather /
    # precompute_float8_dynamic_scale_for_fsdp are dynamic-only; torchao removed delayed
    # scaling in 2025 (docs/calibration.md §5.142)
    unqualified_fp8="fp8-current",
    unqualified_fp8_source="torchtitan 9dec370 config_manager.py:552-568 "
                           "float8.scaling_type_input/weight/grad_output default 'dynamic' "
                           "(float8.py:87: only dynamic tensor scaling is supported)",
    recompute_note="its selective AC is per op (recompute=op) or every N-th layer "
                   "(distributed/activation_checkpoint.py), not Megatron's attention-core "
                   "recomputation",
    layouts=LAYOUT_WAYS,
    pipeline_split="module_fqns_per_model_part (any modules per chunk: a layout string, "
                   "first/last counts, slots or a count per rank); its default split counts "
                   "the embedding and the output as layers "
                   "(pipeline_parallel_first/last_stage_less_layers=1)",
    # train.py's loss_fn, F.cross_entropy(pred.flatten(0, 1).float(), labels), eager: the
    # backward's log_softmax_backward holds its saved fp32 output, the fp32 gradient nll_loss
    # wrote and its own fp32 result at once (the time passes stay LossPasses' assumption)
    loss=replace(LossPasses(), peak_bytes=12.0, peak_source=(
        "torchtitan 9dec370 (Dec 2024) train.py loss_fn: F.cross_entropy(pred.flatten(0, 1)"
        ".float(), labels.flatten(0, 1)), eager (loss_fn compile commented out), `del pred` "
        "before loss.backward(): forward 16-bit logits 2 + fp32 copy 4 + log_softmax output 4 "
        "= 10; backward saved log_softmax output 4 + nll_loss's fp32 gradient 4 + "
        "log_softmax_backward's fp32 result 4 = 12 bytes per element"),
        # tp > 1: train.py runs the loss under loss_parallel (enable_loss_parallel = not
        # training.disable_loss_parallel, default on), DTensor's custom handlers in
        # torch/distributed/tensor/parallel/loss.py on the vocabulary-sharded fp32 logits
        peak_bytes_sharded=16.0, peak_sharded_source=(
            "torchtitan 9dec370 train.py train_context(enable_loss_parallel) with tp > 1: "
            "torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward "
            "holds the saved fp32 log_softmax output x 4, grad_input = zeros_like(x) 4, and "
            "(grad_input + exp(x)) 4 while its product with grad_output 4 is written: 16 bytes "
            "per element (forward: 16-bit logits 2 + fp32 copy 4 + shifted 4 + result 4 = 14)")),
    sharded_grad_passes=("reduce_copy_in",),
    sharded_grad_sources=(
        ("reduce_copy_in", "FSDP2 foreach_reduce (torch/distributed/_composable/fsdp/"
                           "_fsdp_collectives.py): foreach_reduce_scatter_copy_in copies every "
                           "unsharded gradient (torch._chunk_cat) into the reduce-scatter input "
                           "in the reduce dtype (torchtitan mixed_precision_reduce float32); "
                           "no pre-divide for fp32/bf16 (_get_gradient_divide_factors: NCCL "
                           "averages), and no flat-gradient concatenation (per-parameter "
                           "sharding)"),),
    step=replace(PYTORCH_EAGER.step, adam_elements=TORCH_FOREACH_ADAMW_ELEMENTS, sources=tuple(
        (k, v) for k, v in PYTORCH_EAGER.step.sources if k != "adam_elements") + (
        ("adam_elements", "torch.optim.AdamW(foreach=True): torchtitan's --optimizer.fused "
                          "defaults to False, weight_decay 0.1; _multi_tensor_adamw: "
                          "_foreach_mul_(params) 2, _foreach_lerp_(exp_avgs) 3, "
                          "_foreach_mul_(exp_avg_sqs) 2, _foreach_addcmul_ 3, _foreach_sqrt 2, "
                          "_foreach_div_ 2, _foreach_add_(eps) 2, _foreach_addcdiv_ 4"),)))

#: NVIDIA-NeMo/Automodel at 89e3a9fdd (2025-10-06, the commit of its performance summary's MoE
#: rows, docs/calibration.md §5.31, §5.38); every path below is under ``nemo_automodel/``
AUTOMODEL_SOURCE = "NVIDIA-NeMo/Automodel 89e3a9fdd (2025-10-06)"

AUTOMODEL = replace(
    TORCHTITAN, name="automodel",
    description="NeMo AutoModel's PyTorch path for MoE models (FSDP2 over a bf16-built model, "
                "Transformer Engine linear/RMSNorm/attention, DeepEP, "
                "torch.distributed.pipelining): no tensor or context parallelism",
    # components/moe/parallelizer.py parallelize_model asserts "Tensor parallelism not
    # supported for DeepSeek v3 model" and "Context parallelism not supported" (tp = cp = 1)
    max_tp=1, context_parallel=False, sequence_parallel=False,
    tp_comm_overlap=False, tp_overlap="userbuffers", tp_overlap_bwd_exposed=0.0,
    # apply_fsdp: fully_shard(..., reshard_after_forward=not pp_enabled): ZeRO-3 without
    # pipelining, ZeRO-2 (parameters kept gathered) with it; no DDP on this path
    zero_stages=(2, 3), zero_with_pp=2, ddp_sole=False, zero_follows_pp=True, hybrid_zero=(),
    field_defaults=StackFieldDefaults(
        zero=3, zero_with_pp=2,
        zero_source="components/moe/parallelizer.py apply_fsdp: fully_shard(..., "
                    "reshard_after_forward=not pp_enabled), always"),
    # components/distributed/fsdp2.py FSDP2Manager: assert dp_size % ep_size == 0, the moe
    # mesh (pp, ep_shard = dp/ep, ep) over the data-parallel ranks
    ep_from_fsdp=False, ep_in_dp=True,
    # components/distributed/pipelining/functional.py build_pipeline_schedule:
    # torch.distributed.pipelining's get_schedule_class (torchtitan's set)
    schedules=TORCHTITAN_SCHEDULES,
    # apply_ac: ptd_checkpoint_wrapper per decoder block (full; its ignore_router policy keeps
    # only the router's mm, read as full)
    recompute=("none", "full"), recompute_note="apply_ac wraps whole decoder blocks "
                                               "(ptd_checkpoint_wrapper): full only",
    # components/moe/layers.py: backend.enable_deepep -> GroupedExpertsDeepEP with
    # MoEFlexTokenDispatcher(moe_enable_deepep=True); without it GroupedExperts gathers the
    # tokens over the EP group (DTensor full_tensor), a path not modelled: "alltoall" stands
    # in for it
    moe_dispatchers=("alltoall", "deepep"),
    # GroupedExpertsDeepEP (components/moe/layers.py): grouped_gemm's ops.gmm, one cuBLAS
    # GEMM per expert on 4 streams (the non-DeepEP GroupedExperts loops over its experts)
    expert_gemm_launch=GROUPED_MLP_GEMM,
    # TE's DotProductAttention (backend attn: te) is the chip's fused kernel
    attention_kernel="native",
    # the blocks' own eager ops around Transformer Engine's RMSNorm (backend rms_norm: te in
    # every benchmark config; components/moe/utils.py initialize_rms_norm_module) and TE's
    # attention, not torchtitan's eager norms and repeat_kv (docs/calibration.md §5.157)
    elementwise_kernels="eager_te",
    # NemotronV3Mamba2Mixer (components/models/nemotron_v3/layers.py L394-408 at cb9765441)
    # passes rmsnorm_weight and outproj_weight to mamba_split_conv1d_scan_combined without
    # CP: MambaSplitConv1dScanCombinedFn saves zxbcdt and out_x (mamba_ssm v2.2.6
    # ssd_combined.py l.835-836) and recomputes the norm's output for out_proj's weight
    # gradient (recompute_output): one d_inner tensor (memory.mixer_saved)
    mamba_saved_d_inner=1,
    # bf16-built model (components/models/{deepseek_v3,qwen3_moe}/model.py:
    # dtype=get_dtype(config.torch_dtype, torch.bfloat16), initialize_weights(dtype=bf16)):
    # FSDP2's shard is bf16 and is the parameter torch.optim.Adam updates; m and v follow its
    # dtype: master 2 + m 2 + v 2 (docs/calibration.md §5.32, §5.38)
    optimizer_state_bytes=6.0, master_bytes=2.0,
    # recipes/llm/train_ft.py _run_train_optim_step, recipes/llm/benchmark.py run_benchmark:
    # schedule.step() once per gradient-accumulation step of local_batch_size sequences
    # (strategies.flushes, docs/calibration.md §5.43); train_ft.py asserts pp micro-batches
    # per flush
    pipeline_flushes=True, flush_needs_pp_microbatches=True,
    precisions=("bf16",), unqualified_fp8="fp8", unqualified_fp8_source="",
    # its model code (components/models/*) was not read for fused projections: priced fused
    separate_projections=False,
    precision_source="the benchmark configs' bf16 runs (model built in "
                     "config.torch_dtype, bf16 default; components/moe/parallelizer.py "
                     "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)); fp8 not read",
    precision_notes=(),
    export="none",
    pipeline_split="module_fqns_per_model_part (components/distributed/pipelining/"
                   "functional.py pipeline_model: any modules per stage); its default "
                   "generate_hf_model_fqn_per_model_part gives the first num_layers % stages "
                   "stages one layer more, the embedding to the first and norm and head to "
                   "the last",
    default_sources=(
        ("flash_attn", "Transformer Engine DotProductAttention (backend attn: te)"),
        ("overlap_grad_reduce", "FSDP2 reduce-scatters each block's gradients in its "
                                "post-backward hook"),
        ("overlap_param_gather", "FSDP2 prefetches the next block's all-gather"),
        ("tp_comm_overlap", "no tensor parallelism (moe/parallelizer.py asserts tp = 1)"),
        ("recompute", "activation_checkpointing: false unless the config sets it")))
