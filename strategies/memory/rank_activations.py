"""The activation bytes of one pipeline rank of each plan at its stash peak, over numpy arrays
of plans (``PlanArrays``): a layer's stash by kind (``RankActivations.per_layer``), a stashed
chunk's and a pending weight gradient's bytes (``stash``), the stash moment with the most bytes
(``at_peak``), each entry at its own chunk's bytes where a rank's chunks differ
(``own_chunks``), and the rank's activations at that peak (``peak_activations``): what
``rank_components.memory_component_arrays`` reads for its ``activations`` by origin. Every
term: docs/memory.md."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost import recompute as rcp
from strategies.cost.cp_a2a import saved_delta
from strategies.layout import even_chunks_content_arrays, mixed_layers
from strategies.memory.activations import (embedding_bytes, output_bytes,
                                          routed_stash_correction, selective_dropped_bytes,
                                          stash_kinds)
from strategies.memory.mixer_saved import mixer_saved_delta
from strategies.memory.offload_saved import (layer_kept_share, resident_layer_bytes,
                                             offloaded_bytes, resident_offload_bytes)
from strategies.memory.stage_stash import stashed_count
from strategies.memory.stage_ends import deferral_buffer_bytes, stage_output_bytes
from strategies.memory.stash_arrays import (layer_act_arrays, layer_wgrad_arrays,
                                            own_chunk_peak, stash_frontier_arrays)
from strategies.memory.te_linear_saved import te_linear_saved_delta
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays
from strategies.schedules import attr_by_code


class RankActivations:
    """The activations of pipeline rank ``stage`` (one per plan) of each plan of ``P``, as
    ``memory_component_arrays`` prices them (its arguments of the same names: ``in_flight``,
    ``pending_w``, ``stash_layers``, ``clamp``, ``remat_named``, ``loss_bytes``,
    ``act_cache``, ``expert_input``, ``te_inputs``, ``mixer_d_inner``, ``cp_a2a``;
    ``head_deferral``: ``SystemConfig.head_wgrad_deferral``, whose buffers the head's rank
    holds beside its loss, ``stage_ends.deferral_buffer_bytes``). ``is_first``/``is_last``: the rank holds
    the embedding / the output layer; ``mirrored``: DualPipe's two copies; ``nmb``:
    micro-batches per flush; ``grp``: the interleaved micro-batch group; ``load``: the MoE
    load of the hottest rank (``token_counts.moe_load``); ``content_given``: the caller gave
    the rank's layers by kind (the scalar model), so the order's per-chunk moments are not
    read. Bytes per GPU; each layer view's bytes are worked out once (``per_layer``)."""

    def __init__(self, m: ModelSpec, P: PlanArrays, stage: np.ndarray, is_first: np.ndarray,
                 is_last: np.ndarray, mirrored: np.ndarray, nmb: np.ndarray, grp: np.ndarray,
                 load: Any, *, in_flight=None, pending_w=None, stash_layers=None,
                 content_given: bool = False, clamp=False, remat_named=False, loss_bytes=None,
                 act_cache=None, expert_input=None, te_inputs=None,
                 mixer_d_inner=None, cp_a2a=False, head_deferral: float = 0.0) -> None:
        tp, pp, cp, b, v = P.tp, P.pp, P.cp, P.mbs, P.vpp
        sched, rc = P.schedule, P.recompute
        sp, flash = P.sp, P.flash_attn
        s = m.seq_length
        # activations (activations.py: stash, embedding, output layer, recomputed layer)
        emb_act = np.where(is_first, embedding_bytes(m, s, b, tp, sp, cp) / v, 0.0) \
            / np.where(mirrored, 2, 1)
        out_one = output_bytes(m, s, b, tp, sp, cp)
        # the stage output a stashed entry keeps where the schedule's engine holds it (DeepSpeed's
        # pipeline engine; ``stage_ends.stage_output_bytes``), counted with the layers
        pipe_out = np.where(attr_by_code(sched, "keeps_stage_output").astype(bool) & ~is_last,
                            stage_output_bytes(m, s, b, tp, cp), 0.0)
        # the loss in progress holds more than the fp32 logits a stashed entry keeps (the
        # stack's cross-entropy, activations.transient_activation_bytes)
        if loss_bytes is None:           # the default stack's (what ``make_job`` gives a job)
            from strategies.framework import DEFAULT as _DEFAULT_FRAMEWORK
            loss_bytes = _DEFAULT_FRAMEWORK.loss
        if hasattr(loss_bytes, "peak_bytes_at"):    # the stack's LossPasses: its figure at each tp
            loss_bytes = loss_bytes.peak_bytes_at(tp)
        loss_extra = output_bytes(m, s, b, tp, sp, cp, loss_bytes) - out_one
        stashed = attr_by_code(sched, "logits_stashed")
        # the output layer's deferred weight gradients' buffers (``SystemConfig.
        # head_wgrad_deferral``; ``stage_ends.deferral_buffer_bytes``), held to the drain
        defer_buf = (deferral_buffer_bytes(m, s, b, tp, sp, cp, pp, nmb, head_deferral)
                     if head_deferral else 0.0)
        # full recomputation (strategies.cost.recompute): a chunk keeps its checkpointed inputs
        # and, with recompute_layers under block, every activation of the layers it does not
        # recompute; in the backward the layers being rebuilt hold all of theirs (one layer,
        # or a uniform group). op: what the layer did not save, rebuilt for one layer.
        uni = P.recompute_method == rcp.METHOD_CODE["uniform"]
        n_rc = P.recompute_layers
        self.m, self.P, self.stage, self.is_last, self.mirrored = m, P, stage, is_last, mirrored
        self.tp, self.pp, self.cp, self.b, self.v, self.sp, self.flash = tp, pp, cp, b, v, sp, flash
        self.sched, self.rc, self.n_rc, self.uni = sched, rc, n_rc, uni
        self.s, self.load, self.nmb, self.grp = s, load, nmb, grp
        self.in_flight, self.pending_w, self.stash_layers = in_flight, pending_w, stash_layers
        self.content_given, self.clamp, self.remat_named = content_given, clamp, remat_named
        self.act_cache, self.expert_input, self.te_inputs = act_cache, expert_input, te_inputs
        self.mixer_d_inner = mixer_d_inner
        self.cp_a2a = cp_a2a    # TE's all-to-all CP: its saved output (cp_a2a.saved_delta)
        #: bytes per stashed entry of the embedding's output, of the stage output the
        #: schedule's engine keeps, of one micro-batch's fp32 logits and of the loss's peak
        #: beyond them; whether the schedule stashes the logits
        self.emb_act, self.pipe_out, self.out_one = emb_act, pipe_out, out_one
        self.loss_extra, self.stashed, self.defer_buf = loss_extra, stashed, defer_buf
        self._layer_bytes: dict[ModelSpec, dict] = {}

    def per_layer(self, view: ModelSpec) -> dict:
        """One layer of ``view`` (the model or one kind of it, ``activations.stash_kinds``):
        its stash ``act`` and without recomputation ``none`` (MoE: the routed tokens as the
        dispatcher holds them, at the hottest rank's load, where the stash keeps them:
        ``activations.routed_stash_correction``), its pending weight gradient ``wgrad`` and
        what a selective recomputation rebuilds at once ``sel``; once per view (every chunk
        of ``own_chunks`` reads the same views)."""
        b, tp, cp, sp, rc, flash, P, s, load = (self.b, self.tp, self.cp, self.sp, self.rc,
                                                self.flash, self.P, self.s, self.load)
        remat_named, act_cache, clamp, expert_input, te_inputs = (
            self.remat_named, self.act_cache, self.clamp, self.expert_input, self.te_inputs)
        layer_bytes = self._layer_bytes
        got = layer_bytes.get(view)
        if got is not None:
            return got
        act, none = layer_act_arrays(view, b, tp, cp, sp, rc, flash, P.recompute_modules,
                                     remat_named, act_cache)
        extra, extra_none = routed_stash_correction(view, s, b, tp, cp, sp, P.etp, load, rc,
                                                    P.recompute_modules, clamp, act_cache,
                                                    expert_input)
        te = te_linear_saved_delta(view, s, b, tp, sp, cp, rc, P.recompute_modules, flash,
                                   te_inputs)
        te_none = te_linear_saved_delta(view, s, b, tp, sp, cp, 0, 0, flash, te_inputs)
        # a Mamba-2 mixer that saves other than Megatron-Core's three d_inner tensors
        te = te + mixer_saved_delta(view, s, b, tp, rc, self.mixer_d_inner)
        te_none = te_none + mixer_saved_delta(view, s, b, tp, 0, self.mixer_d_inner)
        if np.any(self.cp_a2a):
            a2a_act, a2a_none = saved_delta(view, b, tp, cp, rc, P.recompute_modules, flash)
            te = te + np.where(self.cp_a2a, a2a_act, 0.0)
            te_none = te_none + np.where(self.cp_a2a, a2a_none, 0.0)
        # what fine-grained activation offloading moves to host memory (plan offload_modules)
        off = offloaded_bytes(view, s, b, tp, cp, sp, P.etp, load, rc, P.recompute_modules,
                              P.offload_modules, flash, act_cache, expert_input, te_inputs,
                              self.cp_a2a)[0]
        # layer-level CPU offloading (plan cpu_offloading_num_layers): the first N layers'
        # stash leaves, the last of them comes back ahead of its backward (``offload_saved``)
        whole = act + extra + te - off
        n_cpu = P.cpu_offloading_num_layers
        got = layer_bytes[view] = {
            "act": layer_kept_share(n_cpu, self.m.num_layers) * whole,
            "grp": resident_layer_bytes(whole, n_cpu),
            "none": none + extra_none + te_none, "off": off,
            "wgrad": layer_wgrad_arrays(view, b, tp, cp, sp, act_cache),
            "sel": selective_dropped_bytes(view, s, b, tp, sp, cp, rc,
                                           P.recompute_modules, act_cache)[1]}
        return got

    def stash(self, lpc: Any, kinds: list, pick: Any = None) -> tuple:
        """``(stashed, pending, recompute)``: the bytes of the layers of one stashed chunk
        and of one pending weight gradient, with ``lpc`` layers per chunk of the kinds
        ``kinds`` (``activations.stash_kinds``: each kind's layers at its bytes; block
        recomputation keeps and rebuilds the chunk's mean layer), and of what is rebuilt at
        once (the largest kind held rebuilds its selective parts and op's unsaved tensors).
        ``pick``: ``lpc`` and the counts are given for some of the plans only, the rows
        ``pick`` takes from a plan array."""
        pl = [(self.per_layer(view), n) for view, n in kinds]
        rc, n_rc, uni = self.rc, self.n_rc, self.uni
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
            for k in ("off", "grp"):
                L[k] = np.maximum.reduce([np.where(h, x[k], 0.0)
                                          for (x, _), h in zip(pl, held_any)])
        op_rb = L.get("op", np.maximum(L["none"] - L["act"], 0.0))
        chunk_act = np.where(rc == 2, rcp.checkpoint_inputs(lpc, n_rc, uni) * L["act"]
                             + rcp.kept_layers(lpc, n_rc, uni) * L["none"],
                             lpc * L["act"])
        rc_act = np.where(rc == 2, rcp.rebuilt_layers(lpc, n_rc, uni) * L["none"],
                          np.where(rc == 3, op_rb, L["sel"]))
        # offload groups still on the GPU at the peak (``offload_saved``); a transient, as
        # what recomputation rebuilds at once
        rc_act = rc_act + resident_offload_bytes(L["off"]) + L["grp"]
        return chunk_act, lpc * L["wgrad"], rc_act

    def at_peak(self, chunk_act: Any, w_chunk: Any) -> tuple:
        """``(in_flight, pending_w)``: given, or the pair of the schedule's
        ``stash_frontier_array`` with the most bytes (``activations.stash_peak``'s rule:
        ``chunk_act`` plus the embedding's and stashed logits' bytes per stashed entry,
        ``w_chunk`` per pending weight gradient; the first, most stashed, on a tie)."""
        in_flight, pending_w, sched, stage, pp, nmb, v, grp = (
            self.in_flight, self.pending_w, self.sched, self.stage, self.pp, self.nmb, self.v,
            self.grp)
        emb_act, pipe_out, is_last, stashed, out_one = (
            self.emb_act, self.pipe_out, self.is_last, self.stashed, self.out_one)
        if in_flight is not None and pending_w is not None:
            return np.asarray(in_flight, dtype=float), np.asarray(pending_w, dtype=float)
        n_k, w_k = stash_frontier_arrays(sched, stage, pp, nmb, v, grp)
        per_entry = chunk_act + emb_act + pipe_out + np.where(is_last & stashed, out_one, 0.0)
        pick = np.argmax(n_k * per_entry + w_k * w_chunk, axis=0)
        n = np.take_along_axis(n_k, pick[None], axis=0)[0]
        w = np.take_along_axis(w_k, pick[None], axis=0)[0]
        return (n if in_flight is None else np.asarray(in_flight, dtype=float),
                w if pending_w is None else np.asarray(pending_w, dtype=float))

    def own_chunks(self, n_in: Any, n_w: Any, chunk_act: Any, w_chunk: Any) -> tuple:
        """``(stashed, pending, layers' bytes)`` at the peak: the mean chunk's
        (``at_peak``), or each entry at its own chunk's bytes where a rank's chunks keep
        different bytes (``activations.stash_at_peak``'s rule): ``stash_layers`` where given
        (the scalar model), else, with no counts given (the search), the order's per-chunk
        moments (``Schedule.chunk_stash_moments``) priced by each chunk's own layers
        (``layout.even_chunks_content_arrays``)."""
        in_flight, pending_w, stash_layers, content_given, P, m, mirrored = (
            self.in_flight, self.pending_w, self.stash_layers, self.content_given, self.P,
            self.m, self.mirrored)
        sched, stage, pp, nmb, v, grp = (self.sched, self.stage, self.pp, self.nmb, self.v,
                                         self.grp)
        emb_act, pipe_out, is_last, stashed, out_one = (
            self.emb_act, self.pipe_out, self.is_last, self.stashed, self.out_one)
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
            lpc_c = stashed_count(m, held_c)
            with np.errstate(invalid="ignore", divide="ignore"):   # an empty chunk: 0
                a_c, w_c, _ = self.stash(lpc_c, stash_kinds(m, held_c, lpc_c), pick)
            acts.append(np.where(lpc_c > 0, a_c, 0.0) + zeros)
            wgs.append(np.where(lpc_c > 0, w_c, 0.0) + zeros)
        acts, wgs = np.stack(acts), np.stack(wgs)              # (C, plans)
        n_sub = sub(n_ch)
        live = np.arange(top)[:, None] < np.ravel(n_sub)[None].reshape((1,) + n_sub.shape)
        differ = np.any(live & ((acts != acts[:1]) | (wgs != wgs[:1])), axis=0)
        if not np.any(differ):
            return n_in, n_w, mean
        extra = sub(emb_act + pipe_out + np.where(is_last & stashed, out_one, 0.0)
                    + np.zeros_like(mean))
        n2, w2, l2 = own_chunk_peak(sub(sched), sub(stage), sub(pp), sub(nmb), sub(v), acts,
                                    wgs, extra, differ, sub(grp + np.zeros_like(pp)))
        if pick is not None:        # back onto every plan: the others keep the mean chunk's
            out = [np.zeros(mean.shape, dtype=x.dtype) for x in (differ, n2, w2, l2)]
            for o, x in zip(out, (differ, n2, w2, l2)):
                o[rows] = x
            differ, n2, w2, l2 = out
        return (np.where(differ, n2, n_in), np.where(differ, w2, n_w),
                np.where(differ, l2, mean))

    def peak_activations(self, chunk_act: Any, w_chunk: Any, rc_act: Any) -> tuple:
        """``(stashed, layers, logits, activations)`` bytes at the peak (``at_peak``,
        ``own_chunks``) of a rank whose chunk keeps ``chunk_act`` per stashed entry,
        ``w_chunk`` per pending ``W`` and rebuilds ``rc_act`` at once."""
        pipe_out, is_last, out_one, stashed, loss_extra, emb_act = (
            self.pipe_out, self.is_last, self.out_one, self.stashed, self.loss_extra,
            self.emb_act)
        n_in, n_w = self.at_peak(chunk_act, w_chunk)
        n_in, n_w, layers_act = self.own_chunks(n_in, n_w, chunk_act, w_chunk)
        layers_act = layers_act + n_in * pipe_out
        out_act = np.where(is_last, out_one * np.where(stashed, n_in, 1) + loss_extra
                           + self.defer_buf, 0.0)
        return n_in, layers_act, out_act, layers_act + n_in * emb_act + out_act + rc_act
