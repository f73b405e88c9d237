"""The H200 profiles measured on hardware (docs/measurements/h200_2026-11-29, docs/calibration.md
§7.5) load, pass the profile checks, and move an estimate as the cost model's reading says:
a measured GEMM shape is charged its measured seconds."""
from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.cli.main import main
from strategies.cost import gemm_kernel, measured
from topologies.gpu_profile import load_gpu_profile
from topologies.gpus import get_gpu

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "docs" / "measurements" / "h200_2026-11-29"
FILES = sorted(RUNS.glob("run*/*.yaml"))


def test_the_four_profiles_are_there():
    assert [f.relative_to(RUNS).as_posix() for f in FILES] == [
        "run1/default.yaml", "run1/rows.yaml", "run2/default.yaml", "run2/rows.yaml"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(RUNS).as_posix())
def test_profile_loads_as_an_h200_and_keeps_its_measured_shapes(path):
    p = load_gpu_profile(str(path))
    assert p.backend == "torch" and p.device == "NVIDIA H200"
    gpu = replace(get_gpu(p.gpu), profile=p)
    assert gpu.name == get_gpu("H200").name
    assert not p.collectives                    # one GPU: nothing to measure
    rate = gpu.peak("bf16") * gpu.gemm_efficiency("bf16")
    kn, waves = gemm_kernel.k_knee(gpu, "bf16"), gemm_kernel.gemm_waves(gpu)

    def model(M, N, K):
        return gemm_kernel.gemm_compute(M, N, K, rate, kn, waves) + gemm_kernel.gemm_fixed_s(gpu)
    q = measured.gemm_ratio(gpu, "bf16", model)
    for pt in p.gemm_points("bf16")[:: max(1, len(p.gemm_points("bf16")) // 7)]:
        assert q(pt.m, pt.n, pt.k) * model(pt.m, pt.n, pt.k) == pytest.approx(pt.seconds,
                                                                              rel=1e-12)


def test_a_cluster_naming_the_profile_moves_the_estimate(tmp_path, capsys):
    prof = RUNS / "run2" / "default.yaml"
    (tmp_path / "c.yaml").write_text(f"preset: dgx-h200\ngpu: {{profile: {prof}}}\n")
    args = ["estimate", "--model", "llama3-8b", "--plan", "tp=2,mbs=1,gbs=8", "--json"]
    assert main([*args, "--cluster", "dgx-h200:1"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert main([*args, "--cluster", str(tmp_path / "c.yaml")]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["inputs"]["cluster"]["gpu"]["profile"] == str(prof)
    assert got["step_time_s"] != base["step_time_s"]


def test_profile_table_prints_the_breakdown(capsys):
    spec = importlib.util.spec_from_file_location("profile_table",
                                                  ROOT / "experiments" / "profile_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import sys
    argv, sys.argv = sys.argv, ["profile_table.py", str(RUNS / "run2" / "default.yaml")]
    try:
        assert mod.main() == 0
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert "| bf16 | 1e12-1e13 | 77 |" in out and "| layernorm |" in out
    assert "native (catalog: forward" in out
