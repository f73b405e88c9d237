"""A search worker does not keep what its simulations leave behind (simulator/search/
executors.py ``evaluate``): a simulation leaves cyclic garbage that the paused collector
(``simulator.engine.gc_pause``) promotes to the oldest generation, so ``evaluate`` collects
it; figures are unchanged."""
from __future__ import annotations

import gc

from simulator.extend import simulate_figures
from simulator.search.executors import evaluate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


def test_evaluate_leaves_no_cyclic_garbage_and_the_same_figures():
    m, cl = model_preset("qwen3-30b-a3b"), cluster_preset("dgx-h100", 2)
    plan = make_job(m, cl, parse_plan("tp=2,pp=2,dp=4,ep=8,etp=1,mbs=1,sp=true"),
                    global_batch=16).plan
    gc.collect()
    simulate_figures(make_job(m, cl, plan))
    assert gc.collect() > 0              # what one simulation leaves behind
    a = evaluate(m, cl, "bf16", None, None, False, plan)
    assert gc.collect() == 0
    b = evaluate(m, cl, "bf16", None, None, False, plan)
    assert {k: v for k, v in a.items() if k != "wall_s"} == \
        {k: v for k, v in b.items() if k != "wall_s"}
