"""What Transformer Engine's dense ``Linear`` and ``LayerNormLinear`` save for the backward in
fp8 (``memory.te_linear_saved``, docs/calibration.md §5.113): one quantised copy of QKV's and
a dense fc1's norm output and of fc2's input, the output projection's copy beside the
attention kernel's bf16 output; TE 2.0/2.1's per-tensor ``LayerNormLinear`` without sequence
parallelism keeps two copies on Hopper; Megatron-Core's projection keeps its bf16 input
outside delayed scaling from TE 2.6 on. Closed forms per tensor to floating-point precision,
bf16 and non-TE stacks unchanged to the bit, the search's arrays equal to the scalar model."""
from __future__ import annotations

import dataclasses

import pytest

from strategies.job import make_job
from strategies.memory import activations as act
from strategies.memory.te_linear_saved import te_linear_input_bytes, te_linear_saved_delta
from strategies.plan import Plan
from strategies.presets import model_preset
from strategies.stacks.megatron import HAI_LLM, MEGATRON_CORE, NEMO
from tests.memory_checks import assert_search_equals_scalar
from topologies.cluster import cluster_preset

LLAMA = model_preset("llama3-8b")
S, H, F = LLAMA.seq_length, LLAMA.hidden_size, LLAMA.ffn_hidden_size
SBH = S * H                      # one micro-batch of 1, bytes per element of 1
PER_TENSOR = ("fp8", "fp8-delayed", "fp8-current")


def _job(dtype="fp8", fw=MEGATRON_CORE, cluster="dgx-h100", **plan):
    kw = {"tp": 2, "sp": True, "mbs": 1, "gbs": 16} | plan
    return make_job(LLAMA, cluster_preset(cluster, 1), Plan(**kw), dtype=dtype, framework=fw)


@pytest.mark.parametrize("dtype", PER_TENSOR)
def test_input_bytes_by_release_and_chip(dtype):
    """Per-tensor fp8: 1 B per element everywhere but TE 2.0/2.1's ``LayerNormLinear``
    without SP on a TN-only chip (data and transpose, 2 B); unstated, 1.x and >= 2.2: 1 B.
    The projection's own copy: 1 B under delayed scaling and before TE 2.6, else none."""
    delayed = dtype != "fp8-current"
    for v in ((2, 0), (2, 1)):
        assert te_linear_input_bytes(True, dtype, v, tn_only=True) == (1.0, 2.0, 1.0, 1.0)
        assert te_linear_input_bytes(True, dtype, v, tn_only=False) == (1.0, 1.0, 1.0, 1.0)
    for v in ((1, 13), (2, 2), (2, 5)):
        for tn in (True, False):
            assert te_linear_input_bytes(True, dtype, v, tn_only=tn) == (1.0, 1.0, 1.0, 1.0)
    for v in ((2, 6), (2, 9), (2, 16), None):
        for tn in (True, False):
            assert te_linear_input_bytes(True, dtype, v, tn_only=tn) == \
                (1.0, 1.0, 1.0, 1.0 if delayed else 0.0)


def test_input_bytes_block_formats_and_off():
    """MXFP8 ``1 + 1/32`` and fp8-blockwise ``1 + 4/128``, one column-wise copy in every
    release; nvfp4, 16-bit precisions and a stack without TE's modules: None."""
    assert te_linear_input_bytes(True, "mxfp8", (2, 1), True) == (1 + 1 / 32,) * 4
    assert te_linear_input_bytes(True, "mxfp8", None, True) == (1 + 1 / 32,) * 3 + (0.0,)
    assert te_linear_input_bytes(True, "fp8-blockwise", None, True) == (1 + 4 / 128,) * 3 \
        + (0.0,)
    for dtype in ("bf16", "fp16", "nvfp4"):
        assert te_linear_input_bytes(True, dtype, None, True) is None
    assert te_linear_input_bytes(False, "fp8", (2, 1), True) is None
    assert MEGATRON_CORE.te_linears and NEMO.te_linears and not HAI_LLM.te_linears


def test_delta_closed_form_sp():
    """tp 2 with SP, FlashAttention kept: QKV's and fc1's norm outputs ``sbh/t`` less each,
    fc2's input ``sbF/t`` less, the projection's copy ``s·b·a·d_v/t`` more."""
    d = te_linear_saved_delta(LLAMA, S, 1, 2, True, 1, 0, 0, True, (1.0, 1.0, 1.0, 1.0))
    proj = S * LLAMA.num_attention_heads * LLAMA.v_dim
    assert d == pytest.approx((-SBH / 2 - SBH / 2 - S * F / 2 + proj / 2), rel=1e-15)


def test_delta_closed_form_no_sp_and_te21():
    """Without SP the norm outputs are whole per rank (``sbh`` less each); TE 2.1's two
    copies (2 B) leave them as the table has them."""
    proj = S * LLAMA.num_attention_heads * LLAMA.v_dim
    one = te_linear_saved_delta(LLAMA, S, 1, 2, False, 1, 0, 0, True, (1.0, 1.0, 1.0, 1.0))
    assert one == pytest.approx(-2 * SBH - S * F / 2 + proj / 2, rel=1e-15)
    two = te_linear_saved_delta(LLAMA, S, 1, 2, False, 1, 0, 0, True, (1.0, 2.0, 1.0, 1.0))
    assert two == pytest.approx(-S * F / 2 + proj / 2, rel=1e-15)


def test_delta_recompute_and_unfused_attention():
    """Full and op recomputation: 0. Without FlashAttention, or with the core attention
    recomputed (Megatron's selective default), the projection's copy replaces the table's
    16-bit input: ``(1 - 2)·s·b·a·d_v/t``."""
    te = (1.0, 1.0, 1.0, 1.0)
    for rc in (2, 3):
        assert te_linear_saved_delta(LLAMA, S, 1, 2, True, 1, rc, 0, True, te) == 0.0
    proj = S * LLAMA.num_attention_heads * LLAMA.v_dim
    rest = -SBH - S * F / 2
    unfused = te_linear_saved_delta(LLAMA, S, 1, 2, True, 1, 0, 0, False, te)
    assert unfused == pytest.approx(rest - proj / 2, rel=1e-15)
    selective = te_linear_saved_delta(LLAMA, S, 1, 2, True, 1, 1, 0, True, te)
    assert selective == pytest.approx(rest - proj / 2, rel=1e-15)
    original = te_linear_saved_delta(LLAMA, S, 1, 2, True, 1, 0, 0, True, (1.0,) * 3 + (0.0,))
    assert original == pytest.approx(rest, rel=1e-15)      # the bf16 input: the table's


def test_job_layer_bytes():
    """The job's layer: Llama 3 8B tp 2 SP fp8 on H100, 544 MiB in bf16, 472 MiB with TE's
    copies; TE 2.1 without SP 632 against 568 MiB for newer releases; bf16 and a stack
    without TE's modules unchanged to the bit."""
    mib = 2 ** 20
    assert act.job_layer_activation_bytes(_job("bf16")) == 544 * mib
    assert act.job_layer_activation_bytes(_job()) == 472 * mib
    off = dataclasses.replace(MEGATRON_CORE, te_linears=False)
    assert act.job_layer_activation_bytes(_job(fw=off)) == 544 * mib
    te21 = dataclasses.replace(MEGATRON_CORE, te_version=(2, 1))
    assert act.job_layer_activation_bytes(_job(fw=te21, sp=False)) == 632 * mib
    assert act.job_layer_activation_bytes(_job(sp=False)) == 568 * mib
    assert act.job_layer_activation_bytes(_job(fw=te21)) == 472 * mib
    assert act.job_layer_activation_bytes(_job("fp8-current")) == 456 * mib
    assert act.job_layer_activation_bytes(_job("fp8-current", fw=te21)) == 472 * mib


def test_search_equals_scalar_fp8():
    """The search's memory prune reads the same rule as the scalar model (Llama 3 8B fp8 on
    one DGX H100, Megatron-Core; no routed experts)."""
    assert_search_equals_scalar(LLAMA, cluster_preset("dgx-h100", 1), "fp8", 1.0)
