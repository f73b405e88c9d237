"""A reference row whose stated plan cannot fit its GPUs' memory is marked by ``paraplan
validate`` (docs/calibration.md §5.206, ``strategies.reference.stated_fit``) and kept in the
MAPE."""
from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.studies.validate import load_cases, validate_cases
from strategies.errors import SpecError
from strategies.reference.cases import DATA
from strategies.reference.stated_fit import FIT_MARGIN, StatedFit, job_fit

HW = {"gpu": "A100-SXM4-80GB", "gpus_per_node": 8, "n_gpus": 8,
      "interconnect": "DGX A100 nodes"}
SMALL = {"name": "GPT-1.7B", "layers": 24, "hidden": 2304, "heads": 24, "vocab": 51200,
         "seq_len": 2048}
# 80 layers of hidden 8192: ~65e9 parameters, whose bf16 weights alone (130 GB) exceed 80 GB
BIG = {"name": "GPT-65B", "layers": 80, "hidden": 8192, "heads": 64, "vocab": 51200,
       "seq_len": 2048}


def _entry(ident: str, model: dict) -> dict:
    return {"id": ident, "kind": "measured", "tier": 1, "source": {"ref": "test 2026"},
            "model": model, "hardware": HW,
            "plan": {"tp": 1, "pp": 1, "cp": 1, "microbatch": 1, "global_batch": 16,
                     "recompute": "selective", "zero_stage": 1},
            "precision": "bf16", "measured": {"step_time_s": 1.0}}


@pytest.fixture()
def ref(tmp_path):
    path = tmp_path / "ref.json"
    path.write_text(json.dumps([_entry("toy_fits", SMALL), _entry("toy_too_big", BIG)]))
    return str(path)


def test_the_margin_is_a_strict_bound():
    h = 80 * 2 ** 30
    assert StatedFit(h * (1 + FIT_MARGIN), h).fits
    assert not StatedFit(h * (1 + FIT_MARGIN) * (1 + 1e-12), h).fits
    assert StatedFit(3 * h, h).ratio == 3.0


@pytest.mark.parametrize("peak, hbm", [(-1.0, 1.0), (1.0, 0.0), (float("nan"), 1.0),
                                       (1.0, float("nan"))])
def test_bad_bytes_are_refused(peak, hbm):
    with pytest.raises(SpecError):
        StatedFit(peak, hbm)


def test_validate_marks_the_row_that_cannot_fit_and_keeps_it_in_the_mape(capsys, ref):
    assert main(["validate", "--json", "--no-sim", "--reference", ref]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["id"]: r for r in out["cases"]}
    small, big = rows["toy_fits"], rows["toy_too_big"]
    assert small["fits_as_stated"] is True and big["fits_as_stated"] is False
    assert big["memory_to_hbm"] > 1 + FIT_MARGIN > small["memory_to_hbm"]
    # one GPU type: the fullest stage is the peak stage, against the GPU's HBM
    for r in (small, big):
        assert r["memory_to_hbm"] == pytest.approx(r["estimated_memory_gib"] / r["hbm_gib"],
                                                   rel=1e-12)
    assert out["does_not_fit"] == {"margin": FIT_MARGIN, "count": 1, "ids": ["toy_too_big"],
                                   "in_analytic_mape": 1, "in_simulated_mape": 0}
    assert out["analytic"]["cases"] == 2      # not dropped from the MAPE
    assert main(["validate", "--no-sim", "--reference", ref]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith("toy_too_big"))
    assert line.endswith(" !")
    assert "1 runs do not fit as stated" in text and "includes 1 of them" in text


def test_the_margin_covers_the_memory_models_error_on_printed_peaks():
    """``FIT_MARGIN`` is at least the memory model's largest |error| on published.json's rows
    that print a peak (``experiments/memory_mape.py``)."""
    cases = [c for c in load_cases(DATA, None)
             if (c.raw.get("measured") or {}).get("memory_gib") is not None
             or (c.raw.get("measured") or {}).get("memory_gb") is not None]
    errs = [r["memory_error_pct"] for r in validate_cases(cases, simulate=False)
            if r["memory_error_pct"] is not None]
    assert len(errs) >= 20
    assert 100 * FIT_MARGIN >= max(map(abs, errs)) > 100 * FIT_MARGIN - 1


def test_job_fit_is_validates_figure():
    case = load_cases(DATA, (1,))[0]
    row = validate_cases([case], simulate=False)[0]
    fit = job_fit(case.job)
    assert fit.ratio == row["memory_to_hbm"] and fit.fits is row["fits_as_stated"]


# -- plan.fsdp: the reader's structured field for a stated FSDP (§5.206) ---------------------

def _zero(tmp_path, capsys, **plan) -> dict:
    e = _entry("toy", SMALL)
    e["plan"] = {**e["plan"], "zero_stage": None, **plan}
    e["notes"] = "FSDP column 0 (0: Megatron's distributed optimizer, no FSDP)."
    path = tmp_path / "ref.json"
    path.write_text(json.dumps([e]))
    assert main(["validate", "--json", "--no-sim", "--reference", str(path)]) == 0
    return json.loads(capsys.readouterr().out)["cases"][0]


def test_fsdp_is_read_from_the_plan_field_not_from_notes(tmp_path, capsys):
    # the notes name FSDP (to say there is none): no longer read as a stated FSDP
    assert _zero(tmp_path, capsys)["plan"].endswith(" z1")
    assert _zero(tmp_path, capsys, fsdp=0)["plan"].endswith(" z1")
    assert _zero(tmp_path, capsys, fsdp=8)["plan"].endswith(" z3")


@pytest.mark.parametrize("bad", [True, -1, 2.5, "8"])
def test_a_bad_fsdp_field_skips_the_row_naming_it(tmp_path, capsys, bad):
    row = _zero(tmp_path, capsys, fsdp=bad)
    assert row["plan"] is None and "plan.fsdp" in row["skipped"]
    assert "must be an integer >= 0" in row["skipped"]
