"""One process per GPU for ``paraplan calibrate``'s collectives, and their end with the parent.

``run_ranks(n, target, args)`` starts ``n`` processes (``multiprocessing``'s ``spawn``
context, as CUDA needs: a fresh interpreter, no forked CUDA state), calls
``target(rank, n, init, *args)`` in each (``init``: a ``file://`` rendezvous in a private
temporary folder, for ``torch.distributed.init_process_group``) and returns rank 0's
answer. No torch here: the fake backend runs the same machinery (tests).

Every child dies with the parent, whatever ends it (the project's rule: processes you
start, you stop):

* the parent returns, raises, or is interrupted (SIGINT: ``KeyboardInterrupt``): a
  ``finally`` terminates every child still alive, then kills it after ``GRACE_S``;
* SIGTERM or SIGHUP to the parent, whose default action would end it at once without that
  ``finally``: a handler, installed for the run only (main thread), turns the signal into an
  exception, the children are stopped, and the signal is then delivered again under the
  previous handler (a default action ends the parent by that signal, as it would have);
* the parent killed outright (SIGKILL, a crash): each child asked the kernel to send it
  SIGKILL when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``) and exits at once if
  the parent was already gone; elsewhere a watcher thread in the child polls the parent id;
* children are ``daemon`` processes, which ``multiprocessing`` stops at a normal exit.

A child that fails reports its error; a child that dies without one (a crash) is noticed
by its exit code; either stops the others and raises ``SpecError`` naming the rank.
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from strategies.errors import SpecError

GRACE_S = 5.0              # seconds a terminated child has before SIGKILL
POLL_S = 0.1               # seconds between checks of the children while waiting
STOP_SIGNALS = tuple(getattr(signal, s) for s in ("SIGTERM", "SIGHUP") if hasattr(signal, s))
PR_SET_PDEATHSIG = 1       # linux/prctl.h


class _Stopped(BaseException):
    """A stop signal reached the parent while its ranks ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def die_with_parent(parent_pid: int) -> None:
    """In a child: end this process when ``parent_pid`` ends (see the module doc)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0:
                if os.getppid() != parent_pid:     # the parent died before the request
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(POLL_S)
        os._exit(1)
    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def _rank_main(target: Callable[..., Any], rank: int, n: int, init: str, parent_pid: int,
               results: Any, args: tuple) -> None:
    """A child's body: tie its life to the parent's, run ``target``, report rank 0's answer
    (every rank's error)."""
    die_with_parent(parent_pid)
    try:
        out = target(rank, n, init, *args)
    except BaseException as e:  # noqa: BLE001 - reported to the parent as one line
        results.put(("error", rank, f"{type(e).__name__}: {e}"))
        return
    if rank == 0:
        results.put(("ok", 0, out))


def stop(procs: list) -> None:
    """Terminate every process of ``procs`` still alive, SIGKILL those alive after
    ``GRACE_S``, and reap them all (a process never started is skipped)."""
    procs = [p for p in procs if p.pid is not None]
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def run_ranks(n: int, target: Callable[..., Any], args: tuple = (),
              field: str = "collectives") -> Any:
    """Rank 0's answer of ``target(rank, n, init, *args)`` run in ``n`` spawned processes
    (``target`` must be importable by name: a module-level function). A rank's error, or a
    rank dying without an answer, raises ``SpecError`` (``field``)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs: list = []
    handlers: dict = {}
    stopped: int | None = None

    def on_signal(signum: int, _frame: Any) -> None:
        raise _Stopped(signum)

    if threading.current_thread() is threading.main_thread():
        for s in STOP_SIGNALS:
            old = signal.getsignal(s)
            if old is signal.SIG_DFL or callable(old):     # not one ignored or set from C
                handlers[s] = signal.signal(s, on_signal)
    try:
        with tempfile.TemporaryDirectory(prefix="paraplan-ranks-") as d:
            init = "file://" + os.path.join(d, "rendezvous")
            for r in range(n):
                p = ctx.Process(target=_rank_main, daemon=True, name=f"paraplan-rank-{r}",
                                args=(target, r, n, init, os.getpid(), results, args))
                procs.append(p)
                p.start()
            return _answer(procs, results, field)
    except _Stopped as e:
        stopped = e.signum
    finally:
        for s, h in handlers.items():      # a second signal now ends the parent: its
            signal.signal(s, h)            # children then die of PDEATHSIG
        stop(procs)
        results.close()
    os.kill(os.getpid(), stopped)          # the signal again, under the previous handler
    raise SystemExit(128 + stopped)        # (a handler that returned)


def _answer(procs: list, results: Any, field: str) -> Any:
    """Rank 0's answer from ``results``, once every rank has finished; a rank's error, or a
    rank ending without an answer, raises ``SpecError``."""
    while True:
        try:
            kind, rank, out = results.get(timeout=POLL_S)
        except queue_mod.Empty:
            dead = [i for i, p in enumerate(procs)
                    if p.exitcode is not None and (p.exitcode != 0 or i == 0)]
            if not dead:
                continue
            try:                           # what a rank sent just before it ended
                kind, rank, out = results.get(timeout=GRACE_S)
            except queue_mod.Empty:
                i = dead[0]
                raise SpecError(field, f"rank {i}", "measuring failed: the process ended "
                                f"with exit code {procs[i].exitcode} without an answer"
                                ) from None
        if kind == "error":
            raise SpecError(field, f"rank {rank}", f"measuring failed: {out}")
        for p in procs:                    # rank 0 answered: the others finish their teardown
            p.join(GRACE_S)
        return out
