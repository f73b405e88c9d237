"""The hybrid Mamba-2 transcription (experiments/transcribe_hybrid.py, its recipe reader
experiments/bridge_recipe_trace.py and its models experiments/hybrid_models.py) on fixtures in
the published layouts, and the committed file strategies/reference/data/hybrid_2026.json:
the step time of every row against its printed figures, every plan against its GPU count and
its model's experts, every row read without an error (today: skipped with the reason)."""
from __future__ import annotations

import json
import os

import pytest

from experiments import hybrid_models as hm
from experiments import transcribe_hybrid as th
from experiments.bridge_recipe_trace import literal, trace
from experiments.reference_mape import skip_summary
from strategies.reference.cases import case_from_entry, load_reference

DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                    "hybrid_2026.json")
ROWS = load_reference(DATA)

TABLE = """## 26.08 NeMo Container

### Pre-Training Performance

#### Model: Qwen3_30B_a3B

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|--------|--------|-----------|-----|-----|-----------------|----|----|----|----|----|-----------------------|-------------------------|
| DGX-GB300 | 8 | MXFP8 | 512 | 8 | 4096 | 1 | 1 | 1 | n/a | 8 | 44544 | 1029 |

#### Model: Nemotron_3_Super

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|--------|--------|-----------|-----|-----|-----------------|----|----|----|----|----|-----------------------|-------------------------|
| DGX-GB200 | 64 | NVFP4 | 512 | 1 | 8192 | 2 | 1 | 1 | n/a | 64 | 7168 | 610 |

## 26.06 NeMo Container

#### Model: Nemotron_3_Super

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|--------|--------|-----------|-----|-----|-----------------|------|----|----|----|----|----|-----------------------|-------------------------|
| DGX-B200 | 64 | NVFP4 | 512 | 1 | 8192 | 0 | 2 | 1 | 1 | n/a | 64 | 5632 | 475[^nemotron-3-super-b200-nvfp4-note] |

### SFT Performance

#### Model: Nemotron_3_Super

| DGX-B200 | 64 | NVFP4 | 512 | 1 | 8192 | 0 | 2 | 1 | 1 | n/a | 64 | 1 | 1 |
"""


def test_table_parse_of_both_layouts():
    """The 13-column table (26.08) and the 14-column one with FSDP (26.06) parse to the same
    fields; other models, other containers and the SFT tables are left out; a footnote on
    the TFLOP cell is kept apart from its number."""
    new = th.bridge_tables(TABLE, "26.08")
    assert [(r["model"], r["system"], r["prec"]) for r in new] == [
        ("Nemotron_3_Super", "DGX-GB200", "NVFP4")]
    r = new[0]
    assert (r["n"], r["gbs"], r["mbs"], r["seq"], r["tp"], r["pp"], r["cp"], r["vp"], r["ep"],
            r["tokens"], r["tflops"], r["fsdp"]) == (64, 512, 1, 8192, 2, 1, 1, None, 64, 7168,
                                                     610, None)
    old = th.bridge_tables(TABLE, "26.06")
    assert len(old) == 1 and old[0]["fsdp"] == "0" and old[0]["tflops"] == 475
    assert old[0]["footnote"] == ["nemotron-3-super-b200-nvfp4-note"]
    assert th.bridge_tables(TABLE, "25.11") == []


RECIPE = '''def _helper(cfg):
    cfg.model.recompute_granularity = None
    if cfg.model.x:
        cfg.model.cuda_graph_impl = "full_iteration"
    cfg.ddp.grad_reduce_in_fp32 = False  # bf16


def base_config():
    cfg = make()
    cfg.model.cuda_graph_impl = "none"
    _helper(cfg)
    cfg.model.cuda_graph_impl = "transformer_engine"
    set_cuda_graph_modules(cfg.model, ["attn", "mamba"])
    return cfg


def derived_config():
    cfg = base_config()
    cfg.model.mtp_num_layers = 2
    return cfg
'''


def test_recipe_trace_reads_statements_in_order():
    """Calls of functions of the given files are expanded where they stand, a later setting
    wins, a statement under ``if`` is not read, comments are cut, lines are 1-based."""
    t = trace({"a.py": RECIPE}, "derived_config")
    assert t["model.cuda_graph_impl"] == ('"transformer_engine"', "a.py", 12)
    assert t["model.recompute_granularity"] == ("None", "a.py", 2)
    assert t["ddp.grad_reduce_in_fp32"] == ("False", "a.py", 5)
    assert literal(t["model.cuda_graph_scope"][0]) == ["attn", "mamba"]
    assert literal(t["model.mtp_num_layers"][0]) == 2
    assert literal("num_gpus // 64") == "num_gpus // 64"
    with pytest.raises(KeyError, match="nowhere|none of"):
        trace({"a.py": RECIPE}, "nowhere")


def test_model_configs_are_consistent():
    """Each config's layer pattern has one symbol per layer; the Nemotron 3 configs are MoE
    with the expert count their sources give, Nemotron-H 56B is dense."""
    counts = {"nemotron-h-56b": (118, 54, 10, 0), "nemotron-3-nano": (52, 23, 6, 23),
              "nemotron-3.5-lightning": (52, 23, 6, 23), "nemotron-3-super": (88, 40, 8, 40),
              "nemotron-3-ultra": (108, 48, 12, 48)}
    inner = {"nemotron-h-56b": 16384, "nemotron-3-nano": 4096, "nemotron-3.5-lightning": 4096,
             "nemotron-3-super": 8192, "nemotron-3-ultra": 16384}
    for key, (base, _) in hm.MODELS.items():
        hf = base["hf_config"]
        hm.check_pattern(hf)
        p = hf["hybrid_override_pattern"]
        assert (len(p), p.count("M"), p.count("*"), p.count("E")) == counts[key], key
        assert hf["model_type"] == "nemotron_h"
        # the mixer's inner width is heads x head dim (Megatron-Core mamba_mixer.py L246-248
        # when mamba_num_heads is given): Nano's 64 x 64 is not expand x hidden (5376)
        assert hf["mamba_num_heads"] * hf["mamba_head_dim"] == inner[key], key
    with pytest.raises(ValueError, match="118 layers, num_hidden_layers is 117"):
        hm.check_pattern({**hm.NEMOTRON_H_56B, "num_hidden_layers": 117})


def test_rows_step_time_to_the_printing():
    """Every row's step time is gbs x seq / (tokens/s/GPU x GPUs) within the rounding of the
    printed figures: a derived step to its 4 decimals; a printed step (dgxc: 3 decimals,
    Automodel: as printed) against the printed throughput (integer tokens/s) within half a
    unit of each printed digit."""
    assert len(ROWS) == 26
    for r in ROWS:
        gbs, seq, n = r["plan"]["global_batch"], r["model"]["seq_len"], r["hardware"]["n_gpus"]
        m = r["measured"]
        if "derived" in r:
            tok = m["tokens_per_s_per_gpu"]
            assert r["derived"]["step_time_s"] == round(gbs * seq / (tok * n), 4), r["id"]
            continue
        step = m["step_time_s"]
        tokens = m.get("tokens_per_s") or m["tokens_per_s_per_gpu"] * n
        digits = len(str(step).split(".")[1]) if "." in str(step) else 0
        per_gpu_unit = 1.0 if "tokens_per_s" in m else n
        tol = 0.5 * 10.0 ** -digits + step * 0.5 * per_gpu_unit / tokens
        assert abs(gbs * seq / tokens - step) <= tol, r["id"]


def test_rows_plans_are_consistent():
    """tp x pp x cp x dp is the GPU count, the micro-batches fill the global batch, ep divides
    the routed experts and the data x context x tensor ranks it is drawn from."""
    for r in ROWS:
        pl, n = r["plan"], r["hardware"]["n_gpus"]
        assert pl["tp"] * pl["pp"] * pl["cp"] * pl["dp"] == n, r["id"]
        ga = pl.get("grad_accum") or pl["global_batch"] // (pl["microbatch"] * pl["dp"])
        assert ga * pl["microbatch"] * pl["dp"] == pl["global_batch"], r["id"]
        hf = r["model"].get("hf_config")
        if pl["ep"] > 1:
            assert hf["n_routed_experts"] % pl["ep"] == 0, r["id"]
            assert (pl["dp"] * pl["cp"] * pl["tp"]) % pl["ep"] == 0, r["id"]
        if r["id"].startswith("mbridge"):
            # every Megatron-Bridge Nemotron 3 recipe sets expert_tensor_parallel_size 1
            assert pl.get("etp", 1) == 1 and pl["moe_balance"] == "forced", r["id"]
            assert pl.get("etp") == 1 or pl["tp"] == 1, r["id"]
        if "dp_shard" in pl:
            assert pl["dp"] % pl["dp_shard"] == 0 and pl["zero_stage"] == 3, r["id"]


def test_rows_have_configs_and_ids():
    """Ids are unique, every row carries its model's config (none is left without: the
    sources read state all five architectures) and names its source."""
    ids = [r["id"] for r in ROWS]
    assert len(ids) == len(set(ids))
    assert all(r["model"]["hf_config"]["model_type"] == "nemotron_h" for r in ROWS)
    assert all(r["tier"] == 2 and r["kind"] == "measured" for r in ROWS)
    by_src = {}
    for r in ROWS:
        by_src[r["source"]["ref"].split()[0]] = by_src.get(r["source"]["ref"].split()[0], 0) + 1
    assert by_src == {"NVIDIA-NeMo/Megatron-Bridge": 16, "NVIDIA/dgxc-benchmarking": 7,
                      "NVIDIA-NeMo/Automodel": 3}


def test_every_row_reads_without_error():
    """The reader builds each row's job or skips it with a reason; until the model reads
    ``nemotron_h`` configs, the reason names the model type."""
    for r in ROWS:
        case = case_from_entry(r, ROWS)
        assert case.job is not None or case.skipped, r["id"]
        if case.job is None and "nemotron_h" in case.skipped:
            assert "model_type" in case.skipped


def test_skip_summary_counts_reasons():
    cases = [{"skipped": "a"}, {"skipped": "b"}, {"skipped": "a"}, {"skipped": None}]
    assert skip_summary(cases) == "3 skipped: 2 x a; 1 x b"


MIRRORS = [th.MIRROR + p for p in ("NVIDIA-NeMo+Megatron-Bridge/repo",
                                   "NVIDIA+dgxc-benchmarking/repo", "NVIDIA-NeMo+Automodel/repo")]


@pytest.mark.skipif(not all(os.path.isdir(p) for p in MIRRORS), reason="source mirrors absent")
def test_transcription_reproduces_the_committed_file(tmp_path, capsys):
    out = tmp_path / "hybrid.json"
    assert th.main(MIRRORS, out=str(out)) == 0
    with open(DATA) as f:
        assert json.load(f) == json.loads(out.read_text())
    assert out.read_bytes() == open(DATA, "rb").read()
