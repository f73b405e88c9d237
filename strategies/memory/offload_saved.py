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
from strategies.cost.offload import IN_FLIGHT_GROUPS, routed_parts
from strategies.cost.recompute import part_selected
from strategies.memory.moe_saved import routed_activation_bytes
from strategies.memory.stash_arrays import layer_act_arrays
from strategies.memory.te_linear_saved import te_linear_saved_delta
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
