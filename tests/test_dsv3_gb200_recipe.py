"""DeepSeek-V3 on GB200 in the DGX Cloud 25.05 recipe (docs/calibration.md §5.174): every switch
of the recipe the reader's job has a field for holds the recipe's value on the three GB200
rows, the decomposition's ``rest - work`` is the estimate's miss, and each reading's change with
the GPU count follows from the estimate it names."""
from __future__ import annotations

from dataclasses import replace

import pytest

from experiments import dsv3_gb200_recipe as dg
from experiments.dgxc_deepseek_h100 import breakdown_per_layer, deepseek_rows
from experiments.gb200_moe_2505 import tray_cluster
from strategies.cost.moe_time import EXPERT_HOST_S
from strategies.estimate.scalar import estimate


def test_every_field_the_job_has_holds_the_recipes_value():
    _, job = dg.job_of(dg.ROW)
    table = dg.field_table(job)
    assert len(table) == len(dg.FIELDS)
    for name, _value, _src, got, agrees in table:
        if got == "-":
            assert agrees == dg.NOT_FIELDS[name]
        else:
            assert agrees == "yes", name


@pytest.mark.parametrize("row_id, ep, gbs, dp", [
    (dg.GB200[0], 32, 1024, 16), (dg.GB200[1], 64, 2048, 32), (dg.GB200[2], 64, 4096, 64)])
def test_the_larger_rows_read_launch_sh(row_id, ep, gbs, dp):
    _, job = dg.job_of(row_id)
    p = job.plan
    # launch.sh L92 (8 sequences per GPU), L109-115; 64 micro-batches on every row
    assert (p.tp, p.pp, p.ep, p.etp, p.gbs, p.dp) == (2, 4, ep, 1, gbs, dp)
    assert p.gbs // (p.mbs * p.dp) == 64
    assert p.recompute_modules == ("core_attn",) and p.flash_attn is False
    assert p.moe_pad_to_capacity and not p.cuda_graph and not p.tp_comm_overlap


def test_a_wrong_value_is_flagged():
    _, job = dg.job_of(dg.ROW)
    bad = replace(job, plan=replace(job.plan, recompute_modules=("mla_up_proj",)))
    rows = {r[0]: r[4] for r in dg.field_table(bad)}
    assert rows["recompute_modules"] == "NO" and rows["tp"] == "yes"


def test_rest_less_work_is_the_miss():
    ds, rows = deepseek_rows()
    for r in ds:
        b = breakdown_per_layer(r, rows)
        rest, work = dg.rest_per_layer(b)
        assert rest - work == pytest.approx(b["miss"], abs=1e-9)
        assert work == pytest.approx(b["compute"] + b["recompute"] + b["tp_comm"], rel=1e-12)


def test_expert_host_closed_form():
    _, job = dg.job_of(dg.ROW)
    # 256/32 local experts, 16 layers of a middle stage, 1024/16 micro-batches
    assert dg.expert_host_s(job) == pytest.approx(8 * sum(EXPERT_HOST_S) * 16 * 64, rel=1e-12)
    _, job64 = dg.job_of(dg.GB200[1])
    assert dg.expert_host_s(job64) == pytest.approx(dg.expert_host_s(job) / 2, rel=1e-12)


def test_predictions_follow_their_estimates():
    pred = {name: (a, b) for name, a, b in dg.predictions()}
    ds, rows = deepseek_rows()
    meas = [next(r for r in ds if r["id"] == i)["measured"]["step_time_s"] for i in dg.GB200]
    assert pred["measured"] == pytest.approx((meas[1] - meas[0], meas[2] - meas[1]), abs=1e-12)
    jobs = [dg.job_of(i)[1] for i in dg.GB200]
    tray = [float(estimate(replace(j, cluster=tray_cluster(j.cluster))).step_time_s)
            for j in jobs]
    key = next(k for k in pred if k.startswith("§5.83"))
    assert pred[key] == pytest.approx((tray[1] - tray[0], tray[2] - tray[1]), abs=1e-9)
    # the tray what-if's growth from ep 32 to ep 64 is over ten times the README's spread,
    # the measured change within it
    assert pred[key][0] > 10 * dg.README_STEP_STD_S
    assert abs(pred["measured"][0]) < dg.README_STEP_STD_S


def test_the_closing_rate_closes_the_128_gpu_row():
    ds, rows = deepseek_rows()
    gb = [next(r for r in ds if r["id"] == i) for i in dg.GB200]
    model = [float(estimate(dg.job_of(i)[1]).step_time_s) for i in dg.GB200]
    steps = dg.per_gpu_rate_steps(gb, rows, model)
    assert steps[0] == pytest.approx(gb[0]["measured"]["step_time_s"], rel=1e-9)
    rate = dg.closing_rate(gb[0], rows, model[0])
    assert 20e9 < rate < 100e9          # a NIC's order, far below the model's NVLink rate


def test_other_alltoall_rows_are_nccl_rows_beyond_a_tray():
    out = dg.other_alltoall_rows(50e9)
    ids = {r[1] for r in out}
    assert set(dg.GB200) <= ids
    for _f, _i, _c, ep, _eo, err, ep_s, err_slow in out:
        assert ep > 1 and ep_s >= 0.0
        assert err_slow >= err - 1e-9          # a slower all-to-all never speeds a step
