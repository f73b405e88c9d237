"""DeepSeek-V3's published plan on 2,048 H800 (hai-llm, fp8-blockwise, DualPipe): each term
of the end rank's memory in closed form against the DeepSeek-V3 report's statements
(arXiv 2412.19437 §3.2.2-3.3.3; calibration §5.138), and the padded model's end-rank peak
against the real 61 layers on calibration §5.33's uneven split."""
from __future__ import annotations

import pytest

from strategies.cost import param_counts as pc
from strategies.cost.quantise import weight_copy_bytes
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.memory.scalar import fits, memory_by_stage, memory_components
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.reference.plan_reading import balanced_layers
from topologies.cluster import cluster_preset
from topologies.gpus import GIB

PLAN = ("tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,"
        "recompute_modules=layernorm+moe_act+mla_up_proj,moe_dispatcher=deepep,gbs=15360")
SPLIT = ",first_stage_layers=3,last_stage_layers=2"      # calibration §5.33's 61-layer split


def _job(model, schedule: str, extra: str = ""):
    return make_job(model, cluster_preset("hgx-h800", 256),
                    parse_plan(f"{PLAN},schedule={schedule}{extra}"), global_batch=15360,
                    framework=get_profile("hai-llm"), dtype="fp8-blockwise")


@pytest.fixture(scope="module")
def padded():
    return balanced_layers(model_preset("deepseek-v3"), 16, [])


def test_end_rank_state_terms_are_the_reports(padded):
    """DualPipe rank 0 of the padded model holds stage 0 (3 dense + 1 MoE layers, the
    embedding) and stage 15 (4 MoE layers, the MTP module, the head): each term is the
    report's bytes per parameter times what the rank holds."""
    job = _job(padded, "dualpipe")
    parts = memory_components(job, 0)
    dense, expert = pc.content_params(padded, {"dense": 3, "moe": 5, "mtp": 1}, 1, 64, 1, True)
    n = dense + expert
    q = weight_copy_bytes("fp8-blockwise", job.cluster.gpu)     # FP8 W and W^T, 1x128 scales
    assert q == pytest.approx(2 * (1 + 4 / 128), rel=1e-12)
    lay = parts["layers"]
    # BF16 weights beside their cached FP8 copies
    assert lay.params == pytest.approx((2.0 + q) * n, rel=1e-12)
    # FP32 gradient accumulation (§3.3.3), not sharded under ZeRO-1
    assert lay.grads == pytest.approx(4.0 * n, rel=1e-12)
    # FP32 master + BF16 moments = 8 bytes (§3.3.3), over dp 128 (dense) and edp 2 (experts)
    assert lay.optimizer == pytest.approx(8.0 * (dense / 128 + expert / 2), rel=1e-12)
    emb = pc.embedding_params_per_gpu(padded, 1)
    assert parts["embedding"].params == pytest.approx(2.0 * emb, rel=1e-12)
    assert parts["embedding"].grads == pytest.approx(4.0 * emb, rel=1e-12)
    # the head is an untied (vocab x h) matrix plus the final norm, on the same rank
    assert parts["output"].params == pytest.approx(
        2.0 * pc.head_params_per_gpu(padded, 1, 16, True), rel=1e-12)


def test_mtp_shares_the_end_ranks_embedding_under_dualpipe(padded):
    """§3.2.3: the MTP module shares the embedding and the head with the main model on the
    same PP rank; DualPipe puts both ends on rank 0, so no embedding copy is charged there,
    while 1F1B's last stage (MTP without the embedding) builds one (Megatron's rule)."""
    mix = {"dense": 3, "moe": 5, "mtp": 1}
    with_emb = sum(pc.content_params(padded, mix, 1, 64, 1, True))
    without = sum(pc.content_params(padded, mix, 1, 64, 1, False))
    assert without - with_emb == pytest.approx(pc.embedding_params_per_gpu(padded, 1), rel=1e-12)
    dual = memory_components(_job(padded, "dualpipe"), 0)["layers"].params
    q = weight_copy_bytes("fp8-blockwise", cluster_preset("hgx-h800", 1).gpu)
    assert dual == pytest.approx((2.0 + q) * with_emb, rel=1e-12)


def test_padding_not_the_plan_puts_dualpipe_over(padded):
    """The padded model's end ranks hold 8 layers + MTP (two busiest stages): over the
    H800's usable HBM; the real 61 layers on §5.33's split fit, the middle ranks (8 layers
    either way) setting the peak, identical to the padded model's middle ranks."""
    pad = memory_by_stage(_job(padded, "dualpipe"))
    real_job = _job(model_preset("deepseek-v3"), "dualpipe", SPLIT)
    real = memory_by_stage(real_job)
    hbm = real_job.cluster.min_hbm_bytes
    assert pad[0].total > hbm and not fits(_job(padded, "dualpipe"))
    assert fits(real_job)
    assert real[0].total < real[1].total
    assert real[1].total == pytest.approx(pad[1].total, rel=1e-12)
    assert max(b.total for b in real) == pytest.approx(real[1].total, rel=1e-12)
    # the end rank's padding: 3 of the padded stage's layers gone from it
    assert (pad[0].total - real[0].total) / GIB > 15.0
