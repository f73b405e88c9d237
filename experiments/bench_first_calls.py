"""CPU seconds of the product calls the test suite and users wait on, each case in a fresh
process (so a first call pays for what a process builds once): the search space of Llama 3.1
405B on 64 DGX H100 (gbs 2048; its interleaved orders' per-chunk stash moments), its first
and second enumeration; the ``--schedules all`` spaces of GPT-3 175B on dgx-a100:128 fixed
to ZB-H2, ZB-V and DualPipeV (tests/test_order_span.py's enumeration, whose ZeRO-2 rule
estimates each ZeRO-2 plan's ZeRO-1 twin); one scalar ``estimate`` of three jobs (the
mean of 5 calls after the first); and the order build alone (``order-build``): the
free-communication orders (``analysis.free_comm_order``) of six long pipelines (interleaved
pp 8 vpp 5 m 64; ZB-V, DualPipeV and ZB-H2 at pp 8 m 256; DualPipe pp 16 m 256; 1F1B pp 16
m 512), then every rank's stash frontier of each. With ``--tree DIR`` (an earlier checkout, e.g.
``git archive main``) each case runs alternately in both trees; best of ``--repeat``, with
the 1-minute load before each run. Not a test: figures depend on the host.

    python experiments/bench_first_calls.py --repeat 3
    python experiments/bench_first_calls.py --tree /tmp/before --repeat 3 --cases enumerate-405b
    python experiments/bench_first_calls.py --tree /tmp/before --repeat 3 --cases order-build
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: each case's child program (run with the tree as working directory); it prints one JSON
#: object of CPU seconds (``time.process_time``)
CASES = {
    "enumerate-405b": """
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from strategies.search.space import enumerate_space
m, cl = model_preset("llama3.1-405b"), cluster_preset("dgx-h100", 64)
out = {}
for name in ("first_s", "second_s"):
    t0 = time.process_time(); enumerate_space(m, cl, 2048); out[name] = time.process_time() - t0
""",
    "order-span-spaces": """
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from strategies.search.space import SpaceOptions, enumerate_space
m, cl = model_preset("gpt3-175b"), cluster_preset("dgx-a100", 128)
t0 = time.process_time()
for s in ("zb-h2", "zb-v", "dualpipev"):
    enumerate_space(m, cl, 1536, SpaceOptions(schedules="all", fixed={"schedule": s}))
out = {"three_spaces_s": time.process_time() - t0}
""",
    "order-build": """
from strategies.schedules.registry import get_schedule
from strategies.schedules.analysis import free_comm_order
shapes = [("interleaved", 8, 64, 5), ("zb-v", 8, 256, 2), ("dualpipev", 8, 256, 2),
          ("dualpipe", 16, 256, 1), ("zb-h2", 8, 256, 1), ("1f1b", 16, 512, 1)]
out = {}
t0 = time.process_time()
for name, pp, m, vpp in shapes:
    free_comm_order(get_schedule(name), pp, m, vpp)
out["orders_s"] = time.process_time() - t0
t0 = time.process_time()
for name, pp, m, vpp in shapes:
    for r in range(pp):
        get_schedule(name).stash_frontier(r, pp, m, vpp)
out["frontiers_s"] = time.process_time() - t0
""",
    "estimate": """
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from strategies.plan import parse_plan
from strategies.job import make_job
from strategies.estimate.scalar import estimate
out = {}
for m, c, n, p in [
        ("llama3-70b", "dgx-h100", 8, "tp=8,pp=4,dp=2,mbs=1,gbs=64,schedule=interleaved,vpp=2"),
        ("mixtral-8x7b", "dgx-h100", 4, "tp=2,pp=2,dp=8,ep=8,mbs=1,gbs=256"),
        ("deepseek-v3", "dgx-h100", 128, "tp=1,pp=16,dp=64,ep=64,mbs=1,gbs=2048,"
                                         "first_stage_layers=1,last_stage_layers=4")]:
    job = make_job(model_preset(m), cluster_preset(c, n), parse_plan(p))
    estimate(job)
    t0 = time.process_time()
    for _ in range(5):
        estimate(job)
    out[m + "_ms"] = (time.process_time() - t0) / 5 * 1e3
""",
}


def run(tree: Path, case: str) -> dict:
    """One fresh process of ``case`` in ``tree``: its JSON of CPU seconds."""
    prog = ("import json, sys, time\nsys.path.insert(0, '.')\n" + CASES[case]
            + "print(json.dumps(out))\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    got = subprocess.run([sys.executable, "-c", prog], cwd=tree, env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", help="an earlier checkout, run alternately and compared")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case and tree (3)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: "
                    + ", ".join(CASES))
    a = ap.parse_args()
    trees = [("this", ROOT)] + ([("before", Path(a.tree))] if a.tree else [])
    for case in a.cases.split(","):
        best: dict[str, dict] = {}
        loads = []
        for _ in range(a.repeat):
            for name, tree in trees:
                loads.append(os.getloadavg()[0])
                got = run(tree, case)
                best[name] = {k: min(v, best.get(name, {}).get(k, v)) for k, v in got.items()}
        print(f"{case} (best of {a.repeat}; 1-min load {min(loads):.1f}-{max(loads):.1f})")
        for name, _ in trees:
            print("  " + name.ljust(7) + "  ".join(f"{k} {v:.3f}" for k, v in best[name].items()))


if __name__ == "__main__":
    main()
