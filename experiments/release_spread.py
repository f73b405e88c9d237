#!/usr/bin/env python
"""The release-to-release spread of same-layout runs in the reference files, and the MAPE
floor it sets for any model that predicts from the plan alone (calibration §5.214).

Rows are grouped where they ran the same workload on the same machine: the model as the
reader resolves it (``ModelSpec`` under one name: layers, widths, experts, MTP, sequence
length), the GPU, the GPU count, the resolved precision, and the layout (tp, pp, cp, ep,
etp, vp, mbs, gbs, ZeRO stage and shard, MoE capacity factor: dropless or token-dropping).
A group (rows of two releases or more: ``release``, the id's first word) differs only in
the software stack of its release and in run-to-run noise, neither of which a plan states.
One prediction ``p`` per group minimises the group's summed ``|m - p| / m`` at the
median of the measured steps weighted by ``1/m`` (``best_prediction``); its errors are the
floor (``floor_errors``): no plan-only model, however right its physics, can have a lower
MAPE on those rows. For two rows ``m1 < m2`` it is ``p = m1``, errors ``0`` and
``1 - m1/m2``, the group's floor ``(1 - m1/m2) / 2``.

    python experiments/release_spread.py                 # held-out files, about a minute
    python experiments/release_spread.py --all           # published.json too
    python experiments/release_spread.py --file PATH     # one file (the test's)

Prints every group (rows, measured steps, max/min, the model's estimates, the group's floor
and the model's MAPE on it), then the floor pooled over the grouped rows and over every
row read, MoE and dense apart. A row whose notes say its table's layout cells differ from
its release's config (``(table vs config)``: calibration §5.204) is starred, and the pooled
figures are also given without the groups holding one.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.estimate import estimate  # noqa: E402
from strategies.job import Job  # noqa: E402
from strategies.reference.cases import (case_from_entry, held_out_file_names,  # noqa: E402
                                       load_reference, run_file_names)

DATA = os.path.join(ROOT, "strategies", "reference", "data")
#: what a transcriber writes where the row's table cells and its release's config disagree
STATED_VS_CONFIG = "(table vs config)"


@dataclass(frozen=True)
class Row:
    """One run as the reader builds it: its file, id, group key, measured and estimated
    step (seconds), whether the model routes to experts, and whether its notes say the
    table's layout differs from its release's config."""

    file: str
    id: str
    key: tuple
    measured_s: float
    estimate_s: float
    moe: bool
    cells_disputed: bool


def layout_key(job: Job, n_gpus: int) -> tuple:
    """What two runs share when they ran the same workload on the same machine: the
    resolved model under one placeholder name, GPU, GPU count, precision, tp, pp, cp, ep,
    etp (unset: tp, as Megatron), vp, mbs, gbs, ZeRO stage and shard, MoE capacity
    factor."""
    p = job.plan
    return (dataclasses.replace(job.model, name="model"), job.cluster.gpu.name, n_gpus, job.dtype,
            p.tp, p.pp, p.cp, p.ep, p.etp or p.tp, p.vpp, p.mbs, p.gbs, p.zero, p.dp_shard,
            p.moe_capacity_factor)


def read_rows(path: str) -> list[Row]:
    """Every run of one reference file the reader builds (skipped rows left out), with its
    estimate (``strategies.estimate``, the analytic step ``reference_mape`` reports)."""
    entries = load_reference(path)
    out = []
    for r in entries:
        case = case_from_entry(r, entries)
        if case.job is None:
            continue
        out.append(Row(os.path.basename(path), r["id"],
                       layout_key(case.job, int(r["hardware"]["n_gpus"])),
                       float(case.measured_step_s), float(estimate(case.job).step_time_s),
                       case.job.model.num_experts > 1,
                       STATED_VS_CONFIG in str(r.get("notes") or "")))
    return out


def release(row_id: str) -> str:
    """A run's release: its id's first word (``mbridge2602``, ``mbridge260201``,
    ``dgxc2505``, ``nemo2504``, ``torchtitan``): the container or page version the
    transcribers name each row by."""
    return row_id.split("_", 1)[0]


def groups(rows: list[Row]) -> list[list[Row]]:
    """The rows that share a ``layout_key`` and come from two releases or more, in the order
    their first row is read; each group's rows in that order. Rows of one release that share
    a key (a page's A/B of a switch the layout does not hold, as torchtitan's async-TP
    twins) are no group of their own."""
    by: dict[tuple, list[Row]] = {}
    for r in rows:
        by.setdefault(r.key, []).append(r)
    return [g for g in by.values() if len({release(r.id) for r in g}) > 1]


def best_prediction(measured: list[float]) -> float:
    """The one step ``p`` (seconds) that minimises ``sum |m - p| / m`` over ``measured``:
    the median of the steps weighted by ``1/m`` (the lowest step at which the weights of
    the steps at or below it reach half the total; a tie leaves an interval of minimisers,
    all with the same sum)."""
    ms = sorted(measured)
    half = sum(1 / m for m in ms) / 2
    acc = 0.0
    for m in ms:
        acc += 1 / m
        if acc >= half * (1 - 1e-12):
            return m
    return ms[-1]


def floor_errors(measured: list[float]) -> list[float]:
    """Each row's ``|m - p| / m`` at the group's ``best_prediction`` (fractions), in the
    order given."""
    p = best_prediction(measured)
    return [abs(m - p) / m for m in measured]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _abs_err(r: Row) -> float:
    return abs(r.estimate_s - r.measured_s) / r.measured_s


def pooled(rows: list[Row], gs: list[list[Row]]) -> dict[str, tuple[int, int, float, float,
                                                                      float, float]]:
    """By kind (``MoE``, ``dense``, ``all``): (rows in groups, rows read, the floor MAPE over
    the grouped rows, the model's MAPE over the same rows, the floor over every row read:
    summed floor errors / rows read, the model's MAPE over every row read), fractions."""
    out = {}
    for kind, want in (("MoE", True), ("dense", False), ("all", None)):
        sel = [g for g in gs if want is None or g[0].moe is want]
        fl = [e for g in sel for e in floor_errors([r.measured_s for r in g])]
        read = [r for r in rows if want is None or r.moe is want]
        out[kind] = (len(fl), len(read), _mean(fl), _mean([_abs_err(r) for g in sel for r in g]),
                     sum(fl) / max(1, len(read)), _mean([_abs_err(r) for r in read]))
    return out


def _describe(g: list[Row]) -> str:
    k = g[0].key
    m = k[0]
    tp, pp, cp, ep, etp, vp, mbs, gbs, zero = k[4:13]
    lay = f"tp{tp} pp{pp} cp{cp} ep{ep}" + (f" etp{etp}" if etp != tp else "") + \
        f" vp{vp} mbs{mbs} gbs{gbs} z{zero}" + (f" cf{k[14]:g}" if k[14] else "")
    return (f"{'MoE' if g[0].moe else 'dense'} L{m.num_layers} h{m.hidden_size} "
            f"E{m.num_experts} s{m.seq_length} / {k[1]} x{k[2]} {k[3]} / {lay}")


def print_table(gs: list[list[Row]]) -> None:
    """One line per group, then its rows."""
    print("| # | group: model (kind, layers, hidden, experts, seq) / GPU x count precision / "
          "layout | rows | max/min | estimates s | floor | model MAPE |")
    print("|---|---|---|---|---|---|---|")
    for i, g in enumerate(gs, 1):
        ms = [r.measured_s for r in g]
        es = [r.estimate_s for r in g]
        fl = floor_errors(ms)
        model = [_abs_err(r) for r in g]
        print(f"| {i} | {_describe(g)} | {len(g)} | {max(ms) / min(ms):.2f} | "
              f"{min(es):.2f}-{max(es):.2f} | {100 * _mean(fl):.1f} % | "
              f"{100 * _mean(model):.1f} % |")
        for r, f in zip(g, fl):
            star = " *" if r.cells_disputed else ""
            print(f"|   | {r.file} {r.id}{star} | meas {r.measured_s:.3f} s | "
                  f"est {r.estimate_s:.3f} s | {100 * (r.estimate_s / r.measured_s - 1):+.1f} % "
                  f"| floor {100 * f:.1f} % | |")


def print_pooled(title: str, rows: list[Row], gs: list[list[Row]]) -> None:
    print(f"\n{title}\n\n| kind | rows in groups / read | floor MAPE on them | model MAPE on "
          "them | floor over every row read | model MAPE over every row read |\n"
          "|---|---|---|---|---|---|")
    for kind, (n, n_read, fl, model, share, model_all) in pooled(rows, gs).items():
        print(f"| {kind} | {n} / {n_read} | {100 * fl:.2f} % | {100 * model:.2f} % | "
              f"{100 * share:.2f} % | {100 * model_all:.2f} % |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="published.json's rows too")
    ap.add_argument("--file", default=None, help="one reference file instead")
    a = ap.parse_args(argv)
    if a.file:
        paths = [a.file]
    else:
        # the held-out files (``reference_mape``'s pooled figure), or every file with runs
        names = run_file_names(DATA) if a.all else held_out_file_names(DATA)
        paths = [os.path.join(DATA, n) for n in names]
    rows = [r for p in paths for r in read_rows(p)]
    gs = groups(rows)
    print_table(gs)
    print_pooled(f"Pooled over {len(rows)} rows read, {len(gs)} groups:", rows, gs)
    clean = [g for g in gs if not any(r.cells_disputed for r in g)]
    if len(clean) != len(gs):
        print_pooled(f"Without the {len(gs) - len(clean)} groups holding a starred row:",
                     rows, clean)


if __name__ == "__main__":
    main()
