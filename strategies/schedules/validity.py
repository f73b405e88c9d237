"""Validity rules: one rule is ``(field, value, ok, why)`` (``Rule``), read three ways: the
first that fails raised (``raise_first``: a plan, a job) or all and-ed over arrays
(``all_ok``: the search's masks)."""
from __future__ import annotations

from typing import Any, Callable, Iterable

from strategies.errors import SpecError

#: One validity rule: ``(field, value, ok, why)``; ``ok`` a bool or a bool array, ``why`` a
#: function giving the message (built only when the rule fails on a scalar).
Rule = tuple[str, Any, Any, Callable[[], str]]


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
