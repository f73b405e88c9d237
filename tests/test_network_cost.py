"""Network parts and price (topologies.inventory, simulator.studies.network_cost) and the
``whatif`` network axes (``--vary network=...``, ``--vary failed_planes=...``)."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.studies.network_cost import network_cost, parse_network_prices
from simulator.studies.whatif_variants import parse_vary, variants
from strategies.errors import SpecError
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.inventory import network_inventory

H100 = cluster_preset("dgx-h100", 128)        # 1,024 GPUs, 8 rails of 400G


def test_rail_fat_tree_counts_follow_the_two_tier_rule():
    """128 nodes x 8 rails of 400G on 128-port (51.2 Tb/s) switches at 1:1: 64 endpoints a
    leaf, 2 leaves a rail, 64 uplinks a leaf, 1,024 uplinks over 8 spines."""
    inv = network_inventory(H100)
    assert (inv.radix, inv.leaf_switches, inv.spine_switches) == (128, 16, 8)
    assert inv.links == 1024 + 1024 and inv.transceivers == 2 * inv.links
    assert inv.nic_ports == 1024


def test_rail_only_drops_the_spine_and_its_optics():
    ro = network_inventory(replace(H100, inter_node_topology="rail_only"))
    assert (ro.leaf_switches, ro.spine_switches, ro.links) == (8, 0, 1024)
    big = replace(cluster_preset("dgx-h100", 512), inter_node_topology="rail_only")
    inv = network_inventory(big)       # 512 nodes a rail > 128 ports: each rail a 2-tier Clos
    assert inv.leaf_switches == 8 * 8 and inv.spine_switches == 8 * 4
    rft = network_inventory(cluster_preset("dgx-h100", 512))
    assert inv.switches == rft.switches and inv.links == rft.links   # same tiers per rail


def test_planes_halve_the_port_and_double_the_radix():
    inv = network_inventory(replace(H100, planes=2))
    assert (inv.planes, inv.port_gbps, inv.radix, inv.nic_ports) == (2, 200.0, 256, 2048)
    # per plane: 8 rails x 1 leaf of 128 endpoints, 8 x 128 uplinks over 4 spines
    assert (inv.leaf_switches, inv.spine_switches) == (2 * 8, 2 * 4)


def test_a_fleet_beyond_two_tiers_is_refused_not_undercounted():
    huge = cluster_preset("dgx-h100", 2048)    # 16,384 ports a plane: 256 leaves > radix 128
    with pytest.raises(SpecError, match="two-tier Clos"):
        network_inventory(huge)
    assert network_inventory(replace(huge, planes=2)).spine_switches > 0   # 256-port planes fit
    assert network_cost(huge, None)["error"] and network_cost(huge, None)["cost_usd"] is None


def test_price_is_counts_times_the_table():
    prices = parse_network_prices("switch=25000,optic_400=700")
    out = network_cost(H100, prices)
    assert out["cost_usd"] == 24 * 25000 + 4096 * 700
    missing = network_cost(replace(H100, planes=2), prices)     # 200G optics not priced
    assert missing["cost_usd"] is None and "optic_200" in missing["cost_note"]
    assert network_cost(cluster_preset("dgx-h100", 1), prices)["cost_usd"] == 0


@pytest.mark.parametrize("text, field", [("switch=-1", "--network-prices switch"),
                                         ("optic_300=5", "--network-prices"),
                                         ("switch", "--network-prices"),
                                         ("switch_tbps=abc", "--network-prices switch_tbps")])
def test_bad_prices_name_the_field(text, field):
    with pytest.raises(SpecError) as e:
        parse_network_prices(text)
    assert e.value.field == field


def test_network_variants_change_only_the_network():
    m = model_preset("llama3-8b")
    vs = variants(m, cluster_preset("dgx-b300", 4), 64,
                  parse_vary(["network=rail-only,multi-plane:4", "failed_planes=0,1"]))
    got = [(v.cluster.inter_node_topology, v.cluster.planes, bool(v.cluster.faults), v.error)
           for v in vs]
    assert got[:2] == [("rail_only", 1, False, None), ("rail_only", 1, False, got[1][3])]
    assert "no path is left" in got[1][3]
    assert got[2:] == [("rail_fat_tree", 4, False, None), ("rail_fat_tree", 4, True, None)]
    assert vs[3].cluster.faults.bandwidth_factors(4)[1] == pytest.approx(4 / 3, rel=1e-5)


@pytest.mark.parametrize("vary, words", [("network=clos", "--vary network"),
                                         ("network=multi-plane:1", "planes"),
                                         ("network=multi-plane:3", "whole number of Gb/s"),
                                         ("failed_planes=-1", "failed_planes")])
def test_bad_network_axes_exit_2(capsys, vary, words):
    rc = main(["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100:2",
               "--global-batch", "16", "--vary", vary])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and "Traceback" not in err


def test_whatif_reports_parts_price_and_a_failed_plane(capsys):
    rc = main(["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100:2", "--global-batch",
               "16", "--max-mbs", "1", "--workers", "1", "--fix", "tp=8,pp=1",
               "--vary", "network=rail-fat-tree,multi-plane", "--vary", "failed_planes=0,1",
               "--network-prices", "switch=25000,optic_400=700,optic_200=400", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    rows = json.loads(out.out)["rows"]
    assert [r["feasible"] for r in rows] == [True, False, True, True]
    assert rows[0]["network_parts"]["cost_usd"] == 1 * 25000 + 32 * 700
    assert rows[2]["network_parts"]["cost_usd"] == 2 * 25000 + 64 * 400
    healthy, failed = rows[2]["step_time_s"], rows[3]["step_time_s"]
    assert healthy == pytest.approx(rows[0]["step_time_s"], rel=1e-12)   # same NIC bandwidth
    assert failed > healthy and math.isfinite(failed)
