"""MaxText's remat policies as paraplan's recomputation: what a policy saves, what it redoes.

MaxText wraps each decoder layer in ``nn.remat`` with a ``jax.checkpoint`` policy
(AI-Hypercomputer/maxtext ``MaxText/layers/models.py`` at 2024-12-08, ``layers/decoders.py``
``get_remat_policy`` today): ``full`` saves nothing but the layer input (the scan carry,
``decoder_layer_input``); the named policies save the tensors MaxText tags with
``checkpoint_name`` (``layers/attentions.py``: ``query_proj``, ``key_proj``, ``value_proj``,
``qkv_proj``, ``out_proj``; ``layers/linears.py``: ``mlpwi`` or ``mlpwi_0``/``mlpwi_1``,
``mlpwo``; Transformer Engine's fused attention tags its output ``context``), and ``custom``
saves the names set to ``device`` in base.yml (``tensors_on_device``).

What is not saved and the backward reads is recomputed; JAX dead-code-eliminates the
recomputed forward to exactly that (``jax/_src/ad_checkpoint.py`` ``remat_partial_eval``,
``pe.dce_jaxpr``). In a dense decoder layer (norm, Q/K/V projections, fused attention,
output projection, residual add, norm, gate and up projections, activation, down projection,
residual add) the backward reads: the norms' outputs (never named: always recomputed), Q, K
and V, the attention output and its softmax statistics (``context``: when not saved the fused
attention forward reruns), the second norm's input (the output projection's output plus the
layer input), the gate/up projections' outputs and the activation's output. It never reads
the down projection's output (``mlpwo``): saving it changes nothing, and the down projection is
never rerun (``FrameworkProfile.recompute_early_stop``).

So a policy that saves Q, K, V and the output projection maps onto paraplan's selective
recomputation (``strategies.cost.recompute.MODULES``): ``layernorm`` always, ``core_attn``
when ``context`` is not saved, ``mlp`` when the gate/up projections are not saved. A policy
that saves nothing is ``full``. A policy that saves some but not all of Q/K/V and the output
projection (``save_qkv_proj``, ``save_out_proj``) reruns an attention projection, which no
module of ours describes: refused (``SpecError``) rather than rounded to another mode.
"""
from __future__ import annotations

from strategies.errors import SpecError

#: the tensors a MaxText dense decoder layer tags with ``checkpoint_name`` (besides the
#: layer input, which a scanned layer always keeps)
NAMES = ("query_proj", "key_proj", "value_proj", "qkv_proj", "context", "out_proj",
         "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo")
_DOTS = ("query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj")

#: the tensors each named policy saves (``models.py`` 2024-12-08 / ``decoders.py``):
#: ``minimal`` is ``checkpoint_dots_with_no_batch_dims`` (every projection's output; the
#: attention's batched dots, or the fused kernel, are not saved); ``minimal_with_context``
#: and ``minimal_flash`` add the attention output
POLICIES: dict[str, frozenset[str]] = {
    "full": frozenset(),
    "minimal": frozenset(NAMES) - {"context"},
    "minimal_with_context": frozenset(NAMES),
    "minimal_flash": frozenset(NAMES),
    "save_dot_with_context_except_mlp": frozenset(_DOTS + ("context",)),
    "save_dot_except_mlpwi": frozenset(_DOTS + ("mlpwo",)),
    "save_dot_except_mlp": frozenset(_DOTS),
    "save_qkv_proj": frozenset(("query_proj", "key_proj", "value_proj", "qkv_proj")),
    "save_out_proj": frozenset(("out_proj",)),
}


#: the tensors a policy may keep that no backward op reads (the residual add's backward needs no
#: operand): ``jax.checkpoint`` keeps only the residuals its backward reads (``remat_partial_eval``
#: drops the unused ones, ``used_res``), so saving them costs no memory and rerunning them no time
NEVER_READ = frozenset(("mlpwo",))
#: the selective module (``strategies.cost.recompute.MODULES``) under which a saved name is
#: recomputed instead (``custom_policy``); the other names are kept under every selective plan
RECOMPUTED_WITH = {"context": "core_attn", "mlpwi": "mlp", "mlpwi_0": "mlp", "mlpwi_1": "mlp"}


def saved_names(modules) -> frozenset[str]:
    """The checkpoint names a MaxText layer keeps for its backward under selective
    recomputation of ``modules`` (``custom_policy``'s ``device`` names less ``NEVER_READ``),
    besides its input (the scan carry, ``decoder_layer_input``): what the memory model stashes
    (``strategies.memory.activations.named_remat_bytes``)."""
    return frozenset(n for n, where in custom_policy(modules).items()
                     if where == "device" and n not in NEVER_READ)


def _qkv_saved(saved: frozenset[str]) -> bool:
    return "qkv_proj" in saved or {"query_proj", "key_proj", "value_proj"} <= saved


def _mlpwi_saved(saved: frozenset[str]) -> bool:
    return "mlpwi" in saved or {"mlpwi_0", "mlpwi_1"} <= saved


def recompute_of(saved, name: str = "custom") -> tuple[str, tuple[str, ...]]:
    """``(recompute, recompute_modules)`` of a MaxText policy that saves the tensors
    ``saved`` (names of ``NAMES``; ``name`` for the error): ``("full", ())`` when it saves
    nothing; else selective with ``layernorm``, ``core_attn`` unless ``context`` is saved
    and ``mlp`` unless the gate/up projections are; ``("none", ())`` when it saves every
    tensor (the norms' cheap recomputation aside). A SpecError for a policy that reruns an
    attention projection (module docstring)."""
    saved = frozenset(saved)
    unknown = sorted(saved - set(NAMES))
    if unknown:
        raise SpecError("remat_policy", name, f"saves {', '.join(unknown)}: not a MaxText "
                        f"checkpoint name ({', '.join(NAMES)})")
    if not saved - {"mlpwo"}:         # mlpwo is never read by the backward
        return "full", ()
    if not (_qkv_saved(saved) and "out_proj" in saved):
        raise SpecError("remat_policy", name,
                        "reruns an attention projection (it saves "
                        f"{', '.join(sorted(saved)) or 'nothing'}): recomputation of Q/K/V or "
                        "the output projection alone is not modelled; use full, or a policy "
                        "that saves query/key/value_proj and out_proj")
    modules = ("layernorm",) + (() if "context" in saved else ("core_attn",)) \
        + (() if _mlpwi_saved(saved) else ("mlp",))
    if modules == ("layernorm",):
        return "none", ()
    return "selective", tuple(sorted(modules, key=("core_attn", "layernorm", "mlp").index))


def policy_recompute(policy: str, tensors_on_device=()) -> tuple[str, tuple[str, ...]]:
    """``recompute_of`` a MaxText ``remat_policy`` by name (``custom``: the tensors set to
    ``device``, ``tensors_on_device``)."""
    if policy == "custom":
        return recompute_of(tensors_on_device, policy)
    if policy not in POLICIES:
        raise SpecError("remat_policy", policy,
                        f"must be one of {', '.join(POLICIES)} or custom")
    return recompute_of(POLICIES[policy], policy)


def custom_policy(modules) -> dict[str, str]:
    """The ``remat_policy: custom`` keys of base.yml (``device`` or ``remat`` per checkpoint
    name) that recompute the selective ``modules``: every projection saved, ``context``
    recomputed with ``core_attn``, the gate/up projections with ``mlp`` (the norms are
    recomputed under every policy; ``mlpwo``, never read by the backward, is not kept); the
    inverse of ``recompute_of``."""
    mods = set(modules)
    out = {n: ("remat" if n in NEVER_READ or RECOMPUTED_WITH.get(n) in mods else "device")
           for n in NAMES}
    return {"remat_policy": "custom", **out}
