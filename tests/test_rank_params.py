"""Each pipeline rank's data-parallel traffic and optimizer read the layers it holds by kind
(``param_counts.content_params``): the stage-cost record's ``params_*`` (array form), the scalar
estimate's ``rank_fields`` (a job's own layout) and the simulator's buckets
(``stage_costs(job).params_by_stage``) agree, and the estimate's step follows the rank that
ends last (``terms.ranks.rank_slack``). docs/calibration.md §5.11.1."""
from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost import param_counts
from strategies.cost.stage import stage_cost_arrays, stage_costs
from strategies.estimate.terms.ranks import rank_slack
from strategies.estimate.scalar import estimate, rank_fields
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

DSV3_8 = replace(model_preset("deepseek-v3"), num_layers=8, first_k_dense_replace=1,
                 num_nextn_predict_layers=0, seq_length=1024)
H800 = cluster_preset("hgx-h800", 2)


def _job(plan: str):
    return make_job(DSV3_8, H800, parse_plan(plan))


def _closed(plan: str, ranks: list[dict[str, int]], emb: set[int], head: set[int]):
    """(dense, expert) parameters per GPU of each rank: each kind's layer times its count,
    the embedding and the LM head where they are."""
    p = _job(plan).plan
    d_l, e_l = param_counts.layer_params_split(DSV3_8.of_kind("dense"), p.tp, p.ep, p.expert_tp)
    d_m, e_m = param_counts.layer_params_split(DSV3_8.of_kind("moe"), p.tp, p.ep, p.expert_tp)
    out = []
    for r, c in enumerate(ranks):
        d = c.get("dense", 0) * d_l + c.get("moe", 0) * d_m
        d += param_counts.embedding_params_per_gpu(DSV3_8, p.tp) if r in emb else 0.0
        d += param_counts.head_params_per_gpu(DSV3_8, p.tp, p.pp, r in emb) if r in head else 0.0
        out.append((float(d), float(c.get("dense", 0) * e_l + c.get("moe", 0) * e_m)))
    return out


@pytest.mark.parametrize("plan,ranks,emb,head", [
    # the dense first layer on rank 0
    ("pp=4,ep=2,zero=2,gbs=32", [{"dense": 1, "moe": 1}, {"moe": 2}, {"moe": 2}, {"moe": 2}],
     {0}, {3}),
    # DualPipe: each rank holds stages r and pp-1-r, both end ranks the embedding and the head
    ("pp=4,ep=4,zero=2,gbs=32,schedule=dualpipe",
     [{"dense": 1, "moe": 3}, {"moe": 4}, {"moe": 4}, {"dense": 1, "moe": 3}], {0, 3}, {0, 3}),
    # a layout string: rank 0 the embedding and the dense layer only, rank 1 three MoE layers
    ("pp=4,ep=2,zero=2,gbs=32,layout=Et|ttt|tt|ttL",
     [{"dense": 1}, {"moe": 3}, {"moe": 2}, {"moe": 2}], {0}, {3}),
])
def test_rank_params_are_the_ranks_layers(plan, ranks, emb, head):
    """Closed form: every rank's parameters (dense, routed experts) are exactly its own layers
    by kind plus the embedding / LM head it holds, in the simulator's record, the scalar
    estimate's rank fields and, for plans the columns describe, the array record."""
    job = _job(plan)
    want = _closed(plan, ranks, emb, head)
    c = stage_costs(job)
    for r, (d, e) in enumerate(want):
        assert c.params_by_stage[r] == pytest.approx(d + e, rel=1e-12)
        assert c.expert_params_by_stage[r] == pytest.approx(e, rel=1e-12)
    f = rank_fields(job)
    for k, r in (("first", 0), ("mid", 1), ("last", job.plan.pp - 1)):
        assert f[f"params_{k}"] == pytest.approx(sum(want[r]), rel=1e-12)
        assert f[f"expert_params_{k}"] == pytest.approx(want[r][1], rel=1e-12)
    if job.plan.layout is None:
        a = stage_cost_arrays(DSV3_8, H800, job.dtype, PlanArrays.from_plans([job.plan]))
        for k, r in (("first", 0), ("mid", 1), ("last", job.plan.pp - 1)):
            assert float(getattr(a, f"params_{k}")[0]) == pytest.approx(sum(want[r]), rel=1e-12)
            assert float(getattr(a, f"expert_params_{k}")[0]) == pytest.approx(want[r][1],
                                                                                rel=1e-12)


def test_rank_reduce_scatter_is_the_simulators():
    """The reduce-scatter each rank runs per micro-batch (ZeRO-2 without overlap, ZB-H1) is
    priced on its own parameters: the first / middle / last rank's 103 / 150 / 167 ms, the
    simulation's buckets summed on the contention-free network (to 1e-3: bucket latencies),
    where the even split's mean layer gave 151 / 134 / 151 ms."""
    job = _job("pp=4,ep=2,zero=2,gbs=32,schedule=zb-h1,overlap_grad_reduce=false")
    p, f = job.plan, rank_fields(job)
    rs = [float(cm.dp_collective_time("reduce_scatter", stage_costs(job).grad_bytes,
                                      f[f"params_{k}"], f[f"expert_params_{k}"], p.tp, p.cp,
                                      p.dp, p.ep, p.expert_tp, H800))
          for k in ("first", "mid", "last")]
    assert [round(x, 3) for x in rs] == [0.103, 0.150, 0.167]
    s = simulate(job, network="contention-free")
    m = job.num_microbatches
    for k, r in ((0, 0), (1, 1), (2, 3)):
        rank = r * p.tp * p.cp * p.dp
        got = sum(x.end - x.start for x in s.by_rank(rank)
                  if x.stream != "compute" and x.label.startswith("RS dp"))
        assert got / m == pytest.approx(rs[k], rel=1e-3)


def test_rank_slack_closed_form():
    """Balanced 1F1B, forward t_f, backward t_b per stage: the middle kind (rank 1) ends one
    backward before rank 0, the last rank (p − 1)·t_b; ZB-H1 (weight gradient t_w split off)
    (p − 1)·(t_b − t_w), which is the pipeline's closed form less the slowest stage's own end
    ``r_f·(t_sum − t_k) + m·t_k`` on a last stage dearer by d; a V or DualPipe: together."""
    from strategies.schedules import get_schedule
    t_f, t_b, t_w, pp, m = 0.010, 0.020, 0.008, 4, 8
    t = t_f + t_b
    got = rank_slack((t, t, t), np.array(pp), 1, t_f / t, 0.0, False)
    assert [float(x) for x in got] == pytest.approx([0.0, t_b, 3 * t_b], rel=1e-12)
    t = t_f + t_b + t_w
    got = rank_slack((t, t, t), np.array(pp), 1, t_f / t, t_w / t, False)
    assert [float(x) for x in got] == pytest.approx([0.0, t_b - t_w, 3 * (t_b - t_w)],
                                                    rel=1e-12)
    d = 0.010
    pipe = float(get_schedule("zb-h1").pipeline_span(m, t + d, pp * t + d, 1, t_w / t, 0.0, pp))
    got = rank_slack((t, t, t + d), np.array(pp), 1, t_f / t, t_w / t, False)
    own = t_f / t * (pp - 1) * t + m * (t + d)
    assert float(got[2]) == pytest.approx(pipe - own, rel=1e-12)
    assert [float(x) for x in rank_slack((t, t, t), np.array(pp), 1, t_f / t, 0.0, True)] == \
        [0.0] * 3


def test_dualpipe_mirror_is_the_dearest_pair():
    """DualPipe ZeRO-2, DeepSeek-V3 pp 4 ep 4: the mirror all-reduce of the middle pair (four
    MoE layers' expert shards each) is the step's, 1023 ms as simulated, not the even split's
    mean stage (943 ms) nor rank 0's pair (821 ms, the dense first layer)."""
    job = _job("pp=4,ep=4,zero=2,gbs=32,schedule=dualpipe")
    p, f = job.plan, rank_fields(job)
    s = simulate(job, network="contention-free")
    sim = {r: sum(x.end - x.start for x in s.by_rank(r) if x.label == "AR mirror copies")
           for r in s.simulated_ranks}
    for k, r in (("first", 0), ("mid", p.tp * p.cp * p.dp)):
        held = cm.grad_shard_params(f[f"params_{k}"], f[f"expert_params_{k}"], p.tp, p.cp,
                                    p.dp, p.ep, p.expert_tp, p.zero)
        # (the pair's ranks on two nodes: one GPU on each, ``apart`` = the node's GPUs)
        est = float(cm.collective_time("allreduce", stage_costs(job).grad_bytes * held, 2,
                                       H800.gpus_per_node, H800))
        assert est == pytest.approx(sim[r], rel=1e-4)
    assert round(sim[p.tp * p.cp * p.dp], 3) == 1.023 and round(sim[0], 3) == 0.821
    e = estimate(job)
    assert e.breakdown_s["dp_comm"] > sim[p.tp * p.cp * p.dp]
