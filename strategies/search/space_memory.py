"""The memory rule of one job's plan space: ``peak_memory_arrays`` with the job's model,
precision and chip and the named stack's memory terms, gathered once (``SpaceMemory``,
built by ``space_memory``) and read by the ``memory`` rule, the fewest flushes, the fewest
recomputed layers and ZeRO-2's twins alike."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strategies.cost.moe_bytes import dispatch_element_bytes
from strategies.cost.system import SystemConfig
from strategies.memory.activations import (activation_cache_bytes, expert_input_bytes,
                                           job_te_linear_inputs, runs_te_experts)
from strategies.memory.arrays import peak_memory_arrays
from strategies.model import ModelSpec
from strategies.stacks.passes import LossPasses
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.variants import runs_eager_clamp
from topologies.gpus import GPU


@dataclass(frozen=True)
class SpaceMemory:
    """``peak_memory_arrays``' arguments but the columns (``memory.arrays``): ``gpu`` the chip,
    as the memory rule reads it (fp8 weight copies); ``clamp``: the stack runs gpt-oss's eager
    clamp, ``remat_named`` a JAX remat policy; ``loss_bytes``, ``act_cache``,
    ``optimizer_bytes``, ``fsdp2``, ``dispatch_bytes``, ``expert_input``, ``te_inputs``,
    ``mixer_d_inner``, ``cp_impl`` (its own K/V exchange) the stack's."""

    model: ModelSpec
    dtype: str
    system: SystemConfig | None
    gpu: GPU | None = None
    clamp: bool = False
    remat_named: bool = False
    loss_bytes: LossPasses | None = None
    act_cache: float | None = None
    optimizer_bytes: float | None = None
    fsdp2: bool = False
    dispatch_bytes: float | None = None
    expert_input: float | None = None
    te_inputs: tuple[float, float, float, float] | None = None
    mixer_d_inner: int | None = None
    cp_impl: str | None = None

    def peak(self, cols: dict[str, np.ndarray]) -> np.ndarray:
        """Peak bytes of each row of ``cols``."""
        return peak_memory_arrays(self.model, cols, self.dtype, self.system, self.gpu,
                                  self.clamp, self.remat_named, self.loss_bytes, self.act_cache,
                                  self.optimizer_bytes, self.fsdp2, self.dispatch_bytes,
                                  self.expert_input, self.te_inputs, self.mixer_d_inner,
                                  self.cp_impl)


def space_memory(model: ModelSpec, gpu: GPU, dtype: str, stack: FrameworkProfile,
                 system: SystemConfig | None) -> SpaceMemory:
    """The memory rule of ``model`` in ``dtype`` on ``gpu`` under ``stack`` (the named one, or
    the default stack), with ``system`` as the stack sets it (``profile.stack_system``)."""
    return SpaceMemory(
        model, dtype, system, gpu,
        # the stack's eager activation clamp (gpt-oss) stashes its inputs (memory.arrays)
        clamp=runs_eager_clamp(stack),
        # a JAX remat policy's selective stash (memory.activations.named_remat_bytes)
        remat_named=bool(stack.remat_named),
        # what the stack's cross-entropy holds per logit element (memory.activations.
        # output_bytes; its peak_bytes_at(tp) per plan)
        loss_bytes=stack.loss,
        # activations cached in low precision, the optimizer's state bytes (memory.arrays)
        act_cache=activation_cache_bytes(stack.fp8_activation_cache, dtype),
        optimizer_bytes=stack.optimizer_state_bytes,
        # PyTorch FSDP2's state (memory.arrays.state_bytes_per_param)
        fsdp2=bool(stack.fsdp2),
        # the MoE dispatch's bytes per element, its send buffer (moe_bytes.
        # dispatch_element_bytes)
        dispatch_bytes=dispatch_element_bytes(stack.fp8_dispatch, dtype),
        # the routed experts' saved GEMM inputs (memory.activations.expert_input_bytes)
        expert_input=expert_input_bytes(runs_te_experts(stack), dtype, stack.te_version,
                                        gpu.fp8_tn_only),
        # Transformer Engine's dense modules' saved inputs (memory.te_linear_saved)
        te_inputs=job_te_linear_inputs(stack, dtype, gpu.fp8_tn_only),
        # a Mamba-2 mixer's saved d_inner tensors (memory.mixer_saved)
        mixer_d_inner=stack.mamba_saved_d_inner,
        # the exchange of a plan naming no cp_comm: its working set (memory.rank_components.
        # runs_exchange; MaxText's all-gather, §5.195)
        cp_impl=stack.cp_impl)
