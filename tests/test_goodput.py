"""Goodput under failures (issue 16, item 3): closed forms, the sampler against them, the CLI."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from simulator.cli.main import main
from strategies import goodput as gp
from strategies.errors import SpecError
from strategies.cost import param_counts
from strategies.framework import PROFILES, get_profile
from strategies.job import make_job
from strategies.memory.scalar import MemoryBreakdown, memory_components
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


def test_llama3_defaults_reproduce_the_reported_failure_rate():
    # the two rates together give back 419 interruptions in 54 days on 16,384 GPUs
    m = gp.job_mtbf_s(gp.LLAMA3_GPUS, gp.LLAMA3_GPUS // gp.LLAMA3_GPUS_PER_NODE)
    assert m == pytest.approx(54 * 86400 / 419, rel=1e-12)
    assert sum(gp.LLAMA3_GPU_CAUSES.values()) + sum(gp.LLAMA3_HOST_CAUSES.values()) == 419
    # rates add: twice the GPUs and nodes halve the MTBF
    assert 2 * gp.job_mtbf_s(64, 8) == pytest.approx(gp.job_mtbf_s(32, 4), rel=1e-12)
    assert gp.job_mtbf_s(8, 1, 100.0, 50.0) == pytest.approx(3600 / (8 / 100 + 1 / 50), rel=1e-12)


def test_checkpoint_size_from_the_memory_model():
    from strategies.cost.system import DEFAULT_SYSTEM
    PARAM_BYTES, OPTIMIZER_BYTES = DEFAULT_SYSTEM.param_bytes, DEFAULT_SYSTEM.optimizer_state_bytes
    m = model_preset("llama3-8b")
    assert gp.checkpoint_bytes(m) == m.num_params() * (PARAM_BYTES + OPTIMIZER_BYTES)
    assert gp.checkpoint_write_s(1e12, 2e9) == 500.0
    # a stack that states its optimizer bytes (hai-llm: BF16 Adam moments, 8) writes those
    hai = get_profile("hai-llm")
    assert hai.optimizer_state_bytes == 8.0
    assert gp.checkpoint_bytes(m, hai) == m.num_params() * (PARAM_BYTES + 8.0)
    assert gp.checkpoint_bytes(m, None, None) == gp.checkpoint_bytes(m, "megatron-core")
    # the policy constants move it: fp32 weights (param_bytes 4) add 2 bytes per parameter
    from dataclasses import replace
    fp32 = replace(DEFAULT_SYSTEM, param_bytes=4.0)
    assert gp.checkpoint_bytes(m, None, fp32) == m.num_params() * (4.0 + OPTIMIZER_BYTES)


def test_young_and_daly_closed_forms():
    d, m = 30.0, 4 * 3600.0
    assert gp.young_interval(d, m) == pytest.approx(math.sqrt(2 * d * m), rel=1e-15)
    x = d / (2 * m)
    daly = math.sqrt(2 * d * m) * (1 + math.sqrt(x) / 3 + x / 9) - d
    assert gp.daly_interval(d, m) == pytest.approx(daly, rel=1e-15)
    assert gp.daly_interval(3 * m, m) == m            # delta >= 2M: checkpoint every M


def test_daly_interval_is_near_the_exact_optimum():
    d, m, r = 60.0, 3 * 3600.0, 600.0
    taus = np.linspace(100.0, 5000.0, 49001)
    best = max(taus, key=lambda t: gp.goodput_fraction(t, d, m, r))
    daly = gp.daly_interval(d, m)
    assert abs(daly - best) / best < 0.02
    assert gp.goodput_fraction(daly, d, m, r) == pytest.approx(
        gp.goodput_fraction(best, d, m, r), rel=1e-5)


def test_expected_lost_work_closed_form():
    s, m = 900.0, 3600.0
    # mean of an exponential truncated to [0, s), by numerical integration
    x = np.linspace(0.0, s, 2_000_001)
    pdf = np.exp(-x / m)
    numeric = np.trapezoid(x * pdf, x) / np.trapezoid(pdf, x)
    assert gp.expected_lost_work_s(s, m) == pytest.approx(numeric, rel=1e-9)
    assert gp.expected_lost_work_s(1.0, 1e9) == pytest.approx(0.5, rel=1e-6)   # s << M: s/2


def test_segment_time_closed_form_limits():
    # no failures in practice: the segment costs its work and its write
    assert gp.expected_segment_s(100.0, 5.0, 1e12, 600.0) == pytest.approx(105.0, rel=1e-6)
    # first order: s + (s/M)·(R + s/2)
    s, m, r = 50.0, 1e6, 100.0
    first = s + s / m * (r + s / 2)
    assert gp.expected_segment_s(45.0, 5.0, m, r) == pytest.approx(first, rel=1e-7)


@pytest.mark.parametrize("work,tau,delta,mtbf,restart", [
    (200_000.0, 900.0, 30.0, 3 * 3600.0, 600.0),     # many failures per run
    (50_000.0, 4000.0, 120.0, 5000.0, 0.0),          # segments close to the MTBF, no restart
    (10_000.0, 3000.0, 10.0, 20_000.0, 300.0),       # a short last segment
])
def test_monte_carlo_mean_within_its_confidence_interval(work, tau, delta, mtbf, restart):
    walls = gp.sample_run_s(work, tau, delta, mtbf, restart, runs=20_000, seed=7)
    exact = gp.expected_run_s(work, tau, delta, mtbf, restart)
    s = gp.summarize_samples(walls, work)
    half = (s["ci95_wall_s"][1] - s["ci95_wall_s"][0]) / 2
    # 99.9 % interval: the seeded draw is fixed, this is not a flaky 5 % test
    assert abs(s["mean_wall_s"] - exact) < half * 3.29 / 1.96
    assert (walls >= work).all()
    assert np.array_equal(walls, gp.sample_run_s(work, tau, delta, mtbf, restart, 20_000, 7))


def test_report_wall_time_and_gpu_hours():
    rep = gp.goodput_report(2.0, 1_000_000, 1000, 64, 8, 1e12, ckpt_bw=1e10)
    assert rep.steps == 1000 and rep.compute_s == 2000.0
    assert rep.checkpoint_write_s == 100.0
    assert rep.expected_wall_s == pytest.approx(
        gp.expected_run_s(2000.0, rep.checkpoint_interval_s, 100.0, rep.job_mtbf_s, 600.0))
    assert rep.expected_gpu_hours == pytest.approx(rep.expected_wall_s * 64 / 3600)
    assert 0 < rep.goodput_fraction < 1


@pytest.mark.parametrize("fn,args,field", [
    (gp.job_mtbf_s, (8, 1, 0.0), "mtbf_gpu_h"),
    (gp.job_mtbf_s, (8, 1, 100.0, -1.0), "mtbf_node_h"),
    (gp.checkpoint_write_s, (1e9, 0.0), "ckpt_bw"),
    (gp.young_interval, (0.0, 10.0), "checkpoint_write_s"),
])
def test_library_refuses_non_positive(fn, args, field):
    with pytest.raises(SpecError, match=field):
        fn(*args)


CLI = ["goodput", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--plan", "tp=2,pp=2,gbs=8",
       "--tokens", "1e9"]


def test_cli_json_keys(capsys):
    assert main([*CLI, "--monte-carlo", "200", "--seed", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("goodput_fraction", "checkpoint_interval_s", "checkpoint_write_s", "job_mtbf_s",
                "expected_wall_s", "expected_gpu_hours", "step_time_s", "monte_carlo"):
        assert key in out
    assert out["step_time_source"] == "simulated"
    assert out["job_mtbf_s"] == pytest.approx(gp.job_mtbf_s(8, 1))
    assert out["monte_carlo"]["runs"] == 200 and sum(out["monte_carlo"]["histogram"]["counts"]) == 200


def test_cli_table(capsys):
    assert main([*CLI, "--analytic", "--mtbf-gpu-h", "1000", "--ckpt-bw", "5"]) == 0
    text = capsys.readouterr().out
    assert "goodput" in text and "analytic estimate" in text and "interval (Daly)" in text


@pytest.mark.parametrize("flag,value", [("--mtbf-gpu-h", "0"), ("--mtbf-node-h", "-5"),
                                        ("--ckpt-bw", "0"), ("--ckpt-bw", "nan"),
                                        ("--restart-s", "-1"), ("--tokens", "1.5"),
                                        ("--tokens", "0")])
def test_cli_bad_input(capsys, flag, value):
    argv = [a for a in CLI]
    if flag == "--tokens":
        argv[argv.index("--tokens") + 1] = value
    else:
        argv += [flag, value]
    assert main([*argv, "--analytic"]) == 2
    err = capsys.readouterr().err
    assert flag in err and value in err and "must be" in err and "Traceback" not in err


def test_cli_without_a_plan_uses_the_search_recommendation(capsys):
    argv = ["goodput", "--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--tokens", "1e9",
            "--global-batch", "16", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_time_source"] == "simulated, the plan a search recommends"
    assert out["inputs"]["plan"]["gbs"] == 16 and out["step_time_s"] > 0
    assert main(argv[:-3] + ["--json"]) == 2          # no plan and no global batch
    assert "--global-batch" in capsys.readouterr().err


def test_hopeless_runs_are_refused_not_overflowed(capsys):
    with pytest.raises(SpecError, match="never finish"):
        gp.expected_segment_s(1e6, 0.0, 1e3, 0.0)
    with pytest.raises(SpecError, match="failures"):
        gp.sample_run_s(1e9, 10.0, 1.0, 1.0, 0.0, runs=10, seed=0)
    assert main([*CLI, "--analytic", "--ckpt-bw", "1e-9"]) == 2
    assert "segment_s" in capsys.readouterr().err


def test_cli_plot(tmp_path, capsys):
    out = tmp_path / "mc.png"
    assert main([*CLI, "--analytic", "--monte-carlo", "300", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*CLI, "--analytic", "--plot", str(tmp_path / "x.png")]) == 2
    assert "--monte-carlo" in capsys.readouterr().err
    assert main([*CLI, "--analytic", "--monte-carlo", "10", "--plot", str(tmp_path / "x.pdf")]) == 2


def test_cluster_file_storage_bandwidth(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("preset: dgx-a100\nstorage_write_GBps: 4\n")
    argv = ["goodput", "--model", "gpt-1.7b", "--cluster", str(tmp_path / "c.yaml"), "--plan",
            "tp=2,gbs=8", "--tokens", "1e9", "--analytic", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint_bw"] == 4e9
    assert main([*argv, "--ckpt-bw", "8"]) == 0                     # the flag wins
    assert json.loads(capsys.readouterr().out)["checkpoint_bw"] == 8e9
    (tmp_path / "d.yaml").write_text("preset: dgx-a100\nstorage_write_GBps: 0\n")
    assert main([*argv[:4], str(tmp_path / "d.yaml"), *argv[5:]]) == 2
    assert "storage_write_GBps" in capsys.readouterr().err


@pytest.mark.parametrize("preset", ["llama3-8b", "qwen3-30b-a3b"])
@pytest.mark.parametrize("name", sorted(PROFILES))
def test_checkpoint_holds_the_model_state_memory_counts(name, preset):
    """A checkpoint is one copy of the persistent state memory counts (docs/calibration.md
    §5.43): summed over the ranks of a ZeRO-3 job (ZeRO-1 where the stack has no ZeRO-3: its
    replicated weights once, the optimizer shards on every rank), params + optimizer. The two
    documented differences: gradients are not saved, and under FSDP2 neither is the root
    module's gathered 16-bit copy (embedding, final norm, head: held unsharded from the
    forward to the backward on every rank, transient)."""
    fw = get_profile(name)
    m, cl = model_preset(preset), cluster_preset("dgx-h100", 1)
    zero = 3 if 3 in fw.zero_stages else max(fw.zero_stages)
    plan = parse_plan(f"mbs=1,gbs=64,zero={zero},flash_attn={str(fw.default_flash_attn).lower()}")
    job = make_job(m, cl, plan, framework=name)
    d = job.plan.dp
    assert d == 8 and zero >= 1
    parts = memory_components(job, 0)
    mem = sum(parts.values(), MemoryBreakdown())
    held = mem.params * (d if zero == 3 else 1) + mem.optimizer * d
    root = 0.0
    if fw.fsdp2:
        root_params = param_counts.embedding_params_per_gpu(m, 1) \
            + param_counts.head_params_per_gpu(m, 1, 1, True)
        root = d * job.system.param_bytes * root_params
    ckpt = gp.checkpoint_bytes(m, name)
    assert ckpt == pytest.approx(held - root, rel=1e-12)
    assert ckpt == m.num_params() * gp.checkpoint_bytes_per_param(fw)
    # the stacks' stated facts: Megatron-Core 2 + 12, torchtitan's fp32 master is the parameter
    # 4 + 8, AutoModel's bf16-built model 2 + 2 + 2, HAI-LLM's BF16 moments 2 + 4 + 2 + 2
    # Composer's FSDP1 and MaxText's fp32 weights 4 + 8 (docs/calibration.md §5.46)
    expected = {"torchtitan": 12.0, "automodel": 6.0, "hai-llm": 10.0, "pytorch-eager": 12.0,
                "jax-xla": 12.0}.get(name, 14.0)
    assert gp.checkpoint_bytes_per_param(name) == expected
