"""Megatron-Core's ``delay_wgrad_compute`` in the combined 1F1B pairs (docs/calibration.md
§5.87): a pair's last backward layer leaves its attention block's weight gradient
(``StageCosts.dw_attn``) to run after the pair's backward message is posted, so each steady
pipeline call is exposed only by what outlasts it, in the estimate
(``combined.pair_message_hiding``) and in the simulation (``ProgramBuilder.combined_pair``)
alike."""
from dataclasses import replace

import pytest

from simulator.program.compiler import compile_job
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost import gemm_shapes, gemm_time, layer_time
from strategies.cost.stage import stage_costs
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from tests.ep_overlap_jobs import pair_job
from strategies.schedules.combined import pair_message_hiding
from topologies.cluster import cluster_preset
from topologies.gpus import get_gpu


_job = pair_job


def test_hiding_is_the_delayed_weight_gradient_under_the_combined_order():
    assert float(pair_message_hiding(2.0, True, 0.5)) == 0.5
    assert float(pair_message_hiding(2.0, False, 0.5)) == 2.0
    assert float(pair_message_hiding(2.0, True)) == 0.0


def test_attention_weight_gradient_is_its_linears_gemms():
    """``attention_wgrad`` and the other linears' weight-gradient GEMMs sum to the layer's
    weight-gradient GEMMs (``units_time_bwd``) to 1e-12; ``dw_attn`` holds more than the
    column linear's (``rd_attn``, QKV: the output projection too) and less than ``W``."""
    m = replace(model_preset("gpt-1.7b"), seq_length=1024)
    gpu = get_gpu("H100-SXM")
    parts = gemm_shapes.layer_gemm_parts(m, 1, 1, 1, 1, None, None, 1.0)
    units = gemm_time.gemm_units([g for _, g in parts], 1, gpu, "bf16")
    n = len(m.attention_linears())
    rest = sum(g[0] * u[4] for (_, g), u in zip(parts[n:], units[n:]))
    _, g_w = gemm_time.units_time_bwd([g[0] for _, g in parts], units)
    assert layer_time.attention_wgrad(m, parts, units) + rest == pytest.approx(g_w, rel=1e-12)
    assert layer_time.attention_wgrad(m, parts, units, 2.0) == \
        pytest.approx(2 * layer_time.attention_wgrad(m, parts, units), rel=1e-15)
    job = make_job(m, cluster_preset("dgx-h100", 1), parse_plan("tp=2,pp=1,dp=4,mbs=1,gbs=8"))
    c = stage_costs(job)
    assert c.layer_wgrad > c.dw_attn > c.rd_attn > 0


@pytest.mark.parametrize("pp,v,m", [(2, 2, 4), (4, 2, 8)])
def test_each_steady_call_exposes_what_outlasts_the_delayed_wgrad(pp, v, m):
    """Estimate and contention-free simulation are each ``S + chain·t + steady·max(0, t −
    dw)`` in the message time ``t`` (``chain = 2(pp·v − 1)``, ``steady`` the other blocking
    calls, ``dw`` one layer's attention weight gradient), to 1e-9, on both sides of
    ``t = dw``; before, both were ``S + k·t``."""
    sched = get_schedule("interleaved")
    k = float(sched.exposed_messages(m, pp, v))
    chain = 2 * (pp * v - 1)
    dw = stage_costs(_job(pp, v, m, 50e9)).dw_attn
    assert dw > 0
    spans: dict[str, list[float]] = {"estimate": [], "simulation": []}
    ts = []
    for bw in (400e9, 200e9, 50e9, 25e9):
        job = _job(pp, v, m, bw)
        c = stage_costs(job)
        assert c.dw_attn == dw
        t = float(cm.p2p_time(c.p2p_bytes, job.cluster, job.cluster.gpus_per_node))
        ts.append(t)
        form = chain * t + (k - chain) * max(0.0, t - dw)
        spans["estimate"].append(estimate(job).step_time_s - form)
        spans["simulation"].append(simulate(job, network="contention-free").step_time_s
                                   - form)
    assert ts[1] < dw < ts[2]           # both sides of the delayed weight gradient
    for s in spans.values():
        for x in s[1:]:
            assert x == pytest.approx(s[0], rel=1e-9)


def test_the_backward_message_leaves_before_the_delayed_wgrad():
    """Each paired backward's send waits for the pair's compute before the deferred weight
    gradient, which runs after it as its own ``W`` piece of ``dw_attn`` seconds, one per
    pair."""
    job = _job(2, 2, 4, 50e9)
    c = stage_costs(job)
    progs = compile_job(job)
    for prog in progs.values():
        paired = set(prog.meta["paired_forwards"].values())
        comp = {op.id: op for op in prog.streams["compute"]}
        dws = [op for op in prog.streams["compute"] if op.kind == "wgrad"]
        assert len(dws) == len(paired)
        assert all(op.seconds == pytest.approx(c.dw_attn, rel=1e-12) for op in dws)
        dw_ids = {op.id for op in dws}
        sends = [op for name, ops in prog.streams.items() if name.startswith("pp-comm")
                 for op in ops if type(op).__name__ == "Send" and op.label[5:] in paired]
        assert sends
        pos = {op.id: n for n, op in enumerate(prog.streams["compute"])}
        where = {op.label: pos[op.id] for op in dws}
        for op in sends:
            assert not set(op.deps) & dw_ids
            mine = [pos[d] for d in op.deps if d in comp]
            assert mine and max(mine) < where["W" + op.label[6:]]


def test_without_pipelining_or_overlap_nothing_is_deferred():
    """No pipeline message to hide (pp 1) or no combined order: no deferred piece."""
    for job in (_job(2, 2, 4, 50e9, epo=False),
                make_job(replace(model_preset("mixtral-8x7b"), num_layers=2, seq_length=1024),
                         cluster_preset("dgx-h100", 1),
                         parse_plan("tp=1,pp=1,dp=8,ep=8,mbs=1,gbs=32,zero=1,"
                                    "ep_overlap=true"))):
        for prog in compile_job(job).values():
            assert not [op for op in prog.streams["compute"] if op.kind == "wgrad"]


def test_reader_states_delay_wgrad_where_the_recipe_overlaps():
    """Rows with a Megatron-Bridge recipe that run the overlap say ``delay_wgrad_compute``
    was on with it (the harness sets both in ``_set_moe_a2a_overlap_overrides``); rows
    without the overlap say nothing of it."""
    from strategies.reference.cases import case_from_entry, load_reference
    rows = load_reference("strategies/reference/data/heldout_2026b.json")
    seen = {True: 0, False: 0}
    for r in rows:
        case = case_from_entry(r, rows)
        if case.job is None:
            continue
        said = any(a.startswith("delay_wgrad_compute=true") for a in case.assumptions)
        assert said == case.job.plan.ep_overlap
        seen[said] += 1
    assert seen[True] >= 5 and seen[False] > 0
