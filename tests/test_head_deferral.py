"""The last stage's deferred output-layer weight gradient (Megatron-Core's
``defer_embedding_wgrad_compute``, docs/calibration.md §5.232): the drain window's closed
form, the stage-cost record it changes (the estimate's and the simulator's one source), the
reader's switch and ``SystemConfig``'s refusal of bad values."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost.head_deferral import deferred_head_wgrad, drain_window
from strategies.cost.stage.cost_arrays import stage_cost_arrays
from strategies.cost.system import SystemConfig
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.reference.stated_switches import stated_head_deferral
from topologies.cluster import cluster_preset


def test_the_drain_holds_what_fits_spread_over_the_step() -> None:
    w, chunk, pp, mb = 2.0e-3, 16.0e-3, 8, 64
    assert drain_window(chunk, pp) == pytest.approx(7 * 16e-3, rel=1e-15)
    # every micro-batch deferred: 128 ms of GEMMs, 112 ms of window
    assert deferred_head_wgrad(w, chunk, pp, mb, math.inf) == pytest.approx(0.112 / 64, rel=1e-15)
    # a limit of 10: 20 ms, all inside the window
    assert deferred_head_wgrad(w, chunk, pp, mb, 10.0) == pytest.approx(0.020 / 64, rel=1e-15)
    # a limit above the step's micro-batches defers them all, no more
    assert deferred_head_wgrad(w, 1.0, pp, mb, 1e6) == pytest.approx(w, rel=1e-15)
    assert deferred_head_wgrad(w, chunk, 1, mb, math.inf) == 0.0          # no pipeline
    assert deferred_head_wgrad(w, chunk, pp, mb, 0.0) == 0.0             # off
    got = deferred_head_wgrad(w, chunk, np.array([1, 2, 8]), np.array([8, 8, 8]), math.inf)
    assert np.allclose(got, [0.0, 16e-3 / 8, 16e-3 / 8], rtol=1e-15, atol=0)


def _job(pp: int = 4, deferral: float = 0.0, gbs: int = 16, vpp: int = 1, sp: int = 0):
    m = replace(model_preset("llama3-8b"), num_layers=8, seq_length=2048)
    return make_job(m, cluster_preset("dgx-h100", 1),
                    parse_plan(f"tp=2,pp={pp},dp={8 // (2 * pp)},mbs=1,gbs={gbs},vpp={vpp},"
                               f"sp={sp}"),
                    system=SystemConfig(head_wgrad_deferral=deferral))


def test_the_record_takes_the_held_gradient_off_the_last_stage() -> None:
    """The record's output-layer weight gradient and backward fall by the closed form's
    seconds; nothing else in the record moves."""
    off, on = _job(), _job(deferral=math.inf)
    a, b = (stage_cost_arrays(j.model, j.cluster, j.dtype, PlanArrays.of_plan(j.plan),
                              j.framework, j.system) for j in (off, on))
    p = off.plan
    mb = p.gbs / (p.mbs * p.dp)             # micro-batches per pipeline: 16
    lpc = off.model.num_layers / p.pp       # layers per chunk: 2
    held = min(mb * float(a.head_wgrad), (p.pp - 1) * lpc * float(a.layer_bwd)) / mb
    assert float(b.head_wgrad) == pytest.approx(float(a.head_wgrad) - held, rel=1e-12)
    # the backward loses the held seconds, less what of the output's TP reduction the
    # shorter in-line GEMM no longer hides (``tp_ends``: at most the held seconds)
    d = float(b.head_bwd) - float(a.head_bwd)
    assert held > 0 and -held - 1e-15 <= d <= 1e-15
    for f in ("layer_fwd", "layer_bwd", "head_fwd", "embedding_fwd", "embedding_bwd"):
        assert float(getattr(a, f)) == float(getattr(b, f)), f


def test_the_estimate_and_the_simulation_both_run_faster() -> None:
    off, on = _job(), _job(deferral=math.inf)
    e0, e1 = estimate(off).step_time_s, estimate(on).step_time_s
    s0 = simulate(off, network="contention-free").step_time_s
    s1 = simulate(on, network="contention-free").step_time_s
    assert e1 < e0 and s1 < s0
    # one stage: nothing to defer into, the record is unchanged
    assert estimate(_job(pp=1, deferral=math.inf)).step_time_s == \
        estimate(_job(pp=1)).step_time_s


def test_the_reader_takes_the_switch_and_its_limit() -> None:
    notes: list[str] = []
    on = {"plan": {"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 65}}
    assert stated_head_deferral(on, 8, notes) == 65.0
    every = {"plan": {"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 0}}
    assert stated_head_deferral(every, 8, notes) == math.inf
    assert stated_head_deferral({"plan": {"defer_embedding_wgrad_compute": True}}, 8,
                                notes) == math.inf
    assert stated_head_deferral({"plan": {"defer_embedding_wgrad_compute": False}}, 8,
                                notes) is None
    assert stated_head_deferral({"plan": {}}, 8, notes) is None
    assert stated_head_deferral(on, 1, notes) is None and "pp 1" in notes[-1]
    with pytest.raises(SpecError, match="defer_embedding_wgrad_compute"):
        stated_head_deferral({"plan": {"defer_embedding_wgrad_compute": "yes"}}, 8, notes)
    with pytest.raises(SpecError, match="wgrad_deferral_limit"):
        stated_head_deferral({"plan": {"defer_embedding_wgrad_compute": True,
                                       "wgrad_deferral_limit": -1}}, 8, notes)
    with pytest.raises(SpecError, match="wgrad_deferral_limit"):
        stated_head_deferral({"plan": {"defer_embedding_wgrad_compute": True,
                                       "wgrad_deferral_limit": 2.5}}, 8, notes)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_system_refuses_a_bad_deferral(bad: float) -> None:
    with pytest.raises(SpecError, match="head_wgrad_deferral"):
        SystemConfig(head_wgrad_deferral=bad)


def test_the_search_arrays_price_it_plan_by_plan() -> None:
    """The vectorised path (``estimate_arrays`` over several plans at once): the pipelined
    plans run faster with the deferral, the one-stage plan not at all."""
    from strategies.estimate.analytic import estimate_arrays
    jobs = [_job(pp=pp) for pp in (1, 2, 4)]
    P = PlanArrays.from_plans([j.plan for j in jobs])
    j = jobs[0]
    off, on = (estimate_arrays(j.model, j.cluster, j.dtype, P, j.framework,
                               SystemConfig(head_wgrad_deferral=d))["step_time_s"]
               for d in (0.0, math.inf))
    assert on[0] == off[0] and on[1] < off[1] and on[2] < off[2]


def test_the_buffers_memory_is_the_hand_count_on_the_last_stage_only() -> None:
    """Each deferred micro-batch keeps the output layer's SP-sharded 16-bit input and its
    16-bit logits' gradient until the drain, which gathers the inputs into two global
    buffers (Megatron-Core ``tensor_parallel/layers.py``, ``utils.drain_embedding_wgrad_
    compute``): the last stage's ``output`` activations grow by that, scalar and arrays
    alike, the simulator's transient with them; no other stage moves."""
    from strategies.memory.arrays import memory_component_arrays
    from strategies.memory.scalar import memory_by_stage, memory_components
    from strategies.memory.stage_stash import transient_activation_bytes
    from strategies.memory.stack_terms import job_stack_memory
    for limit, held, sp in ((math.inf, 16, 1), (10.0, 10, 1), (40.0, 16, 1), (10.0, 10, 0)):
        off, on = _job(sp=sp), _job(deferral=limit, sp=sp)
        m, p = off.model, off.plan
        assert (off.num_microbatches, p.tp, p.sp, p.cp) == (16, 2, bool(sp), 1)
        s, h, v = m.seq_length, m.hidden_size, m.vocab_size
        # per deferred micro-batch: input 2sbh (/t with SP), logits' gradient 2sbV/t; with
        # SP the drain's two gathered inputs 2 x 2sbh
        hand = (held * (2 * s * h / (2 if sp else 1) + 2 * s * v / 2)
                + (2 * (2 * s * h) if sp else 0))
        a, b = memory_by_stage(off), memory_by_stage(on)
        for st in range(p.pp - 1):
            assert b[st] == a[st]
        assert b[-1].activations - a[-1].activations == pytest.approx(hand, rel=1e-12)
        out0, out1 = (memory_components(j, p.pp - 1)["output"] for j in (off, on))
        assert out1.activations - out0.activations == pytest.approx(hand, rel=1e-12)
        assert (transient_activation_bytes(on, p.pp - 1)
                - transient_activation_bytes(off, p.pp - 1)) == pytest.approx(hand, rel=1e-12)
        # the search's arrays: the same bytes plan by plan (the deferral's system)
        P = PlanArrays.from_plans([p, p.__class__(**{**p.__dict__, "pp": 1, "dp": 4})])
        got = [memory_component_arrays(m, P, [p.pp - 1, 0], on.dtype, gpu=on.cluster.gpu,
                                       **job_stack_memory(j).keywords())[0]["output"]
               ["activations"] for j in (off, on)]
        assert got[1][0] - got[0][0] == pytest.approx(hand, rel=1e-12)
        assert got[1][1] == got[0][1]                    # pp 1: Megatron-Core refuses it
