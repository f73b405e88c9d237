"""The fuzz tests' one hypothesis profile (tests/test_fuzz_parsers.py, tests/test_fuzz_recent.py,
tests/test_fuzz_inputs2.py).
CI: the same examples every run. PARAPLAN_HYPOTHESIS_SCALE=k runs k times as many, and
PARAPLAN_HYPOTHESIS_RANDOM=1 new ones each time (for hunting bugs locally)."""
from __future__ import annotations

import contextlib
import io
import os

from hypothesis import HealthCheck, settings

from strategies.errors import SpecError

SCALE = int(os.environ.get("PARAPLAN_HYPOTHESIS_SCALE", "1"))
COMMON = dict(derandomize=os.environ.get("PARAPLAN_HYPOTHESIS_RANDOM") != "1", deadline=None,
              database=None, print_blob=False, suppress_health_check=list(HealthCheck))


def fuzz(n: int):
    """The fixed profile: ``n`` derandomized examples (times ``SCALE``)."""
    return settings(max_examples=n * SCALE, **COMMON)


def clean(fn, *args, **kw):
    """``fn(*args)``, or None when it refuses with a clean SpecError (one short line naming a
    field and a rule). Any other exception fails the test: it would be a traceback."""
    try:
        return fn(*args, **kw)
    except SpecError as e:
        msg = str(e)
        assert "\n" not in msg and 0 < len(msg) < 2000, msg
        assert e.field and e.rule, msg
        return None


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``paraplan argv`` in this process: (exit code, stdout, stderr); argparse's
    ``--help``/``--version`` exit is returned as a code."""
    from simulator.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def cli(argv: list[str], outputs: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """``run_cli(argv)`` held to the input rule: exit 0, or 2 with one line on stderr, never a
    traceback; after a refusal none of ``outputs`` (paths) exists."""
    for o in outputs:
        with contextlib.suppress(FileNotFoundError):
            os.remove(o)
    rc, out, e = run_cli(argv)
    assert rc in (0, 2), (rc, argv, e[-3000:])
    assert "Traceback" not in e, e[-3000:]
    if rc == 2:
        assert e.startswith("paraplan") and e.count("\n") == 1, (argv, e)
        left = [o for o in outputs if os.path.exists(o)]
        assert not left, (argv, e, left)
    return rc, out, e
