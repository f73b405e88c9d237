#!/usr/bin/env python
"""Transcribe NVIDIA NeMo's published performance summary (one container release) into the
reference schema, as strategies/reference/data/nemo_performance_2407.json was made:

    # the NeMo repository (its mirror or a clone with history)
    python experiments/transcribe_nemo_performance.py /path/to/NeMo --commit 8e3d65dcfe35

The table is ``docs/source/performance/performance_summary.md`` at the given commit: the
NeMo 24.07 container on DGX-H100 at FP8 (commit 8e3d65dcfe35, 2024-09-09, "24.07 perf
numbers", the table's last revision before the file left the repository on 2024-12-12 for
docs.nvidia.com). Its pre-training table becomes one tier-2 (held-out) entry per row; the
printed tokens/s/GPU and model TFLOP/s/GPU are recorded as published, and the step time
is derived by the reader (``strategies.reference.measured.measured_step``: global batch x
sequence / (tokens/s/GPU x GPUs)). Rows the cost model cannot represent are skipped with
the reason (``skip_reason``), printed and listed in docs/calibration.md §5.15.

The table gives sizes, not the model dimensions: those are the same models' configs in
NeMo-Framework-Launcher at the 24.07 tag (``launcher_scripts/conf/training/<family>/
<model>.yaml``, ``MODELS`` below), with the tokenizer's vocabulary (``VOCAB``).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import write_reference  # noqa: E402
from strategies.reference.measured import throughput_step_s  # noqa: E402

TABLE_PATH = "docs/source/performance/performance_summary.md"
URL = "https://github.com/NVIDIA/NeMo/blob/{commit}/" + TABLE_PATH
RELEASE = "24.07"
LAUNCHER = "NVIDIA/NeMo-Framework-Launcher@24.07 launcher_scripts/conf/training/"

#: vocabulary per tokenizer (the launcher configs name the tokenizer, not its size): GPT-2's
#: BPE (50257) padded by Megatron to a multiple of 128 x TP (make_vocab_size_divisible_by:
#: 128; 51200, as the GPT-3 175B rows of published.json), Llama 2's SentencePiece (32000,
#: its config.json), Llama 3's tiktoken (128256, its config.json), Nemotron's 256k
#: SentencePiece (nemotron_2_256k.model; 256000, Nemotron-4 15B/340B reports)
VOCAB = {"gpt3": 51200, "llama2": 32000, "llama3": 128256, "nemotron": 256000}

#: the table's model name -> (launcher config, layers, hidden, heads, kv heads or None,
#: ffn hidden, tokenizer), read from the launcher's configs at the 24.07 tag
MODELS: dict[str, tuple[str, int, int, int, int | None, int, str]] = {
    "GPT3-5B": ("gpt3/5b.yaml", 24, 4096, 32, None, 16384, "gpt3"),
    "GPT3-20B": ("gpt3/20b.yaml", 44, 6144, 48, None, 24576, "gpt3"),
    "GPT3-175B": ("gpt3/175b.yaml", 96, 12288, 96, None, 49152, "gpt3"),
    "LLAMA2-7B": ("llama/llama2_7b.yaml", 32, 4096, 32, None, 11008, "llama2"),
    "LLAMA2-13B": ("llama/llama2_13b.yaml", 40, 5120, 40, None, 13824, "llama2"),
    "LLAMA2-70B": ("llama/llama2_70b.yaml", 80, 8192, 64, 8, 28672, "llama2"),
    "LLAMA3-8B": ("llama/llama3_8b.yaml", 32, 4096, 32, 8, 14336, "llama3"),
    "LLAMA3-70B": ("llama/llama3_70b.yaml", 80, 8192, 64, 8, 28672, "llama3"),
    "Nemotron-8B": ("nemotron/nemotron_8b.yaml", 32, 4096, 32, None, 16384, "nemotron"),
    "Nemotron-22B": ("nemotron/nemotron_22b.yaml", 40, 6144, 48, None, 24576, "nemotron"),
    "Nemotron-340B": ("nemotron/nemotron_340b.yaml", 96, 18432, 96, 8, 73728, "nemotron"),
}

#: the pre-training table's columns, as printed (the last, an estimated time to train, is
#: a projection from the tokens/s and not transcribed)
COLUMNS = ("Model", "#-GPUs", "GBS", "MBS", "Sequence Length", "TP", "PP", "CP", "VP",
           "Tokens / sec / GPU", "Model TFLOP / sec / GPU")


def _number(cell: str) -> int:
    """A printed integer, also inside a Markdown link (``[888](https://...)``)."""
    m = re.search(r"\d[\d,]*", cell)
    if m is None:
        raise ValueError(f"no number in table cell {cell!r}")
    return int(m.group().replace(",", ""))


def parse_tables(md: str) -> list[tuple[str, list[dict[str, str]]]]:
    """Every Markdown table of ``md`` under its nearest ``###`` heading: ``(heading, rows)``,
    each row a mapping from the header's cell text to the row's cell text."""
    out: list[tuple[str, list[dict[str, str]]]] = []
    heading, header, rows = "", None, None
    for line in md.splitlines() + [""]:
        s = line.strip()
        if s.startswith("#"):
            heading = s.lstrip("#").strip()
        if s.startswith("|"):
            cells = [c.strip() for c in s.strip("|").split("|")]
            if header is None:
                header, rows = cells, []
            elif all(set(c) <= set("-: ") for c in cells):
                continue
            else:
                rows.append(dict(zip(header, cells)))
            continue
        if header is not None:
            out.append((heading, rows))
            header, rows = None, None
    return out


def step_time_s(gbs: int, seq: int, tokens_per_s_per_gpu: float, n_gpus: int) -> float:
    """Seconds per step a row's throughput implies: gbs x seq tokens per step over
    tokens/s/GPU x GPUs (``strategies.reference.measured.throughput_step_s``, the rule the
    reader applies to the recorded figures)."""
    return throughput_step_s(gbs, seq, tokens_per_s_per_gpu * n_gpus)


def skip_reason(table: str, row: dict[str, str]) -> str | None:
    """Why a row cannot be transcribed as a pre-training run the cost model represents, or
    None: fine-tuning rows (LoRA trains low-rank adapters on a frozen base, whose weight
    gradients and optimizer the model would count; SFT packs several samples per 4096-token
    sequence with attention kept within each, which the model's full causal square does not
    represent), a model without dimensions in ``MODELS``, a layer count that does not divide
    over pp x vp chunks, GPUs that do not divide over tp x pp x cp."""
    if "pretrain" not in table.lower().replace("-", ""):
        task = row.get("Task", "")
        if task.lower() == "lora":
            return "fine-tuning with LoRA: adapters on a frozen base are not modelled"
        return (f"fine-tuning ({task or table}) on packed sequences: attention within each "
                "packed sample is not modelled")
    name = row.get("Model", "")
    if name not in MODELS:
        return f"model {name!r} has no dimensions in MODELS (not in the launcher's configs)"
    layers = MODELS[name][1]
    tp, pp, cp, vp, n = (_number(row[k]) for k in ("TP", "PP", "CP", "VP", "#-GPUs"))
    if layers % (pp * vp):
        return f"{layers} layers do not divide over pp={pp} x vp={vp} chunks"
    if n % (tp * pp * cp):
        return f"{n} GPUs do not divide over tp={tp} x pp={pp} x cp={cp}"
    return None


def entry(row: dict[str, str], commit: str) -> dict[str, Any]:
    """One pre-training row as a reference entry (tier 2): the published tokens/s/GPU and
    model TFLOP/s/GPU as printed, the plan the row states, the rest left to the reader's
    stated assumptions (``strategies.reference.cases``)."""
    name = row["Model"]
    cfg, layers, hidden, heads, kv, ffn, tok = MODELS[name]
    n, gbs, mbs, seq, tp, pp, cp, vp = (_number(row[k]) for k in (
        "#-GPUs", "GBS", "MBS", "Sequence Length", "TP", "PP", "CP", "VP"))
    dp = n // (tp * pp * cp)
    model = {"name": name, "layers": layers, "hidden": hidden, "heads": heads,
             "ffn_hidden": ffn, "vocab": VOCAB[tok], "seq_len": seq}
    if kv is not None:
        model["kv_heads"] = kv
    rid = f"nemo{RELEASE.replace('.', '')}_{name.lower().replace('-', '_').replace('.', '')}_{n}gpu"
    return {
        "id": rid, "kind": "measured", "tier": 2,
        "source": {"ref": "NVIDIA/NeMo performance summary",
                   "table": f"{TABLE_PATH} (NeMo {RELEASE} container, DGX-H100, FP8), "
                            f"commit {commit[:12]}",
                   "url": URL.format(commit=commit),
                   "also": f"model dimensions: {LAUNCHER}{cfg}"},
        "model": model,
        "hardware": {"gpu": "H100 SXM", "n_gpus": n, "gpus_per_node": 8,
                     "interconnect": "DGX H100 (8 GPUs per node, NVLink4), scale-out not stated"},
        "plan": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": 1, "microbatch": mbs,
                 "global_batch": gbs,
                 "schedule": "interleaved 1F1B" if vp > 1 else "1F1B",
                 "virtual_stages": vp, "recompute": None, "sequence_parallel": None,
                 "zero_stage": None, "grad_accum": gbs // (mbs * dp)},
        "precision": "fp8",
        "measured": {"tokens_per_s_per_gpu": _number(row["Tokens / sec / GPU"]),
                     "model_tflops_per_gpu": _number(row["Model TFLOP / sec / GPU"])},
        "notes": "FP8 with Transformer Engine's delayed scaling (the 24.07 launcher configs: "
                 "fp8_hybrid, amax history 1024). Recompute, sequence parallelism and the "
                 "optimizer are not stated in the table; the launcher's configs for these "
                 "models run distributed_fused_adam with overlapped gradient and parameter "
                 "sync and no recomputation for all but Nemotron-340B, whose config (another "
                 "layout, pp=12 vp=8) recomputes selectively."}


def transcribe(md: str, commit: str) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The entries of every transcribable row of ``md`` and ``(row, reason)`` for each
    skipped one."""
    out, skipped = [], []
    for table, rows in parse_tables(md):
        for row in rows:
            label = f"{table}: {row.get('Model', '?')} {row.get('Task', '')} " \
                    f"{row.get('#-GPUs', '?')} GPUs".replace("  ", " ")
            why = skip_reason(table, row)
            if why:
                skipped.append((label, why))
            else:
                out.append(entry(row, commit))
    return out, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", help="a NeMo checkout or mirror (git directory) with history")
    ap.add_argument("--commit", default="8e3d65dcfe35", help="the table's commit")
    ap.add_argument("--out", default="strategies/reference/data/nemo_performance_2407.json")
    a = ap.parse_args(argv)
    git = ["git", "-C", a.repo]
    commit = subprocess.run(git + ["rev-parse", a.commit], capture_output=True, text=True,
                            check=True).stdout.strip()
    md = subprocess.run(git + ["show", f"{commit}:{TABLE_PATH}"], capture_output=True,
                        text=True, check=True).stdout
    out, skipped = transcribe(md, commit)

    def describe(r: dict[str, Any]) -> str:
        me, pl = r["measured"], r["plan"]
        s = step_time_s(pl["global_batch"], r["model"]["seq_len"], me["tokens_per_s_per_gpu"],
                        r["hardware"]["n_gpus"])
        return (f"{r['id']}: tp{pl['tp']} pp{pl['pp']} cp{pl['cp']} vp{pl['virtual_stages']} "
                f"{s:.4f} s/step")

    write_reference(a.out, out, skipped, describe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
