"""What a Megatron-Bridge performance recipe sets, read from its source text, for
``experiments/transcribe_hybrid.py``.

Two kinds of recipe:

* from the 26.08 container on, ``src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py``:
  one function per (model, GPUs, GPU, precision) that builds a ``ConfigContainer`` by plain
  ``cfg.<section>.<field> = <value>`` statements and calls of helpers in the same file or the
  family's ``common.py``. These import torch and Megatron, so they are not imported: ``trace``
  reads the function's top-level statements in order, expanding the calls of functions
  defined in the given files, and keeps every assignment with its file and line (the last
  one of a field wins, as when the code runs). Statements under an ``if`` are not read.
* before it, ``scripts/performance/configs/<family>/*_workload_base_configs.py``: each a
  ``WorkloadBaseConfig`` (standard library only), imported as it is from the tag
  (``workload_configs``).
"""
from __future__ import annotations

import dataclasses
import importlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
from typing import Any

_DEF = re.compile(r"^def (\w+)\(", re.M)
_ASSIGN = re.compile(r"^    cfg\.([\w.]+)\s*=\s*(.+?)\s*$")
_GRAPH_MODULES = re.compile(r"^    set_cuda_graph_modules\(cfg\.model,\s*(\[.*\])\)")
_CALL = re.compile(r"^    (?:cfg\s*=\s*)?(\w+)\(")


def git_output(repo: str, *args: str) -> str:
    """The standard output of ``git -C repo args...`` (``CalledProcessError`` if it fails)."""
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          check=True).stdout


def git_show(repo: str, rev: str, path: str) -> str:
    """The text of ``path`` at ``rev`` in ``repo``."""
    return git_output(repo, "show", f"{rev}:{path}")


def _functions(path: str, text: str) -> dict[str, tuple[str, int, list[str]]]:
    """name -> (path, first body line number, body lines) of every top-level function."""
    lines = text.split("\n")
    starts = [(m.group(1), text.count("\n", 0, m.start())) for m in _DEF.finditer(text)]
    out = {}
    for i, (name, at) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else len(lines)
        out[name] = (path, at + 2, lines[at + 1:end])
    return out


def trace(files: dict[str, str], name: str, aliases: dict[str, str] | None = None
          ) -> dict[str, tuple[str, str, int]]:
    """``field -> (value source text, file, line)`` of what function ``name`` (defined in one
    of ``files``, path -> text) sets, in execution order (later settings win); the calls of
    functions defined in ``files`` are expanded where they stand, a call of a name in
    ``aliases`` (an ``import ... as`` name) as the call of the function it names."""
    funcs: dict[str, tuple[str, int, list[str]]] = {}
    for path, text in files.items():
        for k, v in _functions(path, text).items():
            funcs.setdefault(k, v)
    for alias, real in (aliases or {}).items():
        if real in funcs:
            funcs.setdefault(alias, funcs[real])
    out: dict[str, tuple[str, str, int]] = {}

    def run(fn: str, depth: int) -> None:
        if depth > 8:
            raise ValueError(f"recipe call chain too deep at {fn}")
        path, first, body = funcs[fn]
        for i, line in enumerate(body):
            m = _ASSIGN.match(line)
            if m:
                out[m.group(1)] = (re.sub(r"\s+#.*$", "", m.group(2)), path, first + i)
                continue
            m = _GRAPH_MODULES.match(line)
            if m:
                out["model.cuda_graph_scope"] = (m.group(1), path, first + i)
                continue
            m = _CALL.match(line)
            if m and m.group(1) in funcs and m.group(1) != fn:
                run(m.group(1), depth + 1)
    if name not in funcs:
        raise KeyError(f"recipe function {name!r} is in none of {sorted(files)}")
    run(name, 0)
    return out


def literal(v: str) -> Any:
    """A recipe value's Python literal (``True``, ``"hybridep"``, ``[...]``, 64), else the
    source text itself (a variable or a call)."""
    import ast
    try:
        return ast.literal_eval(v)
    except (ValueError, SyntaxError):
        return v


def workload_configs(repo: str, tag: str, files: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Every ``WorkloadBaseConfig`` of ``scripts/performance/configs/<files>`` at ``tag``, by
    name, with its ``file``: the files are taken from the tag with ``git archive`` and
    imported as they are (their only import is ``scripts/performance/utils/utils.py``)."""
    tmp = tempfile.mkdtemp(prefix="mbridge_")
    data = subprocess.run(["git", "-C", repo, "archive", tag, "scripts/performance/utils",
                           "scripts/performance/configs"], capture_output=True, check=True).stdout
    tarfile.open(fileobj=io.BytesIO(data)).extractall(tmp)
    root = f"{tmp}/scripts/performance"
    sys.path.insert(0, root)
    try:
        utils = importlib.import_module("utils.utils")
        out = {}
        for f in files:
            mod = importlib.import_module("configs." + f[:-3].replace("/", "."))
            for name, v in vars(mod).items():
                if isinstance(v, utils.WorkloadBaseConfig):
                    out[name] = {**dataclasses.asdict(v), "file": f}
        return out
    finally:
        sys.path.remove(root)
        for k in [k for k in sys.modules if k.split(".")[0] in ("utils", "configs")]:
            del sys.modules[k]
