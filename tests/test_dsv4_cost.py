"""DeepSeek-V4's cost (``strategies.cost.dsv4_cost``, docs/calibration.md §5.154, §5.158):
the mean layer's attention-core keys and its compressors' and indexer's GEMM FLOPs against
the ``sparse_attention`` closed forms, the indexer's and its loss's DSA kernels (FLOPs,
bytes, in the forward at the core's rate), the hyper-connection mapping under its read, the
hyper-connections' bytes closed form, the hash-routed layers' router, the saved activations,
the estimate against the contention-free simulation of a small DeepSeek-V4-shaped plan and
what is refused by name."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.simulate import simulate
from strategies.cost import (attention_counts, attention_time, dsv4_cost, elementwise_bytes,
                             gemm_shapes)
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.flop_counts import gemm_flops_fwd
from strategies.cost.sparse_attention import attended_keys, sparse_flops_fwd_per_token
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.memory.layer_terms import layer_activation_terms, part_activation_terms
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.search.space import enumerate_space
from topologies.cluster import cluster_preset
from topologies.gpus import GPUS, get_gpu

M = model_preset("deepseek-v4-flash")
SMALL = replace(M, name="dsv4-6", num_layers=6, compress_ratios=(0, 4, 128, 4, 128, 0),
                num_experts=16, num_hash_layers=1)


def _shares(m) -> dict[int, float]:
    L = m.num_layers
    return {r: m.compress_ratios.count(r) / L for r in (0, 4, 128)}


@pytest.mark.parametrize("m", [M, SMALL])
def test_core_flops_are_the_attended_keys(m):
    """The mean layer's QK^T and AV FLOPs are the layers' ``core`` of
    ``sparse_flops_fwd_per_token`` (``4·a·d`` per attended key) averaged over the layers,
    in every score mode (the sparse kernel computes exactly the keys it gathers)."""
    s = m.seq_length
    want = sum(w * sparse_flops_fwd_per_token(m, r)["core"] for r, w in _shares(m).items()) * s
    for skip in (True, False):
        got = attention_counts.attn_core_flops_fwd(m, 1, 1, 1, skip)
        assert abs(got - want) <= 1e-12 * want
    keys = sum(attended_keys(m, r) for r in m.compress_ratios) / m.num_layers
    for mode in attention_counts.SCORE_MODES:
        assert attention_counts.mean_score_elements(m, mode) == pytest.approx(keys, rel=1e-15)
    assert attention_counts.window_share(m) == 0.0


@pytest.mark.parametrize("m", [M, SMALL])
def test_extra_gemm_flops_are_the_closed_forms(m):
    """The mean layer's GEMM FLOPs less the attention linears', the experts' and the router's
    are the compressors' and the indexer's ``sparse_flops_fwd_per_token`` (at their layers'
    shares) less the indexer's scores (a cuDNN kernel, ``dsa_flops_fwd_per_token``), per
    token; the hyper-connection mappings are no GEMM (their MMA runs inside the norm's
    pass)."""
    s = m.seq_length
    extra = sum(2.0 * c * N * K for c, _, N, K, _ in dsv4_cost.dsv4_gemms(m, 1))
    want = sum(w * (sparse_flops_fwd_per_token(m, r)["compressor"]
                    + sparse_flops_fwd_per_token(m, r)["indexer"])
               for r, w in _shares(m).items()) - dsv4_cost.dsa_flops_fwd_per_token(m)["scores"]
    assert abs(extra - want) <= 1e-12 * want
    plain = replace(m, compress_ratios=None, o_lora_rank=None, o_groups=None,
                    index_n_heads=None, index_head_dim=None, index_topk=None, hc_streams=1,
                    num_hash_layers=0, kv_channels=m.head_dim, sliding_window=None,
                    q_lora_rank=None, attention_sinks=False, activation_clamp=None)
    lin = sum(2.0 * i * o for _, i, o, _ in m.attention_linears())
    lin0 = sum(2.0 * i * o for _, i, o, _ in plain.attention_linears())
    router = 2.0 * m.hidden_size * m.num_experts * m.num_hash_layers / m.num_layers
    got = gemm_flops_fwd(m, 1, 1, 1) / s - gemm_flops_fwd(plain, 1, 1, 1) / s
    assert got == pytest.approx(want + lin - lin0 - router, rel=1e-12)


@pytest.mark.parametrize("m", [M, SMALL])
def test_dsa_kernel_flops_closed_forms(m):
    """The ratio-4 layers' share of: the indexer's scores ``2·H_I·d_I`` per visible entry,
    the loss's target ``2·a·d`` and its indexer backward ``3·2·H_I·d_I`` per selected
    compressed entry (``min(k, floor(j/4))`` summed over the positions ``j``), per token;
    ``a/tp`` heads for the target; nothing without ratio-4 layers."""
    s, hd, k = m.seq_length, m.index_n_heads * m.index_head_dim, m.index_topk
    w4 = _shares(m)[4]
    visible = sum(j // 4 for j in range(1, s + 1)) / s
    sel = sum(min(k, j // 4) for j in range(1, s + 1)) / s
    for tp in (1, 2):
        got = dsv4_cost.dsa_flops_fwd_per_token(m, tp)
        want = {"scores": w4 * 2 * hd * visible,
                "teacher": w4 * 2 * m.num_attention_heads / tp * m.head_dim * sel,
                "indexer_bwd": w4 * 6 * hd * sel}
        for key, v in want.items():
            assert abs(got[key] - v) <= 1e-12 * v, key
    none = replace(m, compress_ratios=tuple(0 if r == 4 else r for r in m.compress_ratios))
    assert sum(dsv4_cost.dsa_flops_fwd_per_token(none).values()) == 0.0
    assert dsv4_cost.loss_bytes_per_token(m) == pytest.approx(w4 * 140 * k, rel=1e-15)
    assert dsv4_cost.loss_bytes_per_token(none) == 0.0


def test_dsa_kernels_run_in_the_forward_at_the_core_rate(monkeypatch):
    """The attention forward is the sparse core's plus ``T·F`` FLOPs at the core's own
    FLOP rate and ``T·loss_bytes`` at the HBM rate; the backward does not change."""
    g = get_gpu("gb300")
    f, b = attention_time.attention_time_fwd(M, 1, 1, 1, True, g)
    monkeypatch.setattr(dsv4_cost, "dsa_flops_fwd_per_token", lambda m, tp=1: {"x": 0.0})
    monkeypatch.setattr(dsv4_cost, "loss_bytes_per_token", lambda m: 0.0)
    f0, b0 = attention_time.attention_time_fwd(M, 1, 1, 1, True, g)
    monkeypatch.undo()
    T = M.seq_length
    core = attention_counts.attn_core_flops_fwd(M, 1, 1, 1, True)
    F = sum(dsv4_cost.dsa_flops_fwd_per_token(M).values())
    want = f0 * (1 + T * F / core) + T * dsv4_cost.loss_bytes_per_token(M) / usable_hbm(g)
    assert float(f) == pytest.approx(float(want), rel=1e-12)
    assert float(b) == float(b0) and float(f) > float(f0)


def test_hc_mapping_mma_hides_under_its_read():
    """``n² + 2n`` FLOPs per byte of streams (24 at n = 4); on every Blackwell chip of the
    catalog (the fused cuTile kernel's) the TF32 GEMM rate over the HBM rate exceeds it, so
    the mapping's time is its read."""
    assert dsv4_cost.hc_mapping_flop_per_byte(M) == 24.0
    assert dsv4_cost.hc_mapping_flop_per_byte(replace(M, hc_streams=2)) == 8.0
    chips = [g for n, g in GPUS.items() if n.startswith(("B200", "B300", "GB200", "GB300"))]
    assert len(chips) == 4
    for g in chips:
        assert g.peak("tf32") * g.matmul_efficiency / usable_hbm(g) \
            > dsv4_cost.hc_mapping_flop_per_byte(M), g.name


def test_precisions_as_megatron_runs_them():
    """``wo_a`` (an einsum), the compressors (the indexer's too) and ``weights_proj`` (FP8
    disabled) at the 16-bit rate (``row_parallel`` None); the indexer's ``wq_b`` a
    Transformer Engine linear at the run's precision (False); another model's output
    projection unchanged."""
    parts = gemm_shapes.layer_gemm_parts(M, 1, 1, 1, 1)
    names = [n for n, *_ in M.attention_linears()]
    assert [g[4] for _, g in parts[:len(names)]] == \
        [False if n != "o_down" else None for n in names[:4]] + [True]
    assert [g[4] for g in dsv4_cost.dsv4_gemms(M, 1)] == [None, None, None, False, None]
    v3 = model_preset("deepseek-v3")
    assert all(g[4] is not None for p, g in gemm_shapes.layer_gemm_parts(v3, 1, 1, 1, 1)
               if p in ("attn", "mla_up"))


def test_hash_layers_run_no_router_gemm():
    routers = [g for p, g in gemm_shapes.layer_gemm_parts(M, 1, 1, 1, 1)
               if p == "routed_mlp" and g[2] == M.num_experts]
    assert len(routers) == 1 and routers[0][0] == pytest.approx(1 - 3 / 43, rel=1e-15)
    assert dsv4_cost.router_share(replace(M, num_hash_layers=0)) == 1.0


def test_hyper_connection_bytes_closed_form():
    """``2·(4n - 1)·h`` bf16 elements per token and layer beyond one residual stream: 4
    streams of 4096, ``2·15·4096·2`` B; none with one stream; the layer's elementwise bytes
    grow by exactly ``T·hc`` bytes between 4 streams and 1, split by SP's ``tp``."""
    assert dsv4_cost.hc_bytes_per_token(M) == 2 * 15 * 4096 * 2
    assert dsv4_cost.hc_bytes_per_token(replace(M, hc_streams=1)) == 0.0
    assert dsv4_cost.hc_bytes_per_token(replace(M, hc_streams=2)) == 2 * 7 * 4096 * 2
    T = M.seq_length
    for tp, sp in ((1, False), (4, True)):
        d = (elementwise_bytes.elementwise_bytes_fwd(M, 1, tp, 1, sp)
             - elementwise_bytes.elementwise_bytes_fwd(replace(M, hc_streams=1), 1, tp, 1, sp))
        assert d == pytest.approx(T * dsv4_cost.hc_bytes_per_token(M) / (tp if sp else 1),
                                  rel=1e-12)


def test_sparse_bytes_closed_form():
    """The compressors' pooling, the indexer query's RoPE and rotation and its fp32 scores,
    a row of ``s/4`` written per query and the visible ones read by the top-k; the query's
    per-head norm ``2·a·d`` bf16 elements."""
    s, d, di = M.seq_length, M.head_dim, M.index_head_dim
    w4, w128 = 21 / 43, 20 / 43
    visible = (4 * 1024 * 1023 // 2 + 1024) / s
    want = (w4 * (4 * d + 2 * d / 4) * 2 + w128 * (2 * d + d / 128) * 2
            + w4 * (4 * di + 2 * di / 4) * 2 + w4 * 4 * 64 * 128 * 2
            + w4 * 4 * (1024 + visible))
    assert dsv4_cost.sparse_bytes_per_token(M) == pytest.approx(want, rel=1e-12)
    assert dsv4_cost.query_norm_bytes_per_token(M) == 2 * 64 * 512 * 2


def test_saved_activations():
    """Each block's input is the ``n`` streams; one key/value head; the latents' and the
    compressed attention's tensors; ``mla_up_proj`` drops Q and the key/value head."""
    s = M.seq_length
    t = layer_activation_terms(M, s, 1)
    assert t["ln1_input"] == t["ln2_input"] == 2 * s * 4096 * 4
    assert t["k_v"] == 2 * s * 512
    assert t["mla_latents"] == 2 * s * dsv4_cost.saved_elements_per_token(M)
    up = part_activation_terms(M, s, 1)["mla_up"]
    assert [x for x, _ in up] == [t["q"], t["k_v"]]


@pytest.mark.parametrize("plan", ["tp=1,ep=8,pp=1,mbs=1,gbs=16",
                                  "tp=1,ep=4,pp=2,mbs=1,gbs=32"])
def test_estimate_meets_the_contention_free_simulation(plan):
    """A DeepSeek-V4-shaped plan (6 layers: sliding, ratio 4 and 128, 16 experts, one hash
    layer, the MTP module) on one DGX H100: within 1 % (-0.46, -0.18 % when written)."""
    j = make_job(SMALL, cluster_preset("dgx-h100", 1), parse_plan(plan))
    e, s = estimate(j).step_time_s, simulate(j, network="contention-free").step_time_s
    assert e == pytest.approx(s, rel=0.01)


@pytest.mark.parametrize("plan,field", [("tp=1,cp=2,ep=4,pp=1,mbs=1,gbs=16", "cp"),
                                        ("tp=1,ep=8,pp=1,mbs=1,gbs=16,flash_attn=false",
                                         "flash_attn")])
def test_what_is_not_modelled_is_refused_by_name(plan, field):
    with pytest.raises(SpecError) as e:
        make_job(SMALL, cluster_preset("dgx-h100", 1), parse_plan(plan))
    assert e.value.field == field and "DeepSeek-V4" in str(e.value)


def test_the_search_keeps_no_context_parallel_plan():
    sp = enumerate_space(SMALL, cluster_preset("dgx-h100", 1), 16)
    assert len(sp.cols["cp"]) and (sp.cols["cp"] == 1).all() and sp.cols["flash"].all()


def test_bad_input_names_the_field():
    with pytest.raises(SpecError) as e:
        sparse_flops_fwd_per_token(M, 8)
    assert e.value.field == "ratio"
    with pytest.raises(SpecError) as e:
        replace(M, compress_ratios=(0,) * 42 + (3,))
    assert e.value.field == "compress_ratios"
