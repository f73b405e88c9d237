"""Shared pieces of the CLI: the common input flags, resolving them to a ``Job``, JSON and
table output, and atomic file writes. No SimPy here."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace
from typing import Any, Iterable, Sequence

from strategies.errors import SpecError
from strategies.hf_config import load_model_arg
from strategies.framework import PROFILES, get_profile
from strategies.stacks.variants import TORCHTITAN_COMPILE
from strategies.stacks.profile import FrameworkProfile
from strategies.job import DTYPES, Job, make_job
from strategies.model import ModelSpec
from strategies.memory.scalar import check_fits
from strategies.plan import Plan, plan_from_mapping, plan_mapping
from strategies.plan_file import found_for, mismatches, read_plan_record
from strategies.stacks.plan_defaults import plan_with_stack_defaults
from topologies.cluster import Cluster, parse_cluster_arg
from topologies.faults import Faults
from topologies.graph import check_links
from topologies.limits import MAX_GBS, MAX_SEQ, check_int, parse_int_text

DEFAULT_MODEL = "gpt3-175b"
DEFAULT_CLUSTER = "dgx-a100:128"


class CliError(SpecError):
    """A bad command-line value (same shape as every other input error)."""


def positive_int(field: str, hi: int | None = None, lo: int = 1):
    """An argparse ``type`` (an integer in ASCII digits, ``lo`` to ``hi``) whose error names
    the flag, the value and the rule (argparse would otherwise print ``invalid conv value``)."""
    def conv(text: str) -> int:
        try:
            return check_int(field, parse_int_text(field, text), lo, hi)
        except SpecError as e:
            raise argparse.ArgumentTypeError(f"{_value(text)}: {e.rule}") from None
    conv.__name__ = "integer"
    return conv


def positive_float(field: str):
    def conv(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{_value(text)}: must be a number") from None
        if not math.isfinite(v) or v <= 0:
            raise argparse.ArgumentTypeError(f"{_value(text)}: must be a finite number > 0")
        return v
    conv.__name__ = "number"
    return conv


def _value(text: str) -> str:
    return f"invalid value {text[:60]!r}"


class Once(argparse.Action):
    """Store a flag's value, refusing the flag given twice (the first value would be lost
    without a word)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        seen = getattr(namespace, "_seen_flags", set())
        if self.dest in seen:
            raise argparse.ArgumentError(self, f"given twice ({values!r} after "
                                               f"{getattr(namespace, self.dest)!r})")
        seen.add(self.dest)
        namespace._seen_flags = seen
        setattr(namespace, self.dest, values)


def add_model_cluster(p: argparse.ArgumentParser, required: bool = True,
                      global_batch_default: int | None = None) -> None:
    """``--model``, ``--cluster``, ``--seq-len``, ``--global-batch``, ``--dtype`` (docs/cli.md's
    shared inputs). Not ``required``: ``--model`` and ``--cluster`` default to
    ``DEFAULT_MODEL`` and ``DEFAULT_CLUSTER``; ``global_batch_default`` is only shown in the
    help (the command applies it)."""
    note = "" if required else " (default {})"
    p.add_argument("--model", required=required, default=None if required else DEFAULT_MODEL,
                   action=Once, metavar="M", help="preset name, HuggingFace config.json (or its "
                   "folder), or a YAML/JSON file of model fields" + note.format(DEFAULT_MODEL))
    p.add_argument("--cluster", required=required, default=None if required else DEFAULT_CLUSTER,
                   action=Once, metavar="C", help="PRESET:NODES (dgx-a100:128), presets joined by "
                   "+ (dgx-h100:4+dgx-a100:4), or a YAML/JSON file"
                   + note.format(DEFAULT_CLUSTER))
    p.add_argument("--seq-len", type=positive_int("--seq-len", MAX_SEQ), default=None,
                   action=Once, metavar="N",
                   help="training sequence length in tokens (default: the model's)")
    p.add_argument("--global-batch", type=positive_int("--global-batch", MAX_GBS), default=None,
                   action=Once, metavar="N",
                   help="sequences per step, where the plan does not give gbs"
                   + (f" (default {global_batch_default})" if global_batch_default else ""))
    p.add_argument("--dtype", default="bf16", action=Once, metavar="D",
                   help="bf16 (default), fp16, fp8 (= fp8-delayed), "
                   + ", ".join(d for d in DTYPES if d not in ("bf16", "fp16", "fp8",
                                                               "fp8-delayed"))
                   + " (docs/clusters.md, Precisions)")
    p.add_argument("--framework", default=None, action=Once, metavar="NAME",
                   help="the software stack that will run the job: " + ", ".join(PROFILES)
                   + f", {TORCHTITAN_COMPILE.name} (torchtitan under torch.compile)"
                   + " (default: Megatron-Core's costs, no stack's limits); "
                   "`paraplan presets` describes each")
    f = p.add_argument_group("faults (docs/faults.md)")
    f.add_argument("--straggler", action="append", default=None, metavar="GPU=FACTOR",
                   help="GPU's compute runs FACTOR (>= 1) times slower; repeatable")
    f.add_argument("--degrade", action="append", default=None, metavar="LINK=FACTOR",
                   help="LINK (nic:GPU, node:N, or A-B, e.g. 3-nvswitch:0) runs at 1/FACTOR "
                        "of its bandwidth; repeatable")


#: the shared ``--plan`` input, as docs/cli.md's shared inputs state it
PLAN_HELP = ("key=value,... (tp, pp, cp, ep, mbs, gbs, schedule, recompute, sp, zero, cp_comm, "
             "hierarchical_cp, ...: docs/cli.md, --plan) or a YAML/JSON file with the same keys; "
             "an empty item (tp=2,,gbs=8, a comma at either end) or a blank --plan exits 2")


def add_plan_inputs(p: argparse.ArgumentParser) -> None:
    add_model_cluster(p)
    p.add_argument("--plan", required=True, action=Once, metavar="P", help=PLAN_HELP)


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine output on stdout, nothing else")


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise CliError("--dtype", dtype, f"must be one of {', '.join(DTYPES)}")
    return dtype


def resolve_model(args: argparse.Namespace) -> ModelSpec:
    model = load_model_arg(args.model)
    if getattr(args, "seq_len", None):
        model = model.with_seq_length(args.seq_len)
    return model


def resolve_cluster(args: argparse.Namespace) -> Cluster:
    """``--cluster`` with the faults of ``--straggler`` and ``--degrade`` added (an entry
    replaces the cluster file's entry for the same GPU or link)."""
    cluster = parse_cluster_arg(args.cluster)
    stragglers, degrade = getattr(args, "straggler", None), getattr(args, "degrade", None)
    if stragglers or degrade:
        cluster = cluster.with_faults(Faults.from_texts(stragglers or (), degrade or ()))
    check_links(cluster)
    return cluster


def resolve_framework(args: argparse.Namespace, in_plan: Any = None) -> FrameworkProfile | None:
    """The stack named by ``--framework`` or by a plan file's ``framework:`` key (None: none
    named). The two must agree when both are given."""
    flag = getattr(args, "framework", None)
    try:
        fw = get_profile(flag) if flag is not None else None
    except SpecError as e:
        raise CliError("--framework", flag, e.rule) from None
    if in_plan is not None:
        try:
            named = get_profile(in_plan)
        except SpecError as e:
            raise SpecError("plan.framework", in_plan, e.rule) from None
        if fw is not None and fw is not named:
            raise CliError("--framework", flag, f"disagrees with the plan's framework: {in_plan}")
        fw = named
    return fw


def resolve_plan_fills(args: argparse.Namespace, gpus: int | None = None
                       ) -> tuple[Plan, FrameworkProfile | None, tuple]:
    """The ``--plan`` (text or file), the stack named for it, and the fields that stack filled
    (``PlanFill``s; () none): the switches and the fields the plan does not set take the named
    stack's defaults (``strategies.stacks.plan_defaults``; ``gpus``, the cluster's, resolves an
    unset dp: None reads ``--cluster``)."""
    raw = plan_mapping(args.plan)
    keys = {str(k).strip().lower(): k for k in raw}
    fw = resolve_framework(args, raw.pop(keys["framework"]) if "framework" in keys else None)
    if fw is None:
        return plan_from_mapping(raw), None, ()
    if gpus is None and getattr(args, "cluster", None) is not None:
        gpus = parse_cluster_arg(args.cluster).num_gpus
    plan, fills = plan_with_stack_defaults(raw, fw, gpus)
    return plan, fw, fills


def resolve_job(args: argparse.Namespace, plan: Plan | None = None,
                framework: FrameworkProfile | None = None, fills: tuple = ()) -> Job:
    """Model, cluster and plan from the shared flags, checked against each other (and against
    the named stack's limits, ``strategies.stacks.rules.check_plan``). ``fills``: the fields
    the stack filled in a given ``plan`` (``resolve_plan_fills``), kept on the job
    (``Job.plan_defaults``)."""
    model = resolve_model(args)
    cluster = resolve_cluster(args)
    if plan is None:
        plan, framework, fills = resolve_plan_fills(args, cluster.num_gpus)
    elif framework is None:
        framework = resolve_framework(args)
    if args.global_batch is not None and plan.gbs is not None and args.global_batch != plan.gbs:
        raise CliError("--global-batch", args.global_batch,
                       f"disagrees with the plan's gbs={plan.gbs} (give one of them)")
    job = make_job(model, cluster, plan, global_batch=args.global_batch,
                   dtype=check_dtype(args.dtype), framework=framework)
    if fills:
        job = replace(job, plan_defaults=tuple(fills))
    if len(cluster.groups) > 1:     # a mixed cluster: each stage must fit its own GPUs
        check_fits(job)
    for text in mismatches(read_plan_record(args.plan), found_for(job)):
        warn(f"--plan {args.plan}: {text}")
    return job


def warn(text: str) -> None:
    """One warning line on stderr (stdout stays machine output)."""
    print(f"paraplan: warning: {text}", file=sys.stderr)


def _clean(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, non-finite floats to None, tuples to lists."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(obj: Any) -> str:
    """Deterministic JSON (sorted keys are not used: key order is the contract's order)."""
    return json.dumps(_clean(obj), indent=2, allow_nan=False)


def emit_json(obj: Any) -> None:
    sys.stdout.write(dumps(obj) + "\n")


def check_output(path: str | None, flag: str, exts: tuple[str, ...] = ()) -> None:
    """Refuse an output path up front, before the work that fills it: a wrong extension (when
    ``exts`` names some), a missing or unwritable folder, or a folder in place of the file."""
    if path is None:
        return
    stem, ext = os.path.splitext(os.path.basename(path))
    if exts and (ext.lower() not in exts or not stem.strip()):
        raise CliError(flag, path, f"must be a file name ending with {' or '.join(exts)}")
    if not (stem + ext).strip():
        raise CliError(flag, path, "must name a file, not a folder")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CliError(flag, path, f"folder {folder} does not exist")
    if os.path.isdir(path):
        raise CliError(flag, path, "is a folder")
    if not os.access(folder, os.W_OK):
        raise CliError(flag, path, f"folder {folder} is not writable")
    probe_write(path, flag)


def check_distinct_outputs(*outputs: tuple[str, str | None]) -> None:
    """``(flag, path)`` outputs of one command (None: not asked for) name distinct files: two
    flags naming one file are refused (the later write would replace the earlier one, a CSV a
    results file)."""
    seen: dict[str, str] = {}
    for flag, path in outputs:
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise CliError(flag, path, f"is also the file of {seen[key]}: each output needs "
                           "its own file")
        seen[key] = flag


def probe_write(path: str, flag: str, shown: str | None = None) -> None:
    """Create and remove the temporary file an atomic write of ``path`` starts with
    (``chrome_trace.temp_path``): ``os.access`` says yes to root in ``/proc`` or on a
    read-only mount, and knows nothing of a name too long or a NUL byte in it. The error
    names ``shown`` (default ``path``)."""
    from simulator.output.chrome_trace import temp_path
    try:
        tmp = temp_path(path)
        with open(tmp, "x", encoding="utf-8"):
            pass
        os.remove(tmp)
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise CliError(flag, path if shown is None else shown,
                       f"cannot be written ({why})") from None


def atomic_write_text(path: str, text: str, field: str = "output") -> None:
    """Write ``text`` to ``path`` atomically (``simulator.output.chrome_trace.atomic_path``): readers never
    see a half-written file; a failed write is a SpecError naming ``field``."""
    from simulator.output.chrome_trace import atomic_path
    d = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(d):
        raise CliError(field, path, f"directory {d} does not exist")
    with atomic_path(path, field) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A plain text table; ``align`` is a string of ``l``/``r`` per column."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    align = align or "l" + "r" * (len(headers) - 1)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w)
                         for c, w, a in zip(cells, widths, align)).rstrip()
    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def fmt_s(seconds: float) -> str:
    """Seconds in a readable unit."""
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"
