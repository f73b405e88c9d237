"""``experiments/torchtitan_cp_terms.py`` (docs/calibration.md §5.186): the what-if that zeroes
one of PyTorch's ring terms restores it, and the layer passes it reads off the estimate are
the plan's own."""
from __future__ import annotations

from experiments import torchtitan_cp_terms as tct
from strategies.cost import ring_attention as ring


def test_zeroed_restores_and_zeroes():
    """Inside the block the function returns zeros (two for the stalls); after it, itself."""
    saved = ring.merge_bytes_fwd, ring.torch_ring_stalls
    with tct.zeroed("merge_bytes_fwd"), tct.zeroed("torch_ring_stalls"):
        assert ring.merge_bytes_fwd() == 0.0
        assert ring.torch_ring_stalls() == (0.0, 0.0)
    assert (ring.merge_bytes_fwd, ring.torch_ring_stalls) == saved


def test_layer_passes_of_the_8b_cp2_row():
    """Llama 3.1 8B at cp 2, one micro-batch, full recomputation, no pipeline: the merge's
    step seconds are its layer seconds times 2·32 forward passes (the forward and its rerun)
    and the accumulation's times 32 backward passes; the terms add up to the step."""
    r = tct.row_terms(tct.cases()["torchtitan_2412_8B_t2_cp2"])
    assert abs(r["passes_f"] - 64.0) < 1e-6
    assert abs(r["passes_b"] - 32.0) < 1e-6
    assert r["merge"] > 0.0 and r["accum"] > 0.0 and r["exchange"] > 0.0


def test_affine_floor_closed_forms():
    """Steps on a line t(1) + d + B(c-1) are fitted exactly (e = 0, d and B recovered); steps
    all below t(1) can do no better than d = B = 0, e = (t(1) - m)/m."""
    e, d, b = tct.affine_floor(10.0, (2, 4, 8), [10.0 + 1.5 + 2.0 * (c - 1) for c in (2, 4, 8)])
    assert abs(e) < 1e-12 and abs(d - 1.5) < 1e-9 and abs(b - 2.0) < 1e-9
    e, d, b = tct.affine_floor(10.0, (2, 4, 8), [5.0, 5.0, 5.0])
    assert abs(e - 1.0) < 1e-12 and abs(d) < 1e-12 and abs(b) < 1e-12
