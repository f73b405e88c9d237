"""DeepSeek-V2/V3's YaRN ``rope_scaling`` read by the deepseek reader through the shared
``hf_config.common.rope_attention`` (``model.yarn_attention_factor``): the factor on the rope
part's cos and sin is ``ms(mscale)/ms(mscale_all_dim)``, ``ms(m) = 0.1·m·ln(factor) + 1``
(HF ``_compute_yarn_parameters``, Megatron-Core ``_yarn_get_concentration_factor``): 1 in the
real V2 and V3 configs (their cost unchanged), not 1 where the two differ, which Megatron-Core
runs through its unfused RoPE (``cost.elementwise_bytes.rope_unfused_bytes``)."""
from __future__ import annotations

import copy
import json
import math
from dataclasses import replace

import pytest

from strategies.cost.elementwise_bytes import rope_unfused_bytes
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.hf_config import model_from_hf
from strategies.job import make_job
from strategies.plan import parse_plan
from topologies.cluster import cluster_preset

V3 = "tests/data/hf/deepseek_v3.json"
CL = cluster_preset("dgx-h100", 64)
PLAN = "ep=64,gbs=512"


def _cfg(path: str = V3) -> dict:
    with open(path) as f:
        return json.load(f)


def _step(m) -> float:
    return estimate(make_job(m.with_seq_length(4096), CL, parse_plan(PLAN),
                             framework="megatron-core")).step_time_s


@pytest.mark.parametrize("name", ["deepseek_v2", "deepseek_v2_lite", "deepseek_v3"])
def test_real_configs_read_factor_one(name: str) -> None:
    """The real configs' mscales are equal: factor 1, the spec that of the config without
    ``rope_scaling`` (so every cost is the one before)."""
    cfg = _cfg(f"tests/data/hf/{name}.json")
    m = model_from_hf(cfg)
    assert m.rope_attention_factor == 1.0
    bare = {k: v for k, v in cfg.items() if k != "rope_scaling"}
    assert m == model_from_hf(bare)


def test_v3_step_unchanged() -> None:
    cfg = _cfg()
    bare = {k: v for k, v in cfg.items() if k != "rope_scaling"}
    assert _step(model_from_hf(cfg)) == _step(model_from_hf(bare))


def test_differing_mscales_are_read_and_priced() -> None:
    """mscale 1, mscale_all_dim 0.707, factor 40: (0.1·ln40 + 1)/(0.0707·ln40 + 1) to 1e-12;
    Megatron-Core's unfused RoPE adds its bytes and the step is longer than the real V3's
    (and equal to the real V3's spec with that factor)."""
    cfg = copy.deepcopy(_cfg())
    cfg["rope_scaling"]["mscale_all_dim"] = 0.707
    m = model_from_hf(cfg)
    want = (0.1 * math.log(40) + 1) / (0.1 * 0.707 * math.log(40) + 1)
    assert m.rope_attention_factor == pytest.approx(want, rel=1e-12, abs=0)
    real = model_from_hf(_cfg())
    assert m == replace(real, rope_attention_factor=m.rope_attention_factor)
    assert rope_unfused_bytes(m, 1, 1, 1)[0] > 0 == rope_unfused_bytes(real, 1, 1, 1)[0]
    assert _step(m) > _step(real)
    # transformers 5 spells it rope_parameters: the same factor
    cfg5 = {k: v for k, v in cfg.items() if k != "rope_scaling"}
    cfg5["rope_parameters"] = dict(cfg["rope_scaling"], rope_theta=10000.0)
    assert model_from_hf(cfg5).rope_attention_factor == m.rope_attention_factor


@pytest.mark.parametrize("rs, field", [
    ({"type": "longrope", "factor": 4.0}, "rope_scaling.rope_type"),
    ({"type": "yarn", "factor": 40, "mscale": "x", "mscale_all_dim": 1.0},
     "rope_scaling.mscale"),
])
def test_bad_rope_scaling_refused_by_field(rs: dict, field: str) -> None:
    cfg = _cfg()
    cfg["rope_scaling"] = rs
    with pytest.raises(SpecError) as e:
        model_from_hf(cfg)
    assert e.value.field == field


def test_cli_names_the_yarn_factor() -> None:
    """A refused rope kind exits 2 with one line naming the field."""
    import tempfile
    from tests.fuzz_profile import run_cli
    cfg = _cfg()
    cfg["rope_scaling"] = {"type": "longrope", "factor": 4.0}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    rc, _, err = run_cli(["estimate", "--model", f.name, "--cluster", "dgx-h100:64",
                          "--plan", PLAN])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "rope_scaling.rope_type" in err
