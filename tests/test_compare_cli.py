"""``paraplan compare``: one plan under several schedules (issue 5), on a small job."""
from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.studies.compare_schedules import parse_schedules, sweep_agreement
from strategies.errors import SpecError

BASE = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1"]
PLAN = "tp=2,pp=4,gbs=8"          # 8 micro-batches per pipeline, 4 stages


def run_json(capsys, *args: str) -> dict:
    assert main(["compare", "--json", *BASE, *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    """The four schedules of the issue, with timelines and a sweep (run once)."""
    import contextlib
    import io
    d = tmp_path_factory.mktemp("compare")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["compare", "--json", *BASE, "--plan", PLAN,
                   "--schedules", "gpipe,1f1b,interleaved:2,interleaved:3",
                   "--timeline", str(d / "t.png"), "--sweep", str(d / "s.png"),
                   "--sweep-microbatches", "4,8,16"])
    assert rc == 0
    return json.loads(buf.getvalue()), d


def _rows(out: dict) -> dict:
    return {r["schedule"]: r for r in out["rows"]}


def test_json_rows_have_the_contract_keys(four):
    out, _ = four
    assert [r["schedule"] for r in out["rows"]] == ["gpipe", "1f1b", "interleaved:2",
                                                    "interleaved:3"]
    for r in out["rows"]:
        assert r["valid"] is True
        for key in ("step_time_s", "bubble_fraction", "bubble_over_ideal", "bubble_closed_form"):
            assert isinstance(r[key], float) and r[key] >= 0
        assert r["memory"]["peak_gib"] > 0
        assert r["p2p"]["total_bytes"] > 0 and r["p2p"]["per_gpu_bytes"] > 0


def test_gpipe_needs_more_memory_than_1f1b(four):
    rows = _rows(four[0])
    assert rows["gpipe"]["memory"]["peak_gib"] > rows["1f1b"]["memory"]["peak_gib"]
    assert (rows["gpipe"]["memory"]["simulated_activations_peak_gib"]
            > rows["1f1b"]["memory"]["simulated_activations_peak_gib"])
    # ... for the same step time (the same bubble: all forwards first changes no idle time)
    assert rows["gpipe"]["step_time_s"] == pytest.approx(rows["1f1b"]["step_time_s"], rel=0.01)


def test_bubble_shrinks_with_chunks_as_the_closed_form_says(four):
    rows = _rows(four[0])
    b1 = rows["1f1b"]["bubble_over_ideal"]
    for v in (2, 3):
        r = rows[f"interleaved:{v}"]
        assert r["bubble_closed_form"] == pytest.approx(3 / (v * 8))
        assert r["bubble_over_ideal"] / b1 == pytest.approx(1 / v, rel=0.03)
        assert r["step_time_s"] < rows["1f1b"]["step_time_s"]
    assert rows["interleaved:3"]["bubble_fraction"] < rows["interleaved:2"]["bubble_fraction"]


def test_p2p_traffic_grows_with_chunks(four):
    """Each micro-batch crosses pp*vpp - 1 stage boundaries each way."""
    rows = _rows(four[0])
    t1 = rows["1f1b"]["p2p"]["total_bytes"]
    assert rows["gpipe"]["p2p"]["total_bytes"] == pytest.approx(t1)
    for v in (2, 3):
        assert rows[f"interleaved:{v}"]["p2p"]["total_bytes"] == pytest.approx(t1 * (4 * v - 1) / 3)


def test_sweep_follows_the_closed_form(four):
    out, d = four
    sweep = out["sweep"]
    assert sweep["microbatches"] == [4, 8, 16]
    pts = [p for p in sweep["points"] if "error" not in p]
    assert len(pts) == 12
    for sched in ("1f1b", "interleaved:2"):   # bubble halves when m doubles
        ys = [p["simulated"] for p in pts if p["schedule"] == sched]
        assert ys[0] > ys[1] > ys[2]
        assert ys[1] / ys[2] == pytest.approx(2, rel=0.1)
    agree = sweep["agreement"]["simulated"]
    assert agree["chunk_ratio_max_rel_diff"] < 0.03
    assert (d / "s.png").stat().st_size > 10_000
    assert (d / "t.png").stat().st_size > 10_000


def test_invalid_schedule_is_reported_on_its_row(capsys):
    # gbs=6: 6 micro-batches, not a multiple of pp=4, so interleaving is refused
    out = run_json(capsys, "--plan", "tp=2,pp=4,gbs=6", "--schedules", "1f1b,interleaved:2")
    bad = _rows(out)["interleaved:2"]
    assert bad["valid"] is False
    assert "num_microbatches=6" in bad["error"] and "pp=4" in bad["error"]
    assert _rows(out)["1f1b"]["valid"] is True


def test_no_valid_schedule_exits_2(capsys):
    rc = main(["compare", *BASE, "--plan", "tp=2,pp=4,gbs=6", "--schedules", "interleaved:2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "no schedule fits" in err and "num_microbatches=6" in err


@pytest.mark.parametrize("schedules,needle", [
    ("zb-h9", "--schedules='zb-h9'"), ("interleaved:1", "interleaved:1"),
    ("1f1b,1f1b", "given twice"), ("", "at least one"),
])
def test_bad_schedule_lists_are_clean_errors(capsys, schedules, needle):
    rc = main(["compare", *BASE, "--plan", PLAN, "--schedules", schedules])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_pp1_is_refused(capsys):
    rc = main(["compare", *BASE, "--plan", "tp=8,gbs=8"])
    assert rc == 2 and "pp=1" in capsys.readouterr().err


def test_plan_schedule_is_overridden(capsys):
    """The plan's own schedule (even one invalid here) does not matter."""
    out = run_json(capsys, "--plan", "tp=2,pp=4,gbs=8,schedule=interleaved,vpp=5",
                   "--schedules", "1f1b")
    assert out["rows"][0]["plan"].endswith("1f1b")


def test_human_table(capsys):
    assert main(["compare", *BASE, "--plan", "tp=2,pp=4,gbs=6",
                 "--schedules", "gpipe,1f1b,interleaved:2"]) == 0
    text = capsys.readouterr().out
    assert "gpipe" in text and "peak GiB" in text
    assert "interleaved:2: invalid here: num_microbatches=6" in text


def test_parse_schedules():
    assert [(c.schedule, c.vpp) for c in parse_schedules("GPipe, 1f1b ,interleaved:4")] == [
        ("gpipe", 1), ("1f1b", 1), ("interleaved", 4)]
    assert parse_schedules("interleaved")[0].label == "interleaved:2"
    with pytest.raises(SpecError):
        parse_schedules("interleaved:x")


def test_sweep_agreement_on_exact_points():
    pts = [{"schedule": "1f1b", "vpp": 1, "num_microbatches": 8, "closed_form": 0.375,
            "simulated": 0.375},
           {"schedule": "interleaved:2", "vpp": 2, "num_microbatches": 8,
            "closed_form": 0.1875, "simulated": 0.1875},
           {"schedule": "interleaved:5", "vpp": 5, "num_microbatches": 8, "error": "x"}]
    a = sweep_agreement(pts)["simulated"]
    assert a["points"] == 2 and a["max_rel_diff"] == 0 and a["chunk_ratio_max_rel_diff"] == 0
