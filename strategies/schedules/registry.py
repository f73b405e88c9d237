"""The registry of pipeline schedules: registration (``register``, ``unregister``; a plain
order function becomes an ``OrderSchedule``), look-up by name (``get_schedule``,
``resolve_name``, the names) and by the integer code plan arrays hold (``schedule_code``,
``schedule_of_code``, ``attr_by_code``, ``dispatch``: the order of registration)."""
from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np

from strategies.errors import SpecError
from strategies.schedules.base import Schedule
from strategies.schedules.step import Step

#: The schedule of a plan that names none (and the one plans with pp=1 are reduced to).
DEFAULT_SCHEDULE = "1f1b"

_REGISTRY: dict[str, "Schedule"] = {}


class OrderSchedule(Schedule):
    """A schedule given by its order function alone (``register(name)(fn)``); every other
    fact takes the defaults, which read the order."""

    def __init__(self, fn: Callable[..., list[Step]]) -> None:
        self.fn = fn

    def steps(self, stage, pp, m, vpp=1, group_size=None):
        return self.fn(stage, pp, m, vpp, group_size)


def register(name: str) -> Callable[[Any], Any]:
    """Decorator registering a ``Schedule`` subclass (instantiated), a ``Schedule``
    instance or a plain order function under ``name``; duplicates are refused. Returns its
    argument unchanged."""

    def deco(obj: Any) -> Any:
        if name in _REGISTRY:
            old = _REGISTRY[name]
            raise ValueError(f"schedule {name!r} is already registered (by {old!r})")
        if isinstance(obj, type) and issubclass(obj, Schedule):
            sched = obj()
        elif isinstance(obj, Schedule):
            sched = copy.copy(obj)
        elif callable(obj):
            sched = OrderSchedule(obj)
        else:
            raise TypeError(f"cannot register {obj!r} as a schedule")
        sched.name = name
        _REGISTRY[name] = sched
        return obj

    return deco


def unregister(name: str) -> None:
    """Remove ``name`` from the registry (plug-ins and tests); unknown names are ignored.
    Codes of schedules registered after it shift down."""
    _REGISTRY.pop(name, None)


def schedule_names() -> list[str]:
    """Registered schedule names, sorted."""
    return sorted(_REGISTRY)


def schedules() -> list[Schedule]:
    """Registered schedules in code order."""
    return list(_REGISTRY.values())


def chunked_default() -> "Schedule | None":
    """The first registered chunked schedule (what ``vpp >= 2`` alone means)."""
    return next((s for s in _REGISTRY.values() if s.chunked), None)


def chunked_names() -> list[str]:
    return [s.name for s in _REGISTRY.values() if s.chunked]


def grouped_names() -> list[str]:
    return [s.name for s in _REGISTRY.values() if s.uses_group]


def resolve_name(name: str) -> str:
    """``name`` or the schedule it is an alias of (unchanged when unknown)."""
    for s in _REGISTRY.values():
        if name in s.aliases:
            return s.name
    return name


def get_schedule(name: str) -> Schedule:
    """The schedule registered as ``name``; ``SpecError`` if there is none."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise SpecError("schedule", name,
                        f"must be one of {', '.join(schedule_names())}") from None


def schedule_code(name: str) -> int:
    """Integer code of ``name`` in plan arrays (its registration order)."""
    get_schedule(name)
    return list(_REGISTRY).index(name)


def schedule_of_code(code: int) -> Schedule:
    return list(_REGISTRY.values())[int(code)]


def head_rank(schedule: str, pp: int, vpp: int) -> int:
    """Pipeline rank of the LM head and loss of a plan (``Schedule.ends``)."""
    return int(get_schedule(schedule).ends(pp, vpp)[1])


def attr_by_code(codes: Any, attr: str) -> np.ndarray:
    """A constant attribute of each plan's schedule, looked up by code."""
    table = np.array([getattr(s, attr) for s in _REGISTRY.values()])
    return table[np.asarray(codes, dtype=np.int64)]


def present_codes(codes: np.ndarray) -> np.ndarray:
    """The distinct schedule codes in ``codes`` (int64), sorted: ``np.unique``'s answer, read
    without its sort (and its masked-array test, which imports ``numpy.ma``) where every
    entry is the same code (one plan, or one plan's stages), or none (no plan selected)."""
    flat = codes.reshape(-1)
    if not flat.size or not np.any(flat != flat[0]):
        return flat[:1]
    return np.unique(codes)


def dispatch(codes: Any, method: str, *args: Any) -> np.ndarray:
    """``schedule.method(*args)`` for each plan, by its schedule code: the arrays are
    broadcast together and each schedule present sees only its own plans (float result)."""
    arrs = np.broadcast_arrays(np.asarray(codes, dtype=np.int64), *(np.asarray(a) for a in args))
    c, rest = arrs[0], arrs[1:]
    out = np.zeros(c.shape)
    for code in present_codes(c):
        sel = c == code
        out[sel] = getattr(schedule_of_code(code), method)(*(a[sel] for a in rest))
    return out
