"""ZB-1p/ZB-2p as plans: the order is the heuristic's with the job's own times (compiler and
memory model read the same bound schedule), memory within the limit in bytes, estimate
against simulation, exports."""
from __future__ import annotations

import pytest

from simulator.program.compiler import compile_job
from strategies.cost.stage import stage_costs
from strategies.job import make_job
from strategies.launch import export
from strategies.memory.activations import (chunk_layer_activation_bytes,
                                           in_flight_microbatches, pending_weight_grads,
                                           wgrad_bytes_per_chunk)
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from topologies.cluster import cluster_preset


def _job(sched: str, pp: int = 4, gbs: int = 16):
    return make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1),
                    parse_plan(f"tp={8 // pp},pp={pp},mbs=1,schedule={sched}"), global_batch=gbs)


def test_bound_times_from_the_record():
    job = _job("zb-2p", pp=8)             # 6 middle stages of 8: the median is one of them
    t = get_schedule("zb-2p").for_job(job).times
    sc = stage_costs(job)
    n = job.layers_of_stage(1)
    assert t.t_f == pytest.approx(n * sc.layer_fwd, rel=1e-12)
    assert t.t_w == pytest.approx(n * sc.layer_wgrad, rel=1e-12)
    assert t.t_b == pytest.approx(n * (sc.layer_bwd - sc.layer_wgrad + sc.layer_recompute),
                                  rel=1e-12)
    assert t.t_comm > 0
    assert t.w_mem == pytest.approx(wgrad_bytes_per_chunk(job, 2)
                                    / chunk_layer_activation_bytes(job, 2), rel=1e-12)
    assert get_schedule("1f1b").for_job(job) is get_schedule("1f1b")


@pytest.mark.parametrize("sched", ["zb-1p", "zb-2p"])
def test_compiler_and_memory_run_the_bound_order(sched):
    job = _job(sched)
    bound = get_schedule(sched).for_job(job)
    progs = compile_job(job)
    for r, prog in progs.items():
        labels = [op.label for op in prog.streams["compute"]
                  if op.kind in ("forward", "backward", "wgrad")]
        want = [s.label for s in bound.steps(prog.stage, 4, job.num_microbatches)]
        dedup = [x for k, x in enumerate(labels) if k == 0 or labels[k - 1] != x]
        assert dedup == want
    limit = bound.limit(4)
    for stage in range(4):
        n, w = in_flight_microbatches(job, stage), pending_weight_grads(job, stage)
        assert (n, w) == (bound.in_flight(stage, 4, job.num_microbatches),
                          bound.pending_weight_grads(stage, 4, job.num_microbatches))
        act = chunk_layer_activation_bytes(job, stage)
        assert n * act + w * wgrad_bytes_per_chunk(job, stage) <= limit * act * (1 + 1e-12)


def test_estimate_near_simulation():
    from simulator.simulate import simulate
    from strategies.estimate import estimate
    job = _job("zb-2p")
    sim, est = simulate(job).step_time_s, estimate(job).step_time_s
    assert est == pytest.approx(sim, rel=0.02)
    one = _job("1f1b")
    assert sim < simulate(one).step_time_s


def test_exports():
    job = _job("zb-2p")
    _, notes = export("megatron", job)
    assert any("--zero-bubble-max-pending-backward 8" in n for n in notes)
    _, notes = export("megatron", _job("zb-1p"))
    assert any("--zero-bubble-max-pending-backward 4" in n for n in notes)
