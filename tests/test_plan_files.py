"""Plans as files (issue 17, item 3): ``search --save-plan`` / ``--save-top`` write plan files
that every ``--plan`` reads back to the same plan and the same simulated step time; a plan
read against another job warns, naming each difference."""
from __future__ import annotations

import json

import pytest
import yaml

from simulator.cli.main import main
from strategies.plan import Plan, parse_plan, plan_from_mapping
from strategies.plan_file import (FOUND_FOR, mismatches, plan_file_text, plan_to_mapping,
                                  read_plan_file)

SMALL = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1"]
PLANS = [Plan(tp=8, dp=1, gbs=8),
         Plan(tp=2, pp=4, dp=1, mbs=2, gbs=64, schedule="interleaved", vpp=3,
              recompute="selective", sp=True, zero=1, microbatch_group_size=8),
         Plan(tp=1, pp=2, dp=4, gbs=32, schedule="gpipe", recompute="full", flash_attn=False,
              overlap_grad_reduce=False, tp_comm_overlap=True),
         Plan(dp=8, zero=3, gbs=16, overlap_param_gather=False)]


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.short())
@pytest.mark.parametrize("ext", [".yaml", ".json"])
def test_a_plan_survives_its_file(tmp_path, plan, ext):
    assert plan_from_mapping(plan_to_mapping(plan)) == plan
    path = tmp_path / f"p{ext}"
    record = {"model": "m", "cluster": "c:1", "gpus": 8, "global_batch": plan.gbs,
              "seq_len": 2048, "dtype": "bf16", "step_time_s": 1.25}
    path.write_text(plan_file_text(plan, str(path), record))
    back, rec = read_plan_file(str(path))
    assert back == plan and rec == record
    assert parse_plan(str(path)) == plan
    raw = json.loads(path.read_text()) if ext == ".json" else yaml.safe_load(path.read_text())
    assert raw[FOUND_FOR] == record and list(raw)[:3] == ["tp", "pp", "dp"]


def test_mismatches_name_each_difference():
    rec = {"model": "a", "cluster": "c:1", "gpus": 8, "global_batch": 16, "seq_len": 2048,
           "dtype": "bf16", "step_time_s": 9.0}
    same = {k: v for k, v in rec.items() if k != "step_time_s"}
    assert mismatches(rec, same) == [] and mismatches(None, same) == []
    out = mismatches(rec, {**same, "model": "b", "seq_len": 4096})
    assert len(out) == 2 and out[0].startswith("model: ") and "a" in out[0] and "b" in out[0]
    assert "seq_len" in out[1] and "4096" in out[1]


def _cli(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_search_save_simulate_round_trip(tmp_path, capsys):
    """search -> --save-plan -> simulate/estimate/compare --plan FILE: the same plan and the
    same simulated step time (to the last bit: the same simulation)."""
    saved, top = tmp_path / "best.yaml", tmp_path / "top"
    top.mkdir()
    rc, out, err = _cli(capsys, "search", *SMALL, "--global-batch", "16", "--workers", "1",
                        "--json", "--save-plan", str(saved), "--save-top", str(top))
    assert rc == 0, err
    rep = json.loads(out)
    rec = rep["recommended"]
    plan, record = read_plan_file(str(saved))
    assert {k: getattr(plan, k) for k in rec["plan"]} == rec["plan"]
    assert record == {"model": "gpt-1.7b", "cluster": "dgx-a100:1", "gpus": 8,
                      "global_batch": 16, "seq_len": rep["inputs"]["seq_len"],
                      "dtype": "bf16", "step_time_s": rec["step_time_s"]}
    assert sorted(p.name for p in top.iterdir()) == [f"rank-{r['rank']}.yaml"
                                                     for r in rep["plans"]]
    for r in rep["plans"]:
        assert read_plan_file(str(top / f"rank-{r['rank']}.yaml"))[0] == parse_plan(r["key"])

    rc, out, err = _cli(capsys, "simulate", *SMALL, "--plan", str(saved), "--json")
    assert rc == 0 and err == "", err
    sim = json.loads(out)
    assert sim["step_time_s"] == rec["step_time_s"]
    assert {k: sim["inputs"]["plan"][k] for k in rec["plan"]} == rec["plan"]

    rc, out, err = _cli(capsys, "estimate", *SMALL, "--plan", str(saved), "--json")
    assert rc == 0 and err == ""
    assert json.loads(out)["step_time_s"] == pytest.approx(rec["analytic_step_time_s"], rel=1e-12)

    # the same plan saved as JSON reads back the same
    js = tmp_path / "best.json"
    rc, out, err = _cli(capsys, "search", *SMALL, "--global-batch", "16", "--workers", "1",
                        "--json", "--save-plan", str(js), "--reference", "none")
    assert rc == 0 and read_plan_file(str(js)) == (plan, record)


def test_reading_a_plan_for_another_job_warns(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    rec = {"model": "gpt-1.7b", "cluster": "dgx-a100:1", "gpus": 8, "global_batch": 8,
           "seq_len": 2048, "dtype": "bf16"}
    path.write_text(plan_file_text(Plan(tp=8, gbs=8), str(path), rec))
    rc, out, err = _cli(capsys, "estimate", *SMALL, "--plan", str(path), "--json")
    assert rc == 0 and err == ""                              # the same job: silent
    rc, out, err = _cli(capsys, "estimate", *SMALL, "--plan", str(path), "--json",
                        "--seq-len", "1024")
    assert rc == 0 and json.loads(out)                        # stdout stays machine output
    assert err.count("\n") == 1 and "warning" in err and "seq_len" in err
    assert "2048" in err and "1024" in err
    rc, out, err = _cli(capsys, "estimate", "--model", "gpt-1.7b", "--cluster", "dgx-h100:1",
                        "--plan", str(path))
    assert rc == 0 and "cluster: the plan was found for dgx-a100:1" in err


def test_a_plan_saved_for_a_named_stack_keeps_it(tmp_path, capsys):
    """A search with ``--framework`` saves the stack's name; the file read back (by
    ``simulate`` and by ``search --plan``) gives the same job and step time, and
    ``--export`` launches the same plan."""
    saved = tmp_path / "p.yaml"
    fw = ["--framework", "megatron-lm-2021"]
    rc, out, err = _cli(capsys, "search", *SMALL, "--global-batch", "16", "--workers", "1",
                        "--json", "--reference", "none", "--save-plan", str(saved), *fw,
                        "--export", "megatron")
    assert rc == 0, err
    rec = json.loads(out)["recommended"]
    raw = yaml.safe_load(saved.read_text())
    assert raw["framework"] == "megatron-lm-2021"
    plan, _ = read_plan_file(str(saved))
    assert plan.flash_attn is False            # the stack's switch, not Plan's default
    rc, out, err = _cli(capsys, "simulate", *SMALL, "--plan", str(saved), "--json")
    assert rc == 0, err
    assert json.loads(out)["step_time_s"] == rec["step_time_s"]
    rc, out, err = _cli(capsys, "search", *SMALL, "--plan", str(saved), "--workers", "1",
                        "--json", "--reference", "none")
    assert rc == 0, err
    again = json.loads(out)
    assert again["inputs"]["framework"] == "megatron-lm-2021"
    assert again["plans"][0]["key"] == rec["key"]
    assert again["plans"][0]["step_time_s"] == rec["step_time_s"]


def test_whatif_reads_a_saved_plan(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    rec = {"model": "gpt-1.7b", "cluster": "dgx-a100:1", "gpus": 8, "global_batch": 16,
           "seq_len": 2048, "dtype": "bf16"}
    path.write_text(plan_file_text(Plan(tp=2, pp=1, mbs=1, gbs=16), str(path), rec))
    rc, out, err = _cli(capsys, "whatif", *SMALL, "--plan", str(path), "--vary",
                        "inter_node_gbps=100,200", "--workers", "1", "--json")
    assert rc == 0 and err == "", err
    rep = json.loads(out)
    assert rep["inputs"]["global_batch"] == 16
    assert rep["inputs"]["fixed"]["tp"] == 2 and rep["inputs"]["fixed"]["mbs"] == 1
    for row in rep["rows"]:
        assert row["plan"]["tp"] == 2 and row["plan"]["mbs"] == 1
    rc, out, err = _cli(capsys, "whatif", *SMALL, "--plan", str(path), "--vary",
                        "inter_node_gbps=100", "--workers", "1", "--json", "--seq-len", "1024")
    assert rc == 0 and "warning" in err and "seq_len" in err
