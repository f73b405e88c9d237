"""A check shared by the tests of the files transcribed from Megatron-Bridge's performance
tables (``heldout_2026c.json``, ``heldout_2026d.json``, ``heldout_2026e.json``)."""
from __future__ import annotations

import pytest


def assert_table_row(r: dict, head: str = "| DGX-") -> None:
    """Row ``r`` holds its table cell of tokens/s/GPU, its parallel sizes multiply to its GPUs,
    its batch to micro-batch x dp x accumulation, and its step is gbs x seq / (tokens/s/GPU x
    GPUs) to the 4 decimals written; the row as the table writes it begins with ``head`` (the
    system, or the model in the 25.11 and 25.09 tables' per-system layout)."""
    assert r["kind"] == "measured" and r["tier"] == 2
    assert r["source"]["row"].startswith(head)
    assert str(r["measured"]["tokens_per_s_per_gpu"]) in r["source"]["row"]
    pl, n = r["plan"], r["hardware"]["n_gpus"]
    assert pl["tp"] * pl["pp"] * pl["cp"] * pl["dp"] == n
    assert pl["global_batch"] == pl["microbatch"] * pl["dp"] * pl["grad_accum"]
    step = pl["global_batch"] * r["model"]["seq_len"] / (
        r["measured"]["tokens_per_s_per_gpu"] * n)
    assert r["derived"]["step_time_s"] == pytest.approx(step, abs=5e-5)
