"""Exporters: the Chrome trace (valid, paired flows, deterministic) and the timeline pictures.

The ``SimResult``s are built by hand: ``pipeline_result`` replays a registered schedule with
fixed durations (forward, backward, one point-to-point hop) on ``dp × pp × tp`` ranks, adding
``pp_send``/``pp_recv`` pairs with peers, tensor-parallel all-reduces, a data-parallel
all-reduce and the optimizer step.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

from simulator.result import Record, SimResult
from simulator.output.timeline import draw_comparison, draw_timeline
from simulator.output.chrome_trace import (atomic_path, dumps_chrome_trace, to_chrome_trace,
                             write_chrome_trace)
from strategies.schedules import get_schedule

T_F, T_B, T_P2P, T_TP, T_DP, T_OPT = 1e-3, 2e-3, 0.1e-3, 0.05e-3, 0.5e-3, 0.3e-3
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _times(schedule: str, pp: int, m: int, vpp: int) -> list[list[tuple]]:
    """Per stage, ``(step, start, end, dep)`` with ``dep = (vstage, end)`` of the producer
    on another stage (None for none): a step starts when its stage is free and its input
    has arrived, one point-to-point hop after the producer ended."""
    fn = get_schedule(schedule)
    progs = [fn(s, pp, m, vpp) for s in range(pp)]
    done: dict[tuple[str, int, int], float] = {}
    out: list[list[tuple]] = [[] for _ in range(pp)]
    free, pos, last = [0.0] * pp, [0] * pp, pp * vpp - 1
    while any(pos[s] < len(progs[s]) for s in range(pp)):
        moved = False
        for s in range(pp):
            while pos[s] < len(progs[s]):
                step = progs[s][pos[s]]
                v = step.chunk * pp + s
                if step.kind == "F":
                    dep = ("F", step.microbatch, v - 1) if v > 0 else None
                else:
                    dep = ("F", step.microbatch, v) if v == last else ("B", step.microbatch, v + 1)
                if dep is not None and dep not in done:
                    break
                hop = dep is not None and dep[2] != v
                ready = done[dep] + (T_P2P if hop else 0.0) if dep else 0.0
                start = max(free[s], ready)
                free[s] = start + (T_F if step.kind == "F" else T_B) / vpp
                done[(step.kind, step.microbatch, v)] = free[s]
                out[s].append((step, start, free[s], (dep[2], done[dep]) if hop else None))
                pos[s], moved = pos[s] + 1, True
        assert moved, "schedule deadlocked"
    return out


def pipeline_result(schedule: str = "1f1b", pp: int = 4, m: int = 8, vpp: int = 1,
                    tp: int = 1, dp: int = 1) -> SimResult:
    """A hand-built result: rank = (d * pp + stage) * tp + t (tensor-parallel fastest)."""
    recs: list[Record] = []
    timing = _times(schedule, pp, m, vpp)
    for d in range(dp):
        for s in range(pp):
            for t in range(tp):
                rank = (d * pp + s) * tp + t
                recs += _rank_records(rank, s, timing[s], lambda st: (d * pp + st) * tp + t,
                                      pp, tp, dp)
    step = max(r.end for r in recs)
    bubbles = {s: 1 - sum(e - b for _, b, e, _ in timing[s]) / step for s in range(pp)}
    ranks = sorted({r.rank for r in recs})
    return SimResult(step, recs, pp * tp * dp, ranks, False, len(recs), 0.0,
                     metrics={"bubble_fraction_by_stage": bubbles, "exposed_comm_s": 0.0,
                              "activation_memory": {0: [(0.0, 1.0), (step, 0.0)]}})


def _rank_records(rank, s, steps, rank_of, pp, tp, dp) -> list[Record]:
    recs = []
    for step, start, end, dep in steps:
        kind = "forward" if step.kind == "F" else "backward"
        recs.append(Record(rank, "compute", kind, step.label, step.microbatch, s, start, end,
                           chunk=step.chunk))
        if tp > 1:
            recs.append(Record(rank, "tp-comm", "tp", f"AR tp {step.label}", step.microbatch,
                               s, end - T_TP, end, chunk=step.chunk, nbytes=4e6))
        if dep is not None:   # the message that fed this step: a send there, a recv here
            src, sent = rank_of(dep[0] % pp), dep[1]
            name = f"{step.kind}{step.microbatch}"
            recs.append(Record(src, "pp-comm", "pp_send", f"send {name}", step.microbatch,
                               dep[0] % pp, sent, sent + T_P2P, nbytes=8e6, peer=rank))
            recs.append(Record(rank, "pp-comm", "pp_recv", f"recv {name}", step.microbatch,
                               s, sent, sent + T_P2P, nbytes=8e6, peer=src))
    end = steps[-1][2]
    if dp > 1:
        recs.append(Record(rank, "dp-comm", "dp", "AR dp bucket 0", -1, s, end, end + T_DP,
                           nbytes=2e8))
        end += T_DP
    recs.append(Record(rank, "compute", "optimizer", "optimizer", -1, s, end, end + T_OPT))
    return recs


# ---------------------------------------------------------------- Chrome trace

@pytest.fixture(scope="module")
def result() -> SimResult:
    return pipeline_result(pp=4, m=8, tp=2, dp=2)   # 16 ranks on 2 nodes


@pytest.fixture(scope="module")
def trace(result) -> dict:
    return json.loads(dumps_chrome_trace(result, ranks_per_node=8, title="test"))


def _threads(trace) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def test_trace_fields_and_spans(trace, result):
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(result.records)
    for e in spans:
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e)
        assert e["ts"] >= 0 and e["dur"] >= 0
        assert set(e["args"]) == {"microbatch", "chunk", "stage", "nbytes"}
    assert {e["cat"] for e in spans} == {"forward", "backward", "optimizer", "tp", "dp",
                                         "pp_send", "pp_recv"}
    f0 = next(e for e in spans if e["name"] == "F0.c0" and e["pid"] == 0)
    assert f0["ts"] == 0 and f0["dur"] == pytest.approx(T_F * 1e6)
    assert trace["otherData"]["step_time_s"] == result.step_time_s
    assert trace["otherData"]["folded"] is False
    assert "activation_memory" not in trace["otherData"]["metrics"]   # series left out
    assert trace["otherData"]["metrics"]["bubble_fraction_by_stage"]["0"] > 0


def test_trace_one_process_per_node_and_named_threads(trace, result):
    procs = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {0: "node 0", 1: "node 1"}
    threads = _threads(trace)
    assert threads[(0, 1)] == "rank 0 · compute"
    assert "rank 9 · tp-comm" in threads.values()
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            rank = int(threads[(e["pid"], e["tid"])].split()[1])
            assert e["pid"] == rank // 8
    tids = sorted(threads)   # tids sorted like (rank, stream)
    ranks = [int(threads[k].split()[1]) for k in sorted(tids, key=lambda k: k[1])]
    assert ranks == sorted(ranks)


def test_trace_spans_do_not_overlap_on_a_thread(trace):
    last_end: dict[tuple[int, int], float] = {}
    for e in trace["traceEvents"]:   # X events come sorted by (pid, tid, ts)
        if e["ph"] == "X":
            key = (e["pid"], e["tid"])
            assert e["ts"] >= last_end.get(key, 0.0) - 1e-6
            last_end[key] = e["ts"] + e["dur"]


def test_trace_flows_pair_one_to_one_on_the_peer_thread(trace, result):
    flows = [e for e in trace["traceEvents"] if e["ph"] in ("s", "f")]
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert Counter(e["id"] for e in flows) == Counter({i: 2 for i in starts})
    assert set(starts) == set(ends)
    n_sends = sum(r.kind == "pp_send" for r in result.records)
    assert len(starts) == n_sends > 0
    threads = _threads(trace)
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for fid, s in starts.items():
        f = ends[fid]
        assert f["bp"] == "e" and s["cat"] == f["cat"] and s["name"] == f["name"]
        src = _enclosing(spans, s)
        dst = _enclosing(spans, f)
        assert src["cat"] == "pp_send" and dst["cat"] == "pp_recv"
        assert src["name"][5:] == dst["name"][5:]                 # same message
        dst_rank = int(threads[(f["pid"], f["tid"])].split()[1])
        rec = next(r for r in result.records if r.kind == "pp_send"
                   and r.label == src["name"] and abs(r.start * 1e6 - src["ts"]) < 1e-3
                   and int(threads[(s["pid"], s["tid"])].split()[1]) == r.rank)
        assert dst_rank == rec.peer                                 # lands on the peer


def _enclosing(spans, ev):
    hits = [e for e in spans if (e["pid"], e["tid"]) == (ev["pid"], ev["tid"])
            and e["ts"] <= ev["ts"] <= e["ts"] + e["dur"]]
    assert len(hits) == 1
    return hits[0]


def test_trace_skips_messages_whose_peer_is_not_simulated(result):
    kept = [r for r in result.records if r.rank < 8]   # folding: only node 0's ranks
    folded = SimResult(result.step_time_s, kept, 16, list(range(8)), True, len(kept), 0.0,
                       rank_map={r: [r, r + 8] for r in range(8)})
    trace = to_chrome_trace(folded)
    ids = Counter(e["id"] for e in trace["traceEvents"] if e["ph"] in ("s", "f"))
    assert ids and set(ids.values()) == {2}
    assert trace["otherData"]["folded"] is True
    assert trace["otherData"]["ranks_represented"]["3"] == 2


def test_trace_is_byte_identical_across_exports(tmp_path, result):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_chrome_trace(result, a, title="x")
    write_chrome_trace(pipeline_result(pp=4, m=8, tp=2, dp=2), b, title="x")
    assert a.read_bytes() == b.read_bytes()
    assert json.loads(a.read_text())["traceEvents"]
    assert [p.name for p in tmp_path.iterdir()] != [] and not list(tmp_path.glob(".*tmp*"))


def test_atomic_path_leaves_old_file_on_failure(tmp_path):
    out = tmp_path / "t.json"
    out.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            open(tmp, "w").write("half")
            raise RuntimeError("disk full")
    assert out.read_text() == "old" and list(tmp_path.iterdir()) == [out]


def test_trace_handles_empty_result_and_bad_nodes():
    empty = SimResult(0.0, [], 1, [], False, 0, 0.0, metrics={"x": float("nan")})
    assert json.loads(dumps_chrome_trace(empty))["otherData"]["metrics"] == {"x": None}
    with pytest.raises(ValueError):
        to_chrome_trace(empty, ranks_per_node=0)


# ---------------------------------------------------------------- timelines

@pytest.mark.parametrize("ext", ["png", "svg"])
def test_timeline_writes_4_ranks(tmp_path, ext):
    out, again = tmp_path / f"t.{ext}", tmp_path / f"again.{ext}"
    draw_timeline(pipeline_result(pp=4, m=8), out, title="1F1B p=4 m=8")
    draw_timeline(pipeline_result(pp=4, m=8), again, title="1F1B p=4 m=8")
    data = out.read_bytes()
    assert len(data) > 1000 and data == again.read_bytes()   # reproducible pictures
    if ext == "png":
        assert data.startswith(PNG_MAGIC)
    else:
        assert b"<svg" in data[:2000]
    assert sorted(tmp_path.iterdir()) == sorted([out, again])   # no temporary file left


@pytest.mark.slow
@pytest.mark.parametrize("ext", ["png", "svg"])
def test_timeline_64_ranks(tmp_path, ext):
    """64 ranks draw (how long it takes is a benchmark's business: experiments/report_speed.py,
    not a timed test, which fails on a loaded machine)."""
    res = pipeline_result(pp=8, m=16, tp=4, dp=2)
    assert res.num_ranks == 64
    out = tmp_path / f"t64.{ext}"
    draw_timeline(res, out, streams=None)
    assert out.stat().st_size > 1000


def test_timeline_thins_ranks_beyond_max(tmp_path):
    out = tmp_path / "thin.png"
    draw_timeline(pipeline_result(pp=4, m=4, tp=2, dp=2), out, max_ranks=5)
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_comparison_stacks_schedules(tmp_path):
    out = tmp_path / "cmp.png"
    draw_comparison([("1F1B", pipeline_result("1f1b", pp=4, m=8)),
                     ("interleaved v=2", pipeline_result("interleaved", pp=4, m=8, vpp=2))],
                    out, title="p=4, m=8", streams=("compute", "pp-comm"))
    assert out.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize("name", ["t.jpg", "t.PDF", "t"])
def test_timeline_refuses_other_extensions(tmp_path, name):
    ext = name.rpartition(".")[2].lower() if "." in name else "(none)"
    with pytest.raises(ValueError, match=ext):
        draw_timeline(pipeline_result(pp=2, m=2), tmp_path / name)
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError):
        draw_comparison([], tmp_path / "x.png")
