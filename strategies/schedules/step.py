"""The ``Step`` record a schedule's order is made of (``STEP_KINDS``), and what the schedules
build their orders with: the check of the arguments every order shares (``check_common``)
and 1F1B's warm-up, steady pairs and cool-down (``warmup_steady_cooldown``); ``make_step``,
the interned constructor the long orders use."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from strategies.errors import SpecError


#: Step kinds: forward, backward (the input gradient only when the schedule splits the
#: backward, ``Schedule.splits_backward``) and the weight gradient of a split backward.
STEP_KINDS = ("F", "B", "W")


@dataclass(frozen=True)
class Step:
    """One forward (``kind="F"``) or backward (``kind="B"``) pass of one micro-batch
    through one model chunk (``chunk`` is the ``model_chunk_id``, 0 without interleaving);
    with a split backward, ``B`` computes the input gradient and ``W`` the weight gradient.

    ``overlap=True`` links a step to the step after it on the same rank: a run of linked
    steps (and the first unlinked one that ends it) is one overlapped group, DualPipe's
    "F&B" pair of two micro-batches (a forward and a whole backward, ``B`` then ``W``) whose
    compute runs in turn while each one's communication hides under the other's compute
    (docs/schedules.md, "Overlapped pairs"). Consumers that ignore it see the same steps run
    one after the other.

    >>> Step("F", 3, 1).label, Step("F", 3, 1, overlap=True).label
    ('F3.c1', 'F3.c1&')
    """

    kind: str
    microbatch: int
    chunk: int = 0
    overlap: bool = False

    def __post_init__(self) -> None:
        if self.kind not in STEP_KINDS:
            raise SpecError("kind", self.kind, 'must be "F", "B" or "W"')

    @property
    def label(self) -> str:
        """Short name such as ``"F3.c1"`` (micro-batch 3, chunk 1; ``&`` when it is
        overlapped with the next step)."""
        return f"{self.kind}{self.microbatch}.c{self.chunk}" + ("&" if self.overlap else "")

    def __str__(self) -> str:
        return self.label



#: ``Step(kind, microbatch, chunk, overlap)`` interned, positional arguments: one object per
#: value (``Step`` is immutable and compared by value; a frozen dataclass's ``__init__``
#: costs about a microsecond and the search's orders make millions of steps under
#: ``--schedules all``); bounded cache
make_step = lru_cache(maxsize=1 << 16)(Step)


def check_common(stage: int, pp: int, num_microbatches: int) -> None:
    """Validate the arguments every schedule shares."""
    if pp < 1:
        raise SpecError("pp", pp, "pipeline_parallel_size must be >= 1")
    if not 0 <= stage < pp:
        raise SpecError("stage", stage, f"must be in 0..{pp - 1} (pp={pp})")
    if num_microbatches < 1:
        raise SpecError("num_microbatches", num_microbatches, "must be >= 1")


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
