"""What each part of the efficiency model does to the validation error (docs/calibration.md).

Removes one effect at a time (by patching the module that implements it, nothing else) and
prints the analytic MAPE on the published runs, per framework, against the full model.

Run: python experiments/calibration_ablation.py [--tiers 1]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import defaultdict
from typing import Callable, Iterator

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.cli.validate import parse_tiers  # noqa: E402
from simulator.studies.validate import load_cases, mape, validate_cases  # noqa: E402
from strategies.cost import elementwise_time, gemm_kernel, gemm_time, grad_time  # noqa: E402
from strategies.cost import hbm_rate, overlap_clock  # noqa: E402
from strategies.cost.system import DEFAULT_SYSTEM  # noqa: E402
from topologies.gpus import GPU  # noqa: E402
from topologies.gpus.catalog import AMPERE_WAVE_TILE  # noqa: E402

# catalog values before this calibration (burst-level GEMM efficiency)
OLD_GEMM = {"A100-SXM4-80GB": 0.88, "A100-SXM4-40GB": 0.88, "H100-SXM5-80GB": 0.75,
            "H200-SXM-141GB": 0.77, "B200-SXM-180GB": 0.75, "MI300X": 0.55}
# maximum achievable (burst) matmul efficiency: mamf-finder MAMF / peak
MAMF = {"A100-SXM4-80GB": 0.869, "A100-SXM4-40GB": 0.869, "H100-SXM5-80GB": 0.803,
        "H200-SXM-141GB": 0.843, "B200-SXM-180GB": 0.776, "MI300X": 0.511}


@contextlib.contextmanager
def patched(obj, name: str, value) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def cost_holders(module, name: str) -> list:
    """The modules of ``strategies.cost`` that hold ``module.name``: ``module`` and those that
    import the same object by name (each reads it from its own namespace)."""
    obj = getattr(module, name)
    return [m for k, m in sorted(sys.modules.items())
            if k.startswith("strategies.cost.") and vars(m).get(name) is obj]


@contextlib.contextmanager
def patched_cost(module, name: str, value) -> Iterator[None]:
    """``patched`` in every module of ``cost_holders(module, name)``, so that every caller of
    the cost model sees ``value``."""
    with contextlib.ExitStack() as stack:
        for m in cost_holders(module, name):
            stack.enter_context(patched(m, name, value))
        yield


def gemm_table(table: dict[str, float]) -> Callable:
    orig = GPU.gemm_efficiency

    def eff(self: GPU, dtype: str) -> float:
        return table.get(self.name, orig(self, dtype)) if dtype != "fp8" else orig(self, dtype)
    return eff


ABLATIONS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "full model": contextlib.nullcontext,
    "no overlap clock penalty": lambda: patched_cost(overlap_clock, "OVERLAP_CLOCK_RATIO", 1.0),
    "no separate gradient accumulation": lambda: patched_cost(grad_time, "grad_accum_time",
                                                              lambda params, *a, **k: 0.0 * params),
    "no kernel launch gaps": lambda: patched_cost(elementwise_time, "launch_time",
                                                  lambda fw=None, gpu=None: 0.0),
    "no M/tp split under TP overlap": lambda: patched_cost(gemm_time, "_tp_split",
                                                           lambda tp, tpo: 1.0),
    "K knee = 64 on every chip": lambda: patched_cost(gemm_kernel, "k_knee",
                                                      lambda gpu, dtype: gemm_kernel.SHAPE_SCALE),
    "FlashAttention-2 at the native rate": lambda: patched(
        GPU, "flash_efficiency", lambda self, kernel="native": self.attention_efficiency),
    "GEMM efficiency = MAMF (burst)": lambda: patched(GPU, "gemm_efficiency", gemm_table(MAMF)),
    "GEMM efficiency = old catalog": lambda: patched(GPU, "gemm_efficiency", gemm_table(OLD_GEMM)),
    "no GEMM wave quantisation": lambda: patched_cost(gemm_kernel, "gemm_waves",
                                                      lambda gpu, system=None: None),
    "GEMM waves with the kernel choice on every chip": lambda: patched_cost(
        gemm_kernel, "gemm_waves", lambda gpu, system=DEFAULT_SYSTEM: gemm_kernel.Waves(
            gpu.sm_count, *AMPERE_WAVE_TILE, hbm_rate.usable_hbm(gpu, system))
        if gpu.sm_count else None),
    "GEMM waves, 256x128 tile only (no tile or split-K choice)": lambda: patched_cost(
        gemm_kernel, "gemm_configs",
        lambda w: (gemm_kernel.GemmConfig(w.tile_m, w.tile_n, 1, 1.0),)),
    "GEMM tile choice, no split-K": lambda: patched_cost(gemm_kernel, "SPLIT_K", (1,)),
    "GEMM tile choice, every tile at efficiency 1": lambda: patched_cost(
        gemm_kernel, "tile_efficiency", lambda tm, tn: 1.0),
    "GEMM split-K without its reduction traffic": lambda: patched_cost(
        gemm_kernel, "split_k_bytes", lambda M, N, s: 0.0 * s),
}


def run(tiers) -> list[tuple[str, float, dict[str, float]]]:
    cases = load_cases(tiers=tiers)
    fw = {c.id: c.job.framework.name for c in cases if c.job is not None}
    out = []
    for name, ctx in ABLATIONS.items():
        with ctx():
            rows = validate_cases(cases, simulate=False)
        errs = [r for r in rows if r["analytic_error_pct"] is not None]
        by: dict[str, list[float]] = defaultdict(list)
        for r in errs:
            by[fw[r["id"]]].append(r["analytic_error_pct"])
        out.append((name, mape(r["analytic_error_pct"] for r in errs),
                    {k: mape(v) for k, v in sorted(by.items())}))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiers", default="1")
    a = ap.parse_args(argv)
    res = run(parse_tiers(a.tiers))
    fws = sorted({k for _, _, d in res for k in d})
    print("| variant | analytic MAPE | " + " | ".join(fws) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in fws) + " |")
    for name, total, d in res:
        print(f"| {name} | {total:.2f} % | "
              + " | ".join(f"{d[k]:.1f} %" if k in d else "-" for k in fws) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
