#!/usr/bin/env python
"""Transcribe NVIDIA's DGX Cloud benchmarking recipes of 2025 (github:NVIDIA/dgxc-benchmarking)
into the reference schema, as strategies/reference/data/dgxc_2505.json was made:

    # the repository (a mirror or a clone with its tags)
    python experiments/transcribe_dgxc.py /path/to/dgxc-benchmarking

Releases: v25.05.05 (the last tag whose recipe READMEs print performance tables: from v25.07
on they give only the configurations) and v25.04.02 (the last with the Llama 3.1 8B/70B rows).
Each pre-training recipe README (``README_FILES``) states its configurations in tables (GPUs,
sequence, layers, TP, PP, CP, EP, ETP, VP, MBS, GBS; under a heading or bold line naming the
GPU) and its performance in tables whose columns are GPU counts and whose rows are
"Training step time (seconds per step)" and "Throughput in tokens per second". Every
performance column becomes one tier-2 (held-out) entry when exactly one configuration row
matches it (same GPU, GPU count, precision, model size and, where the column states it, global
batch) and its printed tokens/s agrees with gbs x seq / step time to 1 %; else it is skipped
with the reason (``skip_reason``), printed and listed in docs/calibration.md §5.18. The
container release is the recipe's ``launch.sh`` ``FW_VERSION``; the model dimensions are the
public configs named in ``MODELS``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import write_reference  # noqa: E402
from strategies.reference.measured import throughput_step_s  # noqa: E402

RELEASES = ("v25.05.05", "v25.04.02")
README_FILES = ("llama3.1/README.md", "nemotron/README.md", "grok1/README.md",
                "grok1/README_314b.md", "deepseek_v3/pretraining/README.md", "llama4/README.md",
                "nemotronh/README.md")
URL = "https://github.com/NVIDIA/dgxc-benchmarking/blob/{tag}/{path}"
GPUS = ("GB200", "B200", "H100")
#: relative tolerance between the printed tokens/s and gbs x seq / printed step time
TOKENS_RTOL = 0.01

_LLAMA = {"model_type": "llama", "vocab_size": 128256, "tie_word_embeddings": False,
          "num_key_value_heads": 8}
#: (family, size as printed) -> model mapping; ``hf_config`` where a supported HF type holds it.
#: Llama 3.1 8B/70B/405B: meta-llama/Llama-3.1-*B config.json. Nemotron-4 15B/340B: arXiv
#: 2402.16819 Table 1 and 2406.11704 Table 1 (squared-ReLU MLP of 4 x hidden, 8 KV heads, 256k
#: SentencePiece vocabulary). Grok-1: xai-org/grok-1 (64 layers, 6144 hidden, 48 heads, 8 KV
#: heads, 8 experts top-2, gated MLP of 32768) as the recipe's NeMo config states it
#: (grok1/grok1_314b.yaml at v24.11.1: those dimensions, fast-geglu, tokenizer
#: meta-llama/Meta-Llama-3-70B, so 128256 entries), written as a Mixtral-type config (a gated
#: MLP of three matrices, the same FLOPs and bytes as the gelu gate). DeepSeek-V3: its
#: config.json (published_2026.json's). Llama 4 Maverick: meta-llama/Llama-4-Maverick-17B-128E
#: config.json text_config (MoE every 2nd layer, 128 experts top-1 plus a shared expert).
MODELS: dict[tuple[str, str], dict[str, Any]] = {
    ("llama3.1", "8b"): {"name": "Llama 3.1 8B", "hf_config": {
        **_LLAMA, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32}},
    ("llama3.1", "70b"): {"name": "Llama 3.1 70B", "hf_config": {
        **_LLAMA, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
        "num_attention_heads": 64}},
    ("llama3.1", "405b"): {"name": "Llama 3.1 405B", "hf_config": {
        **_LLAMA, "hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126,
        "num_attention_heads": 128}},
    ("nemotron", "15b"): {"name": "Nemotron-4 15B", "layers": 32, "hidden": 6144, "heads": 48,
                          "kv_heads": 8, "ffn_hidden": 24576, "vocab": 256000},
    ("nemotron", "340b"): {"name": "Nemotron-4 340B", "layers": 96, "hidden": 18432,
                           "heads": 96, "kv_heads": 8, "ffn_hidden": 73728, "vocab": 256000},
    ("grok1", "314b"): {"name": "Grok-1 314B", "hf_config": {
        "model_type": "mixtral", "hidden_size": 6144, "intermediate_size": 32768,
        "num_hidden_layers": 64, "num_attention_heads": 48, "num_key_value_heads": 8,
        "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 128256,
        "tie_word_embeddings": False}},
    ("deepseek_v3", "671b"): {"name": "DeepSeek-V3 671B", "hf_config": {
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
        "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
        "tie_word_embeddings": False, "num_nextn_predict_layers": 0, "n_group": 8,
        "topk_group": 4}},
    ("llama4", "400b"): {"name": "Llama 4 Maverick 400B", "hf_config": {
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "num_local_experts": 128,
        "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 202048,
        "tie_word_embeddings": False}},
}
#: the recipes' README sizes of a family with one model, and the families not modelled
ONLY_SIZE = {"grok1": "314b", "deepseek_v3": "671b", "llama4": "400b", "nemotronh": "56b"}
NOT_MODELLED = {"nemotronh": "Nemotron-H is a hybrid of Mamba-2 and attention layers: Mamba "
                             "layers are not modelled"}

#: (tag, family, size) -> (field, value, source): where a README's configuration table and the
#: recipe's launch.sh disagree, the launch script (what ran) wins, cited
LAUNCH_FIXES: dict[tuple[str, str, str], tuple[str, int, str]] = {
    ("v25.04.02", "nemotron", "340b"): (
        "vp", 12, "the README's VP cell is NA, nemotron/launch.sh at v25.04.02 sets VP=12 for "
                  "340b (lines 62-68) and passes it as -vp (line 83)"),
}

#: (tag, family, GPU, precision or None for both) -> launch.sh lines that turn NeMo's
#: ``--cuda_graphs`` on (Transformer Engine graphs of each layer, not the whole-iteration graph
#: the plan's ``cuda_graph`` switch means: recorded in the notes, not in the plan)
CUDA_GRAPHS: dict[tuple[str, str, str, str | None], str] = {
    ("v25.05.05", "grok1", "GB200", None): "grok1/launch.sh lines 90 and 135",
    ("v25.05.05", "llama4", "H100", "fp8"): "llama4/launch.sh lines 105-106 and 125",
    ("v25.05.05", "nemotron", "GB200", None): "nemotron/launch.sh line 162",
}
#: what the FP8 rows ran, per (tag, family): Transformer Engine's per-tensor delayed scaling
#: in every recipe that says (NeMo 2's scripts/performance take ``--fp8_recipe`` with default
#: 'ds', NVIDIA/NeMo scripts/performance/README.md, and no launch.sh at v25.05.05 passes one;
#: v25.04.02's Llama 3.1 script uses NeMo's ``bf16_with_fp8_mixed``; its Grok-1 NeMo 1 config
#: sets ``fp8_hybrid`` with an amax history); the rest assumed so
FP8_NOTES: dict[tuple[str, str], str] = {
    ("v25.04.02", "llama3.1"): "llama3.1/pretrain_llama31.py line 35: NeMo's "
                               "bf16_with_fp8_mixed",
    ("v25.04.02", "grok1"): "grok1/cfg/grok1_314b.yaml lines 135-139: fp8_hybrid, amax "
                            "history 1024",
}
FP8_DEFAULT = {"v25.05.05": "NeMo's scripts/performance --fp8_recipe defaults to 'ds' "
                            "(NVIDIA/NeMo scripts/performance/README.md) and launch.sh "
                            "passes none"}


def fp8_note(tag: str, family: str) -> str:
    """What the notes say of an FP8 row's scaling recipe."""
    why = FP8_NOTES.get((tag, family)) or FP8_DEFAULT.get(tag)
    return ("FP8 with Transformer Engine's per-tensor delayed scaling: " + why + "."
            if why else "FP8 recipe not stated: per-tensor delayed scaling assumed (NeMo's "
            "default).")


#: What NeMo's DeepSeek-V3 performance script ran (docs/calibration.md §5.44): the script at
#: the commit the recipe's setup.sh checks out (``NEMO_COMMIT``), and the attention backend
#: Transformer Engine picks for MLA's unequal head sizes (q/k 128 + 64 = 192, v 128).
DS_NEMO = ("NVIDIA/NeMo@7a8f1cc7bc40 (deepseek_v3/pretraining/setup.sh line 54, NEMO_COMMIT) "
           "scripts/performance/llm/pretrain_deepseek_v3.py")
#: GPU -> (the launch.sh --recompute_modules, its line at v25.05.05)
DS_RECOMPUTE = {"H100": ("mla_up_proj", 106), "GB200": ("core_attn", 119)}
#: GPUs on which Transformer Engine runs MLA's attention unfused, and why
DS_UNFUSED_ATTENTION = {
    "GB200": "Transformer Engine's UnfusedDotProductAttention on sm100: FlashAttention is off "
             "for head_dim_qk != head_dim_v (transformer_engine/pytorch/attention/"
             "dot_product_attention/utils.py lines 475-479 at v2.3) and cuDNN's fused "
             "attention has no backend on sm100 with a head dimension over 128 "
             "(transformer_engine/common/fused_attn/fused_attn.cpp line 221 at v2.3, "
             "`!(sm_arch_ >= 100 && (head_dim_qk > 128 || head_dim_v > 128))`), in every TE "
             "release to v2.4 (NeMo v2.3.0's requirements/manifest.json pins bee4649c15a7, "
             "2.2.0.dev0); TE #1797 (71c76b6ba205, 2025-06-13, first in v2.5) added d_qk 192 / "
             "d_v 128 training on Blackwell, with cuDNN 9.11 or later. On H100 (sm90) cuDNN "
             "takes head dimensions up to 256: fused"}


HARDWARE = {
    "H100": {"gpu": "H100 SXM", "gpus_per_node": 8,
             "interconnect": "DGX H100 Reference Architecture (the repository README's "
                             "baseline): 8 x 400 Gb/s InfiniBand NDR per node"},
    "GB200": {"gpu": "GB200", "gpus_per_node": 4,
              "interconnect": "GB200 NVL72: 72 GPUs in one NVLink domain (1.8 TB/s per GPU), "
                              "4 GPUs per compute tray"},
    "B200": {"gpu": "B200", "gpus_per_node": 8,
             "interconnect": "DGX B200 (8 GPUs per node, NVLink5), scale-out not stated"},
}


def family_of(path: str) -> str:
    """The recipe family of a README path (its first directory)."""
    return path.split("/")[0]


def _cell_int(cell: str) -> int | None:
    """A configuration cell as an integer; NA, n/a and empty as None."""
    m = re.fullmatch(r"\s*(\d+)\s*", cell or "")
    return int(m.group(1)) if m else None


def _cell_float(cell: str) -> float | None:
    m = re.search(r"\d[\d,]*(?:\.\d+)?", cell or "")
    return float(m.group().replace(",", "")) if m else None


def parse_tables(md: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Every Markdown table of ``md`` (consecutive lines with a ``|``, one of them a separator
    row; a row may lack its leading pipe, as several recipe READMEs print them), outside code
    blocks: ``(context, header, rows)``, context the last GPU name (``GPUS``) a line before the
    table mentions ('' if none)."""
    out: list[tuple[str, list[str], list[list[str]]]] = []
    context, block, fenced = "", [], False

    def flush() -> None:
        seps = [i for i, c in enumerate(block) if c and all(set(x) <= set("-: ") for x in c)]
        if seps and seps[0] == 1:
            out.append((context, block[0], [r for r in block[2:] if any(r)]))
        block.clear()

    for line in md.splitlines() + [""]:
        s = line.strip()
        if s.startswith("```"):
            fenced = not fenced
        if not fenced and "|" in s:
            block.append([c.strip() for c in s.strip("|").split("|")])
            continue
        if block:
            flush()
        found = [g for g in GPUS if re.search(rf"\b{g}s?\b", s)]
        if found and not fenced:
            context = found[0]
    return out


def size_of(family: str, text: str, layers: int | None = None) -> str | None:
    """The model size (``405b``) a table cell or title names, else the family's only model,
    else the size the layer count of a family's configuration implies."""
    m = re.search(r"(\d+)\s*[bB]\b", text or "")
    if m:
        return f"{m.group(1)}b"
    if family in ONLY_SIZE:
        return ONLY_SIZE[family]
    for (fam, size), mo in MODELS.items():
        n = mo.get("layers") or mo.get("hf_config", {}).get("num_hidden_layers")
        if fam == family and n == layers:
            return size
    return None


def config_rows(family: str, tables) -> list[dict[str, Any]]:
    """The configuration rows of a README: tables whose header has GPUs, TP and PP."""
    rows = []
    for context, header, body in tables:
        keys = [h.strip().upper() for h in header]
        if not {"GPUS", "TP", "PP"} <= set(keys):
            continue
        for cells in body:
            r = dict(zip(keys, cells))
            layers = _cell_int(r.get("LAYERS", ""))
            size_cell = r.get("SIZE") or r.get("MODEL SIZE") or ""
            rows.append({"gpu": context, "n": _cell_int(r["GPUS"]),
                         "size": size_of(family, size_cell, layers),
                         "proxy": "proxy" in size_cell.lower(),
                         "precision": [p.strip().lower() for p in
                                       (r.get("PRECISION") or "").split("/") if p.strip()],
                         "layers": layers, "seq": _cell_int(r.get("SEQLEN", "")),
                         **{k.lower(): _cell_int(r.get(k, "")) for k in
                            ("TP", "PP", "CP", "EP", "ETP", "VP", "MBS", "GBS")},
                         "fsdp": (r.get("FSDP") or "").strip()})
    return rows


def perf_columns(family: str, tables) -> list[dict[str, Any]]:
    """Every performance column of a README: a table whose first header cell names the model
    and precision and whose rows include the training step time."""
    cols = []
    for _, header, body in tables:
        title = header[0]
        prec = re.search(r"\b(BF16|FP8)\b", title, re.I)
        rows = {r[0].lower(): r[1:] for r in body if r}
        step = next((v for k, v in rows.items() if k.startswith("training step time")), None)
        tok = next((v for k, v in rows.items() if k.startswith("throughput in tokens")), None)
        if prec is None or step is None:
            continue
        for i, h in enumerate(header[1:]):
            m = re.search(r"(\d+)\s*x?\s*(GB200|B200|H100)", h)
            if m is None or i >= len(step):
                continue
            gbs = re.search(r"GBS\s*=\s*(\d+)", h)
            cols.append({"title": title, "column": h, "precision": prec.group(1).lower(),
                         "size": size_of(family, title), "n": int(m.group(1)),
                         "gpu": m.group(2), "gbs": int(gbs.group(1)) if gbs else None,
                         "strong": "strong" in f"{title} {h}".lower(),
                         "step_s": _cell_float(step[i]),
                         "tokens_per_s": _cell_float(tok[i]) if tok and i < len(tok) else None})
    return cols


def match(col: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The configuration rows a performance column can be: the same GPU and GPU count, model
    size, precision where the row states one, and global batch where the column states one."""
    return [r for r in rows if r["gpu"] == col["gpu"] and r["n"] == col["n"]
            and r["size"] == col["size"]
            and (not r["precision"] or col["precision"] in r["precision"])
            and (col["gbs"] is None or r["gbs"] == col["gbs"])]


def step_time_s(gbs: int, seq: int, tokens_per_s: float) -> float:
    """Seconds per step a throughput implies: gbs x seq tokens over tokens/s (the recipes'
    own formula, tokens/s = seq x gbs / step time; ``strategies.reference.measured.
    throughput_step_s``)."""
    return throughput_step_s(gbs, seq, tokens_per_s)


def skip_reason(family: str, col: dict[str, Any], found: list[dict[str, Any]]) -> str | None:
    """Why a performance column cannot be transcribed, or None."""
    if family in NOT_MODELLED:
        return NOT_MODELLED[family]
    if (family, col["size"]) not in MODELS:
        return f"model {family} {col['size']} has no dimensions in MODELS"
    if len(found) != 1:
        return (f"{len(found)} configuration rows match {col['n']}x {col['gpu']} "
                f"{col['precision']}" + (f" GBS={col['gbs']}" if col["gbs"] else ""))
    r = found[0]
    if None in (r["tp"], r["pp"], r["gbs"], r["mbs"], r["seq"], r["layers"]) or not col["step_s"]:
        return "configuration or step time incomplete"
    if col["tokens_per_s"]:
        implied = step_time_s(r["gbs"], r["seq"], col["tokens_per_s"])
        if abs(implied / col["step_s"] - 1) > TOKENS_RTOL:
            return (f"printed tokens/s {col['tokens_per_s']:g} implies {implied:.3f} s/step at "
                    f"GBS={r['gbs']}, the printed step time is {col['step_s']:g} s: the global "
                    "batch of the measurement is not the configuration's")
    if r["n"] % (r["tp"] * r["pp"] * (r["cp"] or 1)):
        return f"{r['n']} GPUs do not divide over tp x pp x cp"
    return None


def _model(family: str, size: str, r: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The model mapping of a row (the row's layer count where the recipe runs a proxy of
    fewer layers) and what the notes say of it."""
    base = MODELS[(family, size)]
    mo = json.loads(json.dumps(base))
    full = mo.get("layers") or mo["hf_config"]["num_hidden_layers"]
    note = ""
    if r["layers"] != full:
        mo["name"] += f" proxy ({r['layers']} layers)"
        if "hf_config" in mo:
            mo["hf_config"]["num_hidden_layers"] = r["layers"]
        else:
            mo["layers"] = r["layers"]
        note = (f"A proxy of the model with {r['layers']} of its {full} layers, as the "
                "recipe's configuration table states. ")
    mo["seq_len"] = r["seq"]
    return mo, note


def entry(tag: str, commit: str, path: str, fw_version: str, col: dict[str, Any],
          r: dict[str, Any]) -> dict[str, Any]:
    """One performance column and its configuration row as a reference entry (tier 2)."""
    family = family_of(path)
    mo, note = _model(family, col["size"], r)
    fix = LAUNCH_FIXES.get((tag, family, col["size"]))
    if fix:
        r = {**r, fix[0]: fix[1]}
    tp, pp, cp, ep = r["tp"], r["pp"], r["cp"] or 1, r["ep"] or 1
    vp = (r["vp"] or 1) if pp > 1 else 1     # a VP cell without pipelining (Llama 4 on H100)
    n, gbs, mbs = r["n"], r["gbs"], r["mbs"]
    dp = n // (tp * pp * cp)
    plan: dict[str, Any] = {
        "tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "microbatch": mbs,
        "global_batch": gbs, "schedule": "interleaved 1F1B" if vp > 1 else "1F1B",
        "virtual_stages": vp, "recompute": None, "sequence_parallel": None,
        "zero_stage": None, "grad_accum": gbs // (mbs * dp)}
    if ep > 1 and r["etp"]:
        plan["etp"] = r["etp"]
    notes = [note + f"NeMo {fw_version} container (launch.sh FW_VERSION at {tag}); the "
             "overlaps and recompute are the recipe's, not stated in the README."]
    if col["precision"] == "fp8":
        notes.append(fp8_note(tag, family))
    graphs = (CUDA_GRAPHS.get((tag, family, col["gpu"], col["precision"]))
              or CUDA_GRAPHS.get((tag, family, col["gpu"], None)))
    if graphs:
        notes.append(f"CUDA graphs on ({graphs}): per-layer Transformer Engine graphs, "
                     "their saved launches not modelled.")
    if fix:
        notes.append(f"{fix[0].upper()}={fix[1]}: {fix[2]}.")
    if r["fsdp"] in ("1", "True", "true"):
        plan["zero_stage"] = 3
        notes.append("Megatron FSDP (README FSDP column).")
    if family == "deepseek_v3":
        notes += _deepseek_facts(plan, mo, col["gpu"], pp)
    elif ep > 1:
        notes.append("Dropless MoE; token balance among experts not stated.")
    if col["strong"]:
        notes.append("Strong scaling table (fixed GBS).")
    size = col["size"] + ("_proxy" if r["layers"] != (
        MODELS[(family, col["size"])].get("layers")
        or MODELS[(family, col["size"])]["hf_config"]["num_hidden_layers"]) else "")
    rid = (f"dgxc{tag[1:].replace('.', '')[:4]}_{family.replace('.', '')}_{size}_"
           f"{col['gpu'].lower()}_{n}_{col['precision']}" + ("_strong" if col["strong"] else ""))
    measured: dict[str, Any] = {"step_time_s": col["step_s"]}
    if col["tokens_per_s"]:
        measured["tokens_per_s"] = col["tokens_per_s"]
    return {
        "id": rid, "kind": "measured", "tier": 2,
        "source": {"ref": "NVIDIA/dgxc-benchmarking (NeMo)",
                   "table": f"{path} @{tag} (commit {commit[:12]}), column {col['column']!r} "
                            f"of {col['title']!r}",
                   "url": URL.format(tag=tag, path=path),
                   "also": f"container nvcr.io/nvidia/nemo:{fw_version}"},
        "framework": "nemo",
        "model": mo,
        "hardware": {**HARDWARE[col["gpu"]], "n_gpus": n},
        "plan": plan,
        "precision": col["precision"],
        "measured": measured,
        "notes": " ".join(notes)}


def _deepseek_facts(plan: dict[str, Any], mo: dict[str, Any], gpu: str, pp: int) -> list[str]:
    """What NeMo's DeepSeek-V3 performance script ran (``DS_NEMO``), written into the row's
    plan and model; returns the notes that cite it."""
    rm, line = DS_RECOMPUTE[gpu]
    plan["recompute"] = "selective"
    plan["recompute_modules"] = [rm]
    plan["tp_comm_overlap"] = False
    mid = 64 // pp
    plan["first_stage_layers"], plan["last_stage_layers"] = mid - 1, mid - 2
    mo["hf_config"]["num_nextn_predict_layers"] = 1
    notes = [f"Selective recomputation of {rm} (launch.sh line {line}, --recompute_modules).",
             f"{DS_NEMO}: pretrain_recipe() (line 65) keeps its use_mtp=True default "
             "(nemo/collections/llm/recipes/deepseek_v3.py line 62: mtp_num_layers=1, line 49), "
             f"so one multi-token-prediction layer runs on the last stage; the first and last "
             f"stages hold 64/pp - 1 = {mid - 1} and 64/pp - 2 = {mid - 2} layers (lines 74-77); "
             "MegatronCommOverlapCallback(tp_comm_overlap=False) (lines 87-90); "
             "MegatronTokenDropCallback (lines 40, 81) with its defaults, capacity factor 1.0 "
             "and padding to capacity (nemo/lightning/pytorch/callbacks/moe_token_drop.py lines "
             "38-39): every expert computes exactly its mean share, the balanced load."]
    why = DS_UNFUSED_ATTENTION.get(gpu)
    if why:
        plan["flash_attn"] = False
        notes.append(f"Attention unfused: {why}.")
    return notes


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          check=True).stdout


def transcribe_readme(tag: str, commit: str, path: str, md: str, fw_version: str
                      ) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The entries of one README's performance columns and ``(label, reason)`` per skip."""
    family = family_of(path)
    tables = parse_tables(md)
    rows = config_rows(family, tables)
    out, skipped = [], []
    for col in perf_columns(family, tables):
        found = match(col, rows)
        label = f"{tag} {path}: {col['title']} / {col['column']}"
        why = skip_reason(family, col, found)
        if why:
            skipped.append((label, why))
        else:
            out.append(entry(tag, commit, path, fw_version, col, found[0]))
    return out, skipped


def transcribe(repo: str, releases=RELEASES) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    out, skipped = [], []
    for tag in releases:
        commit = _git(repo, "rev-parse", f"{tag}^{{commit}}").strip()
        files = set(_git(repo, "ls-tree", "-r", "--name-only", tag).split())
        for path in README_FILES:
            if path not in files:
                continue
            launch = f"{path.rsplit('/', 1)[0]}/launch.sh"
            fw = re.search(r"FW_VERSION=(\S+)", _git(repo, "show", f"{tag}:{launch}")) \
                if launch in files else None
            o, s = transcribe_readme(tag, commit, path, _git(repo, "show", f"{tag}:{path}"),
                                     fw.group(1) if fw else "not stated")
            out += o
            skipped += s
    ids = [e["id"] for e in out]
    if len(ids) != len(set(ids)):
        raise ValueError(f"duplicate ids: {sorted(i for i in ids if ids.count(i) > 1)}")
    return out, skipped


def group_key(case_id: str) -> str:
    """The summary group of an entry id: release, family, size, GPU and precision
    (``dgxc2504_llama31_405b_proxy_h100_64_fp8`` -> ``2504 llama31 405b h100 fp8``)."""
    p = case_id.split("_")
    rel, fam = p[0][4:], p[1] if p[1] != "deepseek" else "deepseek_v3"
    rest = p[2:] if p[1] != "deepseek" else p[3:]
    size, rest = rest[0], [x for x in rest[1:] if x not in ("proxy", "strong")]
    return f"{rel} {fam} {size} {rest[0]} {rest[2]}"


def summary(validation: dict[str, Any]) -> list[tuple[str, int, float, float]]:
    """``(group, runs, mean signed error %, mean |error| %)`` per ``group_key`` of a
    ``paraplan validate --json`` result, in first-seen order."""
    groups: dict[str, list[float]] = {}
    for c in validation["cases"]:
        if c.get("analytic_error_pct") is not None:
            groups.setdefault(group_key(c["id"]), []).append(c["analytic_error_pct"])
    return [(g, len(e), sum(e) / len(e), sum(abs(x) for x in e) / len(e))
            for g, e in groups.items()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", nargs="?", help="a dgxc-benchmarking clone or mirror (git "
                    "directory) with tags")
    ap.add_argument("--out", default="strategies/reference/data/dgxc_2505.json")
    ap.add_argument("--summary", metavar="JSON", help="instead: print the per-family, GPU and "
                    "precision error of a `python -m simulator.cli validate --json` result")
    a = ap.parse_args(argv)
    if a.summary:
        with open(a.summary) as f:
            rows = summary(json.load(f))
        print("| release, family, size, GPU, precision | runs | mean error | mean abs error |")
        print("|---|---:|---:|---:|")
        for g, n, mean, mae in rows:
            print(f"| {g} | {n} | {mean:+.1f} % | {mae:.1f} % |")
        return 0
    if not a.repo:
        ap.error("repo is required unless --summary is given")
    out, skipped = transcribe(a.repo)

    def describe(r: dict[str, Any]) -> str:
        pl = r["plan"]
        return (f"{r['id']}: tp{pl['tp']} pp{pl['pp']} cp{pl['cp']} ep{pl['ep']} "
                f"vp{pl['virtual_stages']} {r['measured']['step_time_s']} s/step")

    write_reference(a.out, out, skipped, describe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
