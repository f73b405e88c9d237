"""torchtitan's async TP (docs/calibration.md §5.50): plan ``tp_comm_overlap`` on the torchtitan
profile is PyTorch's micro-pipelined TP, priced by the one TP-overlap rule, with the backward's
unfused share (``FrameworkProfile.tp_overlap_bwd_exposed``) blocking whole; refused without
sequence parallelism (as Megatron-Core's userbuffers overlap is: tests/test_tp_overlap_sp.py)."""
from dataclasses import replace

import numpy as np
import pytest

from strategies.collectives.phase import CALL_LATENCY_S as CALL
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.profile_fields import TP_OVERLAP_IMPLS
from strategies.stacks.pytorch import AUTOMODEL, PYTORCH_EAGER, TORCHTITAN
from strategies.stacks.rules import plan_violations
from strategies.job import make_job
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


def test_profile_facts() -> None:
    # torchtitan runs TP overlap as async TP, off by default (enable_async_tensor_parallel
    # False), with the two summed-dgrad reduce-scatters of the backward's four collectives
    # unfused (half of its all-reduce equivalents)
    assert TORCHTITAN.tp_comm_overlap and TORCHTITAN.tp_overlap == "async-tp"
    assert not TORCHTITAN.default_tp_comm_overlap
    assert TORCHTITAN.tp_overlap_bwd_exposed == 0.5
    assert "enable_async_tensor_parallel" in TORCHTITAN.default_source("tp_comm_overlap")
    assert "torch.compile" in TORCHTITAN.default_source("tp_comm_overlap")
    # Megatron-Core's userbuffers overlap every TP collective, as before
    assert MEGATRON_CORE.tp_overlap == "userbuffers"
    assert MEGATRON_CORE.tp_overlap_bwd_exposed == 0.0
    # eager PyTorch (no compile) and AutoModel (tp = 1) keep no TP overlap
    assert not PYTORCH_EAGER.tp_comm_overlap and not AUTOMODEL.tp_comm_overlap
    assert AUTOMODEL.tp_overlap_bwd_exposed == 0.0
    assert TP_OVERLAP_IMPLS == ("userbuffers", "async-tp")


@pytest.mark.parametrize("field,value", [("tp_overlap", "nccl"),
                                         ("tp_overlap_bwd_exposed", 1.5),
                                         ("tp_overlap_bwd_exposed", -0.1),
                                         ("tp_overlap_bwd_exposed", True)])
def test_bad_profile_fields_are_refused(field: str, value) -> None:
    with pytest.raises(SpecError, match=f"framework.{field}"):
        replace(TORCHTITAN, **{field: value})


def test_async_tp_needs_sequence_parallelism() -> None:
    bad = Plan(tp=8, dp=1, mbs=1, gbs=8, zero=0, sp=False, tp_comm_overlap=True)
    v = plan_violations(TORCHTITAN, bad)
    assert [f for f, _, _ in v] == ["tp_comm_overlap"]
    assert "sp=true" in v[0][2] and "async TP" in v[0][2] and "torch.compile" in v[0][2]
    assert plan_violations(TORCHTITAN, replace(bad, sp=True)) == []
    assert plan_violations(TORCHTITAN, replace(bad, tp=1)) == []      # a no-op without TP
    assert plan_violations(TORCHTITAN, replace(bad, tp_comm_overlap=False)) == []
    # Megatron-Core refuses it too (Megatron-LM's arguments.py), naming its own overlap
    # (tests/test_tp_overlap_sp.py); only the reason differs
    (field, _, why), = plan_violations(MEGATRON_CORE, bad)
    assert field == "tp_comm_overlap" and "userbuffers" in why and "async TP" not in why


def test_cli_refuses_async_tp_without_sp(capsys) -> None:
    from simulator.cli.main import main
    argv = ["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--framework",
            "torchtitan", "--plan"]
    assert main([*argv, "tp=8,mbs=1,gbs=8,zero=0,sp=false,tp_comm_overlap=true"]) == 2
    err = capsys.readouterr().err
    assert "tp_comm_overlap=True" in err and "torchtitan" in err and "sp=true" in err
    assert "Traceback" not in err
    assert main([*argv, "tp=8,mbs=1,gbs=8,zero=0,sp=true,tp_comm_overlap=true"]) == 0


def _job(fw, tpo: bool = True, mbs: int = 1, seq: int = 2048):
    m = model_preset("llama3-8b")
    cl = cluster_preset("dgx-h100", 1)
    return make_job(m, cl, Plan(tp=8, dp=1, mbs=mbs, gbs=mbs, zero=0, sp=True,
                                tp_comm_overlap=tpo), seq_len=seq, framework=fw)


@pytest.mark.parametrize("mbs,seq", [(1, 2048), (4, 8192)])
def test_closed_form_of_one_layer(mbs: int, seq: int) -> None:
    """One layer's exposed TP seconds under async TP: the overlapped collectives hidden up to
    three forward GEMM windows, at least a quarter of them exposed, the unfused backward
    share whole: ``max(R - U - 3g, (R - U)/4) + U`` with ``R`` the raw TP seconds and
    ``U = s · n_bwd · t_ar``; under SP ``t_ar`` is two calls, each its own latency
    (§5.233)."""
    job = _job(TORCHTITAN, True, mbs, seq)
    r = estimate_arrays(job.model, job.cluster, job.dtype, PlanArrays.of_plan(job.plan),
                        TORCHTITAN)
    sc = r["stage_costs"]
    t_ar = cm.collective_time("allreduce", sc.tp_bytes, 8, 1, job.cluster) + CALL
    n_f, n_b = sc.tp_per_layer_fwd, sc.tp_per_layer_bwd
    assert float(sc.tp_per_layer_recompute) == 0.0
    raw = (n_f + n_b) * t_ar
    out = 0.5 * n_b * t_ar
    want = np.maximum(raw - out - 3 * sc.gemm_fwd, (raw - out) / 4) + out
    assert float(r["layer_comm_s"]) == pytest.approx(float(want), rel=1e-12)
    # without overlap every collective blocks; with it, less blocks, never less than U
    off = estimate_arrays(job.model, job.cluster, job.dtype,
                          PlanArrays.of_plan(replace(job.plan, tp_comm_overlap=False)),
                          TORCHTITAN)
    assert float(off["layer_comm_s"]) == pytest.approx(float(raw), rel=1e-12)
    assert float(out) <= float(r["layer_comm_s"]) < float(raw)
    # s = 0 is Megatron-Core's rule, term for term
    zero = replace(TORCHTITAN, tp_overlap_bwd_exposed=0.0)
    r0 = estimate_arrays(job.model, job.cluster, job.dtype, PlanArrays.of_plan(job.plan), zero)
    want0 = np.maximum(raw - 3 * sc.gemm_fwd, raw / 4)
    assert float(r0["layer_comm_s"]) == pytest.approx(float(want0), rel=1e-12)
    assert float(r0["layer_comm_s"]) <= float(r["layer_comm_s"])


def test_simulator_and_bound_read_the_same_share() -> None:
    """The simulator blocks on the unfused backward share too, and the bound stays below it."""
    steps = {}
    for s in (0.0, 0.5):
        fw = replace(TORCHTITAN, tp_overlap_bwd_exposed=s)
        job = _job(fw, True, 2, 4096)
        sim = simulate(job).step_time_s
        bound = float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                            PlanArrays.of_plan(job.plan), fw))
        assert bound <= sim * (1 + 1e-9)
        steps[s] = (sim, bound)
    assert steps[0.5][0] > steps[0.0][0]          # more blocks: slower simulated step
    assert steps[0.5][1] >= steps[0.0][1]         # and a bound at least as high
    # deterministic: the same job simulates to the same step, bit for bit
    job = _job(TORCHTITAN, True, 2, 4096)
    assert simulate(job).step_time_s == simulate(job).step_time_s


def test_torchtitan_export_turns_async_tp_and_compile_on() -> None:
    tomllib = pytest.importorskip("tomllib")
    from strategies.launch import export
    from strategies.plan import parse_plan
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    for tpo in (True, False):
        job = make_job(m, cl, parse_plan(f"tp=8,sp=true,mbs=1,gbs=64,zero=3,"
                                         f"tp_comm_overlap={str(tpo).lower()}"),
                       framework="torchtitan")
        text, notes = export("torchtitan", job)
        cfg = tomllib.loads(text)
        assert cfg["parallelism"]["enable_async_tensor_parallel"] is tpo
        assert cfg["compile"] == {"enable": tpo}
        assert any("async TP" in n for n in notes) is tpo
