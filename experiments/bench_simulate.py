"""Benchmark of the simulator on two large jobs: events per second, wall time, peak memory.

* GPT-3 175B on 1,024 A100 (128 DGX A100), tp=8 pp=8 dp=16, mbs=1, gbs=1536, 1F1B:
  folded (targets: < 2 s) and unfolded (< 60 s on a 2-core machine).
* Llama 3.1 405B on 16,384 H100 (2,048 DGX H100), tp=8 pp=16 dp=128, interleaved, gbs=2048,
  folded (< 10 s). 126 layers cannot be split over 16 pipeline stages (and 16,384 GPUs leave
  pp a power of two), so the model is given 128 layers (8 per stage, vpp=2: 4 per chunk),
  the balanced equivalent of Meta's 16-stage layout (which drops a layer from the first and
  the last stage for the embedding and the loss).

Each case runs in its own process so that its peak RSS (``resource.getrusage``) is its own.
Beside each case, the same process times bare SimPy (one process yielding 200,000 timeouts)
just before and just after it; ``vs bare`` is the case's events per second over the faster
of the two bare rates, the issue 17 measure of the engine's own overhead. ``vs bare cpu`` is
the same ratio with both rates per CPU second of the process: on a machine shared with other
work, wall time also counts the time the process waited for a core, which the short bare run
and the long case do not suffer alike. ``ops vs`` is the ops simulated (records) per wall
second over bare SimPy's events per second: the engine ends many ops with one queue entry,
so its event rate says little of its cost per op (``report_speed.py``). ``cpu s`` is the
process CPU time of the simulation.
Prints figures; asserts nothing.

    python experiments/bench_simulate.py            # every case
    python experiments/bench_simulate.py --case 175b-folded
    python experiments/bench_simulate.py --case 175b-full --tree /tmp/before   # another checkout
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

# ``--tree DIR``: time another checkout's simulator (e.g. an earlier commit, extracted with
# ``git archive``) with this very harness; it must come first on the path before any import.
_TREE = (sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv[:-1]
         else str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, _TREE)
from simulator.simulate import simulate  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.plan import Plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

CASES = {
    "175b-folded": ("gpt3-175b", 128, True),
    "175b-full": ("gpt3-175b", 128, False),
    "405b-folded": ("llama3.1-405b", 2048, True),
}


def make(case: str):
    name, nodes, fold = CASES[case]
    if name == "gpt3-175b":
        job = make_job(model_preset(name), cluster_preset("dgx-a100", nodes),
                       Plan(tp=8, pp=8, dp=16, mbs=1, gbs=1536, schedule="1f1b"))
    else:
        model = replace(model_preset(name), num_layers=128, name="llama3.1-405b (128 layers)")
        job = make_job(model, cluster_preset("dgx-h100", nodes),
                       Plan(tp=8, pp=16, dp=128, mbs=1, gbs=2048, schedule="interleaved", vpp=2))
    return job, fold


def bare_simpy_rates(n: int = 200_000) -> tuple[float, float]:
    """Events per second of bare SimPy, one process yielding ``n`` timeouts: ``(per wall
    second, per CPU second of this process)``."""
    import simpy
    env = simpy.Environment()

    def proc(env):
        for _ in range(n):
            yield env.timeout(1.0)
    env.process(proc(env))
    t0, c0 = time.perf_counter(), time.process_time()
    env.run()
    return n / (time.perf_counter() - t0), n / (time.process_time() - c0)


def bare_simpy_rate(n: int = 200_000) -> float:
    """Events per wall second of bare SimPy (see ``bare_simpy_rates``)."""
    return bare_simpy_rates(n)[0]


def run_case(case: str) -> dict:
    job, fold = make(case)
    before = bare_simpy_rates()
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(job, fold=fold)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = bare_simpy_rates()
    bare, bare_cpu = max(before[0], after[0]), max(before[1], after[1])
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"case": case, "plan": job.plan.short(), "gpus": job.cluster.num_gpus,
            "simulated_ranks": len(res.simulated_ranks), "events": res.events,
            "records": len(res.records), "wall_s": wall, "cpu_s": cpu,
            "events_per_s": res.events / wall, "bare_simpy_events_per_s": bare,
            "vs_bare": res.events / wall / bare, "ops_vs_bare": len(res.records) / wall / bare,
            "bare_simpy_cpu_events_per_s": bare_cpu, "vs_bare_cpu": res.events / cpu / bare_cpu,
            "peak_rss_mib": rss_mib, "step_time_s": res.step_time_s,
            "analytic_step_time_s": estimate(job).step_time_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", choices=sorted(CASES))
    ap.add_argument("--tree", default=None,
                    help="time the simulator of this checkout instead (an earlier commit)")
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return
    print(f"{'case':<12} {'GPUs':>6} {'sim ranks':>9} {'events':>9} {'wall s':>7} {'cpu s':>6} "
          f"{'events/s':>9} {'vs bare':>7} {'cpu vs':>7} {'ops vs':>7} {'RSS MiB':>8} "
          f"{'step s':>8} "
          f"{'analytic s':>10}")
    for case in CASES:
        out = subprocess.run([sys.executable, __file__, "--case", case], check=True,
                             capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{case:<12} {r['gpus']:>6} {r['simulated_ranks']:>9} {r['events']:>9} "
              f"{r['wall_s']:>7.2f} {r['cpu_s']:>6.2f} {r['events_per_s']:>9.0f} "
              f"{r['vs_bare']:>7.1%} {r['vs_bare_cpu']:>7.1%} {r['ops_vs_bare']:>7.1%} "
              f"{r['peak_rss_mib']:>8.0f} "
              f"{r['step_time_s']:>8.3f} {r['analytic_step_time_s']:>10.3f}")


if __name__ == "__main__":
    main()
