"""The error type of the lowest layer; ``strategies.errors`` re-exports it."""
from __future__ import annotations

from typing import Any


def _show(value: Any) -> str:
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)


class SpecError(ValueError):
    """Bad input: names the field, the value and the rule.

    >>> str(SpecError("tp", 6, "must divide num_attention_heads=64"))
    'tp=6: must divide num_attention_heads=64'
    """

    def __init__(self, field: str, value: Any, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{field}={_show(value)}: {rule}")


class InfeasiblePlan(SpecError):
    """A valid plan that cannot run here (memory, cluster shape). ``reason`` is a short key
    the search counts by (e.g. ``"memory"``, ``"tp_heads"``)."""

    def __init__(self, field: str, value: Any, rule: str, reason: str = "") -> None:
        super().__init__(field, value, rule)
        self.reason = reason or field
