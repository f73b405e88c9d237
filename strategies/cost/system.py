"""``SystemConfig``: the policy constants of the software stack that every cost reads.

One frozen record instead of module globals, so that a study can vary a constant by passing
``system=SystemConfig(...)`` (``make_job(..., system=)``, ``estimate_arrays(..., system=)``,
``step_time_lower_bound(..., system=)``, ``peak_memory_arrays(..., system=)``) without
monkeypatching. ``DEFAULT_SYSTEM`` is what every entry point uses when none is given.
docs/calibration.md §3.2 lists each field with its source.

>>> DEFAULT_SYSTEM.dp_bucket_params(8), DEFAULT_SYSTEM.dp_bucket_params(64), \
DEFAULT_SYSTEM.main_grad_bytes("bf16"), DEFAULT_SYSTEM.main_grad_bytes("fp16")
(40000000.0, 64000000.0, 4.0, 2.0)
>>> SystemConfig(bucket_params=25e6).dp_bucket_params(512)
25000000.0
>>> SystemConfig(cp_exposed_fraction=1.5)
Traceback (most recent call last):
...
topologies.errors.SpecError: cp_exposed_fraction=1.5: must be in [0, 1]
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from strategies.errors import SpecError
from topologies.gpus import GIB

_FRACTIONS = ("cp_exposed_fraction", "hbm_efficiency", "fragmentation", "weight_copies",
              "comm_sm_share", "overlap_clock_duty", "dualpipe_ep_order")

#: Megatron-Core DDP's default gradient bucket, parameters: ``bucket_size = max(40000000,
#: 1000000 * dp)`` when ``DistributedDataParallelConfig.bucket_size`` is None
#: (megatron/core/distributed/distributed_data_parallel.py, the same at core_r0.8.0 through
#: core_v0.17.0; dp: ``get_data_parallel_world_size()``, without context parallelism).
#: ``FrameworkProfile.dp_bucket`` of ``megatron-core`` (docs/calibration.md §5.86).
MCORE_BUCKET_FLOOR = 40e6
MCORE_BUCKET_PER_DP = 1e6


@dataclass(frozen=True)
class SystemConfig:
    """Policy constants (bytes, parameters, fractions); each field's source beside it."""

    #: Data-parallel gradient bucket, parameters, as an override: 0 (default) the stack's
    #: rule (``bucket_floor_params``/``bucket_per_dp_params`` below, which ``stack_system``
    #: sets from ``FrameworkProfile.dp_bucket``); > 0 this size at every dp (a job's
    #: ``--ddp-bucket-size``/``reduce_bucket_size``). Read through ``dp_bucket_params``.
    bucket_params: float = 0.0
    #: The bucket rule in force, ``max(floor, per_dp x dp)`` parameters: Megatron-Core's
    #: unless ``profile.stack_system`` gives the stack's (docs/calibration.md §5.86).
    bucket_floor_params: float = MCORE_BUCKET_FLOOR
    bucket_per_dp_params: float = MCORE_BUCKET_PER_DP
    #: Share of one layer's ring-attention (CP) traffic that stays exposed after the
    #: attention core it overlaps with (at least the last of the ``c-1`` ring steps).
    cp_exposed_fraction: float = 0.1
    #: Pieces a TP-overlapped collective is pipelined in: at least ``1/4`` of its traffic
    #: stays exposed (Transformer Engine userbuffers ``num_splits=4``).
    tp_overlap_chunks: int = 4
    #: Bytes of one model parameter (bf16/fp16 weights) as stored and all-gathered after the
    #: optimizer with the distributed optimizer / ZeRO (Megatron ``params_dtype``).
    param_bytes: float = 2.0
    #: Bytes per quantised weight the data-parallel parameter all-gather after the optimizer
    #: moves (ZeRO-1/2, the distributed optimizer), when the stack states it: 1 where
    #: Megatron-Core keeps per-tensor FP8 weights (``fp8_param_gather``: the parameter
    #: buffer's dtype is uint8 for FP8-stored parameters, ``param_and_grad_buffer.py``
    #: ``group_params_for_buffers``); the embedding and the LM head, never FP8, stay at
    #: ``param_bytes``. 0 (default): ``param_bytes`` (``gather_bytes``). ZeRO-3's per-layer
    #: gathers are not affected. docs/calibration.md §5.95.
    param_gather_bytes: float = 0.0
    #: 1 where the stack builds its GEMM weights quantised (Megatron-Core's ``fp8_param`` /
    #: ``fp8_param_gather``, ``fp4_param``: Transformer Engine's ``fp8_model_init`` /
    #: ``quantized_model_init``): a layer's weight is its quantised tensor, with no 16-bit
    #: copy (``memory.rank_components``; the bytes: ``quantise.weight_copy_bytes``);
    #: 0 (default): 16-bit weights with TE's cached quantised copies beside them.
    #: docs/calibration.md §5.151.
    quantised_weights: float = 0.0
    #: Which GEMMs the low-precision recipe narrows to BF16 or another format, where the
    #: stack states it (``strategies.cost.quant_scope.QUANT_SCOPES``: 1 = Megatron-Bridge's
    #: Nemotron 3 Super NVFP4 recipe, its last 14 layers and attention linears in BF16, the
    #: Mamba out_proj in MXFP8); 0 (default): every GEMM in the run's format.
    #: docs/calibration.md §5.155.
    quant_scope: float = 0.0
    #: Optimizer state bytes per parameter: fp32 master weight + Adam m and v (4 + 4 + 4;
    #: Megatron ``theoretical_memory_usage``'s 18 = 2 + 4 + 12).
    optimizer_state_bytes: float = 12.0
    #: Bytes of the fp32 master weight inside ``optimizer_state_bytes`` (4 of the 12). Where the
    #: stack's sharded parameter is that master (PyTorch FSDP2 over a model built in fp32,
    #: ``FrameworkProfile.fsdp2``) the memory model counts it under ``params``.
    master_bytes: float = 4.0
    #: Copies of the 16-bit weight (``param_bytes``) the memory model keeps beside the fp32
    #: master as model state: 1 (Megatron's bf16 ``params``); 0 where the stack stores only the
    #: fp32 master and casts a transient 16-bit copy inside each layer per use (MaxText
    #: ``weight_dtype: float32``, ``FrameworkProfile.master_only``, set by ``stack_system``).
    weight_copies: float = 1.0
    #: HBM bytes one Adam step moves per parameter it updates: fp32 master, m, v read and
    #: written (24), the fp32 gradient read (4) (apex/TE FusedAdam, torch fused AdamW). The
    #: 16-bit weights are written by a separate copy where the stack makes one
    #: (``StepPasses.param_copy``, ``strategies.cost.step``).
    adam_step_bytes: float = 28.0
    #: Achievable fraction of HBM bandwidth for streaming kernels (public STREAM copy/triad:
    #: ~1.7-1.8 of 2.04 TB/s on A100, ~2.9-3.0 of 3.35 TB/s on H100).
    hbm_efficiency: float = 0.85
    #: Fixed per-GPU allowance: CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers (bytes).
    fixed_other_bytes: float = 1.0 * GIB
    #: Allocator fragmentation, as a fraction of the activation peak.
    fragmentation: float = 0.05
    #: Bytes of one element of the gradient buffer, when the stack states it: 4 (Megatron
    #: ``grad_reduce_in_fp32``) or 2 (the parameter dtype: Megatron-Bridge's performance
    #: configs set ``grad_reduce_in_fp32 = False``); 0 (default): by the training dtype,
    #: ``main_grad_bytes``.
    grad_buffer_bytes: float = 0.0
    #: 1 where the stack's ZeRO-1/2 optimizer is DeepSpeed's ``DeepSpeedZeroOptimizer`` and
    #: keeps its buffers (``FrameworkProfile.zero_buffers``, set by ``stack_system``; read by
    #: the memory model where the gradients are 16-bit: ``strategies.memory.deepspeed_zero``);
    #: 0: the default model's (Megatron's buffers); 2: as 1, with BigScience's
    #: Megatron-DeepSpeed's weight-decay parameters in two optimizer groups
    #: (``FrameworkProfile.zero_buffers`` ``"deepspeed-halved"``; docs/calibration.md §5.129)
    deepspeed_zero: float = 0.0
    #: Share of the overlapped compute during which the overlapped collectives' CTAs hold
    #: their SMs, which the compute then runs without (``cost.sm_share``): 0 (default) the
    #: rule off; 1 the whole overlapped compute. docs/calibration.md §5.152
    comm_sm_share: float = 0.0
    #: 1 where the one-micro-batch data-parallel reduction slows the SM clock only while its
    #: collectives run (``overlap_clock.duty_cycle_factor`` of the reduce-scatter, or
    #: all-reduce, and the overlapped parameter gather against the rank's compute; the
    #: estimate's, the bound's and the simulator's record, ``stage.clock_duty``); 0 (default)
    #: the whole step at ``1/OVERLAP_CLOCK_RATIO``. docs/calibration.md §5.226
    overlap_clock_duty: float = 0.0
    #: Micro-batches of a step whose output-layer weight-gradient GEMM the last pipeline
    #: stage defers to the pipeline's drain, where the stack states it (Megatron-Core
    #: ``defer_embedding_wgrad_compute`` with ``wgrad_deferral_limit`` k: the first k,
    #: ``inf`` for k = 0, every one; ``cost.head_deferral``); 0 (default): none, each
    #: micro-batch's in its backward. docs/calibration.md §5.232
    head_wgrad_deferral: float = 0.0

    #: 1 where DualPipe's and DualPipeV's even split with expert parallelism is priced on its
    #: order with each pass's own all-to-all (``chunk_correction.a2a_shift``, as an uneven
    #: layout is: the contention-free simulation to 1e-15 on one pipeline; the default); 0: the
    #: even composition's closed form. docs/calibration.md §5.231
    dualpipe_ep_order: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SpecError(f.name, v, "must be a number")
            if f.name in _FRACTIONS and not 0.0 <= v <= 1.0:
                raise SpecError(f.name, v, "must be in [0, 1]")
            if f.name not in _FRACTIONS and v < 0:
                raise SpecError(f.name, v, "must be >= 0")
        if self.hbm_efficiency <= 0:
            raise SpecError("hbm_efficiency", self.hbm_efficiency, "must be > 0")
        if self.tp_overlap_chunks < 1 or int(self.tp_overlap_chunks) != self.tp_overlap_chunks:
            raise SpecError("tp_overlap_chunks", self.tp_overlap_chunks, "must be an integer >= 1")
        if self.bucket_floor_params <= 0:
            raise SpecError("bucket_floor_params", self.bucket_floor_params, "must be > 0")
        if self.deepspeed_zero not in (0, 1, 2):
            raise SpecError("deepspeed_zero", self.deepspeed_zero, "must be 0, 1 or 2")
        if self.quantised_weights not in (0, 1):
            raise SpecError("quantised_weights", self.quantised_weights, "must be 0 or 1")
        from strategies.cost.quant_scope import QUANT_SCOPES
        if self.quant_scope != 0 and self.quant_scope not in QUANT_SCOPES:
            raise SpecError("quant_scope", self.quant_scope, "must be 0 or a code of "
                            f"quant_scope.QUANT_SCOPES ({', '.join(map(str, QUANT_SCOPES))})")
        if not self.head_wgrad_deferral >= 0:
            raise SpecError("head_wgrad_deferral", self.head_wgrad_deferral,
                            "must be >= 0 (micro-batches; inf: every one)")
        if self.grad_buffer_bytes not in (0, 2, 4):
            raise SpecError("grad_buffer_bytes", self.grad_buffer_bytes,
                            "must be 0 (by dtype), 2 or 4")

    def dp_bucket_params(self, dp: Any) -> Any:
        """Parameters of one data-parallel gradient bucket at data-parallel size ``dp`` (an int
        or an array of plans): ``bucket_params`` where set, else ``max(bucket_floor_params,
        bucket_per_dp_params x dp)``. The one rule the estimate (scalar and arrays, via the
        stage costs), the lower bound, the simulator's buckets, the memory model's ZeRO-2/3
        buffers and the DeepSpeed export read."""
        if self.bucket_params > 0:
            return float(self.bucket_params) if np.ndim(dp) == 0 else \
                np.full(np.shape(dp), float(self.bucket_params))
        out = np.maximum(self.bucket_floor_params, self.bucket_per_dp_params * np.asarray(dp, float))
        return float(out) if np.ndim(out) == 0 else out

    def gather_bytes(self) -> float:
        """Bytes per quantised weight of the parameter all-gather after the optimizer:
        ``param_gather_bytes`` where set, else ``param_bytes``."""
        return float(self.param_gather_bytes or self.param_bytes)

    def main_grad_bytes(self, dtype: str) -> float:
        """Bytes of one element of the gradient buffer micro-batches accumulate into and data
        parallelism reduces: fp32 (4) with bf16/fp8 training, fp16 (2) with fp16 training.
        Megatron: the DDP buffer's ``grad_dtype`` is fp32 if ``grad_reduce_in_fp32`` else the
        parameter dtype; ``--bf16`` turns ``accumulate_allreduce_grads_in_fp32`` on, ``--fp16``
        leaves it off (megatron/training/arguments.py, param_and_grad_buffer.py).
        ``grad_buffer_bytes``, where set, overrides it."""
        if self.grad_buffer_bytes:
            return float(self.grad_buffer_bytes)
        return 2.0 if dtype == "fp16" else 4.0

    def optimizer_bytes(self, stated: float | None = None) -> float:
        """Optimizer state bytes per parameter: the stack's where it states them
        (``FrameworkProfile.optimizer_state_bytes``, e.g. DeepSeek-V3's BF16 moments, 8),
        else ``optimizer_state_bytes`` (12). Read by the memory model and the checkpoint size."""
        return self.optimizer_state_bytes if stated is None else float(stated)

    def step_grad_copy_bytes(self, dtype: str) -> float:
        """Bytes per parameter of the fp32 copy of the gradient made at the optimizer step:
        Megatron's fp16 optimizer casts each fp16 main gradient to the fp32 master's ``.grad``
        (``main_param.grad = main_grad.float()``); with an fp32 buffer ``.float()`` is the
        same tensor (0)."""
        return 4.0 if self.main_grad_bytes(dtype) < 4.0 else 0.0


#: The configuration every entry point uses unless given another.
DEFAULT_SYSTEM = SystemConfig()


def get_system(system: SystemConfig | None) -> SystemConfig:
    """``system``, or ``DEFAULT_SYSTEM`` when None."""
    if system is None:
        return DEFAULT_SYSTEM
    if not isinstance(system, SystemConfig):
        raise SpecError("system", type(system).__name__, "must be a SystemConfig")
    return system
