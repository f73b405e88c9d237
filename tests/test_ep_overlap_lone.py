"""Megatron-Core's combined 1F1B with interleaving (``ep_overlap``): the warm-up's lone
forwards and the cool-down's lone backwards (docs/calibration.md §5.91). On the critical
path the first micro-batch's forward crosses every virtual stage alone and the last one's
backward crosses them back alone; every other slot is a pair, so the step with equal
stages is ``(m·v + pp − 1)·n·(f + b + P) + L·(2t − P)`` (``n`` layers a chunk, ``L`` the
model's, ``P = pair_exposed(t, f, b)``), the estimate's ``lone_passes_exposed``."""
from dataclasses import replace

import pytest

from simulator.program.compiler import compile_job
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.schedules.analysis import simulate_free_comm
from strategies.schedules.combined import lone_passes_exposed, pair_exposed
from tests.ep_overlap_jobs import pair_job
from tests.norm_barrier_checks import barrier_s
from tests.test_ep_overlap import _free_costs

F, B = 1e-3, 2e-3


def _costs(job, scale):
    """Layers of ``F``/``B`` seconds, free messages and other communication, the expert
    bytes ``scale`` times the job's; the all-to-all's contention-free seconds."""
    c = replace(_free_costs(job, F, B), p2p_bytes=0.0)
    c = replace(c, ep_bytes=c.ep_bytes * scale)
    t = float(cm.collective_time("alltoall", c.ep_bytes, 8, 1, job.cluster, c.ep_remote_scale,
                                 c.ep_nvlink_share))
    return c, t


@pytest.mark.parametrize("pp,v,m", [(2, 2, 4), (2, 4, 8), (4, 2, 8), (4, 2, 4)])
@pytest.mark.parametrize("scale", [0.5, 10.0, 20.0, 40.0, 80.0])
def test_lone_chain_closed_form_is_the_simulation(pp, v, m, scale):
    """All-to-all shorter than the forward layer, between the two layers and longer than
    both (t 0.05 to 7 ms against 1 and 2 ms): the contention-free simulation is the closed
    form to 1e-12, and so is the free-communication order (``analysis``, combined)
    with each pass's exposure; rank 0's paired share (its warm-up count) is not what
    counts: its rule misses by up to several per cent."""
    job = pair_job(pp, v, m, 1e15)
    c, t = _costs(job, scale)
    L = job.model.num_layers
    n = L // (pp * v)
    P = float(pair_exposed(t, F, B))
    want = (m * v + pp - 1) * n * (F + B + P) + float(lone_passes_exposed(L, t, P))
    s = simulate(job, costs=c, network="contention-free").step_time_s
    # the simulation also runs the gradient norm's all-reduce before the optimizer (§5.202)
    assert s == pytest.approx(want + barrier_s(job), rel=1e-12, abs=1e-15)
    chunk = (n * F, n * B, 0.0, n * t, n * t, n * P / 2, n * P / 2)
    order = simulate_free_comm("interleaved", pp, m, v, 0.0, 0.0,
                               chunk_times=[[chunk] * v for _ in range(pp)], combined=True)
    assert order == pytest.approx(want, rel=1e-12)
    w0 = min(2 * (pp - 1) + (v - 1) * pp + 1, m * v)
    q0 = (m * v - w0) / (m * v)
    rank0 = (m * v + pp - 1) * n * (F + B + (1 - q0) * 2 * t + q0 * P)
    if t > 0.1 * F:
        assert abs(rank0 / want - 1) > 1e-3


def test_pair_first_all_to_all_waits_for_the_deferred_weight_gradient():
    """A combined pair's first backward all-to-all is queued after everything on the compute
    stream before it (``b_schedule_plan.record_current_stream()``), so it starts only after
    the previous pair's delayed attention weight gradient (``W``), not beside it."""
    job = pair_job(2, 2, 4, 1e15)
    c, _ = _costs(job, 20.0)
    progs = compile_job(job, costs=c)
    seen = 0
    for prog in progs.values():
        ops = {op.id: op for ops in prog.streams.values() for op in ops}
        # (an op also waits for the one before it on its stream)
        prev = {b.id: a.id for ops_ in prog.streams.values() for a, b in zip(ops_, ops_[1:])}
        comp = prog.streams["compute"]
        for i, op in enumerate(comp):
            if op.kind != "wgrad" or not op.label.startswith("W"):
                continue
            later = [a for a in prog.streams["ep-comm"]
                     if a.label.startswith("A2A ep B") and a.id > op.id]
            if not later:
                continue
            first = min(later, key=lambda a: a.id)
            assert op.id in _ancestors(first, ops, prev)
            seen += 1
    assert seen > 0


def _ancestors(op, ops, prev) -> set:
    """The ops ``op`` waits for, directly or not (its deps and its stream's order)."""
    out, todo = set(), list(op.deps) + ([prev[op.id]] if op.id in prev else [])
    while todo:
        d = todo.pop()
        if d in out or d not in ops:
            continue
        out.add(d)
        todo.extend(ops[d].deps)
        if d in prev:
            todo.append(prev[d])
    return out


@pytest.mark.parametrize("ref,row,was", [
    ("megatron_bridge_2604", "mbridge260401_deepseekv3_b200_256_mxfp8", -0.140),
    ("megatron_bridge_2604", "mbridge260401_qwen3235ba22b_h100_256_fp8", -0.081),
    ("heldout_2026b", "mbridge2606_qwen3235ba22b_gb200_256_mxfp8", -0.036)])
def test_reference_rows_meet_their_contention_free_simulation(ref, row, was):
    """Three ``ep_overlap`` rows at 16 micro-batches (uneven layouts with dense first layers
    and MTP, or the embedding's and loss's slots; tp 2 with SP on H100): estimate and
    contention-free simulation within 1 % (before: rank 0's paired share, ``was``
    simulation/estimate − 1; the lone passes dominate at few micro-batches)."""
    from simulator.extend import with_microbatches
    from strategies.estimate.scalar import estimate
    from strategies.reference.cases import case_from_entry, load_reference
    rows = load_reference(f"strategies/reference/data/{ref}.json")
    job = with_microbatches(case_from_entry(next(r for r in rows if r["id"] == row),
                                            rows).job, 16)
    e = estimate(job).step_time_s
    s = simulate(job, network="contention-free").step_time_s
    assert abs(s / e - 1) < 0.01
    assert abs(s / e - 1) < abs(was) / 3


@pytest.mark.parametrize("bw", [400e9, 200e9, 50e9])
def test_overlap_without_delayed_weight_gradient(bw):
    """``delay_wgrad=false`` (Megatron-Core's default; Megatron-Bridge's harness turns it
    on with the overlap): the pair's last attention weight gradient runs before its
    backward message is posted, so each steady call hides nothing. Estimate and
    contention-free simulation each grow by ``steady·min(t, dw_attn)`` to 1e-9 (message
    28, 52, 191 µs against a 168 µs weight gradient); the export names the flag only
    when it is on."""
    from strategies.job import make_job
    from strategies.estimate.scalar import estimate
    from strategies.cost.stage import stage_costs
    from strategies.launch import megatron_args
    from strategies.schedules import get_schedule
    on = pair_job(2, 2, 4, bw)
    off = make_job(on.model, on.cluster, replace(on.plan, delay_wgrad=False))
    c = stage_costs(on)
    t = float(cm.p2p_time(c.p2p_bytes, on.cluster, on.cluster.gpus_per_node))
    steady = float(get_schedule("interleaved").exposed_messages(4, 2, 2)) - 2 * (2 * 2 - 1)
    want = steady * min(t, c.dw_attn)
    assert estimate(off).step_time_s - estimate(on).step_time_s == pytest.approx(want, rel=1e-9)
    s_on, s_off = (simulate(j, network="contention-free").step_time_s for j in (on, off))
    assert s_off - s_on == pytest.approx(want, rel=1e-9)
    assert "--delay-wgrad-compute" in megatron_args(on)[0]
    assert "--delay-wgrad-compute" not in megatron_args(off)[0]
    assert "--overlap-moe-expert-parallel-comm" in megatron_args(off)[0]


def test_delay_wgrad_switch_parses_and_searches():
    """The switch by its name and Megatron's, in the plan's short form, and through the
    search's columns (``--fix delay_wgrad=false``)."""
    import numpy as np
    from strategies.plan import parse_plan
    from strategies.search.fix_parse import parse_fix
    from strategies.search.plan_rows import columns_from_plans, plan_of
    p = parse_plan("tp=1,pp=2,dp=8,ep=8,gbs=64,schedule=interleaved,vpp=2,"
                   "overlap_moe_expert_parallel_comm=true,delay_wgrad_compute=false")
    assert p.ep_overlap and not p.delay_wgrad and p.short().endswith(" epo")
    assert not parse_plan("ep=8,ep_overlap=true").delay_wgrad     # Megatron-Core's default
    assert "epo+dw" in parse_plan("ep=8,ep_overlap=true,delay_wgrad=true").short()
    assert parse_fix("ep_overlap=true,delay_wgrad=false") == {"ep_overlap": True,
                                                              "delay_wgrad": False}
    cols = columns_from_plans([p])
    assert plan_of(cols, 0).delay_wgrad is False        # the column left out: its default
    cols.update(epo=np.array([True]), dw=np.array([False]))
    back = plan_of(cols, 0)
    assert back.ep_overlap and back.delay_wgrad is False
