"""A lower bound on the simulated step time of many plans at once (seconds).

The search (``strategies.search``) simulates plans in increasing order of this bound and
stops once the next bound exceeds the k-th best simulated time; that is exact only because
``simulator.simulate`` can never beat the bound. Why it cannot:

1. **Each stream is sequential.** A rank runs the ops of each stream (compute, tp-comm,
   dp-comm, pp-comm, …) one after another. Compute ops last exactly what
   ``strategies.cost.stage`` says (the bound reads the same ``StageCostArrays`` record the
   compiler's ``StageCosts`` is an entry of): per model chunk and micro-batch ``layers·fwd`` (+ the embedding on virtual
   stage 0, + the LM head on the last one), ``layers·(bwd + recompute)`` (+ their backward),
   and the optimizer step last.
2. **Communication floors.** A flow never moves faster than its slowest link, and max-min
   sharing only slows it further. Every GPU link's achievable rate is at most
   ``link_rate_cap`` (NVLink or NIC line rate times ``strategies.cost.comm``'s efficiency,
   as ``simulator.network.cluster_net`` scales them) and every route between two nodes crosses a GPU–NIC
   link, so cross-node flows get at most ``nic_rate_cap``. Every GPU-to-GPU route costs at
   least ``min(intra_node_latency, inter_node_latency)``. ``group_floor`` turns this into the
   least time of a ring collective given where its members sit (placement
   ``tp-cp-dp-pp``: tp ranks consecutive, cp strided by tp, dp by tp·cp, stages by N/pp).
   A GPU profile's measured collectives (``comm.measured_scale``: within a node, the
   model's seconds times a measured ratio, which the simulator's op repeats) scale those
   floors by the ratio where it is below 1 (the all-to-all's by the least measured).
3. **What blocks the compute stream.** Without ``tp_comm_overlap`` the TP collectives of a
   block start after its compute and the next compute op waits for them; so does the expert
   all-to-all and the tail of the ring-attention traffic (whose main part runs beside the
   attention core and must finish first); not the all-to-all of a schedule that overlaps
   pairs (``Schedule.overlaps_pairs``: DualPipe's ``F&B``; Megatron's combined 1F1B with
   ``ep_overlap``), which may hide under the
   partner's compute. The all-to-all, the expert-TP collectives and the
   blocking TP collectives run one after the other (``a2a_floor`` bounds the first per
   link), after the ring-attention tail (the attention's output waits for the ring,
   ``cp_ring``): a block lasts at least its compute plus their sum. A pipeline exchange is blocking: the
   next compute waits for its last op, and sends precede receives on the pp stream, so a
   send placed right after the step that produced it adds its transfer to the chain (every
   send with GPipe and 1F1B; with interleaving the backward ones, as a forward's output
   waits for the exchange after the following backward).
4. **Data parallelism.** Gradient buckets are reduced on the dp stream, at the earliest
   during the backward of the last micro-batch of the last chunk to be run backward
   (``overlap_grad_reduce``), and the optimizer waits for the last of them; with ZeRO >= 1 the
   parameter all-gathers after the optimizer count for their excess over the next step's
   first forward (``simulator.metrics.rank_ends``). With ZeRO-2 every micro-batch
   reduce-scatters the gradients; with ZeRO-3 every micro-batch gathers the parameters twice
   and reduce-scatters the gradients, all on the dp stream.
5. **The pipeline chain.** Every schedule starts each stage with the forward of micro-batch
   0, chunk 0 and ends with the backward of micro-batch ``m-1``, chunk 0 (checked in
   ``tests/test_search.py`` for every schedule). So stage ``s`` starts no earlier than the
   forwards of micro-batch 0 on stages ``0..s-1`` (and their messages), and after its last
   backward that micro-batch still passes back through stages ``s-1..0`` before stage 0
   runs its optimizer. DualPipe (``Schedule.mirrored``) starts each rank with a micro-batch
   entering at its nearer end, so there ``s`` is the distance to that end, and all-reduces
   its two parameter copies' gradients with the mirror rank (at least ``group_floor`` over
   two ranks at the fastest links) after its last compute and before its optimizer. A
   schedule that splits the backward (``Schedule.splits_backward``)
   ends each stage with the weight gradients ``W`` still pending after its last ``B``
   (``Schedule.trailing_w_steps``, checked against the order in tests/test_zb_h1.py): they
   run while that micro-batch goes back, so they leave ``T(s)`` on this path, and the
   stages in between pass its ``B`` on without its ``W``; stage 0 still runs both before
   its optimizer. On a V (ZB-V: ``Schedule.head_rank_array`` is 0) rank 0 holds the LM head
   too, and neither rank 0 nor rank ``pp - 1`` sends at the ends of the V.

With ``T(s)`` the stage's compute chain (compute, blocking collectives, exchanges),
``chain_in(s)``/``tail(s)`` the forward/backward path of the micro-batch through the stages
before it, ``R(s)`` its gradient-reduction floor, ``post(s)`` at most the work left after
the first bucket can launch and ``A(s)`` its parameter all-gather tail, the step lasts at
least, for every stage, ``chain_in(s) + max(T(s), T(s) - post(s) + R(s)) + opt(s) + A(s)``
and ``chain_in(s) + T(s) + tail(s) + opt(0) + A(0)``. Middle stages are identical and their
bounds grow with ``s``, so the first, the last and the second-to-last stage suffice (a
layout string or ``layers_per_stage``, ``PlanArrays.layout_*``: those three ranks' own layers,
any stage's fewest for what passes before them, docs/calibration.md §5.36; and the heaviest
middle rank's own path at the least middle position, §5.39). On a mixed cluster every figure
the bound adds up is the least over the GPU types present (``fastest_of_each``). For
balanced stages and free communication this is the closed form ``(m + p - 1)·(t_f + t_b)``
of 1F1B (``m·t + (p-1)·t/v`` interleaved). The result is scaled by ``1 - SAFETY`` against
floating-point reassociation.

Where each term lives (``strategies.estimate.bound``): the communication floors in
``floors`` (``group_floor``, ``a2a_floor``, ``p2p_send_floor``), a layer's blocking
communication in ``blocking``, dense and MoE layers in ``layer_mix``, the GPU types of a
mixed cluster in ``gpu_types`` (``fastest_of_each``), a chunk's seconds in ``chunks``, each
rank's layers in ``stage_layers``, the chains ``T(s)`` in ``chains``, ``R(s)``, ``A(s)`` and
the ZeRO-2/3 busy time in ``data_parallel``, ``chain_in``/``tail`` and the stage bounds in
``pipeline_paths``.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from strategies.cost.norm_barrier import barrier_on, stats_group
from strategies.cost.stage import StageCostArrays, stage_cost_arrays
from strategies.cost.system import SystemConfig, get_system
from strategies.estimate.bound.chains import chain_shape, stage_chains
from strategies.estimate.bound.chunks import ChunkSeconds, ChunkTimes
from strategies.estimate.bound.data_parallel import dp_terms, mirror_allreduce
from strategies.estimate.bound.floors import p2p_send_floor
from strategies.estimate.bound.gpu_types import TypeRecords, fastest_of_each, gpu_types
from strategies.estimate.bound.layer_mix import LayerMix
from strategies.estimate.bound.pipeline_paths import (PassThrough, StageBounds,
                                                      trailing_wgrads)
from strategies.estimate.bound.stage_layers import layout_string_ends, stage_layers
from strategies.estimate.exchanges import by_exchange, exchange_rows
from strategies.framework import get_profile
from strategies.layout import even_stage_content_arrays
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays, as_plan_arrays
from strategies.schedules import attr_by_code, dispatch
from strategies.stacks.comm_rules import grad_path
from strategies.stacks.profile import FrameworkProfile
from topologies.cluster import Cluster

SAFETY = 1e-9


def step_time_lower_bound(m: ModelSpec, cl: Cluster, dtype: str,
                          P: PlanArrays | Mapping[str, Any],
                          framework: FrameworkProfile | str | None = None,
                          system: SystemConfig | None = None,
                          costs: StageCostArrays | None = None) -> np.ndarray:
    """Seconds per step that no simulation of these plans can beat (see the module docstring).
    ``P``: ``PlanArrays`` (or the search space's short columns); ``framework``: the jobs'
    software profile (default Megatron-Core); ``system``: the policy constants (default
    ``DEFAULT_SYSTEM``); ``costs``: their ``StageCostArrays`` when already computed (e.g.
    ``estimate_arrays(...)["stage_costs"]``, used on a uniform cluster only), else computed
    here from the same arguments."""
    P = as_plan_arrays(P)
    if exchange_rows(P) is not None:    # plans naming different K/V exchanges: each apart
        return by_exchange(P, lambda Q, c: step_time_lower_bound(m, cl, dtype, Q, framework,
                                                                 system, c), costs)
    if np.any(P.flushes != 1):
        return _flushed_bound(m, cl, dtype, P, framework, system, costs)
    sy = get_system(system)
    profile = get_profile(framework)
    real, cl = cl, cl.fastest_view()   # mixed cluster: links and upstream stages at the fastest
    # a layout string (``PlanArrays.layout_*``, no search column): its ranks' own layers
    # (``stage_layers``); the stage-cost record of the ends from first/last-stage columns
    # giving rank 0's and rank pp-1's layers (exact for a model of one kind, the parameters
    # of a middle rank are not known there: its data-parallel and optimizer terms are left
    # out)
    lay_str = ~np.isnan(P.layout_first)
    one_kind = LayerMix.of(m, P.ep) is None
    if lay_str.any() and one_kind:
        P = layout_string_ends(P, lay_str)
        costs = None
    sc = costs if costs is not None and real.uniform else \
        stage_cost_arrays(m, cl, dtype, P, framework, sy, gpu=cl.gpu)
    # the stage-cost record on each GPU type present, each computed once; every figure the
    # bound adds up is the least over those types (``fastest_of_each``), every window it
    # subtracts the largest
    records = TypeRecords(m, cl, dtype, P, framework, sy, gpu_types(real), {repr(cl.gpu): sc})
    mix = LayerMix.of(m, P.ep)          # dense and MoE layers: each chunk by kind, see there
    content = _stage_content(m, P) if mix else None
    lay = stage_layers(m, P, lay_str, one_kind)
    pp, sched = P.pp, P.schedule
    n = P.tp * pp * P.dp * P.cp
    nmb = np.floor(P.gbs / (P.mbs * P.dp))

    # compute and blocking communication per chunk and micro-batch (points 1-3); in an
    # overlapped pair (DualPipe's F&B) the expert all-to-all may hide entirely under the
    # partner's compute, so it counts for nothing there
    send = p2p_send_floor(cl, sc, n, pp)
    paired = attr_by_code(sched, "overlaps_pairs").astype(bool) | P.ep_overlap
    chunks = ChunkTimes(cl, records, mix, P.tp, P.cp, np.where(paired, 1, P.ep), P.etp,
                        P.tp_comm_overlap, P.sp, lay.lpc)
    least = chunks.least()
    # the optimizer and the stack's per-step passes by stage (the stage-cost record,
    # ``strategies.cost.step``, which the simulator runs on the compute stream just before it)
    opt = {k: fastest_of_each([getattr(records(g), f"optimizer_{k}")
                               + getattr(records(g), f"passes_{k}") for g in records.types])
           for k in ("first", "last", "mid")}
    # the stage's compute chain T(s), per kind of stage
    sh = chain_shape(P, profile, nmb, send)
    T, opt = stage_chains(chunks, sh, least, lay.own, content, sh.mirrored | lay_str, opt,
                          real, n, pp)
    b_max, fwd_layer = _hiding_windows(chunks, real, lay.lpc_most, least)
    # the ZeRO stage and overlap the gradients run with (``comm_rules.grad_path``: FSDP2 under
    # pipelining reduces once per step, after the stage's last backward)
    zero_g, ogr_g = grad_path(profile.fsdp2, pp, P.zero, P.overlap_grad_reduce)
    post_steps = np.where(ogr_g, dispatch(sched, "reduce_window_steps", pp, P.vpp), 0.0)
    # Megatron-Core reduces a rank past the first as one bucket (``BucketRule.whole_share``,
    # §5.92), which leaves such a rank no reduction window after its compute; the bound keeps
    # the window all the same (its floor stays below the estimate of the mixed-kind and
    # uneven plans, whose estimate reads the even plan's slack per rank: a tighter floor beat
    # a candidate's estimate by 0.02 %, tests/test_memory_mixed_layouts.py)
    # a split backward (point 5): the weight gradients a stage runs after its last B overlap
    # that micro-batch's way back, and the stages in between pass on its B alone
    split = attr_by_code(sched, "splits_backward").astype(float)
    stages = StageBounds(
        T=T, opt=opt,
        terms=dp_terms(cl, sc, P, profile, dtype, zero_g, nmb, lay.lps, fwd_layer, sh.mirrored),
        mirror={k: mirror_allreduce(cl, sc, P, k, sh.mirrored) for k in T}, known=lay.known,
        window=post_steps * (b_max + 2 * send), paths=PassThrough.of(chunks, least, send, split),
        w_chunk=trailing_wgrads(records, real, sc, mix, lay.lpc_most, sh.head_first),
        split=split, pp=pp, nmb=nmb, sched=sched, mirrored=sh.mirrored,
        barrier=barrier_on(profile.step) & (len(records.types) == 1)
        & (stats_group(P.tp, pp, P.cp, P.dp, P.zero)[0] > 1))
    bound = stages.of("first", np.zeros_like(pp))
    bound = np.maximum(bound, np.where(pp >= 2, stages.of("last", pp - 1), 0.0))
    bound = np.maximum(bound, np.where(pp >= 3, stages.of("mid", pp - 2), 0.0))
    if lay.heavy.any():
        bound = np.maximum(bound, np.where(lay.heavy, stages.of("heavy", 0 * pp + 1, True), 0.0))
    return bound * (1.0 - SAFETY)


def _stage_content(m: ModelSpec, P: PlanArrays) -> dict[str, dict]:
    """Each kind of stage's (first, mid = rank pp-2, last) layers by kind under the even
    split (``layout.even_stage_content_arrays``: first/last-stage counts, slots; a model of
    dense and MoE layers; strict=False: a layout string's row need not split evenly, its
    content by kind is not read, ``chains.stage_chains``)."""
    lay = (P.first_stage_layers, P.last_stage_layers, P.account_slots)
    return {k: even_stage_content_arrays(m, P.schedule, P.pp, P.vpp, r, *lay, strict=False)
            for k, r in (("first", 0 * P.pp), ("mid", np.maximum(P.pp - 2, 0)),
                         ("last", P.pp - 1))}


def _hiding_windows(chunks: ChunkTimes, real: Cluster, lpc_most: np.ndarray,
                    least: ChunkSeconds) -> tuple[np.ndarray, np.ndarray]:
    """The windows that hide communication, at their longest (seconds): the largest
    backward chunk (the dearest ``lpc_most`` layers, with the embedding's and LM head's) and
    the dearest layer's forward; on a mixed cluster on the slowest GPU type."""
    most = chunks.on(chunks.cl.gpu, lpc_most, True)
    b_max = most.seconds.b_blk + least.emb_b + least.head_b   # the largest backward chunk
    fwd_layer = most.layer.fwd
    if not real.uniform:
        slowest = [chunks.on(g.gpu, lpc_most, True) for g in real.groups]
        b_max = np.max([t.seconds.b_blk + t.seconds.emb_b + t.seconds.head_b
                         for t in slowest], axis=0)
        fwd_layer = np.max([t.layer.fwd for t in slowest], axis=0)
    return b_max, fwd_layer


def _flushed_bound(m: ModelSpec, cl: Cluster, dtype: str, P: PlanArrays,
                   framework: FrameworkProfile | str | None, system: SystemConfig | None,
                   costs: StageCostArrays | None) -> np.ndarray:
    """The bound of plans of ``k`` pipeline flushes (``strategies.flushes``): the simulator
    runs one flush of ``gbs/k`` and composes ``T(k) = k·T_1 − (k−1)·t_opt``, ``t_opt`` the
    critical rank's optimizer. With ``B_1 ≤ T_1`` one flush's bound and ``O`` the longest
    optimizer and per-step passes of any rank on any GPU type present (the stage-cost
    record's, which the simulator runs; ``t_opt ≤ O``), ``T(k) ≥ k·B_1 − (k−1)·O``, and
    ``T(k) ≥ T_1 ≥ B_1`` (``T_1 ≥ t_opt``): the larger of the two. Seconds."""
    k = P.flushes
    one = replace(P, gbs=P.gbs / k, flushes=np.ones_like(k))
    b1 = step_time_lower_bound(m, cl, dtype, one, framework, system, costs)
    recs = [costs if costs is not None and cl.uniform else
            stage_cost_arrays(m, cl.fastest_view(), dtype, one, framework,
                              get_system(system), gpu=g) for g in gpu_types(cl)]
    most = np.maximum.reduce([getattr(r, f"optimizer_{x}") + getattr(r, f"passes_{x}")
                              for r in recs for x in ("first", "mid", "last")])
    return np.where(k == 1, b1, np.maximum(b1, k * b1 - (k - 1) * most))
