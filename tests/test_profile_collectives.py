"""A GPU profile's measured NCCL collectives in the cost model (issue 15, item 5;
docs/calibration.md §5.71): within a node the model's seconds times the measured ratio,
interpolated in log bytes; between nodes, other GPU counts and other sizes, the network
model. The fake backend (collectives at 360 GB/s bus bandwidth) gives the closed form."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import simpy
import yaml

from simulator.calibrate import CalibrationSpec, FakeBackend, calibrate
from simulator.calibrate.run import COLLECTIVE_SIZES
from simulator.cli.main import main
from simulator.engine.core import run
from simulator.network.cluster_net import SimNetwork
from simulator.program.compiler import compile_job
from simulator.program.ops import Collective, Program
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.comm.point_to_point import pair_time
from strategies.cost.comm.profile_scale import measured_least
from strategies.cost.comm.zero3_per_tensor import per_tensor_excess, per_tensor_passes
from strategies.cost import hbm_rate
from strategies.estimate import estimate
from strategies.estimate.bound.floors import group_floor
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.stacks.profile import LAUNCH_GAP_S
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.errors import SpecError
from topologies.gpu_profile import nccl_buffer_bytes, profile_to_mapping
from topologies.graph import build_graph
from topologies.routing import route

MODEL = model_preset("llama3-8b")
SPEC = CalibrationSpec(models=(MODEL,), tps=(1,), mbs=(1,), seqs=(4096,), dtypes=("bf16",))
BUS = 360e9
KINDS = {"allreduce": 2.0, "allgather": 1.0, "reduce_scatter": 1.0, "alltoall": 1.0}
REL = 1e-12


def _fake(gpus: int = 8) -> FakeBackend:
    """The catalog's curve everywhere but the collectives (those at ``BUS`` bus bandwidth)."""
    return FakeBackend(gemm_scale=1.0, attention_scale=1.0, hbm_fraction=hbm_rate.HBM_EFFICIENCY,
                       launch_gap=LAUNCH_GAP_S, count=gpus, bus_bandwidth=BUS)


def _fake_seconds(kind: str, nbytes: float, n: int) -> float:
    """nccl-tests' bus bandwidth inverted: ``bytes · factor / busbw``."""
    return nbytes * KINDS[kind] * (n - 1) / n / BUS


def _profiled(cl, gpus: int = 8, spec: CalibrationSpec = SPEC):
    gpu = replace(cl.gpu, profile=calibrate(_fake(gpus), spec))
    return replace(cl, groups=tuple(replace(g, gpu=gpu) for g in cl.groups))


BASE = cluster_preset("dgx-h100", 2)
PROF = _profiled(BASE)                        # collectives on 2, 4 and 8 GPUs (the default)
PROF_8 = _profiled(BASE, spec=replace(SPEC, coll_gpus=(8,)))


# --- the estimate's closed form -----------------------------------------------------------

@pytest.mark.parametrize("kind", list(KINDS))
def test_measured_sizes_cost_the_fakes_time_within_a_node(kind):
    """Every measured size on the 8 GPUs of one node costs exactly what the fake measured,
    whatever the model said (it differs: its latency terms)."""
    for size in COLLECTIVE_SIZES:
        s = nccl_buffer_bytes(size, 8)
        want = _fake_seconds(kind, s, 8)
        assert float(cm.collective_time(kind, s, 8, 1, PROF)) == pytest.approx(want, rel=REL)
    # the model's own 1 MiB time is latency-bound, far from the fake's
    assert float(cm.collective_time(kind, 2**20, 8, 1, BASE)) > 1.5 * _fake_seconds(kind, 2**20, 8)


@pytest.mark.parametrize("kind", list(KINDS))
def test_between_sizes_the_ratio_is_log_linear(kind):
    """A size between two measured ones: the model's seconds times the measured ratios
    interpolated linearly in log bytes (scalar and array forms alike)."""
    a, b = 2**22, 2**24
    for s in (3 * 2**21, 3 * 2**22, 2**23 + 12345):
        ra = _fake_seconds(kind, a, 8) / float(cm.collective_time(kind, a, 8, 1, BASE))
        rb = _fake_seconds(kind, b, 8) / float(cm.collective_time(kind, b, 8, 1, BASE))
        w = (math.log(s) - math.log(a)) / (math.log(b) - math.log(a))
        want = (ra + w * (rb - ra)) * float(cm.collective_time(kind, s, 8, 1, BASE))
        assert float(cm.collective_time(kind, s, 8, 1, PROF)) == pytest.approx(want, rel=REL)
    arr = np.array([3 * 2**21, 2**26, 2**31])
    got = cm.collective_time(kind, arr, np.full(3, 8), np.ones(3), PROF)
    assert np.allclose(got, [float(cm.collective_time(kind, float(x), 8, 1, PROF))
                             for x in arr], rtol=REL, atol=0)


@pytest.mark.parametrize("kind", list(KINDS))
def test_outside_what_was_measured_the_network_model(kind):
    """Below or above the measured sizes, over a GPU count not measured, across nodes, and
    an all-to-all by DeepEP's kernels (not NCCL): the cluster's model (ratio 1)."""
    for s, n, stride, share in [(2**19, 8, 1, 1.0), (2**31, 8, 1, 1.0), (2**26, 8, 2, 1.0),
                                (2**26, 16, 1, 1.0), (2**26, 2, 8, 1.0)]:
        assert cm.collective_time(kind, s, n, stride, PROF) == \
            cm.collective_time(kind, s, n, stride, BASE)
    for n in (2, 4):                      # measured on the 8 GPUs only: 2 and 4 keep the model
        assert cm.collective_time(kind, 2**26, n, 1, PROF_8) == \
            cm.collective_time(kind, 2**26, n, 1, BASE)
    assert cm.collective_time("alltoall", 2**26, 8, 1, PROF, nvlink_share=0.9) == \
        cm.collective_time("alltoall", 2**26, 8, 1, BASE, nvlink_share=0.9)


def test_no_profile_or_no_collectives_changes_nothing_bit_for_bit():
    one = _profiled(BASE, gpus=1)          # a one-GPU machine measures no collective
    assert not one.gpu.profile.collectives and cm.profile_of(one) is not None
    for kind in KINDS:
        for s in (2**20, 3 * 2**22):
            assert cm.collective_time(kind, s, 8, 1, one) == cm.collective_time(kind, s, 8, 1,
                                                                                 BASE)
    assert cm.measured_scale("allreduce", 2**26, 8, True, BASE) == 1.0


def test_a_mixed_cluster_keeps_the_network_model():
    """Node groups carrying different profiles (here one measured, one not): no group's
    measurement describes the others' fabric, so the model stays."""
    mixed = cluster_preset("dgx-h100", 2)
    gpu = replace(mixed.gpu, profile=PROF.gpu.profile)
    mixed = replace(mixed, groups=(replace(mixed.groups[0], gpu=gpu, num_nodes=1),
                                   replace(mixed.groups[0], num_nodes=1)))
    assert cm.profile_of(mixed) is None
    assert cm.collective_time("allreduce", 2**26, 8, 1, mixed) == \
        cm.collective_time("allreduce", 2**26, 8, 1, BASE)


@pytest.mark.parametrize("plan", ["tp=8,mbs=1,gbs=4", "tp=4,dp=2,mbs=1,gbs=4,sp=true",
                                  "tp=2,pp=2,dp=2,mbs=1,gbs=8", "dp=8,mbs=1,gbs=8,zero=1",
                                  "tp=2,dp=4,mbs=1,gbs=8,zero=3"])
def test_the_bound_stays_below_the_simulation_with_a_profile(plan):
    """The search's exactness: the lower bound of a plan on one profiled node (collectives
    faster than the model where latency-bound, ratios < 1) stays below its simulation."""
    job = make_job(MODEL, replace(PROF, groups=(replace(PROF.groups[0], num_nodes=1),)),
                   parse_plan(plan))
    bound = float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                        PlanArrays.from_plans([job.plan]), job.framework)[0])
    assert bound <= simulate(job).step_time_s


def test_the_lower_bound_stays_below():
    """The ring floor of a group within a node scales by the ratio where it is below 1."""
    for kind, passes in (("allreduce", 2), ("reduce_scatter", 1), ("allgather", 1)):
        for s in (2**20, 3 * 2**22, 2**30):
            floor = float(group_floor(s, 8, 1, passes, PROF))
            assert floor <= float(cm.collective_time(kind, s, 8, 1, PROF)) * (1 + 1e-12)
    assert 0 < measured_least(PROF, "alltoall") < 1 == measured_least(BASE, "alltoall")


# --- the simulator ------------------------------------------------------------------------

def _alone(op: Collective, cl) -> float:
    """Seconds the engine takes for ``op`` alone on the wire (every member runs it)."""
    progs = {r: Program(r, 0, {"s": (replace(op, stream="s", deps=()),)}) for r in op.group}
    return run(progs, net=SimNetwork(simpy.Environment(), build_graph(cl), route)).step_time_s


@pytest.mark.parametrize("plan", ["tp=8,mbs=1,gbs=2", "tp=8,mbs=1,gbs=2,sp=true"])
def test_simulated_collective_alone_is_the_measured_time(plan):
    """The compiled TP collective (64 MiB, a measured size) runs ``measured_scale`` times
    the calls: alone on the wire it takes the fake's seconds times its calls, the
    estimate's time to 1e-9."""
    job = lambda cl: make_job(MODEL, cl, parse_plan(plan))        # noqa: E731
    base, prof = (compile_job(job(cl), ranks=[0])[0] for cl in (BASE, PROF))
    pairs = [(a, b) for a, b in zip(base.ops(), prof.ops()) if isinstance(a, Collective)
             and a.category == "tp"]
    assert pairs
    for a, b in pairs:
        assert (a.kind, a.group, a.nbytes) == (b.kind, b.group, b.nbytes) == \
            (a.kind, tuple(range(8)), 2.0 * 8192 * 4096)
        scale = float(cm.measured_scale(a.kind, a.nbytes, 8, True, PROF))
        assert b.repeat == pytest.approx(a.repeat * scale, rel=1e-15)
        want = a.repeat * _fake_seconds(a.kind, a.nbytes, 8)
        assert want == pytest.approx(a.repeat * float(cm.collective_time(
            a.kind, a.nbytes, 8, 1, PROF)), rel=1e-12)
        assert _alone(b, PROF) == pytest.approx(want, rel=1e-9)


def test_simulated_step_equals_the_estimate_with_the_profile():
    """One node, tp = 8, one micro-batch: nothing overlaps, so simulation and estimate agree
    with and without the profile, and the profile moves both by the same seconds."""
    steps = {}
    for name, cl in (("base", BASE), ("prof", PROF)):
        job = make_job(MODEL, replace(cl, groups=(replace(cl.groups[0], num_nodes=1),)),
                       parse_plan("tp=8,mbs=1,gbs=2"))
        steps[name] = (estimate(job).step_time_s, simulate(job).step_time_s)
        assert steps[name][1] == pytest.approx(steps[name][0], rel=1e-9)
    assert steps["prof"][0] != pytest.approx(steps["base"][0], rel=1e-6)


def test_cross_node_collectives_are_unchanged_in_the_compiled_program():
    """tp = 8 per node, dp = 2 across the two nodes: the TP ops repeat by the ratio, the
    data-parallel ones (between nodes) exactly as without the profile."""
    job = lambda cl: make_job(MODEL, cl, parse_plan("tp=8,dp=2,mbs=1,gbs=4"))   # noqa: E731
    base, prof = (compile_job(job(cl), ranks=[0])[0] for cl in (BASE, PROF))
    seen = set()
    for a, b in zip(base.ops(), prof.ops()):
        if isinstance(a, Collective):
            seen.add(a.category)
            if a.category == "dp":
                assert b.repeat == a.repeat
            else:
                assert b.repeat != a.repeat
    assert {"dp", "tp"} <= seen


# --- bad input and the report -------------------------------------------------------------

GOOD = {"schema": "paraplan-gpu-profile/1", "gpu": "H100",
        "gemm": [{"dtype": "bf16", "m": 64, "n": 64, "k": 64, "seconds": 1e-6}]}


@pytest.mark.parametrize("coll, words", [
    ({"op": "all_reduce", "gpus": 16, "bytes": 2**20, "seconds": 1e-3},
     ["profile.collectives[0].gpus", "16", "gpus_per_node=8", "within one node"]),
    ({"op": "all_gather", "gpus": 3, "bytes": 2**20, "seconds": 1e-3},
     ["profile.collectives[0].bytes", "1048576", "multiple of gpus=3", "nccl-tests"]),
    ({"op": "broadcast", "gpus": 8, "bytes": 2**20, "seconds": 1e-3},
     ["profile.collectives[0].op", "broadcast", "one of"]),
    ({"op": "all_to_all", "gpus": 8, "bytes": 2**20, "seconds": 0},
     ["profile.collectives[0].seconds", "> 0"]),
])
def test_bad_collectives_are_refused(tmp_path, capsys, coll, words):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({**GOOD, "collectives": [coll]}))
    (tmp_path / "c.yaml").write_text("preset: dgx-h100\ngpu: {profile: p.yaml}\n")
    rc = main(["estimate", "--model", "gpt-1.7b", "--cluster", str(tmp_path / "c.yaml"),
               "--plan", "tp=1,gbs=8"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 1
    for w in words:
        assert w in err, (w, err)


def test_a_node_smaller_than_the_measurement_is_refused():
    with pytest.raises(SpecError, match="gpus_per_node=4"):
        replace(PROF, gpus_per_node=4)


def test_the_fake_writes_nccl_buffers_for_any_gpu_count():
    """Three GPUs: the fake's sizes are rounded as the torch backend's buffers (whole bf16
    elements in three equal shares), so the file it writes reads back."""
    prof = calibrate(_fake(3), SPEC)
    assert {c.bytes % 6 for c in prof.collectives} == {0}
    assert {c.bytes for c in prof.collectives} == {nccl_buffer_bytes(s, 3)
                                                   for s in COLLECTIVE_SIZES}
    assert profile_to_mapping(prof)["collectives"]


def test_the_report_says_which_collectives_were_read(tmp_path, capsys):
    prof = calibrate(_fake(8), SPEC)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(profile_to_mapping(prof)))
    (tmp_path / "c.yaml").write_text("preset: dgx-h100\ngpu: {profile: p.yaml}\n")
    args = ["estimate", "--model", "llama3-8b", "--plan", "tp=8,mbs=1,gbs=2"]
    assert main([*args, "--cluster", str(tmp_path / "c.yaml")]) == 0
    out = capsys.readouterr().out
    assert ("collectives read within a node: all_gather, all_reduce, all_to_all, "
            "reduce_scatter on 2, 4, 8 GPUs, 1-1024 MiB (between nodes: the network model)") in out
    # the estimate through the file is the closed form's: the in-node TP collectives moved
    assert main([*args, "--cluster", str(tmp_path / "c.yaml"), "--json"]) == 0
    import json
    got = json.loads(capsys.readouterr().out)["step_time_s"]
    job = make_job(MODEL, replace(PROF, groups=(replace(PROF.groups[0], num_nodes=1),)),
                   parse_plan("tp=8,mbs=1,gbs=2"))
    assert got == pytest.approx(estimate(job).step_time_s, rel=1e-12)


# --- the pair paths and DeepSpeed's per-tensor rings ----------------------------------------

PROF2 = _profiled(BASE, gpus=2)           # a two-GPU machine's measurements


def test_the_tied_pair_reads_two_gpu_measurements():
    """The tied embedding's all-reduce between the first and last stage (``pair_time``):
    within a node it costs the fake's time on 2 GPUs; across nodes the network model."""
    for size in COLLECTIVE_SIZES:
        s = nccl_buffer_bytes(size, 2)
        assert float(pair_time("allreduce", s, True, PROF2)) == pytest.approx(
            _fake_seconds("allreduce", s, 2), rel=REL)
        assert pair_time("allreduce", s, False, PROF2) == \
            pair_time("allreduce", s, False, BASE)


def test_tied_pair_simulated_moves_as_the_estimate():
    """pp = 2 on two GPUs of one node with tied embeddings: the only collective is the tied
    pair's all-reduce, exposed at the step's end in both; the profile moves the simulated
    step by the estimate's seconds."""
    m = replace(model_preset("gpt-1.7b"), tie_word_embeddings=True)   # 0.1-1 GiB of gradient
    one = lambda cl: replace(cl, groups=(replace(cl.groups[0], num_nodes=1),),  # noqa: E731
                             gpus_per_node=2, nics_per_node=2)
    d = {}
    for name, cl in (("base", BASE), ("prof", PROF2)):
        job = make_job(m, one(cl), parse_plan("pp=2,mbs=1,gbs=2"))
        d[name] = (estimate(job).step_time_s, simulate(job).step_time_s)
    moved = d["prof"][0] - d["base"][0]
    assert abs(moved) > 1e-6
    assert d["prof"][1] - d["base"][1] == pytest.approx(moved, rel=1e-9)


def test_per_tensor_rings_within_a_node_read_the_measurement():
    """DeepSpeed's per-tensor ZeRO-3 rings (``per_tensor_time``) within a node: each ring the
    measured time, so the simulator's excess over its measured calls is the copies and their
    HBM passes alone."""
    count, nbytes, gap, rate = 12.0, 12 * 2.0**22, 1e-6, 1.5e12
    for kind in ("allgather", "reduce_scatter"):
        t = float(cm.per_tensor_time(count, nbytes, 8, 1, PROF, gap, kind, copy_rate=rate))
        local = count * 8 * gap + per_tensor_passes(kind) * nbytes / rate
        assert t == pytest.approx(count * _fake_seconds(kind, 2.0**22, 8) + local, rel=REL)
        assert float(per_tensor_excess(kind, count, nbytes, 8, 1, PROF, gap,
                                          copy_rate=rate)) == pytest.approx(local, rel=1e-9)
