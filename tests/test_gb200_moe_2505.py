"""experiments/gb200_moe_2505.py (docs/calibration.md §5.83): its rows are the estimate's, each
column is the closed form it names, the tray what-if keeps the GPUs and only removes
multi-node NVLink (never making a step faster), and the tables are deterministic."""
from __future__ import annotations

import io
import math
from contextlib import redirect_stdout

import pytest

from experiments import gb200_moe_2505 as g
from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs
from strategies.estimate import estimate
from strategies.reference.cases import case_from_entry, load_reference


# The rows are computed once, by the worker that runs this file: module-scoped fixtures, not
# module constants (under pytest-xdist every worker imports every test file to collect it).
@pytest.fixture(scope="module")
def recs() -> list:
    return g.rows()


@pytest.fixture(scope="module")
def whatif() -> list:
    return g.whatif_rows()


def _entry(fname: str, rid: str) -> dict:
    return next(e for e in load_reference(g.DATA + fname + ".json") if e["id"] == rid)


def test_rows_are_the_estimates_and_their_columns_the_closed_forms(recs: list) -> None:
    assert len(recs) == len(g.ROWS)
    for x, (fname, rid, *_) in zip(recs, g.ROWS):
        assert x["id"] == rid
        job = case_from_entry(_entry(fname, rid)).job
        est = estimate(job)
        assert x["est"] == est.step_time_s
        p, m = job.plan, job.model
        moe_layers = est.num_microbatches * m.num_moe_layers / p.pp
        assert math.isclose(x["miss"], (x["measured"] - x["est"]) / moe_layers, rel_tol=1e-12)
        sc = stage_costs(job)
        eb = float((sc.by_kind["moe"] if sc.by_kind else sc).ep_bytes)
        assert x["wire"] == 2.0 * eb * (p.ep - 1) / p.ep
        one = cm.collective_time("alltoall", eb, p.ep, p.etp or 1, job.cluster,
                                 float(sc.ep_remote_scale), float(sc.ep_nvlink_share))
        assert x["a2a"] == 2.0 * float(one)
        assert x["rate"] == x["wire"] / x["a2a"]
        if x["a2a"] + x["miss"] > 0:
            assert x["rate_needed"] == x["wire"] / (x["a2a"] + x["miss"])
        else:
            assert x["rate_needed"] is None


def test_the_targets_are_the_25_04_01_gb200_maverick_and_deepseek_rows(recs: list) -> None:
    tg = [x for x in recs if x["id"].startswith(g.TARGETS)]
    assert len(tg) == 9
    assert all(x["gpu"] == "GB200" and x["container"] == "25.04.01" for x in tg)
    assert all(x["dispatcher"] == "alltoall" and x["ep"] >= 32 for x in tg)
    # the model's all-to-all stays inside NVLink on these rows: its rate is the NVLink rate,
    # far above a 400 Gb/s NIC's
    assert all(x["rate"] > 10 * 50e9 for x in tg)


def test_container_of_reads_the_source_fields() -> None:
    assert g.container_of({"source": {"also": "container nvcr.io/nvidia/nemo:25.04.01"}}) \
        == "25.04.01"
    assert g.container_of({"source": {"table": "docs/performance-summary.md (25.11 NeMo "
                                               "container)"}}) == "25.11"
    assert g.container_of({"source": {"table": "x, Container: NeMo 25.07, System: DGX-GB200"}}) \
        == "25.07"
    assert g.container_of({"source": {"ref": "a paper"}}) == "-"


def test_tray_cluster_keeps_the_gpus_and_the_nic_per_gpu_and_drops_multi_node_nvlink() -> None:
    job = case_from_entry(_entry("dgxc_2505", "dgxc2505_llama4_400b_gb200_128_bf16")).job
    cl = job.cluster
    tc = g.tray_cluster(cl)
    n = sum(x.num_nodes for x in cl.groups) * cl.gpus_per_node
    assert sum(x.num_nodes for x in tc.groups) * tc.gpus_per_node == n == 128
    assert tc.gpus_per_node == tc.nvlink_domain_gpus == cl.gpus_per_tray == 4
    assert tc.gpu is cl.gpu
    assert tc.nics_per_node / tc.gpus_per_node == cl.nics_per_node / cl.gpus_per_node
    assert tc.inter_node_bandwidth == cl.inter_node_bandwidth
    assert tc.intra_node_bandwidth == cl.intra_node_bandwidth


def test_the_what_if_never_makes_a_step_faster_and_covers_every_gb200_row(
        recs: list, whatif: list) -> None:
    ids = {x[1] for x in whatif}
    assert {x["id"] for x in recs if x["gpu"] == "GB200"} <= ids
    for f, rid, cont, ms, a, ea, b, eb in whatif:
        assert b >= a * (1 - 1e-12), rid
        assert math.isclose(ea, 100 * (a / ms - 1), rel_tol=1e-12)
        assert math.isclose(eb, 100 * (b / ms - 1), rel_tol=1e-12)


@pytest.mark.slow
def test_tables_are_deterministic(recs: list, whatif: list) -> None:
    """``main()`` computing every row afresh prints what the rows the fixtures computed
    (``recs``, ``whatif``) print: two runs, byte for byte; the rows computed afresh are the
    fixtures' exactly."""
    outs, fresh = [], None
    for given in ((), (recs, whatif)):
        buf = io.StringIO()
        with redirect_stdout(buf):
            got = g.main(*given)
        fresh = got if fresh is None else fresh
        outs.append(buf.getvalue())
    assert fresh == (recs, whatif)
    assert outs[0] == outs[1]
    assert "Table 3b" in outs[0] and "targets (Maverick, DeepSeek-V3; 25.04.01)" in outs[0]


def test_grace_ratio_and_sync_host_path_are_their_closed_forms() -> None:
    from strategies.launch_blocking import HOST_PATH_S
    assert g.GRACE_HOST_RATIO == 37.08e-6 / 13.48e-6
    assert g.sync_host_path_s("alltoall") == HOST_PATH_S
    assert g.sync_host_path_s("deepep") == 0.0 and g.sync_host_path_s("hybridep") == 0.0
