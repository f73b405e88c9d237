"""experiments/hgx_moe_twins.py (docs/calibration.md §5.141): the HGX MoE rows beside their
NVL72 twins, the data-parallel calls whole, the what-ifs, and the finding's claims."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "experiments"))

import hgx_moe_twins as hx  # noqa: E402
from strategies.collectives.phase import CALL_LATENCY_S as CALL  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.reference.cases import case_from_entry  # noqa: E402

GPTOSS_B300 = "mbridge260401_gptoss120b_b300_64_bf16"
GPTOSS_B200 = "mbridge260401_gptoss120b_b200_64_bf16"


@pytest.fixture(scope="module")
def pair_list():
    return hx.pairs()


@pytest.fixture(scope="module")
def pairs(pair_list):
    return {h["id"]: (h, g) for h, g in pair_list}


def test_every_twin_is_an_nvl72_row_of_the_same_model_and_file():
    entries = hx._entries()
    for h, g in hx.TWINS.items():
        eh, dh = entries[h]
        eg, dg = entries[g]
        assert dh is dg                                   # the same table
        jh, jg = case_from_entry(eh, dh).job, case_from_entry(eg, dg).job
        assert jh.cluster.name.split(":")[0] in hx.HGX
        assert "nvl72" in jg.cluster.name
        assert jh.model.name == jg.model.name and jh.model.is_moe
        assert jh.cluster.gpu.name.lstrip("B").split("-")[0] == \
            jg.cluster.gpu.name.lstrip("GB")              # B200 with GB200, B300 with GB300
        assert (jh.dtype == jg.dtype) or h in hx.NOTES    # a different precision is named


@pytest.mark.slow
def test_excess_is_its_closed_form(pairs):
    for h, g in pairs.values():
        s, per = hx.excess(h, g)
        assert s == pytest.approx(h["measured"] - h["estimate"] * g["measured"] / g["estimate"],
                                  rel=1e-12, abs=1e-12)
        assert per == pytest.approx(1e3 * s / (h["layers"] * h["mb"]), rel=1e-12)
    # a row whose ratio equals its twin's has no excess
    h, g = pairs[GPTOSS_B300]
    same = dict(h, measured=h["estimate"] * g["ratio"])
    assert hx.excess(same, g)[0] == pytest.approx(0.0, abs=1e-12)


def test_expert_reduce_scatter_over_the_nics_is_the_ring_closed_form(pairs):
    """gpt-oss-120b at ep 8 on 8 nodes: 16 local experts of 36 layers (fc1 2880x5760 and fc2
    2880x2880 with their biases) reduce-scattered in bf16 over the 8 ranks of one local index,
    one per node, each on its own NIC: (n-1)/n x bytes / (NIC x NETWORK_EFFICIENCY) + (n-1)
    latencies + the call's own (§5.233); B200's 400 Gb/s takes twice B300's 800 Gb/s less the latencies."""
    e = 36 * 16 * (2880 * 5760 + 2880 * 2880 + 5760 + 2880)
    entries = hx._entries()
    for rid in (GPTOSS_B300, GPTOSS_B200):
        r = pairs[rid][0]
        assert r["expert_params"] == e and r["edp"] == 8 and r["edp_stride"] == 8
        cl = case_from_entry(*entries[rid]).job.cluster
        bw = cl.inter_node_bandwidth_per_gpu * cm.NETWORK_EFFICIENCY / cl.oversubscription
        lat = float(cm.group_bandwidth(cl, 8, 8)[1])
        assert r["RS_e"] == pytest.approx(7 / 8 * 2 * e / bw + 7 * lat + CALL, rel=1e-12)
        assert r["AG_e"] == pytest.approx(r["RS_e"], rel=1e-12)   # bf16 both ways
    assert pairs[GPTOSS_B200][0]["RS_e"] / pairs[GPTOSS_B300][0]["RS_e"] == \
        pytest.approx(2.0, rel=1e-3)


def test_one_domain_keeps_the_hardware_and_moves_no_row_already_in_one():
    entries = hx._entries()
    job = case_from_entry(*entries[GPTOSS_B300]).job
    cl, one = job.cluster, hx.one_domain(job.cluster)
    n = sum(g.num_nodes for g in cl.groups) * cl.gpus_per_node
    assert sum(g.num_nodes for g in one.groups) * one.gpus_per_node == n == 64
    assert one.gpus_per_node == one.nvlink_domain_gpus == 64
    assert one.gpu == cl.gpu and one.intra_node_bandwidth == cl.intra_node_bandwidth
    assert one.nics_per_node / one.gpus_per_node == cl.nics_per_node / cl.gpus_per_node


def _fill_path(r) -> bool:
    """A one-chunk pipelined row: its overlapped gathers wait on the fill path, one stage
    after another (§5.194), so the overlap can cost more than gathering after the step."""
    return " 1f1b " in r["plan"] and " pp1 " not in f" {r['plan']}"


def test_what_ifs_never_make_a_step_faster_and_nvl72_single_domain_rows_stay(pairs):
    """Switching the parameter gather's overlap off never makes a step faster, except on a
    one-chunk pipeline, where the overlapped gathers run stage after stage on the fill
    path and gathering on every rank at once after the step is faster (§5.194)."""
    for h, g in pairs.values():
        for r in (h, g):
            if _fill_path(r):
                assert r["no_opg"] <= r["estimate"] + 1e-12
            else:
                assert r["no_opg"] >= r["estimate"] - 1e-12
            assert r["no_overlap"] >= r["no_opg"] - 1e-12
            assert r["one_domain"] <= r["estimate"] + 1e-12
    # 64 GB300 GPUs are one NVLink domain already: nothing crosses a NIC
    g = pairs[GPTOSS_B300][1]
    assert g["one_domain"] == pytest.approx(g["estimate"], rel=1e-12)
    # one 8-GPU node: nothing crosses a NIC either
    h = pairs["mbridge260401_qwen330ba3b_b300_8_mxfp8"][0]
    assert h["one_domain"] == pytest.approx(h["estimate"], rel=1e-12)


def test_the_finding_data_parallel_calls_cannot_be_the_hgx_excess(pairs):
    """§5.141: exposing every data-parallel byte (both overlaps off) would close the gpt-oss
    B300 pair only by pushing its B200 pair (twice the NIC seconds, already at its twin's
    ratio) far past its twin; on every interleaved HGX row it moves the error under half a
    point, and on every 1F1B one (whose overlapped gathers wait stage after stage on the
    fill path, §5.194) it makes the step faster, not slower."""
    h, g = pairs[GPTOSS_B200]
    assert abs(h["ratio"] / g["ratio"] - 1) < 0.02           # the B200 pair fits already
    assert 100 * (h["no_overlap"] / h["measured"] - 1) > g["error"] + 5
    for h, _ in pairs.values():
        if _fill_path(h):
            assert h["no_overlap"] < h["estimate"]
        elif "pp1 " not in h["plan"]:
            assert abs(h["no_overlap"] - h["estimate"]) / h["measured"] < 0.005


@pytest.fixture(scope="module")
def mapes():
    return {name: hx.moe_mape(name) for name in hx.FILES}


def test_moe_mape_groups_partition_the_moe_rows(mapes):
    for name in hx.FILES:
        g = mapes[name]
        assert g["all MoE rows"][0] == sum(g[k][0] for k in hx.GROUPS[1:])
        total = sum(g[k][0] * g[k][1] for k in hx.GROUPS[1:])
        assert g["all MoE rows"][1] * g["all MoE rows"][0] == pytest.approx(total, rel=1e-12)


@pytest.mark.slow
def test_output_is_deterministic(capsys, pair_list, mapes):
    """``main()`` computing every row afresh prints what the module's own computation of
    the rows (``pair_list`` and ``mapes``, read by the tests above) prints: two runs, byte
    for byte."""
    hx.main()
    a = capsys.readouterr().out
    hx.main(pair_list, mapes)
    assert capsys.readouterr().out == a


def test_the_presets_nics_are_the_datasheets():
    """§5.141 lead 2: DGX B200 8 x 400 Gb/s ConnectX-7, DGX B300 8 x 800 Gb/s ConnectX-8, one
    per GPU; NVL72 one 400 (GB200) / 800 (GB300) Gb/s NIC per GPU."""
    from topologies.cluster import cluster_preset
    for name, gbps in (("dgx-b200", 400), ("dgx-b300", 800), ("gb200-nvl72", 400),
                       ("gb300-nvl72", 800)):
        cl = cluster_preset(name, 2)
        assert cl.nics_per_node == cl.gpus_per_node
        assert cl.inter_node_bandwidth_per_gpu == pytest.approx(gbps * 1e9 / 8, rel=1e-12)
