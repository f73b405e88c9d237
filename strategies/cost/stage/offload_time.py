"""The exposed seconds of fine-grained activation offloading's copies (plan ``offload_modules``,
``strategies.cost.offload``) and of layer-level CPU offloading's (plan
``cpu_offloading_num_layers``, ``strategies.cost.layer_offload``) per layer and micro-batch,
added to the stage-cost record's layer times, which the estimate, the lower bound and the
simulator all read (one source).

An offloaded MoE layer's group (``memory.offload_saved.routed_offload_bytes``) crosses the host
link (``GPU.host_link_bandwidth``) once each way. Forward: the D2H copy starts when the module's
forward ends and the next group's waits behind it on the one ``d2h_stream``; in steady state
each group has the forward compute from one offloaded layer to the next to hide in, and what it
outlasts that accumulates until the backward's reloads wait on it (each H2D first waits for
its group's D2H event). Backward: the H2D of layer ``k-1`` starts when layer ``k``'s module
backward ends and must be done when layer ``k-1``'s module backward starts: the backward from
one offloaded layer to the next less the module's own backward (its routed fc1 and fc2
grouped GEMMs). Exposed per layer: ``cost.offload.exposed_copy_seconds`` of each.
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
from strategies.errors import SpecError
from strategies.memory.offload_saved import dense_layer_stash_bytes, routed_offload_bytes
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


def expert_mlp_bwd(mk: ModelSpec, si: StageInputs) -> Any:
    """Backward seconds (data and weight gradient) of one layer of ``mk``'s routed experts'
    fc1 and fc2 grouped GEMMs, priced as the layer's (``gemm_time``; the router and the
    latent projections left out): the offloaded module's own backward."""
    P, fw = si.P, si.fw
    parts = gemm_shapes.layer_gemm_parts(mk, P.mbs, P.tp, P.cp, P.ep, None, P.etp, si.load,
                                         whole_split(P.tp, P.sp, fw))
    keep = [i for i, (part, g) in enumerate(parts) if part == "routed_mlp" and g[4] is not None]
    shares = fixed_shares(parts, mk, P.ep, fw)
    formats = scope_formats(parts, mk, si.sy.quant_scope, si.dtype)
    return si.slow * gemms_time_bwd_split([parts[i][1] for i in keep], P.tp, si.gpu, si.dtype,
                                          P.tp_comm_overlap, fw, si.sy,
                                          [shares[i] for i in keep],
                                          None if formats is None
                                          else [formats[i] for i in keep])[0]


def offload_exposed(mk: ModelSpec, si: StageInputs, fwd_period: Any,
                    bwd_period: Any) -> tuple[Any, Any]:
    """``(forward, backward)`` exposed seconds of one layer of ``mk`` (the model's mean layer or
    its MoE kind) whose offloaded group has ``fwd_period``/``bwd_period`` seconds of compute
    until the next offloaded layer's (module docstring); 0 where the plan offloads nothing."""
    P, fw, gpu = si.P, si.fw, si.gpu
    if not mk.is_moe or not np.any(P.offload_modules):
        return 0.0, 0.0
    bw = host_link(gpu, "offload_modules", P.offload_modules)
    st = stack_memory(fw, si.dtype, gpu.fp8_tn_only, None)    # the stack's memory terms
    nbytes = routed_offload_bytes(mk, mk.seq_length, P.mbs, P.tp, P.cp, P.sp, P.etp, si.load,
                                  P.recompute, P.recompute_modules, P.offload_modules,
                                  st.act_cache, st.expert_input)
    return (exposed_copy_seconds(nbytes, bw, fwd_period),
            exposed_copy_seconds(nbytes, bw, bwd_period - expert_mlp_bwd(mk, si)))


def with_offload(m: ModelSpec, si: StageInputs, fwd: Any, bwd: Any,
                 by_kind: dict) -> tuple[Any, Any, dict]:
    """The mean layer's ``fwd``/``bwd`` seconds and the ``by_kind`` records with each offloaded
    layer's exposed copies added (``offload_exposed``): a model of one kind, its layer's own
    compute as the period; with MoE and other layers (``by_kind["moe"]``), the stage's compute
    per MoE layer (every kind's layers by ``ModelSpec.layer_counts``), the MoE layer charged
    and the mean layer its share. The multi-token-prediction block's MoE layer is not charged."""
    if np.any(si.P.cpu_offloading_num_layers):
        f, b = layer_offload_exposed(m, si, fwd, bwd)
        return fwd + f, bwd + b, by_kind
    if not np.any(si.P.offload_modules) or not m.is_moe:
        return fwd, bwd, by_kind
    counts = {k: n for k, n in m.layer_counts().items() if n}
    if "moe" not in by_kind or len(counts) < 2:
        f, b = offload_exposed(m, si, fwd, bwd)
        return fwd + f, bwd + b, by_kind
    n_moe = counts["moe"]
    per_f = sum(n * by_kind[k].layer_fwd for k, n in counts.items()) / n_moe
    per_b = sum(n * by_kind[k].layer_bwd for k, n in counts.items()) / n_moe
    f, b = offload_exposed(m.of_kind("moe"), si, per_f, per_b)
    moe = by_kind["moe"]
    out = dict(by_kind, moe=replace(moe, layer_fwd=moe.layer_fwd + f, layer_bwd=moe.layer_bwd + b))
    share = n_moe / m.num_layers
    return fwd + share * f, bwd + share * b, out


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
