"""A ``ModelSpec`` from a mapping of its own field names (a YAML model file, a report read
back): unknown keys refused, the derived counts a report adds checked against the fields.
"""
from __future__ import annotations

from typing import Any

from strategies.errors import SpecError
from strategies.model.spec import DERIVED, FIELDS, ModelSpec


def model_from_mapping(d: dict[str, Any], name: str = "custom") -> ModelSpec:
    """A ModelSpec from a mapping of its own field names (YAML); unknown keys refused."""
    if not isinstance(d, dict):
        raise SpecError("model", type(d).__name__, "a model file must hold a mapping")
    unknown = sorted(str(k) for k in set(d) - set(FIELDS) - set(DERIVED))
    if unknown:
        raise SpecError("model", unknown[0], f"unknown key; allowed: {', '.join(FIELDS)}")
    derived = {k: d[k] for k in DERIVED if k in d}
    args = {"name": name, **{k: v for k, v in d.items() if k not in DERIVED}}
    for req in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        if req not in args:
            raise SpecError(req, None, "is required in a model file")
    if "ffn_hidden_size" not in args:
        h = args["hidden_size"]
        args["ffn_hidden_size"] = 4 * h if isinstance(h, int) and not isinstance(h, bool) else h
    if isinstance(args.get("compress_ratios"), list):    # a YAML/JSON list: the tuple field
        args["compress_ratios"] = tuple(args["compress_ratios"])
    try:
        m = ModelSpec(**args)
    except TypeError as e:
        raise SpecError("model", d, str(e)) from None
    for k, v in derived.items():
        if v != DERIVED[k](m):
            raise SpecError(k, v, f"disagrees with the model's fields ({DERIVED[k](m)}); a "
                            "derived count is checked, not set")
    return m
