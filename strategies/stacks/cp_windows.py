"""Which context-parallel exchanges a stack runs windowed attention layers (and attention
sinks) over: the one rule
``make_job`` (``check_window_exchange``) and the search's ``cp_seq`` mask
(``window_exchange_ok``) read. docs/calibration.md §5.196.

Sources (``FrameworkProfile.cp_window_impls`` holds them per stack):

* Transformer Engine (Megatron-Core, NeMo; NVIDIA/TransformerEngine d0067d0
  ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``):
  ``attn_forward_func_with_cp`` (L5054-5060) asserts ``cp_comm_type in ["a2a",
  "all_gather"]`` for any ``window_size`` other than (-1, 0) and (-1, -1), since v1.11
  (40dda924a, #1160; v1.11-1.13 all_gather with FlashAttention only). So ``p2p`` and
  ``a2a+p2p`` (whose inner ring is p2p) cannot run a sliding-window layer. Megatron-Core passes
  ``window_size`` to the windowed layers alone (``extensions/transformer_engine.py:2163-2171``,
  ``is_layer_window_attention``) and asserts nothing of its own about windows under CP
  (``transformer_config.py``, d98e8a64d): Transformer Engine's assert is what refuses it.
* MaxText (AI-Hypercomputer/maxtext e591f30cb ``src/maxtext/layers/attention_op.py``
  ``cudnn_flash_attention``): chunked attention under CP raises (L2259-2260); a sliding window
  under CP needs packing, which needs the load-balanced ring (L2273-2274, L2297-2302). The
  profile prices the all-gather (§5.195): no window under CP.
* PyTorch's ring (torchtitan's ``cp_impl`` "torch"): SDPA's ``is_causal`` only, no mask.
* Llama 4's chunked windows where the sequence fits one chunk (``seq_length <=
  sliding_window``): the mask is causal, nothing is folded (Megatron-Bridge 067f987d
  ``llama4_utils.py`` L295-299 folds only a rank's tokens longer than a chunk) and every
  exchange runs it, as the stack's ``cp_chunk_fits`` says (MaxText raises on the attention
  type whatever the length); priced as causal attention (``attention_counts.window_share``
  0, ``attention_grid`` the full layers' grid).
* Attention sinks (gpt-oss; Megatron-Core ``softmax_type="learnable"``, TE >= 2.8): TE's
  ``attn_forward_func_with_cp`` asserts ``softmax_type == "vanilla" or cp_comm_type ==
  "a2a"`` (L5065-5067): gpt-oss under Megatron-Core runs ``cp_comm=a2a`` only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from strategies.errors import SpecError
from strategies.plan.choices import CP_COMMS, CP_IMPL_OF
from strategies.schedules.validity import member

if TYPE_CHECKING:
    from strategies.model import ModelSpec
    from strategies.stacks.profile import FrameworkProfile

#: what each ``cp_impl`` is, for the refusal's text
EXCHANGE_NAMES = {"ring": "cp_comm=p2p (Transformer Engine's ring)",
                  "allgather": "the K/V all-gather",
                  "torch": "PyTorch's SDPA ring attention",
                  "a2a": "cp_comm=a2a", "a2a+p2p": "cp_comm=a2a+p2p (a p2p ring inside)"}


def chunk_fits(m: "ModelSpec", fw: "FrameworkProfile") -> bool:
    """``m``'s windows are chunked and its sequence fits one chunk, which stack ``fw`` runs as
    causal attention under any exchange (``fw.cp_chunk_fits``)."""
    return (m.window_kind == "chunked" and m.sliding_window is not None
            and m.seq_length <= m.sliding_window and fw.cp_chunk_fits)


def window_impls(m: "ModelSpec", fw: "FrameworkProfile") -> tuple[str, ...] | None:
    """The ``cp_impl`` values under which stack ``fw`` runs ``m``'s attention with ``cp > 1``:
    those of ``fw.cp_window_impls`` for ``m.window_kind`` where ``m`` has windowed layers
    (not chunked ones its sequence fits: ``chunk_fits``), and of ``fw.cp_sink_impls`` where
    it has attention sinks (both where both); None where neither limits ``m``."""
    sets = []
    if m.num_windowed_layers and m.window_kind in dict(fw.cp_window_impls) \
            and not chunk_fits(m, fw):
        sets.append(dict(fw.cp_window_impls)[m.window_kind])
    if m.attention_sinks and fw.cp_sink_impls is not None:
        sets.append(fw.cp_sink_impls)
    if not sets:
        return None
    return tuple(i for i in sets[0] if all(i in x for x in sets[1:]))


def window_exchange_ok(m: "ModelSpec", fw: "FrameworkProfile", cp: Any, cpc: Any = 0) -> Any:
    """Where stack ``fw`` runs ``m`` at ``cp`` over the exchange ``cpc`` codes (0: the stack's
    own ``cp_impl``, else ``1 +`` the index in ``CP_COMMS``, as ``PlanArrays.cp_comm``): ``cp``
    1, no limit (``window_impls`` None), or an exchange in ``window_impls``. Vectorised."""
    allowed = window_impls(m, fw)
    if allowed is None:
        return np.ones(np.shape(cp), dtype=bool) if np.ndim(cp) else True
    codes = [0] * (fw.cp_impl in allowed) + [1 + i for i, c in enumerate(CP_COMMS)
                                              if CP_IMPL_OF[c] in allowed]
    ok = (np.asarray(cp) == 1) | member(cpc, codes)
    return ok if np.ndim(ok) else bool(ok)


def runnable_comms(m: "ModelSpec", fw: "FrameworkProfile") -> list[str]:
    """The plan ``cp_comm`` values (``CP_COMMS`` order) over which stack ``fw`` runs ``m``
    with ``cp > 1``: those it lets a plan choose (``fw.cp_comms``) or runs as its own
    (``fw.cp_impl``) whose exchange ``window_impls`` allows; every such one where ``m`` is not
    limited."""
    allowed = window_impls(m, fw)
    return [c for c in CP_COMMS if (c in fw.cp_comms or CP_IMPL_OF[c] == fw.cp_impl)
            and (allowed is None or CP_IMPL_OF[c] in allowed)]


def own_exchange_refusal(m: "ModelSpec", fw: "FrameworkProfile") -> str | None:
    """Why stack ``fw``'s own exchange (``fw.cp_impl``, a plan naming no ``cp_comm``) cannot
    run ``m`` with ``cp > 1``, in words (the exchange, what of ``m``, the source, the
    exchanges that can: ``runnable_comms``); None where it can. The search's recommendation
    names it beside the exchange it chose."""
    allowed = window_impls(m, fw)
    if allowed is None or fw.cp_impl in allowed:
        return None
    what, source = _what(m, fw, fw.cp_impl)
    runs = runnable_comms(m, fw)
    return (f"{fw.name}'s own exchange, {EXCHANGE_NAMES[fw.cp_impl]}, cannot run {m.name}'s "
            f"{what} ({source}); it runs {m.name} with cp > 1 over "
            + (f"cp_comm={' or '.join(runs)} only" if runs else "no exchange"))


def _what(m: "ModelSpec", fw: "FrameworkProfile", impl: str) -> tuple[str, str]:
    """(what of ``m`` the exchange ``impl`` cannot run, the source): its windowed layers
    (``fw.cp_chunk_source`` for chunked ones where the stack gives one, else
    ``fw.cp_window_source``) or else its attention sinks."""
    limits = dict(fw.cp_window_impls)
    if m.num_windowed_layers and impl not in limits.get(m.window_kind, (impl,)) \
            and not chunk_fits(m, fw):
        source = (fw.cp_chunk_source if m.window_kind == "chunked" and fw.cp_chunk_source
                  else fw.cp_window_source)
        return (f"{m.window_kind}-window layers (window {m.sliding_window})", source)
    return ("attention sinks (softmax_type learnable)",
            "Transformer Engine runs a non-vanilla softmax under context parallelism only "
            "with cp_comm_type a2a (attn_forward_func_with_cp asserts it)")


def _elsewhere(m: "ModelSpec") -> bool:
    """Some stack with context parallelism runs ``m`` with ``cp > 1`` over some exchange."""
    from strategies.framework import PROFILES     # the registry imports the stacks
    return any(fw.context_parallel and runnable_comms(m, fw) for fw in PROFILES.values())


def check_window_exchange(m: "ModelSpec", fw: "FrameworkProfile", cp: int,
                          cp_comm: str | None) -> None:
    """``SpecError`` where ``window_exchange_ok`` fails: field ``cp_comm`` with the plan's
    exchange (field ``cp`` where the plan names none: the stack's own), naming the stack, the
    exchange, what of the model it cannot run and what runs instead."""
    cpc = 0 if cp_comm is None else 1 + CP_COMMS.index(cp_comm)
    if window_exchange_ok(m, fw, cp, cpc):
        return
    impl = fw.cp_impl if cp_comm is None else CP_IMPL_OF[cp_comm]
    runs = runnable_comms(m, fw)
    instead = (f"give cp_comm={' or '.join(runs)}, or cp=1" if runs else
               "give cp=1" + (" or choose another --framework" if _elsewhere(m) else
                              " (no stack modelled here runs it with cp > 1)"))
    field, value = ("cp", cp) if cp_comm is None else ("cp_comm", cp_comm)
    what, source = _what(m, fw, impl)
    if what.startswith("chunked") and fw.cp_chunk_fits:
        instead += (f", or a sequence of at most {m.sliding_window} tokens (one chunk: the "
                    "mask is causal)")
    raise SpecError(field, value, f"{fw.name} cannot run {m.name}'s {what} with context "
                    f"parallelism over {EXCHANGE_NAMES[impl]}: {source}; {instead}")
