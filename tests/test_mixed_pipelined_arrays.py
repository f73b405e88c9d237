"""The search's arrays price pipelined plans on a mixed cluster as the scalar estimate does
(docs/calibration.md §5.45): each stage on the GPU type it waits for, the schedule's
free-communication order replayed over many plans at once (``analysis.free_comm_makespans``,
``estimate.mixed_stages``). Before, they assumed every stage on ``Cluster.gpu`` with even
work: up to 0.212 off on gpt-1.7b over H100+A100 (``python experiments/bound_mixed_gpus.py
--arrays``), 0.56 on the seeded toy cases below."""
from __future__ import annotations

import random

import numpy as np
import pytest

from experiments.bound_mixed_gpus import (dense_case, even_pipelined_jobs, moe_case, schedules_case,
                                          spanning_case, toy)
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.kinds import with_kind_rows
from strategies.estimate.mixed import estimate_arrays_mixed
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.schedules.analysis import (free_comm_makespans, free_comm_order,
                                           simulate_free_comm)
from strategies.schedules.registry import get_schedule
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster.arg import mixed_cluster

KEYS = ("step_time_s", "mfu", "hfu", "tokens_per_s", "bubble_fraction")


def _seeded_jobs():
    """The even pipelined plans among the first seeded cases of each generator (one kind of
    layer: the MoE cases without dense first layers)."""
    gens = ((dense_case, 60), (spanning_case, 25), (schedules_case, 40), (moe_case, 40))
    for gen, n in gens:
        for _m, _cl, job in even_pipelined_jobs(gen, n):
            yield job


@pytest.mark.slow
def test_pipelined_arrays_equal_scalar_on_seeded_mixed_plans():
    jobs = list(_seeded_jobs())
    scheds = {j.plan.schedule for j in jobs}
    assert len(jobs) > 60 and {"1f1b", "gpipe", "interleaved", "zb-h1", "dualpipe"} <= scheds
    spanning = 0
    for job in jobs:
        e = estimate(job)
        P = PlanArrays.from_plans([job.plan])
        a = estimate_arrays_mixed(job.model, job.cluster, job.dtype, P, job.framework)
        # DualPipe's rows, as the search prices them: the scalar's order with its messages
        # (``estimate.kinds.kind_rows``, docs/calibration.md §5.225)
        a = with_kind_rows(job.model, job.cluster, job.dtype, P, a, lambda i: job.plan,
                           None, job.system)
        want = {"step_time_s": e.step_time_s, "mfu": e.mfu, "hfu": e.hfu,
                "tokens_per_s": e.tokens_per_s, "bubble_fraction": e.bubble_fraction}
        for k in KEYS:
            assert float(a[k][0]) == pytest.approx(want[k], rel=1e-12, abs=1e-300), \
                (job.cluster.name, job.plan.short(), k)
        spanning += any(len({job.cluster.gpu_of_node(n).name for n in job.stage_nodes(s)}) > 1
                        for s in range(job.plan.pp))
    assert spanning >= 5                    # stages that span two GPU types are among them


@pytest.mark.slow
@pytest.mark.parametrize("model,cluster", [("toy", "dgx-h100:1+dgx-a100:1"),
                                           ("gpt-1.7b", "dgx-h100:1+dgx-a100:1")])
def test_search_space_pipelined_rows_equal_scalar(model, cluster):
    """Every 9th pipelined row of a mixed search space (GPipe, 1F1B, interleaved)."""
    from strategies.presets import model_preset
    m = toy() if model == "toy" else model_preset(model)
    cl = mixed_cluster(cluster)
    sp = enumerate_space(m, cl, 64, SpaceOptions())
    a = estimate_arrays_mixed(m, cl, "bf16", sp.arrays)
    rows = np.flatnonzero(sp.cols["pp"] > 1)[::9].tolist()     # the pipelined rows
    assert {sp.plan(i).schedule for i in rows} >= {"1f1b", "gpipe", "interleaved"}
    for i in rows:
        e = estimate(make_job(m, cl, sp.plan(i)))
        assert float(a["step_time_s"][i]) == pytest.approx(e.step_time_s, rel=1e-12)
        assert float(a["mfu"][i]) == pytest.approx(e.mfu, rel=1e-12)


@pytest.mark.parametrize("sched,pp,m,vpp", [("1f1b", 4, 7, 1), ("gpipe", 3, 5, 1),
                                            ("interleaved", 4, 8, 2), ("zb-h1", 4, 6, 1),
                                            ("zb-v", 4, 8, 2), ("dualpipe", 4, 8, 1)])
def test_levelled_replay_equals_the_scalar_run(sched, pp, m, vpp):
    """``free_comm_makespans`` over 16 random runs at once = ``simulate_free_comm`` of each,
    bit for bit (per-rank slowdowns, and per-chunk seconds)."""
    rng = random.Random(7)
    order = free_comm_order(get_schedule(sched), pp, m, vpp, None)
    split = get_schedule(sched).splits_backward
    k = max(get_schedule(sched).num_virtual_stages(pp, vpp) // pp, 1)
    f, b, w = 1.0, 2.1, 0.7
    slows = np.array([[rng.uniform(0.5, 2.0) for _ in range(pp)] for _ in range(16)]).T
    dur = {"F": f / k, "B": (b - w if split else b) / k, "W": w / k}

    def seconds(r, members):
        return (dur[members[0][0]] if len(members) == 1 else (f + b) / k) * slows[r]
    got = free_comm_makespans(order, seconds, 16)
    want = [simulate_free_comm(sched, pp, m, vpp, f, b, t_w=w, slowdown=list(slows[:, j]))
            for j in range(16)]
    assert got.tolist() == want
    chunks = 2 if get_schedule(sched).mirrored else vpp
    times = [[[(rng.uniform(0.5, 1.5), rng.uniform(1.0, 3.0), rng.uniform(0.1, 0.5))
               for _ in range(chunks)] for _ in range(pp)] for _ in range(4)]
    got = free_comm_makespans(order, lambda r, g: np.array([sum(
        (t[r][c][0] if kind == "F" else t[r][c][2] if kind == "W" else
         t[r][c][1] - t[r][c][2] if split else t[r][c][1]) for kind, c in g) for t in times]), 4)
    assert got.tolist() == [simulate_free_comm(sched, pp, m, vpp, 0.0, 0.0, chunk_times=t)
                            for t in times]


def test_uneven_layouts_keep_the_even_run():
    """``layers_per_stage`` (the arrays carry only its extremes; the search proposes none on
    a mixed cluster): the row is the plain arrays' (docs/heterogeneous.md)."""
    m, cl = toy(layers=8), mixed_cluster("dgx-h100:1+dgx-a100:1")
    job = make_job(m, cl, parse_plan("tp=2,pp=2,mbs=1,gbs=32,layers_per_stage=6/2"))
    P = PlanArrays.from_plans([job.plan])
    a, b = (f(m, cl, "bf16", P) for f in (estimate_arrays_mixed, estimate_arrays))
    assert float(a["step_time_s"][0]) == float(b["step_time_s"][0])


def test_one_plan_as_zero_d_arrays():
    """``PlanArrays.of_plan`` (0-d columns) gives 0-d results, the scalar estimate's step."""
    m, cl = toy(), mixed_cluster("dgx-h100:1+dgx-a100:1")
    job = make_job(m, cl, parse_plan("tp=2,pp=4,mbs=1,gbs=32,schedule=1f1b"))
    a = estimate_arrays_mixed(m, cl, "bf16", PlanArrays.of_plan(job.plan))
    assert np.shape(a["step_time_s"]) == ()
    assert float(a["step_time_s"]) == pytest.approx(estimate(job).step_time_s, rel=1e-12)


def test_with_a_straggler_and_a_degraded_nic():
    """Faults: the stage costs the scalar reads are the cluster's own (not the degraded
    view the arrays' collectives read)."""
    from topologies.faults import Faults
    m = toy()
    cl = mixed_cluster("dgx-h100:1+dgx-a100:1").with_faults(Faults.from_texts(["3=1.5"],
                                                                              ["nic:2=2"]))
    for text in ("tp=2,pp=4,mbs=1,gbs=32,schedule=1f1b",
                 "tp=1,pp=4,vpp=2,mbs=1,gbs=32,schedule=interleaved"):
        job = make_job(m, cl, parse_plan(text))
        a = estimate_arrays_mixed(m, cl, "bf16", PlanArrays.from_plans([job.plan]))
        assert float(a["step_time_s"][0]) == pytest.approx(estimate(job).step_time_s, rel=1e-12)
