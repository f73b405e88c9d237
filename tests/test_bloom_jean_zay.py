"""experiments/bloom_jean_zay.py (docs/calibration.md §3.25): the all_reduce_bench bus
bandwidth is the script's own formula, the model prices the bench's collective far faster than
it ran, and the one-node checks are estimated with and without synchronous launches."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "experiments"))

import bloom_jean_zay as bj  # noqa: E402


def test_bench_bus_bandwidth_closed_form():
    # all_reduce_bench.py: busbw = size / duration * 2(n - 1)/n, 4 GB over 32 ranks
    assert bj.bench_busbw(1.525) == pytest.approx(4e9 / 1.525 * 62 / 32, rel=1e-12)
    r = bj.bench_rows()
    assert r["measured_busbw"] == pytest.approx(5.08e9, rel=0.01)
    assert r["per_channel"] == pytest.approx(r["measured_busbw"] / 2, rel=1e-12)
    # the model's striped ring over 4 NICs per node is far faster than NCCL's 2 channels ran
    assert r["model_s"] < r["measured_s"] / 5
    # a data-parallel ring of one GPU per node is priced at about the measured rate
    assert r["dp_ring_rate"] == pytest.approx(r["measured_busbw"], rel=0.15)


def test_one_node_checks():
    rows = bj.one_node_rows()
    assert len(rows) == len(bj.ONE_NODE)
    for label, date, meas, t_async, t_sync in rows:
        assert 0 < t_async < t_sync           # synchronous launches only add
        assert t_sync < meas, label           # every one-node check is still too fast


def test_tables_print(capsys):
    bj.main()
    out = capsys.readouterr().out
    assert out.count("## ") == 4 and "all_reduce_bench-a100-n4.txt" in out
