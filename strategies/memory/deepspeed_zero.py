"""DeepSpeed's ZeRO-1/2 optimizer memory (``DeepSpeedZeroOptimizer``, the 2021-22 releases).

Read from DeepSpeed v0.5.10 (``deepspeed/runtime/zero/stage_1_and_2.py``,
``runtime/engine.py`` ``_configure_zero_optimizer``, ``runtime/zero/constants.py``), the
release of the BLOOM prototype's runs (docs/calibration.md §5.115, §5.119). Bytes per GPU; ``P``
the parameters a rank holds, ``d`` the ranks sharing the optimizer state, ``g`` bytes of the
16-bit gradient, ``B`` ``reduce_bucket_size`` (elements; default 5e8, the stack's
``BucketRule``, ``SystemConfig.dp_bucket_params``).

* ZeRO-1 (``partition_grads=False``): the engine forces ``contiguous_gradients`` and
  ``overlap_comm`` off ("meaningless in stage 1"), so no ``ipg_buffer`` exists: the gradients
  stay in the parameters' ``.grad`` (``g·P``, the model's gradient) until the accumulation
  boundary, then ``reduce_gradients`` all-reduces them bucket by bucket
  (``buffered_reduce_fallback`` → ``allreduce_bucket``: ``self.flatten(bucket)``, a transient
  16-bit copy of up to ``B`` elements), after the pipeline schedule has freed the activations.
  The epilogue keeps views of the partition's gradients in ``averaged_gradients`` (``g·P/d``,
  no copy) and frees the rest (``zero_grad``: ``p.grad = None``).
* ZeRO-2 (``partition_grads=True``, ``contiguous_gradients`` on by default, ``overlap_comm``
  off by default and under a ``PipelineModule``): each backward allocates ``ipg_buffer``, one
  16-bit bucket of ``B`` elements (two with ``overlap_comm``), and copies this rank's reduced
  slices into ``grads_in_partition`` (``g·P/d``); from the second micro-batch of a step that
  buffer is new and ``averaged_gradients`` (the first one) is added into after the backward:
  ``2·g·P/d`` during the backward.
* The step (both): ``flatten(averaged_gradients).to(fp32)``: a 16-bit flat copy (``g·P/d``,
  freed at the end of the statement) and the fp32 gradient partition (``4·P/d``) beside the
  partition's 16-bit gradients (``g·P/d``); the fp32 master and Adam's moments are the model
  state's (``arrays.state_bytes_per_param``). The updated weights are all-gathered into the
  16-bit flat buffer in place (``allgather_bucket_size`` only sets the number of calls: no
  memory).

Not held: ``get_grad_norm_direct``'s ``g.double()`` and ``_has_inf_or_nan``'s ``x.float()``,
one gradient tensor at a time at the step (docs/calibration.md §5.119).

>>> float(zero1_reduce_bytes(5e8, 2e9, 2.0)), float(step_bytes(2e9 / 4, 2.0))
(1000000000.0, 4000000000.0)
>>> tuple(float(x) for x in zero2_backward_bytes(5e8, 2e9, 2e9 / 4, 2.0, accumulating=True))
(1000000000.0, 2000000000.0)
"""
from __future__ import annotations

from typing import Any

import numpy as np

#: bytes of the fp32 gradient partition the step creates (``single_partition_of_fp32_groups[i]
#: .grad``: ``.to(self.single_partition_of_fp32_groups[i].dtype)``, fp32)
FP32_GRAD_BYTES = 4.0


def zero1_reduce_bytes(bucket_params: Any, params: Any, grad_bytes: float) -> Any:
    """ZeRO-1's transient flat bucket at the gradient reduction: ``min(B, P)·g`` bytes
    (``allreduce_bucket``'s ``self.flatten(bucket)``; the ipg bucket is closed once its
    elements would pass ``reduce_bucket_size``)."""
    return np.minimum(bucket_params, params) * grad_bytes


def zero2_backward_bytes(bucket_params: Any, params: Any, partition_params: Any,
                         grad_bytes: float, accumulating: Any = False,
                         overlap_comm: bool = False) -> tuple[Any, Any]:
    """``(ipg buckets, gradient partitions)`` bytes ZeRO-2 holds during a backward: the
    ``ipg_buffer`` (``min(B, P)·g``, twice with ``overlap_comm``) and the 16-bit gradient
    partition ``grads_in_partition`` (``g·P/d``; ``partition_params``: ``P/d``), twice where the
    step accumulates more than one micro-batch (``accumulating``: the previous micro-batches'
    ``averaged_gradients`` beside this backward's new buffer)."""
    buckets = (2.0 if overlap_comm else 1.0) * np.minimum(bucket_params, params) * grad_bytes
    parts = np.where(np.asarray(accumulating, dtype=bool), 2.0, 1.0) * grad_bytes \
        * np.asarray(partition_params, dtype=float)
    return buckets, parts


def step_bytes(partition_params: Any, grad_bytes: float) -> Any:
    """Bytes the step holds for the ``partition_params`` (``P/d``) parameters of this rank's
    partition: their 16-bit gradients (``averaged_gradients``), the flat copy and the fp32
    gradient partition, ``(2·g + 4)·P/d``."""
    return (2.0 * grad_bytes + FP32_GRAD_BYTES) * np.asarray(partition_params, dtype=float)


def after_backward_bytes(zero: Any, params: Any, partition_params: Any, bucket_params: Any,
                         grad_bytes: float) -> Any:
    """The most gradient bytes a rank holds after its last backward, when the schedule has
    freed the activations: ZeRO-1 the larger of the reduction's (``g·P`` gradients plus the
    flat bucket, ``zero1_reduce_bytes``) and the step's (``step_bytes``); ZeRO-2 the step's.
    ``params``: ``P``; ``partition_params``: ``P/d`` (experts over their own group)."""
    step = step_bytes(partition_params, grad_bytes)
    reduce = grad_bytes * np.asarray(params, dtype=float) + zero1_reduce_bytes(
        bucket_params, params, grad_bytes)
    return np.where(np.asarray(zero) == 1, np.maximum(reduce, step), step)
