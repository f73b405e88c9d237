"""``experiments/bridge_table_audit.py``'s pure parts: the page's pre-training tables, a cell's
variant, a row's comparison, and which numbers a bfloat16 holds exactly."""
from __future__ import annotations

from experiments.bridge_table_audit import bf16_exact, cell, compare, tables

PAGE = """## 26.04 NeMo Container

### Pre-Training Performance

#### Model: Qwen3_30B_a3B

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|--------|--------|-----------|-----|-----|-----------------|------|----|----|----|----|----|-----------------------|-------------------------|
| DGX-H100 | 16 | FP8 | 1024 | 1 | 4096 | 0 | 1 | 1 | 1 | n/a | 16 | 8901 | 205 |

### SFT Performance

#### Model: LLAMA3_70B

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|--------|--------|-----------|-----|-----|-----------------|----|----|----|----|----|-----------------------|-------------------------|
| DGX-H100 | 32 | FP8 | 32 | 1 | 4096 | 4 | 4 | 1 | 5 | n/a | 1638 | 710 |
"""


def test_tables_keep_the_pre_training_rows_with_their_lines() -> None:
    t = tables(PAGE)
    assert list(t) == [("26.04", "Qwen3_30B_a3B")]
    hdr, body = t["26.04", "Qwen3_30B_a3B"]
    assert hdr[0] == "System" and len(body) == 1 and body[0][0] == 9
    assert body[0][1][-2:] == ["8901", "205"]


def test_a_cell_reads_its_variant_and_drops_footnotes() -> None:
    assert cell("661 (624)", True) == "624" and cell("661 (624)", False) == "661"
    assert cell("475[^nemotron-note]", False) == "475" and cell("n/a", True) == "n/a"


def test_compare_names_each_differing_field() -> None:
    hdr, body = tables(PAGE)["26.04", "Qwen3_30B_a3B"]
    c = dict(zip(hdr, body[0][1]))
    row = {"plan": {"tp": 1, "pp": 1, "cp": 1, "ep": 16, "dp": 16, "microbatch": 1,
                    "global_batch": 1024, "virtual_stages": None, "grad_accum": 64},
           "hardware": {"n_gpus": 16}, "model": {"seq_len": 4096},
           "measured": {"tokens_per_s_per_gpu": 8901, "tflops_per_gpu": 205},
           "derived": {"step_time_s": 1024 * 4096 / (8901 * 16)}}
    assert compare(row, c, False) == []
    row["plan"]["ep"], row["measured"]["tokens_per_s_per_gpu"] = 8, 8910
    assert compare(row, c, False) == ["ep: record 8 vs table 16",
                                      "tokens/s/GPU: record 8910 vs table 8901.0"]


def test_bf16_exact_is_eight_significant_bits() -> None:
    assert bf16_exact(19200) and bf16_exact(256) and bf16_exact(255) and bf16_exact(0.75)
    assert not bf16_exact(257) and not bf16_exact(5680) and not bf16_exact(8901)
