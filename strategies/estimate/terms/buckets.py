"""What of each kind of rank's last backward its gradient buckets can run under in the
analytic step (``BucketWindows``): its last bucket's parameters, the backward
(``window_k``), what of it runs before the first bucket launches (``lead_k``; a rank past
the first reduced as one bucket, ``whole_k``), rank 0's forward share and how long before
the pipeline's end each kind of rank ends its compute (``slack``). Arrays over plans;
seconds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.cost.bucket_cut import chunk_cut, lead_tail
from strategies.cost.stage import StageCostArrays
from strategies.estimate.terms.ranks import rank_slack
from strategies.estimate.terms.stages import Span, StageTimes
from strategies.plan_arrays import PlanArrays
from strategies.schedules import attr_by_code, dispatch
from strategies.stacks.profile import FrameworkProfile


@dataclass(frozen=True, eq=False)
class BucketWindows:
    """Per kind of rank ``k`` (first, middle = rank 1, last; arrays over plans): ``last_k``
    the parameters of its last-reduced bucket (``cut_windows``), ``emb_k`` the embedding's
    there (the parameter gather's first bucket reads it), ``window_k`` its last
    backward's seconds, ``lead_k`` the seconds of it before the first bucket launches,
    ``lead_layers_k`` the layers whose attention is in that bucket, at least one (all
    where it is one),
    ``whole_k`` the share of its parameters in one bucket (0 where the size rule applies);
    ``calls_k`` how many buckets, each one collective call, its parameters are reduced and
    gathered in where it runs one chunk (1 where they are one bucket; interleaved and
    DualPipe: 1, their chunks priced apart);
    ``r_f`` rank 0's forward share of its compute, ``slack`` each kind of rank's compute end
    before the pipeline's (``rank_slack``)."""

    last_k: tuple
    emb_k: tuple
    window_k: list
    lead_k: list
    lead_layers_k: list
    whole_k: list
    calls_k: list
    r_f: Any
    slack: tuple


def cut_windows(sc: StageCostArrays, n: Any, head: Any, tail: Any, window: Any,
                mtp: tuple = (0.0, 0.0, 0), layers: bool = False,
                calls: bool = False) -> tuple:
    """``(lead, last)`` of a chunk of ``n`` mean layers cut as Megatron-Core cuts it
    (``bucket_cut.chunk_cut``; the simulator's ``grad_buckets.chunk_buckets`` reads the same
    rule): ``head`` the output layer's parameters there, ``mtp`` ``(parameters, backward
    seconds, count)`` of the multi-token-prediction modules before the layers, ``tail`` the
    embedding's, ``window`` the chunk's last backward (seconds). ``lead``: seconds of it
    before the first bucket closes (0 with the head's; a layer's lead, its MLP, at that
    layer's backward less its attention's, ``bucket_cut.lead_tail``, where
    ``LayerBlocks._lead_split`` launches it; a layer's rest at its end; ``window`` where the
    embedding or the remainder closes it); ``last``: the last bucket's parameters;
    with ``layers``, third, how many of the chunk's last layers have their attention in the
    first bucket, at least one (the next step's forward of these waits for its gather, the
    last: §5.194); with ``calls`` (and ``layers``), fourth, how many buckets the chunk is
    cut into (``bucket_cut.chunk_cut``). Arrays over plans; parameters, seconds."""
    mtp_p, mtp_t, mtp_n = mtp
    first, last, n_b = chunk_cut(sc.bucket_params, head, sc.layer_params,
                                 sc.layer_lead_params, n, tail, mtp_p, mtp_n, calls=True)
    t_l = sc.layer_bwd + sc.layer_recompute
    t_lead = t_l - lead_tail(sc.layer_bwd - sc.attn_bwd, sc.attn_bwd, sc.layer_lead_work)
    j, rest = np.divmod(np.maximum(first - 1 - mtp_n, 0.0), 2.0)
    at = np.where(first <= mtp_n, first * mtp_t,
                  mtp_n * mtp_t + j * t_l + np.where(rest > 0, t_l, t_lead))
    lead = np.where(first >= 1 + mtp_n + 2 * np.rint(n), window, at)
    if not layers:
        return lead, last
    # the layers whose attention is in the first bucket, at least the last one (its MLP
    # is): what the next forward runs after that bucket's gather (``FillGathers``)
    out = (lead, last, np.where(first < 1 + mtp_n, 0.0,
                                np.minimum(np.maximum(j + rest, 1.0), np.rint(n))))
    return out + (n_b,) if calls else out


def bucket_windows(sc: StageCostArrays, P: PlanArrays, profile: FrameworkProfile,
                   st: StageTimes, span: Span, split: Any, zero_g: Any,
                   mtp_modules: int = 0) -> BucketWindows:
    """The bucket windows of plans ``P`` (``BucketWindows``) under the stack ``profile``'s
    bucket rule; ``split`` the schedule splits the backward, ``zero_g`` the ZeRO stage the
    gradients run with (``comm_rules.grad_path``), ``mtp_modules`` the model's
    multi-token-prediction modules (in rank 0's chunk where pp = 1)."""
    pp, v, sched = P.pp, P.vpp, P.schedule
    n_k, mirrored, head_first = st.n_k, st.mirrored, st.head_first
    n_first = n_k[0]
    t_first, t_mid, t_last = st.t
    w_share, f_share, t_fill = span.w_share, span.f_share, span.t_fill
    K = range(3)
    window_k = [n_k[k] * (sc.layer_bwd + sc.layer_recompute) for k in K]   # its last backward
    if np.any(st.mtp_bwd):          # pp = 1: the MTP modules' backward runs in it, first
        window_k[0] = window_k[0] + st.mtp_bwd
    window = window_k[0]
    # each kind of rank's last-reduced chunk (its first: rank 0's holds the embedding, on
    # both end ranks under DualPipe, ``mirrored``; the LM head where it is the rank's only
    # chunk: the last rank, rank 0 at pp = 1; the MTP modules at pp = 1) cut into buckets
    # as Megatron-Core cuts it, in backward order (``cut_windows``, §5.193): the first
    # closes, and its reduction starts, inside the backward (``lead_k``; read where the rank
    # runs one chunk, not under DualPipe: its two copies complete their gradients at
    # different times), the last holds the embedding with what the bucket before left
    # (``last_k``; it completes only when the backward ends, and its weights are the first
    # the next forward needs, so it is never overlapped)
    one = (v == 1) & ~mirrored
    chunks = np.where(mirrored, 2.0, np.maximum(v, 1.0))
    head_k = [np.where(one & ((pp == 1) & (k == 0) | (pp > 1) & (k == 2)), sc.head_params, 0.0)
              for k in K]
    tail_k = (sc.embedding_params, 0.0, np.where(mirrored, sc.embedding_params, 0.0))
    mk = sc.by_kind.get("mtp") if mtp_modules else None
    mtp_p, mtp_t = (0.0, 0.0) if mk is None else (
        np.where(pp == 1, mk.layer_params, 0.0),
        np.where(pp == 1, mk.layer_bwd + mk.layer_recompute, 0.0))
    # the three kinds cut at once (rows 0, 1, 2)
    zero = 0.0 * window
    lead_c, last_c, layers_c, calls_c = cut_windows(
        sc, np.stack([n_k[k] / chunks + zero for k in K]),
        np.stack([head_k[k] + zero for k in K]), np.stack([tail_k[k] + zero for k in K]),
        np.stack([window_k[k] + zero for k in K]),
        (np.stack([mtp_p + zero, zero, zero]), np.stack([mtp_t + zero, zero, zero]),
         mtp_modules if mk is not None else 0), layers=True, calls=True)
    # Megatron-Core cuts only pipeline rank 0's first chunk into buckets
    # (``BucketRule.chunk_bucketed``, §5.92): every other rank's chunk is one bucket, so its
    # first bucket is its whole last backward, and its last one its chunk (``whole_k``: that
    # share of the rank's parameters, 0 where the size rule applies)
    # (a split backward, which Megatron-Core does not run, keeps the size rule, as DualPipe)
    rule = profile.dp_bucket
    own = mirrored | attr_by_code(sched, "splits_backward").astype(bool)
    whole_k = [0.0 * pp if k == 0 else rule.whole_share(pp, v, own, zero_g == 2)
               for k in K]
    lead_k = [np.where(whole_k[k] > 0, window_k[k], lead_c[k]) for k in K]
    lead_layers_k = [np.where(whole_k[k] > 0, n_k[k] / chunks, layers_c[k]) for k in K]
    # each bucket one call of the group (Megatron-Core's ``register_grad_ready`` launches a
    # bucket group's reduce-scatter once its gradients are complete, ``finish_param_sync``
    # dispatches the next bucket's gather: param_and_grad_buffer.py @d98e8a6), so a rank
    # that runs one chunk pays the ring's per-call latency once a bucket (§5.227)
    calls_k = [np.where(one & (whole_k[k] <= 0), np.maximum(calls_c[k], 1.0), 1.0)
               for k in K]
    fwd_window = n_first * sc.layer_fwd
    r_f = fwd_window / np.maximum(fwd_window + window, 1e-30)
    slack = rank_slack((t_first, t_mid, t_last), pp, v, r_f, np.where(split, w_share, 0.0),
                       head_first | mirrored,
                       dispatch(sched, "end_skew", f_share, w_share) * t_fill)
    return BucketWindows(last_k=tuple(last_c), emb_k=tail_k, window_k=window_k, lead_k=lead_k,
                         lead_layers_k=lead_layers_k,
                         whole_k=whole_k, calls_k=calls_k, r_f=r_f, slack=slack)
