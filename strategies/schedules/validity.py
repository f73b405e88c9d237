"""Validity rules: one rule is ``(field, value, ok, why)`` (``Rule``), read three ways: the
first that fails raised (``raise_first``: a plan, a job) or all and-ed over arrays
(``all_ok``: the search's masks). ``RuleChecks`` is the mixin of ``Schedule`` that gives a
schedule's rules (``shape_rules``, ``batch_rules``) and reads them all three ways
(``check_plan``, ``check``, ``valid``)."""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from strategies.errors import SpecError

#: One validity rule: ``(field, value, ok, why)``; ``ok`` a bool or a bool array, ``why`` a
#: function giving the message (built only when the rule fails on a scalar).
Rule = tuple[str, Any, Any, Callable[[], str]]


def member(values: Any, allowed: Iterable[Any]) -> Any:
    """Where ``values`` are among ``allowed``: ``np.isin`` over arrays (the search's columns),
    one ``in`` test on a single value (a plan's own rules, ``plan_violations``), where
    ``np.isin``'s set-up costs ~40 µs a call; the same answer either way."""
    if np.ndim(values) == 0:
        return np.bool_(values in tuple(allowed))
    return np.isin(values, list(allowed))


def raise_first(rules: Iterable[Rule]) -> None:
    """Raise ``SpecError`` for the first rule that fails (scalar values)."""
    for field, value, ok, why in rules:
        if not bool(ok):
            raise SpecError(field, value, why())


def all_ok(rules: Iterable[Rule]) -> Any:
    """The rules' ``ok`` values and-ed together (arrays broadcast)."""
    out: Any = True
    for _, _, ok, _ in rules:
        out = out & ok
    return out


class RuleChecks:
    """``Schedule``'s validity: one list of rules, ``rules(...)``, read by ``check_plan``
    (pp, vpp, group size), ``check`` (plus the micro-batch count) and ``valid`` (the same
    rules over arrays, for the search); a schedule overrides ``shape_rules`` and
    ``batch_rules``."""

    def shape_rules(self, pp: Any, vpp: Any, group_size: Any) -> list[Rule]:
        """Rules on ``pp``, ``vpp`` and the group size alone (checked when a plan is made).
        Default: one model chunk per rank and no micro-batch group."""
        # (the registry holds schedules, so it is imported here, where a message names them)
        from strategies.schedules.registry import chunked_names, grouped_names
        return [("vpp", vpp, vpp == 1,
                 lambda: f"schedule={self.name} runs one model chunk per rank: vpp > 1 needs "
                         f"schedule={' or '.join(chunked_names()) or 'a chunked schedule'}"),
                ("microbatch_group_size", group_size, group_size is None,
                 lambda: f"only applies to schedule={' or '.join(grouped_names())}, "
                         f"not {self.name}")]

    def batch_rules(self, pp: Any, m: Any, vpp: Any, group_size: Any) -> list[Rule]:
        """Rules that involve the micro-batch count too (checked when a job is made)."""
        return []

    def rules(self, pp: Any, m: Any, vpp: Any, group_size: Any = None) -> list[Rule]:
        return self.shape_rules(pp, vpp, group_size) + self.batch_rules(pp, m, vpp, group_size)

    def check_plan(self, pp: int, vpp: int, group_size: int | None = None) -> None:
        """``SpecError`` (field, value, rule) where ``pp``/``vpp``/the group size do not fit."""
        raise_first(self.shape_rules(pp, vpp, group_size))

    def check(self, pp: int, m: int, vpp: int = 1, group_size: int | None = None) -> None:
        """``check_plan`` plus the rules on the micro-batch count ``m``."""
        raise_first(self.rules(pp, m, vpp, group_size))

    def valid(self, pp: Any, m: Any, vpp: Any) -> Any:
        """``rules`` over arrays (default group size): a bool array."""
        return all_ok(self.rules(pp, m, vpp, None))
