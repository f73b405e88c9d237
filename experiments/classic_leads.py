"""The classic published runs (``strategies/reference/data/classic_papers.json``: MT-NLG 530B,
BloombergGPT, GLM-130B): the figures behind docs/calibration.md §5.20 (an analysis; the model
is not changed).

Three tables, all analytic (``strategies.estimate.scalar.estimate``):

1. ``stacks``: each row's error under its filed profile and under the other profiles that
   can run its plan, so the filed stack can be read against the rest.
2. ``per-microbatch``: MT-NLG's three rows are one model and pipeline at a fixed batch (1920)
   over dp = 8, 10, 12, so ``step = a + b·M`` (``M = 1920/dp`` micro-batches per pipeline,
   ``b`` one micro-batch through the busiest stage, ``a`` what is paid once per step: the
   pipeline's fill and drain, the exposed data-parallel reduction, the optimizer); the
   least-squares ``a``, ``b`` of the measured and of the estimated steps say which the model
   misses.
3. ``bloomberg-mbs``: BloombergGPT's step under each micro-batch (not stated; 4 sequences per
   GPU per step): ZeRO-3 gathers the parameters again for every micro-batch.
4. ``mtnlg-mbs``: MT-NLG's error under each micro-batch (not stated).
5. ``same-model``: the 530B model on 2,240 Selene GPUs, tp8 pp35 dp8, under two stacks:
   Narayanan et al. 2021's Megatron-LM row (``published.json``,
   ``narayanan2021_t2_ptdp_530B_2240gpu``, batch 2240) and MT-NLG's Megatron-DeepSpeed
   (batch 1920): seconds per sequence measured and estimated, and their ratio.

Run:
    python experiments/classic_leads.py
"""
from __future__ import annotations

import copy
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate.scalar import estimate                             # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference      # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data", "classic_papers.json")
PROFILES = ("megatron-deepspeed", "megatron-lm-2021", "megatron-core", "pytorch-eager")


def _step(entry: dict, rows: list[dict], **plan) -> tuple[float | None, float]:
    """(estimated step or None where the variant does not resolve, measured step)."""
    c = copy.deepcopy(entry)
    fw = plan.pop("framework", None)
    if fw:
        c["framework"] = fw
    c["plan"].update(plan)
    case = case_from_entry(c, rows)
    if case.skipped:
        return None, float(case.measured_step_s or 0.0)
    return float(estimate(case.job).step_time_s), float(case.measured_step_s)


def stacks(rows: list[dict]) -> list[str]:
    out = ["row | filed | " + " | ".join(PROFILES), "--- | --- | " + " | ".join("---" for _ in PROFILES)]
    for r in rows:
        cells = []
        for fw in PROFILES:
            est, meas = _step(r, rows, framework=fw)
            cells.append("-" if est is None else f"{100 * (est / meas - 1):+.1f} %")
        out.append(f"{r['id']} | {r.get('framework')} | " + " | ".join(cells))
    errs: dict[str, list[float]] = {}
    for r in rows:
        est, meas = _step(r, rows)
        errs.setdefault(str(r.get("framework")), []).append(est / meas - 1)
    out.append("")
    out += [f"filed {fw}: MAPE {100 * np.mean(np.abs(e)):.1f} % over {len(e)} (mean "
            f"{100 * np.mean(e):+.1f} %)" for fw, e in sorted(errs.items())]
    return out


def per_microbatch(rows: list[dict]) -> list[str]:
    mt = [r for r in rows if r["id"].startswith("mtnlg_")]
    M = np.array([1920 / r["plan"]["dp"] for r in mt])
    meas, est = [], []
    for r in mt:
        e, m = _step(r, rows)
        meas.append(m)
        est.append(e)
    A = np.vstack([np.ones_like(M), M]).T
    (am, bm), (ae, be) = (np.linalg.lstsq(A, np.array(y), rcond=None)[0] for y in (meas, est))
    return ["series | a (s, once per step) | b (ms per micro-batch)",
            "--- | --- | ---",
            f"measured | {am:.2f} | {1e3 * bm:.1f}",
            f"estimated | {ae:.2f} | {1e3 * be:.1f}"]


def bloomberg_mbs(rows: list[dict]) -> list[str]:
    b = next(r for r in rows if r["id"].startswith("bloomberggpt"))
    out = ["micro-batch | micro-batches | step (s) | error", "--- | --- | --- | ---"]
    for mbs in (1, 2, 4):
        est, meas = _step(b, rows, microbatch=mbs)
        out.append(f"{mbs} | {4 // mbs} | {est:.2f} | {100 * (est / meas - 1):+.1f} %")
    return out


def mtnlg_mbs(rows: list[dict]) -> list[str]:
    out = ["row | mbs 1 (filed) | mbs 2 | mbs 4", "--- | --- | --- | ---"]
    for r in (r for r in rows if r["id"].startswith("mtnlg_")):
        cells = []
        for mbs in (1, 2, 4):
            est, meas = _step(r, rows, microbatch=mbs)
            cells.append(f"{100 * (est / meas - 1):+.1f} %")
        out.append(f"{r['id']} | " + " | ".join(cells))
    return out


def same_model(rows: list[dict]) -> list[str]:
    pub = load_reference(os.path.join(os.path.dirname(DATA), "published.json"))
    nar = next(r for r in pub if r["id"] == "narayanan2021_t2_ptdp_530B_2240gpu")
    mt = next(r for r in rows if r["id"] == "mtnlg_530b_2240gpu")
    out = ["run | stack | batch | measured s/seq | estimated s/seq", "--- | --- | --- | --- | ---"]
    per = {}
    for r, sib in ((nar, pub), (mt, rows)):
        case = case_from_entry(r, sib)
        est = float(estimate(case.job).step_time_s)
        gbs = case.job.plan.gbs
        per[r["id"]] = (case.measured_step_s / gbs, est / gbs)
        out.append(f"{r['id']} | {case.job.framework.name} | {gbs} | "
                   f"{1e3 * case.measured_step_s / gbs:.2f} ms | {1e3 * est / gbs:.2f} ms")
    (mn, en), (mm, em) = per[nar["id"]], per[mt["id"]]
    out.append(f"MT-NLG / Megatron-LM | | | {mm / mn:.3f} | {em / en:.3f}")
    return out


def main() -> int:
    rows = load_reference(DATA)
    for title, table in (("stacks", stacks(rows)), ("per-microbatch", per_microbatch(rows)),
                         ("bloomberg-mbs", bloomberg_mbs(rows)), ("mtnlg-mbs", mtnlg_mbs(rows)),
                         ("same-model", same_model(rows))):
        print(f"## {title}\n")
        print("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
