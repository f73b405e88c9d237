"""The cross-entropy's passes over the logits as each stack runs them (``passes.LossPasses``,
docs/calibration.md §3.20): Megatron's unfused vocab-parallel cross-entropy streams 38 bytes
per logit element forward and 14 backward; the LM head's time grows by exactly the extra bytes
over the usable HBM bandwidth, and only on the stacks whose code was read."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.cost.embedding_head_time import lm_head_time_split
from strategies.cost.hbm_rate import usable_hbm
from strategies.errors import SpecError
from strategies.framework import PROFILES
from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
from strategies.stacks.megatron import MEGATRON_CORE, MEGATRON_LM_2021
from strategies.stacks.passes import COMPOSER_CROSS_ENTROPY, MEGATRON_CROSS_ENTROPY, LossPasses
from strategies.stacks.pytorch import PYTORCH_EAGER
from strategies.presets import model_preset
from topologies.gpus import get_gpu


def test_megatron_pass_bytes():
    # forward: .float() 2+4, max 4, subtract 4+4, exp 4+4, sum 4, div 4+4; backward: mul 4+4,
    # the cast back to 16 bits 4+2
    assert MEGATRON_CROSS_ENTROPY.fwd_bytes == 38.0
    assert MEGATRON_CROSS_ENTROPY.bwd_bytes == 14.0
    assert LossPasses().fwd_bytes == LossPasses().bwd_bytes == 12.0


def test_which_stacks_run_it():
    assert MEGATRON_CORE.loss is MEGATRON_CROSS_ENTROPY
    assert MEGATRON_LM_2021.loss is MEGATRON_CROSS_ENTROPY
    # Megatron-DeepSpeed (BLOOM) runs the same passes, its own source (§3.25)
    ds = MEGATRON_DEEPSPEED.loss
    assert (ds.fwd, ds.bwd) == (MEGATRON_CROSS_ENTROPY.fwd, MEGATRON_CROSS_ENTROPY.bwd)
    assert "Megatron-DeepSpeed" in ds.source
    # Composer's MPT runs flash-attn's fused loss and two unfused train metrics (§5.96,
    # tests/test_composer_loss.py)
    assert PYTORCH_EAGER.loss is COMPOSER_CROSS_ENTROPY
    for name, fw in PROFILES.items():
        if name not in ("megatron-core", "megatron-lm-2021", "megatron-deepspeed",
                        "pytorch-eager"):
            # not read: the assumed passes (torchtitan's memory peak was read, §5.19)
            assert (fw.loss.fwd, fw.loss.bwd, fw.loss.source) == (
                LossPasses().fwd, LossPasses().bwd, LossPasses().source), name
            if name not in ("torchtitan", "automodel"):   # automodel: torchtitan's, not read
                assert fw.loss == LossPasses(), name
        assert fw.loss.source
    assert ds.peak_bytes == MEGATRON_CROSS_ENTROPY.peak_bytes == 6.0


@pytest.mark.parametrize("tp,b", [(1, 4), (2, 1), (8, 2)])
def test_head_time_grows_by_the_extra_bytes(tp, b):
    m, gpu = model_preset("llama3-8b"), get_gpu("h100")
    old = replace(MEGATRON_CORE, loss=LossPasses())
    f0, b0, w0 = lm_head_time_split(m, b, tp, 1, gpu, "bf16", old)
    f1, b1, w1 = lm_head_time_split(m, b, tp, 1, gpu, "bf16", MEGATRON_CORE)
    elements = b * m.seq_length * m.vocab_size / tp
    hbm = usable_hbm(gpu)
    assert f1 - f0 == pytest.approx((38 - 12) * elements / hbm, rel=1e-12)
    assert b1 - b0 == pytest.approx((14 - 12) * elements / hbm, rel=1e-12)
    assert w1 == w0                      # the weight-gradient part has no loss pass


def test_bad_pass_bytes():
    with pytest.raises(SpecError, match="framework.loss.fwd"):
        LossPasses(fwd=(("x", 0.0),))
    with pytest.raises(SpecError, match="framework.loss.bwd"):
        LossPasses(bwd=(("x", "4"),))
