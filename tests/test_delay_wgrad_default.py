"""``delay_wgrad`` (Megatron-Core's ``delay_wgrad_compute``) follows the stacks' code
(docs/calibration.md §5.101): off by default as Megatron-Core's ``model_parallel_config.py``,
refused without the expert-parallel overlap as its ``TransformerConfig`` asserts, stated per
reference row from the source (Megatron-Bridge's harness: on with the overlap), searched both
ways where ``--fix ep_overlap=true`` leaves it free, exported only when on."""
from dataclasses import replace

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from strategies.reference.perf_harness import DELAY_WGRAD_SOURCE, harness_delay_wgrad
from strategies.reference.cases import case_from_entry, load_reference
from strategies.search.space import SpaceOptions, enumerate_space
from tests.ep_overlap_jobs import pair_job
from topologies.cluster import cluster_preset

REF = "strategies/reference/data/"


def test_default_is_megatron_cores_off():
    """A plan that names only the overlap runs Megatron-Core's default: no deferred weight
    gradient, priced as ``delay_wgrad=false`` to the bit, and no flag in the export."""
    assert Plan().delay_wgrad is False
    on = pair_job(2, 2, 4, 50e9)
    bare = make_job(on.model, on.cluster, replace(on.plan, delay_wgrad=Plan().delay_wgrad))
    off = make_job(on.model, on.cluster, replace(on.plan, delay_wgrad=False))
    assert estimate(bare).step_time_s == estimate(off).step_time_s
    assert estimate(bare).step_time_s > estimate(on).step_time_s   # t = 191 us > 0 hidden
    assert "--delay-wgrad-compute" not in megatron_args(bare)[0]
    assert "--delay-wgrad-compute" in megatron_args(on)[0]


def test_refused_without_the_overlap():
    job = pair_job(2, 2, 4, 50e9, epo=False)
    with pytest.raises(SpecError, match="delay_wgrad.*needs ep_overlap=true"):
        make_job(job.model, job.cluster, replace(job.plan, delay_wgrad=True))


def test_cli_refusal_exits_2(capsys):
    rc = main(["estimate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100:2",
               "--plan", "ep=8,gbs=16,delay_wgrad_compute=true"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "delay_wgrad" in err and "ep_overlap" in err and len(err.strip().splitlines()) == 1


def test_search_prices_both_where_the_overlap_is_fixed():
    """``--fix ep_overlap=true``: every candidate twice, off and on, the rest equal; with
    ``delay_wgrad`` fixed, or without the overlap, once."""
    model = replace(model_preset("mixtral-8x7b"), num_layers=8, seq_length=1024)
    cl = cluster_preset("dgx-h100", 2)
    fix = {"ep_overlap": True, "ep": 8, "pp": 2, "schedule": "interleaved", "vpp": 2}
    both = enumerate_space(model, cl, 64, SpaceOptions(fixed=fix, layouts=False))
    one = enumerate_space(model, cl, 64, SpaceOptions(fixed={**fix, "delay_wgrad": True},
                                                      layouts=False))
    assert both.size == 2 * one.size > 0
    dw = both.cols["dw"]
    assert dw.sum() == one.size and (~dw).sum() == one.size
    keys = {both.key(i) for i in range(both.size)}
    assert len(keys) == both.size
    assert all(both.plan(i).delay_wgrad == bool(dw[i]) for i in range(both.size))
    plain = enumerate_space(model, cl, 64, SpaceOptions(fixed={"ep": 8}, layouts=False))
    assert "dw" not in plain.cols


@pytest.mark.parametrize("path", ["heldout_2026b.json", "published_2026.json",
                                  "megatron_bridge_2604.json"])
def test_reader_states_it_per_row_from_the_harness(path):
    """Every Megatron-Bridge harness row with the overlap ran ``delay_wgrad_compute`` (the
    harness sets both together), said with the harness's source; no row without it does."""
    rows = load_reference(REF + path)
    seen = 0
    for r in rows:
        case = case_from_entry(r, rows)
        if case.job is None:
            continue
        plan = case.job.plan
        assert plan.delay_wgrad == plan.ep_overlap
        said = [a for a in case.assumptions if a.startswith("delay_wgrad_compute=")]
        if plan.ep_overlap:
            assert harness_delay_wgrad(r) == DELAY_WGRAD_SOURCE
            assert len(said) == 1 and said[0].startswith("delay_wgrad_compute=true")
            assert DELAY_WGRAD_SOURCE in said[0]
            seen += 1
        else:
            assert not said
    assert seen >= (1 if path == "published_2026.json" else 2)


def test_reader_where_the_source_is_silent_or_states_it():
    """An overlap row outside the harness's tables takes Megatron-Core's default with an
    assumption line; a stated value wins; a stated true without the overlap is refused."""
    rows = load_reference(REF + "heldout_2026b.json")
    base = next(r for r in rows if r["id"] == "mbridge2606_qwen330ba3b_gb300_8_mxfp8")
    silent = {**base, "source": {"ref": "someone's cluster", "table": "a blog post"}}
    case = case_from_entry(silent)
    assert case.job.plan.ep_overlap and case.job.plan.delay_wgrad is False
    assert any(a.startswith("delay_wgrad_compute=false (not stated; Megatron-Core's default")
               for a in case.assumptions)
    stated = {**base, "plan": {**base["plan"], "delay_wgrad_compute": False}}
    case = case_from_entry(stated)
    assert case.job.plan.delay_wgrad is False
    assert "delay_wgrad_compute=false (stated)" in case.assumptions
    wrong = {**base, "plan": {**base["plan"], "ep_overlap": False, "delay_wgrad": True}}
    case = case_from_entry(wrong)
    assert case.job is None and "delay_wgrad" in case.skipped and "ep_overlap" in case.skipped


def _rows_2608():
    from experiments.moe_residuals import ROWS_2608
    return ROWS_2608


@pytest.mark.parametrize("row", _rows_2608(), ids=lambda r: r[0])
def test_2608_rows_read_their_recipes_switches_through_the_reader(row):
    """``moe_residuals`` Table 2: each 26.08 recipe's ``fp8_dot_product_attention`` and
    ``delay_wgrad_compute`` reach the job through the reader's own rules (§5.98, §5.101),
    and the attention's precision moves the estimate (one pipeline stage: the deferred
    weight gradient hides nothing there, so ``delay_wgrad`` does not)."""
    from experiments.moe_residuals import entry_2608
    case = case_from_entry(entry_2608(row))
    job = case.job
    assert job.framework.fp8_attention and job.plan.ep_overlap and job.plan.delay_wgrad
    assert any("(stated: fp8_attention)" in a for a in case.assumptions)
    assert "delay_wgrad_compute=true (stated)" in case.assumptions
    e = entry_2608(row)
    e["plan"]["fp8_attention"] = False
    bf16_attn = case_from_entry(e).job
    assert not bf16_attn.framework.fp8_attention
    assert estimate(bf16_attn).step_time_s != estimate(job).step_time_s
    assert job.plan.pp == 1
    no_dw = replace(job, plan=replace(job.plan, delay_wgrad=False))
    assert estimate(no_dw).step_time_s == estimate(job).step_time_s


def test_the_harness_rows_priced_both_ways():
    """``experiments/delay_wgrad_rows.py``: every overlap row of the three files states it
    on from the harness; off (Megatron-Core's default) costs the pipelined rows time and the
    unpipelined ones none (nothing to hide a deferred weight gradient behind)."""
    from experiments.delay_wgrad_rows import rows
    got = rows()
    assert len(got) >= 10
    for f, rid, pp, dw, why, m, stated, other in got:
        assert dw and why.startswith("the harness turns it on")
        assert (other > stated) if pp > 1 else (other == stated)
