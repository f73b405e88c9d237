"""A gradient bucket is reduced once its last gradient is ready, inside a layer's backward
where that gradient is its MLP's (Megatron-Core's per-parameter hooks,
``distributed_data_parallel.py`` L473, L553-585 @d98e8a6; docs/calibration.md §5.192): the
buckets of the simulation, cut as the stack cuts them, against a hand computation."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.program.grad_buckets import chunk_buckets
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.param_counts import layer_lead_split
from strategies.cost.stage import stage_costs
from strategies.cost.system import SystemConfig
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

MODEL = replace(model_preset("llama3-8b"), num_layers=2, seq_length=1024)
PLAN = "tp=1,pp=1,dp=8,mbs=1,gbs=8,zero=0"


def _job(bucket: float):
    return make_job(MODEL, cluster_preset("dgx-h100", 1), parse_plan(PLAN),
                    system=SystemConfig(bucket_params=bucket))


def test_lead_is_the_mlp_and_its_norm():
    """Llama 2 7B: the MLP (3·4096·11008) and its norm lead, 135,270,400 of the layer's
    202,383,360 parameters; its attention (4·4096², the input norm) trails: 67,112,960."""
    m = model_preset("llama2-7b")
    lead, work = layer_lead_split(m, 1, 1)
    assert lead == 3 * 4096 * 11008 + 4096
    assert m.layer_params() - lead == 4 * 4096 ** 2 + 4096
    assert work == pytest.approx(lead / m.layer_params(), rel=1e-12)   # dense: all active
    assert layer_lead_split(m, 2, 1)[0] == lead / 2


def test_two_buckets_tail_is_the_hand_computation():
    """Two buckets (the LM head with the last layer's MLP; the rest): the first reduced from
    the end of that MLP's backward, the second after the embedding's backward or the first,
    whichever ends later, each call the contention-free all-reduce of its parameters (1e-12)."""
    c0 = stage_costs(_job(1e12))
    bucket = c0.head_params + c0.layer_lead_params
    job = _job(bucket)
    c = stage_costs(job)
    assert chunk_buckets(c, True, True, 2, leads=[c.layer_lead_params] * 2).buckets == (
        (1, bucket), (5, 2 * c.layer_params - c.layer_lead_params + c.embedding_params))
    res = simulate(job, network="contention-free")
    recs = res.by_rank(0)
    head = max((r for r in recs if r.kind == "lm_head" and r.label.startswith("B")),
               key=lambda r: r.end)
    emb = max((r for r in recs if r.kind == "embedding" and r.label.startswith("B")),
              key=lambda r: r.end)
    dp = sorted((r for r in recs if r.stream == "dp-comm"), key=lambda r: r.start)
    assert len(dp) == 2

    def ar(params: float) -> float:
        return float(cm.dp_collective_time("allreduce", c.grad_bytes, params, 0.0, 1, 1, 8,
                                           1, 1, job.cluster))

    tail = (1.0 - c.layer_lead_work) * (c.layer_bwd - c.attn_bwd) + c.attn_bwd
    ready = head.end + c.layer_recompute + c.layer_bwd - tail
    assert dp[0].start == pytest.approx(ready, rel=1e-12)
    assert dp[0].end == pytest.approx(ready + ar(bucket), rel=1e-12)
    bwd_end = head.end + 2 * (c.layer_recompute + c.layer_bwd) + c.embedding_bwd
    assert emb.end == pytest.approx(bwd_end, rel=1e-12)
    rest = 2 * c.layer_params - c.layer_lead_params + c.embedding_params
    last = max(bwd_end, ready + ar(bucket)) + ar(rest)
    assert dp[1].end == pytest.approx(last, rel=1e-12)
