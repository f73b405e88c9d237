"""A search worker does not keep what its simulations leave behind: a simulation leaves no
cyclic garbage (the engine and the network break their cycles when a run ends:
``simulator.engine.core.run``, ``FlowNetwork.close``), so ``simulator.search.executors.
evaluate`` needs no collection of its own (before, a worker grew 12 MB a simulation on
Qwen3-235B-A22B plans: the collector paused by ``gc_pause`` left each run's cycles in the
oldest generation); figures are unchanged."""
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
    simulate_figures(make_job(m, cl, plan))  # a first run: its imports' one-time garbage
    gc.collect()
    a = evaluate(m, cl, "bf16", None, None, False, plan)
    assert gc.collect() == 0             # folded MoE plan: 578 objects before the fix
    b = evaluate(m, cl, "bf16", None, None, False, plan)
    assert gc.collect() == 0
    assert {k: v for k, v in a.items() if k != "wall_s"} == \
        {k: v for k, v in b.items() if k != "wall_s"}
