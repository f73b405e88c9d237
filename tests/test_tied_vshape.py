"""A tied LM head on a V (ZB-V, DualPipeV: rank 0 holds the first and the last chunk) and on
DualPipe's end ranks is the embedding's own tensor: the head adds only the final norm there,
in the parameter count, the stage record, memory (scalar and arrays) and the simulator's
gradient buckets, and no tied all-reduce crosses stages (strategies.cost.param_counts.
head_params_per_gpu, strategies.cost.step.tied_grad_bytes)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.simulate import simulate
from strategies.cost import param_counts
from strategies.cost.stage import stage_costs
from strategies.job import make_job
from strategies.memory.arrays import peak_memory_arrays
from strategies.memory.scalar import memory_by_stage, memory_components
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

CL = cluster_preset("dgx-h100", 1)
TIED = model_preset("gpt-1.7b")                    # 24 layers, tied word embedding
UNTIED = replace(TIED, tie_word_embeddings=False, name="gpt-1.7b untied")
TP = 2


def _job(model, schedule: str, vpp: int = 1):
    return make_job(model, CL, Plan(tp=TP, pp=4, dp=1, mbs=1, gbs=16, zero=0,
                                    schedule=schedule, vpp=vpp))


V_SHAPES = [("zb-v", 2), ("dualpipev", 2)]


def test_tied_model_is_tied():
    assert TIED.tie_word_embeddings and TIED.lm_head_params() == 0
    assert UNTIED.lm_head_params() == TIED.vocab_size * TIED.hidden_size


@pytest.mark.parametrize("schedule,vpp", V_SHAPES)
def test_v_rank0_holds_one_word_embedding(schedule, vpp):
    """Rank 0 of a V: its layers, the embedding and the final norm; untied, the LM head as
    well, V·h/tp more (exactly)."""
    job = _job(TIED, schedule, vpp)
    c = stage_costs(job)
    layers = TIED.num_layers // 4
    want = (layers * param_counts.layer_params_per_gpu(TIED, TP, 1)
            + param_counts.embedding_params_per_gpu(TIED, TP) + TIED.norm_params() / TP)
    assert c.params_by_stage[0] == pytest.approx(want, rel=1e-12)
    assert c.head_params == pytest.approx(TIED.norm_params() / TP, rel=1e-12)
    u = stage_costs(_job(UNTIED, schedule, vpp))
    vh = TIED.vocab_size * TIED.hidden_size / TP
    assert u.params_by_stage[0] - c.params_by_stage[0] == pytest.approx(vh, rel=1e-12)
    # the other ranks hold no part of the embedding or the head, tied or not
    assert c.params_by_stage[1:] == u.params_by_stage[1:]


def test_1f1b_last_rank_keeps_its_tied_copy():
    """With the head on the last rank (1F1B) a tied model holds a copy there: the same
    parameters as an untied head."""
    t, u = stage_costs(_job(TIED, "1f1b")), stage_costs(_job(UNTIED, "1f1b"))
    assert t.params_by_stage == u.params_by_stage
    assert t.head_params == u.head_params > TIED.vocab_size * TIED.hidden_size / TP


def test_dualpipe_end_ranks_hold_one_word_embedding_each():
    t, u = stage_costs(_job(TIED, "dualpipe")), stage_costs(_job(UNTIED, "dualpipe"))
    vh = TIED.vocab_size * TIED.hidden_size / TP
    for s in (0, 3):
        assert u.params_by_stage[s] - t.params_by_stage[s] == pytest.approx(vh, rel=1e-12)
    assert t.params_by_stage[1:3] == u.params_by_stage[1:3]


@pytest.mark.parametrize("schedule,vpp", V_SHAPES + [("dualpipe", 1)])
def test_memory_counts_the_tied_weight_once(schedule, vpp):
    """Rank 0's model state, tied against untied: less by the head's V·h/tp parameters times
    the bytes each parameter's states take (ZeRO 0: weight, main gradient, optimizer); the
    array memory model gives the same peak as the per-stage one."""
    t, u = _job(TIED, schedule, vpp), _job(UNTIED, schedule, vpp)
    sy = t.system
    per = sy.param_bytes + sy.main_grad_bytes(t.dtype) + sy.optimizer_state_bytes
    vh = TIED.vocab_size * TIED.hidden_size / TP
    mt, mu = memory_components(t, 0)["output"], memory_components(u, 0)["output"]
    assert mu.model_state - mt.model_state == pytest.approx(vh * per, rel=1e-9)
    assert mt.model_state == pytest.approx(TIED.norm_params() / TP * per, rel=1e-9)
    for job in (t, u):
        peak = max(b.total for b in memory_by_stage(job))
        arr = float(peak_memory_arrays(job.model, PlanArrays.of_plan(job.plan), job.dtype,
                                       job.system, CL.gpu))
        assert arr == pytest.approx(peak, rel=1e-9)


@pytest.mark.parametrize("schedule,vpp", V_SHAPES + [("dualpipe", 1)])
def test_no_tied_allreduce_when_both_ends_share_a_rank(schedule, vpp):
    job = _job(TIED, schedule, vpp)
    assert stage_costs(job).tied_bytes == 0.0
    res = simulate(job, network="contention-free")
    assert not [r for r in res.records if r.label == "tied embedding all-reduce"]
    assert stage_costs(_job(TIED, "1f1b")).tied_bytes > 0.0
