"""The stack rules a search's fixed values (``--fix``, a ``--plan`` file's keys) break whatever
the other fields are: a contradiction among the fixed values (``delay_wgrad=true`` with
``ep_overlap=false``) or a value the stack cannot run (``tp=2`` on a stack without TP). Read
before the search enumerates anything (``fixed_contradictions``), so the refusal names the
fields, their values and the rule (``strategies.stacks.rules``), not a count of pruned plans."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Mapping

import numpy as np

from strategies.plan import Plan
from strategies.plan_arrays import RECOMPUTE_CODE, value_code
from strategies.schedules import schedule_code, schedule_names
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.rules import (ep_overlap_rules, param_gather_optimizer_rules,
                                     plan_view, stack_rules)

#: the switches the grid takes both ways where ``--fix`` leaves them free (a rule reads them
#: with other fields); the others (TP overlap, FlashAttention, CUDA graph, the dispatcher)
#: stay at the value every stack runs (off, alltoall): only their own feature rules read them
_BOOLS = ("sp", "ep_overlap", "delay_wgrad", "overlap_param_gather", "param_gather_with_optimizer")


def _grid(fixed: Mapping[str, Any]) -> SimpleNamespace:
    """Every combination of the free fields' candidates, the fixed ones as given, the rest at
    ``Plan``'s defaults (``plan_view``), as arrays; the batch left unresolved (``gbs`` None:
    the rules on it are the search's, per batch). Sizes: 1 and 2 (a rule asks ``== 1`` or
    ``> 1``), ``tp`` also the fixed ``etp`` and ``dp`` the multiples the rules ask of it (the
    fixed ``ep``, ``dp_shard`` and their least common multiple)."""
    base = vars(plan_view(Plan()))
    base.update({"etp": None})
    want = [int(fixed[k]) for k in ("ep", "dp_shard") if k in fixed]
    axes: dict[str, list] = {k: [1, 2] for k in ("tp", "pp", "cp", "ep", "vpp")}
    axes["tp"] = sorted({1, 2, *([int(fixed["etp"])] if "etp" in fixed else [])})
    axes["dp"] = sorted({1, 2, *want, int(np.lcm.reduce(want)) if want else 1})
    for k in _BOOLS:
        axes[k] = [False, True]
    axes["zero"] = [0, 1, 2, 3]
    axes["schedule"] = [schedule_code(n) for n in schedule_names()]
    axes["recompute"] = list(RECOMPUTE_CODE.values())
    for k, v in fixed.items():
        if k in axes or k in base:
            axes[k] = [value_code(k, v)]
    names = list(axes)
    grids = np.meshgrid(*(np.asarray(axes[k], dtype=bool if isinstance(axes[k][0], bool)
                                     else np.int64) for k in names), indexing="ij", copy=False)
    cols = dict(base)
    cols.update({k: g.ravel() for k, g in zip(names, grids)})
    if cols["etp"] is None:      # expert TP as Megatron resolves it: tp
        cols["etp"] = cols["tp"]
    if "dp_shard" not in fixed:
        cols["dp_shard"] = cols["dp"]
    cols["gbs"] = None
    return SimpleNamespace(**cols)


def fixed_contradictions(fw: FrameworkProfile | None, fixed: Mapping[str, Any]
                         ) -> list[tuple[dict[str, Any], str]]:
    """Each stack rule (``stack_rules``; with no stack named, the combined 1F1B's own,
    ``ep_overlap_rules``, and ``param_gather_optimizer_rules``) on a field ``fixed`` gives that no plan with the fixed values passes,
    as ``(the fixed values it turns on, the rule)``: the rule's own field and every other fixed
    field whose freeing would let some plan pass. Empty: none."""
    if not fixed:
        return []
    rules = (lambda v: stack_rules(fw, v)) if fw is not None else \
        (lambda v: ep_overlap_rules(_none_stack(), v)
         + param_gather_optimizer_rules(_none_stack(), v))
    out: list[tuple[dict[str, Any], str]] = []
    for i, (field, _, ok, why) in enumerate(rules(_grid(fixed))):
        if field not in fixed or np.any(ok):
            continue
        given = {field: fixed[field]}
        for other in fixed:
            if other != field:
                freed = {k: v for k, v in fixed.items() if k != other}
                if np.any(rules(_grid(freed))[i][2]):
                    given[other] = fixed[other]
        out.append((given, why()))
    return out


def _none_stack() -> FrameworkProfile:
    """The profile the combined 1F1B's rules read where no stack is named (``make_job``)."""
    from strategies.framework import get_profile
    return get_profile(None)
