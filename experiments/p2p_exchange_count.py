#!/usr/bin/env python
"""How many pipeline messages a step exposes: the estimate's count against the simulation's
(docs/calibration.md §5.14, the lead left open).

Run (a few seconds):

    python experiments/p2p_exchange_count.py

Each plan is a pipeline alone on one node (tp 1, dp 1, one GPU per stage: only the pipeline's
messages use NVLink; a 48-layer GPT-1.7B with a 1,024-token untied vocabulary, so the stages
are nearly even and no tied all-reduce moves). The step is run at two NVLink bandwidths; the
step's change over the change of one message's time ``t_p2p`` (``comm.p2p_time``) is the number
of messages on the critical path. The estimate charges ``2·exchange_rounds``
(``m·fill + p − 1`` rounds, two blocking exchanges each); the columns give both counts and
``m·v`` (the F-B pairs of a rank); interleaved's ``exposed_messages`` is ``m·v + pp·v + pp − 3``.
"""
from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.simulate import simulate  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

MODEL = dataclasses.replace(model_preset("gpt-1.7b"), num_layers=48, seq_length=2048,
                            vocab_size=1024, tie_word_embeddings=False)
PLANS = [("1f1b", 1, 4, 8), ("1f1b", 1, 4, 16), ("interleaved", 2, 2, 8),
         ("interleaved", 2, 4, 8), ("interleaved", 2, 4, 16), ("interleaved", 3, 4, 8),
         ("interleaved", 6, 4, 8), ("interleaved", 4, 4, 4), ("interleaved", 2, 8, 8)]
BANDWIDTHS = (300e9, 30e9)


def counts(sched: str, v: int, pp: int, m: int) -> tuple[float, float]:
    """(estimate, simulation): exposed messages per step of the plan."""
    out = []
    for bw in BANDWIDTHS:
        cl = dataclasses.replace(cluster_preset("dgx-a100", 1), intra_node_bandwidth=bw,
                                 gpus_per_node=pp)
        plan = f"tp=1,pp={pp},dp=1,mbs=1,gbs={m},schedule={sched}" + (f",vpp={v}" if v > 1
                                                                      else "")
        job = make_job(MODEL, cl, parse_plan(plan))
        tau = float(cm.p2p_time(stage_costs(job).p2p_bytes, cl, 1))
        out.append((estimate(job).step_time_s, simulate(job).step_time_s, tau))
    (e1, s1, t1), (e2, s2, t2) = out
    return (e2 - e1) / (t2 - t1), (s2 - s1) / (t2 - t1)


def main() -> int:
    print("| schedule | v | p | m | m·v | estimate | simulation |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for sched, v, pp, m in PLANS:
        e, s = counts(sched, v, pp, m)
        print(f"| {sched} | {v} | {pp} | {m} | {m * v} | {e:.2f} | {s:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
