"""Read MLPerf Training result logs (``result_N.txt`` of mlcommons/training_results_vX.Y).

Each line that holds ``:::MLLOG {json}`` (a rank prefix such as ``0: `` may come first) is one
event of the MLCommons logging format: ``key``, ``value``, ``time_ms`` (milliseconds since the
epoch) and ``metadata`` (``step``, ``samples_count``, ``file``, ``lineno``...). The reference
transcribers read the submission's own throughput events (``tracked_stats``) and the
``block_start``/``block_stop`` intervals from here; what a throughput counts (tokens or
samples per second) is the benchmark's, so the caller converts it, with the source it read.

    python experiments/mlperf_log.py RESULT_FILE [...]   # key counts and tracked_stats
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from typing import Any, Callable, Iterable

MARK = ":::MLLOG "


def events(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Every MLLOG event of a log, in file order. A line whose JSON does not parse is skipped
    (logs of many ranks can interleave two writes on one line)."""
    out = []
    for line in lines:
        at = line.find(MARK)
        if at < 0:
            continue
        try:
            ev = json.loads(line[at + len(MARK):])
        except json.JSONDecodeError:
            continue
        if isinstance(ev, dict) and "key" in ev:
            out.append(ev)
    return out


def read_events(path: str) -> list[dict[str, Any]]:
    """``events`` of one result file (UTF-8, undecodable bytes replaced)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        return events(fh)


def values(evs: list[dict[str, Any]], key: str) -> list[Any]:
    """The ``value`` of every event named ``key``, in order."""
    return [e.get("value") for e in evs if e.get("key") == key]


def tracked(evs: list[dict[str, Any]], stat: str) -> list[tuple[Any, float]]:
    """``(metadata step, value)`` of every ``tracked_stats`` event whose value holds ``stat``
    (e.g. ``throughput``), in order."""
    out = []
    for e in evs:
        v = e.get("value")
        if e.get("key") == "tracked_stats" and isinstance(v, dict) and stat in v:
            out.append(((e.get("metadata") or {}).get("step"), float(v[stat])))
    return out


def median_tracked(evs: list[dict[str, Any]], stat: str) -> float:
    """The median of a tracked statistic over the run; ValueError if the log has none."""
    got = [v for _, v in tracked(evs, stat)]
    if not got:
        raise ValueError(f"no tracked_stats event holds {stat!r}")
    return statistics.median(got)


def result_files(paths: Iterable[str], benchmark: str) -> dict[tuple[str, str], list[str]]:
    """A results repository's ``<submitter>/results/<system>/<benchmark>/result_N.txt`` files
    (``paths``: its tree, ``git ls-tree -r --name-only``), by (submitter, system)."""
    out: dict[tuple[str, str], list[str]] = {}
    for f in paths:
        parts = f.split("/")
        if len(parts) == 5 and parts[1] == "results" and parts[3] == benchmark \
                and re.fullmatch(r"result_\d+\.txt", parts[4]):
            out.setdefault((parts[0], parts[2]), []).append(f)
    return out


def transcriber_main(argv: list[str] | None, description: str,
                     read_sources: Callable[[list[str]], dict[str, Any]],
                     write_rows: Callable[[dict[str, Any]], str], inputs: str, out: str) -> int:
    """The command line the MLPerf transcribers share: ``--sources MIRROR...`` re-reads the
    results mirrors with ``read_sources`` (and ``--save-inputs FILE`` keeps what it read),
    else the kept ``inputs`` file is loaded; ``write_rows`` of them goes to ``--out`` (default
    ``out``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--sources", nargs="+", help="results mirrors, in the transcriber's order")
    ap.add_argument("--save-inputs", help="write the read inputs here")
    ap.add_argument("--out", default=out)
    a = ap.parse_args(argv)
    from simulator.cli.common import atomic_write_text
    if a.sources:
        src = read_sources(a.sources)
        if a.save_inputs:
            atomic_write_text(a.save_inputs, json.dumps(src, indent=1, sort_keys=True) + "\n",
                              "--save-inputs")
    else:
        with open(inputs, encoding="utf-8") as fh:
            src = json.load(fh)
    atomic_write_text(a.out, write_rows(src), "--out")
    return 0


def main(argv: list[str]) -> int:
    for path in argv:
        evs = read_events(path)
        keys: dict[str, int] = {}
        for e in evs:
            keys[e["key"]] = keys.get(e["key"], 0) + 1
        print(path)
        print("  keys:", ", ".join(f"{k} x{n}" for k, n in sorted(keys.items())))
        for e in evs:
            if e["key"] == "tracked_stats":
                print("  tracked_stats", json.dumps(e.get("value")), (e.get("metadata") or {}).get("step"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
