"""The ``paraplan`` command line: one module per command (``register(sub)`` adds its parser),
``common`` for the shared flags and output, ``main`` for the entry point. Nothing outside this
package imports it."""
from simulator.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
