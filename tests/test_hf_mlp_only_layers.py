"""Qwen-MoE's ``mlp_only_layers`` (``hf_config.llama_like``): a leading run ``[0, k)`` is
exactly ``first_k_dense_replace = k`` (transformers ``Qwen3MoeDecoderLayer``: a listed layer
has a dense MLP of ``intermediate_size`` whatever ``decoder_sparse_step`` says); any other
pattern exits 2 naming the field, its value and the rule."""
from __future__ import annotations

import copy
import json
import tempfile

from dataclasses import replace

import pytest

from strategies.errors import SpecError
from strategies.hf_config import model_from_hf
from tests.fuzz_profile import run_cli


def _cfg(name: str = "qwen3_30b_a3b") -> dict:
    with open(f"tests/data/hf/{name}.json") as f:
        return json.load(f)


@pytest.mark.parametrize("name", ["qwen3_30b_a3b", "qwen2_57b_a14b"])
@pytest.mark.parametrize("layers, k", [([0], 1), ([0, 1, 2], 3), ([2, 0, 1, 1], 3)])
def test_leading_run_is_first_k_dense(name: str, layers: list[int], k: int) -> None:
    """The spec equals the one read with ``first_k_dense_replace = k``: layers ``< k`` dense
    (the dense width), the rest MoE; the parameters fall by ``k`` layers' experts and router
    and gain ``k`` dense MLPs (``3·h·F`` each, SwiGLU)."""
    cfg = copy.deepcopy(_cfg(name))
    base = model_from_hf(cfg)
    cfg["mlp_only_layers"] = layers
    m = model_from_hf(cfg)
    assert m.first_k_dense_replace == k and base.first_k_dense_replace == 0
    assert m == replace(base, first_k_dense_replace=k)
    assert [m.is_moe_layer(i) for i in range(k + 1)] == [False] * k + [True]
    h, F = m.hidden_size, cfg["intermediate_size"]
    moe = m.mlp_params("moe")      # its routed experts, shared expert and router
    assert m.num_params() - base.num_params() == k * (3 * h * F - moe)


@pytest.mark.parametrize("layers, words", [
    ([1, 2], "only the leading layers"),
    ([0, 2], "only the leading layers"),
    ([-1], "only the leading layers"),
    (list(range(48)), "k < num_hidden_layers=48"),
    ([0, "1"], "list of layer indices"),
    ([True], "list of layer indices"),
    ("0,1", "list of layer indices"),
])
def test_other_patterns_refused(layers, words: str) -> None:
    cfg = _cfg()
    cfg["mlp_only_layers"] = layers
    with pytest.raises(SpecError) as e:
        model_from_hf(cfg)
    assert e.value.field == "mlp_only_layers" and words in e.value.rule


def test_cli_reads_and_refuses() -> None:
    """Through ``estimate --model FILE``: a leading run runs, another pattern exits 2 with one
    line naming field and value."""
    out = []
    for layers in ([0, 1], [3]):
        cfg = _cfg()
        cfg["mlp_only_layers"] = layers
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(cfg, f)
        out.append(run_cli(["estimate", "--model", f.name, "--cluster", "dgx-h100:8",
                            "--plan", "ep=8,gbs=64"]))
    assert out[0][0] == 0, out[0][2]
    rc, _, err = out[1]
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "mlp_only_layers=[3]" in err
