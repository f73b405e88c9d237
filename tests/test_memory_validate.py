"""``paraplan validate`` compares peak memory too (docs/calibration.md §5.74): the reader's
units, each row's estimated peak (the estimate's peak stage) and error, the memory MAPE, the
text's memory column, the report's memory table, and torchtitan's compiled loss."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from experiments import report_validation
from simulator.cli.main import main
from simulator.cli.validate import render
from simulator.studies.validate import mape, summarize, validate_cases
from strategies.estimate.scalar import estimate
from strategies.stacks.pytorch import TORCHTITAN
from strategies.stacks.variants import TORCHTITAN_COMPILE, TORCHTITAN_COMPILED_LOSS, compiled
from strategies.job import make_job
from strategies.memory import activations as act
from strategies.memory.scalar import peak_memory
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.reference.cases import DATA, case_from_entry, load_reference
from strategies.reference.measured import BLOOM_MEMORY, measured_memory_gib
from tests.memory_checks import assert_arrays_match_scalar
from tests.test_validate_cli import ENTRIES, _entry
from topologies.cluster import cluster_preset

GIB = 2 ** 30
HELDOUT = os.path.join(os.path.dirname(DATA), "heldout_2026b.json")


def _row(measured: dict, ref: str = "test 2024") -> dict:
    return {"source": {"ref": ref}, "measured": measured}


def test_reader_units():
    """GiB as printed; ``memory_gb`` in its stated unit (GB is 1e9 bytes); no unit: GiB, with
    BigScience's reading stated; an unknown unit or no figure reads nothing."""
    assert measured_memory_gib(_row({"memory_gib": 47.96}))[0] == 47.96
    gib, how = measured_memory_gib(_row({"memory_gib": 82.5}, "pytorch/torchtitan x"))
    assert gib == 82.5 and "reserved_bytes.all.peak" in how
    assert measured_memory_gib(_row({"memory_gb": 82.4, "memory_unit": "GiB (max over GPUs)"})
                               )[0] == 82.4
    assert measured_memory_gib(_row({"memory_gb": 80.0, "memory_unit": "GB"}))[0] == \
        pytest.approx(80e9 / GIB, rel=1e-15)
    assert measured_memory_gib(_row({"memory_gb": 29}, "bigscience-workshop/bigscience x")) \
        == (29.0, BLOOM_MEMORY)
    gib, how = measured_memory_gib(_row({"memory_gb": 29}))
    assert gib == 29.0 and "unit not stated" in how
    assert measured_memory_gib(_row({"memory_gb": 29, "memory_unit": "MB"})) == \
        (None, "memory_unit 'MB' not read (GiB or GB)")
    assert measured_memory_gib(_row({"memory_gb": None})) == (None, "")
    assert measured_memory_gib(_row({"step_time_s": 1.0})) == (None, "")


def test_rows_carry_memory_and_its_error():
    """A row printing its peak gets the estimate's peak stage and the signed error; a row
    without one gets None (and the estimate's peak all the same); the summary's memory MAPE
    is over the first kind only; the text shows the memory column only when some row has one."""
    with_mem = _entry("tiny_mem", 1.0, tp=2, pp=4, global_batch=32, schedule="1F1B")
    with_mem["measured"]["memory_gb"] = 20.0
    with_mem["measured"]["memory_unit"] = "GB"
    entries = [with_mem, ENTRIES[2]]
    rows = validate_cases([case_from_entry(e, entries) for e in entries], simulate=False)
    mem, plain = rows
    job = case_from_entry(with_mem).job
    peak = estimate(job).memory.total / GIB
    assert peak == peak_memory(job)[1].total / GIB
    assert mem["measured_memory_gib"] == pytest.approx(20e9 / GIB, rel=1e-15)
    assert mem["estimated_memory_gib"] == peak
    assert mem["memory_error_pct"] == pytest.approx(100 * (peak / (20e9 / GIB) - 1), rel=1e-12)
    assert plain["measured_memory_gib"] is None and plain["memory_error_pct"] is None
    assert plain["estimated_memory_gib"] > 0
    out = summarize(rows, simulate=False)
    assert out["memory"]["cases"] == 1
    assert out["memory"]["mape_pct"] == pytest.approx(abs(mem["memory_error_pct"]))
    text = render({"reference": "x", "tiers": "all", "wall_s": 0.0, **out})
    assert "mem meas" in text and "memory     MAPE" in text
    out = summarize([plain], simulate=False)
    assert out["memory"]["mape_pct"] is None
    text = render({"reference": "x", "tiers": "all", "wall_s": 0.0, **out})
    assert "mem meas" not in text and "memory" not in text.split("\n")[-2]


@pytest.mark.slow
def test_validate_json_on_the_shipped_rows(capsys):
    """``paraplan validate --json`` on the held-out file: its two rows with a printed peak
    (torchtitan June 2025, H200) carry the figures, and the memory MAPE is theirs."""
    assert main(["validate", "--reference", HELDOUT, "--no-sim", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    got = {r["id"]: r for r in out["cases"] if r["memory_error_pct"] is not None}
    assert set(got) == {"torchtitan_2506_8b_h200_32gpu_fp8", "torchtitan_2506_8b_h200_64gpu_fp8"}
    assert got["torchtitan_2506_8b_h200_32gpu_fp8"]["measured_memory_gib"] == 47.96
    assert out["memory"]["mape_pct"] == pytest.approx(
        mape(r["memory_error_pct"] for r in got.values()), rel=1e-12)
    for r in got.values():
        assert "torch.compile run" in r["memory_how_measured"]
        assert abs(r["memory_error_pct"]) < 10      # 38 % before the compiled loss (§5.74)


def _job(fw, plan="tp=1,pp=1,dp=8,mbs=2,gbs=16,zero=3,recompute=op"):
    m = replace(model_preset("llama3.1-8b"), seq_length=8192)
    return make_job(m, cluster_preset("dgx-h100", 1), parse_plan(plan), framework=fw)


def test_compiled_loss_closed_form():
    """torchtitan's loss compiled with the model holds 4 bytes per logit element (the 16-bit
    logits and their 16-bit gradient) where its eager loss holds 12 (16 under TP):
    ``8·s·b·V/t`` (``12·s·b·V/t``) fewer on the rank holding the head, nothing else moved; the
    time passes are unchanged."""
    assert TORCHTITAN_COMPILE.loss is TORCHTITAN_COMPILED_LOSS
    assert TORCHTITAN_COMPILED_LOSS.peak_bytes == 4.0 and TORCHTITAN.loss.peak_bytes == 12.0
    assert (TORCHTITAN_COMPILED_LOSS.fwd, TORCHTITAN_COMPILED_LOSS.bwd) == \
        (TORCHTITAN.loss.fwd, TORCHTITAN.loss.bwd)
    # eager: 12 at tp 1, loss_parallel's 16 at tp > 1 (test_loss_parallel_closed_form)
    for plan, tp, fewer in (("tp=1,pp=1,dp=8,mbs=2,gbs=16,zero=3,recompute=op", 1, 8),
                            ("tp=2,sp=true,pp=2,dp=2,mbs=1,gbs=16,zero=2,schedule=1f1b", 2, 12)):
        comp = _job(TORCHTITAN_COMPILE, plan)
        eager = replace(comp, framework=replace(comp.framework, loss=TORCHTITAN.loss))
        s, b, v = comp.seq_len, comp.plan.mbs, comp.model.vocab_size
        last = comp.plan.pp - 1
        got = (act.transient_activation_bytes(eager, last)
               - act.transient_activation_bytes(comp, last))
        assert got == pytest.approx(fewer * s * b * v / tp, rel=1e-12)
        if comp.plan.pp > 1:
            assert act.transient_activation_bytes(eager, 0) == \
                act.transient_activation_bytes(comp, 0)
        assert estimate(eager).step_time_s == estimate(comp).step_time_s


def test_loss_parallel_closed_form():
    """torchtitan's eager loss under TP runs loss_parallel's DTensor handlers: 16 bytes per
    logit element (saved fp32 log_softmax, zeros_like, their sum with exp, the product), 4 more
    than the unsharded 12: ``4·s·b·V/t`` on the rank holding the head; at tp 1 nothing moves;
    ``peak_bytes_at`` reads numbers and arrays alike; the step time is unchanged."""
    import numpy as np
    assert TORCHTITAN.loss.peak_bytes_at(1) == 12.0 and TORCHTITAN.loss.peak_bytes_at(8) == 16.0
    assert list(TORCHTITAN.loss.peak_bytes_at(np.array([1, 2, 8]))) == [12.0, 16.0, 16.0]
    assert TORCHTITAN_COMPILED_LOSS.peak_bytes_at(8) == 4.0
    from strategies.stacks.passes import LossPasses
    with pytest.raises(Exception, match="peak_bytes_sharded"):
        LossPasses(peak_bytes_sharded=1.0)
    for plan, tp in (("tp=2,sp=true,pp=2,dp=2,mbs=1,gbs=16,zero=2,schedule=1f1b", 2),
                     ("tp=8,sp=true,pp=1,dp=1,mbs=1,gbs=8,zero=3,recompute=full", 8)):
        job = _job(TORCHTITAN, plan)
        flat = replace(job, framework=replace(job.framework, loss=replace(
            TORCHTITAN.loss, peak_bytes_sharded=None)))
        s, b, v = job.seq_len, job.plan.mbs, job.model.vocab_size
        last = job.plan.pp - 1
        got = act.transient_activation_bytes(job, last) - act.transient_activation_bytes(flat, last)
        assert got == pytest.approx(4 * s * b * v / tp, rel=1e-12)
        assert estimate(job).step_time_s == estimate(flat).step_time_s
    one = _job(TORCHTITAN)
    flat = replace(one, framework=replace(one.framework, loss=replace(
        TORCHTITAN.loss, peak_bytes_sharded=None)))
    assert act.transient_activation_bytes(one, 0) == act.transient_activation_bytes(flat, 0)


@pytest.mark.parametrize("fw", [TORCHTITAN_COMPILE, TORCHTITAN])
@pytest.mark.parametrize("plan", ["tp=1,pp=1,dp=8,mbs=2,gbs=16,zero=3,recompute=op",
                                  "tp=2,sp=true,pp=2,dp=2,mbs=1,gbs=16,zero=2,schedule=1f1b",
                                  "tp=8,sp=true,pp=1,dp=1,mbs=1,gbs=8,zero=3,recompute=full"])
def test_loss_arrays_equal_scalar(plan, fw):
    """The search prunes with the same bytes: its arrays, given the stack's loss (its figure
    at each tp), are ``memory_by_stage``, compiled and eager, with and without TP."""
    assert_arrays_match_scalar(_job(fw, plan))


def test_search_reads_the_loss_at_each_tp():
    """The search's pruning passes the stack's loss to the arrays: a torchtitan space's peaks
    equal the scalar model's for its plans with tp > 1 (loss_parallel's 16 bytes)."""
    from strategies.search.space import enumerate_space
    m = replace(model_preset("llama3.1-8b"), seq_length=8192)
    cluster = cluster_preset("dgx-h100", 1)
    space = enumerate_space(m, cluster, 16, framework=TORCHTITAN)
    rows = [i for i in range(space.size) if space.cols["tp"][i] > 1][:6]
    assert rows
    for i in rows:
        job = make_job(m, cluster, space.plan(i), framework=TORCHTITAN)
        assert float(space.peak_memory[i]) == pytest.approx(peak_memory(job)[1].total,
                                                            rel=1e-9)


def test_reader_dates_the_loss():
    """Compiled torchtitan rows from benchmarks before 2025-04 (9dec370: the loss's compile
    commented out) keep the eager 12 bytes; the June 2025 ones get the compiled 4."""
    pub = load_reference(DATA)
    dec = case_from_entry(next(r for r in pub if r["id"] == "torchtitan_2412_8B_t1_fsdp_compile"),
                          pub)
    assert dec.job.framework.elementwise_kernels == "compiled"
    assert dec.job.framework.loss is TORCHTITAN.loss
    assert any("loss eager under torch.compile (benchmark of 2024-12" in a
               for a in dec.assumptions)
    held = load_reference(HELDOUT)
    jun = case_from_entry(next(r for r in held if r["id"] == "torchtitan_2506_8b_h200_32gpu_fp8"),
                          held)
    assert jun.job.framework.loss is TORCHTITAN_COMPILED_LOSS
    eager = case_from_entry(next(r for r in pub if r["id"] == "torchtitan_2412_8B_t1_fsdp"), pub)
    assert eager.job.framework.loss is TORCHTITAN.loss
    assert compiled(TORCHTITAN_COMPILE) is TORCHTITAN_COMPILE


def test_report_memory_table():
    """The report's memory table: one row per run with a printed peak, the file's memory
    MAPE, nothing for files without one."""
    rows = [{"id": "a", "plan": "tp1", "measured_memory_gib": 40.0, "estimated_memory_gib": 44.0,
             "memory_error_pct": 10.0, "memory_how_measured": "GiB as printed"},
            {"id": "b", "plan": "tp2", "measured_memory_gib": 50.0, "estimated_memory_gib": 45.0,
             "memory_error_pct": -10.0,
             "memory_how_measured": "GiB; torch.compile run: eager"},
            {"id": "c", "plan": "tp4", "measured_memory_gib": None, "estimated_memory_gib": 9.0,
             "memory_error_pct": None, "memory_how_measured": None},
            {"id": "d", "plan": None}]
    out = {"reference": "f.json", "cases": rows,
           "memory": {"cases": 2, "mape_pct": 10.0, "mean_error_pct": 0.0,
                      "max_abs_error_pct": 10.0}}
    md = report_validation.render_memory([out, {"reference": "g.json", "cases": rows[2:]}])
    assert "## Peak memory per GPU" in md and "`g.json`" not in md
    assert "Memory 2 runs: MAPE 10.00 %, mean signed 0.00 %, worst 10.0 %." in md
    assert "| a | tp1 | 40.0 | 44.0 | 10.0 % | no |" in md
    assert "| b | tp2 | 50.0 | 45.0 | -10.0 % | yes |" in md
    assert "| c |" not in md
    assert report_validation.render_memory([{"reference": "g.json", "cases": rows[2:]}]) == ""
