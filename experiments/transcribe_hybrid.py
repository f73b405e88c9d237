#!/usr/bin/env python
"""Transcribe the published training runs of NVIDIA's hybrid Mamba-2 models (Nemotron-H,
Nemotron 3 Nano / 3.5 Lightning / Super / Ultra: ``model_type: nemotron_h``) into the held-out
reference file ``strategies/reference/data/hybrid_2026.json`` (docs/calibration.md §5.148):

    python experiments/transcribe_hybrid.py [BRIDGE] [DGXC] [AUTOMODEL]

(mirrors or clones with history of NVIDIA-NeMo/Megatron-Bridge, NVIDIA/dgxc-benchmarking,
NVIDIA-NeMo/Automodel; default: the /work/.mirror copies). Sources:

* Megatron-Bridge ``docs/performance-summary.md`` (26.08 container) and
  ``docs/performance-summary-archive.md`` (26.06.01 back to 26.02.01): every Nemotron 3 row;
  a layout (model, system, GPUs, precision, batch, sizes) is transcribed once, from the newest
  container that prints it, the older containers' figures of it kept under ``history``. The
  recipe switches of each row: the 26.08 rows from ``src/megatron/bridge/perf_recipes/
  nemotronh/`` at the table's commit (``bridge_recipe_trace.trace``, each with file:line), the
  older ones from the ``WorkloadBaseConfig`` of the container's Megatron-Bridge tag.
* dgxc-benchmarking v25.05.05 ``nemotronh/README.md``: Nemotron-H 56B FP8 on H100, the
  columns ``experiments/transcribe_dgxc.py`` skipped (its ``NOT_MODELLED``), under that
  script's rule (one configuration row per column, printed tokens/s within 1 % of
  gbs x seq / printed step time).
* Automodel ``docs/performance-summary.mdx``: the "Nemotron V3" rows
  ``experiments/transcribe_automodel.py`` skipped (its ``SKIP_MODELS``).

The model configs: ``experiments/hybrid_models.py``; the recipes' switches:
``experiments/hybrid_recipes.py``. Every step time is the printed one or
gbs x seq / (tokens/s/GPU x GPUs). Output: sorted keys, deterministic, written atomically.
"""
from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.bridge_recipe_trace import git_output, git_show, workload_configs  # noqa: E402
from experiments.hybrid_models import check_pattern, model_entry  # noqa: E402
from experiments.hybrid_recipes import (BRIDGE_2608, BRIDGE_MODELS, BRIDGE_REF,  # noqa: E402
                                        PRECISION, SYSTEMS, base_recipe_facts, recipe_2608,
                                        recipe_workload, row_dp)
from experiments.hybrid_sources import automodel_entries, dgxc_entries  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "strategies", "reference", "data", "hybrid_2026.json")
MIRROR = "/work/.mirror/"
#: (container, file, Megatron-Bridge tag of its recipes, why that tag), newest first
CONTAINERS = (
    ("26.08", "docs/performance-summary.md", BRIDGE_2608,
     "the commit that published the table; no release notes name 26.08's Megatron-Bridge"),
    ("26.06.01", "docs/performance-summary-archive.md", "v0.5.1",
     "the last tag (2026-07-20) before the table's commit 381d0b825 (2026-07-21)"),
    ("26.06", "docs/performance-summary-archive.md", "v0.5.0",
     "docs/releases/software-versions.md, NeMo Framework 26.06"),
    ("26.04.01", "docs/performance-summary-archive.md", "v0.4.2",
     "as strategies/reference/bridge_recipes.py reads the 26.04.01 rows"),
    ("26.04", "docs/performance-summary-archive.md", "v0.4.0",
     "docs/releases/software-versions.md, NeMo Framework 26.04"),
    ("26.02.01", "docs/performance-summary-archive.md", "v0.3.1",
     "the last tag before 26.04 (not cited by any row: its layouts recur later)"))
STEP_HOW = "gbs x seq / (tokens/s/GPU x GPUs)"
FORCED = ("NVIDIA force-balances the tokens among experts in these benchmarks, token-"
          "dropless (the page's footnote)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def bridge_tables(md: str, container: str) -> list[dict[str, Any]]:
    """The Nemotron rows of one container's pre-training tables in ``md`` (13 columns, or 14
    with the FSDP column), each with its model heading and printed cells."""
    head = f"## {container} NeMo Container"
    if head not in md:
        return []
    sec = md.split(head, 1)[1].split("\n## ", 1)[0].split("### SFT", 1)[0]
    out = []
    for block in sec.split("#### Model: ")[1:]:
        model = block.split("\n", 1)[0].strip()
        if model not in BRIDGE_MODELS:
            continue
        for line in block.split("\n"):
            c = _cells(line)
            if not c[0].startswith("DGX-") or len(c) not in (13, 14):
                continue
            fsdp = c.pop(6) if len(c) == 14 else None
            sysn, n, prec, gbs, mbs, seq, tp, pp, cp, vp, ep, tok, tfl = c
            out.append({"model": model, "system": sysn, "n": int(n), "prec": prec,
                        "gbs": int(gbs), "mbs": int(mbs), "seq": int(seq), "tp": int(tp),
                        "pp": int(pp), "cp": int(cp), "vp": None if vp == "n/a" else int(vp),
                        "ep": 1 if ep == "n/a" else int(ep), "fsdp": fsdp,
                        "tokens": int(tok), "tflops": int(re.match(r"\d+", tfl).group()),
                        "footnote": re.findall(r"\[\^([\w-]+)\]", tfl),
                        "container": container, "line": line.strip()})
    return out


def layout_key(r: dict[str, Any]) -> tuple:
    """What makes a table row one layout (model, system, GPUs, precision, batch, sizes): a
    layout is transcribed once, from the newest container that prints it."""
    return (r["model"], r["system"], r["n"], r["prec"], r["gbs"], r["mbs"], r["seq"], r["tp"],
            r["pp"], r["cp"], r["vp"], r["ep"])


def bridge_entries(repo: str) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """One entry per distinct Nemotron 3 layout of Megatron-Bridge's tables (newest container
    first, older figures of the layout under ``history``), and the skipped rows."""
    seen: dict[tuple, dict[str, Any]] = {}
    history: dict[tuple, list[dict[str, Any]]] = {}
    commits = {}
    for container, path, tag, _ in CONTAINERS:
        md = git_show(repo, "HEAD", path)
        commits[path] = git_output(repo, "log", "-1", "--format=%h", "HEAD", "--", path).strip()
        for r in bridge_tables(md, container):
            k = layout_key(r)
            if k in seen:
                history.setdefault(k, []).append(
                    {"container": container, "tokens_per_s_per_gpu": r["tokens"],
                     "tflops_per_gpu": r["tflops"]})
            else:
                seen[k] = r
    tags = {c: (t, why) for c, _, t, why in CONTAINERS}
    configs: dict[str, dict] = {}
    out, skipped = [], []
    for k, r in seen.items():
        key = BRIDGE_MODELS[r["model"]][0]
        tag, why_tag = tags[r["container"]]
        if r["container"] == "26.08":
            sw, rnotes = recipe_2608(repo, r)
        else:
            if tag not in configs:
                configs[tag] = workload_configs(
                    repo, tag, ("nemotronh/nemotron_3_workload_base_configs.py",))
            sw, rnotes = recipe_workload(configs[tag], tag, r)
            if sw:
                base_sw, base_note = base_recipe_facts(repo, tag, r)
                sw = {**base_sw, **sw}
                rnotes.append(base_note)
        path = dict((c, p) for c, p, _, _ in CONTAINERS)[r["container"]]
        dp = row_dp(r)
        gpu, inter = SYSTEMS[r["system"]]
        prec, _, cfgname = PRECISION[r["prec"]]
        mo, src = model_entry(key, r["seq"])
        check_pattern(mo["hf_config"])
        rid = (f"mbridge{r['container'].replace('.', '')}_{key.replace('-', '').replace('.', '')}_"
               f"{gpu.split()[0].lower()}_{r['n']}_{r['prec'].lower()}")
        notes = [FORCED + ".", f"Model config: {src}.",
                 f"The {r['container']} container's recipes: Megatron-Bridge {tag} ({why_tag})."]
        if r["fsdp"] is not None:
            notes.append(f"FSDP column {r['fsdp']} (0: Megatron's distributed optimizer, no FSDP).")
        if "nemotron-3-super-b200-nvfp4-note" in r["footnote"]:
            notes.append("Footnote: the MXFP8 mapping did not fit for NVFP4 (tp 2 here); NVFP4 "
                         "param gather not yet supported.")
        if r["prec"] == "FP8":
            notes.append("FP8 is the config's FP8_CS (current scaling).")
        notes += rnotes
        e = {"id": rid, "kind": "measured", "tier": 2,
             "source": {"ref": BRIDGE_REF,
                        "table": f"{path} ({r['container']} NeMo container), commit "
                                 f"{commits[path]}, 'Model: {r['model']}' row {r['system']} "
                                 f"{r['n']} GPUs {r['prec']} GBS {r['gbs']}",
                        "row": r["line"]},
             "model": mo,
             "hardware": {"gpu": gpu, "n_gpus": r["n"], "gpus_per_node": 8,
                          "interconnect": inter},
             "plan": {"tp": r["tp"], "pp": r["pp"], "dp": dp, "cp": r["cp"], "ep": r["ep"],
                      "microbatch": r["mbs"], "global_batch": r["gbs"],
                      "schedule": "interleaved 1F1B" if r["vp"] else "1F1B",
                      "virtual_stages": r["vp"] or 1, "recompute": None,
                      "sequence_parallel": None, "zero_stage": None,
                      "grad_accum": r["gbs"] // (r["mbs"] * dp), "moe_balance": "forced",
                      **({"fsdp": r["fsdp"]} if r["fsdp"] is not None else {}), **sw},
             "precision": ("fp8 (current scaling: the FP8_CS config)" if r["prec"] == "FP8"
                           else prec),
             "measured": {"tokens_per_s_per_gpu": r["tokens"], "tflops_per_gpu": r["tflops"]},
             "derived": {"step_time_s": round(r["gbs"] * r["seq"] / (r["tokens"] * r["n"]), 4),
                         "how": STEP_HOW},
             "notes": " ".join(notes)}
        if history.get(k):
            e["history"] = history[k]
        out.append(e)
    return out, skipped


def main(argv: list[str] | None = None, out: str = OUT) -> int:
    """Transcribe every source (mirror paths in ``argv``: Megatron-Bridge, dgxc-benchmarking,
    Automodel) into ``out``, written atomically (a temporary file renamed over it)."""
    args = sys.argv[1:] if argv is None else argv
    bridge = args[0] if len(args) > 0 else MIRROR + "NVIDIA-NeMo+Megatron-Bridge/repo"
    dgxc = args[1] if len(args) > 1 else MIRROR + "NVIDIA+dgxc-benchmarking/repo"
    automodel = args[2] if len(args) > 2 else MIRROR + "NVIDIA-NeMo+Automodel/repo"
    rows, skipped = [], []
    for fn, repo in ((bridge_entries, bridge), (dgxc_entries, dgxc),
                     (automodel_entries, automodel)):
        o, s = fn(repo)
        rows += o
        skipped += s
    ids = [r["id"] for r in rows]
    if len(ids) != len(set(ids)):
        raise ValueError(f"duplicate ids: {sorted(i for i in ids if ids.count(i) > 1)}")
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, out)
    for r in rows:
        step = (r.get("derived") or r["measured"])["step_time_s"]
        print(f"{r['id']:52} {step:9.4f} s  hf_config: "
              f"{'yes' if 'hf_config' in r['model'] else 'no'}")
    for label, why in skipped:
        print(f"skipped {label}: {why}")
    print(len(rows), "rows ->", os.path.relpath(out, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
