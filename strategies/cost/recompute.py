"""Partial full-layer recomputation: which layers of a model chunk Megatron recomputes.

Megatron-LM's ``--recompute-granularity full --recompute-method M --recompute-num-layers N``
(``megatron/core/transformer/transformer_config.py`` and ``megatron/core/recompute.py``,
NVIDIA/Megatron-LM) acts on each model chunk of ``l`` layers (``l = L/(p·v)``):

* ``block``: the first ``min(N, l)`` layers are checkpointed one by one (each keeps only its
  input and is rebuilt alone in its backward); the other ``l - N`` keep every activation and
  are not recomputed.
* ``uniform``: the chunk is cut into groups of ``N`` consecutive layers (the last one
  shorter); each group keeps only its input and is rebuilt whole in its backward. Every layer
  is recomputed; ``ceil(l/N)`` inputs are kept and ``min(N, l)`` layers' activations live at
  once while a group's backward runs.

A plan with ``recompute=full`` and no ``recompute_layers`` is Megatron's ``uniform`` with
``N = 1`` (equal to ``block`` with ``N = l``): every layer checkpointed alone. In the plan
arrays ``recompute_layers = 0`` stands for that.

The four counts below are the one source of these rules: the stage-cost record (recompute
time, ``strategies.cost.stage``), the memory model (``strategies.memory``) and the FLOP
counts read them. They broadcast over numpy arrays; ``lpc`` may be fractional (the mean
chunk of uneven stages).
"""
from __future__ import annotations

import numpy as np

Num = float | np.ndarray

#: Megatron's recompute methods, in the order of their integer codes in ``PlanArrays``.
METHODS = ("block", "uniform")
METHOD_CODE = {name: i for i, name in enumerate(METHODS)}

#: Megatron-Core's ``--recompute-modules`` that paraplan models (``recompute=selective``), in
#: the order of their bits in ``PlanArrays.recompute_modules`` (bit ``i`` = ``MODULES[i]``);
#: what each keeps and redoes: ``strategies.memory.activations.MODULE_TERMS`` and
#: ``strategies.cost.flop_counts.selective_recompute_flops_fwd``.
MODULES = ("core_attn", "layernorm", "mlp", "moe_act", "moe", "shared_experts",
           "mla_up_proj")
#: A selective plan that names no modules: Megatron-Core's default, ``core_attn``.
DEFAULT_MODULES = ("core_attn",)

#: The parts of a layer each module's checkpoint drops and redoes (Megatron-Core,
#: ``transformer_layer.py``, ``moe/moe_layer.py``, ``moe/experts.py``,
#: ``multi_latent_attention.py``); a part named by two modules counts once.
#:
#: * ``scores``: the attention core's saved scores (softmax output, its dropout mask and
#:   output), redone from Q, K, V (nothing stored under FlashAttention, nothing redone:
#:   the model's long-standing reading of selective recomputation).
#: * ``norm_outputs``: the two norms' outputs (the QKV and fc1 inputs), redone from their
#:   inputs (output-discarding checkpoint).
#: * ``dense_mlp``: the dense MLP's intermediates (fc1 output, activation output), redone
#:   from its input (fc1 and fc2 GEMMs, the activation, the TP collective closing it).
#: * ``routed_act``: the routed experts' activation output (fc2's input), redone from fc1's
#:   output (``moe_act``, output-discarding).
#: * ``routed_mlp``: the routed experts' fc1 output and the dispatched token copies, redone
#:   from the MoE input (router, experts' GEMMs).
#: * ``shared_mlp``: the shared experts' intermediates, redone with their GEMMs.
#: * ``mla_up``: MLA's up-projected queries, keys and values, redone from the latents.
MODULE_PARTS = {
    "core_attn": ("scores",), "layernorm": ("norm_outputs",), "mlp": ("dense_mlp",),
    "moe_act": ("routed_act",), "moe": ("routed_act", "routed_mlp", "shared_mlp"),
    "shared_experts": ("shared_mlp",), "mla_up_proj": ("mla_up",)}
PARTS = ("scores", "norm_outputs", "dense_mlp", "routed_act", "routed_mlp", "shared_mlp",
         "mla_up")


def part_selected(rc: Num, mask: Num, part: str) -> Num:
    """Whether selective recomputation (``rc`` 1) of the modules in ``mask`` (0: the
    default, ``core_attn``) drops and redoes ``part`` (arrays)."""
    mask = np.where(np.asarray(mask) == 0, modules_mask(DEFAULT_MODULES), mask)
    on = np.zeros(np.shape(mask), dtype=bool)
    for mod, parts in MODULE_PARTS.items():
        if part in parts:
            on = on | has_module(mask, mod)
    return (np.asarray(rc) == 1) & on


def modules_mask(names) -> int:
    """The bit mask of module names (``MODULES`` order)."""
    return sum(1 << MODULES.index(n) for n in names)


def has_module(mask: Num, name: str) -> Num:
    """Whether bit ``name`` is set in ``mask`` (arrays)."""
    return (np.asarray(mask, dtype=np.int64) >> MODULES.index(name)) & 1 == 1


def _n(lpc: Num, n: Num) -> Num:
    """``N`` clipped to the chunk, ``0`` (all layers, one by one) read as ``lpc``."""
    n = np.asarray(n, dtype=float)
    return np.where(n > 0, np.minimum(n, lpc), lpc)


def recomputed_layers(lpc: Num, n: Num, uniform: Num) -> Num:
    """Layers of a chunk whose forward is redone in the backward: ``min(N, l)`` (block) or
    ``l`` (uniform)."""
    return np.where(uniform, lpc, _n(lpc, n)) + 0.0 * np.asarray(lpc, dtype=float)


def checkpoint_inputs(lpc: Num, n: Num, uniform: Num) -> Num:
    """Layer inputs a chunk keeps as checkpoints: ``min(N, l)`` (block) or ``ceil(l/N)``
    (uniform)."""
    k = _n(lpc, n)
    # a chunk without layers has k = 0 and no checkpoints; divide by 1 there, not by 0
    return np.where(uniform, np.ceil(lpc / np.where(k > 0, k, 1.0)), k)


def kept_layers(lpc: Num, n: Num, uniform: Num) -> Num:
    """Layers of a chunk that keep all their activations (not checkpointed): ``l - min(N, l)``
    (block) or 0 (uniform)."""
    return np.where(uniform, 0.0, lpc - _n(lpc, n))


def rebuilt_layers(lpc: Num, n: Num, uniform: Num) -> Num:
    """Layers whose activations are rebuilt at once in a backward (the transient working
    set): 1 (block: one layer at a time) or ``min(N, l)`` (uniform: a whole group)."""
    return np.where(uniform, _n(lpc, n), np.minimum(1.0, lpc))


def recomputed_share(lpc: Num, n: Num, uniform: Num, full: Num = True) -> Num:
    """Share of the layers whose forward is redone under full recomputation
    (``recomputed_layers / l``; 1 where ``full`` is false, for the callers that apply it
    only to full recomputation)."""
    share = recomputed_layers(lpc, n, uniform) / np.maximum(lpc, 1e-300)
    return np.where(full, share, 1.0)


def plan_share(num_layers: int, P) -> Num:
    """``recomputed_share`` of plans ``P`` (``PlanArrays``) on their mean chunk of
    ``num_layers/(pp·vpp)`` layers: the fraction of full recomputation's extra forward a
    ``recompute=full`` plan runs (1 for every other mode)."""
    return recomputed_share(num_layers / (P.pp * P.vpp), P.recompute_layers,
                            P.recompute_method == METHOD_CODE["uniform"], P.recompute == 2)


def stopped_collectives(pairs: Num, early_stop: Num) -> Num:
    """Tensor-parallel collectives per layer a full recomputation that stops early does not
    rerun: the one closing the dense MLP (its down projection's reduce-scatter, or
    all-reduce without sequence parallelism), ``max(pairs - 1, 0)`` where ``early_stop``
    (``FrameworkProfile.recompute_early_stop``: PyTorch's non-reentrant checkpoint stops at
    the down projection's saved input, JAX's remat dead-code-eliminates its output; nothing
    the backward reads comes after it), else 0. ``pairs``: the layer's collective pairs
    (``stage.layers.tp_collectives_per_layer``; 1 in a MoE layer under EP without shared experts,
    whose MLP has none). The sequence-dim copies (``elementwise_time.tp_layout_copy_time``) and the
    collectives (``tp_rerun``) read it. docs/calibration.md §5.80, §5.84."""
    return np.maximum(np.asarray(pairs, dtype=float) - 1.0, 0.0) * early_stop


def tp_rerun(rc: Num, pairs: Num, sp: Num, ag_share: Num, early_stop: Num) -> Num:
    """All-reduce equivalents of tensor-parallel traffic one layer's recomputation reruns
    (the unit of ``StageCostArrays.tp_per_layer_*``: one all-gather + one reduce-scatter, or
    one all-reduce without sequence parallelism), for ``rc`` a ``plan_arrays.RECOMPUTE_CODE``
    of full (2) or op (3); other codes get full's figure (the caller selects).

    * full: the forward's ``pairs`` less ``stopped_collectives`` reduce-scatters (each
      ``1 - ag_share`` of an equivalent under SP, a whole all-reduce without); without early
      stop (Megatron's and DeepSpeed's reentrant checkpoint) exactly ``pairs``.
    * op (torchtitan's ``SelectiveAC`` op mode, ``activation_checkpoint.py`` ``_save_list``:
      ``aten.mm`` (every second one recomputed), the SDPA kernels,
      ``_c10d_functional.reduce_scatter_tensor``, ``abs``/``max``): the reduce-scatters'
      outputs are saved, so only the all-gathers rerun, ``pairs · ag_share``; without SP the
      all-reduces are not in the list and all ``pairs`` rerun.

    ``ag_share``: an all-gather's share of an equivalent, ``g / (1 + g)`` for ``g`` its bytes
    over the reduce-scatter's (``quantise.tp_allgather_bytes_factor``: ½ in 16 bits, ⅓ for
    fp8 all-gathers beside bf16 reduce-scatters), so that its bandwidth term is exact
    (``tp_bytes`` is the pair's mean). docs/calibration.md §5.84."""
    pairs = np.asarray(pairs, dtype=float)
    full = pairs - stopped_collectives(pairs, early_stop) * np.where(sp, 1.0 - ag_share, 1.0)
    op = pairs * np.where(sp, ag_share, 1.0)
    return np.where(np.asarray(rc) == 3, op, full)


def cp_reruns(rc: Num, mask: Num, share: Num, core_attn: bool) -> Num:
    """Attention forwards per layer and micro-batch whose context-parallel exchange a
    recomputation reruns in the backward (the rerun forward calls the same CP attention
    function, which sends again: nothing in it knows it is a recomputation).

    * full (``rc`` 2): ``share`` (``plan_share``: the chunk's recomputed layers) - Megatron-
      Core's ``recompute.checkpointed_forward`` (``tensor_parallel.checkpoint`` or
      ``te_checkpoint`` over whole layers, ``uniform``/``block``), torchtitan's ``FullAC``
      (``checkpoint_wrapper`` over a block, ``early_stop=False``), the ring inside the SDPA.
    * selective (``rc`` 1) with ``core_attn`` (``part_selected`` "scores") where
      ``core_attn`` (Megatron-Core: ``Attention._checkpointed_attention_forward`` wraps the
      core attention, Transformer Engine's CP function included, in
      ``tensor_parallel.checkpoint``): 1.
    * op (``rc`` 3) and none: 0 (not modelled for op: left, docs/calibration.md §5.187).

    Vectorised; the caller zeroes it where ``cp`` is 1. docs/calibration.md §5.187."""
    rc = np.asarray(rc)
    sel = part_selected(rc, mask, "scores") & bool(core_attn)
    return np.where(rc == 2, share, np.where(sel, 1.0, 0.0))


def core_rerun(a_f: Num, flash: Num, rerun_flash: bool) -> Num:
    """Seconds of the attention core a selective ``core_attn`` recomputation reruns: its
    forward ``a_f``, 0 under FlashAttention (whose backward recomputes the scores itself)
    unless the stack reruns the fused kernel's forward (``rerun_flash``,
    ``FrameworkProfile.recompute_flash_fwd``). Vectorised."""
    return np.where(np.logical_and(flash, not rerun_flash), 0.0, a_f)


def cp_rerun_window(rc: Num, a_f: Num, flash: Num, rerun_flash: bool) -> Num:
    """Seconds of attention core a recomputed attention forward runs beside its rerun
    context-parallel exchange (the ring's window, ``cp_ring.ring_exposed``): the forward's
    ``a_f`` under full recomputation, ``core_rerun`` under selective. Vectorised."""
    return np.where(np.asarray(rc) == 2, a_f, core_rerun(a_f, flash, rerun_flash))
