"""activation_series finds a forward's overlapped backward by bisection; it must pick exactly
the pair the direct definition picks (the first backward, in order of its first record, whose
records interleave with the forward's) on any record order."""
from __future__ import annotations

import random

import pytest

from simulator.metrics import activation_series
from simulator.result import Record


def _direct(records, per_chunk, per_w=0.0):
    """The definition, pair by pair (quadratic)."""
    comp = [r for r in records if r.stream == "compute"]
    first, f_last, b_first, last, w_end = {}, {}, {}, {}, {}
    for n, r in enumerate(comp):
        if r.label[:1] == "F":
            first.setdefault(r.label, (r.start, n))
            f_last[r.label] = n
        elif r.label[:1] == "B":
            b_first.setdefault(r.label, n)
            last[r.label] = (r.end, n)
        elif r.label[:1] == "W" and per_w > 0:
            w_end[r.label] = (r.end, n)
    adds = []
    for label, (t, n) in first.items():
        partner = [last[b] for b, bn in b_first.items() if n < last[b][1] and bn < f_last[label]]
        adds.append((partner[0][0], partner[0][1] + 0.5) if partner else (t, n))
    events = sorted([(t, n, per_chunk) for t, n in adds]
                    + [(t, n, -per_chunk + (per_w if per_w > 0 else 0.0)) for t, n in last.values()]
                    + [(t, n, -per_w) for t, n in w_end.values()])
    series, level = [(0.0, 0.0)], 0.0
    for t, _, d in events:
        level += d
        series.append((t, level))
    return series


def _records(rng: random.Random) -> list[Record]:
    """Compute pieces of forwards, backwards and weight gradients in a random interleaving,
    with a few records of another stream in between."""
    pieces = []
    for m in range(rng.randint(1, 7)):
        for kind in ("F", "B", "W"):
            pieces += [f"{kind}{m}.c0"] * rng.randint(1, 3)
    rng.shuffle(pieces)
    out, t = [], 0.0
    for label in pieces:
        d = rng.uniform(0.1, 1.0)
        if rng.random() < 0.2:
            out.append(Record(0, "tp-comm", "tp", "AR", -1, 0, t, t + d))
        out.append(Record(0, "compute", "forward", label, 0, 0, t, t + d))
        t += d if rng.random() < 0.8 else 0.0        # some pieces share a start time
    return out


@pytest.mark.parametrize("seed", range(200))
def test_bisection_picks_the_pair_the_definition_picks(seed):
    rng = random.Random(seed)
    recs = _records(rng)
    per_w = rng.choice([0.0, 3.0])
    assert activation_series(recs, 10.0, per_w) == _direct(recs, 10.0, per_w)
