#!/usr/bin/env python
"""Transcribe NVIDIA NeMo AutoModel's published performance summary (its pre-training table,
every revision in the repository's history) into the reference schema, as
strategies/reference/data/automodel_perf.json was made:

    # a mirror or clone of https://github.com/NVIDIA-NeMo/Automodel with history
    python experiments/transcribe_automodel.py /path/to/Automodel

The table is ``docs/performance-summary.md`` (added 2025-10-06, 89e3a9fdd) and, from
2026-06-11, ``docs/performance-summary.mdx``: AutoModel's PyTorch path (FSDP2, Transformer
Engine's linear, RMSNorm and attention, DeepEP, ``torch.distributed.pipelining``) on
DGX-H100 in BF16. Each row prints the time per global step (the measured figure recorded
here), model TFLOP/s/GPU and tokens/s/GPU. One entry per (model, GPUs) row, from its latest
revision; a row whose figures changed keeps the earlier ones under ``history`` with their
commit and date. Rows the cost model cannot represent are skipped with the reason
(``skip_reason``), printed and listed in docs/calibration.md §5.31.

The stack is recorded as ``framework: automodel`` (``strategies.stacks.pytorch.AUTOMODEL``,
docs/calibration.md §5.38), and a row whose kernels name DeepEP states
``moe_dispatcher: deepep`` (the benchmark configs' ``enable_deepep: true``); every row states
``moe_routing: contiguous`` (the configs' ``fake_balanced_gate: true``). The plan facts the table does not print (activation
checkpointing, FSDP resharding) come from the benchmark configs and the parallelizer at the
table's first commit (``CONFIGS``)."""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import write_reference  # noqa: E402
from experiments.transcribe_nemo_performance import parse_tables  # noqa: E402
from strategies.reference.measured import throughput_step_s  # noqa: E402

REPO_URL = "https://github.com/NVIDIA-NeMo/Automodel"
TABLE_PATHS = ("docs/performance-summary.md", "docs/performance-summary.mdx")
#: the commit that added the table and the benchmark configs it names
#: (examples/benchmark/configs/*.yaml, 2025-10-06)
FIRST = "89e3a9fdd604bc3e70240f2fe4c6a9e1ce76cbd0"
DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data")
COLUMNS = ("Model", "#GPUs", "GBS", "MBS", "LBS", "GA", "Seq Length", "TP", "PP", "CP", "EP",
           "VP", "FSDP", "Kernel Optimizations", "Time per Global Step (s)",
           "Model TFLOPs/sec/GPU", "Tokens/sec/GPU")

#: DeepSeek-V3-shaped configs are read as deepseek_v3; AutoModel's DeepseekV3ForCausalLM at
#: FIRST builds no multi-token-prediction module (no ``nextn``/``mtp`` anywhere under
#: nemo_automodel/components/models/deepseek_v3/), so the MTP layer the preset carries is off
_NO_MTP = "AutoModel's DeepseekV3ForCausalLM (89e3a9fdd) builds no MTP module"

#: the table's model name -> (preset model dict in published_2026.json or None, config.json
#: overrides, the benchmark config at FIRST, the row's expert parallelism where the table
#: prints "-", and why)
CONFIGS: dict[str, dict[str, Any]] = {
    "DeepSeek V3 671B": {
        "preset": "deepseek-v3", "hf": {"num_nextn_predict_layers": 0},
        "config": "examples/benchmark/configs/deepseek_v3_te_deepep.yaml", "recompute": "full"},
    "Kimi K2": {
        # moonshotai/Kimi-K2-Base config.json (model_type kimi_k2, remote code of DeepSeek-V3's
        # architecture; AutoModel builds it with DeepseekV3ForCausalLM, the config's _target_):
        # 64 heads, 384 routed experts, one dense first layer, no expert groups, no MTP,
        # vocabulary 163840; the Kimi K2 report (arXiv 2507.20534) Table 2 gives the same
        "preset": "deepseek-v3", "name": "kimi-k2", "params_b": 1040, "active_params_b": 32.6,
        "hf": {"num_attention_heads": 64, "num_key_value_heads": 64, "n_routed_experts": 384,
               "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
               "vocab_size": 163840, "num_nextn_predict_layers": 0},
        "config": "examples/benchmark/configs/kimi_k2_te_deepep.yaml", "recompute": "full"},
    "Qwen3 MoE 30B": {
        "preset": "qwen3-30b-a3b", "hf": {},
        "config": "examples/benchmark/configs/qwen3_moe_30b_te_deepep.yaml", "recompute": "full"},
    "GPT-OSS 20B": {
        # openai/gpt-oss-20b config.json: gpt-oss-120b's layer with 24 layers and 32 experts
        "preset": "gpt-oss-120b", "name": "gpt-oss-20b", "params_b": 20.9,
        "active_params_b": 3.6,
        "hf": {"num_hidden_layers": 24, "num_local_experts": 32},
        "config": "examples/benchmark/configs/gptoss_20b_te_deepep.yaml", "recompute": "full",
        "attn": "flex", "ep": 8, "ep_why": "the table prints EP '-' with DeepEP among its kernels; the config "
                           "at 89e3a9fdd (examples/benchmark/configs/gptoss_20b_te_deepep.yaml) "
                           "runs the row's layout (8 GPUs, pp 1, local batch 2, global 256) "
                           "with ep_size 8"},
}

#: the attention backend of the config (``model.backend.attn``) in the reader's words
#: (``strategies.reference.text.attention_kernel``): TE's DotProductAttention (cuDNN's fused
#: attention on H100) or PyTorch's FlexAttention, a Triton kernel torch.compile generates
ATTN = {"te": "Transformer Engine DotProductAttention (backend attn: te)",
        "flex": "FlexAttention (backend attn: flex; a Triton kernel generated by torch.compile)"}

#: rows skipped whatever their layout, and why
SKIP_MODELS = {
    "Nemotron V3": "Nemotron 3 (Nano, Super, Ultra) is a hybrid of Mamba-2 and attention "
                   "layers: Mamba layers are not modelled",
    "GPT-OSS 120B": "the table prints EP '-' with DeepEP among its kernels, and the config it "
                    "names at 89e3a9fdd (gptoss_120b_te_deepep.yaml) runs another layout "
                    "(pp 2, ep 16, global batch 256, not the row's pp 1 and 512): the expert "
                    "parallelism of the row is not stated",
    "Llama3 70B": "torch.compile kernel fusion is not modelled (its config, "
                  "custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml, sets enable_compile: "
                  "True)",
}


def printed_number(cell: str) -> float | None:
    """A printed number (``1,002``, ``866.77``), or None for ``-``."""
    m = re.search(r"\d[\d,]*(?:\.\d+)?", cell)
    return None if m is None else float(m.group().replace(",", ""))


def printed_int(cell: str) -> int | None:
    """A printed integer (``printed_number`` truncated), or None for ``-``."""
    v = printed_number(cell)
    return None if v is None else int(v)


def step_time_s(gbs: int, seq: int, tokens_per_s_per_gpu: float, n_gpus: int) -> float:
    """Seconds per step a row's throughput implies (gbs x seq tokens over tokens/s/GPU x GPUs;
    ``strategies.reference.measured.throughput_step_s``)."""
    return throughput_step_s(gbs, seq, tokens_per_s_per_gpu * n_gpus)


def printed_tolerance_s(row: dict[str, str]) -> float:
    """How far the printed step may lie from the step the printed tokens/s/GPU implies, from
    the printing alone: half a unit in the step's last printed digit, plus the step times
    half a unit in the throughput's last digit over the throughput."""
    step_cell = row["Time per Global Step (s)"].strip()
    tok_cell = row["Tokens/sec/GPU"].strip().replace(",", "")
    dec = len(step_cell.split(".")[1]) if "." in step_cell else 0
    tdec = len(tok_cell.split(".")[1]) if "." in tok_cell else 0
    step, tok = float(step_cell), float(tok_cell)
    return 0.5 * 10.0 ** -dec + step * 0.5 * 10.0 ** -tdec / tok


def pretraining_rows(md: str) -> list[dict[str, str]]:
    """The rows of the pre-training table of one revision (the first table with the columns
    ``COLUMNS``, under "Pre-Training Performance")."""
    pre = md.split("## Pre-Training Performance", 1)
    if len(pre) < 2:
        raise ValueError("no '## Pre-Training Performance' section")
    body = pre[1].split("\n## ", 1)[0]
    for _, rows in parse_tables(body):
        if rows and all(k in rows[0] for k in COLUMNS):
            return rows
    raise ValueError("no pre-training table with the published columns")


def skip_reason(row: dict[str, str]) -> str | None:
    """Why a row cannot be transcribed as a run the cost model represents, or None."""
    name = row["Model"]
    for prefix, why in SKIP_MODELS.items():
        if name.startswith(prefix):
            return why
    if name not in CONFIGS:
        return f"model {name!r} has no config in CONFIGS"
    if printed_int(row["EP"]) is None and "ep" not in CONFIGS[name]:
        return "expert parallelism not printed"
    return None


def _model(name: str, seq: int) -> dict[str, Any]:
    """The model dict of a table name: the preset's (as recorded in published_2026.json, with
    its HF config.json) with the row's overrides."""
    cfg = CONFIGS[name]
    presets = {r["model"]["name"]: r["model"]
               for r in json.load(open(os.path.join(DATA, "published_2026.json")))}
    mo = copy.deepcopy(presets[cfg["preset"]])
    hf = mo["hf_config"]
    hf.update(cfg["hf"])
    if isinstance(hf.get("layer_types"), list):     # gpt-oss alternates sliding and full layers
        hf["layer_types"] = hf["layer_types"][:hf["num_hidden_layers"]]
    for k, key in (("name", "name"), ("params_b", "params_b"), ("active_params_b", "active_params_b")):
        if k in cfg:
            mo[key] = cfg[k]
    mo.update(layers=hf["num_hidden_layers"], heads=hf["num_attention_heads"],
              kv_heads=hf.get("num_key_value_heads", mo.get("kv_heads")),
              vocab=hf["vocab_size"], seq_len=seq)
    return mo


def entry(row: dict[str, str], commit: str, date: str) -> dict[str, Any]:
    """One pre-training row as a tier-2 (held-out) reference entry."""
    name = row["Model"]
    cfg = CONFIGS[name]
    n, gbs, mbs, lbs, ga, seq, tp, pp, cp = (printed_int(row[k]) for k in (
        "#GPUs", "GBS", "MBS", "LBS", "GA", "Seq Length", "TP", "PP", "CP"))
    ep = printed_int(row["EP"]) or cfg["ep"]
    vp = printed_int(row["VP"])
    dp = n // (tp * pp * cp)
    mo = _model(name, seq)
    rid = f"automodel_{mo['name'].replace('-', '').replace('.', '')}_h100_{n}"
    notes = ("AutoModel's benchmark recipe (BenchmarkingRecipeForNextTokenPrediction): mock "
             "data, fake balanced gate (every expert gets the same tokens), no gradient "
             "clipping; the step covers forward, backward and optimizer for the global batch "
             "(the table's notes). FSDP2 with bf16 parameters and fp32 gradient reduction "
             "(moe/parallelizer.py MixedPrecisionPolicy), reshard_after_forward=not "
             "pp_enabled (ZeRO-3 without pipelining, parameters kept gathered with it); "
             "activation_checkpointing: true in the config (a checkpoint_wrapper per "
             "decoder block: full recomputation); experts by grouped_gemm's ops.gmm; "
             f"torch.optim.Adam. Kernels: {row['Kernel Optimizations']}.")
    notes += (" moe_routing=contiguous: every benchmark config sets fake_balanced_gate: true "
              "(examples/benchmark/configs/*.yaml line 74 at 89e3a9fdd), so "
              "components/moe/layers.py FakeBalancedGate gives token t the experts t*k ... "
              "t*k+k-1 (mod E).")
    if "hf" in cfg and cfg["hf"].get("num_nextn_predict_layers") == 0:
        notes += f" {_NO_MTP}."
    if printed_int(row["EP"]) is None:
        notes += f" ep={ep}: {cfg['ep_why']}."
    return {
        "id": rid, "kind": "measured", "tier": 2,
        "framework": "automodel",
        "source": {"ref": "NVIDIA-NeMo/Automodel performance summary (NeMo AutoModel, PyTorch "
                          "backend)",
                   "table": f"{_path_at(commit)} (DGX-H100, BF16), row as of commit "
                            f"{commit[:12]} ({date[:10]})",
                   "url": f"{REPO_URL}/blob/{commit}/{_path_at(commit)}",
                   "also": f"https://docs.nvidia.com/nemo/automodel/latest/performance-summary"
                           f".html; benchmark config {REPO_URL}/blob/{FIRST}/{cfg['config']}"},
        "model": mo,
        "hardware": {"gpu": "H100 SXM", "n_gpus": n, "gpus_per_node": 8,
                     "interconnect": "DGX H100 (8 GPUs per node, NVLink4), scale-out not stated"},
        "plan": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "microbatch": mbs,
                 "global_batch": gbs, "local_batch_size": lbs,
                 "schedule": "interleaved 1F1B" if vp and vp > 1 else "1F1B",
                 "virtual_stages": vp or 1, "recompute": cfg["recompute"],
                 "sequence_parallel": False, "zero_stage": 3 if pp == 1 else 2,
                 "grad_accum": ga, "fsdp": printed_int(row["FSDP"]),
                 "attn_impl": ATTN[cfg.get("attn", "te")],
                 **({"moe_dispatcher": "deepep"}
                    if "deepep" in row["Kernel Optimizations"].lower() else {}),
                 "moe_routing": "contiguous"},
        "precision": "bf16",
        "measured": {"step_time_s": printed_number(row["Time per Global Step (s)"]),
                     "tokens_per_s_per_gpu": printed_number(row["Tokens/sec/GPU"]),
                     "model_tflops_per_gpu": printed_number(row["Model TFLOPs/sec/GPU"])},
        "notes": notes,
    }


_PATHS: dict[str, str] = {}


def _path_at(commit: str) -> str:
    return _PATHS.get(commit, TABLE_PATHS[0])


def revisions(repo: str) -> list[tuple[str, str, str]]:
    """``(commit, ISO date, table text)`` of every revision of the table, oldest first."""
    git = ["git", "-C", repo]
    out: list[tuple[str, str, str]] = []
    for path in TABLE_PATHS:
        log = subprocess.run(git + ["log", "--format=%H %cI", "--", path], capture_output=True,
                             text=True, check=True).stdout.split("\n")
        for line in reversed([x for x in log if x.strip()]):
            commit, date = line.split()
            show = subprocess.run(git + ["show", f"{commit}:{path}"], capture_output=True,
                                  text=True)
            if show.returncode == 0:     # the commit that deleted the path
                _PATHS[commit] = path
                out.append((commit, date, show.stdout))
    return sorted(out, key=lambda r: r[1])


def transcribe(revs: list[tuple[str, str, str]]
               ) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The entries of every transcribable row over the revisions ``revs`` (oldest first), and
    ``(row, reason)`` for each skipped one."""
    latest: dict[tuple[str, str], tuple[dict[str, str], str, str]] = {}
    history: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for commit, date, md in revs:
        for row in pretraining_rows(md):
            key = (row["Model"], row["#GPUs"])
            figs = {"step_time_s": printed_number(row["Time per Global Step (s)"]),
                    "tokens_per_s_per_gpu": printed_number(row["Tokens/sec/GPU"]),
                    "model_tflops_per_gpu": printed_number(row["Model TFLOPs/sec/GPU"])}
            seen = history.setdefault(key, [])
            if not seen or {k: seen[-1][k] for k in figs} != figs:
                seen.append({**figs, "commit": commit, "date": date[:10]})
            latest[key] = (row, seen[-1]["commit"], seen[-1]["date"])
    out, skipped = [], []
    for key, (row, commit, date) in latest.items():
        why = skip_reason(row)
        if why:
            skipped.append((f"{row['Model']} {row['#GPUs']} GPUs", why))
            continue
        e = entry(row, commit, date)
        if len(history[key]) > 1:
            e["history"] = history[key][:-1]
        out.append(e)
    return out, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", help="an Automodel checkout or mirror (git directory) with history")
    ap.add_argument("--out", default=os.path.join(DATA, "automodel_perf.json"))
    a = ap.parse_args(argv)
    out, skipped = transcribe(revisions(a.repo))

    def describe(r: dict[str, Any]) -> str:
        pl, me = r["plan"], r["measured"]
        return (f"{r['id']}: tp{pl['tp']} pp{pl['pp']} ep{pl['ep']} vp{pl['virtual_stages']} "
                f"{me['step_time_s']} s/step ({r['source']['table'].split('as of ')[1]})")

    write_reference(a.out, out, skipped, describe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
