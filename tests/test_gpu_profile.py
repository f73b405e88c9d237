"""``paraplan calibrate`` and GPU profile files (issue 15, item 5), without a GPU: the fake
backend's known curve goes through the sweep, the file, a cluster YAML and the cost model."""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.calibrate import CalibrationSpec, FakeBackend, calibrate
from simulator.calibrate.run import gemm_shapes
from simulator.cli.main import main
from strategies.cost import attention_time, elementwise_time, gemm_kernel, gemm_time, hbm_rate
from strategies.cost import attention_grid, measured
from strategies.estimate import estimate
from strategies.framework import DEFAULT
from strategies.stacks.profile import LAUNCH_GAP_S
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_from_mapping
from topologies.cluster.mapping import load_cluster_file
from topologies.errors import SpecError
from topologies.gpu_profile import (GemmPoint, GpuProfile, load_gpu_profile,
                                    profile_from_mapping, profile_to_mapping)
from topologies.gpus import get_gpu

MODEL = model_preset("llama3-8b")
SPEC = CalibrationSpec(models=(MODEL,), tps=(1, 2), mbs=(1,), seqs=(4096, 8192))


def _neutral(**kw) -> FakeBackend:
    """A fake backend equal to the catalog except where ``kw`` says."""
    base = dict(gemm_scale=1.0, attention_scale=1.0, hbm_fraction=hbm_rate.HBM_EFFICIENCY,
                launch_gap=LAUNCH_GAP_S)
    return FakeBackend(**{**base, **kw})


def _profiled(backend: FakeBackend, spec: CalibrationSpec = SPEC):
    return replace(get_gpu("H100"), profile=calibrate(backend, spec))


# --- the sweep and the file -------------------------------------------------------------


def test_calibrate_cli_end_to_end_writes_the_fake_curve(tmp_path, capsys):
    out = tmp_path / "h100.yaml"
    rc = main(["calibrate", "--backend", "fake", "--out", str(out), "--model", "llama3-8b",
               "--tp", "1,2", "--mbs", "1", "--seqs", "4096,8192", "--gpus", "8", "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    prof = load_gpu_profile(str(out))
    fake, gpu = FakeBackend(count=8), get_gpu("H100")
    assert prof.gpu == gpu.name and prof.backend == "fake"
    assert {p.dtype for p in prof.gemm} == {"bf16", "fp8"}
    assert len(prof.gemm) == 2 * len(gemm_shapes(SPEC))
    for p in prof.gemm:     # every measured efficiency is the known curve's
        eff = p.flops / p.seconds / gpu.peak(p.dtype)
        assert eff == pytest.approx(fake.gemm_efficiency(p.dtype, p.m, p.n, p.k), rel=1e-12)
        # the catalog's kernel time (rate, shape, K knee, the fixed time per kernel) over 0.5
        work = 2.0 * p.m * p.n * p.k
        t = (work / (gpu.peak(p.dtype) * gpu.gemm_efficiency(p.dtype) * gemm_kernel.side_factor(p.m)
                     * gemm_kernel.side_factor(p.n) * p.k / (p.k + gemm_kernel.k_knee(gpu, p.dtype)))
             + gemm_kernel.gemm_fixed_s(gpu)) / 0.5
        assert eff == pytest.approx(work / t / gpu.peak(p.dtype), rel=1e-12)
    assert {(p.kernel, p.heads, p.seq) for p in prof.attention} == {
        (k, h, s) for k in ("native", "fa2") for h in (32, 16) for s in (4096, 8192)}
    for p in prof.attention:   # the catalog's rate at the kernel's grid for the shape (§5.130)
        f = measured.attention_flops_fwd(p.batch, p.heads, p.seq, p.head_dim, p.causal)
        ef, eb = fake.attention_efficiency(p.kernel)
        gf, gb = attention_grid.shape_factors(gpu, p.kernel, p.batch * p.heads, p.seq)
        assert f / p.fwd_seconds / gpu.peak("bf16") == pytest.approx(ef * gf, rel=1e-12)
        assert attention_time.FLASH_BWD_FACTOR * f / p.bwd_seconds / gpu.peak("bf16") == \
            pytest.approx(eb * gb, rel=1e-12)
        assert ef == pytest.approx(0.5 * gpu.flash_efficiency(p.kernel), rel=1e-12)
    assert prof.hbm_bandwidth == pytest.approx(0.8 * gpu.hbm_bandwidth, rel=1e-12)
    assert prof.launch_gap_s == 4e-6
    assert {c.op for c in prof.collectives} == {"all_reduce", "all_gather", "reduce_scatter",
                                                "all_to_all"}
    # every group size within the 8 GPUs (2, 4, 8: the sweep's default), each at the curve
    assert {c.gpus for c in prof.collectives} == {2, 4, 8}
    assert all(c.bus_bandwidth == pytest.approx(360e9, rel=1e-12) for c in prof.collectives)
    # the report compares with the catalog: measured / model seconds = 1 / gemm_scale
    assert summary["gemm"]["bf16"]["vs_model"] == pytest.approx(2.0, rel=1e-12)
    want = statistics.median(0.275 * attention_grid.shape_factors(gpu, "native", p.batch * p.heads,
                                                                  p.seq)[0]
                             for p in prof.attention if p.kernel == "native")
    assert summary["attention"]["native"]["fwd_efficiency_median"] == pytest.approx(want)
    # the file round-trips exactly
    assert profile_from_mapping(profile_to_mapping(prof), prof.path) == prof


def test_json_output_and_the_table(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["calibrate", "--backend", "fake", "--out", str(out), "--model", "gpt-1.7b",
                 "--tp", "1", "--mbs", "1", "--seqs", "2048", "--gpu", "A100"]) == 0
    text = capsys.readouterr().out
    assert "GEMMs" in text and "vs model" in text and "launch gap: 4.00 us" in text
    d = json.loads(out.read_text())
    assert d["gpu"] == "A100-SXM4-80GB" and d["collectives"] == []
    assert {g["dtype"] for g in d["gemm"]} == {"bf16"}       # A100 has no fp8


def test_no_torch_needed(tmp_path):
    """Every command, calibrate with the fake backend included, runs where importing torch
    would fail: nothing imports it but the torch backend."""
    import os
    import subprocess
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise RuntimeError('torch imported')\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    for argv in (["calibrate", "--backend", "fake", "--out", str(tmp_path / "p.yaml"),
                  "--model", "gpt-1.7b", "--tp", "1", "--seqs", "2048"],
                 ["estimate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1",
                  "--plan", "tp=1,gbs=8"]):
        r = subprocess.run([sys.executable, "-m", "simulator.cli", *argv], capture_output=True,
                           text=True, cwd=root, env=env)
        assert r.returncode == 0, r.stderr


def test_torch_backend_without_torch_is_refused(tmp_path, capsys):
    try:
        import torch  # noqa: F401
        pytest.skip("torch is installed")
    except ImportError:
        pass
    rc = main(["calibrate", "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and "--backend" in err and "paraplan[calibrate]" in err
    assert not (tmp_path / "p.yaml").exists()


# --- the cost model reads it ------------------------------------------------------------


def _step(gpu, plan: str = "tp=1,mbs=1,gbs=2") -> float:
    cluster = cluster_from_mapping({"preset": "dgx-h100", "gpus_per_node": 1,
                                    "gpu": "H100" if gpu is None else "H100"})
    if gpu is not None:
        cluster = replace(cluster, groups=(replace(cluster.groups[0], gpu=gpu),))
    job = make_job(MODEL, cluster, parse_plan(plan))
    return estimate(job).step_time_s


def test_neutral_profile_changes_nothing():
    """A profile that measured exactly the catalog's model leaves the estimate as it was."""
    assert _step(_profiled(_neutral())) == pytest.approx(_step(None), rel=1e-12)


def test_half_gemm_efficiency_doubles_gemm_time_closed_form():
    """One GPU, no communication: the step is R + G/s when every GEMM runs at s times the
    catalog's rate (R: everything else). s = 1, 0.5, 0.25 give three points on that line."""
    spec = CalibrationSpec(models=(MODEL,), tps=(1,), mbs=(1,), seqs=(8192,), dtypes=("bf16",))
    t1, t2, t4 = (_step(_profiled(_neutral(gemm_scale=s), spec)) for s in (1.0, 0.5, 0.25))
    G = t2 - t1                              # the catalog's GEMM seconds in the step
    assert t4 - t2 == pytest.approx(2 * G, rel=1e-9)
    assert 0.5 < G / t1 < 1                   # GEMM-dominated: the step nearly doubles
    # the layer's GEMMs exactly double (compute-bound shapes)
    cat, half = get_gpu("H100"), _profiled(_neutral(gemm_scale=0.5), spec)
    for fn in (gemm_time.gemm_time_fwd, gemm_time.gemm_time_bwd):
        assert fn(MODEL, 1, 1, 1, 1, half, "bf16") == \
            pytest.approx(2 * fn(MODEL, 1, 1, 1, 1, cat, "bf16"), rel=1e-12)


def test_attention_memory_and_launch_follow_the_profile():
    cat = get_gpu("H100")
    gpu = _profiled(_neutral(attention_scale=0.5, hbm_fraction=0.5, launch_gap=9e-6))
    for tp in (1, 2):
        f0, b0 = attention_time.attention_time_fwd(MODEL, 1, tp, 1, True, cat)
        f1, b1 = attention_time.attention_time_fwd(MODEL, 1, tp, 1, True, gpu)
        assert (f1, b1) == pytest.approx((2 * f0, 2 * b0), rel=1e-12)
    e0 = elementwise_time.elementwise_time_fwd(MODEL, 1, 1, 1, False, cat, "bf16")
    e1 = elementwise_time.elementwise_time_fwd(MODEL, 1, 1, 1, False, gpu, "bf16")
    assert e1 == pytest.approx(e0 * hbm_rate.HBM_EFFICIENCY / 0.5, rel=1e-12)
    assert elementwise_time.launch_time(gpu=gpu) == DEFAULT.kernels_per_layer * 9e-6
    # outside the measured sequences (seq 1024 with cp=8): the catalog's rate, without the
    # grid factor the catalog path adds (§5.130 leaves the measured path as it was)
    f0, _ = attention_time.attention_time_fwd(MODEL, 1, 1, 8, True, cat)
    f1, _ = attention_time.attention_time_fwd(MODEL, 1, 1, 8, True, gpu)
    g_f, _ = attention_grid.rate_factors(MODEL, 1, 1, 8, cat, "native")
    assert f1 == pytest.approx(f0 * g_f, rel=1e-12)


def test_ratio_interpolates_in_log_size_and_is_one_outside():
    gpu = get_gpu("H100")
    pts = (GemmPoint("bf16", 1024, 1024, 1024, 2.0), GemmPoint("bf16", 4096, 4096, 4096, 4.0))
    g = replace(gpu, profile=GpuProfile(gemm=pts))
    q = measured.gemm_ratio(g, "bf16", lambda M, N, K: 1.0)
    assert q(1024, 1024, 1024) == 2.0 and q(4096, 4096, 4096) == 4.0
    assert q(2048, 2048, 2048) == pytest.approx(3.0, rel=1e-12)    # halfway in log FLOPs
    assert q(512, 2048, 1024) == pytest.approx(2.0, rel=1e-12)     # same FLOPs as the first
    f1, f2 = pts[0].flops, pts[1].flops
    side = (f1 * (f2 / f1) ** 0.25 / 2) ** (1 / 3)
    assert q(side, side, side) == pytest.approx(2.5, rel=1e-12)
    assert q(512, 1024, 1024) == 1.0 and q(8192, 4096, 4096) == 1.0
    assert np.allclose(q(np.array([1024, 4096, 8192]), 4096, 4096)[1:], [4.0, 1.0])
    assert measured.gemm_ratio(g, "fp8", lambda M, N, K: 1.0) is None   # no fp8 measured


def test_measured_shapes_keep_their_own_ratio():
    """The three passes of a weight share their FLOPs: each measured shape keeps its own
    time, another shape of the same FLOPs gets their mean."""
    pts = (GemmPoint("bf16", 4096, 1024, 2048, 2.0), GemmPoint("bf16", 2048, 1024, 4096, 4.0))
    g = replace(get_gpu("H100"), profile=GpuProfile(gemm=pts))
    q = measured.gemm_ratio(g, "bf16", lambda M, N, K: 1.0)
    assert q(4096, 1024, 2048) == 2.0 and q(2048, 1024, 4096) == 4.0
    assert q(1024, 4096, 2048) == 3.0
    assert np.array_equal(q(np.array([4096.0, 2048.0, 1024.0]), np.array([1024, 1024, 4096]),
                            np.array([2048, 4096, 2048])), [2.0, 4.0, 3.0])


def test_attention_picks_the_nearest_grid():
    """Batch-1 points: their grid, ``batch·heads``, is the head count
    (tests/test_measured_attention.py)."""
    gpu = get_gpu("H100")
    mk = {"kernel": "native", "batch": 1, "seq": 4096, "head_dim": 128, "causal": True}
    prof = profile_from_mapping({
        "schema": "paraplan-gpu-profile/1",
        "gemm": [{"dtype": "bf16", "m": 64, "n": 64, "k": 64, "seconds": 1e-6}],
        "attention": [{**mk, "heads": 8, "fwd_seconds": 1.0, "bwd_seconds": 1.0},
                      {**mk, "heads": 32, "fwd_seconds": 3.0, "bwd_seconds": 3.0}]})
    g = replace(gpu, profile=prof)
    cat = lambda f: f / 1e15   # noqa: E731
    fwd, _ = measured.attention_ratios(g, "native", cat, 1.0)
    r8 = 1.0 / cat(measured.attention_flops_fwd(1, 8, 4096, 128, True))
    r32 = 3.0 / cat(measured.attention_flops_fwd(1, 32, 4096, 128, True))
    assert fwd(4096, 8) == pytest.approx(r8) and fwd(4096, 12) == pytest.approx(r8)
    assert fwd(4096, 20) == pytest.approx(r32) and fwd(4096, 64) == pytest.approx(r32)
    assert np.allclose(fwd(4096, np.array([8, 32])), [r8, r32])
    assert fwd(8192, 8) == 1.0


# --- the cluster YAML names it ----------------------------------------------------------


def _write_profile(path, backend: FakeBackend = FakeBackend()) -> None:
    path.write_text(yaml.safe_dump(profile_to_mapping(calibrate(backend, SPEC))))


def test_cluster_yaml_names_a_profile_and_round_trips(tmp_path):
    _write_profile(tmp_path / "h100.yaml")
    (tmp_path / "c.yaml").write_text("preset: dgx-h100\nnodes: 2\ngpu: {profile: h100.yaml}\n")
    (tmp_path / "d.yaml").write_text("preset: dgx-h100\ngpu: {name: H100, profile: h100.yaml}\n")
    c = load_cluster_file(str(tmp_path / "c.yaml"))
    d = load_cluster_file(str(tmp_path / "d.yaml"))
    assert c.gpu.profile is not None and c.gpu.profile == d.gpu.profile
    assert c.gpu.name == "H100-SXM5-80GB" and c.num_nodes == 2
    back = cluster_from_mapping(c.to_dict())
    assert back.gpu == c.gpu and back.gpu.profile.path == str(tmp_path / "h100.yaml")
    # a custom GPU carries a profile too
    e = cluster_from_mapping({"preset": "dgx-h100", "gpu": {
        "name": "mine", "bf16_tflops": 900, "hbm_gib": 80, "hbm_tbps": 3,
        "profile": str(tmp_path / "h100.yaml")}})
    assert e.gpu.name == "mine" and e.gpu.profile == c.gpu.profile
    assert cluster_from_mapping(e.to_dict()).gpu == e.gpu


def test_estimate_cli_reads_the_profile(tmp_path, capsys):
    _write_profile(tmp_path / "h100.yaml")
    (tmp_path / "c.yaml").write_text("preset: dgx-h100\ngpu: {profile: h100.yaml}\n")
    args = ["estimate", "--model", "llama3-8b", "--plan", "tp=2,mbs=1,gbs=4", "--json"]
    assert main([*args, "--cluster", "dgx-h100:1"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert main([*args, "--cluster", str(tmp_path / "c.yaml")]) == 0
    prof = json.loads(capsys.readouterr().out)
    assert prof["inputs"]["cluster"]["gpu"]["profile"] == str(tmp_path / "h100.yaml")
    assert 1.3 < prof["step_time_s"] / base["step_time_s"] < 2.0


# --- bad input --------------------------------------------------------------------------

GOOD = {"schema": "paraplan-gpu-profile/1", "gpu": "H100",
        "gemm": [{"dtype": "bf16", "m": 64, "n": 64, "k": 64, "seconds": 1e-6}]}


@pytest.mark.parametrize("patch, words", [
    ({"gemm": []}, ["profile.gemm", "at least one"]),
    ({"gemm": [{"dtype": "bf16", "n": 64, "k": 64, "seconds": 1e-6}]},
     ["profile.gemm[0].m", "required"]),
    ({"gemm": [{"dtype": "bf16", "m": 64, "n": 64, "k": 64, "seconds": 0}]},
     ["profile.gemm[0].seconds", "0", "> 0"]),
    ({"gemm": [{"dtype": "bf16", "m": 64, "n": 64, "k": 64, "seconds": -1e-3}]},
     ["profile.gemm[0].seconds", "-0.001", "> 0"]),
    ({"gemm": [{"dtype": "bf16", "m": 0, "n": 64, "k": 64, "seconds": 1e-6}]},
     ["profile.gemm[0].m", "integer >= 1"]),
    ({"gemm": [{"dtype": "int4", "m": 64, "n": 64, "k": 64, "seconds": 1e-6}]},
     ["profile.gemm[0].dtype", "int4", "one of"]),
    ({"gemm": GOOD["gemm"] * 2}, ["profile.gemm[1]", "twice"]),
    ({"memory": [{"kernel": "copy", "bytes": 1024, "seconds": -1.0}]},
     ["profile.memory[0].seconds", "> 0"]),
    ({"attention": [{"kernel": "fa3", "batch": 1, "heads": 8, "seq": 1024, "head_dim": 128,
                     "fwd_seconds": 1e-3, "bwd_seconds": 1e-3}]},
     ["profile.attention[0].kernel", "fa3"]),
    ({"collectives": [{"op": "all_reduce", "gpus": 1, "bytes": 1024, "seconds": 1e-3}]},
     ["profile.collectives[0].gpus", "at least 2"]),
    ({"launch_gap_s": 0.0}, ["profile.launch_gap_s", "> 0"]),
    ({"gemm": [{"dtype": "bf16", "m": 10**400, "n": 64, "k": 64, "seconds": 1e-6}]},
     ["profile.gemm[0].m", "integer >= 1"]),
    ({"gemm": [{"dtype": "bf16", "m": 64, "n": 64, "k": 64, "seconds": float("inf")}]},
     ["profile.gemm[0].seconds", "> 0"]),
    ({"gemm": [{"dtype": "bf16", "m": 64, "n": 64, "k": 64, "seconds": "fast"}]},
     ["profile.gemm[0].seconds", "fast"]),
    ({"gemm": [{"dtype": "bf16", "m": 64.5, "n": 64, "k": 64, "seconds": 1e-6}]},
     ["profile.gemm[0].m", "64.5"]),
    ({"attention": [{"kernel": "native", "batch": 1, "heads": 8, "seq": 1024, "head_dim": 128,
                     "causal": "yes", "fwd_seconds": 1e-3, "bwd_seconds": 1e-3}]},
     ["profile.attention[0].causal", "true or false"]),
    ({"gemm": {"dtype": "bf16"}}, ["profile.gemm", "list"]),
    ({"schema": "v0"}, ["profile.schema", "v0"]),
    ({"tflops": 3}, ["profile.tflops", "unknown key"]),
])
def test_bad_profile_is_refused_through_the_cli(tmp_path, capsys, patch, words):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({**GOOD, **patch}))
    (tmp_path / "c.yaml").write_text("preset: dgx-h100\ngpu: {profile: p.yaml}\n")
    rc = main(["estimate", "--model", "gpt-1.7b", "--cluster", str(tmp_path / "c.yaml"),
               "--plan", "tp=1,gbs=8"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 1
    for w in words:
        assert w in err, (w, err)


def test_malformed_and_mismatched_profiles(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("gemm: [1, 2\n")
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(GOOD))
    anon = {k: v for k, v in GOOD.items() if k != "gpu"}
    (tmp_path / "anon.yaml").write_text(yaml.safe_dump(anon))
    for gpu, words in [("{profile: bad.yaml}", ["gpu.profile", "malformed YAML"]),
                       ("{profile: none.yaml}", ["gpu.profile", "no such file"]),
                       ("{name: A100, profile: good.yaml}", ["measured on H100"]),
                       ("{profile: anon.yaml}", ["names no GPU"])]:
        (tmp_path / "c.yaml").write_text(f"preset: dgx-h100\ngpu: {gpu}\n")
        rc = main(["estimate", "--model", "gpt-1.7b", "--cluster", str(tmp_path / "c.yaml"),
                   "--plan", "tp=1,gbs=8"])
        err = capsys.readouterr().err
        assert rc == 2 and "Traceback" not in err
        for w in words:
            assert w in err, (w, err)


@pytest.mark.parametrize("argv, words", [
    (["--tp", "0"], ["--tp", "0"]),
    (["--tp", "1,,2"], ["--tp", "comma-separated"]),
    (["--dtypes", "bf16,int4"], ["--dtypes", "int4"]),
    (["--gpu", "Z9000"], ["gpu", "Z9000", "unknown GPU"]),
    (["--model", "nope"], ["nope"]),
])
def test_bad_calibrate_flags(tmp_path, capsys, argv, words):
    out = tmp_path / "p.yaml"
    rc = main(["calibrate", "--backend", "fake", "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    for w in words:
        assert w in err, (w, err)
    assert not out.exists()


def test_bad_out_path(tmp_path, capsys):
    rc = main(["calibrate", "--backend", "fake", "--out", str(tmp_path / "p.txt")])
    assert rc == 2 and "--out" in capsys.readouterr().err


def test_gpu_profile_requires_gemm_points():
    with pytest.raises(SpecError, match="at least one"):
        GpuProfile(gemm=())


def test_simulate_reads_the_profile():
    """The simulator compiles from the same cost record: a neutral profile leaves the
    simulated step unchanged, half-rate GEMMs lengthen it by the analytic GEMM seconds
    (one GPU, nothing to overlap)."""
    from simulator.simulate import simulate

    def sim(gpu):
        cluster = cluster_from_mapping({"preset": "dgx-h100", "gpus_per_node": 1, "gpu": "H100"})
        if gpu is not None:
            cluster = replace(cluster, groups=(replace(cluster.groups[0], gpu=gpu),))
        return simulate(make_job(MODEL, cluster, parse_plan("tp=1,mbs=1,gbs=2"))).step_time_s

    spec = CalibrationSpec(models=(MODEL,), tps=(1,), mbs=(1,), seqs=(8192,), dtypes=("bf16",))
    base = sim(None)
    assert sim(_profiled(_neutral(), spec)) == pytest.approx(base, rel=1e-9)
    half = sim(_profiled(_neutral(gemm_scale=0.5), spec))
    analytic = _step(_profiled(_neutral(gemm_scale=0.5), spec)) - _step(None)
    assert half - base == pytest.approx(analytic, rel=1e-6)


def test_search_reads_the_profile(tmp_path, capsys):
    """search scores and simulates with the profiled GPU: its best plan's step time is what
    estimate gives that plan on the same cluster file, and the report names the profile."""
    _write_profile(tmp_path / "h100.yaml")
    (tmp_path / "c.yaml").write_text("preset: dgx-h100\ngpu: {profile: h100.yaml}\n")
    cluster = str(tmp_path / "c.yaml")
    assert main(["search", "--model", "gpt-1.7b", "--cluster", cluster, "--global-batch", "8",
                 "--top", "1", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["inputs"]["gpu_profile"] == str(tmp_path / "h100.yaml")
    best = rep["plans"][0]
    assert main(["estimate", "--model", "gpt-1.7b", "--cluster", cluster, "--plan", best["key"],
                 "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert best["analytic_step_time_s"] == pytest.approx(est["step_time_s"], rel=1e-9)
    assert main(["estimate", "--model", "gpt-1.7b", "--cluster", cluster, "--plan",
                 best["key"]]) == 0
    assert "GPU profile " + str(tmp_path / "h100.yaml") in capsys.readouterr().out


@pytest.mark.parametrize("device, gpu", [
    ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"), ("NVIDIA H100 PCIe", "H100-PCIe-80GB"),
    ("NVIDIA H200", "H200-SXM-141GB"), ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"), ("NVIDIA B200", "B200-SXM-180GB"),
    ("AMD Instinct MI300X", "MI300X"), ("NVIDIA GeForce RTX 4090", None)])
def test_device_names_map_to_the_catalog(device, gpu):
    """The torch backend's guess of the catalog GPU (importing it needs no torch)."""
    from simulator.calibrate.torch_backend import guess_catalog_gpu
    name = guess_catalog_gpu(device)
    assert (get_gpu(name).name if name else None) == gpu


def test_unknown_backend_is_refused():
    from simulator.calibrate import get_backend
    with pytest.raises(SpecError, match="must be one of torch, fake"):
        get_backend("cuda")


def test_resumed_search_sees_a_profile_measured_anew(tmp_path):
    """The results log of a search is keyed by the profile's measurements, not its path: a
    file measured again at the same path does not reuse stale simulations; a cluster
    without a profile keeps its key."""
    from simulator.search.results_file import context_hash
    (tmp_path / "c.yaml").write_text("preset: dgx-h100\ngpu: {profile: p.yaml}\n")
    keys = []
    for backend in (FakeBackend(), FakeBackend(gemm_scale=0.6)):
        _write_profile(tmp_path / "p.yaml", backend)
        cluster = load_cluster_file(str(tmp_path / "c.yaml"))
        keys.append(context_hash(MODEL, cluster, "bf16", 8))
    assert keys[0] != keys[1]
    import hashlib
    plain = cluster_from_mapping({"preset": "dgx-h100"})
    before = json.dumps({"model": MODEL.to_dict(), "cluster": plain.to_dict(), "dtype": "bf16",
                         "gbs": 8}, sort_keys=True, default=str)   # the key without profiles
    assert context_hash(MODEL, plain, "bf16", 8) == \
        hashlib.sha256(before.encode()).hexdigest()[:16]
