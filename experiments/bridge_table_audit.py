#!/usr/bin/env python
"""Every Megatron-Bridge performance-table row of the reference files checked cell by cell
against the table it cites, read from a Megatron-Bridge clone at the row's commit
(calibration §5.214): the row is found by its container section, system (or model) heading,
GPU count, batch, precision and model; then its micro-batch, tp, pp, cp, vp, ep, sequence
length, tokens/s/GPU, model TFLOP/s/GPU, the derived step ``gbs x seq / (tokens/s/GPU x
GPUs)``, dp and gradient accumulation are compared with the record's. A parenthesised
cell (the 25.09/25.11 tables' FP8-MX variant) is read for the MXFP8 row.

    python experiments/bridge_table_audit.py --clone PATH     # a few seconds

Prints one line per row: ``ok`` or ``differs`` with each differing field (record vs table)
and the table's ``file@commit:line``; then the counts. Rows whose record cites no table of
the clone are listed as ``not found``. Then, per model and sequence length, the FLOPs per
token NVIDIA's two cells imply (model TFLOP/s/GPU / tokens/s/GPU; one count per model, so
a misread cell stands out) beside the model FLOPs paraplan counts for the record's
config (``strategies.cost.flop_counts.model_flops_per_step``), and every row more than 2 %
from its model's median. Last, per container section of the archive, how many of its
pre-training tokens/s cells a bfloat16 holds exactly (8 significant bits: by chance about
one in 2**(digits-8)): a column written through a bf16 carries up to 2**-9 of rounding.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "strategies", "reference", "data")
#: the commit the transcribers read where a row's source names none
DEFAULT_COMMIT = "067f987df03b"
SYSTEMS = {"H100 SXM": "DGX-H100", "B200": "DGX-B200", "B300": "DGX-B300",
           "GB200": "DGX-GB200", "GB300": "DGX-GB300"}
PRECISIONS = {"fp8": ("FP8", "FP8-CS"), "mxfp8": ("MXFP8", "FP8-MX"), "bf16": ("BF16",),
              "nvfp4": ("NVFP4",)}


def bridge_rows():
    """Each Megatron-Bridge row of the reference files with a plan: (file name, the file's
    rows, the row)."""
    for f in sorted(glob.glob(os.path.join(DATA, "*.json"))):
        rows = json.load(open(f))
        if not isinstance(rows, list):
            continue
        for r in rows:
            if "Megatron-Bridge" in str((r.get("source") or {}).get("ref", "")) and "plan" in r:
                yield os.path.basename(f), rows, r


def tables(text: str) -> dict[tuple[str, str], tuple[list[str], list[tuple[int, list[str]]]]]:
    """The pre-training tables of a performance-summary page: ``(container, heading)`` to
    (header cells, [(line number, cells)])."""
    out: dict = {}
    rel = head = sec = None
    hdr: list[str] | None = None
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"## (\S+) NeMo Container", line)
        if m:
            rel = m.group(1)
            continue
        if line.startswith("### "):
            sec = line
            continue
        m = re.match(r"####\s+(?:Model|System):\s*(.+)", line)
        if m:
            head, hdr = m.group(1).strip(), None
            continue
        if not line.startswith("|") or "Pre-Training" not in (sec or ""):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if hdr is None:
            hdr = cells
        elif not set(cells[0]) <= set("-: "):
            out.setdefault((rel, head), (hdr, []))[1].append((i, cells))
    return out


def cell(text: str, mx: bool) -> str:
    """A cell without footnote marks; of ``a (b)`` the ``b`` for an MXFP8 row, else ``a``."""
    text = re.sub(r"\[\^[^\]]*\]", "", text).strip()
    m = re.match(r"([^()]*?)\s*\(([^)]*)\)", text)
    return (m.group(2) if mx else m.group(1)).strip() if m else text


def _num(text: str) -> float | None:
    return None if text in ("n/a", "") else float(text)


def _model_key(name: str) -> str:
    return re.sub(r"\(.*?\)|[^a-z0-9]", "", name.lower())


def compare(r: dict, c: dict[str, str], mx: bool) -> list[str]:
    """The fields where record ``r`` and table cells ``c`` disagree, as ``field: record X
    vs table Y``."""
    p, n, ms = r["plan"], r["hardware"]["n_gpus"], r["measured"]
    v = {k: cell(x, mx) for k, x in c.items()}
    seq, tok = int(v["Sequence Length"]), _num(v["Tokens / sec / GPU"])
    dp = n // (p["tp"] * p["pp"] * p["cp"])
    pairs = [("mbs", p["microbatch"], int(v["MBS"])), ("tp", p["tp"], int(v["TP"])),
             ("pp", p["pp"], int(v["PP"])), ("cp", p["cp"], int(v["CP"])),
             ("vp", p.get("virtual_stages") or 1, int(_num(v["VP"]) or 1)),
             ("ep", p.get("ep") or 1, int(_num(v["EP"]) or 1)),
             ("seq", r["model"].get("seq_len"), seq),
             ("tokens/s/GPU", ms.get("tokens_per_s_per_gpu"), tok),
             ("TFLOP/s/GPU", ms.get("tflops_per_gpu"), _num(v["Model TFLOP / sec / GPU"])),
             ("dp", p.get("dp"), dp)]
    out = [f"{f}: record {a} vs table {b}" for f, a, b in pairs if a != b]
    ga = p["global_batch"] // (dp * p["microbatch"])
    if p.get("grad_accum") != ga:
        out.append(f"grad_accum: record {p.get('grad_accum')} vs gbs/(dp x mbs) {ga}")
    if "GA" in v and int(v["GA"]) != ga:
        out.append(f"the table's GA cell {v['GA']} vs its gbs/(dp x mbs) {ga}")
    step = p["global_batch"] * seq / (tok * n)
    got = (r.get("derived") or {}).get("step_time_s") or ms.get("step_time_s")
    if abs(got - step) > 1e-3 * step:
        out.append(f"step: record {got} vs table {step:.4f}")
    return out


def _precision(r: dict) -> str:
    return str(r.get("precision")).split()[0].lower()


def find_row(tabs: dict, rel: str, r: dict) -> tuple[int, dict[str, str]] | None:
    """The one table row of container ``rel`` that is record ``r``'s (system, GPU count,
    batch, model, precision; the record's quoted row where two match): (line, cells)."""
    want = (SYSTEMS.get(r["hardware"]["gpu"], r["hardware"]["gpu"]), r["hardware"]["n_gpus"],
            r["plan"]["global_batch"])
    found = []
    for (crel, head), (hdr, body) in tabs.items():
        for line, cells in body:
            c = dict(zip(hdr, cells))
            got = (c.get("System", head), int(c["#-GPUs"]), int(c["GBS"]))
            pc = c.get("Precision")
            if crel == rel and got == want \
                    and _model_key(c.get("Model", head))[:6] in _model_key(r["model"]["name"]) \
                    and (pc is None or "(" in pc or pc in PRECISIONS.get(_precision(r), ())):
                found.append((line, c))
    row = str(r["source"].get("row") or "").strip()
    if row and len(found) > 1:
        found = [x for x in found if "| " + " | ".join(x[1].values()) + " |" == row]
    return found[0] if len(found) == 1 else None


def audit(clone: str) -> tuple[int, int, int]:
    """Print each Bridge row's check; return (agree, differ, not found)."""
    cache: dict = {}

    def page(commit: str, path: str) -> dict:
        if (commit, path) not in cache:
            text = subprocess.run(["git", "-C", clone, "show", f"{commit}:{path}"],
                                  capture_output=True, text=True).stdout
            cache[commit, path] = tables(text)
        return cache[commit, path]

    counts = [0, 0, 0]
    for fname, _, r in bridge_rows():
        src = r["source"]
        t = str(src.get("table", ""))
        m = re.search(r"(docs/[\w\-./]+\.md) \(([\d.]+) NeMo container\)", t)
        cm = re.search(r"commit ([0-9a-f]{7,40})", t)
        commit = cm.group(1) if cm else DEFAULT_COMMIT
        hit = None
        if m:
            path, rel = m.group(1), m.group(2)
            tabs = page(commit, path)
            if not any(k[0] == rel for k in tabs):      # an older release: the archive
                path = "docs/performance-summary-archive.md"
                tabs = page(commit, path)
            hit = find_row(tabs, rel, r)
        where = f"{r['id']} ({fname})"
        if hit is None:
            counts[2] += 1
            print(f"not found  {where}")
            continue
        diff = compare(r, hit[1], _precision(r) == "mxfp8")
        counts[1 if diff else 0] += 1
        print(f"{'differs' if diff else 'ok':10} {where} {path}@{commit}:{hit[0]}"
              + (": " + "; ".join(diff) if diff else ""))
    return tuple(counts)


def flop_ratios() -> None:
    """Per model and sequence length: NVIDIA's FLOPs per token (min-max over its rows),
    paraplan's over NVIDIA's, and each row more than 2 % from the model's median."""
    import sys
    sys.path.insert(0, ROOT)
    from strategies.cost.flop_counts import model_flops_per_step
    from strategies.reference.entry_specs import entry_model, filled_model
    by: dict = {}
    for _, rows, r in bridge_rows():
        m = r.get("measured") or {}
        if m.get("tokens_per_s_per_gpu") and m.get("tflops_per_gpu"):
            notes: list[str] = []
            mo = filled_model(r, notes, rows)
            gbs = r["plan"]["global_batch"]
            ours = float(model_flops_per_step(entry_model(mo, r, notes), gbs)) / (
                gbs * mo["seq_len"])
            nv = m["tflops_per_gpu"] * 1e12 / m["tokens_per_s_per_gpu"]
            by.setdefault((r["model"]["name"].lower(), mo["seq_len"]), []).append(
                (nv, ours / nv, r["id"]))
    print("\n| model | seq | rows | NVIDIA GFLOP/token | paraplan / NVIDIA |\n"
          "|---|---|---|---|---|")
    odd = []
    for (name, seq), v in sorted(by.items()):
        nvs = sorted(x[0] for x in v)
        med = nvs[len(nvs) // 2]
        odd += [(i, nv / med - 1) for nv, _, i in v if abs(nv / med - 1) > 0.02]
        print(f"| {name} | {seq} | {len(v)} | {nvs[0] / 1e9:.2f}-{nvs[-1] / 1e9:.2f} | "
              f"{min(x[1] for x in v):.3f}-{max(x[1] for x in v):.3f} |")
    for i, d in odd:
        print(f"more than 2 % from its model's median: {i} {100 * d:+.1f} %")


def bf16_exact(x: float) -> bool:
    """Whether a positive number is a bfloat16 value: at most 8 significant bits."""
    e = math.floor(math.log2(x))
    q = x / 2.0 ** (e - 7)
    return q == int(q)


def bf16_cells(clone: str, commit: str = DEFAULT_COMMIT) -> None:
    """Per container of the archive at ``commit``: tokens/s cells a bf16 holds / cells."""
    text = subprocess.run(["git", "-C", clone, "show",
                           f"{commit}:docs/performance-summary-archive.md"],
                          capture_output=True, text=True).stdout
    print(f"\n| container (archive @ {commit}) | tokens/s cells a bf16 holds exactly |\n|---|---|")
    for rel in dict.fromkeys(k[0] for k in tables(text)):
        vals = [cell(c[-2], False) for (r, _), (_, body) in tables(text).items() if r == rel
                for _, c in body]
        vals = [float(v) for v in vals if re.fullmatch(r"\d+", v)]
        print(f"| {rel} | {sum(bf16_exact(v) for v in vals)} of {len(vals)} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clone", required=True, help="a Megatron-Bridge git clone (or mirror)")
    a = ap.parse_args(argv)
    ok, differ, missing = audit(a.clone)
    print(f"\n{ok + differ + missing} Bridge rows: {ok} agree with their table, {differ} "
          f"differ, {missing} not found")
    flop_ratios()
    bf16_cells(a.clone)


if __name__ == "__main__":
    main()
