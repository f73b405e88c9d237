"""Uneven pipeline layouts and mixed clusters: the scalar estimate against the
contention-free simulation of the same job, plan by plan (docs/calibration.md §5.93,
§5.102): zero-bubble orders, DualPipe, MoE with expert parallelism (with and without
``ep_overlap``), a mixed H100+A100 cluster, ZeRO-1/2/3.

    python experiments/uneven_tail_gaps.py            # 62 plans, about 20 s
    python experiments/uneven_tail_gaps.py --only zb  # the rows whose name holds "zb"
    python experiments/uneven_tail_gaps.py --time 15  # ms per scalar step (step_arrays),
                                                      # best of 15, by ZeRO stage

Columns: the estimate, the simulation (``network="contention-free"``), est/sim − 1, the
estimate's data-parallel tail (``dp_comm`` + ``optimizer``), and est/sim − 1 had the tail
been §5.93's real one (``estimate_arrays`` again with the estimate's own pipeline part as
``pipe_span`` and the layout's layers per kind of rank, ``scalar.tail_arrays``, §5.112: what
``scalar._real_tail`` does where it applies, so equal to the estimate there), and the
search's lower bound over the simulation and over the estimate (``lower_bound.step_time_lower_bound`` of the plan's arrays; above 1 over the simulation the
search could prune the plan wrongly), and the search's array estimate over the simulation
(``arrays_of``: the analytic score the search orders a space by). Seconds.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Llama 3 8B cut to 16 layers, DeepSeek-V3's layer at 8 layers (one dense first),
#: Mixtral 8x7B at 8 layers
DENSE_LAYERS, MOE_LAYERS = 16, 8
U4 = "first_stage_layers=2,last_stage_layers=6"          # pp 4 over 16 layers: 2/4/4/6
U2 = "first_stage_layers=6,last_stage_layers=10"         # pp 2 over 16 layers
SLOTS = "account_embedding=true,account_loss=true"
IL = "vpp=2,schedule=interleaved"

#: name | model kind | cluster | plan without its ZeRO stage (each row run with ZeRO-1 and 2;
#: ZeRO-3 does not combine with pipelining); U4/U2/SLOTS/IL as above
TABLE = f"""
zb-h1 pp4 uneven | dense | dgx-h100:1 | pp=4,dp=2,mbs=1,gbs=16,schedule=zb-h1,{U4}
zb-h1 pp4 slots | dense14 | dgx-h100:1 | pp=4,dp=2,mbs=1,gbs=16,schedule=zb-h1,{SLOTS}
zb-v pp2 uneven | dense | dgx-h100:1 | pp=2,dp=4,vpp=2,mbs=1,gbs=32,schedule=zb-v,{U2}
zb-v pp2 slots | dense14 | dgx-h100:1 | pp=2,dp=4,vpp=2,mbs=1,gbs=32,schedule=zb-v,{SLOTS}
1f1b pp4 uneven (covered) | dense | dgx-h100:1 | pp=4,dp=2,mbs=1,gbs=16,{U4}
dualpipe pp4 uneven | dense | dgx-h100:1 | pp=4,dp=2,mbs=1,gbs=16,schedule=dualpipe,{U4}
dualpipe pp4 reversed | dense | dgx-h100:1 | pp=4,dp=2,mbs=1,gbs=16,schedule=dualpipe,\
first_stage_layers=6,last_stage_layers=2
dualpipe pp4 slots | dense14 | dgx-h100:1 | pp=4,dp=2,mbs=1,gbs=16,schedule=dualpipe,{SLOTS}
dualpipe pp2 uneven gbs32 | dense | dgx-h100:1 | pp=2,dp=4,mbs=1,gbs=32,schedule=dualpipe,{U2}
dualpipev pp4 uneven | dense | dgx-h100:1 | pp=4,dp=2,mbs=1,gbs=16,schedule=dualpipev,{U4}
dualpipev pp2 slots | dense14 | dgx-h100:1 | pp=2,dp=4,vpp=2,mbs=1,gbs=32,schedule=dualpipev,\
{SLOTS}
moe 1f1b pp2 ep8 uneven | moe | hgx-h800:2 | pp=2,dp=8,ep=8,mbs=1,gbs=32,\
first_stage_layers=3,last_stage_layers=5
moe interleaved pp2 ep8 uneven | moe | hgx-h800:2 | pp=2,dp=8,ep=8,mbs=1,gbs=32,{IL},\
first_stage_layers=2,last_stage_layers=6
moe ep_overlap pp2 ep8 uneven | moe | hgx-h800:2 | pp=2,dp=8,ep=8,mbs=1,gbs=32,{IL},\
ep_overlap=true,first_stage_layers=2,last_stage_layers=6
moe dualpipe pp4 ep8 uneven | moe | hgx-h800:2 | pp=4,dp=4,ep=4,mbs=1,gbs=32,\
schedule=dualpipe,first_stage_layers=1,last_stage_layers=3
moe 1f1b pp4 ep2 dense-first | moe | hgx-h800:2 | pp=4,ep=2,mbs=1,gbs=32
moe 1f1b pp4 ep2 uneven | moe | hgx-h800:2 | pp=4,ep=2,mbs=1,gbs=32,\
first_stage_layers=1,last_stage_layers=3
moe 1f1b pp4 ep2 reversed | moe | hgx-h800:2 | pp=4,ep=2,mbs=1,gbs=32,\
first_stage_layers=3,last_stage_layers=1
moe interleaved pp4 ep2 dense-first | moe | hgx-h800:2 | pp=4,ep=2,mbs=1,gbs=32,{IL}
moe ep_overlap pp4 ep2 dense-first | moe | hgx-h800:2 | pp=4,ep=2,mbs=1,gbs=32,{IL},\
ep_overlap=true
moe interleaved pp4 ep4 dense-first | moe | hgx-h800:2 | pp=4,ep=4,mbs=1,gbs=32,{IL}
moe zb-h1 pp4 ep2 dense-first | moe | hgx-h800:2 | pp=4,ep=2,mbs=1,gbs=32,schedule=zb-h1
mixtral 1f1b pp2 ep4 uneven | mixtral | dgx-h100:2 | pp=2,ep=4,mbs=1,gbs=64,\
first_stage_layers=2,last_stage_layers=6
mixtral 1f1b pp2 ep2 uneven | mixtral | dgx-h100:2 | pp=2,ep=2,mbs=1,gbs=64,\
first_stage_layers=6,last_stage_layers=2
mixtral interleaved pp2 ep4 uneven | mixtral | dgx-h100:2 | pp=2,ep=4,mbs=1,gbs=64,{IL},\
first_stage_layers=2,last_stage_layers=6
moe zb-h1 pp2 ep8 uneven | moe | hgx-h800:2 | pp=2,dp=8,ep=8,mbs=1,gbs=32,schedule=zb-h1,\
first_stage_layers=3,last_stage_layers=5
mixed h100+a100 1f1b pp2 uneven | dense | dgx-h100:1+dgx-a100:1 | pp=2,dp=8,mbs=1,gbs=32,{U2}
mixed h100+a100 1f1b pp2 even | dense | dgx-h100:1+dgx-a100:1 | pp=2,dp=8,mbs=1,gbs=32
mixed h100+a100 interleaved pp2 uneven | dense | dgx-h100:1+dgx-a100:1 | pp=2,dp=8,mbs=1,\
gbs=32,{IL},{U2}
mixed h100+a100 zb-h1 pp2 uneven | dense | dgx-h100:1+dgx-a100:1 | pp=2,dp=8,mbs=1,gbs=32,\
schedule=zb-h1,{U2}
"""

#: (name, model kind, cluster, plan)
PLANS: list[tuple[str, str, str, str]] = [
    (f"{name} z{z}", kind, cluster, f"{plan},zero={z}")
    for z in (1, 2)
    for name, kind, cluster, plan in (
        [x.strip() for x in line.split("|")]
        for line in TABLE.replace("\\\n", "").strip().splitlines())]
PLANS += [  # ZeRO-3 without a pipeline: every stage even, no uneven tail (the control)
    ("no pp zero3 (control)", "dense", "dgx-h100:1", "dp=8,mbs=1,gbs=16,zero=3"),
    ("mixed h100+a100 no pp zero3", "dense", "dgx-h100:1+dgx-a100:1",
     "dp=16,mbs=1,gbs=32,zero=3")]


def model_of(kind: str):
    """The cut model of ``kind`` (``dense``/``dense14``: Llama 3 8B; ``moe``: DeepSeek-V3's
    layer)."""
    from strategies.presets import model_preset
    if kind == "mixtral":            # every layer MoE (DeepSeek-V3's first is dense)
        return replace(model_preset("mixtral-8x7b"), num_layers=8,
                       seq_length=1024)
    if kind.startswith("dense"):      # dense14: two layers fewer, for the embedding/loss slots
        return replace(model_preset("llama3-8b"), seq_length=2048,
                       num_layers=DENSE_LAYERS - (2 if kind == "dense14" else 0))
    return replace(model_preset("deepseek-v3"), num_layers=MOE_LAYERS, first_k_dense_replace=1,
                   num_nextn_predict_layers=0, seq_length=1024)


def job_of(kind: str, cluster: str, plan: str):
    """The job of one row (bf16)."""
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from topologies.cluster import parse_cluster_arg
    return make_job(model_of(kind), parse_cluster_arg(cluster), parse_plan(plan), dtype="bf16")


def with_real_span(job) -> float:
    """The scalar step of ``job`` with the data-parallel tail of its own pipeline part and
    layers (§5.93's and §5.112's rule, ``scalar._real_tail``, applied whatever the plan),
    seconds."""
    from strategies.estimate.analytic import estimate_arrays
    from strategies.estimate.scalar import rank_fields, step_arrays, tail_arrays
    from strategies.estimate.stage_cost_memo import StageCostMemo
    costs = StageCostMemo(job)
    r = step_arrays(job, costs)
    pp_comm, tail = float(r["pp_comm"]), float(r["dp_comm"]) + float(r["optimizer"])
    pipe = float(r["step_time_s"]) - pp_comm - tail
    again = estimate_arrays(job.model, job.cluster, job.dtype, tail_arrays(job),
                            job.framework, job.system, rank_fields(job, None, costs),
                            pipe_span=pipe)
    return pipe + pp_comm + float(again["dp_comm"]) + float(again["optimizer"])


def bound_of(job) -> float:
    """The search's lower bound of ``job``'s plan, seconds: ``PlanArrays.from_plans``, every
    field of the plan (the search space's short columns leave out the expert switches such
    as ``ep_overlap``, which a search carries only where ``--fix`` sets them)."""
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.plan_arrays import PlanArrays
    return float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                       PlanArrays.from_plans([job.plan]))[0])


def arrays_of(job) -> float:
    """The search's array estimate of ``job``'s plan (``estimate_arrays`` of the plan's own
    arrays, the layout's ranks priced by ``plan_arrays.rank_layers``), seconds."""
    from strategies.estimate.analytic import estimate_arrays
    from strategies.plan_arrays import PlanArrays
    return float(estimate_arrays(job.model, job.cluster, job.dtype,
                                 PlanArrays.from_plans([job.plan]))["step_time_s"][0])


def row(kind: str, cluster: str, plan: str
        ) -> tuple[float, float, float, float, float, float] | str:
    """(estimate, contention-free simulation, estimate's dp tail, the estimate with §5.93's
    real tail, the search's lower bound, the search's array estimate) seconds, or why
    not."""
    from simulator.simulate import simulate
    from strategies.errors import SpecError
    from strategies.estimate.scalar import estimate
    try:
        job = job_of(kind, cluster, plan)
        e = estimate(job)
        s = simulate(job, network="contention-free")
    except SpecError as err:
        return f"refused: {err}"
    real = with_real_span(job) if job.plan.pp > 1 else e.step_time_s
    return (e.step_time_s, s.step_time_s,
            e.breakdown_s["dp_comm"] + e.breakdown_s["optimizer"], real, bound_of(job),
            arrays_of(job))


def timing(repeat: int, only: str = "") -> dict[str, float]:
    """Milliseconds per ``scalar.step_arrays`` of the pipelined single-GPU-type rows (the
    ones ``_real_tail`` may re-run), by ZeRO stage: the best of ``repeat`` passes."""
    import time

    from strategies.estimate.scalar import step_arrays
    out = {}
    for z in (1, 2):
        jobs = [job_of(k, c, p) for n, k, c, p in PLANS
                if only in n and n.endswith(f"z{z}") and "+" not in c]
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            for j in jobs:
                step_arrays(j)
            best = min(best, (time.perf_counter() - t) / len(jobs))
        out[f"zero={z} ({len(jobs)} plans)"] = best * 1e3
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="rows whose name contains this text")
    ap.add_argument("--time", type=int, default=0, metavar="N",
                    help="time the scalar step instead, best of N passes")
    a = ap.parse_args(argv)
    if a.time > 0:
        for k, ms in timing(a.time, a.only).items():
            print(f"{k}: {ms:.2f} ms per step_arrays")
        return 0
    print("| plan | est s | sim s | est/sim − 1 | est tail s | real-span tail: est/sim − 1 "
          "| bound/sim | bound/est | arrays/sim − 1 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, kind, cluster, plan in PLANS:
        if a.only not in name:
            continue
        r = row(kind, cluster, plan)
        if isinstance(r, str):
            print(f"| {name} | {r[:90]} | | | | | | | |")
            continue
        est, sim, tail, real, bound, arr = r
        print(f"| {name} | {est:.6f} | {sim:.6f} | {est / sim - 1:+.4%} | {tail:.6f} "
              f"| {real / sim - 1:+.4%} | {bound / sim:.4f} | {bound / est:.4f} "
              f"| {arr / sim - 1:+.4%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
