"""The per-step costs beside the layers (strategies.cost.step): each pass's time is its bytes
over the usable HBM bandwidth, the stacks differ only in which passes they run, and the tied
embedding's gradient all-reduce between the first and the last stage is NCCL's ring over 2
ranks, in the estimate and in the simulator alike (docs/formulas.md §10)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.collectives.phase import CALL_LATENCY_S as CALL
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost.comm.point_to_point import pair_time
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.stage import stage_costs
from strategies.cost.step import buffer_pass_bytes, shard_pass_bytes, step_pass_time
from strategies.cost.system import DEFAULT_SYSTEM
from strategies.estimate import estimate
from strategies.framework import get_profile
from strategies.stacks.passes import StepPasses
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

H100 = cluster_preset("dgx-h100", 2)


def test_each_pass_is_its_bytes_over_the_hbm_bandwidth():
    """One pass alone: zeroing the fp32 buffer writes 4 B per parameter, the 1/dp scale reads
    and writes 8, the check reads 4; the norm reads 4, the clip multiply 8, the copy 4 + 2."""
    gpu, bw = H100.gpu, usable_hbm(H100.gpu, DEFAULT_SYSTEM)
    off = dict(zero_grad=False, scale_grad=False, check_grad=False, grad_norm=False,
               clip_scale=False, param_copy=False)
    n, shard = 1.3e9, 2.5e8
    for name, per_param, on_shard in (("zero_grad", 4, False), ("scale_grad", 8, False),
                                      ("check_grad", 4, False), ("grad_norm", 4, True),
                                      ("clip_scale", 8, True), ("param_copy", 6, True)):
        one = StepPasses(**{**off, name: True})
        want = per_param * (shard if on_shard else n) / bw
        assert step_pass_time(n, shard, one, gpu, "bf16") == pytest.approx(want, rel=1e-12)
    # fp16 keeps a 16-bit gradient buffer: half the bytes of every gradient pass
    assert buffer_pass_bytes(StepPasses(), DEFAULT_SYSTEM.main_grad_bytes("fp16")) == 8.0
    assert step_pass_time(n, shard, StepPasses(**off), gpu, "bf16") == 0.0


def test_stacks_run_their_own_passes():
    """Megatron-Core zeroes, scales and checks the whole fp32 buffer (16 B/param) and copies the
    master weights (norm 4 + copy 6 per updated parameter); eager PyTorch and XLA do none of
    the buffer passes, and neither copies (FSDP casts in the all-gather)."""
    core, titan, jax = (get_profile(n).step for n in ("megatron-core", "torchtitan", "jax-xla"))
    assert (buffer_pass_bytes(core, 4.0), shard_pass_bytes(core, 4.0, 2.0)) == (16.0, 10.0)
    assert (buffer_pass_bytes(titan, 4.0), shard_pass_bytes(titan, 4.0, 2.0)) == (0.0, 12.0)
    assert (buffer_pass_bytes(jax, 4.0), shard_pass_bytes(jax, 4.0, 2.0)) == (0.0, 4.0)
    ds = get_profile("megatron-deepspeed").step
    assert (ds.zero_grad, ds.scale_grad, ds.clip_scale, ds.tied_reduce) == (False, True, True, True)
    for name in ("megatron-core", "megatron-lm-2021", "megatron-deepspeed", "torchtitan",
                 "jax-xla"):
        prof = get_profile(name).step
        named = {k for k, _ in prof.sources}
        assert {"zero_grad", "grad_norm", "param_copy"} <= named, name


def _tied_job(framework: str = "megatron-core", zero: int = 1):
    # gpt presets tie the word embedding; pp = 2 across the two nodes (stage stride 8 GPUs)
    return make_job(model_preset("gpt-1.7b"), H100,
                    Plan(tp=2, pp=2, dp=4, mbs=1, gbs=16, zero=zero), framework=framework)


def test_record_carries_the_passes_with_the_zero1_shard():
    job = _tied_job()
    c = stage_costs(job)
    g, bw = 4.0, usable_hbm(H100.gpu, DEFAULT_SYSTEM)
    for n, t in zip(c.params_by_stage, c.passes_by_stage):
        assert t == pytest.approx((16.0 * n + 10.0 * n / 4) / bw, rel=1e-12)
    m = job.model
    assert c.tied_bytes == m.vocab_size * m.hidden_size / 2 * g


@pytest.mark.parametrize("nodes", [1, 2])
def test_tied_allreduce_is_the_two_rank_ring(nodes):
    """Alone, the tied gradient all-reduce between the first and the last stage takes the
    ring's closed form for n = 2, 2·(1/2)·S/B + 2·latency, plus the call's own latency
    (``phase.CALL_LATENCY_S``): over NVLink when the pipeline
    group fits in a node, else at one GPU's NIC share; in the estimate and in the simulated
    trace."""
    cl = cluster_preset("dgx-h100", nodes)
    job = make_job(model_preset("gpt-1.7b"), cl,
                   Plan(tp=2, pp=2, dp=2 * nodes, mbs=1, gbs=16, zero=1))
    S = stage_costs(job).tied_bytes
    if nodes == 1:
        B, lat = cl.intra_node_bandwidth * cm.NVLINK_EFFICIENCY, cl.intra_node_latency
    else:
        B = cl.inter_node_bandwidth_per_gpu * cm.NETWORK_EFFICIENCY / cl.oversubscription
        lat = cl.inter_node_latency
    ring = S / B + 2 * lat + CALL
    assert pair_time("allreduce", S, nodes == 1, cl) == pytest.approx(ring, rel=1e-12)
    # the estimate charges it once per step on top of what the stack without it pays
    off = replace(get_profile("megatron-core"),
                  step=replace(get_profile("megatron-core").step, tied_reduce=False))
    e_on = estimate(job)
    e_off = estimate(make_job(job.model, cl, job.plan, framework=off))
    assert e_on.breakdown_s["dp_comm"] - e_off.breakdown_s["dp_comm"] == pytest.approx(ring, rel=1e-9)
    # the simulator runs it on the network: alone on its links, the same seconds
    res = simulate(job, network="contention-free")
    tied = [r for r in res.records if r.label == "tied embedding all-reduce"]
    assert tied and {r.stage for r in tied} == {0, 1}
    for r in tied:
        assert r.end - r.start - r.wait == pytest.approx(ring, rel=1e-9)


def test_untied_or_one_stage_has_no_tied_reduce():
    llama = make_job(model_preset("llama3-8b"), H100, Plan(tp=2, pp=2, dp=4, mbs=1, gbs=16))
    assert stage_costs(llama).tied_bytes == 0.0
    one = make_job(model_preset("gpt-1.7b"), H100, Plan(tp=2, pp=1, dp=8, mbs=1, gbs=16))
    assert stage_costs(one).tied_bytes == 0.0
    titan = _tied_job("torchtitan", zero=2)   # FSDP2: torchtitan's DDP runs only alone
    assert stage_costs(titan).tied_bytes == 0.0


def test_simulated_step_places_the_passes_before_the_optimizer():
    job = _tied_job()
    res = simulate(job, network="contention-free")
    c = stage_costs(job)
    for stage in (0, 1):
        ops = [r for r in res.records if r.stage == stage and r.stream == "compute"]
        labels = [r.label for r in ops]
        k = labels.index("step passes")
        assert labels[k + 1] == "optimizer"
        assert ops[k].end - ops[k].start == pytest.approx(c.passes_by_stage[stage], rel=1e-9)
        tied = next(r for r in res.records if r.stage == stage and r.label == "tied embedding all-reduce")
        assert ops[k].start >= tied.end - 1e-12


@pytest.mark.parametrize("zero", [2, 3])
def test_sharded_gradients_pass_over_the_shard(zero):
    """With ZeRO-2/3 (Megatron-FSDP) a GPU holds only the 1/dp shard of the gradient buffer,
    so the buffer passes stream 1/dp of the stage's parameters, as the optimizer's do."""
    job = make_job(model_preset("gpt-1.7b"), H100, Plan(tp=1, pp=1, dp=16, mbs=1, gbs=16,
                                                         zero=zero))
    c = stage_costs(job)
    n, bw = c.params_by_stage[0], usable_hbm(H100.gpu, DEFAULT_SYSTEM)
    assert c.passes_by_stage[0] == pytest.approx((16.0 + 10.0) * n / 16 / bw, rel=1e-12)


def test_a_source_must_name_a_pass():
    from strategies.errors import SpecError
    with pytest.raises(SpecError, match="framework.step.sources"):
        StepPasses(sources=(("zero_grads", "typo"),))


def test_nemo_averages_in_the_collective():
    """NeMo 2 / Megatron-Bridge recipes set average_in_collective=True: Megatron-Core's DDP
    skips the 1/dp multiply over the gradient buffer (2 g bytes per parameter). The nemo
    profile is Megatron-Core's but for that pass; each rank's per-step passes are shorter by
    exactly its buffer's 2 g bytes over the usable HBM bandwidth, and the estimate by the
    busiest rank's."""
    from dataclasses import fields
    mc, nemo = get_profile("megatron-core"), get_profile("nemo")
    assert nemo.step.scale_grad is False and mc.step.scale_grad is True
    # (and the cross-entropy: NeMo's configs turn Megatron's fused path on, whose passes are
    # not counted, so nemo keeps the assumed ones: passes.LossPasses, calibration.md §3.20)
    # (and the DDP bucket: NeMo's comm-overlap callback sets 128 Mi, docs/calibration.md §5.86)
    # (and the loss's tp all-reduces: the fused path concatenates two, §5.88)
    # (and TP overlap without SP: NeMo's callback switches it off where Megatron-LM refuses it,
    # docs/search.md, tests/test_tp_overlap_sp.py)
    # (and the ZeRO stage a plan that names none gets: NeMo's recipes run the distributed
    # optimizer, strategies/stacks/plan_defaults.py, tests/test_stack_plan_defaults.py)
    same = {f.name for f in fields(mc)} - {"name", "description", "step", "loss", "dp_bucket",
                                           "tp_loss_allreduces", "tp_overlap_without_sp",
                                           "field_defaults"}
    assert all(getattr(mc, k) == getattr(nemo, k) for k in same)
    assert nemo.dp_bucket.floor_params == 128 * 1024 ** 2
    assert replace(nemo.step, scale_grad=True, sources=()) == replace(mc.step, sources=())
    assert "average_in_collective" in dict(nemo.step.sources)["scale_grad"]
    job_mc, job_nemo = _tied_job("megatron-core"), _tied_job("nemo")
    c_mc, c_nemo = stage_costs(job_mc), stage_costs(job_nemo)
    g, bw = 4.0, usable_hbm(H100.gpu, DEFAULT_SYSTEM)
    for n, t_mc, t_nemo in zip(c_mc.params_by_stage, c_mc.passes_by_stage,
                               c_nemo.passes_by_stage):
        assert t_mc - t_nemo == pytest.approx(2 * g * n / bw, rel=1e-9)
    assert estimate(job_nemo).step_time_s < estimate(job_mc).step_time_s
