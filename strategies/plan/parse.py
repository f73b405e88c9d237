"""A ``Plan`` from text or YAML: ``parse_plan`` (``key=value`` strings or a plan file's
path), ``plan_mapping`` (the raw mapping), ``plan_from_mapping`` (Megatron's long names,
``ALIAS``; every value coerced and checked where it is read, ``coerce``), ``parse_layers``, and
``tp_overlap_default``, the one rule of a stack's default TP overlap as a plan takes it."""
from __future__ import annotations

import os
from dataclasses import fields
from typing import Any, Mapping

import numpy as np

from strategies.cost.offload import parse_offload_modules
from strategies.errors import SpecError
from strategies.plan.choices import MAX_MOE_FACTOR
from strategies.plan.recompute_fields import parse_modules
from strategies.plan.spec import BOOL_FIELDS, Plan
from strategies.schedules import get_schedule
from topologies.limits import parse_int_text

ALIAS = {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
          "data_parallel_size": "dp", "context_parallel_size": "cp",
          "expert_model_parallel_size": "ep", "micro_batch_size": "mbs",
          "global_batch_size": "gbs", "virtual_pipeline_size": "vpp",
          "sequence_parallel": "sp", "zero_stage": "zero",
          # torchtitan's FSDP degree under HSDP (docs/cli.md "Hybrid sharding")
          "data_parallel_shard_degree": "dp_shard",
          "expert_tensor_parallel_size": "etp",
          "moe_expert_capacity_factor": "moe_capacity_factor",
          "moe_pad_expert_input_to_capacity": "moe_pad_to_capacity",
          "cp_comm_type": "cp_comm",
          "overlap_moe_expert_parallel_comm": "ep_overlap",
          "delay_wgrad_compute": "delay_wgrad",
          "overlap_param_gather_with_optimizer_step": "param_gather_with_optimizer",
          # Megatron-LM's / NeMo's pipeline layout switches (docs/layout.md)
          "pipeline_layout": "layout", "pipeline_model_parallel_layout": "layout",
          "decoder_first_pipeline_num_layers": "first_stage_layers",
          "num_layers_in_first_pipeline_stage": "first_stage_layers",
          "decoder_last_pipeline_num_layers": "last_stage_layers",
          "num_layers_in_last_pipeline_stage": "last_stage_layers",
          "account_for_embedding_in_pipeline_split": "account_embedding",
          "account_for_loss_in_pipeline_split": "account_loss"}


#: Megatron-Core's ``--hierarchical-context-parallel-sizes`` (``ModelParallelConfig.
#: hierarchical_context_parallel_sizes``), read as the plan's ``hierarchical_cp``
#: (``hierarchical_cp_of``)
HCP_SIZES = "hierarchical_context_parallel_sizes"


def hierarchical_cp_of(value: Any) -> tuple[int, int]:
    """``(hierarchical_cp, product)`` of Megatron's ``hierarchical_context_parallel_sizes``
    (a YAML list, or text ``2,4`` / ``2/4`` / ``2 4`` / ``[2,4]``): two levels, the all-to-all
    size
    first. Megatron-Core's ``create_hierarchical_groups`` (parallel_state.py, d98e8a64d) makes
    the first level's groups of consecutive CP ranks, and ``TEDotProductAttention`` hands
    the groups to Transformer Engine's ``a2a+p2p``, whose all-to-all runs over the first and
    ring over the second (``context_parallel.py``, d0067d0): ``[k, cp/k]`` is
    ``hierarchical_cp=k``. ``SpecError`` naming the key where it is not two whole sizes."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        items = [x for x in text.replace(",", " ").replace("/", " ").replace(":", " ").split()]
        sizes = tuple(parse_int_text(HCP_SIZES, x) for x in items)
    elif isinstance(value, (list, tuple)) and all(
            isinstance(x, int) and not isinstance(x, bool) for x in value):
        sizes = tuple(value)
    else:
        raise SpecError(HCP_SIZES, value, "must be a list of integers, e.g. [2, 4]")
    if len(sizes) != 2 or min(sizes) < 1:
        raise SpecError(HCP_SIZES, value, "must be two sizes [k, cp/k] (the all-to-all group "
                        "first, then the ring across the groups): paraplan reads it as "
                        "hierarchical_cp=k with cp_comm=a2a+p2p, whose two levels Transformer "
                        "Engine runs")
    return sizes[0], sizes[0] * sizes[1]


def read_hierarchical_sizes(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """A plan's ``(key, value)`` items with Megatron's ``hierarchical_context_parallel_sizes``
    (any case) read as ``("hierarchical_cp", k)`` (``hierarchical_cp_of``), where the items'
    ``cp_comm`` is ``a2a+p2p`` (Megatron-Core builds the groups for any exchange, only
    ``a2a+p2p`` runs over them) and the sizes multiply to their ``cp`` (Megatron-LM's
    ``validate_args`` asserts it); SpecError naming the key otherwise. The one reading
    ``plan_from_mapping`` and the search's ``--plan`` share."""
    canon = [(ALIAS.get(str(k).strip().lower(), str(k).strip().lower()), v) for k, v in items]
    out = []
    for (raw, value), (key, _) in zip(items, canon):
        if key != HCP_SIZES:
            out.append((raw, value))
            continue
        k, prod = hierarchical_cp_of(value)
        comm = [v for c, v in canon if c == "cp_comm"]
        if not comm or str(comm[0]).strip().lower() != "a2a+p2p":
            raise SpecError(HCP_SIZES, value, "is read with cp_comm=a2a+p2p (cp_comm_type): "
                            "Megatron-Core builds the hierarchical groups for any exchange but "
                            "only a2a+p2p runs over them; give cp_comm=a2a+p2p or leave the "
                            "key out")
        cps = [v for c, v in canon if c == "cp"]
        cp = coerce("cp", cps[0]) if cps else 1
        if prod != cp:
            raise SpecError(HCP_SIZES, value, f"the sizes multiply to {prod}, not cp={cp} "
                            "(Megatron-LM's validate_args asserts context_parallel_size == "
                            "prod(hierarchical_context_parallel_sizes))")
        out.append(("hierarchical_cp", k))
    return out


def parse_layers(value: Any, key: str = "layers_per_stage") -> tuple[int, ...] | None:
    """``10/6/6/10`` (or ``10:6:6:10``, or a YAML list) as a tuple of ints; None stays None
    (``layers_per_stage``, ``group_microbatches``)."""
    if value is None:
        return None
    if isinstance(value, str):
        items = [x.strip() for x in value.replace(":", "/").split("/")]
        if not all(items):
            raise SpecError(key, value, "must be counts joined by '/', e.g. 10/6/6/10")
        return tuple(parse_int_text(key, x) for x in items)
    if isinstance(value, (list, tuple)):
        out = []
        for x in value:
            if isinstance(x, bool) or not isinstance(x, int):
                raise SpecError(key, value, "must be a list of integers")
            out.append(x)
        return tuple(out)
    raise SpecError(key, value, "must be counts joined by '/', e.g. 10/6/6/10")


_FIELD_TYPES = {f.name: f.type for f in fields(Plan)}
_STRS = {"schedule", "recompute", "recompute_method", "moe_dispatcher", "moe_routing",
         "cp_comm"}
_FLOATS = {"moe_imbalance", "moe_capacity_factor"}


def coerce(key: str, value: Any) -> Any:
    """``value`` (YAML or ``key=value`` text) as plan field ``key`` holds it: a layer list,
    recomputed modules, a bool (true/false, 1/0, yes/no, on/off), a layout string, a string
    field stripped and lower-cased, a float or an int (None where the field may be unset); a
    value of the wrong kind is a ``SpecError`` naming the field, the value and the rule."""
    if key in ("layers_per_stage", "group_microbatches"):
        return parse_layers(value, key)
    if key == "recompute_modules":
        return None if value is None else parse_modules(value)
    if key == "offload_modules":
        return None if value is None else parse_offload_modules(value)
    if key in BOOL_FIELDS:
        if isinstance(value, bool):
            return value
        if not (isinstance(value, str) or (isinstance(value, int) and value in (0, 1))):
            raise SpecError(key, value, "must be true or false")
        s = str(value).strip().lower()
        if s in ("true", "1", "yes", "on"):
            return True
        if s in ("false", "0", "no", "off"):
            return False
        raise SpecError(key, value, "must be true or false")
    if key == "layout":
        if value is None:
            return None
        if not isinstance(value, str):
            raise SpecError(key, value, "must be a Megatron pipeline layout string")
        return value.strip()
    if value is None and key in ("first_stage_layers", "last_stage_layers"):
        return None
    if key in _STRS and value is None and key not in ("recompute_method", "cp_comm"):
        raise SpecError(key, value, "must be a string (give a value or leave the key out)")
    if key in _STRS and value is not None:
        if not isinstance(value, str):
            raise SpecError(key, value, "must be a string")
        return value.strip().lower()
    if value is None and key in {"dp", "dp_shard", "gbs", "microbatch_group_size", "etp",
                                 "recompute_layers", "cp_comm", "hierarchical_cp",
                                 "recompute_method"} | _FLOATS:
        return None
    if key in _FLOATS:
        return _parse_float(key, value)
    if isinstance(value, bool):
        raise SpecError(key, value, "must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, str):
        raise SpecError(key, value, "must be an integer")
    return parse_int_text(key, value)


def _parse_float(key: str, value: Any) -> float:
    """A finite number from YAML or text (``1.3``, ``2``); SpecError naming ``key``."""
    if isinstance(value, bool):
        raise SpecError(key, value, "must be a number")
    try:
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
    except ValueError:
        raise SpecError(key, value, "must be a number") from None
    except OverflowError:    # an integer beyond a float (10**400 in YAML)
        raise SpecError(key, value, f"must be a number <= {MAX_MOE_FACTOR:g} (a sanity "
                        "limit)") from None
    raise SpecError(key, value, "must be a number")


def tp_overlap_default(default: Any, tp: Any, sp: Any) -> Any:
    """A stack's default TP communication overlap (``FrameworkProfile.
    default_tp_comm_overlap``) as a plan of ``tp`` and ``sp`` takes it: on only with ``tp > 1``
    and sequence parallelism, where the stacks run it (Megatron-LM ``arguments.py`` asserts
    ``--sequence-parallel`` for ``--tp-comm-overlap``; NeMo's ``MegatronCommOverlapCallback``
    and Megatron-Bridge's ``CommOverlapConfig`` turn it off with TP < 2 or without SP). Scalars
    or arrays (the search's columns). The one rule ``plan_from_mapping``, the search and the
    keys read."""
    on = np.logical_and(default, np.logical_and(np.asarray(tp) > 1, np.asarray(sp, bool)))
    return bool(on) if np.ndim(on) == 0 else on


def plan_from_mapping(d: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> Plan:
    """A Plan from a mapping (YAML or parsed string); Megatron's long names are accepted.
    ``defaults``: values for keys the mapping does not give (a software stack's switches)."""
    if not isinstance(d, Mapping):
        raise SpecError("plan", type(d).__name__, "a plan file must hold a mapping")
    args: dict[str, Any] = {}
    for raw, value in read_hierarchical_sizes(list(d.items())):
        if not isinstance(raw, str):
            raise SpecError("plan", raw, f"unknown key; allowed: {', '.join(_FIELD_TYPES)}")
        key = ALIAS.get(raw.strip().lower(), raw.strip().lower())
        if key not in _FIELD_TYPES:
            raise SpecError("plan", raw, f"unknown key; allowed: {', '.join(_FIELD_TYPES)}")
        if key in args:
            raise SpecError("plan", raw, "key given twice")
        args[key] = coerce(key, value)
    for key, value in (defaults or {}).items():
        if key == "tp_comm_overlap" and key not in args:
            value = tp_overlap_default(value, args.get("tp", 1), args.get("sp", False))
        args.setdefault(key, value)
    sched = str(args.get("schedule", ""))
    name, colon, chunks = sched.partition(":")
    if colon:                                   # name:V, a chunked schedule with V chunks
        vpp = coerce("vpp", chunks)
        if "vpp" in args and args["vpp"] != vpp:
            raise SpecError("vpp", args["vpp"], f"disagrees with schedule={sched}")
        args["schedule"], args["vpp"] = name, vpp
    elif "schedule" in args and "vpp" not in args:
        args["vpp"] = get_schedule(name).default_vpp
        if isinstance(args.get("layout"), str) and get_schedule(name).chunked \
                and isinstance(args.get("pp", 1), int) and args.get("pp", 1) >= 1:
            # Megatron reads vpp from the layout: its stages over pp
            from strategies.layout import parse_layout
            n = len(parse_layout(args["layout"]))
            if n % args.get("pp", 1) == 0:
                args["vpp"] = n // args.get("pp", 1)
    return Plan(**args)


def parse_plan(text: str) -> Plan:
    """``tp=8,pp=8,mbs=1,schedule=interleaved,vpp=3`` or a path to a YAML or JSON plan file
    (``strategies.plan_file``)."""
    d = plan_mapping(text)
    if "framework" in d:
        raise SpecError("plan", "framework", "a plan's framework key is read where a job is "
                        "built (estimate, simulate, compare, whatif); give it with --framework")
    return plan_from_mapping(d)


def plan_mapping(text: str) -> dict[str, Any]:
    """The raw ``key -> value`` mapping of a plan string or a YAML/JSON plan file (a file's
    ``found_for`` record checked and left out: ``strategies.plan_file``)."""
    text = str(text).strip()
    from strategies.plan_file import is_plan_file, one_framework_key, read_plan_mapping
    if is_plan_file(text):
        return read_plan_mapping(text)[0]
    refuse_path(text)
    d: dict[str, str] = {}
    last = None
    for item in plan_items(text):
        key, eq, value = item.partition("=")
        if not eq and last is not None:
            # a layout string's cosmetic commas (Megatron's), or a list item
            # (recompute_modules=core_attn,mlp)
            d[last] += "," + item
            continue
        if not eq or not key.strip():
            raise SpecError("plan", item, "each item must be key=value, e.g. tp=8")
        if key.strip() in d:
            raise SpecError("plan", key.strip(), "key given twice")
        d[key.strip()] = value.strip()
        canon = ALIAS.get(key.strip().lower(), key.strip().lower())
        last = key.strip() if canon in LIST_KEYS or canon == "layout" else None
    return one_framework_key(d)


def plan_items(text: str, field: str = "plan") -> list[str]:
    """The comma-separated items of plan text ``text``, stripped. Blank text, or an empty
    item (``tp=2,,gbs=8``, a comma at either end: an unset shell variable?), is refused, not
    skipped, as an empty plan file is: SpecError on ``field``."""
    text = str(text).strip()
    if not text:
        raise SpecError(field, text, "is empty: give key=value,... (e.g. tp=8)"
                        + ("" if field == "--fix" else " or a plan file"))
    items = [p.strip() for p in text.split(",")]
    if "" in items:
        raise SpecError(field, text, "has an empty item (two commas together, or one at "
                        "either end): each item must be key=value, e.g. tp=8,pp=2")
    return items


def refuse_path(text: str, field: str = "plan") -> None:
    """A ``--plan`` without ``=`` that names an existing folder or file (not ``.yaml``,
    ``.yml`` or ``.json``) is refused as such, not read as ``key=value`` text."""
    if "=" not in text and text and os.path.exists(text):
        raise SpecError(field, text, ("is a folder" if os.path.isdir(text) else "is a file")
                        + ", not a plan file: a plan file's name ends with .yaml, .yml or "
                        ".json (or give key=value,...)")


#: plan keys that take a list, whose items plan text joins with "," too
#: (``recompute_modules=core_attn,mlp``): an item without "=" after one continues it
LIST_KEYS = {"recompute_modules", "offload_modules", HCP_SIZES}
