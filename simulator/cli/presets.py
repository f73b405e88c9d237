"""``paraplan presets``: the model, GPU and cluster presets."""
from __future__ import annotations

import argparse

from simulator.cli.common import add_json, emit_json, table
from strategies.framework import ALIASES, PROFILES
from strategies.stacks.variants import TORCHTITAN_COMPILE
from strategies.presets import MODEL_PRESETS
from topologies.cluster.preset_table import preset_description, preset_names
from topologies.gpus import GPUS


def register(sub) -> None:
    p = sub.add_parser("presets", help="list model, GPU and cluster presets")
    add_json(p)
    p.set_defaults(func=run)


def _model_row(m) -> dict:
    return {"name": m.name, "params_b": m.num_params() / 1e9,
            "active_params_b": m.active_params() / 1e9, "layers": m.num_layers,
            "hidden": m.hidden_size, "heads": m.num_attention_heads, "kv_heads": m.kv_heads,
            "seq_len": m.seq_length, "experts": m.num_experts}


def run(args: argparse.Namespace) -> int:
    models = [_model_row(m) for m in MODEL_PRESETS.values()]
    gpus = [{"name": g.name, "bf16_tflops": g.peak_flops["bf16"] / 1e12,
             "fp8_tflops": (g.peak_flops.get("fp8") or 0) / 1e12 or None,
             "fp4_tflops": (g.peak_flops.get("fp4") or 0) / 1e12 or None,
             "block_formats": list(g.block_formats), "tdp_w": g.tdp_w,
             "hbm_gib": g.hbm_bytes / 2**30, "hbm_tb_s": g.hbm_bandwidth / 1e12}
            for g in GPUS.values()]
    clusters = [{"name": n, "description": preset_description(n)} for n in preset_names()]
    # each stack, then torchtitan's torch.compile variant (``--framework torchtitan-compile``,
    # a switch of that stack, not a profile of its own)
    frameworks = [_framework_row(f) for f in (*PROFILES.values(), TORCHTITAN_COMPILE)]
    if args.json:
        emit_json({"models": models, "gpus": gpus, "clusters": clusters,
                   "frameworks": frameworks})
        return 0
    print("Models")
    print(table(["name", "params", "active", "layers", "hidden", "heads", "kv", "seq", "experts"],
                [[m["name"], f"{m['params_b']:.1f}B",
                  f"{m['active_params_b']:.1f}B" if m["experts"] > 1 else "-", m["layers"],
                  m["hidden"], m["heads"], m["kv_heads"], m["seq_len"], m["experts"] or "-"]
                 for m in models]))
    print("\nGPUs")
    print(table(["name", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "block formats",
                 "HBM GiB", "HBM TB/s", "TDP W"],
                [[g["name"], f"{g['bf16_tflops']:.0f}",
                  f"{g['fp8_tflops']:.0f}" if g["fp8_tflops"] else "-",
                  f"{g['fp4_tflops']:.0f}" if g["fp4_tflops"] else "-",
                  ",".join(g["block_formats"]) or "-",
                  f"{g['hbm_gib']:.0f}", f"{g['hbm_tb_s']:.2f}",
                  f"{g['tdp_w']:.0f}" if g["tdp_w"] else "-"] for g in gpus]))
    print("\nClusters (use PRESET:NODES, e.g. dgx-h100:16; rack-scale presets count 4-GPU "
          "trays, e.g. gb200-nvl72:64 = 256 GPUs in 4 racks, or PRESET:TRAYSxT for T trays "
          "a rack, e.g. gb200-nvl72:256x16 = 1024 GPUs in 16 racks)")
    print(table(["name", "node"], [[c["name"], c["description"]] for c in clusters], "ll"))
    print("\nFrameworks (--framework NAME)")
    print(table(["name", "schedules", "zero", "runs", "precisions", "export", "stack"],
                [[f["name"], ",".join(f["schedules"]) or "-", ",".join(map(str, f["zero_stages"])),
                  " ".join(k for k in ("cp", "ep", "sp", "tp_comm_overlap") if f[k]) or "-",
                  ",".join(f["precisions"]), f["export"], f["description"].split(":")[0]]
                 for f in frameworks], "lllllll"))
    return 0


def _framework_row(f) -> dict:
    return {"name": f.name, "description": f.description,
            "aliases": [a for a, n in ALIASES.items() if n == f.name],
            "schedules": list(f.schedules), "zero_stages": list(f.zero_stages),
            "zero_with_pp": f.zero_with_pp, "cp": f.context_parallel, "ep": f.expert_parallel,
            "sp": f.sequence_parallel, "tp_comm_overlap": f.tp_comm_overlap,
            "recompute": list(f.recompute), "recompute_methods": list(f.recompute_methods),
            "recompute_modules": list(f.recompute_modules), "defaults": f.plan_defaults(),
            "layouts": list(f.layouts), "pipeline_split": f.pipeline_split,
            "precisions": list(f.precisions), "precision_source": f.precision_source,
            "export": f.export}
