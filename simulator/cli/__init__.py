"""The ``paraplan`` command line: one module per command (``register(sub)`` adds its parser),
``common`` for the shared flags and output, ``main`` for the entry point. Nothing outside this
package imports it."""
import os

# Before numpy is first imported (it reads this once): no transparent-huge-page advice on
# numpy's large arrays. Where the kernel compacts memory for such advice at fault time
# (``/sys/kernel/mm/transparent_hugepage/defrag`` = madvise, a common default) a search's
# millions-of-rows columns spent most of their time in page faults (the qwen3-30b-a3b
# dgx-h100:4 seq 32768 search: enumerate_space 11.4 -> 6.0 CPU s); the results are the same.
# A value the user set is kept.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

from simulator.cli.main import build_parser, main  # noqa: E402

__all__ = ["build_parser", "main"]
