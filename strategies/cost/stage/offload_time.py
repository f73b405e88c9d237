"""The exposed seconds of fine-grained activation offloading's copies (plan ``offload_modules``,
``strategies.cost.offload``) and of layer-level CPU offloading's (plan
``cpu_offloading_num_layers``, ``strategies.cost.layer_offload``) per layer and micro-batch,
added to the stage-cost record's layer times, which the estimate, the lower bound and the
simulator all read (one source).

An offloaded layer's groups (``memory.offload_saved.offloaded_bytes``: the routed experts'
modules, the attention side's) cross the host link (``GPU.host_link_bandwidth``) once each way.
Forward: each group's D2H copy starts when its module's forward ends and queues on the one
``d2h_stream``; in steady state the groups have the forward compute from one offloaded layer
to the next to hide in, and what they outlast accumulates until the backward's reloads wait
on it (each H2D first waits for its group's D2H event): ``cost.offload.
exposed_copy_seconds``. Backward: one group's reload starts at each offloaded module's
backward end and must be done where its own module's backward starts, group by group
(``offload_reload.reload_wait``); with the routed experts only, the period is from one
offloaded (MoE) layer to the next (every kind's layers between).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from strategies.cost import gemm_shapes
from strategies.cost.gemm_time import fixed_shares, gemms_time_bwd_split, whole_split
from strategies.cost.layer_offload import offload_exposed_total
from strategies.cost.offload import exposed_copy_seconds
from strategies.cost.quant_scope import scope_formats
from strategies.cost.stage.inputs import StageInputs
from strategies.cost.stage.offload_reload import (RELOAD_ORDER, group_spans, groups_on,
                                                  module_copies, reload_wait)
from strategies.errors import SpecError
from strategies.memory.offload_saved import (ATTENTION_BITS, dense_layer_stash_bytes,
                                             offloaded_bytes)
from strategies.memory.rank_components import runs_exchange
from strategies.memory.stack_terms import stack_memory
from strategies.model import ModelSpec


def host_link(gpu: Any, field: str, value: Any) -> float:
    """``gpu``'s host link in bytes/s per direction (``GPU.host_link_bandwidth``); a plan that
    offloads (``field``, ``value``) on a GPU without one is refused (``SpecError``)."""
    if gpu.host_link_bandwidth is None:
        raise SpecError(field, value, f"{gpu.name} has no host link bandwidth in the catalog "
                        "(topologies.gpus.host_link; a custom GPU sets host_link_gb_per_s)")
    return gpu.host_link_bandwidth


def gemms_bwd(mk: ModelSpec, si: StageInputs, keep: Any) -> Any:
    """Backward seconds (data and weight gradient) of the GEMMs of one layer of ``mk`` that
    ``keep(part, gemm)`` picks (``gemm_shapes.layer_gemm_parts``), priced as the layer's
    (``gemm_time``): an offloaded module's own backward."""
    P, fw = si.P, si.fw
    parts = gemm_shapes.layer_gemm_parts(mk, P.mbs, P.tp, P.cp, P.ep, None, P.etp, si.load,
                                         whole_split(P.tp, P.sp, fw))
    pick = [i for i, (part, g) in enumerate(parts) if keep(part, g)]
    if not pick:
        return 0.0
    shares = fixed_shares(parts, mk, P.ep, fw)
    formats = scope_formats(parts, mk, si.sy.quant_scope, si.dtype)
    return si.slow * gemms_time_bwd_split([parts[i][1] for i in pick], P.tp, si.gpu, si.dtype,
                                          P.tp_comm_overlap, fw, si.sy,
                                          [shares[i] for i in pick],
                                          None if formats is None
                                          else [formats[i] for i in pick])[0]


def expert_mlp_bwd(mk: ModelSpec, si: StageInputs) -> Any:
    """Backward seconds of one layer of ``mk``'s routed experts' fc1 and fc2 grouped GEMMs
    (``gemms_bwd``; the router and the latent projections left out): the routed modules'
    own backward."""
    return gemms_bwd(mk, si, lambda part, g: part == "routed_mlp" and g[4] is not None)


def offload_exposed(mk: ModelSpec, si: StageInputs, fwd_period: Any, bwd_period: Any,
                    attn_bwd: Any = 0.0) -> tuple[Any, Any]:
    """``(forward, backward)`` exposed seconds of one offloaded layer of ``mk`` (the model's
    mean layer or one kind of it) with ``fwd_period``/``bwd_period`` seconds of compute until
    the next offloaded layer's (module docstring; the layer's own where every layer
    offloads, the attention side), ``attn_bwd`` its attention core's backward. Forward: the
    D2H queue of the layer's groups (``memory.offload_saved.offloaded_bytes``' copied bytes)
    against the forward period, ``exposed_copy_seconds``. Backward: group by group, each
    reload between the module end that starts it and its own module's start
    (``offload_reload.reload_wait``). 0 where the layer offloads nothing."""
    P, fw, gpu = si.P, si.fw, si.gpu
    mask = np.asarray(P.offload_modules, dtype=np.int64)
    side = bool(np.any(mask & ATTENTION_BITS))
    if not np.any(mask) or not (mk.is_moe or side):
        return 0.0, 0.0
    bw = host_link(gpu, "offload_modules", P.offload_modules)
    st = stack_memory(fw, si.dtype, gpu.fp8_tn_only, None)    # the stack's memory terms
    a2a = runs_exchange(P.cp_comm, fw.cp_impl, "a2a") | runs_exchange(P.cp_comm, fw.cp_impl,
                                                                      "a2a+p2p")

    def copied(m):
        return offloaded_bytes(mk, mk.seq_length, P.mbs, P.tp, P.cp, P.sp, P.etp, si.load,
                               P.recompute, P.recompute_modules, m, P.flash_attn,
                               st.act_cache, st.expert_input, st.te_inputs, a2a)[1]

    moe = mk.layer_shares().get("moe", 0.0) > 0
    on = groups_on(mask, mk.is_mla, moe, P.recompute, P.recompute_modules)
    names = tuple(n for n in RELOAD_ORDER if np.any(on[n]))

    def gemms(keep, use=True):
        return gemms_bwd(mk, si, keep) if use else 0.0
    spans = group_spans(
        bwd_period, attn_bwd, gemms(lambda part, g: part == "attn" and g[4] is True, side),
        gemms(lambda part, g: part in ("attn", "mla_up") and g[4] is not True, side),
        gemms(lambda part, g: part == "routed_mlp" and g[4] is False, moe),
        gemms(lambda part, g: part == "routed_mlp" and g[4] is True, moe))
    wait = reload_wait(spans, on, module_copies(copied, names, bw), bwd_period)
    return exposed_copy_seconds(copied(mask), bw, fwd_period), wait


def with_offload(m: ModelSpec, si: StageInputs, fwd: Any, bwd: Any, by_kind: dict,
                 attn_bwd: Any = 0.0) -> tuple[Any, Any, dict, Any, Any]:
    """The mean layer's ``fwd``/``bwd`` seconds and the ``by_kind`` records with each offloaded
    layer's exposed copies added, and those exposed seconds per mean layer ``(forward,
    backward)`` (the step breakdown's ``offload``; each kind's record carries its own in
    ``layer_offload_fwd``/``_bwd``). Routed modules only (``offload_exposed``): a model of
    one kind, its layer's own compute as the period; with MoE and other layers
    (``by_kind["moe"]``), the stage's compute per MoE layer (every kind's layers by
    ``ModelSpec.layer_counts``), the MoE layer charged and the mean layer its share. With
    attention-side modules every layer offloads (``offload_exposed``, each kind against
    its own layer; ``attn_bwd``: the mean layer's core backward). Layer-level offloading:
    ``layer_offload_exposed``. The multi-token-prediction block's layer is not charged."""
    if np.any(si.P.cpu_offloading_num_layers):
        f, b = layer_offload_exposed(m, si, fwd, bwd)
        return fwd + f, bwd + b, by_kind, f, b
    if not np.any(si.P.offload_modules):
        return fwd, bwd, by_kind, 0.0, 0.0
    counts = {k: n for k, n in m.layer_counts().items() if n}
    if np.any(np.asarray(si.P.offload_modules, dtype=np.int64) & ATTENTION_BITS):
        if len(counts) < 2 or not set(counts) <= set(by_kind):
            f, b = offload_exposed(m, si, fwd, bwd, attn_bwd)
            return fwd + f, bwd + b, by_kind, f, b
        out, f_all, b_all = dict(by_kind), 0.0, 0.0
        for k, n in counts.items():
            rec = by_kind[k]
            f, b = offload_exposed(m.of_kind(k), si, rec.layer_fwd, rec.layer_bwd,
                                   rec.attn_bwd)
            out[k] = replace(rec, layer_fwd=rec.layer_fwd + f, layer_bwd=rec.layer_bwd + b,
                             layer_offload_fwd=si.full(f), layer_offload_bwd=si.full(b))
            f_all, b_all = f_all + n / m.num_layers * f, b_all + n / m.num_layers * b
        return fwd + f_all, bwd + b_all, out, f_all, b_all
    if not m.is_moe:
        return fwd, bwd, by_kind, 0.0, 0.0
    if "moe" not in by_kind or len(counts) < 2:
        f, b = offload_exposed(m, si, fwd, bwd)
        return fwd + f, bwd + b, by_kind, f, b
    n_moe = counts["moe"]
    per_f = sum(n * by_kind[k].layer_fwd for k, n in counts.items()) / n_moe
    per_b = sum(n * by_kind[k].layer_bwd for k, n in counts.items()) / n_moe
    f, b = offload_exposed(m.of_kind("moe"), si, per_f, per_b)
    moe = by_kind["moe"]
    out = dict(by_kind, moe=replace(moe, layer_fwd=moe.layer_fwd + f, layer_bwd=moe.layer_bwd + b,
                                    layer_offload_fwd=si.full(f), layer_offload_bwd=si.full(b)))
    share = n_moe / m.num_layers
    return fwd + share * f, bwd + share * b, out, share * f, share * b


def layer_offload_exposed(m: ModelSpec, si: StageInputs, fwd: Any, bwd: Any) -> tuple[Any, Any]:
    """``(forward, backward)`` seconds per mean layer and micro-batch that layer-level CPU
    offloading (plan ``cpu_offloading_num_layers``, ``cost.layer_offload``) adds to a dense
    model of ``fwd``/``bwd`` seconds a layer: each of the ``N`` groups (one layer's stash,
    ``memory.offload_saved.dense_layer_stash_bytes``) crosses the host link each way against
    its window's layers (``layer_offload.offload_exposed_total``), the sum spread over the
    ``num_layers`` layers the record's mean layer stands for. 0 where a plan offloads none."""
    P, fw, gpu = si.P, si.fw, si.gpu
    n_all = np.asarray(P.cpu_offloading_num_layers, dtype=float) + si.zeros
    bw = host_link(gpu, "cpu_offloading_num_layers", P.cpu_offloading_num_layers)
    a2a = runs_exchange(P.cp_comm, fw.cp_impl, "a2a") | runs_exchange(P.cp_comm, fw.cp_impl,
                                                                      "a2a+p2p")
    st = stack_memory(fw, si.dtype, gpu.fp8_tn_only, None)    # the stack's memory terms
    nbytes = dense_layer_stash_bytes(m, P.mbs, P.tp, P.cp, P.sp, P.recompute, P.flash_attn,
                                     P.recompute_modules, st.remat_named, st.act_cache,
                                     st.te_inputs, a2a)
    f_out, b_out = si.zeros + 0.0, si.zeros + 0.0
    for n in np.unique(n_all[n_all > 0]):
        f, b = offload_exposed_total(nbytes, bw, fwd, bwd, m.num_layers, int(n))
        f_out = np.where(n_all == n, f / m.num_layers, f_out)
        b_out = np.where(n_all == n, b / m.num_layers, b_out)
    return f_out[()], b_out[()]
