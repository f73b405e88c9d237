"""The context-parallel plans of ``tests/test_cp_bound.py`` (``CASES``, global batch 64, two
nodes): the scalar estimate, the contention-free simulation and the lower bound (seconds),
and the estimate's ``cp_comm`` and ``tp_comm`` (docs/calibration.md §5.110). About 10 s.
``--reference``: instead, every shipped reference case with ``cp > 1``: measured, simulated
(``paraplan validate``'s rule, ``simulated_step_time``) and estimated seconds, and the
estimate's ``cp_comm`` as a share of its step. About 1 min.

    python experiments/cp_ring_agreement.py [--reference]
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reference() -> None:
    """Measured and simulated seconds of every reference case with context parallelism."""
    from simulator.studies.validate import simulated_step_time
    from strategies.estimate.scalar import estimate
    from strategies.reference.cases import reference_cases
    seen = set()
    for c in reference_cases():
        if c.job is None or c.job.plan.cp <= 1 or c.id in seen:
            continue
        seen.add(c.id)
        s, _ = simulated_step_time(c.job)
        e = estimate(c.job)
        print(f"{c.id:50s} measured {c.measured_step_s:9.3f} simulated {s:9.4f} "
              f"{100 * (s / c.measured_step_s - 1):+7.2f} % estimate {e.step_time_s:9.4f} "
              f"cp_comm {100 * e.breakdown_s['cp_comm'] / e.step_time_s:5.2f} %")


def main() -> None:
    if "--reference" in sys.argv[1:]:
        return reference()
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.estimate.scalar import estimate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from strategies.search.plan_rows import columns_from_plans
    from tests.test_cp_bound import CASES
    from topologies.cluster import cluster_preset
    print("model         plan                                             estimate  simulated"
          "  bound   est/sim-1  cp_comm  tp_comm")
    for model, cluster, plan in CASES:
        m, cl = model_preset(model), cluster_preset(cluster, 2)
        job = make_job(m, cl, parse_plan(plan), global_batch=64)
        b = float(step_time_lower_bound(m, cl, "bf16", columns_from_plans([job.plan]))[0])
        e = estimate(job)
        t = simulate(job, network="contention-free").step_time_s
        print(f"{model:13s} {plan:48s} {e.step_time_s:8.4f} {t:9.4f} {b:7.4f} "
              f"{100 * (e.step_time_s / t - 1):+8.2f} % {e.breakdown_s['cp_comm']:7.4f} "
              f"{e.breakdown_s['tp_comm']:7.4f}")


if __name__ == "__main__":
    main()
