"""The tensor-parallel collectives a recomputation reruns (docs/calibration.md §5.84,
``recompute.tp_rerun``): torchtitan's op-level SAC saves the reduce-scatters' outputs
(``_save_list``), so only the all-gathers rerun; a full checkpoint that stops early
(``FrameworkProfile.recompute_early_stop``) does not rerun the MLP's reduce-scatter;
Megatron's reentrant full recomputation reruns the whole forward, as before."""
from dataclasses import replace

import pytest

from strategies.collectives.phase import CALL_LATENCY_S as CALL
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost import comm_bytes
from strategies.cost import recompute as rcp
from strategies.cost.stage import stage_costs
from strategies.estimate import estimate
from strategies.stacks.megatron import MEGATRON_CORE, NEMO
from strategies.stacks.pytorch import TORCHTITAN
from strategies.stacks.variants import TORCHTITAN_COMPILE
from tests.tp_backward_checks import bound, tp_job

LAYERS = 4


def _old_rule(rc, pairs, sp, ag_share, early_stop):
    """The rule before §5.84: every forward pair again, whatever the policy."""
    return pairs + 0.0 * ag_share


@pytest.mark.parametrize("fw,dtype,rc,sp,want", [
    (TORCHTITAN_COMPILE, "bf16", "op", True, 1.0),           # 2 all-gathers, ½ each
    (TORCHTITAN_COMPILE, "fp8-current", "op", True, 2 / 3),  # fp8 gathers: g/(1+g) = 1/3
    (TORCHTITAN_COMPILE, "bf16", "full", True, 1.5),         # less the MLP's reduce-scatter
    (TORCHTITAN, "fp8-current", "full", True, 2 - 2 / 3),    # its bf16 share is 2/3
    (TORCHTITAN_COMPILE, "bf16", "op", False, 2.0),          # all-reduces: not in the list
    (TORCHTITAN_COMPILE, "bf16", "full", False, 1.0),        # the MLP's all-reduce stays off
    (MEGATRON_CORE, "bf16", "full", True, 2.0),              # reentrant: the whole forward
    (MEGATRON_CORE, "fp8", "full", True, 2.0),
    (NEMO, "bf16", "full", False, 2.0)])
def test_rerun_counts(fw, dtype: str, rc: str, sp: bool, want: float) -> None:
    job = tp_job(f"tp=8,pp=1,mbs=1,gbs=4,sp={str(sp).lower()},zero=0,recompute={rc}",
                 layers=LAYERS, fw=fw, dtype=dtype)
    assert stage_costs(job).tp_per_layer_recompute == pytest.approx(want, rel=1e-12)


def test_megatron_full_is_bit_identical_to_every_pair() -> None:
    """Without early stop the rule is ``pairs`` itself (``pairs - 0.0``), bit for bit, also
    for a MoE layer's fractional mean and fp8's ⅓ share."""
    for pairs in (2.0, 1.0, 1.75, 1.2345):
        for share in (0.5, 1 / 3):
            assert rcp.tp_rerun(2, pairs, True, share, False) == pairs
    # one pair (a MoE layer under EP without shared experts): nothing is stopped
    assert rcp.tp_rerun(2, 1.0, True, 0.5, True) == 1.0
    assert rcp.stopped_collectives(1.0, True) == 0.0


@pytest.mark.parametrize("fw,dtype,rc", [
    (TORCHTITAN_COMPILE, "bf16", "op"), (TORCHTITAN_COMPILE, "fp8-current", "op"),
    (TORCHTITAN_COMPILE, "bf16", "full"), (TORCHTITAN, "fp8-current", "full")])
def test_closed_form_of_the_step(monkeypatch, fw, dtype: str, rc: str) -> None:
    """One pipeline, nothing hides TP traffic: the step moves by ``m·L·Δn·t_ar`` with
    ``t_ar`` one all-reduce of the pair's mean bytes (``tp_bytes``) and ``Δn`` the
    equivalents no longer priced: op ``2·(1 - g/(1+g))``, full ``1/(1+g)`` (the MLP's
    reduce-scatter), ``g`` the all-gather's bytes over bf16 (1; ½ for fp8 gathers)."""
    mbs, mb = 2, 3
    spec = f"tp=8,pp=1,mbs={mbs},gbs={mbs * mb},sp=true,zero=0,recompute={rc}"
    job = tp_job(spec, layers=LAYERS, fw=fw, dtype=dtype)
    new = estimate(job).step_time_s
    monkeypatch.setattr(rcp, "tp_rerun", _old_rule)
    old = estimate(job).step_time_s
    g = 0.5 if dtype.startswith("fp8") else 1.0
    dn = 2 * (1 - g / (1 + g)) if rc == "op" else 1 / (1 + g)
    x = comm_bytes.tp_comm_bytes_fwd(job.model, mbs, 1) * (1 + g) / 2
    # under SP an all-reduce's bytes are two calls, each its own latency (§5.233)
    t_ar = float(cm.collective_time("allreduce", x, 8, 1, job.cluster)) + CALL
    assert old - new == pytest.approx(mb * LAYERS * dn * t_ar, rel=1e-9)
    assert old - new > 0


@pytest.mark.parametrize("spec,nodes", [
    ("tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0,recompute=op", 1),
    ("tp=8,pp=2,mbs=1,gbs=8,sp=true,zero=0,recompute=full,schedule=1f1b", 2)])
def test_estimate_meets_contention_free_simulation(monkeypatch, spec: str, nodes: int) -> None:
    """The estimate and the contention-free simulation move by the same seconds (both read
    the count from the stage costs); the bound stays below the simulation."""
    job = tp_job(spec, layers=LAYERS, fw=TORCHTITAN_COMPILE, nodes=nodes)
    e_new, s_new = estimate(job).step_time_s, simulate(job, network="contention-free").step_time_s
    assert bound(job) <= s_new * (1 + 1e-9)
    assert simulate(job, network="contention-free").step_time_s == s_new   # deterministic
    monkeypatch.setattr(rcp, "tp_rerun", _old_rule)
    e_old, s_old = estimate(job).step_time_s, simulate(job, network="contention-free").step_time_s
    assert e_old - e_new > 0
    assert s_old - s_new == pytest.approx(e_old - e_new, rel=1e-9)


@pytest.mark.parametrize("fw", [MEGATRON_CORE, NEMO])
def test_megatron_stacks_unchanged(monkeypatch, fw) -> None:
    job = tp_job("tp=8,pp=2,mbs=1,gbs=8,sp=true,zero=0,recompute=full,schedule=1f1b",
                 layers=LAYERS, fw=fw, nodes=2)
    new = estimate(job)
    monkeypatch.setattr(rcp, "tp_rerun", _old_rule)
    old = estimate(job)
    assert new.step_time_s == old.step_time_s and new.breakdown_s == old.breakdown_s


def test_early_stop_field_drives_full() -> None:
    """The same torchtitan job read with a reentrant checkpoint reruns every pair."""
    job = tp_job("tp=8,pp=1,mbs=1,gbs=4,sp=true,zero=0,recompute=full", layers=LAYERS,
                 fw=replace(TORCHTITAN_COMPILE, recompute_early_stop=False))
    assert stage_costs(job).tp_per_layer_recompute == 2.0
