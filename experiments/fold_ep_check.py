"""DeepSeek-V3's published plan (pp16 dp128 ep64, DualPipe, DeepEP, 256 HGX H800 nodes)
simulated twice: folded inside the expert groups (``simulator.fold_ep``, 16 ranks) and by
the coordinate translations alone (``fold_spec(parts=False)``, 1,024 ranks, the fold before
``fold_ep``). Prints whether the 16 representatives' records are the same, bit for bit,
whether every rank the coordinate fold simulates runs its new representative's timeline,
whether the step figures are equal, and the events and CPU seconds of each run. The unfolded
run (2,048 ranks) is out of reach on a small machine; ``tests/test_fold_ep.py`` compares
folded and unfolded runs of small plans.

    python experiments/fold_ep_check.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import simulator.simulate as sim                                          # noqa: E402
from strategies.hf_config import load_model_arg                           # noqa: E402
from strategies.job import make_job                                       # noqa: E402
from strategies.plan import parse_plan                                    # noqa: E402
from topologies.cluster.arg import parse_cluster_arg                      # noqa: E402

PLAN = ("tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,"
        "recompute_modules=layernorm+moe_act+mla_up_proj,moe_dispatcher=deepep,"
        "schedule=dualpipe,gbs=15360")
FIGURES = ("step_time_s", "engine_end_s", "breakdown_s", "exposed_comm_s", "overlapped_comm_s",
           "bubble_fraction", "bubble_fraction_by_stage", "idle_fraction_by_stage",
           "critical_rank", "peak_activation_bytes")


def main() -> None:
    root = Path(__file__).resolve().parents[1]
    job = make_job(load_model_arg(str(root / "docs/reports/deepseek_v3_model.json")),
                   parse_cluster_arg("hgx-h800:256"), parse_plan(PLAN), framework="hai-llm",
                   dtype="fp8-blockwise")
    c0 = time.process_time()
    new = sim.simulate(job)
    t_new = time.process_time() - c0
    full_fold = sim.fold_spec       # ``simulate`` reads ``fold_spec`` from its module
    sim.fold_spec = lambda j, fold=True, **kw: full_fold(j, fold, parts=False, **kw)
    try:
        c0 = time.process_time()
        old = sim.simulate(job)
        t_old = time.process_time() - c0
    finally:
        sim.fold_spec = full_fold
    mine = set(new.simulated_ranks)
    same = sorted(new.records) == sorted(r for r in old.records if r.rank in mine)
    by: dict[int, list] = {}
    for r in old.records:
        by.setdefault(r.rank, []).append(r._replace(rank=0, peer=0))
    rep_of = {q: rep for rep, ranks in new.rank_map.items() for q in ranks}
    timelines = all(sorted(by[q]) == sorted(by[rep_of[q]]) for q in old.simulated_ranks)
    figures = all(new.metrics[k] == old.metrics[k] for k in FIGURES)
    print(f"coordinates: {old.metrics['fold_note']}\n  {old.events:,} events, {t_old:.1f} CPU s")
    print(f"parts:       {new.metrics['fold_note']}\n  {new.events:,} events, {t_new:.1f} CPU s")
    print(f"records of the {len(mine)} representatives equal: {same}; every rank of the "
          f"coordinate fold runs its representative's timeline: {timelines}; figures equal: "
          f"{figures} (step {new.step_time_s!r} s)")


if __name__ == "__main__":
    main()
