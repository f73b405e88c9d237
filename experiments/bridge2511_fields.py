#!/usr/bin/env python
"""The 25.11 container's Megatron-Bridge MoE rows field by field: what the published table
states, what the container's config of that GPU and precision sets (Megatron-Bridge v0.2.0,
``strategies.reference.bridge_recipes.RECIPES_2511``, file:line), what the reader gives; and
the recipe tables of every container checked against their tags (docs/calibration.md §5.179).

    python experiments/bridge2511_fields.py [--repo MIRROR]   # Markdown on stdout

Table 1, per row: tp/pp/vp/ep, GPUs, mbs/gbs, token dispatcher, expert-parallel overlap,
recomputation, CUDA graphs, permute fusion, router fusion, the fp8 recipe and (DeepSeek-V3)
the MTP module; the first line names the config and whether it fits the row
(``recipe_for``) and so is applied. Table 2: each row's estimate as read and with the unapplied config's dispatcher
and recomputation (a what-if, not a reading). Tables 3 and 4 need a clone of
NVIDIA-NeMo/Megatron-Bridge (default: the ``/work/.mirror`` copy; skipped without one):
3, every recorded config (``RECIPES`` v0.4.2, ``RECIPES_2604`` v0.4.0, ``RECIPES_2511``
v0.2.0, the 26.06 rows' v0.5.0 configs in ``sources/heldout_2026b_inputs.json``) against the
``WorkloadBaseConfig`` its tag defines (imported from the tag); 4, for each row no v0.2.0
config fits, the commits of any branch from 2025-11-01 to 2026-01-31 whose config of its
model, GPU and precision has the row's GPUs and layout. A few seconds without the clone,
about half a minute with it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate import estimate  # noqa: E402
from strategies.reference.bridge_recipes import (RECIPES, RECIPES_2511, RECIPES_2604,  # noqa: E402
                                                 entry_layout, preset_for, recipe_for)
from strategies.reference.cases import case_from_entry  # noqa: E402
from strategies.reference.moe_recipe import MoeRecipe  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "strategies", "reference", "data", "published_2026.json")
INPUTS_2606 = os.path.join(ROOT, "strategies", "reference", "sources",
                           "heldout_2026b_inputs.json")
MIRROR = "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"
#: the Megatron-Bridge tag whose configs each container's recipe table records
TAGS = {"26.04.01": "v0.4.2", "26.04": "v0.4.0", "25.11": "v0.2.0"}
#: what every v0.2.0 config of a family runs whatever its preset (paths under
#: ``scripts/performance/configs/`` unless ``src/``): (permute fusion, router fusion)
FUSIONS = {
    "deepseek-v3": ("True (src/.../recipes/deepseek/deepseek_v3.py L259)",
                    "True (deepseek/deepseek_llm_pretrain.py L36)"),
    "qwen3": ("True (src/.../models/qwen/qwen_provider.py L396)",
              "True (qwen3/qwen3_llm_pretrain.py L39)"),
    "gpt-oss-120b": ("True (src/.../models/gpt_oss/gpt_oss_provider.py L73)",
                     "True (gpt_oss/gpt_oss_llm_pretrain.py L35)"),
}
#: the v0.2.0 harness's precision configs (``scripts/performance/utils/helpers.py``)
FP8_RECIPE = {"mxfp8": "mxfp8 (utils/helpers.py L42-43: bf16_with_mxfp8_mixed, "
                       "src/.../training/mixed_precision.py L242-253)",
              "bf16": "bf16 (utils/helpers.py L46-47: bf16_mixed)"}
#: DeepSeek-V3's MTP module in the v0.2.0 configs: the recipe's default, which the
#: performance functions do not pass
MTP_2511 = ("1 (src/.../recipes/deepseek/deepseek_v3.py L174 mtp_num_layers=1; "
            "deepseek_llm_pretrain.py L57-64, L94-101, L131-138 pass none)")
#: the reader's side of the switches it has no field for
READER_FUSED = "fused (no field: one gather pass per permutation, cost.moe_bytes)"
READER_ROUTER = "no field (the router's GEMM; no separate score/top-k passes)"


def rows_2511() -> list[dict]:
    """The 25.11 MoE rows of ``published_2026.json``, in file order."""
    rows = json.load(open(DATA))
    return [r for r in rows if r["id"].startswith("mbridge2511_")
            and "llama" not in r["id"]]


def _family(model: str) -> str:
    return "qwen3" if model.startswith("qwen3") else model


def _graph(impl: str | None, scope: tuple[str, ...] | None) -> str:
    return f"{impl} {'+'.join(scope or ())}" if impl else "none"


def field_table(row: dict, siblings: list[dict]) -> list[tuple[str, str, str, str]]:
    """``(field, table, config (file:line), reader)`` of one 25.11 row (Table 1)."""
    pl, model = row["plan"], row["model"]["name"]
    cfg = recipe_for(row) or preset_for(row)
    case = case_from_entry(row, siblings)
    p = case.job.plan if case.job else None
    skipped = "skipped" if case.skipped else ""
    where = f"{cfg.source.split()[-2].split('configs/')[-1]} {cfg.source.split()[-1]}"
    out = [("config", "-", f"{where} ({cfg.lines})", "applied" if recipe_for(row) else
            "not applied (its layout is not the row's)"
            + (f"; the row is skipped: {case.skipped[:70]}" if case.skipped else ""))]
    tp, pp, vp, ep, mbs, gbs = entry_layout(row)
    ctp, cpp, cvp, cep, cmbs, cgbs = cfg.layout
    out.append(("GPUs / tp / pp / vp / ep", f"{row['hardware']['n_gpus']} / {tp} / {pp} / {vp}"
                f" / {ep}", f"{cfg.n_gpus} / {ctp} / {cpp} / {cvp} / {cep}",
                skipped or f"{case.job.cluster.num_gpus} / {p.tp} / {p.pp} / {p.vpp} / {p.ep}"))
    out.append(("mbs / gbs", f"{mbs} / {gbs}", f"{cmbs} / {cgbs}",
                skipped or f"{p.mbs} / {p.gbs}"))
    out.append(("dispatcher", "not stated", cfg.dispatcher, skipped or p.moe_dispatcher))
    out.append(("ep overlap", "not stated", str(cfg.ep_overlap).lower(),
                skipped or str(p.ep_overlap).lower() + (" (stated)" if "ep_overlap" in pl
                                                         else "")))
    mods = "+".join(cfg.recompute_modules) if cfg.recompute_modules else "none"
    out.append(("recompute", "not stated", mods, skipped or (
        f"{p.recompute} {'+'.join(p.recompute_modules or ())}".strip())))
    out.append(("CUDA graphs", "not stated", _graph(cfg.cuda_graph_impl, cfg.cuda_graph_scope),
                skipped or ("full iteration" if p.cuda_graph else "none")))
    fam = FUSIONS[_family(model)]
    out.append(("permute fusion", "not stated", fam[0], READER_FUSED))
    out.append(("router fusion", "not stated", fam[1], READER_ROUTER))
    out.append(("precision", row["precision"], FP8_RECIPE[row["precision"]],
                skipped or case.job.dtype))
    if model == "deepseek-v3":
        label = "w/o MTP" if "w/o MTP" in row.get("notes", "") else "w/ MTP"
        out.append(("MTP module", label, MTP_2511, skipped or
                    str(case.job.model.num_nextn_predict_layers)))
    return out


def what_if(row: dict, siblings: list[dict]) -> tuple[str, float, float, float, float] | None:
    """``(id, measured, as read, with the config's dispatcher, and its recomputation)`` in
    seconds (Table 2); None for a row the reader skips or whose config it applies."""
    case = case_from_entry(row, siblings)
    cfg = preset_for(row)
    if case.job is None or cfg is None:
        return None
    job = case.job
    disp = replace(job, plan=replace(job.plan, moe_dispatcher=cfg.dispatcher))
    rc = disp
    if cfg.recompute_modules:
        rc = replace(disp, plan=replace(disp.plan, recompute="selective",
                                        recompute_modules=cfg.recompute_modules))
    return (row["id"], case.measured_step_s, estimate(job).step_time_s,
            estimate(disp).step_time_s, estimate(rc).step_time_s)


def _tag_configs(repo: str, tag: str, files: tuple[str, ...]) -> dict[str, dict]:
    from experiments.bridge_recipe_trace import workload_configs
    return workload_configs(repo, tag, files)


def _config_fields(c: dict) -> dict:
    """A tag's ``WorkloadBaseConfig`` (as a dict) in ``MoeRecipe``'s terms."""
    scope = c.get("cuda_graph_scope")
    return {"n_gpus": c.get("num_gpus"),
            "layout": tuple(c.get(k) or 1 for k in (
                "tensor_model_parallel_size", "pipeline_model_parallel_size",
                "virtual_pipeline_model_parallel_size", "expert_model_parallel_size",
                "micro_batch_size", "global_batch_size")),
            "dispatcher": c.get("moe_flex_dispatcher_backend") or "alltoall",
            "ep_overlap": bool(c.get("moe_a2a_overlap")),
            "etp": c.get("expert_tensor_parallel_size"),
            "recompute_modules": tuple(c.get("recompute_modules") or ()),
            "cuda_graph_impl": c.get("cuda_graph_impl"),
            "cuda_graph_scope": tuple(scope) if isinstance(scope, list) else scope}


def recipe_mismatches(r: MoeRecipe, c: dict) -> list[str]:
    """The fields where recipe ``r`` differs from its tag's config ``c`` (a recipe's
    ``recompute_modules`` or CUDA graph left None is the stack's default: not compared)."""
    got = _config_fields(c)
    mine = {"n_gpus": r.n_gpus, "layout": r.layout, "dispatcher": r.dispatcher,
            "ep_overlap": r.ep_overlap, "etp": r.etp,
            "recompute_modules": tuple(r.recompute_modules or ()),
            "cuda_graph_impl": r.cuda_graph_impl, "cuda_graph_scope": r.cuda_graph_scope}
    skip = set()
    if r.recompute_modules is None:
        skip.add("recompute_modules")
    if r.cuda_graph_impl is None and r.cuda_graph_scope is None:
        skip |= {"cuda_graph_impl", "cuda_graph_scope"}
    return [f"{k}: {mine[k]} != {got[k]}" for k in mine if k not in skip and mine[k] != got[k]]


def tag_audit(repo: str) -> list[tuple[str, str, str, str]]:
    """``(container, tag, config, mismatches or 'as the tag')`` for every recorded config
    (Table 3): the recipe tables and the 26.06 rows' v0.5.0 configs."""
    out = []
    for recs in (RECIPES, RECIPES_2604, RECIPES_2511):
        by_tag: dict[str, list[MoeRecipe]] = {}
        for r in recs:
            by_tag.setdefault(TAGS[r.container], []).append(r)
        for tag, rs in by_tag.items():
            files = tuple(sorted({r.source.split()[-2].split("configs/")[-1] for r in rs}))
            cfgs = _tag_configs(repo, tag, files)
            for r in rs:
                name = r.source.split()[-1]
                bad = recipe_mismatches(r, cfgs[name]) if name in cfgs else ["absent"]
                out.append((r.container, tag, name, "; ".join(bad) or "as the tag"))
    inputs = json.load(open(INPUTS_2606))["bridge_2606"]["configs"]
    cfgs = _tag_configs(repo, "v0.5.0", tuple(sorted({c["file"] for c in inputs.values()})))
    for name, c in inputs.items():
        keys = [k for k in c if k != "file"]
        bad = [f"{k}: {c[k]} != {cfgs[name].get(k)}" for k in keys if c[k] != cfgs[name].get(k)]
        out.append(("26.06", "v0.5.0", name, "; ".join(bad) or "as the tag"))
    return out


def history(repo: str, rows: list[dict]) -> list[tuple[str, int, str, str, str, str]]:
    """For each row no v0.2.0 config fits: ``(row, commits, first..last date, branches,
    dispatchers, ep overlaps)`` over every commit of any branch from 2025-11-01 to 2026-01-31
    whose config of the row's model, GPU and precision names the row's GPUs and layout
    (Table 4; a commit whose configs do not import alone is not read)."""
    paths = [f"scripts/performance/configs/{f}/workload_base_configs.py"
             for f in ("deepseek", "qwen3", "gpt_oss")]
    log = subprocess.run(["git", "-C", repo, "log", "--all", "--since=2025-11-01",
                          "--until=2026-01-31", "--format=%H %cs", "--", *paths],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    want = {r["id"]: (preset_for(r).source.split()[-1].rsplit("_BASE_CONFIG", 1)[0],
                      r["hardware"]["n_gpus"], entry_layout(r))
            for r in rows if preset_for(r) is not None}
    hits: dict[str, list[tuple[str, str, str, bool]]] = {rid: [] for rid in want}
    for line in filter(None, log):
        sha, day = line.split()
        try:
            cfgs = _tag_configs(repo, sha, tuple(p.split("configs/")[1] for p in paths))
        except Exception:   # noqa: BLE001 (any import error of an old tree: not read)
            continue
        for rid, (head, n, layout) in want.items():
            for name, c in cfgs.items():
                f = _config_fields(c)
                if name.startswith(head) and (f["n_gpus"], f["layout"]) == (n, layout):
                    hits[rid].append((day, sha, f["dispatcher"], f["ep_overlap"]))
                    break
    out = []
    for rid, hs in hits.items():
        if not hs:
            out.append((rid, 0, "-", "-", "-", "-"))
            continue
        branches: set[str] = set()
        for _, sha, _, _ in hs:
            if subprocess.run(["git", "-C", repo, "merge-base", "--is-ancestor", sha,
                               "v0.2.0"]).returncode == 0:
                branches.add("v0.2.0's history")
            # the side branches only: those that hold the commit but not main's history
            branches |= set(subprocess.run(["git", "-C", repo, "branch", "-a", "--contains",
                                            sha, "--no-contains", "main"],
                                           capture_output=True, text=True
                                           ).stdout.replace("*", "").split())
        days = sorted(h[0] for h in hs)
        named = ", ".join(sorted(branches)) if len(branches) <= 4 else (
            f"{len(branches)} branches" + (", v0.2.0's history among them"
                                           if "v0.2.0's history" in branches else ""))
        out.append((rid, len(hs), f"{days[0]}..{days[-1]}", named or "(unreferenced)",
                    "/".join(sorted({h[2] for h in hs})),
                    "/".join(sorted({str(h[3]).lower() for h in hs}))))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default=MIRROR, help="a Megatron-Bridge clone with its tags")
    args = ap.parse_args(argv)
    rows = rows_2511()
    siblings = json.load(open(DATA))
    print("## Table 1: each 25.11 MoE row, field by field\n")
    for row in rows:
        print(f"### {row['id']}\n\n| field | table | v0.2.0 config | reader |\n|---|---|---|---|")
        for f in field_table(row, siblings):
            print("| " + " | ".join(f) + " |")
        print()
    print("## Table 2: the estimate with the unapplied config's switches (s; what-if)\n")
    print("| row | measured | as read | config's dispatcher | + its recompute |\n"
          "|---|---:|---:|---:|---:|")
    for row in rows:
        w = what_if(row, siblings)
        if w:
            rid, m, *est = w
            print(f"| {rid} | {m:.3f} | " + " | ".join(
                f"{e:.3f} ({(e / m - 1) * 100:+.1f} %)" for e in est) + " |")
    if not os.path.isdir(args.repo):
        print(f"\n(no clone at {args.repo}: tables 3 and 4 skipped)")
        return
    print("\n## Table 3: every recorded config against its tag\n")
    print("| container | tag | config | check |\n|---|---|---|---|")
    for a in tag_audit(args.repo):
        print("| " + " | ".join(a) + " |")
    print("\n## Table 4: commits whose config has a 25.11 row's GPUs and layout\n")
    print("| row | commits | dates | branches | dispatcher | ep overlap |\n"
          "|---|---:|---|---|---|---|")
    for h in history(args.repo, rows):
        print("| " + " | ".join(map(str, h)) + " |")


if __name__ == "__main__":
    main()
