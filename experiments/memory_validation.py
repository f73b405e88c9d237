"""The memory model against published peak memory (docs/calibration.md §5.19).

Two kinds of evidence, each row with its plan:

1. ``measured``: the reference rows that print a per-GPU peak (``measured.memory_gb`` or
   ``memory_gib`` in ``strategies/reference/data/published.json`` and ``published_2026.json``:
   torchtitan's December 2024 tables, max reserved GiB over the GPUs; BigScience's BLOOM
   prototype runs, nvidia-smi's used memory, its unit not stated: read in GiB, and every unit
   normalised, by ``strategies.reference.measured.measured_memory_gib``). The model's peak is
   ``strategies.memory.scalar.peak_memory`` of the row's job (``reference.cases``), the
   same function ``estimate``, the search's pruning (its array form) and the simulator read.
2. ``statements``: a source saying a plan ran (``experiments/memory_validation.json``: Llama 3
   405B's three Table 4 plans, Dubey et al. 2024 §3.3.2). The model should say they fit;
   printed with the margin against the GPU's HBM, and the margin of the allocated bytes alone
   (the peak less the model's allowances: the fixed ``other`` and the fragmentation fraction
   of the activations, ``SystemConfig``).

Rows the case builder skips, torch.compile runs (Inductor decides what is saved; the case
builder prices their time compiled, docs/calibration.md §5.69, their memory as eager) and the
file's ``excluded`` rows are listed, not compared.

3. ``--refused``: every reference file's runs the model says do not fit (they ran), with the
   overshoot and whether the row states its recomputation.

Run:
    python experiments/memory_validation.py            # the table
    python experiments/memory_validation.py --refused  # and part 3
    python experiments/memory_validation.py --json     # one JSON object
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.memory.scalar import peak_memory                           # noqa: E402
from strategies.reference.cases import (case_from_entry, load_reference,      # noqa: E402
                                       run_file_names)
from strategies.reference.measured import measured_memory_gib               # noqa: E402

DATA = os.path.join(ROOT, "strategies", "reference", "data")
STATEMENTS = os.path.join(ROOT, "experiments", "memory_validation.json")
MEASURED_FILES = ("published.json", "published_2026.json")
GIB = 2 ** 30


def _plan_text(job) -> str:
    p = job.plan
    parts = [f"tp{p.tp} pp{p.pp} dp{p.dp}"]
    if p.cp > 1:
        parts.append(f"cp{p.cp}")
    parts.append(f"mbs{p.mbs} gbs{p.gbs} seq{job.seq_len} z{p.zero} {p.schedule}")
    if p.vpp and p.vpp > 1:
        parts.append(f"v{p.vpp}")
    parts.append(f"rc={p.recompute}{' sp' if p.sp else ''} {job.dtype} {job.framework.name}")
    return " ".join(parts)


def _model_row(job) -> dict[str, Any]:
    """The model's peak stage of ``job``: total, its kinds, and the allowances in it."""
    stage, b = peak_memory(job)
    sy = job.system
    allowance = sy.fixed_other_bytes + sy.fragmentation * b.activations
    return {"stage": stage, "model_gib": b.total / GIB,
            "parts_gib": {k: v for k, v in b.to_gib_dict().items() if k != "peak_gib"},
            "allocated_gib": (b.total - allowance) / GIB,
            "hbm_gib": job.cluster.min_hbm_bytes / GIB, "plan": _plan_text(job)}


def statements() -> dict[str, Any]:
    with open(STATEMENTS) as f:
        return json.load(f)


def excluded_ids() -> set[tuple[str, str]]:
    """``(file, id prefix)`` of the rows the statements file excludes (its ``excluded`` keys
    of the form ``"FILE PREFIX*"``)."""
    return {(k.split()[0], k.split()[-1].rstrip("*"))
            for k in statements()["excluded"] if k.endswith("*")}


def measured_rows() -> list[dict[str, Any]]:
    """Every reference row with a published peak: the model beside it, or why not."""
    prefixes = excluded_ids()
    out = []
    for name in MEASURED_FILES:
        rows = load_reference(os.path.join(DATA, name))
        for r in rows:
            value, unit = measured_memory_gib(r)    # the reader's units (§5.74)
            if value is None:
                continue
            row = {"id": r["id"], "file": name, "published_gib": value, "unit": unit,
                   "source": f"{r['source'].get('ref')}, {r['source'].get('table')}"}
            if any(f == name and r["id"].startswith(p) for f, p in prefixes):
                row["skipped"] = "excluded (experiments/memory_validation.json)"
                out.append(row)
                continue
            case = case_from_entry(r, rows)
            if case.job is None:
                row["skipped"] = case.skipped
                out.append(row)
                continue
            if case.job.framework.elementwise_kernels == "compiled":   # §5.69: time only
                row["skipped"] = ("torch.compile: Inductor decides what is saved; the memory "
                                  "model is the eager one")
                out.append(row)
                continue
            row.update(_model_row(case.job))
            row["error_pct"] = 100.0 * (row["model_gib"] / row["published_gib"] - 1.0)
            out.append(row)
    return out


def statement_rows() -> list[dict[str, Any]]:
    """Each statement's plan: the model's peak, whether it fits, and both margins."""
    out = []
    for st in statements()["statements"]:
        rows = load_reference(os.path.join(DATA, st["reference"]))
        entry = next(r for r in rows if r["id"] == st["row"])
        job = case_from_entry(entry, rows).job
        row = {"id": st["row"], "claim": st["claim"], "source": st["source"]}
        row.update(_model_row(job))
        row["margin_gib"] = row["hbm_gib"] - row["model_gib"]
        row["allocated_margin_gib"] = row["hbm_gib"] - row["allocated_gib"]
        row["model_fits"] = row["margin_gib"] >= 0
        out.append(row)
    return out


def refused_runs(files: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every reference file's runs (a published run ran, so it fit its GPUs): per file the
    runs built and those the model says do not fit, with the overshoot in GiB. A refusal is
    a memory-model error or an assumption of the row's filling (recomputation, offloading
    not stated)."""
    files = files or run_file_names(DATA)
    out = {}
    for name in files:
        rows = load_reference(os.path.join(DATA, name))
        built, refused = 0, []
        for r in rows:
            if r.get("kind", "measured") != "measured":
                continue
            case = case_from_entry(r, rows)
            if case.job is None:
                continue
            built += 1
            _, b = peak_memory(case.job)
            over = (b.total - case.job.cluster.min_hbm_bytes) / GIB
            if over > 0:
                stated = [a for a in case.assumptions if a.startswith("recompute=")]
                refused.append({"id": r["id"], "over_gib": over, "plan": _plan_text(case.job),
                                "recompute": stated[0] if stated else "stated"})
        out[name] = {"runs": built, "refused": sorted(refused, key=lambda x: -x["over_gib"])}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--refused", action="store_true",
                    help="also part 3: every reference file's runs the model says do not fit")
    args = ap.parse_args(argv)
    meas, stat = measured_rows(), statement_rows()
    refused = refused_runs() if args.refused else None
    if args.json:
        out = {"measured": meas, "statements": stat}
        if refused is not None:
            out["refused"] = refused
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    print("1. Published peak memory per GPU against the model (GiB; error = model/published - 1)")
    print(f"{'row':42s} {'published':>9s} {'model':>7s} {'error':>8s}  stage  plan")
    for r in meas:
        if "skipped" in r:
            continue
        print(f"{r['id']:42s} {r['published_gib']:9.1f} {r['model_gib']:7.1f} "
              f"{r['error_pct']:+7.1f}%  {r['stage']:5d}  {r['plan']}")
    print("   not compared: " + "; ".join(f"{r['id']} ({r['skipped']})" for r in meas
                                          if "skipped" in r))
    print("\n2. Plans a source says ran: the model's peak against HBM (GiB)")
    print(f"{'row':34s} {'model':>6s} {'HBM':>6s} {'fits':>5s} {'margin':>7s} "
          f"{'allocated':>9s} {'margin':>7s}  plan")
    for r in stat:
        print(f"{r['id']:34s} {r['model_gib']:6.2f} {r['hbm_gib']:6.2f} "
              f"{str(r['model_fits']):>5s} {r['margin_gib']:+7.2f} {r['allocated_gib']:9.2f} "
              f"{r['allocated_margin_gib']:+7.2f}  {r['plan']}")
        print("   parts: " + ", ".join(f"{k[:-4]} {v:.2f}" for k, v in r["parts_gib"].items()))
    if refused is not None:
        print("\n3. Published runs the model says do not fit (they ran): per reference file")
        for name, r in refused.items():
            print(f"{name:28s} {len(r['refused']):3d} of {r['runs']:3d} runs refused")
            for x in r["refused"][:5]:
                print(f"   {x['id']:44s} +{x['over_gib']:6.1f} GiB  {x['plan']}  "
                      f"[{x['recompute'][:60]}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
