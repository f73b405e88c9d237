#!/usr/bin/env python
"""What the AutoModel rows (strategies/reference/data/automodel_perf.json, held out) miss
under the ``automodel`` profile with the facts they state (DeepEP, ``moe_routing:
contiguous``; docs/calibration.md §5.31, §5.38), and how far each stated fact and two
unmodelled stack facts move them. Analytic only, a second:

    python experiments/automodel_whatif.py

Table 1: each row's measured and estimated step, its error and the estimate's exposed time by
kind. Table 2: the error per model family. Table 3, what-ifs, each applied alone and then
together, none fitted: ``random``, the stated routing off (``moe_routing=random``: ``k``
experts drawn at random, ``ep_dispatch.expert_hit_probability``, instead of the benchmark's
``FakeBalancedGate``, ``ep_dispatch.contiguous_hit_probability``); ``alltoall``, NCCL's all-to-all
in place of DeepEP (``moe_dispatcher=alltoall``); ``fused``, Transformer Engine's fused
RMSNorm in place of eager elementwise kernels for the whole layer
(``elementwise_kernels="fused"``, an upper bound on what TE's norm buys: AutoModel's residual
adds, SwiGLU and routing stay eager PyTorch); ``one-flush``, the stated pipeline flushes off
(``flushes=1``: one schedule over the step's micro-batches, where AutoModel's
``_run_train_optim_step`` runs ``schedule.step`` once per local batch, ``flushes = GA``,
``strategies.flushes``, docs/calibration.md §5.43). Table 4: the estimate's peak memory (GiB)
on the fullest pipeline stage, by part, and whether it fits the H100's 80 GB (every row
ran)."""
from __future__ import annotations

import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data", "automodel_perf.json")
FAMILY = {"deepseek-v3": "DeepSeek-V3", "kimi-k2": "Kimi K2", "qwen3-30b-a3b": "Qwen3-30B-A3B",
          "gpt-oss-20b": "gpt-oss-20b"}


def variant(job, flags: tuple[str, ...]):
    """``job`` with the what-ifs ``flags`` (``VARIANTS``) applied to its plan and stack."""
    fw, plan = job.framework, job.plan
    if "random" in flags:
        plan = replace(plan, moe_routing="random")
    if "alltoall" in flags:
        plan = replace(plan, moe_dispatcher="alltoall")
    if "fused" in flags:
        fw = replace(fw, elementwise_kernels="fused")
    if "one-flush" in flags:
        plan = replace(plan, flushes=1)
    return replace(job, framework=fw, plan=plan)


VARIANTS = (("base", ()), ("random", ("random",)), ("alltoall", ("alltoall",)),
            ("random+alltoall", ("random", "alltoall")), ("fused", ("fused",)),
            ("one-flush", ("one-flush",)))


def step_s(job, flags: tuple[str, ...]) -> float:
    """The estimated step of ``job`` under the what-ifs ``flags`` (``VARIANTS``)."""
    return estimate(variant(job, flags)).step_time_s


def rows(path: str = DATA) -> list[dict]:
    """Per row: id, family, measured step, the base breakdown and each variant's error (%)."""
    ref = load_reference(path)
    out = []
    for r in ref:
        c = case_from_entry(r, ref)
        if c.job is None:
            continue
        rec = {"id": r["id"], "family": FAMILY.get(r["model"]["name"], r["model"]["name"]),
               "measured": c.measured_step_s, "breakdown": estimate(c.job).breakdown_s}
        e = estimate(c.job)
        rec["fits"] = bool(e.fits)
        rec["memory"] = max((vars(m) for m in e.memory_by_stage),
                            key=lambda m: sum(v for v in m.values() if isinstance(v, float)))
        for name, flags in VARIANTS:
            s = step_s(c.job, flags)
            rec[name + "_s"] = s
            rec[name] = 100.0 * (s - c.measured_step_s) / c.measured_step_s
        out.append(rec)
    return out


def main() -> int:
    recs = rows()
    print("| row | measured s | estimate s | error | compute | recompute | ep_comm | other |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in recs:
        b = r["breakdown"]
        other = sum(v for k, v in b.items() if k not in ("compute", "recompute", "ep_comm"))
        print(f"| {r['id']} | {r['measured']:.3f} | {r['base_s']:.3f} | {r['base']:+.1f} % | "
              f"{b['compute']:.3f} | {b['recompute']:.3f} | {b['ep_comm']:.3f} | {other:.3f} |")
    print()
    print("| family | runs | MAPE | mean |")
    print("| --- | ---: | ---: | ---: |")
    fams = list(dict.fromkeys(r["family"] for r in recs))
    for f in fams + ["all"]:
        e = [r["base"] for r in recs if f in ("all", r["family"])]
        print(f"| {f} | {len(e)} | {sum(map(abs, e)) / len(e):.2f} % | {sum(e) / len(e):+.2f} % |")
    print()
    keys = tuple(name for name, _ in VARIANTS)
    print("| row | " + " | ".join(keys) + " |")
    print("| --- |" + " ---: |" * len(keys))
    for r in recs:
        print(f"| {r['id']} | " + " | ".join(f"{r[k]:+.1f} %" for k in keys) + " |")
    print("| MAPE | " + " | ".join(
        f"{sum(abs(r[k]) for r in recs) / len(recs):.2f} %" for k in keys) + " |")
    print()
    print("| row | params | grads | optimizer | activations | other | total | fits |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in recs:
        m = {k: v / 2**30 for k, v in r["memory"].items() if isinstance(v, float)}
        print(f"| {r['id']} | " + " | ".join(f"{m[k]:.2f}" for k in (
            "params", "grads", "optimizer", "activations", "other")) +
            f" | {sum(m.values()):.2f} | {'yes' if r['fits'] else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
