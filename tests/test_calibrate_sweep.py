"""``paraplan calibrate``'s collectives on every group size within the machine
(docs/calibration.md §7.1, §7.3): the sweep's group sizes and their rule, the fake backend's
curve per group size read exactly by the estimate and the simulator for tp = 2 and tp = 4
within a node (end to end through the CLI too), and the rank processes, which die with the
parent whatever signal ends it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace

import pytest
import simpy

from simulator.calibrate import CalibrationSpec, FakeBackend, calibrate
from simulator.calibrate.backend import fake_collective_seconds
from simulator.calibrate.run import COLLECTIVE_SIZES, collective_groups, summarize
from simulator.cli.main import main
from simulator.engine.core import run
from simulator.network.cluster_net import SimNetwork
from simulator.program.compiler import compile_job
from simulator.program.ops import Collective, Program
from strategies.cost import comm as cm
from strategies.cost import hbm_rate
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.profile import LAUNCH_GAP_S
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.gpu_profile import COLLECTIVE_OPS, load_gpu_profile, nccl_buffer_bytes
from topologies.graph import build_graph
from topologies.routing import route

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = model_preset("llama3-8b")
SPEC = CalibrationSpec(models=(MODEL,), tps=(1,), mbs=(1,), seqs=(4096,), dtypes=("bf16",))
BUS, LAT = 360e9, 5e-6
STEPS = {"allreduce": 2.0, "allgather": 1.0, "reduce_scatter": 1.0, "alltoall": 1.0}
OP = {"allreduce": "all_reduce", "allgather": "all_gather", "reduce_scatter": "reduce_scatter",
      "alltoall": "all_to_all"}


def _fake(gpus: int = 8, **kw) -> FakeBackend:
    """The catalog's curve but the collectives: ``BUS`` bus bandwidth, ``LAT`` per ring step."""
    return FakeBackend(gemm_scale=1.0, attention_scale=1.0, hbm_fraction=hbm_rate.HBM_EFFICIENCY,
                       launch_gap=LAUNCH_GAP_S, count=gpus, bus_bandwidth=BUS, latency=LAT, **kw)


def _fake_seconds(kind: str, nbytes: float, n: int) -> float:
    """The fake's closed form: ``bytes · p(n-1)/n / busbw + p(n-1) · latency``."""
    p = STEPS[kind]
    return nbytes * (p * (n - 1) / n) / BUS + p * (n - 1) * LAT


def _profiled(cl, spec: CalibrationSpec = SPEC):
    gpu = replace(cl.gpu, profile=calibrate(_fake(), spec))
    return replace(cl, groups=tuple(replace(g, gpu=gpu) for g in cl.groups))


BASE = cluster_preset("dgx-h100", 2)
PROF = _profiled(BASE)
PROF_8 = _profiled(BASE, replace(SPEC, coll_gpus=(8,)))


# --- the group sizes ------------------------------------------------------------------------

@pytest.mark.parametrize("count, groups", [(1, ()), (2, (2,)), (3, (3,)), (4, (2, 4)),
                                           (6, (2, 6)), (8, (2, 4, 8)), (16, (2, 4, 8, 16)),
                                           (72, (2, 4, 8, 72))])
def test_default_groups_are_the_powers_of_two_dividing_the_count_and_the_count(count, groups):
    assert collective_groups(count) == groups


@pytest.mark.parametrize("asked, words", [((1,), ["coll_gpus=1", ">= 2"]),
                                          ((16,), ["coll_gpus=16", "<= the machine's GPU count 8"]),
                                          ((2, 3), ["coll_gpus=3", "must divide", "count 8"]),
                                          ((True,), ["coll_gpus=True", "integer >= 2"])])
def test_asked_groups_follow_the_rule(asked, words):
    with pytest.raises(SpecError) as e:
        collective_groups(8, asked)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    assert collective_groups(8, (8, 2, 2)) == (2, 8)


def test_the_profile_holds_every_op_size_and_group():
    prof = PROF.gpu.profile
    assert {(c.op, c.gpus, c.bytes) for c in prof.collectives} == {
        (op, g, nccl_buffer_bytes(s, g)) for op in COLLECTIVE_OPS for g in (2, 4, 8)
        for s in COLLECTIVE_SIZES}
    assert {c.gpus for c in PROF_8.gpu.profile.collectives} == {8}
    best = summarize(prof)["collectives"]
    assert set(best) == set(COLLECTIVE_OPS) and all(set(v) == {2, 4, 8} for v in best.values())
    # the best bus bandwidth is at 1 GiB: the latency's share is smallest there
    for op, per in best.items():
        for g, bw in per.items():
            s = nccl_buffer_bytes(2**30, g)
            k = {v: k for k, v in OP.items()}[op]
            assert bw == pytest.approx(s * STEPS[k] * (g - 1) / g / _fake_seconds(k, s, g),
                                       rel=1e-12)


# --- tp = 2 and tp = 4 within a node read their own measurement ------------------------------

@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("kind", list(STEPS))
def test_estimate_reads_the_group_sizes_measurement_exactly(kind, n):
    """At every measured size, a within-node collective over 2 or 4 consecutive GPUs costs
    the fake's time on that many GPUs (not the 8-GPU one), to 1e-12; with only 8 GPUs
    measured, the network model, bit for bit."""
    for size in COLLECTIVE_SIZES:
        s = nccl_buffer_bytes(size, n)
        assert float(cm.collective_time(kind, s, n, 1, PROF)) == pytest.approx(
            _fake_seconds(kind, s, n), rel=1e-12)
        assert cm.collective_time(kind, s, n, 1, PROF_8) == cm.collective_time(kind, s, n, 1,
                                                                                BASE)
    # the model differs from the fake here (its latency is 2 us a step, its rate the same)
    s = nccl_buffer_bytes(2**20, n)
    assert float(cm.collective_time(kind, s, n, 1, BASE)) != pytest.approx(
        _fake_seconds(kind, s, n), rel=1e-3)


def _alone(op: Collective, cl) -> float:
    """Seconds the engine takes for ``op`` alone on the wire (every member runs it)."""
    progs = {r: Program(r, 0, {"s": (replace(op, stream="s", deps=()),)}) for r in op.group}
    return run(progs, net=SimNetwork(simpy.Environment(), build_graph(cl), route)).step_time_s


@pytest.mark.parametrize("plan, n", [("tp=2,mbs=1,gbs=8", 2),
                                     ("tp=4,mbs=1,gbs=8,sp=true", 4)])
def test_simulated_tp_collective_alone_is_the_measured_time(plan, n):
    """The compiled TP collectives (a measured size: 64 MiB) of tp = 2 and tp = 4 repeat by
    ``measured_scale``: alone on the wire each takes the fake's seconds on ``n`` GPUs times
    its calls, to 1e-9; with only 8 GPUs measured, exactly the catalog program's op."""
    # (the data gradients' reductions blocking, §5.75: which of them the weight gradients
    # hide depends on their measured time, so the programs' ops would not pair up)
    fw = replace(MEGATRON_CORE, dgrad_overlap="none")
    job = lambda cl: make_job(MODEL, cl, parse_plan(plan), framework=fw)  # noqa: E731
    base, prof, prof8 = (compile_job(job(cl), ranks=[0])[0] for cl in (BASE, PROF, PROF_8))
    pairs = [(a, b, c) for a, b, c in zip(base.ops(), prof.ops(), prof8.ops())
             if isinstance(a, Collective) and a.category == "tp"]
    assert pairs
    for a, b, c in pairs:
        assert a.group == b.group == tuple(range(n)) and a.nbytes == 2.0 * 8192 * 4096
        assert c == a
        want = a.repeat * _fake_seconds(a.kind, a.nbytes, n)
        assert b.repeat != a.repeat
        assert _alone(b, PROF) == pytest.approx(want, rel=1e-9)


# --- end to end: calibrate --backend fake, then estimate with a cluster naming it ------------

def test_cli_calibrate_then_estimate_reads_tp2_and_tp4(tmp_path, capsys):
    out = tmp_path / "fake8.yaml"
    assert main(["calibrate", "--backend", "fake", "--gpus", "8", "--out", str(out),
                 "--model", "llama3-8b", "--tp", "1", "--mbs", "1", "--seqs", "4096",
                 "--dtypes", "bf16"]) == 0
    text = capsys.readouterr().out
    assert "op              2 GPUs  4 GPUs  8 GPUs" in text
    assert "all_reduce       360.0   360.0   360.0" in text
    prof = load_gpu_profile(str(out))
    assert {c.gpus for c in prof.collectives} == {2, 4, 8}
    (tmp_path / "c.yaml").write_text("preset: dgx-h100\ngpu: {profile: fake8.yaml}\n")
    cl = replace(cluster_preset("dgx-h100", 1), groups=tuple(
        replace(g, gpu=replace(g.gpu, profile=prof)) for g in cluster_preset("dgx-h100", 1).groups))
    for tp in (2, 4):
        plan = f"tp={tp},mbs=1,gbs=8"
        assert main(["estimate", "--model", "llama3-8b", "--cluster", str(tmp_path / "c.yaml"),
                     "--plan", plan, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)["step_time_s"]
        assert got == pytest.approx(estimate(make_job(MODEL, cl, parse_plan(plan))).step_time_s,
                                    rel=1e-12)
        # the TP collective of the step, measured on tp GPUs (64 MiB per call)
        s = 2.0 * 8192 * 4096
        fake = FakeBackend(count=8)
        assert float(cm.collective_time("allreduce", s, tp, 1, cl)) == pytest.approx(
            fake.collective_seconds(("all_reduce",), (2**26,), (tp,))[("all_reduce", tp, 2**26)],
            rel=1e-12)


@pytest.mark.parametrize("argv, words", [
    (["--gpus", "8", "--coll-gpus", "3"], ["--coll-gpus=3", "must divide", "8"]),
    (["--gpus", "8", "--coll-gpus", "16"], ["--coll-gpus=16", "<= the machine's GPU count 8"]),
    (["--gpus", "8", "--coll-gpus", "1"], ["--coll-gpus=1", ">= 2"]),
    (["--gpus", "8", "--coll-gpus", "0"], ["--coll-gpus=0", ">= 2"]),
    (["--gpus", "8", "--coll-gpus", "2,,4"], ["--coll-gpus", "comma-separated"]),
    (["--gpus", "8", "--coll-gpus", "two"], ["--coll-gpus", "two", "integer"]),
    (["--coll-gpus", "2"], ["--coll-gpus=2", "GPU count 1"]),
])
def test_bad_coll_gpus(tmp_path, capsys, argv, words):
    out = tmp_path / "p.yaml"
    rc = main(["calibrate", "--backend", "fake", "--out", str(out), "--model", "gpt-1.7b",
               *argv])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 1
    for w in words:
        assert w in err, (w, err)
    assert not out.exists()


def test_coll_gpus_chooses_the_groups(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["calibrate", "--backend", "fake", "--gpus", "8", "--out", str(out),
                 "--model", "gpt-1.7b", "--tp", "1", "--mbs", "1", "--seqs", "2048",
                 "--coll-gpus", "4,2"]) == 0
    assert {c["gpus"] for c in json.loads(out.read_text())["collectives"]} == {2, 4}


# --- the rank processes -----------------------------------------------------------------------

def test_rank_processes_answer_the_same_figures_bit_for_bit():
    args = (COLLECTIVE_OPS, COLLECTIVE_SIZES, (2, 4))
    assert _fake(4, processes=True).collective_seconds(*args) == \
        fake_collective_seconds(BUS, LAT, *args) == _fake(4).collective_seconds(*args)


def test_a_failing_rank_is_reported():
    with pytest.raises(SpecError, match=r"collectives='rank \d': measuring failed: ValueError"):
        _fake(2, processes=True, hold_s=-1.0).collective_seconds(("all_reduce",), (2**20,), (2,))


SCRIPT = textwrap.dedent("""
    import signal
    # Python's own SIGINT handler, whatever the test runner inherited: a shell that starts
    # a job in the background without job control ignores SIGINT, and so would this child
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from simulator.calibrate import CalibrationSpec, FakeBackend, calibrate
    from strategies.presets import model_preset
    spec = CalibrationSpec(models=(model_preset("gpt-1.7b"),), tps=(1,), mbs=(1,), seqs=(2048,),
                           dtypes=("bf16",))
    calibrate(FakeBackend(count=2, processes=True, hold_s=600.0), spec)
""")


def _children(pid: int) -> set[int]:
    """The live (not zombie) processes whose parent is ``pid``."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid and stat[0] != "Z":
                out.add(int(d))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_rank_outlives_the_parent(sig):
    """The parent, holding two rank processes mid-sweep, ends by ``sig``: every process it
    started (the ranks and multiprocessing's resource tracker) is gone soon after; SIGTERM
    ends the parent by SIGTERM, as it would have without the ranks."""
    parent = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=ROOT, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    kids: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and parent.poll() is None:
            kids |= _children(parent.pid)
            ranks = [k for k in kids if _alive(k) and "spawn_main" in _cmdline(k)]
            if len(ranks) == 2:
                break
            time.sleep(0.2)
        assert parent.poll() is None, parent.stderr.read().decode()
        assert len(ranks) == 2, kids
        time.sleep(1.0)                     # the ranks are in their sweep (holding)
        kids |= _children(parent.pid)
        os.kill(parent.pid, sig)
        rc = parent.wait(timeout=60)
        if sig == signal.SIGTERM:
            assert rc == -signal.SIGTERM
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(k) for k in kids):
            time.sleep(0.2)
        assert not [k for k in kids if _alive(k)], {k: _cmdline(k) for k in kids}
    finally:
        for k in kids:                      # only the processes this test started
            if _alive(k):
                os.kill(k, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stderr.close()


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
