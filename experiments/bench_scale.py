"""Memory at scale: simulating a Llama 3.1 405B-like job on 16,384 H100 stays within budget.

The job: Llama 3.1 405B given 128 layers (126 do not split over 16 stages; see
bench_simulate.py) on 2,048 DGX H100 (16,384 GPUs), tp=8 pp=16 dp=128, interleaved with vpp=2,
mbs=1, gbs=2048 (16 micro-batches per pipeline), bf16, folded (the default).

Each case runs in a fresh process, twice: once plain, for the wall time and the process's
peak RSS (``resource.getrusage``: the kernel's high-water mark, imports and all), and once
under ``tracemalloc``, for the peak of Python allocations made by ``simulate`` itself.
Smaller clusters (same plan, fewer data-parallel replicas) show how memory grows with scale.

    python experiments/bench_scale.py                 # the table, every size
    python experiments/bench_scale.py --check         # exit 1 if 16,384 GPUs is over budget
    python experiments/bench_scale.py --case 2048 --json

The budget (docs/robustness.md): peak RSS <= 1 GiB and simulate's own Python allocations
<= 256 MiB at 16,384 GPUs.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUDGET_RSS_MIB = 1024
BUDGET_TRACED_MIB = 256
NODES = (128, 512, 2048)          # 1,024 / 4,096 / 16,384 GPUs


def make_job(nodes: int):
    from strategies.job import make_job as mk
    from strategies.plan import Plan
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset
    model = replace(model_preset("llama3.1-405b"), num_layers=128,
                    name="llama3.1-405b (128 layers)")
    dp = nodes * 8 // (8 * 16)
    return mk(model, cluster_preset("dgx-h100", nodes),
              Plan(tp=8, pp=16, dp=dp, mbs=1, gbs=16 * dp, schedule="interleaved", vpp=2))


def _rss_now_mib() -> float:
    """Current resident set (Linux /proc), MiB; 0 where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024   # bytes vs KiB


def measure(nodes: int, traced: bool) -> dict:
    """One simulation in this process (call it in a fresh process)."""
    import tracemalloc

    from simulator.simulate import simulate
    job = make_job(nodes)
    before = _rss_now_mib()
    if traced:
        tracemalloc.start()
    t0 = time.perf_counter()
    res = simulate(job)
    wall = time.perf_counter() - t0
    out = {"gpus": job.cluster.num_gpus, "plan": job.plan.short(),
           "simulated_ranks": len(res.simulated_ranks), "events": res.events,
           "step_time_s": res.step_time_s}
    if traced:
        out["traced_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    else:
        out.update(wall_s=wall, rss_before_mib=before, peak_rss_mib=_peak_rss_mib())
    return out


def run_case(nodes: int) -> dict:
    """Both passes, each in a fresh process."""
    row: dict = {}
    for traced in (False, True):
        cmd = [sys.executable, __file__, "--case", str(nodes), "--json", "--pass",
               "traced" if traced else "plain"]
        p = subprocess.run(cmd, check=True, capture_output=True, text=True)
        row.update(json.loads(p.stdout.strip().splitlines()[-1]))
    row["within_budget"] = (row["peak_rss_mib"] <= BUDGET_RSS_MIB
                            and row["traced_peak_mib"] <= BUDGET_TRACED_MIB)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", type=int, choices=NODES, help="one cluster size (nodes)")
    ap.add_argument("--pass", dest="which", choices=("plain", "traced"), help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    ap.add_argument("--check", action="store_true",
                    help="run 16,384 GPUs only; exit 1 if over the memory budget")
    args = ap.parse_args(argv)
    if args.which:
        print(json.dumps(measure(args.case, args.which == "traced")))
        return 0
    sizes = (2048,) if args.check else ((args.case,) if args.case else NODES)
    rows = [run_case(n) for n in sizes]
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(f"budget at 16,384 GPUs: peak RSS <= {BUDGET_RSS_MIB} MiB, simulate's Python "
              f"allocations <= {BUDGET_TRACED_MIB} MiB")
        print(f"{'GPUs':>6} {'sim ranks':>9} {'events':>7} {'wall s':>7} {'RSS before':>10} "
              f"{'peak RSS':>9} {'traced peak':>11} {'step s':>7}  ok")
        for r in rows:
            print(f"{r['gpus']:>6} {r['simulated_ranks']:>9} {r['events']:>7} "
                  f"{r['wall_s']:>7.2f} {r['rss_before_mib']:>7.0f} MiB {r['peak_rss_mib']:>5.0f} MiB"
                  f" {r['traced_peak_mib']:>7.1f} MiB {r['step_time_s']:>7.3f}  "
                  f"{'yes' if r['within_budget'] else 'NO'}")
    return 0 if all(r["within_budget"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
