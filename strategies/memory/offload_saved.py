"""The saved activations Megatron-Core's fine-grained activation offloading moves to host memory
(plan ``offload_modules``, ``strategies.cost.offload``): one layer's offloaded bytes, which the
stash no longer holds, and the groups still on the GPU at the peak. The memory arrays
(``rank_activations``), the scalar stash (``job_layers``) and the copy-time model
(``cost.stage.offload_time``) read these."""
from __future__ import annotations

import numpy as np

from strategies.cost.offload import IN_FLIGHT_GROUPS, routed_parts
from strategies.cost.recompute import part_selected
from strategies.memory.moe_saved import routed_activation_bytes
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
