"""Worker processes that end with the command that started them.

Three pieces, used by every command that starts processes (the search's process pool,
``validate --jobs``):

- ``stop_on_signals()``: in the command's process, SIGINT, SIGTERM and SIGHUP raise
  ``Stopped`` (a ``KeyboardInterrupt``) in the main thread, so the command's ``finally``
  blocks stop its workers and the CLI exits with ``128 + signal`` (130, 143, 129).
- ``watch_parent(pid)``: in a worker, as the pool's initializer. Signals go back to their
  defaults (SIGINT ignored: the parent stops the pool), and the worker exits when its parent
  dies, even by SIGKILL: ``PR_SET_PDEATHSIG`` on Linux, and everywhere a daemon thread that
  polls ``os.getppid()`` every ``POLL_S`` seconds.
- ``process_pool()`` / ``terminate_pool()``: a ``ProcessPoolExecutor`` whose workers watch
  their parent, and its abrupt end (SIGTERM to each worker, SIGKILL after ``GRACE_S``).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:       # (imported where a pool starts: a command that starts none skips it)
    from concurrent.futures import ProcessPoolExecutor

#: Seconds between two checks of the parent by the watchdog thread.
POLL_S = 0.5
#: Seconds a terminated worker has to exit before it is killed.
GRACE_S = 2.0
#: The signals that stop a command, by name (SIGHUP does not exist on Windows).
STOP_SIGNALS = tuple(s for s in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, s))
#: Most worker processes (or Ray tasks in flight) one command may ask for: a sanity limit
#: (``--workers 100000`` once forked thousands of processes; ``10**20`` overflowed a C int).
MAX_WORKERS = 256


def default_workers() -> int:
    """Workers when none is asked for: every core, at most ``MAX_WORKERS``."""
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


class Stopped(KeyboardInterrupt):
    """The command was told to stop by signal ``signum``; exit status ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        # args stay (signum,): SimPy re-raises a callback's exception as type(e)(*e.args)
        super().__init__(int(signum))
        self.signum = int(signum)

    def __str__(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


#: ``held()``'s depth and the stop signal that came while it was held (main thread only).
_HOLD = {"depth": 0, "pending": 0}


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Within the block a stop signal does not raise; it raises ``Stopped`` at the block's
    end. For bookkeeping that must not be cut in two (a worker forked but not yet recorded
    by its pool would be neither terminated nor reaped: the command hangs at exit joining it)."""
    _HOLD["depth"] += 1
    try:
        yield
    finally:
        _HOLD["depth"] -= 1
        if not _HOLD["depth"] and _HOLD["pending"]:
            signum, _HOLD["pending"] = _HOLD["pending"], 0
            raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, the stop signals raise ``Stopped`` once (a second signal during the
    clean-up is ignored so that the clean-up finishes), at the end of a ``held()`` block if one
    is open. Outside the main thread: no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = []
    _HOLD["pending"] = 0

    def handler(signum: int, _frame: Any) -> None:
        if not fired:
            fired.append(signum)
            if _HOLD["depth"]:
                _HOLD["pending"] = signum
                return
            raise Stopped(signum)

    old = {}
    for name in STOP_SIGNALS:
        sig = getattr(signal, name)
        if signal.getsignal(sig) is signal.SIG_IGN and name != "SIGINT":
            continue                      # nohup: SIGHUP stays ignored
        old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        _HOLD["pending"] = 0
        for sig, h in old.items():
            signal.signal(sig, h)


def _set_parent_death_signal(sig: int) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies; False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(parent_pid: int) -> None:
    """In a worker process: default signal handling, and exit when ``parent_pid`` is no
    longer the parent (it died and the worker was re-parented)."""
    _HOLD["depth"] = _HOLD["pending"] = 0     # forked inside the parent's ``held()``
    for name in STOP_SIGNALS:
        signal.signal(getattr(signal, name),
                      signal.SIG_IGN if name == "SIGINT" else signal.SIG_DFL)
    _set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:            # died before the death signal was armed
        os._exit(1)

    def poll() -> None:
        while True:
            threading.Event().wait(POLL_S)
            if os.getppid() != parent_pid:
                os._exit(1)
    threading.Thread(target=poll, name="watch-parent", daemon=True).start()


def _init(parent_pid: int, initializer: Callable[..., None] | None, initargs: tuple) -> None:
    watch_parent(parent_pid)
    if initializer is not None:
        initializer(*initargs)


@lru_cache(maxsize=1)
def _pool_class() -> type:
    """``_Pool``, built on the first pool (``concurrent.futures``' process pool and
    ``multiprocessing`` cost a command that starts no process ~20 ms of its start-up)."""
    from concurrent.futures import ProcessPoolExecutor

    class _Pool(ProcessPoolExecutor):
        """A ``ProcessPoolExecutor`` whose worker is forked and recorded as one step: a stop
        signal between the two left a worker the pool did not know (never terminated) and
        the interpreter's exit waited on it for ever (tests/test_workers_hold.py)."""

        def _spawn_process(self) -> None:   # CPython's one place a worker starts (3.9+)
            with held():
                super()._spawn_process()  # type: ignore[misc]
    return _Pool


def process_pool(workers: int, initializer: Callable[..., None] | None = None,
                 initargs: tuple = ()) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes (fork where available) that watch this process;
    ``workers`` in ``[1, MAX_WORKERS]``, else a SpecError."""
    import multiprocessing as mp
    from topologies.limits import check_int
    check_int("workers", workers, 1, MAX_WORKERS)
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    return _pool_class()(max_workers=workers, mp_context=mp.get_context(method),
                         initializer=_init, initargs=(os.getpid(), initializer, initargs))


def terminate_pool(pool: ProcessPoolExecutor) -> None:
    """End ``pool`` now: running work is lost, queued work cancelled, every worker gone
    (SIGTERM, then SIGKILL after ``GRACE_S``) before this returns."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        with contextlib.suppress(OSError, ValueError):
            p.terminate()
    for p in procs:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            p.join(GRACE_S)
            if p.is_alive():
                p.kill()
                p.join(GRACE_S)
    pool.shutdown(wait=True, cancel_futures=True)
