"""Wall and CPU seconds of the searches that took minutes on a 2,048-GPU preset (the rows of
``experiments/preset_matrix.py``'s sweep, docs/reports/preset_matrix.md), of the README's
default search and of three small searches over DualPipe/DualPipeV plans, each in its own
process as a user runs it; with ``--tree DIR`` (an earlier checkout, ``git archive COMMIT | tar
-x -C DIR``) each run alternates with the same search there and the two JSON reports are
compared byte for byte without the timing fields (``wall_s``; ``--without KEY`` drops more
keys, e.g. ``events``, the count of events simulated, which folding more ranks lowers). Prints
figures (the median and the least of ``--repeat`` runs); asserts nothing.
On a shared machine the wall clock mostly measures the other users: compare CPU seconds too.

    python experiments/bench_large_search.py --tree /tmp/before --repeat 2
    python experiments/bench_large_search.py --cases default
    python experiments/bench_large_search.py --tree /tmp/before --cases default,deepseek-v3 --repeat 3
    python experiments/bench_large_search.py --tree /tmp/before --cases gpt-530b --without events
    python experiments/bench_large_search.py --tree /tmp/before --repeat 3 \
        --cases dualpipe-fix,schedules-all,dualpipev-mixed
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONE = ["--top", "1", "--workers", "1", "--reference", "none", "--json"]
CASES = {
    "dsv4-flash": ["--model", "deepseek-v4-flash", "--cluster", "hgx-h800:256",
                   "--framework", "megatron-core", "--global-batch", "8192", *ONE],
    "gpt-18.4b": ["--model", "gpt-18.4b", "--cluster", "hgx-h800:256",
                  "--framework", "megatron-core", "--global-batch", "1024", *ONE],
    "mistral-7b": ["--model", "mistral-7b", "--cluster", "hgx-h800:256",
                   "--framework", "megatron-core", "--global-batch", "1024", *ONE],
    "gpt-530b": ["--model", "gpt-530b", "--cluster", "hgx-h800:256",
                 "--framework", "megatron-core", "--global-batch", "1024", *ONE],
    "default": ["--json"],
    # DeepSeek-V3 on 2,048 H800 under the report's stack (docs/reports/deepseek_v3.md)
    "deepseek-v3": ["--model", "deepseek-v3", "--cluster", "hgx-h800:256", "--framework",
                    "hai-llm", "--dtype", "fp8-blockwise", "--global-batch", "4096", *ONE],
    # small searches whose DualPipe/DualPipeV rows the scalar prices (``estimate.kinds``: the
    # ranked rows; on a mixed cluster every row), their messages replayed on the order
    # (docs/calibration.md §5.225, docs/search.md §8)
    "dualpipe-fix": ["--model", "llama3-8b", "--cluster", "dgx-h100:2", "--global-batch", "64",
                     "--fix", "schedule=dualpipe", "--workers", "1", "--json"],
    "schedules-all": ["--model", "llama3-8b", "--cluster", "dgx-h100:2", "--global-batch",
                      "64", "--schedules", "all", "--workers", "1", "--json"],
    "dualpipev-mixed": ["--model", "gpt-1.7b", "--cluster", "dgx-h100:1+dgx-a100:1",
                        "--global-batch", "32", "--fix", "schedule=dualpipev", "--workers", "1",
                        "--json"],
}


def run(tree: Path, args: list[str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (the process and its workers) and stdout of one search."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "simulator.cli", "search", *args], cwd=tree,
                         capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, out


def without_timing(text: str, keys: tuple[str, ...] = ()) -> str:
    """The report's bytes less its timing fields (``wall_s`` at any depth) and ``keys``."""
    def drop(x):
        if isinstance(x, dict):
            return {k: drop(v) for k, v in x.items() if k != "wall_s" and k not in keys}
        if isinstance(x, list):
            return [drop(v) for v in x]
        return x
    return json.dumps(drop(json.loads(text)), indent=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--tree", help="an earlier checkout, run alternately and compared")
    ap.add_argument("--without", action="append", default=[], metavar="KEY",
                    help="also leave KEY (at any depth) out of the comparison; repeatable")
    a = ap.parse_args()
    trees = [("this", ROOT)] + ([("before", Path(a.tree))] if a.tree else [])
    for case in a.cases.split(","):
        times: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in trees}
        outs: dict[str, set[str]] = {name: set() for name, _ in trees}
        print(f"{case}: python -m simulator.cli search {' '.join(CASES[case])}", flush=True)
        for _ in range(a.repeat):
            for name, tree in reversed(trees):
                wall, cpu, out = run(tree, CASES[case])
                times[name].append((wall, cpu))
                outs[name].add(without_timing(out, tuple(a.without)))
                print(f"  {case} {name}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
        for name, _ in trees:
            w = [t[0] for t in times[name]]
            c = [t[1] for t in times[name]]
            print(f"{case} {name}: wall median {statistics.median(w):.1f} s (least "
                  f"{min(w):.1f}), CPU median {statistics.median(c):.1f} s (least {min(c):.1f})"
                  f" over {len(w)} runs")
        if a.tree:
            same = len(outs["this"] | outs["before"]) == 1
            less = "".join(f", {k}" for k in a.without)
            print(f"{case}: JSON without wall_s{less} {'byte-identical' if same else 'DIFFERS'} "
                  "between the two checkouts and across runs")


if __name__ == "__main__":
    main()
