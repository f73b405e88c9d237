"""Every preset model on a representative set of preset clusters under every stack, end to
end through the real CLI (in process): does it run, and is what it says self-consistent?

For each model (``paraplan presets``) x cluster (below: each GPU family, one node and many)
x stack (none named, then each ``--framework``) it runs ``estimate --json`` on one sensible
plan (``sensible_plan``: tp within a node dividing the heads, the fewest pipeline stages
whose model state fits, ep for a mixture of experts, the stack's own schedule); on an even
sample of the combinations ``search --json`` in its cheapest mode (``search`` has no
analytic-only switch, docs/cli.md: ``--top 1 --workers 1 --reference none``); and on a
handful of the searched ones ``simulate --json`` on the search's top plan, whose step time
is compared with the estimate's. Each call records its exit status and wall time, and fails
when:

- it raises (a traceback: any exit other than 0, or 2 with one ``paraplan: error:`` line);
- its JSON holds a null (a NaN or inf written out) or a negative number in a time, byte,
  GiB, throughput or fraction field; a fraction above 1; ``breakdown_s`` not adding up to
  ``step_time_s``;
- ``estimate``'s ``fits`` disagrees with its peak and the GPU memory its report states;
- ``search``'s recommended plan peaks above the memory limit its report states, or it
  returns no plan, or refuses without a message; its top plan's analytic step time or peak
  memory differ from ``estimate`` of the plan's own key;
- the same call twice gives different JSON bytes (a sample; ``wall_s`` and the search's
  ``execution`` left out: docs/cli.md says they vary).

Refusals (exit 2 with one line naming field, value and rule) are counted, not failures.
Then (``--long-context on``, the default; ``only`` runs it alone) the long-context section,
``experiments/preset_matrix_cp.py``: estimates at cp 2/4/8 under each K/V exchange a stack
runs, with recomputation, ZeRO and schedules drawn; long-context searches under named stacks
whose top plans are estimated and simulated by their keys; a sample of the estimates
simulated contention-free against the estimate (its docstring says what fails).
Prints a table per command and a summary (``--markdown`` for docs/reports/preset_matrix.md).
Wall: the main section took 467 s on one idle core before the search's K/V exchange axis;
at load 7 on 2 cores the whole run took 2932 s, the long-context section 206 s of it, two
searches on hgx-h800:256 under megatron-core 363 s and 488 s (docs/reports/preset_matrix.md).

    python experiments/preset_matrix.py                      # all of it (wall: below)
    python experiments/preset_matrix.py --long-context only --models llama3-8b --lc-searches 2
    python experiments/preset_matrix.py --models llama3-8b --clusters dgx-h100:2 --search 2
    python experiments/preset_matrix.py --markdown > docs/reports/preset_matrix.md
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.cli.main import main as cli_main  # noqa: E402
from simulator.workers import Stopped, stop_on_signals  # noqa: E402
from strategies.framework import PROFILES  # noqa: E402
from strategies.presets import MODEL_PRESETS  # noqa: E402
from strategies.stacks.variants import TORCHTITAN_COMPILE  # noqa: E402
from topologies.cluster import parse_cluster_arg  # noqa: E402

#: each GPU family on one node (or one tray group) and on many: the model can and cannot fit
CLUSTERS = ("dgx-a100:1", "dgx-a100:64", "dgx-h100:2", "dgx-h100:128", "hgx-h800:256",
            "dgx-h200:1", "dgx-b200:16", "gb200-nvl72:18", "gb300-nvl72:72", "mi300x:1",
            "mi355x:8")
STACKS = ("-", *PROFILES, TORCHTITAN_COMPILE.name)     # "-": no --framework
BYTES_PER_PARAM = 18               # bf16 weight + fp32 grad + fp32 master and Adam moments
NUMERIC_SUFFIXES = ("_s", "_gib", "_bytes", "tokens_per_s", "mfu", "hfu", "_fraction")


@dataclass
class Call:
    """One CLI call: the command line, exit status, stdout, stderr, wall seconds, traceback,
    and the problems found in its output."""
    argv: list[str]
    rc: int
    out: str
    err: str
    wall_s: float
    tb: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def data(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.out) if self.rc == 0 else None
        except ValueError:
            return None


def call(argv: list[str]) -> Call:
    """Run ``paraplan ARGV`` in this process (stdout and stderr captured)."""
    out, err = io.StringIO(), io.StringIO()
    t0, tb = time.perf_counter(), ""
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli_main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except Exception:               # noqa: BLE001 - a traceback is what we look for
            rc, tb = -1, traceback.format_exc()
    if rc > 128 and err.getvalue().startswith("paraplan: stopped by"):
        # the CLI caught a stop signal meant for the whole sweep (its handler is the one
        # installed while a call runs): stop the sweep, not just this row
        raise Stopped(rc - 128)
    return Call(argv, rc, out.getvalue(), err.getvalue(), time.perf_counter() - t0, tb)


def pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def sensible_plan(model, cluster, fw) -> dict[str, Any]:
    """A plan a user would try first: tp the largest power of two within a node (8 at most)
    dividing the attention and KV heads; the fewest pipeline stages dividing the layers whose
    model state (``BYTES_PER_PARAM`` per parameter, experts over ep) is under half the GPU
    memory; ep the largest power of two dividing the experts and dp; four micro-batches per
    stage; recomputation for models over 30 B parameters; the stack's schedule and switches.
    """
    g, gpn = cluster.num_gpus, min(cluster.gpus_per_node, 8)
    heads, kv, layers = model.num_attention_heads, model.kv_heads, model.num_layers
    tp_max = min(gpn, g, (fw.max_tp or 8) if fw else 8)
    tp = max(t for t in pow2_upto(tp_max) if heads % t == 0 and kv % t == 0)
    experts = model.num_experts or 1
    ep_ok = experts > 1 and (fw is None or fw.expert_parallel)
    hbm = cluster.min_hbm_bytes
    total, active = model.num_params(), model.active_params()
    pp_max = (fw.max_pp or g) if fw else g
    pp, ep = 1, 1
    for cand in (p for p in range(1, min(pp_max, layers) + 1)
                 if layers % p == 0 and (g // tp) % p == 0):
        dp = g // (tp * cand)
        e = max(x for x in pow2_upto(min(experts, dp)) if experts % x == 0 and dp % x == 0) \
            if ep_ok else 1
        expert_part = max(total - active, 0) if experts > 1 else 0
        state = BYTES_PER_PARAM * ((total - expert_part) / (tp * cand)
                                   + expert_part / (tp * cand * e))
        pp, ep = cand, e
        if state < 0.5 * hbm:
            break
    dp = g // (tp * pp)
    m = 4 * pp if pp > 1 else 4
    plan: dict[str, Any] = {"tp": tp, "pp": pp, "mbs": 1, "gbs": dp * m}
    if ep > 1:
        plan["ep"] = ep
    if pp > 1:
        plan["schedule"] = fw.runnable_schedule("1f1b") if fw else "1f1b"
    if tp > 1 and (fw is None or fw.sequence_parallel):
        plan["sp"] = "true"
    if total > 30e9 and (fw is None or "full" in fw.recompute):
        plan["recompute"] = "full"
    return plan


def plan_text(plan: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in plan.items())


def walk(obj: Any, path: str = ""):
    """(path, key, value) for every leaf of a JSON object."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk(v, f"{path}.{k}" if path else k) if isinstance(v, (dict, list)) \
                else [(f"{path}.{k}" if path else k, k, v)]
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from walk(v, f"{path}[{i}]") if isinstance(v, (dict, list)) \
                else [(f"{path}[{i}]", path.rsplit(".", 1)[-1], v)]


def numeric_problems(data: dict[str, Any]) -> list[str]:
    """Nulls (NaN/inf written out) and negatives in numeric fields, fractions above 1."""
    out = []
    for path, key, v in walk(data):
        key = key.split("[")[0]
        if not key.endswith(NUMERIC_SUFFIXES) or key.startswith("vs_"):
            continue
        if v is None:
            out.append(f"{path} is null (NaN or inf)")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            if v < 0:
                out.append(f"{path} = {v} < 0")
            elif key in ("mfu", "hfu") or key.endswith("_fraction"):
                if v > 1 + 1e-9 and key != "hfu":
                    out.append(f"{path} = {v} > 1")
    return out


def report_problems(d: dict[str, Any], hbm_gib: float | None) -> list[str]:
    """An estimate/simulate report: numbers, breakdown sum, fits against the stated memory."""
    out = numeric_problems(d)
    bd, st = d.get("breakdown_s") or {}, d.get("step_time_s")
    if bd and isinstance(st, (int, float)) and all(isinstance(v, (int, float)) for v in bd.values()):
        if not math.isclose(sum(bd.values()), st, rel_tol=1e-6, abs_tol=1e-9):
            out.append(f"breakdown_s sums to {sum(bd.values()):.6g} s, step_time_s {st:.6g} s")
    peak = (d.get("memory") or {}).get("peak_gib")
    if hbm_gib is not None and isinstance(peak, (int, float)) and "fits" in d:
        if d["fits"] != (peak <= hbm_gib + 1e-9):
            out.append(f"fits={d['fits']} but peak {peak:.3f} GiB vs {hbm_gib:.3f} GiB stated")
    return out


def check_exit(c: Call) -> None:
    if c.tb:
        c.problems.append("traceback: " + c.tb.strip().splitlines()[-1])
    elif c.rc == 2:
        lines = [x for x in c.err.splitlines() if x.startswith("paraplan")]
        if not lines or "error" not in lines[-1]:
            c.problems.append(f"exit 2 without an error line: {c.err.strip()[:200]!r}")
    elif c.rc != 0:
        c.problems.append(f"exit {c.rc}: {c.err.strip()[-200:]!r}")
    elif c.data is None:
        c.problems.append("exit 0 but stdout is not one JSON object")


def same_bytes(a: Call, b: Call, drop: tuple[str, ...]) -> bool:
    if a.rc != b.rc:
        return False
    if a.rc != 0:
        return a.err == b.err
    da, db = json.loads(a.out), json.loads(b.out)
    for k in drop:
        da.pop(k, None)
        db.pop(k, None)
    return json.dumps(da) == json.dumps(db)


def agrees_with_estimate(key: tuple[str, str, str], d: dict[str, Any],
                         extra: list[str] | None = None) -> list[str]:
    """The search's top plan against ``estimate`` of its own key (``extra``: the search's
    other inputs, e.g. ``--seq-len``): the same analytic step time and peak memory (one cost
    model, read by both)."""
    top = d["plans"][0]
    e = call(["estimate", *base_args(*key), *(extra or []), "--plan", top["key"], "--global-batch",
              str(d["inputs"]["global_batch"]), "--json"])
    if e.data is None:
        return [f"estimate of the top plan {top['key']} exits {e.rc}: {e.err.strip()[-200:]}"]
    out = []
    for name, mine, theirs in (("analytic step", top["analytic_step_time_s"],
                                e.data["step_time_s"]),
                               ("peak GiB", top["memory"]["peak_gib"],
                                e.data["memory"]["peak_gib"])):
        if not math.isclose(mine, theirs, rel_tol=1e-9):
            out.append(f"top plan's {name} {mine:.6g} vs estimate of its key {theirs:.6g}")
    return out


def base_args(model: str, cluster: str, stack: str) -> list[str]:
    return ["--model", model, "--cluster", cluster] + ([] if stack == "-" else
                                                        ["--framework", stack])


def spread(items: list, n: int) -> list:
    """``n`` items evenly spaced over ``items`` (deterministic)."""
    if n <= 0 or not items:
        return []
    if n >= len(items):
        return list(items)
    return [items[(i * len(items)) // n] for i in range(n)]


LIST_FLAGS = ("--models", "--clusters", "--frameworks")


def join_dash_lists(argv: list[str]) -> list[str]:
    """``argv`` with a list flag's value that starts with ``-`` (``--frameworks -,torchtitan``,
    '-' being "no stack named") joined to its flag (``--frameworks=-,torchtitan``): argparse
    reads a separate ``-,...`` as an unknown option. A lone ``-`` parses either way."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a in LIST_FLAGS:
            value = next(it, None)
            if value is not None and value.startswith("-,"):
                out.append(f"{a}={value}")
                continue
            out.append(a)
            if value is not None:
                out.append(value)
            continue
        out.append(a)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The matrix's flags (``argv`` None: the command line's)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="comma-separated model presets (default all)")
    ap.add_argument("--clusters", default=",".join(CLUSTERS), help="comma-separated clusters")
    ap.add_argument("--frameworks", default=",".join(STACKS),
                    help="comma-separated stacks, '-' for none named (default: none and all; "
                         "e.g. --frameworks -,torchtitan)")
    ap.add_argument("--search", type=int, default=40, help="searches, an even sample (40)")
    ap.add_argument("--simulate", type=int, default=6,
                    help="simulations of a searched top plan (6)")
    ap.add_argument("--repeat-every", type=int, default=25,
                    help="run every N-th estimate twice and compare the bytes (25)")
    ap.add_argument("--repeat-search", type=int, default=2,
                    help="searches run twice and compared (2)")
    ap.add_argument("--long-context", choices=("on", "off", "only"), default="on",
                    help="the long-context section (experiments/preset_matrix_cp.py): on "
                         "(default), off, or only it")
    ap.add_argument("--lc-searches", type=int, default=None,
                    help="long-context searches, an even sample (default all of them)")
    ap.add_argument("--lc-simulate", type=int, default=30,
                    help="long-context estimates also simulated contention-free (30)")
    ap.add_argument("--markdown", action="store_true", help="Markdown tables")
    ap.add_argument("--failures-only", action="store_true", help="list failing rows only")
    ap.add_argument("--records", default=None, metavar="FILE",
                    help="also write every call (argv, exit, wall, stderr, problems) as JSON lines")
    a = ap.parse_args(join_dash_lists(sys.argv[1:] if argv is None else argv))
    unknown = [s for s in a.frameworks.split(",") if s not in STACKS]
    if unknown:     # not read as torchtitan-compile below
        ap.error(f"--frameworks: unknown stack {unknown[0]!r}; known: {', '.join(STACKS)}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    models = a.models.split(",") if a.models else list(MODEL_PRESETS)
    clusters, stacks = a.clusters.split(","), a.frameworks.split(",")
    t_all = time.perf_counter()

    est: list[tuple[tuple[str, str, str], Call]] = []
    for mi, mname in enumerate(models if a.long_context != "only" else []):
        model = MODEL_PRESETS[mname]
        for cname in clusters:
            cl = parse_cluster_arg(cname)
            for stack in stacks:
                fw = None if stack == "-" else PROFILES.get(stack, TORCHTITAN_COMPILE)
                plan = sensible_plan(model, cl, fw)
                c = call(["estimate", *base_args(mname, cname, stack), "--plan",
                          plan_text(plan), "--json"])
                check_exit(c)
                if c.data is not None:
                    c.problems += report_problems(c.data, cl.min_hbm_bytes / 2**30)
                est.append(((mname, cname, stack), c))
                if a.repeat_every and len(est) % a.repeat_every == 0:
                    if not same_bytes(c, call(c.argv), ("wall_s",)):
                        c.problems.append("not deterministic: a second call differs")
        print(f"[{mi + 1}/{len(models)}] {mname}: {len(est)} estimates, "
              f"{time.perf_counter() - t_all:.0f} s", file=sys.stderr)

    # searches: an even sample of the combinations (at the estimate's global batch)
    srch: list[tuple[tuple[str, str, str], Call]] = []
    for key, ec in spread(est, a.search if a.long_context != "only" else 0):
        gbs = next(v for k, v in zip(ec.argv, ec.argv[1:]) if k == "--plan").split("gbs=")[1]
        gbs = gbs.split(",")[0]
        c = call(["search", *base_args(*key), "--global-batch", gbs, "--top", "1",
                  "--workers", "1", "--reference", "none", "--json"])
        check_exit(c)
        d = c.data
        if d is not None:
            c.problems += numeric_problems({k: v for k, v in d.items()
                                            if k not in ("execution",)})
            rec, lim = d.get("recommended"), d["inputs"].get("memory_limit_gib")
            if not d.get("plans") or not rec:
                c.problems.append("exit 0 without a plan")
            elif lim is not None and rec["memory"]["peak_gib"] > lim + 1e-9:
                c.problems.append(f"recommended peak {rec['memory']['peak_gib']:.2f} GiB over "
                                  f"the stated limit {lim:.2f} GiB")
            if d.get("plans"):
                c.problems += agrees_with_estimate(key, d)
        srch.append((key, c))
        print(f"search {key}: rc {c.rc} {c.wall_s:.1f} s", file=sys.stderr)
    for key, c in spread([s for s in srch if s[1].rc == 0], a.repeat_search):
        if not same_bytes(c, call(c.argv), ("wall_s", "execution")):
            c.problems.append("not deterministic: a second search differs")

    # simulations of the searched top plan, against the estimate of the same plan
    sims: list[tuple[tuple[str, str, str], Call, float | None]] = []
    for key, sc in spread([s for s in srch if s[1].rc == 0], a.simulate):
        top = sc.data["plans"][0]
        c = call(["simulate", *base_args(*key), "--plan", top["key"], "--global-batch",
                  str(sc.data["inputs"]["global_batch"]), "--json"])
        check_exit(c)
        ratio = None
        if c.data is not None:
            c.problems += report_problems(c.data, parse_cluster_arg(key[1]).min_hbm_bytes / 2**30)
            ratio = c.data["step_time_s"] / c.data["analytic_step_time_s"]
        sims.append((key, c, ratio))
        print(f"simulate {key}: rc {c.rc} {c.wall_s:.1f} s", file=sys.stderr)

    lc = None
    if a.long_context != "off":
        from experiments import preset_matrix_cp as pmc
        lc_est = pmc.run_estimates(models, a.repeat_every)
        lc_srch, lc_sims = pmc.run_searches(pmc.SEARCHES if a.lc_searches is None else
                                            spread(list(pmc.SEARCHES), a.lc_searches))
        lc = (lc_est, lc_srch, lc_sims + pmc.simulate_sample(lc_est, a.lc_simulate))
    if a.records:
        with open(a.records, "w", encoding="utf-8") as f:
            for _, c in [*est, *srch, *((k, c) for k, c, _ in sims),
                         *(() if lc is None else [*lc[0], *lc[1],
                                                  *((r[0], r[1]) for r in lc[2])])]:
                f.write(json.dumps({"argv": c.argv, "rc": c.rc, "wall_s": round(c.wall_s, 4),
                                    "stderr": c.err, "problems": c.problems}) + "\n")
    text = render(est, srch, sims, a.markdown, a.failures_only, time.perf_counter() - t_all,
                  a.long_context != "only")
    if lc is not None:
        from experiments.preset_matrix_cp import render_lc
        text += ("\n\n" if text else "") + render_lc(*lc, a.markdown, a.failures_only, tab_fn(
            a.markdown), summary)
    print(text)
    return 0


def status(c: Call) -> str:
    if c.problems:
        return "FAIL"
    return {0: "ok", 2: "refused"}.get(c.rc, f"rc {c.rc}")


def tab_fn(md: bool):
    """A table renderer: Markdown, or aligned plain text."""
    def tab(head, rows):
        if md:
            return "\n".join(["| " + " | ".join(head) + " |",
                              "| " + " | ".join("---" for _ in head) + " |",
                              *("| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |"
                                for r in rows)])
        w = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else \
            [len(h) for h in head]
        return "\n".join("  ".join(str(x).ljust(n) for x, n in zip(r, w)).rstrip()
                         for r in [head, ["-" * n for n in w], *rows])
    return tab


def summary(name: str, calls: list[Call]) -> list:
    """A summary row: calls, ok, refused, failures, median and max wall seconds."""
    n = len(calls)
    cnt = {s: sum(1 for c in calls if status(c) == s) for s in ("ok", "refused", "FAIL")}
    walls = sorted(c.wall_s for c in calls) or [0.0]
    return [name, n, cnt["ok"], cnt["refused"], cnt["FAIL"],
            f"{walls[len(walls) // 2]:.3f}", f"{walls[-1]:.3f}"]


def render(est, srch, sims, md: bool, failures_only: bool, wall: float,
           main_section: bool = True) -> str:
    tab = tab_fn(md)
    out = []
    h = "### " if md else ""
    if md:
        cmd = " ".join(["python", "experiments/preset_matrix.py", *sys.argv[1:]])
        out += ["# Preset matrix: every preset model x preset clusters x stacks, end to end", "",
                f"Made by `{cmd} > docs/reports/preset_matrix.md` (what it checks: the script's "
                "docstring; wall times depend on the host).", ""]
    if not main_section:
        return "\n".join(out + [f"{h}Wall: {wall:.0f} s (the long-context section only)"])
    out.append(f"{h}Summary ({wall:.0f} s wall, both sections)")
    out.append(tab(["command", "calls", "ok", "refused (exit 2)", "failures", "median s",
                    "max s"],
                   [summary("estimate", [c for _, c in est]),
                    summary("search", [c for _, c in srch]),
                    summary("simulate", [c for _, c, _ in sims])]))
    # refusals by rule (the message's text after the field and value)
    refused: dict[str, int] = {}
    for _, c in est:
        if status(c) == "refused":
            line = c.err.strip().splitlines()[-1]
            rule = line.split(": ", 2)[-1]
            refused[rule[:400]] = refused.get(rule[:400], 0) + 1
    out += ["", f"{h}Estimate refusals, by message (the most frequent 15)"]
    out.append(tab(["count", "message"], sorted(((n, r) for r, n in refused.items()),
                                                key=lambda x: (-x[0], x[1]))[:15]))
    fails = [(k, c) for k, c in est + srch if c.problems] + [(k, c) for k, c, _ in sims
                                                               if c.problems]
    out += ["", f"{h}Failures ({len(fails)})"]
    out.append(tab(["command", "model", "cluster", "stack", "problem"],
                   [[c.argv[0], *k, "; ".join(c.problems)[:300]] for k, c in fails]))
    out += ["", f"{h}Searches"]
    out.append(tab(["model", "cluster", "stack", "status", "s", "top plan / message"],
                   [[*k, status(c), f"{c.wall_s:.1f}",
                     c.data["plans"][0]["key"] if c.data else
                     (c.err.strip().splitlines() or [""])[-1][:140]] for k, c in srch]))
    out += ["", f"{h}Simulated top plans: simulated over analytic step time"]
    out.append(tab(["model", "cluster", "stack", "status", "s", "sim / analytic"],
                   [[*k, status(c), f"{c.wall_s:.1f}",
                     f"{r:.3f}" if r is not None else "-"] for k, c, r in sims]))
    if not failures_only:
        out += ["", f"{h}Estimates (model x cluster: ok / refused / FAIL over the stacks)"]
        cells: dict[tuple[str, str], list[int]] = {}
        for (m, cl, _), c in est:
            s = status(c)
            cells.setdefault((m, cl), [0, 0, 0])[("ok", "refused", "FAIL").index(s)
                                                  if s in ("ok", "refused", "FAIL") else 2] += 1
        models = list(dict.fromkeys(m for m, _ in cells))
        cls = list(dict.fromkeys(cl for _, cl in cells))
        out.append(tab(["model", *cls], [[m, *("/".join(map(str, cells[(m, cl)]))
                                              for cl in cls)] for m in models]))
    return "\n".join(out)


def run() -> int:
    """``main`` as a command: a stop signal (SIGINT, SIGTERM, SIGHUP), during a call or
    between two, ends the sweep with ``128 + signum`` and writes no report or records."""
    try:
        with stop_on_signals():
            return main()
    except Stopped as e:
        print(f"preset_matrix: stopped by {e}; nothing written", file=sys.stderr)
        return e.exit_status


if __name__ == "__main__":
    sys.exit(run())
