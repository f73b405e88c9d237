"""DeepSeek-V4's pieces priced as the code runs them (docs/calibration.md §5.164): the
indexer projections' detached inputs (no data gradient), the hyper-connections' Sinkhorn
kernels, the multi-token-prediction module's sliding-window layer; each a closed form at
the model's shape, and the Megatron-Bridge rows' estimate (``dsv4_2026.json``) moving by
exactly its sum over the step's layers and micro-batches."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.cost import dsv4_cost, gemm_shapes, layer_time, param_counts
from strategies.cost.gemm_time import gemm_units, units_time_bwd, units_time_fwd
from strategies.cost.hbm_rate import usable_hbm
from strategies.estimate.scalar import estimate
from strategies.hf_config import model_from_hf
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.reference.cases import reference_cases
from topologies.gpus import get_gpu

M = model_preset("deepseek-v4-flash")
ROWS = "strategies/reference/data/dsv4_2026.json"
LAYERS, MICRO = 43, 16      # the rows' main layers and micro-batches (gbs 2048 / dp 128)


@pytest.fixture(scope="module")
def rows():
    """The two rows' jobs (GB300, GB200)."""
    return [c.job for c in reference_cases([ROWS]) if c.job is not None]


def _layer_kw(job) -> dict:
    """``layer_time``'s arguments for one of the rows' layers from its plan (tp 1, ep 64, mbs
    1, the recipe's selective recompute of ``mla_up_proj``, its dispatcher and CUDA graph;
    the balanced expert load: the expert terms cancel in every difference here)."""
    P = PlanArrays.of_plan(job.plan)
    return dict(b=P.mbs, tp=P.tp, cp=P.cp, ep=P.ep, sp=P.sp, flash=P.flash_attn,
                recompute=P.recompute, modules=P.recompute_modules, gpu=job.cluster.gpu,
                dtype=job.dtype, etp=P.etp, dispatcher=P.moe_dispatcher, graphed=P.cuda_graph,
                fw=job.framework, system=job.system)


def test_indexer_projections_take_no_data_gradient():
    """The indexer's compressor, ``wq_b`` and ``weights_proj`` are ``DetachedInput``: their
    backward is the weight gradient alone. The layer's GEMM backward is the unmarked one's
    less exactly those three data-gradient GEMMs (1e-12); forward and weight gradient do
    not change; no other GEMM is marked."""
    g = get_gpu("gb300")
    gs = [x for _, x in gemm_shapes.layer_gemm_parts(M, 1, 1, 1, 64)]
    marked = [x for x in gs if isinstance(x, dsv4_cost.DetachedInput)]
    hi, di = M.index_n_heads, M.index_head_dim
    assert [x[1:] for x in marked] == [(4096, 4 * di, 4096, None),
                                       (4096, hi * di, M.q_lora_rank, False),
                                       (4096, hi, 4096, None)]
    plain = [tuple(x) for x in gs]
    u, u0 = gemm_units(gs, 1, g, "mxfp8"), gemm_units(plain, 1, g, "mxfp8")
    n = [x[0] for x in gs]
    dgrad = sum(x[0] * v[2] * v[3] for x, v in zip(gs, u0)
                if isinstance(x, dsv4_cost.DetachedInput))
    (b, w), (b0, w0) = units_time_bwd(n, u), units_time_bwd(n, u0)
    assert float(b) == pytest.approx(float(b0 - dgrad), rel=1e-12)
    assert float(w) == float(w0) and float(dgrad) > 0
    assert float(units_time_fwd(n, u)) == float(units_time_fwd(n, u0))
    v3 = model_preset("deepseek-v3")
    assert not any(isinstance(x, dsv4_cost.DetachedInput)
                   for _, x in gemm_shapes.layer_gemm_parts(v3, 1, 1, 1, 8))


def test_rows_move_by_the_data_gradients(rows, monkeypatch):
    """Unmarked, each row's step is longer by exactly 43 layers x 16 micro-batches of the
    three data-gradient GEMMs (the MTP module's sliding-window layer has no indexer)."""
    e = [estimate(j).step_time_s for j in rows]
    gs = [x for _, x in gemm_shapes.layer_gemm_parts(M, 1, 1, 1, 64)]
    plain = gemm_shapes.dsv4_gemms
    monkeypatch.setattr(gemm_shapes, "dsv4_gemms", lambda m, T: [tuple(x) for x in plain(m, T)])
    for j, e1 in zip(rows, e):
        u = gemm_units([tuple(x) for x in gs], 1, j.cluster.gpu, j.dtype)
        want = sum(x[0] * v[2] * v[3] for x, v in zip(gs, u)
                   if isinstance(x, dsv4_cost.DetachedInput))
        assert float(want) > 0
        assert estimate(j).step_time_s - e1 == pytest.approx(LAYERS * MICRO * float(want),
                                                             rel=1e-9)


def test_sinkhorn_bytes_closed_form():
    """Per token and layer (two blocks) in fp32: forward ``3·n²`` (read the logits, write
    the result and ``M_init``), backward ``3·n² + 2·(2·I·n² + 2·I·n)`` (the gradient,
    ``M_init``, the logits' gradient; the replayed iterations' workspace written and read):
    384 B and 13,184 B at ``n`` 4, ``I`` 20; none with one stream; ``I`` read from the
    checkpoint's ``hc_sinkhorn_iters``."""
    assert dsv4_cost.sinkhorn_bytes_per_token(M) == (2 * 3 * 16 * 4, 2 * (48 + 2 * 800) * 4)
    assert dsv4_cost.sinkhorn_bytes_per_token(M) == (384.0, 13184.0)
    assert dsv4_cost.sinkhorn_bytes_per_token(replace(M, hc_streams=1)) == (0.0, 0.0)
    m2 = replace(M, hc_streams=2, hc_sinkhorn_iters=5)
    assert dsv4_cost.sinkhorn_bytes_per_token(m2) == (2 * 12 * 4, 2 * (12 + 2 * (40 + 20)) * 4)
    assert model_from_hf(rows_cfg()).hc_sinkhorn_iters == 20
    assert model_from_hf(dict(rows_cfg(), hc_sinkhorn_iters=7)).hc_sinkhorn_iters == 7


def rows_cfg() -> dict:
    """The rows' HF config (``dsv4_2026.json``)."""
    import json
    with open(ROWS) as f:
        return dict(json.load(f)[0]["model"]["hf_config"])


def test_sinkhorn_in_the_layer_and_the_rows(rows, monkeypatch):
    """The layer's forward and backward grow by exactly ``T·bytes/hbm`` (1e-12); each row's
    step by exactly 44 layers (the MTP module's has its hyper-connections) x 16 micro-batches
    of the backward's (1e-9), and of the forward's on GB300; on GB200 the forward's moves it
    by 0.94 of that (part of the first micro-batch's forward hides under communication it
    overlaps there)."""
    full = dsv4_cost.sinkhorn_bytes_per_token(M)
    lt = [layer_time.layer_time(M, **_layer_kw(j)) for j in rows]
    est = {}
    for k, v in (("both", full), ("fwd", (full[0], 0.0)), ("bwd", (0.0, full[1])),
                 ("none", (0.0, 0.0))):
        monkeypatch.setattr(dsv4_cost, "sinkhorn_bytes_per_token", lambda m, v=v: v)
        est[k] = [estimate(j).step_time_s for j in rows]
    t0 = [layer_time.layer_time(M, **_layer_kw(j)) for j in rows]
    for i, j in enumerate(rows):
        hbm = usable_hbm(j.cluster.gpu, j.system)
        f, b = (4096 * x / hbm for x in full)
        assert float(lt[i].fwd - t0[i].fwd) == pytest.approx(f, rel=1e-12)
        assert float(lt[i].bwd - t0[i].bwd) == pytest.approx(b, rel=1e-12)
        n = (LAYERS + 1) * MICRO
        assert est["bwd"][i] - est["none"][i] == pytest.approx(n * b, rel=1e-9)
        moved = (est["fwd"][i] - est["none"][i]) / (n * f)
        if j.cluster.gpu.name == "GB300":
            assert moved == pytest.approx(1.0, rel=1e-9)
            assert est["both"][i] - est["none"][i] == pytest.approx(n * (f + b), rel=1e-9)
        else:
            assert 0.93 < moved < 1.0


def test_mtp_layer_is_a_sliding_window_one():
    """DeepSeek-V4's MTP module's layer: every ratio 0 and a learned router (no compressor,
    indexer, DSA kernel or hash layer), the model itself for another; its parameters
    ``mtp_params`` exactly (the stream contraction included)."""
    v = M.mtp_layer_model()
    ref = replace(M, compress_ratios=(0,) * 43, num_hash_layers=0)
    assert v.compress_ratios == ref.compress_ratios and v.num_hash_layers == 0
    assert dsv4_cost.dsv4_gemms(v, 4096) == [] and dsv4_cost.router_share(v) == 1.0
    assert sum(dsv4_cost.dsa_flops_fwd_per_token(v).values()) == 0.0
    assert M.compress_ratios[2] == 4 and M.num_hash_layers == 3    # the model untouched
    d, x = param_counts.mtp_params_split(M, 1, 1)
    assert d + x == M.mtp_params()
    v3 = model_preset("deepseek-v3")
    assert v3.mtp_layer_model() is v3
    d, x = param_counts.mtp_params_split(v3, 1, 1)
    assert d + x == v3.mtp_params()


def test_rows_move_by_the_mtp_layer(rows, monkeypatch):
    """Priced as the mean layer (the parameters held), each row's step is longer by exactly
    16 micro-batches of the mean layer's time less the sliding-window layer's (forward,
    backward and the recipe's recomputation; 1e-9)."""
    real, split = ModelSpec.mtp_layer_model, param_counts.mtp_params_split
    e = [estimate(j).step_time_s for j in rows]
    lt = [[layer_time.layer_time(x, **_layer_kw(j)) for x in (M, M.mtp_layer_model())]
          for j in rows]

    def held(m, *a, **k):
        with monkeypatch.context() as mp:
            mp.setattr(ModelSpec, "mtp_layer_model", real)
            return split(m, *a, **k)
    monkeypatch.setattr(ModelSpec, "mtp_layer_model", lambda self: self)
    monkeypatch.setattr(param_counts, "mtp_params_split", held)
    for j, e1, (mean, win) in zip(rows, e, lt):
        d = sum(float(getattr(mean, f) - getattr(win, f)) for f in ("fwd", "bwd", "recompute"))
        assert d > 0
        assert estimate(j).step_time_s - e1 == pytest.approx(MICRO * d, rel=1e-9)


def test_rows_move_by_the_compressors_in_bf16(rows, monkeypatch):
    """The compressors (the indexer's too) run with FP8 disabled: at the run's precision
    instead (``row_parallel`` False), each row's step is shorter by exactly 43 layers x 16
    micro-batches of their forward and backward at the 16-bit rate less at the run's on
    GB300 (1e-9), by 0.98 of it on GB200; in MXFP8 the 16-bit ones are the slower."""
    e = [estimate(j).step_time_s for j in rows]
    real = gemm_shapes.dsv4_gemms
    gs = real(M, 4096)
    comp = [i for i, x in enumerate(gs) if x[2] in (4 * M.head_dim, 2 * M.head_dim,
                                                     4 * M.index_head_dim)]
    assert len(comp) == 3 and all(gs[i][4] is None for i in comp)

    def quantised(m, T):
        return [type(x)(x[:4] + (False,)) if i in comp else x
                for i, x in enumerate(real(m, T))]
    monkeypatch.setattr(gemm_shapes, "dsv4_gemms", quantised)
    for j, e1 in zip(rows, e):
        q = quantised(M, 4096)

        def cost(g):
            n = [x[0] for x in g]
            u = gemm_units(g, 1, j.cluster.gpu, j.dtype)
            return float(units_time_fwd(n, u) + units_time_bwd(n, u)[0])
        d = cost([gs[i] for i in comp]) - cost([q[i] for i in comp])
        assert d > 0
        moved = (e1 - estimate(j).step_time_s) / (LAYERS * MICRO * d)
        if j.cluster.gpu.name == "GB300":
            assert moved == pytest.approx(1.0, rel=1e-9)
        else:   # part of the first micro-batch's forward under communication (as above)
            assert 0.95 < moved < 1.0


def _measured_bwd(k: int) -> float:
    """The measured backward's seconds per query and head for ``k`` keys: whole tiles of
    64, linear between (and past) the cuDNN points, floored at 0 (a plain reading)."""
    k = -(-k // 64) * 64
    pts = dsv4_cost.DSA_BWD_MEASURED
    i = max(0, min(len(pts) - 2, sum(1 for x, _ in pts if x < k) - 1))
    (x0, y0), (x1, y1) = pts[i], pts[i + 1]
    return max(0.0, (y0 + (k - x0) * (y1 - y0) / (x1 - x0)) * 1e-3 / (4096 * 64))


def test_sparse_core_backward_at_the_measured_rate():
    """The mean layer's core backward is, position by position and layer by layer, each
    query's window plus compressed keys in 64-key tiles at the cuDNN DSA backward's measured
    time (NVIDIA/cudnn-frontend#318, 4096 x 64 heads of 512), its fraction of B200's 16-bit
    peak on the GPU at hand, for ``b·a/tp`` head rows (1e-12); the measured points
    themselves reproduced; the attention backward is it, on Blackwell only (none for SM90)."""
    g = get_gpu("gb300")
    s, W, k4 = M.seq_length, M.sliding_window, M.index_topk
    tot = 0.0
    for r in M.compress_ratios:
        for j in range(1, s + 1):
            k = min(j, W) + (j // 128 if r == 128 else min(j // 4, k4) if r == 4 else 0)
            tot += _measured_bwd(k)
    want = tot / M.num_layers * 2.25e15 / 2.5e15 * 64
    assert float(dsv4_cost.core_time_bwd(M, 1, 1, g)) == pytest.approx(want, rel=1e-12)
    assert float(dsv4_cost.core_time_bwd(M, 2, 2, g)) == pytest.approx(want, rel=1e-12)
    for x, ms in dsv4_cost.DSA_BWD_MEASURED:
        assert float(dsv4_cost.dsa_bwd_seconds(x)) * 4096 * 64 == pytest.approx(ms * 1e-3,
                                                                                rel=1e-12)
    from strategies.cost import attention_time
    assert attention_time.attention_time_fwd(M, 1, 1, 1, True, g)[1] == \
        pytest.approx(float(dsv4_cost.core_time_bwd(M, 1, 1, g)), rel=1e-15)
    h100 = get_gpu("H100-SXM5-80GB")     # no figure for the SM90 path: the dense rate stays
    assert dsv4_cost.core_time_bwd(M, 1, 1, h100) is None
    assert float(attention_time.attention_time_fwd(M, 1, 1, 1, True, h100)[1]) > 0


def test_rows_move_by_the_core_backward(rows, monkeypatch):
    """Each row's step moves by exactly 16 micro-batches of the 43 mean layers' and the MTP
    module's sliding-window layer's core backward (doubled here; 1e-9)."""
    e = [estimate(j).step_time_s for j in rows]
    real = dsv4_cost.core_time_bwd
    monkeypatch.setattr(dsv4_cost, "core_time_bwd", lambda *a: 2 * real(*a))
    for j, e1 in zip(rows, e):
        g = j.cluster.gpu
        d = LAYERS * real(M, 1, 1, g) + real(M.mtp_layer_model(), 1, 1, g)
        assert estimate(j).step_time_s - e1 == pytest.approx(MICRO * float(d), rel=1e-9)
