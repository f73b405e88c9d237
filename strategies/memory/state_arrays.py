"""Model states and the optimizer's buffers per GPU over arrays of plans (docs/memory.md):
the bytes per parameter of the parameters, gradients and optimizer states as ZeRO (or
FSDP2) shards them, and the ``other`` bytes the data-parallel optimizer adds (ZeRO-2/3
gradient buckets and gathered layers, DeepSpeed's ZeRO-1/2 buffers, the fp16 step's fp32
gradient copy). ``rank_components.memory_component_arrays`` reads both.

>>> import numpy as np
>>> [float(x[0]) for x in state_bytes_per_param(np.array([1]), 8, 2.0, 4.0, 12.0)]
[2.0, 4.0, 1.5]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost.quantise import weight_copy_bytes
from strategies.cost.token_counts import Num
from strategies.cost.system import SystemConfig
from strategies.memory import deepspeed_zero as dsz
from strategies.stacks.comm_rules import grad_sync_once
from topologies.gpus import GPU


def state_bytes_per_param(zero, d, param_bytes: float, grad_bytes: float,
                          optimizer_bytes: float, fsdp2: bool = False, pp=1,
                          master_bytes: float = 4.0, weight_copies: float = 1.0):
    """(params, grads, optimizer) bytes per parameter with ``d`` data-parallel ranks sharing
    the states (arrays; ``memory.model_state_bytes_per_param`` is the checked scalar form):
    optimizer states sharded from ZeRO 1, gradients from 2, parameters at 3.

    ``fsdp2`` (``FrameworkProfile.fsdp2``; ZeRO 2 and 3 only): the sharded parameter is the
    fp32 master (``master_bytes`` of ``optimizer_bytes``), counted under params, and there
    is no 16-bit shard: ZeRO-3 ``master/d`` params and ``(optimizer - master)/d`` optimizer
    (``16/d`` in all, not ``18/d``); ZeRO-2 (parameters kept gathered) the 16-bit unsharded
    copy beside it, ``param + master/d`` (the same total as without). With ``pp > 1`` the
    gradients accumulate unsharded over the micro-batches (``torch.distributed.pipelining``
    turns FSDP2's gradient sync off until the stage's last backward): ``grad`` bytes, not
    ``grad/d``. ``weight_copies`` (``SystemConfig.weight_copies``): the stored 16-bit
    weight copies, 0 where the fp32 master (counted in ``optimizer``) is the only stored
    weight (MaxText: ``2 + 4 + 12 = 18`` becomes ``0 + 4 + 12 = 16``)."""
    pb, gb, ob = param_bytes * weight_copies, grad_bytes, optimizer_bytes
    opt = np.where(zero >= 1, ob / d, float(ob))
    grads = np.where(zero >= 2, gb / d, float(gb))
    params = np.where(zero >= 3, pb / d, float(pb))
    if fsdp2:
        mb = master_bytes
        fs = zero >= 2
        opt = np.where(fs, (ob - mb) / d, opt)
        params = np.where(zero >= 3, mb / d, np.where(fs, pb + mb / d, params))
        # the one rule the time model reads too (``comm_rules.grad_sync_once``)
        grads = np.where(grad_sync_once(True, pp, zero), float(gb), grads)
    return params, grads, opt


def layer_state_bytes_per_param(zero: np.ndarray, d: Num, param_bytes: float,
                                grad_bytes: float, optimizer_bytes: float, dtype: str,
                                gpu: GPU | None = None, quantised_weights: float = 0.0,
                                **fs: Any) -> tuple[Num, Num, Num]:
    """(params, grads, optimizer) bytes per parameter of a layer's GEMM weight with ``d``
    data-parallel ranks sharing its states (arrays): ``state_bytes_per_param`` (``fs``: its
    ``fsdp2``, ``pp``, ``master_bytes``, ``weight_copies``) and, in low precision, the
    weight's quantised copies (``quantise.weight_copy_bytes`` of ``dtype`` on ``gpu``: the
    row-wise copy, the column-wise one where the chip's fp8 GEMMs take only TN or the format
    is block-scaled, their scales). ZeRO-3 gathers each layer's weights and casts them per
    use: no copy kept.

    ``quantised_weights`` 0: the 16-bit weight is the parameter and Transformer Engine caches
    its quantised copies beside it (``get_weight_workspace``, reused over the micro-batches),
    ``param_bytes + copies`` (H100 per-tensor fp8: ``2 + 2``). 1
    (``SystemConfig.quantised_weights``, Megatron-Core's ``fp8_param_gather``): the weight
    IS the quantised tensor (TE ``fp8_model_init``; the parameter buffer holds its uint8
    data, ``param_and_grad_buffer.py``; ``get_weight_workspace`` returns the parameter
    itself and ``update_usage`` keeps its transpose on Hopper): ``copies`` alone (H100
    per-tensor fp8 ``1 + 1``, B200 ``1``; MXFP8 ``2 x (1 + 1/32)``; NVFP4 ``2 x (1/2 +
    1/16)``), below ZeRO-3; the fp32 master stays in the optimizer's shard. A precision with
    no stored copy (torchao's rowwise recipe) keeps its 16-bit weight either way.

    >>> import numpy as np
    >>> [float(x[0]) for x in layer_state_bytes_per_param(np.array([1]), 8, 2.0, 2.0, 12.0,
    ...                                                    "fp8", None, 1.0)]
    [1.0, 2.0, 1.5]
    """
    (params, grads, opt), q = layer_state_parts(zero, d, param_bytes, grad_bytes,
                                                optimizer_bytes, dtype, gpu,
                                                quantised_weights, **fs)
    return params + q, grads, opt


def layer_state_parts(zero: np.ndarray, d: Num, param_bytes: float, grad_bytes: float,
                      optimizer_bytes: float, dtype: str, gpu: GPU | None = None,
                      quantised_weights: float = 0.0, **fs: Any
                      ) -> tuple[tuple[Num, Num, Num], Num]:
    """``layer_state_bytes_per_param`` in two parts: ``((params, grads, optimizer), q)``, the
    states without the quantised copies (no 16-bit weight below ZeRO-3 where
    ``quantised_weights``) and the copies' bytes per parameter ``q`` (0 at ZeRO-3)."""
    states = state_bytes_per_param(zero, d, param_bytes, grad_bytes, optimizer_bytes, **fs)
    q = weight_copy_bytes(dtype, gpu)
    if quantised_weights and q > 0:
        bare = state_bytes_per_param(zero, d, 0.0, grad_bytes, optimizer_bytes, **fs)[0]
        states = (np.where(zero >= 3, states[0], bare),) + states[1:]
    return states, np.where(zero == 3, 0.0, q)


def optimizer_buffer_arrays(sy: SystemConfig, dtype: str, zero, dp, d, d_e, dense_params,
                            expert_params, layer_params, nmb, reserve_of=None,
                            optimizer_bytes: float | None = None
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(buffers, after)`` bytes per GPU of each plan's data-parallel optimizer: ``buffers``
    during the backward (ZeRO-2/3: two gradient buckets in flight, and with ZeRO-3 two
    layers' gathered parameters), ``after`` beyond the gradient state once the last backward
    is done (fp16: the optimizer step's fp32 gradient copy of this rank's partition;
    DeepSpeed's ZeRO-1/2 where its gradients are 16-bit: ``deepspeed_zero``). ``sy``: the
    policy constants; ``dtype``: the training precision; ``zero``: the ZeRO stage; ``dp``:
    the data-parallel size (the bucket rule's); ``d``, ``d_e``: the ranks sharing the dense
    and the expert states; ``dense_params``, ``expert_params``: the parameters this rank
    holds; ``layer_params``: one layer's (ZeRO-3's gathered layers); ``nmb``: micro-batches
    per flush (more than one: ZeRO-2 holds two gradient partitions,
    ``deepspeed_zero.zero2_backward_bytes``). ``reserve`` (third): bytes the caching
    allocator keeps beyond the allocated peak once DeepSpeed's ZeRO-1/2 step has run
    (``deepspeed_zero.step_reserve_bytes``; ``reserve_of``: ``(head, layers, layer_tensors,
    tp, freed, replicated)``, the rank's arguments to it; None: 0), 0 elsewhere; ``optimizer_bytes``:
    the stack's optimizer state bytes per parameter (None: the system's)."""
    params_here = dense_params + expert_params
    gb = sy.main_grad_bytes(dtype)
    bucket = sy.dp_bucket_params(dp)
    buffers = np.where((zero >= 2) & (d > 1),
                       2 * np.minimum(bucket, params_here) * gb
                       + np.where(zero == 3, 2 * layer_params * sy.param_bytes, 0.0),
                       0.0)
    # this rank's partition of the optimizer (experts over their own group)
    partition = dense_params / np.where(zero >= 1, d, 1.0) \
        + expert_params / np.where(zero >= 1, d_e, 1.0)
    # fp16: the optimizer step's fp32 gradient copy (the 1/d shard with ZeRO >= 1), beyond the
    # activations it replaces (docs/memory.md)
    after = sy.step_grad_copy_bytes(dtype) * partition
    # DeepSpeed's ZeRO-1/2 optimizer where its gradients are 16-bit (not its BF16_Optimizer):
    # its own buckets and gradient partitions (strategies.memory.deepspeed_zero)
    ds = bool(sy.deepspeed_zero) and gb == 2.0
    if ds:
        ds_on = (zero == 1) | (zero == 2)
        ipg, partitions = dsz.zero2_backward_bytes(bucket, params_here, partition, gb, nmb > 1)
        # ZeRO-2: the ipg bucket and the gradient partitions beyond the one the state counts
        ds_buf = np.where(zero == 2, ipg + partitions - gb * partition, 0.0)
        buffers = np.where(ds_on, ds_buf, buffers)
        # after the last backward, beyond the backward's gradient state and buffers
        grad_state = np.where(zero == 1, gb * params_here, gb * partition)
        after = np.where(ds_on, dsz.after_backward_bytes(zero, params_here, partition, bucket,
                                                         gb) - grad_state - ds_buf, after)
        # the step's transients the allocator had to cudaMalloc stay reserved (§5.129)
        moments = (sy.optimizer_bytes(optimizer_bytes) - sy.master_bytes) / 2.0
        reserve = np.zeros(np.broadcast(after, ds_on).shape)
        if reserve_of is not None and np.any(ds_on):
            head, layers, tensors, tp, freed, rep = reserve_of
            on = np.broadcast_to(ds_on, reserve.shape)

            def at(x):          # the plans DeepSpeed's ZeRO-1/2 runs (a replay per plan)
                return np.broadcast_to(np.asarray(x, dtype=float), reserve.shape)[on]
            reserve[on] = dsz.step_reserve_bytes(at(head), at(layers), tensors, at(tp), at(d),
                                                 at(freed), gb, moments,
                                                 halved=sy.deepspeed_zero == 2,
                                                 replicated=at(rep) > 0)
        return buffers, after, reserve
    return buffers, after, np.zeros_like(np.asarray(after, dtype=float))
