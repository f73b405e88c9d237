"""One gradient-bucket cut for the estimate and the simulator (``strategies.cost.bucket_cut``,
docs/calibration.md §5.193): Megatron-Core's greedy rule over a chunk's items in backward
order (output layer, each layer's MLP then its attention from the last layer, embedding); the
estimate's windows (first bucket's start, last bucket's parameters) in closed form, and its
form over plans equal to the list form the simulator reads, row by row."""
from __future__ import annotations

from itertools import product
from types import SimpleNamespace as NS

import numpy as np
import pytest

from simulator.program.grad_buckets import chunk_buckets
from strategies.cost.bucket_cut import chunk_cut, chunk_items, greedy_buckets, lead_tail
from strategies.estimate.terms.buckets import cut_windows

# a layer of 30 parameters whose MLP (its lead) holds 20; backward 3 s (attention core 0.5 s),
# recomputation 1 s, the MLP 60 % of the GEMM work outside the core
SC = NS(bucket_params=45.0, layer_params=30.0, layer_lead_params=20.0, layer_bwd=3.0,
        layer_recompute=1.0, attn_bwd=0.5, layer_lead_work=0.6)
T_LAYER = 4.0                                      # backward + recomputation
TAIL = (1.0 - 0.6) * (3.0 - 0.5) + 0.5             # the attention's backward after the MLP


def test_lead_tail_closed_form():
    assert lead_tail(2.5, 0.5, 0.6) == pytest.approx(TAIL, abs=1e-12)
    assert lead_tail(2.5, 0.5, 0.6, core=0.0) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("head,size,lead,last", [
    # two buckets: layer 2's MLP closes 20 + 10 + 20 = 50 >= 45, inside the second layer
    # from the end (its attention's backward, TAIL, still to run); then 10 + 20 + 10 and the
    # embedding: 90
    (0.0, 45.0, 2 * T_LAYER - TAIL, 90.0),
    # three: the output layer alone (60 >= 45, before the window), then as above
    (60.0, 45.0, 0.0, 90.0),
    # one: nothing fills 1000, the remainder (all 140) after the whole backward
    (0.0, 1000.0, 3 * T_LAYER, 140.0),
    # a bucket of 30: the last layer's MLP and attention (30 at its end), the next two
    # likewise, the embedding alone
    (0.0, 30.0, T_LAYER, 50.0),
])
def test_windows_in_closed_form(head, size, lead, last):
    sc = NS(**{**vars(SC), "bucket_params": size})
    got_lead, got_last = cut_windows(sc, 3.0, head, 50.0, 3 * T_LAYER)
    assert float(got_lead) == pytest.approx(lead, abs=1e-12)
    assert float(got_last) == pytest.approx(last, abs=1e-12)


def test_mtp_modules_precede_the_layers():
    """Two multi-token-prediction modules of 25 parameters, 2 s of backward each, whole
    items after the output layer: 25 + 25 = 50 closes with the second (at 4 s); the layers'
    then as ``test_windows_in_closed_form``'s first case from zero."""
    lead, last = cut_windows(SC, 3.0, 0.0, 50.0, 4.0 + 3 * T_LAYER, (25.0, 2.0, 2))
    assert float(lead) == pytest.approx(4.0, abs=1e-12)
    assert float(last) == pytest.approx(90.0, abs=1e-12)


def _list_form(size, head, layer, lead, n, tail, pre, pre_n):
    """(first closing item, last bucket) from the simulator's list form."""
    items = list(chunk_items(head, [(layer, lead)] * n, tail, [pre] * pre_n))
    buckets = greedy_buckets(items, size)
    first = buckets[0][0] if buckets[0][1] >= size else len(items)   # else the remainder
    return first, buckets[-1][1]


def test_form_over_plans_equals_the_list_form_row_by_row():
    rows = list(product((40.0, 128.0, 1e9), (0.0, 70.0), (30.0, 109.0), (0.25, 0.8),
                        (1, 2, 5), (0.0, 260.0), (0.0, 50.0)))
    cols = [np.array(c) for c in zip(*rows)]
    size, head, layer, share, n, tail, pre = cols
    first, last = chunk_cut(size, head, layer, share * layer, n, tail, pre, 1)
    for r, (s, h, lp, a, k, t, p) in enumerate(rows):
        f, la = _list_form(s, h, lp, a * lp, k, t, p, 1)
        # the embedding's close and the remainder are both "after the layers"
        end = 2 + 2 * k
        assert min(first[r], end) == min(f, end), rows[r]
        assert last[r] == la, rows[r]


def test_rows_whose_mixed_sums_collide_are_cut_apart():
    """Two plans whose columns' mixed sum is the same float are still cut each by its own
    values (the grouping is checked, and falls back to exact codes)."""
    a = np.array([100.0 + 3.14159, 100.0])        # bucket sizes
    h = np.array([0.0, 1.0])                      # heads: 100 + 1 x 3.14159 = the first's
    assert a[0] * 1.0 + h[0] * 3.14159 == a[1] * 1.0 + h[1] * 3.14159
    first, last = chunk_cut(a, h, 30.0, 20.0, 4, 0.0)
    for r in range(2):
        f, la = _list_form(a[r], h[r], 30.0, 20.0, 4, 0.0, 0.0, 0)
        assert (first[r], last[r]) == (min(f, 9), la)


def test_the_simulator_reads_the_same_cut():
    """``chunk_buckets``' last bucket is the estimate's (a chunk holding the embedding)."""
    c = NS(layer_params=SC.layer_params, head_params=0.0, embedding_params=50.0,
           bucket_params=SC.bucket_params)
    b = chunk_buckets(c, True, False, 3, leads=[SC.layer_lead_params] * 3)
    assert b.buckets == ((2, 50.0), (6, 90.0))
    assert float(cut_windows(SC, 3.0, 0.0, 50.0, 12.0)[1]) == b.buckets[-1][1]
