"""Bad input in a ``nemotron_h`` or ``deepseek_v4`` config.json, through the CLI: exit 2 and
one line naming the config key, the value and the rule. A bad hybrid pattern is refused by
``hybrid.check_pattern`` (the one check the main pattern, the MTP block's and the reader
share) before the reader's ``M``/``E`` tests pick which fields to read (a lower-case ``e``
was reported as experts without MoE layers); a ``ModelSpec`` limit is reported on the key
the config wrote (``reading.config_key``, ``in_config_terms``)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli.main import main

NANO = json.loads((Path(__file__).resolve().parent / "data" / "hf" /
                   "nemotron3_nano_30b_a3b.json").read_text(encoding="utf-8"))
PLAN = ["--cluster", "dgx-h100:1", "--plan", "tp=1,pp=1,ep=8,mbs=1,gbs=32"]


@pytest.mark.parametrize("change,words", [
    ({"hybrid_override_pattern": NANO["hybrid_override_pattern"].lower()},
     [f"hybrid_override_pattern='{NANO['hybrid_override_pattern'].lower()}'",
      "unknown layer character 'e'"]),
    ({"hybrid_override_pattern": "MEMEX*" + "M" * 46},
     ["hybrid_override_pattern='MEMEX*" + "M" * 46 + "'", "unknown layer character 'X'"]),
    ({"hybrid_override_pattern": 12345},
     ["hybrid_override_pattern=12345", "non-empty string of M, *, -, E"]),
    ({"num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*e"},
     ["mtp_hybrid_override_pattern='*e'", "unknown layer character 'e'"]),
])
def test_bad_pattern_names_the_key_and_character(tmp_path, capsys, change, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NANO, **change}), encoding="utf-8")
    rc = main(["estimate", "--model", str(path), *PLAN])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "", (rc, out)
    assert "Traceback" not in err and err.count("\n") == 1, err
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize("key,field", [("conv_kernel", "mamba_conv_kernel"),
                                       ("chunk_size", "mamba_chunk_size"),
                                       ("ssm_state_size", "mamba_state_dim")])
def test_mixer_limit_names_the_config_key(tmp_path, capsys, key, field):
    """A ``ModelSpec`` limit broken by a Mamba field is reported on the key the config wrote
    (``reading.config_key``, the one map the reader's required fields come from too)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NANO, key: 1 << 21}), encoding="utf-8")
    assert main(["estimate", "--model", str(path), *PLAN]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"paraplan: error: {key}=2097152") and f"{field}=2097152" in err, err


@pytest.mark.parametrize("key,field", [("hc_mult", "hc_streams"), ("head_dim", "kv_channels")])
def test_deepseek_v4_limit_names_the_config_key(tmp_path, capsys, key, field):
    """The same for a ``deepseek_v4`` config: ``hc_mult`` and ``head_dim`` were reported as
    the ``ModelSpec`` fields they set."""
    v4 = json.loads((Path(__file__).resolve().parent / "data" / "hf" /
                     "deepseek_v4_flash.json").read_text(encoding="utf-8"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**v4, key: 1 << 21}), encoding="utf-8")
    assert main(["estimate", "--model", str(path), *PLAN]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"paraplan: error: {key}=2097152") and f"{field}=2097152" in err, err
