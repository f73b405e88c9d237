"""Transformer Engine's unfused attention rebuilds its causal mask on every forward call
(``get_full_mask``, docs/calibration.md §5.135): 81 HBM bytes per ``s_q × s_k`` position,
once per call whatever the batch and heads; forward (and a core-attention rerun) only;
nothing under FlashAttention or for a stack that builds no mask per call."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.cost.attention_time import attention_time_fwd
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.framework import PROFILES
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry, load_reference
from strategies.stacks.megatron import (MEGATRON_CORE, MEGATRON_LM_2021, NEMO,
                                        TE_CAUSAL_MASK_BYTES)
from topologies.gpus import get_gpu


def test_the_bytes_are_getfullmasks_passes() -> None:
    # int32 difference (w4); swa_left, swa_right (r4 w4 each); two comparisons (r4 w1) and
    # their int64 torch.where (r1 w8); the int64 difference (r16 w8); logical_not (r8 w1)
    writes = 4 + 4 + 4 + 1 + 8 + 1 + 8 + 8 + 1
    reads = 4 + 4 + 4 + 1 + 4 + 1 + 16 + 8
    assert TE_CAUSAL_MASK_BYTES == writes + reads == 81.0


def test_which_stacks_read_it() -> None:
    assert MEGATRON_CORE.unfused_mask_bytes == NEMO.unfused_mask_bytes == 81.0
    assert MEGATRON_LM_2021.unfused_mask_bytes == 0.0   # the loader's mask, built once
    for name, fw in PROFILES.items():
        if fw.te_linears:
            continue
        assert fw.unfused_mask_bytes == 0.0, name


@pytest.mark.parametrize("gpu", ["gb200", "h100", "a100"])
@pytest.mark.parametrize("b,tp", [(1, 1), (1, 2), (4, 8)])
def test_forward_pays_the_mask_once_per_call(gpu: str, b: int, tp: int) -> None:
    m = model_preset("llama3-8b")
    g = get_gpu(gpu)
    s = m.seq_length
    with_f, with_b = attention_time_fwd(m, b, tp, 1, False, g, fw=NEMO)
    none_f, none_b = attention_time_fwd(m, b, tp, 1, False, g,
                                        fw=replace(NEMO, unfused_mask_bytes=0.0))
    assert with_f - none_f == pytest.approx(81.0 * s * s / usable_hbm(g), rel=1e-12)
    assert with_b == none_b
    # FlashAttention keeps its mask on chip: nothing
    assert attention_time_fwd(m, b, tp, 1, True, g, fw=NEMO) == \
        attention_time_fwd(m, b, tp, 1, True, g, fw=replace(NEMO, unfused_mask_bytes=0.0))


def test_deepseek_gb200_rows_pay_it_in_the_forward_and_the_core_attention_rerun() -> None:
    rows = load_reference("strategies/reference/data/dgxc_2505.json")
    e = next(r for r in rows if r["id"] == "dgxc2505_deepseek_v3_671b_gb200_256_bf16")
    job = case_from_entry(e, rows).job
    assert job.plan.flash_attn is False and job.framework.name == "nemo"
    bare = replace(job, framework=replace(job.framework, unfused_mask_bytes=0.0))
    a, z = stage_costs(job).by_kind["moe"], stage_costs(bare).by_kind["moe"]
    t = 81.0 * 4096 ** 2 / usable_hbm(job.cluster.gpu, job.system)
    assert a.attn_fwd - z.attn_fwd == pytest.approx(t, rel=1e-9)
    assert a.layer_recompute - z.layer_recompute == pytest.approx(t, rel=1e-9)   # core_attn
    assert a.attn_bwd == z.attn_bwd
    assert 1.5e-4 < t < 2.5e-4   # 1.36 GB at GB200's HBM: about 0.2 ms a call


@pytest.mark.parametrize("bad", [-1.0, 100.0, True, "81"])
def test_bad_mask_bytes(bad: object) -> None:
    with pytest.raises(SpecError, match="framework.unfused_mask_bytes"):
        replace(MEGATRON_CORE, unfused_mask_bytes=bad)
