"""The bound-ordered search and the recommendation. Pure: any scoring function, any executor.

``bound_ordered_search`` evaluates candidates (``simulate`` in practice) in increasing order
of a lower bound on what the evaluation can return. A candidate is *needed* when

* its bound is at most the k-th best time found so far (it could enter the top-k), or
* its bound is within ``tolerance`` of the best time and it is no more complex than the
  current recommendation (``(complexity, bound) <= (complexity, time)`` of the pick): it
  could become the recommendation (the simplest plan within the tolerance).

The search dispatches needed candidates in bound order and stops when none is left. Every
candidate it leaves out then has ``time >= bound`` above the final k-th best time, or outside
the tolerance, or is more complex than the pick, so:

* the top-k is exact (the same plans, in the same order, as evaluating everything), and
* so is the recommendation.

The best time and the k-th best only fall as results come in, so the final state decides
what is needed; executors with several workers may evaluate a few more candidates
speculatively (dispatched while a result that would have ruled them out was still running).

Results are taken as the workers finish them, so no worker waits behind a slower one, and
which candidates are evaluated speculatively depends on that order. What is reported does
not: ``needed``, ``ranked``, ``pick``, ``pool``, ``kth`` and ``best`` are functions of the
bounds, the times, ``k``, the tolerance, the keys and the complexities alone. The top-k are
needed (``bound <= time <= kth``), so ``kth`` and ``best`` are those of evaluating
everything; a speculative candidate inside the tolerance band is more complex than the
pick, or no simpler and slower than it (else it would be needed), so the pick is that of
evaluating everything too; and ``needed`` reads only these. ``evaluated`` (speculative ones
included) is the one field that varies from run to run with several workers
(``tests/test_search_determinism.py``).

>>> bounds = [1.0, 2.0, 3.0, 10.0]
>>> times = [1.5, 2.1, 3.2, 11.0]
>>> out = bound_ordered_search(bounds, SerialExecutor(lambda i: times[i]), k=2)
>>> out.ranked, out.needed
([0, 1], [0, 1])
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence


class Executor(Protocol):
    """Runs evaluations: ``submit(index)``; ``wait()`` blocks until at least one finishes and
    returns ``[(index, seconds), …]``; ``capacity`` is how many may be in flight."""

    capacity: int

    def submit(self, index: int) -> None: ...

    def wait(self) -> list[tuple[int, float]]: ...


class SerialExecutor:
    """Evaluates in the calling process, one at a time."""

    capacity = 1

    def __init__(self, fn: Callable[[int], float]) -> None:
        self.fn, self._todo = fn, []

    def submit(self, index: int) -> None:
        self._todo.append(index)

    def wait(self) -> list[tuple[int, float]]:
        i = self._todo.pop(0)
        return [(i, float(self.fn(i)))]


@dataclass
class SearchOutcome:
    """``evaluated``: index -> seconds (speculative ones included); ``needed``: what every
    exact search evaluates, in bound order; ``ranked``: the top-k, best first; ``pick``: the
    simplest plan within the tolerance (None without complexities); ``pool``: the needed
    plans within the tolerance of the best."""

    evaluated: dict[int, float]
    needed: list[int]
    ranked: list[int]
    pick: int | None
    pool: list[int]
    kth: float
    best: float


class _State:
    """Best, k-th best and current pick of the results so far."""

    def __init__(self, k: int, tolerance: float, cx, keys) -> None:
        self.k, self.tol, self.cx, self.keys = k, tolerance, cx, keys
        self.times: dict[int, float] = {}
        self.kth = self.best = math.inf
        self.pick: int | None = None

    def key(self, i: int):
        return self.keys[i] if self.keys is not None else i

    def add(self, i: int, t: float) -> None:
        self.times[i] = t
        ts = sorted(self.times.values())
        self.best = ts[0]
        self.kth = ts[self.k - 1] if len(ts) >= self.k else math.inf
        if self.cx is not None:
            band = (1.0 + self.tol) * self.best
            pool = [j for j, tj in self.times.items() if tj <= band]
            self.pick = min(pool, key=lambda j: (self.cx[j], self.times[j], self.key(j)))

    def band(self) -> float:
        return (1.0 + self.tol) * self.best

    def limit(self) -> float:
        """No candidate with a larger bound is needed."""
        return max(self.kth, self.band() if self.cx is not None else -math.inf)

    def needed(self, i: int, bound: float) -> bool:
        if bound <= self.kth:
            return True
        if self.cx is None or self.pick is None or bound > self.band():
            return False
        p = self.pick
        return (self.cx[i], bound) <= (self.cx[p], self.times[p])


def in_bound_order(bounds: Sequence[float], tie: Callable[[int], Any]) -> Iterator[int]:
    """The indices of ``bounds`` in increasing ``(bounds[i], tie(i))`` order, lazily: ``tie``
    is called only for indices whose bound equals another's, as the iteration reaches them
    (a search reads a short prefix of a long list, and each key costs a ``Plan``).

    >>> list(in_bound_order([2.0, 1.0, 2.0, 0.5], lambda i: -i))
    [3, 1, 2, 0]
    """
    by = sorted(range(len(bounds)), key=bounds.__getitem__)
    a = 0
    while a < len(by):
        b = a + 1
        while b < len(by) and bounds[by[b]] == bounds[by[a]]:
            b += 1
        yield from (sorted(by[a:b], key=tie) if b - a > 1 else by[a:b])
        a = b


def bound_ordered_search(bounds: Sequence[float], executor: Executor, k: int = 5,
                         tolerance: float = 0.0, exhaustive: bool = False,
                         keys: Sequence[str] | None = None,
                         complexity: Sequence[tuple] | None = None,
                         on_result: Callable[[int, float, "_State"], None] | None = None
                         ) -> SearchOutcome:
    """Evaluate the needed candidates in bound order (see the module docstring).

    ``keys`` break ties (bound order, ranking, pick) so the output is deterministic (read
    only where needed: a lazy sequence saves building every key);
    ``complexity`` (smaller is simpler, compared as tuples) enables the recommendation;
    ``exhaustive`` evaluates everything; ``on_result(index, seconds, state)`` is called as
    each result arrives. Raises AssertionError if an evaluation beats its bound."""
    if k < 1:
        raise ValueError("k must be >= 1")
    tie = (lambda i: keys[i]) if keys is not None else (lambda i: i)
    stream = in_bound_order(bounds, tie)
    st = _State(k, tolerance, complexity, keys)
    pending: list[int] = []        # examined in bound order, not dispatched, not ruled out
    inflight = 0
    while True:
        rest, pos = [], 0
        while True:
            if pos == len(pending):    # examine the next candidate in bound order
                nxt = next(stream, None)
                if nxt is None:
                    break
                pending.append(nxt)
            i = pending[pos]
            if inflight >= max(1, executor.capacity):
                rest += pending[pos:]
                break
            if exhaustive or math.isinf(st.kth) or st.needed(i, bounds[i]):
                executor.submit(i)
                inflight += 1
            elif bounds[i] > st.limit():   # the limit only falls: nothing after is needed
                rest += pending[pos:]
                break
            else:
                rest.append(i)
            pos += 1
        pending = rest
        if inflight == 0:
            break
        for i, t in executor.wait():     # as they finish: no worker waits behind another
            inflight -= 1
            t = float(t)
            if t < bounds[i]:
                raise AssertionError(f"evaluation {t!r} of candidate {i} beat its lower "
                                     f"bound {bounds[i]!r}: the bound is wrong")
            st.add(i, t)
            if on_result is not None:
                on_result(i, t, st)
    done = sorted(st.times, key=lambda i: (bounds[i], tie(i)))
    needed = [i for i in done if exhaustive or st.needed(i, bounds[i])]
    missing = [i for i in pending if i not in st.times and st.needed(i, bounds[i])]
    assert not missing, f"needed candidates left unevaluated: {missing[:5]}"
    ranked = sorted(needed, key=lambda i: (st.times[i], st.key(i)))[:k]
    pool = [i for i in needed if st.times[i] <= st.band()]
    return SearchOutcome(st.times, needed, ranked, st.pick, pool, st.kth, st.best)
