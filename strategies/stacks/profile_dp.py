"""``StackDataParallel``: how a stack holds, gathers and reduces the model state over data
parallelism (hybrid sharding's replica stream, ZeRO-3 gathers, optimizer and master
bytes, FSDP2, gradient buckets, buffers and passes, ZeRO-1's reduction), base fields of
``FrameworkProfile``."""
from __future__ import annotations

from dataclasses import dataclass

from strategies.stacks.buckets import MCORE_BUCKET, BucketRule


@dataclass(frozen=True)
class StackDataParallel:
    """The ``FrameworkProfile`` fields that say how the stack keeps and reduces the model state."""

    #: hybrid sharding's all-reduce across replicas runs on a stream of its own, beside the
    #: gathers and reduce-scatters (PyTorch FSDP2 ``FSDPCommContext.all_reduce_stream``, FSDP1
    #: ``_all_reduce_stream`` under HYBRID_SHARD: "run the HSDP all-reduces concurrently with
    #: all-gather/reduce-scatter"); False: after each reduce-scatter on the same stream
    #: (Megatron-Core's ``communication_stream``, RS then AR per bucket). ``replica_lane``
    replica_stream: bool = False
    #: each ZeRO-3 all-gather is copied out of the gathered buffer into the parameters on the
    #: compute stream (FSDP2's per-parameter sharding: ``compute.gather_copy_out_time``)
    gather_copy_out: bool = False
    #: how ZeRO-3 gathers parameters: ``"bucketed"`` (a layer's worth at a time, prefetched
    #: behind compute: Megatron-FSDP, FSDP, XLA) or ``"per-tensor"`` (one host-synchronous
    #: all-gather per parameter tensor and one reduce-scatter per gradient, exposed:
    #: DeepSpeed v0.3.13-v0.5, 2021; ``strategies.cost.param_counts.zero3_tensor_gathers``)
    zero3_gather: str = "bucketed"
    #: parameters used between two uses of a tensor below which a per-tensor stack keeps it
    #: gathered (DeepSpeed ``stage3_max_reuse_distance``, default 1e9)
    zero3_reuse_params: float = 1e9
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
