"""The FP8 twins (docs/calibration.md §5.184, ``experiments/fp8_twins.py``): which rows pair,
the stack they are read to have run, and the model's decomposition of the saving."""
from __future__ import annotations

import copy
import functools
import os

import numpy as np
import pytest

from experiments import fp8_twins as t
from strategies.reference.cases import case_from_entry, load_reference

GROK_BF16 = "dgxc2504_grok1_314b_h100_512_bf16"
GROK_FP8 = "dgxc2504_grok1_314b_h100_512_fp8"


@functools.lru_cache(maxsize=1)
def dgxc_rows() -> list[dict]:
    return load_reference(os.path.join(t.DATA, "dgxc_2505.json"))


def _row(rid: str) -> dict:
    return copy.deepcopy(next(r for r in dgxc_rows() if r["id"] == rid))


def _pairs(rows: list[dict]) -> list[tuple[str, str]]:
    cases = [case_from_entry(r, rows) for r in rows]
    return [(b.id, q.id) for b, q in t.pairs_of(rows, cases)]


def test_fixture_pairs_only_the_twin():
    bf, fp = _row(GROK_BF16), _row(GROK_FP8)
    other_tp = _row(GROK_FP8)                       # a plan field differs: not a twin
    other_tp["id"], other_tp["plan"]["tp"], other_tp["plan"]["dp"] = "x_tp", 8, 4
    other_box = _row(GROK_FP8)                      # another source's run: not a twin
    other_box["id"] = "x_box"
    other_box["source"]["ref"] = "another harness"
    unmeasured = _row(GROK_FP8)                     # no measured step: left out
    unmeasured["id"] = "x_nomeas"
    del unmeasured["measured"]
    assert _pairs([bf, fp, other_tp, other_box, unmeasured]) == [(GROK_BF16, GROK_FP8)]


def test_quantised_twins_pair_by_order():
    fp = _row(GROK_FP8)
    mx = _row(GROK_FP8)                   # the same job in FP8 current scaling
    mx["id"], mx["precision"] = "x_cs", "fp8-current"
    bf = _row(GROK_BF16)
    # bf16 is every quantised row's base; fp8 (delayed) the base of fp8 current scaling
    assert sorted(_pairs([mx, fp, bf])) == sorted([(GROK_BF16, GROK_FP8), (GROK_BF16, "x_cs"),
                                                   (GROK_FP8, "x_cs")])


def test_key_ignores_only_the_precision_fields():
    rows = dgxc_rows()
    a = case_from_entry(_row(GROK_BF16), rows).job
    b = case_from_entry(_row(GROK_FP8), rows).job
    assert a.dtype != b.dtype and t.twin_key(a) == t.twin_key(b)
    c = _row(GROK_FP8)
    c["plan"]["global_batch"] = 2048
    assert t.twin_key(case_from_entry(c, rows).job) != t.twin_key(b)


def test_stack_reads_the_container_else_the_id_release():
    assert t.stack_of(_row(GROK_FP8)).endswith("| nvcr.io/nvidia/nemo:24.12")
    assert t.stack_of({"id": "mbridge260401_llama370b_gb300_64_fp8",
                       "source": {"ref": "r"}}) == "r | mbridge260401"
    assert t.stack_of({"id": "torchtitan_2506_8b_64gpu_bf16_tp",
                       "source": {"ref": "r"}}) == "r | torchtitan_2506"


def test_file_pairs_keep_containers_apart():
    ids = {(b.id, q.id) for b, q in t.file_pairs("dgxc_2505.json")}
    assert (GROK_BF16, GROK_FP8) in ids
    assert ("dgxc2505_llama4_400b_h100_512_bf16", "dgxc2505_llama4_400b_h100_512_fp8") in ids
    # the same job in NeMo 25.04 (bf16) and 24.12 (fp8) is two stacks
    assert ("dgxc2505_llama31_405b_h100_512_bf16", "dgxc2504_llama31_405b_h100_512_fp8") \
        not in ids
    assert all(q in {x for _, x in ids} for q in t.LAUNCH_DIFFERS)


@functools.lru_cache(maxsize=2)
def record(bf: str, fp: str) -> dict:
    rows = dgxc_rows()
    return t.pair_record("dgxc_2505.json", case_from_entry(_row(bf), rows),
                         case_from_entry(_row(fp), rows))


def test_gemm_parts_sum_to_the_layer_gemms():
    rows = dgxc_rows()
    job = case_from_entry(_row(GROK_FP8), rows).job
    r = t.layer_record(job)
    assert sum(t.gemm_by_part(r).values()) == pytest.approx(t.layer_terms(job, r)["GEMM"],
                                                            rel=1e-12)
    assert set(t.gemm_by_part(r)) == {"attn", "routed_mlp"}


def test_dense_pair_compute_saving_is_all_in_the_recorded_terms():
    """A dense NeMo twin: the layer terms account for the whole compute saving (the output
    layer stays bf16 in both), and the saving is the GEMMs' less the casts and amax."""
    r = record("dgxc2505_nemotron_340b_h100_256_bf16", "dgxc2505_nemotron_340b_h100_256_fp8")
    assert abs(r["d_layer"]["other"]) < 1e-6
    assert r["d_layer"]["GEMM"] > 0 > r["d_layer"]["casts"]
    assert r["d_layer"]["quantise launches"] == 0.0     # no experts


def test_grok_h100_twin_figures():
    r = record(GROK_BF16, GROK_FP8)
    assert r["m_ratio"] == pytest.approx(21.01 / 16.90, rel=1e-12)
    assert r["quot"] == pytest.approx(r["e_ratio"] / r["m_ratio"], rel=1e-12)
    # the estimate's saving is its step terms' savings summed
    assert sum(r["d_step"].values()) == pytest.approx(r["est"][0] - r["est"][1], rel=1e-9)
    # the finding: the model credits fp8 with more than the pair measured, and the gap is a
    # fraction of the experts' modelled GEMM saving
    assert r["quot"] > 1.03
    assert 0 < r["gap"] < r["d_gemm"]["routed_mlp"]


def test_grok_expert_shapes_are_the_rows():
    """Table 6b's shapes are the Grok-1 H100 rows' routed GEMMs (24.12 at etp 4, 25.04 at 1)."""
    rows = dgxc_rows()
    got = []
    for rid in (GROK_FP8, "dgxc2505_grok1_314b_h100_512_fp8"):
        r = t.layer_record(case_from_entry(_row(rid), rows).job)
        got += [tuple(int(np.ravel(x)[0]) for x in g[1:4]) for p, g in r["layer_gemm_parts"]
                if p == "routed_mlp" and np.ravel(g[2])[0] > 64]      # the router left out
    assert tuple(got) == t.GROK_EXPERT_GEMMS
