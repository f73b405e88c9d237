"""Seconds of the pipeline's ends on one GPU: the embedding on the first stage, the output
layer and the cross-entropy on the last. Vectorised."""
from __future__ import annotations

from strategies.cost import param_counts, token_counts
from strategies.cost.gemm_kernel import gemm_count_time, gemm_ratio, gemm_fixed_s, gemm_waves, k_knee
from strategies.cost.grad_time import GRAD_BYTES_16, grad_accum_time, sharded_grad_pass_time
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num
from strategies.framework import DEFAULT
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from topologies.gpus import GPU


def lm_head_time_split(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, dtype: str,
                       fw: FrameworkProfile = DEFAULT, slow: Num = 1.0, shard: Num = 1.0,
                       system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num, Num]:
    """(forward, backward, weight-gradient part of the backward) seconds of the output layer
    and the cross-entropy on the last stage. The logits GEMM stays in 16 bits; the backward
    is its data- and weight-gradient GEMMs, the cross-entropy's backward passes over the fp32
    logits (both directions' passes: ``fw.loss``, bytes per logit element) and the gradient
    accumulation of the output weight; its weight-gradient part is
    the weight-gradient GEMM and that accumulation. ``slow``: factor on the GEMMs
    (``overlap_slowdown``)."""
    T = token_counts.tokens_per_gpu(b, m.seq_length, cp)
    rate = gpu.peak("bf16") * gpu.matmul_efficiency
    hbm = usable_hbm(gpu, system)
    V, h = m.vocab_size / tp, m.hidden_size
    c_w = 2 * system.main_grad_bytes(dtype) if fw.grad_accum_fusion else GRAD_BYTES_16
    kn = k_knee(gpu, "bf16")
    q, wv = gemm_ratio(gpu, "bf16", rate, kn, system), gemm_waves(gpu, system)
    t0 = gemm_fixed_s(gpu)
    g_f = slow * gemm_count_time(1, T, V, h, rate, hbm, 2.0, knee=kn, ratio=q, waves=wv, fixed=t0)
    w = gemm_count_time(1, h, V, T, rate, hbm, 2.0, c_w, knee=kn, ratio=q, waves=wv, fixed=t0)
    g_b = slow * (gemm_count_time(1, T, h, V, rate, hbm, 2.0, knee=kn, ratio=q, waves=wv, fixed=t0) + w)
    # the softmax cross-entropy's memory-bound passes over the logits, as the stack runs them
    # (``FrameworkProfile.loss``, ``framework.LossPasses``)
    ce_f, ce_b = (fw.loss.fwd_bytes * T * V / hbm, fw.loss.bwd_bytes * T * V / hbm)
    # a tied head's weight is the embedding's tensor: its sharded-gradient passes are the
    # embedding's (``embedding_time_bwd``)
    acc = grad_accum_time(V * h / shard, gpu, dtype, fw, system) + sharded_grad_pass_time(
        0.0 if m.tie_word_embeddings else V * h, shard, gpu, dtype, fw, system)
    return g_f + ce_f, g_b + ce_b + acc, slow * w + acc


def lm_head_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, dtype: str,
                 fw: FrameworkProfile = DEFAULT, slow: Num = 1.0,
                 shard: Num = 1.0, system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num]:
    """(forward, backward) seconds of the output layer and the cross-entropy on the last
    stage (``lm_head_time_split``)."""
    return lm_head_time_split(m, b, tp, cp, gpu, dtype, fw, slow, shard, system)[:2]


def embedding_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU,
                   system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Forward seconds of the embedding lookup (+ position add, dropout) on the first stage."""
    T = token_counts.tokens_per_gpu(b, m.seq_length, cp)
    return 4 * 2.0 * T * m.hidden_size / usable_hbm(gpu, system)


def embedding_time_bwd(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, dtype: str,
                       fw: FrameworkProfile = DEFAULT, shard: Num = 1.0,
                       system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Backward seconds of the embedding on the first stage: the scatter-add of the token
    gradients (twice the forward's bytes) and the accumulation of the word embedding's
    gradient into the main gradient (``grad_accum_time``) and, with sharded gradients, the
    stack's passes over the embedding's unsharded gradient (``sharded_grad_pass_time``)."""
    emb_w = param_counts.embedding_params_per_gpu(m, tp)
    return 2 * embedding_time(m, b, tp, cp, gpu, system) + grad_accum_time(
        emb_w / shard, gpu, dtype, fw, system) + sharded_grad_pass_time(emb_w, shard, gpu,
                                                                        dtype, fw, system)
