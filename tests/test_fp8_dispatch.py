"""The MoE dispatch's bytes per element as one rule (``moe_bytes.dispatch_element_bytes``,
``FrameworkProfile.fp8_dispatch``): DeepSeek-V3's HAI-LLM dispatches FP8 tokens with one fp32
scale per 128 channels and combines in BF16 (arXiv 2412.19437 §3.3.3; DeepEP's
``Buffer.dispatch``); every other stack moves 16-bit tokens both ways. Closed forms of the
all-to-all's, the permutations' and the send buffer's bytes, the time and memory reading the
one rule, the array memory equal to the scalar one on DeepSeek-V3's published plan, and a
16-bit stack bit-identical to the former arithmetic (docs/calibration.md §5.40)."""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import ep_dispatch, moe_bytes, token_counts
from strategies.cost.stage import stage_costs
from strategies.estimate.scalar import estimate
from strategies.framework import get_profile
from strategies.hf_config import load_model_arg
from strategies.job import make_job
from strategies.memory import activations as act
from strategies.memory.arrays import rank_memory_arrays
from strategies.memory.scalar import memory_by_stage
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP8 = 1 + 4 / 128                      # 1 B per value + one fp32 scale per 128 channels
PLAN = ("tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,"
        "recompute_modules=layernorm+mla_up_proj+moe_act,moe_dispatcher=deepep,"
        "schedule=dualpipe,gbs=4096")


def _job(framework="hai-llm", dtype="fp8-blockwise", fp8_dispatch=None, model=None,
         plan=PLAN, cluster=("hgx-h800", 256)):
    m = model or load_model_arg(os.path.join(ROOT, "docs", "reports", "deepseek_v3_model.json"))
    job = make_job(m, cluster_preset(*cluster), parse_plan(plan), dtype=dtype,
                   framework=framework)
    if fp8_dispatch is not None:
        job = replace(job, framework=replace(job.framework, fp8_dispatch=fp8_dispatch))
    return job


def test_the_rule_closed_form():
    """FP8 with its 1x128 fp32 scales where the stack dispatches so in a quantised precision;
    16 bits otherwise. HAI-LLM dispatches in FP8; no Megatron-Core stack does."""
    assert moe_bytes.dispatch_element_bytes(True, "fp8-blockwise") == FP8
    assert moe_bytes.dispatch_element_bytes(True, "bf16") == 2.0
    assert moe_bytes.dispatch_element_bytes(False, "fp8-blockwise") == 2.0
    assert get_profile("hai-llm").fp8_dispatch
    for name in ("megatron-core", "nemo", "torchtitan", "automodel"):
        assert not get_profile(name).fp8_dispatch, name


def test_all_to_all_bytes_fp8_over_bf16():
    """Dispatch in FP8, combine in BF16: the pair moves ``(1 + FP8/2)/2`` of the 16-bit
    pair's bytes, the dispatch alone ``FP8/2`` (to floating-point precision)."""
    m = model_preset("deepseek-v3")
    bf = ep_dispatch.ep_alltoall_bytes_fwd(m, 1, 1, 1, 64)
    f8 = ep_dispatch.ep_alltoall_bytes_fwd(m, 1, 1, 1, 64, dispatch_bytes=FP8)
    assert f8 / bf == pytest.approx((1 + FP8 / 2) / 2, rel=1e-15)
    assert (f8 - bf / 2) / (bf / 2) == pytest.approx(FP8 / 2, rel=1e-14)
    # the 16-bit form is the former arithmetic, bit for bit
    share = m.num_moe_layers / m.num_layers
    assert bf == 2 * moe_bytes.routed_token_bytes(m, 1, 1, 1) * share


def test_permutation_bytes_closed_form():
    """DeepEP: the dispatched tokens and their per-expert copies at the dispatch's width, the
    experts' outputs back at 16 bits: ``(dedup·R + R)·q + (R + dedup·R)``, ``q = FP8/2``;
    Megatron's alltoall: the local permute and the sort after the dispatch at the width."""
    m = model_preset("deepseek-v3")
    share = m.layer_shares()["moe"]
    R = moe_bytes.routed_token_bytes(m, 1, 1, 1, 1.3)
    R0 = moe_bytes.routed_token_bytes(m, 1, 1, 1, 1.0)
    q, dd, k = FP8 / 2, 0.6, m.moe_router_topk
    f, b = moe_bytes.moe_permute_bytes(m, 1, 1, 1, 64, 1.3, 1, dd, dispatch_bytes=FP8)
    assert f == b == pytest.approx(share * ((dd * R + R) * q + (R + dd * R)), rel=1e-14)
    f, _ = moe_bytes.moe_permute_bytes(m, 1, 1, 1, 64, 1.3, 0, dispatch_bytes=FP8)
    want = 2 * R0 * q + R0 + R0 / k + 4 * R * 1 * (q + 1) / 2
    assert f == pytest.approx(share * want, rel=1e-14)


def test_send_buffer_closed_form():
    """The dispatch's send buffer at the dispatch's width, the combine's receive buffer 16-bit:
    ``2·T·h·k·(FP8/2 + load)``; the 16-bit form is the former ``2·T·h·k·(1 + load)`` bit
    for bit."""
    m = model_preset("deepseek-v3")
    T, h, k = 4096, m.hidden_size, m.moe_router_topk
    got = act.permutation_buffer_bytes(m, 4096, 1, 1, 1, 1.2, FP8)
    assert got == pytest.approx(2 * T * h * k * (FP8 / 2 + 1.2), rel=1e-15)
    assert act.permutation_buffer_bytes(m, 4096, 1, 1, 1, 1.2) == \
        2.0 * T * h * k * (1.0 + 1.2)


def test_time_reads_the_rule_and_the_bf16_stack_is_unchanged():
    """The stage record the estimate, the lower bound and the simulator's compiler read:
    HAI-LLM in fp8-blockwise moves ``(1 + FP8/2)/2`` of its 16-bit all-to-all bytes; in
    bf16, or with the flag off, the same bytes and the same estimate bit for bit;
    Megatron-Core (16-bit dispatch) holds the former closed form exactly."""
    fp8 = stage_costs(_job())
    off = stage_costs(_job(fp8_dispatch=False))
    assert fp8.ep_bytes / off.ep_bytes == pytest.approx((1 + FP8 / 2) / 2, rel=1e-14)
    assert estimate(_job()).step_time_s < estimate(_job(fp8_dispatch=False)).step_time_s
    a, b = (estimate(_job(dtype="bf16", fp8_dispatch=f)).to_json() for f in (True, False))
    a.pop("inputs"), b.pop("inputs")
    assert a == b
    mc = _job("megatron-core", plan="tp=1,pp=8,ep=32,mbs=1,moe_dispatcher=alltoall,gbs=512",
              cluster=("hgx-h800", 32))
    c = stage_costs(mc)
    m = mc.model
    p = mc.plan          # the default imbalance: the rule (strategies.moe_balance)
    load = token_counts.moe_load(32, p.imbalance, p.capacity_factor, m, 1, 1, 1)
    want = 2 * moe_bytes.routed_token_bytes(m, 1, 1, 1, load) \
        * (m.num_moe_layers / m.num_layers)
    assert c.ep_bytes == want


def test_memory_reads_the_rule():
    """The send buffer is the only memory term the dispatch width moves: ``other`` falls by
    ``2·T·h·k·(1 - FP8/2)`` on every rank that holds an MoE layer, nothing else changes."""
    m = model_preset("deepseek-v3")
    on = memory_by_stage(_job())
    off = memory_by_stage(_job(fp8_dispatch=False))
    drop = 2 * 4096 * m.hidden_size * m.moe_router_topk * (1 - FP8 / 2)
    for a, b in zip(on, off):
        assert b.other - a.other == pytest.approx(drop, rel=1e-9)
        assert (a.params, a.grads, a.optimizer, a.activations) == \
            (b.params, b.grads, b.optimizer, b.activations)


def test_array_memory_equals_scalar_on_the_deepseek_plan():
    """DeepSeek-V3's published plan (padded to 64 layers, DualPipe, HAI-LLM, fp8-blockwise):
    the search's array model given the stack's facts equals ``memory_by_stage`` on every
    rank (1e-9)."""
    job = _job()
    fw = job.framework
    P = PlanArrays.from_plans([job.plan])
    kw = dict(loss_bytes=fw.loss.peak_bytes, act_cache=act.job_activation_cache(job),
              optimizer_bytes=fw.optimizer_state_bytes, fsdp2=fw.fsdp2,
              dispatch_bytes=act.job_dispatch_bytes(job))
    assert kw["dispatch_bytes"] == FP8
    want = [b.total for b in memory_by_stage(job)]
    got = [float(np.ravel(rank_memory_arrays(job.model, P, s, job.dtype, job.system,
                                             job.cluster.gpu, **kw))[0])
           for s in range(job.plan.pp)]
    assert got == pytest.approx(want, rel=1e-9)
