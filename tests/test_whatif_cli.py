"""``paraplan whatif`` end to end on small inputs: the JSON rows, more bandwidth never a
longer step (the CLI; the property over the search is tests/test_whatif_property.py),
node-count variants, the cost closed form, the error paths, the plot and determinism."""
from __future__ import annotations

import doctest
import json
import math
import os

import pytest

from simulator.studies import whatif_variants as whatif
from simulator.cli.main import main
from simulator.studies.whatif_variants import (Variant, apply_cluster, dominated_pairs, parse_vary,
                              search_order, variants)
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

SMALL = ["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100:2", "--global-batch", "16",
         "--max-mbs", "1", "--workers", "1"]
VOLATILE = ("wall_s", "execution")


def run(capsys, *extra):
    rc = main([*SMALL, *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_json(capsys, *extra) -> dict:
    rc, out, err = run(capsys, *extra, "--json")
    assert rc == 0, err
    return json.loads(out)


def stable(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in VOLATILE}


@pytest.fixture(scope="module")
def bandwidth_grid():
    """One run shared by the tests that read it: 3 x 2 bandwidth variants with a price."""
    import io
    from contextlib import redirect_stdout
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main([*SMALL, "--vary", "inter_node_gbps=50,100,400",
                   "--vary", "intra_node_GBps=100,450", "--gpu-hour-cost", "2.5", "--json"])
    assert rc == 0
    return json.loads(buf.getvalue())


@pytest.mark.slow
def test_json_rows_and_keys(bandwidth_grid):
    rep = bandwidth_grid
    assert rep["inputs"]["vary"] == {"inter_node_gbps": [50, 100, 400],
                                     "intra_node_GBps": [100, 450]}
    assert rep["inputs"]["model"]["name"] == "llama3-8b" and rep["inputs"]["gpu_hour_cost"] == 2.5
    assert len(rep["rows"]) == 6
    # the cartesian product, first axis slowest
    assert [(r["inter_node_gbps"], r["intra_node_GBps"]) for r in rep["rows"]] == [
        (50, 100), (50, 450), (100, 100), (100, 450), (400, 100), (400, 450)]
    for r in rep["rows"]:
        assert r["feasible"] is True
        for key in ("best", "plan", "step_time_s", "mfu", "tokens_per_s",
                    "cost_per_million_tokens", "memory", "best_from", "job",
                    "bandwidth_monotone", "variant"):
            assert key in r, key
        assert r["best"].startswith("tp=") and f"gbs={r['job']['global_batch']}" in r["best"]
        assert 0 < r["mfu"] < 1 and r["memory"]["peak_gib"] > 0
        assert r["tokens_per_s"] == pytest.approx(16 * 8192 / r["step_time_s"], rel=1e-12)
        assert r["job"]["inter_node_gbps"] == pytest.approx(r["inter_node_gbps"])
        assert r["job"]["intra_node_GBps"] == pytest.approx(r["intra_node_GBps"])
    assert rep["checks"]["bandwidth_monotone"]["ok"] is True
    assert rep["checks"]["bandwidth_monotone"]["pairs"] == 12
    assert rep["warnings"] == []
    assert [r["bandwidth_monotone"] for r in rep["rows"]] == [None, True, True, True, True, True]


def test_more_bandwidth_never_a_longer_step(bandwidth_grid):
    rows = {(r["inter_node_gbps"], r["intra_node_GBps"]): r["step_time_s"]
            for r in bandwidth_grid["rows"]}
    for (a, b), t in rows.items():
        for (a2, b2), t2 in rows.items():
            if a2 >= a and b2 >= b:
                assert t2 <= t * (1 + 1e-9), ((a, b), (a2, b2))
    # and the network matters here: the slowest network is strictly slower
    assert rows[(50, 100)] > rows[(400, 450)]


def test_cost_per_million_tokens_closed_form(bandwidth_grid):
    for r in bandwidth_grid["rows"]:
        j = r["job"]
        expect = 2.5 * j["gpus"] * r["step_time_s"] / 3600 / j["tokens_per_step"] * 1e6
        assert j["tokens_per_step"] == 16 * 8192 and j["gpus"] == 16
        assert math.isclose(r["cost_per_million_tokens"], expect, rel_tol=1e-14)


def test_nodes_variants_and_no_price(capsys):
    rep = run_json(capsys, "--vary", "nodes=1,2")
    a, b = rep["rows"]
    assert (a["nodes"], b["nodes"]) == (1, 2)
    assert (a["job"]["gpus"], b["job"]["gpus"]) == (8, 16)
    assert a["job"]["cluster"] == "dgx-h100:1" and b["job"]["cluster"] == "dgx-h100:2"
    assert a["cost_per_million_tokens"] is None and b["cost_per_million_tokens"] is None
    assert a["plan"]["dp"] * a["plan"]["tp"] * a["plan"]["pp"] * a["plan"]["cp"] == 8
    assert b["step_time_s"] < a["step_time_s"]          # twice the GPUs, same batch
    assert rep["checks"]["bandwidth_monotone"] == {"pairs": 0, "ok": True, "violations": []}


def test_table_plot_and_gpu_swap(capsys, tmp_path):
    png = tmp_path / "w.png"
    rc, out, err = run(capsys, "--vary", "gpu=H100,H200", "--gpu-hour-cost", "3",
                       "--plot", str(png))
    assert rc == 0, err
    assert "best plan" in out and "$/1M tokens" in out and "H200-SXM-141GB" in out
    assert "3 USD per GPU-hour" in out
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]


@pytest.mark.parametrize("vary, field", [
    ("bandwidth=1,2", "--vary='bandwidth': unknown key"),
    ("inter_node_gbps=fast", "--vary inter_node_gbps='fast'"),
    ("inter_node_gbps=-5", "--vary inter_node_gbps='-5'"),
    ("inter_node_gbps=nan", "--vary inter_node_gbps='nan'"),
    ("nodes=1.5", "--vary nodes='1.5': must be an integer"),
    ("nodes=0", "--vary nodes='0'"),
    ("oversubscription=0.5", "--vary oversubscription='0.5'"),
    ("gpu=X100", "--vary gpu='X100': unknown GPU"),
    ("cluster=dgx-z", "--vary cluster='dgx-z': unknown preset"),
    ("inter_node_gbps=100,100", "a value is given twice"),
    ("seq_len=", "--vary seq_len=''"),
    ("nodes", "--vary='nodes': must be KEY=V1,V2,..."),
])
def test_bad_vary_exits_2_naming_the_field(capsys, vary, field):
    rc, out, err = run(capsys, "--vary", vary)
    assert rc == 2 and out == ""
    assert err.startswith("paraplan: error: ") and field in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_duplicate_axis_and_bad_flags_exit_2(capsys):
    rc, _, err = run(capsys, "--vary", "nodes=1", "--vary", "nodes=2")
    assert rc == 2 and "--vary='nodes': key given twice" in err
    rc, _, err = run(capsys, "--vary", "nodes=1", "--gpu-hour-cost", "-1")
    assert rc == 2 and "--gpu-hour-cost" in err
    rc, _, err = run(capsys, "--vary", "nodes=1", "--plot", "w.pdf")
    assert rc == 2 and "--plot" in err and ".png" in err
    rc, _, err = run(capsys)
    assert rc == 2 and "--vary" in err


def test_infeasible_variant_is_a_row_and_all_infeasible_is_an_error(capsys):
    unbatched = [a for i, a in enumerate(SMALL) if i not in (5, 6)]   # no --global-batch:
    assert "--global-batch" not in unbatched               # it and --vary global_batch clash
    rc = main([*unbatched, "--vary", "global_batch=16,12", "--fix", "dp=16", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    ok, bad = json.loads(out)["rows"]
    assert ok["feasible"] and ok["plan"]["dp"] == 16
    assert bad["feasible"] is False and bad["step_time_s"] is None and "batch" in bad["error"]
    rc = main([*unbatched, "--vary", "global_batch=12", "--fix", "dp=16"])
    assert rc == 2 and "no variant has a feasible plan" in capsys.readouterr().err


def test_deterministic_whatever_the_worker_count(capsys):
    a = run_json(capsys, "--vary", "inter_node_gbps=100,400")
    b = run_json(capsys, "--vary", "inter_node_gbps=100,400")
    assert stable(a) == stable(b)
    two = [x if x != "1" or SMALL[i - 1] != "--workers" else "2" for i, x in enumerate(SMALL)]
    assert main([*two, "--vary", "inter_node_gbps=100,400", "--json"]) == 0
    assert stable(json.loads(capsys.readouterr().out)) == stable(a)


def test_whatif_module_doctests():
    assert doctest.testmod(whatif).failed == 0


def test_cluster_key_applied_first_and_pairs():
    m, c = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    vs = variants(m, c, 16, parse_vary(["inter_node_gbps=100,200", "cluster=dgx-a100,dgx-h200"]))
    assert [v.cluster.gpu.name for v in vs] == ["A100-SXM4-80GB", "H200-SXM-141GB"] * 2
    assert all(v.cluster.num_nodes == 2 for v in vs)
    assert [v.cluster.inter_node_bandwidth * 8 / 1e9 for v in vs] == [100, 100, 200, 200]
    assert sorted(dominated_pairs(vs)) == [(0, 2), (1, 3)]
    order = search_order(vs)
    assert order.index(0) < order.index(2) and order.index(1) < order.index(3)


def test_apply_cluster_keeps_everything_else():
    c = cluster_preset("dgx-a100", 4)
    d = apply_cluster(c, "inter_node_gbps", 400)
    assert d.inter_node_bandwidth == 50e9 and d.intra_node_bandwidth == c.intra_node_bandwidth
    assert (d.name, d.num_gpus, d.gpu, d.inter_node_latency) == (
        c.name, c.num_gpus, c.gpu, c.inter_node_latency)
    e = apply_cluster(c, "gpu", "H200-SXM-141GB")
    assert e.gpu.name == "H200-SXM-141GB" and e.intra_node_bandwidth == c.intra_node_bandwidth
    assert isinstance(Variant((("nodes", 2),), model_preset("gpt-1.7b"), c, 8).label, str)
