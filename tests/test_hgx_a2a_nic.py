"""experiments/hgx_a2a_nic.py (docs/calibration.md §5.176): the expert all-to-all's bytes over
the NICs on the HGX MoE rows, the published all-to-alls' share of the NIC's line rate, and
the what-if that prices the all-to-all at that share."""
from __future__ import annotations

import os
import statistics
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "experiments"))

import hgx_a2a_nic as hx  # noqa: E402
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.collectives import all_to_all  # noqa: E402
from strategies.cost import comm  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return hx.moe_rows()


def test_presets_hold_one_nic_per_gpu_at_the_public_rate():
    got = {p["preset"]: p for p in hx.preset_rows()}
    for name, gbit in (("dgx-b200", 400), ("dgx-b300", 800), ("gb200-nvl72", 400),
                       ("gb300-nvl72", 800), ("dgx-h100", 400)):
        assert got[name]["nics_per_gpu"] == 1
        assert got[name]["gbit"] == pytest.approx(gbit, rel=1e-12)
        assert got[name]["model_gbs"] == pytest.approx(
            gbit / 8 * comm.NETWORK_EFFICIENCY, rel=1e-12)
    assert got["dgx-b300"]["domain"] == 8 and got["gb300-nvl72"]["domain"] == 72


@pytest.mark.slow
def test_every_b300_row_keeps_its_expert_group_in_one_node(rows):
    b300 = [r for r in rows if r["cluster"].startswith("dgx-b300")]
    assert len(b300) >= 9
    for r in b300:
        assert (r["ep"], r["etp"], r["nodes"]) == (8, 1, 1), r["id"]
        assert r["nic_bytes"] == 0.0 and r["port"] == "NVLink", r["id"]
        assert r["what_if"] == r["error"], r["id"]


def test_no_nvl72_row_sends_expert_tokens_over_a_nic(rows):
    nvl = [r for r in rows if r["kind"] == "NVL72"]
    assert nvl and all(r["nic_bytes"] == 0.0 for r in nvl)


def test_the_what_if_moves_only_rows_whose_all_to_all_crosses_a_nic(rows):
    crossing = [r for r in rows if r["nic_share"] > 0]
    assert {r["id"] for r in crossing} >= {"mbridge260401_deepseekv3_b200_256_mxfp8",
                                           "mbridge260401_nemotron3super_b200_64_mxfp8"}
    for r in rows:
        if r["nic_share"] == 0:
            assert r["what_if"] == r["error"], r["id"]
        else:                           # a slower NIC term can only lengthen the step
            assert r["what_if"] >= r["error"] - 1e-9, r["id"]


def test_a2a_nic_share_closed_form_and_restore():
    cl = cluster_preset("dgx-b300", 4)
    n, S = 4, 3.0e8
    base = all_to_all.two_level_time
    share = 0.8
    with hx.a2a_nic_share(share):
        t = float(comm.collective_time("alltoall", S, n, cl.gpus_per_node, cl))
    want = (n - 1) / n * S / (cl.inter_node_bandwidth_per_gpu * share) + cl.inter_node_latency \
        + CALL
    assert t == pytest.approx(want, rel=1e-12)
    assert all_to_all.two_level_time is base
    t0 = float(comm.collective_time("alltoall", S, n, cl.gpus_per_node, cl))
    assert t0 == pytest.approx((n - 1) / n * S / (cl.inter_node_bandwidth_per_gpu
                                                  * comm.NETWORK_EFFICIENCY)
                               + cl.inter_node_latency + CALL, rel=1e-12)


def test_the_measured_share_is_the_median_of_the_four_node_cases():
    m = hx.measured_shares()
    big = [x["share"] for x in m if x["nodes"] >= 4]
    assert len(big) >= 10
    assert hx.A2A_NIC == statistics.median(big)
    assert 0.80 < hx.A2A_NIC < comm.NETWORK_EFFICIENCY
    for x in m:
        assert x["share"] == pytest.approx(comm.NETWORK_EFFICIENCY * x["ratio"], rel=1e-12)
