"""Weak-scaling series of the reference files: what grows with the GPU count, and what does not.

At a fixed per-GPU workload (same model, plan except ``dp``, same batch per replica) several
published series slow down as GPUs are added while the model stays flat (docs/calibration.md
§5.26). This script finds every such series in the reference files and tests two physical
explanations against them; it changes nothing in the model.

(a) **Ring latency of the data-parallel collectives.** NCCL's flat ring over ``n`` ranks on
``nodes`` nodes costs ``passes·((nodes-1)·lat_out + (n-nodes)·lat_in)`` per call
(``tuning.cc``; ``experiments.nccl_ring_latency.nccl_ring_latency``, §3.21), so it grows
with ``n``. Per row: ``L`` the latency of one reduce-scatter (= one all-gather) call over the
row's dense data-parallel group; the calls per step the stack issues (FSDP: an all-gather for
the forward, one for the backward and a reduce-scatter per layer and micro-batch; Megatron's
distributed optimizer: a reduce-scatter and an all-gather per 40M-parameter bucket; an
all-reduce per bucket without it) and the calls no compute can hide (FSDP: each micro-batch's
first gather and last reduce-scatter; the distributed optimizer: the last bucket's
reduce-scatter and the first bucket's all-gather); ``lat model``: the latency the estimate
charges exposed now (the analytic step less the same estimate with both cluster latencies
set to 0; it holds the tensor- and pipeline-parallel latencies too, flat in ``dp``).

(b) **GPU-to-GPU speed spread (the slowest of N).** A synchronous step waits for the slowest
GPU. If each GPU's compute time is ``t·(1 + σ·Z)``, ``Z`` standard normal and persistent,
the step's compute is ``t·(1 + σ·E[max of N])``; ``e(N) = E[max_{i<=N} Z_i]``
(``expected_max_normal``, by quadrature, ``~ sqrt(2 ln N)`` for large ``N``). Per series the
**implied** σ is what makes the measured/model ratio of the largest run over the smallest's
follow ``(1 + σ·e(N_L))/(1 + σ·e(N_S))`` (``implied_sigma``). A finding only: no public
source gives σ for these GPUs (Sinha et al., SC'22, measured V100 and MI60), and the implied
values differ by family and precision on the same machines (§5.26).

Part 3 (``--sigma S``, repeatable) prints each file's analytic MAPE with every run's whole
step scaled by ``1 + S·e(N)``: what a spread of ``S`` would do, had a source given one.

Run:
    python experiments/scale_growth.py                          # all reference files
    python experiments/scale_growth.py --sigma 0.01 --sigma 0.03
    python experiments/scale_growth.py --simulate mosaic_mpt1b_h100ls_512gpu_seq2048_mb12
    python experiments/scale_growth.py --reference strategies/reference/data/dgxc_2505.json
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections import defaultdict
from dataclasses import replace
from typing import Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.stacks.comm_rules import full_grad_reduce  # noqa: E402
from strategies.collectives.select import strided_layout  # noqa: E402

#: the reference files (``strategies/reference/data``) scanned by default
FILES = ("published.json", "dgxc_2505.json", "nemo_performance_2407.json",
         "published_2026.json", "megatron_bridge_2604.json", "frontier_papers.json",
         "nemo_performance_25.json", "automodel_perf.json",
         "classic_papers.json")


def expected_max_normal(n: int) -> float:
    """``E[max of n iid standard normals]`` (dimensionless): ``∫ x·n·φ(x)·Φ(x)^(n-1) dx`` by
    the composite Simpson rule on [-12, 12] (4,000 panels; the integrand is smooth and below
    1e-30 outside). ``e(1) = 0``, ``e(2) = 1/√π``, ``e(3) = 3/(2√π)``."""
    if int(n) != n or n < 1:
        raise ValueError(f"n: {n!r}: must be a whole number >= 1")
    x = np.linspace(-12.0, 12.0, 8001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    big_phi = 0.5 * np.vectorize(math.erfc)(-x / math.sqrt(2.0))
    f = x * n * phi * big_phi ** (n - 1)
    h = x[1] - x[0]
    return float(h / 3.0 * (f[0] + f[-1] + 4.0 * f[1:-1:2].sum() + 2.0 * f[2:-1:2].sum()))


def implied_sigma(ratio: float, n_small: int, n_large: int) -> float:
    """The σ for which ``(1 + σ·e(n_large)) / (1 + σ·e(n_small)) = ratio`` (the
    measured/model ratio at ``n_large`` GPUs over that at ``n_small``); negative when the
    larger run is relatively faster."""
    a, b = expected_max_normal(n_small), expected_max_normal(n_large)
    return (ratio - 1.0) / (b - ratio * a)


def call_latency(job) -> tuple[float, int, int, int]:
    """``(seconds, n, k, nodes)``: NCCL's flat-ring latency of one reduce-scatter over the
    job's dense data-parallel group (``nccl_ring_latency`` with the striped ring's hop
    latencies, ``flat_parts``); 0 for a group of one or inside one node."""
    from nccl_ring_latency import flat_parts
    p, cl = job.plan, job.cluster
    (_, n, stride), _ = cm.dp_parts(1.0, 0.0, p.tp, p.cp, p.dp, p.ep, p.etp)
    n, stride = int(n), int(stride)
    _, k, nodes = strided_layout(n, stride, cl.gpus_per_node)
    if n < 2:
        return 0.0, n, int(k), int(nodes)
    return float(flat_parts("reduce_scatter", 2 ** 20, n, stride, cl)[1]), n, int(k), int(nodes)


def calls_per_step(job) -> tuple[float, float]:
    """``(issued, exposed)`` data-parallel collective calls per step and GPU, as the stack
    issues them (module docstring)."""
    p = job.plan
    c = stage_costs(job)
    params = max(c.params_by_stage)
    mb = job.num_microbatches
    layers = job.model.num_layers / p.pp
    if p.zero == 3:
        return 3.0 * layers * mb, 2.0 * mb
    buckets = math.ceil(params / c.bucket_params)   # the stack's bucket (§5.86)
    if full_grad_reduce(job.framework, job.dtype, p.zero):
        return float(buckets), 1.0
    return 2.0 * buckets, 2.0


def latency_charged(job) -> float:
    """Seconds of latency in the estimate's step: the step less the step with both of the
    cluster's per-hop latencies at 0."""
    cl = job.cluster
    free = replace(job, cluster=replace(cl, intra_node_latency=0.0, inter_node_latency=0.0))
    return estimate(job).step_time_s - estimate(free).step_time_s


def series_key(case) -> tuple:
    """Runs of one weak-scaling series share their source table and everything but ``dp``
    (and the GPU count)."""
    j = case.job
    p = j.plan
    per_replica = p.gbs / p.dp
    src = case.raw.get("source") or {}
    table = src.get("url") or src.get("table")      # a page per model, or a table per sweep
    return (case.id.split("_")[0], str(table), j.model.name, j.cluster.gpu.name, j.dtype,
            j.framework.name,
            replace(p, dp=None, gbs=None, group_microbatches=None), per_replica,
            j.model.seq_length)


def rows(paths: Sequence[str | None]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for path in paths:
        for case in load_cases(path, tiers=None):
            if case.job is None or not case.measured_step_s:
                continue
            job = case.job
            lat, n, k, nodes = call_latency(job)
            issued, exposed = calls_per_step(job)
            out[series_key(case)].append({
                "id": case.id, "file": os.path.basename(path or "published.json"),
                "gpus": job.cluster.num_gpus, "measured": case.measured_step_s,
                "model": estimate(job).step_time_s, "lat_model": latency_charged(job),
                "L": lat, "n": n, "k": k, "nodes": nodes, "issued": issued,
                "exposed": exposed})
    return {key: sorted(v, key=lambda r: r["gpus"]) for key, v in out.items()
            if len({r["gpus"] for r in v}) > 1}


def report(series: dict[tuple, list[dict]]) -> None:
    print("## Weak-scaling series: per run (seconds; L in microseconds)\n")
    print("| run | GPUs | dp n (k x nodes) | measured | model | err | L per call | "
          "calls issued / exposed | lat model |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for key in sorted(series, key=lambda k: series[k][0]["id"]):
        for r in series[key]:
            err = 100 * (r["model"] - r["measured"]) / r["measured"]
            print(f"| {r['id']} | {r['gpus']} | {r['n']} ({r['k']} x {r['nodes']}) | "
                  f"{r['measured']:.3f} | {r['model']:.3f} | {err:+.1f} % | {r['L'] * 1e6:.0f} | "
                  f"{r['issued']:.0f} / {r['exposed']:.0f} | {r['lat_model'] * 1e3:.1f} ms |")
    print("\n## Per series, smallest -> largest run (growth in ms; sigma in %)\n")
    print("| series (first run) | GPUs | measured | model | residual ratio | lat model | "
          "exposed calls x dL | all calls x dL | implied sigma |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for key in sorted(series, key=lambda k: series[k][0]["id"]):
        s = series[key]
        a, b = s[0], s[-1]
        ratio = (b["measured"] / b["model"]) / (a["measured"] / a["model"])
        d_l = b["L"] - a["L"]
        sigma = implied_sigma(ratio, a["gpus"], b["gpus"])
        print(f"| {a['id']} | {a['gpus']} -> {b['gpus']} | "
              f"{(b['measured'] - a['measured']) * 1e3:+.0f} | "
              f"{(b['model'] - a['model']) * 1e3:+.0f} | "
              f"{ratio:.4f} | {(b['lat_model'] - a['lat_model']) * 1e3:+.1f} | "
              f"{b['exposed'] * d_l * 1e3:+.1f} | {b['issued'] * d_l * 1e3:+.0f} | "
              f"{100 * sigma:+.2f} |")


def whatif_sigma(paths: Sequence[str | None], sigmas: Sequence[float]) -> None:
    """Per reference file (and tier of ``published.json``), the analytic MAPE with every
    run's whole step scaled by ``1 + σ·e(N)`` (N its GPU count): the most a persistent
    per-GPU spread σ could add (it slows the compute; the step is mostly compute)."""
    from simulator.studies.validate import mape, validate_cases
    by: dict[tuple[str, float], list[float]] = defaultdict(list)
    cache: dict[int, float] = {}
    for path in paths:
        name = os.path.basename(path or "published.json")
        cases = [c for c in load_cases(path, tiers=None) if c.job is not None]
        for c, r in zip(cases, validate_cases(cases, simulate=False)):
            if r["analytic_error_pct"] is None:
                continue
            n = c.job.cluster.num_gpus
            e = cache.setdefault(n, expected_max_normal(n))
            for sg in sigmas:
                err = 100.0 * (r["analytic_step_time_s"] * (1.0 + sg * e)
                               - c.measured_step_s) / c.measured_step_s
                by[(name, sg)].append(err)
                if name == "published.json":
                    by[(f"published.json tier {c.tier}", sg)].append(err)
    print("\n## What-if: the whole step x (1 + sigma·e(N)), analytic MAPE per file\n")
    print("| file | runs | " + " | ".join(f"sigma {100 * sg:g} %" for sg in sigmas) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in sigmas) + " |")
    for name in sorted({k for k, _ in by}):
        print(f"| {name} | {len(by[(name, sigmas[0])])} | "
              + " | ".join(f"{mape(by[(name, sg)]):.2f} %" for sg in sigmas) + " |")


def simulate_rows(paths: Sequence[str | None], ids: Sequence[str]) -> None:
    """Measured, analytic and simulated seconds of the named runs (``evaluate_case``, the
    validation's own simulation)."""
    from simulator.studies.validate import evaluate_case
    print("| run | measured | analytic | simulated | analytic vs simulated |")
    print("| --- | --- | --- | --- | --- |")
    for path in paths:
        for case in load_cases(path, tiers=None):
            if case.id in ids and case.job is not None:
                r = evaluate_case(case, simulate=True)
                a, s = r["analytic_step_time_s"], r["simulated_step_time_s"]
                print(f"| {case.id} | {case.measured_step_s:.3f} | {a:.4f} | {s:.4f} | "
                      f"{100 * (a - s) / s:+.2f} % |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", action="append", default=None,
                    help="a reference JSON (repeatable; default: every file of FILES)")
    ap.add_argument("--sigma", action="append", type=float, default=None,
                    help="what-if: scale every run's step by 1 + SIGMA·e(N) (repeatable; "
                         "0.01 = 1 %%) and print each file's MAPE instead of the series")
    ap.add_argument("--simulate", action="append", default=None, metavar="ID",
                    help="print the named runs' measured, analytic and simulated step "
                         "(repeatable) instead of the series")
    a = ap.parse_args(argv)
    data = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "strategies", "reference", "data")
    paths = a.reference or [None if f == "published.json" else os.path.join(data, f)
                            for f in FILES]
    if a.simulate:
        simulate_rows(paths, a.simulate)
    elif a.sigma:
        whatif_sigma(paths, [0.0] + [x for x in a.sigma if x != 0.0])
    else:
        report(rows(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
