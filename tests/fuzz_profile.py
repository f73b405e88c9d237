"""The fuzz tests' one hypothesis profile (tests/test_fuzz_parsers.py, tests/test_fuzz_recent.py).
CI: the same examples every run. PARAPLAN_HYPOTHESIS_SCALE=k runs k times as many, and
PARAPLAN_HYPOTHESIS_RANDOM=1 new ones each time (for hunting bugs locally)."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = int(os.environ.get("PARAPLAN_HYPOTHESIS_SCALE", "1"))
COMMON = dict(derandomize=os.environ.get("PARAPLAN_HYPOTHESIS_RANDOM") != "1", deadline=None,
              database=None, print_blob=False, suppress_health_check=list(HealthCheck))


def fuzz(n: int):
    """The fixed profile: ``n`` derandomized examples (times ``SCALE``)."""
    return settings(max_examples=n * SCALE, **COMMON)
