"""The array memory model (what the search prunes with) equals the per-stage scalar model on
models that mix layer kinds (dense first layers and MoE layers, MTP modules) under uneven
pipeline layouts, stage by stage, over schedules and recomputation; and the search proposes
Megatron's uneven DeepSeek-V3 layouts with the memory ``estimate`` reports."""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.job import make_job
from strategies.layout import mixed_layers, stage_content
from strategies.memory.arrays import peak_memory_arrays, rank_memory_arrays
from strategies.memory.scalar import memory_by_stage
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset

REL = 1e-9


def _ds_small():
    """DeepSeek-V3's layer (MLA, 256 experts, an MTP module), 8 layers, the first 2 dense."""
    return replace(model_preset("deepseek-v3"), name="ds-small", num_layers=8,
                   first_k_dense_replace=2, vocab_size=32000, seq_length=1024)


def _qwen3_dense2():
    """Qwen3-30B-A3B with its first 2 layers dense (a dense/MoE mix on GQA, no MTP)."""
    return replace(model_preset("qwen3-30b-a3b"), name="qwen3-30b-a3b-dense2",
                   first_k_dense_replace=2)


def _gpt_oss_freq2():
    """gpt-oss-120b with every other layer dense (``moe_layer_freq`` 2: kinds alternate,
    windowed attention, attention sinks)."""
    return replace(model_preset("gpt-oss-120b"), name="gpt-oss-120b-freq2", moe_layer_freq=2)


MODELS = {"deepseek-v3": lambda: model_preset("deepseek-v3"), "ds-small": _ds_small,
          "qwen3-30b-a3b-dense2": _qwen3_dense2, "gpt-oss-120b-freq2": _gpt_oss_freq2}
SCHEDULES = [("1f1b", 1), ("gpipe", 1), ("zb-h1", 1), ("interleaved", 2), ("zb-v", 2),
             ("dualpipev", 2), ("dualpipe", 1)]
RECOMPUTE = ["none", "selective", "full", "full,recompute_layers=1"]


def _layouts(L: int, pp: int, v: int) -> list[str]:
    """Uneven layouts of ``L`` layers on ``pp`` ranks with ``v`` chunks each that Megatron's
    rules accept: first/last counts (the heaviest first rank, the heaviest last rank, the
    most balanced), one end given, and the embedding and loss as slots."""
    pairs = [(f, la) for f in range(v, L, v) for la in range(v, L - f + 1, v)
             if (L - f - la) > 0 and (L - f - la) % ((pp - 2) * v) == 0] if pp > 2 else \
        [(f, L - f) for f in range(v, L, v) if (L - f) % v == 0]
    out = []
    if pairs:
        tilt = lambda x: (x[0] - x[1], x)                                  # noqa: E731
        picks = {max(pairs, key=tilt), min(pairs, key=tilt),
                 min(pairs, key=lambda x: (abs(x[0] - x[1]) + abs(x[0] - L / pp), x))}
        out += [f"first_stage_layers={f},last_stage_layers={la}" for f, la in sorted(picks)
                if (f, la) != (L // pp, L // pp) or L % pp]
    ones = [f for f in range(v, L, v) if (L - f) % ((pp - 1) * v) == 0 and f != L // pp]
    if ones:
        out += [f"first_stage_layers={ones[len(ones) // 2]}",
                f"last_stage_layers={ones[len(ones) // 3]}"]
    if (L + 2) % (pp * v) == 0 and (L + 2) // (pp * v) >= 2:
        out.append("account_embedding=true,account_loss=true")
    return out


def _cases(name: str):
    """``(model, cluster, job)`` of each accepted plan: pp 3, 4 and 5 (tp 2, dp 4), every
    schedule; the first layout with every recomputation setting, the others (and the even
    split) with one each."""
    m = MODELS[name]()
    for pp, (sched, v) in itertools.product((3, 4, 5), SCHEDULES):
        cl = cluster_preset("dgx-h100", pp)
        # the even split too where it exists (DualPipe takes only that: both copies by kind)
        for i, lay in enumerate(_layouts(m.num_layers, pp, v) + ["zero=0"]):
            for rc in (RECOMPUTE if i == 0 else [RECOMPUTE[i % len(RECOMPUTE)]]):
                text = (f"tp=2,pp={pp},dp=4,mbs=1,gbs=64,schedule={sched},vpp={v},"
                        f"recompute={rc},{lay}").replace(",vpp=1,", ",")
                if m.is_moe:
                    text += ",ep=4"
                try:
                    job = make_job(m, cl, parse_plan(text))
                except SpecError:
                    continue
                yield m, cl, job


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_array_memory_equals_scalar_every_stage(name):
    """Every stage of every plan: ``rank_memory_arrays`` (the search's model, with the
    schedule's default stash) equals ``memory_by_stage`` to 1e-9, and the search's peak is
    the largest stage."""
    n, uneven, kinds_differ = 0, 0, 0
    for m, cl, job in _cases(name):
        assert mixed_layers(m)
        stages = [b.total for b in memory_by_stage(job)]
        P = PlanArrays.from_plans([job.plan])
        for s, want in enumerate(stages):
            got = float(rank_memory_arrays(m, P, s, job.dtype, job.system, cl.gpu,
                                           clamp=job.framework.eager_variants)[0])
            assert got == pytest.approx(want, rel=REL), (job.plan, s)
        peak = float(peak_memory_arrays(m, P, job.dtype, job.system, cl.gpu,
                                        job.framework.eager_variants)[0])
        assert peak == pytest.approx(max(stages), rel=REL), job.plan
        n += 1
        uneven += len(set(job.layout.layers_per_stage)) > 1
        content = {stage_content(m, job.layout, r) for r in range(job.plan.pp)}
        kinds_differ += len({tuple(k for k, _ in c) for c in content}) > 1
    # the grid is not vacuous: many plans, most uneven, ranks holding different kinds
    assert n >= 60 and uneven >= n // 2 and kinds_differ >= n // 2, (n, uneven, kinds_differ)


def test_all_ranks_count_where_kinds_differ():
    """The case that was 30 % low: 8 layers, the first 2 dense, on 4 ranks (1, 3, 3, 1
    layers): rank 2 holds three MoE layers where rank 1 holds a dense one, so the peak is
    rank 2's, which neither the end ranks nor rank 1 bound."""
    m, cl = _ds_small(), cluster_preset("dgx-h100", 2)
    job = make_job(m, cl, parse_plan("tp=2,pp=4,dp=1,cp=2,mbs=1,gbs=32,schedule=gpipe,"
                                     "sp=true,zero=1,first_stage_layers=1,last_stage_layers=1"))
    stages = [b.total for b in memory_by_stage(job)]
    assert int(np.argmax(stages)) == 2
    assert max(stages) > 1.2 * max(stages[0], stages[1], stages[3])
    P = PlanArrays.from_plans([job.plan])
    assert float(peak_memory_arrays(m, P)[0]) == pytest.approx(max(stages), rel=REL)


def test_no_permutation_buffers_on_a_rank_of_dense_layers():
    """A rank holding only dense layers has no MoE token permutation: its ``other``
    allowance is the fixed one plus fragmentation (ZeRO 1: no reduction buffers), while a
    rank with MoE layers adds one layer's dispatch and combine buffers
    (``activations.permutation_buffer_bytes``)."""
    from strategies.memory.activations import permutation_buffer_bytes
    from strategies.memory.scalar import memory_components
    m, cl = _ds_small(), cluster_preset("dgx-h100", 2)
    job = make_job(m, cl, parse_plan("tp=2,pp=4,dp=1,cp=2,mbs=1,gbs=32,schedule=gpipe,"
                                     "sp=true,zero=1,first_stage_layers=1,last_stage_layers=1"))
    assert stage_content(m, job.layout, 0) == (("dense", 1),)
    sy = job.system
    from strategies.cost.token_counts import moe_load
    p = job.plan
    load = moe_load(p.ep, p.imbalance, p.capacity_factor, m, p.mbs, p.tp, p.cp, p.expert_tp)
    perm = permutation_buffer_bytes(m, m.seq_length, 1, 2, 2, load)
    assert perm > 0
    for s, extra in ((0, 0.0), (2, perm)):
        parts = memory_components(job, s)
        acts = sum(p.activations for p in parts.values())
        want = sy.fixed_other_bytes + sy.fragmentation * acts + extra
        assert parts["other"].other == pytest.approx(want, rel=1e-12), s


@pytest.mark.parametrize("text", [
    "tp=1,pp=4,dp=8,ep=8,mbs=1,gbs=32,first_stage_layers=16,last_stage_layers=13",
    "tp=1,pp=8,dp=4,ep=4,mbs=1,gbs=32,schedule=zb-h1,first_stage_layers=8,last_stage_layers=5",
    "tp=1,pp=16,dp=2,ep=2,mbs=1,gbs=32,schedule=interleaved,vpp=2,"
    "layout=Et*3|(tt|)*29,m|L",
    "tp=1,pp=4,dp=8,ep=8,mbs=1,gbs=64,recompute=full,last_stage_layers=13",
])
def test_parameters_are_the_stage_records(text):
    """The memory's parameters per stage are the stage-cost record's (``params_by_stage``,
    what the estimate's optimizer and gradient times read): bf16, ZeRO 0, 2 bytes each."""
    m, cl = model_preset("deepseek-v3"), cluster_preset("dgx-h100", 4)
    job = make_job(m, cl, parse_plan(text))
    rec = stage_costs(job)
    for s, b in enumerate(memory_by_stage(job)):
        assert b.params == pytest.approx(job.system.param_bytes * rec.params_by_stage[s],
                                               rel=1e-12), s


@pytest.mark.slow
def test_search_proposes_megatron_deepseek_v3_layouts():
    """DeepSeek-V3 (61 layers: no even split beyond pp 1) on 128 DGX H100 nodes: the space
    carries the first/last-stage layouts Megatron-Bridge's DeepSeek-V3 recipe gives for
    (pp, vpp) = (4, 1), (8, 1), (16, 1) (16/16/16/13, 8x7/5, 4x15/1 layers, the MTP module
    and the loss on the last rank), and each proposed plan's peak memory is the largest
    stage of ``estimate``'s ``memory_by_stage``.

    Micro-batches of 1 and 2 (``max_mbs=2``), not 1 to 8: the same layouts for every
    (pp, vpp), 2 (32/29) included (a layout reads the layers' costs, not the micro-batch),
    and mbs 1 and 2 rows among those sampled; a third of the enumeration's time."""
    m, cl = model_preset("deepseek-v3"), cluster_preset("dgx-h100", 128)
    sp = enumerate_space(m, cl, 4096, SpaceOptions(max_mbs=2))
    c = sp.cols
    uneven = (c["lf"] > 0) | (c["ll"] > 0) | c["acc"]
    assert uneven.sum() > 0 and np.all(c["pp"][~uneven] == 1)
    got = {(int(p), int(v)): (int(f), int(la)) for p, v, f, la in
           zip(c["pp"][uneven], c["vpp"][uneven], c["lf"][uneven], c["ll"][uneven])}
    for pair, want in {(4, 1): (16, 13), (8, 1): (8, 5), (16, 1): (4, 1)}.items():
        assert got.get(pair) == want, (pair, got.get(pair))
    rng = np.random.default_rng(0)
    mbs = set()
    for pp in (4, 8, 16):
        rows = np.flatnonzero(uneven & (c["pp"] == pp))
        for i in rng.choice(rows, size=min(3, len(rows)), replace=False).tolist():
            mbs.add(int(c["mbs"][i]))
            job = make_job(m, cl, sp.plan(i))
            est = estimate(job)
            want = max(b.total for b in est.memory_by_stage)
            assert float(sp.peak_memory[i]) == pytest.approx(want, rel=REL), sp.key(i)
            assert est.memory_by_stage[-1].total != est.memory_by_stage[1].total
    assert mbs == {1, 2}


def _qwen3_10_layers():
    """10 layers, the first 2 dense (each under half an MoE layer's time): only uneven
    layouts run it on 4 ranks, and the dense layers make rank 0 cheaper than its count."""
    return replace(model_preset("qwen3-30b-a3b"), name="qwen3-10l-dense2", num_layers=10,
                   first_k_dense_replace=2, seq_length=1024)


@pytest.mark.parametrize("text", [
    "tp=4,pp=2,dp=1,mbs=1,gbs=8,first_stage_layers=6,last_stage_layers=4",
    "tp=2,pp=4,dp=1,mbs=1,gbs=8,account_embedding=true,account_loss=true",
    "tp=2,pp=4,dp=1,mbs=1,gbs=8,schedule=zb-h1,first_stage_layers=4,last_stage_layers=2",
    "tp=1,pp=1,dp=8,ep=8,mbs=1,gbs=8",
])
def test_bound_below_simulation_mixed_kinds(text):
    """The lower bound prices the layers it adds at the cheapest kind and the windows it
    subtracts at the dearest (``bound.layer_mix.LayerMix``): with the mean layer, rank 0
    (6 layers, the 2 dense ones) was priced above its real time and the first plan's bound
    exceeded its simulation (0.0645185 s against 0.0645148 s), which stopped the search."""
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.search.plan_rows import columns_from_plans
    m, cl = _qwen3_10_layers(), cluster_preset("dgx-h100", 1)
    job = make_job(m, cl, parse_plan(text))
    bound = float(step_time_lower_bound(m, cl, "bf16", columns_from_plans([job.plan]))[0])
    sim = simulate(job).step_time_s
    assert 0.5 * sim < bound <= sim


@pytest.mark.parametrize("text", [
    "tp=1,pp=8,dp=4,ep=4,mbs=1,gbs=32,first_stage_layers=8,last_stage_layers=5",
    "tp=1,pp=16,dp=2,ep=2,mbs=1,gbs=32,first_stage_layers=4,last_stage_layers=1",
    "tp=1,pp=16,dp=2,ep=2,mbs=1,gbs=32,schedule=zb-h1,first_stage_layers=4,"
    "last_stage_layers=1,recompute=full",
])
def test_bound_below_simulation_deepseek_v3_layouts(text):
    """The layouts the search proposes for DeepSeek-V3 (3 dense layers on rank 0, the MTP
    module on the last rank): the bound stays below the simulation."""
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.search.plan_rows import columns_from_plans
    m, cl = model_preset("deepseek-v3"), cluster_preset("dgx-h100", 4)
    job = make_job(m, cl, parse_plan(text))
    bound = float(step_time_lower_bound(m, cl, "bf16", columns_from_plans([job.plan]))[0])
    sim = simulate(job).step_time_s
    assert 0.5 * sim < bound <= sim


@pytest.mark.slow
def test_pruned_search_equals_exhaustive_mixed_kinds():
    """A search whose space holds uneven layouts of a dense+MoE model (pp 2 and 4 only
    through them) finds what the exhaustive one finds: the bound holds on every plan.

    cp is fixed to 1 (596 feasible plans, not 1,364): every rule that pruned the free space
    still prunes plans here (tp_heads, pp_layers, ep, zero3_pp, redundant, schedule, bubble,
    memory, zero2_dominated, and now fixed), and every value of tp, pp, dp, ep, vpp, the
    schedule, ZeRO, recompute and sp stays; context parallelism of a MoE space is
    test_bound_moe's exhaustive search."""
    from tests.search_checks import assert_pruned_equals_exhaustive
    m = _qwen3_10_layers()
    cfg = dict(model=m, cluster=cluster_preset("dgx-h100", 1), gbs=8,
               options=SpaceOptions(max_mbs=1, max_vpp=2, fixed={"cp": 1}), workers=2, k=5)
    sp = enumerate_space(m, cfg["cluster"], 8, cfg["options"])
    uneven = (sp.cols["lf"] > 0) | (sp.cols["ll"] > 0) | sp.cols["acc"]
    assert set(sp.cols["pp"][uneven].tolist()) == {2, 4}
    assert {k for k, n in sp.pruned.items() if n} == {
        "fixed", "tp_heads", "pp_layers", "ep", "zero3_pp", "redundant", "schedule", "bubble",
        "memory", "zero2_dominated"}
    assert_pruned_equals_exhaustive(cfg)
