"""The NeMo AutoModel performance-summary transcriber (experiments/transcribe_automodel.py) on
fixture revisions in the published layout, and the committed transcription
(automodel_perf.json): schema, the printed step against the printed throughput, the skip
rule, one entry per row with earlier figures kept as history, every row resolving."""
from __future__ import annotations

import os

import pytest

from experiments import transcribe_automodel as ta
from strategies.reference.cases import case_from_entry, load_reference
from strategies.reference.measured import measured_step

HEAD = ("| Model | #GPUs | GBS | MBS | LBS | GA | Seq Length | TP | PP | CP | EP | VP | FSDP | "
        "Kernel Optimizations | Time per Global Step (s) | Model TFLOPs/sec/GPU | "
        "Tokens/sec/GPU |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|\n")


def _doc(rows: str) -> str:
    return ("# Performance Summary\n\n## Pre-Training Performance\n\n### System: DGX-H100, "
            "Precision: BF16\n\n" + HEAD + rows + "\n## Fine-Tuning (LoRA) Performance\n\n"
            + HEAD + "| Llama3 8B | 1 | 32 | 2 | 2 | 16 | 4096 | 1 | 1 | 1 | - | 1 | 1 | - | "
            "10.51 | 402 | 12472.87 |\n")


DSV3 = ("| DeepSeek V3 671B | 256 | 512 | 1 | 8 | 1 | 4096 | 1 | 4 | 1 | 64 | 8 | 64 | "
        "TE + DeepEP | 8.18 | 250 | 1,002 |\n")
QWEN_OLD = ("| Qwen3 MoE 30B | 8 | 512 | 4 | 4 | 16 | 4096 | 1 | 1 | 1 | 8 | - | 8 | TE + DeepEP "
            "| 22.14 | 212 | 11,842 |\n")
QWEN_NEW = QWEN_OLD.replace("22.14 | 212 | 11,842", "21.773 | 277 | 12,040")
OSS = ("| GPT-OSS 20B | 8 | 256 | 2 | 2 | 16 | 4096 | 1 | 1 | 1 | - | - | 8 | "
       "TE + DeepEP + FlexAttn | 10.04 | 279 | 13,058 |\n")
NANO = ("| Nemotron V3 Nano 30B (26.02) | 8 | 512 | 4 | 4 | 16 | 4096 | 1 | 1 | 1 | 8 | - | 8 | "
        "TE + DeepEP + TorchSDPA | 15.614 | 328 | 16,789 |\n")
REVS = [("a" * 40, "2025-10-06T12:00:00-07:00", _doc(DSV3 + QWEN_OLD + OSS)),
        ("b" * 40, "2025-10-08T12:00:00-07:00", _doc(DSV3 + QWEN_NEW + OSS)),
        ("c" * 40, "2026-02-26T12:00:00-07:00", _doc(NANO + DSV3 + QWEN_NEW + OSS))]
DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                    "automodel_perf.json")


def test_pretraining_table_only():
    rows = ta.pretraining_rows(_doc(DSV3))
    assert [r["Model"] for r in rows] == ["DeepSeek V3 671B"]
    with pytest.raises(ValueError, match="Pre-Training"):
        ta.pretraining_rows(HEAD + DSV3)


def test_one_entry_per_row_with_history():
    out, skipped = ta.transcribe(REVS)
    ids = [r["id"] for r in out]
    assert ids == ["automodel_deepseekv3_h100_256", "automodel_qwen330ba3b_h100_8",
                   "automodel_gptoss20b_h100_8"]
    dsv3, qwen, oss = out
    assert "history" not in dsv3 and "a" * 12 in dsv3["source"]["table"]
    # the revised row: its latest figures, the earlier ones kept with their commit and date
    assert qwen["measured"] == {"step_time_s": 21.773, "tokens_per_s_per_gpu": 12040.0,
                                "model_tflops_per_gpu": 277.0}
    assert qwen["history"] == [{"step_time_s": 22.14, "tokens_per_s_per_gpu": 11842.0,
                                "model_tflops_per_gpu": 212.0, "commit": "a" * 40,
                                "date": "2025-10-06"}]
    assert "b" * 12 in qwen["source"]["table"]
    assert dsv3["plan"]["tp"] * dsv3["plan"]["pp"] * dsv3["plan"]["dp"] == 256
    assert (dsv3["plan"]["zero_stage"], qwen["plan"]["zero_stage"]) == (2, 3)
    assert dsv3["plan"]["schedule"] == "interleaved 1F1B" and dsv3["plan"]["virtual_stages"] == 8
    # EP printed '-': the config's, said in the notes
    assert oss["plan"]["ep"] == 8 and "ep_size 8" in oss["notes"]
    assert oss["model"]["hf_config"]["num_hidden_layers"] == 24
    assert len(oss["model"]["hf_config"]["layer_types"]) == 24
    assert skipped == [("Nemotron V3 Nano 30B (26.02) 8 GPUs", ta.SKIP_MODELS["Nemotron V3"])]


def test_skip_rule_names_each_reason():
    row = dict(zip(ta.COLUMNS, [c.strip() for c in OSS.strip().strip("|").split("|")]))
    assert ta.skip_reason(row) is None
    assert "Mamba" in ta.skip_reason({**row, "Model": "Nemotron V3 Super 120B (26.02)"})
    assert "expert parallelism of the row is not stated" in ta.skip_reason(
        {**row, "Model": "GPT-OSS 120B"})
    assert "torch.compile" in ta.skip_reason({**row, "Model": "Llama3 70B"})
    assert "no config" in ta.skip_reason({**row, "Model": "Mystery 9B"})


def test_printed_step_matches_printed_throughput():
    """tokens/s/GPU x GPUs x step = GBS x seq, within what the printing rounds away."""
    for _, _, md in REVS:
        for row in ta.pretraining_rows(md):
            n, gbs, seq = (int(row[k]) for k in ("#GPUs", "GBS", "Seq Length"))
            tok = float(row["Tokens/sec/GPU"].replace(",", ""))
            implied = ta.step_time_s(gbs, seq, tok, n)
            step = float(row["Time per Global Step (s)"])
            assert abs(implied - step) <= ta.printed_tolerance_s(row), row["Model"]
    # a misprinted step is caught
    bad = dict(zip(ta.COLUMNS, [c.strip() for c in DSV3.strip().strip("|").split("|")]))
    bad["Time per Global Step (s)"] = "8.28"
    implied = ta.step_time_s(512, 4096, 1002, 256)
    assert abs(implied - 8.28) > ta.printed_tolerance_s(bad)


def test_committed_transcription_resolves():
    rows = load_reference(DATA)
    assert len(rows) == 5 and {r["tier"] for r in rows} == {2}
    for r in rows:
        me, pl = r["measured"], r["plan"]
        n, seq = r["hardware"]["n_gpus"], r["model"]["seq_len"]
        # schema: the printed figures, the layout multiplying out
        assert set(me) == {"step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu"}
        assert pl["tp"] * pl["pp"] * pl["cp"] * pl["dp"] == n
        assert pl["global_batch"] == pl["local_batch_size"] * pl["dp"] * pl["grad_accum"]
        # tokens/s/GPU x GPUs x step = GBS x seq to the printing's precision (<= 0.2 %)
        assert me["tokens_per_s_per_gpu"] * n * me["step_time_s"] == pytest.approx(
            pl["global_batch"] * seq, rel=2e-3)
        c = case_from_entry(r, rows)
        assert c.job is not None, (r["id"], c.skipped)
        assert c.job.framework.name == "automodel" and c.job.dtype == "bf16"
        assert c.job.plan.moe_dispatcher == "deepep" and c.job.plan.moe_routing == "contiguous"
        assert measured_step(r) == (me["step_time_s"], "step time as printed")
        p = c.job.plan
        assert (p.tp, p.pp, p.dp, p.cp, p.ep, p.mbs, p.gbs) == (
            pl["tp"], pl["pp"], pl["dp"], pl["cp"], pl["ep"], pl["microbatch"],
            pl["global_batch"])
        assert p.recompute == "full" and p.zero == (3 if pl["pp"] == 1 else 2)
        assert p.vpp == pl["virtual_stages"]
