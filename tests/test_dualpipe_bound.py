"""The lower bound on plans with a pipeline layout string (calibration §5.36): the search's
columns cannot say a layout string, so ``PlanArrays.from_plans`` reads rank 0's, rank
``pp-2``'s and rank ``pp-1``'s layers (per copy under DualPipe) and the fewest and most layers
of a virtual stage (``layout.layout_string_extremes``) and the bound prices those ranks.
Checked: the bound never exceeds the simulated step on random uneven DualPipe, 1F1B and
interleaved layouts (deterministic seeds) nor on a mixed dense/MoE model; DualPipe's gradient
reduction window counted on the order; the bound follows the layout (a split heavier at the
ends is bounded above the even split's bound)."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from simulator.simulate import simulate
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.job import make_job
from strategies.layout import layout_string_extremes
from strategies.plan import Plan, parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from topologies.cluster import cluster_preset

A100 = cluster_preset("dgx-a100", 1)
M16 = replace(model_preset("llama3-8b"), num_layers=16, seq_length=512, vocab_size=32000)


def _layout(counts: list[int]) -> str:
    """Megatron's layout string with ``counts`` layers per virtual stage (path order)."""
    parts = ["t" * n for n in counts]
    parts[0], parts[-1] = "E" + parts[0], parts[-1] + "L"
    return "|".join(parts)


def _random_counts(rng: random.Random, layers: int, stages: int) -> list[int]:
    """``stages`` counts of at least 1 summing to ``layers``."""
    cuts = sorted(rng.sample(range(1, layers), stages - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [layers])]


def _bound_and_sim(model, cluster, plan: str) -> tuple[float, float]:
    job = make_job(model, cluster, parse_plan(plan))
    (bound,) = step_time_lower_bound(model, cluster, job.dtype,
                                     PlanArrays.from_plans([job.plan]), job.framework)
    return float(bound), simulate(job).step_time_s


CASES = [("tp=1,pp=4,mbs=1,gbs=16,schedule=dualpipe", 4, 0),
         ("tp=1,pp=4,mbs=1,gbs=16,schedule=dualpipe,zero=1", 4, 1),
         ("tp=2,pp=4,mbs=1,gbs=16,schedule=1f1b", 4, 2),
         ("tp=1,pp=4,mbs=1,gbs=16,schedule=1f1b", 4, 3),
         ("tp=1,pp=2,mbs=1,gbs=16,schedule=interleaved,vpp=2", 4, 4),
         ("tp=2,pp=2,mbs=1,gbs=16,schedule=interleaved,vpp=4", 8, 5)]


@pytest.mark.parametrize("base,stages,seed", CASES)
def test_bound_below_simulation_on_random_layouts(base, stages, seed):
    """Three random layouts per plan (seeded) and the even split: bound <= simulated step."""
    rng = random.Random(seed)
    plans = [base] + [f"{base},layout={_layout(_random_counts(rng, 16, stages))}"
                      for _ in range(3)]
    for plan in plans:
        bound, sim = _bound_and_sim(M16, A100, plan)
        assert bound <= sim, (plan, bound, sim)


def test_bound_below_simulation_mixed_model():
    """DeepSeek-V3's layers (1 dense first, MoE after, one MTP module) on uneven DualPipe
    layout strings: bound <= simulated step."""
    m = replace(model_preset("deepseek-v3"), name="ds-small", num_layers=9,
                first_k_dense_replace=1, vocab_size=32000, seq_length=1024)
    h800 = cluster_preset("hgx-h800", 2)
    for lay in ("Et|t*3|t*3|t*2mL", "Et*4|t*2|t|t*2mL"):
        bound, sim = _bound_and_sim(m, h800, f"pp=4,ep=2,zero=1,schedule=dualpipe,gbs=32,"
                                             f"layout={lay}")
        assert bound <= sim, (lay, bound, sim)


def test_bound_reads_the_layout():
    """6/2/2/6 under DualPipe (the end pair busiest): its bound exceeds the even split's,
    and stays below its own simulated step; the extremes read from the string."""
    assert layout_string_extremes(Plan(pp=4, schedule="dualpipe",
                                       layout="Et*6|t*2|t*2|t*6L")) == (6.0, 2.0, 6.0, 2.0, 6.0)
    assert layout_string_extremes(Plan(pp=4, schedule="1f1b",
                                       layout="Et*2|t*5|t*6|t*3L")) == (2.0, 6.0, 3.0, 2.0, 6.0)
    base = "tp=1,pp=4,mbs=1,gbs=16,schedule=dualpipe"
    even, _ = _bound_and_sim(M16, A100, base)
    heavy, sim = _bound_and_sim(M16, A100, base + ",layout=Et*6|t*2|t*2|t*6L")
    assert even < heavy <= sim


@pytest.mark.parametrize("pp", [2, 4, 6, 8, 16])
def test_dualpipe_reduce_window_counted_on_the_order(pp):
    """After the first of a rank's copies completes its gradients, the most B and W steps
    any rank still runs is ``pp`` (no forward), for m from 2·pp to 4·pp."""
    s = get_schedule("dualpipe")
    for m in range(2 * pp, 4 * pp + 1, 2):
        most = 0
        for r in range(pp):
            st = s.steps(r, pp, m)
            done = min(max(k for k, x in enumerate(st) if x.chunk == c and x.kind in "BW")
                       for c in (0, 1))
            assert all(x.kind != "F" for x in st[done + 1:])
            most = max(most, len(st) - done - 1)
        assert most == s.reduce_window_steps(pp, 1)
