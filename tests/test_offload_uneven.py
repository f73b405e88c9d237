"""Activation offloading over pipeline stages that differ (docs/calibration.md §5.217): the
estimate's ``offload`` entry is the busiest real rank's exposed copies, each layer's from the
stage-cost record (``layer_offload_fwd`` + ``layer_offload_bwd``, ``cost.stage.offload_time``)
times the layers that rank holds by kind and the micro-batches it runs them for
(``stage_passes.offload_seconds``, ``chunk_correction.chunk_passes``), as the simulation's
``offload`` ops are: equal to floating-point precision on first/last-stage counts,
``layers_per_stage``, a layout string, interleaved, zero-bubble and DualPipe orders, dense,
MoE (routed modules) and mixed-kind models, and a mixed cluster (the search's arrays too).
The step does not move: ``compute`` takes the rest, and the entries still sum to the step.
Before, the estimate kept the even rank's ``num_layers/pp`` layers' copies (1.2268 s against
the simulation's 1.3802 s on the first plan below)."""
from __future__ import annotations

import pytest

from experiments.offload_uneven_rows import ATT, CASES, case_job
from simulator.cli.main import main
from simulator.simulate import simulate
from strategies.estimate.mixed import estimate_arrays_mixed
from strategies.estimate.scalar import estimate
from strategies.estimate.stage_cost_memo import StageCostMemo
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset

LLAMA = model_preset("llama3-8b")
_job = case_job          # the cases: experiments/offload_uneven_rows.py


@pytest.mark.parametrize("model,cluster,plan,gbs", CASES,
                         ids=[f"{m.name}-{c}-{p.split(',')[-1]}" for m, c, p, _ in CASES])
def test_offload_entry_is_the_simulations_on_uneven_stages(model, cluster, plan, gbs):
    job = _job(model, cluster, plan, gbs)
    e, s = estimate(job), simulate(job)
    be, bs = e.breakdown_s, s.metrics["breakdown_s"]
    assert bs["offload"] > 0
    assert be["offload"] == pytest.approx(bs["offload"], rel=1e-9)
    assert sum(be.values()) == pytest.approx(e.step_time_s, rel=1e-12)


def test_offload_entry_closed_form_first_stage_layers():
    """pp=2, 14 | 18 layers: the busiest stage (the LM head's, 18 layers) copies 18/16 of
    the even stage's: ``18 · m · (f + b)`` of the record's per-layer seconds; compute gives
    back exactly what offload gains, the step unchanged (8.9550 s)."""
    even = _job(LLAMA, "dgx-h100:1", f"tp=1,pp=2,dp=4,mbs=1,{ATT}", 64)
    job = _job(*CASES[0])
    c = StageCostMemo(job)()
    per = c.layer_offload_fwd + c.layer_offload_bwd
    m = job.num_microbatches
    e, e0 = estimate(job), estimate(even)
    assert per > 0 and m == 16
    assert e.breakdown_s["offload"] == pytest.approx(18 * m * per, rel=1e-12)
    assert e0.breakdown_s["offload"] == pytest.approx(16 * m * per, rel=1e-12)
    rest = {k: v for k, v in e.breakdown_s.items() if k not in ("compute", "offload")}
    assert e.step_time_s == pytest.approx(8.9550, abs=5e-5)
    assert e.breakdown_s["compute"] == pytest.approx(
        e.step_time_s - sum(rest.values()) - 18 * m * per, rel=1e-12)


def test_mixed_cluster_arrays_carry_the_scalar_offload_entry():
    """The search's arrays on a mixed cluster (``mixed_stages``) pick the same busiest
    stage's copies as the scalar estimate: the offload and compute entries plan by plan."""
    job = _job(*CASES[10])
    e = estimate(job)
    a = estimate_arrays_mixed(job.model, job.cluster, job.dtype,
                              PlanArrays.from_plans([job.plan]), job.framework)
    for k in ("offload", "compute", "step_time_s"):
        v = e.step_time_s if k == "step_time_s" else e.breakdown_s[k]
        assert float(a[k][0]) == pytest.approx(v, rel=1e-12), k


def test_layer_level_offload_on_uneven_stages_exits_2(capsys):
    """Layer-level offloading (``cpu_offloading_num_layers``) has no uneven pipeline to
    price: Megatron-Core refuses it with pp > 1 (``cost.layer_offload``)."""
    rc = main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--plan",
               "tp=1,pp=2,dp=4,mbs=1,gbs=64,first_stage_layers=14,cpu_offloading_num_layers=4"])
    err = capsys.readouterr().err
    assert rc == 2 and "cpu_offloading_num_layers=4" in err and "needs pp=1" in err
    assert "Traceback" not in err
