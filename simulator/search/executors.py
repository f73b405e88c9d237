"""Running the search's simulations: in this process, over local processes, or as Ray tasks.

Every executor follows ``strategies.search.Executor``: ``submit(index)``, ``wait()`` ->
``[(index, step seconds)]``, ``capacity``; the full result of each evaluation (a small dict,
``evaluate``) is kept in ``executor.results[index]``. ``Backfill`` runs work outside the
search (reference plans) on idle workers; ``simulator.search.results_file`` keeps the
results file that makes a search resumable (``Cached`` serves plans from it).
"""
from __future__ import annotations

import os
import sys
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as futures_wait
from typing import Any, Callable

from strategies.errors import SpecError
from strategies.job import make_job
from strategies.model import ModelSpec
from strategies.cost.system import SystemConfig
from strategies.plan import Plan
from simulator.workers import MAX_WORKERS, process_pool, terminate_pool
from topologies.cluster import Cluster
from topologies.limits import check_int


def evaluate(model: ModelSpec, cluster: Cluster, dtype: str, framework: str | None,
             system: SystemConfig | None, exact: bool, plan: Plan) -> dict[str, Any]:
    """Simulate one resolved plan (``framework``: the named software stack, or None;
    ``system``: the policy constants, None for ``DEFAULT_SYSTEM``); the figures the search
    reports: ``step_time_s``, ``bubble_fraction``, ``exposed_comm_s``,
    ``overlapped_comm_s``, ``breakdown_s``, ``events``, ``wall_s`` and ``method``. Long
    pipelines are simulated on two short runs and extended (``simulator.extend``; the same
    figures to ~1e-12) unless ``exact``. A run leaves no cyclic garbage (the engine and the
    network break their cycles: ``FlowNetwork.close``), so a worker collects nothing here and
    its memory stays flat (tests/test_search_memory.py)."""
    from simulator.extend import simulate_figures
    try:
        return simulate_figures(make_job(model, cluster, plan, dtype=dtype,
                                         framework=framework, system=system), exact)
    except Exception as e:
        raise RuntimeError(f"simulating {plan.short()} of {model.name} on {cluster.name} "
                           f"failed: {type(e).__name__}: {e}") from e


# ----------------------------------------------------------------------- in this process
class InProcess:
    """One simulation at a time in the calling process (``--workers 1``)."""

    capacity = 1

    def __init__(self, ctx: tuple, plan_of: Callable[[int], Plan]) -> None:
        self.ctx, self.plan_of = ctx, plan_of
        self.todo: list[int] = []
        self.results: dict[int, dict] = {}

    def submit(self, index: int) -> None:
        self.todo.append(index)

    def wait(self) -> list[tuple[int, float]]:
        i = self.todo.pop(0)
        self.results[i] = evaluate(*self.ctx, self.plan_of(i))
        return [(i, self.results[i]["step_time_s"])]

    def close(self, abort: bool = False) -> None:
        pass


# ----------------------------------------------------------------------- local processes
_CTX: tuple | None = None


def _init_worker(ctx: tuple) -> None:
    """A worker's start: the context, the simulator's imports and the cluster's graph, before
    the first plan. The workers start while the parent scores the space, when a core is idle;
    ``simulate_figures`` imports ``simulator.simulate`` (the engine, the network, networkx,
    SimPy) only when first called, which put that import on the search's path, once per
    worker (a worker's start now takes 0.14-0.19 CPU s on the 2-core machine,
    ``experiments/profile_search_workers.py``)."""
    global _CTX
    _CTX = ctx
    import simulator.extend  # noqa: F401
    from simulator.simulate import graph_of
    try:
        graph_of(ctx[1])
    except Exception:   # noqa: BLE001  (the first simulation meets it again and reports it)
        pass


def _started() -> None:
    """A no-op task: submitting it starts the workers."""


def _run_in_worker(plan: Plan) -> dict[str, Any]:
    assert _CTX is not None
    return evaluate(*_CTX, plan)


class LocalPool:
    """``workers`` local processes (``concurrent.futures``), each holding the model and
    the cluster (sent once) and its own cached cluster graph; they exit with this process
    (``simulator.workers``). They start, and import the simulator, when the pool is made,
    so a caller that makes it before scoring its candidates overlaps the two."""

    def __init__(self, ctx: tuple, plan_of: Callable[[int], Plan], workers: int) -> None:
        self.pool = process_pool(workers, _init_worker, (ctx,))
        self.pool.submit(_started)      # start the workers now: they import meanwhile
        self.capacity, self.plan_of = workers, plan_of
        self.futures: dict[Future, int] = {}
        self.results: dict[int, dict] = {}

    def submit(self, index: int) -> None:
        self.futures[self.pool.submit(_run_in_worker, self.plan_of(index))] = index

    def wait(self) -> list[tuple[int, float]]:
        done, _ = futures_wait(list(self.futures), return_when=FIRST_COMPLETED)
        out = []
        for f in sorted(done, key=lambda f: self.futures[f]):
            i = self.futures.pop(f)
            self.results[i] = f.result()
            out.append((i, self.results[i]["step_time_s"]))
        return out

    def close(self, abort: bool = False) -> None:
        """Wait for the running simulations, or with ``abort`` end the workers now."""
        if abort:
            terminate_pool(self.pool)
        else:
            self.pool.shutdown(wait=True, cancel_futures=True)


# ----------------------------------------------------------------------- Ray
def _import_ray():
    try:
        import ray
    except ImportError:
        raise SpecError("--backend", "ray", "needs Ray, which is not installed: pip install "
                        "'paraplan[ray]' (or pip install ray), or use --backend local") from None
    return ray


def _probe(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast on an unreachable ``host:port`` (``ray.init`` would retry for minutes)."""
    import socket
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise SpecError("--ray-address", address, "must be host:port, ray://host:port or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise SpecError("--ray-address", address, f"cannot connect ({e.strerror or e}); is a "
                        "Ray head running there (ray start --head)?") from None


class RayPool:
    """Ray tasks on the cluster at ``address`` (None: start a local instance with
    ``workers`` CPUs and shut it down at the end)."""

    def __init__(self, ctx: tuple, plan_of: Callable[[int], Plan], workers: int,
                 address: str | None) -> None:
        ray = self.ray = _import_ray()
        self.owned = not ray.is_initialized()
        if self.owned:
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False}
            if address:
                _probe(address)
                try:
                    ray.init(address=address, **kw)
                except Exception as e:  # ConnectionError, ValueError, … (Ray's own types)
                    raise SpecError("--ray-address", address, "cannot connect to a Ray "
                                    f"cluster there ({type(e).__name__}: "
                                    f"{str(e).splitlines()[0][:120] if str(e) else ''})") from None
            else:
                root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
                path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
                ray.init(num_cpus=workers, runtime_env={"env_vars": {"PYTHONPATH": path}}, **kw)
        self.task = ray.remote(num_cpus=1)(evaluate)
        self.ctx_refs = [ray.put(x) for x in ctx]
        total = int(ray.cluster_resources().get("CPU", workers))
        self.capacity = max(1, total if address else workers)
        self.plan_of = plan_of
        self.refs: dict[Any, int] = {}
        self.results: dict[int, dict] = {}

    def submit(self, index: int) -> None:
        self.refs[self.task.remote(*self.ctx_refs, self.plan_of(index))] = index

    def wait(self) -> list[tuple[int, float]]:
        done, _ = self.ray.wait(list(self.refs), num_returns=1)
        out = []
        for ref in done:
            i = self.refs.pop(ref)
            self.results[i] = self.ray.get(ref)
            out.append((i, self.results[i]["step_time_s"]))
        return out

    def close(self, abort: bool = False) -> None:
        for ref in list(self.refs):
            self.ray.cancel(ref, force=True)
        if self.owned:
            self.ray.shutdown()


class Backfill:
    """An executor that also runs ``extra`` indices (work outside the search, such as its
    reference plans) on the workers the search leaves idle: when the search waits with a
    worker free, the first extra that is ``ready`` takes it. ``wait`` hands back only the
    search's own results; ``finish`` runs the extras not yet done and waits for them."""

    def __init__(self, inner, extra: list[int],
                 ready: Callable[[int], bool] = lambda i: True, running=()) -> None:
        self.inner, self.extra, self.ready = inner, list(extra), ready
        self.capacity = inner.capacity
        self.own: set[int] = set()           # the search's, in flight
        # extras in flight (``running``: submitted to ``inner`` before this was made)
        self.background: set[int] = set(running)

    @property
    def results(self) -> dict[int, dict]:
        return self.inner.results

    def submit(self, index: int) -> None:
        self.inner.submit(index)
        self.own.add(index)

    def _fill(self, slots: int, force: bool = False) -> None:
        for i in list(self.extra):
            if len(self.own) + len(self.background) >= slots:
                break
            if force or self.ready(i):
                self.extra.remove(i)
                self.inner.submit(i)
                self.background.add(i)

    def wait(self) -> list[tuple[int, float]]:
        while True:
            self._fill(self.capacity)
            out = []
            for i, t in self.inner.wait():
                if i in self.background:
                    self.background.discard(i)
                else:
                    self.own.discard(i)
                    out.append((i, t))
            if out or not self.own:
                return out

    def finish(self) -> None:
        self._fill(len(self.own) + len(self.background) + len(self.extra), force=True)
        while self.background:
            for i, _ in self.inner.wait():
                self.background.discard(i)
                self.own.discard(i)

    def close(self, abort: bool = False) -> None:
        self.inner.close(abort)


def make_executor(backend: str, workers: int, ctx: tuple, plan_of: Callable[[int], Plan],
                  ray_address: str | None = None):
    """``local`` (in this process when ``workers`` is 1) or ``ray``; ``workers`` in
    ``[1, MAX_WORKERS]``."""
    check_int("workers", workers, 1, MAX_WORKERS)
    if backend == "ray":
        return RayPool(ctx, plan_of, workers, ray_address)
    if backend != "local":
        raise SpecError("--backend", backend, "must be local or ray")
    if workers <= 1:
        return InProcess(ctx, plan_of)
    return LocalPool(ctx, plan_of, workers)


def progress_printer(enabled: bool, total_hint: Callable[[Any], int]):
    """An ``on_result`` callback drawing a one-line progress bar on stderr."""
    if not enabled:
        return None
    import time
    t0 = time.perf_counter()

    def draw(_i: int, _t: float, state) -> None:
        done = len(state.times)
        todo = max(done, total_hint(state))
        width = 24
        fill = int(width * done / max(todo, 1))
        best = f"{state.best:.3f} s" if state.best < float("inf") else "-"
        sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{todo} simulated, "
                         f"best {best}, {time.perf_counter() - t0:.0f} s ")
        sys.stderr.flush()
    return draw
