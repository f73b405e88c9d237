"""Passes over the unsharded gradient of a sharded data-parallel stack (issue 15, pytorch-eager).

PyTorch's FSDP1 under Composer's ``mixed_precision: DEFAULT`` (bf16 parameters, fp32
reduction) runs, every micro-batch and over each unit's whole gradient (not its 1/dp shard),
the flat-gradient concatenation of its split views, the cast to fp32 and the pre-divide before
the reduce-scatter: 4 + 6 + 8 = 18 bytes per weight. FSDP2 (torchtitan) copies and casts the
gradients into its reduce-scatter input once: 6 bytes. Megatron-Core and XLA run none
(``strategies.stacks.profile.FrameworkProfile.sharded_grad_passes``, docs/calibration.md §3.14).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import param_counts
from strategies.cost.embedding_head_time import embedding_time_bwd, lm_head_time_split
from strategies.cost.grad_time import accum_shard, sharded_grad_pass_bytes, sharded_grad_pass_time
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.layer_time import layer_time
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.framework import PROFILES
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.profile_fields import SHARDED_GRAD_PASSES
from strategies.stacks.pytorch import PYTORCH_EAGER, TORCHTITAN
from strategies.presets import model_preset
from simulator.studies.validate import load_cases, simulated_step_time
from topologies.gpus import get_gpu

H100, A100 = get_gpu("H100"), get_gpu("A100")
LLAMA = model_preset("llama3-8b")
NONE = replace(PYTORCH_EAGER, sharded_grad_passes=(), sharded_grad_sources=())


def test_bytes_closed_form():
    """FSDP1/Composer DEFAULT in bf16: cat 2+2, cast 2+4, pre-divide 4+4 = 18 B per weight;
    FSDP2's copy-in 2+4 = 6; fp16 (an fp16 reduction) has no cast: 4 + 0 + 4 = 8 and 2 + 2."""
    assert sharded_grad_pass_bytes(PYTORCH_EAGER, "bf16") == 18.0
    assert sharded_grad_pass_bytes(TORCHTITAN, "bf16") == 6.0
    assert sharded_grad_pass_bytes(PYTORCH_EAGER, "fp16") == 8.0
    assert sharded_grad_pass_bytes(TORCHTITAN, "fp16") == 4.0
    two = SystemConfig(grad_buffer_bytes=2)
    assert sharded_grad_pass_bytes(PYTORCH_EAGER, "bf16", two) == 8.0


def test_which_stacks_run_them():
    """Only the PyTorch stacks; every profile's passes are named and sourced."""
    runs = {n for n, p in PROFILES.items() if p.sharded_grad_passes}
    assert runs == {"pytorch-eager", "torchtitan", "automodel"}   # automodel: FSDP2 as torchtitan
    for p in PROFILES.values():
        assert set(p.sharded_grad_passes) <= set(SHARDED_GRAD_PASSES)
        assert {k for k, _ in p.sharded_grad_sources} == set(p.sharded_grad_passes)
        assert (sharded_grad_pass_bytes(p, "bf16") > 0) == bool(p.sharded_grad_passes)
    assert sharded_grad_pass_bytes(MEGATRON_CORE, "bf16") == 0.0


@pytest.mark.parametrize("gpu", [H100, A100])
def test_time_is_bytes_over_hbm_only_when_sharded(gpu):
    """params x 18 / usable HBM where the gradient is sharded (shard > 1), else exactly 0."""
    w = 2.5e8
    t = sharded_grad_pass_time(w, 8.0, gpu, "bf16", PYTORCH_EAGER)
    assert t == pytest.approx(w * 18.0 / usable_hbm(gpu, DEFAULT_SYSTEM), rel=1e-15)
    assert float(sharded_grad_pass_time(w, 1.0, gpu, "bf16", PYTORCH_EAGER)) == 0.0
    shards = accum_shard(np.array([8, 8, 8, 1]), np.array([0, 2, 3, 3]))
    got = sharded_grad_pass_time(w, shards, gpu, "bf16", PYTORCH_EAGER)
    assert np.array_equal(got > 0, [False, True, True, False])


@pytest.mark.parametrize("fw", [PYTORCH_EAGER, TORCHTITAN])
@pytest.mark.parametrize("rc", [0, 2])
def test_layer_backward_adds_the_passes(fw, rc):
    """Backward and its weight-gradient part grow by exactly the passes over the layer's
    weights; the forward and the recomputation do not move."""
    none = replace(fw, sharded_grad_passes=(), sharded_grad_sources=())
    kw = dict(b=2, tp=1, cp=1, ep=1, sp=False, flash=True, recompute=rc, gpu=H100,
              dtype="bf16", shard=8.0)
    a, z = layer_time(LLAMA, fw=fw, **kw), layer_time(LLAMA, fw=none, **kw)
    extra = param_counts.layer_params_per_gpu(LLAMA, 1, 1, None) * sharded_grad_pass_bytes(
        fw, "bf16") / usable_hbm(H100, DEFAULT_SYSTEM)
    assert extra > 0
    assert a.bwd - z.bwd == pytest.approx(extra, rel=1e-9)
    assert a.wgrad - z.wgrad == pytest.approx(extra, rel=1e-9)
    assert a.fwd == z.fwd and a.recompute == z.recompute
    # not sharded: identical, bit for bit
    a1, z1 = layer_time(LLAMA, fw=fw, **{**kw, "shard": 1.0}), \
        layer_time(LLAMA, fw=none, **{**kw, "shard": 1.0})
    assert (a1.fwd, a1.bwd, a1.recompute, a1.wgrad) == (z1.fwd, z1.bwd, z1.recompute, z1.wgrad)


def test_embedding_and_head():
    """The embedding's gradient gets the passes; a tied head's weight is the embedding's
    tensor (no second charge), an untied head gets its own."""
    hbm, per = usable_hbm(H100, DEFAULT_SYSTEM), 18.0
    emb = embedding_time_bwd(LLAMA, 2, 1, 1, H100, "bf16", PYTORCH_EAGER, 8.0) \
        - embedding_time_bwd(LLAMA, 2, 1, 1, H100, "bf16", NONE, 8.0)
    assert emb == pytest.approx(LLAMA.embedding_params() * per / hbm, rel=1e-9)
    for m in (LLAMA, replace(LLAMA, tie_word_embeddings=True)):
        a = lm_head_time_split(m, 2, 1, 1, H100, "bf16", PYTORCH_EAGER, 1.0, 8.0)
        z = lm_head_time_split(m, 2, 1, 1, H100, "bf16", NONE, 1.0, 8.0)
        own = 0.0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size * per / hbm
        assert a[1] - z[1] == pytest.approx(own, rel=1e-9, abs=1e-15)
        assert a[0] == z[0]


def test_mosaic_step_grows_by_the_closed_form():
    """A MosaicML FSDP run (MPT-7B, 8 H100, FULL_SHARD, one micro-batch of 6 x 2048): the
    step grows by exactly micro-batches x (layers x layer weights + embedding) x 18 B / HBM
    (its gathers stay under the compute, so nothing else moves), analytic and simulated."""
    (case,) = [c for c in load_cases(tiers=None) if c.id == "mosaic_mpt7b_h100_8gpu_seq2048_mb6"]
    job = case.job
    assert job.framework.name == "pytorch-eager" and job.plan.zero == 3
    m, gpu = job.model, job.cluster.groups[0].gpu
    base = replace(job, framework=replace(job.framework, sharded_grad_passes=(),
                                          sharded_grad_sources=()))
    head = 0.0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size
    weights = m.num_layers * param_counts.layer_params_per_gpu(m, 1, 1, None) \
        + param_counts.embedding_params_per_gpu(m, 1) + head
    want = job.num_microbatches * weights * 18.0 / usable_hbm(gpu, job.system)
    got = estimate(job).step_time_s - estimate(base).step_time_s
    assert got == pytest.approx(want, rel=1e-9)
    assert 0.03 < want / estimate(job).step_time_s < 0.06
    # the simulator reads the same stage record: its step grows by the same seconds
    sim = simulated_step_time(job)[0] - simulated_step_time(base)[0]
    assert sim == pytest.approx(want, rel=1e-6)


def test_bad_profile_fields():
    """An unknown pass, a pass named twice, a source for a pass the profile lacks: refused
    with the field and the rule."""
    with pytest.raises(SpecError, match="sharded_grad_passes"):
        replace(PYTORCH_EAGER, sharded_grad_passes=("unshard_copy",), sharded_grad_sources=())
    with pytest.raises(SpecError, match="at most once"):
        replace(PYTORCH_EAGER, sharded_grad_passes=("predivide", "predivide"),
                sharded_grad_sources=())
    with pytest.raises(SpecError, match="sharded_grad_sources"):
        replace(PYTORCH_EAGER, sharded_grad_passes=("predivide",))
