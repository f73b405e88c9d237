"""Suite-wide settings that make the tests independent of the order and the worker they run in.

The suite runs under pytest-xdist (``-n auto``, ``pyproject.toml``): each worker is its own
process, so nothing here may rely on another test having run first in the same process.

Hypothesis: the fuzz and property files set their own derandomized profile
(``tests/fuzz_profile.py``, ``tests/test_properties.py``); the few ``@given`` tests that do
not (``test_search.py``, ``test_uneven_correction.py``, ``test_whatif_property.py``) get the same
defaults here: derandomized (the same examples on every run and in every worker), no
``.hypothesis/`` example database (two workers would share one directory and replay each
other's failures), and no per-example deadline (two workers on two busy cores would trip
it). ``PARAPLAN_HYPOTHESIS_RANDOM=1`` draws new examples, as in the fuzz profile.
"""
from __future__ import annotations

import os
import sys
import tempfile

from hypothesis import settings

# Bytecode. Where the environment asks Python for no bytecode (PYTHONDONTWRITEBYTECODE, as on
# the hosts these sessions run on), every python the suite starts (xdist's workers, the CLI
# and script subprocesses: ~0.5 CPU s each compiling the stack's modules) and every worker's
# assertion rewriting of the test files (~10 CPU s) starts from source on every run. The
# suite keeps its bytecode out of the checkout instead: under one folder of the temporary
# directory (PYTHONPYCACHEPREFIX, which its subprocesses inherit), nothing written beside the
# sources. A PYTHONPYCACHEPREFIX already set is kept; PARAPLAN_TEST_BYTECODE=0 leaves the
# environment as it is.
if (os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX")
        and os.environ.get("PARAPLAN_TEST_BYTECODE") != "0"):
    _prefix = os.path.join(tempfile.gettempdir(), f"paraplan-pycache-{os.getuid()}"
                           if hasattr(os, "getuid") else "paraplan-pycache")
    os.environ["PYTHONPYCACHEPREFIX"] = _prefix
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    sys.pycache_prefix, sys.dont_write_bytecode = _prefix, False

settings.register_profile(
    "paraplan",
    derandomize=os.environ.get("PARAPLAN_HYPOTHESIS_RANDOM") != "1",
    database=None,
    deadline=None,
    print_blob=False,
)
settings.load_profile("paraplan")


def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist, the order in which ``--dist loadfile`` hands out files: first the
    files with tests marked ``slow`` (most slow tests first), then the rest by number of tests,
    each file's tests in their own order. The controller keeps this order
    (``--no-loadscope-reorder``, ``pyproject.toml``; by default it sorts files by number of tests
    alone, which handed a one-test 50-second file out last: one worker ran it while the other
    idled). A serial run keeps the collection order."""
    if not hasattr(config, "workerinput"):
        return
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def heavy_first(name: str) -> tuple[int, int]:
        tests = files[name]
        return -sum(1 for t in tests if t.get_closest_marker("slow")), -len(tests)

    items[:] = [t for name in sorted(files, key=heavy_first) for t in files[name]]
