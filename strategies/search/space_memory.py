"""The memory rule of one job's plan space: ``peak_memory_arrays`` with the job's model,
precision and chip and the named stack's memory terms (``memory.stack_terms.StackMemory``,
the terms the scalar model reads too), gathered once (``SpaceMemory``, built by
``space_memory``) and read by the ``memory`` rule, the fewest flushes, the fewest
recomputed layers and ZeRO-2's twins alike."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strategies.cost.system import SystemConfig
from strategies.memory.arrays import peak_memory_arrays
from strategies.memory.stack_terms import StackMemory, stack_memory
from strategies.model import ModelSpec
from strategies.stacks.profile import FrameworkProfile
from topologies.gpus import GPU


@dataclass(frozen=True)
class SpaceMemory:
    """``peak_memory_arrays``' arguments but the columns (``memory.arrays``): the model, the
    precision, ``gpu`` the chip as the memory rule reads it (fp8 weight copies) and
    ``stack`` the stack's terms (``memory.stack_terms.StackMemory``: its system, eager
    clamp, remat policy, loss, caches, optimizer, FSDP2, dispatch, saved GEMM inputs, Mamba
    mixer and K/V exchange)."""

    model: ModelSpec
    dtype: str
    gpu: GPU | None
    stack: StackMemory

    def peak(self, cols: dict[str, np.ndarray]) -> np.ndarray:
        """Peak bytes of each row of ``cols``."""
        return peak_memory_arrays(self.model, cols, self.dtype, gpu=self.gpu,
                                  **self.stack.keywords())


def space_memory(model: ModelSpec, gpu: GPU, dtype: str, stack: FrameworkProfile,
                 system: SystemConfig | None) -> SpaceMemory:
    """The memory rule of ``model`` in ``dtype`` on ``gpu`` under ``stack`` (the named one, or
    the default stack) with the policy constants ``system`` (``stack_terms.stack_memory``
    sets them as the stack does, ``profile.stack_system``; a system it already set is kept)."""
    return SpaceMemory(model, dtype, gpu, stack_memory(stack, dtype, bool(gpu.fp8_tn_only),
                                                       system))
