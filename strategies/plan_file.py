"""Plan files: a plan as YAML or JSON, the grammar every ``--plan FILE`` reads
(``strategies.plan.parse_plan``) and ``search --save-plan`` writes.

A plan file is a mapping of plan keys (docs/cli.md, ``--plan``) plus, optionally, the
``found_for`` mapping: the job the plan was chosen for (model, cluster, GPUs, global batch,
sequence length, dtype, and the simulated step time in seconds). ``found_for`` is a record,
never an input: reading the plan against another job gives warnings naming each difference.

>>> from strategies.plan import Plan
>>> plan_to_mapping(Plan(tp=8, pp=4, dp=2, gbs=64, schedule="interleaved", vpp=3))
{'tp': 8, 'pp': 4, 'dp': 2, 'cp': 1, 'ep': 1, 'mbs': 1, 'gbs': 64, 'schedule': 'interleaved', 'vpp': 3, 'recompute': 'none', 'sp': False, 'zero': 0}
"""
from __future__ import annotations

import json
from dataclasses import fields
from typing import Any, Mapping

from strategies.errors import SpecError
from strategies.plan import Plan
from strategies.plan.parse import tp_overlap_default

FOUND_FOR = "found_for"
#: ``found_for`` keys; those compared against the job a plan is read for come first.
COMPARED = ("model", "cluster", "gpus", "global_batch", "seq_len", "dtype")
FOUND_FOR_KEYS = COMPARED + ("step_time_s",)
#: Plan keys always written; the other fields only where they differ from ``Plan``'s default.
ALWAYS = ("tp", "pp", "dp", "cp", "ep", "mbs", "gbs", "schedule", "vpp", "recompute", "sp",
          "zero")
PLAN_EXTS = (".yaml", ".yml", ".json")


def plan_to_mapping(plan: Plan, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The plan keys of ``plan``: ``ALWAYS``, and the others where they differ from their
    default (``defaults``, a software stack's switches, before ``Plan``'s);
    ``plan_from_mapping(…, defaults)`` reads them back to an equal Plan."""
    out = {k: getattr(plan, k) for k in ALWAYS if getattr(plan, k) is not None}
    for f in fields(Plan):
        v = getattr(plan, f.name)
        default = (defaults or {}).get(f.name, f.default)
        if f.name == "tp_comm_overlap":
            default = tp_overlap_default(default, plan.tp, plan.sp)
        if f.name not in out and v is not None and v != default:
            out[f.name] = v
    return out


def job_record(model, cluster, global_batch: int, dtype: str,
               step_time_s: float | None = None) -> dict[str, Any]:
    """The ``found_for`` record of a model, a cluster, a global batch and a dtype (and the
    simulated step time in seconds, when given)."""
    rec: dict[str, Any] = {"model": model.name, "cluster": cluster.name,
                           "gpus": cluster.num_gpus, "global_batch": int(global_batch),
                           "seq_len": model.seq_length, "dtype": dtype}
    if step_time_s is not None:
        rec["step_time_s"] = float(step_time_s)
    return rec


def found_for(job, step_time_s: float | None = None) -> dict[str, Any]:
    """The ``found_for`` record of a resolved ``strategies.job.Job``."""
    return job_record(job.model, job.cluster, job.plan.gbs, job.dtype, step_time_s)


def plan_file_text(plan: Plan, path: str, record: Mapping[str, Any] | None = None,
                   framework=None) -> str:
    """The text of a plan file for ``path`` (JSON for ``.json``, YAML otherwise);
    ``framework``: the named software stack (``strategies.stacks.profile.FrameworkProfile``), whose
    name the file keeps and whose switches are the defaults."""
    data: dict[str, Any] = plan_to_mapping(plan, framework.plan_defaults() if framework
                                           else None)
    if framework is not None:
        data["framework"] = framework.name
    if record is not None:
        data[FOUND_FOR] = dict(record)
    if path.lower().endswith(".json"):
        return json.dumps(data, indent=2) + "\n"
    import yaml
    head = "# a paraplan plan: paraplan simulate ... --plan THIS_FILE\n"
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def split_found_for(data: Mapping[str, Any], where: str = "plan"
                    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(plan keys, found_for or None)`` of a plan file's mapping; ``found_for`` checked."""
    plan = {k: v for k, v in data.items() if k != FOUND_FOR}
    rec = data.get(FOUND_FOR)
    if rec is None:
        return plan, None
    if not isinstance(rec, Mapping):
        raise SpecError(f"{where}: {FOUND_FOR}", type(rec).__name__,
                        "must be a mapping of " + ", ".join(FOUND_FOR_KEYS))
    for k, v in rec.items():
        if k not in FOUND_FOR_KEYS:
            raise SpecError(f"{where}: {FOUND_FOR}", k,
                            "unknown key; allowed: " + ", ".join(FOUND_FOR_KEYS))
        check_record_value(f"{where}: {FOUND_FOR}.{k}", k, v)
    return plan, dict(rec)


#: ``found_for`` keys that hold a whole count (GPUs, sequences, tokens) and a time (seconds)
RECORD_COUNTS = ("gpus", "global_batch", "seq_len")


def check_record_value(field: str, key: str, v: Any) -> None:
    """One ``found_for`` value is what ``job_record`` writes: a count >= 1 (``gpus``,
    ``global_batch``, ``seq_len``), a finite time > 0 seconds (``step_time_s``) or a name;
    SpecError naming ``field`` otherwise."""
    if isinstance(v, (Mapping, list)) or (key != "step_time_s" and isinstance(v, float)):
        raise SpecError(field, v, "must be a name or a whole number")
    if key in RECORD_COUNTS and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise SpecError(field, v, "must be a whole number >= 1 (the job's count the plan "
                        "was found for)")
    if key == "step_time_s" and (isinstance(v, bool) or not isinstance(v, (int, float))
                                 or not 0 < v < float("inf")):
        raise SpecError(field, v, "must be a finite number of seconds > 0")
    if key not in RECORD_COUNTS and key != "step_time_s" and not isinstance(v, str):
        raise SpecError(field, v, "must be a name (text)")


def mismatches(record: Mapping[str, Any] | None, now: Mapping[str, Any]) -> list[str]:
    """Where the job ``now`` (``job_record``/``found_for``) differs from the job a plan file
    was found for, in words."""
    if not record:
        return []
    return [f"{k}: the plan was found for {record[k]}, this job has {now[k]}"
            for k in COMPARED if k in record and str(record[k]) != str(now[k])]


def is_plan_file(text: str) -> bool:
    """Whether a ``--plan`` value names a file (by its extension) rather than key=value text."""
    return str(text).strip().lower().endswith(PLAN_EXTS)


def read_plan_mapping(path: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(plan keys, found_for or None)`` of a YAML or JSON plan file (the keys raw, as
    ``strategies.plan.plan_mapping`` gives them; a ``framework`` key among them)."""
    from topologies.yaml_io import held_text, load_mapping_file
    path = str(path).strip()
    data = load_mapping_file(path, "plan")
    if not isinstance(data, Mapping):   # an empty file too, as a model or cluster file
        raise SpecError("plan", path, f"the file must hold a mapping of plan keys, "
                        f"not {held_text(data)}")
    keys, record = split_found_for(data)
    return one_framework_key(keys), record


def one_framework_key(keys: Mapping[Any, Any]) -> dict[Any, Any]:
    """``keys`` with its ``framework`` key (any case, any spaces around it) spelled
    ``framework``; SpecError when two keys name it (``framework`` and ``Framework``: which
    stack was meant?)."""
    named = [k for k in keys if str(k).strip().lower() == "framework"]
    if len(named) > 1:
        raise SpecError("plan", ", ".join(str(k) for k in named),
                        "framework given twice (one key names the stack)")
    return {("framework" if named and k == named[0] else k): v for k, v in keys.items()}


def read_plan_file(path: str) -> tuple[Plan, dict[str, Any] | None]:
    """``(plan, found_for or None)`` from a plan file, the switches a named ``framework``
    does not set taking its defaults."""
    from strategies.framework import get_profile
    from strategies.plan import plan_from_mapping
    keys, record = read_plan_mapping(path)
    fw = keys.pop("framework", None)
    return plan_from_mapping(keys, get_profile(fw).plan_defaults() if fw else None), record


def read_plan_record(text: str) -> dict[str, Any] | None:
    """The ``found_for`` record of a ``--plan`` value (None for key=value text)."""
    return read_plan_mapping(text)[1] if is_plan_file(text) else None
