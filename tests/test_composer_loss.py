"""Composer's cross-entropy for llm-foundry's MPT (``passes.COMPOSER_CROSS_ENTROPY``,
docs/calibration.md §5.96): flash-attn 1.0.9's fused loss (4 bytes per logit element each
way) and, after every micro-batch's backward, the two unfused fp32 train metrics (22 bytes
each); the LM head, the analytic step and the simulated step grow by exactly the extra bytes
over the usable HBM bandwidth, and only on the ``pytorch-eager`` stack."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.studies.validate import load_cases, simulated_step_time
from strategies.cost import token_counts
from strategies.cost.embedding_head_time import lm_head_time_split
from strategies.cost.hbm_rate import usable_hbm
from strategies.estimate.scalar import estimate
from strategies.stacks.passes import COMPOSER_CROSS_ENTROPY, LossPasses
from strategies.stacks.pytorch import PYTORCH_EAGER, TORCHTITAN
from strategies.presets import model_preset
from topologies.gpus import get_gpu


def test_pass_bytes():
    # forward: xentropy's two reads of the 16-bit row (2 + 2); each metric: autocast's fp32
    # cast (2 + 4) and cunn_SoftMaxForward's three reads and one write of fp32 (4 x 4);
    # backward: xentropy reads 2 and writes 2
    assert COMPOSER_CROSS_ENTROPY.fwd_bytes == 4.0 + 2 * (6.0 + 16.0) == 48.0
    assert COMPOSER_CROSS_ENTROPY.bwd_bytes == 4.0
    assert PYTORCH_EAGER.loss is COMPOSER_CROSS_ENTROPY
    assert TORCHTITAN.loss.fwd_bytes == TORCHTITAN.loss.bwd_bytes == 12.0   # its own loss
    # the memory peak is not part of this change (still the assumed fp32 logits)
    assert COMPOSER_CROSS_ENTROPY.peak_bytes == LossPasses().peak_bytes


@pytest.mark.parametrize("gpu_name,b", [("h100", 14), ("a100", 3)])
def test_head_time_grows_by_the_extra_bytes(gpu_name, b):
    m, gpu = model_preset("llama3-8b"), get_gpu(gpu_name)
    old = replace(PYTORCH_EAGER, loss=LossPasses())
    f0, b0, w0 = lm_head_time_split(m, b, 1, 1, gpu, "bf16", old)
    f1, b1, w1 = lm_head_time_split(m, b, 1, 1, gpu, "bf16", PYTORCH_EAGER)
    elements = b * m.seq_length * m.vocab_size
    hbm = usable_hbm(gpu)
    assert f1 - f0 == pytest.approx((48 - 12) * elements / hbm, rel=1e-12)
    assert b1 - b0 == pytest.approx((4 - 12) * elements / hbm, rel=1e-12)
    assert w1 == w0


def test_mosaic_step_grows_by_the_closed_form():
    """MPT-1B on 8 H100 (FULL_SHARD, 4 micro-batches of 56 x 512): the step grows by
    micro-batches x tokens x vocabulary x (52 - 24) B / HBM, analytic and simulated."""
    (case,) = [c for c in load_cases(tiers=None) if c.id == "mosaic_mpt1b_h100_8gpu_seq512_mb56"]
    job = case.job
    assert job.framework.loss is COMPOSER_CROSS_ENTROPY
    base = replace(job, framework=replace(job.framework, loss=LossPasses()))
    m, gpu = job.model, job.cluster.groups[0].gpu
    tokens = token_counts.tokens_per_gpu(job.plan.mbs, m.seq_length, 1)
    want = job.num_microbatches * tokens * m.vocab_size * (52.0 - 24.0) \
        / usable_hbm(gpu, job.system)
    got = estimate(job).step_time_s - estimate(base).step_time_s
    assert got == pytest.approx(want, rel=1e-9)
    assert 0.01 < want / estimate(job).step_time_s < 0.04
    sim = simulated_step_time(job)[0] - simulated_step_time(base)[0]
    assert sim == pytest.approx(want, rel=1e-6)
