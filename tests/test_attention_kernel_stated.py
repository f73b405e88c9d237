"""The fused attention kernel a published run states, and the closed forms it is charged by.

``plan.attn_impl`` of a reference entry names the kernel its source ran
(``strategies.reference.text.attention_kernel``); the reader runs the stack with that kernel
(``FrameworkProfile.attention_kernel``), states it as an assumption, and keeps the stack's own
kernel, said so, for the FlashAttention-1 class the catalog does not model
(docs/calibration.md §3.8). The attention core and the memory-bound kernels are charged in
closed form: FLOPs over the kernel's rate, bytes over the usable HBM bandwidth."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from strategies.cost import (attention_counts, attention_grid, attention_time, elementwise_bytes,
                             elementwise_time)
from strategies.reference.cases import case_from_entry
from strategies.reference.text import attention_kernel
from topologies.gpus import get_gpu

DATA = Path(__file__).resolve().parent.parent / "strategies" / "reference" / "data"
ENTRIES = json.loads((DATA / "published.json").read_text())


@pytest.mark.parametrize("text, kernel", [
    ("triton (llm-foundry v0.3.0 benchmark sweep)", "fa1"),
    ("flash with flash-attn 2 (llm-foundry .[gpu-flash2])", "fa2"),
    ("flash-attn==1.0.9", "fa1"),
    ("PyTorch SDPA", "fa2"),
    ("cuDNN fused attention", "native"),
    ("Transformer Engine", "native"),
    ("flash", None),
    (None, None),
])
def test_attention_kernel_words(text, kernel):
    assert attention_kernel(text) == kernel


def _entry(ident: str) -> dict:
    return copy.deepcopy(next(e for e in ENTRIES if e["id"] == ident))


def test_every_mosaicml_run_states_the_kernel_its_sweep_ran():
    """llm-foundry's Oct 2023 sweep (A100 and H100 8-64 GPU tables) left ``--attn_impl`` at its
    default, ``triton``; the Jan 2024 large-scale sweep ran flash-attn 2 for 1b/3b/7b and
    ``triton`` for 13b/30b/70b."""
    mosaic = [e for e in ENTRIES if e["id"].startswith("mosaic_")]
    assert len(mosaic) == 97
    for e in mosaic:
        kernel = attention_kernel(e["plan"].get("attn_impl"))
        size = re.match(r"mosaic_mpt(\d+b)_", e["id"]).group(1)
        large = "Large Scale" in e["source"]["table"]
        assert kernel == ("fa2" if large and size in ("1b", "3b", "7b") else "fa1"), e["id"]


def test_a_stated_kernel_replaces_the_stacks_and_is_said():
    e = _entry("mosaic_mpt7b_h100ls_128gpu_seq2048_mb6")
    e["source"]["ref"] = "NeMo 24.11 performance summary"       # a nemo (Megatron-Core) run
    case = case_from_entry(e)
    assert case.job.framework.name == "nemo"
    assert case.job.framework.attention_kernel == "fa2"        # the stack's own: native
    assert any(a.startswith("attention kernel fa2 (stated:") for a in case.assumptions)


def test_an_fa1_class_kernel_keeps_the_stacks_and_says_why():
    case = case_from_entry(_entry("mosaic_mpt7b_h100_8gpu_seq2048_mb6"))
    assert case.job.framework.attention_kernel == "fa2"
    note = [a for a in case.assumptions if a.startswith("attention kernel")]
    assert len(note) == 1 and "FlashAttention-1-class" in note[0] and "'triton'" in note[0]


def test_the_kernel_sets_the_attention_time_in_closed_form():
    """FlashAttention forward = FLOPs / (bf16 peak x the kernel's efficiency x its grid factor
    at the shape, ``attention_grid.rate_factors``); backward = 2.5x the FLOPs at 0.8x that
    rate over the backward grid's factor: native and fa2 on H100 differ by exactly their
    efficiencies and grids."""
    e = _entry("mosaic_mpt7b_h100ls_128gpu_seq2048_mb6")
    e["source"]["ref"] = "NeMo 24.11 performance summary"
    fa2 = case_from_entry(e).job
    e["plan"].pop("attn_impl")
    native = case_from_entry(e).job
    gpu, m, b = fa2.cluster.groups[0].gpu, fa2.model, fa2.plan.mbs
    f = attention_counts.attn_core_flops_fwd(m, b, 1, 1, True)
    for job, eff in ((fa2, gpu.fa2_attention_efficiency), (native, gpu.attention_efficiency)):
        fwd, bwd = attention_time.attention_time_fwd(m, b, 1, 1, True, gpu, 1.0, job.framework)
        g_f, g_b = attention_grid.rate_factors(m, b, 1, 1, gpu, job.framework.attention_kernel)
        assert 0.5 < g_f < 1 and 0.5 < g_b < 1     # 2,048 tokens: below the benchmark's grid
        assert fwd == pytest.approx(f / (gpu.peak("bf16") * eff * g_f), rel=1e-12)
        assert bwd == pytest.approx(2.5 * fwd * g_f / (0.8 * g_b), rel=1e-12)


def test_an_elementwise_pass_is_its_bytes_over_usable_bandwidth():
    """Memory-bound kernels: bytes (``elementwise_bytes.elementwise_bytes_fwd``) / (HBM x 0.85),
    on A100 and H100 alike: the chips' times differ by exactly their bandwidth ratio."""
    e = _entry("mosaic_mpt1b_h100_8gpu_seq512_mb56")
    m = case_from_entry(e).job.model
    a100, h100 = get_gpu("A100-SXM4-80GB"), get_gpu("H100-SXM5-80GB")
    nbytes = elementwise_bytes.elementwise_bytes_fwd(m, 56, 1, 1, False)
    for gpu in (a100, h100):
        t = elementwise_time.elementwise_time_fwd(m, 56, 1, 1, False, gpu, "bf16")
        assert t == pytest.approx(nbytes / (gpu.hbm_bandwidth * 0.85), rel=1e-12)
    ratio = (elementwise_time.elementwise_time_fwd(m, 56, 1, 1, False, a100, "bf16")
             / elementwise_time.elementwise_time_fwd(m, 56, 1, 1, False, h100, "bf16"))
    assert ratio == pytest.approx(3.35 / 2.039, rel=1e-12)


def test_torchtitan_runs_state_sdpas_flash_backend():
    """torchtitan's Dec 2024 runs called SDPA on a torch nightly where cuDNN attention was
    opt-in: FlashAttention-2, the profile's own kernel, now stated rather than assumed."""
    rows = [e for e in ENTRIES if e["id"].startswith("torchtitan_2412")]
    assert rows and all(attention_kernel(e["plan"]["attn_impl"]) == "fa2" for e in rows)
    case = case_from_entry(_entry("torchtitan_2412_8B_t1_fsdp"))
    assert case.job.framework.name == "torchtitan"
    assert case.job.framework.attention_kernel == "fa2"
    assert any(a.startswith("attention kernel fa2 (stated: SDPA") for a in case.assumptions)
