"""``paraplan search``: rank the plans of a model on a cluster (see docs/search.md).

With no arguments it searches GPT-3 175B on 128 DGX A100 nodes at global batch 1536 (the
Megatron-LM paper's setting) and prints the paper's plan beside the result.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from simulator.workers import MAX_WORKERS, default_workers
from simulator.cli.common import (CliError, Once, add_json, add_model_cluster, atomic_write_text,
                                  check_distinct_outputs, check_dtype, check_output,
                                  emit_json, fmt_s, positive_float, positive_int, probe_write,
                                  resolve_cluster, resolve_framework, resolve_model, table,
                                  warn)
from simulator.cli.launch_export import add_export, check_export_early, export_settings
from simulator.search.run import SearchConfig, resolve_reference, run_search
from strategies.errors import SpecError
from strategies.job import make_job
from strategies.plan import parse_plan, plan_from_mapping, plan_mapping
from strategies.plan.parse import ALIAS as PLAN_ALIASES
from strategies.plan.parse import (LIST_KEYS, coerce, plan_items, read_hierarchical_sizes,
                                   refuse_path)
from strategies.plan.recompute_fields import parse_modules
from strategies.plan_file import (PLAN_EXTS, found_for, is_plan_file, job_record, mismatches,
                                  plan_file_text, read_plan_record)
from strategies.search.fix_rules import fixed_contradictions
from strategies.search.fix_parse import FIX_KEYS, UNFIXABLE, parse_fix
from strategies.search.space import SpaceOptions
from strategies.stacks.plan_defaults import restate_for_stack
from strategies.schedules import get_schedule
from topologies.gpus import GIB
from topologies.limits import MAX_GBS, check_int, parse_int_text

DEFAULT_GLOBAL_BATCH = 1536
#: Built-in reference plans: (model, GPU count) -> [(label, plan)].
PAPER = "Megatron-LM paper (Narayanan et al. 2021)"
REFERENCES = {
    ("gpt3-175b", 1024): [
        (f"{PAPER}, 1F1B", "tp=8,pp=8,mbs=1,schedule=1f1b,recompute=full"),
        (f"{PAPER}, interleaved", "tp=8,pp=8,mbs=1,schedule=interleaved,vpp=2,recompute=full"),
    ],
}
CSV_COLUMNS = ("rank", "key", "step_time_s", "mfu", "tokens_per_s", "peak_gib",
               "bubble_fraction", "exposed_comm_s", "analytic_step_time_s", "lower_bound_s")


def register(sub) -> None:
    p = sub.add_parser("search", help="rank the parallel plans of a model on a cluster",
                       description="Enumerate the plans, prune, score them analytically, "
                                   "simulate in order of a lower bound until the top-k is "
                                   "exact, and recommend the simplest plan near the best. "
                                   "Under a named --framework that lets a plan choose it, the "
                                   "context-parallel K/V exchange (cp_comm p2p, all_gather, a2a, "
                                   "a2a+p2p with hierarchical_cp) is explored for plans with "
                                   "cp > 1; with none named, only where the default ring "
                                   "cannot run the model's windows or sinks.")
    add_model_cluster(p, required=False, global_batch_default=DEFAULT_GLOBAL_BATCH)
    g = p.add_argument_group("space")
    g.add_argument("--fix", action=Once, default=None, metavar="K=V,...",
                   help="fix dimensions, e.g. tp=8,schedule=1f1b or cp=8,cp_comm=a2a (the keys "
                        "of --plan less gbs)")
    g.add_argument("--plan", action=Once, default=None, metavar="P",
                   help="the shared --plan input: key=value,... or a YAML/JSON file; its keys are "
                        "fixed as with --fix, and gbs is the global batch")
    g.add_argument("--hybrid", action="store_true",
                   help="also search hybrid sharding: dp_shard over one node's ranks and "
                        "power-of-two multiples of nodes, where the stack runs it "
                        "(docs/search.md)")
    g.add_argument("--allow-cross-node-tp", action="store_true",
                   help="let tensor parallelism span nodes")
    g.add_argument("--memory-limit", action=Once, type=positive_float("--memory-limit"), default=None,
                   metavar="GIB", help="per-GPU memory limit in GiB (default: the GPU's "
                   "capacity less 5%%)")
    g.add_argument("--max-bubble", action=Once, type=positive_float("--max-bubble"), default=0.5,
                   metavar="F",
                   help="largest pipeline bubble (pp-1)/(vpp*m) allowed (default 0.5)")
    g.add_argument("--max-mbs", action=Once, type=positive_int("--max-mbs"), default=8,
                   metavar="N",
                   help="largest micro-batch size (powers of two up to it; default 8)")
    g.add_argument("--max-vpp", action=Once, type=positive_int("--max-vpp"), default=None,
                   metavar="N",
                   help="largest number of interleaved model chunks (default: all)")
    g.add_argument("--schedules", action=Once, choices=("default", "all"), default="default",
                   help="pipeline schedules searched: default (gpipe, 1f1b, interleaved) or "
                        "all (also zb-h1, zb-h2, zb-v, dualpipe, dualpipev; not zb-1p/zb-2p, "
                        "solved per job: use --fix; a --framework keeps those its stack runs)")
    r = p.add_argument_group("ranking")
    r.add_argument("--top", action=Once, type=positive_int("--top"), default=5, metavar="K",
                   help="plans to rank (default 5)")
    r.add_argument("--tolerance", action=Once, type=float, default=3.0, metavar="PCT",
                   help="recommend the simplest plan within PCT%% of the best (default 3)")
    r.add_argument("--exhaustive", action="store_true",
                   help="simulate every feasible plan (a check of the pruned search)")
    r.add_argument("--exact", action="store_true",
                   help="simulate every micro-batch (default: long 1F1B and interleaved "
                        "pipelines are simulated on two short runs and extended exactly)")
    r.add_argument("--reference", action="append", default=None, metavar="PLAN",
                   help="also simulate this plan and print it beside the result (repeat; "
                        "'none' for no reference; default: the published plan, if known)")
    e = p.add_argument_group("execution")
    e.add_argument("--workers", action=Once, type=positive_int("--workers", MAX_WORKERS), default=None,
                   metavar="N",
                   help="parallel simulations (default: all cores)")
    e.add_argument("--backend", action=Once, choices=("local", "ray"), default="local",
                   help="local processes (default) or Ray tasks")
    e.add_argument("--ray-address", action=Once, default=None, metavar="HOST:PORT",
                   help="address of an existing Ray cluster (default: start a local one)")
    e.add_argument("--results", action=Once, default=None, metavar="FILE",
                   help="append each simulation result to FILE (JSON lines) as it finishes")
    e.add_argument("--resume", action="store_true", help="reuse the results in --results FILE")
    e.add_argument("--progress", action="store_true", help="progress bar on stderr "
                   "(default: only when stderr is a terminal)")
    o = p.add_argument_group("output")
    add_json(o)
    o.add_argument("--csv", action=Once, default=None, metavar="FILE",
                   help="write the top plans as CSV (FILE must end with .csv)")
    add_export(o, "print the launch settings of the recommended plan")
    o.add_argument("--save-plan", action=Once, default=None, metavar="F.yaml",
                   help="write the recommended plan as a plan file (.yaml, .yml or .json) "
                        "that --plan reads back")
    o.add_argument("--save-top", action=Once, default=None, metavar="DIR",
                   help="write each of the top plans as DIR/rank-N.yaml")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> SearchConfig:
    model, cluster = resolve_model(args), resolve_cluster(args)
    dtype = check_dtype(args.dtype)
    plan_fixed, gbs = fixed_plan_and_batch(args, model, cluster, dtype)
    if not 0 <= args.tolerance < 100:
        raise CliError("--tolerance", args.tolerance, "must be a percentage in [0, 100)")
    if args.resume and not args.results:
        raise CliError("--resume", True, "needs --results FILE (the file to resume from)")
    if args.resume and not os.path.exists(args.results):   # a search creates it as it starts
        raise CliError("--results", args.results, "does not exist: nothing to resume (drop "
                       "--resume to start a search that writes it)")
    if args.ray_address is not None and args.backend != "ray":
        raise CliError("--ray-address", args.ray_address, "needs --backend ray (the local "
                       "backend runs on this machine's cores)")
    framework = resolve_framework(args, plan_framework(args.plan))
    try:
        fixed = parse_fix(args.fix)
    except SpecError as e:      # advice that names dispatchers: the named stack's
        raise (restate_for_stack(e, framework) if framework else e) from None
    opts = SpaceOptions(max_mbs=args.max_mbs, allow_cross_node_tp=args.allow_cross_node_tp,
                        memory_limit_bytes=args.memory_limit * GIB if args.memory_limit else None,
                        max_bubble=args.max_bubble, max_vpp=args.max_vpp,
                        schedules=args.schedules, hybrid=args.hybrid,
                        fixed=merge_fixed(fixed, plan_fixed))
    check_fixed_for_stack(opts.fixed, framework)
    cfg = SearchConfig(model=model, cluster=cluster, gbs=gbs, dtype=dtype, options=opts,
                        k=args.top, tolerance=args.tolerance / 100, exhaustive=args.exhaustive,
                        exact=args.exact,
                        workers=args.workers or default_workers(), backend=args.backend,
                        ray_address=args.ray_address, results=args.results,
                        resume=args.resume,
                        progress=args.progress or (sys.stderr.isatty() and not args.json),
                        references=references(args, model.name, cluster.num_gpus),
                        framework=framework)
    for label, plan in cfg.references if args.reference is not None else ():
        try:                # a plan the user gave is refused where it cannot run, not dropped
            resolve_reference(cfg, label, plan, strict=True)
        except SpecError as e:
            raise CliError("--reference", label.removeprefix("--reference "), str(e)) from None
    return cfg


def check_fixed_for_stack(fixed: dict[str, Any], fw: Any) -> None:
    """Fixed values no plan can run are refused before the search (else every plan is pruned
    and the search says only "no plan passes"): a schedule or recomputation the named stack
    does not run, and any stack rule the fixed values break whatever the free fields are
    (``strategies.search.fix_rules``: a switch the stack lacks, a contradiction among the
    fixed values such as ``delay_wgrad=true`` with ``ep_overlap=false``)."""
    if fw is not None:
        for key, runs in (("schedule", fw.schedules), ("recompute", fw.recompute)):
            if key in fixed and fixed[key] not in runs:
                raise CliError("--fix", f"{key}={fixed[key]}", f"{fw.name} runs {key} "
                               f"{', '.join(runs)} (choose another --framework or another "
                               "value)")
        # a micro-batch group needs a schedule that takes one (interleaved) among the stack's
        grouped = [n for n in fw.schedules if get_schedule(n).uses_group]
        if "microbatch_group_size" in fixed and not grouped:
            raise CliError("--fix", f"microbatch_group_size={fixed['microbatch_group_size']}",
                           f"{fw.name} runs schedule {', '.join(fw.schedules)}, none of which "
                           "takes a micro-batch group (choose another --framework or another "
                           "value)")
        if "recompute_modules" in fixed and "selective" not in fw.recompute:
            raise CliError("--fix", "recompute_modules=" + "+".join(fixed["recompute_modules"]),
                           f"needs recompute=selective; {fw.name} runs recompute "
                           f"{', '.join(fw.recompute)} (choose another --framework or another "
                           "value)")
    for given, rule in fixed_contradictions(fw, fixed)[:1]:
        text = ",".join(f"{k}=" + ("+".join(v) if isinstance(v, tuple) else
                                   str(v).lower() if isinstance(v, bool) else str(v))
                        for k, v in given.items())
        raise CliError("--fix", text, rule + (" (choose another --framework or another value)"
                                              if fw is not None else
                                              " (change one of the fixed values)"))


def plan_framework(text: str | None) -> Any:
    """The ``framework`` a plan file names (a saved plan keeps its stack), else None."""
    if not text or not is_plan_file(text):
        return None
    raw = plan_mapping(text)
    return next((v for k, v in raw.items() if str(k).strip().lower() == "framework"), None)


def fixed_plan_and_batch(args: argparse.Namespace, model, cluster, dtype: str
                         ) -> tuple[dict[str, Any], int]:
    """The dimensions ``--plan`` fixes and the global batch (the plan's ``gbs``,
    ``--global-batch`` or the default; the two must agree), warning once per difference when
    ``--plan`` is a plan file saved for another job. Shared by ``search`` and ``whatif``."""
    plan_fixed, plan_gbs = plan_fix(args.plan)
    if plan_gbs is not None and args.global_batch is not None and plan_gbs != args.global_batch:
        raise CliError("--global-batch", args.global_batch,
                       f"disagrees with the plan's gbs={plan_gbs} (give one of them)")
    gbs = plan_gbs or args.global_batch or DEFAULT_GLOBAL_BATCH
    for text in mismatches(read_plan_record(args.plan) if args.plan else None,
                           job_record(model, cluster, gbs, dtype)):
        warn(f"--plan {args.plan}: {text}")
    return plan_fixed, gbs


def plan_fix(text: str | None) -> tuple[dict[str, Any], int | None]:
    """``--plan`` in a search (key=value text or a YAML/JSON file, as for every command): the
    keys it gives are fixed as with ``--fix``, and ``gbs`` is the global batch.

    >>> plan_fix("tp=8,gbs=512,schedule=interleaved:3")
    ({'tp': 8, 'schedule': 'interleaved', 'vpp': 3}, 512)
    """
    if text is None:
        return {}, None
    text = str(text).strip()
    if is_plan_file(text):        # found_for is left out; framework is read by plan_framework
        items = [(str(k), v) for k, v in plan_mapping(text).items()
                 if str(k).strip().lower() != "framework"]
    else:
        refuse_path(text, "--plan")
        items = []
        try:
            texts = plan_items(text, "--plan")
        except SpecError as e:
            raise CliError(e.field, e.value, e.rule) from None
        for item in texts:
            key, eq, value = item.partition("=")
            if not eq and items and _is_list_key(items[-1][0]):   # core_attn,mlp as a plan
                items[-1] = (items[-1][0], f"{items[-1][1]},{item}")
                continue
            if not eq or not key.strip():
                raise CliError("--plan", item, "each item must be key=value, e.g. tp=8")
            items.append((key, value))
    try:        # Megatron's hierarchical_context_parallel_sizes, as every --plan reads it
        items = read_hierarchical_sizes(items)
    except SpecError as e:
        raise CliError("--plan", f"{e.field}={e.value}", e.rule) from None
    fixed: list[str] = []
    gbs, seen = None, set()
    for raw, value in items:
        key = PLAN_ALIASES.get(raw.strip().lower(), raw.strip().lower())
        if key in seen:
            raise CliError("--plan", raw.strip(), "key given twice")
        seen.add(key)
        if (value is None or isinstance(value, float)) and (key in FIX_KEYS or key == "gbs"):
            try:        # a file's null or 2.0 as every --plan reads it (plan.parse.coerce)
                value = coerce(key, value)
            except SpecError as e:
                raise CliError("--plan", f"{raw.strip()}={value}", e.rule) from None
            if value is None:       # the key not given: the stack's own, as estimate reads it
                continue
        if key == "gbs":
            gbs = check_int("gbs", parse_int_text("gbs", value), 1, MAX_GBS)
        elif key == "recompute_modules":     # a YAML list or names joined by , + or /
            try:
                fixed.append(f"{key}=" + "+".join(parse_modules(value)))
            except SpecError as e:
                raise CliError("--plan", e.value, e.rule) from None
        elif key in FIX_KEYS:
            value = ("true" if value else "false") if isinstance(value, bool) else str(value)
            if "," in value:    # a file's value: joined below, its commas would add keys
                raise CliError("--plan", f"{raw.strip()}={value}", f"{key} takes one value "
                               "(no ',')")
            fixed.append(f"{key}={value.strip()}")
        elif key in UNFIXABLE:      # a Plan field no searched plan holds
            raise CliError("--plan", f"{raw.strip()}={value}", "is not a key a search can "
                           f"fix: {UNFIXABLE[key]} (run estimate --plan FILE or simulate "
                           "--plan FILE for this plan)")
        else:
            raise CliError("--plan", raw.strip(), "is not a key a search can fix; keys: gbs, "
                           + ", ".join(FIX_KEYS))
    try:
        return (parse_fix(",".join(fixed)) if fixed else {}), gbs
    except SpecError as e:
        raise CliError("--plan", e.value, e.rule) from None


def _is_list_key(raw: str) -> bool:
    """Whether plan key ``raw`` takes a list whose items a plan's text joins with ``,``
    (``recompute_modules=core_attn,mlp``: ``strategies.plan.parse.plan_mapping``'s rule)."""
    return PLAN_ALIASES.get(raw.strip().lower(), raw.strip().lower()) in LIST_KEYS


def merge_fixed(fix: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """``--fix`` and ``--plan`` together; a key both give with different values is refused."""
    both = sorted(k for k in set(fix) & set(plan) if fix[k] != plan[k])
    if both:
        raise CliError("--plan", f"{both[0]}={plan[both[0]]}",
                       f"disagrees with --fix {both[0]}={fix[both[0]]}")
    return {**fix, **plan}


def references(args: argparse.Namespace, model: str, gpus: int) -> list:
    if args.reference is None:
        return [(label, parse_plan(text)) for label, text in REFERENCES.get((model, gpus), [])]
    if [r.strip().lower() for r in args.reference] == ["none"]:
        return []
    out: list = []
    for text in args.reference:
        if text.strip().lower() == "none":
            raise CliError("--reference", text, "'none' (no reference) cannot be given with a "
                                                "reference plan")
        try:                # named as the flag's, as a reference that cannot run is
            plan = parse_plan(text)
        except SpecError as e:
            raise CliError("--reference", text, str(e)) from None
        twin = next((t for t, p in out if p == plan), None)
        if twin is not None:
            raise CliError("--reference", text, f"the same plan as {twin}: each reference "
                                                "plan is given once")
        out.append((f"--reference {text}", plan))
    return out


def run(args: argparse.Namespace) -> int:
    check_distinct_outputs(("--results", args.results), ("--csv", args.csv),
                           ("--save-plan", args.save_plan))
    check_output(args.csv, "--csv", (".csv",))   # before the search, as every output
    # whose format is fixed; --results (JSON lines: .jsonl, .json, .ndjson ...) takes any name
    check_output(args.results, "--results")
    check_output(args.save_plan, "--save-plan", PLAN_EXTS)
    check_folder(args.save_top, "--save-top")
    cfg = config_from_args(args)
    check_export_early(args, cfg.framework, cfg.model)     # before the search, not after it
    report = run_search(cfg)
    rec = report["recommended"]     # its place in `plans` (None: below the top-k, simpler)
    rec["rank"] = next((p["rank"] for p in report["plans"] if p["key"] == rec["key"]), None)
    if args.csv:
        atomic_write_text(args.csv, to_csv(report), "--csv")
    if args.save_plan:
        save_plan(cfg, rec, args.save_plan, "--save-plan")
    if args.save_top:
        for r in report["plans"]:
            save_plan(cfg, r, os.path.join(args.save_top, f"rank-{r['rank']}.yaml"), "--save-top")
    exported = export_settings(args, row_job(cfg, report["recommended"])) if args.export \
        else None
    if exported is not None:
        report["export"] = exported
    if args.json:
        emit_json(report)
    else:
        print(render(report))
        if exported is not None:
            print(f"\n{args.export} settings of the recommended plan:\n{exported['text']}")
    return 0


def row_job(cfg: SearchConfig, row: dict[str, Any]):
    """The job of a report row: its ``key`` (which leaves out the switches), the switches
    being the named stack's defaults, as in the search's space."""
    fw = cfg.framework
    plan = plan_from_mapping(plan_mapping(row["key"]), fw.plan_defaults() if fw else None)
    return make_job(cfg.model, cfg.cluster, plan, dtype=cfg.dtype, framework=fw,
                    system=cfg.system)


def save_plan(cfg: SearchConfig, row: dict[str, Any], path: str,
              field: str = "--save-plan") -> None:
    """Write the plan of a report row as a plan file (``strategies.plan_file``), with the job
    it was found for and its simulated step time (a failed write names ``field``)."""
    job = row_job(cfg, row)
    atomic_write_text(path, plan_file_text(job.plan, path, found_for(job, row["step_time_s"]),
                                           job.named_framework), field)


def check_folder(path: str | None, flag: str) -> None:
    """Refuse a missing or unwritable output folder before the search starts."""
    if path is None:
        return
    if not os.path.isdir(path):
        raise CliError(flag, path, "must be an existing folder")
    if not os.access(path, os.W_OK):
        raise CliError(flag, path, "folder is not writable")
    probe_write(os.path.join(path, "rank-1.yaml"), flag, path)


def to_csv(report: dict[str, Any]) -> str:
    lines = [",".join(CSV_COLUMNS)]
    for r in report["plans"]:
        vals = {**r, "peak_gib": r["memory"]["peak_gib"]}
        lines.append(",".join(f'"{vals[c]}"' if c == "key" else
                              (f"{vals[c]:.6g}" if isinstance(vals[c], float) else str(vals[c]))
                              for c in CSV_COLUMNS))
    return "\n".join(lines) + "\n"


def _line(r: dict[str, Any], rank: str) -> list[str]:
    return [rank, r.get("label") or r.get("short"), fmt_s(r["step_time_s"]),
            f"{100 * r['mfu']:.1f}%", f"{r['tokens_per_s']:,.0f}",
            f"{r['memory']['peak_gib']:.1f}", f"{100 * r['bubble_fraction']:.1f}%",
            fmt_s(r["exposed_comm_s"])]


def render(rep: dict[str, Any]) -> str:
    i = rep["inputs"]
    ev = rep["evaluated"]
    gpus = i.get("gpus_text") or f"{i['gpus']} x {i['gpu']}"
    out = [f"Plan search: {i['model']['name']} on {i['cluster']} ({gpus}), "
           f"global batch {i['global_batch']}, seq {i['seq_len']}, {i['dtype']}, "
           f"{i['framework']}" + ("" if i["framework_limits"] else " (no stack's limits)"),
           *([f"GPU profile {i['gpu_profile']} (measured, calibration.md §7)"]
             if i.get("gpu_profile") else []),
           f"{rep['space']['raw']:,} plans in the space, {rep['space']['feasible']:,} feasible "
           f"(memory limit {i['memory_limit_gib']:.1f} GiB), all scored analytically; "
           f"{ev['simulated']} simulated" + (" (exhaustive)" if ev["exhaustive"] else
                                             f" (the top {i['top']} is exact)"),
           ""]
    if i.get("faults"):
        f = i["faults"]
        out.insert(2, "faults: " + "; ".join(
            [f"GPU {g} computes x{x:g} slower" for g, x in f.get("stragglers", {}).items()]
            + [f"{t} at 1/{x:g} bandwidth" for t, x in f.get("degrade", {}).items()]))
    heads = ["#", "plan", "step", "MFU", "tokens/s", "peak GiB", "bubble", "exposed comm"]
    rows = [_line(r, str(r["rank"])) for r in rep["plans"]]
    rows += [_line(r, "ref") for r in rep["references"]]
    out.append(table(heads, rows, "llrrrrrr"))
    for r in rep["references"]:
        out.append(f"ref: {r['label']}: {100 * r['vs_best']:+.1f}% vs #1")
    un = rep.get("uneven")
    if un is not None and un["plans"]:
        out += ["", f"Heterogeneity-aware plans (mixed cluster; {un['candidates']} variants of "
                    "the best plans, stages (L) or batch shares (M) sized to each GPU type, "
                    "simulated):",
                table(heads, [_line(r, f"u{r['rank']}") for r in un["plans"]], "llrrrrrr")]
        b = un["plans"][0]
        out.append(f"u1: {100 * -b['vs_best']:.1f}% less time per step than #1 (run it with "
                   f"--plan {b['key']})" if b["vs_best"] < 0 else
                   f"u1: {100 * b['vs_best']:.1f}% slower than #1")
    rec = rep["recommended"]
    out += ["", f"Recommended: {rec['label']}  ({fmt_s(rec['step_time_s'])}, "
                f"MFU {100 * rec['mfu']:.1f}%, {rec['memory']['peak_gib']:.1f} GiB)"]
    out += [f"  - {w}" for w in rec["why"]]
    out += ["", "Pruned (first rule broken):"]
    out += [f"  {n:>9,}  {rep['pruned_rules'][r]}" for r, n in rep["pruned"].items() if n]
    out.append(f"\n{rep['wall_s']:.1f} s wall, {rep['execution']['workers']} worker(s), "
               f"{rep['execution']['backend']} backend")
    return "\n".join(out)
