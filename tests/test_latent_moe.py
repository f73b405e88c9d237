"""Nemotron 3 Super/Ultra: the latent MoE's closed forms (FLOPs and dispatch bytes per token,
parameters), the hybrid multi-token-prediction block, the config reader's refusals and the
estimate against the contention-free simulation of a latent-MoE hybrid plan
(docs/calibration.md §5.150)."""
from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from simulator.simulate import simulate
from strategies.cost.flop_counts import gemm_flops_fwd, mtp_flops_fwd_per_token
from strategies.cost.moe_bytes import routed_token_bytes
from strategies.cost.param_counts import mtp_params_split
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.hf_config import model_from_hf
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

SUPER = model_preset("nemotron3-super")
ULTRA = model_preset("nemotron3-ultra")


def _hf(m) -> dict:
    """A nemotron_h config.json of preset ``m`` (the fields the reader takes)."""
    return {"model_type": "nemotron_h", "hidden_size": m.hidden_size,
            "num_hidden_layers": m.num_layers, "hybrid_override_pattern": m.hybrid_pattern,
            "num_attention_heads": m.num_attention_heads, "num_key_value_heads": m.kv_heads,
            "head_dim": m.head_dim, "intermediate_size": m.ffn_hidden_size,
            "vocab_size": m.vocab_size, "mamba_num_heads": m.mamba_num_heads,
            "mamba_head_dim": 64, "ssm_state_size": m.mamba_state_dim, "n_groups": 8,
            "conv_kernel": 4, "chunk_size": 128, "mlp_hidden_act": "relu2",
            "n_routed_experts": m.num_experts, "num_experts_per_tok": m.moe_router_topk,
            "moe_intermediate_size": m.moe_ffn_hidden_size, "n_shared_experts": 1,
            "moe_shared_expert_intermediate_size": m.shared_expert_ffn_hidden_size,
            "moe_latent_size": m.moe_latent_size, "num_nextn_predict_layers": 1,
            "mtp_hybrid_override_pattern": "*E", "tie_word_embeddings": False,
            "max_position_embeddings": 8192, "use_bias": False}


@pytest.mark.parametrize("m", [SUPER, ULTRA], ids=["super", "ultra"])
def test_latent_moe_flops_per_token(m):
    """An MoE layer's forward FLOPs per token: the routed experts at the latent width
    ``2·k·(L·F + F·L)``, the router ``2·h·E`` on the hidden state, the two latent
    projections ``2·(h·L + L·h)`` and the shared expert ``2·(h·Fs + Fs·h)`` (squared ReLU:
    not gated)."""
    h, L, F, k, E = m.hidden_size, m.moe_latent_size, m.expert_ffn, m.moe_router_topk, \
        m.num_experts
    Fs = m.shared_ffn
    want = 4 * k * L * F + 2 * h * E + 4 * h * L + 4 * h * Fs
    got = gemm_flops_fwd(m, 1, 1, 1, "moe") / m.seq_length
    assert got == pytest.approx(want, rel=1e-12)
    # without the latent projections the experts run at h: more FLOPs, by the closed form
    full = replace(m, moe_latent_size=None)
    assert gemm_flops_fwd(full, 1, 1, 1, "moe") / m.seq_length == pytest.approx(
        4 * k * h * F + 2 * h * E + 4 * h * Fs, rel=1e-12)


@pytest.mark.parametrize("m", [SUPER, ULTRA], ids=["super", "ultra"])
def test_dispatch_bytes_per_token_at_the_latent_width(m):
    """The dispatch moves each token's ``k`` copies at the latent width, 16 bits each:
    ``2·k·L`` bytes per token (``h/L`` times less than the same experts at ``h``)."""
    T = m.seq_length
    assert routed_token_bytes(m, 1, 1, 1) == pytest.approx(
        2 * m.moe_router_topk * m.moe_latent_size * T, rel=1e-15)
    full = replace(m, moe_latent_size=None)
    assert routed_token_bytes(full, 1, 1, 1) / routed_token_bytes(m, 1, 1, 1) == \
        pytest.approx(m.hidden_size / m.moe_latent_size, rel=1e-15)


@pytest.mark.parametrize("m,total,active", [(SUPER, 120e9, 12e9), (ULTRA, 550e9, 55e9)],
                         ids=["super", "ultra"])
def test_params_match_the_model_cards(m, total, active):
    """Nemotron 3 Super 120B-A12B and Ultra 550B-A55B (the model cards' names): total within
    1 %, active (embedding table left out) within 2 %; an MoE layer's count by the closed
    form (experts ``E·2·L·F``, the router and its bias ``E·(h+1)``, the shared expert
    ``2·h·Fs``, the latent projections ``2·h·L``)."""
    assert m.num_params() == pytest.approx(total, rel=0.01)
    assert m.active_params(embedding=False) == pytest.approx(active, rel=0.02)
    h, L, F, E = m.hidden_size, m.moe_latent_size, m.expert_ffn, m.num_experts
    assert m.mlp_params("moe") == E * 2 * L * F + E * (h + 1) + 2 * h * m.shared_ffn \
        + 2 * h * L
    # the latent projections are whole on every tensor-parallel rank (duplicated)
    moe = m.of_kind("moe")
    dense, expert = mtp_params_split(m, 2, 8, 1)
    assert moe.tp_replicated_params() == 2 * h * L
    assert expert == E * 2 * L * F / 8
    # the MTP block "*E": two norms in, the 2h x h projection, its attention and MoE layers
    # (each with its pre-norm) and the output norm; once however many depths it runs
    assert m.mtp_params() == 3 * h + 2 * h * h + m.layer_params("attention") \
        + m.layer_params("moe")
    assert replace(m, mtp_repeats=2).mtp_params() == m.mtp_params()
    assert dense + expert < m.mtp_params()


def test_config_reads_the_latent_moe_and_the_mtp_block():
    """The nemotron_h reader gives the preset (the latent size, the MTP block)."""
    m = model_from_hf(_hf(SUPER), name="nemotron3-super")
    assert (m.moe_latent_size, m.num_nextn_predict_layers, m.mtp_hybrid_pattern) == \
        (1024, 1, "*E")
    assert m.num_params() == SUPER.num_params() and m.mtp_params() == SUPER.mtp_params()


@pytest.mark.parametrize("drop,add,field", [
    ("mtp_hybrid_override_pattern", {}, "mtp_hybrid_override_pattern"),
    ("num_nextn_predict_layers", {}, "num_nextn_predict_layers"),
    (None, {"hybrid_override_pattern": "M*-" * 29 + "M", "num_hidden_layers": 88,
            "n_routed_experts": None}, "moe_latent_size"),
    (None, {"moe_latent_size": 0}, "moe_latent_size")])
def test_bad_configs_name_the_field(drop, add, field):
    """An MTP count without its block's layers (or the reverse), a latent size without MoE
    layers or not positive: refused naming the field."""
    cfg = copy.deepcopy(_hf(SUPER))
    if drop:
        del cfg[drop]
    cfg.update(add)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(SpecError) as e:
        model_from_hf(cfg, name="bad")
    assert e.value.field == field


def test_mtp_flops_count_each_depth():
    """The repeated MTP block's FLOPs per token double with two depths; its block is its
    attention layer's and its MoE layer's GEMMs, its attention core, the ``2h -> h``
    projection and the LM head."""
    one = mtp_flops_fwd_per_token(SUPER)
    assert mtp_flops_fwd_per_token(replace(SUPER, mtp_repeats=2)) == pytest.approx(2 * one,
                                                                                  rel=1e-15)
    h, s = SUPER.hidden_size, SUPER.seq_length
    gemm = (gemm_flops_fwd(SUPER, 1, 1, 1, "attention")
            + gemm_flops_fwd(SUPER, 1, 1, 1, "moe")) / s
    core = 2.0 * SUPER.num_attention_heads * 2 * SUPER.head_dim * s     # the full square
    assert one == pytest.approx(4 * h * h + gemm + core + 2 * h * SUPER.vocab_size, rel=1e-12)


def test_megatron_export_names_the_latent_and_the_mtp_depths():
    m = replace(SUPER, mtp_repeats=2)
    j = make_job(m, cluster_preset("dgx-h100", 8), parse_plan("tp=1,ep=64,pp=1,mbs=1,gbs=64"))
    line, _ = megatron_args(j)
    assert "--moe-latent-size 1024" in line and "--mtp-num-layers 2" in line
    assert "--mtp-use-repeated-layer" in line and f"{SUPER.hybrid_pattern}/*E/*E'" in line


SMALL = replace(SUPER, name="super-8", hybrid_pattern="MEM*EMEM", num_layers=8,
                seq_length=4096)


@pytest.mark.parametrize("mtp,plan", [
    (0, "tp=1,ep=8,pp=1,mbs=1,gbs=16"), (2, "tp=1,ep=8,pp=1,mbs=1,gbs=16"),
    (2, "tp=2,ep=8,etp=1,sp=true,pp=1,mbs=1,gbs=16"), (2, "tp=1,ep=4,pp=2,mbs=1,gbs=32")])
def test_estimate_meets_the_contention_free_simulation(mtp, plan):
    """A latent-MoE hybrid plan (Super's layers, 8 of them) on one DGX H100, without and with
    the MTP block run at two depths: within 1 % (-0.51, -0.25, +0.40, +0.29 % when written)."""
    m = replace(SMALL, num_nextn_predict_layers=0, mtp_hybrid_pattern=None) if not mtp else \
        replace(SMALL, mtp_repeats=mtp)
    j = make_job(m, cluster_preset("dgx-h100", 1), parse_plan(plan))
    e, s = estimate(j).step_time_s, simulate(j, network="contention-free").step_time_s
    assert e == pytest.approx(s, rel=0.01)
