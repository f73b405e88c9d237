"""``paraplan validate`` (issue 5) on a small reference file, and the exact extension of long
pipelines that keeps it fast."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.simulate import simulate
from simulator.studies.validate import load_cases, mape, simulated_step_time, validate_cases
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

MODEL = {"name": "GPT-1.7B", "layers": 24, "hidden": 2304, "heads": 24, "vocab": 51200,
         "seq_len": 2048}
HW = {"gpu": "A100-SXM4-80GB", "gpus_per_node": 8, "n_gpus": 8,
      "interconnect": "DGX A100 nodes"}
SRC = {"ref": "test 2024"}


def _entry(ident: str, step: float, **plan) -> dict:
    return {"id": ident, "kind": "measured", "tier": 1, "source": SRC, "model": MODEL,
            "hardware": HW, "plan": {"cp": 1, "microbatch": 1, "recompute": "selective",
                                     "sequence_parallel": True, "zero_stage": 1, **plan},
            "precision": "bf16", "measured": {"step_time_s": step}}


ENTRIES = [
    _entry("tiny_1f1b", 1.0, tp=2, pp=4, global_batch=32, schedule="1F1B"),
    _entry("tiny_interleaved", 0.9, tp=2, pp=4, global_batch=32, schedule="interleaved 1F1B",
           virtual_stages=2),
    _entry("tiny_tp8", 0.5, tp=8, pp=1, global_batch=16),
    {"id": "tiny_broken", "kind": "measured", "tier": 1, "plan": {}},
    {"id": "tiny_analytic", "kind": "analytic", "tier": 1, "hardware": HW},
    _entry("tiny_tier2", 1.0, tp=2, pp=4, global_batch=32) | {"tier": 2},
]


@pytest.fixture()
def ref(tmp_path):
    path = tmp_path / "ref.json"
    path.write_text(json.dumps(ENTRIES))
    return str(path)


def run_json(capsys, *args: str) -> dict:
    assert main(["validate", "--json", "--jobs", "1", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_the_contract_keys(capsys, ref, tmp_path):
    plot = tmp_path / "parity.png"
    out = run_json(capsys, "--reference", ref, "--plot", str(plot), "--tiers", "1")
    assert out["evaluated"] == 3 and out["skipped"] == 2   # tier 2 left out
    cases = {c["id"]: c for c in out["cases"]}
    assert set(cases) == {"tiny_1f1b", "tiny_interleaved", "tiny_tp8", "tiny_broken",
                          "tiny_analytic"}
    assert "malformed entry" in cases["tiny_broken"]["skipped"]
    assert "analytic reference" in cases["tiny_analytic"]["skipped"]
    for name in ("analytic", "simulated"):
        errs = [c[f"{name}_error_pct"] for c in out["cases"] if c["plan"]]
        assert len(errs) == 3 and out[name]["cases"] == 3
        assert out[name]["mape_pct"] == pytest.approx(sum(map(abs, errs)) / 3)
    c = cases["tiny_1f1b"]
    assert c["simulated_error_pct"] == pytest.approx(
        100 * (c["simulated_step_time_s"] / c["measured_step_s"] - 1))
    assert c["sim_method"].startswith("extended from m=4 and m=8")   # 32 micro-batches
    assert cases["tiny_tp8"]["sim_method"] == "full"
    assert plot.stat().st_size > 10_000


def test_a_reference_file_runs_every_tier_by_default(capsys, ref):
    """A user's file need not know our tiers: with --reference the default is all of them
    (an entry without a tier is tier 3); the shipped file's default stays tier 1."""
    out = run_json(capsys, "--reference", ref, "--no-sim")
    assert out["tiers"] == "all" and out["evaluated"] == 4
    out = run_json(capsys, "--no-sim")
    assert out["tiers"] == [1]


def test_no_sim_and_tiers(capsys, ref):
    out = run_json(capsys, "--reference", ref, "--no-sim", "--tiers", "1,2")
    assert out["evaluated"] == 4
    assert out["simulated"]["mape_pct"] is None
    assert all(c["simulated_step_time_s"] is None for c in out["cases"])
    assert out["analytic"]["mape_pct"] > 0


def test_human_output(capsys, ref):
    assert main(["validate", "--reference", ref, "--verbose", "--jobs", "1"]) == 0
    text = capsys.readouterr().out
    assert "analytic   MAPE" in text and "simulated  MAPE" in text
    assert "skipped tiny_broken" in text and "tiny_interleaved" in text


@pytest.mark.parametrize("args,needle", [
    (["--reference", "/nonexistent/ref.json"], "ref.json"),
    (["--tiers", "one"], "--tiers"),
    (["--tiers", "7", "--no-sim"], "no case"),
    (["--plot", "out.pdf"], "--plot"),
])
def test_bad_inputs_exit_2_with_one_line(capsys, args, needle):
    rc = main(["validate", *args])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_a_reference_that_is_not_a_list(capsys, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"id": 1}')
    assert main(["validate", "--reference", str(p)]) == 2
    assert "list" in capsys.readouterr().err


def test_shipped_reference_analytic(capsys):
    """The published runs that ship: every tier-1 run with a step time resolves."""
    out = run_json(capsys, "--no-sim")
    assert out["analytic"]["cases"] >= 20
    assert 0 < out["analytic"]["mape_pct"] < 50


@pytest.mark.parametrize("plan", [
    Plan(tp=2, pp=4, gbs=24, schedule="1f1b"),
    Plan(tp=2, pp=4, gbs=24, schedule="interleaved", vpp=3),
    Plan(tp=1, pp=4, dp=2, gbs=48, schedule="1f1b", zero=1),
])
def test_extension_from_two_short_runs_is_exact(plan):
    """Simulated step time is affine in the micro-batch count past one period."""
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1), plan)
    step, how = simulated_step_time(job)
    assert how.startswith("extended")
    assert step == pytest.approx(simulate(job).step_time_s, rel=1e-9)
    assert simulated_step_time(job, exact=True) == (simulate(job).step_time_s, "full")


def test_processes_give_the_same_rows(ref):
    cases = load_cases(ref, tiers=(1,))
    one = validate_cases(cases, jobs=1)
    two = validate_cases(cases, jobs=2)
    strip = [{k: v for k, v in r.items() if k != "sim_wall_s"} for r in one]
    assert strip == [{k: v for k, v in r.items() if k != "sim_wall_s"} for r in two]


def test_gpipe_is_simulated_in_full():
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1),
                   Plan(tp=2, pp=4, gbs=24, schedule="gpipe"))
    assert simulated_step_time(job) == (simulate(job).step_time_s, "full")


def test_mape():
    assert mape([10.0, -20.0, None]) == pytest.approx(15.0)
    assert mape([]) is None


def test_extension_keeps_the_job_but_the_batch():
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1),
                   Plan(tp=2, pp=4, gbs=32))
    from simulator.extend import with_microbatches
    short = with_microbatches(job, 8)
    assert short.num_microbatches == 8
    assert replace(short.plan, gbs=32) == job.plan


def test_validate_per_framework_summary():
    """``summarize``'s ``frameworks``: each stack's rows, the counts adding up to the whole,
    and each stack's MAPE the mean absolute error of its own rows."""
    from simulator.studies.validate import by_framework, summarize
    rows = [{"framework": "a", "analytic_error_pct": -10.0, "simulated_error_pct": 2.0,
             "memory_error_pct": None, "plan": "p"},
            {"framework": "a", "analytic_error_pct": 4.0, "simulated_error_pct": None,
             "memory_error_pct": None, "plan": "p"},
            {"framework": "b", "analytic_error_pct": 1.0, "simulated_error_pct": -3.0,
             "memory_error_pct": None, "plan": "p"},
            {"framework": None, "analytic_error_pct": None, "simulated_error_pct": None,
             "memory_error_pct": None, "plan": None}]
    s = by_framework(rows)
    assert list(s) == ["a", "b"]
    assert s["a"]["analytic"] == {"mape_pct": 7.0, "cases": 2, "max_abs_error_pct": 10.0,
                                  "mean_error_pct": -3.0}
    assert s["a"]["simulated"]["cases"] == 1 and s["b"]["simulated"]["mape_pct"] == 3.0
    out = summarize(rows)
    assert sum(v["analytic"]["cases"] for v in out["frameworks"].values()) \
        == out["analytic"]["cases"] == 3
    assert by_framework(rows, simulate=False)["a"]["simulated"]["cases"] == 0


@pytest.mark.slow
def test_validate_prints_per_framework_table(capsys):
    from simulator.cli.main import main
    assert main(["validate", "--tiers", "all", "--no-sim"]) == 0
    text = capsys.readouterr().out
    assert "per software stack (--framework)" in text
    for name in ("megatron-lm-2021", "pytorch-eager", "nemo"):
        assert any(line.startswith(name + " ") for line in text.splitlines())
