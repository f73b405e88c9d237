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
  DualPipe and DualPipeV keep ``2·(m + p − 1)`` here, which the scalar estimate replaces by
  the order's own exchanges (``chunk_correction.order_messages``, §5.225);
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

Where each term lives (``strategies.estimate.terms``): a layer's exposed communication in
``layer_comm``, each kind of rank's seconds and the span in ``stages``, the messages in
``messages``, the data-parallel calls in ``dp_calls``, their closed forms in ``dp_exposure``,
the bucket windows and slack in ``buckets``, the reductions and gathers in ``grad_reduce``,
ZeRO-2's terms in ``zero2``, ZeRO-3's in ``zero3``, the step's tail in ``tail``, the kinds of
rank in ``ranks`` and the faults in ``faults``; this module composes them.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from strategies.cost import flop_counts
from strategies.cost import recompute as rcp
from strategies.cost.comm.catalog import kept_links
from strategies.cost.gemm_kernel import GEMM_GENERATION
from strategies.cost.gemm_shapes import layer_gemm_parts
from strategies.cost.norm_barrier import barrier_on, barrier_time
from strategies.cost.sm_share import NO_SMS, WindowSMs, ub_share, window_sms
from strategies.cost.stage import stage_cost_arrays
from strategies.cost.system import SystemConfig, get_system
from strategies.estimate.terms.buckets import bucket_windows
from strategies.estimate.terms.dp_calls import DpCalls
from strategies.estimate.terms.faults import degraded_view
from strategies.estimate.terms.grad_reduce import grad_reduce
from strategies.estimate.terms.layer_comm import layer_comm, layer_forward
from strategies.estimate.terms.messages import p2p_exposed
from strategies.estimate.terms.stages import bubble_share, mtp_seconds, span_of, stage_times
from strategies.estimate.exchanges import by_exchange, exchange_rows
from strategies.estimate.terms.tail import per_step_allreduces, step_tail
from strategies.estimate.terms.zero2 import zero2_terms
from strategies.estimate.terms.zero3 import zero3_exposed
from strategies.flushes import flushed_arrays
from strategies.framework import get_profile
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays, as_plan_arrays, rank_layers
from strategies.schedules import attr_by_code
from strategies.stacks.comm_rules import grad_path
from strategies.stacks.profile import FrameworkProfile
from topologies.cluster import Cluster
from topologies.gpus import GPU


def estimate_arrays(m: ModelSpec, cl: Cluster, dtype: str, P: PlanArrays | Mapping[str, Any],
                    framework: FrameworkProfile | str | None = None,
                    system: SystemConfig | None = None,
                    ranks: Mapping[str, Any] | None = None,
                    gpu: GPU | None = None, pipe_span: Any = None,
                    rank_ends: tuple | None = None) -> dict[str, Any]:
    """Score plans given as arrays: ``P`` is ``PlanArrays`` (or the search space's short
    columns ``tp pp dp cp ep mbs gbs vpp sched rc sp zero flash ogr opg tpo``).
    ``framework``: the software profile (``strategies.framework``; default Megatron-Core);
    ``system``: the policy constants (``strategies.cost.system``); ``ranks``: fields of the
    stage-cost record per kind of rank (``RANK_FIELDS``) that replace the plan columns' (the
    scalar estimate's job layout, ``scalar.rank_fields``); ``gpu``: the GPU type whose kernels
    time the compute (default: the cluster's slowest by peak, ``Cluster.gpu``); ``pipe_span``:
    the pipeline's seconds in place of the schedule's closed form (the scalar estimate's
    uneven layouts: the real chunks' order, ``scalar._real_tail``), which the data-parallel
    windows under the pipeline then read; ``rank_ends``: each kind of rank's (first, rank 1,
    last) compute end before the pipeline's, seconds, in place of ``rank_slack``'s closed
    form (the scalar estimate's uneven split backward: the real stages' replay,
    ``stage_correction.stage_slack``). Returns arrays of seconds
    and ratios, and under ``"stage_costs"`` the ``StageCostArrays`` record they were read
    from (the one the compiler reads). One ``catalog.kept_links`` block: the link terms of
    each group priced once."""
    with kept_links():
        return _estimate_arrays(m, cl, dtype, P, framework, system, ranks, gpu, pipe_span,
                                rank_ends)


def _estimate_arrays(m: ModelSpec, cl: Cluster, dtype: str, P: Any, framework: Any,
                     system: Any, ranks: Any, gpu: Any, pipe_span: Any, rank_ends: Any
                     ) -> dict[str, Any]:
    """``estimate_arrays`` computed."""
    P = as_plan_arrays(P)
    if exchange_rows(P) is not None:    # plans naming different K/V exchanges: each apart
        return by_exchange(P, lambda Q, r, s: estimate_arrays(m, cl, dtype, Q, framework,
                                                              system, r, gpu, s,
                                                              rank_ends),
                           ranks, pipe_span)
    if np.any(P.flushes != 1):  # k pipeline flushes per step: one flush's arrays, composed
        from strategies.estimate.scalar import BREAKDOWN_KEYS
        one = estimate_arrays(m, cl, dtype, replace(P, gbs=P.gbs / P.flushes,
                                                    flushes=np.ones_like(P.flushes)),
                              framework, system, ranks, gpu, pipe_span, rank_ends)
        return flushed_arrays(one, P.flushes, BREAKDOWN_KEYS)
    cl = degraded_view(cl)
    sc = stage_cost_arrays(m, cl, dtype, P, framework, system, gpu)
    if ranks:
        sc = replace(sc, **{k: v + 0 * getattr(sc, k) for k, v in ranks.items()})
    profile = get_profile(framework)
    tp, pp, dp, cp = P.tp, P.pp, P.dp, P.cp
    gbs, sched, zero = P.gbs, P.schedule, P.zero
    # the ZeRO stage and overlap the gradients run with (``comm_rules.grad_path``: FSDP2 under
    # pipelining reduces once per step, after the stage's last backward, ZeRO-1's path
    # without overlap; docs/calibration.md §5.34)
    zero_g, ogr_g = grad_path(profile.fsdp2, P.pp, zero, P.overlap_grad_reduce)
    L = m.num_layers
    mb = gbs / (P.mbs * dp)                                 # micro-batches per pipeline
    lps = L / pp                                            # layers per pipeline rank
    # the layers each rank holds (an uneven layout: rank_layers; else lps on each)
    n_first, n_mid, n_last, _, _ = rank_layers(L, P)
    n_k = (n_first, n_mid, n_last)
    split = attr_by_code(sched, "splits_backward").astype(bool)

    # a layer's exposed communication, each kind of rank's seconds, the pipeline's span and
    # its exposed messages
    sms = charged_sms(m, gpu or cl.gpu, profile, system, P)
    comm = layer_comm(sc, cl, P, mb, split, L, sms)
    st = stage_times(sc, P, n_k, comm, cl, lps,
                     mtp_seconds(sc, comm, m.num_nextn_predict_layers, m.mtp_stash_layers))
    span = span_of(sc, P, st, comm, mb, lps, pipe_span)
    t_p2p, pp_exposed = p2p_exposed(sc, cl, P, profile, st, span, mb, lps)

    # data parallel: each kind of rank (first, middle = rank 1, last) reduces its own
    # parameters' gradients (the stage-cost record's ``params_*``/``expert_params_*``: the
    # layers it holds by kind, its MTP modules, the embedding or the LM head; the compiler's
    # buckets read the same, ``stage_costs(job).params_by_stage``), then runs its own
    # optimizer; the step ends with the rank that ends last. A rank above rank 0 ends its
    # compute ``slack`` earlier, the last micro-batch's backward through the stages below it
    # (``rank_slack``), which hides as much of its own tail
    calls = DpCalls.of(sc, P, cl, profile, sms)
    win = bucket_windows(sc, P, profile, st, span, split, zero_g, m.num_nextn_predict_layers)
    if rank_ends is not None:
        # (each kind's end broadcast to the plans' shape)
        win = replace(win, slack=tuple(x + np.zeros_like(w, dtype=float)
                                       for x, w in zip(rank_ends, win.slack)))
    f_layer = layer_forward(sc, comm, span.fwd_tp)
    gr = grad_reduce(sc, P, profile, dtype, calls, st, win, ogr_g, t_p2p, f_layer)
    zero2 = zero2_terms(sc, P, calls, st, span, win, comm, gr, mb, split, zero_g)
    z3 = zero3_exposed(sc, P, calls, st, span.pipe, win.slack, mb)
    dp_exposed, t_opt, n_slow, fill = step_tail(sc, P, calls, st, win.slack, gr, zero2, z3,
                                                mb, zero_g, t_p2p, f_layer,
                                                P.param_gather_with_optimizer,
                                                barrier_time(barrier_on(profile.step), P.tp,
                                                             P.pp, P.cp, dp, zero, cl))
    dp_exposed = per_step_allreduces(dp_exposed, sc, P, cl, n_k)
    step = span.pipe + pp_exposed + dp_exposed + t_opt
    # a tail shorter than its optimizer (every rank's slack larger than its reduction: an
    # uneven pipeline's short stage) hides part of that optimizer behind the pipeline: the
    # breakdown shows the optimizer's exposed part and no negative communication (the step,
    # their sum, is unchanged)
    hidden = np.minimum(dp_exposed, 0.0)
    dp_exposed, t_opt = dp_exposed - hidden, t_opt + hidden

    # breakdown on the slowest stage (exposed seconds per step): its own layers (an uneven
    # layout's may be a middle rank's), the embedding/LM head beyond them as compute
    share = n_slow * mb
    n = tp * pp * dp * cp
    tokens = gbs * m.seq_length
    peak = cl.mean_peak(dtype)   # the summed peak over the GPUs (one type: its peak)
    return {
        "step_time_s": step, "tokens_per_s": tokens / step,
        "mfu": flop_counts.mfu(m, gbs, step, n, peak),
        "hfu": flop_counts.hfu(m, gbs, P.flash_attn, P.recompute, step, n, peak,
                               rcp.plan_share(L, P), P.recompute_modules,
                               profile.recompute_early_stop, profile.recompute_flash_fwd),
        # the breakdown's bubble (the busiest stage's, as the simulator's ``bubble_fraction``)
        "bubble_fraction": bubble_share(span.bubble, step),
        # activation offloading's exposed copies, which the layers' times hold
        # (``cost.stage.offload_time.with_offload``): their own entry, out of compute
        "compute": share * (st.comp_layer - sc.layer_offload_fwd - sc.layer_offload_bwd)
        + mb * (st.t_max - n_slow * st.per_layer),
        "offload": share * (sc.layer_offload_fwd + sc.layer_offload_bwd),
        "recompute": share * sc.layer_recompute,
        "tp_comm": share * comm.tp, "cp_comm": share * comm.cp,
        "ep_comm": share * comm.ep + comm.lone,
        "pp_comm": pp_exposed, "dp_comm": dp_exposed, "bubble": span.bubble, "optimizer": t_opt,
        "num_microbatches": mb, "stage_time_s": st.t_max, "stage_costs": sc, "p2p_time_s": t_p2p,
        # each kind of rank's compute end before the pipeline's (``rank_slack``), which its
        # data-parallel tail runs into
        **{f"slack_{x}_s": win.slack[k] for k, x in enumerate(("first", "mid", "last"))},
        # the overlapped parameter gathers' exposed seconds on the fill path, in ``dp_comm``
        # (``stacks.param_gather``; 0 where they end a rank's tail)
        "param_gather_fill_s": fill,
        # one mean layer's expert all-to-all (one direction: dispatch and combine), its
        # exposure in an overlapped pair (forward and backward) and before a recomputed
        # backward, for the order with communication (``estimate.chunk_correction.per_chunk``)
        "ep_a2a_s": comm.a2a, "ep_pair_s": comm.paired,
        "ep_rc_s": sc.ep_per_layer_recompute * comm.a2a,
        "layer_comm_s": comm.tp + comm.cp,       # one layer's other exposed communication
    }


def charged_sms(m: ModelSpec, gpu: GPU, profile: FrameworkProfile,
                system: SystemConfig | None, P: PlanArrays) -> WindowSMs:
    """The SMs each overlap window's collectives hold on ``gpu`` under ``profile``
    (``sm_share.window_sms``), where ``SystemConfig.comm_sm_share`` charges them (else
    ``NO_SMS``): the userbuffers' row-parallel share of ``m``'s forward GEMMs at one
    sequence (``sm_share.ub_share``)."""
    sy = get_system(system)
    if not sy.comm_sm_share or not gpu.sm_count:
        return NO_SMS
    return window_sms(True, gpu.sm_count, GEMM_GENERATION.get(gpu.name), profile.tp_overlap,
                      P.moe_dispatcher, ub_share(layer_gemm_parts(m, 1, 1, 1, 1)))
