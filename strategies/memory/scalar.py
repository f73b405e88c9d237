"""Per-GPU memory of each pipeline stage: model state, activations and an ``other`` allowance.

A thin wrapper: every number is entry 0 of ``strategies.memory.arrays`` (the array
implementation the search prunes with) for the job's one plan, so the two cannot disagree.
Bytes everywhere; GiB only in ``MemoryBreakdown.to_gib_dict``. Activations come from
``strategies.memory.activations`` (Korthikanti et al. 2022); model state follows Megatron-LM's
``theoretical_memory_usage`` (18 bytes/parameter in mixed precision) and the ZeRO paper
(Rajbhandari et al. 2019) for sharded states. See docs/memory.md for every term.

>>> from strategies.job_text import job_from_text
>>> job = job_from_text("gpt3-175b", "dgx-a100:8",
...                     "tp=8,pp=8,schedule=interleaved,vpp=3,recompute=selective,sp=true",
...                     global_batch=64)
>>> stage, mem = peak_memory(job)
>>> stage, round(mem.to_gib_dict()["peak_gib"], 1), fits(job)
(0, 60.9, True)
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from strategies.cost import param_counts
from strategies.cost.system import SystemConfig, get_system
from strategies.errors import SpecError
from strategies.memory import activations as act
from strategies.memory import arrays
from strategies.memory.stack_terms import job_stack_memory
from strategies.layout import mixed_layers, stage_content
from strategies.plan_arrays import PlanArrays
from strategies.schedules import get_schedule
from topologies.gpus import GIB

if TYPE_CHECKING:
    from strategies.job import Job


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU. ``total`` is the peak the estimator predicts."""

    params: float = 0.0
    grads: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    other: float = 0.0

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.other

    @property
    def model_state(self) -> float:
        """Parameters + gradients + optimizer state."""
        return self.params + self.grads + self.optimizer

    def __add__(self, o: "MemoryBreakdown") -> "MemoryBreakdown":
        return MemoryBreakdown(*(getattr(self, f.name) + getattr(o, f.name) for f in fields(self)))

    def to_gib_dict(self) -> dict[str, float]:
        """The CLI's ``memory`` keys (GiB): ``peak_gib``, ``params_gib``, … ``other_gib``."""
        d = {"peak_gib": self.total / GIB}
        d.update({f"{f.name}_gib": getattr(self, f.name) / GIB for f in fields(self)})
        return d


def model_state_bytes_per_param(zero: int, dp: int, param_bytes: float | None = None,
                                grad_bytes: float | None = None,
                                optimizer_bytes: float | None = None, *, dtype: str = "bf16",
                                system: SystemConfig | None = None, fsdp2: bool = False,
                                pp: int = 1) -> tuple[float, float, float]:
    """``(params, grads, optimizer)`` bytes per parameter on one GPU with ``dp`` data-parallel
    ranks sharing the states (``arrays.state_bytes_per_param``, checked). Bytes not given
    come from ``system`` (``param_bytes``, ``main_grad_bytes(dtype)``,
    ``optimizer_state_bytes``).

    zero 0: Megatron mixed precision, ``2 + 4 + 12 = 18`` (bf16 weights, fp32 main grads,
    fp32 master weights + Adam m, v); zero 1: Megatron's distributed optimizer
    ``2 + 4 + 12/d``; zero 2: also gradients ``2 + 4/d + 12/d``; zero 3: also parameters
    ``(2 + 4 + 12)/d``. With ``grad_bytes=2`` these are the ZeRO paper's ``(2+2+K)Ψ`` forms.
    ``fsdp2`` (``FrameworkProfile.fsdp2``, zero 2 and 3): the fp32 shard is the master,
    zero 3 ``(4 + 4 + 8)/d``; zero 2 ``2 + 4/d``, ``4/d`` (``4`` with ``pp > 1``: unsharded
    fp32 accumulation under pipelining), ``8/d``.

    >>> model_state_bytes_per_param(0, 64)
    (2.0, 4.0, 12.0)
    >>> [sum(model_state_bytes_per_param(z, 64, grad_bytes=2)) * 7.5e9 / 1e9 for z in range(4)]
    [120.0, 31.40625, 16.640625, 1.875]
    """
    if zero not in (0, 1, 2, 3):
        raise SpecError("zero", zero, "must be 0, 1, 2 or 3")
    if dp < 1:
        raise SpecError("dp", dp, "must be >= 1")
    sy = get_system(system)
    param_bytes = sy.param_bytes if param_bytes is None else param_bytes
    grad_bytes = sy.main_grad_bytes(dtype) if grad_bytes is None else grad_bytes
    optimizer_bytes = sy.optimizer_state_bytes if optimizer_bytes is None else optimizer_bytes
    return tuple(float(x) for x in arrays.state_bytes_per_param(
        zero, dp, param_bytes, grad_bytes, optimizer_bytes, fsdp2, pp, sy.master_bytes,
        sy.weight_copies))


# ------------------------------------------------------------------ parameters per GPU
# (the counts themselves live in strategies.cost.param_counts; these pick the stage's share)

def embedding_params_per_gpu(job: Job, stage: int) -> float:
    """Word (+ learned position) embedding on the first stage (both end ranks where
    ``Schedule.mirrored``), ``/tp`` (``param_counts.embedding_params_per_gpu``); 0 elsewhere."""
    here = act.holds_embedding(job, stage)
    return float(param_counts.embedding_params_per_gpu(job.model, job.plan.tp)) if here else 0.0


def head_params_per_gpu(job: Job, stage: int) -> float:
    """LM head plus the final norm on the rank that holds it, ``/tp``
    (``param_counts.head_params_per_gpu``: a tied head on the embedding's rank is that tensor); 0
    elsewhere."""
    p = job.plan
    here = act.holds_head(job, stage)
    shared = act.holds_embedding(job, stage)
    return float(param_counts.head_params_per_gpu(job.model, p.tp, p.pp, shared)) if here else 0.0


# ------------------------------------------------------------------ stage memory

def memory_components(job: Job, stage: int) -> dict[str, MemoryBreakdown]:
    """The stage's memory by origin; the values sum to ``memory_by_stage(job)[stage]``.

    ``layers``: the stage's transformer layers (state + their activation stash);
    ``embedding``: first stage (state + embedding activations); ``output``: last stage
    (LM head/final norm state + logits); ``recompute``: the layer being recomputed (full
    recompute: all of it; op: what it did not save); ``other``: the allowance (fixed, ZeRO-2/3 buffers, fragmentation) and,
    in ``grads``, the fp16 step's fp32 gradient copy beyond the activations, or DeepSpeed's
    ZeRO-1/2 reduction and step (``memory.deepspeed_zero``; docs/memory.md).
    An entry of ``arrays.memory_component_arrays`` for the job's plan, with the stash of the
    job's schedule at each rank's peak (``activations.stash_peak``).
    """
    act.check_stage(job, stage)
    return _components(job, [stage])[0]


def _components(job: Job, stages: list[int]) -> list[dict[str, MemoryBreakdown]]:
    """``memory_components`` of ``stages``, computed in one array call (one entry each): the
    job's stash (``in_flight``, ``pending_w``, the layers a micro-batch stashes) and, for a
    model with dense and MoE layers or MTP modules, what each rank holds by kind
    (``layout.stage_content`` of the job's layout, both copies where mirrored)."""
    m, p, content = job.model, job.plan, None
    if mixed_layers(m):
        mirrored = bool(get_schedule(p.schedule).mirrored) and p.pp > 1
        held = []
        for s in stages:
            have: dict[str, float] = {}
            for r in ((s, p.pp - 1 - s) if mirrored else (s,)):
                for k, n in stage_content(m, job.layout, r):
                    have[k] = have.get(k, 0) + n
            held.append(have)
        content = {k: [h.get(k, 0) for h in held] for k in m.cost_kinds() + ("mtp",)}
    # (stashed, pending W) at the peak; the layers' bytes there where the chunks differ
    per = [act.chunk_stash(job, s) for s in stages]
    peaks = [act.stash_at_peak_of(job, s, c) for s, c in zip(stages, per)]
    by_chunk = [c is not None for c in per]
    parts, _ = arrays.memory_component_arrays(
        m, PlanArrays.from_plans([p] * len(stages)), stages, job.dtype,
        in_flight=[n for n, _, _ in peaks], pending_w=[w for _, w, _ in peaks],
        stash_layers=([x if c else np.nan for (_, _, x), c in zip(peaks, by_chunk)]
                      if any(by_chunk) else None),
        # a multi-token-prediction module stashes about one layer's activations
        layers=[act.stashed_layers(job, s) for s in stages],
        content=content, gpu=job.cluster.gpu,
        # the stack's memory terms, as the search reads them (``stack_terms``)
        **job_stack_memory(job).keywords())
    return [{o: MemoryBreakdown(**{k: float(parts[o][k][i]) for k in arrays.KINDS})
             for o in arrays.ORIGINS} for i in range(len(stages))]


def _total(parts: dict[str, MemoryBreakdown]) -> MemoryBreakdown:
    total = MemoryBreakdown()
    for part in parts.values():
        total = total + part
    return total


def stage_memory(job: Job, stage: int) -> MemoryBreakdown:
    """Peak per-GPU memory of pipeline rank ``stage``."""
    return _total(memory_components(job, stage))


def memory_by_stage(job: Job) -> list[MemoryBreakdown]:
    """``stage_memory`` for every pipeline rank, first to last."""
    return [_total(parts) for parts in _components(job, list(range(job.plan.pp)))]


def peak_memory(job: Job) -> tuple[int, MemoryBreakdown]:
    """``(stage, breakdown)`` of the stage with the largest total (first one on ties)."""
    stages = memory_by_stage(job)
    best = max(range(len(stages)), key=lambda s: (stages[s].total, -s))
    return best, stages[best]


def stage_hbm_bytes(job: Job, stage: int) -> float:
    """Bytes of HBM on the GPUs of pipeline stage ``stage`` (the smallest of its GPU types:
    on a mixed cluster a stage may sit on 40 GB next to 80 GB parts). Stage ``s`` holds the
    global ranks ``s·tp·cp·dp`` to ``(s+1)·tp·cp·dp - 1`` (pp is the outermost coordinate)."""
    cl = job.cluster
    if len(cl.groups) == 1:
        return cl.min_hbm_bytes
    return min(cl.gpu_of_node(n).hbm_bytes for n in job.stage_nodes(stage))


def fits(job: Job, headroom_bytes: float = 0.0) -> bool:
    """Whether every stage plus ``headroom_bytes`` fits the HBM of its own GPUs
    (``stage_hbm_bytes``; one GPU type: the peak stage against that GPU)."""
    if len(job.cluster.groups) == 1:
        return peak_memory(job)[1].total + headroom_bytes <= job.cluster.min_hbm_bytes
    return all(b.total + headroom_bytes <= stage_hbm_bytes(job, s)
               for s, b in enumerate(memory_by_stage(job)))


def check_fits(job: Job, headroom_bytes: float = 0.0) -> None:
    """``SpecError`` naming the first stage whose memory exceeds its GPUs' HBM."""
    for s, b in enumerate(memory_by_stage(job)):
        hbm = stage_hbm_bytes(job, s)
        if b.total + headroom_bytes > hbm:
            gpus = job.cluster.gpu_of_rank(s * job.plan.tp * job.plan.cp * job.plan.dp).name
            raise SpecError(f"memory of stage {s}", f"{b.total / 2**30:.1f} GiB",
                            f"must fit the {hbm / 2**30:.0f} GiB of its GPUs ({gpus})")


def memory_by_origin_json(job: Job) -> list[dict[str, dict[str, float]]]:
    """Per stage, ``memory_components`` in GiB: ``{"layers": {"peak_gib": …, …}, "embedding":
    …, "output": …, "recompute": …, "other": …}``. ``layers.activations_gib`` is what
    Korthikanti et al. (2022) Figure 1 reports (transformer layers only)."""
    return [{k: v.to_gib_dict() for k, v in parts.items()}
            for parts in _components(job, list(range(job.plan.pp)))]
