"""The scalar estimate of uneven pipeline layouts against the contention-free simulation
(docs/calibration.md §5.93).

``--rows``: every shipped reference row whose layout is uneven (a layout string, layer
slots, first/last stage layers) and that has no expert all-to-all (dense, or ep 1): the
estimate, the contention-free simulation of the same job, their gap, and with ``--toggle``
the seconds §5.88's end collectives (``tp_end_collectives``) add to each (rows with tp > 1
on a stack that runs them), then the median and largest |gap|.

``--grid``: the monotonicity grid of ``tests/test_uneven_correction.py`` (Llama 3 8B cut to
``pp·vpp·k`` less the slots, pp 2/4, vpp 1-3, tp 1-8, SP on/off, 1-3 micro-batches per rank,
the embedding and/or the loss a slot): along the chain no end collectives, then §5.88's with
1, 3, 5 loss all-reduces per token (only the end stages get longer), how many plans' estimate
gets shorter somewhere and by how much at most; ``--zero 2``: the same with ZeRO-2 (the plans
with dp > 1 reduce-scatter under the pipeline, §5.93's finding).

    python -m experiments.uneven_correction --rows [--toggle] [--only SUBSTR]
    python -m experiments.uneven_correction --grid [--zero 2]
"""
from __future__ import annotations

import argparse
import itertools
import statistics
from dataclasses import replace

from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.reference.cases import reference_cases
from topologies.cluster import cluster_preset


def _sim(job) -> float:
    from simulator.simulate import simulate
    return simulate(job, network="contention-free").step_time_s


def rows(toggle: bool, only: str | None) -> None:
    """Print each uneven, all-to-all-free reference row's estimate and simulation."""
    gaps = []
    for c in reference_cases():
        j = c.job
        if j is None or j.plan.pp < 2 or j.layout.uniform or (only and only not in c.id):
            continue
        if j.model.is_moe and j.plan.ep > 1:
            continue
        e, s = estimate(j).step_time_s, _sim(j)
        gaps.append(e / s - 1)
        line = (f"{c.id:52} {j.plan.schedule:12} est {e:9.4f} sim {s:9.4f} "
                f"est/sim-1 {e / s - 1:+.4f}")
        if toggle and j.framework.tp_end_collectives and j.plan.tp > 1:
            off = replace(j, framework=replace(j.framework, tp_end_collectives=False))
            line += (f"  ends: est {(e - estimate(off).step_time_s) * 1e3:+8.2f} ms"
                     f" sim {(s - _sim(off)) * 1e3:+8.2f} ms")
        print(line, flush=True)
    a = [abs(g) for g in gaps]
    if a:
        print(f"{len(a)} rows: |est/sim - 1| median {statistics.median(a):.4f}, "
              f"max {max(a):.4f}, mean {statistics.fmean(a):.4f}")


def grid(zero: int = 0) -> None:
    """Print how many plans of the monotonicity grid (ZeRO stage ``zero``) get shorter along
    the chain."""
    chain = [replace(MEGATRON_CORE, tp_end_collectives=False)] + [
        replace(MEGATRON_CORE, tp_loss_allreduces=(1,) * n) for n in (1, 3, 5)]
    built = shorter = 0
    worst = 0.0
    for pp, vpp, k, tp, sp, m, slots in itertools.product(
            (2, 4), (1, 2, 3), (1, 2), (1, 2, 4, 8), (False, True), (1, 2, 3),
            ("E", "L", "EL")):
        nodes, dp = max(1, tp * pp // 8), max(1, 8 // (tp * pp))
        spec = (f"tp={tp},pp={pp},vpp={vpp},gbs={m * pp * dp},mbs=1,zero={zero},"
                f"sp={str(sp).lower()},schedule={'interleaved' if vpp > 1 else '1f1b'},"
                f"account_embedding={str('E' in slots).lower()},"
                f"account_loss={str('L' in slots).lower()}")
        try:
            mod = replace(model_preset("llama3-8b"), num_layers=pp * vpp * k - len(slots))
            steps = [estimate(make_job(mod, cluster_preset("dgx-h100", nodes),
                                       parse_plan(spec), framework=fw)).step_time_s
                     for fw in chain]
        except SpecError:
            continue
        built += 1
        drop = min(b - a for a, b in zip(steps, steps[1:]))
        if drop < -1e-12 * steps[0]:
            shorter += 1
            worst = min(worst, drop)
    print(f"{built} plans built; {shorter} get shorter along the chain "
          f"(largest drop {abs(worst) * 1e3:.3f} ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", action="store_true", help="the reference rows (simulates each)")
    ap.add_argument("--toggle", action="store_true", help="with --rows: §5.88 on/off")
    ap.add_argument("--only", default=None, help="with --rows: ids containing this text")
    ap.add_argument("--grid", action="store_true", help="the monotonicity grid")
    ap.add_argument("--zero", type=int, default=0, help="with --grid: the ZeRO stage")
    a = ap.parse_args()
    if not (a.rows or a.grid):
        ap.error("give --rows and/or --grid")
    if a.rows:
        rows(a.toggle, a.only)
    if a.grid:
        grid(a.zero)


if __name__ == "__main__":
    main()
