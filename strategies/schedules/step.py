"""The ``Step`` record a schedule's order is made of (``STEP_KINDS``), and what the schedules
build their orders with: the check of the arguments every order shares (``check_common``)
and 1F1B's warm-up, steady pairs and cool-down (``warmup_steady_cooldown``); ``make_step``,
the interned constructor the long orders use."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from typing import Sequence

import numpy as np

from strategies.errors import SpecError


#: Step kinds: forward, backward (the input gradient only when the schedule splits the
#: backward, ``Schedule.splits_backward``) and the weight gradient of a split backward.
STEP_KINDS = ("F", "B", "W")
#: ``Step.kind`` -> its index in ``STEP_KINDS``
_KIND_CODE = {k: i for i, k in enumerate(STEP_KINDS)}


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


def warmup_steady_cooldown_positions(n: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """1F1B ordering of ``n`` forwards and ``n`` backwards with ``w`` warm-up forwards
    (``0 <= w <= n``): ``(is_forward, index)`` of each of the ``2n`` places, ``w`` forwards,
    then pairs ``F(w+k) B(k)``, then the remaining backwards.

    >>> [("F" if f else "B") + str(i) for f, i in zip(*warmup_steady_cooldown_positions(3, 1))]
    ['F0', 'F1', 'B0', 'F2', 'B1', 'B2']
    """
    r = n - w
    k = np.arange(n)
    f_at = np.where(k < w, k, 2 * k - w)                   # warm-up, then every other place
    b_at = np.where(k < r, w + 2 * k + 1, w + r + k)       # steady pairs, then the cool-down
    is_forward = np.zeros(2 * n, dtype=bool)
    index = np.empty(2 * n, dtype=np.int64)
    is_forward[f_at] = True
    index[f_at] = k
    index[b_at] = k
    return is_forward, index


def warmup_steady_cooldown(forwards: Sequence[Step], backwards: Sequence[Step],
                           num_warmup_microbatches: int) -> list[Step]:
    """1F1B ordering: ``w`` forwards, then pairs ``F(w+k) B(k)``, then remaining backwards
    (``warmup_steady_cooldown_positions``; ``0 <= w <= len(forwards)``)."""
    is_forward, index = warmup_steady_cooldown_positions(len(forwards), num_warmup_microbatches)
    return [forwards[i] if f else backwards[i] for f, i in zip(is_forward.tolist(),
                                                                index.tolist())]


def step_columns(steps: Sequence[Step]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An order as columns: ``(kind, microbatch, chunk, overlap)``, ``kind`` the index in
    ``STEP_KINDS`` (F 0, B 1, W 2; int8), ``microbatch`` and ``chunk`` int64, ``overlap``
    bool (``steps_of_columns`` inverts it)."""
    n = len(steps)
    return (np.fromiter(map(_KIND_CODE.__getitem__, map(attrgetter("kind"), steps)), np.int8, n),
            np.fromiter(map(attrgetter("microbatch"), steps), np.int64, n),
            np.fromiter(map(attrgetter("chunk"), steps), np.int64, n),
            np.fromiter(map(attrgetter("overlap"), steps), bool, n))


def steps_of_columns(kind: np.ndarray, microbatch: np.ndarray, chunk: np.ndarray,
                     overlap: np.ndarray) -> list[Step]:
    """The ``Step`` list of ``step_columns``' columns (interned, ``make_step``)."""
    return [make_step(STEP_KINDS[k], i, c, o) for k, i, c, o in
            zip(kind.tolist(), microbatch.tolist(), chunk.tolist(), overlap.tolist())]


def running_counts(ids: np.ndarray) -> np.ndarray:
    """How many earlier entries of ``ids`` (non-negative ints) equal each one: the index of
    each step among the steps of its kind (and chunk) when ``ids`` codes them."""
    ids = np.asarray(ids, dtype=np.int64)
    by = np.argsort(ids, kind="stable")
    first = np.searchsorted(ids[by], ids[by], side="left")
    out = np.empty(len(ids), dtype=np.int64)
    out[by] = np.arange(len(ids)) - first
    return out


def token_columns(ids: Sequence[int], chunks: int, m: int) -> tuple[np.ndarray, np.ndarray,
                                                                    np.ndarray, np.ndarray]:
    """``step_columns`` of an order written as tokens ``kind·chunks + chunk`` (``kind`` the
    index in ``STEP_KINDS``), each token the next micro-batch of its kind and chunk, the
    steps of micro-batches ``>= m`` dropped (none overlapped)."""
    ids = np.asarray(ids, dtype=np.int64)
    micro = running_counts(ids)
    keep = micro < m
    ids, micro = ids[keep], micro[keep]
    return ((ids // chunks).astype(np.int8), micro, ids % chunks,
            np.zeros(len(ids), dtype=bool))
