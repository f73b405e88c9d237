#!/usr/bin/env python
"""Transcribe the held-out reference file ``strategies/reference/data/heldout_2026c.json``
(calibration §5.199): NVIDIA-NeMo/Megatron-Bridge ``docs/performance-summary-archive.md``,
the "26.02 NeMo Container" pre-training tables (Megatron-Bridge v0.3.0, the version
``docs/releases/software-versions.md`` names for NeMo Framework 26.02), every row of the six
models paraplan expresses (Llama 3 70B, Llama 3.1 405B, DeepSeek-V3, GPT-OSS 120B,
Qwen3-30B-A3B, Qwen3-235B-A22B) on GB300, GB200, B300, B200 and H100. No other reference file
holds a row of that container.

    python experiments/transcribe_heldout_2026c.py [--out FILE]
    python experiments/transcribe_heldout_2026c.py --sources /path/to/Megatron-Bridge \
        [--save-inputs FILE] [--out FILE]

As ``transcribe_heldout_2026b.py``: ``read_sources`` reads the table's cells, the commit and
the fields of the v0.3.0 performance configs that fit a row (model, system, precision, GPUs,
tp, pp, cp, vpp, ep, micro-batch, batch) into one JSON object, kept as ``INPUTS``;
``transcribe`` turns it into the rows (without ``--sources`` it reads ``INPUTS``, no clone
needed; ``tests/test_heldout_2026c.py``: its output is the data file, byte for byte). Every
row's step is gbs x seq / (tokens/s/GPU x GPUs)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from experiments.transcribe_heldout_2026b import (BRIDGE_DTYPE, BRIDGE_NAMES,  # noqa: E402
                                                  BRIDGE_PREC, BRIDGE_SYS, dump)

OUT = "strategies/reference/data/heldout_2026c.json"
INPUTS = "strategies/reference/sources/heldout_2026c_inputs.json"
PATH = "docs/performance-summary-archive.md"
#: the rows whose model configs (HF config.json) these rows take, by model name
MODEL_ROWS = "strategies/reference/data/megatron_bridge_2604.json"


@dataclass(frozen=True)
class Container:
    """One container's section of ``PATH``: its name, the Megatron-Bridge tag it ships
    (``docs/versions1.json``, "0.3.0 · 26.02"), the stack line, the rows' id prefix and the
    lines of the tag's ``deepseek_v3.py`` ``layout_map``."""
    name: str
    tag: str
    stack: str
    prefix: str
    dsv3_lines: str


#: NeMo Framework 26.02's Megatron-Bridge (docs/releases/software-versions.md at the commit)
C2602 = Container("26.02", "v0.3.0", "Megatron-Bridge v0.3.0 / Megatron Core (NeMo Framework "
                  "26.02 container: Megatron Core main:0.16.0, Transformer Engine 2.12)",
                  "mbridge2602", "L49-57")
MODELS = {"LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3.1-405b",
          "DeepSeekV3": "deepseek-v3", "GPT OSS 120B": "gpt-oss-120b",
          "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b"}
SYSTEMS = {**BRIDGE_SYS, "DGX-B200": ("B200", "DGX B200 (8 GPUs per node, NVLink5), "
                                              "scale-out not stated")}
CONFIG_FILES = ("deepseek/deepseek_workload_base_configs.py",
                "gpt_oss/gpt_oss_workload_base_configs.py",
                "qwen/qwen3_workload_base_configs.py")
FIELDS = ("file", "num_gpus", "tensor_model_parallel_size", "pipeline_model_parallel_size",
          "context_parallel_size", "virtual_pipeline_model_parallel_size",
          "expert_model_parallel_size", "expert_tensor_parallel_size", "micro_batch_size",
          "global_batch_size", "moe_flex_dispatcher_backend", "moe_a2a_overlap", "cuda_graph_impl",
          "cuda_graph_scope", "recompute_modules", "pp_layout")
#: DeepSeek-V3's layout where its config names none: v0.3.0
#: src/megatron/bridge/recipes/deepseek/deepseek_v3.py L49-57 ``layout_map`` (embedding +
#: 4 decoders, 14 x 4 decoders, 1 decoder + mtp + loss for 16 chunks), in Megatron's grammar
DSV3_16 = "Et*4|(t*4|)*14tmL"
DSV3_MAP = {(16, 1): DSV3_16, (8, 2): DSV3_16, (4, 4): DSV3_16}
FORCED = "we force-balance the token distribution among experts"
#: every model's configs, for the layout check (``default_config``): the MoE files and Llama's
LAYOUT_FILES = ("llama/llama3_workload_base_configs.py",
                "llama/llama31_workload_base_configs.py") + CONFIG_FILES
LAYOUT_NAMES = {**BRIDGE_NAMES, "llama3-70b": "LLAMA3_70B", "llama3.1-405b": "LLAMA31_405B"}
#: a row's layout cells and the config field each is checked against
LAYOUT_CELLS = (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"),
                ("cp", "context_parallel_size"), ("vp", "virtual_pipeline_model_parallel_size"),
                ("ep", "expert_model_parallel_size"), ("mbs", "micro_batch_size"),
                ("gbs", "global_batch_size"), ("fsdp", "use_megatron_fsdp"))


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          check=True).stdout


def parse(name: str, cells: list[str]) -> dict[str, Any]:
    """One 14-cell row of a 26.02 table (with its FSDP column), parsed."""
    sysn, n, prec, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep, tok, tfl = cells
    n, gbs, mbs, seq, fsdp, tp, pp, cp = map(int, (n, gbs, mbs, seq, fsdp, tp, pp, cp))
    ep = 1 if ep == "n/a" else int(ep)
    vp = None if vp == "n/a" else int(vp)
    return dict(cells=cells, name=name, key=MODELS[name], sysn=sysn, n=n, prec=prec, gbs=gbs,
                mbs=mbs, seq=seq, fsdp=fsdp, tp=tp, pp=pp, cp=cp, vp=vp, ep=ep, tok=int(tok),
                tfl=int(re.match(r"\d+", tfl).group()),
                layout=(n, tp, pp, cp, vp or 1, ep, mbs, gbs))


def fitting(configs: dict, b: dict) -> str | None:
    """The tag's config whose model, system, precision and layout are the row's (V2 before
    V1 before any other variant), or None."""
    if b["key"] not in BRIDGE_NAMES or b["prec"] not in BRIDGE_DTYPE:
        return None
    head = (f"{BRIDGE_NAMES[b['key']]}_PRETRAIN_CONFIG_{b['sysn'].split('-')[1]}_"
            f"{BRIDGE_DTYPE[b['prec']]}_")
    fit = []
    for name, c in configs.items():
        mine = (c["num_gpus"], c["tensor_model_parallel_size"],
                c["pipeline_model_parallel_size"], c["context_parallel_size"],
                c["virtual_pipeline_model_parallel_size"] or 1,
                c["expert_model_parallel_size"], c["micro_batch_size"], c["global_batch_size"])
        if name.startswith(head) and mine == b["layout"]:
            fit.append((0 if name.endswith("_V2") else 1 if name.endswith("_V1") else 2, name))
    return min(fit)[1] if fit else None


def default_config(configs: dict, b: dict) -> str | None:
    """The config the performance script loads for a row's model, system and precision by
    default: ``get_workload_base_config`` tries the ``--config_variant`` default ``v2``, then
    ``V1``, then the unversioned name (``scripts/performance/utils/utils.py`` L95-126 at
    v0.3.1; ``argument_parser.py``: ``default="v2"``); None if there is none."""
    if b["key"] not in LAYOUT_NAMES or b["prec"] not in BRIDGE_DTYPE:
        return None
    base = (f"{LAYOUT_NAMES[b['key']]}_PRETRAIN_CONFIG_{b['sysn'].split('-')[1]}_"
            f"{BRIDGE_DTYPE[b['prec']]}")
    return next((n for n in (base + "_V2", base + "_V1", base) if n in configs), None)


def config_lines(text: str, name: str) -> str:
    """``Lfirst-last`` of the statement that defines ``name`` in a config file's text."""
    lines = text.split("\n")
    first = next(i for i, ln in enumerate(lines) if ln.startswith(f"{name} = "))
    last = first
    if lines[first].rstrip().endswith("("):
        last = next(i for i in range(first + 1, len(lines)) if lines[i].startswith(")"))
    return f"L{first + 1}-{last + 1}" if last > first else f"L{first + 1}"


def layout_diff(src: dict[str, Any], b: dict, c: Container = C2602
                ) -> tuple[str, str, list[str]] | None:
    """A row's default config at ``c.tag`` (``default_config``): its name, where it is
    (repository, file, lines) and the layout cells that differ ("vp n/a vs 5": table vs
    config); None where there is no config."""
    name = default_config(src["layout_configs"], b)
    if name is None:
        return None
    cf = src["layout_configs"][name]
    where = (f"NVIDIA-NeMo/Megatron-Bridge@{c.tag} scripts/performance/configs/{cf['file']} "
             f"{cf['lines']} {name}")
    mine = {**b, "fsdp": bool(b["fsdp"])}
    # the sharded-data-parallel cell is named without the word the reader takes for a
    # stated FSDP in notes (strategies/reference/plan_reading.py)
    diff = [f"{'sharded dp' if k == 'fsdp' else k} {mine[k] if mine[k] is not None else 'n/a'} vs "
            f"{bool(cf[f]) if k == 'fsdp' else cf[f] if cf[f] is not None else 'n/a'}"
            for k, f in LAYOUT_CELLS
            if mine[k] != (bool(cf[f]) if k == "fsdp" else cf[f])]
    return name, where, diff


def layout_check(src: dict[str, Any], b: dict, c: Container = C2602) -> str:
    """The note comparing a row's layout cells with its default config at ``c.tag``: they
    agree, or which cells differ (the row keeps the table's cells, §5.204, unless they cannot
    fit in memory and the config's can, §5.206: ``fit_rule``)."""
    got = layout_diff(src, b, c)
    if got is None:
        return f" No Megatron-Bridge {c.tag} performance config for this model and system."
    _, where, diff = got
    where += (" (the script's default variant; unset fields take WorkloadBaseConfig's "
              "defaults, scripts/performance/utils/utils.py)")
    if not diff:
        return f" Layout cells (tp, pp, cp, vp, ep, mbs, gbs, sharded dp) as {where}."
    return (f" The table's layout cells differ from {where}: {', '.join(diff)} (table vs "
            "config); the row keeps the table's cells (the page states what ran; calibration "
            "§5.204).")


def config_cells(src: dict[str, Any], b: dict) -> dict | None:
    """Row ``b`` with its default config's layout cells (tp, pp, cp, vp, ep, mbs, gbs, sharded
    dp over the config's dp) in place of the table's; None without a config or a difference."""
    name = default_config(src["layout_configs"], b)
    if name is None:
        return None
    cf = src["layout_configs"][name]
    out = dict(b)
    for k, f in LAYOUT_CELLS:
        if k != "fsdp":
            out[k] = cf[f] if cf[f] is not None else (1 if k == "ep" else None)
    out["vp"] = out["vp"] if out["vp"] and out["vp"] > 1 else None
    dp = out["n"] // (out["tp"] * out["pp"] * out["cp"])
    if bool(b["fsdp"]) != bool(cf["use_megatron_fsdp"]):
        out["fsdp"] = dp if cf["use_megatron_fsdp"] else 0
    out["layout"] = (out["n"], out["tp"], out["pp"], out["cp"], out["vp"] or 1, out["ep"],
                     out["mbs"], out["gbs"])
    return None if out["layout"] == b["layout"] and out["fsdp"] == b["fsdp"] else out


def fit_rule(src: dict[str, Any], b: dict, c: Container, row: Callable[[dict, str], dict]
             ) -> dict:
    """The row of table cells ``b`` (``row(cells, layout note)``), unless its plan does not fit
    its GPUs' memory (``strategies.reference.stated_fit``: a run that ran fit) and its tag's
    default config's cells give one that does: then the row of the config's cells, saying so
    in its ``plan_from`` (which the reader puts in the row's assumptions) and notes (§5.206)."""
    from strategies.reference.cases import case_from_entry
    from strategies.reference.stated_fit import FIT_MARGIN, job_fit
    table = row(b, layout_check(src, b, c))
    alt = config_cells(src, b)
    if alt is None:
        return table
    before = job_fit(case_from_entry(table).job)
    if before.fits:
        return table
    name, where, diff = layout_diff(src, b, c)
    moved = row(alt, "")
    after = job_fit(case_from_entry(moved).job)
    if not after.fits:
        return table
    gib = 2 ** 30
    why = (f"layout cells from the tag's default config {where} (the script's default "
           f"variant), not the table's: {', '.join(diff)} (table vs config). As the table "
           f"states it the plan's fullest stage peaks at {before.peak_bytes / gib:.1f} GiB per "
           f"GPU against {before.hbm_bytes / gib:.1f} GiB of HBM (more than {1 + FIT_MARGIN:g} "
           f"times: it cannot have run as stated); with the config's cells at "
           f"{after.peak_bytes / gib:.1f} GiB (strategies.reference.stated_fit, calibration "
           "§5.206)")
    moved = row(alt, f" The {why}.")
    moved["plan_from"] = why
    return moved


def read_sources(repo: str, c: Container = C2602) -> dict[str, Any]:
    """Container ``c``'s tables' rows of ``MODELS`` (HEAD of a Megatron-Bridge clone), the
    commit, whether the page force-balances MoE tokens, the fitting configs' ``FIELDS`` at
    ``c.tag``, and each row's default config's layout fields with its file and lines
    (``layout_configs``, for ``layout_check``)."""
    from experiments.bridge_recipe_trace import workload_configs
    txt = _git(repo, "show", f"HEAD:{PATH}")
    sec = txt.split(f"## {c.name} NeMo Container\n")[1].split("\n## ")[0]
    tables: dict[str, list[list[str]]] = {}
    for block in sec.split("#### Model: ")[1:]:
        name = block.split("\n")[0].strip()
        if name in MODELS:
            tables[name] = [[x.strip() for x in ln.strip().strip("|").split("|")]
                            for ln in block.splitlines() if ln.startswith("| DGX")]
    configs = workload_configs(repo, c.tag, CONFIG_FILES)
    every = workload_configs(repo, c.tag, LAYOUT_FILES)
    used, defaults = {}, {}
    for name, rows in tables.items():
        for cells in rows:
            b = parse(name, cells)
            fit = fitting(configs, b)
            if fit is not None:
                used[fit] = {k: configs[fit].get(k) for k in FIELDS}
                used[fit].update(recipe_dispatcher(repo, c.tag, fit, configs[fit]["file"]))
            dflt = default_config(every, b)
            if dflt is not None:
                cf = every[dflt]
                text = _git(repo, "show", f"{c.tag}:scripts/performance/configs/{cf['file']}")
                defaults[dflt] = {"file": cf["file"], "lines": config_lines(text, dflt),
                                  **{f: cf[f] for _, f in LAYOUT_CELLS}}
    return {"path": PATH, "commit": _git(repo, "rev-parse", "HEAD").strip()[:12],
            "tag": c.tag, "force_balanced": FORCED in txt, "tables": tables,
            "configs": dict(sorted(used.items())),
            "layout_configs": dict(sorted(defaults.items()))}


def recipe_dispatcher(repo: str, tag: str, name: str, file: str) -> dict[str, str]:
    """``{"moe_token_dispatcher_type": value}`` where the per-system recipe function of config
    ``name`` (``<model>_pretrain_config_<gpu>`` in the family's ``*_llm_pretrain.py`` at
    ``tag``) assigns the dispatcher type in a top-level statement, else ``{}``: from v0.3.1
    the Qwen3 recipes set ``"alltoall"`` on some systems while the config names a flex
    backend, which then goes unused."""
    from experiments.bridge_recipe_trace import git_show, literal, trace
    path = "scripts/performance/configs/" + file.replace("_workload_base_configs.py",
                                                          "_llm_pretrain.py")
    model, gpu = name.split("_PRETRAIN_CONFIG_")[0], name.split("_PRETRAIN_CONFIG_")[1]
    fn = f"{model.lower()}_pretrain_config_{gpu.split('_')[0].lower()}"
    got = trace({path: git_show(repo, tag, path)}, fn).get("model.moe_token_dispatcher_type")
    return {"moe_token_dispatcher_type": literal(got[0])} if got else {}


def switches(configs: dict, b: dict, c: Container = C2602) -> tuple[dict, str]:
    """The MoE plan fields of the config that fits a row, and the note naming it (or the
    defaults' note)."""
    name = fitting(configs, b)
    if name is None:
        return {}, (f"No Megatron-Bridge {c.tag} performance config has this row's layout (or "
                    "the model is dense, Llama, whose config is read only for the layout "
                    "below): recompute, overlaps and CUDA graphs are the "
                    "stack's defaults.")
    cf = configs[name]
    unused = (cf.get("moe_token_dispatcher_type") == "alltoall"
              and cf["moe_flex_dispatcher_backend"] is not None)
    out: dict[str, Any] = {
        "moe_dispatcher": ("alltoall" if unused
                           else cf["moe_flex_dispatcher_backend"] or "alltoall"),
        "ep_overlap": bool(cf["moe_a2a_overlap"]),
        "cuda_graph": cf["cuda_graph_impl"] == "full_iteration"}
    if cf["expert_tensor_parallel_size"] is not None:
        out["etp"] = cf["expert_tensor_parallel_size"]
    if cf["recompute_modules"] == []:
        out["recompute"] = "none"
    elif cf["recompute_modules"]:
        out["recompute"] = "selective"
        out["recompute_modules"] = "+".join(cf["recompute_modules"])
    where = "the config's"
    if cf["pp_layout"]:
        out["pp_layout"] = cf["pp_layout"]
    elif b["key"] == "deepseek-v3" and (b["pp"], b["vp"] or 1) in DSV3_MAP:
        out["pp_layout"] = DSV3_MAP[(b["pp"], b["vp"] or 1)]
        where = (f"set_deepseek_v3_pipeline_model_parallel_layout's layout_map ({c.tag} "
                 f"src/megatron/bridge/recipes/deepseek/deepseek_v3.py {c.dsv3_lines})")
    note = (f"MoE switches (moe_dispatcher, ep_overlap, cuda_graph, etp, recompute, "
            f"recompute_modules, pp_layout) from the config whose layout is the row's: "
            f"NVIDIA-NeMo/Megatron-Bridge@{c.tag} scripts/performance/configs/{cf['file']} "
            f"{name} (the Megatron-Bridge of NeMo {c.name}; V2 before V1), read by importing the "
            f"file at the tag; the config's cuda_graph_impl={cf['cuda_graph_impl']}, "
            f"cuda_graph_scope={cf['cuda_graph_scope']} (only 'full_iteration' is the plan's "
            "cuda_graph; Transformer Engine's per-layer graphs are not modelled).")
    if unused:
        note += (f" moe_dispatcher alltoall: the system's recipe function sets "
                 f"moe_token_dispatcher_type='alltoall' ({cf['file'].split('/')[0]}/*_llm_pretrain"
                 f".py at {c.tag}), so the config's moe_flex_dispatcher_backend="
                 f"{cf['moe_flex_dispatcher_backend']} goes unused.")
    if "pp_layout" in out:
        note += (f" pp_layout {out['pp_layout']}: {where} Megatron layout (61 layers, the MTP "
                 "layer m and the loss L), which the reader runs as stated.")
    return out, note


def transcribe(src: dict[str, Any], c: Container = C2602) -> list[dict]:
    """The rows of container ``c`` from ``read_sources``' object (``fit_rule`` on each)."""
    with open(os.path.join(ROOT, MODEL_ROWS), encoding="utf-8") as f:
        models = {r["model"]["name"]: r["model"] for r in json.load(f)}
    out = []
    for b in (parse(name, cells) for name, rows in src["tables"].items() for cells in rows):
        out.append(fit_rule(src, b, c, lambda cells, note: row_of(src, cells, c, models, note)))
    assert len({r["id"] for r in out}) == len(out)
    return out


def row_of(src: dict[str, Any], b: dict, c: Container, models: dict, layout_note: str) -> dict:
    """One row of layout cells ``b`` (the table's, or its config's: ``fit_rule``)."""
    cells, name = b["cells"], b["name"]
    gpu, inter = SYSTEMS[b["sysn"]]
    n, tp, pp, cp, ep, mbs, gbs = (b[k] for k in ("n", "tp", "pp", "cp", "ep", "mbs", "gbs"))
    dp = n // (tp * pp * cp)
    sw, sw_note = switches(src["configs"], b, c)
    rid = (f"{c.prefix}_{b['key'].replace('.', '').replace('-', '')}_"
           f"{gpu.split()[0].lower()}_{n}_{b['prec'].lower()}")
    moe = ep > 1
    return {
        "id": rid, "kind": "measured", "tier": 2,
        "source": {"ref": "NVIDIA-NeMo/Megatron-Bridge",
                   "table": f"{src['path']} ({c.name} NeMo container), commit "
                            f"{src['commit']}, 'Model: {name}' row {b['sysn']} {n} "
                            f"GPUs {b['prec']} GBS {gbs}",
                   "row": "| " + " | ".join(cells) + " |"},
        "stack": c.stack,
        "model": {**models[b["key"]], "seq_len": b["seq"]},
        "hardware": {"gpu": gpu, "n_gpus": n, "gpus_per_node": 8,
                     "interconnect": inter},
        "plan": {**({"moe_balance": "forced"} if moe and src["force_balanced"]
                    else {}),
                 "tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "microbatch": mbs,
                 "global_batch": gbs,
                 "schedule": "interleaved 1F1B" if b["vp"] else "1F1B",
                 "virtual_stages": b["vp"] or 1, "recompute": None,
                 "sequence_parallel": None,
                 "zero_stage": 3 if b["fsdp"] else None,
                 "grad_accum": gbs // (mbs * dp), **sw},
        "precision": ("fp8 (current scaling: the FP8_CS config)"
                      if b["prec"] == "FP8" and sw else BRIDGE_PREC[b["prec"]]),
        "measured": {"tokens_per_s_per_gpu": b["tok"], "tflops_per_gpu": b["tfl"]},
        "derived": {"step_time_s": round(gbs * b["seq"] / (b["tok"] * n), 4),
                    "how": "gbs x seq / (tokens/s/GPU x GPUs)"},
        "notes": ("NVIDIA force-balances tokens among experts in these benchmarks "
                  "(dropless; the table's footnote). " if moe else "Dense model. ")
        + (f"FSDP (Megatron FSDP) over {b['fsdp']} GPUs (the table's column): "
           "zero_stage 3. " if b["fsdp"] else
           "The table's sharded-data-parallel column is 0: none stated "
           "(zero_stage left to the stack's default). ")
        + "Model config as the same model's rows of megatron_bridge_2604.json. "
        + sw_note + layout_note}


def cli(doc: str, out: str, inputs: str, read: Callable[[str], Any],
        rows: Callable[[Any], list[dict]]) -> None:
    """The command line of a held-out transcriber: ``read`` a clone (``--sources``) or the
    kept ``inputs``, write ``rows`` of it to ``out`` (and with ``--save-inputs`` what was
    read)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", metavar="MEGATRON_BRIDGE",
                    help="read the source from this clone (e.g. /work/.mirror/NVIDIA-NeMo+"
                         f"Megatron-Bridge/repo) instead of {inputs}")
    ap.add_argument("--save-inputs", metavar="FILE", help="with --sources: write what was read")
    ap.add_argument("--out", default=os.path.join(ROOT, out), metavar="FILE")
    args = ap.parse_args()
    if args.save_inputs and not args.sources:
        ap.error("--save-inputs needs --sources")
    if args.sources:
        src = read(args.sources)
    else:
        with open(os.path.join(ROOT, inputs)) as f:
            src = json.load(f)
    for path, obj in ((args.save_inputs, src), (args.out, rows(src))):
        if path:
            with open(path, "w") as f:
                f.write(dump(obj))
    print(len(json.load(open(args.out))), "rows ->", args.out)


if __name__ == "__main__":
    cli(__doc__, OUT, INPUTS, read_sources, transcribe)
