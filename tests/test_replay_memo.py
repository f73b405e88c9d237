"""The replay's memo (``replay._SPANS``, each distinct column of seconds replayed once) and the
interned steps (``schedules.step.make_step``) change no figure: ``order_span`` over plans with
repeated columns equals, bit for bit, each plan replayed alone with an empty memo, and a
second call reads the memo without replaying; ``-0.0`` and ``0.0`` stay apart; an interned
step is the ``Step`` of the same value."""
from __future__ import annotations

import numpy as np
import pytest

from strategies.schedules import get_schedule
from strategies.schedules import replay
from strategies.schedules.base import Step
from strategies.schedules.step import make_step as step


def _plans():
    rng = np.random.default_rng(7)
    pp = np.array([2, 4, 4, 2, 4, 4, 2, 4])
    m = np.array([8, 8, 8, 8, 12, 8, 8, 8])
    t_max = rng.uniform(1.0, 2.0, 8)
    t_max[2] = t_max[1]          # plan 2 repeats plan 1's column, plan 3 plan 0's
    t_max[3] = t_max[0]
    t_sum = t_max * pp * 0.9
    t_sum[2], t_sum[3] = t_sum[1], t_sum[0]
    w = np.full(8, 0.2)
    f = np.full(8, 0.4)
    return m, t_max, t_sum, pp, w, f


@pytest.mark.parametrize("name", ["zb-v", "dualpipev"])
def test_order_span_memo_bit_identical(name):
    s = get_schedule(name)
    m, t_max, t_sum, pp, w, f = _plans()
    replay._SPANS.clear()
    together = replay.order_span(s, m, t_max, t_sum, pp, 2, w, f)
    alone = []
    for i in range(len(m)):
        replay._SPANS.clear()
        alone.append(float(replay.order_span(s, m[i:i + 1], t_max[i:i + 1], t_sum[i:i + 1],
                                             pp[i:i + 1], 2, w[i:i + 1], f[i:i + 1])[0]))
    assert together.tolist() == alone
    assert together[2] == together[1] and together[3] == together[0]
    replay._SPANS.clear()
    replay.order_span(s, m, t_max, t_sum, pp, 2, w, f)
    held = len(replay._SPANS)
    assert held == 6                      # 8 plans, 6 distinct columns
    again = replay.order_span(s, m, t_max, t_sum, pp, 2, w, f)
    assert len(replay._SPANS) == held and again.tolist() == together.tolist()


def test_distinct_columns_by_bits():
    cols = np.array([[0.0, 1.0, 0.5, 0.0], [-0.0, 1.0, 0.5, 0.0], [0.0, 1.0, 0.5, 0.0]])
    first, inv = replay._distinct_columns(cols)
    assert len(first) == 2 and inv[0] == inv[2] != inv[1]


def test_interned_step_is_the_step():
    a, b = step("F", 3, 1, True), step("F", 3, 1, True)
    assert a is b and a == Step("F", 3, 1, overlap=True) and a.label == "F3.c1&"
    assert step("B", 3, 1, False) != a
