"""``--export KIND``, shared by estimate, simulate and search: the plan's launch settings for
one of ``strategies.launch.EXPORTS`` (the one list the choices come from), its caveats on
stderr, and ``export.kind`` / ``export.text`` in the JSON."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from simulator.cli.common import Once
from strategies.job import Job
from strategies.launch import EXPORTS, check_export, export
from strategies.model import ModelSpec
from strategies.stacks.profile import FrameworkProfile

WHAT = ("Megatron-LM pretrain_gpt.py arguments, a DeepSpeed config (JSON), a torchtitan job "
        "config (TOML) or MaxText config keys (YAML); a named --framework takes its own")


def add_export(p: Any, help_text: str) -> None:
    """The ``--export`` flag on parser (or group) ``p``."""
    p.add_argument("--export", action=Once, choices=EXPORTS, default=None,
                   help=f"{help_text} ({WHAT})")


def check_export_early(args: argparse.Namespace, fw: FrameworkProfile | None,
                       model: ModelSpec) -> None:
    """Refuse ``--export`` (a SpecError, exit 2) for a named stack launched another way or a
    model the export cannot build (``strategies.launch.check_export``), before the estimate,
    simulation or search runs; nothing without ``--export``."""
    if args.export:
        check_export(args.export, fw, model)


def export_settings(args: argparse.Namespace, job: Job) -> dict[str, str] | None:
    """``{"kind", "text"}`` for ``--export`` (None without it); caveats printed on stderr.
    A SpecError (exit 2) for a plan or a named stack the exporter refuses."""
    if not args.export:
        return None
    text, notes = export(args.export, job)
    for n in notes:
        print(f"paraplan: note: {n}", file=sys.stderr)
    return {"kind": args.export, "text": text}
