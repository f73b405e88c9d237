#!/usr/bin/env python
"""The cost model's price of the MoE presets' grouped expert GEMMs beside their H200
measurements (docs/calibration.md §5.123).

Run (a second, analytic only):

    python experiments/grouped_gemm_model.py                  # both runs, Markdown
    python experiments/grouped_gemm_model.py --run run1       # one run

The measurements: ``docs/measurements/h200_2026-11-29/{run1,run2}/grouped_gemm.json``, made by
``experiments/grouped_gemm_probe.py`` on one H200 (PyTorch 2.11, CUDA 13.0): per MoE preset at
``ep`` 8 (``E/8`` local experts) and 128/512/2,048 tokens per expert, the six expert GEMMs of a
layer (fc1, fc2 x forward, data gradient, weight gradient), each timed three ways: one
``torch._grouped_mm`` over the local experts (``grouped``: ATen's CUTLASS grouped kernel,
torchtitan's ``GroupedExperts``), a Python loop of ``torch.matmul`` (``loop``) and one dense
GEMM of all the rows (``dense``; not for the weight gradient).

The model's price: ``gemm_time.gemm_units``, the one pricing of a layer's GEMMs (the estimate,
the lower bound and the simulator read it through ``layer_time``), of the record's fc as the
layer lists it, ``(E/ep, m, N, K, column-parallel)`` at tp 1 in bf16 on ``H200-SXM-141GB``, with
the routed experts' ``gemm_time.fixed_shares`` under each launch rule (``RULES``, each on
torchtitan's profile, whose weight gradient writes 16 bits as the probe's does): ``grouped``
(torchtitan's ``TORCH_GROUPED_MM``: one fixed time, the tiles of every expert sharing the
kernel's waves, §5.123; the class of the measured ``grouped``), ``fused_no_waves`` (the same
without the waves: the rule before §5.123), ``te_4_streams`` (Transformer Engine's
``GroupedLinear``, the Megatron-Core / NeMo rows' kernel; not measured here) and ``per_expert``
(one kernel after another: the class of ``loop``, whose Python launches, about 11 us each, are
host time the layer prices apart). The pass's price is the local experts' count times the
unit's seconds (``gemm_time.units_time_fwd`` / ``units_time_bwd``). The dense GEMM's model
price is ``gemm_units`` of one ``(E/ep·m, N, K)`` GEMM; grouped-over-dense, model against
measured, divides the dense rate model's own error out. Short benchmarks run at the burst
clock, the catalog rate is the sustained one (``experiments.gemm_fixed_time.
sustained_over_burst``: 0.934 on Hopper), so model/measured ≈ 1/0.934 = 1.07 is agreement on
a sustained rate. Deterministic: the same files give the same bytes.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass, replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import gemm_time  # noqa: E402
from strategies.framework import get_profile  # noqa: E402
from strategies.hf_config import load_model_arg  # noqa: E402
from strategies.model import ModelSpec  # noqa: E402
from strategies.stacks.expert_gemm import (TE_GROUPED_GEMM, TORCH_GROUPED_MM,  # noqa: E402
                                           ExpertGemmLaunch)
from strategies.stacks.profile import FrameworkProfile  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASURED = os.path.join(ROOT, "docs", "measurements", "h200_2026-11-29")
RUNS = ("run1", "run2")
GPU, DTYPE = "H200-SXM-141GB", "bf16"
#: the launch rules priced (``ExpertGemmLaunch``), each on torchtitan's profile (no fused
#: gradient accumulation: the weight gradient writes its 16-bit output, as the probe's does)
RULES = (("grouped", TORCH_GROUPED_MM),                      # torchtitan's, §5.123
         ("fused_no_waves", replace(TORCH_GROUPED_MM, tiles=None)),   # the rule before §5.123
         ("te_4_streams", TE_GROUPED_GEMM),                  # Megatron-Core / NeMo
         ("per_expert", ExpertGemmLaunch("per_expert", 1)))
PASSES = ("fwd", "dgrad", "wgrad")
BASE = "torchtitan"


@dataclass(frozen=True)
class Row:
    """One measured grouped GEMM and the model's prices of it (seconds)."""

    model: str
    fc: str
    pas: str
    tokens: int
    experts: int
    m: int
    n: int
    k: int
    grouped_s: float | None
    loop_s: float
    dense_s: float | None
    model_s: dict             # RULES name -> the model's seconds of the grouped GEMM
    model_dense_s: float | None


def load_doc(run: str, folder: str = MEASURED) -> dict:
    """``folder/run/grouped_gemm.json``: its ``ep`` and ``records``."""
    with open(os.path.join(folder, run, "grouped_gemm.json")) as fh:
        return json.load(fh)


def fc_shape(rec: dict) -> tuple[int, int, int]:
    """The fc's forward ``(m, N, K)`` of a record whose pass GEMM is ``(rec.m, rec.n, rec.k)``:
    the forward itself, the data gradient ``(m, K, N)`` or the weight gradient ``(K, N, m)``."""
    p = rec["pass"]
    if p == "fwd":
        return rec["m"], rec["n"], rec["k"]
    if p == "dgrad":
        return rec["m"], rec["k"], rec["n"]
    if p == "wgrad":
        return rec["k"], rec["n"], rec["m"]
    raise ValueError(f"grouped_gemm record: pass {p!r} must be one of {', '.join(PASSES)}")


def launch_profile(launch: ExpertGemmLaunch) -> FrameworkProfile:
    """``BASE``'s profile with its grouped expert GEMMs launched by ``launch``."""
    return replace(get_profile(BASE), expert_gemm_launch=launch)


def pass_seconds(spec: ModelSpec, ep: int, rec: dict, fw: FrameworkProfile) -> float:
    """The model's seconds of ``rec``'s grouped GEMM: ``gemm_time.gemm_units`` of the fc's
    ``(E/ep, m, N, K, False)`` with the routed experts' ``gemm_time.fixed_shares`` under
    ``fw`` (as ``layer_time`` prices a layer), the record's pass, times ``E/ep``."""
    gpu = get_gpu(GPU)
    g = spec.num_experts / ep
    M, N, K = fc_shape(rec)
    gemm = (g, float(M), float(N), float(K), False)
    shares = gemm_time.fixed_shares([("routed_mlp", gemm)], spec, ep, fw)
    unit = gemm_time.gemm_units([gemm], 1, gpu, DTYPE, fw=fw, shares=shares)
    if rec["pass"] == "fwd":
        return float(gemm_time.units_time_fwd([g], unit))
    both, w = gemm_time.units_time_bwd([g], unit)
    return float(w if rec["pass"] == "wgrad" else both - w)


def occupancy(r: "Row") -> float:
    """Busy share of the H200's SMs the measured grouped kernel's tiles keep over its waves
    (``gemm_time.grouped_share_occupancy`` of the pass's ``r.m x r.n`` output per group, in
    ``TORCH_GROUPED_MM``'s tiles)."""
    share = gemm_time.GroupedShare(1.0, r.experts, TORCH_GROUPED_MM.tiles)
    return float(gemm_time.grouped_share_occupancy(share, r.m, r.n, get_gpu(GPU), DTYPE))


def dense_seconds(rec: dict) -> float:
    """The model's seconds of one ``(E/ep·m, n, k)`` GEMM (``gemm_time.gemm_units``, one fixed
    time)."""
    gpu = get_gpu(GPU)
    unit = gemm_time.gemm_units([(1, rec["experts_local"] * rec["m"], rec["n"], rec["k"], False)],
                                1, gpu, DTYPE, backward=False)
    return float(gemm_time.units_time_fwd([1], unit))


def rows(run: str, folder: str = MEASURED) -> list[Row]:
    """Every record of ``run`` with the model's prices."""
    out, specs = [], {}
    fws = {name: launch_profile(launch) for name, launch in RULES}
    doc = load_doc(run, folder)
    ep = int(doc["ep"])
    for rec in doc["records"]:
        spec = specs.setdefault(rec["model"], load_model_arg(rec["model"]))
        if max(1, spec.num_experts // ep) != rec["experts_local"]:
            raise ValueError(f"{rec['model']}: experts_local {rec['experts_local']} is not "
                             f"max(1, {spec.num_experts} // ep {ep})")
        mod = {kind: pass_seconds(spec, ep, rec, fw) for kind, fw in fws.items()}
        out.append(Row(rec["model"], rec["fc"], rec["pass"], rec["tokens_per_expert"],
                       rec["experts_local"], rec["m"], rec["n"], rec["k"], rec.get("grouped_s"),
                       rec["loop_s"], rec.get("dense_s"), mod,
                       dense_seconds(rec) if rec["pass"] != "wgrad" else None))
    return out


def noise(a: list[Row], b: list[Row], field: str) -> list[float]:
    """``|x1/x2 - 1|`` of ``field`` over the records two runs share."""
    out = []
    for r, s in zip(a, b):
        if (r.model, r.fc, r.pas, r.tokens) != (s.model, s.fc, s.pas, s.tokens):
            raise ValueError("runs list their records in different orders")
        x, y = getattr(r, field), getattr(s, field)
        if x and y:
            out.append(abs(x / y - 1.0))
    return out


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:.1f}"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def stats(xs: list[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(xs), min(xs), max(xs)


def table(rs: list[Row]) -> str:
    """Per model: one line per record."""
    lines = []
    for name in dict.fromkeys(r.model for r in rs):
        sub = [r for r in rs if r.model == name]
        lines += [f"\n**{name}** ({sub[0].experts} local experts)\n",
                  "| fc | pass | tok/exp | m, n, k | occupancy | grouped µs | model µs "
                  "| model/grouped "
                  "| before µs | before/grouped | loop µs | per-expert µs | per-expert/loop "
                  "| TE 4-stream µs | dense µs | model dense/dense |",
                  "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sub:
            g, f0, p = r.model_s["grouped"], r.model_s["fused_no_waves"], r.model_s["per_expert"]
            lines.append(
                f"| {r.fc} | {r.pas} | {r.tokens} | {r.m}, {r.n}, {r.k} | {occupancy(r):.2f} "
                f"| {_us(r.grouped_s)} "
                f"| {_us(g)} | {_r(_ratio(g, r.grouped_s))} | {_us(f0)} "
                f"| {_r(_ratio(f0, r.grouped_s))} | {_us(r.loop_s)} | {_us(p)} "
                f"| {_r(p / r.loop_s)} | {_us(r.model_s['te_4_streams'])} | {_us(r.dense_s)} "
                f"| {_r(_ratio(r.model_dense_s, r.dense_s))} |")
    return "\n".join(lines)


def _ratio(x: float | None, y: float | None) -> float | None:
    return x / y if x is not None and y else None


def ratios(rs: list[Row], rule: str) -> list[float]:
    """The model's seconds under ``rule`` over the measured grouped kernel's, per record that
    has one."""
    return [r.model_s[rule] / r.grouped_s for r in rs if r.grouped_s]


def over_dense_errors(rs: list[Row], rule: str) -> list[float]:
    """Per record with a grouped and a dense time: ``|ln|`` of the model's grouped-over-dense
    seconds under ``rule`` over the measured grouped-over-dense (the grouped kernel against one
    cuBLAS GEMM of the same rows, the dense rate model's own error divided out)."""
    return [abs(math.log((r.model_s[rule] / r.model_dense_s) / (r.grouped_s / r.dense_s)))
            for r in rs if r.grouped_s and r.dense_s]


def log_error(xs: list[float]) -> tuple[float, float]:
    """(geometric mean, mean ``|ln x|``) of ratios ``xs``."""
    logs = [math.log(x) for x in xs]
    return math.exp(statistics.fmean(logs)), statistics.fmean(abs(x) for x in logs)


def summary(rs: list[Row]) -> str:
    """Median, min, max of model/measured by tokens per expert; the geometric mean and the
    mean absolute log ratio of the grouped rule, now and before."""
    lines = ["| tokens/expert | model / grouped (med, min, max) | before / grouped "
             "| per-expert / loop | model dense / dense |", "|---:|---|---|---|---|"]
    for tok in sorted({r.tokens for r in rs}) + [None]:
        sub = [r for r in rs if tok is None or r.tokens == tok]
        cols = [ratios(sub, "grouped"), ratios(sub, "fused_no_waves"),
                [r.model_s["per_expert"] / r.loop_s for r in sub],
                [r.model_dense_s / r.dense_s for r in sub if r.dense_s]]
        cells = ["%.2f, %.2f, %.2f" % stats(c) for c in cols]
        lines.append(f"| {'all' if tok is None else tok} | " + " | ".join(cells) + " |")
    lines += ["", "| rule | geometric mean model/grouped | mean abs ln(model/grouped) "
              "| mean abs ln, grouped over dense (model vs measured) |", "|---|---:|---:|---:|"]
    for rule, label in (("grouped", "grouped kernel's waves (now)"),
                        ("fused_no_waves", "one fixed time, no waves (before)")):
        gm, err = log_error(ratios(rs, rule))
        rel = statistics.fmean(over_dense_errors(rs, rule))
        lines.append(f"| {label} | {gm:.3f} | {err:.3f} | {rel:.3f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", choices=RUNS, default=None,
                    help="one run's tables (default: run2's, with run1 against run2 as noise)")
    a = ap.parse_args()
    run = a.run or "run2"
    rs = rows(run)
    print(f"# Grouped expert GEMMs on one H200: the cost model against {run}\n")
    print(table(rs))
    for r in ([run] if a.run else list(RUNS)):
        print(f"\n## Model over measured, {r}\n")
        print(summary(rs if r == run else rows(r)))
    if a.run is None:
        r1 = rows("run1")
        print("\n## Noise: |run1/run2 - 1|\n")
        print("| time | median | max |\n|---|---:|---:|")
        for f in ("grouped_s", "loop_s", "dense_s"):
            n = noise(r1, rs, f)
            print(f"| {f[:-2]} | {statistics.median(n) * 100:.1f} % | {max(n) * 100:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
