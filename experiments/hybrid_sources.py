"""The dgxc-benchmarking and Automodel rows of ``strategies/reference/data/hybrid_2026.json``
(``experiments/transcribe_hybrid.py``): the Nemotron-H 56B columns of dgxc-benchmarking's
v25.05.05 ``nemotronh/README.md`` and the "Nemotron V3" rows of Automodel's pre-training
table, the rows ``experiments/transcribe_dgxc.py`` and ``experiments/transcribe_automodel.py``
skip because the cost model had no Mamba layer.
"""
from __future__ import annotations

import re
from typing import Any

from experiments.bridge_recipe_trace import git_output
from experiments.hybrid_models import model_entry


DGXC_TAG = "v25.05.05"
DGXC_README = "nemotronh/README.md"


def dgxc_entries(repo: str) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The Nemotron-H 56B columns of dgxc-benchmarking ``DGXC_TAG`` ``nemotronh/README.md``,
    read with ``experiments/transcribe_dgxc.py``'s parser and rule (its ``NOT_MODELLED``
    skip of the family lifted: the model is stated here)."""
    from experiments import transcribe_dgxc as td
    commit = git_output(repo, "rev-parse", f"{DGXC_TAG}^{{commit}}").strip()
    md = git_output(repo, "show", f"{DGXC_TAG}:{DGXC_README}")
    launch = git_output(repo, "show", f"{DGXC_TAG}:nemotronh/launch.sh")
    fw = re.search(r"FW_VERSION=(\S+)", launch)
    fw_version = fw.group(1) if fw else "not stated"
    tables = td.parse_tables(md)
    rows = td.config_rows("nemotronh", tables)
    out, skipped = [], []
    for col in td.perf_columns("nemotronh", tables):
        found = td.match(col, rows)
        label = f"{DGXC_TAG} {DGXC_README}: {col['title']} / {col['column']}"
        why = None if len(found) == 1 else f"{len(found)} configuration rows match"
        if why is None:
            r = found[0]
            implied = td.step_time_s(r["gbs"], r["seq"], col["tokens_per_s"])
            if abs(implied / col["step_s"] - 1) > td.TOKENS_RTOL:
                why = (f"printed tokens/s {col['tokens_per_s']:g} implies {implied:.3f} s/step, "
                       f"printed {col['step_s']:g}")
        if why:
            skipped.append((label, why))
            continue
        mo, src = model_entry("nemotron-h-56b", r["seq"])
        if r["layers"] != mo["layers"]:
            skipped.append((label, f"{r['layers']} layers, the model has {mo['layers']}"))
            continue
        n, tp, pp, cp = r["n"], r["tp"], r["pp"], r["cp"] or 1
        dp = n // (tp * pp * cp)
        out.append({
            "id": f"dgxc2505_nemotronh_56b_{col['gpu'].lower()}_{n}_{col['precision']}",
            "kind": "measured", "tier": 2,
            "source": {"ref": "NVIDIA/dgxc-benchmarking (NeMo)",
                       "table": f"{DGXC_README} @{DGXC_TAG} (commit {commit[:12]}), column "
                                f"{col['column']!r} of {col['title']!r}",
                       "url": td.URL.format(tag=DGXC_TAG, path=DGXC_README),
                       "also": f"container nvcr.io/nvidia/nemo:{fw_version}"},
            "framework": "nemo",
            "model": mo,
            "hardware": {**td.HARDWARE[col["gpu"]], "n_gpus": n},
            "plan": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": 1, "microbatch": r["mbs"],
                     "global_batch": r["gbs"], "schedule": "1F1B", "virtual_stages": 1,
                     "recompute": None, "sequence_parallel": None, "zero_stage": None,
                     "grad_accum": r["gbs"] // (r["mbs"] * dp)},
            "precision": col["precision"],
            "measured": {"step_time_s": col["step_s"], "tokens_per_s": col["tokens_per_s"]},
            "notes": (f"Weak-scaling table (GBS 3 per GPU). NeMo {fw_version} container "
                      f"(launch.sh FW_VERSION at {DGXC_TAG}); the overlaps and recompute are the "
                      f"recipe's, not stated in the README. {td.fp8_note(DGXC_TAG, 'nemotronh')}. "
                      f"The README: TFLOPS_per_GPU of its parser is invalid for this model (not "
                      f"transcribed). Model config: {src}.")})
    return out, skipped


AUTOMODEL_PATH = "docs/performance-summary.mdx"
AUTOMODEL_MODELS = {"Nemotron V3 Super 120B": ("nemotron-3-super",
                                               "nemotron_super_v3_te_deepep.yaml"),
                    "Nemotron V3 Nano 30B": ("nemotron-3-nano", "nemotron_nano_v3_te_deepep.yaml"),
                    "Nemotron V3 Ultra 550B": ("nemotron-3-ultra",
                                               "nemotron_ultra_v3_te_deepep.yaml")}


#: the benchmark config fields read (``key: value`` lines of its YAML)
YAML_KEYS = ("global_batch_size", "local_batch_size", "activation_checkpointing", "dispatcher",
             "num_nextn_predict_layers", "mtp_use_repeated_layer", "experts", "attn")


def yaml_facts(text: str) -> tuple[dict[str, Any], list[str]]:
    """The ``YAML_KEYS`` an Automodel benchmark config sets (first occurrence, comments cut)
    and a ``key=value (Ln)`` note of each."""
    said: dict[str, Any] = {}
    notes = []
    for i, line in enumerate(text.split("\n"), 1):
        m = re.match(r"\s*(\w+):\s*([^#\s][^#]*?)\s*(?:#.*)?$", line)
        if m and m.group(1) in YAML_KEYS and m.group(1) not in said:
            v = m.group(2)
            said[m.group(1)] = (int(v) if v.isdigit() else {"true": True, "false": False}.get(v, v))
            notes.append(f"{m.group(1)}={v} (L{i})")
    return said, notes


def automodel_entries(repo: str) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The Nemotron V3 rows of Automodel's pre-training table (its latest revision)."""
    from experiments.transcribe_automodel import (pretraining_rows, printed_int,
                                                  printed_number)
    commit = git_output(repo, "log", "-1", "--format=%H", "HEAD", "--", AUTOMODEL_PATH).strip()
    date = git_output(repo, "log", "-1", "--format=%cI", commit).strip()[:10]
    out, skipped = [], []
    for row in pretraining_rows(git_output(repo, "show", f"{commit}:{AUTOMODEL_PATH}")):
        name = row["Model"]
        base = re.sub(r"\s*\(\d\d\.\d\d\)$", "", name)
        if base not in AUTOMODEL_MODELS:
            continue
        key, yaml = AUTOMODEL_MODELS[base]
        n, gbs, mbs, lbs, ga, seq, tp, pp, cp, ep = (printed_int(row[k]) for k in (
            "#GPUs", "GBS", "MBS", "LBS", "GA", "Seq Length", "TP", "PP", "CP", "EP"))
        dp = n // (tp * pp * cp)
        mo, src = model_entry(key, seq)
        tok = printed_number(row["Tokens/sec/GPU"])
        step = printed_number(row["Time per Global Step (s)"])
        cfg_path = f"examples/llm_benchmark/nemotron/{yaml}"
        said, facts = yaml_facts(git_output(repo, "show", f"{commit}:{cfg_path}"))
        if (said.get("global_batch_size"), said.get("local_batch_size")) != (gbs, lbs):
            facts = [f"the config at {commit[:9]} runs another batch "
                     f"({said.get('global_batch_size')}, {said.get('local_batch_size')}): "
                     "not read"]
            said = {}
        out.append({
            "id": f"automodel_{key.replace('-', '').replace('.', '')}_h100_{n}",
            "kind": "measured", "tier": 2, "framework": "automodel",
            "source": {"ref": "NVIDIA-NeMo/Automodel performance summary (NeMo AutoModel, "
                              "PyTorch backend)",
                       "table": f"{AUTOMODEL_PATH} (DGX-H100, BF16), row {name!r} as of commit "
                                f"{commit[:12]} ({date})",
                       "also": f"benchmark config {cfg_path} at {commit[:9]}"},
            "model": mo,
            "hardware": {"gpu": "H100 SXM", "n_gpus": n, "gpus_per_node": 8,
                         "interconnect": "DGX H100 (8 GPUs per node, NVLink4), scale-out not "
                                         "stated"},
            "plan": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "microbatch": mbs,
                     "global_batch": gbs, "local_batch_size": lbs, "schedule": "1F1B",
                     "virtual_stages": 1,
                     "recompute": "full" if said.get("activation_checkpointing") else None,
                     "sequence_parallel": False,
                     "zero_stage": 3, "grad_accum": ga, "fsdp": printed_int(row["FSDP"]),
                     **({"moe_dispatcher": said["dispatcher"]} if said.get("dispatcher")
                        else {}),
                     **({"mtp_num_layers": said["num_nextn_predict_layers"]}
                        if said.get("num_nextn_predict_layers") else {}),
                     "moe_routing": "contiguous"},
            "precision": "bf16",
            "measured": {"step_time_s": step, "tokens_per_s_per_gpu": tok,
                         "model_tflops_per_gpu": printed_number(row["Model TFLOPs/sec/GPU"])},
            "notes": (f"The table's model name carries the release tag {name[len(base):].strip()}. "
                      "AutoModel benchmark recipe: mock data, fake balanced gate (moe_routing="
                      "contiguous, the table's note), no gradient clipping; FSDP2 (ZeRO-3) over "
                      f"{printed_int(row['FSDP'])} GPUs. Kernels: {row['Kernel Optimizations']}. "
                      f"The benchmark config ({cfg_path} at {commit[:9]}): "
                      + "; ".join(facts) + ". activation_checkpointing is a checkpoint_wrapper "
                      "per decoder block: full recomputation (as experiments/"
                      f"transcribe_automodel.py reads it). Model config: {src}.")})
    return out, skipped
