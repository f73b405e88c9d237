"""NeMo AutoModel's dense and MoE blocks as its benchmark configs ran them (``backend: {attn:
te | flex, rms_norm: te}``; docs/calibration.md §5.157): the memory-bound forward bytes per
layer in closed form (``elementwise_bytes.eager_te_bytes_fwd``, kernels ``"eager_te"`` and
``"eager_flex"``), the profile's switch, and the reader's stated FlexAttention."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from strategies.cost import elementwise_bytes as eb
from strategies.errors import SpecError
from strategies.hf_config import model_from_hf
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry, load_reference
from strategies.reference.entry_stack import with_stated_kernel
from strategies.stacks.profile_fields import check_profile
from strategies.stacks.pytorch import AUTOMODEL, TORCHTITAN

REL = 1e-12
DATA = Path(__file__).resolve().parents[1] / "strategies/reference/data/automodel_perf.json"
ROWS = load_reference(str(DATA))


def _model(row_id: str):
    r = next(r for r in ROWS if r["id"] == row_id)
    return model_from_hf(r["model"]["hf_config"], r["model"]["name"]), r


def test_deepseek_v3_mla_block_closed_form():
    """DeepSeek-V3 (h 7168, 128 heads, d_nope 128, d_rope 64, q/kv latents 1536/512, 3 dense
    layers of F 18432, 58 MoE layers of 8 routed + 1 shared experts of 2048), per token: two
    TE norms 2·4·h, two adds 2·6·h, the shared experts' add 6·h on the MoE share; the fp32
    complex rotary 20·(a + 1)·64; the latent norms 4·(1536 + 512); q's cat 4·a·192, k's cat
    2·(a·128 + 64) + 2·a·192; the routed experts' compiled activation 6·k·F_e and the dense
    MLP's and shared experts' eager 10·F, each on its share."""
    m, r = _model("automodel_deepseekv3_h100_256")
    b, T = 1, m.seq_length
    h, a = 7168, 128
    wd, wm = 3 / 61, 58 / 61
    want = (2 * 4 * h + 2 * 6 * h + 6 * h * wm + 20 * (a + 1) * 64 + 4 * (1536 + 512)
            + 4 * a * 192 + 2 * (a * 128 + 64) + 2 * a * 192
            + 6 * wm * 8 * 2048 + 10 * (wd * 18432 + wm * 2048)) * T
    got = eb.elementwise_bytes_fwd(m, b, 1, 1, False, "eager_te")
    assert float(got) == pytest.approx(want, rel=REL)
    assert float(eb.eager_te_bytes_fwd(m, b, 1, 1, False)) == float(got)
    # torchtitan's eager block (two 36-byte fp32 norms, every activation eager) was charged
    assert float(eb.elementwise_bytes_fwd(m, b, 1, 1, False, "eager")) > 1.4 * float(got)


def test_qwen3_gqa_block_closed_form():
    """Qwen3-30B-A3B (h 2048, 32 query and 4 key-value heads of 128, every layer MoE with 8 of
    128 experts of 768, no shared expert, q/k norms): two TE norms and two adds 20·h; the TE
    q and k norms 4·(a + g)·d; the bf16 half-split rotary 18·(a + g)·d; no repeat_kv; the
    compiled routed activation 6·8·768. Micro-batch 4."""
    m, r = _model("automodel_qwen330ba3b_h100_8")
    assert m.qk_norm and m.kv_heads == 4 and m.num_shared_experts == 0
    b = r["plan"]["microbatch"]
    T = b * m.seq_length
    h, a, g, d = 2048, 32, 4, 128
    want = (20 * h + 4 * (a + g) * d + 18 * (a + g) * d + 6 * 8 * 768) * T
    assert float(eb.elementwise_bytes_fwd(m, b, 1, 1, False, "eager_te")) == \
        pytest.approx(want, rel=REL)


def test_gpt_oss_flex_layout_copies():
    """gpt-oss-20b under FlexAttention: the same block plus the transposes of q, k, v to
    ``[b, a, s, d]`` and of the output back, 4·(2a + 2g)·d per token; only with "eager_flex"."""
    m, r = _model("automodel_gptoss20b_h100_8")
    b = r["plan"]["microbatch"]
    T = b * m.seq_length
    a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
    te = float(eb.elementwise_bytes_fwd(m, b, 1, 1, False, "eager_te"))
    flex = float(eb.elementwise_bytes_fwd(m, b, 1, 1, False, "eager_flex"))
    assert flex - te == pytest.approx(4 * (2 * a + 2 * g) * d * T, rel=REL)
    h, F = m.hidden_size, m.mean_mlp_width()
    assert te == pytest.approx((20 * h + 18 * (a + g) * d + 6 * F) * T, rel=REL)


def test_sequence_parallel_divides_the_hidden_work_only():
    """Vectorised like the other forms: the norms and adds over ``h`` divided by ``t`` only
    with sequence parallelism, the heads' and experts' work always."""
    m, _ = _model("automodel_qwen330ba3b_h100_8")
    per_h = 20 * m.hidden_size * m.seq_length
    rest = float(eb.eager_te_bytes_fwd(m, 1, 1, 1, False)) - per_h
    assert float(eb.eager_te_bytes_fwd(m, 1, 4, 1, True)) == \
        pytest.approx((per_h + rest) / 4, rel=REL)
    assert float(eb.eager_te_bytes_fwd(m, 1, 4, 1, False)) == \
        pytest.approx(per_h + rest / 4, rel=REL)


def test_hybrid_block_keeps_its_own_path():
    """A hybrid model's layer is ``eager_hybrid_bytes_fwd`` under every eager kernel value."""
    m = model_preset("nemotron3-nano-30b-a3b")
    want = float(eb.eager_hybrid_bytes_fwd(m, 4, 1, 1, False))
    for k in ("eager", "eager_te", "eager_flex"):
        assert float(eb.elementwise_bytes_fwd(m, 4, 1, 1, False, k)) == want


def test_profile_switch_and_refusal():
    assert AUTOMODEL.elementwise_kernels == "eager_te"
    assert TORCHTITAN.elementwise_kernels == "eager"
    with pytest.raises(SpecError, match="elementwise_kernels"):
        check_profile(replace(AUTOMODEL, elementwise_kernels="te"))


def test_reader_states_flex_attention():
    """The reader turns AutoModel's blocks to "eager_flex" where ``plan.attn_impl`` names
    FlexAttention (the gpt-oss row alone), and says so; TE's attention and other stacks keep
    their kernels."""
    kinds = {r["id"]: case_from_entry(r, ROWS).job.framework.elementwise_kernels for r in ROWS}
    assert kinds == {r["id"]: ("eager_flex" if "gptoss" in r["id"] else "eager_te")
                     for r in ROWS}
    notes: list[str] = []
    flex = {"attn_impl": "FlexAttention (backend attn: flex)"}
    assert with_stated_kernel(AUTOMODEL, flex, notes).elementwise_kernels == "eager_flex"
    assert any("FlexAttention" in n and "§5.157" in n for n in notes)
    assert with_stated_kernel(TORCHTITAN, flex, []).elementwise_kernels == "eager"
    te = {"attn_impl": "Transformer Engine DotProductAttention (backend attn: te)"}
    assert with_stated_kernel(AUTOMODEL, te, []).elementwise_kernels == "eager_te"


def test_gpt_oss_expert_bias_adds_closed_form():
    """gpt-oss's per-expert biases, added eagerly by ``GroupedExpertsDeepEP._apply_bias``: per
    routed row (k = 4 of 32 experts, F_e = h = 2880) forward 16·F_e + 28·h, backward
    12·F_e + 28·h; none for a model without biases; charged once, by ``eager_variant_time``,
    for AutoModel's blocks only."""
    from strategies.cost.elementwise_time import eager_variant_time
    from strategies.cost.hbm_rate import usable_hbm
    from topologies.gpus import get_gpu
    m, r = _model("automodel_gptoss20b_h100_8")
    b = r["plan"]["microbatch"]
    rows = b * m.seq_length * 4
    f, bw = eb.expert_bias_bytes(m, b, 1, 1)
    assert float(f) == pytest.approx((16 * 2880 + 28 * 2880) * rows, rel=REL)
    assert float(bw) == pytest.approx((12 * 2880 + 28 * 2880) * rows, rel=REL)
    assert float(eb.expert_bias_bytes(m, b, 1, 1, load=1.5)[0]) == pytest.approx(1.5 * f, rel=REL)
    q, _ = _model("automodel_qwen330ba3b_h100_8")
    assert eb.expert_bias_bytes(q, 4, 1, 1) == (0.0, 0.0)
    gpu = get_gpu("h100-sxm")
    hbm = usable_hbm(gpu)
    fw = case_from_entry(r, ROWS).job.framework
    vf, vb = eager_variant_time(m, b, 1, 1, gpu, 1.0, fw)
    assert vf == pytest.approx(f / hbm, rel=REL) and vb == pytest.approx(bw / hbm, rel=REL)
    assert eager_variant_time(m, b, 1, 1, gpu, 1.0, TORCHTITAN) == (0.0, 0.0)
