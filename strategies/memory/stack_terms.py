"""The memory model's stack-dependent arguments, read once from a ``FrameworkProfile``: the
one place a stack's memory rule is turned into the numbers the memory model takes
(``StackMemory``, built by ``stack_memory``). The scalar model (``memory.scalar``,
``memory.job_layers``: ``job_stack_memory``) and the search's rule
(``search.space_memory``) both read it, so a new stack rule is written here once
(docs/memory.md, "Where the stack enters").

>>> from strategies.framework import get_profile
>>> t = stack_memory(get_profile("torchtitan"), "bf16", True, None)
>>> (t.fsdp2, t.remat_named, t.act_cache, t.dispatch_bytes, t.cp_impl)
(True, False, None, 2.0, 'torch')
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from strategies.cost.moe_bytes import dispatch_element_bytes
from strategies.cost.system import SystemConfig
from strategies.memory.saved_precision import (activation_cache_bytes, expert_input_bytes,
                                               runs_te_experts)
from strategies.memory.te_linear_saved import job_te_linear_inputs
from strategies.stacks.passes import LossPasses
from strategies.stacks.profile import FrameworkProfile, stack_system
from strategies.stacks.variants import runs_eager_clamp

if TYPE_CHECKING:
    from strategies.job import Job

#: the K/V exchanges that keep each layer's head-sharded attention output in its stash
#: (Transformer Engine's all-to-all CP, and a2a+p2p from TE 2.15 on, §5.191)
A2A_EXCHANGES = ("a2a", "a2a+p2p")


@dataclass(frozen=True)
class StackMemory:
    """What the memory model reads of a stack, in one precision on one kind of chip (the
    keywords of ``arrays.memory_component_arrays`` / ``peak_memory_arrays`` of the same
    names; each term: docs/memory.md). ``system``: the policy constants as the stack sets
    them (``profile.stack_system``: its gradient buffer, bucket rule, DeepSpeed's ZeRO
    buffers, master bytes); ``clamp``: it runs gpt-oss's eager activation clamp;
    ``remat_named``: its selective recomputation is a JAX remat policy; ``loss_bytes``: its
    cross-entropy's bytes per logit element (``LossPasses``, ``peak_bytes_at(tp)`` per
    plan); ``act_cache``: bytes per element of activations cached in low precision (None:
    the 16-bit table); ``optimizer_bytes``: its optimizer state bytes per parameter (None:
    the system's); ``fsdp2``: its ZeRO-2/3 is PyTorch FSDP2; ``dispatch_bytes``: bytes per
    element of its MoE dispatch; ``expert_input``: bytes per element of the routed experts'
    saved GEMM inputs (None: 16-bit); ``te_inputs``: Transformer Engine's dense modules'
    saved input bytes (None: 16-bit); ``mixer_d_inner``: the ``d_inner`` tensors its
    Mamba-2 mixer saves; ``cp_impl``: the K/V exchange it runs where a plan names none."""

    system: SystemConfig
    clamp: bool
    remat_named: bool
    loss_bytes: LossPasses | None
    act_cache: float | None
    optimizer_bytes: float | None
    fsdp2: bool
    dispatch_bytes: float | None
    expert_input: float | None
    te_inputs: tuple[float, float, float, float] | None
    mixer_d_inner: int | None
    cp_impl: str | None

    @property
    def cp_a2a(self) -> bool:
        """The stack's own exchange keeps each layer's head-sharded output (``A2A_EXCHANGES``;
        the arrays read it per plan, ``rank_components.runs_exchange``)."""
        return self.cp_impl in A2A_EXCHANGES

    def keywords(self) -> dict[str, Any]:
        """The fields as keywords of ``arrays.memory_component_arrays`` and
        ``arrays.peak_memory_arrays`` (``system`` included)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@lru_cache(maxsize=64)
def stack_memory(stack: FrameworkProfile, dtype: str, tn_only: bool,
                 system: SystemConfig | None) -> StackMemory:
    """``StackMemory`` of ``stack`` training in ``dtype`` on a chip whose fp8 GEMMs are TN
    only or not (``tn_only``: ``GPU.fp8_tn_only``, the transposed copies Transformer
    Engine saves), under the policy constants ``system`` (None: the defaults). A pure
    function of frozen specs, memoised (the scalar model reads it per layer kind)."""
    return StackMemory(
        system=stack_system(stack, system),
        clamp=runs_eager_clamp(stack),
        remat_named=bool(stack.remat_named),
        loss_bytes=stack.loss,
        act_cache=activation_cache_bytes(stack.fp8_activation_cache, dtype),
        optimizer_bytes=stack.optimizer_state_bytes,
        fsdp2=bool(stack.fsdp2),
        dispatch_bytes=dispatch_element_bytes(stack.fp8_dispatch, dtype),
        expert_input=expert_input_bytes(runs_te_experts(stack), dtype, stack.te_version,
                                        tn_only),
        te_inputs=job_te_linear_inputs(stack, dtype, tn_only),
        mixer_d_inner=stack.mamba_saved_d_inner,
        cp_impl=stack.cp_impl)


def job_stack_memory(job: Job) -> StackMemory:
    """``stack_memory`` of ``job``'s stack, precision, system and the GPU type the memory
    model prices (``Cluster.gpu``)."""
    return stack_memory(job.framework, job.dtype, bool(job.cluster.gpu.fp8_tn_only),
                        job.system)
