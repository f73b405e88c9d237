#!/usr/bin/env python
"""Transcribe one release of Megatron-Bridge's published performance table (the rows of the
models paraplan can express: DeepSeek-V3, Qwen3 MoE, gpt-oss, Llama 3/3.1) into the reference
schema, as strategies/reference/data/megatron_bridge_2604.json was made:

    git clone https://github.com/NVIDIA-NeMo/Megatron-Bridge /tmp/mb
    python experiments/transcribe_megatron_bridge.py /tmp/mb

The model configs are those of the same models' rows in published_2026.json (their HF
config.json); the step time is derived as gbs x seq / (tokens/s/GPU x GPUs)."""
import json
import re
import subprocess
import sys

REPO = sys.argv[1] if len(sys.argv) > 1 else "."
txt = subprocess.run(["git", "-C", REPO, "show", "HEAD:docs/performance-summary-archive.md"],
                     capture_output=True, text=True, check=True).stdout
commit = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"],
                        capture_output=True, text=True, check=True).stdout.strip()
sec = txt.split("## 26.04.01 NeMo Container")[1].split("\n## ")[0]
old = {r["model"]["name"]: r["model"] for r in json.load(open("strategies/reference/data/published_2026.json"))}
MODELS = {"DeepSeekV3": "deepseek-v3", "GPT OSS 120B": "gpt-oss-120b", "Qwen3_30B_a3B": "qwen3-30b-a3b",
          "Qwen3_235B_a22B": "qwen3-235b-a22b", "LLAMA3.1_405B": "llama3.1-405b"}
L70 = {"name": "llama3-70b", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672,
       "vocab": 128256, "params_b": 70.6,
       "hf_config": {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
                     "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
                     "vocab_size": 128256, "tie_word_embeddings": False}}
SYS = {"DGX-GB300": ("GB300", "GB300 NVL72: 72 GPUs in one NVLink domain (1.8 TB/s per GPU), 4 GPUs per compute tray"),
       "DGX-GB200": ("GB200", "GB200 NVL72: 72 GPUs in one NVLink domain (1.8 TB/s per GPU), 4 GPUs per compute tray"),
       "DGX-B300": ("B300", "DGX B300 (8 GPUs per node, NVLink5), scale-out not stated"),
       "DGX-B200": ("B200", "DGX B200 (8 GPUs per node, NVLink5), scale-out not stated"),
       "DGX-H100": ("H100 SXM", "DGX H100 (8 GPUs per node, NVLink4), scale-out not stated")}
PREC = {"BF16": "bf16", "FP8": "fp8", "MXFP8": "mxfp8", "NVFP4": "nvfp4"}
out = []
for block in sec.split("#### Model: ")[1:]:
    name = block.split("\n")[0].strip()
    if name == "LLAMA3_70B":
        mo = dict(L70)
    elif name in MODELS:
        mo = dict(old[MODELS[name]])
    else:
        continue
    for line in block.split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 14 or not cells[0].startswith("DGX"):
            continue
        sysn, n, prec, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep, tok, tfl = cells
        if prec not in PREC:
            continue
        n, gbs, mbs, seq, tp, pp, cp = map(int, (n, gbs, mbs, seq, tp, pp, cp))
        tok = int(tok); tfl = int(re.match(r"\d+", tfl).group())
        ep = 1 if ep == "n/a" else int(ep)
        vp = None if vp == "n/a" else int(vp)
        gpu, inter = SYS[sysn]
        dp = n // (tp * pp * cp)
        m = dict(mo); m["seq_len"] = seq
        rid = f"mbridge260401_{MODELS.get(name, 'llama3-70b').replace('.', '').replace('-', '')}_{gpu.split()[0].lower()}_{n}_{prec.lower()}"
        if any(r["id"] == rid for r in out):
            rid += f"_tp{tp}pp{pp}"
        step = gbs * seq / (tok * n)
        notes = ["NVIDIA force-balances tokens among experts in these benchmarks (dropless)."] if ep > 1 or name not in ("LLAMA3_70B", "LLAMA3.1_405B") else ["Dense model."]
        if int(fsdp) > 0:
            notes.append(f"FSDP (Megatron FSDP) over {fsdp} GPUs.")
        out.append({
            "id": rid, "kind": "measured", "tier": 1,
            "source": {"ref": "NVIDIA-NeMo/Megatron-Bridge",
                       "table": f"docs/performance-summary-archive.md (26.04.01 NeMo container), commit {commit[:12]}"},
            "model": m,
            "hardware": {"gpu": gpu, "n_gpus": n, "gpus_per_node": 8, "interconnect": inter},
            "plan": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "microbatch": mbs, "global_batch": gbs,
                     "schedule": "interleaved 1F1B" if vp else "1F1B", "virtual_stages": vp or 1,
                     "recompute": None, "sequence_parallel": None, "zero_stage": 3 if int(fsdp) > 0 else None,
                     "grad_accum": gbs // (mbs * dp)},
            "precision": PREC[prec],
            "measured": {"tokens_per_s_per_gpu": tok, "tflops_per_gpu": tfl},
            "derived": {"step_time_s": round(step, 4), "how": "gbs x seq / (tokens/s/GPU x GPUs)"},
            "notes": " ".join(notes)})
json.dump(out, open("strategies/reference/data/megatron_bridge_2604.json", "w"), indent=1)
print(len(out))
for r in out: print(r["id"], r["plan"]["tp"], r["plan"]["pp"], r["plan"]["ep"], r["derived"]["step_time_s"])
