"""The results file (JSON lines) that makes a search resumable, and ``Cached``, the executor
wrapper that serves plans from it (``simulator.search.executors`` runs the others).

Results file: one line per finished simulation, written and flushed as it arrives::

    {"key": "tp=8,pp=8,dp=16,…", "context": "<hash of model, cluster, batch, dtype>",
     "result": {"step_time_s": …, …}}

``--resume`` reads it back (a torn last line, from a kill mid-write, is dropped and cut off),
refuses lines from another search (another context), and serves those plans from the file:
nothing finished is lost, nothing is simulated twice.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from typing import Callable

from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.errors import SpecError
from strategies.model import ModelSpec
from topologies.cluster import Cluster
from topologies.gpu_profile import profile_to_mapping


def context_hash(model: ModelSpec, cluster: Cluster, dtype: str, gbs: int,
                 framework: str | None = None, exact: bool = False,
                 system: SystemConfig | None = None) -> str:
    """What a stored result depends on besides its plan (``framework``: the named stack;
    ``exact``: simulated in full; ``system`` only when it is not ``DEFAULT_SYSTEM``, so older
    results files still match)."""
    ctx = {"model": model.to_dict(), "cluster": cluster.to_dict(), "dtype": dtype, "gbs": gbs}
    profiles = [profile_to_mapping(g.gpu.profile) for g in cluster.groups
                if g.gpu.profile is not None]
    if profiles:   # the measurements, not just the file's path (a profile measured anew)
        ctx["gpu_profiles"] = profiles
    if framework:
        ctx["framework"] = framework
    if exact:
        ctx["exact"] = True
    if system is not None and system != DEFAULT_SYSTEM:
        ctx["system"] = asdict(system)
    blob = json.dumps(ctx, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class ResultsLog:
    """Append-only JSON lines of finished simulations (see the module docstring)."""

    def __init__(self, path: str, context: str, resume: bool) -> None:
        self.path, self.context = path, context
        self.done: dict[str, dict] = {}
        exists = os.path.exists(path) and os.path.getsize(path) > 0
        if exists and not resume:
            raise SpecError("--results", path, "already holds results: pass --resume to "
                            "continue that search, or choose another file")
        d = os.path.dirname(os.path.abspath(path)) or "."
        if not os.path.isdir(d):
            raise SpecError("--results", path, f"directory {d} does not exist")
        if exists:
            self._load()
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _load(self) -> None:
        with open(self.path, "rb") as f:
            data = f.read()
        good = data.rfind(b"\n") + 1           # a torn last line (killed mid-write) is cut,
        try:                                    # once the whole lines are read as results
            text = data[:good].decode("utf-8")
        except UnicodeDecodeError as e:
            raise SpecError("--results", self.path, f"is not UTF-8 text (byte {e.start}): not "
                            "a results file of paraplan search") from None
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                key, ctx, res = rec["key"], rec["context"], rec["result"]
            except (ValueError, KeyError, TypeError):
                raise SpecError("--results", f"{self.path}:{n}", "is not a results line "
                                "(JSON with key, context, result)") from None
            if ctx != self.context:
                raise SpecError("--results", self.path, "holds results of another search "
                                "(model, cluster, batch or dtype differ): use another file")
            self.done[key] = res
        if good < len(data):      # a torn line starts as ``write`` writes one; else not ours
            if not data[good:].startswith(b'{"key":'):
                raise SpecError("--results", f"{self.path}:{text.count(chr(10)) + 1}",
                                "is not a results line (JSON with key, context, result)")
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def write(self, key: str, result: dict) -> None:
        """Append one whole line in one ``os.write`` (a regular file takes it whole; a kill
        mid-line leaves a torn tail that ``--resume`` cuts off)."""
        data = (json.dumps({"key": key, "context": self.context, "result": result},
                           separators=(",", ":")) + "\n").encode("utf-8")
        while data:
            data = data[os.write(self.fd, data):]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Cached:
    """Runs each distinct plan key once in a search: a plan whose key is in ``log`` (a results
    file) or already simulated in this run is served at once, one whose key is being simulated
    waits for that simulation (a reference plan the search also needs, started early or
    backfilled, runs once), and the others run on ``inner`` and are recorded in ``log`` as they
    finish. Every index of one key gets the same result (the key is a resolved plan's
    identity, ``plan_key``, as ``--resume`` already takes it), so the report is the same as
    simulating each index; ``simulated`` counts simulations run, ``reused`` plans served from
    ``log``, ``shared`` indices served by another index's simulation in this run."""

    def __init__(self, inner, keys: Callable[[int], str], log: ResultsLog | None) -> None:
        self.inner, self.keys, self.log = inner, keys, log
        self.capacity = inner.capacity
        self.ready: list[tuple[int, dict]] = []     # served, handed back by the next wait
        self.results: dict[int, dict] = {}
        self.done: dict[str, dict] = {}             # key -> result simulated in this run
        self.running: dict[str, list[int]] = {}     # key in flight -> indices waiting on it
        self.reused = self.simulated = self.shared = 0

    def submit(self, index: int) -> None:
        key = self.keys(index)
        if self.log is not None and key in self.log.done:
            self.ready.append((index, self.log.done[key]))
            self.reused += 1
        elif key in self.done:
            self.ready.append((index, self.done[key]))
            self.shared += 1
        elif key in self.running:
            self.running[key].append(index)
            self.shared += 1
        else:
            self.running[key] = []
            self.inner.submit(index)

    def wait(self) -> list[tuple[int, float]]:
        if self.ready:
            out = []
            for i, r in self.ready:
                self.results[i] = r
                out.append((i, float(r["step_time_s"])))
            self.ready = []
            return out
        out = []
        for i, t in self.inner.wait():
            self.simulated += 1
            key, r = self.keys(i), self.inner.results[i]
            self.done[key] = self.results[i] = r
            if self.log is not None:
                self.log.write(key, r)
            out.append((i, t))
            for j in self.running.pop(key):
                self.results[j] = r
                out.append((j, t))
        return out

    def close(self, abort: bool = False) -> None:
        """End the executor (``abort``: now, losing running work) and close the log, which
        holds only whole lines of finished simulations either way."""
        try:
            self.inner.close(abort)
        finally:
            if self.log is not None:
                self.log.close()
