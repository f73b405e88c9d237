"""Adam as PyTorch eager stacks run it: a chain of unfused kernels (issue 15, pytorch-eager).

Composer's ``DecoupledAdamW`` and torch's foreach ``AdamW`` (torchtitan) stream 20 fp32
elements per parameter (each kernel reads and writes whole tensors); a fused kernel moves 7
(``SystemConfig.adam_step_bytes`` = 28 bytes). ``strategies.stacks.passes.StepPasses``.
"""
from __future__ import annotations

import pytest

from strategies.cost.grad_time import optimizer_time
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.stage import stage_costs
from strategies.cost.system import DEFAULT_SYSTEM
from strategies.errors import SpecError
from strategies.framework import PROFILES
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.passes import COMPOSER_ADAMW_ELEMENTS, StepPasses
from strategies.stacks.pytorch import PYTORCH_EAGER, TORCHTITAN
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.gpus import get_gpu

H100 = get_gpu("H100")


def test_element_counts_follow_the_kernels():
    """Composer (weight decay 0): mul_ 2 + add_ 3 + mul_ 2 + addcmul_ 3 + sqrt 2 + div 2 +
    add_ 2 + addcdiv_ 4; torch foreach with decay: mul_ 2 + lerp_ 3 + mul_ 2 + addcmul_ 3 +
    sqrt 2 + div_ 2 + add_ 2 + addcdiv_ 4."""
    assert COMPOSER_ADAMW_ELEMENTS == 2 + 3 + 2 + 3 + 2 + 2 + 2 + 4 == 20
    assert PYTORCH_EAGER.step.adam_elements == TORCHTITAN.step.adam_elements == 20
    fused = {n for n, p in PROFILES.items() if p.step.adam_elements == 0}
    # automodel keeps torchtitan's foreach count (its bf16 torch.optim.Adam not re-read, §5.38)
    assert fused == set(PROFILES) - {"pytorch-eager", "torchtitan", "automodel"}
    assert dict(TORCHTITAN.step.sources)["adam_elements"].startswith("torch.optim.AdamW")


@pytest.mark.parametrize("params", [1e6, 3.3e8])
def test_closed_form(params):
    """Unfused: 4 x 20 bytes per parameter; fused: 28; same bandwidth."""
    hbm = usable_hbm(H100)
    assert optimizer_time(params, H100, fw=PYTORCH_EAGER) == pytest.approx(80 * params / hbm,
                                                                          rel=1e-15)
    assert optimizer_time(params, H100, fw=MEGATRON_CORE) == pytest.approx(
        DEFAULT_SYSTEM.adam_step_bytes * params / hbm, rel=1e-15)
    assert optimizer_time(params, H100) == optimizer_time(params, H100, fw=MEGATRON_CORE)


def test_reaches_the_stage_record_and_the_estimate():
    """The per-stage record (what the compiler reads) and the arrays agree, and the eager
    stack's optimizer is 80/28 of Megatron-Core's for the same shard."""
    m, cl = model_preset("mpt-1b"), cluster_preset("dgx-h100", 1)
    plan = parse_plan("tp=1,pp=1,dp=8,mbs=1,gbs=8,zero=3")
    a = stage_costs(make_job(m, cl, plan, framework="pytorch-eager"))
    b = stage_costs(make_job(m, cl, plan, framework="megatron-core"))
    assert a.optimizer_by_stage[0] == pytest.approx(b.optimizer_by_stage[0] * 80 / 28,
                                                    rel=1e-12)


def test_bad_count_refused():
    with pytest.raises(SpecError, match="adam_elements"):
        StepPasses(adam_elements=-1)
