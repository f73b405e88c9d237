"""``--fix``: the keys it takes (``FIX_KEYS``; ``MOE_KEYS`` the mixture-of-experts ones) and
its text read into checked values (``parse_fix``), each value held to ``Plan``'s own rule."""
from __future__ import annotations

from typing import Any

from strategies.errors import SpecError
from strategies.cost.recompute import METHODS
from strategies.plan import Plan
from strategies.plan.checks import int_limit
from strategies.plan.parse import ALIAS as PLAN_ALIASES
from strategies.plan.parse import (HCP_SIZES, LIST_KEYS, coerce, hierarchical_cp_of,
                                   plan_items, read_hierarchical_sizes)
from strategies.plan.recompute_fields import parse_modules
from strategies.plan_arrays import RECOMPUTE_CODE
from strategies.schedules import get_schedule, schedule_names
from strategies.schedules.registry import chunked_names, grouped_names
from strategies.search.plan_rows import LAYOUT_KEYS, SWITCH_KEYS
from topologies.limits import check_int, parse_int_text

#: the mixture-of-experts fields: a dense model refuses them (``job.check_expert_plan``)
MOE_KEYS = ("etp", "moe_dispatcher", "ep_overlap", "delay_wgrad", "moe_routing",
            "moe_imbalance", "moe_capacity_factor", "moe_pad_to_capacity")
FIX_KEYS = ("tp", "pp", "dp", "cp", "ep", "etp", "mbs", "schedule", "vpp", "recompute",
            "recompute_modules", "sp", "zero", "flushes", "microbatch_group_size", "dp_shard",
            *SWITCH_KEYS, "hierarchical_cp", "recompute_layers", "recompute_method",
            *LAYOUT_KEYS)
#: what a search cannot fix and why (``search``/``whatif --plan`` refuse them naming this)
UNFIXABLE = {"layout": "a pipeline layout string places each layer by hand; the search's "
                       "layouts are even, first/last-stage counts or slots",
             "layers_per_stage": "per-stage layer counts are sized to a mixed cluster's GPUs "
                                 "by the search itself (its uneven plans, docs/search.md)",
             "group_microbatches": "per-group micro-batch shares are sized to a mixed "
                                   "cluster's GPUs by the search itself"}


def parse_fix(text: str | None) -> dict[str, Any]:
    """``--fix tp=8,schedule=1f1b`` -> checked values (``schedule=interleaved:3`` sets vpp).

    >>> parse_fix("tp=8,schedule=interleaved:3,sp=true")
    {'tp': 8, 'schedule': 'interleaved', 'vpp': 3, 'sp': True}
    """
    if text is None:                          # no --fix; a blank one is refused, as --plan ''
        return {}
    out: dict[str, Any] = {}
    # an empty item refused, as in a plan; Megatron's sizes read as every --plan reads them
    for item in _hierarchical_sizes(_list_items(plan_items(text, "--fix"))):
        key, eq, value = item.partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        key = PLAN_ALIASES.get(key, key)     # Megatron's names, as a plan reads them
        if not eq or key not in FIX_KEYS:
            raise SpecError("--fix", item, f"each item must be key=value with key one of "
                            f"{', '.join(FIX_KEYS)}")
        if key in out:
            raise SpecError("--fix", key, "key given twice")
        if key == "schedule":
            name, _, vpp = value.partition(":")
            if name not in schedule_names():
                raise SpecError("--fix", item, f"schedule must be one of "
                                f"{', '.join(schedule_names())}")
            out[key] = name
            if vpp:
                out["vpp"] = _fix_int("vpp", vpp)
        elif key == "recompute":
            if value not in RECOMPUTE_CODE:
                raise SpecError("--fix", item, f"recompute must be one of "
                                f"{', '.join(RECOMPUTE_CODE)}")
            out[key] = value
        elif key == "recompute_modules":
            out[key] = _fix_modules(value)
        elif key == "recompute_method":
            if value not in METHODS:
                raise SpecError("--fix", item, f"recompute_method must be one of "
                                f"{', '.join(METHODS)}")
            out[key] = value
        elif key in ("account_embedding", "account_loss"):   # needs pp > 1: the rows'
            try:
                out[key] = coerce(key, value)       # rule (only pipelined rows hold slots)
            except SpecError as e:
                raise SpecError("--fix", item, f"{key} {e.rule}") from None
        elif key == "sp":
            if value not in ("true", "false", "1", "0", "on", "off", "yes", "no"):
                raise SpecError("--fix", item, "sp must be true or false")
            out[key] = value in ("true", "1", "on", "yes")
        elif key in SWITCH_KEYS:
            out[key] = _fix_switch(key, value)
        else:
            out[key] = _fix_int(key, value)
            if key == "zero" and out[key] > 3:
                raise SpecError("--fix", item, "zero must be 0, 1, 2 or 3")
    if "microbatch_group_size" in out and "schedule" in out and \
            not get_schedule(out["schedule"]).uses_group:
        raise SpecError("--fix", f"microbatch_group_size={out['microbatch_group_size']}",
                        f"only applies to schedule={' or '.join(grouped_names())}, not "
                        f"{out['schedule']}")
    if "recompute_modules" in out and out.get("recompute", "selective") != "selective":
        raise SpecError("--fix", "recompute_modules=" + "+".join(out["recompute_modules"]),
                        "needs recompute=selective (Megatron's --recompute-granularity "
                        f"selective), not recompute={out['recompute']}")
    if "offload_modules" in out:     # Megatron-Core's rules between it and recompute_modules
        try:
            Plan(recompute=out.get("recompute", "selective") if "recompute_modules" in out
                 else "none", recompute_modules=out.get("recompute_modules"),
                 offload_modules=out["offload_modules"])
        except SpecError as e:
            raise SpecError("--fix", f"offload_modules={e.value}", e.rule) from None
    if out.get("cpu_offloading_num_layers"):    # Megatron-Core's rules (cost.layer_offload)
        _check_cpu_offloading(out)
    _check_partial_recompute(out)
    _check_layout(out)
    if "hierarchical_cp" in out:
        _check_hierarchical(out)
    elif out.get("cp_comm") == "a2a+p2p" and "cp" in out and \
            not any(out["cp"] % k == 0 for k in range(2, out["cp"])):
        raise SpecError("--fix", f"cp={out['cp']}", "cp_comm=a2a+p2p needs an all-to-all size "
                        f"1 < k < cp dividing cp (hierarchical_cp); cp={out['cp']} has none")
    if out.get("moe_pad_to_capacity"):    # Plan's rule between the fields (check_pad_to_capacity)
        try:
            Plan(moe_pad_to_capacity=True, moe_capacity_factor=out.get("moe_capacity_factor"),
                 moe_dispatcher=out.get("moe_dispatcher", "alltoall"))
        except SpecError as e:
            raise SpecError("--fix", "moe_pad_to_capacity=true", e.rule) from None
    chunked = chunked_names()
    if out.get("vpp", 1) >= 2 and chunked and \
            not get_schedule(out.setdefault("schedule", chunked[0])).chunked:
        raise SpecError("--fix", f"vpp={out['vpp']}",
                        f"vpp >= 2 needs schedule={' or '.join(chunked)}")
    return out


def _list_items(items: list[str]) -> list[str]:
    """``items`` with a list key's further names joined to it, as a plan's text reads them
    (``recompute_modules=core_attn,mlp`` is ``recompute_modules=core_attn+mlp``:
    ``plan.parse.LIST_KEYS``)."""
    out: list[str] = []
    for item in items:
        key = out[-1].partition("=")[0].strip().lower() if out else ""
        if "=" not in item and PLAN_ALIASES.get(key, key) in LIST_KEYS:
            out[-1] += "+" + item
        else:
            out.append(item)
    return out


def _hierarchical_sizes(items: list[str]) -> list[str]:
    """``items`` with Megatron's ``hierarchical_context_parallel_sizes=[k,cp/k]`` read as
    ``hierarchical_cp=k`` by the plans' own reading (``plan.parse.read_hierarchical_sizes``:
    two sizes, with ``cp_comm=a2a+p2p``, multiplying to ``cp``); where ``cp`` is not fixed,
    the sizes fix it to their product (Megatron-LM's ``validate_args`` asserts
    ``context_parallel_size`` equals it). ``SpecError`` on ``--fix`` naming the key
    otherwise."""
    pairs = [tuple(x.strip() for x in item.partition("=")[::2]) for item in items]
    canon = [PLAN_ALIASES.get(k.lower(), k.lower()) for k, _ in pairs]
    if HCP_SIZES not in canon:
        return items
    i = canon.index(HCP_SIZES)      # its list items, which _list_items joined with "+"
    pairs[i] = (pairs[i][0], pairs[i][1].replace("+", ","))
    try:
        if "cp" not in canon:
            pairs.append(("cp", str(hierarchical_cp_of(pairs[i][1])[1])))
        read = read_hierarchical_sizes(pairs)
    except SpecError as e:
        raise SpecError("--fix", f"{e.field}={e.value}", e.rule) from None
    return [f"{k}={v}" for k, v in read]


def _check_partial_recompute(out: dict[str, Any]) -> None:
    """A fixed ``recompute_layers`` (and ``recompute_method``, which needs it: ``Plan``'s rule,
    ``plan.recompute_fields``) fixes ``recompute=full`` too; any other fixed ``recompute`` is
    refused. The full rows then carry that count (``product._grid``) instead of the fewest
    that fit (``fitting.least_recompute``), the rows whose largest chunk holds fewer layers
    pruned (``prune_rules.fixed_mask``)."""
    if "recompute_method" in out and "recompute_layers" not in out:
        raise SpecError("--fix", f"recompute_method={out['recompute_method']}",
                        "needs recompute_layers=N (the layers recomputed per chunk)")
    if "recompute_layers" not in out:
        return
    if out.setdefault("recompute", "full") != "full":
        raise SpecError("--fix", f"recompute_layers={out['recompute_layers']}",
                        f"needs recompute=full, not recompute={out['recompute']}")
    out.setdefault("recompute_method", METHODS[0])


def _check_layout(out: dict[str, Any]) -> None:
    """Fixed layout fields (a saved uneven plan's): the search's slot layouts count the
    embedding and the loss together (one ``acc`` column, ``layouts.Candidate``), so
    ``account_embedding`` and ``account_loss`` are fixed to one value; slots and first/last
    counts are two layouts (``Plan``'s rule). The rows then keep that layout, the unfixed
    layout fields at their even values (``prune_rules.fixed_mask``)."""
    acc = {k: out[k] for k in ("account_embedding", "account_loss") if k in out}
    if len(set(acc.values())) > 1 or (len(acc) == 1 and any(acc.values())):
        text = ",".join(f"{k}={str(v).lower()}" for k, v in acc.items())
        raise SpecError("--fix", text, "the search's layouts count the embedding and the "
                        "loss as slots together (NeMo's recipes): fix both true or "
                        "neither (run estimate --plan FILE for this plan)")
    if any(acc.values()) and any(out.get(k) for k in ("first_stage_layers",
                                                       "last_stage_layers")):
        raise SpecError("--fix", "account_embedding=true", "slots and first/last-stage layer "
                        "counts are two layouts: fix one of them")


def _check_hierarchical(out: dict[str, Any]) -> None:
    """A fixed ``hierarchical_cp`` (a2a+p2p's all-to-all size, which a saved plan names):
    with ``cp_comm=a2a+p2p`` fixed too, at least 2 and, where ``cp`` is fixed, ``Plan``'s own
    rule (``plan.spec.check_hierarchical_cp``: it divides ``cp``, ``1 < k < cp``). The rows
    then keep that size (``prune_rules.fixed_mask``)."""
    k = out["hierarchical_cp"]
    if out.get("cp_comm") != "a2a+p2p":
        raise SpecError("--fix", f"hierarchical_cp={k}", "is the all-to-all size of "
                        "cp_comm=a2a+p2p: fix cp_comm=a2a+p2p with it")
    if k < 2:
        raise SpecError("--fix", f"hierarchical_cp={k}", "must be >= 2 (k=1 is cp_comm=p2p)")
    if "cp" in out:
        try:
            Plan(cp=out["cp"], cp_comm="a2a+p2p", hierarchical_cp=k)
        except SpecError as e:
            raise SpecError("--fix", f"hierarchical_cp={k}", e.rule) from None


def _check_cpu_offloading(out: dict[str, Any]) -> None:
    """``cpu_offloading_num_layers`` checked by ``Plan`` against the other fixed keys (pp,
    recompute, cuda_graph, offload_modules), then ``pp=1`` and ``recompute=none`` fixed too:
    the only plans Megatron-Core runs it with, so no candidate contradicts it."""
    n = out["cpu_offloading_num_layers"]
    try:
        Plan(pp=out.get("pp", 1), recompute=out.get("recompute", "none"),
             cuda_graph=out.get("cuda_graph", False),
             offload_modules=out.get("offload_modules"), cpu_offloading_num_layers=n)
    except SpecError as e:
        raise SpecError("--fix", f"cpu_offloading_num_layers={n}", e.rule) from None
    out.setdefault("pp", 1)
    out.setdefault("recompute", "none")


def _fix_switch(key: str, value: str) -> Any:
    """A ``SWITCH_KEYS`` value, coerced and checked by ``Plan`` itself (one rule: the field,
    the value and the rule ``Plan`` states, e.g. ``moe_dispatcher`` one of
    ``plan.DISPATCHERS``)."""
    try:
        v = coerce(key, value)
        # (padding's need of a capacity factor is a rule between fields: parse_fix's)
        # (a2a+p2p's all-to-all size is the search's axis, ``product._with_exchanges``)
        Plan(**{key: v}, **({"moe_capacity_factor": 1.0} if key == "moe_pad_to_capacity"
                            else {"cp": 4, "hierarchical_cp": 2} if v == "a2a+p2p" else {}))
    except SpecError as e:
        raise SpecError("--fix", f"{key}={value}", f"{key} {e.rule}") from None
    return v


def _fix_modules(value: str) -> tuple[str, ...]:
    """``recompute_modules=core_attn+mlp`` (``+`` or ``/`` between names: ``,`` separates
    ``--fix`` items): the names checked by ``Plan`` (known, at least one), in ``MODULES``
    order as ``plan_key`` writes them. Only selective plans carry them (``fixed_mask``)."""
    try:
        return Plan(recompute="selective", recompute_modules=parse_modules(value)
                    ).recompute_modules
    except SpecError as e:
        raise SpecError("--fix", f"recompute_modules={e.value}",
                        f"recompute_modules {e.rule}") from None


def _fix_int(key: str, value: str) -> int:
    """An integer ``--fix`` value, read as ``Plan`` reads it (ASCII digits only,
    ``limits.parse_int_text``) and held to the plan's own range for that field
    (``plan.checks.int_limit``; ``zero`` 0-3 is checked by the caller)."""
    try:
        v = parse_int_text(key, value)
        check_int(key, v, 0 if key == "zero" else 1, int_limit(key))
    except SpecError as e:
        raise SpecError("--fix", f"{key}={value}", e.rule) from None
    return v
