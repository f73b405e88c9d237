"""Megatron-Core's fine-grained activation offloading (``--fine-grained-activation-offloading
--offload-modules ...``): the module names, the plan's rules, and the exposed time of the copies.

Source: NVIDIA/Megatron-LM@d98e8a64dd (2026-08-22). ``megatron/core/transformer/
transformer_config.py`` L1321-1390 (the fields) and L2127-2197 (the rules);
``megatron/core/pipeline_parallel/fine_grained_activation_offload.py`` (the manager);
``megatron/core/transformer/moe/experts.py`` L785-822 (``fused_group_mlp``);
``docs/user-guide/features/fine_grained_activation_offloading.md``. What it does:

* each offloaded module's forward runs inside a tensor group whose ``saved_tensors_hooks``
  catch every tensor autograd saves there; at the module's end (``on_group_commit_forward``)
  a side stream (``d2h_stream``) waits for the compute stream and copies the group to pinned
  host buffers (``OffloadTensorPool``, ``pin_memory=True``); the compute stream does not wait
  (``fine_grained_offloading_max_inflight_offloads`` None), and the device storage is freed
  once the copy is done (``record_stream``);
* in the backward, when a group's module backward ends (``on_group_start_backward``) the
  previous group in the stack is reloaded on a second side stream (``h2d_stream``, after
  that group's D2H event), and the compute stream waits for it at the start of that group's
  module backward (``on_group_commit_backward``): the reload of layer ``k-1`` overlaps the
  backward between the end of layer ``k``'s module and the start of layer ``k-1``'s;
* after the first (warm-up) iteration ``post_warmup_callback`` keeps on the GPU the last
  group of each module name of the first chunk to run its backward (the offload margin), and
  ``should_bulk_offload`` never offloads a group whose backward is next.

The copies go over the GPU's host link (``topologies.gpus.host_link``), D2H and H2D in opposite
directions of a full-duplex link. A layer's copy is exposed where it outlasts the compute it
overlaps (``exposed_copy_seconds``). The routed experts' modules' saved tensors are
``memory.moe_saved``'s; the attention side's (``attn_norm``, ``qkv_linear``, ``core_attn``,
``attn_proj``, ``mlp_norm``) are the table's (``memory.layer_terms.OFFLOAD_MODULE_TERMS``) at
Transformer Engine's saved precision (``memory.offload_saved.attention_offload_bytes``,
docs/calibration.md §5.213). ``gdp_qkv`` (the GatedDeltaProduct mixer, not in paraplan's
models) is refused.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from strategies.errors import SpecError

Num = float | np.ndarray

#: Megatron-Core's ``offload_modules`` choices (transformer_config.py L2132-2142)
MEGATRON_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm",
                    "expert_fc1", "moe_act", "fused_group_mlp", "gdp_qkv")
#: the attention side's modules paraplan prices (``memory.offload_saved.
#: attention_offload_bytes``)
ATTENTION_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm")
#: the modules paraplan prices, in the order of their bits in ``PlanArrays.offload_modules``
#: (the routed experts' first, as they were numbered before the attention side's);
#: the routed experts' saved tensors each offloads, as weights of ``(fc1 input, activation
#: input, fc2 input)`` (``moe_saved.routed_activation_bytes``' ``parts``): ``expert_fc1`` the
#: dispatched tokens fc1 saves, ``moe_act`` the activation function's input (fc1's output),
#: ``fused_group_mlp`` everything Transformer Engine's fused grouped MLP saves (fc1, the
#: activation, fc2: experts.py L790-822 wraps the whole ``ops(...)`` call)
MODULES = ("expert_fc1", "moe_act", "fused_group_mlp") + ATTENTION_MODULES
ROUTED_PARTS = {"expert_fc1": (1.0, 0.0, 0.0), "moe_act": (0.0, 1.0, 0.0),
                "fused_group_mlp": (1.0, 1.0, 1.0)}
#: offload groups of one module name held on the GPU at once besides the stash: the offload
#: margin (the last group of the first backward chunk, never offloaded) and the one group
#: being reloaded ahead of the backward that needs it (``bulk_reload`` of layer ``k-1`` while
#: layer ``k``'s backward runs); the D2H in flight is the same bytes' source, not a copy
IN_FLIGHT_GROUPS = 2


def offload_mask(names: Iterable[str] | None) -> int:
    """The bit mask of offloaded module names (``MODULES`` order; None or empty: 0)."""
    return sum(1 << MODULES.index(n) for n in (names or ()))


def offloads(mask: Num, name: str) -> Num:
    """Whether bit ``name`` is set in ``mask`` (arrays)."""
    return (np.asarray(mask, dtype=np.int64) >> MODULES.index(name)) & 1 == 1


def routed_parts(mask: Num) -> tuple[Num, Num, Num]:
    """Weights (0 or 1, arrays) of the routed experts' ``(fc1 input, activation input, fc2
    input)`` that the modules of ``mask`` offload (``ROUTED_PARTS``, a tensor once)."""
    out = [np.zeros(np.shape(mask)) for _ in range(3)]
    for name, parts in ROUTED_PARTS.items():
        on = offloads(mask, name)
        out = [np.maximum(o, np.where(on, w, 0.0)) for o, w in zip(out, parts)]
    return tuple(x[()] for x in out)


def parse_offload_modules(value: Any) -> tuple[str, ...]:
    """``expert_fc1,moe_act`` (or joined by ``+``/``/``, or a YAML list) as a tuple of names."""
    if isinstance(value, str):
        items = value.replace("+", ",").replace("/", ",").split(",")
        return tuple(x.strip().lower() for x in items if x.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
        return tuple(x.strip().lower() for x in value)
    raise SpecError("offload_modules", value, "must be module names joined by ',' or '+', "
                    f"from {', '.join(MODULES)}")


def check_offload_modules(mods: Any, recompute: str,
                          recompute_modules: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The plan's ``offload_modules`` checked and in ``MODULES`` order (None: no offloading):
    each a Megatron-Core module, one paraplan prices, named once; ``fused_group_mlp`` not with
    ``expert_fc1`` or ``moe_act`` and no routed module under the ``moe`` recompute module
    (Megatron-Core's ``TransformerConfig.__post_init__`` L2165-2197 refuses both), and
    ``attn_proj`` only with ``core_attn`` (L2148-2153).
    ``SpecError`` naming the field, the value and the rule."""
    if mods is None:
        return None
    if isinstance(mods, str):
        mods = parse_offload_modules(mods)
    shown = "+".join(mods)
    if not mods:
        raise SpecError("offload_modules", "", f"must name at least one of {', '.join(MODULES)}")
    for m in mods:
        if m not in MEGATRON_MODULES:
            raise SpecError("offload_modules", m, "unknown module; Megatron-Core's are "
                            + ", ".join(MEGATRON_MODULES))
        if m not in MODULES:
            raise SpecError("offload_modules", m, "not modelled: it offloads the "
                            "GatedDeltaProduct mixer's causal-conv input, a mixer paraplan's "
                            f"models do not have (priced: {', '.join(MODULES)})")
    twice = next((m for i, m in enumerate(mods) if m in mods[:i]), None)
    if twice is not None:
        raise SpecError("offload_modules", shown, f"names {twice} twice (each module once)")
    if "attn_proj" in mods and "core_attn" not in mods:
        raise SpecError("offload_modules", shown, "attn_proj needs core_attn: the "
                        "projection's input is the core attention's output, which its own "
                        "backward keeps (Megatron-Core transformer_config.py L2148-2153)")
    if "fused_group_mlp" in mods and {"expert_fc1", "moe_act"} & set(mods):
        raise SpecError("offload_modules", shown, "fused_group_mlp offloads the whole fused "
                        "grouped MLP and cannot be combined with expert_fc1 or moe_act "
                        "(Megatron-Core transformer_config.py)")
    if recompute == "selective" and recompute_modules and "moe" in recompute_modules:
        raise SpecError("offload_modules", shown, "cannot offload inside the MoE layer while "
                        "recompute_modules has moe (Megatron-Core transformer_config.py: the "
                        "moe checkpoint wraps the whole MoE forward)")
    return tuple(m for m in MODULES if m in mods)


def check_offload_model(mods: tuple[str, ...] | None, model: Any) -> None:
    """``SpecError`` where the plan's ``offload_modules`` name a routed module and ``model``
    is dense, or an attention-side module the memory model cannot split for ``model``:
    ``qkv_linear`` with MLA (its group holds the latent down and up projections' inputs,
    saved by more than one linear), and any
    attention-side module on a hybrid (its TE norm-output term is not split by the attention
    layers' share) or a DeepSeek-V4 model (hyper-connection streams, compressors)."""
    shown = "+".join(mods or ())
    if not model.is_moe and any(m in ROUTED_PARTS for m in (mods or ())):
        raise SpecError("offload_modules", shown, "the routed experts' modules apply to "
                        f"mixture-of-experts layers; {model.name} is dense")
    side = [m for m in (mods or ()) if m in ATTENTION_MODULES]
    if not side:
        return
    if model.is_hybrid or model.is_dsv4:
        raise SpecError("offload_modules", shown, f"not modelled for {model.name}: the "
                        f"attention side's groups ({', '.join(side)}) are priced for "
                        "transformer layers only, not hybrid or DeepSeek-V4 ones")
    if model.is_mla and "qkv_linear" in side:
        raise SpecError("offload_modules", shown, f"qkv_linear is not modelled with MLA "
                        f"({model.name}): its group holds the latent projections' inputs, "
                        "saved by more than one linear")


def copy_seconds(nbytes: Num, bandwidth: float) -> Num:
    """Seconds to move ``nbytes`` over a host link of ``bandwidth`` bytes/s per direction."""
    return np.asarray(nbytes, dtype=float) / bandwidth


def exposed_copy_seconds(nbytes: Num, bandwidth: float, window: Num) -> Num:
    """Seconds a copy of ``nbytes`` at ``bandwidth`` bytes/s adds to the compute stream when it
    overlaps ``window`` seconds of compute: ``max(0, nbytes/bandwidth - window)`` (arrays)."""
    return np.maximum(0.0, copy_seconds(nbytes, bandwidth) - np.asarray(window, dtype=float))
