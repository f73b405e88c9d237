"""Errors that carry the field, the value and the rule that was broken (defined in the
lowest layer, ``topologies.errors``, so every layer raises the same type)."""
from topologies.errors import InfeasiblePlan, SpecError

__all__ = ["SpecError", "InfeasiblePlan"]
