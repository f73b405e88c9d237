"""Context parallelism as PyTorch runs it (torchtitan, ``FrameworkProfile.cp_impl == "torch"``):
the all-gather rotater's and the fp32 dK/dV ring's waits, the fp32 merge and accumulation
passes, and the K/V block sent with every query head (torchtitan's ``repeat_kv`` before SDPA).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import comm_bytes
from strategies.cost import ring_attention as ring
from strategies.cost.attention_time import attention_time_fwd
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.pytorch import TORCHTITAN
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset
from topologies.gpus import get_gpu

LLAMA405 = replace(model_preset("llama3-405b"), seq_length=262144)
LLAMA8 = replace(model_preset("llama3-8b"), seq_length=16384)


def test_stalls_closed_form():
    """G = 5, S = 3, step 2 s forward and 4 s backward, c = 4: the forward waits G - 2 = 3;
    the backward waits G - 4 = 1 for the gather, hides every send but the last:
    1 + 3·0 + 3 = 4."""
    f, b = ring.allgather_stalls(5.0, 3.0, 2.0, 4.0, 4)
    assert f == 3.0 and b == 4.0
    # a send longer than a step: every one of the c-1 early sends shows its excess
    f, b = ring.allgather_stalls(5.0, 6.0, 2.0, 4.0, 4)
    assert f == 3.0 and b == 1.0 + 3 * 2.0 + 6.0
    # no context parallelism: nothing
    assert ring.allgather_stalls(5.0, 3.0, 2.0, 4.0, 1) == (0.0, 0.0)
    # vectorised over plans
    f, b = ring.allgather_stalls(np.array([5.0, 1.0]), 3.0, 2.0, 4.0, np.array([4, 2]))
    assert f.tolist() == [3.0, 0.0] and b.tolist() == [4.0, 3.0]


def test_merge_and_accum_bytes_closed_form():
    """Llama 3.1 405B, tp 8, cp 8, s 256k: T = 32768 tokens, 16 local heads of 128, so the
    output has O = 2^26 elements and the repeated K/V block 2·O. Forward: 7 merges of 38 B,
    the two casts 12 B, and 8 copies of K/V at 4 B: (7·38 + 12 + 8·4·2)·O = 342·O.
    Backward: 8 dQ adds of 10 B, the dK/dV first step 18 B and 7 later steps of 21 B, 8 K/V
    copies of 4 B, zero-fills and casts 10 B on dQ and on dK/dV:
    (80 + 10)·O + (18 + 147 + 32 + 10)·2·O = 504·O."""
    O = 2 ** 26
    assert ring.output_elements(LLAMA405, 1, 8, 8) == O
    assert ring.kv_block_elements(LLAMA405, 1, 8, 8, "query") == 2 * O
    assert ring.merge_bytes_fwd(LLAMA405, 1, 8, 8, "query") == 342 * O
    assert ring.accum_bytes_bwd(LLAMA405, 1, 8, 8, "query") == 504 * O
    assert ring.merge_bytes_fwd(LLAMA405, 1, 8, 1, "query") == 0.0
    assert ring.accum_bytes_bwd(LLAMA405, 1, 8, 1, "query") == 0.0


def test_kv_heads_sent():
    """torchtitan repeats K/V to every query head before SDPA: a/g = 16 times the bytes of a
    GQA-aware ring for Llama 3.1 405B (128 heads, 8 KV heads)."""
    kv = comm_bytes.cp_comm_bytes_fwd(LLAMA405, 1, 8, 4, "kv")
    q = comm_bytes.cp_comm_bytes_fwd(LLAMA405, 1, 8, 4, "query")
    assert q == 16 * kv
    assert TORCHTITAN.cp_kv_heads == "query" and MEGATRON_CORE.cp_kv_heads == "kv"


def test_passes_only_for_torch_ring():
    """The merge passes lengthen torchtitan's attention with cp > 1, not Megatron-Core's, and
    not torchtitan's without context parallelism."""
    gpu = get_gpu("H100-SXM")
    te = replace(TORCHTITAN, cp_impl="ring")     # the same kernels, Transformer Engine's ring
    tt = attention_time_fwd(LLAMA8, 1, 1, 4, True, gpu, fw=TORCHTITAN)
    mc = attention_time_fwd(LLAMA8, 1, 1, 4, True, gpu, fw=te)
    assert tt[0] > mc[0] and tt[1] > mc[1]
    assert attention_time_fwd(LLAMA8, 1, 1, 1, True, gpu, fw=TORCHTITAN) == \
        attention_time_fwd(LLAMA8, 1, 1, 1, True, gpu, fw=te)


def _job(fw, cp=4, rc="full"):
    # (the gradient all-reduce over the cp ranks after the backward, not beside the ring)
    plan = parse_plan(f"tp=8,pp=1,dp=1,cp={cp},mbs=1,gbs=2,recompute={rc},sp=true,zero=0,"
                      "overlap_grad_reduce=false")
    return make_job(LLAMA8, cluster_preset("dgx-h100", 4), plan, framework=fw)


def test_stage_record_and_recompute():
    """The stage record carries the waits; full recomputation reruns the forward's ring, so
    the backward's wait is the backward's own plus the forward's."""
    full, none = stage_costs(_job(TORCHTITAN)), stage_costs(_job(TORCHTITAN, rc="none"))
    assert full.cp_torch and full.cp_stall_bwd > 0
    assert full.cp_stall_bwd == pytest.approx(none.cp_stall_bwd + none.cp_stall_fwd, rel=1e-12)
    mc = stage_costs(_job(MEGATRON_CORE))
    assert not mc.cp_torch and mc.cp_stall_fwd == mc.cp_stall_bwd == 0.0


def test_estimate_simulation_and_bound_agree():
    """The estimate charges the waits as cp_comm; the simulator runs them on the compute
    stream (kind "cp") beside the ring's traffic; the lower bound stays below both."""
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.estimate.scalar import estimate
    from strategies.plan_arrays import PlanArrays
    job = _job(TORCHTITAN)
    est, sim = estimate(job), simulate(job)
    sb = sim.metrics["breakdown_s"]
    assert est.breakdown_s["cp_comm"] > 0
    assert sb["cp_comm"] == pytest.approx(est.breakdown_s["cp_comm"], rel=1e-9)
    assert sim.step_time_s == pytest.approx(est.step_time_s, rel=0.02)
    lb = step_time_lower_bound(job.model, job.cluster, job.dtype,
                               PlanArrays.from_plans([job.plan]), framework=TORCHTITAN)
    assert float(np.asarray(lb).ravel()[0]) <= sim.step_time_s


def test_bad_cp_impl_named():
    with pytest.raises(SpecError, match="cp_impl"):
        replace(TORCHTITAN, cp_impl="ulysses")
    with pytest.raises(SpecError, match="cp_kv_heads"):
        replace(TORCHTITAN, cp_kv_heads="all")


def test_fa2_call_bytes_closed_form():
    """Llama 3.1 405B, tp 8, cp 8: the slowest rank's 8 FlashAttention-2 backward calls each
    run the preprocess (dO and O read, 2 + 2 B; the fp32 dq_accum zeroed, 4 B) and the dQ
    conversion (4 + 2 B) over its whole query, Q = 2^26 elements; one call is in the catalog's
    rate: 7·14·Q. Only for FlashAttention-2, and nothing without context parallelism."""
    Q = 2 ** 26
    assert ring.query_elements(LLAMA405, 1, 8, 8) == Q
    assert ring.fa2_call_bytes_bwd(LLAMA405, 1, 8, 8) == 7 * 14 * Q
    assert ring.fa2_call_bytes_bwd(LLAMA405, 1, 8, 1) == 0.0
    base = ring.accum_bytes_bwd(LLAMA405, 1, 8, 8, "query")
    assert ring.accum_bytes_bwd(LLAMA405, 1, 8, 8, "query", "fa2") == base + 7 * 14 * Q
    assert ring.accum_bytes_bwd(LLAMA405, 1, 8, 8, "query", "native") == base
    assert ring.accum_bytes_bwd(LLAMA405, 1, 8, 1, "query", "fa2") == 0.0
    # vectorised over plans; at cp 2 one extra call on a query 4 times as long
    v = ring.fa2_call_bytes_bwd(LLAMA405, 1, 8, np.array([1, 2, 8]))
    assert v.tolist() == [0.0, 1 * 14 * 4 * Q, 7 * 14 * Q]


def test_fa2_call_passes_in_attention_time():
    """torchtitan runs SDPA's FlashAttention-2 (``attention_kernel == "fa2"``): its ring
    backward is longer than the same ring's with a kernel not charged per call by exactly
    ``fa2_call_bytes_bwd`` at the usable HBM rate; the forward is unchanged."""
    from strategies.cost.hbm_rate import usable_hbm
    from strategies.cost.system import DEFAULT_SYSTEM
    gpu = get_gpu("H100-SXM")
    assert TORCHTITAN.attention_kernel == "fa2"
    nat = replace(TORCHTITAN, attention_kernel="native")
    f2, b2 = attention_time_fwd(LLAMA8, 1, 1, 4, True, gpu, fw=TORCHTITAN)
    fn, bn = attention_time_fwd(LLAMA8, 1, 1, 4, True, gpu, fw=nat)
    ff, bf = attention_time_fwd(LLAMA8, 1, 1, 4, True, gpu,
                                fw=replace(TORCHTITAN, cp_impl="ring"))
    extra = ring.fa2_call_bytes_bwd(LLAMA8, 1, 1, 4) / usable_hbm(gpu, DEFAULT_SYSTEM)
    assert extra > 0
    # the kernel's rate differs between fa2 and native: compare each with its own ring-free
    # attention, so only the ring's passes remain
    fn0, bn0 = attention_time_fwd(LLAMA8, 1, 1, 4, True, gpu, fw=replace(nat, cp_impl="ring"))
    d_fa2 = b2 - bf
    d_nat = bn - bn0
    assert d_fa2 - d_nat == pytest.approx(extra, rel=1e-12)
    assert (f2 - ff) == pytest.approx(fn - fn0, rel=1e-12)
