"""Megatron-Core's ``overlap_param_gather_with_optimizer_step`` (``stacks.param_gather.
gather_with_optimizer``, docs/calibration.md §5.200): interleaved chunk 0's gathers
dispatched inside the optimizer step, ahead of the other chunks' update."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs
from strategies.cost.system import SystemConfig
from strategies.estimate.scalar import estimate
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.reference.perf_harness import param_gather_with_optimizer
from strategies.stacks.param_gather import gather_with_optimizer, optimizer_head_start, \
    start_gathers_delay
from topologies.cluster import cluster_preset

# Llama 3 8B cut to 16 layers, a 2,048-token vocabulary and 256-token sequences
SMALL = replace(model_preset("llama3-8b"), num_layers=16, seq_length=256, vocab_size=2048)
ONE_BUCKET = SystemConfig(bucket_params=1e12)


#: the plan key that turns Megatron-Core's overlap_param_gather_with_optimizer_step on
ON = ",param_gather_with_optimizer=true"


def test_rule_and_defaults():
    """Only where the schedule dispatches the gathers and the plan sets it; off in a plan by
    default; Megatron-Core and NeMo run it, the other stacks not; the NeMo 2
    performance-script rows set it, Megatron-Bridge's do not."""
    at = np.array([True, True, False, False])
    sets = np.array([True, False, True, False])
    assert gather_with_optimizer(at, sets).tolist() == [True, False, False, False]
    assert parse_plan("tp=1").param_gather_with_optimizer is False
    for name, runs in (("megatron-core", True), ("nemo", True), ("megatron-lm-2021", False),
                       ("torchtitan", False), ("hai-llm", False)):
        assert get_profile(name).param_gather_with_optimizer is runs
    dgxc = {"source": {"ref": "NVIDIA/dgxc-benchmarking (NeMo)",
                       "table": "llama3.1/README.md @v25.05.05 (commit c5c765f2684f)"}}
    bridge = {"source": {"ref": "NVIDIA-NeMo/Megatron-Bridge", "table": "(26.04)"}}
    assert param_gather_with_optimizer(dgxc) and not param_gather_with_optimizer(bridge)


def test_head_start_closed_form():
    """The other chunks' update: ``opt·(1 − c0/P)``, ``c0 = (P − lead − trail)/v + lead``;
    arrays alike; no parameters, no head start."""
    opt, P, lead, trail, v = 3e-3, 7e8, 5e7, 0.0, 4
    want = opt * (1 - ((P - lead - trail) / v + lead) / P)
    assert optimizer_head_start(opt, P, lead, trail, v) == pytest.approx(want, rel=1e-12)
    got = optimizer_head_start(np.array([opt, opt]), np.array([P, 0.0]), lead, trail, v)
    assert got[0] == pytest.approx(want, rel=1e-12) and got[1] == 0.0


@pytest.mark.parametrize("head", [0.3, 1.7])
def test_delay_closed_form_gather_longer_and_shorter(head):
    """One rank, two chunks (gathers ``A0 = 1.2``, ``A1 = 0.9``), its first forward at 0 and a
    forward every ``tau = 0.2``, group 2: chunk 0's gather runs ``[−h, A0 − h]`` and exposes
    ``e0 = max(0, A0 − h)`` (one bucket); chunk 1's runs after it from
    ``max(0, A0 − h)`` for ``A1`` and exposes what it outlasts ``2·tau + e0``. ``h = 0.3``:
    the gather outlasts the other chunks' update; ``h = 1.7``: it ends before the step does
    (e0 = 0, chunk 1 from 0). 1e-12."""
    a0, a1, tau = 1.2, 0.9, 0.2
    e0 = max(0.0, a0 - head)
    end1 = max(0.0, a0 - head) + a1
    e1 = max(0.0, end1 - (2 * tau + e0))
    got = start_gathers_delay([[a0, a1]], [a0], 2, 2, [0], [0.0], [tau], [head])
    assert float(got) == pytest.approx(e0 + e1, rel=1e-12, abs=1e-15)
    if head > a0:
        assert e0 == 0.0 and float(got) == pytest.approx(max(0.0, a1 - 2 * tau), rel=1e-12)
    # without the head start: chunk 0 from the step's start, the layer-wise cap as given
    base = start_gathers_delay([[a0, a1]], [a0], 2, 2, [0], [0.0], [tau])
    assert float(base) == pytest.approx(a0 + max(0.0, a0 + a1 - 2 * tau - a0), rel=1e-12)


def _job(plan: str, nodes: int, fw):
    return make_job(SMALL, cluster_preset("dgx-h100", nodes), parse_plan(plan),
                    framework=get_profile(fw), system=ONE_BUCKET)


@pytest.mark.parametrize("plan,nodes,longer", [
    ("tp=2,pp=2,dp=8,mbs=1,gbs=32,zero=1,sp=true,schedule=interleaved,vpp=2", 4, True),
    ("tp=1,pp=2,dp=4,mbs=1,gbs=32,zero=1,schedule=interleaved,vpp=4", 1, False)])
def test_simulated_in_closed_form(plan, nodes, longer):
    """Contention-free simulation, pp 2, one bucket a chunk: on each rank chunk 0's gather
    runs ``[0, A0]`` (``A0`` one all-gather of chunk 0's parameters over dp, by hand) beside
    the other chunks' update ``[0, H]`` (``H = optimizer_head_start`` of the stage's
    optimizer, by hand), chunk 1's gather right after chunk 0's, and rank 0's first forward
    starts at ``max(H, A0)`` (1e-12): the gather outlasts the update (4 nodes) or not
    (one node, four chunks). The step's optimizer at its end is the rest, ``opt − H``."""
    j = _job(plan + ON, nodes, "megatron-core")
    c, p = stage_costs(j), j.plan
    body = SMALL.num_layers // (p.pp * p.vpp) * c.layer_params

    def t_ag(params: float) -> float:
        return float(cm.dp_collective_time("allgather", c.param_bytes, params, 0.0, p.tp,
                                           p.cp, p.dp, 1, 1, j.cluster))
    res = simulate(j, network="contention-free")
    for r in res.simulated_ranks:
        mine = res.by_rank(r)
        s = next(x.stage for x in mine)
        lead = c.embedding_params if s == 0 else 0.0
        trail = c.head_params if s == p.pp - 1 else 0.0
        a0 = t_ag(body + lead)
        opt = c.optimizer_by_stage[s]
        h = opt * (1 - ((c.params_by_stage[s] - lead - trail) / p.vpp + lead)
                   / c.params_by_stage[s])
        g = {int(x.label.split()[3]): x for x in mine if x.label.startswith("AG params")}
        assert g[0].start == 0.0 and g[0].end == pytest.approx(a0, rel=1e-12)
        assert g[1].start == pytest.approx(g[0].end, abs=1e-15)
        pro = [x for x in mine if x.label.startswith("optimizer (chunks 1+")]
        assert len(pro) == 1 and pro[0].start == 0.0
        assert pro[0].end == pytest.approx(h, rel=1e-12)
        end_opt = [x for x in mine if x.label == "optimizer"]
        assert end_opt[0].end - end_opt[0].start == pytest.approx(opt - h, rel=1e-9)
        assert (a0 > h) == longer
        if s == 0:
            first = min(x.start for x in mine if x.stream == "compute" and x is not pro[0]
                        and x.label != "step passes")
            assert first == pytest.approx(max(h, a0), rel=1e-12)


@pytest.mark.parametrize("base", ["megatron-core", "nemo"])
def test_estimate_against_simulation(base):
    """Estimate against contention-free simulation: on the pp 2 plan the switch moves both
    by the same seconds (1e-9 relative to the step: the estimate's head start is the
    simulator's prologue, its chain the simulated gathers'); on an interleaved NeMo plan
    with the stack's own buckets (pp 4, two chunks) the two steps agree within 0.1 % with it
    as without it (0.04 %: the warm-up's lock-step pace and, in the rotated simulation, rank
    0's head start setting every rank's start while the last rank's optimizer keeps its own:
    the LM head's share of the update); within 0.2 % since the simulator waits for the
    warm-up's and cool-down's calls (docs/calibration.md §5.207: -0.14 %; the pipeline
    crosses the nodes on two of its four hops, and the lock-step goes at the slower hop's
    message where the estimate prices the chain at the hops' mean)."""
    plan = "tp=2,pp=2,dp=8,mbs=1,gbs=32,zero=1,sp=true,schedule=interleaved,vpp=2"
    # (the gradient norm's barrier apart, ``cost.norm_barrier``: with it the end of the step
    # is the longest optimizer rest after the barrier, which the head start shortens by rank
    # in the simulation and by kind in the estimate: the moves then agree within 1e-6)
    for barrier, tol in ((False, 1e-9), (True, 1e-6)):
        prof = get_profile(base)
        prof = replace(prof, step=replace(prof.step, norm_barrier=barrier))
        off = _job(plan, 4, prof)
        on = _job(plan + ON, 4, prof)
        s_off = simulate(off, network="contention-free").step_time_s
        s_on = simulate(on, network="contention-free").step_time_s
        e_off, e_on = estimate(off).step_time_s, estimate(on).step_time_s
        assert s_on < s_off
        assert (e_on - e_off) == pytest.approx(s_on - s_off, abs=tol * s_on)
    plan = "tp=1,pp=4,dp=4,mbs=1,gbs=64,zero=1,schedule=interleaved,vpp=2"
    j = make_job(SMALL, cluster_preset("dgx-h100", 2), parse_plan(plan + ON), framework=base)
    sim, est = simulate(j, network="contention-free").step_time_s, estimate(j).step_time_s
    assert est == pytest.approx(sim, rel=2e-3), est / sim - 1


def test_extension_equals_full_simulation():
    """The rotated step (the prologue at its start) keeps the search's affine extension
    exact: every figure within 1e-11 of the step, as ``tests/test_extend.py`` asks."""
    from simulator.extend import can_extend, simulate_figures
    j = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2),
                 parse_plan("tp=2,pp=4,dp=2,gbs=80,zero=1,schedule=interleaved,vpp=3" + ON),
                 framework="nemo")
    assert can_extend(j)
    ext, full = simulate_figures(j), simulate_figures(j, exact=True)
    step = full["step_time_s"]
    assert ext["method"].startswith("extended from")
    assert ext["step_time_s"] == pytest.approx(step, rel=1e-11)
    for k, v in full["breakdown_s"].items():
        assert ext["breakdown_s"][k] == pytest.approx(v, abs=1e-11 * step), k
    assert any(x.label.startswith("optimizer (chunks 1+")
               for x in simulate(j).records)
