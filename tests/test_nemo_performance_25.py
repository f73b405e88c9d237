"""The hand transcription of NeMo's 25.02/25.04/25.07 performance summaries
(strategies/reference/data/nemo_performance_25.json, held out; docs/calibration.md §5.30): its
schema, each row's internal consistency (the printed tokens/s/GPU against the printed model
TFLOP/s/GPU through the model's FLOPs per token), the plan arithmetic the table prints, and
that every row resolves into a job or is skipped with the reason the entry records."""
from __future__ import annotations

import os

import pytest

from strategies.cost.flop_counts import training_flops_per_token
from strategies.reference.cases import case_from_entry, load_reference

DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                    "nemo_performance_25.json")
ROWS = load_reference(DATA)
#: rows whose printed TFLOP/s count the attention's causal half (NeMo's FLOP formulas for
#: Llama 4 and for Mixtral at 64k tokens), the rest the full square; and the two 405B rows
#: whose two printed figures disagree by 1 % (not a rounding of 3-digit figures)
CAUSAL = {"nemo2507_llama4scoutllm_gb200_64", "nemo2507_llama4scoutllm_gb200_64_paren",
          "nemo2502_mixtral8x22b_b200_256"}
LOOSE = {"nemo2504_llama3405b_gb200_128", "nemo2502_llama3405b_b200_128"}


def test_schema_and_provenance():
    assert len(ROWS) == 25
    assert len({r["id"] for r in ROWS}) == 25
    for r in ROWS:
        assert r["kind"] == "measured" and r["tier"] == 2
        assert r["release"] in ("25.02", "25.04", "25.07")
        assert r["system"] in ("DGX-GB200", "DGX-B200", "DGX-H100")
        src = r["source"]
        assert src["url"].startswith("https://docs.nvidia.com/nemo-framework/")
        assert "read 2026-11-28" in src["read"] and src["also"].startswith("model dimensions")
        assert r["release"] in src["table"] and r["system"] in src["table"]
        me = r["measured"]
        assert isinstance(me["tokens_per_s_per_gpu"], int) and me["tokens_per_s_per_gpu"] > 0
        assert "derived" not in r      # the reader derives the step time


def test_plan_arithmetic_as_printed():
    """GBS = MBS x DP x GA with DP = GPUs / (TP x PP x CP), on every row."""
    for r in ROWS:
        p, n = r["plan"], r["hardware"]["n_gpus"]
        assert p["tp"] * p["pp"] * p["cp"] * p["dp"] == n, r["id"]
        assert p["global_batch"] == p["microbatch"] * p["dp"] * p["grad_accum"], r["id"]


@pytest.mark.parametrize("r", [r for r in ROWS if "model_tflops_per_gpu" in r["measured"]],
                         ids=lambda r: r["id"])
def test_tokens_and_tflops_agree_through_the_model_flops(r):
    """Printed TFLOP/s / printed tokens/s = the model's training FLOPs per token (3 x forward:
    GEMMs, attention core, head): within 0.2 % (3-digit rounding), 1.1 % on the two 405B rows."""
    c = case_from_entry(dict(r, skip_reason=None), ROWS)
    assert c.job is not None, c.skipped
    me = r["measured"]
    printed = me["model_tflops_per_gpu"] * 1e12 / me["tokens_per_s_per_gpu"]
    model = training_flops_per_token(c.job.model, causal=r["id"] in CAUSAL)
    assert printed == pytest.approx(model, rel=0.011 if r["id"] in LOOSE else 0.002)


def test_every_row_resolves_or_says_why():
    evaluated = 0
    for r in ROWS:
        c = case_from_entry(r, ROWS)
        if r.get("skip_reason"):
            assert c.job is None and c.skipped == r["skip_reason"]
            assert r["id"].endswith("_paren")
            continue
        assert c.job is not None, (r["id"], c.skipped)
        evaluated += 1
        assert c.job.framework.name == "nemo"
        assert c.job.dtype == ("fp8" if r["release"] == "25.02" else "fp8-current")
        p = c.job.plan
        assert p.tp * p.pp * p.cp * p.dp == r["hardware"]["n_gpus"]
        assert p.vpp == r["plan"]["virtual_stages"] and p.ep == r["plan"]["ep"]
        assert p.zero == (3 if r["plan"]["zero_stage"] == 3 else 1)
        me = r["measured"]
        want = r["plan"]["global_batch"] * r["model"]["seq_len"] / (
            me["tokens_per_s_per_gpu"] * r["hardware"]["n_gpus"])
        assert c.measured_step_s == pytest.approx(want, rel=1e-15)
    assert evaluated == 21


def test_breakdown_groups_cover_every_evaluated_row():
    from experiments.nemo_performance_25 import groups, rows
    recs = rows()
    ev = [r for r in recs if r["analytic_error_pct"] is not None]
    assert len(ev) == 21
    for key in ("release", "system", "family", "moe"):
        assert sum(g[1] for g in groups(recs, key)) == 21
    assert {r["moe"] for r in ev} == {True, False}
