"""Chrome Trace Event Format export of a ``SimResult``, for Perfetto and chrome://tracing.

One process per node (``pid = rank // ranks_per_node``), one thread per (rank, stream),
one complete event (``"ph": "X"``, microseconds) per ``Record``, counter tracks (``"ph": "C"``)
for each rank's activation memory and, when recorded, each busy link's utilisation, and one
flow arrow per point-to-point message, from a ``pp_send`` to the peer's matching ``pp_recv`` (matched
first-in first-out per (source, destination) pair). Records that overlap on one stream
without nesting (a send and a receive in flight together) would be dropped by Perfetto,
so they go to an extra lane of that stream: thread ``"rank 3 · pp-comm #2"``.

A step of several pipeline flushes (``metrics["flushes"]``) shows all of them
(``flush_view.all_flushes``; ``otherData.metrics.flush_period_s``), so the events span the
reported step time. The output is deterministic: two exports of the same result are
byte-identical.

>>> from simulator.result import Record, SimResult
>>> rec = Record(0, "compute", "forward", "F0.c0", 0, 0, 0.0, 1e-3, chunk=0)
>>> trace = to_chrome_trace(SimResult(1e-3, [rec], 1, [0], False, 1, 0.0))
>>> [(e["ph"], e["name"]) for e in trace["traceEvents"]]
[('M', 'process_name'), ('M', 'process_sort_index'), ('M', 'thread_name'), \
('M', 'thread_sort_index'), ('X', 'F0.c0')]
>>> trace["traceEvents"][-1]["dur"]
1000.0
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import uuid
from collections import defaultdict, deque
from typing import Any, Iterator

from simulator.output.flush_view import all_flushes
from simulator.result import STREAMS, Record, SimResult
from topologies.errors import SpecError
from topologies.gpus import GIB

_US = 1e6                 # microseconds per second
_TS_DIGITS = 3            # round times to the nanosecond: short, stable numbers


def _us(seconds: float) -> float:
    return round(seconds * _US, _TS_DIGITS)


def _stream_order(records: list[Record]) -> dict[str, int]:
    """Known streams in ``STREAMS`` order, then any others sorted by name."""
    extra = sorted({r.stream for r in records} - set(STREAMS))
    return {s: i for i, s in enumerate(list(STREAMS) + extra)}


def _assign_lanes(records: list[Record]) -> dict[int, int]:
    """Lane of each record (by index) within its (rank, stream): 0 unless it overlaps."""
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        groups[(r.rank, r.stream)].append(i)
    lanes: dict[int, int] = {}
    for idx in groups.values():
        idx.sort(key=lambda i: (records[i].start, -records[i].end, records[i].label))
        lane_ends: list[float] = []
        for i in idx:
            r = records[i]
            lane = next((k for k, end in enumerate(lane_ends) if end <= r.start), None)
            if lane is None:
                lane = len(lane_ends)
                lane_ends.append(r.end)
            lane_ends[lane] = r.end
            lanes[i] = lane
    return lanes


def _threads(records: list[Record], lanes: dict[int, int], ranks_per_node: int
             ) -> tuple[dict[tuple[int, str, int], int], list[dict[str, Any]]]:
    """Thread ids, sorted by (rank, stream, lane), and the naming metadata events."""
    order = _stream_order(records)
    keys = sorted({(r.rank, r.stream, lanes[i]) for i, r in enumerate(records)},
                  key=lambda k: (k[0], order[k[1]], k[2]))
    tids = {k: n + 1 for n, k in enumerate(keys)}
    meta: list[dict[str, Any]] = []
    for node in sorted({k[0] // ranks_per_node for k in keys}):
        meta.append(_meta(node, 0, "process_name", {"name": f"node {node}"}))
        meta.append(_meta(node, 0, "process_sort_index", {"sort_index": node}))
    for (rank, stream, lane), tid in tids.items():
        name = f"rank {rank} · {stream}" + (f" #{lane + 1}" if lane else "")
        meta.append(_meta(rank // ranks_per_node, tid, "thread_name", {"name": name}))
        meta.append(_meta(rank // ranks_per_node, tid, "thread_sort_index", {"sort_index": tid}))
    meta.sort(key=lambda e: (e["pid"], e["tid"], e["name"]))
    return tids, meta


def _meta(pid: int, tid: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": args}


def _complete(r: Record, pid: int, tid: int) -> dict[str, Any]:
    return {"ph": "X", "pid": pid, "tid": tid, "name": r.label, "cat": r.kind,
            "ts": _us(r.start), "dur": _us(max(r.duration, 0.0)),
            "args": {"microbatch": r.microbatch, "chunk": r.chunk, "stage": r.stage,
                     "nbytes": r.nbytes}}


def match_p2p(records: list[Record]) -> list[tuple[int, int]]:
    """Pairs ``(send index, recv index)``: each ``pp_send`` with a peer to the peer's
    ``pp_recv`` from this rank, first-in first-out per (source, destination), by start time.
    Messages whose other end is not among the records (symmetry folding) stay unmatched."""
    sends: dict[tuple[int, int], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int], deque[int]] = defaultdict(deque)
    for i, r in enumerate(records):
        if r.peer < 0:
            continue
        if r.kind == "pp_send":
            sends[(r.rank, r.peer)].append(i)
        elif r.kind == "pp_recv":
            recvs[(r.peer, r.rank)].append(i)

    def by_time(i: int) -> tuple[float, float, str]:
        return records[i].start, records[i].end, records[i].label

    pairs = []
    for key in sorted(sends):
        queue = deque(sorted(recvs.get(key, ()), key=by_time))
        for s in sorted(sends[key], key=by_time):
            if not queue:
                break
            pairs.append((s, queue.popleft()))
    return sorted(pairs, key=lambda p: (by_time(p[0]), records[p[0]].rank, records[p[0]].peer))


def _flows(records: list[Record], where: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Flow start on each send and flow end (``bp: e``) on its receive, at slice midpoints
    so that each binds to its enclosing slice without ties at the edges."""
    events = []
    for fid, (s, r) in enumerate(match_p2p(records), start=1):
        for ph, i in (("s", s), ("f", r)):
            rec = records[i]
            ev = {"ph": ph, "id": fid, "name": "pp p2p", "cat": "pp",
                  "pid": where[i][0], "tid": where[i][1],
                  "ts": _us(rec.start + max(rec.duration, 0.0) / 2)}
            if ph == "f":
                ev["bp"] = "e"
            events.append(ev)
    return events


_SKIP = object()          # marks a metric left out of the summary


def _jsonable(value: Any) -> Any:
    """Scalars and small containers of scalars, with non-finite floats as ``None``."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict) and all(not isinstance(v, (dict, list, tuple))
                                       for v in value.values()):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return _SKIP


def _summary(result: SimResult, title: str) -> dict[str, Any]:
    """``otherData``: the step's headline figures and the scalar metrics (series left out)."""
    metrics = {str(k): v for k, v in ((k, _jsonable(v)) for k, v in result.metrics.items())
               if v is not _SKIP}
    return {"title": title, "step_time_s": _jsonable(float(result.step_time_s)),
            "num_ranks": result.num_ranks, "simulated_ranks": len(result.simulated_ranks),
            "folded": result.folded, "events": result.events, "metrics": metrics,
            "ranks_represented": {str(k): len(v) for k, v in sorted(result.rank_map.items())}}


def memory_counter_name(rank: int) -> str:
    return f"activation memory, rank {rank} (GiB)"


def link_counter_name(link: str, kind: str) -> str:
    return f"{kind} {link} utilisation (%)"


def _counters(result: SimResult, ranks_per_node: int) -> list[dict[str, Any]]:
    """Counter tracks (``"ph": "C"``): each simulated rank's stashed activation memory in GiB
    (in its node's process), and with link series the utilisation in % of each kept link
    (in a ``links`` process after the nodes). One sample per change."""
    m = result.metrics
    events: list[dict[str, Any]] = []
    for rank, series in sorted(m.get("activation_memory", {}).items()):
        name = memory_counter_name(rank)
        events += [{"ph": "C", "pid": rank // ranks_per_node, "tid": 0, "name": name,
                    "ts": ts, "args": {"GiB": b / GIB}} for ts, b in _last_per_ts(series)]
    links = m.get("link_series", {})
    if links:
        pid = 1 + max([r // ranks_per_node for r in result.simulated_ranks]
                      + [r.rank // ranks_per_node for r in result.records] + [0])
        events += [_meta(pid, 0, "process_name", {"name": "links (utilisation %)"}),
                   _meta(pid, 0, "process_sort_index", {"sort_index": pid})]
        for link, s in sorted(links.items()):
            name = link_counter_name(link, s["kind"])
            events += [{"ph": "C", "pid": pid, "tid": 0, "name": name, "ts": ts,
                        "args": {"%": 100.0 * u}} for ts, u in _last_per_ts(s["utilisation"])]
    return events


def _last_per_ts(series: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A step series in trace microseconds, one sample per timestamp (the last holds)."""
    out: dict[float, float] = {}
    for t, v in series:
        out[_us(t)] = v
    return list(out.items())


def to_chrome_trace(result: SimResult, ranks_per_node: int = 8, title: str = "") -> dict:
    """The result as a Chrome Trace Event Format object (``{"traceEvents": [...], ...}``)."""
    if ranks_per_node < 1:
        raise ValueError(f"ranks_per_node must be >= 1, got {ranks_per_node}")
    result = all_flushes(result)        # every pipeline flush of the step (flush_view)
    records = list(result.records)
    lanes = _assign_lanes(records)
    tids, meta = _threads(records, lanes, ranks_per_node)
    where = [(r.rank // ranks_per_node, tids[(r.rank, r.stream, lanes[i])])
             for i, r in enumerate(records)]
    spans = [_complete(r, *where[i]) for i, r in enumerate(records)]
    spans.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], e["dur"], e["name"], e["cat"]))
    return {"traceEvents": meta + spans + _flows(records, where)
            + _counters(result, ranks_per_node),
            "displayTimeUnit": "ms", "otherData": _summary(result, title)}


def dumps_chrome_trace(result: SimResult, ranks_per_node: int = 8, title: str = "") -> str:
    """The trace as deterministic JSON text (sorted keys, compact, strict: no NaN)."""
    return json.dumps(to_chrome_trace(result, ranks_per_node, title), sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def temp_path(path: str | os.PathLike) -> str:
    """A fresh temporary name in ``path``'s folder (``.NAME.PID.HEX.tmpEXT``) that
    ``atomic_path`` writes before it replaces ``path``."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    base, ext = os.path.splitext(os.path.basename(path))
    # A fresh name (not mkstemp) so that the file gets the usual permissions.
    return os.path.join(folder, f".{base}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp{ext}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, field: str = "output") -> Iterator[str]:
    """Yield a temporary path in ``path``'s folder; on success it replaces ``path`` in one
    step (``os.replace``), on failure it is removed and ``path`` is left untouched. A write
    that fails on the disk (full, a file-size limit, the folder gone) is a SpecError naming
    ``field`` and ``path`` (exit 2, one line), not a traceback."""
    path = os.fspath(path)
    tmp = temp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if isinstance(e, OSError):
            raise SpecError(field, path, f"cannot be written ({e.strerror or e}); nothing "
                            "was written") from e
        raise


def write_chrome_trace(result: SimResult, path: str | os.PathLike, ranks_per_node: int = 8,
                       title: str = "", field: str = "--trace") -> None:
    """Write ``to_chrome_trace(result, ...)`` to ``path`` as JSON, atomically (a failed write
    is a SpecError naming ``field``)."""
    text = dumps_chrome_trace(result, ranks_per_node, title)
    with atomic_path(path, field) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.write("\n")
