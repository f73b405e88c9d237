"""``paraplan``: the command line (see docs/cli.md and the contract in docs/cli.md).

Subcommands live in ``simulator/cli/<command>.py``; each module has ``register(sub)`` that adds its
parser and sets ``func`` (``args -> exit status``). Every input error is a ``SpecError``:
one line on stderr naming field, value and rule, exit status 2, no traceback unless
``--debug``.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from typing import Any, Sequence

from simulator.workers import Stopped, stop_on_signals
from strategies.errors import SpecError

# Subcommand modules, in the order `paraplan --help` lists them. A module that is missing
# (a partial checkout) is skipped, never a crash.
COMMANDS = ("estimate", "simulate", "search", "compare", "whatif", "validate", "goodput",
            "sensitivity", "presets", "calibrate")


class _Parser(argparse.ArgumentParser):
    """argparse with our error shape: one line, exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"paraplan {self.prog.split(' ', 1)[-1] if ' ' in self.prog else ''}"
                     f": error: {message}\n".replace("paraplan : ", "paraplan: "))


class _Version(argparse.Action):
    """``--version``: ``paraplan X.Y`` (the installed distribution's, else ``unknown``),
    looked up only when asked (``importlib.metadata`` and the look-up cost every command's
    start-up otherwise)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version
        try:
            ver = version("paraplan")
        except PackageNotFoundError:
            ver = "unknown"
        parser._print_message(f"paraplan {ver}\n", sys.stdout)
        parser.exit()


def _chosen(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The subcommand modules a parse of ``argv`` needs: only the named command's when the
    first non-option word is one (start-up imports one module, not ten; ``paraplan X --help``
    and every parse of X are unchanged), else all (``paraplan --help``, an unknown command:
    argparse lists them all)."""
    if argv is None:
        return COMMANDS
    first = next((a for a in argv if not a.startswith("-")), None)
    return (first,) if first in COMMANDS else COMMANDS


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``paraplan`` parser; given the ``argv`` it will parse, it registers only the
    subcommand that ``argv`` names (``_chosen``)."""
    p = _Parser(prog="paraplan", description="Plan and simulate parallel training of LLMs.")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    p.add_argument("--version", action=_Version, nargs=0,
                   help="show program's version number and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _chosen(argv):
        try:
            mod = importlib.import_module(f"simulator.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"simulator.cli.{name}":
                continue
            raise
        mod.register(sub)
    return p


def _split_debug(argv: Sequence[str]) -> tuple[list[str], bool]:
    """``--debug`` is honoured anywhere on the line (before or after the subcommand)."""
    argv = list(argv)
    debug = "--debug" in argv or os.environ.get("PARAPLAN_DEBUG") == "1"
    return [a for a in argv if a != "--debug"], debug


def _stacks_on_sigusr1() -> None:
    """With ``PARAPLAN_DEBUG_STACKS=1``, SIGUSR1 prints every thread's Python stack on stderr
    and the command goes on (``faulthandler``): how a command that does not stop is diagnosed
    (tests/test_stopping.py sends it before giving up on a process)."""
    if os.environ.get("PARAPLAN_DEBUG_STACKS") == "1" and hasattr(signal, "SIGUSR1"):
        import faulthandler
        faulthandler.register(signal.SIGUSR1, all_threads=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv, debug = _split_debug(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:   # argparse's errors (status 2), --help and --version (0)
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        if not getattr(args, "command", None):   # no command: the help, on stderr (bad input)
            parser.print_help(sys.stderr)
            return 2
        _stacks_on_sigusr1()
        with stop_on_signals():
            return int(args.func(args) or 0)
    except Stopped as e:            # SIGINT, SIGTERM, SIGHUP: workers already stopped
        print(f"paraplan: stopped by {e}", file=sys.stderr)
        return e.exit_status
    except SpecError as e:
        if debug:
            raise
        print(f"paraplan: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("paraplan: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except MemoryError:
        if debug:
            raise
        print("paraplan: error: out of memory (try a smaller cluster, or simulate without --full)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
