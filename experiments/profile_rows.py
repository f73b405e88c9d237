#!/usr/bin/env python
"""Reference rows with a measured GPU profile applied: each row's analytic error with the
catalog GPU and with the profile, per row and per reference file (docs/calibration.md
§5.128). A few seconds to a minute.

    python experiments/profile_rows.py --profile docs/measurements/h200_2026-11-29/run2/default.yaml
    python experiments/profile_rows.py --profile docs/measurements/h200_2026-11-29/run2/rows.yaml \\
        --gpu H100 --what-if

A row takes the profile as a cluster file's ``gpu: {profile: FILE}`` gives it: the row's
cluster (``strategies.reference.entry_specs.entry_cluster``) rebuilt from its own mapping
with ``gpu: {name: GPU, profile: FILE}`` (the loader's checks: the profile's GPU is the
row's, no GEMM above the peak), then the row's job re-estimated. Only rows whose GPU is
the profile's are read, in every reference file but the schedule studies. Columns:
``catalog`` (the shipped model), ``gemm`` (the profile's GEMM points only), ``gemm+attn``
(and its fused-attention points), ``+hbm`` (and its memory kernels' bandwidth) and
``profile`` (all of it: and its launch gap).

``--gpu NAME --what-if``: rows of another catalog GPU with the profile's GEMM and attention
points only (its memory kernels and launch gap dropped: they belong to the measured chip's
memory and host), attached to that GPU directly. Meant for a chip of the same die, clock and
power (H200 on H100 SXM: GH100, 1980 MHz, 700 W, the same bf16 and fp8 peaks; checked here:
refused where a peak differs). A what-if, not a measurement of that GPU: the compute-bound
kernels transfer, not the memory (H200 HBM3e 4.8 TB/s, H100 HBM3 3.35 TB/s; a thin GEMM's
ratio may hold some of the H200's faster HBM, the model's roofline on the row's own HBM
still applies).
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import Job  # noqa: E402
from topologies.cluster import cluster_from_mapping  # noqa: E402
from topologies.errors import SpecError  # noqa: E402
from topologies.gpu_profile import GpuProfile, load_gpu_profile  # noqa: E402
from topologies.gpus import GPU, get_gpu  # noqa: E402
from topologies.gpus.spec import RATES  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "strategies", "reference", "data")


def gemm_attention_only(prof: GpuProfile) -> GpuProfile:
    """``prof`` without its memory kernels, collectives and launch gap."""
    return replace(prof, memory=(), collectives=(), launch_gap_s=None)


def gemm_only(prof: GpuProfile) -> GpuProfile:
    """``prof``'s GEMM points alone (attention, memory kernels, collectives, gap dropped)."""
    return replace(gemm_attention_only(prof), attention=())


def without_gap(prof: GpuProfile) -> GpuProfile:
    """``prof`` without its launch gap (the framework's own gap instead)."""
    return replace(prof, launch_gap_s=None)


def with_profile(job: Job, path: str) -> Job:
    """``job`` on its cluster rebuilt with ``gpu: {name: GPU, profile: path}`` (the loader's
    checks apply)."""
    d = job.cluster.to_dict()
    d["gpu"] = {"name": job.cluster.gpu.name, "profile": os.path.abspath(path)}
    return replace(job, cluster=cluster_from_mapping(d))


def with_gpu_profile(job: Job, prof: GpuProfile) -> Job:
    """``job`` with ``prof`` attached to its cluster's GPU as it stands (no name check)."""
    cl = job.cluster
    groups = tuple(replace(g, gpu=replace(g.gpu, profile=prof)) for g in cl.groups)
    return replace(job, cluster=replace(cl, groups=groups))


def same_peaks(a: GPU, b: GPU) -> None:
    """Refuse a what-if between GPUs whose datasheet peaks differ."""
    for r in RATES:
        if a.peak_flops.get(r) != b.peak_flops.get(r):
            raise SpecError("--gpu", b.name, f"has another {r} peak than the profile's "
                            f"{a.name} ({b.peak_flops.get(r)} vs {a.peak_flops.get(r)} "
                            "FLOP/s): the GEMM and attention points do not transfer")


def pct(t: float, meas: float) -> float:
    return 100.0 * (t - meas) / meas


def file_rows(path: str, gpu: str, variants: dict) -> list[tuple[str, float, list[float], str]]:
    """``(id, measured s, [error % per variant], "stack dtype")`` of the rows of ``path`` on
    ``gpu``; ``variants``: name -> ``Job -> Job``."""
    out = []
    for c in load_cases(path, None):
        if c.job is None or c.skipped or c.job.cluster.gpu.name != gpu:
            continue
        errs = [pct(estimate(f(c.job)).step_time_s, c.measured_step_s) for f in variants.values()]
        out.append((c.id, c.measured_step_s, errs, f"{c.job.framework.name} {c.job.dtype}"))
    return out


def summary(rows: list, names: list[str], indent: str) -> None:
    """Per variant: MAPE and mean signed error (%) of ``rows``."""
    for i, n in enumerate(names):
        e = [r[2][i] for r in rows]
        print(f"{indent}{n:10} MAPE {sum(map(abs, e)) / len(e):6.2f} %  mean signed "
              f"{sum(e) / len(e):+6.2f} %")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="a paraplan calibrate profile")
    ap.add_argument("--gpu", default=None, help="the rows' catalog GPU (default: the profile's)")
    ap.add_argument("--what-if", action="store_true",
                    help="apply the profile's GEMM and attention points to another GPU's rows")
    ap.add_argument("--rows", action="store_true", help="list every row (default: up to 20)")
    ap.add_argument("--by-stack", action="store_true",
                    help="also each file's stack and precision apart")
    a = ap.parse_args(argv)
    prof = load_gpu_profile(a.profile)
    own = get_gpu(prof.gpu)
    gpu = get_gpu(a.gpu) if a.gpu else own
    if gpu.name != own.name and not a.what_if:
        raise SystemExit(f"--gpu={a.gpu}: the profile measured {own.name}; "
                         "another GPU's rows need --what-if")
    if a.what_if:
        same_peaks(own, gpu)
        ga = gemm_attention_only(prof)
        go = gemm_only(prof)
        variants = {"catalog": lambda j: j, "gemm": lambda j: with_gpu_profile(j, go),
                    "gemm+attn": lambda j: with_gpu_profile(j, ga)}
        print(f"WHAT-IF: {gpu.name} rows with {own.name}'s measured GEMM and attention points "
              f"({a.profile}); memory kernels and launch gap dropped")
    else:
        full = with_profile
        variants = {"catalog": lambda j: j,
                    "gemm": lambda j: with_gpu_profile(j, gemm_only(prof)),
                    "gemm+attn": lambda j: with_gpu_profile(j, gemm_attention_only(prof)),
                    "+hbm": lambda j: with_gpu_profile(j, without_gap(prof)),
                    "profile": lambda j: full(j, a.profile)}
        print(f"{gpu.name} rows with the profile {a.profile} (measured on {prof.device}); "
              f"HBM {prof.hbm_bandwidth / 1e12:.2f} TB/s, launch gap "
              f"{prof.launch_gap_s * 1e6:.2f} us")
    names = list(variants)
    for f in sorted(glob.glob(os.path.join(DATA, "*.json"))):
        if "schedule_studies" in f:
            continue
        rows = file_rows(f, gpu.name, variants)
        if not rows:
            continue
        print(f"\n{os.path.basename(f)}: {len(rows)} rows; error % (model - measured)")
        if a.rows or len(rows) <= 20:
            print(f"  {'row':58} {'meas s':>8} " + " ".join(f"{n:>9}" for n in names))
            for ident, meas, errs, _ in rows:
                print(f"  {ident[:58]:58} {meas:8.3f} " + " ".join(f"{e:+9.2f}" for e in errs))
        summary(rows, names, "  ")
        stacks = sorted({r[3] for r in rows})
        if a.by_stack and len(stacks) > 1:
            for st in stacks:
                part = [r for r in rows if r[3] == st]
                print(f"  {st}: {len(part)} rows")
                summary(part, names, "    ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
