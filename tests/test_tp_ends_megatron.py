"""Megatron's TP collectives outside the blocks (docs/calibration.md §5.88, ``cost.tp_ends``):
``VocabParallelEmbedding``'s all-reduce (or reduce-scatter to the sequence shard under SP
without learned positions) and, under SP, its gradient's all-gather; the vocabulary-parallel
output layer's all-gather (SP) and its backward reduction (reduce-scatter under SP, all-reduce
without), hidden under the output's weight-gradient GEMM where the stack issues it
asynchronously; ``vocab_parallel_cross_entropy``'s three fp32 all-reduces."""
from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost import tp_ends
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.estimate.analytic import estimate_arrays
from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
from strategies.stacks.jax_xla import JAX_XLA
from strategies.stacks.megatron import HAI_LLM, MEGATRON_CORE, MEGATRON_LM_2021, NEMO
from strategies.stacks.pytorch import PYTORCH_EAGER
from strategies.plan_arrays import PlanArrays
from tests.tp_backward_checks import bound, tp_job

LAYERS = 4
BLOCKING = replace(MEGATRON_CORE, dgrad_overlap="none")
#: the plan switches the 2021-22 stacks need (no FlashAttention; DeepSpeed's pipeline engine)
_OLD = {"megatron-lm-2021": ",flash_attn=false",
        "megatron-deepspeed": ",flash_attn=false,schedule=deepspeed-1f1b"}


def _pair(spec: str, fw=MEGATRON_CORE, model: str = "llama3-8b", nodes: int = 1):
    return (tp_job(spec, model=model, layers=LAYERS, fw=fw, nodes=nodes),
            tp_job(spec, model=model, layers=LAYERS, fw=replace(fw, tp_end_collectives=False),
                   nodes=nodes))


def _times(job, tp: int, sp: bool, w: float = 0.0):
    return [float(np.asarray(v)) for v in tp_ends.tp_end_times(
        job.model, job.plan.mbs, tp, 1, sp, job.cluster.gpu, job.cluster, job.framework,
        head_wgrad=w)]


def test_profile_facts() -> None:
    for fw in (MEGATRON_CORE, NEMO, MEGATRON_LM_2021, MEGATRON_DEEPSPEED, HAI_LLM):
        assert fw.tp_end_collectives, fw.name
    for fw in (PYTORCH_EAGER, JAX_XLA):
        assert not fw.tp_end_collectives, fw.name


@pytest.mark.parametrize("tp", [2, 8])
@pytest.mark.parametrize("sp", [True, False])
@pytest.mark.parametrize("model", ["llama3-8b", "gpt3-175b"])
def test_closed_form_per_collective(tp: int, sp: bool, model: str) -> None:
    """Each collective at ``x = 2·b·s·h`` bytes: SP, RoPE: RS / AG / AG + loss / RS; SP,
    learned positions: AR / AG / AG + loss / RS; no SP: AR / 0 / loss / AR; loss
    ``3·AR(4·b·s)``; blocking (``dgrad_overlap="none"``), no copies (``[s, b, h]``)."""
    job = tp_job(f"tp={tp},pp=1,mbs=2,gbs=8,sp={str(sp).lower()}", model=model,
                 layers=LAYERS, fw=BLOCKING)
    m, cl = job.model, job.cluster
    x = 2 * 2 * m.seq_length * m.hidden_size
    rs, ag, ar = (float(cm.collective_time(k, x, tp, 1, cl))
                  for k in ("reduce_scatter", "allgather", "allreduce"))
    loss = 3 * float(cm.small_allreduce_time(4.0 * 2 * m.seq_length, tp, 1, cl))
    if sp:
        want = [ar if m.position_embedding == "learned" else rs, ag, ag + loss, rs]
    else:
        want = [ar, 0.0, loss, ar]
    assert _times(job, tp, sp) == pytest.approx(want, rel=1e-12)
    assert min(rs, ag, ar, loss) > 0


@pytest.mark.parametrize("overlap,sp,hidden", [
    ("all", True, True), ("all", False, True), ("sp", True, True), ("sp", False, False),
    ("none", True, False), ("none", False, False)])
def test_backward_reduction_hides_under_wgrad(overlap: str, sp: bool, hidden: bool) -> None:
    """The output's backward reduction ``t`` exposes ``max(0, t - wgrad)`` where issued
    asynchronously (``dgrad_overlap``), ``t`` where blocking; the other three unchanged."""
    job = tp_job(f"tp=8,pp=1,mbs=2,gbs=8,sp={str(sp).lower()}", layers=LAYERS,
                 fw=replace(MEGATRON_CORE, dgrad_overlap=overlap))
    full = _times(job, 8, sp)
    t = full[3]
    for w in (0.0, 0.4 * t, 2.0 * t):
        got = _times(job, 8, sp, w)
        assert got[:3] == full[:3]
        assert got[3] == pytest.approx(max(t - w, 0.0) if hidden else t, rel=1e-12, abs=0)


@pytest.mark.parametrize("tp,sp", [(8, True), (8, False), (2, True)])
def test_step_moves_by_the_sum(tp: int, sp: bool) -> None:
    """One pipeline, data-parallel reduction not overlapped, blocking: the step moves by
    ``m·(sum of the four)``; the scalar estimate equals the arrays estimate."""
    mbs, mb = 2, 3
    spec = (f"tp={tp},pp=1,mbs={mbs},gbs={mbs * mb * 8 // tp},sp={str(sp).lower()},zero=0,"
            "overlap_grad_reduce=false")
    on, off = _pair(spec, BLOCKING)
    want = mb * sum(_times(on, tp, sp))
    got = estimate(on).step_time_s - estimate(off).step_time_s
    assert want > 0 and got == pytest.approx(want, rel=1e-9)
    arr = estimate_arrays(on.model, on.cluster, on.dtype, PlanArrays.of_plan(on.plan),
                          on.framework)
    assert float(np.ravel(arr["step_time_s"])[0]) == pytest.approx(estimate(on).step_time_s,
                                                                   rel=1e-12)


@pytest.mark.parametrize("fw", [MEGATRON_CORE, NEMO, MEGATRON_LM_2021])
@pytest.mark.parametrize("sp", [True, False])
def test_estimate_meets_contention_free_simulation(fw, sp: bool) -> None:
    """Megatron pp 2 tp 4: the ends' move of the estimate equals the contention-free
    simulation's to 1e-9, and the lower bound stays below the simulation."""
    if fw is MEGATRON_LM_2021 and sp:
        pytest.skip("megatron-lm-2021 runs SP too; one case suffices")
    spec = f"tp=4,pp=2,mbs=1,gbs=8,sp={str(sp).lower()},zero=0,schedule=1f1b"
    on, off = _pair(spec + _OLD.get(fw.name, ""), fw)
    e = estimate(on).step_time_s - estimate(off).step_time_s
    s_on = simulate(on, network="contention-free").step_time_s
    s = s_on - simulate(off, network="contention-free").step_time_s
    assert e > 0 and s == pytest.approx(e, rel=1e-9)
    assert bound(on) <= s_on * (1 + 1e-9)
    assert bound(on) >= bound(off)


@pytest.mark.parametrize("fw", [MEGATRON_CORE, NEMO, MEGATRON_LM_2021, MEGATRON_DEEPSPEED])
def test_tp1_bit_identical(fw) -> None:
    on, off = _pair("tp=1,pp=2,mbs=1,gbs=16,zero=0" + _OLD.get(fw.name, ""), fw)
    assert estimate(on).step_time_s == estimate(off).step_time_s
    assert simulate(on, network="contention-free").step_time_s == \
        simulate(off, network="contention-free").step_time_s


def test_fused_loss_allreduces() -> None:
    """NeMo 2's fused cross-entropy: the max, then [target logit, sum of exponentials] in one
    all-reduce of two fp32 elements per token; a bad count is refused naming the field."""
    job = tp_job("tp=8,pp=1,mbs=2,gbs=8,sp=true", layers=LAYERS, fw=NEMO)
    unfused = tp_job("tp=8,pp=1,mbs=2,gbs=8,sp=true", layers=LAYERS,
                     fw=replace(NEMO, tp_loss_allreduces=(1, 1, 1)))
    T, cl = 2 * job.model.seq_length, job.cluster
    ar = [float(cm.small_allreduce_time(4.0 * n * T, 8, 1, cl)) for n in (1, 2)]
    got = _times(job, 8, True)[2] - _times(unfused, 8, True)[2]
    assert got == pytest.approx(ar[1] - 2 * ar[0], rel=1e-9, abs=1e-15)
    assert _times(job, 8, True)[2] < _times(unfused, 8, True)[2]
    for bad in ((0,), (1, True), [1, 1]):
        with pytest.raises(SpecError, match="framework.tp_loss_allreduces"):
            replace(NEMO, tp_loss_allreduces=bad)
