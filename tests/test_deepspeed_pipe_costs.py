"""Megatron-DeepSpeed (BLOOM) fidelity: what the reference reader fills for the BLOOM rows and
the closed forms of the costs DeepSpeed's pipeline engine adds (docs/calibration.md)."""
from __future__ import annotations

from strategies.framework import get_profile
from strategies.reference.cases import case_from_entry, load_reference


def _rows():
    data = load_reference()
    return data, {c["id"]: c for c in data}


def test_vocab_from_a_sibling_row_of_the_same_source():
    """The ZeRO-0/1 rows of BLOOM's chronicles do not restate the vocabulary; the 02-21 rows of
    the same document and model do ('Vocab ~250k'), so the reader takes it from them."""
    data, by_id = _rows()
    row = by_id["bloom_prequel_181B_zero1"]
    assert not row["model"]["vocab"]
    alone = case_from_entry(row)
    assert alone.job is None and "vocab_size" in alone.skipped
    case = case_from_entry(row, data)
    assert case.job is not None and case.job.model.vocab_size == 250000
    assert any("stated for the same model by bloom_prequel_181B_dp4_pp12_mbs1" in a
               for a in case.assumptions)


def test_sibling_vocab_needs_the_same_source_and_model():
    data, by_id = _rows()
    row = dict(by_id["bloom_prequel_181B_zero0"])
    row["source"] = dict(row["source"], ref="another document")
    assert case_from_entry(row, data).job is None
    row = dict(by_id["bloom_prequel_181B_zero0"])
    row["model"] = dict(row["model"], name="another model")
    assert case_from_entry(row, data).job is None


def test_deepspeed_rows_have_no_sequence_parallelism():
    """bigscience-workshop/Megatron-DeepSpeed predates Megatron-LM's --sequence-parallel: an
    unstated sp is off under the megatron-deepspeed profile (on for Megatron-Core)."""
    data, by_id = _rows()
    assert get_profile("megatron-deepspeed").sequence_parallel is False
    case = case_from_entry(by_id["bloom_prequel_181B_zero0"], data)
    assert case.job.plan.sp is False
    assert "sp=false (not stated)" in case.assumptions
