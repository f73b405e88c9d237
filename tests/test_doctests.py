"""The examples in docstrings run: every module of the three library packages that holds a
``>>>`` example is run through ``doctest`` (the examples are documentation, so they must stay
true). Modules whose examples simulate a whole step are marked slow."""
from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("topologies", "strategies", "simulator")
SLOW = {"simulator.simulate", "simulator.fold", "simulator.studies.compare_schedules",
        "simulator.studies.validate", "simulator.cli.search"}


def _modules_with_examples() -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if ">>>" not in path.read_text(encoding="utf-8"):
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out.append(".".join(parts))
    return out


MODULES = _modules_with_examples()


def test_examples_are_found():
    assert len(MODULES) >= 20


@pytest.mark.parametrize("name", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW else m
                                  for m in MODULES])
def test_module_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             verbose=False, report=False)
    assert result.attempted > 0, f"{name}: no example ran"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
