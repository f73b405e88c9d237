"""What of each kind of rank's last backward its gradient buckets can run under in the
analytic step (``BucketWindows``): the embedding's share of its last bucket, the backward
(``window_k``), what of it runs before the first bucket launches (``lead_k``; a rank past
the first reduced as one bucket, ``whole_k``), rank 0's forward share and how long before
the pipeline's end each kind of rank ends its compute (``slack``). Arrays over plans;
seconds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.cost.stage import StageCostArrays
from strategies.estimate.terms.ranks import rank_slack
from strategies.estimate.terms.stages import Span, StageTimes
from strategies.plan_arrays import PlanArrays
from strategies.schedules import attr_by_code, dispatch
from strategies.stacks.profile import FrameworkProfile


@dataclass(frozen=True, eq=False)
class BucketWindows:
    """Per kind of rank ``k`` (first, middle = rank 1, last; arrays over plans): ``emb_k``
    the embedding's parameters in its last bucket, ``window_k`` its last backward's seconds,
    ``lead_k`` the seconds of it before the first bucket launches, ``whole_k`` the share of
    its parameters in one bucket (0 where the size rule applies); ``r_f`` rank 0's forward
    share of its compute, ``slack`` each kind of rank's compute end before the pipeline's
    (``rank_slack``)."""

    emb_k: tuple
    window_k: list
    lead_k: list
    whole_k: list
    r_f: Any
    slack: tuple


def bucket_windows(sc: StageCostArrays, P: PlanArrays, profile: FrameworkProfile,
                   st: StageTimes, span: Span, split: Any, zero_g: Any) -> BucketWindows:
    """The bucket windows of plans ``P`` (``BucketWindows``) under the stack ``profile``'s
    bucket rule; ``split`` the schedule splits the backward, ``zero_g`` the ZeRO stage the
    gradients run with (``comm_rules.grad_path``)."""
    pp, v, sched = P.pp, P.vpp, P.schedule
    n_k, mirrored, head_first = st.n_k, st.mirrored, st.head_first
    n_first = n_k[0]
    t_first, t_mid, t_last = st.t
    w_share, f_share, t_fill = span.w_share, span.f_share, span.t_fill
    K = range(3)
    # the embedding's gradient is complete only when the backward ends (and its weights are the
    # first the next forward needs), so its bucket is never overlapped: the exposed share is the
    # larger of one bucket and the embedding (``dp_plan``: the embedding closes the last bucket;
    # on both end ranks under DualPipe)
    emb_k = (sc.embedding_params, 0.0, np.where(mirrored, sc.embedding_params, 0.0))
    window_k = [n_k[k] * (sc.layer_bwd + sc.layer_recompute) for k in K]   # its last backward
    if np.any(st.mtp_bwd):          # pp = 1: the MTP modules' backward runs in it, first
        window_k[0] = window_k[0] + st.mtp_bwd
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
    rule = profile.dp_bucket
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
    return BucketWindows(emb_k=emb_k, window_k=window_k, lead_k=lead_k, whole_k=whole_k,
                         r_f=r_f, slack=slack)
