"""Metrics derived from a run's records: step time, exposed/overlapped communication, the
breakdown, bubbles, activation memory over time and link utilisation.

Accounting on one rank over ``[0, step]`` (seconds): time when the compute stream is busy is
``compute`` (forward, backward, embedding, LM head), ``recompute`` or ``optimizer``; idle
compute time is charged to the communication the rank was moving bytes for at that moment
(an op's *active* part, after it stopped waiting for its peers), in the order pp, tp, cp,
ep, dp; what is left is ``bubble``. The parts sum to the step time.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from itertools import accumulate
from typing import Iterable, Mapping, Sequence

from simulator.result import Record
from strategies.cost.sm_share import overlap_extra
from strategies.estimate.scalar import BREAKDOWN_KEYS  # noqa: F401  (one definition)

Interval = tuple[float, float]
COMPUTE_KINDS = {"forward": "compute", "backward": "compute", "wgrad": "compute",
                 "embedding": "compute",
                 "lm_head": "compute", "recompute": "recompute", "optimizer": "optimizer",
                 "offload": "offload",   # activation offloading's exposed copies
                 "cp": "cp_comm"}   # PyTorch's ring attention waiting on the network
COMM_KINDS = {"pp_send": "pp_comm", "pp_recv": "pp_comm", "pp_gather": "pp_comm",
              "tp": "tp_comm", "cp": "cp_comm", "ep": "ep_comm", "dp": "dp_comm"}
PRIORITY = ("pp_comm", "tp_comm", "cp_comm", "ep_comm", "dp_comm")
PARAM_GATHER_PREFIX = "AG params"


# ----------------------------------------------------------------------- interval algebra
def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, merged, non-empty intervals."""
    out: list[Interval] = []
    ca = cb = 0.0
    open_ = False
    for a, b in sorted([i for i in intervals if i[1] > i[0]]):
        if open_ and a <= cb:
            if b > cb:                      # ``max(cb, b)``
                cb = b
        else:
            if open_:
                out.append((ca, cb))
            ca, cb, open_ = a, b, True
    if open_:
        out.append((ca, cb))
    return out


def intersect(x: list[Interval], y: list[Interval]) -> list[Interval]:
    """Intersection of two merged interval lists."""
    out: list[Interval] = []
    nx, ny = len(x), len(y)
    if not nx or not ny:
        return out
    i = j = 0
    xa, xb = x[0]
    ya, yb = y[0]
    while True:
        a = ya if ya > xa else xa           # ``max(xa, ya)``
        b = yb if yb < xb else xb           # ``min(xb, yb)``
        if b > a:
            out.append((a, b))
        if xb < yb:
            i += 1
            if i == nx:
                return out
            xa, xb = x[i]
        else:
            j += 1
            if j == ny:
                return out
            ya, yb = y[j]


def subtract(x: list[Interval], y: list[Interval]) -> list[Interval]:
    """``x`` minus ``y`` (both merged and sorted); linear time."""
    out, j, ny = [], 0, len(y)
    for a, b in x:
        cur = a
        while j < ny and y[j][1] <= cur:
            j += 1
        k = j
        while k < ny:
            c, d = y[k]
            if not c < b:
                break
            if c > cur:
                out.append((cur, c))
            if d > cur:                     # ``max(cur, d)``
                cur = d
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def measure(x: list[Interval]) -> float:
    return sum([b - a for a, b in x])


# ----------------------------------------------------------------------- step time
def rank_ends(records: list[Record], metas: dict[int, dict]) -> dict[int, float]:
    """When each rank's step ends (seconds). With ``overlap_param_gather`` the parameter
    all-gathers after the optimizer count only for the part that exceeds the next step's first
    forward (``fwd_window_s``), and at least one bucket's share, as the analytic model does;
    where the gathers hold SMs (``gather_sms``: the chip's SM count and the SMs held), plus
    what they add to that forward (``sm_share.overlap_extra`` of the buckets after the
    first, which the forward waits for, beside it; as the estimate's ``grad_reduce``).
    Where the gathers wait at each stage's first forward on micro-batch 0's fill path
    (``gathers_on_fill_path``, ``strategies.stacks.param_gather``), or where the interleaved
    schedule dispatches them (``gathers_at_schedule_start``), the program runs them there
    (``program.data_parallel.FillGathers``): they count as any other record."""
    end: dict[int, float] = defaultdict(float)
    ag: dict[int, list[Record]] = defaultdict(list)
    gathers = PARAM_GATHER_PREFIX
    on_fill = {rank for rank, meta in metas.items() if meta.get("gathers_on_fill_path", False)}
    for r in records:
        rank = r.rank
        if rank not in on_fill and r.label.startswith(gathers):
            ag[rank].append(r)
        else:
            t = r.end
            if t > end[rank]:
                end[rank] = t
    for rank, recs in ag.items():
        meta = metas.get(rank, {})
        t0, t1 = min(r.start for r in recs), max(r.end for r in recs)
        if meta.get("overlap_param_gather", False):
            dur = t1 - t0
            fwd, edge = meta.get("fwd_window_s", 0.0), dur / len(recs)
            t1 = t0 + max(dur - fwd, edge)
            if meta.get("gather_sms"):
                first = min(recs, key=lambda r: r.start)
                t1 += float(overlap_extra(dur - (first.end - first.start), fwd,
                                          *meta["gather_sms"]))
        end[rank] = max(end[rank], t1)
    return dict(end)


# ----------------------------------------------------------------------- breakdown
def clip(x: list[Interval], lo: float, hi: float) -> list[Interval]:
    """``intersect(x, [(lo, hi)])`` (``x`` merged and sorted) in one pass: each interval
    clipped to ``[lo, hi]``, the empty ones dropped, none after the first that reaches ``hi``
    (the same comparisons, so the same floats)."""
    out: list[Interval] = []
    for xa, xb in x:
        a = lo if lo > xa else xa
        b = hi if hi < xb else xb
        if b > a:
            out.append((a, b))
        if not xb < hi:
            break
    return out


def rank_breakdown(records: list[Record], step: float) -> tuple[dict[str, float], float]:
    """``(breakdown, overlapped comm seconds)`` of one rank's records over ``[0, step]``.
    The busy intervals lie in the window, so the overlapped communication is the union of
    the categories' unions met with them (the same intervals as every record's union
    clipped to the window, then met: unions and meets only compare and copy endpoints)."""
    busy: dict[str, list] = defaultdict(list)
    comm: dict[str, list] = defaultdict(list)
    for r in records:
        if r.stream == "compute":
            busy[COMPUTE_KINDS.get(r.kind, "compute")].append((r.start, r.end))
        elif r.kind in COMM_KINDS:
            comm[COMM_KINDS[r.kind]].append((r.start + r.wait, r.end))
    out = {k: 0.0 for k in BREAKDOWN_KEYS}
    all_busy: list[Interval] = []
    for k, iv in busy.items():
        merged = clip(union(iv), 0.0, step)
        out[k] += measure(merged)
        all_busy += merged
    all_busy = union(all_busy)
    idle = subtract([(0.0, step)], all_busy)
    merged_comm: list[Interval] = []
    for k in PRIORITY:
        iv = comm.get(k)
        if not iv:                  # nothing of this kind: nothing covered, idle unchanged
            continue
        merged = union(iv)
        merged_comm += merged
        covered = intersect(idle, merged)
        out[k] += measure(covered)
        idle = subtract(idle, covered)
    out["bubble"] = measure(idle)
    return out, measure(intersect(union(merged_comm), all_busy))


def stage_bubbles(by_stage: list[float]) -> dict[str, float]:
    """The two stage views of the simulated bubble from ``by_stage`` (each stage's first
    rank's bubble over the step, ``bubble_fraction_by_stage``): ``bubble_fraction``, the
    bottleneck (busiest) stage's, the least of them (the estimate's figure, its breakdown's
    ``bubble`` over the step: ``strategies.estimate.terms.stages.bubble_share``), and
    ``max_stage_bubble_fraction``, the most idle stage's (a stage lighter than the
    bottleneck also waits for it once per micro-batch)."""
    return {"bubble_fraction": min(by_stage, default=0.0),
            "max_stage_bubble_fraction": max(by_stage, default=0.0)}


# ----------------------------------------------------------------------- memory
def activation_series(records: list[Record], per_chunk: float | Sequence[float],
                      per_w: float | Sequence[float] = 0.0,
                      partners: Mapping[str, str] | None = None
                      ) -> list[tuple[float, float]]:
    """Stashed activation bytes over time on one rank: ``+per_chunk`` when a forward
    ``(microbatch, chunk)`` starts, ``-per_chunk`` when its backward ends; with a split
    backward (``per_w`` > 0: what a pending weight gradient keeps) ``+per_w`` when its ``B``
    ends and ``-per_w`` when its ``W`` ends. Either may be a sequence by chunk id
    (``Record.chunk``): each entry at its own chunk's bytes
    (``strategies.memory.activations.stash_entry_bytes``). A forward whose compute
    interleaves with a backward's (an overlapped pair, ``Step.overlap``: it builds its activations as the
    backward frees its own, layer by layer) is counted just after that backward ends, as the
    memory model counts the pair (``strategies.schedules.stash.stash_frontier``).
    ``partners``: each overlapped forward's backward by label, as the compiler grouped them
    (``Program.meta["paired_forwards"]``); without it a forward's partner is the first
    backward whose records interleave with its own (which misses a pair whose forward runs
    as one piece, a one-layer chunk)."""
    a_at, _ = _by_chunk(per_chunk)
    w_at, any_w = _by_chunk(per_w)
    chunk_of: dict[str, int] = {}
    first: dict[str, tuple[float, int]] = {}
    f_last: dict[str, int] = {}
    b_first: dict[str, int] = {}
    last: dict[str, tuple[float, int]] = {}
    w_end: dict[str, tuple[float, int]] = {}
    n = -1                     # index among the compute records (one pass, no generator)
    for r in records:
        if r.stream != "compute":
            continue
        n += 1
        label = r.label
        head = label[:1]
        chunk_of[label] = max(r.chunk, 0)
        if head == "F":
            if label not in first:
                first[label] = (r.start, n)
            f_last[label] = n
        elif head == "B":
            if label not in b_first:
                b_first[label] = n
            last[label] = (r.end, n)
        elif head == "W" and any_w:
            w_end[label] = (r.end, n)
    # a forward's partner: the first backward (in order of its first record) whose records
    # interleave with the forward's, i.e. starts before the forward's last record and ends
    # after its first; the backwards' running maximum of last records finds it by bisection
    b_labels = list(b_first)
    reach = list(accumulate((last[b][1] for b in b_labels), max))
    adds = []
    for label, (t, n) in first.items():
        if partners is not None:
            b = partners.get(label)
            if b is not None and b in last:
                end, bn = last[b]
                adds.append((end, bn + 0.5))
            else:
                adds.append((t, n))
            continue
        i = bisect_right(reach, n)
        if i < len(b_labels) and b_first[b_labels[i]] < f_last[label]:
            end, bn = last[b_labels[i]]
            adds.append((end, bn + 0.5))
        else:
            adds.append((t, n))
    a_of = {lb: a_at(c) for lb, c in chunk_of.items()}
    w_of = {lb: w_at(c) for lb, c in chunk_of.items()}
    events = sorted([(t, n, a_of[lb]) for lb, (t, n) in zip(first, adds)]
                    + [(t, n, -a_of[lb] + (w_of[lb] if any_w else 0.0))
                       for lb, (t, n) in last.items()]
                    + [(t, n, -w_of[lb]) for lb, (t, n) in w_end.items()])
    series, level = [(0.0, 0.0)], 0.0
    for t, _, delta in events:
        level += delta
        series.append((t, level))
    return series


def _by_chunk(x: float | Sequence[float]) -> tuple:
    """``(bytes of chunk id, any positive)`` of ``activation_series``' ``per_chunk``/``per_w``:
    a number is every chunk's bytes, a sequence is indexed by chunk id."""
    if isinstance(x, (int, float)):
        v = float(x)
        return (lambda _c: v), v > 0
    xs = [float(v) for v in x]
    return xs.__getitem__, any(v > 0 for v in xs)


def step_peak(series: list[tuple[float, float]]) -> tuple[float, float]:
    """``(largest value, first time it is reached)`` of a step series ``[(t, value), …]``."""
    best = max(v for _, v in series)
    return best, next(t for t, v in series if v == best)


def step_integral(series: list[tuple[float, float]], until: float) -> float:
    """Integral over ``[0, until]`` of a step series (each value holds until the next point;
    the last one until ``until``)."""
    total = 0.0
    for (t0, v), (t1, _) in zip(series, series[1:] + [(until, 0.0)]):
        a, b = min(t0, until), min(t1, until)
        total += v * (b - a)
    return total


# ----------------------------------------------------------------------- links
#: Links per class whose utilisation over time is kept (besides the overall top ``k``).
LINK_SERIES_PER_KIND = 3


def link_name(edge: tuple) -> str:
    return f"{edge[0]}->{edge[1]}"


def busiest(link_bytes: dict, k: int, kind_of: dict | None = None,
            kind: str | None = None) -> list[tuple]:
    """The ``k`` links (of ``kind``, when given) that carried the most bytes, most first."""
    rows = sorted(((b, e) for e, b in link_bytes.items()
                   if b > 0 and (kind is None or kind_of[e] == kind)),
                  key=lambda x: (-x[0], repr(x[1])))
    return [e for _, e in rows[:k]]


def top_links(link_bytes: dict, bandwidth: dict, step: float, k: int = 10,
              kind_of: dict | None = None) -> list[dict]:
    """The ``k`` links that carried the most bytes, with bytes / (bandwidth · step) and,
    with ``kind_of``, their class."""
    out = []
    for e in busiest(link_bytes, k):
        row = {"link": link_name(e), "bytes": link_bytes[e],
               "utilisation": link_bytes[e] / (bandwidth[e] * step) if step > 0 else 0.0}
        if kind_of is not None:
            row["kind"] = kind_of[e]
        out.append(row)
    return out


def link_classes(link_bytes: dict, bandwidth: dict, kind_of: dict, step: float,
                 utilisation: dict) -> dict[str, dict]:
    """Per link class: ``links`` (that carried bytes), ``bytes``, ``mean_utilisation`` (their
    bytes over their bandwidth times the step), and ``busiest``: its links with a kept series
    (``utilisation``: link -> step series of the fraction of bandwidth in use), each with
    ``bytes``, ``utilisation`` (over the step), ``peak_utilisation`` and ``peak_at_s``;
    ``peak_utilisation`` of the class is the largest of those."""
    out: dict[str, dict] = {}
    for kind in sorted({kind_of[e] for e, b in link_bytes.items() if b > 0}):
        used = [e for e, b in link_bytes.items() if b > 0 and kind_of[e] == kind]
        total = sum(link_bytes[e] for e in used)
        cap = sum(bandwidth[e] for e in used) * step
        rows = []
        for e in busiest(link_bytes, len(used), kind_of, kind):
            if e not in utilisation:
                continue
            peak, at = step_peak(utilisation[e])
            rows.append({"link": link_name(e), "bytes": link_bytes[e],
                         "utilisation": link_bytes[e] / (bandwidth[e] * step) if step else 0.0,
                         "peak_utilisation": peak, "peak_at_s": at})
        out[kind] = {"links": len(used), "bytes": total,
                     "mean_utilisation": total / cap if cap > 0 else 0.0,
                     "peak_utilisation": max((r["peak_utilisation"] for r in rows), default=0.0),
                     "busiest": rows}
    return out
