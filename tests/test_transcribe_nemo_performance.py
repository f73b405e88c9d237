"""The NeMo performance-summary transcriber (experiments/transcribe_nemo_performance.py) on a
small fixture table in the published layout: it parses the pre-training rows into reference
entries, the step time the reader derives is gbs x seq / (tokens/s/GPU x GPUs), and the skip
rule refuses fine-tuning rows, unknown models and layouts whose layers do not divide; the
committed transcription (nemo_performance_2407.json) resolves row by row."""
from __future__ import annotations

import os

import pytest

from experiments import transcribe_nemo_performance as tn
from strategies.reference.cases import case_from_entry, load_reference
from strategies.reference.measured import measured_step

FIXTURE = """
### Pretraining

| Model         | #-GPUs | GBS  | MBS | Sequence Length| TP | PP | CP | VP | Tokens / sec / GPU | Model TFLOP / sec / GPU | ***Est. days*** |
| -----         | ------ | ---  | --- | ---------------| -- | -- | -- | -- | ------------------ | ----------------------- | --------------- |
| GPT3-175B     | 512    | 2048 | 2   | 2048           | 4  | 8  | 1  | 6  | 825                | [888](https://mlcommons.org/benchmarks/training/) | **137** |
| LLAMA3-8B     | 8      | 128  | 1   | 8192           | 1  | 1  | 2  | 1  | 12273              | 711                     | ***9***         |
| LLAMA2-13B    | 16     | 128  | 1   | 4096           | 1  | 4  | 1  | 3  | 8715               | 760                     | ***13***        |
| Mystery-9B    | 8      | 128  | 1   | 4096           | 1  | 1  | 1  | 1  | 9999               | 700                     | ***9***         |

### Finetuning

| Model      | Task     | #-GPUs | GBS | MBS | Packed Sequence Length | TP | PP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
| -----      | ----     | ---    | --- | --- | --------------- | -- | -- | ------------------ | ----------------------- |
| LLAMA2-7B  | SFT      | 8      | 32  | 1   | 4096            | 1  | 1  | 16891              | 673                     |
| LLAMA2-70B | LoRA     | 8      | 32  | 1   | 4096            | 2  | 4  | 2621               | 722                     |
"""
COMMIT = "8e3d65dcfe3504689bfc5b6e67d502780aacad41"
DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                    "nemo_performance_2407.json")


def test_parses_the_pretraining_rows():
    out, skipped = tn.transcribe(FIXTURE, COMMIT)
    assert [r["id"] for r in out] == ["nemo2407_gpt3_175b_512gpu", "nemo2407_llama3_8b_8gpu"]
    gpt, llama = out
    assert gpt["plan"] == {"tp": 4, "pp": 8, "dp": 16, "cp": 1, "ep": 1, "microbatch": 2,
                           "global_batch": 2048, "schedule": "interleaved 1F1B",
                           "virtual_stages": 6, "recompute": None, "sequence_parallel": None,
                           "zero_stage": None, "grad_accum": 64}
    # the figures as printed (the TFLOP/s inside a Markdown link)
    assert gpt["measured"] == {"tokens_per_s_per_gpu": 825, "model_tflops_per_gpu": 888}
    assert gpt["tier"] == 2 and gpt["precision"] == "fp8"
    assert COMMIT in gpt["source"]["url"] and COMMIT[:12] in gpt["source"]["table"]
    assert llama["plan"]["cp"] == 2 and llama["plan"]["dp"] == 4
    assert llama["plan"]["schedule"] == "1F1B"
    assert llama["model"]["kv_heads"] == 8 and llama["model"]["seq_len"] == 8192
    assert "kv_heads" not in gpt["model"]


def test_step_time_is_tokens_per_step_over_throughput():
    out, _ = tn.transcribe(FIXTURE, COMMIT)
    gpt = out[0]
    want = 2048 * 2048 / (825 * 512)
    assert tn.step_time_s(2048, 2048, 825, 512) == pytest.approx(want, rel=1e-15)
    # the reader derives the same from the recorded (not derived) figures
    step, how = measured_step(gpt)
    assert step == pytest.approx(want, rel=1e-15)
    assert "tokens/s/GPU" in how
    assert "derived" not in gpt


def test_skip_rule_names_each_reason():
    _, skipped = tn.transcribe(FIXTURE, COMMIT)
    why = dict(skipped)
    assert len(skipped) == 4
    assert any("40 layers do not divide over pp=4 x vp=3" in w for w in why.values())
    assert any("'Mystery-9B' has no dimensions" in w for w in why.values())
    assert any(w.startswith("fine-tuning (SFT)") for w in why.values())
    assert any(w.startswith("fine-tuning with LoRA") for w in why.values())
    row = {"Model": "LLAMA3-8B", "#-GPUs": "6", "TP": "1", "PP": "1", "CP": "4", "VP": "1"}
    assert tn.skip_reason("Pretraining", row) == "6 GPUs do not divide over tp=1 x pp=1 x cp=4"


def test_committed_transcription_resolves():
    rows = load_reference(DATA)
    assert len(rows) == 12 and {r["tier"] for r in rows} == {2}
    for r in rows:
        c = case_from_entry(r, rows)
        assert c.job is not None, (r["id"], c.skipped)
        assert c.job.framework.name == "nemo"
        assert c.job.dtype == "fp8"
        me = r["measured"]
        assert c.measured_step_s == pytest.approx(tn.step_time_s(
            r["plan"]["global_batch"], r["model"]["seq_len"], me["tokens_per_s_per_gpu"],
            r["hardware"]["n_gpus"]), rel=1e-15)
        p = c.job.plan
        assert p.tp * p.pp * p.cp * p.dp == r["hardware"]["n_gpus"]
        assert p.vpp == r["plan"]["virtual_stages"]


@pytest.fixture(scope="module")
def nemo_residuals() -> list:
    """experiments/nemo_performance_residuals.py's rows of ``DATA``, computed once for the two
    tests that read them."""
    from experiments.nemo_performance_residuals import residuals
    return residuals(DATA)


@pytest.mark.slow
def test_residuals_hide_only_the_pipeline_exchanges(nemo_residuals):
    """experiments/nemo_performance_residuals.py: the exposed p2p charge does not depend on
    the GEMM rate (so the bisection against measured + charge is the estimate without it),
    and pp = 1 rows, which exchange nothing, keep their error and implied factor."""
    from experiments.gemm_in_situ import with_gemm_scale
    from strategies.estimate.scalar import estimate

    rows = load_reference(DATA)
    c = case_from_entry(next(r for r in rows if r["id"] == "nemo2407_nemotron_22b_64gpu"), rows)
    p2p = estimate(c.job).breakdown_s["pp_comm"]
    assert p2p > 0
    assert estimate(with_gemm_scale(c.job, 0.8)).breakdown_s["pp_comm"] == p2p
    recs = nemo_residuals
    assert len(recs) == 12
    for r in recs:
        if r["pp"] == 1:
            assert r["p2p_s"] == 0 and r["error_hidden_pct"] == r["error_pct"]
            assert r["implied_hidden"] == r["implied"]
        else:
            assert r["error_hidden_pct"] < r["error_pct"]
            assert r["implied_hidden"] < r["implied"]


def test_knee_what_if_is_scoped_and_keeps_the_pivot_rate(nemo_residuals):
    """The residuals script's knee what-if scales ``gemm_kernel.k_knee`` only inside its block,
    and a factor of 1 gives the model's own errors."""
    from strategies.cost import gemm_kernel
    from experiments.nemo_performance_residuals import knee_scaled, knee_what_if
    from topologies.gpus import get_gpu

    g = get_gpu("H100-SXM5-80GB")
    k0 = gemm_kernel.k_knee(g, "fp8")
    with knee_scaled(3.0):
        assert gemm_kernel.k_knee(g, "fp8") == pytest.approx(3 * k0, rel=1e-15)
    assert gemm_kernel.k_knee(g, "fp8") == k0
    base = {r["id"]: r["error_pct"] for r in nemo_residuals}
    same = knee_what_if(DATA, 1.0)
    assert same.keys() == base.keys()
    for i, e in base.items():
        assert same[i] == pytest.approx(e, abs=1e-9)
