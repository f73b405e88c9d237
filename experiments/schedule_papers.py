"""The schedule papers' own comparisons, reproduced (docs/reports/schedules.md, written by
``experiments/report_schedules.py``).

1. Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024): throughput of ZB-1p and ZB-2p
   against 1F1B for its GPT-like models, GPU counts and micro-batch counts
   (``strategies/reference/data/schedule_studies.json``). ZB-1p and ZB-2p are the orders of
   the paper's automatic scheduling heuristic under the memory limits ``p·M_B`` and
   ``2p·M_B`` (``strategies/schedules/zb_auto.py``, with each plan's own ``T_F``, ``T_B``,
   ``T_W`` and point-to-point time), run through the full simulator; the hand-made
   schedules with the same limits, ZB-H1 and ZB-H2, are shown beside them. Setup as
   published: A100 80 GB SXM, 8 GPUs per node, sequence 1024, one pipeline over all GPUs
   (tp = dp = 1), the first and the last stage one layer fewer. Two step times per run:
   the simulator's (one iteration from an idle pipeline, ``step_time_s``) and the period of
   back-to-back iterations under the paper's optimizer post-validation
   (``post_validation_period``), which is what the paper's throughput measures.
2. The DualPipe table (deepseek-ai/DualPipe README, DeepSeek-V3 report Table 2): each
   method's published bubble, parameter and activation multiples against the same quantities
   measured on our orders with free communication (``analysis.free_comm_ranks``).

    python experiments/schedule_papers.py          # prints both tables as Markdown
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import md_table  # noqa: E402
from strategies.model import ModelSpec  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data", "schedule_studies.json")
#: GPT-2's 50257-token vocabulary padded to a multiple of 128 (Megatron-LM's padding, tp=1)
VOCAB = 50304
SEQ = 1024
#: the schedule that runs each of the paper's methods: its automatic scheduler's orders
#: (``zb-1p``/``zb-2p``); ``ZB-2p*`` is ZB-2p at half the micro-batch size and twice the
#: micro-batches (the paper's equal-memory row)
OURS = {"1F1B": "1f1b", "ZB-1p": "zb-1p", "ZB-2p": "zb-2p", "ZB-2p*": "zb-2p"}
#: the hand-made schedule with the same memory limit as each searched one
HANDMADE = {"ZB-1p": "zb-h1", "ZB-2p": "zb-h2", "ZB-2p*": "zb-h2"}


def load() -> dict[str, Any]:
    with open(DATA, encoding="utf-8") as f:
        return json.load(f)


def _number(text: str, unit: str) -> float | None:
    """The number written just before ``unit`` in ``text`` (``"62 layers"``), or None."""
    m = re.search(r"([\d.]+)\s*" + unit, text)
    return float(m.group(1)) if m else None


def gpt_like(row: dict[str, Any]) -> tuple[ModelSpec, str]:
    """The row's GPT-like model and how its shape was obtained. Layers (and hidden size where
    given) from the row; otherwise the hidden size solving ``12·L·h² + V·h = N`` for the
    stated parameter count ``N``, rounded to a multiple of 512 (this recovers the stated 6144
    of the 28.3B model); heads ``h/128``; MLP ``4h``; learned positions; the embedding and
    the output layer untied, as the authors' training script runs them
    (sail-sg/zero-bubble-pipeline-parallelism, ``examples/pretrain_zero_bubble.sh``:
    ``--untie-embeddings-and-output-weights``), so no tied-gradient all-reduce joins the
    first and the last stage before the optimizer step."""
    text = row["model"]
    size = text.split()[1].rstrip(",")
    if _number(text, "layers") is None:      # a row about a model another row describes
        text = next(r["model"] for r in load()["rows"]
                    if r["model"].split()[1].rstrip(",") == size and "layers" in r["model"])
    layers = int(_number(text, "layers"))
    found = re.search(r"hidden\s+(\d+)", text)
    hidden = float(found.group(1)) if found else None
    how = "hidden size as published"
    if hidden is None:
        n = _number(text, "B") * 1e9
        h = (-VOCAB + math.sqrt(VOCAB ** 2 + 48 * layers * n)) / (24 * layers)
        hidden = 512 * round(h / 512)
        how = f"hidden size {hidden} from the parameter count (12·L·h² + V·h ≈ N)"
    hidden = int(hidden)
    spec = ModelSpec(f"gpt-like-{size}", layers, hidden, hidden // 128, 4 * hidden,
                     VOCAB, SEQ, None, "gelu", tie_word_embeddings=False,
                     position_embedding="learned", bias=True)
    return spec, how


def layers_per_stage(layers: int, pp: int) -> str | None:
    """``layers_per_stage`` with the first and the last stage one layer fewer (the paper's
    setup), or None where the layers do not split so."""
    k, r = divmod(layers + 2, pp)
    if r or k < 2:
        return None
    return "/".join(map(str, [k - 1] + [k] * (pp - 2) + [k - 1]))


def post_validation_period(result: Any) -> float:
    """Seconds between the starts of back-to-back iterations when no rank waits for the others
    before its optimizer step (the paper's post-validation): the longest rank span, from the
    start of a rank's first compute to its end (``rank_ends_s``, optimizer included). Every
    dependency lies within an iteration, so when each rank starts its next iteration this
    long after its last, all ranks repeat the first iteration's timing shifted by it, and no
    rank starts before it has finished. For 1F1B it is the makespan (rank 0 starts first and
    ends last)."""
    ends = result.metrics["rank_ends_s"]
    first: dict[int, float] = {}
    for rec in result.records:
        if rec.stream == "compute" and rec.start < first.get(rec.rank, float("inf")):
            first[rec.rank] = rec.start
    return max(ends[r] - first.get(r, 0.0) for r in ends)


def _run(spec: ModelSpec, cl: Any, pp: int, mbs: int, m: int, sched: str,
         split: str) -> dict[str, float]:
    """Simulated step time, post-validation period and estimated peak memory (GiB) of one
    run."""
    from simulator.simulate import simulate
    from strategies.estimate import estimate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    plan = parse_plan(f"tp=1,pp={pp},mbs={mbs},schedule={sched},layers_per_stage={split}")
    job = make_job(spec, cl, plan, global_batch=mbs * m)
    res = simulate(job)
    return {"step_s": res.step_time_s, "period_s": post_validation_period(res),
            "memory_gib": estimate(job).memory.total / 2 ** 30}


def zero_bubble_rows() -> list[dict[str, Any]]:
    """One result per published row: for 1F1B, the paper's searched schedules (ours: the
    heuristic) and their hand-made counterparts, the simulated step time, the period under
    post-validation and the peak memory; the throughput ratios against 1F1B, ours (from the
    periods) and the paper's."""
    from topologies.cluster import cluster_preset

    out = []
    for row in load()["rows"]:
        paper = row["samples_per_s_per_gpu"]
        spec, how = gpt_like(row)
        pp, gpus, mbs, m = row["pp"], row["gpus"], row["mbs"], row["microbatches"]
        res: dict[str, Any] = {"model": row["model"], "gpus": gpus, "pp": pp, "mbs": mbs,
                               "microbatches": m, "shape": how, "paper": paper,
                               "paper_memory_gb": row.get("memory_gb")}
        split = layers_per_stage(spec.num_layers, pp)
        wanted = [k for k in ("ZB-1p", "ZB-2p", "ZB-2p*") if k in paper and "1F1B" in paper]
        if split is None or not wanted:
            res["skipped"] = (f"{spec.num_layers} layers do not split into {pp} stages with "
                              "the first and last one layer fewer" if split is None else
                              "the row compares no schedule we run")
            out.append(res)
            continue
        if "ZB-V" in paper:
            res["not_run"] = (f"its ZB-V needs {spec.num_layers} layers over {2 * pp} chunks "
                              "(two per rank) with the first and last one layer fewer: our "
                              "plans split layers evenly per chunk")
        cl = cluster_preset("dgx-a100", max(1, gpus // 8))
        runs: dict[str, dict[str, float]] = {}
        for name in ["1F1B"] + wanted:
            b, n = (mbs // 2, 2 * m) if name.endswith("*") else (mbs, m)
            runs[name] = _run(spec, cl, pp, b, n, OURS[name], split)
            if name in HANDMADE:
                runs[name + " hand-made"] = _run(spec, cl, pp, b, n, HANDMADE[name], split)
        # samples per second: mbs·m per step either way, so the ratio of the times
        base = runs["1F1B"]
        res["runs"] = runs
        res["ratio"] = {k: base["period_s"] / runs[k]["period_s"] for k in wanted}
        res["ratio_one_iteration"] = {k: base["step_s"] / runs[k]["step_s"] for k in wanted}
        res["ratio_handmade"] = {k: base["period_s"] / runs[k + " hand-made"]["period_s"]
                                 for k in wanted}
        res["paper_ratio"] = {k: paper[k] / paper["1F1B"] for k in wanted}
        out.append(res)
    return out


def dualpipe_rows(stages: int = 8, m: int = 20, f: float = 1.0, b: float = 1.0,
                  w: float = 1.0) -> list[dict[str, Any]]:
    """The DualPipe table's methods on ``stages`` pipeline stages with ``m`` micro-batches
    (DeepSeek's figure: 8 ranks, 20 micro-batches), chunk times ``f``, ``b`` (input
    gradient), ``w`` and no compute overlap in a pair (``F&B = F + B``, ``B = b + w`` the
    whole backward): the published bubble against the worst rank's idle time of our order
    with free communication, activations (stashed stages' worth, at the peak over ranks) and
    parameters (stages held per device) published against ours."""
    from strategies.schedules import get_schedule
    from strategies.schedules.analysis import free_comm_ranks

    B, fb, P = b + w, f + b + w, stages
    published = {"1F1B": ((P - 1) * (f + B), 1, P), "ZB1P": ((P - 1) * (f + B - 2 * w), 1, P),
                 "DualPipe": ((P / 2 - 1) * (fb + B - 3 * w), 2, P + 1),
                 "DualPipeV": ((P / 2 - 1) * (fb + B - 3 * w), 2, P + 1)}
    # (schedule, ranks, vpp) for ``stages`` stages
    ours = {"1F1B": ("1f1b", P, 1), "ZB1P": ("zb-h1", P, 1), "DualPipe": ("dualpipe", P, 1),
            "DualPipeV": ("dualpipev", P // 2, 2)}
    rows = []
    for method, (sched, ranks, vpp) in ours.items():
        k = 2 if vpp == 2 else 1            # chunks a micro-batch crosses on one rank
        spans = free_comm_ranks(sched, ranks, m, vpp, k * f, k * B, t_w=k * w)
        bubble = max(r.bubble for r in spans)
        s = get_schedule(sched)
        # stashed (micro-batch, chunk) entries: each one stage's activations of a micro-batch
        act = max(s.in_flight(r, ranks, m, vpp) for r in range(ranks))
        # stages whose parameters a rank holds: the chunks its order runs
        held = max(len({st.chunk for st in s.steps(r, ranks, m, vpp)}) for r in range(ranks))
        pub_bubble, pub_params, pub_act = published[method]
        rows.append({"method": method, "schedule": sched, "ranks": ranks, "times": (f, b, w),
                     "published_bubble": pub_bubble, "bubble": bubble,
                     "published_params": pub_params, "params": held,
                     "published_activations": pub_act, "activations": act})
    return rows


def zero_bubble_table(rows: list[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        label = (f"{r['model'].split(' (')[0]}, {r['gpus']} GPUs, mbs {r['mbs']}, "
                 f"{r['microbatches']} mb")
        if "skipped" in r:
            out.append([label, "-", "-", "-", "-", "-", "-", f"not reproduced: {r['skipped']}"])
            continue
        for k, ours in r["ratio"].items():
            pap = r["paper_ratio"][k]
            mem = r.get("paper_memory_gb") or {}
            runs = r["runs"]
            mtext = (f"{runs[k]['memory_gib']:.1f} vs {runs['1F1B']['memory_gib']:.1f} GiB"
                     + (f" (paper {mem[k]} vs {mem['1F1B']} GB)" if k in mem else ""))
            out.append([label, f"{k} (`{OURS[k]}`)", f"{pap:.3f}", f"{ours:.3f}",
                        f"{100 * (ours / pap - 1):+.1f} %",
                        f"{r['ratio_one_iteration'][k]:.3f}",
                        f"{r['ratio_handmade'][k]:.3f} (`{HANDMADE[k]}`)", mtext])
    return md_table(["row", "schedule (ours)", "paper: vs 1F1B", "ours: vs 1F1B", "error",
                     "ours, one iteration", "hand-made, same memory", "peak memory, ours vs 1F1B"],
                    out, "llrrrrll")


def dualpipe_table(rows: list[dict[str, Any]]) -> str:
    out = [[r["method"], f"`{r['schedule']}` on {r['ranks']} ranks",
            "F={:g}, B={:g}, W={:g}".format(*r["times"]), f"{r['published_bubble']:g}",
            f"{r['bubble']:g}", f"{r['published_params']}x / {r['params']}x",
            f"{r['published_activations']} / {r['activations']}"] for r in rows]
    return md_table(["method", "ours", "chunk times", "bubble, published", "bubble, our order",
                     "params per device, published / ours", "activations, published / ours"],
                    out, "lllrrll")


def main() -> int:
    print(zero_bubble_table(zero_bubble_rows()))
    print()
    for f, b, w in ((1.0, 1.0, 1.0), (1.0, 1.0, 0.5)):
        print(f"F={f}, B(input)={b}, W={w}")
        print(dualpipe_table(dualpipe_rows(f=f, b=b, w=w)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
