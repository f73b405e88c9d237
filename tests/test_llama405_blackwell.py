"""experiments/llama405_blackwell.py (docs/calibration.md §5.61): one layer's kernel classes sum
to ``layer_time.layer_time`` exactly, and the two-row split reproduces both rows' measured layer
time."""
import pytest

from experiments.llama405_blackwell import (LAYER_ROWS, PAIRS, cases, layer_parts,
                                            measured_layer, split)


@pytest.fixture(scope="module")
def cs():
    return cases()


def test_layer_parts_sum_to_layer_time(cs):
    for rid in LAYER_ROWS:
        p = layer_parts(cs[rid].job)
        parts = p["gemm"] + p["attention"] + p["casts"] + p["elementwise"] + p["launch"] \
            + p["accumulation"]
        assert parts == pytest.approx(p["total"], rel=1e-12)
        assert p["gemm"] > 0.7 * p["total"]      # GEMMs dominate every decomposed layer


def test_split_reproduces_both_rows(cs):
    for a, b in PAIRS:
        x, y = split(cs[a], cs[b])
        for rid in (a, b):
            p = layer_parts(cs[rid].job)
            want = measured_layer(cs[rid])[2]
            assert x * p["gemm"] + y * (p["total"] - p["gemm"]) == pytest.approx(want, rel=1e-9)
        assert split(cs[a], cs[b]) == (x, y)     # deterministic
