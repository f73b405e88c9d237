#!/usr/bin/env python
"""How many pipeline messages a step exposes: the estimate's count against the simulation's
(docs/calibration.md §5.14 for interleaved, §5.21 for 1F1B).

Run (a few seconds):

    python experiments/p2p_exchange_count.py

Each plan is a pipeline alone on one node (tp 1, dp 1, one GPU per stage: only the pipeline's
messages use NVLink; a 48-layer GPT-1.7B with a 1,024-token untied vocabulary, so the stages
are nearly even and no tied all-reduce moves). The step is run at two NVLink bandwidths; the
step's change over the change of one message's time ``t_p2p`` (``comm.p2p_time``) is the number
of messages on the critical path. The estimate charges ``2·exchange_rounds``
(``m·fill + p − 1`` rounds, two blocking exchanges each); the columns give both counts and
``m·v`` (the F-B pairs of a rank); interleaved's ``exposed_messages`` is ``m·v + pp·v + pp − 3``.

The second table is 1F1B over a grid of ``(p, m)`` with the slowest rank forced by the layout
(``layers_per_stage``: one layer more on the first, a middle or the last rank, a few ms
against a message's 0.03-0.3 ms, so the critical path keeps its rank at both bandwidths;
``even``: the even split, where the end ranks' embedding and LM head make them slower than
the middle ones by less than the messages' difference, so the count is between two paths).
``closed form`` is ``OneFOneB.bottleneck_messages`` for the slowest rank's kind:
``m + 2p − 3`` (last), ``2m + 2p − 5`` (middle), ``m + 2p − 5 + min(m, p)`` (first), ``2p − 2``
at ``m = 1``. The estimate takes the largest of the three paths (``terms.messages.ranked_messages``),
on an uneven layout with the real stages' times (``estimate.stage_correction.messages_shift``).
The third table measures ZB-H1, charged 1F1B's balanced count ``2m + 2p − 5``
(``ZBH1.exposed_messages``, docs/calibration.md §5.22), and DeepSpeed's lock step, charged
by the kind of rank that bounds it (``DeepSpeed1F1B.bottleneck_messages``, §5.28; its grid by
kind: ``experiments/deepspeed_engine.py``).

``--plans`` (a minute) counts instead the messages of a few plans with data and tensor
parallelism, doubling every pipeline send's bytes (``doubled_sends``).
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
from strategies.framework import get_profile  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from strategies.schedules import get_schedule  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

MODEL = dataclasses.replace(model_preset("gpt-1.7b"), num_layers=48, seq_length=2048,
                            vocab_size=1024, tie_word_embeddings=False)
PLANS = [("1f1b", 1, 4, 8), ("1f1b", 1, 4, 16), ("interleaved", 2, 2, 8),
         ("interleaved", 2, 4, 8), ("interleaved", 2, 4, 16), ("interleaved", 3, 4, 8),
         ("interleaved", 6, 4, 8), ("interleaved", 4, 4, 4), ("interleaved", 2, 8, 8)]
BANDWIDTHS = (300e9, 30e9)


#: 1F1B grid: pipeline ranks, micro-batches, the rank given one layer more (None: even)
GRID_PP = (2, 3, 4, 6, 8)
GRID_M = (1, 2, 3, 4, 8, 16)
KINDS = (("first", 0), ("middle", 1), ("last", 2), ("even", None))
#: ZB-H1 and DeepSpeed's lock step: (schedule, p, m, rank given one layer more)
OPEN = [(s, pp, m, None) for s in ("zb-h1", "deepspeed-1f1b") for pp in (2, 4, 8)
        for m in (8, 16)] + [("zb-h1", 8, 16, 0), ("zb-h1", 8, 16, 1), ("zb-h1", 8, 16, 2)]


def layers(pp: int, rank: int | None) -> str:
    """``layers_per_stage`` with one layer moved onto ``rank`` (0 first, 1 the middle rank
    1, 2 the last) from its neighbour; "" for the even split."""
    if rank is None:
        return ""
    n = [MODEL.num_layers // pp] * pp
    heavy = {0: 0, 1: 1, 2: pp - 1}[rank]
    n[heavy] += 1
    n[heavy + 1 if heavy < pp - 1 else heavy - 1] -= 1
    return ",layers_per_stage=" + "/".join(map(str, n))


def counts(sched: str, v: int, pp: int, m: int, extra: str = "",
           bandwidths: tuple[float, float] = BANDWIDTHS, model=None,
           blocking: bool = True) -> tuple[float, float]:
    """(estimate, simulation): exposed messages per step of the plan (``extra``: more plan
    fields), the step's change between the two NVLink ``bandwidths`` (bytes/s) over that of
    one message's time. ``blocking``: Megatron-Core with blocking batched calls
    (``overlap_p2p_comm`` off, the order these counts were first measured in); False: its
    default, interleaving with ``overlap_p2p_comm`` (docs/calibration.md §5.68)."""
    fw = None    # other schedules: no stack's limits, as the counts were first measured
    if sched == "interleaved":
        fw = get_profile("megatron-core")
        fw = dataclasses.replace(fw, overlap_p2p_comm=False) if blocking else fw
    out = []
    for bw in bandwidths:
        cl = dataclasses.replace(cluster_preset("dgx-a100", 1), intra_node_bandwidth=bw,
                                 gpus_per_node=pp)
        plan = f"tp=1,pp={pp},dp=1,mbs=1,gbs={m},schedule={sched}" + (f",vpp={v}" if v > 1
                                                                      else "") + extra
        job = make_job(MODEL if model is None else model, cl, parse_plan(plan),
                       framework=fw)
        # messages only: the gradient norm's all-reduce (§5.202) off, its bytes term moves
        # with the swept bandwidth without being a message
        f = job.framework
        job = dataclasses.replace(job, framework=dataclasses.replace(
            f, step=dataclasses.replace(f.step, norm_barrier=False)))
        tau = float(cm.p2p_time(stage_costs(job).p2p_bytes, cl, 1))
        out.append((estimate(job).step_time_s, simulate(job).step_time_s, tau))
    (e1, s1, t1), (e2, s2, t2) = out
    return (e2 - e1) / (t2 - t1), (s2 - s1) / (t2 - t1)


def doubled_sends(job) -> tuple[float, float]:
    """(estimate, simulation): messages of ``job`` in units of the estimate's message time
    (``comm.p2p_time`` at the pipeline's stride), the simulation's from doubling the bytes of
    every pipeline send (the compiler's ``Send`` ops; nothing else changes) on the
    contention-free network: a plan with data parallelism and tensor parallelism, where the
    bandwidth cannot be changed for the pipeline alone."""
    import simulator.program.pipeline_p2p as pipeline_p2p
    from simulator.program.ops import Send
    p = job.plan
    c = stage_costs(job)
    stride = p.tp * p.cp * p.dp
    tau = float(cm.p2p_time(c.p2p_bytes, job.cluster, stride))
    extra = float(cm.p2p_time(2 * c.p2p_bytes, job.cluster, stride)) - tau
    steps = []
    for factor in (1.0, 2.0):
        def scaled(factor=factor, **kw):
            kw["nbytes"] = kw["nbytes"] * factor
            return Send(**kw)
        pipeline_p2p.Send = scaled
        try:
            steps.append(simulate(job, network="contention-free").step_time_s)
        finally:
            pipeline_p2p.Send = Send
    return estimate(job).breakdown_s["pp_comm"] / tau, (steps[1] - steps[0]) / extra


def plans_table() -> None:
    """The doubled-send count of the plans docs/calibration.md §5.21 quotes."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), "tests"))
    from test_zero_overlap import DSV3_8, MIXTRAL4
    g = model_preset("gpt-18.4b")
    rows = [(MIXTRAL4, "dgx-h100", 2, "pp=2,ep=4,zero=2,gbs=64"),
            (g, "dgx-a100", 8, "tp=4,pp=2,dp=8,mbs=4,gbs=128,recompute=selective,sp=true"),
            (g, "dgx-a100", 8, "tp=4,pp=4,dp=4,mbs=4,gbs=128,recompute=selective,sp=true"),
            (DSV3_8, "hgx-h800", 2, "pp=4,ep=4,zero=1,gbs=32")]
    print("\n| model | cluster | plan | estimate | simulation (sends doubled) |")
    print("|---|---|---|---:|---:|")
    for model, preset, nodes, plan in rows:
        job = make_job(model, cluster_preset(preset, nodes), parse_plan(plan))
        e, s = doubled_sends(job)
        print(f"| {model.name} | {preset}:{nodes} | {plan} | {e:.2f} | {s:.2f} |")


def main() -> int:
    if "--plans" in sys.argv[1:]:
        plans_table()
        return 0
    print("| schedule | v | p | m | m·v | estimate | simulation |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for sched, v, pp, m in PLANS:
        e, s = counts(sched, v, pp, m)
        print(f"| {sched} | {v} | {pp} | {m} | {m * v} | {e:.2f} | {s:.2f} |")
    one = get_schedule("1f1b")
    print("\n| 1F1B p | m | slowest rank | closed form | estimate | simulation |")
    print("|---:|---:|---|---:|---:|---:|")
    for pp in GRID_PP:
        for m in GRID_M:
            for name, k in KINDS:
                if k == 1 and pp < 3:
                    continue
                e, s = counts("1f1b", 1, pp, m, layers(pp, k))
                cf = "-" if k is None else f"{float(one.bottleneck_messages(m, pp, 1, k)):.0f}"
                print(f"| {pp} | {m} | {name} | {cf} | {e:.2f} | {s:.2f} |")
    print("\n| schedule | p | m | slowest rank | estimate | simulation 300/30 GB/s | "
          "simulation 10/3 GB/s |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for sched, pp, m, k in OPEN:
        e, s = counts(sched, 1, pp, m, layers(pp, k))
        _, s2 = counts(sched, 1, pp, m, layers(pp, k), bandwidths=(10e9, 3e9))
        name = next(n for n, kk in KINDS if kk == k)
        print(f"| {sched} | {pp} | {m} | {name} | {e:.2f} | {s:.2f} | {s2:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
