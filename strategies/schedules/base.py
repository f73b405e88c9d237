"""Core of the pipeline schedules: the ``Step`` record, the registry and shared checks.

A schedule is a pure function ``fn(stage, pp, num_microbatches, vpp=1, group_size=None)``
returning the ordered ``list[Step]`` that one pipeline rank runs in one training step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from strategies.errors import SpecError

ScheduleFn = Callable[..., "list[Step]"]

_REGISTRY: dict[str, ScheduleFn] = {}


@dataclass(frozen=True)
class Step:
    """One forward (``kind="F"``) or backward (``kind="B"``) pass of one micro-batch
    through one model chunk (``chunk`` is the ``model_chunk_id``, 0 without interleaving).

    >>> Step("F", 3, 1).label
    'F3.c1'
    """

    kind: str
    microbatch: int
    chunk: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("F", "B"):
            raise SpecError("kind", self.kind, 'must be "F" or "B"')

    @property
    def label(self) -> str:
        """Short name such as ``"F3.c1"`` (micro-batch 3, chunk 1)."""
        return f"{self.kind}{self.microbatch}.c{self.chunk}"

    def __str__(self) -> str:
        return self.label


def register(name: str) -> Callable[[ScheduleFn], ScheduleFn]:
    """Decorator registering a schedule function under ``name``; duplicates are refused."""

    def deco(fn: ScheduleFn) -> ScheduleFn:
        if name in _REGISTRY:
            raise ValueError(f"schedule {name!r} is already registered "
                             f"(by {_REGISTRY[name].__module__}.{_REGISTRY[name].__name__})")
        _REGISTRY[name] = fn
        return fn

    return deco


def schedule_names() -> list[str]:
    """Registered schedule names, sorted."""
    return sorted(_REGISTRY)


def get_schedule(name: str) -> ScheduleFn:
    """The schedule function registered as ``name``; ``SpecError`` if there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SpecError("schedule", name,
                        f"must be one of {', '.join(schedule_names())}") from None


def check_common(stage: int, pp: int, num_microbatches: int) -> None:
    """Validate the arguments every schedule shares."""
    if pp < 1:
        raise SpecError("pp", pp, "pipeline_parallel_size must be >= 1")
    if not 0 <= stage < pp:
        raise SpecError("stage", stage, f"must be in 0..{pp - 1} (pp={pp})")
    if num_microbatches < 1:
        raise SpecError("num_microbatches", num_microbatches, "must be >= 1")


def check_no_vpp(schedule: str, vpp: int) -> None:
    """Refuse ``vpp != 1`` for a non-interleaved schedule."""
    if vpp != 1:
        raise SpecError("vpp", vpp, f"schedule {schedule!r} needs virtual_pipeline_size=1; "
                                    "use 'interleaved' for vpp >= 2")


def warmup_steady_cooldown(forwards: Sequence[Step], backwards: Sequence[Step],
                           num_warmup_microbatches: int) -> list[Step]:
    """1F1B ordering: ``w`` forwards, then pairs ``F(w+k) B(k)``, then remaining backwards."""
    w = num_warmup_microbatches
    remaining = len(forwards) - w
    steps = list(forwards[:w])
    for k in range(remaining):
        steps.append(forwards[w + k])
        steps.append(backwards[k])
    steps.extend(backwards[remaining:])
    return steps
