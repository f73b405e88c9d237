"""Megatron-DeepSpeed's profile (``MEGATRON_DEEPSPEED``: BLOOM and the 2021-22 DeepSpeed-Megatron
runs) and the DeepSpeed facts its costs read (``BF16_ACCUM_BYTES``, ``ALIBI_BADDBMM_BYTES``)."""
from __future__ import annotations

from strategies.stacks.buckets import DEEPSPEED_BUCKET
from strategies.stacks.passes import MEGATRON_DEEPSPEED_CROSS_ENTROPY, StepPasses
from strategies.stacks.plan_defaults import StackFieldDefaults
from strategies.stacks.profile import LAUNCH_GAP_S, FrameworkProfile

#: bytes per parameter and micro-batch of DeepSpeed BF16_Optimizer's accumulation
#: ``hp_grad.add_(lp.grad.to(fp32))``: the cast reads 2 and writes a 4-byte temporary, the add
#: reads the fp32 gradient and the temporary and writes the fp32 gradient (2 + 4 + 4 + 4 + 4)
BF16_ACCUM_BYTES = 18.0

#: HBM bytes per score element of Megatron-DeepSpeed's ALiBi (bigscience-workshop/
#: Megatron-DeepSpeed ae6277f5, megatron/model/transformer.py ``ParallelAttention.forward``:
#: ``matmul_result = alibi[:b·np, :, :sk]``, shape ``(b·np, 1, sk)``, then ``torch.baddbmm(
#: matmul_result, q, k^T, beta=1.0, alpha=1/norm_factor)``): PyTorch's CUDA ``baddbmm``
#: expands the bias to ``(b·np, sq, sk)`` and copies it into the result before the GEMM
#: (aten/src/ATen/native/cuda/Blas.cpp, ``baddbmm_out_cuda_impl``: ``result.copy_(self)``
#: when ``beta != 0``; write 2), and the GEMM with ``beta = 1`` reads that result as its ``C`` (read 2). Without
#: ALiBi the same ``baddbmm`` runs with ``beta = 0`` on an empty tensor (no read).
ALIBI_BADDBMM_BYTES = 4.0

MEGATRON_DEEPSPEED = FrameworkProfile(
    name="megatron-deepspeed", dp_bucket=DEEPSPEED_BUCKET,
    description="Megatron-DeepSpeed (BLOOM, 2021-22 DeepSpeed-Megatron runs): Megatron's tensor "
                "parallelism under DeepSpeed's pipeline engine and ZeRO-1, main_grad.add_ per "
                "micro-batch",
    grad_accum_fusion=False, kernels_per_layer=20, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=False, default_overlap_grad_reduce=False,
    default_overlap_param_gather=False, default_tp_comm_overlap=False, default_recompute="full",
    schedules=("deepspeed-1f1b",), zero_stages=(0, 1, 2, 3), zero_with_pp=1,
    field_defaults=StackFieldDefaults(
        zero=1, zero_with_pp=1,
        zero_source="ZeRO stage 1: bigscience-workshop/Megatron-DeepSpeed 8387ae17c "
                    "README.md:305 ZERO_STAGE=1; BLOOM's bf16 ZERO_STAGE=0 runs the "
                    "BF16_Optimizer, 'its own zero stage 1 equivalent', tr11-176B-ml.slurm",
        recompute="full",
        recompute_source="every layer: bigscience-workshop/Megatron-DeepSpeed 8387ae17c "
                         "README.md:289 --checkpoint-activations in its GPT pretraining "
                         "example"),
    context_parallel=False, expert_parallel=False, sequence_parallel=False,
    tp_comm_overlap=False, flash_attn=False, export="deepspeed",
    # ColumnParallelLinear's backward all-reduces the input gradient blocking
    # (copy_to_tensor_model_parallel_region; bigscience-workshop/Megatron-DeepSpeed)
    dgrad_overlap="none",
    tp_end_collectives=True,   # §5.88
    # ParallelAttention splits with mpu.split_tensor_along_last_dim, torch.split
    # (bigscience-workshop/Megatron-DeepSpeed megatron/model/transformer.py L229; §5.167)
    qkv_split="torch",
    schedule_impl=(("1f1b", "deepspeed-1f1b"),), zero3_gather="per-tensor",
    recompute_methods=("uniform",), bf16_optimizer=True, grad_in_param_dtype=True,
    zero_buffers="deepspeed", zero1_grad_reduce="allreduce", loss=MEGATRON_DEEPSPEED_CROSS_ENTROPY,
    alibi_score_bytes=ALIBI_BADDBMM_BYTES,
    precisions=("bf16", "fp16"),
    precision_source="DeepSpeed's config \"bf16\": {\"enabled\"} or \"fp16\": {\"enabled\"} "
                     "(deepspeed/runtime/config.py), Megatron-DeepSpeed --bf16 / --fp16; no "
                     "fp8 recipe in its model code",
    layouts=("slots",),  # not per_stage: see pipeline_split
    pipeline_split="DeepSpeed's PipelineModule(partition_method=parameters|uniform|type:REGEX): "
                   "a balanced split of the layers the method weighs; "
                   "type:transformer|embedding counts the embedding and the head as layers "
                   "(BLOOM), the slots of account_embedding/account_loss",
    default_sources=(
        ("flash_attn", "no FlashAttention: Megatron-DeepSpeed's fused softmax (BLOOM, "
                       "bigscience-workshop/Megatron-DeepSpeed, 2022)"),
        ("overlap_grad_reduce", "DeepSpeed's pipeline engine reduces gradients after the "
                                "schedule (TrainSchedule's ReduceGrads instruction, "
                                "runtime/pipe/schedule.py)"),
        ("overlap_param_gather", "ZeRO-1 gathers the updated parameters after the step"),
        ("tp_comm_overlap", "no TP communication overlap (Megatron's 2021 tensor parallelism)"),
        ("recompute", "full-layer checkpointing (BLOOM's --checkpoint-activations)")),
    step=StepPasses(
        zero_grad=False, clip_scale=True,
        sources=(
            ("zero_grad", "ZeRO-1/2 zero_grad(set_to_none=True): no memset "
                          "(runtime/zero/stage_1_and_2.py)"),
            ("scale_grad", "average_tensor / allreduce_bucket divide the gradients by the "
                           "data-parallel size (tensor.div_)"),
            ("check_grad", "step(): check_overflow, _has_inf_or_nan over the gradients"),
            ("grad_norm", "scaled_global_norm before the optimizer"),
            ("clip_scale", "unscale_and_clip_grads multiplies the fp32 partition by "
                           "1/combined_scale every step"),
            ("param_copy", "bit16_partitions[...].data.copy_(fp32_partition.data)"),
            ("tied_reduce", "PipelineEngine._exec_reduce_tied_grads (TrainSchedule's "
                            "ReduceTiedGrads, before ReduceGrads)"))))
