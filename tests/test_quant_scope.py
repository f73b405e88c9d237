"""Megatron-Bridge's Nemotron 3 Super NVFP4 recipe narrowed to the GEMMs it quantises
(``strategies.cost.quant_scope``, docs/calibration.md §5.155), and AutoModel's hybrid layer's
memory-bound kernels (``elementwise_bytes.eager_hybrid_bytes_fwd``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from strategies.cost import elementwise_bytes as eb
from strategies.cost import gemm_shapes, quantise
from strategies.cost.gemm_time import gemm_units, units_in
from strategies.cost.mamba_mixer import mixer_elementwise_bytes_fwd
from strategies.cost.quant_scope import (NEMOTRON3_SUPER_NVFP4, gemm_formats, quantised_layers,
                                         scope_formats)
from strategies.cost.system import SystemConfig
from strategies.errors import SpecError
from strategies.presets import model_preset
from strategies.reference.perf_harness import stated_quant_scope
from topologies.gpus import get_gpu

SUPER = model_preset("nemotron3-super")
NANO = model_preset("nemotron3-nano-30b-a3b")
REL = 1e-12


def _share(pattern: str, ch: str, end: int) -> float:
    """The quantised share of ``ch`` layers: those before the last ``end``, over all."""
    return pattern[:len(pattern) - end].count(ch) / pattern.count(ch)


def test_quantised_layers_are_the_pattern_before_the_bf16_end():
    p = SUPER.hybrid_pattern
    assert len(p) == SUPER.num_layers == 88
    for kind, ch in (("mamba", "M"), ("attention", "*"), ("moe", "E")):
        got = quantised_layers(SUPER, NEMOTRON3_SUPER_NVFP4, kind)
        assert got == pytest.approx(_share(p, ch, 14), rel=REL)
    # the last 14 characters hold 7 E, 6 M and one *: the shares differ by kind
    assert quantised_layers(SUPER, NEMOTRON3_SUPER_NVFP4, "moe") < 1.0
    assert quantised_layers(SUPER, NEMOTRON3_SUPER_NVFP4, "dense") == 1.0   # none in Super


def test_a_kinds_view_counts_its_models_layers():
    # the per-kind views (``of_kind``) repeat one character; the BF16 end is the model's
    for kind in ("mamba", "attention", "moe"):
        v = SUPER.of_kind(kind)
        assert set(v.hybrid_pattern) == {v.hybrid_pattern[0]}
        assert quantised_layers(v, NEMOTRON3_SUPER_NVFP4, kind) == \
            quantised_layers(SUPER, NEMOTRON3_SUPER_NVFP4, kind)
    assert SUPER.of_kind("moe").source_pattern == SUPER.hybrid_pattern


def test_gemm_formats_by_module():
    q_m = _share(SUPER.hybrid_pattern, "M", 14)
    q_e = _share(SUPER.hybrid_pattern, "E", 14)
    s = NEMOTRON3_SUPER_NVFP4
    assert gemm_formats(SUPER, s, "attn", False, "nvfp4") == {"bf16": 1.0}
    assert gemm_formats(SUPER, s, "attn", True, "nvfp4") == {"bf16": 1.0}
    out = gemm_formats(SUPER, s, "mamba", True, "nvfp4")      # out_proj: MXFP8
    assert set(out) == {"bf16", "mxfp8"} and out["mxfp8"] == pytest.approx(q_m, rel=REL)
    inp = gemm_formats(SUPER, s, "mamba", False, "nvfp4")     # in_proj: NVFP4
    assert set(inp) == {"bf16", "nvfp4"} and inp["nvfp4"] == pytest.approx(q_m, rel=REL)
    ex = gemm_formats(SUPER, s, "routed_mlp", False, "nvfp4")
    assert ex["nvfp4"] == pytest.approx(q_e, rel=REL) and sum(ex.values()) == pytest.approx(1)
    assert gemm_formats(SUPER, s, "routed_mlp", None, "nvfp4") == {"nvfp4": 1.0}  # router
    assert gemm_formats(SUPER, None, "attn", False, "nvfp4") == {"nvfp4": 1.0}
    assert gemm_formats(SUPER, s, "attn", False, "bf16") == {"bf16": 1.0}


def test_gemm_units_blend_each_gemm_by_its_formats():
    gpu = get_gpu("GB300")
    parts = gemm_shapes.layer_gemm_parts(SUPER, 1, 1, 1, 64)
    gemms = [g for _, g in parts]
    fm = scope_formats(parts, SUPER, 1.0, "nvfp4")
    assert scope_formats(parts, SUPER, 0.0, "nvfp4") is None
    got = gemm_units(gemms, 1, gpu, "nvfp4", formats=fm)
    by = {d: units_in(gemms, 1, gpu, d) for d in ("bf16", "nvfp4", "mxfp8")}
    for i, f in enumerate(fm):
        for j in (1, 3, 4):
            want = sum(s * float(by[d][i][j]) for d, s in f.items())
            assert float(got[i][j]) == pytest.approx(want, rel=REL)
        assert got[i][0] == by["nvfp4"][i][0] and got[i][2] == by["nvfp4"][i][2]
    # the attention's GEMMs are priced in BF16 alone, slower than in NVFP4
    a = next(i for i, (p, _) in enumerate(parts) if p == "attn")
    assert float(got[a][1]) == pytest.approx(float(by["bf16"][a][1]), rel=REL)
    assert float(got[a][1]) > float(by["nvfp4"][a][1])


def test_cast_elements_under_the_scope_closed_form():
    m, b, T = SUPER, 1, SUPER.seq_length
    q_m = _share(m.hybrid_pattern, "M", 14)
    q_e = _share(m.hybrid_pattern, "E", 14)
    sm, se = m.mamba_share, m.layer_shares()["moe"]
    h, k, F, he = m.hidden_size, m.moe_router_topk, m.expert_ffn, m.expert_hidden
    Fs = m.num_shared_experts * m.shared_ffn
    up = 2 if m.gated else 1
    w_in, di = m.mamba_in_proj_width, m.mamba_d_inner
    f_fused = sm * q_m * T * h + se * q_e * (k * T * F + T * h + T * Fs)
    f_un = sm * q_m * T * di + se * q_e * k * T * he
    b_fused = se * q_e * (k * T * up * F + T * up * Fs)
    b_un = sm * q_m * T * (w_in + h) + se * q_e * (k * T * he + T * h)
    (ff, fu), (bf, bu) = quantise.layer_cast_elements(m, b, 1, 1, False, scope=1.0)
    for got, want in ((ff, f_fused), (fu, f_un), (bf, b_fused), (bu, b_un)):
        assert float(got) == pytest.approx(want, rel=REL)
    # without the scope every layer and the attention cast too
    (ff0, fu0), _ = quantise.layer_cast_elements(m, b, 1, 1, False)
    assert float(ff0) > float(ff) and float(fu0) > float(fu)


def test_system_refuses_an_unknown_scope():
    with pytest.raises(SpecError, match="quant_scope"):
        SystemConfig(quant_scope=2.0)
    assert SystemConfig(quant_scope=1.0).quant_scope == 1.0


def test_the_reader_states_the_scope_for_the_super_nvfp4_rows_only():
    rows = json.loads(Path("strategies/reference/data/hybrid_2026.json").read_text())
    said = {r["id"] for r in rows
            if stated_quant_scope(r, "nvfp4" if r["precision"] == "nvfp4" else "mxfp8")}
    assert said == {r["id"] for r in rows
                    if r["precision"] == "nvfp4" and "super" in r["id"]}
    assert len(said) == 4
    row = next(r for r in rows if r["id"] in said)
    assert stated_quant_scope(row, "nvfp4")[0] == 1
    assert stated_quant_scope(row, "mxfp8") is None


def test_automodel_hybrid_layer_bytes_closed_form():
    m, b, tp = NANO, 4, 1
    T = b * m.seq_length
    h = m.hidden_size
    conv, di = m.mamba_conv_dim, m.mamba_d_inner
    want = (4 * h + 6 * h) * T + 4 * m.mean_mlp_width() * T \
        + m.mamba_share * T * 2 * (2 * conv + 2 * di)
    got = eb.elementwise_bytes_fwd(m, b, tp, 1, False, "eager")
    assert float(got) == pytest.approx(want, rel=REL)
    # batch-first: no layout copies, even with b > 1; Megatron's path keeps them
    assert float(mixer_elementwise_bytes_fwd(m, b, tp, layout_copies=False)) < \
        float(mixer_elementwise_bytes_fwd(m, b, tp))
    assert float(mixer_elementwise_bytes_fwd(m, 1, tp, layout_copies=False)) == \
        pytest.approx(float(mixer_elementwise_bytes_fwd(m, 1, tp)), rel=REL)
    # torchtitan's eager block (two 36-byte norms) is what was charged before
    assert float(eb.eager_elementwise_bytes_fwd(m, b, tp, 1, False)) > 3 * float(got)
