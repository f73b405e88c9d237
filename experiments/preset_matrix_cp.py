"""The preset matrix's long-context section (``experiments/preset_matrix.py``, on by default):
context parallelism's plans end to end through the real CLI.

For each preset model, under no stack named, Megatron-Core or NeMo (alternating by model),
torchtitan and MaxText (``jax-xla``), on 128 GPUs (DGX H100 and DGX B200 alternating by model), ``estimate
--json`` at sequence ``16384·cp`` for ``cp`` 2, 4 and 8 under each K/V exchange the stack runs
(``p2p``, ``all_gather``, ``a2a``, and ``a2a+p2p`` at each ``hierarchical_cp`` ``k`` with
``1 < k < cp`` dividing ``cp``; a stack that runs context parallelism only its own way:
that one), each with a recomputation (none, selective or the stack's op-level, full), a ZeRO
stage (1, 2, 3: pipeline-free) and a schedule (1F1B, interleaved, the stack's zero-bubble one)
drawn by a generator seeded by the model's name (deterministic; over the models every pair is
drawn). A model whose first plan (``cp=2`` under the stack's own exchange) is refused is not
tried further under that stack (the refusal is counted). Then a few long-context searches
under named stacks (sequence 32K-128K, ``--fix`` keeping them to seconds), whose top plan is
``estimate``d and ``simulate``d by its key. Fails, beyond the main matrix's checks, when:

- a refusal's line does not name field, value and rule (``paraplan: error: FIELD=VALUE: RULE``);
- an exchange given as the stack's own (``p2p`` on Megatron-Core) prices differently from
  the plan that names none;
- a ranked plan's (the top `TOP`) analytic step or peak memory differs from ``estimate`` of its key
  (relative 1e-9), or ``simulate``'s analytic step from ``estimate``'s;
- the contention-free simulation is more than ``SIM_TOL`` from the estimate (the CP tests'
  tolerance, docs/calibration.md §5.187 and §5.189: ``tests/test_cp_rerun.py``,
  ``tests/test_cp_hier.py``).
"""
from __future__ import annotations

import math
import random
import re
import sys
import zlib
from typing import Any

from experiments.preset_matrix import (Call, agrees_with_estimate, call, check_exit,
                                       numeric_problems, pow2_upto, report_problems,
                                       same_bytes)
from strategies.framework import PROFILES
from strategies.presets import MODEL_PRESETS
from topologies.cluster import parse_cluster_arg

CLUSTERS = ("dgx-h100:16", "dgx-b200:16")
CPS = (2, 4, 8)


def STACKS(i: int) -> tuple[str, ...]:   # noqa: N802 - the stacks of the i-th model
    """No stack named, Megatron-Core or NeMo (alternating), torchtitan, MaxText (jax-xla)."""
    return ("-", ("megatron-core", "nemo")[i % 2], "torchtitan", "jax-xla")
SEQ_PER_CP = 16384                  # tokens a CP rank holds: 32K, 64K, 128K at cp 2, 4, 8
ALL_COMMS = ("p2p", "all_gather", "a2a", "a2a+p2p")
#: estimate within 1.5 % of the contention-free simulation (§5.187, §5.189's tests)
SIM_TOL = 0.015
TOP = 3                             # a search's plans each checked against its estimate
REFUSAL = re.compile(r"^paraplan: error: [\w.\[\]-]+=.+?: \S")

#: (model, cluster, stack, sequence, global batch, --fix): each searched, then its top plan
#: estimated and simulated by its key; the qwen3 row is 397fe4f's plan family (fp8, a2a)
SEARCHES = (
    ("llama3-8b", "dgx-h100:2", "megatron-core", 32768, 16, "cp=4,tp=2"),
    ("qwen3-30b-a3b", "dgx-b200:1", "megatron-core", 32768, 16, "cp=2,cp_comm=a2a",
     "--dtype", "fp8"),
    ("qwen3-30b-a3b", "dgx-b200:1", "megatron-core", 32768, 16,
     "tp=2,pp=2,cp=2,cp_comm=a2a", "--dtype", "fp8"),
    ("mistral-7b", "dgx-b200:2", "nemo", 65536, 16, "cp=8,tp=1"),
    ("mistral-7b", "dgx-h100:2", "megatron-core", 65536, 16,
     "cp=4,recompute=selective,recompute_modules=core_attn+mlp"),
    ("mixtral-8x7b", "dgx-h100:4", "megatron-core", 65536, 32, "cp=4,pp=2"),
    ("llama3-70b", "dgx-h100:8", "megatron-core", 131072, 16, "cp=8,recompute=full"),
    ("llama3.1-8b", "dgx-b200:4", "torchtitan", 131072, 16, "cp=8,tp=2"),
    ("llama3-8b", "dgx-h100:4", "torchtitan", 65536, 16, "cp=4,pp=2,schedule=zb-v"),
    ("llama3-8b", "dgx-b200:2", "jax-xla", 65536, 16, "cp=4"),
    ("llama2-7b", "dgx-h100:4", "megatron-core", 131072, 16, "cp=16,tp=2,pp=1"),
    ("llama2-7b", "dgx-h100:4", "nemo", 131072, 16, "cp=16,cp_comm=a2a+p2p,recompute=full"),
)


def stack_comms(fw) -> list[str | None]:
    """The K/V exchanges a plan may name under stack ``fw`` (None: no stack, every one);
    ``[None]``: the stack runs its own only (the plan names none)."""
    if fw is None:
        return list(ALL_COMMS)
    return list(fw.cp_comms) or [None]


def exchanges(comms: list[str | None], cp: int) -> list[dict[str, Any]]:
    """The plan fields of each exchange at ``cp``: ``a2a+p2p`` once per ``hierarchical_cp``."""
    out: list[dict[str, Any]] = []
    for c in comms:
        if c is None:
            out.append({})
        elif c == "a2a+p2p":
            out += [{"cp_comm": c, "hierarchical_cp": k} for k in range(2, cp) if cp % k == 0]
        else:
            out.append({"cp_comm": c})
    return out


def shapes(fw, layers: int, pp: int) -> list[tuple[str | None, int, int]]:
    """``(schedule, vpp, zero)`` the stack runs: ZeRO 1/2 with 1F1B, interleaved (the least
    ``vpp`` dividing the stage's layers; layers not dividing by ``pp``: none), interleaved
    with the embedding and the loss counted as layers (``interleaved+acc``, the least ``vpp``
    with ``pp·vpp`` dividing ``layers + 2``) and the stack's zero-bubble schedule; ZeRO-3 with
    no pipeline (schedule None)."""
    def runs(s: str) -> bool:
        return fw is None or fw.schedule_for(s) in fw.schedules
    zeros = (1, 2, 3) if fw is None else tuple(z for z in (1, 2, 3) if z in fw.zero_stages)
    out: list[tuple[str | None, int, int]] = []
    vpp = next((v for v in (2, 3, 4) if (layers // pp) % v == 0), None) \
        if layers % pp == 0 else None
    zb = next((s for s in ("zb-h1", "zb-v") if runs(s)
               and (s != "zb-v" or layers % (2 * pp) == 0)), None)   # V: two chunks a stage
    # the embedding and the loss counted as layers (uneven chunks, 397fe4f's plan family)
    acc = next((v for v in range(2, 9) if (layers + 2) % (pp * v) == 0), None)
    for z in (z for z in zeros if z < 3):
        out.append((fw.runnable_schedule("1f1b") if fw else "1f1b", 1, z))
        if vpp and runs("interleaved"):
            out.append(("interleaved", vpp, z))
        if acc and runs("interleaved"):
            out.append(("interleaved+acc", acc, z))
        if zb:
            out.append((zb, 2 if zb == "zb-v" else 1, z))
    if 3 in zeros:
        out.append((None, 1, 3))
    return out


def heads_ok(model, tps: list[int], k: int) -> list[int]:
    """The tensor sizes whose rank's query and KV heads divide by the all-to-all's ``k``
    (the plans a2a can run; none: the refusal is what the row checks)."""
    return [t for t in tps if (model.num_attention_heads // t) % k == 0
            and (model.kv_heads // t) % k == 0]


def recomputes(fw) -> list[str]:
    return [r for r in ("none", "selective", "op", "full") if fw is None and r != "op"
            or fw is not None and r in fw.recompute]


def lc_plan(model, fw, cp: int, tp: int, sched, vpp: int, zero: int, rec: str,
            exch: dict[str, Any], gpus: int) -> dict[str, Any]:
    pp = 1 if sched is None else 2
    dp = gpus // (tp * pp * cp)
    m = 4 * pp if pp > 1 else 4
    plan: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "mbs": 1, "gbs": dp * m}
    if pp > 1:
        plan["schedule"] = sched.removesuffix("+acc")
        if sched.endswith("+acc"):
            plan.update(vpp=vpp, account_embedding="true", account_loss="true")
        elif model.num_layers % pp:       # DeepSeek-V3's 61: the first stage one layer fewer
            plan["first_stage_layers"] = model.num_layers // pp
            plan["last_stage_layers"] = model.num_layers - model.num_layers // pp
        if vpp > 1 and sched == "interleaved":
            plan["vpp"] = vpp
    if tp > 1 and (fw is None or fw.sequence_parallel):
        plan["sp"] = "true"
    plan["zero"] = zero
    plan["recompute"] = rec
    plan.update(exch)
    return plan


def text(plan: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in plan.items())


def refusal_problem(c: Call) -> list[str]:
    """A refusal's last line must read ``paraplan: error: FIELD=VALUE: RULE``."""
    if c.rc != 2 or c.tb:
        return []
    line = (c.err.strip().splitlines() or [""])[-1]
    return [] if REFUSAL.match(line) else [f"refusal without field=value: rule: {line[:200]!r}"]


def estimate(key, seq: int, plan: dict[str, Any], gpus_gib: float, dtype: str = "bf16"
             ) -> Call:
    model, cluster, stack = key
    c = call(["estimate", "--model", model, "--cluster", cluster,
              *([] if stack == "-" else ["--framework", stack]), "--seq-len", str(seq),
              *([] if dtype == "bf16" else ["--dtype", dtype]),
              "--plan", text(plan), "--json"])
    check_exit(c)
    c.problems += refusal_problem(c)
    if c.data is not None:
        c.problems += report_problems(c.data, gpus_gib)
    return c


def run_estimates(models: list[str], repeat_every: int) -> list[tuple[tuple, Call]]:
    """The long-context estimates (module docstring), in a fixed order."""
    rows: list[tuple[tuple, Call]] = []
    for mi, mname in enumerate(models):
        model = MODEL_PRESETS[mname]
        cname = CLUSTERS[mi % len(CLUSTERS)]
        cl = parse_cluster_arg(cname)
        gib = cl.min_hbm_bytes / 2**30
        rng = random.Random(zlib.crc32(mname.encode()))
        for stack in STACKS(mi):
            fw = None if stack == "-" else PROFILES[stack]
            key = (mname, cname, stack)
            tp_max = min(8, fw.max_tp or 8) if fw else 8
            tps = [t for t in pow2_upto(tp_max) if model.num_attention_heads % t == 0
                   and model.kv_heads % t == 0 and t <= 4]
            probe = estimate(key, 2 * SEQ_PER_CP, lc_plan(model, fw, 2, tps[-1], None, 1,
                             max(z for z in (1, 2, 3) if fw is None or z in fw.zero_stages),
                             "none", {}, cl.num_gpus), gib)
            rows.append((key, probe))
            if probe.rc != 0:
                continue
            shp = shapes(fw, model.num_layers, 2)
            # fp8 on a third of the Blackwell rows where the stack runs it (397fe4f's was)
            dtypes = ("bf16", "bf16", "fp8") if cl.gpu.name.startswith("B200") and (
                fw is None or "fp8" in fw.precisions) else ("bf16",)
            recs = recomputes(fw)
            for cp in CPS:
                for exch in exchanges(stack_comms(fw), cp):
                    tp = rng.choice(heads_ok(model, tps, exch.get(
                        "hierarchical_cp", cp if exch.get("cp_comm") == "a2a" else 1)) or tps)
                    sched, vpp, zero = rng.choice(shp)
                    plan = lc_plan(model, fw, cp, tp, sched, vpp, zero, rng.choice(recs),
                                   exch, cl.num_gpus)
                    dtype = rng.choice(dtypes)
                    c = estimate(key, SEQ_PER_CP * cp, plan, gib, dtype)
                    rows.append((key, c))
                    if fw is not None and exch.get("cp_comm") == "p2p" and fw.cp_impl == "ring":
                        c.problems += same_as_own(key, SEQ_PER_CP * cp, plan, c, gib, dtype)
                    if repeat_every and len(rows) % repeat_every == 0 and \
                            not same_bytes(c, call(c.argv), ("wall_s",)):
                        c.problems.append("not deterministic: a second call differs")
        print(f"[long context {mi + 1}/{len(models)}] {mname}: {len(rows)} estimates",
              file=sys.stderr)
    return rows


def same_as_own(key, seq: int, plan: dict[str, Any], c: Call, gib: float, dtype: str
                ) -> list[str]:
    """``cp_comm=p2p`` on a stack whose own exchange is the ring prices as naming none."""
    bare = {k: v for k, v in plan.items() if k != "cp_comm"}
    o = estimate(key, seq, bare, gib, dtype)
    if c.data is None or o.data is None:
        return [] if c.rc == o.rc else [f"cp_comm=p2p exits {c.rc}, the stack's own {o.rc}"]
    out = []
    for name, a, b in (("step", c.data["step_time_s"], o.data["step_time_s"]),
                       ("peak GiB", c.data["memory"]["peak_gib"], o.data["memory"]["peak_gib"])):
        if a != b:
            out.append(f"cp_comm=p2p {name} {a:.6g} vs the stack's own {b:.6g}")
    return out


def run_searches(searches=SEARCHES) -> tuple[list, list]:
    """Each long-context search, its top plan estimated (inside ``agrees_with_estimate``)
    and simulated contention-free by its key; ``(searches, simulations)`` where a
    simulation row carries (estimate step, simulated step)."""
    srch, sims = [], []
    for row in searches:
        model, cname, stack, seq, gbs, fix, *extra = row
        key = (model, cname, stack)
        common = ["--seq-len", str(seq), *extra]
        c = call(["search", "--model", model, "--cluster", cname, "--framework", stack,
                  *common, "--global-batch", str(gbs), "--fix", fix, "--top", str(TOP),
                  "--workers", "1", "--reference", "none", "--json"])
        check_exit(c)
        c.problems += refusal_problem(c)
        d = c.data
        if d is not None:
            c.problems += numeric_problems({k: v for k, v in d.items() if k != "execution"})
            if not d.get("plans"):
                c.problems.append("exit 0 without a plan")
            else:
                c.problems += [p for plan in d["plans"] for p in agrees_with_estimate(
                    key, {**d, "plans": [plan]}, common)]
        srch.append((key + (seq, fix), c))
        print(f"long-context search {key} seq {seq}: rc {c.rc} {c.wall_s:.1f} s", file=sys.stderr)
        if d is None or not d.get("plans"):
            continue
        top = d["plans"][0]
        args = ["--model", model, "--cluster", cname, "--framework", stack, *common,
                "--plan", top["key"], "--global-batch", str(d["inputs"]["global_batch"])]
        e = call(["estimate", *args, "--json"])
        s = call(["simulate", *args, "--network", "contention-free", "--json"])
        check_exit(s)
        est, sim = sim_problems(s, e.data["step_time_s"] if e.data else None, cname)
        sims.append((key + (seq, top["key"]), s, est, sim))
        print(f"long-context simulate {key}: rc {s.rc} {s.wall_s:.1f} s", file=sys.stderr)
    return srch, sims


def simulate_sample(rows: list[tuple[tuple, Call]], n: int) -> list:
    """``simulate --network contention-free`` of ``n`` estimated plans (an even sample of
    those that ran and fit), against their estimate; rows as ``run_searches``' simulations."""
    from experiments.preset_matrix import spread
    ok = [(k, c) for k, c in rows if c.data is not None and c.data.get("fits")]
    sims = []
    for key, ec in spread(ok, n):
        s = call(["simulate", *ec.argv[1:-1], "--network", "contention-free", "--json"])
        check_exit(s)
        sims.append((key + (ec.argv[ec.argv.index("--seq-len") + 1],
                            ec.argv[ec.argv.index("--plan") + 1]), s,
                     *sim_problems(s, ec.data["step_time_s"], key[1])))
        print(f"long-context simulate {key}: rc {s.rc} {s.wall_s:.1f} s", file=sys.stderr)
    return sims


def sim_problems(s: Call, est: float | None, cluster: str) -> tuple[float | None, float | None]:
    """Check a contention-free simulation against the estimate's step ``est`` (problems go
    on ``s``); returns ``(est, simulated step)``."""
    if s.data is None or est is None:
        return est, None
    sim = s.data["step_time_s"]
    s.problems += report_problems(s.data, parse_cluster_arg(cluster).min_hbm_bytes / 2**30)
    if not math.isclose(s.data["analytic_step_time_s"], est, rel_tol=1e-9):
        s.problems.append(f"simulate's analytic step {s.data['analytic_step_time_s']:.6g} "
                          f"vs estimate's {est:.6g}")
    if abs(sim / est - 1) > SIM_TOL:
        s.problems.append(f"simulated {sim:.6g} s vs estimate {est:.6g} s: "
                          f"{100 * (sim / est - 1):+.2f} % (tolerance {100 * SIM_TOL:.1f} %)")
    return est, sim


def exchange_of(argv: list[str]) -> str:
    """The row's K/V exchange in words (``a2a+p2p k2``; ``own``: the stack's own, none
    named) and its recomputation."""
    plan = dict(x.split("=", 1) for x in argv[argv.index("--plan") + 1].split(","))
    ex = plan.get("cp_comm", "own")
    if "hierarchical_cp" in plan:
        ex += f" k{plan['hierarchical_cp']}"
    return ex


def render_lc(est, srch, sims, md: bool, failures_only: bool, tab, summary) -> str:
    """The long-context section's tables (``tab``, ``summary``: the main matrix's)."""
    from experiments.preset_matrix import status
    h = "### " if md else ""
    out = [f"{h}Long context: summary (cp 2/4/8 at 16K tokens a CP rank; "
           f"experiments/preset_matrix_cp.py)"]
    out.append(tab(["command", "calls", "ok", "refused (exit 2)", "failures", "median s",
                    "max s"],
                   [summary("estimate", [c for _, c in est]),
                    summary("search", [c for _, c in srch]),
                    summary("simulate", [r[1] for r in sims])]))
    refused: dict[str, int] = {}
    for _, c in est + srch:
        if status(c) == "refused":
            rule = c.err.strip().splitlines()[-1].removeprefix("paraplan: error: ")
            refused[rule[:300]] = refused.get(rule[:300], 0) + 1
    out += ["", f"{h}Long context: refusals, by message (the most frequent 12)"]
    out.append(tab(["count", "message"], sorted(((n, r) for r, n in refused.items()),
                                                key=lambda x: (-x[0], x[1]))[:12]))
    fails = [(k, c) for k, c in est + srch if c.problems] + [(r[0], r[1]) for r in sims
                                                               if r[1].problems]
    out += ["", f"{h}Long context: failures ({len(fails)})"]
    out.append(tab(["command", "model", "cluster", "stack", "problem"],
                   [[c.argv[0], *k[:3], "; ".join(c.problems)[:300]] for k, c in fails]))
    out += ["", f"{h}Long context: searches (the top {TOP} plans each against `estimate` "
                f"of its key)"]
    out.append(tab(["model", "cluster", "stack", "seq", "--fix", "status", "s",
                    "top plan / message"],
                   [[*k, status(c), f"{c.wall_s:.1f}",
                     c.data["plans"][0]["key"] if c.data else
                     (c.err.strip().splitlines() or [""])[-1][:140]] for k, c in srch]))
    out += ["", f"{h}Long context: contention-free simulations against the estimate "
                f"(tolerance {100 * SIM_TOL:.1f} %; the searches' top plans, then a sample "
                f"of the estimates)"]
    out.append(tab(["model", "cluster", "stack", "seq", "plan", "status", "estimate s",
                    "simulated s", "sim - est"],
                   [[*k, status(c), f"{e:.4f}" if e else "-", f"{s:.4f}" if s else "-",
                     f"{100 * (s / e - 1):+.2f} %" if e and s else "-"]
                    for k, c, e, s in sims]))
    if not failures_only:
        cells: dict[tuple[str, str], list[int]] = {}
        for _, c in est:
            plan = c.argv[c.argv.index("--plan") + 1]
            rc = next((x.split("=")[1] for x in plan.split(",") if x.startswith("recompute=")),
                      "-")
            st = status(c)
            cells.setdefault((exchange_of(c.argv), rc), [0, 0, 0])[
                ("ok", "refused", "FAIL").index(st) if st in ("ok", "refused") else 2] += 1
        exs = list(dict.fromkeys(e for e, _ in sorted(cells)))
        rcs = [r for r in ("none", "selective", "op", "full") if any(r == x for _, x in cells)]
        out += ["", f"{h}Long context: estimates by exchange x recomputation "
                    f"(ok / refused / FAIL)"]
        out.append(tab(["cp_comm", *rcs], [[e, *("/".join(map(str, cells.get((e, r),
                                                                        [0, 0, 0])))
                                                  for r in rcs)] for e in exs]))
    return "\n".join(out)
