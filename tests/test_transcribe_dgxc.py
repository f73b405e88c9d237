"""The DGX Cloud benchmarking transcriber (experiments/transcribe_dgxc.py) on a small fixture
README in the recipes' layout: configuration tables under a GPU heading, performance tables
with and without leading pipes; the step time is the one printed and the throughput agrees
with gbs x seq / step; the skip rule refuses columns whose tokens/s implies another global
batch, ambiguous or missing configurations and families not modelled; the launch-script fix
replaces a README cell; the committed transcription (dgxc_2505.json) resolves row by row."""
from __future__ import annotations

import os

import pytest

from experiments import transcribe_dgxc as td
from strategies.reference.cases import case_from_entry, load_reference

FIXTURE = """
# Overview

**GB200**:
* At least 128 GPUs.

| GPUs | SeqLen | Layers | FSDP | TP | PP | CP | EP | ETP | DP | VP | MBS | GBS | GA |
|------|:------:|:------:|:----:|:--:|:--:|:--:|:--:|:---:|:--:|:--:|:---:|:---:|:--:|
| 128  | 8192   | 126    | 0    |  4 | 8  | 2  | NA | NA  | 2  | 8  |  1  | 64  | 32 |
| 256  | 8192   | 126    | 0    |  4 | 8  | 2  | NA | NA  | 4  | 8  |  1  | 128 | 32 |

**H100**:

| GPUs | SeqLen | Layers | FSDP | TP | PP | CP | EP | ETP | DP | VP | MBS | GBS | GA |
|------|:------:|:------:|:----:|:--:|:--:|:--:|:--:|:---:|:--:|:--:|:---:|:---:|:--:|
| 512  | 8192   | 126    | 0    |  8 | 8  | 2  | NA | NA  | 4  | 8  |  1  | 256 | 64 |

```shell
| not | a | table |
|---|---|---|
```

# GB200 Performance

| Llama3.1 405b BF16                    | 128x GB200 GPUs | 256x GB200 GPUs |
|---------------------------------------|:---------------:|:---------------:|
| Training step time (seconds per step) | 9.347           | 9.484           |
| Throughput in tokens per second       | 56092           | 55281           |

# H100 Performance

| Llama3.1 405b FP8 | 512x H100 GPUs  | 1024x H100 GPUs |
|---|:---:|:---:|
Training step time (seconds per step)| 13.020 | 13.1 |
Throughput in tokens per second |161072 | 320000 |
"""
DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                    "dgxc_2505.json")
COMMIT = "c5c765f" + "0" * 33


def _run(md: str, path: str = "llama3.1/README.md", tag: str = "v25.05.05"):
    return td.transcribe_readme(tag, COMMIT, path, md, "25.04.01")


def test_parses_tables_with_their_gpu_context():
    tables = td.parse_tables(FIXTURE)
    assert [(ctx, h[0]) for ctx, h, _ in tables] == [
        ("GB200", "GPUs"), ("H100", "GPUs"), ("GB200", "Llama3.1 405b BF16"),
        ("H100", "Llama3.1 405b FP8")]            # the fenced block is no table
    assert tables[3][2][0][:2] == ["Training step time (seconds per step)", "13.020"]


def test_transcribes_the_matching_columns():
    out, skipped = _run(FIXTURE)
    assert [r["id"] for r in out] == ["dgxc2505_llama31_405b_gb200_128_bf16",
                                      "dgxc2505_llama31_405b_h100_512_fp8"]
    gb = out[0]
    assert gb["plan"] == {"tp": 4, "pp": 8, "dp": 2, "cp": 2, "ep": 1, "microbatch": 1,
                          "global_batch": 64, "schedule": "interleaved 1F1B",
                          "virtual_stages": 8, "recompute": None, "sequence_parallel": None,
                          "zero_stage": None, "grad_accum": 32}
    assert gb["hardware"]["gpu"] == "GB200" and gb["hardware"]["n_gpus"] == 128
    assert gb["measured"] == {"step_time_s": 9.347, "tokens_per_s": 56092.0}
    assert gb["model"]["hf_config"]["num_hidden_layers"] == 126
    assert gb["model"]["seq_len"] == 8192 and gb["framework"] == "nemo" and gb["tier"] == 2
    assert out[1]["precision"] == "fp8" and out[1]["plan"]["tp"] == 8
    reasons = dict(skipped)
    assert len(skipped) == 2
    # 256 GPUs: the printed throughput is that of GBS=64, not the configuration's 128
    assert "global batch of the measurement" in next(v for k, v in reasons.items() if "256x" in k)
    assert "0 configuration rows" in next(v for k, v in reasons.items() if "1024x" in k)


def test_step_time_is_tokens_per_step_over_throughput():
    assert td.step_time_s(64, 8192, 56092) == pytest.approx(64 * 8192 / 56092, rel=1e-15)
    # the printed step time of the 128-GPU column and the one its throughput implies agree
    assert td.step_time_s(64, 8192, 56092) / 9.347 - 1 == pytest.approx(0.0, abs=td.TOKENS_RTOL)


def test_skip_rule_names_each_reason():
    col = {"n": 512, "gpu": "H100", "precision": "fp8", "gbs": None, "size": "56b",
           "step_s": 15.0, "tokens_per_s": None}
    assert "Mamba" in td.skip_reason("nemotronh", col, [])
    assert "no dimensions" in td.skip_reason("llama3.1", {**col, "size": "1b"}, [])
    row = {"tp": 8, "pp": 8, "cp": 2, "gbs": 256, "mbs": 1, "seq": 8192, "layers": 126,
           "n": 512}
    col = {**col, "size": "405b"}
    assert "2 configuration rows" in td.skip_reason("llama3.1", col, [row, row])
    assert td.skip_reason("llama3.1", col, [row]) is None
    assert "do not divide" in td.skip_reason("llama3.1", col, [{**row, "n": 500}])


def test_vp_without_pipelining_is_dropped_and_launch_fix_applies():
    # the H100 row with pp=1 but a VP cell of 8 (as Llama 4's H100 row prints it)
    md = FIXTURE.replace("|  8 | 8  | 2  | NA | NA  | 4  | 8  |", "|  8 | 1  | 2  | NA | NA  | 4  | 8  |")
    assert md != FIXTURE
    out, _ = _run(md)
    h100 = [r for r in out if "h100" in r["id"]]
    assert h100 and h100[0]["plan"]["pp"] == 1 and h100[0]["plan"]["virtual_stages"] == 1
    key = ("v25.04.02", "nemotron", "340b")
    assert td.LAUNCH_FIXES[key][:2] == ("vp", 12)


def test_group_key():
    assert td.group_key("dgxc2504_llama31_405b_proxy_h100_64_fp8") == "2504 llama31 405b h100 fp8"
    assert td.group_key("dgxc2505_deepseek_v3_671b_gb200_128_bf16") == \
        "2505 deepseek_v3 671b gb200 bf16"
    assert td.group_key("dgxc2505_nemotron_340b_gb200_128_fp8_strong") == \
        "2505 nemotron 340b gb200 fp8"


def test_committed_transcription_resolves():
    rows = load_reference(DATA)
    assert len(rows) == 119 and len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        c = case_from_entry(r, rows)
        assert c.job is not None, (r["id"], c.skipped)
        assert c.measured_step_s == r["measured"]["step_time_s"]
        if r["measured"].get("tokens_per_s"):
            implied = td.step_time_s(r["plan"]["global_batch"], r["model"]["seq_len"],
                                     r["measured"]["tokens_per_s"])
            assert implied / c.measured_step_s - 1 == pytest.approx(0.0, abs=td.TOKENS_RTOL)
    nem = next(r for r in rows if r["id"] == "dgxc2504_nemotron_340b_h100_256_bf16")
    assert nem["plan"]["virtual_stages"] == 12 and "launch.sh" in nem["notes"]


def test_gb200_fp8_what_if_is_scoped_and_monotone():
    from experiments import dgxc_gb200_fp8 as wf
    import topologies.gpus as gpus
    orig = gpus.GPU.gemm_efficiency
    base = wf.gb200_fp8_errors(DATA)
    assert base and all("gb200" in k and "fp8" in k for k in base)
    with wf.gb200_fp8_rate(0.8):
        slower = wf.gb200_fp8_errors(DATA)
    assert gpus.GPU.gemm_efficiency is orig            # the catalog is restored
    assert wf.gb200_fp8_errors(DATA) == base            # deterministic, unchanged after
    assert all(slower[k] > base[k] for k in base)       # a lower FP8 rate, a longer step
