"""fp8-rowwise casts (``rowwise_casts``) of a hybrid Mamba-2 model's mean layer: its token
mixers at their shares (``ModelSpec.mixer_linears``, the list the Transformer Engine path,
``quantise.layer_cast_elements``, reads too), so the mean layer times the layers is the sum
of each kind's layers; the attention was counted in every layer and the Mamba-2 mixers'
linears in none."""
from __future__ import annotations

import pytest

from strategies.cost.rowwise_casts import layer_cast_bytes, layer_linears
from strategies.presets import model_preset


@pytest.mark.parametrize("name", ["nemotron-h-8b", "nemotron3-nano-30b-a3b"])
def test_mean_layer_is_the_sum_of_its_kinds(name):
    m = model_preset(name)
    n = m.layer_counts()
    for tp, sp in ((1, False), (2, True)):
        mean = layer_cast_bytes(m, 1, tp, 1, sp)
        kinds = [layer_cast_bytes(m.of_kind(k), 1, tp, 1, sp) for k in n if n[k]]
        for i in (0, 1):
            total = sum(n[k] * b[i] for k, b in zip([k for k in n if n[k]], kinds))
            assert m.num_layers * float(mean[i]) == pytest.approx(float(total), rel=1e-12)


def test_mixer_linears_at_their_shares():
    m = model_preset("nemotron3-nano-30b-a3b")
    weights = [w for w, *_ in layer_linears(m, 1, 1, 1, False)]
    attn, mamba = len(m.attention_linears()), len(m.mamba_linears())
    assert weights[:attn] == [m.attention_share] * attn
    assert weights[attn:attn + mamba] == [m.mamba_share] * mamba
    # one kind's layer: an MLP layer casts its MLP's two linears, a Mamba-2 layer its mixer's
    mlp, mixer = (layer_linears(m.of_kind(k), 1, 1, 1, False) for k in ("dense", "mamba"))
    assert [(t, k, n) for _, t, k, n, *_ in mixer] == [
        (m.seq_length, k, n) for _, k, n, _ in m.mamba_linears()]
    assert len(mlp) == 2
    t = model_preset("llama3-8b")
    assert [w for w, *_ in layer_linears(t, 1, 1, 1, False)][:len(t.attention_linears())] \
        == [1.0] * len(t.attention_linears())
