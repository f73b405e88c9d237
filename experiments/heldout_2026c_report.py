#!/usr/bin/env python
"""The held-out rows of ``strategies/reference/data/heldout_2026c.json`` (Megatron-Bridge's
26.02 container tables, calibration §5.199) or of another file of Megatron-Bridge table rows
(``heldout_2026d.json``: the 26.04 and 26.02.01 tables, §5.204; ``heldout_2026e.json``: the
25.11 and 25.09 tables, §5.208), analytic, as Markdown:

1. MAPE, mean and worst signed error by model family (MoE or dense), by chip, by kind, by
   release (the id's first word, where the file holds more than one), all;
2. every row: precision, plan, measured step, signed error, and the 26.04.01 row of the same
   model, system, precision and layout (``megatron_bridge_2604.json``) with its step and error;
3. the MoE rows' missed time per micro-batch and layer on a rank,
   ``(measured - estimated) / (micro-batches x (layers // pp))``, and that per local expert
   (``num_experts / ep``), beside the estimate's exposed terms (``estimate(...).breakdown_s``).

    python experiments/heldout_2026c_report.py      # a few seconds
    python experiments/heldout_2026c_report.py strategies/reference/data/heldout_2026d.json
    python experiments/heldout_2026c_report.py strategies/reference/data/heldout_2026e.json

Error = (model - measured) / measured: negative is a model faster than the run."""
from __future__ import annotations

import argparse
import os
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "strategies", "reference", "data")
HELD = os.path.join(DATA, "heldout_2026c.json")
TWINS = os.path.join(DATA, "megatron_bridge_2604.json")


def signed_errors(rows: list[dict]) -> dict[str, tuple[float, float, object]]:
    """Each runnable row's (measured s, signed error, estimate) by id."""
    out = {}
    for r in rows:
        case = case_from_entry(r, rows)
        if case.job is None:
            continue
        est = estimate(case.job)
        out[r["id"]] = (case.measured_step_s,
                        (est.step_time_s - case.measured_step_s) / case.measured_step_s, est)
    return out


def twin_key(r: dict) -> tuple:
    """What two rows share when they ran the same layout: model, chip, GPUs, precision (its
    first word), tp, pp, cp, ep, micro-batch, batch, chunks."""
    p = r["plan"]
    return (r["model"]["name"], r["hardware"]["gpu"], r["hardware"]["n_gpus"],
            r["precision"].split(" ")[0], p["tp"], p["pp"], p["cp"], p["ep"], p["microbatch"],
            p["global_batch"], p["virtual_stages"] or 1)


def _stat(errs: list[float]) -> str:
    return (f"{len(errs)} | {100 * sum(map(abs, errs)) / len(errs):.1f} % | "
            f"{100 * sum(errs) / len(errs):+.1f} % | {100 * max(errs, key=abs):+.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", default=HELD,
                    help="the held-out file (default: %(default)s)")
    rows = load_reference(ap.parse_args().file)
    err = signed_errors(rows)
    releases = {r["id"].split("_")[0] for r in rows}
    # one release: its prefix is dropped from the row names; several: kept, and grouped by
    short = (lambda rid: rid.split("_", 1)[1]) if len(releases) == 1 else (lambda rid: rid)
    groups: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
    for r in rows:
        if r["id"] not in err:
            continue
        e, moe = err[r["id"]][1], r["plan"]["ep"] > 1
        for g in (("family", f"{r['model']['name']} ({'MoE' if moe else 'dense'})"),
                  ("chip", r["hardware"]["gpu"]), ("kind", "MoE" if moe else "dense"),
                  ("release", r["id"].split("_")[0])):
            groups.setdefault(g, []).append(e)
    print("| group | runs | MAPE | mean | worst |\n|---|---|---|---|---|")
    for kind in ("family", "chip", "kind") + (("release",) if len(releases) > 1 else ()):
        for (k, name), errs in groups.items():
            if k == kind:
                print(f"| {name} | {_stat(errs)} |")
    print(f"| **all** | {_stat([v[1] for v in err.values()])} |\n")

    twins_rows = load_reference(TWINS)
    twin_err = signed_errors(twins_rows)
    twins = {twin_key(r): r for r in twins_rows}
    print("| row | precision | plan | measured s | error | 26.04.01 same layout: "
          "measured s, error |\n|---|---|---|---|---|---|")
    for r in rows:
        if r["id"] not in err:
            print(f"| {short(r['id'])} | not run | | | | |")
            continue
        p, t = r["plan"], twins.get(twin_key(r))
        plan = (f"tp{p['tp']} pp{p['pp']} cp{p['cp']} ep{p['ep']} vp{p['virtual_stages']} "
                f"mbs{p['microbatch']} gbs{p['global_batch']}"
                + (" fsdp" if p["zero_stage"] == 3 else ""))
        tw = (f"{twin_err[t['id']][0]:.3f}, {100 * twin_err[t['id']][1]:+.1f} %"
              if t and t["id"] in twin_err else "-")
        print(f"| {short(r['id'])} | {r['precision'].split(' ')[0]} | "
              f"{plan} | {err[r['id']][0]:.3f} | {100 * err[r['id']][1]:+.1f} % | {tw} |")
    print()

    print("| MoE row | micro-batches | layers // pp | local experts | missed s | missed ms per "
          "micro-batch x layer | per local expert | exposed terms of the estimate (s) |\n"
          "|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["plan"]["ep"] == 1 or r["id"] not in err:
            continue
        measured, _, est = err[r["id"]]
        job = case_from_entry(r, rows).job
        p = job.plan
        mb = p.gbs // (p.mbs * p.dp)
        layers = job.model.num_layers // p.pp
        miss = measured - est.step_time_s
        local = job.model.num_experts // p.ep
        per = 1e3 * miss / (mb * layers)
        terms = ", ".join(f"{k} {v:.2f}" for k, v in est.breakdown_s.items() if abs(v) >= 0.05)
        print(f"| {short(r['id'])} | {mb} | {layers} | {local} | "
              f"{miss:.2f} | {per:.2f} | {per / local:.3f} | {terms} |")


if __name__ == "__main__":
    main()
