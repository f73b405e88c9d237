"""The analytic step-time model, written over numpy arrays of plan fields (``PlanArrays``) so
that one code path scores one plan (``strategies.estimate``) or a hundred thousand
(``strategies.search.space``). Every per-layer and per-stage duration, byte and parameter
count is read from the stage-cost record (``strategies.cost.stage.stage_cost_arrays``), the
record the lower bound and the compiler read too; this module adds the composition.

Model (per optimizer step, seconds):

* stage time per micro-batch ``t_s`` = layers on the stage × (forward + backward + recompute +
  exposed TP/CP/EP communication) + the embedding on the first stage and the LM head on the last;
  the compute comes from ``strategies.cost.layer_time`` (sustained GEMM efficiency, shape
  penalty, memory-bound kernels, gradient accumulation and kernel launches of the job's
  ``strategies.framework`` profile, the clock penalty of overlapped communication; every
  constant and its source: docs/calibration.md);
* pipeline: the schedule's ``Schedule.pipeline_span`` (``strategies.schedules``), by default
  ``m·max_s t_s + (Σ_s t_s − max_s t_s)/v`` with ``v`` its ``fill_chunks`` — exact for
  balanced stages and free communication ((m + p − 1)·t for 1F1B and GPipe, m·t + (p − 1)·t/v
  interleaved) and the steady-state-bound form when the last stage carries the LM head; a
  schedule that splits the backward also gets the weight gradient's share of the slowest
  stage (``w_share``, at most the forward's and the input gradient's), ZB-H1's
  ``m·t_max + (t_sum − t_max)(1 − 2·w_share)``; DualPipeV's ``span_excess``
  (``strategies.schedules.dual``);
* point-to-point: the schedule's ``exposed_messages``: by default two blocking exchanges per
  round, ``2·(m + p − 1)`` (``exchange_rounds``); interleaved, one per step of rank 0's order,
  ``m·v + w − 1`` (docs/calibration.md §5.14); 1F1B, the messages of the path through the kind
  of rank that bounds the steady state, ``m + 2p − 3`` the last, ``2m + 2p − 5`` a middle one
  (``bottleneck_messages``, the largest of the free span through that rank plus them;
  docs/calibration.md §5.21); ZB-H1, 1F1B's balanced count ``2m + 2p − 5`` (§5.22);
* data parallel: gradient reduce (all-reduce, or reduce-scatter + all-gather with the
  distributed optimizer / ZeRO), overlapped with the last micro-batch's backward only when
  ``overlap_grad_reduce`` (as Megatron-LM does), the last bucket always exposed; interleaved,
  chunk by chunk under the cool-down's backwards, chunk 0's always exposed
  (``grad_window_exposed``, docs/calibration.md §5.14);
* ZeRO-2/3's per-micro-batch gathers and reduce-scatters: ``sharded_exposed``, the stream's
  work less the compute and bubble it runs under, at least what nothing hides (under ZB-H1
  and interleaved also the tail of the stage that ends last, ``split_tail_exposed`` and rank
  0's cool-down; on a V the per-chunk queue on the span's own replay,
  ``VShape.reduce_queue_tails``; one chunk a rank, the last micro-batch's under its own
  backward, docs/calibration.md §5.127); ZeRO-2 without overlap stalls every stage after
  each backward, on each schedule's path, ``z2_sync_exposed``;
* the tied word embedding's gradient all-reduce between the first and the last stage;
* the optimizer step (memory-bound Adam) and the stack's per-step passes over the gradient
  buffer and the optimizer shard (``strategies.cost.step``).

MFU counts the model FLOPs of docs/formulas.md §2b (the attention square in full, the published
convention); HFU the same plus the recomputed forward (``flop_counts.hardware_flops_per_step``), as
docs/cli.md defines it, so HFU >= MFU, equal without recomputation. Both are conventions: with
FlashAttention skipping causal blocks the hardware executes fewer FLOPs
(``flop_counts.executed_flops_per_step``, at most peak · step time by construction), so at very long
sequences either may exceed 1.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from strategies.cost import comm as cm
from strategies.cost import flop_counts
from strategies.cost import recompute as rcp
from strategies.cost.cp_ring import layer_waits as cp_layer_waits
from strategies.cost.stage import (attn_down_time, attn_full_rc_time, attn_rc_gathers,
                                   attn_rope_time, attn_tp_saved, dgrad_reduce_hidden,
                                   dgrad_reduce_time, down_reduce_hidden,
                                   sp_grad_allreduce_bytes,
                                   sp_regather_exposed, stage_cost_arrays)
from strategies.cost.system import SystemConfig
from strategies.framework import get_profile
from strategies.stacks.comm_rules import full_grad_reduce, grad_path
from strategies.stacks.profile import FrameworkProfile
from strategies.flushes import flushed_arrays
from strategies.model import ModelSpec
from strategies.placement import dense_dp_group
from strategies.plan_arrays import PlanArrays, as_plan_arrays, rank_layers
from strategies.schedules import attr_by_code, dispatch, schedules
from strategies.schedules.combined import (lone_passes_exposed, pair_exposed,
                                           pair_message_hiding)
from strategies.schedules.replay import reduce_queue_tails_by_code
from topologies.cluster import Cluster
from topologies.gpus import GPU



def tail_reads_span(framework: FrameworkProfile | str | None, pp: Any, zero: Any,
                    ogr: Any) -> bool:
    """Whether ``estimate_arrays``' data-parallel tail reads the pipeline's span (``pipe``,
    which ``pipe_span`` replaces): ZeRO-2's reduce-scatters (on the gradient path,
    ``framework.grad_path``: their window under the pipeline, their stall without overlap,
    ZB-H1's trailing ones) and ZeRO-3's gathers do; ZeRO-0/1's reduction runs under each
    rank's own last backward, and its tail reads only the stages' seconds. Scalars or
    arrays in; True where any plan's does."""
    zero_g, _ = grad_path(get_profile(framework).fsdp2, pp, zero, ogr)
    return bool(np.any((np.asarray(zero_g) == 2) | (np.asarray(zero) == 3)))


def sharded_exposed(work: Any, window: Any, edge: Any) -> Any:
    """Exposed seconds of ZeRO-2/3's per-micro-batch data-parallel traffic (the one rule the
    estimate's scalar and array forms read): ``work`` seconds of collectives queued on the
    data-parallel stream behind ``window`` seconds of compute and pipeline bubble that they
    can run under; at least ``edge``, what no compute can hide (the last gradient bucket after
    the last backward; ZeRO-3's first gather before the first layer). Two resources, each busy
    for its total: ``max(work − window, edge)`` (a comm-bound step is the stream's total, a
    compute-bound one the compute plus the edge; FSDP prefetches the next unit's all-gather
    during the current unit's compute and reduce-scatters each unit during the backward,
    PyTorch FSDP docs ``forward_prefetch``/``backward_prefetch``; Megatron's distributed
    optimizer overlaps each bucket's reduce-scatter with the compute after it)."""
    return np.maximum(np.asarray(work) - window, edge)


def lanes_exposed(work: Any, replicas: Any, window: Any, edge: Any, own_lane: Any,
                  lead: Any = 0.0) -> Any:
    """``sharded_exposed`` where ``replicas`` of the ``work`` seconds are hybrid sharding's
    all-reduces across replicas: with ``own_lane`` (``FrameworkProfile.replica_stream``,
    PyTorch FSDP's HSDP) they run on a stream of their own, so each of the two streams must
    fit under the ``window``, the replicas' under what of it follows their first all-reduce
    (``lead`` seconds in): ``max(work − replicas − window, replicas − (window − lead),
    edge)``; else they queue on the data-parallel stream with the rest (Megatron-Core)."""
    sep = np.maximum(sharded_exposed(np.asarray(work) - replicas, window, edge),
                     np.asarray(replicas) - (window - lead))
    return np.where(own_lane, sep, sharded_exposed(work, window, edge))


#: the paths of ZeRO-2's stall without overlap that a schedule adds to the slowest stage's
#: (``z2_sync_exposed``'s ``path``): none (ZB-V, DualPipe), the gradient's way
#: back (one chunk per rank: 1F1B, GPipe), the drain and rank 0's cool-down (interleaved),
#: the slowest stage's trailing weight gradients (a split backward, one chunk per rank: ZB-H1)
Z2_BUSY, Z2_BACK, Z2_COOLDOWN, Z2_SPLIT = 0, 1, 2, 3


def slowest_rank(t_first: Any, t_mid: Any, t_last: Any, pp: Any) -> Any:
    """Seconds per micro-batch of the slowest kind of rank: the first, the last and, with
    ``pp > 2``, a middle one (an uneven layout's middle ranks may hold the most layers,
    ``plan_arrays.rank_layers``); the one rule every closed form here reads. Arrays over
    plans; seconds."""
    return np.maximum(np.maximum(t_first, t_last), np.where(pp > 2, t_mid, 0.0))


def z2_sync_exposed(pipe_span: Any, pipe: Any, t_first: Any, t_mid: Any, t_last: Any,
                    rs: tuple, t_b0: Any, mb: Any, pp: Any, path: Any, v: Any = 1,
                    r_f: Any = 0.0, rs_c0: Any = 0.0, trailing: tuple = (1, 1, 1)) -> Any:
    """Exposed seconds of ZeRO-2's reduce-scatters without overlap: each micro-batch's runs
    after its backward (of each chunk) on the compute stream of every rank, before the input
    gradient is sent back; the last micro-batch's after the schedule (the compiler's
    ``_close_grads``). ``pipe_span(t_max, t_sum)``: the schedule's span of stages of those
    seconds per micro-batch, ``pipe`` the span without the stall; ``t_first``/``t_mid``/
    ``t_last``: the stages' seconds without the reduce-scatter, ``rs`` = (first, middle,
    last) rank's own reduce-scatter per micro-batch (all its chunks); ``t_b0``: rank 0's
    backward; ``path``: ``Z2_BUSY``, ``Z2_BACK``, ``Z2_COOLDOWN`` or ``Z2_SPLIT`` (which
    paths below are the longest); ``v`` the chunks per rank, ``r_f`` rank 0's forward share of its seconds,
    ``rs_c0`` rank 0's chunk 0's reduce-scatter (the embedding's gradients and ``1/v`` of
    its layers'), ``trailing`` the (first, middle, last) rank's weight-gradient steps after
    its last ``B`` (``Schedule.trailing_w_steps``). Arrays over plans; seconds.

    * the slowest stage ``k`` busy throughout: every micro-batch's reduce-scatter there but
      the last one's, and rank 0's last after the schedule: ``(m − 1)·rs_k + rs_0`` (no
      pipeline: ``m·rs``). ``Z2_BUSY`` (ZB-V, DualPipe): only this one;
    * ``Z2_BACK``, the gradient's way back: micro-batch 0 down the stages, its backward and
      each stage's reduce-scatter back up, then rank 0 paced by the slowest stage (every
      stage's seconds grown by its reduce-scatter) to micro-batch ``m − 2``, then rank 0's
      last two backwards and reduce-scatters (the last micro-batch's way up has no stall):
      the span of the grown stages less ``t'_max − t_b0 − rs_0``; balanced 1F1B
      ``(m + p − 1)·(t + rs) − t_f`` against ``(m + p − 1)·t + m·rs`` for the first;
    * ``Z2_COOLDOWN`` (interleaved: every stage ends with the backwards of chunk 0 of the
      last ``p`` micro-batches back to back, no forward between them), the drain: each stage
      below ``k`` takes the last micro-batch's chunk-0 backward only after its own
      reduce-scatter of the one before, so the drain runs at the grown stages' pace:
      the span of the grown stages less ``rs_k`` (the slowest stage's last has no stall)
      plus ``rs_0`` after the schedule; balanced ``m·t' + (p − 1)·t'/v``;
    * ``Z2_COOLDOWN``, rank 0's cool-down: its last ``p`` chunk-0 backwards back to back,
      each but the last followed by its own reduce-scatter ``rs_c0`` (the embedding's
      gradients make it dearer than the stages' above), from when the slowest stage ends:
      ``fill + m·t'_k − rs_k + (p − 1)·(t_b0/v + rs_c0) + rs_0``, ``fill`` the forwards of
      micro-batch 0 before ``k`` (``r_f`` of the other stages' ``(t_sum − t_max)/v``); none
      where rank 0 alone is the slowest (its cool-down is in its own busy time);
    * ``Z2_SPLIT`` (the stall follows ``W``, which lags its ``B``: the slowest stage's last
      ``n_k`` weight gradients and their reduce-scatters come after its last ``B``, off the
      drain), in place of the first: the slowest stage's own end, ``fill + m·t'_k`` (its
      last reduce-scatter after the schedule; the other stages' drain runs under its
      trailing ``W``), and the drain's, the pipeline delayed by the ``m − n_k``
      reduce-scatters before ``k``'s last ``B`` and rank 0's ``n_0`` after its own:
      ``(m − n_k)·rs_k + n_0·rs_0`` (balanced ZB-H1: rank 0, ``n_0 = 1``, ``m·rs``; a last
      stage dearer by the LM head: its own end, ``fill + m·t'_k − pipe``).
    """
    rs_first, rs_mid, rs_last = rs
    t_max0 = slowest_rank(t_first, t_mid, t_last, pp)
    t_sum0 = t_first + t_last + (pp - 2) * t_mid
    first, mid, last = t_first + rs_first, t_mid + rs_mid, t_last + rs_last
    t_max = slowest_rank(first, mid, last, pp)
    rs_max = np.where(t_max == first, rs_first, np.where(t_max == last, rs_last, rs_mid))
    t_sum = first + last + (pp - 2) * mid
    busy = np.where(pp > 1, (mb - 1) * rs_max + rs_first, mb * rs_first)
    n_first, n_mid, n_last = trailing
    n_max = np.where(t_max == first, n_first, np.where(t_max == last, n_last, n_mid))
    own = r_f * (t_sum0 - t_max0) + mb * t_max - pipe
    split = np.maximum(own, (mb - n_max) * rs_max + n_first * rs_first)
    span = pipe_span(t_max, t_sum)
    back = span - t_max + t_b0 + rs_first - pipe
    drain = span - rs_max + rs_first - pipe
    # (none where rank 0 alone is the slowest: its cool-down is in its own busy time)
    cool = np.where(first > np.maximum(last, np.where(pp > 2, mid, 0.0)), busy,
                    r_f * (t_sum0 - t_max0) / v + mb * t_max - rs_max
                    + (pp - 1) * (t_b0 / v + rs_c0) + rs_first - pipe)
    return np.where(pp > 1, np.where(path == Z2_BACK, np.maximum(busy, back),
                                     np.where(path == Z2_COOLDOWN,
                                              np.maximum(busy, np.maximum(drain, cool)),
                                              np.where(path == Z2_SPLIT, split, busy))),
                    busy)


def grad_window_exposed(t_grad: Any, t_c0: Any, t_bc: Any, steps: Any) -> Any:
    """Seconds of an overlapped gradient reduction exposed after an interleaved rank's last
    backward. Megatron-Core's interleaved schedule launches a chunk's whole reduction once the
    backward of its last micro-batch has ended (``grad_sync_func`` per model chunk, the
    backward itself run under ``no_sync``: ``forward_backward_pipelining_with_interleaving``,
    core_r0.8.0 ``megatron/core/pipeline_parallel/schedules.py``), so chunk ``c``'s
    reduction is ready ``c·pp`` chunk backwards before rank 0's end and chunk 0's (the
    embedding's gradients among them) at the end. With the chunks' reductions ``r_c`` queued
    on one stream: ``max_c (Σ_{i≤c} r_i − c·pp·t_bc)``, which for equal ``r_c`` above chunk 0
    is ``max(t_c0, t_grad − (steps − 1)·t_bc)``. ``t_grad``: the rank's whole reduction;
    ``t_c0``: chunk 0's; ``t_bc``: one chunk's backward of one micro-batch; ``steps``:
    ``Schedule.reduce_window_steps``, ``1 + (v − 1)·pp`` chunk backwards from the first
    chunk's last backward to the rank's end (its own backward included, which the reduction
    does not run under)."""
    return np.maximum(t_c0, t_grad - (steps - 1) * t_bc)


def split_tail_exposed(pipe: Any, t_first: Any, t_mid: Any, t_last: Any, pp: Any, mb: Any,
                       r_f: Any, rs: tuple, w: tuple, trailing: tuple, edge: tuple) -> Any:
    """Exposed seconds of ZeRO-2's overlapped reduce-scatters at the slowest stage's end under
    a split backward, one chunk per rank (ZB-H1): that stage ``k`` ends with its ``n_k``
    trailing weight gradients back to back (``Schedule.trailing_w_steps``), each micro-batch's
    buckets reduce-scattered as its ``W`` completes them, so their ``n_k·rs_k`` queue on the
    data-parallel stream with only those ``W`` (``n_k·w_k``) to run under, at least the last
    bucket (``sharded_exposed``), after the stage's own end ``fill + m·t_k`` (``fill`` the
    forwards of micro-batch 0 before it, ``r_f`` of the other stages' seconds); less the
    pipeline ``pipe``. ``rs``/``w``/``trailing``/``edge``: (first, middle, last) rank's
    reduce-scatter per micro-batch, ``W`` seconds, trailing ``W`` count and last bucket's
    seconds. Arrays over plans; seconds."""
    t_max = slowest_rank(t_first, t_mid, t_last, pp)
    t_sum = t_first + t_last + (pp - 2) * t_mid

    def at_k(x: tuple) -> Any:
        return np.where(t_max == t_first, x[0], np.where(t_max == t_last, x[2], x[1]))

    n = at_k(trailing)
    tail = sharded_exposed(n * at_k(rs), n * at_k(w), at_k(edge))
    return np.where(pp > 1, r_f * (t_sum - t_max) + mb * t_max - pipe + tail, 0.0)


def rank_below(t: tuple, pp: Any) -> tuple:
    """Seconds per micro-batch of the stages below each kind of rank (first; middle, at its
    nearest to rank 0, rank 1, whose tail hides least; last), ``t`` their stage seconds
    (first, middle, last): 0, the first stage's, the sum less the last. Arrays over plans."""
    t_first, t_mid, t_last = t
    t_sum = t_first + t_last + np.maximum(pp - 2, 0) * t_mid
    return (0.0 * t_sum, np.where(pp > 2, t_first, 0.0), np.where(pp > 1, t_sum - t_last, 0.0))


def rank_slack(t: tuple, pp: Any, v: Any, r_f: Any, w: Any, together: Any,
               skew: Any = None) -> tuple:
    """Seconds by which each kind of rank (first, middle, last) ends its compute before the
    pipeline's end ``Schedule.pipeline_span`` (rank 0's: the last to receive the last
    micro-batch's gradient): that backward through the stages below it, one chunk of each,
    ``rank_below``·(1 − r_f − 2·w)/v, at least 0 (``r_f`` the forward's share of a stage's
    seconds, ``w`` the weight gradient's share where the schedule splits the backward, which
    the stages below run as their own trailing ``W`` while the rank's drain passes): the
    span's own closed forms, balanced 1F1B ``(p − 1)·t_b``, ZB-H1 ``(p − 1)·(t_b − t_w)``, a
    slowest stage ``k`` ending at ``r_f·(t_sum − t_k) + m·t_k``; 0 where every rank ends
    together (``together``: a V, whose rank 0 holds the last chunk too; DualPipe). Where
    ``skew`` (seconds, ``Schedule.end_skew`` of a filling rank's) is not NaN the ranks end
    ``skew`` apart in order, a parallelogram (ZB-H2): the end that finishes first
    ``(p − 1)·|skew|`` early, the middle rank next to the other end ``|skew|``, that end 0.
    Arrays over plans; seconds."""
    below = rank_below(t, pp)
    share = np.maximum(1.0 - r_f - 2.0 * w, 0.0)
    trapezoid = tuple(np.where(together | (pp == 1), 0.0, share * b / v) for b in below)
    if skew is None:
        return trapezoid
    d = np.asarray(skew, dtype=float)
    para = (np.maximum(d, 0.0) * (pp - 1), np.abs(d), np.maximum(-d, 0.0) * (pp - 1))
    return tuple(np.where(np.isnan(d) | (pp == 1), tr, pa) for tr, pa in zip(trapezoid, para))


def rank_of_max(t: tuple, pp: Any) -> Any:
    """0, 1 or 2: which kind of rank (first, middle, last) has the most seconds ``t`` (first
    on a tie; the middle only with ``pp > 2``), as ``z2_sync_exposed`` picks the slowest
    stage. Arrays over plans."""
    t_first, t_mid, t_last = t
    t_max = slowest_rank(t_first, t_mid, t_last, pp)
    return np.where(t_max == t_first, 0, np.where(t_max == t_last, 2, 1))


def path_p2p_times(sched: Any, pp: Any, v: Any, stride: Any, nbytes: Any,
                   cl: Cluster) -> np.ndarray:
    """One pipeline message's seconds per plan: ``comm.path_p2p_time`` over the hops of the
    plan's schedule (``Schedule.path_hops``), once per distinct ``(schedule, pp, vpp,
    stride)`` whose pipeline spans nodes with stages closer than a node or not whole nodes
    apart; elsewhere every hop is alike and ``p2p_time(stride)`` is that price."""
    code, pp, v, stride, nb = np.broadcast_arrays(*(np.asarray(x) for x in (
        sched, pp, v, stride, nbytes)))
    G = cl.gpus_per_node
    # every hop alike (the pipeline in one node, or stages whole nodes apart): one hop's price
    out = np.array(cm.p2p_time(nb, cl, stride), dtype=float, copy=True).reshape(code.shape)
    mixed = ((pp > 1) & (stride * pp > G) & (stride % G != 0)).ravel()
    if not mixed.any():
        return out[()] if out.ndim else out
    keys = np.stack([a.ravel()[mixed].astype(np.int64) for a in (code, pp, v, stride)], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    flat, nbf = out.reshape(-1), nb.reshape(-1)
    where = np.flatnonzero(mixed)
    table = schedules()
    for i, (c, p, vv, st) in enumerate(uniq):
        sel = where[inv.reshape(-1) == i]
        hops = table[c].path_hops(int(p), max(int(vv), 1))
        flat[sel] = cm.path_p2p_time(nbf[sel], cl, int(st), hops)
    return out[()] if out.ndim else out


def degraded_view(cl: Cluster) -> Cluster:
    """The cluster as the analytic model sees its degraded links (``cluster.faults``): every
    group of a class is as slow as the worst link of that class, so NVLink bandwidth is
    divided by the largest factor on an intra-node link and NIC bandwidth by the largest on
    a GPU–NIC or NIC–fabric link (a synchronous step waits for its slowest group). Links of
    the fabric core (leaf–spine) are seen by the simulation only."""
    intra, inter = cl.faults.bandwidth_factors(cl.planes)
    if intra == 1.0 and inter == 1.0:
        return cl
    return replace(cl, intra_node_bandwidth=cl.intra_node_bandwidth / intra,
                   inter_node_bandwidth=cl.inter_node_bandwidth / inter)


def ranked_messages(sched: Any, mb: Any, pp: Any, v: Any, times: tuple[Any, Any, Any],
                    t_sum: Any, t_p2p: Any, w_share: Any = 0.0, f_share: Any = 0.5) -> Any:
    """Seconds the point-to-point messages add to the pipeline's span under a schedule whose
    count depends on the kind of rank that bounds the steady state
    (``Schedule.messages_by_rank``, 1F1B): the largest, over the first, a middle (``pp >= 3``)
    and the last rank (``times``: their seconds per micro-batch), of the free span through
    that rank (``pipeline_span`` with its time as the slowest) plus its path's messages
    (``bottleneck_messages``) times ``t_p2p``, less the free span through the slowest; at
    least the fewest messages (docs/calibration.md §5.21). Arrays over plans."""
    t_max = slowest_rank(*times, pp)
    pipe = dispatch(sched, "pipeline_span", mb, t_max, t_sum, v, w_share, f_share, pp)
    paths = [np.where((k != 1) | (pp > 2), dispatch(
        sched, "pipeline_span", mb, t_k, t_sum, v, w_share, f_share, pp)
        + t_p2p * dispatch(sched, "bottleneck_messages", mb, pp, v, k), -np.inf)
        for k, t_k in enumerate(times)]
    fewest = t_p2p * np.min([dispatch(sched, "bottleneck_messages", mb, pp, v, k)
                             for k in (0, 2)], axis=0)
    return np.maximum(np.max(paths, axis=0) - pipe, fewest)


def straggler_stages(stragglers, per_stage, pp, times, compute, t_max, t_sum):
    """``(t_max, t_sum)`` of the pipeline formula with straggling stages: the stage of GPU
    ``g`` is ``g // per_stage`` (pp is the outermost coordinate); its compute (``compute``:
    first, middle, last, only-stage seconds per micro-batch, of which ``times`` are the
    stage times) runs ``f`` times slower, ``f`` the largest factor among its GPUs (every
    rank of a stage waits for the others: tensor-parallel collectives within a pipeline,
    the gradient reduction across them). Arrays over plans."""
    single = pp == 1
    stages = [np.floor(g / per_stage) for g, _ in stragglers]
    factors = [f for _, f in stragglers]
    extra = 0.0
    for k, s in enumerate(stages):
        f = np.max([np.where(stages[j] == s, factors[j], 1.0) for j in range(len(stages))],
                   axis=0)
        first = np.ones_like(s, dtype=bool)
        for j in range(k):
            first &= stages[j] != s
        pick = lambda xs: np.where(single, xs[3], np.where(  # noqa: E731
            s == 0, xs[0], np.where(s == pp - 1, xs[2], xs[1])))
        t_s = pick(times)
        slow = t_s + (f - 1.0) * pick(compute)
        extra = extra + np.where(first, slow - t_s, 0.0)
        t_max = np.maximum(t_max, slow)
    return t_max, t_sum + extra


#: the stage-cost record's fields per kind of rank (first, middle = rank 1, last) that the
#: layers a rank holds decide: its parameters (so its data-parallel traffic), its routed
#: experts', its optimizer and per-step passes (``cost.stage.stage_cost_arrays`` from the
#: plan columns' layout, ``cost.stage.stage_costs`` from a job's)
RANK_FIELDS = tuple(f"{x}_{k}" for x in ("params", "expert_params", "optimizer", "passes")
                    for k in ("first", "mid", "last"))


def _attn_saved(sc, sp, t):
    """``cost.stage.attn_tp_saved`` of the forward and of the blocking backward (where no
    asynchronous reduction runs, ``rd_bytes`` 0) per plan; ``t(kind, bytes)`` the tp group's
    contention-free collective seconds."""
    fwd, bwd = (np.where(sp, attn_tp_saved(t, sc, True, f), attn_tp_saved(t, sc, False, f))
                for f in (True, False))
    return fwd + np.where(sc.rd_bytes > 0, 0.0, bwd)


def estimate_arrays(m: ModelSpec, cl: Cluster, dtype: str, P: PlanArrays | Mapping[str, Any],
                    framework: FrameworkProfile | str | None = None,
                    system: SystemConfig | None = None,
                    ranks: Mapping[str, Any] | None = None,
                    gpu: GPU | None = None, pipe_span: Any = None) -> dict[str, Any]:
    """Score plans given as arrays: ``P`` is ``PlanArrays`` (or the search space's short
    columns ``tp pp dp cp ep mbs gbs vpp sched rc sp zero flash ogr opg tpo``).
    ``framework``: the software profile (``strategies.framework``; default Megatron-Core);
    ``system``: the policy constants (``strategies.cost.system``); ``ranks``: fields of the
    stage-cost record per kind of rank (``RANK_FIELDS``) that replace the plan columns' (the
    scalar estimate's job layout, ``scalar.rank_fields``); ``gpu``: the GPU type whose kernels
    time the compute (default: the cluster's slowest by peak, ``Cluster.gpu``); ``pipe_span``:
    the pipeline's seconds in place of the schedule's closed form (the scalar estimate's
    uneven layouts: the real chunks' order, ``scalar._real_tail``), which the data-parallel
    windows under the pipeline then read. Returns arrays of seconds
    and ratios, and under ``"stage_costs"`` the ``StageCostArrays`` record they were read
    from (the one the compiler reads)."""
    P = as_plan_arrays(P)
    if np.any(P.flushes != 1):  # k pipeline flushes per step: one flush's arrays, composed
        from strategies.estimate.scalar import BREAKDOWN_KEYS
        one = estimate_arrays(m, cl, dtype, replace(P, gbs=P.gbs / P.flushes,
                                                    flushes=np.ones_like(P.flushes)),
                              framework, system, ranks, gpu, pipe_span)
        return flushed_arrays(one, P.flushes, BREAKDOWN_KEYS)
    cl = degraded_view(cl)
    sc = stage_cost_arrays(m, cl, dtype, P, framework, system, gpu)
    if ranks:
        sc = replace(sc, **{k: v + 0 * getattr(sc, k) for k, v in ranks.items()})
    tp, pp, dp, cp, ep = P.tp, P.pp, P.dp, P.cp, P.ep
    dps = P.dp_shard            # the ranks a ZeRO shard spans (hybrid sharding; else dp)
    b, gbs, v = P.mbs, P.gbs, P.vpp
    sched, rc, zero = P.schedule, P.recompute, P.zero
    sp, flash, ogr, opg, tpo = (P.sp, P.flash_attn, P.overlap_grad_reduce,
                                P.overlap_param_gather, P.tp_comm_overlap)
    # the ZeRO stage and overlap the gradients run with (``comm_rules.grad_path``: FSDP2 under
    # pipelining reduces once per step, after the stage's last backward, ZeRO-1's path
    # without overlap; docs/calibration.md §5.34)
    zero_g, ogr_g = grad_path(get_profile(framework).fsdp2, P.pp, zero, ogr)
    gpu, G = (cl.gpu if gpu is None else gpu), cl.gpus_per_node
    L = m.num_layers
    mb = gbs / (b * dp)                                     # micro-batches per pipeline
    lps = L / pp                                            # layers per pipeline rank
    # the layers each rank holds (an uneven layout: rank_layers; else lps on each)
    n_first, n_mid, n_last, _, _ = rank_layers(L, P)

    # tensor parallel: 2 collectives fwd, 2 bwd, the recomputation's (``recompute.tp_rerun``)
    t_ar = cm.collective_time("allreduce", sc.tp_bytes, tp, 1, cl)
    n_tp = sc.tp_per_layer_fwd + sc.tp_per_layer_bwd + sc.tp_per_layer_recompute
    tp_raw = n_tp * t_ar
    # MLA's attention runs its column-side collective at its latents' widths: the forward's
    # all-gather under SP, the backward's reduction where it is blocking (the asynchronous
    # one is ``dgrad_reduce_hidden``'s); 0 for any other attention (``cost.stage.attn_tp_saved``,
    # §5.81)
    def t_tp(kind: str, nbytes):
        """Contention-free seconds of collective ``kind`` of ``nbytes`` over the tp group."""
        return cm.collective_time(kind, nbytes, tp, 1, cl)
    tp_raw = tp_raw - np.where(tp > 1, _attn_saved(sc, sp, t_tp), 0.0)
    # with overlap, the stack's unfused share of the backward's collectives stays exposed
    # (``FrameworkProfile.tp_overlap_bwd_exposed``: async TP's summed-dgrad reduce-scatters)
    tp_out = sc.tp_overlap_bwd_exposed * sc.tp_per_layer_bwd * t_ar
    tp_hidden = np.maximum(tp_raw - tp_out
                           - (3 + np.where(rc == 2, sc.tp_per_layer_recompute / 2, 0.0))
                           * sc.gemm_fwd,
                           (tp_raw - tp_out) / sc.tp_overlap_chunks) + tp_out
    tp_layer = np.where(tpo, tp_hidden, tp_raw)
    # MLA's recomputed up projections gather their latents again (``mla_up_proj`` under SP,
    # ``cost.stage.attn_rc_gathers``, §5.81), blocking
    if np.any(sc.tp_attn_rc > 0):
        tp_layer = tp_layer + attn_rc_gathers(t_tp, sc)
    # and its rope key's own gather (forward) and reduce-scatter (backward) under SP
    # (``cost.stage.attn_rope_time``), blocking
    if np.any(sc.tp_rope_w > 0):
        def t_rope(kind: str, nbytes):
            return cm.collective_time(kind, np.where(nbytes > 0, nbytes, 1.0), tp, 1, cl)
        tp_layer = tp_layer + attn_rope_time(t_rope, sc, True) + attn_rope_time(t_rope, sc,
                                                                                False)
    # and, where the stack runs its down projections column-parallel (Megatron-Core
    # 0.12-0.13), their own gathers and reductions (``cost.stage.attn_down_time``, §5.85),
    # blocking, less what their weight gradients hide of the input-gradient reductions
    # (``cost.stage.down_reduce_hidden``, §5.99)
    if np.any(sc.tp_down > 0):
        tp_layer = tp_layer + np.where(
            sp, attn_down_time(t_tp, sc, True, True) + attn_down_time(t_tp, sc, True, False),
            attn_down_time(t_tp, sc, False, True) + attn_down_time(t_tp, sc, False, False)) \
            - down_reduce_hidden(lambda w: dgrad_reduce_time(sc, tp, sp, cl, w), sc)
    # full recomputation reruns the attention forward's own gathers: the rope key's and the
    # column-parallel down projections' (``cost.stage.attn_full_rc_time``, §5.85), blocking
    if np.any(sc.tp_attn_full_rc > 0):
        tp_layer = tp_layer + np.where(sp, attn_full_rc_time(t_tp, sc, True),
                                       attn_full_rc_time(t_tp, sc, False))
    # sequence parallelism's backward re-gathers, each beside the data-gradient GEMM it was
    # issued before, TP overlap or not (``cost.stage.sp_regather_exposed``, §5.70)
    tp_layer = tp_layer + sp_regather_exposed(
        lambda w: np.where(sc.rg_bytes > 0, cm.collective_time("allgather", sc.rg_bytes * w,
                                                               tp, 1, cl), 0.0), sc)
    # the column-parallel data gradients' reductions beside their weight-gradient GEMMs
    # (``cost.stage.dgrad_reduce_hidden``, §5.75): a bf16 reduce-scatter under SP, an
    # all-reduce without
    tp_layer = tp_layer - dgrad_reduce_hidden(lambda w: dgrad_reduce_time(sc, tp, sp, cl, w), sc)
    # context parallel ring attention: each pass waits on its ring inside the attention,
    # where it outlasts the attention core, on top of the layer's other exposed
    # communication (``cost.cp_ring.ring_exposed``, §5.110)
    # (PyTorch's ring: its waits on the all-gather and the dK/dV ring)
    cp_fwd, cp_bwd = cp_layer_waits(cm.collective_time("allgather", sc.cp_bytes, cp, tp, cl),
                                    sc, cp)
    cp_layer = cp_fwd + cp_bwd
    # expert parallel all-to-all: dispatch + combine, forward and backward (ep_bytes holds
    # both of a forward), over groups of ep ranks etp apart (strategies.placement); with
    # expert tensor parallelism an all-gather after the dispatch and a reduce-scatter before
    # the combine over the etp consecutive ranks. In an overlapped pair (DualPipe's F&B,
    # ``Schedule.overlaps_pairs``) a forward layer's expert communication runs beside the
    # partner's next backward layer and the backward's beside the next forward layer,
    # exposed only where it outlasts that compute (the share of the slowest rank's forwards
    # that are paired, from the order)
    etp = P.etp
    t_a2a = cm.collective_time("alltoall", sc.ep_bytes, ep, etp, cl, sc.ep_remote_scale,
                               sc.ep_nvlink_share) \
        + np.where(sc.etp_bytes > 0,
                   cm.collective_time("allgather", sc.etp_bytes, etp, 1, cl)
                   + cm.collective_time("reduce_scatter", sc.etp_bytes, etp, 1, cl), 0.0)
    # Megatron-Core's combined 1F1B (``P.ep_overlap``, strategies.schedules.combined) pairs a
    # forward with a whole backward; DualPipe's pairs take the input-gradient part B
    split = attr_by_code(sched, "splits_backward").astype(bool)
    partner = sc.layer_bwd - np.where(split, sc.layer_wgrad, 0.0) + sc.layer_recompute
    paired = pair_exposed(t_a2a, sc.layer_fwd, partner)
    # (DualPipe: the share of the slowest rank's forwards that are paired; Megatron's
    # combined 1F1B: every pass paired, and the fill's lone forwards and the drain's lone
    # backwards on the critical path once, ``combined.lone_passes_exposed``, §5.91)
    q = np.where(P.ep_overlap, 1.0,
                 dispatch(sched, "overlapped_share_array", 0 * pp, pp, mb, v))
    lone = np.where(P.ep_overlap, lone_passes_exposed(L, t_a2a, paired), 0.0)
    # a recomputed MoE layer runs its all-to-all again before its backward (exposed)
    ep_layer = (1 - q) * 2 * t_a2a + q * paired + sc.ep_per_layer_recompute * t_a2a

    comp_layer = sc.layer_fwd + sc.layer_bwd
    per_layer = comp_layer + sc.layer_recompute + tp_layer + cp_layer + ep_layer
    head_f, head_b = sc.head_fwd, sc.head_bwd
    emb = sc.embedding_fwd + sc.embedding_bwd
    t_mid = n_mid * per_layer
    t_first0, t_last0 = n_first * per_layer, n_last * per_layer
    head_first = (dispatch(sched, "head_rank_array", pp, v) == 0) & (pp > 1)   # a V
    t_first = np.where(head_first, t_first0 + emb + head_f + head_b, t_first0 + emb)
    t_last = np.where(head_first, t_last0, t_last0 + head_f + head_b)
    # DualPipe (``Schedule.mirrored``): both end ranks embed half the micro-batches and run the
    # LM head of the other half
    mirrored = attr_by_code(sched, "mirrored").astype(bool) & (pp > 1)
    t_first = np.where(mirrored, t_mid + (emb + head_f + head_b) / 2, t_first)
    t_last = np.where(mirrored, t_first, t_last)
    single = pp == 1
    t_max = np.where(single, t_first + head_f + head_b,
                     slowest_rank(t_first, t_mid, t_last, pp))
    t_min = np.where(single, t_max, np.where(pp > 2, np.minimum(t_mid, np.minimum(
        t_first, t_last)), np.minimum(t_first, t_last)))
    t_sum = np.where(single, t_max, t_first + t_last + (pp - 2) * t_mid)
    if cl.faults.stragglers:
        comp_f, comp_l = (n * (comp_layer + sc.layer_recompute) for n in (n_first, n_last))
        t_max, t_sum = straggler_stages(
            cl.faults.stragglers, tp * cp * dp, pp,
            (t_first, t_mid, t_last, t_max),
            (np.where(head_first, comp_f + emb + head_f + head_b, comp_f + emb),
             n_mid * (comp_layer + sc.layer_recompute),
             np.where(head_first, comp_l, comp_l + head_f + head_b),
             lps * (comp_layer + sc.layer_recompute) + emb + head_f + head_b),
            t_max, t_sum)
    # the weight gradient's share of the time of the stages that fill and drain the pipeline
    # (all but the slowest: (t_sum - t_max)/(pp - 1) each on average; schedules that split
    # the backward fill the bubble with it); the closed forms hold while W is no longer than
    # the forward or the input-gradient part of the backward, so it counts up to those
    t_w = lps * np.minimum(sc.layer_wgrad, np.minimum(sc.layer_fwd,
                                                      sc.layer_bwd - sc.layer_wgrad))
    t_fill = np.where(single, t_max, (t_sum - t_max) / np.maximum(pp - 1, 1))
    fill = np.where(t_fill > 0, t_fill, 1.0)
    w_share = np.where(t_fill > 0, np.minimum(t_w / fill, 0.5), 0.0)
    # the forward's share: its compute, its own blocking TP collectives (the forward's
    # ``tp_per_layer_fwd`` of the layer's ``n_tp``) and its context-parallel ring's waits
    # (``cp_fwd``, §5.110), which run on the chain of forwards too
    fwd_tp = tp_layer * sc.tp_per_layer_fwd / np.maximum(n_tp, 1e-30)
    f_share = np.where(t_fill > 0, np.minimum(lps * (sc.layer_fwd + fwd_tp + cp_fwd) / fill,
                                              1.0), 0.0)
    pipe = dispatch(sched, "pipeline_span", mb, t_max, t_sum, v, w_share, f_share, pp) + lone
    if pipe_span is not None:           # the real pipeline's span, its lone passes included
        pipe = np.full_like(pipe, pipe_span, dtype=float)
    bubble = pipe - lone - mb * t_max

    # pipeline point-to-point (scatter/gather over the tp ranks' NICs, then an NVLink all-gather)
    stride_pp = tp * cp * dp
    t_p2p = path_p2p_times(sched, pp, v, stride_pp, sc.p2p_bytes, cl) + np.where(
        sc.p2p_gather_bytes > 0, cm.collective_time("allgather", sc.p2p_gather_bytes, tp, 1, cl),
        0.0)
    # 1F1B (``Schedule.messages_by_rank``): a middle rank blocks on two exchanges per
    # micro-batch, the end ranks on one, so the span with messages is the largest, over the
    # kind of rank that bounds the steady state, of the free span through it and its path's
    # messages (``bottleneck_messages``), at least the fewest messages
    by_rank = attr_by_code(sched, "messages_by_rank").astype(bool) & (pp > 1)
    ranked = ranked_messages(sched, mb, pp, v, (t_first, t_mid, t_last), t_sum, t_p2p, w_share,
                             f_share) if np.any(by_rank) else 0.0
    pp_exposed = np.where(pp > 1, np.where(by_rank, ranked, t_p2p * dispatch(
        sched, "exposed_messages", mb, pp, v)), 0.0)
    # a stack with ``overlap_p2p_comm`` (Megatron-Core's interleaved schedule): only the
    # fill's and the drain's chain stays exposed, each steady call what outlasts the pass
    # of the other kind (a chunk's forward, the shorter) run before it is waited for
    # (``Interleaved.overlapped_p2p_time``; docs/calibration.md §5.68); none under
    # Megatron-Core's combined 1F1B, whose steady pairs wait for their neighbours' current
    # pairs, each call hidden only by the delayed attention weight gradient
    # (``combined.pair_message_hiding``, §5.82, §5.87)
    ov = attr_by_code(sched, "overlaps_p2p").astype(bool) & (pp > 1) & bool(
        get_profile(framework).overlap_p2p_comm)
    if np.any(ov):
        pp_exposed = np.where(ov, dispatch(sched, "overlapped_p2p_time", mb, pp, v, t_p2p,
                                           pair_message_hiding(lps / v * sc.layer_fwd,
                                                               P.ep_overlap,
                                                               sc.dw_attn * P.delay_wgrad)),
                              pp_exposed)

    # data parallel: each kind of rank (first, middle = rank 1, last) reduces its own
    # parameters' gradients (the stage-cost record's ``params_*``/``expert_params_*``: the
    # layers it holds by kind, its MTP modules, the embedding or the LM head; the compiler's
    # buckets read the same, ``stage_costs(job).params_by_stage``), then runs its own
    # optimizer; the step ends with the rank that ends last. A rank above rank 0 ends its
    # compute ``slack`` earlier, the last micro-batch's backward through the stages below it
    # (``rank_slack``), which hides as much of its own tail
    gb = sc.grad_bytes
    pe_k = (sc.expert_params_first, sc.expert_params_mid, sc.expert_params_last)
    pr_k = (sc.params_first, sc.params_mid, sc.params_last)
    params, pe, etp = pr_k[0], pe_k[0], P.etp
    n_k = (n_first, n_mid, n_last)
    # (the routed experts' share over the expert-data-parallel group, ``dp_collective_time``)

    def dp_time(kind: str, nbytes: Any, k: int) -> Any:
        return cm.dp_collective_time(kind, nbytes, pr_k[k], pe_k[k], tp, cp, dp, ep, etp, cl,
                                     dps)

    K = range(3)
    t_ar_k = [dp_time("allreduce", gb, k) for k in K]
    t_rs_k = [dp_time("reduce_scatter", gb, k) for k in K]
    # the parameter all-gather after the optimizer: each kind of rank's mean width
    # (``stage.rank_params.gather_width``: FP8-stored weights at one byte under ``fp8_param_gather``)
    gw_k = (sc.gather_first, sc.gather_mid, sc.gather_last)
    t_ag_k = [dp_time("allgather", gw_k[k], k) for k in K]
    # a full all-reduce with ZeRO-0 and under DeepSpeed's BF16_Optimizer, which shards only the
    # optimizer (``comm_rules.full_grad_reduce``)
    full = full_grad_reduce(get_profile(framework), dtype, zero)
    # the embedding's gradient is complete only when the backward ends (and its weights are the
    # first the next forward needs), so its bucket is never overlapped: the exposed share is the
    # larger of one bucket and the embedding (``dp_plan``: the embedding closes the last bucket;
    # on both end ranks under DualPipe)
    emb_k = (sc.embedding_params, 0.0, np.where(mirrored, sc.embedding_params, 0.0))
    window_k = [n_k[k] * (sc.layer_bwd + sc.layer_recompute) for k in K]   # its last backward
    window = window_k[0]
    # the first bucket is launched only once it is full (Megatron's greedy buckets in backward
    # order, ``grad_buckets.chunk_buckets``): the LM head where the rank holds it (one chunk a
    # rank, the last rank; rank 0 at pp 1), then whole layers of ``layer_params`` each up to
    # ``bucket_params``; the backward of those layers hides none of the queue
    # (docs/calibration.md §5.86). ``lead_k``: seconds of the last backward before it launches
    # (not under DualPipe, ``mirrored``: a rank's two copies complete their gradients at
    # different times, so its first full bucket is not the last backward's first layers)
    head_k = [np.where((pp == 1) & (k == 0) | (pp > 1) & (k == 2), sc.head_params, 0.0)
              for k in K]
    # Megatron-Core cuts only pipeline rank 0's first chunk into buckets
    # (``BucketRule.chunk_bucketed``, §5.92): every other rank's chunk is one bucket, so its
    # first bucket is its whole last backward, and its last one its chunk (``whole_k``: that
    # share of the rank's parameters, 0 where the size rule applies)
    # (a split backward, which Megatron-Core does not run, keeps the size rule, as DualPipe)
    rule = get_profile(framework).dp_bucket
    own = mirrored | attr_by_code(sched, "splits_backward").astype(bool)
    whole_k = [0.0 * pp if k == 0 else rule.whole_share(pp, v, own, zero_g == 2)
               for k in K]
    lead_k = [np.where(whole_k[k] > 0, window_k[k],
                       np.minimum(n_k[k], np.ceil(np.maximum(sc.bucket_params - head_k[k], 0.0)
                                                  / np.maximum(sc.layer_params, 1.0)))
                       * (sc.layer_bwd + sc.layer_recompute)) for k in K]
    fwd_window = n_first * sc.layer_fwd
    r_f = fwd_window / np.maximum(fwd_window + window, 1e-30)
    slack = rank_slack((t_first, t_mid, t_last), pp, v, r_f, np.where(split, w_share, 0.0),
                       head_first | mirrored,
                       dispatch(sched, "end_skew", f_share, w_share) * t_fill)

    # interleaved (chunks on a ring, the backward unsplit): a chunk's gradients are complete,
    # and reduced, after its last micro-batch's backward (Megatron's ``grad_sync_func`` per
    # chunk, ``Schedule.reduces_chunk_after_backward``), so the reduction of chunk v-1 starts
    # (v-1)·pp backward steps before the rank's end (``Schedule.reduce_window_steps`` less
    # chunk v-1's own step, the lower bound's window), each step a chunk's backward and its
    # one blocking exchange (``Interleaved.exposed_messages``); at least chunk 0's whole
    # reduction (``grad_window_exposed``)
    chunked = attr_by_code(sched, "reduces_chunk_after_backward").astype(bool) & (v > 1) \
        & (pp > 1)
    end_k = (np.minimum(sc.embedding_params, pr_k[0]), 0.0, np.minimum(sc.head_params, pr_k[2]))
    steps = dispatch(sched, "reduce_window_steps", pp, v)

    # the bucket that nothing hides (the last gradient bucket, the first gathered) is a call of
    # its own, as the simulator's buckets are: its ``share`` of rank kind ``k``'s parameters
    # (x ``scale``) at the ring's whole per-call latency, not that share of one call's
    # latency (docs/calibration.md §5.26)
    def one_bucket(kind: str, nbytes: Any, k: int, share: Any, scale: Any = 1.0) -> Any:
        return cm.dp_collective_time(kind, nbytes, pr_k[k] * scale * share,
                                     pe_k[k] * scale * share, tp, cp, dp, ep, etp, cl, dps)

    # hybrid sharding: the replicas' all-reduce inside a reduce-scatter's seconds (``share``
    # of rank kind ``k``'s gradients, ``comm.replica_time``) and the lane it runs on
    own_lane = bool(get_profile(framework).replica_stream)

    def rep_bucket(k: int, share: Any, nbytes: Any = gb) -> Any:
        if dps is None:
            return 0.0
        return cm.replica_time(nbytes, cm.dp_parts(pr_k[k] * share, pe_k[k] * share, tp, cp,
                                                   dp, ep, etp, dps), tp, cp, dp, dps, cl)

    # ... and on a lane of its own, what of a reduce-scatter's last bucket the dense share's
    # all-reduce hides beside the experts' reduce-scatter (``comm.replica_overlap``)
    def lane_overlap(k: int, share: Any, scale: Any = 1.0) -> Any:
        if dps is None or not own_lane:
            return 0.0
        return cm.replica_overlap(gb, cm.dp_parts(pr_k[k] * scale * share,
                                                  pe_k[k] * scale * share, tp, cp, dp, ep,
                                                  etp, dps), tp, cp, dp, dps, cl)

    def grad_exposed(k: int) -> Any:
        t_grad = np.where(full, t_ar_k[k], t_rs_k[k])
        rep = np.where(full, 0.0, rep_bucket(k, 1.0))
        last = np.where(whole_k[k] > 0, whole_k[k],
                        np.minimum(1.0, np.maximum(sc.bucket_params, emb_k[k]) / pr_k[k]))
        t_edge = np.where(full, one_bucket("allreduce", gb, k, last),
                          one_bucket("reduce_scatter", gb, k, last) - lane_overlap(k, last))
        ag = np.where(opg, np.maximum(t_ag_k[k] - n_k[k] * sc.layer_fwd,
                                      one_bucket("allgather", gw_k[k], k, last)), t_ag_k[k])
        # chunk 0's parameters: 1/v of the rank's layers, with the embedding on rank 0 (the
        # LM head is in the last rank's chunk v-1)
        c0 = (pr_k[k] - end_k[k]) / v + (end_k[0] if k == 0 else 0.0)
        t_c0 = np.where(full, *(cm.dp_collective_time(kind, gb, c0, pe_k[k] / v, tp, cp, dp,
                                                      ep, etp, cl, dps)
                                for kind in ("allreduce", "reduce_scatter")))
        # DualPipe (``mirrored``; docs/calibration.md §5.36): the copy fed from the far end
        # completes its gradients first, and its buckets reduce under what the rank still runs
        # (an end rank: ``pp/2`` backwards of the other copy, B and W, ``reduce_window_steps``);
        # the other copy's, about half the rank's, are produced by its last W (the weight
        # gradients), so at least they less that W are exposed (the middle rank: as before)
        ends_k = mirrored & (k != 1)
        after = pp / 2 * window_k[k]
        mirror_over = np.maximum(np.maximum(t_grad - window_k[k] - after, t_edge),
                                 t_grad / 2 - n_k[k] * sc.layer_wgrad)
        over = np.where(chunked, grad_window_exposed(t_grad, t_c0, window_k[k] / v + t_p2p,
                                                     steps),
                        np.where(ends_k, mirror_over,
                                 lanes_exposed(t_grad + np.where((v == 1) & ~mirrored,
                                                                 lead_k[k], 0.0),
                                               rep, window_k[k], t_edge, own_lane)))
        return (np.where(ogr_g, over, t_grad), np.where(zero >= 1, ag, 0.0))
    grad_ag = [grad_exposed(k) for k in K]
    ag_k = [a for _, a in grad_ag]
    # ZeRO-2: gradients are sharded, so every micro-batch's are reduce-scattered into the shard,
    # each behind that micro-batch's backward; the last bucket of the last one is exposed.
    # DualPipe (``mirrored``): a micro-batch's backward passes one of the rank's two copies
    # (even micro-batches one way, odd the other), so it completes, and reduce-scatters, the
    # gradients of that copy only: half the rank's, on the mean (the simulator's buckets per
    # chunk)
    per_mb = np.where(mirrored, 0.5, 1.0)
    rs_mb_k = [np.where(mirrored, dp_time("reduce_scatter", gb * per_mb, k), t_rs_k[k])
               for k in K]
    t_rs_mb = rs_mb_k[0]
    z2_last = [np.minimum(1.0, np.maximum(sc.bucket_params, emb_k[k])
                          / np.maximum(pr_k[k] * per_mb, 1.0)) for k in K]
    edge_k = [one_bucket("reduce_scatter", gb, k, z2_last[k], per_mb)
              - lane_overlap(k, z2_last[k], per_mb) for k in K]
    # overlapped, the reduce-scatters queue on the data-parallel stream from the rank's first
    # backward to its last: with forwards between the backwards
    # (``Schedule.reduces_under_forwards``: 1F1B, interleaved, zero-bubble) the rank's compute
    # less what runs before that backward: micro-batch 0's forward through every stage and its
    # backward through the later ones, one chunk (1/v) of each there (none where rank 0
    # holds the last chunk, a V: ``head_first``), the stages' sum ``t_sum`` split in rank 0's
    # forward share ``r``: rank 0's r·t_sum + ((1 − r)·t_sum − t_b0)/v, balanced
    # p·t_f + (p − 1)·t_b/v (1F1B: (m + p − 1)·t − (p·t_f + (p − 1)·t_b) = m·t − t_f); else
    # (GPipe, DualPipe) the backwards, ``mb·t_b``; the last bucket of the last micro-batch
    # always after it (``sharded_exposed``)
    below = rank_below((t_first, t_mid, t_last), pp)
    under_fwd = attr_by_code(sched, "reduces_under_forwards").astype(bool)

    # ... and the last micro-batch's own reduce-scatter runs under its last backward alone
    # (one chunk a rank, the backward unsplit: 1F1B, GPipe), from its first bucket on
    # (``lead_k``): that backward's seconds with its exposed communication, the rank's less
    # its forward (compute, TP collectives, ring waits, all-to-all) and the embedding's and
    # the LM head's forwards where it holds them (docs/calibration.md §5.127)
    ep_fwd = (ep_layer - sc.ep_per_layer_recompute * t_a2a) / 2
    f_layer = sc.layer_fwd + fwd_tp + cp_fwd + ep_fwd
    t_own = (np.where(single, t_max, t_first), t_mid, t_last)
    f_ends = (sc.embedding_fwd + np.where(single, head_f, 0.0), 0.0,
              np.where(single, 0.0, head_f))
    one_chunk = (v == 1) & ~split & ~mirrored
    # a V (ZB-V, DualPipeV): each rank's per-chunk reduce-scatters queue behind its gradient
    # steps, which its drain runs back to back (ZB-V's deferred ``W``), on the span's own
    # replay (``VShape.reduce_queue_tails``, §5.127)
    z2_queue = reduce_queue_tails_by_code(
        sched, head_first & ogr & (zero_g == 2), mb, t_max, t_sum, w_share, f_share, pp,
        tuple(dp_time("reduce_scatter", gb / v, k)
              - own_lane * rep_bucket(k, 1.0, gb / v) for k in K), tuple(edge_k))

    def z2_over_k(k: int) -> Any:
        first_bwd = r_f * t_sum + np.where(
            head_first, 0.0, ((1 - r_f) * (t_sum - below[k]) - window_k[k]) / v)
        z2_window = np.where(under_fwd, pipe - slack[k] - first_bwd, mb * window_k[k])
        rep = rep_bucket(k, 1.0, gb * per_mb)
        last = np.where(one_chunk, lanes_exposed(rs_mb_k[k] + lead_k[k], rep, t_own[k]
                                                 - n_k[k] * f_layer - f_ends[k], edge_k[k],
                                                 own_lane), -np.inf)
        return np.maximum(np.maximum(lanes_exposed(mb * rs_mb_k[k], mb * rep, z2_window,
                                                   edge_k[k], own_lane), last), z2_queue[k])
    # without overlap every micro-batch's reduce-scatter stalls its stage's compute after the
    # backward (``z2_sync_exposed``); each stage's own from its parameters
    rs_stage = (t_rs_mb, t_rs_k[1], t_rs_k[2])
    # rank 0's chunk 0 (interleaved): the embedding's gradients and 1/v of its layers'
    emb_p = np.minimum(sc.embedding_params, params)
    rs_c0 = cm.dp_collective_time("reduce_scatter", gb, emb_p + (params - emb_p) / v, pe / v,
                                  tp, cp, dp, ep, etp, cl, dps)
    trailing = tuple(dispatch(sched, "trailing_w_steps", s, pp, mb)
                     for s in (0 * pp, np.maximum(pp - 2, 0), pp - 1))
    z2_path = np.where(split, np.where(v == 1, Z2_SPLIT, Z2_BUSY),
                       np.where(v == 1, Z2_BACK, Z2_COOLDOWN))
    z2_sync = z2_sync_exposed(
        lambda t_mx, t_sm: dispatch(sched, "pipeline_span", mb, t_mx, t_sm, v, w_share, f_share,
                                    pp),
        pipe, t_first, t_mid, t_last, rs_stage, (1 - r_f) * t_first, mb, pp, z2_path, v, r_f,
        rs_c0, trailing)
    # overlapped under a split backward, one chunk per rank (ZB-H1): at least the slowest
    # stage's trailing W's reduce-scatters after its own end (``split_tail_exposed``)
    w_stage = (n_first * sc.layer_wgrad + sc.embedding_wgrad, n_mid * sc.layer_wgrad,
               n_last * sc.layer_wgrad + sc.head_wgrad)
    edges = (edge_k[0],) + tuple(
        one_bucket("reduce_scatter", gb, k, np.minimum(1.0, sc.bucket_params
                                                        / np.maximum(pr_k[k], 1.0)))
        for k in (1, 2))
    tail_split = np.where(split & (v == 1) & ~head_first, split_tail_exposed(
        pipe, t_first, t_mid, t_last, pp, mb, r_f, rs_stage, w_stage, trailing, edges),
        -np.inf)
    # interleaved (chunks on a ring, the backward unsplit): rank 0 ends with the chunk-0
    # backwards of the last p micro-batches back to back; their reduce-scatters (chunk 0's
    # gradients, the embedding's among them: rs_c0 each) queue with only those backwards to
    # run under, at least the last bucket (``sharded_exposed``)
    cool_tail = np.where(~split & (v > 1) & ~head_first & ~mirrored & (pp > 1),
                         sharded_exposed(pp * rs_c0, pp * window / v, edges[0]), -np.inf)
    # ZeRO-3: parameters gathered for forward and backward, gradients scattered, every micro-batch
    # The gathers are prefetched (the next layer's during this one's compute), so the whole
    # step's compute hides the stream's work; exposed at least: each forward's first layer
    # waits for its own gather, which follows the previous backward's last reduce-scatter
    # over the same links (the two share the NIC), and the step's last reduce-scatter
    # follows the last backward: mb·(t_ag + t_rs) of one layer's calls
    # ZeRO-3 one tensor at a time (DeepSpeed 2021): every gather and gradient reduce-scatter of
    # every micro-batch is host-synchronous (``torch.cuda.synchronize`` before each gather),
    # so none hides behind compute (``param_counts.zero3_tensor_gathers``, ``comm.per_tensor_time``)
    # (over the dense parameters' copies, ``placement.dense_dp_group``)
    n_dp, stride_dp = dense_dp_group(tp, cp, dps)
    z3_tensor = mb * (
        cm.per_tensor_time(sc.z3_fwd_n + sc.z3_bwd_n, sc.param_bytes
                           * (sc.z3_fwd_params + sc.z3_bwd_params), n_dp, stride_dp, cl,
                           sc.copy_gap, copy_rate=sc.copy_rate)
        + cm.per_tensor_time(sc.z3_rs_n, gb * sc.z3_rs_params, n_dp, stride_dp, cl,
                             sc.copy_gap, "reduce_scatter", copy_rate=sc.copy_rate))

    # (a call per layer, FSDP's unit: its share of the bandwidth and the ring's whole latency,
    # as the simulator's gathers and reduce-scatters are; docs/calibration.md §5.26)
    def z3_exposed(k: int) -> Any:
        units = np.maximum(n_k[k], 1)
        t_ag_u, t_rs_u = (one_bucket(kind, nb, k, 1.0 / units)
                          for kind, nb in (("allgather", sc.param_bytes), ("reduce_scatter", gb)))
        # (with the replicas' all-reduces on their own lane, ``replica_stream``, only the
        # step's last waits: the next forward's first gather follows the reduce-scatter)
        rep_u = rep_bucket(k, 1.0 / units)
        ovl_u = lane_overlap(k, 1.0 / units)
        # a backward whose layers reduce slower than they compute queues its reduce-scatters
        # (each layer's after its backward, on one stream): (units − 1)·(t − b) more after it
        b_u = sc.layer_bwd + sc.layer_recompute
        rs_dp = np.where(own_lane, t_rs_u - rep_u, t_rs_u)
        queue = (units - 1) * np.maximum(0.0, rs_dp - b_u)
        # ... and on a lane of their own the replicas' all-reduces, each after its layer's
        # reduce-scatter (those one per max(b, RS)), queue behind the step's last backward
        # where they are slower still: (units − 1)·(AR − max(b, RS)) more after it
        rep_queue = own_lane * (units - 1) * np.maximum(0.0, rep_u - np.maximum(b_u, rs_dp))
        # the replicas' first all-reduce waits for the first micro-batch's forward (its
        # layers' compute and half their exposed communication), the LM head's backward and
        # the first layer's backward and reduce-scatter (one stage); from then on their lane
        # can stay busy to the step's end (none without replicas)
        rep_lead = np.where((pp == 1) & (rep_u > 0), units * (sc.layer_fwd + (per_layer - comp_layer
                                                              - sc.layer_recompute) / 2)
                            + sc.embedding_fwd + head_f + head_b + b_u + rs_dp, 0.0)
        return np.where(sc.z3_fwd_n > 0, z3_tensor, lanes_exposed(
            mb * units * (2 * t_ag_u + t_rs_u), mb * units * rep_u, pipe - slack[k],
            mb * (t_ag_u + t_rs_u + queue) - own_lane * ((mb - 1) * rep_u + ovl_u) + rep_queue,
            own_lane, rep_lead))
    # (with dp = 1 too where the routed experts have copies: ``comm.has_dp_copies``)
    copies = cm.has_dp_copies(params, pe, tp, cp, dp, ep, etp)
    # DualPipe (``Schedule.mirrored``): ranks r and pp-1-r sum the gradients of their two
    # copies of the same stages before the optimizer, one all-reduce over the pair (exposed;
    # the end ranks', (pp - 1)·stride apart: on one node or one GPU on each of two) of the
    # gradients its optimizer steps (with ZeRO >= 1 its dense 1/dp and expert 1/edp shares,
    # ``comm.grad_shard_params``)
    G_pairs = np.where((pp - 1) * stride_pp >= G, G, 1)
    # the optimizer step and the stack's per-step passes over the gradient buffer and the
    # optimizer shard (compute stream, after the reduction)
    slow_opt = max((f for _, f in cl.faults.stragglers), default=1.0)
    opt_k = [(getattr(sc, f"optimizer_{x}") + getattr(sc, f"passes_{x}")) * slow_opt
             for x in ("first", "mid", "last")]
    # each rank's tail after its compute (the reduction, the mirror all-reduce, the optimizer),
    # less its slack; the paths that follow the whole pipeline (ZeRO-2's stall without
    # overlap, ``z2_sync_exposed``; ZB-H1's and interleaving's tails) are measured from its end
    tails = []
    for k in K:
        held = cm.grad_shard_params(pr_k[k], pe_k[k], tp, cp, dp, ep, etp, zero, dps)
        mirror = np.where(mirrored, cm.collective_time("allreduce", gb * held, 2, G_pairs, cl),
                          0.0)
        z2 = np.where(ogr, z2_over_k(k), np.where(mirrored, mb * rs_mb_k[k], -np.inf))
        grad = np.where(zero_g == 2, z2, grad_ag[k][0])
        dp_k = np.where(copies, np.where(zero == 3, z3_exposed(k), grad + ag_k[k]), 0.0) + mirror
        live = (k == 0) | ((k == 1) & (pp > 2)) | ((k == 2) & (pp > 1))
        # (a finite tail: ZeRO-2's stall without overlap is a path, below)
        tails.append(np.where(live & np.isfinite(dp_k), dp_k + opt_k[k] - slack[k], -np.inf))
    # paths after the whole pipeline: then the gather and the optimizer of the rank that ends
    # it (the slowest stage's under ZB-H1, ``Z2_SPLIT`` and ``split_tail_exposed``; rank 0's
    # after 1F1B's way back and interleaving's cool-down), or of a rank that ends later
    slowest = rank_of_max((t_first, t_mid, t_last), pp)

    def at_slowest(x: list) -> Any:
        return np.where(slowest == 0, x[0], np.where(slowest == 2, x[2], x[1]))
    after = [np.where(copies, ag_k[k], 0.0) + opt_k[k] for k in K]
    sync_on = copies & (zero_g == 2) & ~ogr & ~mirrored
    over_on = copies & (zero_g == 2) & ogr
    z2_split = z2_path == Z2_SPLIT
    candidates = [(tails[k], opt_k[k]) for k in K] + [
        (np.where(sync_on, z2_sync + np.where(z2_split, at_slowest(after), after[0]), -np.inf),
         np.where(z2_split, at_slowest(opt_k), opt_k[0])),
        (np.where(over_on, tail_split + at_slowest(after), -np.inf), at_slowest(opt_k)),
        (np.where(over_on, cool_tail + after[0], -np.inf), opt_k[0])] + [
        (np.where(sync_on & np.isfinite(tails[k]), z2_sync + after[k] - slack[k], -np.inf),
         opt_k[k]) for k in K]
    # the step's tail: the latest; its optimizer (the first on a tie: rank 0's) apart in the
    # breakdown, the rest data-parallel communication
    tail, t_opt = candidates[0]
    for val, o in candidates[1:]:
        later = val > tail
        tail, t_opt = np.where(later, val, tail), np.where(later, o, t_opt)
    dp_exposed = tail - t_opt
    # the tied word embedding's gradient, all-reduced between the first stage and the LM head's
    # once per step after the data-parallel reduction (``strategies.cost.step``)
    # (in one node only when the whole pipeline group is: pp·tp·cp·dp GPUs within a node)
    t_tied = np.where(sc.tied_bytes > 0, cm.pair_time(
        "allreduce", sc.tied_bytes, pp * tp * cp * dp <= G, cl), 0.0)
    dp_exposed = dp_exposed + t_tied
    # MLA's sequence-parallel-marked replicated gradients, all-reduced over tp once per step
    # after the data-parallel sync (``cost.stage.sp_grad_allreduce_bytes``, §5.85): the
    # stage holding the most layers
    if np.any(sc.tp_rep_grad_bytes > 0):
        rep = sp_grad_allreduce_bytes(sc, np.maximum(np.maximum(n_first, n_mid), n_last))
        dp_exposed = dp_exposed + np.where(rep > 0, cm.collective_time(
            "allreduce", np.where(rep > 0, rep, 1.0), tp, 1, cl), 0.0)
    step = pipe + pp_exposed + dp_exposed + t_opt
    # a tail shorter than its optimizer (every rank's slack larger than its reduction: an
    # uneven pipeline's short stage) hides part of that optimizer behind the pipeline: the
    # breakdown shows the optimizer's exposed part and no negative communication (the step,
    # their sum, is unchanged)
    hidden = np.minimum(dp_exposed, 0.0)
    dp_exposed, t_opt = dp_exposed - hidden, t_opt + hidden

    # breakdown on the slowest stage (exposed seconds per step): its own layers (an uneven
    # layout's may be a middle rank's), the embedding/LM head beyond them as compute
    n_slow = at_slowest(n_k)
    share = n_slow * mb
    n = tp * pp * dp * cp
    tokens = gbs * m.seq_length
    peak = cl.mean_peak(dtype)   # the summed peak over the GPUs (one type: its peak)
    return {
        "step_time_s": step, "tokens_per_s": tokens / step,
        "mfu": flop_counts.mfu(m, gbs, step, n, peak),
        "hfu": flop_counts.hfu(m, gbs, flash, rc, step, n, peak, rcp.plan_share(L, P),
                               P.recompute_modules, get_profile(framework).recompute_early_stop,
                               get_profile(framework).recompute_flash_fwd),
        "bubble_fraction": (pipe - lone - mb * t_min) / step,
        "compute": share * comp_layer + mb * (t_max - n_slow * per_layer),
        "recompute": share * sc.layer_recompute,
        "tp_comm": share * tp_layer, "cp_comm": share * cp_layer, "ep_comm": share * ep_layer + lone,
        "pp_comm": pp_exposed, "dp_comm": dp_exposed, "bubble": bubble, "optimizer": t_opt,
        "num_microbatches": mb, "stage_time_s": t_max, "stage_costs": sc, "p2p_time_s": t_p2p,
        # each kind of rank's compute end before the pipeline's (``rank_slack``), which its
        # data-parallel tail runs into
        **{f"slack_{x}_s": slack[k] for k, x in enumerate(("first", "mid", "last"))},
        # one mean layer's expert all-to-all (one direction: dispatch and combine), its
        # exposure in an overlapped pair (forward and backward) and before a recomputed
        # backward, for the order with communication (``estimate.scalar._per_chunk``)
        "ep_a2a_s": t_a2a, "ep_pair_s": paired, "ep_rc_s": sc.ep_per_layer_recompute * t_a2a,
        "layer_comm_s": tp_layer + cp_layer,       # one layer's other exposed communication
    }
