"""The search's peak memory per GPU over arrays of plans (docs/memory.md): the entry point the
plan space (``strategies.search.space``) prunes a hundred thousand plans with in
milliseconds, each rank priced by ``rank_components.memory_component_arrays``.

For a model of one layer kind the peak evaluates only the first and the last pipeline stage
(and rank 1 of an uneven layout): a middle stage holds the same layers as the first, no
embedding, and at most as many stashed micro-batches (the in-flight count of GPipe, 1F1B and
interleaving is non-increasing in the stage), and its ``other`` allowance grows with
activations and parameters only, so it never exceeds the first stage. A schedule that splits
the backward (pending weight gradients grow with the rank) or is mirrored (DualPipe's middle
ranks stash one more) has every rank evaluated. A model with dense and MoE layers or MTP
modules holds different kinds on different ranks, so its peak evaluates every rank, each by
kind (``rank_memory_arrays``).

>>> import numpy as np
>>> from strategies.presets import model_preset
>>> from strategies.search.plan_rows import columns_from_plans
>>> from strategies.plan import parse_plan
>>> m = model_preset("gpt3-175b")
>>> P = columns_from_plans([parse_plan("tp=8,pp=8,dp=1,gbs=64,schedule=interleaved,vpp=3,"
...                                    "recompute=selective,sp=true")])
>>> round(float(peak_memory_arrays(m, P)[0]) / 2**30, 1)
60.9
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

import numpy as np

from strategies.cost.system import SystemConfig
from strategies.layout import mixed_layers
from strategies.memory.rank_components import memory_component_arrays
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays, as_plan_arrays, rank_layers
from strategies.schedules import attr_by_code


def rank_memory_arrays(m: ModelSpec, P: PlanArrays | Mapping[str, Any], stage,
                       dtype: str = "bf16", system: SystemConfig | None = None, gpu=None,
                       in_flight=None, pending_w=None, clamp=False,
                       remat_named=False, loss_bytes=None, act_cache=None,
                       optimizer_bytes=None, fsdp2=False, dispatch_bytes=None,
                       expert_input=None, te_inputs=None,
                       mixer_d_inner=None, cp_impl=None) -> np.ndarray:
    """Bytes per GPU of pipeline rank ``stage`` (an int or one per plan, ``< pp``) of each
    plan, reading the layers the plan's layout puts there: a model of one layer kind its
    layer count (``plan_arrays.rank_layers``: rank 0, a middle rank, rank ``pp-1``), a model
    with dense and MoE layers or MTP modules its layers by kind
    (``layout.even_stage_content``). ``in_flight``/``pending_w``: as
    ``memory_component_arrays`` (default: the schedule's counts at the default group size).
    ``clamp``, ``remat_named``, ``loss_bytes``, ``act_cache``, ``optimizer_bytes``,
    ``fsdp2``, ``dispatch_bytes``, ``expert_input``, ``te_inputs``, ``mixer_d_inner``,
    ``cp_impl``: as ``memory_component_arrays``.
    ``memory.scalar.memory_by_stage`` is this for one job's
    plan."""
    P = as_plan_arrays(P)
    stage = np.asarray(stage) + np.zeros_like(P.pp)
    layers = None
    if not mixed_layers(m):
        first, mid, last, _, uneven = rank_layers(m.num_layers, P)
        if np.any(uneven):
            own = np.where(stage == 0, first, np.where(stage == P.pp - 1, last, mid))
            layers = np.where(uneven, own, m.num_layers / P.pp)
    return memory_component_arrays(m, P, stage, dtype, system, in_flight=in_flight,
                                   layers=layers, pending_w=pending_w, gpu=gpu,
                                   clamp=clamp, remat_named=remat_named,
                                   loss_bytes=loss_bytes, act_cache=act_cache,
                                   optimizer_bytes=optimizer_bytes, fsdp2=fsdp2,
                                   dispatch_bytes=dispatch_bytes,
                                   expert_input=expert_input, te_inputs=te_inputs,
                                   mixer_d_inner=mixer_d_inner, cp_impl=cp_impl)[1]


def stage_memory_arrays(m: ModelSpec, P: PlanArrays | Mapping[str, Any], last: bool,
                        dtype: str = "bf16", system: SystemConfig | None = None,
                        gpu=None, clamp=False, remat_named=False, loss_bytes=None,
                        act_cache=None, optimizer_bytes=None, fsdp2=False,
                        dispatch_bytes=None, expert_input=None,
                        te_inputs=None, mixer_d_inner=None, cp_impl=None) -> np.ndarray:
    """Bytes per GPU of the first (``last=False``) or the last pipeline stage of each plan
    (``P``: ``PlanArrays`` or the search space's short columns; ``dtype``: the training
    precision; ``system``: the policy constants; ``gpu``: the chip, for fp8 weight copies):
    ``rank_memory_arrays`` of rank 0 or ``pp - 1`` (``clamp``, ``remat_named``, …: as there)."""
    P = as_plan_arrays(P)
    return rank_memory_arrays(m, P, P.pp - 1 if last else np.zeros_like(P.pp), dtype, system,
                              gpu, clamp=clamp, remat_named=remat_named,
                              loss_bytes=loss_bytes, act_cache=act_cache,
                              optimizer_bytes=optimizer_bytes, fsdp2=fsdp2,
                              dispatch_bytes=dispatch_bytes, expert_input=expert_input,
                              te_inputs=te_inputs, mixer_d_inner=mixer_d_inner, cp_impl=cp_impl)


def peak_memory_arrays(m: ModelSpec, P: PlanArrays | Mapping[str, Any], dtype: str = "bf16",
                       system: SystemConfig | None = None, gpu=None,
                       clamp=False, remat_named=False, loss_bytes=None, act_cache=None,
                       optimizer_bytes=None, fsdp2=False, dispatch_bytes=None,
                       expert_input=None, te_inputs=None,
                       mixer_d_inner=None, cp_impl=None) -> np.ndarray:
    """Peak bytes per GPU over the pipeline stages of each plan (``memory.peak_memory``).
    ``clamp``: the stack runs gpt-oss's eager clamp; ``remat_named``: its selective
    recomputation is a JAX remat policy; ``loss_bytes``, ``act_cache``, ``optimizer_bytes``,
    ``fsdp2``, ``dispatch_bytes``, ``expert_input``, ``te_inputs``, ``mixer_d_inner``,
    ``cp_impl`` (its own K/V exchange): the stack's (all: ``memory_component_arrays``).
    A model of one layer kind: the first and the last rank, and where an uneven layout gives
    the middle ranks more layers, rank 1 (the middle rank with the most stashed
    micro-batches; module docstring). A model with dense and MoE layers or MTP modules:
    every rank (the ranks hold different kinds, so no rank's total bounds another's)."""
    P = as_plan_arrays(P)
    if mixed_layers(m):
        return _every_rank_peak(m, P, dtype, system, gpu, clamp, remat_named, loss_bytes,
                                act_cache, optimizer_bytes, fsdp2, dispatch_bytes,
                                expert_input, te_inputs, mixer_d_inner, cp_impl)
    peak = np.maximum(stage_memory_arrays(m, P, False, dtype, system, gpu, clamp, remat_named,
                                          loss_bytes, act_cache, optimizer_bytes, fsdp2,
                                          dispatch_bytes, expert_input, te_inputs,
                                          mixer_d_inner, cp_impl),
                      stage_memory_arrays(m, P, True, dtype, system, gpu, clamp, remat_named,
                                          loss_bytes, act_cache, optimizer_bytes, fsdp2,
                                          dispatch_bytes, expert_input, te_inputs,
                                          mixer_d_inner, cp_impl))
    uneven = rank_layers(m.num_layers, P)[4] & (P.pp > 2)
    if np.any(uneven):
        # rank 1 where it exists (the rows with pp <= 2 are masked out below anyway)
        mid = rank_memory_arrays(m, P, np.minimum(1, P.pp - 1), dtype, system, gpu,
                                 clamp=clamp, remat_named=remat_named,
                                 loss_bytes=loss_bytes, act_cache=act_cache,
                                 optimizer_bytes=optimizer_bytes, fsdp2=fsdp2,
                                 dispatch_bytes=dispatch_bytes, expert_input=expert_input,
                                 te_inputs=te_inputs, mixer_d_inner=mixer_d_inner, cp_impl=cp_impl)
        peak = np.where(uneven, np.maximum(peak, mid), peak)
    # a split backward's pending weight gradients grow with the rank and may outweigh the
    # stash (``activations.stash_peak``), and DualPipe's middle ranks stash one more: every
    # rank of those plans (none of them in the default search)
    every = np.broadcast_to(attr_by_code(P.schedule, "splits_backward")
                            | attr_by_code(P.schedule, "mirrored"), np.shape(peak))
    if np.any(every):
        peak = np.array(peak, dtype=float)
        if peak.ndim == 0:
            return _every_rank_peak(m, P, dtype, system, gpu, clamp, remat_named, loss_bytes,
                                    act_cache, optimizer_bytes, fsdp2, dispatch_bytes,
                                    expert_input, te_inputs, mixer_d_inner, cp_impl)
        rows = np.flatnonzero(every)
        peak.reshape(-1)[rows] = _every_rank_peak(m, _take(P, rows), dtype, system, gpu,
                                                  clamp, remat_named, loss_bytes,
                                                  act_cache, optimizer_bytes, fsdp2,
                                                  dispatch_bytes, expert_input, te_inputs,
                                                  mixer_d_inner, cp_impl)
    return peak


def _every_rank_peak(m: ModelSpec, P: PlanArrays, dtype: str, system: SystemConfig | None,
                     gpu, clamp=False, remat_named=False, loss_bytes=None, act_cache=None,
                     optimizer_bytes=None, fsdp2=False, dispatch_bytes=None,
                     expert_input=None, te_inputs=None,
                     mixer_d_inner=None, cp_impl=None) -> np.ndarray:
    """The largest ``rank_memory_arrays`` over ranks ``0 … pp-1`` of each plan: rank ``r``
    is evaluated on the plans with ``pp > r`` only."""
    pp = np.atleast_1d(P.pp)
    peak = np.full(pp.shape, -np.inf)
    for r in range(int(pp.max()) if pp.size else 0):
        rows = np.flatnonzero(pp > r)
        sub = _take(P, rows)
        peak[rows] = np.maximum(peak[rows], rank_memory_arrays(
            m, sub, r, dtype, system, gpu, clamp=clamp, remat_named=remat_named,
            loss_bytes=loss_bytes, act_cache=act_cache, optimizer_bytes=optimizer_bytes,
            fsdp2=fsdp2, dispatch_bytes=dispatch_bytes, expert_input=expert_input,
            te_inputs=te_inputs, mixer_d_inner=mixer_d_inner, cp_impl=cp_impl))
    return peak.reshape(np.shape(P.pp))


def _take(P: PlanArrays, rows: np.ndarray) -> PlanArrays:
    """The plans ``rows`` of ``P`` (0-d fields broadcast first)."""
    n = np.shape(np.atleast_1d(P.pp))
    return PlanArrays(**{f.name: np.broadcast_to(getattr(P, f.name), n)[rows]
                         for f in fields(P)})
