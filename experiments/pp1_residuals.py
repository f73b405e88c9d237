"""What Megatron-Core / NeMo dense runs without pipelining miss per step, against what the
model charges (docs/calibration.md §5.78; issue 15 item 3, "pp = 1 runs too fast").

Table 1, per dense Megatron-Core / NeMo row of the reference files on H100 or GB200 (B200
rows are the Blackwell-rate question, left out): the plan, measured and modelled seconds per
step, the miss (measured − modelled, s and %), micro-batches per step ``m``, tokens per GPU
per step, parameters per GPU (the rank's gradient buffer), and what the model already
charges after the last backward: exposed data-parallel communication and the optimizer with
the per-step passes (``strategies.cost.step``).

Table 2, over the pp = 1 rows of each publication (three rows or more) and over the
pipelined ones: each candidate form of the miss (a fixed time per step, per micro-batch,
per parameter, per token, a rate = share of the step) with its mean and coefficient of
variation. A form that describes the miss has a small spread; one that does not scatters.

(How the step grows with the GPU count at a fixed per-GPU workload is
``experiments/scale_growth.py``'s question, docs/calibration.md §5.26.)

Table 3: the same job (model shape, global batch, GPU, precision, GPU count and plan)
published twice, by two releases of the stack: what the release alone changes.

Table 4, for the Megatron-Core README rows (r0.8.0, the code read) without pipelining: upper
bounds of what their step runs that the model does not price (``unpriced``), beside the miss.

Table 5, a what-if and not the model: a fixed time per step equal to the four README rows'
mean miss added to every row; MAPE, mean and the rows it makes worse, per publication.

Run: python experiments/pp1_residuals.py
"""
from __future__ import annotations

import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import md_table  # noqa: E402
from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.cost.system import DEFAULT_SYSTEM  # noqa: E402
from strategies.launch_blocking import SYNC_LAUNCH_GAP_S  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402

FILES = ("published.json", "nemo_performance_2407.json", "nemo_performance_25.json",
         "dgxc_2505.json")
STACKS = ("megatron-core", "nemo")
GPUS = ("H100", "GB200")
#: id prefix -> publication (stack release): the groups of table 2
SOURCES = (("megatron_core_h100_weak", "Megatron-Core r0.8 README weak scaling (2024)"),
           ("nemo2407", "NeMo 24.07 performance summary (NeMo 1)"),
           ("dgxc_nemo2411", "DGX Cloud NeMo 24.11"),
           ("dgxc2504", "DGX Cloud 25.04 (NeMo 25.02.01)"),
           ("dgxc2505", "DGX Cloud 25.05"),
           ("nemo2504", "NeMo 25.04 performance summary"),
           ("nemo2507", "NeMo 25.07 performance summary"),
           ("nemo2502", "NeMo 25.02 performance summary"))


def _stack(job: Any) -> str:
    fw = job.framework
    return fw if isinstance(fw, str) else str(getattr(fw, "name", fw))


def source(rid: str) -> str:
    """The publication a row comes from, by its id prefix (one release of one stack)."""
    for prefix, name in SOURCES:
        if rid.startswith(prefix):
            return name
    return "other"


def rows() -> list[dict[str, Any]]:
    """One record per dense Megatron-Core / NeMo row on H100 or GB200 with a measured step."""
    out = []
    for name in FILES:
        path = os.path.join("strategies", "reference", "data", name)
        for c in load_cases(path, tiers=None):
            j = c.job
            if j is None or c.measured_step_s is None or _stack(j) not in STACKS:
                continue
            if j.model.num_experts > 1 or not j.cluster.gpu.name.startswith(GPUS):
                continue
            e = estimate(j)
            sc = stage_costs(j)
            p = j.plan
            n = p.tp * p.pp * p.dp * p.cp
            miss = c.measured_step_s - e.step_time_s
            out.append({
                "job": j,
                "file": name.split(".")[0], "id": c.id, "source": source(c.id),
                "shape": (j.model.num_layers, j.model.hidden_size, j.model.ffn_hidden_size,
                          j.model.vocab_size, j.model.seq_length, p.gbs), "plan": p.short(),
                "gpu": j.cluster.gpu.name.split("-")[0], "dtype": j.dtype, "pp": p.pp,
                "dp": p.dp, "gpus": n, "model": j.model.name,
                "meas": c.measured_step_s, "est": e.step_time_s, "miss": miss,
                "miss_pct": 100 * miss / c.measured_step_s, "m": e.num_microbatches,
                "tokens": p.gbs * j.model.seq_length / n,
                "params": float(max(sc.params_by_stage)),
                "dp_s": e.breakdown_s["dp_comm"], "opt_s": e.breakdown_s["optimizer"]})
    return out


def table1(recs: list[dict[str, Any]]) -> str:
    head = ["row", "GPU", "dtype", "plan", "measured s", "model s", "miss s", "miss %", "m",
            "tokens/GPU", "params/GPU (1e9)", "model dp exposed ms", "model optimizer ms"]
    body = [[r["id"], r["gpu"], r["dtype"], r["plan"], f"{r['meas']:.3f}", f"{r['est']:.3f}",
             f"{r['miss']:+.3f}", f"{r['miss_pct']:+.1f}", f"{r['m']:.0f}",
             f"{r['tokens']:.0f}", f"{r['params'] / 1e9:.2f}", f"{1e3 * r['dp_s']:.1f}",
             f"{1e3 * r['opt_s']:.1f}"] for r in recs]
    return md_table(head, body)


FORMS = (("per step (ms)", lambda r: 1e3 * r["miss"]),
         ("per micro-batch (ms)", lambda r: 1e3 * r["miss"] / r["m"]),
         ("per 1e9 parameters per GPU (ms)", lambda r: 1e3 * r["miss"] / (r["params"] / 1e9)),
         ("per 1e3 tokens per GPU (ms)", lambda r: 1e3 * r["miss"] / (r["tokens"] / 1e3)),
         ("rate: share of the measured step (%)", lambda r: r["miss_pct"]))


def table2(recs: list[dict[str, Any]]) -> str:
    """Each form of the miss over the pp = 1 rows of each publication with 3 rows or more,
    then over every pp = 1 row and every pipelined row."""
    groups = [(f"pp = 1, {src}", [r for r in recs if r["pp"] == 1 and r["source"] == src])
              for _, src in SOURCES]
    groups = [g for g in groups if len(g[1]) >= 3]
    groups += [("pp = 1, all", [r for r in recs if r["pp"] == 1]),
               ("pp > 1, all", [r for r in recs if r["pp"] > 1])]
    body = []
    for label, group in groups:
        for form, f in FORMS:
            xs = [f(r) for r in group]
            mean = statistics.fmean(xs)
            sd = statistics.pstdev(xs)
            body.append([label, str(len(xs)), form, f"{mean:+.2f}", f"{min(xs):+.2f}",
                         f"{max(xs):+.2f}", f"{sd / abs(mean):.2f}" if mean else "-"])
    return md_table(["rows", "n", "miss as", "mean", "min", "max", "sd / |mean|"], body)


def same_plan_pairs(recs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Groups of rows from different publications with the same job: model shape (layers,
    hidden, FFN, vocabulary, sequence), global batch, GPU, precision, GPU count, plan and the
    stack's stated policy constants (``Job.system``: gradient and gathered-weight bytes)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in recs:
        groups.setdefault((r["shape"], r["gpu"], r["dtype"], r["gpus"], r["plan"],
                           r["job"].system), []).append(r)
    return [g for g in groups.values() if len({r["source"] for r in g}) > 1]


def table3(recs: list[dict[str, Any]]) -> str:
    body = []
    for g in same_plan_pairs(recs):
        for r in g:
            body.append([r["id"], r["source"], r["plan"], f"{r['meas']:.3f}", f"{r['est']:.3f}",
                         f"{r['miss_pct']:+.1f}"])
        body.append(["", "ratio of the measured steps (first / last)", "",
                     f"{g[0]['meas'] / g[-1]['meas']:.3f}",
                     f"{g[0]['est'] / g[-1]['est']:.3f}", ""])
    return md_table(["row", "publication", "plan", "measured s", "model s", "miss %"], body)


def bucket(dp: int) -> float:
    """Megatron-Core r0.8.0's DDP bucket, parameters: ``max(40M, 1M x dp)``
    (megatron/core/distributed/distributed_data_parallel.py)."""
    return max(40e6, 1e6 * dp)


def unpriced(r: dict[str, Any]) -> dict[str, float]:
    """Upper bounds (s per step) of what the pp = 1 step runs and the model does not price:
    the loss's all-reduce over the data-parallel group once per micro-batch (8 bytes: the
    model's flat ring, above NCCL's tree for so small a message), one more bucket's
    parameter all-gather than the model exposes (the bucket after the embedding's hides
    behind the embedding lookup only), and the host synchronisations per step as a count:
    the gradient NaN check per bucket, the loss's NaN check per micro-batch, the clipping
    norm's and the loss scale's ``.item()`` (Megatron-Core r0.8.0: param_and_grad_buffer.py
    ``start_grad_sync``, pretrain_gpt.py ``loss_func``, optimizer/clip_grads.py,
    training/training.py ``train``), each priced at the GPU idle of one synchronised kernel
    boundary that BigScience's public A/B implies (``launch_blocking.SYNC_LAUNCH_GAP_S``)."""
    j, p = r["job"], r["job"].plan
    b = min(bucket(p.dp), r["params"])
    loss = r["m"] * float(cm.collective_time("allreduce", 8.0, p.dp, p.tp * p.cp, j.cluster))
    ag = float(cm.dp_collective_time("allgather", DEFAULT_SYSTEM.param_bytes, b, 0.0, p.tp,
                                     p.cp, p.dp, p.ep, p.etp, j.cluster))
    syncs = -(-r["params"] // bucket(p.dp)) + r["m"] + 2
    return {"loss_s": loss, "ag_s": ag, "syncs": syncs, "sync_s": syncs * SYNC_LAUNCH_GAP_S}


def table4(recs: list[dict[str, Any]]) -> str:
    body = []
    for r in recs:
        if r["pp"] != 1 or not r["source"].startswith("Megatron-Core"):
            continue
        u = unpriced(r)
        body.append([r["id"], f"{1e3 * r['miss']:+.0f}", f"{bucket(r['dp']) / 1e6:.0f}M",
                     f"{1e3 * u['loss_s']:.2f}", f"{1e3 * u['ag_s']:.2f}", f"{u['syncs']:.0f}",
                     f"{1e3 * u['sync_s']:.2f}"])
    return md_table(["row", "miss ms", "DDP bucket", "loss all-reduces ms (<=)",
                     "one more bucket gathered ms (<=)", "host syncs per step",
                     "syncs x SYNC_LAUNCH_GAP_S ms"], body)


def table5(recs: list[dict[str, Any]]) -> str:
    """What-if (not the model): every row's step plus the weak-scaling rows' mean miss, a
    fixed time per step fitted to those four rows; MAPE and mean per publication."""
    weak = [r["miss"] for r in recs if r["pp"] == 1 and r["source"].startswith("Megatron-Core")]
    add = statistics.fmean(weak)
    body = []
    for _, src in SOURCES:
        for label, sel in (("pp = 1", lambda r: r["pp"] == 1), ("pp > 1", lambda r: r["pp"] > 1)):
            g = [r for r in recs if r["source"] == src and sel(r)]
            if not g:
                continue
            e0 = [100 * (r["est"] / r["meas"] - 1) for r in g]
            e1 = [100 * ((r["est"] + add) / r["meas"] - 1) for r in g]
            worse = sum(abs(b) > abs(a) for a, b in zip(e0, e1))
            body.append([src, label, str(len(g)),
                         f"{statistics.fmean(map(abs, e0)):.2f} -> "
                         f"{statistics.fmean(map(abs, e1)):.2f}",
                         f"{statistics.fmean(e0):+.2f} -> {statistics.fmean(e1):+.2f}",
                         str(worse)])
    return (f"(+{1e3 * add:.1f} ms per step)\n\n"
            + md_table(["publication", "rows", "n", "MAPE %", "mean %", "rows worse"], body))


def main() -> None:
    recs = rows()
    print("Table 1: dense Megatron-Core / NeMo rows on H100 and GB200 (analytic)\n")
    print(table1([r for r in recs if r["pp"] == 1]))
    print()
    print(table1([r for r in recs if r["pp"] > 1]))
    print("\nTable 2: the miss under each candidate form\n")
    print(table2(recs))
    print("\nTable 3: the same job in two publications (another release of the stack)\n")
    print(table3(recs))
    print("\nTable 4: what the pp = 1 step runs and the model does not price, bounded\n")
    print(table4(recs))
    print("\nTable 5: what-if, a fixed time per step equal to the weak-scaling rows' mean miss")
    print(table5(recs))


if __name__ == "__main__":
    main()
