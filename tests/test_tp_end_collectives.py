"""torchtitan's TP collectives outside the blocks (docs/calibration.md §5.84,
``cost.tp_ends``): the embedding's reduce-scatter forward and all-gather backward, the
output's all-gather forward and reduce-scatter backward (each with its sequence-dim copy),
and loss_parallel's three fp32 all-reduces, on the first and the last stage."""
from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import comm as cm
from strategies.cost import hbm_rate
from strategies.cost import tp_ends
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
from strategies.stacks.jax_xla import JAX_XLA
from strategies.stacks.megatron import HAI_LLM, MEGATRON_CORE, MEGATRON_LM_2021, NEMO
from strategies.stacks.pytorch import PYTORCH_EAGER, TORCHTITAN
from strategies.stacks.variants import TORCHTITAN_COMPILE
from tests.tp_backward_checks import SIM_CASES, assert_moves_with_simulation, switch_pair, tp_job

LAYERS = 4


def _pair(spec: str, fw=TORCHTITAN_COMPILE, dtype: str = "bf16", nodes: int = 1):
    return switch_pair(spec, fw, "tp_end_collectives", dtype, nodes, LAYERS)


def test_profile_facts() -> None:
    assert TORCHTITAN.tp_end_collectives and TORCHTITAN_COMPILE.tp_end_collectives
    for fw in (PYTORCH_EAGER, JAX_XLA):
        assert not fw.tp_end_collectives, fw.name
    # Megatron's stacks since §5.88 (tests/test_tp_ends_megatron.py)
    for fw in (MEGATRON_CORE, NEMO, MEGATRON_LM_2021, MEGATRON_DEEPSPEED, HAI_LLM):
        assert fw.tp_end_collectives, fw.name
    with pytest.raises(SpecError, match="framework.tp_end_collectives"):
        replace(TORCHTITAN, tp_end_collectives=1)


@pytest.mark.parametrize("fw,dtype,rc", [
    (TORCHTITAN_COMPILE, "bf16", "op"), (TORCHTITAN_COMPILE, "fp8-current", "full"),
    (TORCHTITAN, "bf16", "none")])
def test_closed_form_of_the_step(fw, dtype: str, rc: str) -> None:
    """One pipeline (first stage = last): the step moves by ``m·(2·RS(x) + 2·AG(x) + 4c +
    3·AR(4·b·s))`` with ``x = 2·b·s·h`` bytes in 16 bits whatever the precision and ``c`` one
    read + write of ``x`` at the usable HBM rate."""
    mbs, mb = 2, 3
    on, off = _pair(f"tp=8,pp=1,mbs={mbs},gbs={mbs * mb},sp=true,zero=0,recompute={rc}",
                    fw, dtype)
    m, cl = on.model, on.cluster
    x = 2 * mbs * m.seq_length * m.hidden_size
    c = 2 * x / hbm_rate.usable_hbm(cl.gpu)
    rs = float(cm.collective_time("reduce_scatter", x, 8, 1, cl))
    ag = float(cm.collective_time("allgather", x, 8, 1, cl))
    loss = 3 * float(cm.small_allreduce_time(4.0 * mbs * m.seq_length, 8, 1, cl))
    want = mb * (2 * rs + 2 * ag + 4 * c + loss)
    got = estimate(on).step_time_s - estimate(off).step_time_s
    assert got == pytest.approx(want, rel=1e-9)
    assert want > 0


@pytest.mark.parametrize("spec,nodes", SIM_CASES)
def test_estimate_meets_contention_free_simulation(spec: str, nodes: int) -> None:
    s_on = assert_moves_with_simulation(*_pair(spec, nodes=nodes))


def test_nothing_without_tp() -> None:
    on, off = _pair("tp=1,pp=1,mbs=2,gbs=16,zero=3")
    assert estimate(on).step_time_s == estimate(off).step_time_s


def test_replicated_plan_without_sequence_parallel() -> None:
    """Without SP (``Replicate`` layouts, §5.88's rule): the embedding's all-reduce forward,
    the output's blocking input-gradient all-reduce backward, the loss's three; no copies."""
    mbs, mb = 2, 2
    on, off = _pair(f"tp=8,pp=1,mbs={mbs},gbs={mbs * mb},sp=false,zero=0")
    m, cl = on.model, on.cluster
    x = 2 * mbs * m.seq_length * m.hidden_size
    ar = float(cm.collective_time("allreduce", x, 8, 1, cl))
    loss = 3 * float(cm.small_allreduce_time(4.0 * mbs * m.seq_length, 8, 1, cl))
    got = estimate(on).step_time_s - estimate(off).step_time_s
    assert got == pytest.approx(mb * (2 * ar + loss), rel=1e-9)


def test_zero_on_other_stacks() -> None:
    job = tp_job("tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0", layers=LAYERS)
    for fw in (PYTORCH_EAGER, JAX_XLA):
        out = tp_ends.tp_end_times(job.model, 2, 8, 1, True, job.cluster.gpu, job.cluster, fw)
        assert all(float(np.asarray(v)) == 0.0 for v in out)


def test_async_tp_keeps_them() -> None:
    """torchtitan compiles the blocks only: the ends' collectives and copies are not in the
    micro-pipeline pass's graph, so async TP moves them by nothing."""
    spec = "tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0"
    a_on, a_off = _pair(spec + ",tp_comm_overlap=true")
    v_on, v_off = _pair(spec)
    d_async = estimate(a_on).step_time_s - estimate(a_off).step_time_s
    d_vanilla = estimate(v_on).step_time_s - estimate(v_off).step_time_s
    assert d_async > 0 and d_async == pytest.approx(d_vanilla, rel=1e-9)
