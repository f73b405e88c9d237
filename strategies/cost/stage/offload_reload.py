"""The backward's reloads of Megatron-Core's fine-grained offload groups, group by group
(plan ``offload_modules``; docs/calibration.md §5.213): the seconds a layer's backward waits
for them, as ``cost.stage.offload_time.attention_exposed`` charges them.

Source: NVIDIA/Megatron-LM@d98e8a64dd ``megatron/core/pipeline_parallel/
fine_grained_activation_offload.py``. Each group's commit (``FineGrainedOffloadingGroupCommit
Function``) sits at the end of its module's forward, so its backward runs where the module's
backward starts: there the compute stream waits for the group's reload
(``on_group_commit_backward`` L1288-1308). Its start (``FineGrainedOffloadingGroupStart
Function``) sits at the module's input, so its backward runs where the module's backward ends:
there the next group of the reload stack (``_groups_to_reload``, the groups in the order their
forwards committed, last first) starts its reload on ``h2d_stream`` (``on_group_start_backward``
→ ``bulk_reload`` → ``bulk_reload_group`` L1176-1196, L1271-1286, L1332-1343), one group per
event. A group whose tensors are needed before its reload was started is reloaded on demand by
``tensor_pop`` (L1063-1075) on the compute stream. So group ``j``'s reload starts at the
``j``-th module end of the backward (the first: the previous layer's last) and must be done
where its own module's backward starts; adjacent groups (``attn_proj`` then ``core_attn``)
leave their reload almost no time.

Where each group's module sits in a layer's backward (backward order, seconds from the layer's
backward start): the MLP side first (``bwd - A``; the routed experts' fc2 then fc1 grouped
GEMMs at its start), then the attention side ``A``: the projection's GEMMs, the core, the QKV
GEMMs. Spans: ``mlp_norm`` the whole MLP side (its commit follows the MLP's bias-dropout-add,
transformer_layer.py L1109-1114), ``fused_group_mlp`` fc2 and fc1, ``moe_act`` the point
between them, ``expert_fc1`` fc1, ``attn_norm`` the whole attention side (L759-762),
``attn_proj``, ``core_attn``, ``qkv_linear`` their own. The reload stack's order: the reverse
of the forward's commits, ``RELOAD_ORDER``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost.offload import offload_mask, offloads
from strategies.cost.recompute import part_selected

#: the groups in the order the backward reloads them (the reverse of the forward's commits:
#: QKV, core, projection, the attention's norm after its residual add, fc1, the activation or
#: the whole fused MLP, the MLP's norm after its residual add)
RELOAD_ORDER = ("mlp_norm", "fused_group_mlp", "moe_act", "expert_fc1", "attn_norm",
                "attn_proj", "core_attn", "qkv_linear")


def group_spans(bwd: Any, attn: Any, proj: Any, qkv: Any, fc1: Any, fc2: Any) -> dict:
    """``{module: (start, end)}``: where each group's module backward runs in one layer's
    backward of ``bwd`` seconds (module docstring): ``attn`` the core's backward, ``proj``
    the projection's GEMMs', ``qkv`` the other attention GEMMs' (QKV, MLA's projections),
    ``fc1``/``fc2`` the routed experts' grouped GEMMs' (0 in a dense layer). Arrays."""
    side = attn + proj + qkv
    mlp = np.maximum(bwd - side, 0.0)
    return {"mlp_norm": (0.0, mlp), "fused_group_mlp": (0.0, fc2 + fc1),
            "moe_act": (fc2, fc2), "expert_fc1": (fc2, fc2 + fc1),
            "attn_norm": (mlp, mlp + side), "attn_proj": (mlp, mlp + proj),
            "core_attn": (mlp + proj, mlp + proj + attn),
            "qkv_linear": (mlp + proj + attn, mlp + side)}


def groups_on(mask: Any, mla: bool, moe: bool, rc: Any, modules: Any) -> dict:
    """``{module: on}`` (arrays): the groups Megatron-Core runs in one layer: the module
    named in ``mask`` (``cost.offload`` bits), ``attn_norm`` only where the input norm is a
    module of its own (``mla``; the TE spec fuses it, transformer_layer.py L1547-1549),
    ``mlp_norm`` and the routed ones only in an MoE layer (``moe``; a dense layer's norm is
    fused into fc1, L1553-1555), ``core_attn`` not under its recompute (attention.py
    L1555-1608: that path never enters the group)."""
    rc = np.asarray(rc)
    out = {}
    for name in RELOAD_ORDER:
        on = offloads(mask, name)
        if name == "attn_norm":
            on = on & mla
        elif name in ("mlp_norm", "fused_group_mlp", "moe_act", "expert_fc1"):
            on = on & moe
        elif name == "core_attn":
            on = on & ~part_selected(rc, modules, "scores")
        out[name] = on
    return out


def reload_wait(spans: dict, on: dict, copy: dict, period: Any) -> Any:
    """Seconds one layer's backward waits for its groups' reloads (arrays): the groups of
    ``on`` in ``RELOAD_ORDER``, group ``j``'s reload of ``copy[j]`` seconds started at the
    ``j``-th end of an ``on`` group's span (``spans``, sorted by time; the first group at
    the previous layer's last end, ``period`` seconds earlier: the same layer) once
    ``h2d_stream`` is free, waited for at its span's start; a group needed before its
    reload starts waits for its whole copy (reloaded on demand). Each wait delays what
    follows it."""
    names = [n for n in RELOAD_ORDER if np.any(on[n])]
    shape = np.broadcast_shapes(*(np.shape(x) for n in names
                                  for x in (*spans[n], on[n], copy[n])), np.shape(period))
    if not names:
        return np.zeros(shape)[()]
    live = np.array([np.broadcast_to(on[n], shape) for n in names])          # (G, N)
    ends = np.array([np.broadcast_to(spans[n][1], shape) for n in names], dtype=float)
    ordered = np.sort(np.where(live, ends, np.inf), axis=0)
    count = live.sum(axis=0)
    last = np.take_along_axis(ordered, np.maximum(count - 1, 0)[None], axis=0)[0]
    rank = np.cumsum(live, axis=0) - 1                                       # j per group
    wait = np.zeros(shape)
    free = np.full(shape, -np.inf)
    for g, n in enumerate(names):
        j = rank[g]
        prev = np.take_along_axis(ordered, np.maximum(j - 1, 0)[None], axis=0)[0]
        trigger = np.where(j == 0, last - period, prev) + np.where(j == 0, 0.0, wait)
        need = np.broadcast_to(spans[n][0], shape) + wait
        c = np.broadcast_to(np.asarray(copy[n], dtype=float), shape)
        late = trigger > need                   # needed before its reload starts: on demand
        start = np.maximum(trigger, free)
        done = start + c
        add = np.where(late, c, np.maximum(done - need, 0.0))
        free = np.where(live[g] & ~late, done, free)
        wait = wait + np.where(live[g], add, 0.0)
    return wait[()]


def module_copies(nbytes: Any, names: tuple[str, ...], bandwidth: float) -> dict:
    """``{module: seconds}``: each module's copied bytes (``nbytes(mask)``: the bytes a
    single-module ``cost.offload`` mask copies) over a host link of ``bandwidth`` bytes/s."""
    return {n: np.asarray(nbytes(offload_mask((n,))), dtype=float) / bandwidth for n in names}
