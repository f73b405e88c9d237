"""DualPipe on uneven layer splits (calibration §5.33): rank ``r`` holds stage ``r`` of one
direction and stage ``pp-1-r`` of the other, so with a layout whose stages differ (a layout
string, ``first/last_stage_layers``, the embedding and loss as slots) the rank's two copies
hold different layer counts. Each copy is read from the layout in the compiler, the
estimate's per-chunk times (``estimate.chunk_correction.chunk_times``), the parameters (both
copies), the memory model's per-chunk stash and the search's array columns (per copy, the mean of the
two: ``plan_arrays.rank_layers``, ``cost.stage.stage_params.copy_layers``). Checked here: the whole
simulator's free-communication step is the order's makespan with each copy's layers, and
where the end pair is the busiest and never idles, ``m`` times its mean work (closed form);
the estimate within the tolerance the even split has against the simulation; parameters by
closed form; the simulated activation peak equal to the memory model; bad input exit 2."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.output.metrics_json import activation_memory_json
from simulator.simulate import simulate
from strategies.cost import param_counts
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.memory.scalar import memory_by_stage
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.schedules.analysis import simulate_free_comm
from strategies.search.plan_rows import columns_from_plans
from tests.schedule_checks import balanced_costs
from topologies.cluster import cluster_preset

A100 = cluster_preset("dgx-a100", 1)
DENSE16 = replace(model_preset("llama3-8b"), num_layers=16, seq_length=512, vocab_size=32000)
DENSE = "tp=1,pp=4,mbs=1,gbs=16,schedule=dualpipe"


def _ds(layers: int = 9, dense: int = 1):
    """DeepSeek-V3's layers: ``dense`` dense first, MoE after, one MTP module, s = 1024."""
    return replace(model_preset("deepseek-v3"), name="ds-small", num_layers=layers,
                   first_k_dense_replace=dense, vocab_size=32000, seq_length=1024)


@pytest.mark.parametrize("layout", ["Et*4|(t*4|)*2,t*4L", "Et*2|t*5|t*6|t*3L",
                                    "Et*6|t*2|t*2|t*6L", "Et|t*7|t*7|tL"])
def test_free_comm_step_is_the_order_with_each_copys_layers(layout):
    """Balanced costs (no embedding, head or optimizer), free communication: the whole
    simulator's step is DualPipe's per-rank order played with rank ``r``'s chunk 0 at stage
    ``r``'s layers and chunk 1 at stage ``pp-1-r``'s (``analysis.simulate_free_comm``) to
    1e-9; with the end stages heaviest (6, 2, 2, 6) the end ranks never idle and the step is
    ``m`` times their mean work per micro-batch, ``m/2·(n_0 + n_3)·(F + B)`` (1e-9)."""
    job = make_job(DENSE16, A100, parse_plan(f"{DENSE},layout={layout}"))
    c = balanced_costs(job)
    res = simulate(job, free_comm=True, costs=c)
    n, pp, m = job.layout.layers_per_stage, job.plan.pp, job.num_microbatches
    f, b, w = c.layer_fwd, c.layer_bwd + c.layer_recompute, c.layer_wgrad
    times = [[(n[s] * f, n[s] * b, n[s] * w) for s in (r, pp - 1 - r)] for r in range(pp)]
    order = simulate_free_comm("dualpipe", pp, m, 1, 0.0, 0.0, chunk_times=times)
    assert res.step_time_s == pytest.approx(order, rel=1e-9)
    busiest = max(m / 2 * (n[r] + n[pp - 1 - r]) * (f + b) for r in range(pp))
    assert res.step_time_s >= busiest * (1 - 1e-12)
    if n == (6, 2, 2, 6):
        assert res.step_time_s == pytest.approx(busiest, rel=1e-9)


LLAMA8 = "tp=1,pp=8,mbs=1,gbs=32,schedule=dualpipe"
DS = "pp=4,ep=2,zero=1,schedule=dualpipe,gbs=32"


@pytest.mark.parametrize("model,cluster,even,uneven", [
    (model_preset("llama3-8b"), A100, LLAMA8,
     [LLAMA8 + ",layout=Et*3|t*5|(t*4|)*4,t*5|t*3L",
      LLAMA8 + ",first_stage_layers=2,last_stage_layers=6"]),
    (_ds(8), cluster_preset("hgx-h800", 2), DS,
     [DS + ",layout=Et|t*3|t*3|t*2mL", DS + ",first_stage_layers=3,last_stage_layers=1"]),
])
def test_estimate_agrees_with_simulation(model, cluster, even, uneven):
    """Each uneven plan's estimate is within the error the even split of the same model has
    against the contention-free simulation (the estimate has no flow contention), or 2 %
    (``test_dualpipe_plan``'s tolerance for the even dense case), whichever is larger
    (§5.36: llama3-8b pp 8: even -0.25 %, uneven -0.24 / +0.12 %; 8-to-10-layer DeepSeek-V3
    with MTP, pp 4: even -0.4 %, uneven +1.4 / +1.2 %); the lower bound below both
    simulations (the search's columns, or a layout string read by ``PlanArrays.from_plans``,
    §5.36); the mirror all-reduce pairs meet (a pair holds the same two stages, so the same
    bytes)."""
    def err(plan: str, layers: int | None = None) -> float:
        m = model if layers is None else replace(model, num_layers=layers)
        job = make_job(m, cluster, parse_plan(plan))
        res = simulate(job, network="contention-free")
        # the bound: the search's columns, or a layout string's ranks (``PlanArrays``)
        cols = PlanArrays.from_plans([job.plan]) if "layout=" in plan else \
            columns_from_plans([job.plan])
        (bound,) = step_time_lower_bound(m, cluster, "bf16", cols)
        assert bound <= min(res.step_time_s, simulate(job).step_time_s)
        return estimate(job).step_time_s / res.step_time_s - 1
    tol = max(abs(err(even)), 0.02)
    for plan in uneven:
        layers = None if model.num_layers > 8 else 9 + plan.startswith(DS + ",first")
        assert abs(err(plan, layers)) <= tol, plan


def test_both_copies_parameters_closed_form():
    """Rank ``r`` holds ``n_r + n_{pp-1-r}`` layers (both copies), the end ranks the
    embedding and the LM head: ``params_by_stage`` to 1e-12; ranks ``r`` and ``pp-1-r``
    hold the same; a layout string and ``first/last_stage_layers`` giving the same split
    are the same plan, bit for bit."""
    a = make_job(DENSE16, A100, parse_plan(DENSE + ",first_stage_layers=6,last_stage_layers=2"))
    b = make_job(DENSE16, A100, parse_plan(DENSE + ",layout=Et*6|t*4|t*4|t*2L"))
    assert a.layout.stages == b.layout.stages
    assert estimate(a).step_time_s == estimate(b).step_time_s
    c = stage_costs(a)
    lp = param_counts.layer_params_per_gpu(DENSE16, 1, 1)
    ends = param_counts.embedding_params_per_gpu(DENSE16, 1) \
        + param_counts.head_params_per_gpu(DENSE16, 1, 4)
    assert c.params_by_stage[0] == pytest.approx(8 * lp + ends, rel=1e-12)
    assert c.params_by_stage[1] == pytest.approx(8 * lp, rel=1e-12)
    assert c.params_by_stage[0] == c.params_by_stage[3]
    assert c.params_by_stage[1] == c.params_by_stage[2]


@pytest.mark.parametrize("model,cut", [
    (_ds(12, 3), ",ep=2,layout=Ett|tttt|tttt|ttmL"),
    (_ds(14, 3), ",ep=2,first_stage_layers=2,last_stage_layers=4"),
    (replace(DENSE16, num_layers=13), ",layout=Et|tttt|tttttt|ttL")])
@pytest.mark.parametrize("rc", ["none", "full"])
def test_simulated_activation_peak_is_the_memory_model(model, cut, rc):
    """Each stashed micro-batch at its own copy's layers: the simulated activation peak
    equals ``memory_by_stage``'s activations on every rank (1e-9)."""
    job = make_job(model, cluster_preset("dgx-h100", 1),
                   parse_plan(f"tp=1,pp=4,dp=2,mbs=1,gbs=16,schedule=dualpipe,recompute={rc}"
                              + cut))
    stages = memory_by_stage(job)
    for r in activation_memory_json(simulate(job), job):
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=1e-9), r


@pytest.mark.parametrize("plan,field,words", [
    ("tp=1,pp=16,ep=64,mbs=1,schedule=dualpipe", "num_layers",
     ["num_layers=61", "divisible by pp=16", "layout="]),
    ("tp=1,pp=16,ep=64,mbs=1,schedule=dualpipe,layout=Et*3|(t*4|)*14,tmL", "layout",
     ["num_layers=61", "not 60"]),
    ("tp=1,pp=16,ep=64,mbs=1,schedule=dualpipe,layout=Et*3|(t*4|)*13,t*6mL", "layout",
     ["pp*vpp = 16*1 = 16", "not 15"]),
    ("tp=1,pp=2,ep=64,mbs=1,schedule=dualpipe,layers_per_stage=30/31", "layers_per_stage",
     ["30/31", "pp-1-r", "layout="]),
])
def test_bad_input_exit_2(capsys, plan, field, words):
    """Still refused, exit 2 naming the field, the value and the rule: no split given for a
    model that does not divide, a layout whose layers or stages do not add up,
    ``layers_per_stage`` (per-rank GPU sizing) under DualPipe."""
    rc = main(["estimate", "--model", "deepseek-v3", "--cluster", "hgx-h800:256",
               "--plan", plan, "--global-batch", "1024"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and "Traceback" not in err
    assert field in err and all(w in err for w in words), err
