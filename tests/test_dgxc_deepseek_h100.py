"""DeepSeek-V3 in NVIDIA's DGX Cloud 25.05 recipe on H100 (docs/calibration.md §5.47): the
decomposition experiments/dgxc_deepseek_h100.py prints is the estimate's own (its parts sum to
the step), the reader gives the rows the dispatcher NeMo's pinned script ran (Megatron-Core's
NCCL ``alltoall``, no DeepEP), the H100 rows' all-to-all is the NIC-bound closed form over 8
nodes, and the FP32-router and needed-rate figures follow their formulas."""
from __future__ import annotations

import pytest

from experiments import dgxc_deepseek_h100 as dh
from strategies.cost import comm
from strategies.cost.stage import stage_costs
from strategies.estimate.scalar import BREAKDOWN_KEYS
from strategies.reference.cases import case_from_entry


@pytest.fixture(scope="module")
def rows():
    ds, allrows = dh.deepseek_rows()
    return {r["id"]: r for r in ds}, allrows


def test_five_rows_on_the_nccl_alltoall(rows):
    ds, allrows = rows
    assert len(ds) == 5
    for r in ds.values():
        job = case_from_entry(r, allrows).job
        # NeMo 7a8f1cc's script: USE_TOKEN_DROP, whose callback asserts alltoall/alltoall_seq;
        # DeepSeekConfig's dispatcher "alltoall" (no flex/DeepEP before NeMo ba1ff16132)
        assert job.plan.moe_dispatcher == "alltoall"
        assert stage_costs(job).ep_nvlink_share == 1.0       # NCCL's rate, not DeepEP's


def test_breakdown_sums_to_the_step(rows):
    ds, allrows = rows
    for r in ds.values():
        b = dh.breakdown_per_layer(r, allrows)
        assert sum(b[k] for k in BREAKDOWN_KEYS) == pytest.approx(b["step"], rel=1e-12)
        assert b["miss"] == pytest.approx(b["measured"] - b["step"], rel=1e-12)
        assert dh.layer_microbatches(r) == 1024       # 128 x 8 (pp 8), 256 x 4 (pp 16), 64 x 16


def test_h100_alltoall_is_nic_bound_over_eight_nodes(rows):
    ds, allrows = rows
    for rid in ("dgxc2505_deepseek_v3_671b_h100_512_bf16",
                "dgxc2505_deepseek_v3_671b_h100_1024_bf16"):
        x = dh.moe_layer(ds[rid], allrows)
        # 2048 tokens per GPU (SP over tp 2) x 8 copies x 7168 x 2 bytes
        assert x["a2a_bytes_each"] == pytest.approx(2048 * 8 * 7168 * 2, rel=1e-12)
        assert x["a2a_remote_bytes_each"] == pytest.approx(x["a2a_bytes_each"] * 56 / 64,
                                                           rel=1e-12)
        assert x["nic_rate"] == pytest.approx(50e9 * comm.NETWORK_EFFICIENCY, rel=1e-12)
        band = x["a2a_remote_bytes_each"] / x["nic_rate"]
        assert 0.0 < x["a2a_each"] - band < 20e-6     # one route latency on top
        # the rate that would hold the miss alone: below the model's, and the model's at 0
        miss = dh.breakdown_per_layer(ds[rid], allrows)["miss"] / 1e3
        assert miss > 0
        need = dh.needed_rate(x, miss)
        assert need < x["nic_rate"]
        assert dh.needed_rate(x, 0.0) == pytest.approx(x["a2a_remote_bytes_each"]
                                                       / x["a2a_each"], rel=1e-12)
        assert need == pytest.approx(x["a2a_remote_bytes_each"]
                                     / (x["a2a_each"] + miss / 4), rel=1e-12)


def test_gb200_alltoall_stays_in_nvlink_and_the_nic_what_if_is_larger(rows):
    ds, allrows = rows
    for rid, r in ds.items():
        if "gb200" not in rid:
            continue
        x = dh.moe_layer(r, allrows)
        assert x["a2a_remote_bytes_each"] == 0.0
        assert dh.gb200_over_nics(r, allrows) > 10 * dh.A2A_PER_LAYER * x["a2a_each"]


def test_router_fp32_closed_form(rows):
    ds, allrows = rows
    r = ds["dgxc2505_deepseek_v3_671b_h100_512_bf16"]
    job = case_from_entry(r, allrows).job
    g = job.cluster.gpu
    flops = 3 * 2.0 * 4096 / 2 * 7168 * 256       # the SP shard's rows at tp 2 (§5.99)
    f32, t32 = dh.router_fp32_extra(r, allrows)
    eff = g.matmul_efficiency
    assert f32 == pytest.approx(flops / (g.peak_flops["fp32"] * eff)
                                - flops / (g.peak_flops["bf16"] * eff), rel=1e-12)
    assert t32 == pytest.approx(flops / (g.peak_flops["tf32"] * eff)
                                - flops / (g.peak_flops["bf16"] * eff), rel=1e-12)
    assert f32 > t32 > 0
