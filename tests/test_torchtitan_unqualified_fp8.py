"""A torchtitan row that says only "fp8 linears"/"Float8" ran torchao's tensorwise dynamic
scaling (docs/calibration.md §5.142): torchtitan 9dec370 defaults every
``float8.scaling_type_*`` to "dynamic" (config_manager.py:552-568) and its Float8Handler
supports nothing else (float8.py:87). The reader gives such a row ``fp8-current``
(``FrameworkProfile.unqualified_fp8``); a row stating delayed scaling and every other
stack's plain "fp8" keep ``fp8``."""
from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from simulator.studies.validate import load_cases
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.framework import PROFILES, get_profile
from strategies.job import make_job
from strategies.reference.cases import case_from_entry, load_reference
from strategies.stacks.pytorch import TORCHTITAN

DATA = "strategies/reference/data/"
EXACT = dict(rel=1e-12, abs=0.0)


def _titan_fp8_cases() -> list:
    out = []
    for name in ("published.json", "published_2026.json"):
        for c in load_cases(DATA + name, tiers=None):
            if c.id.lower().startswith("torchtitan_2412") and c.job is not None \
                    and "fp8" in str(c.raw.get("precision") or ""):
                out.append(c)
    return out


def test_every_dec2024_float8_row_runs_current_scaling() -> None:
    cases = _titan_fp8_cases()
    # Tables 1-6's float8 rows: 8B t1/t3, the four t2 CP rows, 70B t4 x2, 405B t5 x2 and
    # t6 x4 (published.json), the two 405B rows of published_2026.json
    assert len(cases) == 16
    for c in cases:
        assert c.job.dtype == "fp8-current", c.id
        assert any(a.startswith("precision fp8 as torchtitan") and "9dec370" in a
                   for a in c.assumptions), c.id


def test_the_rows_estimate_is_current_scalings() -> None:
    """The row's estimate is the same job's at ``fp8-current`` to the last bit, and differs
    from delayed scaling's (the casts' amax pass and torchao's TP amax all-reduces)."""
    c = next(c for c in _titan_fp8_cases() if c.id == "torchtitan_2412_405B_t5_1f1b")
    j = c.job
    cur = make_job(j.model, j.cluster, j.plan, framework=j.framework, dtype="fp8-current",
                   system=j.system)
    dly = make_job(j.model, j.cluster, j.plan, framework=j.framework, dtype="fp8",
                   system=j.system)
    t = estimate(j).step_time_s
    assert t == pytest.approx(estimate(cur).step_time_s, **EXACT)
    assert t > estimate(dly).step_time_s


def test_stated_delayed_and_other_stacks_keep_fp8() -> None:
    rows = {r["id"]: r for r in load_reference()}
    row = copy.deepcopy(rows["torchtitan_2412_70B_t4_2d"])
    row["precision"] = "fp8 linears (delayed scaling)"
    assert case_from_entry(row).job.dtype == "fp8"
    # the same row under a stack whose plain fp8 is delayed scaling (the Megatron family)
    other = copy.deepcopy(rows["torchtitan_2412_70B_t4_2d"])
    other["source"]["ref"] = "Megatron-Core benchmark"
    case = case_from_entry(other)
    assert case.job is None or case.job.dtype == "fp8"
    # a NeMo (Megatron-Core) row that says "fp8" is unchanged
    nemo = case_from_entry(rows["dgxc_nemo2411_gpt3_175B_fp8_128gpu"])
    assert nemo.job.framework.name == "nemo" and nemo.job.dtype == "fp8"
    assert not any(a.startswith("precision fp8 as") for a in nemo.assumptions)


def test_profile_field_checked() -> None:
    assert {n for n, fw in PROFILES.items() if fw.unqualified_fp8 != "fp8"} == {"torchtitan"}
    assert get_profile("torchtitan-compile").unqualified_fp8 == "fp8-current"
    with pytest.raises(SpecError, match="framework.unqualified_fp8"):
        replace(TORCHTITAN, unqualified_fp8="fp8-blockwise")
    with pytest.raises(SpecError, match="framework.unqualified_fp8_source"):
        replace(TORCHTITAN, unqualified_fp8_source="")
