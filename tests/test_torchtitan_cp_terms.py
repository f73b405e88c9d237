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
