"""How a stack's collectives run, as the estimate, the lower bound, the memory model and the
compiler read them: which data-parallel gradient reduction is a full all-reduce
(``full_grad_reduce``), the gradient's bytes a stack fixes (``stack_grad_bytes``), FSDP2's once-per-step gradient sync under pipelining
(``grad_sync_once``, ``grad_path``) and the exposed share of context-parallel K/V traffic
(``cp_exposed_fraction``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from strategies.stacks.profile import FrameworkProfile


def cp_exposed_fraction(cp_impl: str, overlapped: float) -> float:
    """Share of a context-parallel layer's K/V collectives left exposed: all of them under
    ``"allgather"`` (Megatron-Core ``TransformerConfig.cp_comm_type``: "all_gather: All-gather
    to get full sequence of KV before attention. The all-gather is not async, and cannot be
    overlapped"; Transformer Engine's ``AttnFuncWithCPAndKVAllGather``, "KV all-gather between
    CP ranks is exposed", gathers K/V in the forward, again in the backward, and reduce-scatters
    dK/dV: the ring's three passes, ``analytic`` ``t_cp``; Dubey et al. 2024 §3.3.2: "the
    all-gather communication latency is exposed in the critical path"), else ``overlapped``
    (``SystemConfig.cp_exposed_fraction``: the ring's tail after its last attention block).
    ``"a2a"`` (``AttnFuncWithCPAndQKVOA2A``) is exposed whole too: each all-to-all is waited
    on (``a2a_reqs[i].wait()`` on ``cp_stream``, then ``current_stream().wait_stream``) before
    the attention or the output projection reads it (``strategies.cost.cp_a2a``)."""
    return 1.0 if cp_impl in ("allgather", "a2a") else float(overlapped)


def uses_bf16_optimizer(fw: "FrameworkProfile", dtype: str) -> bool:
    """Whether stack ``fw`` runs DeepSpeed's BF16_Optimizer for a ``dtype`` run (bf16 only)."""
    return bool(fw.bf16_optimizer) and dtype == "bf16"


def stack_grad_bytes(fw: "FrameworkProfile") -> float:
    """Bytes per element of the gradient stack ``fw`` accumulates micro-batches into and
    reduces over dp, where the stack fixes it: 2 where it keeps the gradient in the
    parameter's 16-bit ``.grad`` (``fw.grad_in_param_dtype``: DeepSpeed's engine) and its
    BF16_Optimizer, which accumulates in fp32, is off (an fp16 run never has it:
    ``uses_bf16_optimizer``); 0 elsewhere (the policy's rule, ``SystemConfig.main_grad_bytes``,
    which gives fp16 runs 2 already). Read by ``make_job`` and ``profile.stack_system``."""
    return 2.0 if fw.grad_in_param_dtype and not fw.bf16_optimizer else 0.0


def full_grad_reduce(fw: "FrameworkProfile", dtype: str, zero: Any) -> Any:
    """Whether the data-parallel gradient reduction is a full all-reduce (not a
    reduce-scatter into the optimizer shard): ZeRO-0; ZeRO-1 where the stack's ZeRO-1
    all-reduces (``fw.zero1_grad_reduce``: DeepSpeed's ``DeepSpeedZeroOptimizer``, its
    16-bit gradients) or its BF16_Optimizer runs, which all-reduces the fp32 gradients under
    its own ZeRO-1 (``uses_bf16_optimizer``). Scalar or array ``zero``; the one rule the
    estimate, the lower bound and the compiler read."""
    z = np.asarray(zero)
    z1_ar = fw.zero1_grad_reduce == "allreduce" or uses_bf16_optimizer(fw, dtype)
    out = (z == 0) | ((z == 1) & z1_ar)
    return bool(out) if out.ndim == 0 else out


def grad_sync_once(fsdp2: Any, pp: Any, zero: Any) -> Any:
    """True where the stack's ZeRO-2 is PyTorch FSDP2 (``FrameworkProfile.fsdp2``) run under
    ``torch.distributed.pipelining`` (``pp > 1``, ZeRO-2: torchtitan's only pipelined
    sharding, ``zero_with_pp``): ``_PipelineStageBase.backward_maybe_with_nosync``
    (pytorch/pytorch#127946, in the 2024-12-23 nightly) turns FSDP2's gradient sync and
    reshard-after-backward off for every backward and runs each parameter group's
    ``post_backward`` after the stage's last one (#144535), so the unsharded gradients
    accumulate in the reduce dtype and the stage is reduce-scattered once per step.
    Vectorised; the one rule the memory model (``memory.arrays.state_bytes_per_param``), the
    stage record, the estimate, the bound and the compiler read (docs/calibration.md §5.34)."""
    return np.asarray(fsdp2, dtype=bool) & (np.asarray(pp) > 1) & (np.asarray(zero) == 2)


def grad_path(fsdp2: Any, pp: Any, zero: Any, ogr: Any = True) -> tuple[Any, Any]:
    """``(ZeRO stage, overlap_grad_reduce)`` the gradients are accumulated and reduced with:
    the plan's, or where ``grad_sync_once`` holds, ZeRO-1's without overlap (an unsharded
    gradient buffer every micro-batch adds into; one reduce-scatter into the shard after the
    stage's last backward, not beside it). The optimizer shard and the parameter gathers are
    the plan's. Vectorised (scalars in, scalars out)."""
    on = grad_sync_once(fsdp2, pp, zero)
    zg = np.where(on, 1, np.asarray(zero))
    og = np.asarray(ogr, dtype=bool) & ~on
    return (zg[()] if zg.ndim == 0 else zg), (bool(og) if og.ndim == 0 else og)

