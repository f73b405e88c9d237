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

The model configs: ``experiments/hybrid_models.py``. Every step time is the printed one or
gbs x seq / (tokens/s/GPU x GPUs). Output: sorted keys, deterministic, written atomically.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.bridge_recipe_trace import (git_output, git_show, literal, trace,  # noqa: E402
                                              workload_configs)
from experiments.hybrid_models import check_pattern, model_entry  # noqa: E402
from experiments.hybrid_sources import automodel_entries, dgxc_entries  # noqa: E402
from experiments.transcribe_heldout_2026b import BRIDGE_SYS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "strategies", "reference", "data", "hybrid_2026.json")
MIRROR = "/work/.mirror/"
BRIDGE_REF = "NVIDIA-NeMo/Megatron-Bridge"
#: the commit that published the 26.08 table (docs: update performance summary for 26.08)
BRIDGE_2608 = "4ab94dfad"
#: the table's model -> hybrid_models key and the recipe function / config name stems
BRIDGE_MODELS = {"Nemotron_3_Nano": ("nemotron-3-nano", "nemotron_3_nano", "NEMOTRON_3_NANO"),
                 "Nemotron_3_5_Lightning": ("nemotron-3.5-lightning", "nemotron_3_5_lightning",
                                            "NEMOTRON_3_5_LIGHTNING"),
                 "Nemotron_3_Super": ("nemotron-3-super", "nemotron_3_super",
                                      "NEMOTRON_3_SUPER"),
                 "Nemotron_3_Ultra": ("nemotron-3-ultra", "nemotron_3_ultra",
                                      "NEMOTRON_3_ULTRA")}
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
#: the Megatron-Bridge tables' systems (``transcribe_heldout_2026b.BRIDGE_SYS``) and DGX B200
#: the base recipes the 26.08 perf recipes start from, by the name they call them
#: (perf_recipes/nemotronh/common.py L23-28 imports; recipes/nemotronh/nemotron_3_nano.py
#: L28-29 and nemotron_3_ultra.py L26-27 re-export the H100 functions under these names)
BASE_ALIASES = {"nemotron_3_nano_pretrain_config": "nemotron_3_nano_pretrain_8gpu_h100_bf16_config",
                "nemotron_3_super_pretrain_config":
                    "nemotron_3_super_pretrain_16gpu_h100_bf16_config",
                "nemotron_3_ultra_pretrain_config":
                    "nemotron_3_ultra_pretrain_24gpu_h100_bf16_config"}
BASE_RECIPES = {k: f"src/megatron/bridge/recipes/nemotronh/h100/{k.rsplit('_pretrain', 1)[0]}.py"
                for k in BASE_ALIASES}
SYSTEMS = {**BRIDGE_SYS,
           "DGX-B200": ("B200", "DGX B200 (8 GPUs per node, NVLink5), scale-out not stated")}
PRECISION = {"MXFP8": ("mxfp8", "fp8mx", "FP8_MX"), "NVFP4": ("nvfp4", "nvfp4", "NVFP4"),
             "FP8": ("fp8", "fp8cs", "FP8_CS"), "BF16": ("bf16", "bf16", "BF16")}
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
    return (r["model"], r["system"], r["n"], r["prec"], r["gbs"], r["mbs"], r["seq"], r["tp"],
            r["pp"], r["cp"], r["vp"], r["ep"])


def recipe_2608(repo: str, r: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The plan switches of a 26.08 row from its perf recipe (``trace``), with the notes
    citing each; ({}, [why]) where no recipe function of the row's name exists or its
    layout is not the row's."""
    _, stem, _ = BRIDGE_MODELS[r["model"]]
    gpu = SYSTEMS[r["system"]][0].split()[0].lower()
    fn = f"{stem}_pretrain_{r['n']}gpu_{gpu}_{PRECISION[r['prec']][1]}_config"
    base = "src/megatron/bridge/perf_recipes/nemotronh/"
    paths = (f"{base}{gpu}/nemotronh.py", f"{base}common.py", *BASE_RECIPES.values())
    files = {p: git_show(repo, BRIDGE_2608, p) for p in paths}
    try:
        t = trace(files, fn, BASE_ALIASES)
    except KeyError as e:
        return {}, [f"No recipe switches: {e}."]
    def cite(k: str) -> str:
        path = t[k][1].replace(base, "perf_recipes/nemotronh/")
        return f"{path.replace('src/megatron/bridge/', '')} L{t[k][2]}"

    def val(k: str) -> Any:
        return literal(t[k][0]) if k in t else None

    for field, want in (("model.tensor_model_parallel_size", r["tp"]),
                        ("model.expert_model_parallel_size", r["ep"]),
                        ("train.micro_batch_size", r["mbs"]),
                        ("train.global_batch_size", r["gbs"])):
        got = val(field)
        if isinstance(got, int) and got != want:
            return {}, [f"The recipe {fn} sets {field}={got} ({cite(field)}), the row {want}: "
                        "no recipe switches read."]
    sw: dict[str, Any] = {}
    said = []
    where = f"{BRIDGE_REF}@{BRIDGE_2608} src/megatron/bridge/perf_recipes/nemotronh/, " \
            f"function {fn}"
    backend = "model.moe_flex_dispatcher_backend"
    if val(backend):
        sw["moe_dispatcher"] = val(backend)
        said.append(f"moe_dispatcher={sw['moe_dispatcher']} ({cite(backend)}; scripts/"
                    "performance/utils/overrides.py L397 apply_flex_dispatcher_backend makes "
                    "the dispatcher 'flex')")
    a2a = "model.overlap_moe_expert_parallel_comm"
    sw["ep_overlap"] = bool(val(a2a))
    said.append(f"ep_overlap=true ({cite(a2a)})" if sw["ep_overlap"] else
                "ep_overlap=false (no overlap_moe_expert_parallel_comm set)")
    impl = val("model.cuda_graph_impl")
    sw["cuda_graph"] = impl == "full_iteration"
    if "model.cuda_graph_impl" in t:
        scope = val("model.cuda_graph_scope")
        said.append(f"cuda_graph={str(sw['cuda_graph']).lower()}: cuda_graph_impl={impl!r} "
                    f"({cite('model.cuda_graph_impl')}), scope {scope} "
                    + (f"({cite('model.cuda_graph_scope')})"
                       if "model.cuda_graph_scope" in t else "")
                    + ("; Transformer Engine graphs of parts of each layer, not the whole-"
                       "iteration graph the plan's switch means"
                       if impl == "transformer_engine" else ""))
    gran = val("model.recompute_granularity") if "model.recompute_granularity" in t else "unset"
    if gran == "unset":
        sw["recompute"] = "none"
        said.append("recompute=none (no recompute_granularity in the recipe chain read nor in "
                    "recipes/common.py _pretrain_common: Megatron-Core's default None, "
                    "transformer_config.py L532 at d98e8a64dd)")
    elif gran is None:
        sw["recompute"] = "none"
        said.append("recompute=none (recompute_granularity None, "
                    f"{cite('model.recompute_granularity')})")
    elif gran == "selective":
        sw["recompute"] = "selective"
        sw["recompute_modules"] = "+".join(val("model.recompute_modules"))
        said.append(f"recompute=selective, modules {sw['recompute_modules']} "
                    f"({cite('model.recompute_granularity')}, {cite('model.recompute_modules')})")
    if val("model.use_transformer_engine_op_fuser"):
        sw["fused_grouped_mlp"] = True
        said.append("fused_grouped_mlp=true: Transformer Engine's op fuser "
                    f"({cite('model.use_transformer_engine_op_fuser')}) with the recipe's "
                    "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (CuteDSL fused grouped MLP)")
    etp = "model.expert_tensor_parallel_size"
    if isinstance(val(etp), int) and r["ep"] > 1:
        sw["etp"] = val(etp)
        said.append(f"etp={sw['etp']} ({cite(etp)})")
    if "model.sequence_parallel" in t:
        sw["sequence_parallel"] = bool(val("model.sequence_parallel"))
    if val("comm_overlap.tp_comm_overlap") is True:
        sw["tp_comm_overlap"] = True
        said.append(f"tp_comm_overlap=true ({cite('comm_overlap.tp_comm_overlap')}; no TP "
                    "traffic to overlap at tp 1)" if r["tp"] == 1 else
                    f"tp_comm_overlap=true ({cite('comm_overlap.tp_comm_overlap')})")
    if val("model.moe_router_force_load_balancing"):
        sw["moe_balance"] = "forced"
        said.append(f"moe_balance=forced ({cite('model.moe_router_force_load_balancing')})")
    sharding = "ddp.data_parallel_sharding_strategy"
    if val("ddp.use_megatron_fsdp") and val(sharding) == "optim_grads_params":
        dp = r["n"] // (r["tp"] * r["pp"] * r["cp"])
        domains = max(1, r["n"] // 64)        # common.py _GB300_NVLINK_DOMAIN_GPUS = 64 (L39)
        sw["zero_stage"] = 3
        sw["dp_shard"] = dp // domains
        said.append(f"zero_stage=3, dp_shard={dp // domains}: Megatron-FSDP optim_grads_params "
                    f"({cite('ddp.use_megatron_fsdp')}, {cite(sharding)}) "
                    f"sharded within each 64-GPU NVLink domain, {domains} optimizer instances "
                    f"across them ({cite('ddp.num_distributed_optimizer_instances')}, "
                    "_GB300_NVLINK_DOMAIN_GPUS = 64 at common.py L39)")
    if isinstance(val("model.mtp_num_layers"), int):
        sw["mtp_num_layers"] = val("model.mtp_num_layers")
        rep = "model.mtp_use_repeated_layer"
        said.append(f"mtp_num_layers={sw['mtp_num_layers']} ({cite('model.mtp_num_layers')}"
                    + (f", mtp_use_repeated_layer {cite(rep)}: one MTP block run at each depth"
                       if rep in t else "") + ")")
    if val("model.fine_grained_activation_offloading"):
        said.append(f"activation offloading of {val('model.offload_modules')} to host "
                    f"({cite('model.fine_grained_activation_offloading')}; not modelled)")
    if "ddp.grad_reduce_in_fp32" in t:
        said.append(f"grad_reduce_in_fp32={val('ddp.grad_reduce_in_fp32')} "
                    f"({cite('ddp.grad_reduce_in_fp32')})")
    notes = [f"Recipe switches from {where} (read from its text, bridge_recipe_trace.trace): "
             + "; ".join(said) + "."]
    return sw, notes


def base_recipe_facts(repo: str, tag: str, r: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """What the model's base pretrain recipe at ``tag`` (``src/megatron/bridge/recipes/
    nemotronh/<model>.py`` ``<model>_pretrain_config``, the function the harness builds the
    run from) sets of recomputation and MTP depth, as plan fields, and the note citing it."""
    _, stem, _ = BRIDGE_MODELS[r["model"]]
    path = f"src/megatron/bridge/recipes/nemotronh/{stem}.py"
    try:
        t = trace({path: git_show(repo, tag, path)}, f"{stem}_pretrain_config")
    except (KeyError, subprocess.CalledProcessError):
        return {}, ""
    out, said = {}, []
    if "model.recompute_granularity" in t and literal(t["model.recompute_granularity"][0]) is None:
        out["recompute"] = "none"
        said.append(f"recompute_granularity None (L{t['model.recompute_granularity'][2]})")
    elif "model.recompute_granularity" not in t:
        out["recompute"] = "none"
        said.append("no recompute_granularity (Megatron-Core's default None)")
    if isinstance(literal(t.get("model.mtp_num_layers", ("",))[0]), int):
        out["mtp_num_layers"] = literal(t["model.mtp_num_layers"][0])
        said.append(f"mtp_num_layers {out['mtp_num_layers']} (L{t['model.mtp_num_layers'][2]})")
    return out, f"The base recipe {BRIDGE_REF}@{tag} {path} {stem}_pretrain_config: " \
                + ", ".join(said) + "."


def recipe_workload(configs: dict[str, dict[str, Any]], tag: str, r: dict[str, Any]
                    ) -> tuple[dict[str, Any], list[str]]:
    """The plan switches of a pre-26.08 row from the ``WorkloadBaseConfig`` of its container's
    tag whose layout is the row's; ({}, [why]) where none is."""
    _, _, upper = BRIDGE_MODELS[r["model"]]
    name = (f"{upper}_PRETRAIN_CONFIG_{r['system'].split('-')[1]}_"
            f"{PRECISION[r['prec']][2]}_V1")
    c = configs.get(name)
    if c is None:
        return {}, [f"No {name} at {tag}: recipe switches are the stack's defaults."]
    mine = (c["num_gpus"], c["tensor_model_parallel_size"], c["expert_model_parallel_size"],
            c["micro_batch_size"], c["global_batch_size"])
    if mine != (r["n"], r["tp"], r["ep"], r["mbs"], r["gbs"]):
        return {}, [f"{name} at {tag} runs (GPUs, tp, ep, mbs, gbs) {mine}, not the row's: "
                    "no recipe switches read."]
    sw: dict[str, Any] = {"ep_overlap": bool(c.get("moe_a2a_overlap")),
                          "cuda_graph": c.get("cuda_graph_impl") == "full_iteration",
                          "moe_balance": "forced"}
    if c.get("moe_flex_dispatcher_backend"):
        sw["moe_dispatcher"] = c["moe_flex_dispatcher_backend"]
    if c.get("expert_tensor_parallel_size") is not None and r["ep"] > 1:
        sw["etp"] = c["expert_tensor_parallel_size"]
    if c.get("recompute_modules"):
        sw["recompute"] = "selective"
        sw["recompute_modules"] = "+".join(c["recompute_modules"])
    notes = [f"Recipe switches from {BRIDGE_REF}@{tag} scripts/performance/configs/{c['file']} "
             f"{name} (imported from the tag): expert_tensor_parallel_size="
             f"{c.get('expert_tensor_parallel_size')}, moe_flex_dispatcher_backend="
             f"{c.get('moe_flex_dispatcher_backend')}, moe_a2a_overlap={c.get('moe_a2a_overlap')}, "
             f"cuda_graph_impl={c.get('cuda_graph_impl')}, cuda_graph_scope="
             f"{c.get('cuda_graph_scope')} (only 'full_iteration' is the plan's cuda_graph), "
             f"recompute_modules={c.get('recompute_modules')}; moe_balance=forced: the harness "
             "sets moe_router_force_load_balancing unless --use_tokendrop "
             "(scripts/performance/utils/overrides.py)."]
    return sw, notes


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
        dp = r["n"] // (r["tp"] * r["pp"] * r["cp"])
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
                      "grad_accum": r["gbs"] // (r["mbs"] * dp), "moe_balance": "forced", **sw},
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
