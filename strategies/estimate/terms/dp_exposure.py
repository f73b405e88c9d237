"""The closed forms of the data-parallel stream's exposed seconds that the analytic step
reads (and the scalar estimate, the tests and the experiments with it): ZeRO-2/3's queue
under a window (``sharded_exposed``; with hybrid sharding's replica lane ``lanes_exposed``),
ZeRO-2's stall without overlap on each schedule's path (``z2_sync_exposed``, ``Z2_*``), an
interleaved rank's overlapped reduction after its last backward (``grad_window_exposed``),
ZB-H1's trailing reduce-scatters (``split_tail_exposed``), and whether a plan's tail reads
the pipeline's span at all (``tail_reads_span``). Arrays over plans; seconds."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost.sm_share import NO_SMS, WindowSMs
from strategies.estimate.terms.ranks import slowest_rank
from strategies.framework import get_profile
from strategies.stacks.comm_rules import grad_path
from strategies.stacks.profile import FrameworkProfile


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
                  lead: Any = 0.0, sms: WindowSMs = NO_SMS) -> Any:
    """``sharded_exposed`` where ``replicas`` of the ``work`` seconds are hybrid sharding's
    all-reduces across replicas: with ``own_lane`` (``FrameworkProfile.replica_stream``,
    PyTorch FSDP's HSDP) they run on a stream of their own, so each of the two streams must
    fit under the ``window``, the replicas' under what of it follows their first all-reduce
    (``lead`` seconds in): ``max(work − replicas − window, replicas − (window − lead),
    edge)``; else they queue on the data-parallel stream with the rest (Megatron-Core).
    Plus what the SMs the collectives hold (``sms.nccl``) add to the window's compute while
    the ``work − edge`` that runs under it is in flight (``sm_share.overlap_extra``; 0 with
    ``NO_SMS``)."""
    sep = np.maximum(sharded_exposed(np.asarray(work) - replicas, window, edge),
                     np.asarray(replicas) - (window - lead))
    out = np.where(own_lane, sep, sharded_exposed(work, window, edge))
    if sms.sm and sms.nccl:
        out = out + sms.extra(np.asarray(work) - edge, window, sms.nccl)
    return out


#: the paths of ZeRO-2's stall without overlap that a schedule adds to the slowest stage's
#: (``z2_sync_exposed``'s ``path``): none (ZB-V, DualPipe), the gradient's way
#: back (one chunk per rank: 1F1B, GPipe), the drain and rank 0's cool-down (interleaved),
#: the slowest stage's trailing weight gradients (a split backward, one chunk per rank: ZB-H1)
Z2_BUSY, Z2_BACK, Z2_COOLDOWN, Z2_SPLIT = 0, 1, 2, 3


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


def grad_window_exposed(t_grad: Any, t_c0: Any, t_bc: Any, steps: Any,
                        sms: WindowSMs = NO_SMS, busy: Any = 1.0) -> Any:
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
    does not run under). Plus what the SMs the reductions hold (``sms.nccl``) add to the
    window's compute while chunks 1 to ``v − 1``'s ``t_grad − t_c0`` run beside it
    (``sm_share.overlap_extra``; ``busy`` the compute's share of ``t_bc``, the rest the
    step's blocking exchange; 0 with ``NO_SMS``): chunk 0's reduction follows the later
    of the others and the slowed compute."""
    out = np.maximum(t_c0, t_grad - (steps - 1) * t_bc)
    if sms.sm and sms.nccl:
        out = out + sms.extra(np.asarray(t_grad) - t_c0, (steps - 1) * t_bc, sms.nccl, busy)
    return out


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
