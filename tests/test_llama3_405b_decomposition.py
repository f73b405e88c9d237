"""experiments/llama3_405b_decomposition.py (docs/calibration.md §5.62): the measured steps of
Llama 3 405B's Table 4 rows invert PaLM's count of the config, the tile count behind the claim
that a document mask cannot slow the model's balanced CP rank, and the 8K pair's bubble."""
from __future__ import annotations

import numpy as np
import pytest

from experiments import llama3_405b_decomposition as d
from strategies.cost.attention_counts import score_elements

ROWS = d._rows()


def test_measured_step_inverts_palm_count_of_the_config() -> None:
    """The reader's step is the paper's TFLOP/s through 6N + 12LHQT (N every GEMM weight but
    the input embedding), counted here from the entry's shapes alone."""
    got = d.flop_count(ROWS)
    assert [r[0] for r in got] == list(d.IDS)
    for _, reader, palm in got:
        assert reader == pytest.approx(palm, rel=1e-12)


@pytest.mark.parametrize("s,cp", [(131072, 16), (8192, 2), (4096, 4), (65536, 8)])
def test_llama3_cp_split_balances_causal_tiles_exactly(s: int, cp: int) -> None:
    """Rank i's chunks i and 2·cp-1-i hold the same causal tiles on every rank, the model's
    s²·causal_fraction(s)/cp per rank (the count its attention time reads)."""
    per = [d.cp_rank_blocks(s, cp, r) for r in range(cp)]
    assert len(set(per)) == 1
    assert per[0] * cp == score_elements(s, mode="kernel") / d.BLOCK ** 2


def _tiles_brute(seq: int, cp: int, rank: int, docs: np.ndarray, block: int) -> int:
    """Tiles with at least one pair a causal document mask keeps, from the element mask."""
    chunk = seq // (2 * cp)
    q = np.concatenate([np.arange(c * chunk, (c + 1) * chunk) for c in (rank, 2 * cp - 1 - rank)])
    k = np.arange(seq)
    keep = (k[None, :] <= q[:, None]) & (docs[k][None, :] == docs[q][:, None])
    tiles = keep.reshape(q.size // block, block, seq // block, block).any(axis=(1, 3))
    return int(tiles.sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_document_mask_tiles_match_element_mask_and_never_exceed_causal(seed: int) -> None:
    seq, cp, block = 2048, 2, 64
    rng = np.random.default_rng(seed)
    docs = d.doc_ids(seq, list(rng.integers(1, 400, size=seq)))
    for r in range(cp):
        got = d.cp_rank_blocks(seq, cp, r, docs, block)
        assert got == _tiles_brute(seq, cp, r, docs, block)
        assert got <= d.cp_rank_blocks(seq, cp, r, None, block)
    # one document: the causal mask itself
    one = np.zeros(seq, dtype=int)
    assert [d.cp_rank_blocks(seq, cp, r, one, block) for r in range(cp)] == \
        [d.cp_rank_blocks(seq, cp, r, None, block) for r in range(cp)]


def test_cp_rank_blocks_rejects_a_sequence_the_split_cannot_tile() -> None:
    with pytest.raises(ValueError, match="multiple of"):
        d.cp_rank_blocks(1000, 2, 0)


def test_eight_k_bubble_does_not_depend_on_microbatches() -> None:
    """(PP-1)/(V·M) of M micro-batches is the same seconds at M 32 and 16: the model's bubble
    is too, so the 8K pair's throughput ratio is not a bubble effect."""
    k = d.eight_k(ROWS)
    a, b = k["rows"]
    assert (a["M"], b["M"]) == (32, 16) and (a["dp"], b["dp"]) == (64, 128)
    assert a["bubble"] == pytest.approx(b["bubble"], rel=1e-9)
    assert a["paper_bubble"] == pytest.approx(b["paper_bubble"], rel=1e-12)
    # per-GPU throughput of 8,192 GPUs over 16,384: the TFLOP/s columns' 430/400 (same
    # tokens and FLOPs per step)
    assert k["ratio_measured"] == pytest.approx(430 / 400, rel=1e-12)
    assert k["ratio_est"] > k["ratio_measured"]
