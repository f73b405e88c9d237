"""Rows the space changes in place to the least setting that works: the least micro-batch
group an interleaved row's schedule accepts (``least_group``), the fewest pipeline flushes a
row that does not fit with one needs (``fewest_flushes``) and a full-recompute row's fewest
recomputed layers that still fit (``least_recompute``)."""
from __future__ import annotations

import numpy as np

from strategies.plan_arrays import RECOMPUTE_CODE, PlanArrays, rank_layers
from strategies.schedules import attr_by_code
from strategies.search.prune_rules import framework_ok, pipeline_bubble, schedule_ok
from strategies.search.space_memory import SpaceMemory
from strategies.stacks.profile import FrameworkProfile


def least_group(c: dict[str, np.ndarray]) -> np.ndarray:
    """The micro-batch group of each row (``mgs``; 0: the default, ``pp``): a row of a
    schedule that takes one (interleaved) whose micro-batches per flush ``m`` the default
    group refuses (``m`` not a multiple of ``pp``) takes the least group ``g > pp`` its rules
    accept (``m >= g`` and ``m % g`` 0 or ``>= pp``; ``g = m`` always does where ``m >= pp``):
    Megatron-Core's ``--microbatch-group-size-per-virtual-pipeline-stage``. A larger group
    runs more warm-up forwards, so it stashes more (``Schedule.in_flight``) and leaves the
    free-communication span unchanged: the least one is the one to run. Other rows keep
    theirs."""
    g = c["mgs"].copy()
    pp = c["pp"]
    m = c["gbs"] // (c["mbs"] * c["dp"] * c["fl"])
    need = np.flatnonzero(attr_by_code(c["sched"], "uses_group").astype(bool) & (g == 0)
                          & (pp > 1) & (m % pp != 0) & (m > pp))
    if not need.size:
        return g
    p, mm = pp[need], m[need]
    best = mm.copy()                        # g = m: one group
    for cand in range(int(p.min()) + 1, int(mm.max())):
        hit = (cand > p) & (cand < best) & ((mm % cand == 0) | (mm % cand >= p))
        best = np.where(hit, cand, best)
    g[need] = best
    return g


def fewest_flushes(c: dict[str, np.ndarray], peak: np.ndarray, limit: float, memory,
                   L: int, fw: FrameworkProfile, max_bubble: float,
                   regroup: bool = True) -> np.ndarray:
    """Give each pipelined row that does not fit with one flush the fewest pipeline flushes
    per step (``flushes``, a power of two as the micro-batch sizes) that fit, under a stack
    that runs several (``FrameworkProfile.pipeline_flushes``: torchtitan, NeMo AutoModel, whose
    ``local_batch_size`` sets them): one flush's memory holds ``m/k`` micro-batches, and each
    flush pays its own fill and drain, so ``k`` flushes are never faster than one
    (``strategies.flushes``) and are only worth it where one does not fit. The rows change in
    place (the space does not grow), each checked by the rules a flushed plan obeys
    (``schedule_ok``, the stack's, the bubble). ``memory``: columns -> peak bytes. Returns the
    updated peaks. ``regroup``: the micro-batch group is the least for one flush's count
    (``least_group``; False: a group fixed with ``--fix``)."""
    rows = np.flatnonzero((peak > limit) & (c["pp"] > 1) & (c["fl"] == 1))
    if not rows.size:
        return peak
    peak = peak.copy()
    m = c["gbs"][rows] // (c["mbs"][rows] * c["dp"][rows])
    left = np.ones(rows.size, dtype=bool)
    k = 2
    while left.any() and k <= int(m[left].max()):
        pick = np.flatnonzero(left & (m % k == 0))
        if pick.size:
            idx = rows[pick]
            trial = {key: v[idx] for key, v in c.items()}
            trial["fl"] = np.full(idx.size, k, dtype=np.int64)
            if regroup:
                trial["mgs"] = least_group({**trial, "mgs": trial["mgs"] * 0})
            ok = (schedule_ok(trial, L) & framework_ok(trial, fw)
                  & (pipeline_bubble(trial) <= max_bubble + 1e-12))
            sub = np.flatnonzero(ok)
            if sub.size:
                pk = memory({key: v[sub] for key, v in trial.items()})
                fit = sub[pk <= limit]
                c["fl"][idx[fit]] = k
                c["mgs"][idx[fit]] = trial["mgs"][fit]
                peak[idx[fit]] = pk[pk <= limit]
                left[pick[fit]] = False
        k *= 2
    return peak


def least_recompute(mem: SpaceMemory, c: dict[str, np.ndarray], peak: np.ndarray,
                    limit: float) -> np.ndarray:
    """Give each fitting full-recompute plan the fewest recomputed layers per chunk that still
    fit (Megatron's block method, ``recompute_layers``; the rows change in place, the space
    does not grow): memory falls monotonically with ``N`` (each recomputed layer keeps its
    input instead of its activations), so a bisection over ``1 … l/(pp·vpp)`` finds it.
    ``mem``: the space's memory rule (``space_memory.SpaceMemory``: the chip, the stack's
    terms). A row that carries a count (``--fix recompute_layers``) keeps it. Returns the
    updated peaks."""
    rows = np.flatnonzero((c["rc"] == RECOMPUTE_CODE["full"]) & (c["rcl"] == 0))
    if not len(rows):
        return peak
    sub = {k: v[rows] for k, v in c.items()}
    lpc = rank_layers(mem.model.num_layers, PlanArrays.from_columns(sub))[3].astype(np.int64)
    lo, hi = np.ones_like(lpc), lpc.copy()         # the full plan (N = l) fits
    best = peak[rows].copy()
    while True:
        act = np.flatnonzero(lo < hi)
        if not len(act):
            break
        mid = (lo[act] + hi[act]) // 2
        sub = {k: v[rows[act]] for k, v in c.items()}
        sub["rcl"] = mid
        sub["rcu"] = np.zeros_like(mid)
        pk = mem.peak(sub)
        fit = pk <= limit
        hi[act] = np.where(fit, mid, hi[act])
        lo[act] = np.where(fit, lo[act], mid + 1)
        best[act] = np.where(fit, pk, best[act])
    c["rcl"][rows] = np.where(hi < lpc, hi, 0)
    peak = peak.copy()
    peak[rows] = np.where(hi < lpc, best, peak[rows])
    return peak
