#!/usr/bin/env python
"""Transcribe the held-out reference file ``strategies/reference/data/heldout_2026e.json``
(calibration §5.208): NVIDIA-NeMo/Megatron-Bridge ``docs/performance-summary-archive.md``,
the "25.11 NeMo Container" and "25.09 NeMo Container" pre-training tables (one table per
system, a row per model; a cell "a (b)" holds two runs: the parenthesised one at another
quantization granularity, the table's footnote), every run of the seven models paraplan
expresses (Llama 3 8B, Llama 3 70B, Llama 3.1 405B, DeepSeek-V3, GPT-OSS 120B,
Qwen3-30B-A3B, Qwen3-235B-A22B) whose layout no other reference file holds for the same
container (``published_2026.json`` holds twelve 25.11 runs: skipped: ``every_run``).

    python experiments/transcribe_heldout_2026e.py [--out FILE]
    python experiments/transcribe_heldout_2026e.py --sources /path/to/Megatron-Bridge \
        [--save-inputs FILE] [--out FILE]

``read_sources`` keeps the two sections' table cells, the commit and the token-drop defaults
of the 25.09 container's Megatron-Bridge (``docs/releases/software-versions.md``: 0.1.0rc3
for NeMo Framework 25.09, 0.2.0 for 25.11) and each run's config at its tag
(``experiments.heldout_2026e_switches.read_configs``); ``transcribe`` turns them into rows.
Every row takes the switches its config states (``heldout_2026e_switches``: the v0.2.0
``WorkloadBaseConfig`` of a 25.11 run's model, GPU and precision; the v0.1.0rc3 YAML and
``run_script.py`` for a 25.09 run, calibration §5.210); the 25.09 MoE rows also take the
routing ``scripts/performance/run_script.py`` at v0.1.0rc3 sets per model and system
(``RUN_SCRIPT_0109``). Every row's step is gbs x seq / (tokens/s/GPU x GPUs)."""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from experiments import transcribe_heldout_2026c as c26  # noqa: E402
from experiments.heldout_2026e_switches import (read_configs, switches_2509,  # noqa: E402
                                                switches_2511)

OUT = "strategies/reference/data/heldout_2026e.json"
INPUTS = "strategies/reference/sources/heldout_2026e_inputs.json"
#: the Llama 3 8B model config: the same model's rows of this file (the others' are
#: ``c26.MODEL_ROWS``)
LLAMA8_ROWS = "strategies/reference/data/nemo_performance_25.json"
MODELS = {**c26.MODELS, "LLAMA3_8B": "llama3-8b"}
#: the table's precision cell -> the row's precision
PRECISION = {"BF16": "bf16", "FP8-CS": "fp8 (current scaling)", "FP8-MX": "mxfp8"}
#: (container, tag, stack, id prefix); the tag is the one software-versions.md names
CONTAINERS = (
    ("25.11", "v0.2.0", "Megatron-Bridge v0.2.0 / Megatron Core (NeMo Framework 25.11 "
     "container: Megatron Core dev:0.15.0, Transformer Engine 2.9)", "mbridge2511"),
    ("25.09", "v0.1.0rc3", "Megatron-Bridge v0.1.0rc3 / Megatron Core (NeMo Framework 25.09 "
     "container: Megatron Core 0.14.0, Transformer Engine 2.7.0)", "mbridge2509"))
#: 25.09's table has no precision column: its unparenthesised runs are per-tensor FP8, the
#: parenthesised ones "32x32 for both weights and activations" (MXFP8) on GB200 and B200 and
#: "128x128 for weights and 1x128 for activations" (blockwise) on H100 (the footnote); the
#: per-tensor recipe is current scaling, the only per-tensor key of the v0.1.0rc3
#: performance YAMLs' ``perf_matrix`` (``bf16``, ``fp8_cs``, ``fp8_mx``, ``fp8_ss``)
PREC_0925 = {"DGX-GB200": ("FP8-CS", "FP8-MX"), "DGX-B200": ("FP8-CS", "FP8-MX"),
             "DGX-H100": ("FP8-CS", None)}
RUN_SCRIPT = "scripts/performance/run_script.py"
#: where each container's Megatron-Bridge states the MoE rows' expert tensor parallelism:
#: v0.2.0's ``WorkloadBaseConfig`` files (``<MODEL>_<GPU>_<DTYPE>_BASE_CONFIG``), v0.1.0rc3's
#: YAML ``perf_matrix.<gpu>.num_gpus_<n>.common.etp``
ETP_FILES = {"25.11": ("deepseek/workload_base_configs.py", "gpt_oss/workload_base_configs.py",
                       "qwen3/workload_base_configs.py"),
             "25.09": {"deepseek-v3": "deepseek/deepseek_v3_llm_pretrain.yaml",
                       "qwen3-30b-a3b": "qwen3/qwen3_30b_a3b_llm_pretrain.yaml",
                       "qwen3-235b-a22b": "qwen3/qwen3_235b_a22b_llm_pretrain.yaml"}}
DTYPE = {"BF16": "BF16", "FP8-CS": "FP8_CS", "FP8-MX": "FP8_MX"}
DROP_FILE = "src/megatron/bridge/training/utils/moe_token_drop.py"
#: the 25.09 MoE switches ``RUN_SCRIPT`` at v0.1.0rc3 sets (L49-109): DeepSeek-V3 drops
#: tokens on B200/GB200 (``use_tokendrop``, which turns DeepEP off) and on H100 runs DeepEP
#: with forced balancing and the all-to-all overlap (``A2A_1F1B``), recompute modules per
#: GPU; Qwen3 always drops tokens (``apply_moe_token_drop``: the all-to-all dispatcher)
RUN_SCRIPT_0109 = {
    ("deepseek-v3", "DGX-H100"): dict(moe_dispatcher="deepep", ep_overlap=True,
                                      recompute="selective", recompute_modules="mla_up_proj+mlp"),
    ("deepseek-v3", "DGX-GB200"): dict(moe_dispatcher="alltoall", ep_overlap=False,
                                       recompute="selective",
                                       recompute_modules="mla_up_proj+mlp+moe_act"),
    ("deepseek-v3", "DGX-B200"): dict(moe_dispatcher="alltoall", ep_overlap=False)}


def section(text: str, name: str) -> str:
    """The "## <name> NeMo Container" section of the archive page."""
    return text.split(f"## {name} NeMo Container\n")[1].split("\n## ")[0]


def read_sources(repo: str) -> dict[str, Any]:
    """Both containers' table rows by system (cells as written), the footnotes, the commit,
    and the v0.1.0rc3 token-drop defaults (``apply_moe_token_drop``'s signature)."""
    from experiments.bridge_recipe_trace import git_show
    txt = git_show(repo, "HEAD", c26.PATH)
    head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout
    out: dict[str, Any] = {"path": c26.PATH, "commit": head.strip()[:12]}
    for name, *_ in CONTAINERS:
        sec = section(txt, name)
        tables = {}
        for block in sec.split("#### System: ")[1:]:
            rows = [[x.strip() for x in ln.strip().strip("|").split("|")]
                    for ln in block.splitlines() if ln.startswith("| ")]
            tables[block.split("\n")[0].strip()] = [r for r in rows if model_key(r[0])]
        out[name] = {"tables": tables,
                     "notes": [ln[2:] for ln in sec.splitlines() if ln.startswith("- ")]}
    out["etp"] = read_etp(repo, out)
    out["configs"] = read_configs(repo, {
        c: [b for sysn, rows in out[c]["tables"].items() for cells in rows
            for b in parse(c, sysn, cells)] for c in ("25.11", "25.09")})
    drop = git_show(repo, "v0.1.0rc3", DROP_FILE)
    sig = re.search(r"def apply_moe_token_drop\((.*?)\) -> None:", drop, re.S).group(1)
    out["token_drop"] = {
        "file": DROP_FILE, "tag": "v0.1.0rc3",
        "capacity_factor": float(re.search(r"moe_expert_capacity_factor: float = ([\d.]+)",
                                           sig).group(1)),
        "pad_to_capacity": re.search(r"moe_pad_expert_input_to_capacity: bool = (\w+)",
                                     sig).group(1) == "True"}
    return out


def etp_key(container: str, b: dict) -> str:
    """The name under which ``read_etp`` keeps a MoE run's expert tensor parallelism."""
    if container == "25.11":
        return (f"{c26.BRIDGE_NAMES[b['key']]}_{b['sysn'].split('-')[1]}_{DTYPE[b['prec']]}"
                "_BASE_CONFIG")
    return f"{ETP_FILES['25.09'][b['key']]} {b['sysn'].split('-')[1].lower()} num_gpus_{b['n']}"


def read_etp(repo: str, src: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Each container's MoE runs' ``expert_tensor_parallel_size`` where its tag's configs
    state it (``ETP_FILES``), by ``etp_key``."""
    import yaml

    from experiments.bridge_recipe_trace import git_show, workload_configs
    cfg = workload_configs(repo, "v0.2.0", ETP_FILES["25.11"])
    out: dict[str, dict[str, int]] = {"25.11": {}, "25.09": {}}
    for c in ("25.11", "25.09"):
        for sysn, rows in src[c]["tables"].items():
            for b in (b for cells in rows for b in parse(c, sysn, cells) if b["ep"] > 1):
                k = etp_key(c, b)
                if c == "25.11" and k in cfg:
                    out[c][k] = cfg[k]["expert_tensor_parallel_size"]
                elif c == "25.09":
                    f, gpu, n = k.split(" ")
                    pm = yaml.safe_load(git_show(repo, "v0.1.0rc3",
                                                 f"scripts/performance/configs/{f}"))
                    out[c][k] = pm["perf_matrix"][gpu][n]["common"]["etp"]
    return out


def model_key(cell: str) -> str | None:
    """The model a table's first cell names ("DeepSeekV3 (tokendrop)" -> deepseek-v3)."""
    return MODELS.get(cell.split(" (")[0].strip())


def runs(cell: str) -> tuple[str, str | None]:
    """A cell "a (b)": (a, b); "a": (a, None)."""
    m = re.fullmatch(r"(.*?)\s*\((.*)\)", cell)
    return (m.group(1), m.group(2)) if m else (cell, None)


def parse(container: str, sysn: str, cells: list[str]) -> list[dict]:
    """A row's runs: the unparenthesised one and, where its tokens cell has a parenthesised
    value, the other (a cell without one holds for both)."""
    if container == "25.11":
        name, n, prec, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep, ga, tok, tfl = cells
    else:
        name, n, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep, ga, tok, tfl = cells
        cs, other = PREC_0925[sysn]
        prec = f"{cs} ({other})" if other else cs
    out = []
    for i in (0, 1):
        pick = [runs(c)[i] or runs(c)[0] for c in (n, prec, gbs, mbs, seq, fsdp, tp, pp, cp,
                                                   vp, ep, ga, tok, tfl)]
        if i and runs(tok)[1] is None:
            break
        n_, prec_, gbs_, mbs_, seq_, fsdp_, tp_, pp_, cp_, vp_, ep_, ga_, tok_, tfl_ = pick
        n_, gbs_, mbs_, seq_, fsdp_, tp_, pp_, cp_, ep_, ga_ = map(
            int, (n_, gbs_, mbs_, seq_, fsdp_, tp_, pp_, cp_, ep_, ga_))
        dp = n_ // (tp_ * pp_ * cp_)
        vpn = None if vp_ == "n/a" or int(vp_) <= 1 else int(vp_)
        out.append(dict(cells=cells, run=i, name=name, key=model_key(name), sysn=sysn, n=n_,
                        prec=prec_, gbs=gbs_, mbs=mbs_, seq=seq_, fsdp=fsdp_, tp=tp_, pp=pp_,
                        cp=cp_, vp=vpn, ep=ep_, ga=ga_, dp=dp, tok=int(tok_),
                        tfl=int(re.match(r"\d+", tfl_).group()),
                        drop="tokendrop" in name))
    return out


def layout(gpu: str, n: int, precision: str, pl: dict) -> tuple:
    """What makes two runs the same: chip, GPUs, precision, parallel sizes and batches."""
    return (gpu, n, precision.split(" ")[0], pl["tp"], pl["pp"], pl["cp"],
            pl.get("virtual_stages") or 1, pl["ep"], pl["microbatch"], pl["global_batch"])


def held(container: str) -> dict[tuple, str]:
    """The layouts (``layout``) of every other reference file's rows of ``container`` (the
    ``(<container> NeMo container)`` their table names), to the row's id."""
    out = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "strategies/reference/data/*.json"))):
        if path.endswith(os.path.basename(OUT)):
            continue
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
        for r in rows if isinstance(rows, list) else []:
            if f"({container} NeMo container)" in str((r.get("source") or {}).get("table")):
                h = r["hardware"]
                out[layout(h["gpu"], h["n_gpus"], r["precision"], r["plan"])] = r["id"]
    return out


def models() -> dict[str, dict]:
    """Each model's config: ``c26.MODEL_ROWS``' rows, Llama 3 8B from ``LLAMA8_ROWS``."""
    got = {}
    for path in (c26.MODEL_ROWS, LLAMA8_ROWS):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for r in json.load(f):
                name = "llama3-8b" if r["model"]["name"] == "LLAMA3-8B" else r["model"]["name"]
                got.setdefault(name, {k: v for k, v in r["model"].items() if k != "seq_len"})
    return got


def moe_plan(src: dict, container: str, b: dict) -> tuple[dict, str]:
    """A MoE run's routing switches and the note saying where they are from."""
    etp = src["etp"][container].get(etp_key(container, b))
    etp_sw = {} if etp is None else {"etp": etp}
    etp_note = ("" if etp is None else
                f"etp {etp}: expert_tensor_parallel_size of {etp_key(container, b)} at "
                f"{'v0.2.0' if container == '25.11' else 'v0.1.0rc3'} "
                "(scripts/performance/configs/). ")
    sw, note = moe_switches(src, container, b)
    return {**sw, **etp_sw}, note + etp_note


def moe_switches(src: dict, container: str, b: dict) -> tuple[dict, str]:
    """A MoE run's routing and dispatcher switches and the note saying where they are from."""
    if container == "25.11":
        return {"moe_balance": "forced"}, (
            "NVIDIA force-balances tokens among experts and the runs are token-dropless (the "
            "table's footnote). ")
    td = src["token_drop"]
    sw = dict(RUN_SCRIPT_0109.get((b["key"], b["sysn"]), {}))
    where = (f"NVIDIA-NeMo/Megatron-Bridge@v0.1.0rc3 {RUN_SCRIPT} L49-109 (the 25.09 "
             "container's Megatron-Bridge)")
    if b["drop"]:
        sw.update(moe_dispatcher="alltoall", moe_capacity_factor=td["capacity_factor"],
                  moe_pad_to_capacity=td["pad_to_capacity"])
        return sw, (
            f"Token-dropping (the table labels the model 'tokendrop'): {where} calls "
            f"apply_moe_token_drop ({td['file']} at {td['tag']}: moe_expert_capacity_factor "
            f"{td['capacity_factor']:g}, moe_pad_expert_input_to_capacity "
            f"{td['pad_to_capacity']}; it asserts the all-to-all dispatcher), and forces no "
            "router balancing. ")
    return {"moe_balance": "forced", **sw}, (
        f"Dropless (the table labels the model 'dropless'): {where} runs DeepEP on H100 with "
        "moe_router_force_load_balancing, the expert-parallel all-to-all overlap "
        "(overlap_moe_expert_parallel_comm) and recompute_modules mla_up_proj, mlp. ")


def row_of(src: dict, container: tuple, b: dict, mdl: dict) -> dict:
    """One run of a table row."""
    name, _, stack, prefix = container
    gpu, inter = c26.SYSTEMS[b["sysn"]]
    prec = PRECISION[b["prec"]]
    moe = b["ep"] > 1
    sw, moe_note = moe_plan(src, name, b) if moe else ({}, "Dense model. ")
    cfg_sw, cfg_note = (switches_2511(src["configs"]["25.11"], b) if name == "25.11" else
                        switches_2509(src["configs"]["25.09"], b))
    clash = {k for k in sw.keys() & cfg_sw.keys() if sw[k] != cfg_sw[k]}
    assert not clash, (b, clash)
    pk = {"bf16": "bf16", "fp8": "fp8cs", "mxfp8": "mxfp8"}[prec.split(" ")[0]]
    rid = f"{prefix}_{b['key'].replace('.', '').replace('-', '')}_{gpu.split()[0].lower()}_" \
          f"{b['n']}_{pk}"
    model = {**mdl[b["key"]], "seq_len": b["seq"]}
    which = ("" if runs(b["cells"][-2])[1] is None else
             " (the parenthesised run)" if b["run"] else " (the run outside the parentheses)")
    fsdp_note = (f"FSDP (Megatron FSDP) on (the table's column: {b['fsdp']}): zero_stage 3. "
                 if b["fsdp"] else "The table's FSDP column is 0: plain data parallel "
                 "(zero_stage left to the stack's default). ")
    prec_note = ("" if name == "25.11" else
                 f"Precision {prec}: the 25.09 table has no precision column; the footnote "
                 "says the parenthesised runs use other quantization granularities (32x32, "
                 "MXFP8, on GB200/B200), so the others are per-tensor FP8, and the v0.1.0rc3 "
                 "performance YAMLs' only per-tensor FP8 key is fp8_cs (current scaling). ")
    ga = b["gbs"] // (b["mbs"] * b["dp"])
    ga_note = ("" if ga == b["ga"] else
               f"The table's GA cell ({b['ga']}) contradicts gbs / (mbs x dp) = {b['gbs']} / "
               f"({b['mbs']} x {b['dp']}) = {ga}: grad_accum is {ga} (the batch, micro-batch and "
               "parallel cells kept). ")
    return {
        "id": rid, "kind": "measured", "tier": 2,
        "source": {"ref": "NVIDIA-NeMo/Megatron-Bridge",
                   "table": f"{src['path']} ({name} NeMo container), commit {src['commit']}, "
                            f"'System: {b['sysn']}' row {b['name']}{which}",
                   "row": "| " + " | ".join(b["cells"]) + " |"},
        "stack": stack,
        "model": model,
        "hardware": {"gpu": gpu, "n_gpus": b["n"], "gpus_per_node": 8, "interconnect": inter},
        "plan": {"tp": b["tp"], "pp": b["pp"], "dp": b["dp"], "cp": b["cp"], "ep": b["ep"],
                 "microbatch": b["mbs"], "global_batch": b["gbs"],
                 "schedule": "interleaved 1F1B" if b["vp"] else "1F1B",
                 "virtual_stages": b["vp"] or 1, "recompute": None, "sequence_parallel": None,
                 "zero_stage": 3 if b["fsdp"] else None,
                 "grad_accum": b["gbs"] // (b["mbs"] * b["dp"]), **sw, **cfg_sw},
        "precision": prec,
        "measured": {"tokens_per_s_per_gpu": b["tok"], "tflops_per_gpu": b["tfl"]},
        "derived": {"step_time_s": round(b["gbs"] * b["seq"] / (b["tok"] * b["n"]), 4),
                    "how": "gbs x seq / (tokens/s/GPU x GPUs)"},
        "notes": moe_note + fsdp_note + prec_note + ga_note
        + ("Model config as the same model's rows of nemo_performance_25.json (LLAMA3-8B). "
           if b["key"] == "llama3-8b" else
           "Model config as the same model's rows of megatron_bridge_2604.json. ")
        + ("The table's layout cells are the plan but the virtual stages the pipeline layout "
           "below sets. " if "virtual_stages" in cfg_sw else
           "The table's layout cells are the plan. ") + cfg_note.rstrip()}


def every_run(src: dict[str, Any]) -> list[tuple[dict, str | None]]:
    """Each run of both containers' tables in table order, with the id of the row of another
    reference file that holds its layout for the same container (``held``), else None."""
    mdl, out = models(), []
    for c in CONTAINERS:
        have = held(c[0])
        for sysn, rows in src[c[0]]["tables"].items():
            for cells in rows:
                for b in parse(c[0], sysn, cells):
                    r = row_of(src, c, b, mdl)
                    out.append((r, have.get(layout(r["hardware"]["gpu"], b["n"],
                                                   r["precision"], r["plan"]))))
    return out


def transcribe(src: dict[str, Any]) -> list[dict]:
    """The rows of ``OUT``: the runs no other reference file holds (``every_run``)."""
    out = [r for r, other in every_run(src) if other is None]
    assert len({r["id"] for r in out}) == len(out)
    return out


if __name__ == "__main__":
    c26.cli(__doc__, OUT, INPUTS, read_sources, transcribe)
