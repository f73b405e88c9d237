"""What torchao's four float8 rowwise rows of heldout_2026b.json would imply about the
rowwise GEMM's rate, were their whole miss that rate (docs/calibration.md §5.168; a finding,
no cost-model change).

For each row the script prices the step with the rowwise GEMMs slowed by a factor ``s``
(``s`` times the seconds ``strategies.cost.gemm_time.units_in`` gives them at the per-tensor
fp8 rate), in two readings of torchao 6243040 / PyTorch 2025-06: (a) only the forward GEMM
(the CUTLASS rowwise kernel, ``RowwiseScaledMM.cu``; the two backward GEMMs are cuBLAS's
per-tensor kernel with a rescale, ``float8_ops.addmm_float8_unwrapped``), (b) all three.
The step is linear in ``s`` (checked at the solved ``s``), so the implied factor is
``1 + (measured - model) / (d step / d s)``; the rate is ``1 / s`` of the per-tensor one.
The slowing is a patch inside this process only; nothing is fitted or written.

    python experiments/rowwise_implied_rate.py
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "experiments"))

from rowwise_pairs import FILE, ROWS  # noqa: E402
from strategies.cost import gemm_time  # noqa: E402
from strategies.cost.rowwise_casts import ROWWISE  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import reference_cases  # noqa: E402

_UNITS_IN = gemm_time.units_in


@contextmanager
def slowed(s: float, forward_only: bool) -> Iterator[None]:
    """Within the block, every ``fp8-rowwise`` GEMM priced by ``gemm_time.units_in`` takes
    ``s`` times its seconds: the forward alone (``forward_only``) or all three GEMMs."""
    def units_in(gemms, tp, gpu, dtype, *args, **kw):
        out = _UNITS_IN(gemms, tp, gpu, dtype, *args, **kw)
        if dtype != ROWWISE:
            return out
        res = []
        for pieces, f, d_pieces, d, w in out:
            if forward_only or d is None:
                res.append((pieces, s * f, d_pieces, d, w))
            else:
                res.append((pieces, s * f, d_pieces, s * d, s * w))
        return res
    gemm_time.units_in = units_in
    try:
        yield
    finally:
        gemm_time.units_in = _UNITS_IN


def step(job, s: float, forward_only: bool) -> float:
    """Modelled step seconds of ``job`` with its rowwise GEMMs slowed by ``s``."""
    with slowed(s, forward_only):
        return float(estimate(job).step_time_s)


def main() -> None:
    cases = {c.id: c for c in reference_cases([FILE])}
    print("| row | measured s | model s | fwd GEMM s/step | implied fwd rate (x tensorwise) "
          "| all-GEMM s/step | implied all-GEMM rate (x tensorwise) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for rid in ROWS:
        job, meas = cases[rid].job, cases[rid].measured_step_s
        base = step(job, 1.0, True)
        cells = []
        for fwd in (True, False):
            slope = step(job, 2.0, fwd) - base          # seconds of those GEMMs per step
            s = 1.0 + (meas - base) / slope
            check = step(job, s, fwd)
            assert abs(check - meas) < 1e-6 * meas, (rid, fwd, check, meas)
            cells += [f"{slope:.3f}", f"{1.0 / s:.3f}"]
        print(f"| {rid} | {meas:.3f} | {base:.3f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
