"""FSDP2's model state under the torchtitan profile (``FrameworkProfile.fsdp2``,
docs/memory.md "FSDP2", docs/calibration.md §5.32): the fp32 shard is the optimizer's
parameter, the root module stays gathered under ZeRO-3, and under pipelining each stage's
gradients accumulate unsharded in fp32. Closed forms to 1e-12; the array model equals the
scalar one; the search keeps torchtitan's pipelined ZeRO-2 plans."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.cost import param_counts
from tests.memory_checks import assert_arrays_match_scalar
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.memory.arrays import state_bytes_per_param
from strategies.memory.scalar import (memory_components,
                                      model_state_bytes_per_param)
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.search.space import enumerate_space
from topologies.cluster import cluster_preset

EXACT = dict(rel=1e-12, abs=1e-9)


def test_state_bytes_closed_forms():
    """Per parameter, ``d = 8``: ZeRO-3 ``(4 + 4 + 8)/d`` (no 16-bit shard); ZeRO-2 the 16-bit
    unsharded copy beside the fp32 shard, ``(2 + 4/d, 4/d, 8/d)``, the same total as
    Megatron's; with ``pp > 1`` the gradient unsharded, ``4``. ZeRO 0/1 and stacks without
    FSDP2 are unchanged."""
    assert model_state_bytes_per_param(3, 8, fsdp2=True) == pytest.approx((0.5, 0.5, 1.0),
                                                                          **EXACT)
    assert sum(model_state_bytes_per_param(3, 8, fsdp2=True)) == pytest.approx(16 / 8, **EXACT)
    assert sum(model_state_bytes_per_param(3, 8)) == pytest.approx(18 / 8, **EXACT)
    assert model_state_bytes_per_param(2, 8, fsdp2=True) == pytest.approx((2.5, 0.5, 1.0),
                                                                          **EXACT)
    assert sum(model_state_bytes_per_param(2, 8, fsdp2=True)) == pytest.approx(
        sum(model_state_bytes_per_param(2, 8)), **EXACT)
    assert model_state_bytes_per_param(2, 8, fsdp2=True, pp=4) == pytest.approx(
        (2.5, 4.0, 1.0), **EXACT)
    # the pipelined ZeRO-2 of FSDP2 holds what Megatron's ZeRO-1 holds: 2 + 4 + 12/d
    assert sum(model_state_bytes_per_param(2, 8, fsdp2=True, pp=4)) == pytest.approx(
        sum(model_state_bytes_per_param(1, 8)), **EXACT)
    for z in (0, 1):
        assert model_state_bytes_per_param(z, 8, fsdp2=True, pp=4) == \
            model_state_bytes_per_param(z, 8)
    assert model_state_bytes_per_param(2, 8, pp=4) == model_state_bytes_per_param(2, 8)


def _job(plan: str, framework: str = "torchtitan", layers: int = 8):
    m = replace(model_preset("llama3-8b"), num_layers=layers, seq_length=2048)
    return make_job(m, cluster_preset("dgx-h100", 2), parse_plan(plan), framework=framework)


def test_pipelined_stage_state_closed_form():
    """tp 2, pp 2, dp 4, ZeRO-2 under torchtitan: the layers of rank 1 hold their parameters
    ``N`` as ``N·(2 + 4/4)`` params, ``4·N`` grads (unsharded fp32) and ``8·N/4`` optimizer;
    the head's the same per parameter. Megatron-Core's profile keeps ``4·N/4`` grads."""
    job = _job("tp=2,pp=2,dp=4,mbs=1,gbs=32,zero=2,schedule=1f1b")
    m, p = job.model, job.plan
    dense, expert = param_counts.layer_params_split(m, p.tp, p.ep, p.etp)
    n = (dense + expert) * m.num_layers / p.pp
    layers = memory_components(job, 1)["layers"]
    assert layers.params == pytest.approx(n * (2 + 4 / 4), **EXACT)
    assert layers.grads == pytest.approx(4 * n, **EXACT)
    assert layers.optimizer == pytest.approx(8 * n / 4, **EXACT)
    head = param_counts.head_params_per_gpu(m, p.tp, p.pp, False)
    out = memory_components(job, 1)["output"]
    assert (out.params, out.grads, out.optimizer) == pytest.approx(
        (head * (2 + 4 / 4), 4 * head, 8 * head / 4), **EXACT)
    plain = _job("tp=2,pp=2,dp=4,mbs=1,gbs=32,zero=2,schedule=1f1b", framework="megatron-core")
    assert memory_components(plain, 1)["layers"].grads == pytest.approx(4 * n / 4, **EXACT)


def test_zero3_root_gathered_closed_form():
    """pp 1, dp 16, ZeRO-3 under torchtitan: a layer's state is ``16/d`` bytes per parameter
    (fp32 shard 4, gradient 4, Adam's m and v 8, all ``/d``); the embedding and the head (the
    root module, not resharded after forward) ``2 + 16/d``."""
    job = _job("tp=1,pp=1,dp=16,mbs=1,gbs=16,zero=3,recompute=full")
    m, p = job.model, job.plan
    d = 16
    dense, expert = param_counts.layer_params_split(m, p.tp, p.ep, p.etp)
    n = (dense + expert) * m.num_layers
    parts = memory_components(job, 0)
    lay = parts["layers"]
    assert (lay.params, lay.grads, lay.optimizer) == pytest.approx(
        (4 * n / d, 4 * n / d, 8 * n / d), **EXACT)
    root = param_counts.embedding_params_per_gpu(m, 1) \
        + param_counts.head_params_per_gpu(m, 1, 1, True)
    state = sum(parts[o].model_state for o in ("embedding", "output"))
    assert state == pytest.approx(root * (2 + 16 / d), **EXACT)


@pytest.mark.parametrize("plan", ["tp=1,pp=1,dp=16,mbs=1,gbs=16,zero=3,recompute=full",
                                  "tp=2,pp=2,dp=4,mbs=1,gbs=32,zero=2,schedule=1f1b",
                                  "tp=2,sp=true,pp=4,dp=2,mbs=1,gbs=32,zero=2,"
                                  "schedule=interleaved,vpp=2,recompute=full"])
def test_arrays_equal_scalar(plan):
    """The search's array model given the stack's ``fsdp2`` is ``memory_by_stage``."""
    job = _job(plan)
    assert job.framework.fsdp2
    assert_arrays_match_scalar(job)


def test_which_stacks_hold_fsdp2_state():
    """FSDP2 (torchtitan, AutoModel) and Composer's FSDP1 over an fp32 model hold the fp32
    shard as the master (docs/calibration.md §5.46); Megatron, DeepSpeed, HAI-LLM and XLA
    do not."""
    for name in ("torchtitan", "automodel", "pytorch-eager"):
        assert get_profile(name).fsdp2, name
    for name in ("megatron-core", "jax-xla", "hai-llm", "megatron-deepspeed"):
        assert not get_profile(name).fsdp2, name


@pytest.mark.parametrize("name,zero,expected", [
    # Composer FSDP1 FULL_SHARD: fp32 shard 4 + fp32 grad 4 + Adam 8, over d (was 18/d)
    ("pytorch-eager", 3, (4 / 8, 4 / 8, 8 / 8)),
    # SHARD_GRAD_OP: the gathered bf16 weights held from forward to backward beside it
    ("pytorch-eager", 2, (2 + 4 / 8, 4 / 8, 8 / 8)),
    # DDP under autocast: the bf16 casts are saved for the backward, Megatron's 2 + 4 + 12
    ("pytorch-eager", 0, (2.0, 4.0, 12.0)),
    # MaxText: fp32 weights only (weight_dtype float32), cast per use: 16/d and 16 (was 18)
    ("jax-xla", 3, (0.0, 4 / 8, 12 / 8)),
    ("jax-xla", 0, (0.0, 4.0, 12.0)),
    ("megatron-core", 3, (2 / 8, 4 / 8, 12 / 8)),
])
def test_model_state_per_profile(name, zero, expected):
    """Bytes per parameter of each stack's model state at dp 8 (the rule the memory model,
    the search's arrays and the checkpoint size read, ``stack_system``)."""
    from strategies.stacks.profile import stack_system
    from strategies.memory.scalar import model_state_bytes_per_param
    fw = get_profile(name)
    got = model_state_bytes_per_param(zero, 8, optimizer_bytes=fw.optimizer_state_bytes,
                                      system=stack_system(fw), fsdp2=fw.fsdp2)
    assert got == pytest.approx(expected, rel=1e-15)


def test_master_only_is_one_statement():
    """``master_only`` and ``fsdp2``/``master_bytes`` state the stored weight two ways:
    refused together, with the field named."""
    from strategies.errors import SpecError
    with pytest.raises(SpecError, match="master_only"):
        replace(get_profile("torchtitan"), master_only=True)


def test_search_keeps_pipelined_zero2_without_zero1():
    """torchtitan has no ZeRO-1, so its pipelined ZeRO-2 plans (whose state is ZeRO-1's) are
    not dropped as dominated by a ZeRO-1 twin it cannot run."""
    m = replace(model_preset("llama3-8b"), seq_length=2048)
    sp = enumerate_space(m, cluster_preset("dgx-h100", 2), 64,
                         framework=get_profile("torchtitan"))
    assert sp.pruned["zero2_dominated"] == 0
    assert any(sp.plan(i).pp > 1 and sp.plan(i).zero == 2 for i in range(sp.size))


def test_torchtitan_405b_rows_skipped_as_compiled():
    """The four pipelined Llama 3.1 405B rows (Table 6: tp 8, pp 8, FSDP2 over dp·cp = 8) were
    within 10 % of their published peaks read eagerly; Table 6's title states torch.compile,
    Float8 and AsyncTP, which the rows now carry (docs/calibration.md §5.94), so the memory
    check skips them as it skips every compiled run (experiments/memory_validation.py:
    Inductor decides what is saved)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), "experiments"))
    import memory_validation as mv
    rows = {r["id"]: r for r in mv.measured_rows()}
    ids = [k for k in rows if k.startswith("torchtitan_2412_405B_t6_")]
    assert len(ids) == 4
    for k in ids:
        assert rows[k]["skipped"].startswith("torch.compile"), rows[k]
