"""The SM-share windows the estimate charges since docs/calibration.md §5.161: the
interleaved schedule's per-chunk gradient reductions (``dp_exposure.grad_window_exposed``),
the distributed optimizer's overlapped parameter gathers beside the next forward
(``grad_reduce``; the simulator's ``metrics.rank_ends`` alike) and ZeRO-3's two passes
(``zero3.pass_sm_extra``): the closed forms (``sm_share.overlap_extra``'s ``busy`` and
``waited``) worked out step by step, and each window with the switch on against the
contention-free simulation, which charges the same SMs (``simulator.engine.sm_hold``)."""
from dataclasses import replace

import pytest

from simulator.metrics import PARAM_GATHER_PREFIX, rank_ends
from simulator.result import Record
from simulator.simulate import simulate
from simulator.studies.validate import load_cases
from strategies.cost import sm_share
from strategies.cost.system import SystemConfig, get_system
from strategies.estimate.scalar import estimate
from strategies.estimate.terms.dp_exposure import grad_window_exposed
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

ON = SystemConfig(comm_sm_share=1.0)
LLAMA8 = replace(model_preset("llama3-8b"), num_layers=4, seq_length=2048)
H100 = sm_share.window_sms(True, 132, "sm_90", "userbuffers", 0)


@pytest.mark.parametrize("c,w,sm,k,busy", [(1.0, 4.0, 132, 16, 0.8), (4.0, 4.0, 132, 16, 0.5),
                                          (6.0, 4.0, 132, 32, 0.9), (2.0, 3.0, 108, 16, 1.0)])
def test_busy_window_closed_form(c, w, sm, k, busy):
    """A window of ``w`` seconds of which ``busy`` is compute spread evenly (the rest blocking
    exchanges), beside a collective of ``c`` seconds holding ``k`` SMs: the compute done
    while it is in flight is ``busy·c·(sm − k)/sm`` (all of it, ``busy·w``, where the
    collective outlasts the slowed window), each second of it ``k/(sm − k)`` dearer; the
    window ends at the later of that and the collective."""
    done = min(busy * c * (sm - k) / sm, busy * w)
    end = w + done * k / (sm - k)
    want = max(c, end) - max(c, w)
    got = float(sm_share.overlap_extra(c, w, sm, k, busy))
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("c,waited,w", [(16.46, 7.05, 14.17), (5.0, 1.0, 4.0), (3.0, 3.0, 4.0),
                                       (9.0, 6.0, 4.0)])
def test_waited_closed_form(c, waited, w):
    """Prefetches for a later window (ZeRO-3's backward gathers) run beside this window's
    compute and slow it, but its end waits for ``waited`` seconds of the collectives only:
    the compute ends at ``w + min(c·k/sm, w·k/(sm − k))`` and the window at the later of that
    and ``waited``; ``waited = c`` is the plain closed form."""
    sm, k = 132, 16
    end = w + min(c * k / sm, w * k / (sm - k))
    want = max(waited, end) - max(waited, w)
    got = float(sm_share.overlap_extra(c, w, sm, k, waited=waited))
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert float(sm_share.overlap_extra(c, w, sm, k, waited=c)) == \
        float(sm_share.overlap_extra(c, w, sm, k))


@pytest.mark.parametrize("t_grad,t_c0,t_bc,steps,busy", [(0.30, 0.09, 0.0136, 89, 0.8),
                                                        (0.30, 0.05, 0.002, 9, 1.0),
                                                        (0.05, 0.01, 0.01, 9, 0.7)])
def test_interleaved_reduction_worked_out(t_grad, t_c0, t_bc, steps, busy):
    """Chunks 1 to v − 1's reductions (``t_grad − t_c0``) queue on the data-parallel stream
    from the window's start beside ``steps − 1`` chunk backwards (``busy`` of each ``t_bc``
    compute, slowed while they are in flight), chunk 0's after the later of the queue and
    the rank's last backward: its end past the contention-free window's end."""
    c, w = t_grad - t_c0, (steps - 1) * t_bc
    k, sm = H100.nccl, H100.sm
    compute_end = w + busy * min(c * k / sm, w * k / (sm - k))
    want = max(c, compute_end) + t_c0 - w
    got = float(grad_window_exposed(t_grad, t_c0, t_bc, steps, H100, busy))
    assert got == pytest.approx(want, rel=1e-12)
    assert float(grad_window_exposed(t_grad, t_c0, t_bc, steps)) == \
        pytest.approx(max(c, w) + t_c0 - w, rel=1e-12)


def _gather(start: float, end: float, n: int) -> Record:
    return Record(0, "dp-comm", "allgather", f"{PARAM_GATHER_PREFIX} bucket {n}", -1, 0,
                  start, end)


@pytest.mark.parametrize("fwd", [0.5, 2.0, 10.0])
def test_rank_ends_charges_the_overlapped_gathers(fwd):
    """The simulator's overlapped parameter gathers after the optimizer: the rank ends one
    bucket in, or where the gathers outlast the next forward (``fwd_window_s``); with their
    SMs (``gather_sms``) plus ``overlap_extra`` of the buckets after the first beside that
    forward."""
    recs = [_gather(1.0, 1.8, 0), _gather(1.8, 2.2, 1), _gather(2.2, 3.0, 2)]
    meta = {"overlap_param_gather": True, "fwd_window_s": fwd}
    off = rank_ends(recs, {0: meta})[0]
    on = rank_ends(recs, {0: {**meta, "gather_sms": (132, 16.0)}})[0]
    assert off == pytest.approx(1.0 + max(2.0 - fwd, 2.0 / 3), rel=1e-12)
    assert on - off == pytest.approx(float(sm_share.overlap_extra(1.2, fwd, 132, 16.0)),
                                     rel=1e-12, abs=1e-15)


def _on_off(job_of) -> tuple[list, list]:
    jobs = [job_of(s) for s in (None, ON)]
    return ([estimate(j).step_time_s for j in jobs],
            [simulate(j, network="contention-free").step_time_s for j in jobs])


def _small(plan: str, nodes: int = 1, model=LLAMA8, cl: str = "dgx-h100"):
    return lambda s: make_job(model, cluster_preset(cl, nodes), parse_plan(plan), system=s)


# ZeRO-1's charge: estimate/simulation 1.065 (1.829 / 1.718 ms) without the fused QKV split's
# passes and 1.108 (1.995 / 1.801 ms) with them (§5.167: its forward copies enter the
# estimate's forward window whole, the simulation overlaps part of them; not traced, §6):
# measured by switching ``FrameworkProfile.qkv_split`` off on this job; since the simulator
# launches a bucket where its last gradient is ready, inside a layer (§5.192), the
# simulation's charge is 1.757 ms (1.136; not traced), so 0.14 here
@pytest.mark.parametrize("plan,rel", [("zero=3,gbs=32", 0.05), ("tp=2,zero=3,gbs=32", 0.05),
                                      ("zero=1,gbs=32", 0.14)])
def test_window_charge_matches_the_simulation(plan, rel):
    """ZeRO-3 per pass and the distributed optimizer's reductions and overlapped gathers: the
    estimate's charge (on − off) within ``rel`` of the simulation's, and the two steps on
    within the 3 % of the other windows (§5.156's pooled ZeRO-3 window charged 13.44 ms
    where the simulation 7.98: 68 % more)."""
    est, sim = _on_off(_small(plan))
    assert est[1] - est[0] == pytest.approx(sim[1] - sim[0], rel=rel)
    assert est[1] == pytest.approx(sim[1], rel=0.03)


def test_interleaved_window_is_charged():
    """The interleaved schedule's per-chunk reductions (Llama-3 8B at 8 layers, pp 2, v 2,
    ZeRO-1): the estimate dearer on than off (it charged nothing before §5.161), less
    than the simulation's charge (which carries the other stage's slowed compute down the
    pipeline: §5.161 "What is left"), and the steps on within 3 %."""
    m = replace(model_preset("llama3-8b"), num_layers=8, seq_length=2048)
    est, sim = _on_off(_small("pp=2,vpp=2,schedule=interleaved,zero=1,gbs=32", model=m))
    assert 0 < est[1] - est[0] < sim[1] - sim[0]
    assert est[1] == pytest.approx(sim[1], rel=0.03)


def test_readme_plan_within_the_tolerance():
    """The README's main job's plan (GPT-3 175B, 128 DGX A100, tp 8 pp 8 interleaved:12 sp,
    ZeRO-0): with the switch on the estimate within 3 % of the contention-free simulation,
    both dearer than off."""
    est, sim = _on_off(_small("tp=8,pp=8,mbs=2,gbs=1536,schedule=interleaved,vpp=12,sp=true",
                              nodes=128, model=model_preset("gpt3-175b"), cl="dgx-a100"))
    assert est[0] < est[1] and sim[0] < sim[1]
    assert est[1] == pytest.approx(sim[1], rel=0.03)


def test_nemotron4_340b_interleaved_row_within_the_tolerance():
    """DGX-Cloud's Nemotron-4 340B (``published.json``, tp 8 pp 8 dp 2 interleaved:12 sp
    ZeRO-1, 128 H100): with the switch on the estimate within 3 % of the contention-free
    simulation, both dearer than off."""
    case, = [c for c in load_cases(None, tiers=(1,))
             if c.id == "dgxc_nemo2411_nemotron4_340B_bf16_128gpu"]
    est, sim = _on_off(lambda s: replace(case.job, system=replace(
        get_system(case.job.system), comm_sm_share=(s or SystemConfig()).comm_sm_share)))
    assert est[0] < est[1] and sim[0] < sim[1]
    assert est[1] == pytest.approx(sim[1], rel=0.03)
