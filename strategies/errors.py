"""Errors that carry the field, the value and the rule that was broken."""
from __future__ import annotations

from typing import Any


class SpecError(ValueError):
    """Bad input: names the field, the value and the rule.

    >>> str(SpecError("tp", 6, "must divide num_attention_heads=64"))
    'tp=6: must divide num_attention_heads=64'
    """

    def __init__(self, field: str, value: Any, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{field}={value!r}: {rule}" if not isinstance(value, (int, float))
                         else f"{field}={value}: {rule}")


class InfeasiblePlan(SpecError):
    """A valid plan that cannot run here (memory, cluster shape). ``reason`` is a short key
    the search counts by (e.g. ``"memory"``, ``"tp_heads"``)."""

    def __init__(self, field: str, value: Any, rule: str, reason: str = "") -> None:
        super().__init__(field, value, rule)
        self.reason = reason or field
