"""``schedules.per_distinct.per_distinct`` calls the figure once per distinct (stage, pp, m, vpp) and
returns it for every row, whichever way it finds the distinct rows (packed key or 2-D)."""
import numpy as np

from strategies.schedules.per_distinct import per_distinct


def _figure(stage: int, pp: int, m: int, vpp: int) -> int:
    return stage * 1_000_003 + pp * 1_009 + m * 7 + vpp


def test_every_row_gets_its_own_figure_and_each_tuple_is_asked_once() -> None:
    rng = np.random.default_rng(0)
    cols = [rng.integers(0, 16, 5000), rng.integers(1, 17, 5000), rng.integers(1, 64, 5000),
            rng.integers(1, 5, 5000)]
    calls: list[tuple[int, ...]] = []

    def fn(*k: int) -> int:
        calls.append(k)
        return _figure(*k)

    got = per_distinct(fn, *cols)
    want = (cols[0] * 1_000_003 + cols[1] * 1_009 + cols[2] * 7 + cols[3]).astype(float)
    assert np.array_equal(got, want)
    assert len(calls) == len(set(calls)) == len(set(zip(*(c.tolist() for c in cols))))


def test_ranges_too_wide_for_one_key_fall_back_to_rows() -> None:
    big = np.array([0, 2**40, 2**40, 5])
    got = per_distinct(lambda s, p, m, v: s % 97 + p % 89 + m % 83 + v, big, big, big, 1)
    assert np.array_equal(got, (big % 97 + big % 89 + big % 83 + 1).astype(float))


def test_broadcast_shape_and_empty() -> None:
    assert per_distinct(_figure, 0, np.array([[1, 2], [3, 4]]), 1, 1).tolist() == \
        [[1017.0, 2026.0], [3035.0, 4044.0]]
    assert per_distinct(_figure, np.array([], dtype=int), 1, 1, 1).shape == (0,)
