"""DeepSeek-V3 in NVIDIA's DGX Cloud 25.05 recipes (docs/calibration.md §5.44): what NeMo's
performance script ran, written into dgxc_2505.json's rows by experiments/transcribe_dgxc.py
and read back by the reference reader (the unfused attention on GB200, the recomputed module,
TP overlap off, one MTP layer with the script's first/last stage layer counts); the unfused
attention path's score bytes without dropout (8 forward, 14 backward per element, closed form);
a row's stated first/last stage layer counts."""
from __future__ import annotations

import copy
import os
from dataclasses import replace

import pytest

from experiments import transcribe_dgxc as td
from strategies.cost import attention_counts
from strategies.cost.attention_time import attention_time_fwd
from strategies.cost.hbm_rate import usable_hbm
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry, load_reference
from topologies.gpus import get_gpu

DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                    "dgxc_2505.json")


def _rows():
    rows = load_reference(DATA)
    return rows, {r["id"]: r for r in rows if "_deepseek_v3_" in r["id"]}


def test_the_rows_state_what_the_script_ran():
    _, ds = _rows()
    assert len(ds) == 5
    for rid, r in ds.items():
        pl, gpu = r["plan"], ("GB200" if "gb200" in rid else "H100")
        assert pl["recompute_modules"] == [td.DS_RECOMPUTE[gpu][0]]
        assert pl["tp_comm_overlap"] is False
        mid = 64 // pl["pp"]
        assert (pl["first_stage_layers"], pl["last_stage_layers"]) == (mid - 1, mid - 2)
        # the script's split holds the 61 layers: first + middle stages x 64/pp + last
        assert pl["first_stage_layers"] + (pl["pp"] - 2) * mid + pl["last_stage_layers"] == 61
        assert r["model"]["hf_config"]["num_nextn_predict_layers"] == 1
        assert ("flash_attn" in pl) == (gpu == "GB200")
        assert "7a8f1cc7bc40" in r["notes"]
        if gpu == "GB200":
            assert pl["flash_attn"] is False
            assert "head_dim_qk > 128" in r["notes"] and "UnfusedDotProductAttention" in r["notes"]
    # the shared model mapping is not changed by a row (published_2026.json's config)
    assert td.MODELS[("deepseek_v3", "671b")]["hf_config"]["num_nextn_predict_layers"] == 0


def test_the_reader_yields_the_stated_facts():
    rows, ds = _rows()
    for rid, r in ds.items():
        job = case_from_entry(r, rows).job
        p, m = job.plan, job.model
        assert p.flash_attn is ("gb200" not in rid)
        assert p.tp_comm_overlap is False
        assert p.recompute == "selective"
        assert p.recompute_modules == tuple(r["plan"]["recompute_modules"])
        assert (p.first_stage_layers, p.last_stage_layers) == (
            r["plan"]["first_stage_layers"], r["plan"]["last_stage_layers"])
        assert m.num_layers == 61 and m.num_nextn_predict_layers == 1
        assert m.dropout is False


def test_stated_stage_layers_replace_the_balanced_split():
    rows, ds = _rows()
    r = copy.deepcopy(ds["dgxc2505_deepseek_v3_671b_gb200_128_bf16"])
    c = case_from_entry(r, rows)
    assert any(a.startswith("first_stage_layers=15, last_stage_layers=14") for a in c.assumptions)
    del r["plan"]["first_stage_layers"], r["plan"]["last_stage_layers"]
    r["model"]["hf_config"]["num_nextn_predict_layers"] = 0
    balanced = case_from_entry(r, rows)
    assert balanced.job.model.num_layers == 64 and balanced.job.plan.first_stage_layers is None


def test_score_bytes_without_dropout():
    drop = model_preset("gpt3-175b")
    assert drop.dropout
    assert attention_counts.score_bytes(drop) == (attention_counts.SCORE_BYTES_FWD,
                                                  attention_counts.SCORE_BYTES_BWD)
    # forward: QK^T writes 2, softmax reads and writes 2 + 2, AV reads 2; backward: dP
    # written 2, P read for dV 2, softmax back 2 + 2 + 2, dS read for dQ and dK 2 + 2
    assert attention_counts.score_bytes(replace(drop, dropout=False)) == (
        2 + 2 + 2 + 2, (2 + 2) + (2 + 2 + 2) + (2 + 2))


@pytest.mark.parametrize("gpu,tp", [("gb200", 2), ("h100", 2), ("a100", 8)])
def test_unfused_attention_closed_form_without_dropout(gpu, tp):
    g = get_gpu(gpu)
    m = model_preset("deepseek-v3")
    assert not m.dropout and m.head_dim == 192 and m.v_dim == 128
    elems = m.num_attention_heads * m.seq_length ** 2 / tp
    hbm = usable_hbm(g)
    assert attention_counts.softmax_bytes_fwd(m, 1, tp, 1, False) == pytest.approx(8 * elems,
                                                                                   rel=1e-12)
    assert attention_counts.softmax_bytes_bwd(m, 1, tp, 1, False) == pytest.approx(14 * elems,
                                                                                   rel=1e-12)
    f, b = attention_time_fwd(m, 1, tp, 1, False, g, fw=MEGATRON_CORE)
    # the GEMMs' backward is twice their forward; the score bytes are 14 against 2 x 8; the
    # forward also rebuilds Transformer Engine's causal mask (§5.135), once for all heads
    mask = MEGATRON_CORE.unfused_mask_bytes * m.seq_length ** 2
    assert b - 2 * f == pytest.approx(((14 - 16) * elems - 2 * mask) / hbm, rel=1e-9)
    # the same model trained with dropout pays the dropout's 5 + 5 bytes more
    fd, bd = attention_time_fwd(replace(m, dropout=True), 1, tp, 1, False, g, fw=MEGATRON_CORE)
    assert fd - f == pytest.approx(5 * elems / hbm, rel=1e-9)
    assert bd - b == pytest.approx(5 * elems / hbm, rel=1e-9)
    # FlashAttention: no score bytes either way
    assert attention_time_fwd(m, 1, tp, 1, True, g, fw=MEGATRON_CORE) == \
        attention_time_fwd(replace(m, dropout=True), 1, tp, 1, True, g, fw=MEGATRON_CORE)


def test_the_what_if_removes_and_restores_the_facts():
    from experiments import dgxc_deepseek_facts as wf
    rows, ds = _rows()
    r = ds["dgxc2505_deepseek_v3_671b_gb200_128_bf16"]
    assert wf.with_facts(r, len(wf.STEPS) - 1) == r          # every fact kept: the row itself
    bare = wf.with_facts(r, 0)
    assert not {"recompute_modules", "tp_comm_overlap", "first_stage_layers",
                "last_stage_layers", "flash_attn"} & set(bare["plan"])
    assert bare["model"]["hf_config"]["num_nextn_predict_layers"] == 0
    assert r["plan"]["flash_attn"] is False                   # the row is not mutated
    # the unfused attention is the only fact that lengthens the GB200 step by seconds
    fused, unfused = (wf.step_s(wf.with_facts(r, k), rows) for k in (3, 4))
    assert unfused - fused > 5.0
    with wf.dropout_bytes_charged():
        charged = wf.step_s(r, rows)
    assert charged > unfused
    assert attention_counts.DROPOUT_SCORE_BYTES_FWD == attention_counts.DROPOUT_SCORE_BYTES_BWD \
        == 5.0   # restored
