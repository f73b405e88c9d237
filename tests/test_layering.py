"""Imports point one way (docs/architecture.md): topologies ← strategies ← simulator ← experiments.

Every ``.py`` file of the four packages is parsed with ``ast`` (nothing is imported), and every
import in it is checked, the lazy ones inside functions included, as are
``importlib.import_module("…")`` calls with a literal name:

- ``topologies`` imports none of strategies, simulator, experiments;
- ``strategies`` imports neither simulator nor experiments;
- ``simulator`` does not import experiments;
- only ``simulator.engine`` and ``simulator.network`` (and experiments) import SimPy;
- nothing under ``simulator`` but ``simulator.cli`` imports ``simulator.cli``;
- ``simulator.output`` imports neither ``simulator.search`` nor ``simulator.studies``;
- ``simulator.program`` imports neither the engine nor the network (it only describes);
- matplotlib is never imported at module level in the three library packages (plotting at
  the edge: imported where a picture is drawn).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("topologies", "strategies", "simulator", "experiments")   # lowest first
LIBRARY = LAYERS[:3]


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, root: Path = ROOT) -> list[tuple[int, str, bool]]:
    """``(line, imported module, at module level)`` for every import in the file (``root``:
    the folder that holds the packages, for resolving relative imports)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    top = {id(n) for n in tree.body}
    for n in tree.body:                       # `if TYPE_CHECKING:` / try blocks at top level
        if isinstance(n, (ast.If, ast.Try)):
            top |= {id(c) for c in ast.walk(n)}
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:                    # relative: resolve against the package
                base = package[:len(package) - node.level + 1]
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                names = [node.module or ""]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        out += [(node.lineno, name, id(node) in top) for name in names]
    return out


def _violations(package: str, rule) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line}: {name}"
            for path in _files(package) for line, name, top in _imports(path)
            if rule(name.split(".")[0], top)]


def test_every_package_is_seen():
    for package in LAYERS:
        assert len(_files(package)) >= 3, package


@pytest.mark.parametrize("package", LAYERS[:3])
def test_imports_point_one_way(package):
    higher = set(LAYERS[LAYERS.index(package) + 1:])
    bad = _violations(package, lambda top_name, _: top_name in higher)
    assert not bad, f"{package} must not import {sorted(higher)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", ["topologies", "strategies"])
def test_only_the_simulator_imports_simpy(package):
    bad = _violations(package, lambda top_name, _: top_name == "simpy")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", LIBRARY)
def test_matplotlib_is_imported_lazily(package):
    bad = _violations(package, lambda top_name, top: top_name == "matplotlib" and top)
    assert not bad, "\n".join(bad)


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    """The checker itself: a lazy import inside a function, a relative import and an
    ``importlib.import_module`` literal are all found."""
    pkg = tmp_path / "strategies"
    pkg.mkdir()
    f = pkg / "m.py"
    f.write_text("import numpy\n"
                 "from . import plan\n"
                 "def g():\n"
                 "    from simulator import engine\n"
                 "    import importlib\n"
                 "    importlib.import_module('experiments.x')\n")
    found = {(name, top) for _, name, top in _imports(f, root=tmp_path)}
    assert ("numpy", True) in found and ("strategies", True) in found
    assert ("simulator", False) in found and ("experiments.x", False) in found


def _sub_violations(folder: str, banned: tuple[str, ...]) -> list[str]:
    """Imports of ``banned`` module prefixes from the files under ``folder``."""
    return [f"{path.relative_to(ROOT)}:{line}: {name}"
            for path in sorted((ROOT / folder).rglob("*.py")) for line, name, _ in _imports(path)
            if any(name == b or name.startswith(b + ".") for b in banned)]


def test_simpy_only_in_engine_and_network():
    bad = [v for v in _sub_violations("simulator", ("simpy",))
           if not v.startswith(("simulator/engine/", "simulator/network/"))]
    assert not bad, "\n".join(bad)


def test_only_the_cli_imports_the_cli():
    bad = [v for v in _sub_violations("simulator", ("simulator.cli",))
           if not v.startswith("simulator/cli/")]
    assert not bad, "\n".join(bad)


def test_output_imports_no_search_or_studies():
    bad = _sub_violations("simulator/output", ("simulator.search", "simulator.studies"))
    assert not bad, "\n".join(bad)


def test_program_describes_only():
    bad = _sub_violations("simulator/program", ("simulator.engine", "simulator.network", "simpy"))
    assert not bad, "\n".join(bad)
