"""experiments/pad_rows.py (docs/calibration.md §5.135): the padded rows are the estimate's,
normalised per MoE layer and micro-batch of the busiest rank; their terms add up to the
estimate; every row's capacity is whole (padded load 1.0: no padded row computed); each pair
is a padded row against one that does not pad, its ``left`` the closed form; the GB200
DeepSeek-V3 layout is the recipe's."""
from __future__ import annotations

import io
import math
from contextlib import redirect_stdout

import pytest

from experiments import pad_rows as p
from strategies.estimate import estimate
from strategies.reference.cases import case_from_entry, load_reference



# Computed once, by the worker that runs this file: module-scoped fixtures, not module
# constants (under pytest-xdist every worker imports every test file to collect it).
@pytest.fixture(scope="module")
def padded() -> list:
    return p.pad_rows()


@pytest.fixture(scope="module")
def pairs() -> list:
    return p.pair_rows()


def test_every_padded_row_with_a_measured_step_is_read(padded: list) -> None:
    # §5.125: 42 rows state moe_pad_to_capacity and have a job (37 + 6, one without a step)
    assert len(padded) == 42
    assert len({r["id"] for r in padded}) == 42
    for f in p.PAD_FILES:
        for e in load_reference(p.DATA + "/" + f):
            pads = isinstance(e, dict) and e.get("plan", {}).get("moe_pad_to_capacity")
            if pads and e["measured"].get("step_time_s") is not None:
                assert e["id"] in {r["id"] for r in padded}


def test_terms_are_the_estimate_per_moe_layer_and_micro_batch(padded: list) -> None:
    for f in p.PAD_FILES:
        rows = load_reference(p.DATA + "/" + f)
        for e in rows:
            r = next((x for x in padded if x["id"] == e.get("id")), None)
            if r is None:
                continue
            job = case_from_entry(e, rows).job
            est = estimate(job)
            n = est.num_microbatches * job.model.num_moe_layers / job.plan.pp
            assert r["layer_mb"] == n
            assert r["estimate"] == est.step_time_s
            assert math.isclose(r["est_ms"] * n, 1e3 * est.step_time_s, rel_tol=1e-12)
            assert math.isclose(r["meas_ms"] * n, 1e3 * r["measured"], rel_tol=1e-12)
            assert math.isclose(sum(r["terms"].values()), r["est_ms"], rel_tol=1e-12)
            assert math.isclose(r["error"], 100 * (r["estimate"] / r["measured"] - 1),
                                rel_tol=1e-12)


def test_every_capacity_is_whole_so_no_padded_row_is_computed(padded: list) -> None:
    # C = ceil(T/t · k / E · cf) with cf = 1.0: whole where E divides T/t · k, and then the
    # padded rows C·E equal the routed copies T/t · k (padded load exactly 1)
    for f in p.PAD_FILES:
        rows = load_reference(p.DATA + "/" + f)
        for e in rows:
            if not any(x["id"] == e.get("id") for x in padded):
                continue
            job = case_from_entry(e, rows).job
            m, pl = job.model, job.plan
            assert pl.moe_capacity_factor == 1.0
            copies = pl.mbs * m.seq_length // pl.cp // pl.tp * m.moe_router_topk
            assert copies % m.num_experts == 0, e["id"]
    assert all(r["padded_load"] == 1.0 for r in padded)


def test_pairs_pad_against_rows_that_do_not(pairs: list) -> None:
    assert len(pairs) == len(p.PAIRS)
    for (a, b, diff, left, _), (a_id, a_f, b_id, b_f, _) in zip(pairs, p.PAIRS):
        assert a["id"] == a_id and b["id"] == b_id and a_f != b_f
        assert a["padded_load"] is not None and b["padded_load"] is None
        d_est = a["est_ms"] - b["est_ms"]
        assert math.isclose(sum(diff.values()), d_est, rel_tol=1e-9, abs_tol=1e-9)
        assert math.isclose(left, (a["meas_ms"] - b["meas_ms"]) - d_est,
                            rel_tol=1e-12, abs_tol=1e-12)


def test_deepseek_gb200_pair_leaves_most_of_the_measured_difference(pairs: list) -> None:
    # the finding of §5.135: the estimate's terms carry about a tenth of what separates
    # the 25.04.01 padded row from the 26.04.01 one on the same GPUs, stages and micro-batches
    a, b, _, left, _ = pairs[0]
    assert a["layer_mb"] == b["layer_mb"] == 64 * 58 / 4   # 64 micro-batches, 58 MoE layers, pp 4
    assert left > 0.85 * (a["meas_ms"] - b["meas_ms"]) > 0


def test_deepseek_gb200_layout_is_the_recipes() -> None:
    # NeMo 7a8f1cc7bc40 scripts/performance/llm/pretrain_deepseek_v3.py L73-77: first stage
    # 64 // pp - 1 layers, last 64 // pp - 2, the middle 64 // pp
    rows = load_reference(p.DATA + "/dgxc_2505.json")
    seen = 0
    for e in rows:
        if "deepseek_v3" not in e["id"] or "gb200" not in e["id"]:
            continue
        job = case_from_entry(e, rows).job
        pp = job.plan.pp
        per = [job.layers_of_stage(i) for i in range(pp)]
        assert per == [64 // pp - 1] + [64 // pp] * (pp - 2) + [64 // pp - 2]
        assert sum(per) == job.model.num_layers == 61
        seen += 1
    assert seen == 3
    for ident, stated, balanced, ls, lb in p.layout_rows():
        assert ls == lb == 16 and stated < balanced


def test_the_gb200_deepseek_expert_groups_fit_one_nvlink_domain(padded: list) -> None:
    for r in padded:
        if "deepseek" in r["id"] and r["gpu"].startswith("GB200"):
            assert r["span"] in (32, 64) and r["in_domain"]


@pytest.mark.slow
def test_tables_are_deterministic(padded: list, pairs: list) -> None:
    """``main()`` computing every row afresh prints what the rows the fixtures computed
    (``padded``, ``pairs``) print: two runs, byte for byte."""
    outs = []
    for given in ((), (padded, pairs)):
        buf = io.StringIO()
        with redirect_stdout(buf):
            p.main(*given)
        outs.append(buf.getvalue())
    assert outs[0] == outs[1]
    assert outs[0].count("\n| dgxc250") >= 37
