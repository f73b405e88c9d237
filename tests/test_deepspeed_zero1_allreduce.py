"""DeepSpeed v0.5.10's ZeRO-1 without its BF16_Optimizer all-reduces the whole 16-bit gradient
(``reduce_ipg_grads`` → ``buffered_reduce_fallback(None, ...)`` → ``dist.all_reduce``), then
all-gathers the updated weights: ``FrameworkProfile.zero1_grad_reduce``,
``comm_rules.full_grad_reduce`` (docs/calibration.md §5.121)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.stacks.comm_rules import full_grad_reduce
from topologies.cluster import cluster_preset

_PLAN = ("tp=8,pp=1,gbs=64,zero=1,recompute=full,flash_attn=false,"
         "overlap_grad_reduce=false,overlap_param_gather=false")


def _job(framework: str = "megatron-deepspeed", bf16_optimizer: bool = False,
         zero1_grad_reduce: str | None = None, dtype: str = "bf16", plan: str = _PLAN):
    """gpt-1.7b at tp 8 on two DGX A100 nodes: dp 2, one rank on each node, one gradient
    bucket (1.7e9 / 8 parameters per rank, below DeepSpeed's 5e8 ``reduce_bucket_size``)."""
    fw = replace(get_profile(framework), bf16_optimizer=bf16_optimizer)
    if zero1_grad_reduce is not None:
        fw = replace(fw, zero1_grad_reduce=zero1_grad_reduce)
    return make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2), parse_plan(plan),
                    dtype=dtype, framework=fw)


def test_rule_by_stack_stage_and_optimizer():
    ds, core = get_profile("megatron-deepspeed"), get_profile("megatron-core")
    assert ds.zero1_grad_reduce == "allreduce" and core.zero1_grad_reduce == "reduce_scatter"
    off = replace(ds, bf16_optimizer=False)
    for fw in (ds, off):
        for dtype in ("bf16", "fp16"):
            assert list(full_grad_reduce(fw, dtype, [0, 1, 2, 3])) == [True, True, False,
                                                                       False]
    assert full_grad_reduce(off, "bf16", 1) is True          # scalar in, bool out
    assert not full_grad_reduce(core, "bf16", 1) and full_grad_reduce(core, "bf16", 0)
    # the BF16_Optimizer alone still all-reduces (a stack whose ZeRO-1 reduce-scatters)
    rs = replace(ds, zero1_grad_reduce="reduce_scatter")
    assert full_grad_reduce(rs, "bf16", 1) and not full_grad_reduce(
        replace(rs, bf16_optimizer=False), "bf16", 1)
    assert not full_grad_reduce(rs, "fp16", 1)


def test_simulated_reduction_is_the_ring_all_reduce():
    """The one dp collective of the step is an all-reduce of the rank's whole 16-bit gradient;
    alone on its group (2 ranks on 2 nodes, the same NIC rail) it lasts the ring's closed form
    ``2·(n − 1)/n · B / bw + 2·(n − 1)·lat`` (``bw`` one GPU's NIC share at the network's
    efficiency, ``lat`` the hop between nodes)."""
    from simulator.simulate import simulate
    job = _job()
    sc = stage_costs(job)
    assert sc.grad_bytes == 2.0
    B = sc.grad_bytes * sc.params_by_stage[0]
    recs = [r for r in simulate(job, network="contention-free").by_rank(0)
            if r.stream == "dp-comm"]
    ar = [r for r in recs if r.label.startswith("AR dp bucket")]
    assert len(ar) == 1 and not [r for r in recs if r.label.startswith("RS")]
    cl, n = job.cluster, 2
    bw = cl.inter_node_bandwidth_per_gpu * cm.NETWORK_EFFICIENCY / cl.oversubscription
    ring = 2 * (n - 1) / n * B / bw + 2 * (n - 1) * cl.inter_node_latency + CALL
    assert ar[0].end - ar[0].start == pytest.approx(ring, rel=1e-12)
    assert cm.collective_time("allreduce", B, n, 8, cl) == pytest.approx(ring, rel=1e-12)


def test_estimate_equals_the_contention_free_simulation():
    """A Megatron-DeepSpeed ZeRO-1 plan without the BF16_Optimizer: estimate and
    contention-free simulation agree to 1e-9, and the estimate's dp time is the all-reduce
    and the weights' all-gather, ``t_ar − t_rs`` more than a reduce-scatter stack's."""
    from simulator.simulate import simulate
    from strategies.estimate.scalar import estimate
    job, rs = _job(), _job(zero1_grad_reduce="reduce_scatter")
    e = estimate(job)
    assert e.step_time_s == pytest.approx(simulate(job, network="contention-free").step_time_s,
                                          rel=1e-9)
    sc = stage_costs(job)
    B = sc.grad_bytes * sc.params_by_stage[0]
    t_ar = cm.collective_time("allreduce", B, 2, 8, job.cluster)
    t_rs = cm.collective_time("reduce_scatter", B, 2, 8, job.cluster)
    assert t_ar > 1.9 * t_rs
    assert e.breakdown_s["dp_comm"] - estimate(rs).breakdown_s["dp_comm"] == pytest.approx(
        t_ar - t_rs, rel=1e-9)


def test_bound_reads_the_rule_and_stays_below():
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.estimate.scalar import plan_arrays
    from strategies.stacks.profile import stack_system

    def bound(job):
        return float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                           plan_arrays(job.plan), job.framework,
                                           stack_system(job.framework)))
    job, rs = _job(), _job(zero1_grad_reduce="reduce_scatter")
    assert bound(rs) < bound(job) <= simulate(job).step_time_s


def test_megatron_stacks_unchanged():
    """A Megatron-Core ZeRO-1 plan still reduce-scatters (its distributed optimizer)."""
    from simulator.program.compiler import compile_job
    from simulator.program.ops import Collective
    job = _job("megatron-core")
    kinds = {op.kind for prog in compile_job(job, ranks=[0]).values()
             for ops in prog.streams.values() for op in ops
             if isinstance(op, Collective) and len(op.group) == job.plan.dp}
    assert "reduce_scatter" in kinds and "allreduce" not in kinds


def test_field_is_checked():
    from strategies.errors import SpecError
    with pytest.raises(SpecError, match="zero1_grad_reduce.*reduce_scatter, allreduce"):
        replace(get_profile("megatron-deepspeed"), zero1_grad_reduce="all-reduce")
