"""What-if across GPU generations: the GPU count kept, per-GPU prices, power (issue 18, 4)."""
import json

import pytest

from simulator.cli.main import main
from simulator.studies.prices import DEFAULT_PRICES, PRICE_SOURCES, parse_prices, price_of
from simulator.studies.whatif_variants import apply_cluster, parse_vary, variants
from strategies.errors import SpecError
from strategies.presets import model_preset
from topologies.cluster import cluster_from_mapping, cluster_preset
from topologies.gpus import get_gpu


def test_cluster_variant_keeps_the_gpu_count():
    base = cluster_preset("dgx-h100", 32)                 # 256 GPUs
    gb = apply_cluster(base, "cluster", "gb200-nvl72")
    assert (gb.name, gb.num_gpus, gb.num_nodes, gb.nvlink_domain_size) == (
        "gb200-nvl72:64", 256, 4, 64)
    b = apply_cluster(gb, "cluster", "dgx-b200")
    assert (b.name, b.num_gpus) == ("dgx-b200:32", 256)
    vs = variants(model_preset("llama3-8b"), base, 64,
                  parse_vary(["cluster=dgx-h100,mi355x,gb300-nvl72"]))
    assert [v.cluster.num_gpus for v in vs] == [256, 256, 256]


def test_cluster_variant_refuses_a_gpu_count_the_preset_cannot_hold():
    odd = cluster_from_mapping({"preset": "dgx-h100", "gpus_per_node": 4,
                                "nics_per_node": 4, "nodes": 3})          # 12 GPUs
    with pytest.raises(SpecError, match="does not divide 12 GPUs"):
        apply_cluster(odd, "cluster", "dgx-b200")
    assert apply_cluster(odd, "cluster", "gb200-nvl72").num_gpus == 12


def test_cluster_variant_takes_trays_per_rack():
    """``PRESET:NxT`` (and ``PRESET:N``) as a value: racks of T trays where the preset alone
    takes the fewest racks (1,024 GPUs: 256 trays cannot fill 15 racks evenly, refused);
    a count that does not hold the base's GPUs is refused, before any search where it can."""
    base = cluster_preset("dgx-h100", 128)               # 1,024 GPUs
    assert parse_vary(["cluster=gb200-nvl72:256x16,dgx-b200:128"]) == [
        ("cluster", ["gb200-nvl72:256x16", "dgx-b200:128"])]
    gb = apply_cluster(base, "cluster", "gb200-nvl72:256x16")
    assert (gb.name, gb.num_gpus, gb.nvlink_domain_size) == ("gb200-nvl72:256x16", 1024, 64)
    with pytest.raises(SpecError, match="256 trays need 15 racks"):
        apply_cluster(base, "cluster", "gb200-nvl72")
    with pytest.raises(SpecError, match="holds 256 GPUs where the base cluster has 1024"):
        apply_cluster(base, "cluster", "gb200-nvl72:64x16")
    for bad, rule in (("gb200-nvl72:256x7", "must divide the 256 trays"),
                      ("dgx-h100:4x2", "needs a rack-scale preset"),
                      ("dgx-h100:4+dgx-a100:4", "not a mixed cluster or a file")):
        with pytest.raises(SpecError, match=rule):
            parse_vary([f"cluster={bad}"])


def test_whatif_over_trays_per_rack(capsys):
    rc = main(["whatif", "--model", "llama3-8b", "--cluster", "gb200-nvl72:2", "--global-batch",
               "16", "--max-mbs", "1", "--workers", "1", "--fix", "pp=1,cp=1",
               "--vary", "cluster=gb200-nvl72,gb200-nvl72:2x1", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    rows = json.loads(out.out)["rows"]
    assert [r["job"]["cluster"] for r in rows] == ["gb200-nvl72:2", "gb200-nvl72:2x1"]
    assert [r["job"]["gpus"] for r in rows] == [8, 8]
    rc = main(["whatif", "--model", "llama3-8b", "--cluster", "gb200-nvl72:2", "--global-batch",
               "16", "--vary", "cluster=gb200-nvl72:4x2"])
    err = capsys.readouterr().err
    assert rc == 2 and "--vary cluster='gb200-nvl72:4x2': holds 16 GPUs" in err
    assert "Traceback" not in err


def test_prices_default_override_and_refusal():
    assert parse_prices("default") == DEFAULT_PRICES
    t = parse_prices("H100=2.5,MI355X=3")
    assert t["H100-SXM5-80GB"] == 2.5 and t["MI355X"] == 3.0
    assert t["GB200"] == DEFAULT_PRICES["GB200"]
    assert parse_prices("4") == 4.0 and price_of(4.0, "anything") == 4.0
    assert price_of(DEFAULT_PRICES, "MI355X") is None
    assert all(src and v > 0 for v, src in PRICE_SOURCES.values())
    for bad in ("H100=x", "Z100=2", "-1", "nan", "cheap"):
        with pytest.raises(SpecError, match="--gpu-hour-cost"):
            parse_prices(bad)


def test_whatif_over_generations_cost_and_energy(capsys):
    rc = main(["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch",
               "16", "--max-mbs", "1", "--workers", "1", "--fix", "pp=1,cp=1",
               "--vary", "cluster=dgx-h100,gb200-nvl72,mi355x",
               "--gpu-hour-cost", "H100=2", "--power", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    rep = json.loads(out.out)
    rows = {r["cluster"]: r for r in rep["rows"]}
    assert [r["job"]["gpus"] for r in rep["rows"]] == [8, 8, 8]
    assert rows["gb200-nvl72"]["job"]["cluster"] == "gb200-nvl72:2"
    tokens = 16 * model_preset("llama3-8b").seq_length
    for name, gpu, price in (("dgx-h100", "H100", 2.0), ("gb200-nvl72", "GB200",
                                                         DEFAULT_PRICES["GB200"])):
        r = rows[name]
        assert r["gpu_hour_cost"] == price
        assert r["cost_per_million_tokens"] == pytest.approx(
            price * 8 * r["step_time_s"] / 3600 / tokens * 1e6, rel=1e-12)
        tdp = get_gpu(gpu).tdp_w
        assert r["power_w_per_gpu"] == tdp
        assert r["energy_kwh_per_million_tokens"] == pytest.approx(
            tdp * 8 * r["step_time_s"] / 3.6e6 / tokens * 1e6, rel=1e-12)
    assert rows["mi355x"]["cost_per_million_tokens"] is None      # no default price
    assert rows["mi355x"]["power_w_per_gpu"] == 1400
    assert rows["gb200-nvl72"]["step_time_s"] < rows["dgx-h100"]["step_time_s"]


def test_bad_price_text_exits_2(capsys):
    rc = main(["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--vary",
               "nodes=1", "--gpu-hour-cost", "H100=free"])
    assert rc == 2 and "--gpu-hour-cost" in capsys.readouterr().err
