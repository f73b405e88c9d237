"""torchtitan's sequence-dim TP collectives (docs/calibration.md §5.80): its ``Shard(1)`` plan
gathers and scatters ``[b, s, h]`` along dim 1, so PyTorch's functional collectives copy the
whole tensor once per all-gather (after it) and per reduce-scatter (before it) on the compute
stream (``elementwise_time.tp_layout_copy_time``, ``FrameworkProfile.tp_seq_dim_copies``)."""
from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import elementwise_time, hbm_rate
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
from strategies.stacks.jax_xla import JAX_XLA
from strategies.stacks.megatron import HAI_LLM, MEGATRON_CORE, MEGATRON_LM_2021, NEMO
from strategies.stacks.pytorch import PYTORCH_EAGER, TORCHTITAN
from strategies.stacks.variants import TORCHTITAN_COMPILE
from tests.tp_backward_checks import SIM_CASES, assert_moves_with_simulation, switch_pair, tp_job

LAYERS = 4


def _off(fw):
    return replace(fw, tp_seq_dim_copies=False)


def _pair(spec: str, fw=TORCHTITAN_COMPILE, dtype: str = "bf16", nodes: int = 1):
    """The job on the stack ``fw`` and on the same stack without the copies."""
    return switch_pair(spec, fw, "tp_seq_dim_copies", dtype, nodes, LAYERS)


def test_profile_facts() -> None:
    assert TORCHTITAN.tp_seq_dim_copies and TORCHTITAN_COMPILE.tp_seq_dim_copies
    for fw in (MEGATRON_CORE, NEMO, MEGATRON_LM_2021, MEGATRON_DEEPSPEED, PYTORCH_EAGER,
               JAX_XLA, HAI_LLM):
        assert not fw.tp_seq_dim_copies, fw.name


def test_profile_field_is_a_bool() -> None:
    with pytest.raises(SpecError, match="framework.tp_seq_dim_copies"):
        replace(TORCHTITAN, tp_seq_dim_copies=1)


@pytest.mark.parametrize("fw,dtype,rc", [
    (TORCHTITAN_COMPILE, "bf16", "none"), (TORCHTITAN_COMPILE, "bf16", "op"),
    (TORCHTITAN_COMPILE, "bf16", "full"), (TORCHTITAN_COMPILE, "fp8-current", "op"),
    (TORCHTITAN, "bf16", "none"), (TORCHTITAN, "fp8-current", "full")])
def test_closed_form_of_the_step(fw, dtype: str, rc: str) -> None:
    """Step difference with and without the copies, one pipeline, nothing to hide them:
    ``m·L·c·(f + b + r)`` with ``c`` one copy of the bf16 gathered tensor (read + write,
    ``2·2·b·s·h`` bytes over the usable HBM rate), per layer forward ``2(g + 1)`` copies,
    backward ``2g`` compiled and ``2(g + 1)`` eager, recomputation ``2g`` (op) or the
    forward's less the MLP's reduce-scatter (full: the checkpoint stops early), with ``g``
    the all-gather's element share (1 in bf16, 1/2 for torchao's fp8 gathers); plus ``4·m·c``,
    the embedding's and the output's collectives' copies (16 bits, §5.84)."""
    mbs, mb = 2, 3
    on, off = _pair(f"tp=8,pp=1,mbs={mbs},gbs={mbs * mb},sp=true,zero=0,recompute={rc}",
                    fw, dtype)
    m = on.model
    c = 2 * 2 * mbs * m.seq_length * m.hidden_size / hbm_rate.usable_hbm(on.cluster.gpu)
    g = 0.5 if dtype.startswith("fp8") else 1.0
    f = 2 * (g + 1)
    b = 2 * g if fw.elementwise_kernels == "compiled" else 2 * (g + 1)
    r = {"none": 0.0, "op": 2 * g, "full": f - 1}[rc]
    want = mb * LAYERS * c * (f + b + r) + mb * 4 * c
    got = estimate(on).step_time_s - estimate(off).step_time_s
    assert got == pytest.approx(want, rel=1e-9)
    assert want > 0


@pytest.mark.parametrize("spec,nodes", SIM_CASES)
def test_estimate_meets_contention_free_simulation(spec: str, nodes: int) -> None:
    """The estimate and the contention-free simulation move by the same seconds (the copies
    are compute-stream work both read from the stage costs); the bound stays below."""
    on, off = _pair(spec, nodes=nodes)
    s_on = assert_moves_with_simulation(on, off)
    assert simulate(on, network="contention-free").step_time_s == s_on   # deterministic


@pytest.mark.parametrize("spec", [
    # async TP: Inductor lays the fused matmuls' operands out for the gather dim
    "tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0,tp_comm_overlap=true",
    # no sequence parallelism (all-reduces), no TP
    "tp=8,pp=1,mbs=2,gbs=4,sp=false,zero=0",
    "tp=1,pp=1,mbs=2,gbs=16,zero=3"])
def test_no_copies_where_no_sequence_dim_collective(spec: str) -> None:
    # the blocks' copies; the embedding's and the output's run eager outside the compiled
    # blocks, async TP or not (§5.84, tests/test_tp_end_collectives.py)
    on, off = _pair(spec, fw=replace(TORCHTITAN_COMPILE, tp_end_collectives=False))
    a, b = estimate(on), estimate(off)
    assert a.step_time_s == b.step_time_s
    assert a.breakdown_s == b.breakdown_s


def test_copy_time_is_zero_on_other_stacks() -> None:
    job = tp_job("tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0", layers=LAYERS)
    for fw in (MEGATRON_CORE, NEMO, PYTORCH_EAGER):
        out = elementwise_time.tp_layout_copy_time(job.model, 2, 8, 1, True, False, 2.0,
                                                   job.cluster.gpu, "bf16", fw)
        assert all(float(np.asarray(v)) == 0.0 for v in out)
