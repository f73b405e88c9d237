"""DualPipe on uneven layer splits: the estimate against the simulation (flows network), the
even split beside each model's uneven layouts (calibration §5.33's small-plan table), and
DeepSeek-V3's compute order at gbs 4,096: the free-communication simulation against the
per-rank order over each copy's chunk times (``estimate.chunk_correction.chunk_times``).

    python experiments/dualpipe_uneven.py            # the small plans (about a minute)
    python experiments/dualpipe_uneven.py --deepseek # also DeepSeek-V3's order (about 40 s)
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DS_PLAN = ("tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,recompute_modules=layernorm+"
           "mla_up_proj+moe_act,moe_dispatcher=deepep,schedule=dualpipe,gbs=4096")


def small_rows():
    """``(label, model, cluster, plans)``: the even split first, then the uneven ones."""
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset
    a100, h800 = cluster_preset("dgx-a100", 1), cluster_preset("hgx-h800", 2)
    llama = model_preset("llama3-8b")
    l8 = "tp=1,pp=8,mbs=1,gbs=32,schedule=dualpipe"
    l16 = "tp=1,pp=4,mbs=1,gbs=32,schedule=dualpipe"
    ds = "pp=4,ep=2,zero=1,schedule=dualpipe,gbs=32"

    def dsm(n):
        return replace(model_preset("deepseek-v3"), name="ds-small", num_layers=n,
                       first_k_dense_replace=1, vocab_size=32000, seq_length=1024)
    m16 = replace(llama, num_layers=16, seq_length=512, vocab_size=32000)
    return [
        ("llama3-8b pp 8", a100, [(llama, l8), (llama, l8 + ",layout=Et*3|t*5|(t*4|)*4,t*5|t*3L"),
                                  (llama, l8 + ",first_stage_layers=2,last_stage_layers=6")]),
        ("DeepSeek-V3 layers pp 4", h800, [(dsm(8), ds), (dsm(9), ds + ",layout=Et|t*3|t*3|t*2mL"),
                                           (dsm(10), ds + ",first_stage_layers=3,last_stage_layers=1")]),
        ("llama3-8b 16 layers pp 4", a100, [(m16, l16), (m16, l16 + ",layout=Et*2|t*5|t*6|t*3L"),
                                            (m16, l16 + ",layout=Et*6|t*2|t*2|t*6L"),
                                            (m16, l16 + ",first_stage_layers=2,last_stage_layers=6")]),
    ]


def main(argv: list[str]) -> int:
    from simulator.simulate import simulate
    from strategies.estimate.chunk_correction import chunk_times
    from strategies.estimate.scalar import estimate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.schedules.analysis import simulate_free_comm
    for label, cl, plans in small_rows():
        for model, plan in plans:
            job = make_job(model, cl, parse_plan(plan))
            e, s = estimate(job).step_time_s, simulate(job).step_time_s
            print(f"{label:<26} {'/'.join(map(str, job.layout.layers_per_stage)):<18} "
                  f"estimate {e:.5f} s  simulated {s:.5f} s  {e / s - 1:+.2%}")
    if "--deepseek" in argv:
        from strategies.presets import model_preset
        from topologies.cluster import cluster_preset
        job = make_job(model_preset("deepseek-v3"), cluster_preset("hgx-h800", 256),
                       parse_plan(DS_PLAN + ",layout=Et*3|(t*4|)*14,t*2mL"),
                       dtype="fp8-blockwise", framework="hai-llm")
        p = job.plan
        order = simulate_free_comm(p.schedule, p.pp, job.num_microbatches, p.vpp, 0.0, 0.0,
                                   chunk_times=chunk_times(job))
        free = simulate(job, free_comm=True).step_time_s
        print(f"DeepSeek-V3 61 layers, gbs 4096: estimate {estimate(job).step_time_s:.3f} s, "
              f"order over each copy's chunks {order:.3f} s, free-communication simulation "
              f"{free:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
