"""Per-GPU memory of many plans at once: the implementation of ``strategies.memory``.

Bytes per GPU of one pipeline stage of each plan, by origin (``layers``, ``embedding``,
``output``, ``recompute``, ``other``) and kind (``params``, ``grads``, ``optimizer``,
``activations``, ``other``), over numpy arrays of plans (``PlanArrays``), so that the plan
space (``strategies.search.space``) prunes a hundred thousand plans on memory in
milliseconds and ``strategies.memory.scalar`` (one job, one stage) reads entry 0 of the very
same computation: the two cannot disagree. Every term: docs/memory.md.

The stash of in-flight micro-batches is the schedule's (``strategies.memory.activations``);
``in_flight`` lets the scalar wrapper pass it per plan, and without it the default
interleaving group size ``pp`` is used. For a model of one layer kind the search's peak
evaluates only the first and the last pipeline stage (and rank 1 of an uneven layout): a
middle stage holds the same layers as the first, no embedding, and at most as many stashed
micro-batches (the in-flight count of GPipe, 1F1B and interleaving is non-increasing in the
stage), and its ``other`` allowance grows with activations and parameters only, so it never
exceeds the first stage. A schedule that splits the backward (pending weight gradients grow
with the rank) or is mirrored (DualPipe's middle ranks stash one more) has every rank
evaluated. A model with dense and MoE layers or MTP modules holds different kinds on
different ranks, so its peak evaluates every rank, each by kind (``rank_memory_arrays``).

>>> import numpy as np
>>> from strategies.presets import model_preset
>>> from strategies.search.space import columns_from_plans
>>> from strategies.plan import parse_plan
>>> m = model_preset("gpt3-175b")
>>> P = columns_from_plans([parse_plan("tp=8,pp=8,dp=1,gbs=64,schedule=interleaved,vpp=3,"
...                                    "recompute=selective,sp=true")])
>>> round(float(peak_memory_arrays(m, P)[0]) / 2**30, 1)
60.9
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

import numpy as np

from strategies import placement
from strategies.cost import param_counts, token_counts
from strategies.cost.param_counts import content_params
from strategies.cost import recompute as rcp
from strategies.layout import (even_chunks_content_arrays, even_stage_content_arrays,
                               mixed_layers)
from strategies.plan_arrays import rank_layers
from strategies.cost.quantise import weight_copy_bytes
from strategies.cost.system import SystemConfig, get_system
from strategies.stacks.comm_rules import grad_sync_once
from strategies.memory.te_linear_saved import te_linear_saved_delta
from strategies.memory import deepspeed_zero as dsz
from strategies.memory.activations import (TERM_KINDS, embedding_bytes, layer_activation_terms,
                                          layer_wgrad_terms, output_bytes,
                                          named_remat_bytes, op_saved_bytes,
                                          permutation_buffer_bytes,
                                          routed_stash_correction, selective_dropped_bytes,
                                          stash_kinds)
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays, as_plan_arrays
from strategies.schedules import attr_by_code, dispatch, schedule_of_code

ORIGINS = ("layers", "embedding", "output", "recompute", "other")
KINDS = ("params", "grads", "optimizer", "activations", "other")


def _layer_act(m: ModelSpec, b, tp, cp, sp, rc, flash, mask=0, remat_named=False, cache=None):
    """``activations.layer_activation_bytes`` over arrays (``rc``: 0 none, 1 selective, 2 full,
    3 op; ``mask``: the selective modules, ``strategies.cost.recompute``; ``remat_named``: a
    JAX remat stack's selective stash, ``activations.named_remat_bytes``; ``cache``: GEMM
    inputs cached in low precision, ``activations.cache_ratios``)."""
    s = m.seq_length
    terms = layer_activation_terms(m, s, 1, cache)  # linear in the micro-batch size
    kind_sum = {k: 0.0 for k in ("seq", "tp", "score")}
    for name, nbytes in terms.items():
        kind_sum[TERM_KINDS[name]] += nbytes
    seq_div = np.where(sp, tp, 1.0)
    keep_score = ~(flash | rcp.part_selected(rc, mask, "scores"))
    stored = b * (kind_sum["seq"] / seq_div + kind_sum["tp"] / tp
                  + np.where(keep_score, kind_sum["score"] / tp, 0.0)) / cp \
        - selective_dropped_bytes(m, s, b, tp, sp, cp, rc, mask, cache)[0]
    full = 2.0 * s * b * m.hidden_size / seq_div / cp
    none = b * (kind_sum["seq"] / seq_div + kind_sum["tp"] / tp
                + np.where(flash, 0.0, kind_sum["score"] / tp)) / cp
    if remat_named:
        stored = np.where(rc == 1, named_remat_bytes(m, s, b, tp, sp, cp, mask), stored)
    op = op_saved_bytes(m, s, b, tp, sp, cp)
    return np.where(rc == 2, full, np.where(rc == 3, op, stored)), none


def _layer_wgrad(m: ModelSpec, b, tp, cp, sp, cache=None):
    """``activations.layer_wgrad_bytes`` over arrays."""
    terms = layer_wgrad_terms(m, m.seq_length, 1, cache).values()
    seq = sum(n for n, k in terms if k == "seq")
    tpk = sum(n for n, k in terms if k != "seq")
    return b * (seq / np.where(sp, tp, 1.0) + tpk / tp) / cp


def state_bytes_per_param(zero, d, param_bytes: float, grad_bytes: float,
                          optimizer_bytes: float, fsdp2: bool = False, pp=1,
                          master_bytes: float = 4.0, weight_copies: float = 1.0):
    """(params, grads, optimizer) bytes per parameter with ``d`` data-parallel ranks sharing
    the states (arrays; ``memory.model_state_bytes_per_param`` is the checked scalar form):
    optimizer states sharded from ZeRO 1, gradients from 2, parameters at 3.

    ``fsdp2`` (``FrameworkProfile.fsdp2``; ZeRO 2 and 3 only): the sharded parameter is the
    fp32 master (``master_bytes`` of ``optimizer_bytes``), counted under params, and there
    is no 16-bit shard: ZeRO-3 ``master/d`` params and ``(optimizer - master)/d`` optimizer
    (``16/d`` in all, not ``18/d``); ZeRO-2 (parameters kept gathered) the 16-bit unsharded
    copy beside it, ``param + master/d`` (the same total as without). With ``pp > 1`` the
    gradients accumulate unsharded over the micro-batches (``torch.distributed.pipelining``
    turns FSDP2's gradient sync off until the stage's last backward): ``grad`` bytes, not
    ``grad/d``. ``weight_copies`` (``SystemConfig.weight_copies``): the stored 16-bit
    weight copies, 0 where the fp32 master (counted in ``optimizer``) is the only stored
    weight (MaxText: ``2 + 4 + 12 = 18`` becomes ``0 + 4 + 12 = 16``)."""
    pb, gb, ob = param_bytes * weight_copies, grad_bytes, optimizer_bytes
    opt = np.where(zero >= 1, ob / d, float(ob))
    grads = np.where(zero >= 2, gb / d, float(gb))
    params = np.where(zero >= 3, pb / d, float(pb))
    if fsdp2:
        mb = master_bytes
        fs = zero >= 2
        opt = np.where(fs, (ob - mb) / d, opt)
        params = np.where(zero >= 3, mb / d, np.where(fs, pb + mb / d, params))
        # the one rule the time model reads too (``comm_rules.grad_sync_once``)
        grads = np.where(grad_sync_once(True, pp, zero), float(gb), grads)
    return params, grads, opt


def memory_component_arrays(m: ModelSpec, P: PlanArrays | Mapping[str, Any], stage,
                            dtype: str = "bf16", system: SystemConfig | None = None,
                            in_flight=None, layers=None, pending_w=None, content=None,
                            gpu=None, stash_layers=None, clamp=False, remat_named=False,
                            loss_bytes=None, act_cache=None, optimizer_bytes=None,
                            fsdp2=False, dispatch_bytes=None, expert_input=None,
                            te_inputs=None
                            ) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray]:
    """``(components, total)`` of pipeline rank ``stage`` (an int or one per plan) of each
    plan: ``components[origin][kind]`` bytes per GPU (``ORIGINS`` x ``KINDS``) and the stage
    total (their sum). ``P``: ``PlanArrays`` or the search space's short columns; ``dtype``:
    the training precision; ``system``: the policy constants; ``in_flight``: stashed
    ``(micro-batch, chunk)`` entries per plan (default: the schedule's count with the default
    interleaving group size); ``layers``: transformer layers on the stage per plan (default
    ``num_layers / pp``; ``Job.layers_of_stage`` for uneven stages); ``pending_w``: weight
    gradients pending at the stash peak per plan (a split backward; default the schedule's
    ``pending_weight_grads_array``); ``content``: for a model with dense and MoE layers or
    MTP modules (``layout.mixed_layers``), ``{"dense", "moe", "mtp": counts per plan}``, the
    layers and modules whose parameters the rank holds (both copies where
    ``Schedule.mirrored``; ``layout.stage_content`` of the job's layout), default the plan
    columns' layout (even, first/last, slots: ``layout.even_stage_content_arrays``); each
    kind's parameters are summed (``param_counts.layer_params_split`` of the kind), and ``layers``
    is then the layers and MTP modules a micro-batch stashes here (default the content's,
    the mean of the two copies where mirrored).
    A stashed ``(micro-batch, chunk)`` holds ``layers / vpp`` layers' activations: the mean
    chunk of the stage (a layout's chunks may differ by a layer).
    ``gpu``: the chip (its fp8 layouts decide how many
    quantised weight copies a low-precision ``dtype`` caches, ``quantise.weight_copy_bytes``).
    ``stash_layers``: the transformer layers' stash and pending ``W`` bytes at the peak per
    plan (NaN: the mean chunk's), given by the scalar model where a rank's chunks keep
    different bytes (``activations.stash_at_peak``, each entry at its own chunk's).
    ``clamp``: the stack runs gpt-oss's eager activation clamp (``framework.
    runs_eager_clamp``; its saved inputs: ``activations.clamp_activation_bytes``).
    ``remat_named``: the stack's selective recomputation is a JAX remat policy
    (``FrameworkProfile.remat_named``; ``activations.named_remat_bytes``).
    ``loss_bytes``: bytes per logit element at the loss's peak on the rank holding the head,
    or the stack's ``FrameworkProfile.loss`` (its ``peak_bytes_at(tp)`` per plan: a stack whose
    sharded-vocabulary loss holds other bytes, §5.74); ``activations.output_bytes``; None: the
    default stack's. ``act_cache``: bytes per element of the activations the stack caches in low
    precision (``activations.activation_cache_bytes``; None: the 16-bit table).
    ``optimizer_bytes``: the stack's optimizer state bytes per parameter
    (``FrameworkProfile.optimizer_state_bytes``; None: the system's). ``fsdp2``: the
    stack's ZeRO-2/3 is PyTorch FSDP2 (``FrameworkProfile.fsdp2``: the fp32 shard is the
    master, the root module's parameters stay gathered under ZeRO-3, unsharded gradients
    under pipelining; ``state_bytes_per_param``). ``dispatch_bytes``: bytes per element of the
    stack's MoE dispatch (``moe_bytes.dispatch_element_bytes``; None: 16-bit), its send
    buffer's (``activations.permutation_buffer_bytes``). ``expert_input``: bytes per element
    at which the stack's routed experts save fc1's and fc2's inputs
    (``activations.expert_input_bytes``: Transformer Engine's grouped experts in MXFP8 or
    per-tensor fp8; None: the 16-bit table). ``te_inputs``: bytes per element at which the
    stack's Transformer Engine dense modules save their inputs
    (``te_linear_saved.te_linear_input_bytes``; None: the 16-bit table)."""
    sy = get_system(system)
    P = as_plan_arrays(P)
    tp, pp, dp, cp, ep, b, v = P.tp, P.pp, P.dp, P.cp, P.ep, P.mbs, P.vpp
    sched, rc, zero = P.schedule, P.recompute, P.zero
    sp, flash = P.sp, P.flash_attn
    # micro-batches per pipeline flush (``strategies.flushes``: memory is one flush's) and
    # the interleaved micro-batch group (0: the default, ``pp``)
    nmb = P.gbs // (b * dp * P.flushes)
    grp = P.microbatch_group_size
    stage = np.asarray(stage) + np.zeros_like(pp)
    is_first, is_last = stage == 0, stage == dispatch(sched, "head_rank_array", pp, v)
    # DualPipe (``Schedule.mirrored``): rank r holds stages r and pp-1-r, both end ranks the
    # embedding and the output layer, each for the half of the micro-batches entering there
    mirrored = attr_by_code(sched, "mirrored").astype(bool)
    end = (stage == 0) | (stage == pp - 1)
    is_first, is_last = np.where(mirrored, end, is_first), np.where(mirrored, end, is_last)
    s, h, V = m.seq_length, m.hidden_size, m.vocab_size
    load = token_counts.moe_load(ep, P.moe_imbalance, P.moe_capacity_factor, m, b, tp, cp, P.etp)

    layer_bytes: dict[ModelSpec, dict] = {}

    def per_layer(view: ModelSpec) -> dict:
        """One layer of ``view`` (the model or one kind of it, ``activations.stash_kinds``):
        its stash ``act`` and without recomputation ``none`` (MoE: the routed tokens as the
        dispatcher holds them, at the hottest rank's load, where the stash keeps them:
        ``activations.routed_stash_correction``), its pending weight gradient ``wgrad`` and
        what a selective recomputation rebuilds at once ``sel``; once per view (every chunk
        of ``own_chunks`` reads the same views)."""
        got = layer_bytes.get(view)
        if got is not None:
            return got
        act, none = _layer_act(view, b, tp, cp, sp, rc, flash, P.recompute_modules,
                               remat_named, act_cache)
        extra, extra_none = routed_stash_correction(view, s, b, tp, cp, sp, P.etp, load, rc,
                                                    P.recompute_modules, clamp, act_cache,
                                                    expert_input)
        te = te_linear_saved_delta(view, s, b, tp, sp, cp, rc, P.recompute_modules, flash,
                                   te_inputs)
        te_none = te_linear_saved_delta(view, s, b, tp, sp, cp, 0, 0, flash, te_inputs)
        got = layer_bytes[view] = {
            "act": act + extra + te, "none": none + extra_none + te_none,
            "wgrad": _layer_wgrad(view, b, tp, cp, sp, act_cache),
            "sel": selective_dropped_bytes(view, s, b, tp, sp, cp, rc,
                                           P.recompute_modules, act_cache)[1]}
        return got

    perm = permutation_buffer_bytes(m, s, b, tp, cp, load, token_counts.ACT_BYTES
                                    if dispatch_bytes is None else dispatch_bytes)
    seq_div = np.where(sp, tp, 1.0)

    # parameters held here (strategies.cost.param_counts) and their states, sharded over the ranks
    # holding their copies: d = dp·cp, or with hybrid sharding dp_shard·cp
    # (``placement.dense_dp_group``, the step-time model's rule), the routed experts over
    # their expert-data-parallel group (with hybrid sharding its grid within a replica)
    etp = P.etp
    dense_l, expert_l = param_counts.layer_params_split(m, tp, ep, etp)
    n_layers = m.num_layers // pp if layers is None else np.asarray(layers, dtype=float)
    held = np.where(mirrored, 2 * n_layers, n_layers)      # layers whose parameters are here
    emb_p = np.where(is_first, param_counts.embedding_params_per_gpu(m, tp), 0.0)
    head_p = np.where(is_last, param_counts.head_params_per_gpu(m, tp, pp, is_first), 0.0)
    d = placement.dense_dp_group(tp, cp, P.dp_shard)[0]
    # expert data parallelism: the ranks that hold an expert's copies
    d_e = placement.expert_dp_group(tp, cp, P.dp_shard, ep, etp)[0]
    sizes = (sy.param_bytes, sy.main_grad_bytes(dtype), sy.optimizer_bytes(optimizer_bytes))
    fs = dict(fsdp2=bool(fsdp2), pp=pp, master_bytes=sy.master_bytes,
              weight_copies=sy.weight_copies)
    per_dense = state_bytes_per_param(zero, d, *sizes, **fs)
    per_expert = state_bytes_per_param(zero, d_e, *sizes, **fs)
    # FSDP2's root module (embedding, final norm, head) is not resharded after forward: under
    # ZeRO-3 its parameters are held gathered like ZeRO-2's (FSDPState._lazy_init sets the
    # root group's post_forward_mesh_info to None)
    per_root = (state_bytes_per_param(np.where(zero == 3, 2, zero), d, *sizes, **fs)
                if fsdp2 else per_dense)

    # low precision: the cached quantised copies of the layers' GEMM weights, beside the
    # 16-bit weights (ZeRO-3 gathers a layer's weights and casts them per use: no cache)
    q_copy = np.where(zero == 3, 0.0, weight_copy_bytes(dtype, gpu))

    def state(dense, expert=0.0, layer_weights=False, root=False):
        out = {k: dense * pd + expert * pe for k, pd, pe in zip(
            KINDS[:3], per_root if root else per_dense, per_expert)}
        if layer_weights:
            out["params"] = out["params"] + q_copy * (dense + expert)
        return out

    # activations (activations.py: stash, embedding, output layer, recomputed layer)
    emb_act = np.where(is_first, embedding_bytes(m, s, b, tp, sp, cp) / v, 0.0) \
        / np.where(mirrored, 2, 1)
    out_one = output_bytes(m, s, b, tp, sp, cp)
    # the loss in progress holds more than the fp32 logits a stashed entry keeps (the
    # stack's cross-entropy, activations.transient_activation_bytes)
    if loss_bytes is None:           # the default stack's (what ``make_job`` gives a job)
        from strategies.framework import DEFAULT as _DEFAULT_FRAMEWORK
        loss_bytes = _DEFAULT_FRAMEWORK.loss
    if hasattr(loss_bytes, "peak_bytes_at"):    # the stack's LossPasses: its figure at each tp
        loss_bytes = loss_bytes.peak_bytes_at(tp)
    loss_extra = output_bytes(m, s, b, tp, sp, cp, loss_bytes) - out_one
    stashed = attr_by_code(sched, "logits_stashed")
    # full recomputation (strategies.cost.recompute): a chunk keeps its checkpointed inputs
    # and, with recompute_layers under block, every activation of the layers it does not
    # recompute; in the backward the layers being rebuilt hold all of theirs (one layer,
    # or a uniform group). op: what the layer did not save, rebuilt for one layer.
    uni_all = P.recompute_method == rcp.METHOD_CODE["uniform"]
    n_rc_all = P.recompute_layers
    rc_all = rc

    def stash(lpc, kinds, pick=None):
        """``(stashed, pending, recompute)``: the bytes of the layers of one stashed chunk
        and of one pending weight gradient, with ``lpc`` layers per chunk of the kinds
        ``kinds`` (``activations.stash_kinds``: each kind's layers at its bytes; block
        recomputation keeps and rebuilds the chunk's mean layer), and of what is rebuilt at
        once (the largest kind held rebuilds its selective parts and op's unsaved tensors).
        ``pick``: ``lpc`` and the counts are given for some of the plans only, the rows
        ``pick`` takes from a plan array."""
        pl = [(per_layer(view), n) for view, n in kinds]
        rc, n_rc, uni = rc_all, n_rc_all, uni_all
        if pick is not None:
            pl = [({k: pick(x) for k, x in L.items()}, n) for L, n in pl]
            rc, n_rc, uni = pick(rc), pick(n_rc), pick(uni)
        if len(pl) == 1:
            L = pl[0][0]
        else:
            tot = sum(n for _, n in pl)
            safe = np.where(tot > 0, tot, 1.0)
            L = {k: sum(n * x[k] for x, n in pl) / safe for k in ("act", "none", "wgrad")}
            held_any = [np.asarray(n) > 0 for _, n in pl]
            L["sel"] = np.maximum.reduce([np.where(h, x["sel"], 0.0)
                                          for (x, _), h in zip(pl, held_any)])
            L["op"] = np.maximum.reduce([np.where(h, np.maximum(x["none"] - x["act"], 0.0),
                                                  0.0) for (x, _), h in zip(pl, held_any)])
        op_rb = L.get("op", np.maximum(L["none"] - L["act"], 0.0))
        chunk_act = np.where(rc == 2, rcp.checkpoint_inputs(lpc, n_rc, uni) * L["act"]
                             + rcp.kept_layers(lpc, n_rc, uni) * L["none"],
                             lpc * L["act"])
        rc_act = np.where(rc == 2, rcp.rebuilt_layers(lpc, n_rc, uni) * L["none"],
                          np.where(rc == 3, op_rb, L["sel"]))
        return chunk_act, lpc * L["wgrad"], rc_act

    def at_peak(chunk_act, w_chunk):
        """``(in_flight, pending_w)``: given, or the pair of the schedule's
        ``stash_frontier_array`` with the most bytes (``activations.stash_peak``'s rule:
        ``chunk_act`` plus the embedding's and stashed logits' bytes per stashed entry,
        ``w_chunk`` per pending weight gradient; the first, most stashed, on a tie)."""
        if in_flight is not None and pending_w is not None:
            return np.asarray(in_flight, dtype=float), np.asarray(pending_w, dtype=float)
        n_k, w_k = _stash_frontier(sched, stage, pp, nmb, v, grp)
        per_entry = chunk_act + emb_act + np.where(is_last & stashed, out_one, 0.0)
        pick = np.argmax(n_k * per_entry + w_k * w_chunk, axis=0)
        n = np.take_along_axis(n_k, pick[None], axis=0)[0]
        w = np.take_along_axis(w_k, pick[None], axis=0)[0]
        return (n if in_flight is None else np.asarray(in_flight, dtype=float),
                w if pending_w is None else np.asarray(pending_w, dtype=float))

    def own_chunks(n_in, n_w, chunk_act, w_chunk):
        """``(stashed, pending, layers' bytes)`` at the peak: the mean chunk's
        (``at_peak``), or each entry at its own chunk's bytes where a rank's chunks keep
        different bytes (``activations.stash_at_peak``'s rule): ``stash_layers`` where given
        (the scalar model), else, with no counts given (the search), the order's per-chunk
        moments (``Schedule.chunk_stash_moments``) priced by each chunk's own layers
        (``layout.even_chunks_content_arrays``)."""
        mean = n_in * chunk_act + n_w * w_chunk
        if stash_layers is not None:
            given = np.asarray(stash_layers, dtype=float)
            return n_in, n_w, np.where(np.isnan(given), mean, given)
        if in_flight is not None or pending_w is not None or content_given:
            return n_in, n_w, mean
        lay = (P.first_stage_layers, P.last_stage_layers, P.account_slots)
        if not mixed_layers(m) and not np.any(np.asarray(lay[0]) + np.asarray(lay[1])
                                              + np.asarray(lay[2])):
            return n_in, n_w, mean          # one kind, even split: every chunk the same
        # the order's chunk ids (``Schedule.order_chunks`` per plan)
        n_ch = np.where(mirrored & (pp > 1), 2, v) + np.zeros_like(mean, dtype=np.int64)
        pick = None
        if not mixed_layers(m) and mean.ndim == 1:
            # one kind: only the uneven layouts' chunks can differ (as above)
            uneven = (np.asarray(lay[0]) + np.asarray(lay[1]) + np.asarray(lay[2]) > 0) \
                & (n_ch >= 2)
            rows = np.flatnonzero(uneven)

            def pick(x):
                return np.broadcast_to(x, mean.shape)[rows]

        def sub(x):
            return x if pick is None else pick(x)
        top = int(sub(n_ch).max()) if sub(n_ch).size else 1
        if top < 2:
            return n_in, n_w, mean
        zeros = np.zeros_like(sub(mean))
        acts, wgs = [], []
        for have in even_chunks_content_arrays(m, sub(sched), sub(pp), sub(v), sub(stage),
                                               range(top), *(sub(x) for x in lay)):
            held_c = {k: have[k] + zeros for k in have}
            lpc_c = held_c["dense"] + held_c["moe"] + held_c["mtp"]
            with np.errstate(invalid="ignore", divide="ignore"):   # an empty chunk: 0
                a_c, w_c, _ = stash(lpc_c, stash_kinds(m, held_c, lpc_c), pick)
            acts.append(np.where(lpc_c > 0, a_c, 0.0) + zeros)
            wgs.append(np.where(lpc_c > 0, w_c, 0.0) + zeros)
        acts, wgs = np.stack(acts), np.stack(wgs)              # (C, plans)
        n_sub = sub(n_ch)
        live = np.arange(top)[:, None] < np.ravel(n_sub)[None].reshape((1,) + n_sub.shape)
        differ = np.any(live & ((acts != acts[:1]) | (wgs != wgs[:1])), axis=0)
        if not np.any(differ):
            return n_in, n_w, mean
        extra = sub(emb_act + np.where(is_last & stashed, out_one, 0.0) + np.zeros_like(mean))
        n2, w2, l2 = _own_chunk_peak(sub(sched), sub(stage), sub(pp), sub(nmb), sub(v), acts,
                                     wgs, extra, differ, sub(grp + np.zeros_like(pp)))
        if pick is not None:        # back onto every plan: the others keep the mean chunk's
            out = [np.zeros(mean.shape, dtype=x.dtype) for x in (differ, n2, w2, l2)]
            for o, x in zip(out, (differ, n2, w2, l2)):
                o[rows] = x
            differ, n2, w2, l2 = out
        return (np.where(differ, n2, n_in), np.where(differ, w2, n_w),
                np.where(differ, l2, mean))

    def peak_activations(chunk_act, w_chunk, rc_act):
        """``(stashed, layers, logits, activations)`` bytes at the peak (``at_peak``,
        ``own_chunks``) of a rank whose chunk keeps ``chunk_act`` per stashed entry,
        ``w_chunk`` per pending ``W`` and rebuilds ``rc_act`` at once."""
        n_in, n_w = at_peak(chunk_act, w_chunk)
        n_in, n_w, layers_act = own_chunks(n_in, n_w, chunk_act, w_chunk)
        out_act = np.where(is_last, out_one * np.where(stashed, n_in, 1) + loss_extra, 0.0)
        return n_in, layers_act, out_act, layers_act + n_in * emb_act + out_act + rc_act

    content_given = content is not None
    # layers per chunk: the stage's mean chunk (a layout's chunks may differ by a layer)
    lpc = m.num_layers // (pp * v) if layers is None else n_layers / v
    if not mixed_layers(m):
        chunk_act, w_chunk, rc_act = stash(lpc, [(m, None)])
        n_in, layers_act, out_act, activations = peak_activations(chunk_act, w_chunk, rc_act)

    # other: fixed allowance, ZeRO-2/3 buffers (two gradient buckets in flight; two layers'
    # gathered parameters with ZeRO-3), fragmentation, one MoE layer's permutation buffers
    if mixed_layers(m):
        # dense and MoE layers or MTP modules: what this rank holds by kind
        # (strategies.layout.stage_content), each kind's parameters summed; DualPipe
        # (mirrored) also holds stage pp-1-r's, and a stashed micro-batch holds the layers of
        # either copy (the mean of the two)
        if content is None:
            lay = (P.first_stage_layers, P.last_stage_layers, P.account_slots)
            have = even_stage_content_arrays(m, sched, pp, v, stage, *lay)
            mirror = even_stage_content_arrays(m, sched, pp, v, pp - 1 - stage, *lay)
            content = {k: have[k] + np.where(mirrored, mirror[k], 0.0) for k in have}
            if layers is None:
                n_layers = have["dense"] + have["moe"] + have["mtp"]
                layers = np.where(mirrored, (n_layers + mirror["dense"] + mirror["moe"]
                                             + mirror["mtp"]) / 2, n_layers)
        shape = np.zeros_like(emb_act + out_one * is_last * stage)
        held_k = {k: np.asarray(content.get(k, 0.0), dtype=float) + shape
                  for k in ("dense", "moe", "mtp")}
        if layers is None:
            raise ValueError("memory_component_arrays: content needs layers (the stash)")
        layers = np.asarray(layers, dtype=float)
        chunk_act, w_chunk, rc_act = stash(layers / v, stash_kinds(m, held_k, layers))
        n_in, layers_act, out_act, activations = peak_activations(chunk_act, w_chunk, rc_act)
        layer_dense, expert_params = content_params(m, held_k, tp, ep, etp, is_first)
        dense_params = layer_dense + emb_p + head_p
        # the token permutation's buffers live in an MoE layer (an MTP module's is one when
        # the model's layers are): none on a rank of dense layers only
        routed = held_k["moe"] + (held_k["mtp"] if m.is_moe else 0.0)
        perm = np.where(routed > 0, perm, 0.0)
    else:
        dense_params, expert_params = param_counts.stage_params_split(m, tp, ep, pp, stage, layers,
                                                                      mirrored=mirrored, etp=etp)
        layer_dense = held * dense_l
    params_here = dense_params + expert_params
    gb = sy.main_grad_bytes(dtype)
    bucket = sy.dp_bucket_params(dp)
    buffers = np.where((zero >= 2) & (d > 1),
                       2 * np.minimum(bucket, params_here) * gb
                       + np.where(zero == 3, 2 * (dense_l + expert_l) * sy.param_bytes, 0.0),
                       0.0)
    # this rank's partition of the optimizer (experts over their own group)
    partition = dense_params / np.where(zero >= 1, d, 1.0) \
        + expert_params / np.where(zero >= 1, d_e, 1.0)
    # fp16: the optimizer step's fp32 gradient copy (the 1/d shard with ZeRO >= 1), beyond the
    # activations it replaces (docs/memory.md)
    after = sy.step_grad_copy_bytes(dtype) * partition
    # DeepSpeed's ZeRO-1/2 optimizer where its gradients are 16-bit (not its BF16_Optimizer):
    # its own buckets and gradient partitions (strategies.memory.deepspeed_zero)
    ds = bool(sy.deepspeed_zero) and gb == 2.0
    if ds:
        ds_on = (zero == 1) | (zero == 2)
        ipg, partitions = dsz.zero2_backward_bytes(bucket, params_here, partition, gb, nmb > 1)
        # ZeRO-2: the ipg bucket and the gradient partitions beyond the one the state counts
        ds_buf = np.where(zero == 2, ipg + partitions - gb * partition, 0.0)
        buffers = np.where(ds_on, ds_buf, buffers)
        # after the last backward, beyond the backward's gradient state and buffers
        grad_state = np.where(zero == 1, gb * params_here, gb * partition)
        after = np.where(ds_on, dsz.after_backward_bytes(zero, params_here, partition, bucket,
                                                         gb) - grad_state - ds_buf, after)
    other = sy.fixed_other_bytes + buffers + sy.fragmentation * activations + perm
    step_copy = np.maximum(0.0, after - (1.0 + sy.fragmentation) * activations)

    zero_ = np.zeros_like(activations)
    parts = {"layers": dict(state(layer_dense, expert_params, True),
                            activations=layers_act),
             "embedding": dict(state(emb_p, root=True), activations=n_in * emb_act),
             "output": dict(state(head_p, root=True), activations=out_act),
             "recompute": dict(state(zero_), activations=rc_act),
             "other": {"params": zero_, "grads": step_copy, "optimizer": zero_,
                       "activations": zero_, "other": other}}
    for part in parts.values():
        part.setdefault("other", zero_)
    total_state = sum(x for part in parts.values() for k, x in part.items() if k in KINDS[:3]
                      and part is not parts["other"])
    total = total_state + activations + other + step_copy
    return parts, total


def _stash_frontier(sched, stage, pp, m, v, group=0) -> tuple[np.ndarray, np.ndarray]:
    """``Schedule.stash_frontier_array`` of each plan's schedule (by code): ``(stashed,
    pending)`` of shape ``(K,) + plans``, each plan's pairs padded with its first. ``group``:
    each plan's micro-batch group (0: the default); a plan that names one reads its order's
    ``Schedule.stash_frontier`` once per distinct ``(code, stage, pp, m, vpp, group)``."""
    arrs = np.broadcast_arrays(np.asarray(sched, dtype=np.int64), *(np.asarray(a) for a in
                                                                     (stage, pp, m, v, group)))
    c, rest, g = arrs[0], arrs[1:5], arrs[5]
    got = {}
    for code in np.unique(c):
        sel = (c == code) & (g == 0)
        if np.any(sel):
            got[(int(code), 0)] = (sel, schedule_of_code(code).stash_frontier_array(
                *(a[sel] for a in rest)))
    named = np.flatnonzero(np.ravel(g) > 0)
    if named.size:
        flat = [np.ravel(a) for a in (c, *rest, g)]
        keys = np.stack([f[named].astype(np.int64) for f in flat], axis=1)
        for key in np.unique(keys, axis=0).tolist():
            sel = np.all(np.stack([f == x for f, x in zip(flat, key)]), axis=0).reshape(c.shape)
            code, stage_k, pp_k, m_k, v_k, g_k = key
            front = schedule_of_code(code).stash_frontier(stage_k, pp_k, m_k, v_k, g_k)
            k_sel = int(sel.sum())
            got[tuple(key)] = (sel, (np.array([[n] * k_sel for n, _ in front], dtype=float),
                                     np.array([[w] * k_sel for _, w in front], dtype=float)))
    depth = max((f[0].shape[0] for _, f in got.values()), default=1)
    n = np.zeros((depth,) + c.shape)
    w = np.zeros((depth,) + c.shape)
    for sel, (nk, wk) in got.values():
        pad = depth - nk.shape[0]
        n[:, sel] = np.concatenate([nk] + [nk[:1]] * pad) if pad else nk
        w[:, sel] = np.concatenate([wk] + [wk[:1]] * pad) if pad else wk
    return n, w


#: ``Schedule.chunk_stash_moments`` of each ``(code, stage, pp, m, vpp)`` as padded
#: ``(stashed, pending)`` arrays of shape ``(K, C)``; bounded, cleared when full
_CHUNK_MOMENTS: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}


def _chunk_moments(code: int, stage: int, pp: int, m: int, v: int, group: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    key = (code, stage, pp, m, v, group)
    got = _CHUNK_MOMENTS.get(key)
    if got is None:
        if len(_CHUNK_MOMENTS) >= 1 << 14:
            _CHUNK_MOMENTS.clear()
        mo = schedule_of_code(code).chunk_stash_moments(stage, pp, m, v, group or None)
        got = _CHUNK_MOMENTS[key] = (np.array([n for n, _ in mo], dtype=float),
                                     np.array([w for _, w in mo], dtype=float))
    return got


def _own_chunk_peak(sched, stage, pp, m, v, acts, wgs, extra, sel, group=0
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(stashed, pending, layers' bytes)`` of each plan in ``sel`` at the order's per-chunk
    moment with the most bytes (``schedules.base.peak_chunk_moment``: ``acts[c] + extra``
    per stashed entry of chunk ``c``, ``wgs[c]`` per pending ``W``; the first on a tie);
    zeros elsewhere. ``acts``, ``wgs``: ``(C,) + plans``; ``group``: the micro-batch group
    (0: the default); once per distinct order."""
    cols = np.broadcast_arrays(*(np.asarray(a) for a in (sched, stage, pp, m, v, group, sel)))
    shape = cols[0].shape
    flat = [np.ravel(c) for c in cols]
    a2 = acts.reshape(acts.shape[0], -1)
    w2 = wgs.reshape(wgs.shape[0], -1)
    e2 = np.ravel(extra + np.zeros(shape))
    out = [np.zeros(len(flat[0])) for _ in range(3)]
    rows = np.flatnonzero(flat[6])
    keys = np.stack([f[rows].astype(np.int64) for f in flat[:6]], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = np.ravel(inv)
    for j, key in enumerate(uniq.tolist()):
        idx = rows[inv == j]
        nk, wk = _chunk_moments(*key)                        # (K, C)
        c = nk.shape[1]
        per_n = a2[:c, idx] + e2[idx]                        # (C, rows)
        size = nk @ per_n + wk @ w2[:c, idx]                 # (K, rows)
        pick = np.argmax(size, axis=0)
        out[0][idx] = nk[pick].sum(axis=1)
        out[1][idx] = wk[pick].sum(axis=1)
        out[2][idx] = np.einsum("rc,cr->r", nk[pick], a2[:c, idx]) + np.einsum(
            "rc,cr->r", wk[pick], w2[:c, idx])
    return tuple(x.reshape(shape) for x in out)


def rank_memory_arrays(m: ModelSpec, P: PlanArrays | Mapping[str, Any], stage,
                       dtype: str = "bf16", system: SystemConfig | None = None, gpu=None,
                       in_flight=None, pending_w=None, clamp=False,
                       remat_named=False, loss_bytes=None, act_cache=None,
                       optimizer_bytes=None, fsdp2=False, dispatch_bytes=None,
                       expert_input=None, te_inputs=None) -> np.ndarray:
    """Bytes per GPU of pipeline rank ``stage`` (an int or one per plan, ``< pp``) of each
    plan, reading the layers the plan's layout puts there: a model of one layer kind its
    layer count (``plan_arrays.rank_layers``: rank 0, a middle rank, rank ``pp-1``), a model
    with dense and MoE layers or MTP modules its layers by kind
    (``layout.even_stage_content``). ``in_flight``/``pending_w``: as
    ``memory_component_arrays`` (default: the schedule's counts at the default group size).
    ``clamp``, ``remat_named``, ``loss_bytes``, ``act_cache``, ``optimizer_bytes``,
    ``fsdp2``, ``dispatch_bytes``, ``expert_input``: as ``memory_component_arrays``.
    ``memory.scalar.memory_by_stage`` is this for one job's
    plan."""
    P = as_plan_arrays(P)
    stage = np.asarray(stage) + np.zeros_like(P.pp)
    layers = None
    if not mixed_layers(m):
        first, mid, last, _, uneven = rank_layers(m.num_layers, P)
        if np.any(uneven):
            own = np.where(stage == 0, first, np.where(stage == P.pp - 1, last, mid))
            layers = np.where(uneven, own, m.num_layers / P.pp)
    return memory_component_arrays(m, P, stage, dtype, system, in_flight=in_flight,
                                   layers=layers, pending_w=pending_w, gpu=gpu,
                                   clamp=clamp, remat_named=remat_named,
                                   loss_bytes=loss_bytes, act_cache=act_cache,
                                   optimizer_bytes=optimizer_bytes, fsdp2=fsdp2,
                                   dispatch_bytes=dispatch_bytes,
                                   expert_input=expert_input, te_inputs=te_inputs)[1]


def stage_memory_arrays(m: ModelSpec, P: PlanArrays | Mapping[str, Any], last: bool,
                        dtype: str = "bf16", system: SystemConfig | None = None,
                        gpu=None, clamp=False, remat_named=False, loss_bytes=None,
                        act_cache=None, optimizer_bytes=None, fsdp2=False,
                        dispatch_bytes=None, expert_input=None,
                        te_inputs=None) -> np.ndarray:
    """Bytes per GPU of the first (``last=False``) or the last pipeline stage of each plan
    (``P``: ``PlanArrays`` or the search space's short columns; ``dtype``: the training
    precision; ``system``: the policy constants; ``gpu``: the chip, for fp8 weight copies):
    ``rank_memory_arrays`` of rank 0 or ``pp - 1`` (``clamp``, ``remat_named``, …: as there)."""
    P = as_plan_arrays(P)
    return rank_memory_arrays(m, P, P.pp - 1 if last else np.zeros_like(P.pp), dtype, system,
                              gpu, clamp=clamp, remat_named=remat_named,
                              loss_bytes=loss_bytes, act_cache=act_cache,
                              optimizer_bytes=optimizer_bytes, fsdp2=fsdp2,
                              dispatch_bytes=dispatch_bytes, expert_input=expert_input,
                              te_inputs=te_inputs)


def peak_memory_arrays(m: ModelSpec, P: PlanArrays | Mapping[str, Any], dtype: str = "bf16",
                       system: SystemConfig | None = None, gpu=None,
                       clamp=False, remat_named=False, loss_bytes=None, act_cache=None,
                       optimizer_bytes=None, fsdp2=False, dispatch_bytes=None,
                       expert_input=None, te_inputs=None) -> np.ndarray:
    """Peak bytes per GPU over the pipeline stages of each plan (``memory.peak_memory``).
    ``clamp``: the stack runs gpt-oss's eager clamp; ``remat_named``: its selective
    recomputation is a JAX remat policy; ``loss_bytes``, ``act_cache``, ``optimizer_bytes``,
    ``fsdp2``, ``dispatch_bytes``, ``expert_input``: the stack's (all:
    ``memory_component_arrays``).
    A model of one layer kind: the first and the last rank, and where an uneven layout gives
    the middle ranks more layers, rank 1 (the middle rank with the most stashed
    micro-batches; module docstring). A model with dense and MoE layers or MTP modules:
    every rank (the ranks hold different kinds, so no rank's total bounds another's)."""
    P = as_plan_arrays(P)
    if mixed_layers(m):
        return _every_rank_peak(m, P, dtype, system, gpu, clamp, remat_named, loss_bytes,
                                    act_cache, optimizer_bytes, fsdp2, dispatch_bytes,
                                    expert_input, te_inputs)
    peak = np.maximum(stage_memory_arrays(m, P, False, dtype, system, gpu, clamp, remat_named,
                                          loss_bytes, act_cache, optimizer_bytes, fsdp2,
                                          dispatch_bytes, expert_input, te_inputs),
                      stage_memory_arrays(m, P, True, dtype, system, gpu, clamp, remat_named,
                                          loss_bytes, act_cache, optimizer_bytes, fsdp2,
                                          dispatch_bytes, expert_input, te_inputs))
    uneven = rank_layers(m.num_layers, P)[4] & (P.pp > 2)
    if np.any(uneven):
        # rank 1 where it exists (the rows with pp <= 2 are masked out below anyway)
        mid = rank_memory_arrays(m, P, np.minimum(1, P.pp - 1), dtype, system, gpu,
                                 clamp=clamp, remat_named=remat_named,
                                 loss_bytes=loss_bytes, act_cache=act_cache,
                                 optimizer_bytes=optimizer_bytes, fsdp2=fsdp2,
                                 dispatch_bytes=dispatch_bytes, expert_input=expert_input,
                              te_inputs=te_inputs)
        peak = np.where(uneven, np.maximum(peak, mid), peak)
    # a split backward's pending weight gradients grow with the rank and may outweigh the
    # stash (``activations.stash_peak``), and DualPipe's middle ranks stash one more: every
    # rank of those plans (none of them in the default search)
    every = np.broadcast_to(attr_by_code(P.schedule, "splits_backward")
                            | attr_by_code(P.schedule, "mirrored"), np.shape(peak))
    if np.any(every):
        peak = np.array(peak, dtype=float)
        if peak.ndim == 0:
            return _every_rank_peak(m, P, dtype, system, gpu, clamp, remat_named, loss_bytes,
                                    act_cache, optimizer_bytes, fsdp2, dispatch_bytes,
                                    expert_input, te_inputs)
        rows = np.flatnonzero(every)
        peak.reshape(-1)[rows] = _every_rank_peak(m, _take(P, rows), dtype, system, gpu,
                                                    clamp, remat_named, loss_bytes,
                                                    act_cache, optimizer_bytes, fsdp2,
                                                    dispatch_bytes, expert_input, te_inputs)
    return peak


def _every_rank_peak(m: ModelSpec, P: PlanArrays, dtype: str, system: SystemConfig | None,
                     gpu, clamp=False, remat_named=False, loss_bytes=None, act_cache=None,
                     optimizer_bytes=None, fsdp2=False, dispatch_bytes=None,
                     expert_input=None, te_inputs=None) -> np.ndarray:
    """The largest ``rank_memory_arrays`` over ranks ``0 … pp-1`` of each plan: rank ``r``
    is evaluated on the plans with ``pp > r`` only."""
    pp = np.atleast_1d(P.pp)
    peak = np.full(pp.shape, -np.inf)
    for r in range(int(pp.max()) if pp.size else 0):
        rows = np.flatnonzero(pp > r)
        sub = _take(P, rows)
        peak[rows] = np.maximum(peak[rows], rank_memory_arrays(
            m, sub, r, dtype, system, gpu, clamp=clamp, remat_named=remat_named,
            loss_bytes=loss_bytes, act_cache=act_cache, optimizer_bytes=optimizer_bytes,
            fsdp2=fsdp2, dispatch_bytes=dispatch_bytes, expert_input=expert_input,
                              te_inputs=te_inputs))
    return peak.reshape(np.shape(P.pp))


def _take(P: PlanArrays, rows: np.ndarray) -> PlanArrays:
    """The plans ``rows`` of ``P`` (0-d fields broadcast first)."""
    n = np.shape(np.atleast_1d(P.pp))
    return PlanArrays(**{f.name: np.broadcast_to(getattr(P, f.name), n)[rows]
                         for f in fields(P)})
