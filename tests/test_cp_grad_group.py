"""Dense gradients are reduced, and ZeRO shards held, over the dp·cp ranks that hold a
parameter's copies (``strategies.placement.dense_dp_group``, group ``dpcp``): Megatron-Core's
data-parallel group with context parallelism, torchtitan's ``dp_shard_cp`` mesh. One rule
for the estimate, the lower bound, the compiler and the memory model."""
from __future__ import annotations

import numpy as np
import pytest

from strategies.collectives.phase import CALL_LATENCY_S as CALL
from simulator.program.compiler import compile_job
from simulator.simulate import simulate
from strategies import placement
from strategies.cost import comm as cm
from strategies.cost import grad_time
from strategies.cost.stage import stage_costs
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.memory.scalar import stage_memory
from strategies.plan import Plan, parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

from tests.norm_barrier_checks import barrier_s

EXACT = dict(rel=1e-12, abs=0.0)
NO_OVERLAP = "overlap_grad_reduce=false,overlap_param_gather=false"


def _job(spec: str, nodes: int = 1):
    return make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-h100", nodes),
                    parse_plan(spec))


def test_dpcp_groups_are_megatrons():
    """tp 2, cp 2, dp 2, pp 2 in Megatron's order tp-cp-dp-pp: the ranks of one tp and pp
    coordinate, cp inner (rank = tp_rank + 2·(cp_rank + 2·dp_rank) + 8·pp_rank)."""
    p = Plan(tp=2, cp=2, dp=2, pp=2)
    assert placement.groups(p, "dpcp") == [[0, 2, 4, 6], [1, 3, 5, 7],
                                           [8, 10, 12, 14], [9, 11, 13, 15]]
    assert placement.dense_dp_group(2, 2, 2) == (4.0, 2.0)
    # every group: cp·dp ranks tp apart, one tp and pp coordinate, all cp and dp ones
    for order in ("tp-cp-dp-pp", "tp-dp-cp-pp"):
        q = Plan(tp=2, cp=2, dp=3, pp=2)
        gs = placement.groups(q, "dpcp", order)
        assert sorted(r for g in gs for r in g) == list(range(24))
        for g in gs:
            c = [placement.coords_of(q, r, order) for r in g]
            assert len({(x["tp"], x["pp"]) for x in c}) == 1
            assert {(x["cp"], x["dp"]) for x in c} == {(i, j) for i in range(2) for j in range(3)}
            assert np.diff(g).tolist() == [2] * 5
    # without context parallelism it is the dp group
    assert placement.groups(Plan(tp=2, dp=4), "dpcp") == placement.groups(Plan(tp=2, dp=4), "dp")


def test_parts_and_shard_over_dp_times_cp():
    """cp 2, dp 2, tp 2: the dense part goes over 4 ranks 2 apart; ZeRO-2 holds 1/4, and
    ZeRO-1's optimizer reads 1/4 (its shard of the reduce-scattered gradients); ZeRO-0 all."""
    (d, n, s), (e, _, _) = cm.dp_parts(8e9, 0.0, 2, 2, 2, 1, 2)
    assert (d, n, s, e) == (8e9, 4.0, 2.0, 0.0)
    assert cm.grad_shard_params(8e9, 0.0, 2, 2, 2, 1, 2, 2) == 2e9
    assert cm.grad_shard_params(8e9, 0.0, 2, 2, 2, 1, 2, 1) == 2e9
    assert cm.grad_shard_params(8e9, 0.0, 2, 2, 2, 1, 2, 0) == 8e9
    # dp 1, cp 2: the cp ranks still hold copies to reduce
    assert bool(cm.has_dp_copies(8e9, 0.0, 2, 2, 1, 1, 2))
    assert not bool(cm.has_dp_copies(8e9, 0.0, 2, 1, 1, 1, 2))
    # vectorised: the array form is the scalar one
    got = cm.dp_parts(8e9, 0.0, np.array([2, 8]), np.array([2, 4]), np.array([2, 1]), 1, 2)
    assert got[0][1].tolist() == [4.0, 4.0] and got[0][2].tolist() == [2.0, 8.0]


def test_reduction_closed_form_estimate_equals_simulation():
    """One DGX H100, tp 2 cp 2 dp 2, no overlap: the gradient all-reduce runs over the 4
    ranks 2 apart inside the node, a ring alone on NVLink: 2·3/4·B/bw + 2·3·latency + the
    call's own (``phase.CALL_LATENCY_S``), B the
    stage's gradient bytes. A tp 2 dp 4 plan reduces over the same shape: the same time, in
    the estimate (bit for bit) and in the simulation (to rounding: the two steps differ)."""
    cp2 = _job(f"tp=2,cp=2,dp=2,pp=1,mbs=1,gbs=4,zero=0,{NO_OVERLAP}")
    dp4 = _job(f"tp=2,cp=1,dp=4,pp=1,mbs=1,gbs=8,zero=0,{NO_OVERLAP}")
    sc = stage_costs(cp2)
    cl = cp2.cluster
    B = sc.grad_bytes * sc.params_by_stage[0]
    bw = cl.intra_node_bandwidth * cm.NVLINK_EFFICIENCY
    # and the gradient norm's all-reduce over tp·pp (§5.202), the same for both plans
    closed = 2 * 3 / 4 * B / bw + 2 * 3 * cl.intra_node_latency + CALL + barrier_s(cp2)
    e2, e4 = estimate(cp2), estimate(dp4)
    assert e2.breakdown_s["dp_comm"] == pytest.approx(closed, **EXACT)
    assert e4.breakdown_s["dp_comm"] == e2.breakdown_s["dp_comm"]
    s2, s4 = simulate(cp2), simulate(dp4)
    assert s2.metrics["breakdown_s"]["dp_comm"] == pytest.approx(
        s4.metrics["breakdown_s"]["dp_comm"], rel=1e-12)
    # the simulator reduces in buckets (a latency term each): within 2 % of one ring
    assert s2.metrics["breakdown_s"]["dp_comm"] == pytest.approx(closed, rel=0.02)
    assert s2.step_time_s == pytest.approx(e2.step_time_s, rel=0.01)
    # the compiled program's reductions: over rank 0's dp·cp group, every gradient byte
    prog = compile_job(cp2, ranks=[0])[0]
    ars = [op for op in prog.streams["dp-comm"] if op.label.startswith("AR dp")]
    assert ars and {op.group for op in ars} == {(0, 2, 4, 6)}
    assert sum(op.nbytes for op in ars) == pytest.approx(B, **EXACT)
    lb = step_time_lower_bound(cp2.model, cl, cp2.dtype, PlanArrays.from_plans([cp2.plan]))
    assert float(np.asarray(lb).ravel()[0]) <= min(s2.step_time_s, e2.step_time_s)


def test_memory_and_step_read_the_same_shard():
    """ZeRO-1 with cp 2 dp 2: the optimizer state a rank holds and the optimizer step it
    runs are both over 1/(dp·cp) = 1/4 of its parameters."""
    job = _job(f"tp=2,cp=2,dp=2,pp=1,mbs=1,gbs=4,zero=1,{NO_OVERLAP}")
    z0 = _job(f"tp=2,cp=2,dp=2,pp=1,mbs=1,gbs=4,zero=0,{NO_OVERLAP}")
    m1, m0 = stage_memory(job, 0), stage_memory(z0, 0)
    assert m1.optimizer == pytest.approx(m0.optimizer / 4, **EXACT)
    sc = stage_costs(job)
    want = grad_time.optimizer_time(sc.params_by_stage[0] / 4, job.cluster.gpu)
    w_cast = sc.optimizer_by_stage[0] - want
    sc0 = stage_costs(z0)
    assert sc0.optimizer_by_stage[0] - grad_time.optimizer_time(sc0.params_by_stage[0],
                                                                job.cluster.gpu) \
        == pytest.approx(w_cast, rel=1e-9)
    # ZeRO-2: the gradients held too
    z2 = _job(f"tp=2,cp=2,dp=2,pp=1,mbs=1,gbs=4,zero=2,{NO_OVERLAP}")
    assert stage_memory(z2, 0).grads == pytest.approx(m0.grads / 4, **EXACT)


def test_dp1_cp_ranks_reduce():
    """dp 1, cp 4 across nodes: the gradients are still all-reduced over the 4 cp ranks
    (tp apart); the simulation runs that ring and agrees with the estimate."""
    job = _job(f"tp=8,cp=4,dp=1,pp=1,mbs=1,gbs=1,zero=0,{NO_OVERLAP}", nodes=4)
    e, s = estimate(job), simulate(job)
    sc = stage_costs(job)
    want = cm.collective_time("allreduce", sc.grad_bytes * sc.params_by_stage[0], 4, 8,
                              job.cluster) + barrier_s(job)   # the norm's all-reduce (§5.202)
    assert e.breakdown_s["dp_comm"] == pytest.approx(float(want), **EXACT)
    assert want > 0
    assert s.metrics["breakdown_s"]["dp_comm"] == pytest.approx(float(want), rel=0.02)
