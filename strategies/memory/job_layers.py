"""One transformer layer's stash of a job: its shapes, plan, stack and precision read into
the per-layer rules (``recompute_saved``, ``moe_saved``, ``saved_precision``), memoised."""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from strategies.cost import token_counts
from strategies.cost.cp_a2a import saved_delta
from strategies.cost.recompute import modules_mask
from strategies.cost.offload import offload_mask
from strategies.memory.moe_saved import routed_stash_correction
from strategies.memory.offload_saved import layer_kept_share, offloaded_bytes
from strategies.memory.recompute_saved import layer_activation_bytes
from strategies.memory.mixer_saved import mixer_saved_delta
from strategies.memory.stack_terms import job_stack_memory
from strategies.memory.te_linear_saved import te_linear_saved_delta
from strategies.model import ModelSpec

if TYPE_CHECKING:
    from strategies.job import Job


def job_activation_cache(job: Job) -> float | None:
    """``activation_cache_bytes`` of the job's stack and precision
    (``stack_terms.StackMemory.act_cache``)."""
    return job_stack_memory(job).act_cache


def job_expert_input_bytes(job: Job) -> float | None:
    """``expert_input_bytes`` of the job's stack (its experts, its Transformer Engine
    release) and precision, on the GPU type the memory model prices (``Cluster.gpu``;
    ``stack_terms.StackMemory.expert_input``)."""
    return job_stack_memory(job).expert_input


def job_te_linear_bytes(job: Job) -> tuple[float, float, float, float] | None:
    """``te_linear_input_bytes`` of the job's stack (its modules, its Transformer Engine
    release) and precision, on the GPU type the memory model prices (``Cluster.gpu``;
    ``stack_terms.StackMemory.te_inputs``)."""
    return job_stack_memory(job).te_inputs


def job_dispatch_bytes(job: Job) -> float:
    """``moe_bytes.dispatch_element_bytes`` of the job's stack and precision
    (``stack_terms.StackMemory.dispatch_bytes``)."""
    return job_stack_memory(job).dispatch_bytes


def job_layer_activation_bytes(job: Job, recompute: str | None = None,
                               model: ModelSpec | None = None) -> float:
    """``layer_activation_bytes`` with the job's shapes and plan (``recompute`` overrides;
    ``model``: a layer-kind view of the job's model, ``stash_kinds``) and its stack's
    terms (``stack_terms.job_stack_memory``)."""
    p, st = job.plan, job_stack_memory(job)
    return _layer_bytes(job.model if model is None else model, job.seq_len, p.mbs, p.tp, p.sp,
                        p.cp, recompute or p.recompute, p.flash_attn, p.recompute_modules,
                        st.remat_named, st.act_cache, p.ep, p.imbalance,
                        p.capacity_factor, p.expert_tp, st.clamp, st.expert_input,
                        st.te_inputs, p.moe_pad_to_capacity, st.mixer_d_inner, st.cp_a2a,
                        offload_mask(p.offload_modules),
                        p.cpu_offloading_num_layers or 0, job.model.num_layers)


@lru_cache(maxsize=4096, typed=True)
def _layer_bytes(mdl: ModelSpec, seq_len: int, mbs: int, tp: int, sp: bool, cp: int, rc: str,
                 flash_attn: bool, recompute_modules: tuple | None, remat_named: bool,
                 cache: float | None, ep: int, imbalance: float, capacity_factor: float,
                 expert_tp: int | None, clamp: bool, expert_input: float | None = None,
                 te_inputs: tuple[float, float, float, float] | None = None,
                 pad: bool = False, mixer_d_inner: int | None = None,
                 cp_a2a: bool = False, offload: int = 0, cpu_layers: int = 0,
                 num_layers: int = 1) -> float:
    """``job_layer_activation_bytes`` of the plan fields it reads (bytes; a pure function of
    frozen specs and numbers, memoised: a scalar estimate asks it for the same layer once
    per stage and chunk)."""
    base = layer_activation_bytes(mdl, seq_len, mbs, tp, sp, cp, rc, flash_attn,
                                  recompute_modules, remat_named, cache)
    code = {"none": 0, "selective": 1, "full": 2, "op": 3}[rc]
    mods = modules_mask(recompute_modules) if recompute_modules else 0
    load = token_counts.moe_load(ep, imbalance, capacity_factor, mdl, mbs, tp, cp, expert_tp,
                                 pad)
    extra, _ = routed_stash_correction(mdl, seq_len, mbs, tp, cp, sp, expert_tp, load, code,
                                       mods, clamp=clamp, cache=cache,
                                       expert_input=expert_input)
    te = te_linear_saved_delta(mdl, seq_len, mbs, tp, sp, cp, code, mods, flash_attn, te_inputs)
    mixer = mixer_saved_delta(mdl, seq_len, mbs, tp, code, mixer_d_inner)
    # TE's all-to-all CP (and a2a+p2p from TE 2.15 on, §5.191) keeps its head-sharded output
    # too (``cp_a2a.saved_delta``, as ``rank_activations`` adds it on the arrays path)
    a2a = float(saved_delta(mdl, mbs, tp, cp, code, mods, flash_attn)[0]) if cp_a2a else 0.0
    # what fine-grained activation offloading moves to host memory (``offload_saved``)
    off = float(offloaded_bytes(mdl, seq_len, mbs, tp, cp, sp, expert_tp, load, code, mods,
                                offload, flash_attn, cache, expert_input, te_inputs,
                                cp_a2a)[0])
    # layer-level CPU offloading of the first ``cpu_layers`` of ``num_layers`` (the mean
    # layer's share kept, ``offload_saved.layer_kept_share``)
    kept = layer_kept_share(cpu_layers, num_layers)
    return float(kept * (base + extra + te + mixer + a2a - off))
