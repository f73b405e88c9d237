"""Whether a reference row's stated plan fits its GPUs' memory (docs/calibration.md §5.206).

A run that ran fit in memory. The memory model's peak of each pipeline stage
(``Estimate.memory_by_stage``) is set against that stage's HBM
(``strategies.memory.scalar.stage_hbm_bytes``); a row whose fullest stage exceeds its HBM by
more than ``FIT_MARGIN`` "does not fit as stated": either the source misstates the plan, or
the memory model misses what the run did (CPU offloading, a smaller buffer...). Within the
margin the memory model cannot tell (its own error is that large), so such rows are not marked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from strategies.errors import SpecError
from strategies.job import Job

#: The memory model's error band: the largest |error| of its peak against any reference row
#: that prints one, either sign (``python experiments/memory_mape.py``: published.json's
#: bloom_prequel_181B_zero0, −35.0 %; the largest over-estimate is +9.4 %,
#: torchtitan_2412_405B_t5_interleaved). A stated plan is marked when its estimated peak
#: exceeds its HBM by more than this fraction. ``tests/test_stated_fit.py`` checks it covers
#: published.json's printed peaks.
FIT_MARGIN = 0.35


@dataclass(frozen=True)
class StatedFit:
    """The fullest stage's estimated peak (bytes) and that stage's HBM per GPU (bytes)."""

    peak_bytes: float
    hbm_bytes: float

    def __post_init__(self) -> None:
        if not self.peak_bytes >= 0:
            raise SpecError("peak_bytes", self.peak_bytes, "must be a number >= 0")
        if not self.hbm_bytes > 0:
            raise SpecError("hbm_bytes", self.hbm_bytes, "must be a number > 0 (bytes of HBM)")

    @property
    def ratio(self) -> float:
        """Estimated peak over HBM (1.0: exactly full)."""
        return self.peak_bytes / self.hbm_bytes

    @property
    def fits(self) -> bool:
        """False where the peak exceeds HBM by more than ``FIT_MARGIN``."""
        return self.ratio <= 1.0 + FIT_MARGIN


def stated_fit(job: Job, memory_by_stage: Sequence[Any]) -> StatedFit:
    """``StatedFit`` of the stage whose peak (``.total``, bytes) is the largest fraction of its
    own GPUs' HBM."""
    from strategies.memory.scalar import stage_hbm_bytes
    pairs = [(float(b.total), float(stage_hbm_bytes(job, s)))
             for s, b in enumerate(memory_by_stage)]
    peak, hbm = max(pairs, key=lambda p: p[0] / p[1])
    return StatedFit(peak_bytes=peak, hbm_bytes=hbm)


def job_fit(job: Job) -> StatedFit:
    """``stated_fit`` of ``job`` under the analytic estimate."""
    from strategies.estimate.scalar import estimate
    return stated_fit(job, estimate(job).memory_by_stage)
