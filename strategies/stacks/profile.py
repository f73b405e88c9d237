"""``FrameworkProfile``: the fixed properties of a training software stack that change step
time (the sources of each: the ``strategies.stacks`` package docstring and the field notes),
``LAUNCH_GAP_S`` and ``stack_system``, the system constants as a stack's costs read them.

The profile's fields, by concern, each group a frozen base dataclass: ``StackBasics`` (here:
the fields every profile must give, the stack's names and the defaults it gives a plan),
``profile_limits.StackLimits`` (the plan features it runs), ``profile_comm.StackComm`` (its
model-parallel collectives), ``profile_dp.StackDataParallel`` (how it keeps and reduces the
model state over data parallelism), ``profile_kernels.StackKernels`` (its kernels and what
they save)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from strategies.stacks.plan_defaults import StackFieldDefaults, check_field_defaults
from strategies.stacks.profile_comm import StackComm
from strategies.stacks.profile_dp import StackDataParallel
from strategies.stacks.profile_fields import check_profile
from strategies.stacks.profile_kernels import StackKernels
from strategies.stacks.profile_limits import StackLimits

LAUNCH_GAP_S = 3e-6   # seconds of GPU idle per kernel boundary (``strategies.stacks``)


@dataclass(frozen=True)
class StackBasics:
    """The ``FrameworkProfile`` fields every profile must give (no defaults: a dataclass
    puts them first), the stack's names and launch exporter, and the defaults it gives a
    plan that names none (the switches, the schedule, the ZeRO stage, SP and
    recomputation, the meaning of a plain "fp8") with their sources."""

    name: str
    description: str
    grad_accum_fusion: bool
    kernels_per_layer: int
    launch_gap_s: float
    default_flash_attn: bool
    default_overlap_grad_reduce: bool
    default_overlap_param_gather: bool
    default_tp_comm_overlap: bool
    attention_kernel: str = "native"
    default_recompute: str = "none"
    #: the ZeRO stage, sequence parallelism and recomputation the stack runs where a plan
    #: names none (``StackFieldDefaults``; sources in ``strategies.stacks.plan_defaults``)
    field_defaults: StackFieldDefaults = StackFieldDefaults()
    aliases: tuple[str, ...] = ()
    #: the launch-settings exporter the stack is launched with (one of
    #: ``strategies.launch.EXPORTS``; ``"none"``: paraplan has none: HAI-LLM's code is not
    #: public, NeMo AutoModel's YAML recipe has no exporter yet)
    export: str = "megatron"
    #: the stack's own implementation of a generic schedule name a plan gives
    #: (DeepSpeed's pipeline engine runs ``schedule=1f1b`` as its ``TrainSchedule``)
    schedule_impl: tuple[tuple[str, str], ...] = ()
    #: where each ``default_*`` switch (``flash_attn``, ``overlap_grad_reduce``,
    #: ``overlap_param_gather``, ``tp_comm_overlap``, ``recompute``) comes from:
    #: ``(switch, source)``; the reference reader states it with every default it applies
    default_sources: tuple[tuple[str, str], ...] = ()
    #: the per-tensor fp8 recipe the stack runs when a run says only "fp8"/"float8" (its
    #: default scaling; one of ``profile_fields.UNQUALIFIED_FP8``), which the reference reader
    #: gives such a row (``strategies.reference.cases``), and where that default is set
    unqualified_fp8: str = "fp8"
    unqualified_fp8_source: str = ""


@dataclass(frozen=True)
class FrameworkProfile(StackKernels, StackDataParallel, StackComm, StackLimits,
                       StackBasics):
    """What a training stack does underneath a plan.

    ``grad_accum_fusion``: the weight-gradient GEMM accumulates into the fp32 main gradient
    (no separate per-micro-batch add kernel). ``kernels_per_layer``: kernels one transformer
    layer's forward launches (the backward launches twice as many). ``launch_gap_s``: GPU idle
    seconds per kernel boundary. ``attention_kernel``: ``"native"`` or ``"fa2"``
    (``GPU.flash_efficiency``). ``recompute_early_stop``: full recomputation reruns a layer's
    forward only up to its last GEMM (PyTorch's non-reentrant checkpoint, ``strategies.stacks``).
    The ``default_*`` fields are the plan switches the stack uses
    unless a source says otherwise (``strategies.reference.cases`` reads them).

    The fields are the bases' (the module docstring names each group); a dataclass lays them
    out from the last base to the first, so ``StackBasics``'s, without defaults, lead.
    """

    def optimizer_bytes_or(self, default: float) -> float:
        """The stack's optimizer state bytes per parameter, else ``default``."""
        return default if self.optimizer_state_bytes is None else float(self.optimizer_state_bytes)

    def default_source(self, switch: str) -> str:
        """The source of the stack's default for plan switch ``switch`` ("" if none)."""
        return dict(self.default_sources).get(switch, "")

    def schedule_for(self, name: str) -> str:
        """The schedule this stack runs for a plan's ``schedule=name``."""
        return dict(self.schedule_impl).get(name, name)

    def runnable_schedule(self, name: str) -> str:
        """``name`` if this stack runs it (or has no schedule list), else the first schedule
        it runs (MaxText: ``gpipe``): what a plan that names no schedule gets."""
        if self.schedules and self.schedule_for(name) not in self.schedules:
            return self.schedules[0]
        return name

    def plan_defaults(self) -> dict[str, bool]:
        """The plan switches this stack turns on by default (a plan that names a switch
        overrides it)."""
        return {"flash_attn": self.default_flash_attn,
                "overlap_grad_reduce": self.default_overlap_grad_reduce,
                "overlap_param_gather": self.default_overlap_param_gather,
                "tp_comm_overlap": self.default_tp_comm_overlap}

    def __post_init__(self) -> None:
        check_profile(self)
        check_field_defaults(self)


def stack_system(fw: FrameworkProfile | None, system: Any = None) -> Any:
    """The system constants as stack ``fw``'s costs read them: its bucket rule
    (``FrameworkProfile.dp_bucket``, where ``SystemConfig.bucket_params`` does not override
    it); ``SystemConfig.master_bytes``
    replaced by the stack's (``FrameworkProfile.master_bytes``, a model built in 16 bits) where
    it states one, ``SystemConfig.weight_copies`` 0 where it stores fp32 weights only
    (``FrameworkProfile.master_only``), an unset ``grad_buffer_bytes`` the stack's
    (``comm_rules.stack_grad_bytes``, as ``make_job`` sets it), ``deepspeed_zero`` 1 where
    its ZeRO optimizer is DeepSpeed's (``FrameworkProfile.zero_buffers``). The one rule the memory model
    (scalar and arrays) and the search read."""
    from strategies.cost.system import get_system
    from strategies.stacks.comm_rules import stack_grad_bytes
    sy = get_system(system)
    if fw is not None and not sy.grad_buffer_bytes and stack_grad_bytes(fw):
        sy = replace(sy, grad_buffer_bytes=stack_grad_bytes(fw))
    if fw is not None and (sy.bucket_floor_params, sy.bucket_per_dp_params) != (
            fw.dp_bucket.floor_params, fw.dp_bucket.per_dp_params):
        sy = replace(sy, bucket_floor_params=float(fw.dp_bucket.floor_params),
                     bucket_per_dp_params=float(fw.dp_bucket.per_dp_params))
    if fw is not None and fw.zero_buffers.startswith("deepspeed") and not sy.deepspeed_zero:
        sy = replace(sy, deepspeed_zero=2.0 if fw.zero_buffers == "deepspeed-halved" else 1.0)
    mb = None if fw is None else fw.master_bytes
    if fw is not None and fw.master_only and sy.weight_copies != 0.0:
        sy = replace(sy, weight_copies=0.0)
    return sy if mb is None or mb == sy.master_bytes else replace(sy, master_bytes=float(mb))
