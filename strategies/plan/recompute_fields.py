"""A plan's recomputation fields: ``recompute_modules`` parsed (``parse_modules``), the rule of
partial recomputation (``check_partial_recompute``: ``recompute_layers``, ``recompute_method``,
``recompute_modules``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strategies.cost.recompute import METHODS, MODULES
from strategies.errors import SpecError
from topologies.limits import MAX_LAYERS, check_int

if TYPE_CHECKING:
    from strategies.plan.spec import Plan


def check_partial_recompute(p: Plan) -> None:
    """``recompute_layers`` (>= 1) and ``recompute_method`` only with ``recompute=full``
    (Megatron's ``--recompute-granularity full``), the method only with a layer count;
    ``recompute_modules`` only with ``recompute=selective``, each a known module named once
    (stored in ``MODULES`` order; the chunk's layer count and the model's kind are
    checked with the model, ``strategies.job``)."""
    n, method, mods = p.recompute_layers, p.recompute_method, p.recompute_modules
    if n is not None:
        check_int("recompute_layers", n, 1, MAX_LAYERS)
        if p.recompute != "full":
            raise SpecError("recompute_layers", n, "needs recompute=full (Megatron's "
                            f"--recompute-granularity full), not recompute={p.recompute}")
    if method is not None:
        if method not in METHODS:
            raise SpecError("recompute_method", method, f"must be one of {', '.join(METHODS)}")
        if n is None:
            raise SpecError("recompute_method", method, "needs recompute_layers=N (the layers "
                            "per chunk it recomputes, block, or per group, uniform)")
    elif n is not None:
        object.__setattr__(p, "recompute_method", "block")
    if mods is not None:
        if isinstance(mods, str):
            mods = parse_modules(mods)
        for m in mods:
            if m not in MODULES:
                raise SpecError("recompute_modules", m, f"unknown module; valid: "
                                f"{', '.join(MODULES)}")
        if not mods:
            raise SpecError("recompute_modules", "", f"must name at least one of "
                            f"{', '.join(MODULES)}")
        twice = next((m for i, m in enumerate(mods) if m in mods[:i]), None)
        if twice is not None:       # a typo for another module? refused, as a key given twice
            raise SpecError("recompute_modules", "+".join(mods), f"names {twice} twice (each "
                            "module once)")
        if p.recompute != "selective":
            raise SpecError("recompute_modules", "+".join(mods), "needs recompute=selective "
                            "(Megatron's --recompute-granularity selective), not "
                            f"recompute={p.recompute}")
        object.__setattr__(p, "recompute_modules", tuple(m for m in MODULES if m in mods))


def parse_modules(value: Any) -> tuple[str, ...]:
    """``core_attn,mlp`` (or joined by ``+`` or ``/``, or a YAML list) as a tuple of names."""
    if isinstance(value, str):
        items = value.replace("+", ",").replace("/", ",").split(",")
        return tuple(x.strip().lower() for x in items if x.strip())
    if isinstance(value, (list, tuple)):
        if not all(isinstance(x, str) for x in value):
            raise SpecError("recompute_modules", value, "must be a list of module names")
        return tuple(x.strip().lower() for x in value)
    raise SpecError("recompute_modules", value, f"must be module names joined by ',', from "
                    f"{', '.join(MODULES)}")

