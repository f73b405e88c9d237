"""A pipeline rank's activation peak: the layers a micro-batch stashes there by kind, what
each stashed ``(micro-batch, chunk)`` and pending weight gradient keeps, the schedule's
moment with the most bytes, and the transient on top (docs/memory.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from strategies.cost.recompute import checkpoint_inputs, kept_layers, modules_mask, \
    rebuilt_layers
from strategies.errors import SpecError
from strategies.layout import mixed_layers, order_chunk_kinds, stage_content
from strategies.memory.job_layers import job_activation_cache, job_layer_activation_bytes
from strategies.memory.stack_terms import job_stack_memory
from strategies.memory.layer_terms import layer_wgrad_bytes
from strategies.memory.recompute_saved import selective_dropped_bytes
from strategies.memory.stage_ends import (deferral_buffer_bytes, embedding_activation_bytes,
                                          holds_embedding, holds_head, output_activation_bytes,
                                          output_bytes, stage_output_activation_bytes)
from strategies.model import ModelSpec
from strategies.schedules import get_schedule
from strategies.schedules.per_distinct import order_figure
from strategies.schedules.stash import peak_chunk_moment, peak_pair

if TYPE_CHECKING:
    from strategies.job import Job


def stashed_count(model: ModelSpec, content: Mapping[str, Any]) -> Any:
    """Layers a micro-batch stashes on a rank holding ``content`` (``{kind: counts}``, numbers
    or arrays: ``layout.stage_content``): every layer of ``ModelSpec.cost_kinds`` once, a
    multi-token-prediction module ``ModelSpec.mtp_stash_layers`` times. The one count the
    array model, the scalar model and ``stash_kinds`` scale by."""
    return sum((np.asarray(content.get(k, 0.0), dtype=float) for k in model.cost_kinds()),
               np.asarray(content.get("mtp", 0.0), dtype=float) * model.mtp_stash_layers)


def stash_kinds(model: ModelSpec, content: Mapping[str, Any] | None, layers) -> list:
    """The layers a micro-batch stashes on a rank, by kind: ``[(view, count), …]``, ``view``
    the model's ``ModelSpec.of_kind`` of the kind (whose mean layer is one layer of it) and
    ``count`` its layers (numbers or arrays). ``content`` ``{"dense", "moe", "mtp": counts}``
    is what the rank holds (``layout.stage_content``; both copies where mirrored); a
    multi-token-prediction module stashes its ``ModelSpec.mtp_layer_counts``; the counts
    are scaled to sum to ``layers`` (the layers a micro-batch stashes: the mean of a mirrored
    rank's two copies). A model of one kind without MTP modules, or no ``content``:
    ``[(model, layers)]``, its mean layer. The one rule by which the array model, the scalar
    model and the simulator's activation track price a mixed rank's stash."""
    if content is None or not mixed_layers(model):
        return [(model, layers)]
    kinds = model.cost_kinds()
    n = {k: np.asarray(content.get(k, 0.0), dtype=float) for k in kinds + ("mtp",)}
    total = stashed_count(model, n)
    scale = np.divide(np.asarray(layers, dtype=float), total,
                      out=np.zeros(np.broadcast(total, np.asarray(layers)).shape),
                      where=total > 0)
    per = model.mtp_layer_counts()
    out = []
    for k in kinds:
        nk = n[k] + n["mtp"] * per.get(k, 0)
        if np.any(nk):
            out.append((model.of_kind(k), (nk * scale)[()]))
    return out or [(model, layers)]


def job_stash_kinds(job: Job, stage: int) -> list:
    """``stash_kinds`` of pipeline rank ``stage`` of the job's layout: what it holds
    (``layout.stage_content``, both copies where the schedule is mirrored) and the layers a
    micro-batch stashes there (``stashed_layers``)."""
    p, m = job.plan, job.model
    if not mixed_layers(m):
        return [(m, stashed_layers(job, stage))]
    mirrored = bool(get_schedule(p.schedule).mirrored) and p.pp > 1
    have: dict[str, float] = {}
    for r in ((stage, p.pp - 1 - stage) if mirrored else (stage,)):
        for k, n in stage_content(m, job.layout, r):
            have[k] = have.get(k, 0) + n
    return [(v, float(n)) for v, n in stash_kinds(m, have, stashed_layers(job, stage))]


def _kind_mean(job: Job, stage: int, per_layer) -> float:
    """The mean over the layers a micro-batch stashes on ``stage`` of ``per_layer(view)``
    (``job_stash_kinds``: each kind's layers at its view's bytes)."""
    kinds = job_stash_kinds(job, stage)
    total = sum(n for _, n in kinds)
    if len(kinds) == 1:
        return per_layer(kinds[0][0])
    return sum(n * per_layer(v) for v, n in kinds) / total if total else 0.0


def stash_peak(job: Job, stage: int) -> tuple[int, int]:
    """``(stashed, pending)`` at pipeline rank ``stage``'s activation peak (``stash_at_peak``):
    of the pairs the order passes through (``Schedule.stash_frontier`` of the schedule as the
    job runs it: after each forward and after each backward's release), the one with the most
    bytes at ``activation_bytes_per_chunk`` per stashed ``(micro-batch, chunk)`` and
    ``wgrad_bytes_per_chunk`` per pending weight gradient (``schedules.stash.peak_pair``), or,
    where the rank's chunks keep different bytes (``chunk_stash``), the counts of the order's
    moment with the most bytes, each entry at its own chunk's. The one rule the scalar and
    array memory models and the simulator's activation track share: where a pending ``W``
    keeps more than a stashed entry (full or op recomputation, MoE layers' output gradients)
    the peak is where more ``W`` wait, not where most forwards are stashed."""
    n, w, _ = stash_at_peak(job, stage)
    return n, w


def _chunk_layers(job: Job, stage: int, chunk: int) -> dict[str, int]:
    """``layout.order_chunk_kinds`` of the ``chunk`` (the order's ``Step.chunk``) of rank
    ``stage``: a mirrored schedule's chunk 1 is its copy of stage ``pp-1-stage`` (DualPipe)."""
    mirrored = bool(get_schedule(job.plan.schedule).mirrored)
    return order_chunk_kinds(job.model, job.layout, stage, chunk, mirrored)


def _layers_bytes(job: Job, content: Mapping[str, int]) -> tuple[float, float]:
    """``(stashed, pending W)`` bytes of one ``(micro-batch, chunk)`` holding ``content``
    (``{"dense", "moe", "mtp": counts}``): each kind's layers at its bytes (``stash_kinds``),
    under full recomputation the chunk's checkpointed inputs and kept layers
    (``strategies.cost.recompute``, with this chunk's layer count), as
    ``chunk_layer_activation_bytes`` and ``wgrad_bytes_per_chunk`` price the mean chunk."""
    p = job.plan
    lpc = stashed_count(job.model, content)      # an MTP module: its block's layers
    views = stash_kinds(job.model, content, lpc)
    act = sum(n * job_layer_activation_bytes(job, model=v) for v, n in views)
    if p.recompute == "full" and lpc:
        n_rc, uni = p.recompute_layers or 0, p.recompute_method == "uniform"
        none = sum(n * job_layer_activation_bytes(job, "none", v) for v, n in views)
        act = float(checkpoint_inputs(lpc, n_rc, uni) * act / lpc
                    + kept_layers(lpc, n_rc, uni) * none / lpc)
    wgrad = 0.0
    if get_schedule(p.schedule).splits_backward:
        wgrad = sum(n * layer_wgrad_bytes(v, job.seq_len, p.mbs, p.tp, p.sp, p.cp,
                                          job_activation_cache(job)) for v, n in views)
    return float(act), float(wgrad)


def chunk_stash(job: Job, stage: int) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """Per chunk id of rank ``stage``'s order (``Step.chunk``; DualPipe's two copies), the
    bytes its transformer layers keep per stashed entry and per pending weight gradient
    (``_layers_bytes`` of the chunk's own layers by kind, ``layout.chunk_kinds``); ``None``
    where every chunk keeps the same (one chunk, or chunks of equal content: the mean chunk
    of ``chunk_layer_activation_bytes`` is then exact and is what the model reads)."""
    p = job.plan
    check_stage(job, stage)
    chunks = get_schedule(p.schedule).order_chunks(p.pp, p.vpp)
    if chunks == 1:
        return None
    # each distinct content (its items in order) priced once: chunks mostly hold the same
    bytes_of: dict[tuple, tuple[float, float]] = {}
    per = []
    for c in range(chunks):
        content = _chunk_layers(job, stage, c)
        key = tuple(content.items())
        if key not in bytes_of:
            bytes_of[key] = _layers_bytes(job, content)
        per.append(bytes_of[key])
    if all(x == per[0] for x in per):
        return None
    return tuple(a for a, _ in per), tuple(w for _, w in per)


def stash_entry_bytes(job: Job, stage: int) -> tuple[Any, Any]:
    """``(per stashed entry, per pending W)`` bytes of rank ``stage``, what the simulator's
    activation track adds and frees: ``activation_bytes_per_chunk`` and
    ``wgrad_bytes_per_chunk`` (floats), or where the chunks keep different bytes
    (``chunk_stash``) a tuple per chunk id, each entry's layers plus the embedding's and
    stashed logits' share (``stash_at_peak``'s rule)."""
    per = chunk_stash(job, stage)
    if per is None:
        return activation_bytes_per_chunk(job, stage), wgrad_bytes_per_chunk(job, stage)
    extra = entry_extra_bytes(job, stage)
    return tuple(a + extra for a in per[0]), per[1]


def stash_at_peak(job: Job, stage: int) -> tuple[int, int, float]:
    """``(stashed, pending, layers' bytes)`` at rank ``stage``'s activation peak: the order's
    pair with the most bytes (``schedules.stash.peak_pair`` of ``Schedule.stash_frontier`` at
    the mean chunk's ``activation_bytes_per_chunk`` and ``wgrad_bytes_per_chunk``), or where
    the chunks keep different bytes (``chunk_stash``: a rank of a V or an interleaved rank
    whose chunks hold dense and MoE layers or an MTP module, an uneven layout, DualPipe's two
    copies) the order's per-chunk moment with the most bytes
    (``schedules.stash.peak_chunk_moment``, each stashed entry and pending ``W`` at its own
    chunk's bytes plus, per entry, the embedding's and stashed logits' share). The layers'
    bytes are the transformer layers' stash and pending ``W`` there (without the embedding,
    logits and transient)."""
    return stash_at_peak_of(job, stage, chunk_stash(job, stage))


def stash_at_peak_of(job: Job, stage: int, per) -> tuple[int, int, float]:
    """``stash_at_peak`` given the rank's ``chunk_stash`` ``per`` (computed once by the
    callers that also branch on it)."""
    # (one pipeline flush's micro-batches: a step of ``flushes`` runs the order once per
    # flush, ``strategies.flushes``)
    p, m = job.plan, job.num_microbatches // job.plan.flushes
    sched = get_schedule(p.schedule).for_job(job)
    # an order that depends on the job's times only (``for_job`` binds them) or a micro-batch
    # group is derived afresh; any other is read from the orders' memo (``order_figure``)
    memo = sched is get_schedule(p.schedule) and p.microbatch_group_size is None
    if per is None:
        front = (order_figure(sched, "stash_frontier")(stage, p.pp, m, p.vpp) if memo else
                 sched.stash_frontier(stage, p.pp, m, p.vpp, p.microbatch_group_size))
        a, wb = chunk_layer_activation_bytes(job, stage), wgrad_bytes_per_chunk(job, stage)
        n, w = front[0] if len(front) == 1 else peak_pair(
            front, activation_bytes_per_chunk(job, stage), wb)
        return n, w, n * a + w * wb
    acts, wgrads = per
    extra = entry_extra_bytes(job, stage)
    moments = (order_figure(sched, "chunk_stash_moments")(stage, p.pp, m, p.vpp) if memo else
               sched.chunk_stash_moments(stage, p.pp, m, p.vpp, p.microbatch_group_size))
    ns, ws = peak_chunk_moment(moments, [a + extra for a in acts], wgrads)
    layers = sum(k * a for k, a in zip(ns, acts)) + sum(k * x for k, x in zip(ws, wgrads))
    return sum(ns), sum(ws), float(layers)


def in_flight_microbatches(job: Job, stage: int) -> int:
    """Stashed ``(microbatch, chunk)`` entries on pipeline rank ``stage`` at its activation
    peak (``stash_peak``): the schedule's ``Schedule.in_flight`` unless a split backward's
    pending weight gradients outweigh a stashed entry.

    GPipe ``m``; 1F1B ``min(p - stage, m)``; interleaved ``min(w(stage) + 1, m·v)`` with
    ``w`` Megatron's ``num_warmup_microbatches`` (each entry holds ``l/(p·v)`` layers). For
    stage 0 and ``g = p`` that is ``l·(1 + (p-1)/(p·v))`` layers: Megatron's factor.
    """
    return stash_peak(job, stage)[0]


def pending_weight_grads(job: Job, stage: int) -> int:
    """Weight gradients still to run on ``stage`` at its activation peak (``stash_peak``;
    0 unless the schedule splits the backward)."""
    return stash_peak(job, stage)[1]


def stashed_layers(job: Job, stage: int = 0) -> float:
    """Layers whose activations a micro-batch stashes on ``stage``, all its chunks: its
    transformer layers and multi-token-prediction modules (about one layer's activations
    per layer of a module's block and depth, ``ModelSpec.mtp_stash_layers``; ``Job.layout``);
    DualPipe (``Schedule.mirrored``): the mean of its two copies' (stages ``stage`` and
    ``pp-1-stage``), whose micro-batches it stashes alike."""
    p, lay = job.plan, job.layout
    k = job.model.mtp_stash_layers
    if get_schedule(p.schedule).mirrored and p.pp > 1:
        copies = (stage, p.pp - 1 - stage)
        return sum(lay.layers_of_stage(s) + k * lay.mtp_of_stage(s) for s in copies) / 2
    return lay.layers_of_stage(stage) + k * lay.mtp_of_stage(stage)


def layers_per_chunk(job: Job, stage: int = 0) -> float:
    """Layers in the mean model chunk of ``stage`` (``stashed_layers`` over ``vpp``; a
    layout's chunks may differ by a layer)."""
    n, v = stashed_layers(job, stage), job.plan.vpp
    return n // v if n % v == 0 else n / v


def activation_bytes_per_chunk(job: Job, stage: int) -> float:
    """Bytes one stashed ``(microbatch, chunk)`` holds on ``stage`` from its forward until its
    backward: ``l/(p·v)`` layers, plus on the first stage the embedding activations spread
    over its ``v`` chunks (Megatron's accounting), plus on the last stage the output-layer
    activations when the schedule stashes them (``Schedule.logits_stashed``, GPipe: every
    micro-batch's logits wait for the backwards).

    The stage's activation peak is ``in_flight_microbatches × this + transient``.
    """
    check_stage(job, stage)
    return chunk_layer_activation_bytes(job, stage) + entry_extra_bytes(job, stage)


def entry_extra_bytes(job: Job, stage: int) -> float:
    """What every stashed entry of ``stage`` keeps beside its chunk's layers: the
    embedding's share, the stashed logits and the stage output the schedule's engine keeps
    (``stage_ends.stage_output_activation_bytes``) (``activation_bytes_per_chunk`` less the
    layers)."""
    nbytes = stage_output_activation_bytes(job, stage)
    if holds_embedding(job, stage):
        # DualPipe (``Schedule.mirrored``): both end ranks embed, each half the micro-batches
        mirrored = get_schedule(job.plan.schedule).mirrored
        nbytes += embedding_activation_bytes(job) / job.plan.vpp / (2 if mirrored else 1)
    if holds_head(job, stage) and get_schedule(job.plan.schedule).logits_stashed:
        nbytes += output_activation_bytes(job)
    return nbytes


def _partial(job: Job, stage: int) -> tuple[int, int, bool]:
    """``(layers per chunk, recompute_layers or 0, uniform)`` of ``stage``."""
    p = job.plan
    return (layers_per_chunk(job, stage), p.recompute_layers or 0,
            p.recompute_method == "uniform")


def chunk_layer_activation_bytes(job: Job, stage: int) -> float:
    """Bytes the transformer layers of one ``(microbatch, chunk)`` keep on ``stage``: every
    layer's ``job_layer_activation_bytes`` (by kind on a rank of a mixed model:
    ``job_stash_kinds``), or under full recomputation the checkpointed inputs plus, with
    ``recompute_layers`` (block), all the activations of the layers not recomputed
    (``strategies.cost.recompute``; the chunk's mean layer of each kind held)."""
    lpc = layers_per_chunk(job, stage)
    if job.plan.recompute != "full":
        return lpc * _kind_mean(job, stage, lambda v: job_layer_activation_bytes(job, model=v))
    lpc, n, uni = _partial(job, stage)
    return float(checkpoint_inputs(lpc, n, uni)
                 * _kind_mean(job, stage, lambda v: job_layer_activation_bytes(job, model=v))
                 + kept_layers(lpc, n, uni) * _kind_mean(
                     job, stage, lambda v: job_layer_activation_bytes(job, "none", v)))


def transient_activation_bytes(job: Job, stage: int) -> float:
    """Bytes held for one micro-batch at a time, on top of the stash: the last stage's loss
    in progress (``output_bytes`` at the stack's ``loss.peak_bytes``; 1F1B/interleaved: its
    last forward is followed at once by that micro-batch's backward; less the fp32 logits
    the entries of a schedule that stashes them count; with ``SystemConfig.
    head_wgrad_deferral`` the deferred output-layer weight gradients' buffers,
    ``deferral_buffer_bytes``), and with full recompute one layer's
    full working set (the layer being recomputed during its backward), with op recompute
    what that layer did not save."""
    check_stage(job, stage)
    nbytes = 0.0
    if holds_head(job, stage):
        # the loss in progress (the stack's cross-entropy, FrameworkProfile.loss.peak_bytes),
        # less the fp32 logits a schedule that stashes them counts in its entries
        p = job.plan
        nbytes += float(output_bytes(job.model, job.seq_len, p.mbs, p.tp, p.sp, p.cp,
                                     job_stack_memory(job).loss_bytes.peak_bytes_at(p.tp)))
        if get_schedule(p.schedule).logits_stashed:
            nbytes -= output_activation_bytes(job)
        # the output layer's deferred weight gradients' buffers, held to the drain
        nbytes += float(deferral_buffer_bytes(
            job.model, job.seq_len, p.mbs, p.tp, p.sp, p.cp, p.pp,
            job.num_microbatches // p.flushes, job_stack_memory(job).system.head_wgrad_deferral))
    views = [v for v, _ in job_stash_kinds(job, stage)]   # the largest kind held rebuilds
    if job.plan.recompute == "full":     # the layers being rebuilt (one, or a uniform group)
        lpc, n, uni = _partial(job, stage)
        nbytes += float(rebuilt_layers(lpc, n, uni)) * _kind_mean(
            job, stage, lambda v: job_layer_activation_bytes(job, "none", v))
    elif job.plan.recompute == "selective":   # the largest selected part, rebuilt at once
        p = job.plan
        mask = modules_mask(p.recompute_modules) if p.recompute_modules is not None else 0
        nbytes += max(float(selective_dropped_bytes(v, job.seq_len, p.mbs, p.tp, p.sp,
                                                    p.cp, 1, mask, job_activation_cache(job))[1])
                      for v in views)
    elif job.plan.recompute == "op":          # what op did not save, rebuilt for one layer
        nbytes += max(max(job_layer_activation_bytes(job, "none", v)
                          - job_layer_activation_bytes(job, model=v), 0.0) for v in views)
    return nbytes


def wgrad_bytes_per_chunk(job: Job, stage: int) -> float:
    """Bytes one pending weight gradient ``W`` of a ``(microbatch, chunk)`` keeps on
    ``stage`` (``layer_wgrad_bytes`` of the chunk's layers); 0 unless the schedule splits the
    backward."""
    p = job.plan
    check_stage(job, stage)
    if not get_schedule(p.schedule).splits_backward:
        return 0.0
    return layers_per_chunk(job, stage) * _kind_mean(
        job, stage, lambda v: layer_wgrad_bytes(v, job.seq_len, p.mbs, p.tp, p.sp, p.cp,
                                                job_activation_cache(job)))


def stage_activation_bytes(job: Job, stage: int) -> float:
    """Peak activation bytes on ``stage``: stash, pending weight gradients (a split
    backward, ``wgrad_bytes_per_chunk`` each; ``stash_peak``) and transient."""
    per = chunk_stash(job, stage)
    n, w, layers = stash_at_peak_of(job, stage, per)
    if per is not None:                          # each entry at its own chunk's bytes
        return (layers + n * entry_extra_bytes(job, stage)
                + transient_activation_bytes(job, stage))
    return (n * activation_bytes_per_chunk(job, stage) + w * wgrad_bytes_per_chunk(job, stage)
            + transient_activation_bytes(job, stage))


def check_stage(job: Job, stage: int) -> None:
    if not 0 <= stage < job.plan.pp:
        raise SpecError("stage", stage, f"must be in 0..{job.plan.pp - 1} (pp={job.plan.pp})")
