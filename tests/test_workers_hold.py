"""A stop signal that arrives between a worker's fork and its pool recording it.

The pool then did not know the worker: ``terminate_pool`` never ended it, and the interpreter's
exit (multiprocessing joins its live children) waited on it for ever; ``validate --jobs 2``
stopped by SIGTERM under load hung so in CI. Here the signal is sent from inside
``Process.start``, after the fork, every time: the command must end with every worker gone.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import multiprocessing as mp, os, signal
from multiprocessing.context import ForkProcess
from simulator.workers import Stopped, held, process_pool, stop_on_signals, terminate_pool
started = []
original = ForkProcess.start
def start(self):
    original(self)                    # forked; the pool has not recorded it yet
    started.append(self.pid)
    if len(started) == 2:
        os.kill(os.getpid(), signal.SIGTERM)
ForkProcess.start = start
try:
    with stop_on_signals():
        pool = process_pool(2)
        try:
            pool.submit(int)
        except BaseException:
            print("recorded", sorted(pool._processes) == sorted(started), flush=True)
            terminate_pool(pool)
            raise
except Stopped as e:
    print("stopped", e, flush=True)
print("left", [p.pid for p in mp.active_children()], flush=True)
with stop_on_signals():               # held() defers the signal to the block's end
    try:
        with held():
            os.kill(os.getpid(), signal.SIGTERM)
            print("inside held", flush=True)
    except Stopped as e:
        print("after held", e, flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork start method")
def test_signal_between_fork_and_record_leaves_no_worker():
    try:
        out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                             text=True, timeout=60,
                             env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    except subprocess.TimeoutExpired:
        pytest.fail("the process hung at exit (a worker its pool never recorded)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["recorded True", "stopped SIGTERM", "left []",
                                       "inside held", "after held SIGTERM"], out.stdout
