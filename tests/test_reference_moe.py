"""Published 2026 runs read through their own config.json: the MoE rows resolve to MoE models
with the model cards' parameter counts, and a stack that shards with FSDP gets its ZeRO stage."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from strategies.hf_config import model_from_hf
from strategies.reference.cases import case_from_entry, load_reference

DATA_2026 = os.path.join(os.path.dirname(__file__), os.pardir, "strategies", "reference", "data",
                         "published_2026.json")
ROWS = {r["id"]: r for r in load_reference(DATA_2026)}

# (row, routed experts, total parameters B, active parameters B, embedding in the card's
# active count) from the model cards (tests/test_models.py gives each card's wording)
CARDS = [("mbridge2511_dsv3_b200_256_mxfp8", 256, 671, 37, True),
         ("mbridge2511_qwen3_235b_b200_64_mxfp8", 128, 235, 22, True),
         ("mbridge2511_qwen3_30b_gb300_8_mxfp8", 128, 30.5, 3.3, True),
         ("mbridge2511_gptoss120b_gb200_64_bf16", 128, 117, 5.1, False)]


@pytest.mark.parametrize("rid,experts,total,active,emb", CARDS)
def test_moe_rows_resolve_from_their_config(rid: str, experts: int, total: float,
                                            active: float, emb: bool) -> None:
    case = case_from_entry(ROWS[rid])
    assert not case.skipped, case.skipped
    cfg = ROWS[rid]["model"]["hf_config"]
    card = model_from_hf(cfg, name=ROWS[rid]["model"]["name"])
    assert card.num_params() / 1e9 == pytest.approx(total, rel=0.01)
    assert card.active_params(embedding=emb) / 1e9 == pytest.approx(active, rel=0.05)
    m = case.job.model      # the same model; layers padded to the stages' busiest while the
    assert m.num_experts == experts == card.num_experts          # reader lacks uneven splits
    assert replace(m, num_layers=card.num_layers, seq_length=card.seq_length) == card
    assert m.seq_length == ROWS[rid]["model"]["seq_len"]
    assert any("config.json" in a for a in case.assumptions)


def test_fsdp_stack_gets_its_zero_stage_under_pipelining() -> None:
    """torchtitan runs ZeRO 0/2/3 only; FSDP with PP keeps parameters gathered (ZeRO-2-like)."""
    case = case_from_entry(ROWS["torchtitan_2412_405b_512_fp8_1f1b"])
    assert not case.skipped, case.skipped
    assert case.job.plan.zero == 2 and case.job.plan.pp == 8
    assert any(a.startswith("zero=2 (FSDP") for a in case.assumptions)


def test_megatron_bridge_release_rows_resolve() -> None:
    """The 26.04.01 table: every row names a model, GPU and plan the reader resolves (a row
    the planner cannot express yet is skipped with its reason, never dropped silently)."""
    path = os.path.join(os.path.dirname(DATA_2026), "megatron_bridge_2604.json")
    cases = [case_from_entry(r) for r in load_reference(path)]
    assert len(cases) == 33
    done = [c for c in cases if not c.skipped]
    assert len(done) >= 31
    assert all(c.measured_step_s > 0 for c in done)
    assert {c.job.cluster.gpu.name for c in done} == {"H100-SXM5-80GB", "B200-SXM-180GB",
                                                  "B300-SXM-288GB", "GB200", "GB300"}


def test_gpu_hours_per_trillion_tokens_gives_the_step() -> None:
    """DeepSeek-V3's report: 180K H800 GPU-hours per trillion tokens on 2,048 GPUs at the
    steady batch of 15,360 sequences of 4,096 tokens: step = tokens × GPU-s per token / GPUs."""
    case = case_from_entry(ROWS["deepseekv3_report_h800_2048"])
    assert not case.skipped, case.skipped
    assert case.measured_step_s == pytest.approx(15360 * 4096 * 180000 * 3600 / (1e12 * 2048),
                                                 rel=1e-12)


def test_deepseek_report_runs_on_its_own_stack_with_dualpipe() -> None:
    """The DeepSeek-V3 report's run reads as DeepSeek's HAI-LLM stack (no TP, DualPipe, EP,
    ZeRO-1), and the schedule its text names is planned, not replaced by 1F1B."""
    case = case_from_entry(ROWS["deepseekv3_report_h800_2048"])
    assert not case.skipped, case.skipped
    p = case.job.plan
    assert (case.job.framework.name, p.schedule, p.pp, p.ep, p.tp, p.zero) == (
        "hai-llm", "dualpipe", 16, 64, 1, 1)


@pytest.mark.parametrize("text,name", [("DualPipe", "dualpipe"), ("DualPipeV", "dualpipev"),
                                       ("dualpipe-v", "dualpipev"), ("ZB-H1", "zb-h1"),
                                       ("zb-h2", "zb-h2"), ("ZB-V", "zb-v"),
                                       ("interleaved 1F1B", "interleaved")])
def test_schedule_names_in_source_text(text: str, name: str) -> None:
    from strategies.reference.text import schedule_kind
    assert schedule_kind(text) == name


def test_hai_llm_refuses_tensor_parallelism() -> None:
    from strategies.framework import get_profile
    from strategies.stacks.rules import plan_violations
    from strategies.plan import parse_plan
    fw = get_profile("deepseek")
    assert fw.name == "hai-llm"
    bad = plan_violations(fw, parse_plan("tp=2,pp=2,schedule=dualpipe"))
    assert [f for f, *_ in bad] == ["tp"]
