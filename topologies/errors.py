"""The error type of the lowest layer; ``strategies.errors`` re-exports it."""
from __future__ import annotations

import math
import reprlib
from typing import Any

_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6


def _show(value: Any) -> str:
    """The value as a short, one-line text: never huge (a 10,000-digit number or a deeply
    nested YAML document is abbreviated) and never raising.

    >>> _show(8), _show("8"), _show(10**5000)
    ('8', "'8'", 'an integer of 5001 digits')
    """
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() > 200:
                return f"{'-' if value < 0 else ''}an integer of {_digits(abs(value))} digits"
            return str(value)
        if isinstance(value, float):
            return str(value)
        return _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a message must never fail to build
        return f"<{type(value).__name__}>"


def _digits(n: int) -> int:
    d = int(n.bit_length() * math.log10(2)) + 1
    return d if n >= 10 ** (d - 1) else d - 1


class SpecError(ValueError):
    """Bad input: names the field, the value and the rule (one line, whatever the input).

    >>> str(SpecError("tp", 6, "must divide num_attention_heads=64"))
    'tp=6: must divide num_attention_heads=64'
    """

    def __init__(self, field: str, value: Any, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = " ".join(str(rule).split())
        super().__init__(f"{' '.join(str(field).split())}={_show(value)}: {self.rule}")


class InfeasiblePlan(SpecError):
    """A valid plan that cannot run here (memory, cluster shape). ``reason`` is a short key
    the search counts by (e.g. ``"memory"``, ``"tp_heads"``)."""

    def __init__(self, field: str, value: Any, rule: str, reason: str = "") -> None:
        super().__init__(field, value, rule)
        self.reason = reason or field
