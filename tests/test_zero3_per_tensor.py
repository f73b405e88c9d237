"""ZeRO-3 one tensor at a time (DeepSpeed 2021): the gather list, its timing, the estimate."""
from dataclasses import replace

import numpy as np
import pytest

from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.cost import comm, param_counts
from strategies.cost.comm.zero3_per_tensor import per_tensor_excess, per_tensor_passes
from strategies.cost.hbm_rate import usable_hbm
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.framework import get_profile
from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

from tests.norm_barrier_checks import barrier_s


@pytest.mark.parametrize("name", ["gpt-1.7b", "llama2-7b", "gpt3-175b"])
def test_layer_tensors_sum_to_the_layer(name):
    m = model_preset(name)
    assert sum(param_counts.layer_param_tensors(m)) == m.layer_params()


def test_no_reuse_gathers_every_tensor_at_every_use():
    m = model_preset("gpt-1.7b")
    T, L = len(param_counts.layer_param_tensors(m)), m.num_layers
    emb_n = 2 if m.position_embedding == "learned" else 1
    norm_n = 2 if m.norm == "layernorm" else 1
    for rc, passes in ((True, 2), (False, 1)):
        z = param_counts.zero3_tensor_gathers(m, 1, 1, 1, rc, 0.0)
        assert z["fwd_n"] == L * T + emb_n + norm_n + 1
        assert z["bwd_n"] == passes * L * T + emb_n
        assert z["bwd_params"] == pytest.approx(passes * L * m.layer_params()
                                                + m.embedding_params(), rel=1e-12)
        assert z["rs_params"] == pytest.approx(m.num_params(), rel=1e-12)


def test_reuse_distance_keeps_small_models_gathered():
    """With the default 1e9 parameters a 1.7B model keeps most tensors between their forward
    and backward uses; a 175B one gathers almost all again."""
    small = param_counts.zero3_tensor_gathers(model_preset("gpt-1.7b"), 1, 1, 1, True, 1e9)
    big_m = model_preset("gpt3-175b")
    big = param_counts.zero3_tensor_gathers(big_m, 1, 1, 1, True, 1e9)
    T = len(param_counts.layer_param_tensors(big_m))
    assert small["bwd_n"] < small["fwd_n"]
    assert big["bwd_n"] > 1.5 * big_m.num_layers * T


RATE = 1.7e12    # bytes/s of the calls' HBM passes in the closed forms below


def test_per_tensor_time_closed_form():
    """Each call is the group's own collective (``collective_time``) plus ``n`` list copies,
    and the whole tensor's HBM passes at the copy rate: 3 bytes per gathered byte
    (``torch.zeros``, the list copy-out's read and write), 4 per reduce-scattered byte
    (``div_``'s read and write, the list copy-in's)."""
    cl = cluster_preset("dgx-a100", 4)
    t = comm.per_tensor_time(100, 1e9, 32, 1, cl, 3e-6, copy_rate=RATE)
    one = comm.collective_time("allgather", 1e7, 32, 1, cl)
    assert t == pytest.approx(100 * one + 100 * 32 * 3e-6 + 3.0 * 1e9 / RATE, rel=1e-12)
    t = comm.per_tensor_time(100, 1e9, 32, 1, cl, 3e-6, "reduce_scatter", copy_rate=RATE)
    one = comm.collective_time("reduce_scatter", 1e7, 32, 1, cl)
    assert t == pytest.approx(100 * one + 100 * 32 * 3e-6 + 4.0 * 1e9 / RATE, rel=1e-12)
    assert comm.per_tensor_time(0, 1e9, 32, 1, cl, 3e-6, copy_rate=RATE) == 0.0
    assert comm.per_tensor_time(10, 1e9, 1, 1, cl, 3e-6, copy_rate=RATE) == 0.0


def test_per_tensor_passes_scale_with_the_tensor_not_the_calls():
    """The HBM passes are bytes of the tensors: the same bytes in 10 or in 1,000 calls add
    the same seconds, a second tensor's worth of bytes twice of them; a faster HBM less."""
    cl = cluster_preset("dgx-a100", 4)
    for kind, passes in (("allgather", 3.0), ("reduce_scatter", 4.0)):
        def passes_s(count, nbytes, rate=RATE):
            return (comm.per_tensor_time(count, nbytes, 32, 1, cl, 0.0, kind, copy_rate=rate)
                    - count * comm.collective_time(kind, nbytes / count, 32, 1, cl))
        assert per_tensor_passes(kind) == passes
        assert passes_s(10, 4e9) == pytest.approx(passes * 4e9 / RATE, rel=1e-9)
        assert passes_s(1000, 4e9) == pytest.approx(passes * 4e9 / RATE, rel=1e-9)
        assert passes_s(10, 8e9) == pytest.approx(2 * passes_s(10, 4e9), rel=1e-9)
        assert passes_s(10, 4e9, 2 * RATE) == pytest.approx(passes_s(10, 4e9) / 2, rel=1e-9)


def test_per_tensor_bad_inputs_name_the_rule():
    cl = cluster_preset("dgx-a100", 4)
    with pytest.raises(ValueError, match="copy_rate"):
        comm.per_tensor_time(10, 1e9, 32, 1, cl, 3e-6, copy_rate=0.0)
    with pytest.raises(ValueError, match="allgather or reduce_scatter"):
        comm.per_tensor_time(10, 1e9, 32, 1, cl, 3e-6, "allreduce", copy_rate=RATE)
    # no call, no rate needed (a plan that gathers nothing)
    assert comm.per_tensor_time(0, 0.0, 32, 1, cl, 3e-6, copy_rate=0.0) == 0.0


def test_per_tensor_ring_latency_sums_the_hops():
    """NCCL's tuning model (``src/graph/tuning.cc`` v2.7.8-1, v2.8.4-1: ``(nsteps -
    nInterSteps)·intraLat + nInterSteps·interLat``): 32 ranks on 4 nodes, an empty buffer, take
    28 NVLink steps and 3 network steps (the hop between nodes changes rail on a DGX A100:
    relayed, one NVLink latency more), not 31 steps at the slowest hop's latency; each of the
    10 calls also pays its own latency (``phase.CALL_LATENCY_S``)."""
    cl = cluster_preset("dgx-a100", 4)
    lat_in, lat_out = cl.intra_node_latency, cl.inter_node_latency + cl.intra_node_latency
    want = 28 * lat_in + 3 * lat_out
    assert comm.per_tensor_time(10, 0.0, 32, 1, cl, 0.0, copy_rate=RATE) == \
        pytest.approx(10 * (want + CALL), rel=1e-12)
    assert want < 31 * lat_out


def _job(fw, dp=32, mbs=1, gbs=64):
    return make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", dp // 8),
                    Plan(tp=1, pp=1, dp=dp, mbs=mbs, gbs=gbs, zero=3, recompute="full",
                         flash_attn=False, tp_comm_overlap=False),
                    framework=fw)


def test_estimate_charges_every_gather_exposed():
    job = _job("megatron-deepspeed")
    r = estimate(job)
    m, cl = job.model, job.cluster
    z = param_counts.zero3_tensor_gathers(m, 1, 1, 1, True, MEGATRON_DEEPSPEED.zero3_reuse_params)
    gap = MEGATRON_DEEPSPEED.launch_gap_s
    rate = usable_hbm(cl.gpu, job.system)
    per_mb = (comm.per_tensor_time(z["fwd_n"] + z["bwd_n"],
                                   2.0 * (z["fwd_params"] + z["bwd_params"]), 32, 1, cl, gap,
                                   copy_rate=rate)
              + comm.per_tensor_time(z["rs_n"], job.system.main_grad_bytes(job.dtype)
                                     * z["rs_params"], 32, 1, cl, gap, "reduce_scatter",
                                     copy_rate=rate))
    # and the gradient norm's all-reduce before the optimizer (§5.202)
    assert r.breakdown_s["dp_comm"] == pytest.approx(2 * per_mb + barrier_s(job), rel=1e-9)
    core = estimate(_job("megatron-core"))
    assert r.step_time_s > core.step_time_s + 2 * per_mb * 0.5


def test_bucketed_stacks_unchanged():
    assert get_profile("megatron-core").zero3_gather == "bucketed"
    assert get_profile("torchtitan").zero3_gather == "bucketed"
    assert get_profile("deepspeed").zero3_gather == "per-tensor"


def test_bad_profile_values_are_refused():
    with pytest.raises(SpecError, match="zero3_gather"):
        replace(MEGATRON_DEEPSPEED, zero3_gather="per-layer")
    with pytest.raises(SpecError, match="zero3_reuse_params"):
        replace(MEGATRON_DEEPSPEED, zero3_reuse_params=-1.0)


def test_simulator_runs_the_same_calls():
    """Alone on the wire (one stage, nothing else on the dp links) the simulated step equals
    the estimate to floating-point precision: both read the stage record's z3 counts and
    ``comm.per_tensor_time``."""
    from simulator.simulate import simulate
    job = _job("megatron-deepspeed")
    sim = simulate(job)
    assert sim.step_time_s == pytest.approx(estimate(job).step_time_s, rel=1e-12)
    from simulator.program.compiler import compile_job
    ops = compile_job(job, ranks=[0])[0].streams["dp-comm"]
    gathers = [op for op in ops if op.label.startswith("AG z3 tensors")]
    z = param_counts.zero3_tensor_gathers(job.model, 1, 1, 1, True, 1e9)
    assert sum(op.repeat for op in gathers) == job.num_microbatches * (z["fwd_n"] + z["bwd_n"])


def test_per_tensor_excess_completes_the_collective():
    cl = cluster_preset("dgx-a100", 4)
    for kind in ("allgather", "reduce_scatter"):
        total = comm.per_tensor_time(50, 5e8, 32, 1, cl, 3e-6, kind, copy_rate=RATE)
        own = 50 * comm.collective_time(kind, 1e7, 32, 1, cl)
        assert per_tensor_excess(kind, 50, 5e8, 32, 1, cl, 3e-6, copy_rate=RATE) == \
            pytest.approx(total - own, rel=1e-12)
        # the copies' gaps and the passes' bytes
        assert total - own == pytest.approx(
            50 * 32 * 3e-6 + per_tensor_passes(kind) * 5e8 / RATE, rel=1e-9)
