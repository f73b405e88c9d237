"""A LayerNorm on the embeddings (``ModelSpec.embedding_norm``: BLOOM's
``word_embeddings_layernorm``, Megatron-DeepSpeed ``--embed-layernorm``): its saved 16-bit
input on the first stage (``stage_ends.embedding_bytes``; docs/calibration.md §5.129)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.errors import SpecError
from strategies.memory.stage_ends import embedding_bytes
from strategies.presets import model_preset
from strategies.reference.text import model_family


def test_norm_input_closed_form():
    m = model_preset("gpt-1.7b")
    s, b, h = m.seq_length, 4, m.hidden_size
    plain = embedding_bytes(m, s, b, 8, False, 1)
    normed = embedding_bytes(replace(m, embedding_norm=True), s, b, 8, False, 1)
    assert plain == 8 * s * b + s * b * h
    assert normed - plain == 2 * s * b * h
    # with SP the sequence is split over tp, as the dropout mask is
    got = embedding_bytes(replace(m, embedding_norm=True), s, b, np.array([2, 4]), True, 2)
    assert np.allclose(got, (8 * s * b + 3 * s * b * h / np.array([2, 4])) / 2, rtol=1e-15)


def test_bloom_names_and_presets():
    assert model_family("BLOOM-prototype 181B")["embedding_norm"] is True
    assert model_family("BLOOM 176B")["embedding_norm"] is True
    assert model_family("BloombergGPT 50B")["embedding_norm"] is False
    assert model_family("GPT-3 175B")["embedding_norm"] is False
    assert model_preset("bloom-176b").embedding_norm is True
    assert model_preset("gpt-1.7b").embedding_norm is False


def test_field_checked():
    with pytest.raises(SpecError, match="embedding_norm"):
        replace(model_preset("gpt-1.7b"), embedding_norm="yes")
