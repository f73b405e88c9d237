#!/usr/bin/env python
"""Transcribe the held-out reference file ``strategies/reference/data/heldout_2026b.json``
(calibration §5.48): published training runs with their full plan that no other reference
file holds, read from the sources' own files:

* pytorch/torchtitan ``benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md`` (Llama 3.1 8B
  and 70B, FSDP x TP on Grand Teton H100s, vanilla vs async TP, bf16 / float8) and
  ``benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md`` (Llama 3.1 8B, FSDP on 32 and
  64 H200s, float8);
* NVIDIA-NeMo/Megatron-Bridge ``docs/performance-summary-archive.md``, the "26.06 NeMo
  Container" pre-training tables (the release after the 26.04.01 rows of
  megatron_bridge_2604.json), rows of the models paraplan expresses.

    python experiments/transcribe_heldout_2026b.py [--out FILE]
    python experiments/transcribe_heldout_2026b.py --sources /path/to/torchtitan \
        /path/to/Megatron-Bridge [--save-inputs FILE] [--out FILE]

Two steps. ``read_sources`` reads the sources' files from clones of the two repositories
(tables' cells, the commits, the fitting Megatron-Bridge configs' fields) into one JSON
object, kept in the repository as ``INPUTS``; ``transcribe`` turns that object into the rows.
Without ``--sources`` the script reads ``INPUTS``, so it needs no network or clone
(``tests/test_transcribe_heldout_2026b.py``: its output is the data file, byte for byte;
with the clones, ``read_sources`` gives ``INPUTS``).

Every row's step time is derived by the stated formula gbs x seq / (tokens/s/GPU x GPUs);
unstated flags are the configs of the commit the source names (read below, cited in each
row's notes). The float8 rowwise rows read as ``fp8-rowwise`` (docs/calibration.md §5.147;
until then they carried a ``skip_reason``)."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

OUT = "strategies/reference/data/heldout_2026b.json"
#: what ``read_sources`` read from the two repositories (``transcribe``'s input)
INPUTS = "strategies/reference/sources/heldout_2026b_inputs.json"


def _hf(layers, hidden, heads, kv, ffn, vocab=128256) -> dict:
    return {"model_type": "llama", "hidden_size": hidden, "intermediate_size": ffn,
            "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "vocab_size": vocab, "tie_word_embeddings": False}


# torchtitan models/llama3/__init__.py llama3_configs "8B" / "70B" (dim, n_layers, n_heads,
# n_kv_heads, ffn_dim_multiplier 1.3, multiple_of 1024 -> 14336 / 28672), tiktoken vocab 128256
LLAMA = {"8b": dict(name="Llama 3.1 8B", layers=32, hidden=4096, heads=32, kv_heads=8,
                    ffn_hidden=14336, vocab=128256, params_b=8.0,
                    hf_config=_hf(32, 4096, 32, 8, 14336)),
         "70b": dict(name="Llama 3.1 70B", layers=80, hidden=8192, heads=64, kv_heads=8,
                     ffn_hidden=28672, vocab=128256, params_b=70.6,
                     hf_config=_hf(80, 8192, 64, 8, 28672))}
GRAND_TETON = ("Grand Teton (the source's Hardware section): 8x H100 96GB HBM2e (2.4 TB/s) "
               "per host, NVLink; backend RDMA network with 400 Gb/s per GPU; default 500W "
               "power limit")
ATTN = ("SDPA (F.scaled_dot_product_attention, is_causal=True, torchtitan models/llama3/"
        "model.py at the cited commit): the flash backend, FlashAttention-2")
COMPILE_NOTE = ("torch.compile ran (the source states it); the torchtitan profile prices "
                "eager elementwise kernels (strategies/framework.py TORCHTITAN "
                "elementwise_kernels='eager'), so the estimate counts unfused passes the "
                "compiled run did not make. Recorded under plan.compile, not in techniques, as "
                "published_2026.json's torchtitan rows are, so the row is estimated.")

ASYNC_NOTE = ("plan.tp_comm_overlap=true is async TP: the torchtitan profile runs TP overlap as "
              "PyTorch's micro-pipelined TP (strategies/framework.py TORCHTITAN "
              "tp_overlap='async-tp', the backward's summed-dgrad reduce-scatters unfused: "
              "tp_overlap_bwd_exposed; docs/calibration.md §5.50). ")


def torchtitan_async_tp(src: dict[str, Any]) -> list[dict]:
    """The reference rows of one transcribed torchtitan async-TP benchmark source (``src``:
    its ``path``, ``commit`` and ``tables``), one per table row."""
    path, commit = src["path"], src["commit"]
    out = []
    for table in src["tables"]:
        title = table["title"]
        m = re.search(r"Llama3 (\d+)b on (\d+) H100s with FSDP=(\d+), TP=(\d+), (.*?),"
                      r"\s*local batch size (\d+)", title)
        size, n, fsdp, tp, extra, local = m.group(1), *map(int, m.group(2, 3, 4)), \
            m.group(5), int(m.group(6))
        assert fsdp * tp == n, title
        rec = "full" if "full AC" in extra else "selective (per-op SAC)"
        for cells in table["rows"]:
            quant, vanilla, asyn = cells[0], float(cells[1]), float(cells[2])
            for tag, tps in (("tp", vanilla), ("asynctp", asyn)):
                q = {"None (bfloat16)": "bf16", "float8 tensorwise": "fp8tw",
                     "float8 rowwise": "fp8rw"}[quant]
                prec = {"bf16": "bf16",
                        "fp8tw": "fp8 tensorwise (torchao Float8Linear, dynamic current "
                                 "scaling per tensor)",
                        "fp8rw": "fp8 rowwise (torchao Float8Linear, per-row scales)"}[q]
                seq = 8192
                gbs = local * fsdp
                row = {
                    "id": f"torchtitan_2506_{size}b_{n}gpu_{q}_{tag}",
                    "kind": "measured", "tier": 2,
                    "source": {"ref": "pytorch/torchtitan",
                               "table": f"{path} @ {commit}, table 'Llama3 {size}b on {n} "
                                        f"H100s', row '{quant}', column "
                                        f"'{'Vanilla' if tag == 'tp' else 'Async'} TP "
                                        "tokens/sec'"},
                    "model": {**LLAMA[f"{size}b"], "seq_len": seq},
                    "hardware": {"gpu": "H100 96GB HBM2e (500W)", "gpus_per_node": 8,
                                 "n_gpus": n, "interconnect": GRAND_TETON},
                    "plan": {"tp": tp, "pp": 1, "dp": fsdp, "cp": 1, "ep": 1,
                             "microbatch": local, "global_batch": gbs,
                             "local_batch_size": local, "schedule": "no PP",
                             "virtual_stages": None, "recompute": rec,
                             "sequence_parallel": True, "zero_stage": 3,
                             "tp_comm_overlap": tag == "asynctp", "compile": True,
                             "techniques": "FSDP2+TP" + ("(async)" if tag == "asynctp" else ""),
                             "attn_impl": ATTN},
                    "precision": prec,
                    "measured": {"tokens_per_s_per_gpu": tps},
                    "derived": {"step_time_s": round(gbs * seq / (tps * n), 4),
                                "how": "gbs x seq / (tokens/s/GPU x GPUs)"},
                    "notes": (
                        f"Table title: '{title.strip()}'. tokens/sec read as per GPU "
                        "(torchtitan's logged tps is per device; the sibling Dec 2024 file "
                        "labels it TPS/GPU). seq_len not stated: 8192, "
                        "torchtitan 820504e models/llama3/train_configs/"
                        f"llama3_{size}b.toml training.seq_len (the commit the source's "
                        "Versions table names). global batch = local batch x FSDP degree "
                        f"({local} x {fsdp}); one micro-batch of the local batch (no "
                        "gradient accumulation stated). FSDP2 = ZeRO-3; torchtitan's TP "
                        "shards the norms as sequence parallel. Async TP "
                        "(parallelism.enable_async_tensor_parallel) is 'only effective when "
                        "compile is enabled' (config_manager.py at 820504e). "
                        + (ASYNC_NOTE if tag == "asynctp" else "") + COMPILE_NOTE)}
                if q == "fp8rw":    # read as fp8-rowwise (docs/calibration.md §5.147)
                    row["notes"] += (
                        " The source flags the vanilla-TP float8 rowwise figure as a known "
                        "slowdown (pytorch/torchtitan#1207: torchao's rowwise recipe also "
                        "converted the small wk/wv linears; the auto filter that skips them, "
                        "pytorch/ao#2410 and torchtitan#1319, landed after these runs).")
                out.append(row)
    return out


def torchtitan_h200(src: dict[str, Any]) -> list[dict]:
    """The reference rows of the transcribed torchtitan H200 table (``src``: its ``path``,
    ``commit`` and ``rows``), one per node count."""
    path, commit = src["path"], src["commit"]
    out = []
    for cells in src["rows"]:
        nodes, tps, mem = int(cells[0]), float(cells[1]), float(cells[2])
        n, local, seq = nodes * 8, 2, 8192
        gbs = local * n
        out.append({
            "id": f"torchtitan_2506_8b_h200_{n}gpu_fp8",
            "kind": "measured", "tier": 2,
            "source": {"ref": "pytorch/torchtitan",
                       "table": f"{path} @ {commit}, Results table, row NUM_NODES={nodes}, "
                                "column TPS/GPU"},
            "model": {**LLAMA["8b"], "seq_len": seq},
            "hardware": {"gpu": "H200 141GB", "gpus_per_node": 8, "n_gpus": n,
                         "interconnect": "WhiteFiber: 8x H200 per host on NVLink; hosts on a "
                                         "backend RDMA fabric, 400 Gb/s per GPU (Mellanox "
                                         "CX-7)"},
            "plan": {"tp": 1, "pp": 1, "dp": n, "cp": 1, "ep": 1, "microbatch": local,
                     "global_batch": gbs, "local_batch_size": local, "schedule": "no PP",
                     "virtual_stages": None, "recompute": "selective (per-op SAC)",
                     "sequence_parallel": False, "zero_stage": 3, "compile": True,
                     "techniques": "FSDP2+Float8", "attn_impl": ATTN},
            "precision": "fp8 tensorwise (torchao Float8Linear, dynamic current scaling per "
                         "tensor; float8 FSDP all-gather)",
            "measured": {"tokens_per_s_per_gpu": tps, "memory_gib": mem},
            "derived": {"step_time_s": round(gbs * seq / (tps * n), 4),
                        "how": "gbs x seq / (tokens/s/GPU x GPUs)"},
            "notes": (
                "Command in the source: llama3_8b.toml with --training.local_batch_size=2 "
                "--training.compile --model.converters=quantize.linear.float8 "
                "--quantize.linear.float8.enable_fsdp_float8_all_gather "
                "--quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp "
                "--quantize.linear.float8.force_recompute_fp8_weight_in_bwd; TPS and memory "
                "'arbitrarily sampled at the 100th iteration'. From torchtitan e7c0cae (the "
                "source's Versions table) models/llama3/train_configs/llama3_8b.toml: seq_len "
                "8192, data_parallel_shard_degree -1 (FSDP over every GPU), TP 1, PP 1, "
                "activation_checkpoint selective / op; float8 recipe_name None = tensorwise. "
                f"global batch = 2 x {n}. The float8 FSDP all-gather (weights gathered in "
                "fp8) is not modelled: the estimate gathers bf16 weights. " + COMPILE_NOTE)})
    return out


BRIDGE_MODELS = {"DeepSeekV3": "deepseek-v3", "GPT OSS 120B": "gpt-oss-120b",
                 "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b",
                 "LLAMA3.1_405B": "llama3.1-405b"}
BRIDGE_SYS = {
    "DGX-GB300": ("GB300", "GB300 NVL72: 72 GPUs in one NVLink domain (1.8 TB/s per GPU), "
                           "4 GPUs per compute tray"),
    "DGX-GB200": ("GB200", "GB200 NVL72: 72 GPUs in one NVLink domain (1.8 TB/s per GPU), "
                           "4 GPUs per compute tray"),
    "DGX-B300": ("B300", "DGX B300 (8 GPUs per node, NVLink5), scale-out not stated"),
    "DGX-H100": ("H100 SXM", "DGX H100 (8 GPUs per node, NVLink4), scale-out not stated")}
BRIDGE_PREC = {"BF16": "bf16", "FP8": "fp8", "MXFP8": "mxfp8", "NVFP4": "nvfp4"}


#: NeMo Framework 26.06's Megatron-Bridge (docs/releases/software-versions.md)
BRIDGE_TAG = "v0.5.0"
BRIDGE_NAMES = {"deepseek-v3": "DEEPSEEK_V3", "gpt-oss-120b": "GPT_OSS_120B",
                "qwen3-30b-a3b": "QWEN3_30B_A3B", "qwen3-235b-a22b": "QWEN3_235B_A22B"}
#: the table's precision -> the config name's; "FP8" fits only a current-scaling (FP8_CS)
#: config: the row then states current scaling
BRIDGE_DTYPE = {"MXFP8": "FP8_MX", "BF16": "BF16", "NVFP4": "NVFP4", "FP8": "FP8_CS"}


#: DeepSeek-V3's layout where its config names none: the performance script
#: (deepseek_llm_pretrain.py, "Recompute layout based on updated PP/VP sizes") calls
#: set_deepseek_v3_pipeline_model_parallel_layout, whose layout_map (v0.5.0
#: src/megatron/bridge/recipes/deepseek/deepseek_v3.py L71 and L75; last stage decoder + mtp +
#: loss) reads in Megatron's layout grammar as below
DSV3_LAYOUT_MAP = {(8, 1): ("Et*8|(t*8|)*6t*5mL", "L71"), (4, 4): ("Et*4|(t*4|)*14tmL", "L75")}


#: the fields of a config that ``fitting_config`` and ``bridge_switches`` read
CONFIG_FIELDS = ("file", "num_gpus", "tensor_model_parallel_size",
                 "pipeline_model_parallel_size", "context_parallel_size",
                 "virtual_pipeline_model_parallel_size", "expert_model_parallel_size",
                 "micro_batch_size", "global_batch_size", "moe_flex_dispatcher_backend",
                 "moe_a2a_overlap", "cuda_graph_impl", "cuda_graph_scope",
                 "cutedsl_fused_grouped_mlp", "fp8_dot_product_attention", "recompute_modules",
                 "pp_layout")


def bridge_row(name: str, cells: list[str]) -> dict[str, Any]:
    """One 13-cell row of a 26.06 table, parsed (``layout``: what a config must match)."""
    sysn, n, prec, gbs, mbs, seq, tp, pp, cp, vp, ep, tok, tfl = cells
    n, gbs, mbs, seq, tp, pp, cp = map(int, (n, gbs, mbs, seq, tp, pp, cp))
    ep = 1 if ep == "n/a" else int(ep)
    vp = None if vp == "n/a" else int(vp)
    return dict(name=name, key=BRIDGE_MODELS[name], sysn=sysn, n=n, prec=prec, gbs=gbs,
                mbs=mbs, seq=seq, tp=tp, pp=pp, cp=cp, vp=vp, ep=ep, tok=tok, tfl=tfl,
                layout=(n, tp, pp, cp, vp or 1, ep, mbs, gbs))


def fitting_config(configs: dict, key: str, gpu: str, prec: str, layout: tuple) -> str | None:
    """The name of the ``BRIDGE_TAG`` config that fits a 26.06 row (model, system, precision,
    GPUs, tp, pp, cp, vpp, ep, mbs, gbs all the config's; V2 before V1 before any other
    variant), or None where none fits."""
    if key not in BRIDGE_NAMES or prec not in BRIDGE_DTYPE:
        return None
    head = f"{BRIDGE_NAMES[key]}_PRETRAIN_CONFIG_{gpu}_{BRIDGE_DTYPE[prec]}_"
    fit = []
    for name, c in configs.items():
        mine = (c["num_gpus"], c["tensor_model_parallel_size"], c["pipeline_model_parallel_size"],
                c["context_parallel_size"], c["virtual_pipeline_model_parallel_size"] or 1,
                c["expert_model_parallel_size"], c["micro_batch_size"], c["global_batch_size"])
        if name.startswith(head) and mine == tuple(layout):
            fit.append((0 if name.endswith("_V2") else 1 if name.endswith("_V1") else 2, name))
    return min(fit)[1] if fit else None


def bridge_switches(configs: dict, key: str, gpu: str, prec: str, layout: tuple) -> dict:
    """The MoE switches of the config that fits a 26.06 row (``fitting_config``), as plan
    fields with the config's name, or {} where none fits. Every MoE row here has tp = 1, so
    the configs' expert_tensor_parallel_size 1 is the default."""
    name = fitting_config(configs, key, gpu, prec, layout)
    if name is None:
        return {}
    c = configs[name]
    out = {"moe_dispatcher": c["moe_flex_dispatcher_backend"] or "alltoall",
           "ep_overlap": bool(c["moe_a2a_overlap"]),
           # Megatron-Core 0.18's cuda_graph_impl="full_iteration" captures the whole step
           "cuda_graph": c["cuda_graph_impl"] == "full_iteration",
           # TE's fused grouped MLP (docs/calibration.md §5.90)
           "fused_grouped_mlp": bool(c["cutedsl_fused_grouped_mlp"]),
           "recipe": f"NVIDIA-NeMo/Megatron-Bridge@{BRIDGE_TAG} scripts/performance/configs/"
                     f"{c['file']} {name}"}
    if c["recompute_modules"] == []:
        out["recompute"] = "none"
    elif c["recompute_modules"]:
        out["recompute"] = "selective"
        out["recompute_modules"] = "+".join(c["recompute_modules"])
    if c["pp_layout"]:
        out["pp_layout"] = c["pp_layout"]
    elif key == "deepseek-v3" and (layout[2], layout[4]) in DSV3_LAYOUT_MAP:
        out["pp_layout"], line = DSV3_LAYOUT_MAP[(layout[2], layout[4])]
        out["recipe"] += (f" (no pp_layout: set_deepseek_v3_pipeline_model_parallel_layout's "
                          f"map, src/megatron/bridge/recipes/deepseek/deepseek_v3.py {line})")
    # TE's FP8 (under MXFP8: MXFP8) fused attention (docs/calibration.md §5.98)
    out["fp8_attention"] = bool(c["fp8_dot_product_attention"])
    out["recipe_other"] = (
        f"the config's cuda_graph_impl={c['cuda_graph_impl']}, cuda_graph_scope="
        f"{c['cuda_graph_scope']} (only 'full_iteration' is the plan's cuda_graph; Transformer "
        f"Engine's per-layer scopes are not modelled); cutedsl_fused_grouped_mlp="
        f"{c['cutedsl_fused_grouped_mlp']} (the plan's fused_grouped_mlp); "
        f"fp8_dot_product_attention={c['fp8_dot_product_attention']} (the plan's "
        f"fp8_attention)")
    return out


def bridge_2606(src: dict[str, Any]) -> list[dict]:
    """The rows of the '26.06 NeMo Container' pre-training tables (``read_bridge``)."""
    path, commit, configs = src["path"], src["commit"], src["configs"]
    models = {r["model"]["name"]: r["model"]
              for r in json.load(open(os.path.join(ROOT, "strategies/reference/data/"
                                                   "published_2026.json")))}
    out = []
    for name, rows in src["tables"].items():
        for cells in rows:
            b = bridge_row(name, cells)
            key, sysn, n, prec, gbs, mbs, seq, tp, pp, cp, vp, ep, tok, tfl = (
                b[k] for k in ("key", "sysn", "n", "prec", "gbs", "mbs", "seq", "tp", "pp",
                               "cp", "vp", "ep", "tok", "tfl"))
            gpu, inter = BRIDGE_SYS[sysn]
            dp = n // (tp * pp * cp)
            sw = bridge_switches(configs, key, sysn.split("-")[1], prec, b["layout"])
            recipe, other = sw.pop("recipe", None), sw.pop("recipe_other", None)
            rid = (f"mbridge2606_{key.replace('.', '').replace('-', '')}_"
                   f"{gpu.split()[0].lower()}_{n}_{prec.lower()}")
            if any(r["id"] == rid for r in out):
                rid += f"_gbs{gbs}"
            out.append({
                "id": rid, "kind": "measured", "tier": 2,
                "source": {"ref": "NVIDIA-NeMo/Megatron-Bridge",
                           "table": f"{path} (26.06 NeMo container), commit {commit}, "
                                    f"'Model: {name}' row {sysn} {n} GPUs {prec} GBS {gbs}"},
                "model": {**models[key], "seq_len": seq},
                "hardware": {"gpu": gpu, "n_gpus": n, "gpus_per_node": 8,
                             "interconnect": inter},
                "plan": {**({"moe_balance": "forced"} if ep > 1 and src["force_balanced"]
                            else {}),
                         "tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "microbatch": mbs,
                         "global_batch": gbs,
                         "schedule": "interleaved 1F1B" if vp else "1F1B",
                         "virtual_stages": vp or 1, "recompute": None,
                         "sequence_parallel": None, "zero_stage": None,
                         "grad_accum": gbs // (mbs * dp), **sw},
                "precision": ("fp8 (current scaling: the FP8_CS config)"
                              if prec == "FP8" and recipe else BRIDGE_PREC[prec]),
                "measured": {"tokens_per_s_per_gpu": int(tok),
                             "tflops_per_gpu": int(re.match(r"\d+", tfl).group())},
                "derived": {"step_time_s": round(gbs * seq / (int(tok) * n), 4),
                            "how": "gbs x seq / (tokens/s/GPU x GPUs)"},
                "notes": ("NVIDIA force-balances tokens among experts in these benchmarks "
                          "(dropless; the page's footnote). " if ep > 1 else "Dense model. ")
                + "The 26.06 table has no column for Megatron's sharded data parallelism "
                  "(the 26.04.01 table's, 0 for these models there): zero_stage left to "
                  "the stack's default; model config as the same model's rows of "
                  "published_2026.json (its HF config.json). The 26.06.01 and 26.08 tables "
                  "repeat these layouts for the MoE models on GB300/GB200 at tokens/s within "
                  "2.2 per cent (but 26.06.01 GPT-OSS, "
                  "flagged as a cuDNN regression); they are not transcribed again. "
                + (f"MoE switches (moe_dispatcher, ep_overlap, cuda_graph, fused_grouped_mlp, "
                   f"fp8_attention, recompute, recompute_modules, pp_layout) from the config whose layout is the row's: "
                   f"{recipe} (the Megatron-Bridge of NeMo 26.06, docs/releases/"
                   f"software-versions.md; V2 before V1), read by importing the file at the "
                   f"tag; {other}." if recipe else
                   "No Megatron-Bridge v0.5.0 config is read for this row (the MoE models' "
                   "configs only): recompute, overlaps and CUDA graphs are the stack's "
                   "defaults.")
                + (f" pp_layout {sw['pp_layout']}: the config's Megatron layout (61 layers, "
                   "the MTP layer m and the loss L), which the reader runs as stated."
                   if sw.get("pp_layout") else "")})
    return out


def transcribe(inputs: dict[str, Any]) -> list[dict]:
    """The rows of ``OUT`` from ``read_sources``' object."""
    rows = (torchtitan_async_tp(inputs["torchtitan_async_tp"])
            + torchtitan_h200(inputs["torchtitan_h200"]) + bridge_2606(inputs["bridge_2606"]))
    assert len({r["id"] for r in rows}) == len(rows)
    return rows


def dump(obj: Any) -> str:
    """The files' JSON text (one-space indent, a final newline)."""
    return json.dumps(obj, indent=1) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", nargs=2, metavar=("TORCHTITAN", "MEGATRON_BRIDGE"),
                    help="read the sources from these clones (e.g. /work/.mirror/"
                         "pytorch+torchtitan/repo /work/.mirror/NVIDIA-NeMo+Megatron-Bridge/"
                         f"repo) instead of {INPUTS}")
    ap.add_argument("--save-inputs", metavar="FILE",
                    help=f"with --sources: write what was read to FILE (the repository's: "
                         f"{INPUTS})")
    ap.add_argument("--out", default=os.path.join(ROOT, OUT), metavar="FILE",
                    help=f"where the rows go (default {OUT})")
    args = ap.parse_args()
    if args.save_inputs and not args.sources:
        ap.error("--save-inputs needs --sources")
    if args.sources:
        from experiments.heldout_2026b_sources import read_sources
        inputs = read_sources(*args.sources)
        if args.save_inputs:
            with open(args.save_inputs, "w") as f:
                f.write(dump(inputs))
    else:
        with open(os.path.join(ROOT, INPUTS)) as f:
            inputs = json.load(f)
    rows = transcribe(inputs)
    with open(args.out, "w") as f:
        f.write(dump(rows))
    for r in rows:
        print(r["id"], r["derived"]["step_time_s"], r.get("skip_reason", "")[:30])
    print(len(rows), "rows ->", args.out)


if __name__ == "__main__":
    main()
