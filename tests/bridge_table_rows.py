"""A check shared by the tests of the files transcribed from Megatron-Bridge's performance
tables (``heldout_2026c.json``, ``heldout_2026d.json``, ``heldout_2026e.json``)."""
from __future__ import annotations

import copy
import json
import os
from types import ModuleType
from typing import Any

import pytest

from experiments.transcribe_heldout_2026b import dump
from strategies.reference.cases import Case, case_from_entry, load_reference

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
#: the Megatron-Bridge clone the source-reading tests read, where the machine has one
MIRROR = "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"


def transcribed(tr: ModuleType) -> tuple[list[dict], dict[str, dict], dict[str, Any]]:
    """A held-out transcriber's data file's rows (``tr.OUT``), the same by id, and the inputs
    the repository keeps for it (``tr.INPUTS``)."""
    rows = load_reference(os.path.join(ROOT, tr.OUT))
    with open(os.path.join(ROOT, tr.INPUTS), encoding="utf-8") as f:
        return rows, {r["id"]: r for r in rows}, json.load(f)


def assert_writes_data_file(tr: ModuleType, inputs: dict[str, Any]) -> None:
    """``tr.transcribe`` of (a copy of) the kept inputs is ``tr.OUT``, byte for byte."""
    with open(os.path.join(ROOT, tr.OUT), encoding="utf-8") as f:
        assert dump(tr.transcribe(copy.deepcopy(inputs))) == f.read()


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


def assert_builds_its_plan(r: dict, rows: list[dict]) -> Case:
    """Row ``r`` (of ``rows``) builds a job whose parallel sizes, batches, virtual stages and
    ZeRO stage are the row's plan and whose measured step is the row's; the case."""
    case = case_from_entry(r, rows)
    assert not case.skipped, (r["id"], case.skipped)
    pl, p = r["plan"], case.job.plan
    assert (p.tp, p.pp, p.dp, p.cp, p.ep, p.mbs, p.gbs, p.vpp) == (
        pl["tp"], pl["pp"], pl["dp"], pl["cp"], pl["ep"], pl["microbatch"],
        pl["global_batch"], pl["virtual_stages"])
    assert case.measured_step_s == pytest.approx(r["derived"]["step_time_s"], rel=1e-4)
    assert p.zero == 3 if pl["zero_stage"] == 3 else p.zero in (0, 1)
    return case
