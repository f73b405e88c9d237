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

* The step's copies of one gradient tensor at a time (v0.5.10 ``step``: ``check_overflow`` →
  ``_has_inf_or_nan``'s ``x.float()``, then ``get_grad_norm_direct``'s ``g.data.double()``),
  the largest of them ``4·G`` and ``8·G`` bytes for the largest gradient view ``G`` of the
  rank's partition (``largest_view``), are not allocated bytes at the peak (one tensor, after
  the activations are freed), but PyTorch's caching allocator keeps what it had to
  ``cudaMalloc`` for them: ``step_reserve_bytes`` (docs/calibration.md §5.129).

A stage of 12 layers with the 448M-element embedding, layer weights of 620M/210M/820M/820M
elements split over tp 8, the partition over d = 4, a 0.9 GB block freed by the backward,
16-bit gradients and fp32 moments, in one optimizer group and in two (``halved``), GB:

>>> round(float(step_reserve_bytes(4.48e8, 12, (6.2e8, 2.1e8, 8.2e8, 8.2e8), 8, 4, 9.0e8,
...                                2.0, 4.0)) / 1e9, 3)
9.529
>>> round(float(step_reserve_bytes(4.48e8, 12, (6.2e8, 2.1e8, 8.2e8, 8.2e8), 8, 4, 9.0e8,
...                                2.0, 4.0, halved=True)) / 1e9, 3)
7.331

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



#: bytes per element of the step's two copies of one gradient tensor (v0.5.10
#: ``stage_1_and_2.py`` ``step``): ``check_overflow`` → ``has_overflow_partitioned_grads_serial``
#: → ``_has_inf_or_nan``: ``x.float()`` (fp32), then ``get_grad_norm_direct``:
#: ``g.data.double()`` (fp64), each freed before the next tensor's
STEP_COPY_BYTES = (4.0, 8.0)


def optimizer_groups(head: float, layers: int, layer_tensors: tuple[float, ...],
                     halved: bool, norm_skips_head: bool = False) -> list[tuple[float, float, float]]:
    """``(largest tensor, elements, largest tensor the norm copies)`` of each optimizer
    parameter group DeepSpeed flattens and
    partitions on a rank (elements per GPU): Megatron's weight-decay group in module order,
    the tied embedding (``head``: the word embedding's or the tied head's ``V/t·h`` copy, 0
    where the rank holds neither; DeepSpeed's ``PipelineModule`` registers ``tied_modules``
    before the layers) then each layer's weights (``layer_tensors``, in module order); the
    no-weight-decay group (biases, norms) is left out (small). ``halved``: BigScience's
    Megatron-DeepSpeed from 541b967f (2022-02-17, ``_get_params_for_weight_decay_optimization``,
    "temp hack to workaround the crash in apex FusedAdam's multi_tensor_applier") splits the
    weight-decay list in two groups by count, the first ``n // 2`` tensors and the rest.
    ``norm_skips_head``: the rank holds a tied copy it does not own (DeepSpeed marks it
    ``ds_pipe_replicated`` on every tied rank but the first, ``PipelineModule.
    _index_tied_modules``), which ``get_grad_norm_direct`` skips (the overflow check does
    not)."""
    tensors = ([head] if head > 0 else []) + list(layer_tensors) * int(layers)
    if not tensors:
        return []
    cut = len(tensors) // 2 if halved else len(tensors)
    parts = [(0, cut), (cut, len(tensors))] if halved else [(0, cut)]
    skip = 1 if (norm_skips_head and head > 0) else 0
    return [(max(tensors[a:b]), float(sum(tensors[a:b])),
             max(tensors[max(a, skip):b], default=0.0)) for a, b in parts if b > a]


def _reserve_one(groups: list[tuple[float, ...]], d: float, freed: float, grad_bytes: float,
                 moment_bytes: float) -> float:
    """The scalar ``step_reserve_bytes`` of one rank whose optimizer ``groups``
    (``optimizer_groups``) are partitioned over ``d`` ranks."""
    # free blocks [size, segment]; segment -1 is the backward's freed block, which the
    # allocator held already (not counted), 0.. the ones the step's transients made
    free: list[list] = [[freed, -1]] if freed > 0 else []
    seg_size: dict[int, float] = {-1: freed}
    held: dict[str, list] = {}
    kept = 0.0

    def alloc(name: str, size: float, persistent: bool = False) -> None:
        nonlocal kept
        fits = [blk for blk in free if blk[0] >= size]
        if fits:
            blk = min(fits, key=lambda x: x[0])
            free.remove(blk)
            if blk[0] > size:
                free.append([blk[0] - size, blk[1]])
            if persistent and blk[1] >= 0:
                kept += size
            held[name] = [size, blk[1]]
        elif persistent:        # a segment of its own: the model state's bytes
            held[name] = [size, None]
        else:
            seg_size[len(seg_size) - 1] = size
            held[name] = [size, len(seg_size) - 2]

    def release(name: str) -> None:
        size, seg = held.pop(name)
        if seg is None:
            return
        if any(h[1] == seg for h in held.values()):
            free.append([size, seg])
            return
        for blk in [blk for blk in free if blk[1] == seg]:
            free.remove(blk)
        free.append([seg_size[seg], seg])

    c32, c64 = STEP_COPY_BYTES
    # each group's widest view, of all its tensors and of those the norm copies
    views = [(min(g[0], g[1] / d), g[1] / d, min(g[2] if len(g) > 2 else g[0], g[1] / d))
             for g in groups]
    for i, (view, _, _) in enumerate(views):               # check_overflow, every group
        alloc(f"fp32 copy {i}", c32 * view)
        release(f"fp32 copy {i}")
    for i, (_, part, normed) in enumerate(views):           # the norm and the flat copies
        alloc(f"fp64 copy {i}", c64 * normed)
        release(f"fp64 copy {i}")
        alloc(f"flat {i}", grad_bytes * part)
        alloc(f"fp32 grad {i}", FP32_GRAD_BYTES * part)
        release(f"flat {i}")
    for i, (_, part, _) in enumerate(views):                # Adam's moments, first step
        alloc(f"exp_avg {i}", moment_bytes * part, persistent=True)
        alloc(f"exp_avg_sq {i}", moment_bytes * part, persistent=True)
    for i in range(len(views)):
        release(f"fp32 grad {i}")
    return sum(v for k, v in seg_size.items() if k >= 0) - kept


def step_reserve_bytes(head: Any, layers: Any, layer_tensors: tuple[float, ...], tp: Any,
                       d: Any, freed: Any, grad_bytes: float, moment_bytes: float,
                       halved: bool = False, replicated: Any = False) -> Any:
    """Bytes PyTorch's caching allocator keeps beyond the allocated peak once DeepSpeed
    v0.5.10's ZeRO-1/2 step has run, per rank (arrays: ``head`` elements, ``layers`` held,
    ``tp`` dividing each of ``layer_tensors`` (one layer's weights, whole, elements), ``d``
    ranks sharing the partition, ``freed`` the largest block the rank's forward and backward
    free, bytes; ``rank_tensor_sizes``).

    The allocator (PyTorch ``c10/cuda/CUDACachingAllocator.cpp``) serves a large request from
    the smallest cached free block of at least its size, splitting it, and otherwise
    ``cudaMalloc``s a segment of the request's size and keeps it (DeepSpeed's ZeRO and
    pipeline paths call no ``empty_cache``); a freed block merges back with the free rest of
    its segment. The step's requests, in order (``stage_1_and_2.py`` ``step``): for every
    group the fp32 copy of each gradient view of the rank's partition (``check_overflow``),
    then per group the fp64 copy of each view (``get_grad_norm_direct``), the 16-bit flat
    partition (``g·P_i/d``) and its fp32 cast (``4·P_i/d``, kept to the update; the flat one
    freed), then Adam's two moments (``moment_bytes·P_i/d`` each, allocated by apex
    ``FusedAdam`` at the first step and kept), then the fp32 gradients freed. Only each group's
    largest view ``min(t_i, P_i/d)`` is a candidate for a new segment (for the fp64 copy
    without a tied copy the rank does not own: ``replicated``, per plan). Returns the bytes of
    the segments these transients made that no kept tensor took; they stay reserved from the
    first step on, under every later peak (what ``nvidia-smi`` and ``memory_reserved`` show,
    not ``memory_allocated``)."""
    def one(h, n, t, dd, fr, rep):
        tensors = tuple(x / float(t) for x in layer_tensors)
        groups = optimizer_groups(float(h), int(round(float(n))), tensors, halved, bool(rep))
        return _reserve_one(groups, float(dd), float(fr), grad_bytes, moment_bytes)
    return np.asarray(np.frompyfunc(one, 6, 1)(head, layers, tp, d, freed, replicated),
                      dtype=float)


def rank_tensor_sizes(m: Any, tp: Any, b: Any, flash: Any, head: Any, nmb: Any,
                      grad_bytes: float, holds_loss: Any, layers_held: Any = 1
                      ) -> tuple[tuple[float, ...], Any]:
    """``(layer_tensors, freed_block)`` of a rank for ``step_reserve_bytes``: one layer's
    weight tensors whole (elements; Megatron's module order: fused QKV, the attention's
    output, fc1, fc2) and the largest block the rank's forward and backward free (bytes):
    the largest tensor's gradient of a later micro-batch (autograd adds it into ``.grad`` and
    frees it; ``nmb > 1``), the unfused attention's 16-bit score tensor ``b·(a/t)·s²`` (none
    with FlashAttention), the MLP's fc1 output ``b·s·f/t`` (twice gated) and, on the rank
    holding the loss, the fp32 logits ``b·s·V/t``. ``m``: the ``ModelSpec``; ``head``: the
    embedding or tied head elements the rank holds (per GPU)."""
    h, s, a = m.hidden_size, m.seq_length, m.num_attention_heads
    fc1 = (2 if m.gated else 1) * m.ffn_hidden_size
    tensors = (float((a + 2 * m.kv_heads) * m.head_dim * h), float(a * m.head_dim * h),
               float(fc1 * h), float(m.ffn_hidden_size * h))
    tp = np.asarray(tp, dtype=float)
    layer = np.where(np.asarray(layers_held) > 0, max(tensors) / tp, 0.0)
    grad = np.where(np.asarray(nmb) > 1, grad_bytes * np.maximum(head, layer), 0.0)
    scores = np.where(np.asarray(flash, dtype=bool), 0.0, 2.0 * b * (a / tp) * s * s)
    mlp = 2.0 * b * s * fc1 / tp
    logits = np.where(np.asarray(holds_loss, dtype=bool), 4.0 * b * s * m.vocab_size / tp, 0.0)
    return tensors, np.maximum(np.maximum(grad, scores), np.maximum(mlp, logits))
