"""The saved activations Megatron-Core's fine-grained activation offloading moves to host memory
(plan ``offload_modules``, ``strategies.cost.offload``): one layer's offloaded bytes, which the
stash no longer holds, and the groups still on the GPU at the peak; and what layer-level CPU
offloading (plan ``cpu_offloading_num_layers``, ``strategies.cost.layer_offload``) keeps.
The memory arrays (``rank_activations``), the scalar stash (``job_layers``) and the copy-time
model (``cost.stage.offload_time``) read these."""
from __future__ import annotations

import numpy as np

from strategies.cost.cp_a2a import saved_delta
from strategies.cost.layer_offload import RESIDENT_GROUPS
from strategies.cost.offload import (ATTENTION_MODULES, IN_FLIGHT_GROUPS, offload_mask, offloads,
                                     routed_parts)
from strategies.cost.recompute import part_selected
from strategies.memory.layer_terms import OFFLOAD_MODULE_TERMS, TERM_KINDS, layer_activation_terms
from strategies.memory.moe_saved import routed_activation_bytes
from strategies.memory.stash_arrays import layer_act_arrays
from strategies.memory.te_linear_saved import te_linear_saved_delta, te_module_deltas
from strategies.model import ModelSpec


def routed_offload_bytes(model: ModelSpec, seq_len: int, micro_batch_size, tp, cp, sp, etp,
                         load, rc, modules, offload, cache=None, expert_input=None):
    """Bytes per GPU and micro-batch of the mean layer's routed-expert tensors that the modules
    of ``offload`` (``cost.offload`` bit mask) copy to host memory (numbers or arrays): the
    tensors of ``routed_activation_bytes`` as they run (the dispatched copies at the hottest
    rank's ``load``, Transformer Engine's saved precision ``expert_input``) that each module
    saves (``cost.offload.routed_parts``; the latent projection's input is outside the expert
    MLP, left out), after recomputation ``rc`` with the selective ``modules``: nothing where
    the layer is recomputed whole or the ``moe`` module redoes it (Megatron-Core refuses that
    pair), and fc2's input not where ``moe_act`` discards it. 0 for a dense layer. Megatron-
    Core's ``min_offloaded_tensor_size`` (2^20 elements) is below these tensors at any
    training shape and is not applied."""
    if not model.is_moe:
        return 0.0 * np.asarray(offload, dtype=float)
    w1, wa, w2 = routed_parts(offload)
    args = (model, seq_len, micro_batch_size, tp, cp, sp, etp, load, cache, expert_input)
    f1, fa, f2 = (routed_activation_bytes(*args, parts=p, latent_proj=False)[1]
                  for p in ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)))
    rc = np.asarray(rc)
    dropped = (rc == 2) | (rc == 3) | part_selected(rc, modules, "routed_mlp")
    kept_fc2 = np.where(part_selected(rc, modules, "routed_act"), 0.0, f2)
    return np.where(dropped, 0.0, w1 * f1 + wa * fa + w2 * kept_fc2)[()]


def attention_offload_bytes(model: ModelSpec, seq_len: int, b, tp, cp, sp, rc, modules, flash,
                            offload, cache=None, te_inputs=None, cp_a2a=False):
    """``(held, copied)``: bytes per GPU and micro-batch of the mean layer's attention-side
    tensors that the modules of ``offload`` (``cost.offload`` bit mask) take off the GPU, and
    the bytes their groups copy to host memory (numbers or arrays). Each group's tensors are
    the 16-bit table's (``layer_terms.OFFLOAD_MODULE_TERMS``, with ``cache``), split as the
    stash splits them (``seq`` by ``tp`` only with ``sp``, ``tp`` by ``tp``, ``/cp``), at
    Transformer Engine's saved precision (``te_linear_saved.te_module_deltas``), as the stash
    holds them after recomputation ``rc`` with the selective ``modules``:

    * nothing where the layer is recomputed whole (``rc`` 2, 3);
    * ``attn_norm``: the input norm's input where the norm is its own module (MLA), else 0;
    * ``qkv_linear``: the fused norm's input and its output (not where the ``layernorm``
      recompute drops it), at its saved precision; with MLA refused (``cost.offload``);
    * ``core_attn``: q, k, v (MLA: not where ``mla_up_proj`` drops them), the scores where
      the kernel is unfused, the fused kernel's output, TE's all-to-all CP output
      (``cp_a2a``); nothing where the ``core_attn`` recompute runs it under its checkpoint
      (attention.py L1555-1608: that path neither enters nor commits the group);
    * ``attn_proj``: the projection's saved input: its quantised copy, or the 16-bit output
      of the fused kernel where it saves that (TE's ``save_original_input``, or no TE
      precision): then held once (``core_attn``'s) but copied twice;
    * ``mlp_norm``: an MoE layer's pre-MLP norm input (a dense layer's: 0).
    """
    mask = np.asarray(offload, dtype=np.int64)
    t = layer_activation_terms(model, seq_len, 1, cache)
    seq_div = np.where(sp, tp, 1.0)

    def split(name):
        n = b * t[name]
        return n / (seq_div if TERM_KINDS[name] == "seq" else tp) / cp

    def on(name):
        return offloads(mask, name)

    qkv_te, proj_te = te_module_deltas(model, seq_len, b, tp, sp, cp, rc, modules, flash,
                                       te_inputs)
    scores = part_selected(rc, modules, "scores")
    kept = np.logical_and(flash, np.logical_not(scores))      # the fused kernel's output
    a2a = saved_delta(model, b, tp, cp, rc, modules, flash)[0] if np.any(cp_a2a) else 0.0
    mla_up = part_selected(rc, modules, "mla_up") if model.is_mla else False
    qkv_in = np.where(part_selected(rc, modules, "norm_outputs"), 0.0, split("qkv_input"))
    score = sum(split(n) for n in OFFLOAD_MODULE_TERMS["core_attn"][2:5])
    core = np.where(mla_up, 0.0, split("q") + split("k_v")) \
        + np.where(flash, 0.0, score) + np.where(kept, split("proj_input"), 0.0) \
        + np.where(cp_a2a, a2a, 0.0)
    proj = np.where(kept, 0.0, split("proj_input")) + proj_te
    moe = model.layer_shares().get("moe", 0.0) / model.mlp_share
    held = (np.where(on("attn_norm") & model.is_mla, split("ln1_input"), 0.0)
            + np.where(on("qkv_linear"), split("ln1_input") + qkv_in + qkv_te, 0.0)
            + np.where(on("core_attn") & ~scores, core, 0.0)
            + np.where(on("attn_proj"), proj, 0.0)
            + np.where(on("mlp_norm"), moe * split("ln2_input"), 0.0))
    # the projection saving the kernel's own 16-bit output: copied again by its group
    again = np.where(on("attn_proj") & kept & (np.asarray(proj_te) == 0.0),
                     split("proj_input"), 0.0)
    rc = np.asarray(rc)
    whole = (rc == 2) | (rc == 3)
    return np.where(whole, 0.0, held)[()], np.where(whole, 0.0, held + again)[()]


#: the bits of the attention side's modules in a ``cost.offload`` mask
ATTENTION_BITS = offload_mask(ATTENTION_MODULES)


def offloaded_bytes(model: ModelSpec, seq_len: int, b, tp, cp, sp, etp, load, rc, modules,
                    offload, flash, cache=None, expert_input=None, te_inputs=None,
                    cp_a2a=False):
    """``(held, copied)``: bytes per GPU and micro-batch of one layer of ``model`` that the
    plan's ``offload`` groups take off the GPU, and that they copy over the host link: the
    routed experts' (``routed_offload_bytes``, held and copied once) and the attention
    side's (``attention_offload_bytes``). What the memory arrays, the scalar stash and the
    copy-time model (``cost.stage.offload_time``) all read."""
    routed = routed_offload_bytes(model, seq_len, b, tp, cp, sp, etp, load, rc, modules,
                                  offload, cache, expert_input)
    if not np.any(np.asarray(offload, dtype=np.int64) & ATTENTION_BITS):
        return routed, routed
    held, copied = attention_offload_bytes(model, seq_len, b, tp, cp, sp, rc, modules, flash,
                                           offload, cache, te_inputs, cp_a2a)
    return (routed + held)[()], (routed + copied)[()]


def resident_offload_bytes(group_bytes):
    """Bytes of offload groups on the GPU at the stash peak besides the stash:
    ``IN_FLIGHT_GROUPS`` groups of ``group_bytes`` (the largest offloaded layer's; the margin
    group and the one reloaded ahead, ``cost.offload``)."""
    return IN_FLIGHT_GROUPS * np.asarray(group_bytes, dtype=float)


def layer_kept_share(n, num_layers: int):
    """Share of a block's ``num_layers`` layers whose stash stays on the GPU under
    layer-level CPU offloading of the first ``n`` (plan ``cpu_offloading_num_layers``,
    ``cost.layer_offload``; 0: 1): ``1 - n/num_layers`` (arrays). With ``pp = 1`` (Megatron-
    Core's rule) a micro-batch's stash is ``num_layers`` mean layers, so it keeps
    ``num_layers - n`` of them."""
    return 1.0 - np.asarray(n, dtype=float) / num_layers


def resident_layer_bytes(layer_bytes, n):
    """Bytes of layer-level offload groups back on the GPU at the stash peak:
    ``RESIDENT_GROUPS`` layers' stash of ``layer_bytes`` where ``n > 0`` (the last offloaded
    group, reloaded as the backward reaches its window layer, ``cost.layer_offload``)."""
    return np.where(np.asarray(n) > 0, RESIDENT_GROUPS * np.asarray(layer_bytes, dtype=float),
                    0.0)[()]


def dense_layer_stash_bytes(model: ModelSpec, b, tp, cp, sp, rc, flash, modules, remat_named,
                            cache, te_inputs, cp_a2a):
    """Bytes per GPU and micro-batch one dense transformer layer stashes, as
    ``rank_activations.RankActivations.per_layer`` sums them for a dense layer (the 16-bit
    table ``layer_act_arrays``, TE's saved precisions ``te_linear_saved_delta``, TE's
    all-to-all CP output ``cp_a2a.saved_delta`` where ``cp_a2a``): the group layer-level CPU
    offloading copies (every tensor TE marks, ``cost.layer_offload``); arrays."""
    act, _ = layer_act_arrays(model, b, tp, cp, sp, rc, flash, modules, remat_named, cache)
    te = te_linear_saved_delta(model, model.seq_length, b, tp, sp, cp, rc, modules, flash,
                               te_inputs)
    a2a = np.where(cp_a2a, saved_delta(model, b, tp, cp, rc, modules, flash)[0], 0.0) \
        if np.any(cp_a2a) else 0.0
    return (act + te + a2a)[()]
