"""torchao's float8 TP transposes its gathered fp8 tensors after the gather (docs/calibration.md
§5.89, ``quantise.gathered_transpose_bytes``): per mean layer and micro-batch the attention's
and the dense feed-forward's gathered input and gathered output gradient, ``T·h`` each, a read
and a write of one byte, less the transposed copy ``cast_bytes`` charged on the local shard."""
from dataclasses import replace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import elementwise_time, hbm_rate
from strategies.cost import quantise
from strategies.estimate import estimate
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.variants import TORCHTITAN_COMPILE
from strategies.presets import model_preset
from tests.tp_backward_checks import bound, tp_job
from topologies.gpus import get_gpu

LAYERS = 4


def _pair(spec: str, monkeypatch, fw=TORCHTITAN_COMPILE, dtype: str = "fp8-current",
          nodes: int = 1) -> tuple[float, float, object]:
    """(estimate with the rule, estimate without it, the job)."""
    job = tp_job(spec, layers=LAYERS, fw=fw, dtype=dtype, nodes=nodes)
    on = estimate(job).step_time_s
    with monkeypatch.context() as mp:
        mp.setattr(quantise, "TORCHAO_GATHERED", (0.0, 0.0))
        off = estimate(job).step_time_s
    return on, off, job


def test_closed_form_bytes() -> None:
    m = model_preset("llama3-8b")
    b, tp = 12, 8
    T, h = b * m.seq_length, m.hidden_size
    h100, b200 = get_gpu("H100"), get_gpu("B200")
    assert h100.cast_copies("fp8-current") == 2 and b200.cast_copies("fp8-current") == 1
    got = quantise.gathered_transpose_bytes(m, b, tp, 1, 1, h100, "fp8-current")
    assert got == pytest.approx(4 * T * h * (2 - 1 / tp), rel=1e-15)
    # Blackwell: no transposed copy was charged on the shard, the whole copy is added
    got = quantise.gathered_transpose_bytes(m, b, tp, 1, 1, b200, "fp8-current")
    assert got == pytest.approx(4 * T * h * 2, rel=1e-15)
    # cp splits the tokens; a MoE model counts its attention's two
    assert quantise.gathered_transpose_bytes(m, b, tp, 2, 1, h100, "fp8") == \
        pytest.approx(4 * T / 2 * h * (2 - 1 / tp), rel=1e-15)
    qwen = model_preset("qwen3-30b-a3b")
    assert quantise.gathered_transpose_elements(qwen, 1, 4, 1, 1) == \
        pytest.approx(2 * qwen.seq_length * qwen.hidden_size, rel=1e-15)
    # nothing in 16 bits, block formats, without SP or TP; vectorised
    for dtype in ("bf16", "mxfp8"):
        assert quantise.gathered_transpose_bytes(m, b, tp, 1, 1, h100, dtype) == 0.0
    assert quantise.gathered_transpose_bytes(m, b, tp, 1, 0, h100, "fp8-current") == 0.0
    assert quantise.gathered_transpose_bytes(m, b, 1, 1, 1, h100, "fp8-current") == 0.0
    arr = quantise.gathered_transpose_bytes(m, b, np.array([1, 8]), 1, np.array([1, 1]), h100,
                                            "fp8-current")
    assert arr[0] == 0.0 and arr[1] == pytest.approx(4 * T * h * (2 - 1 / tp), rel=1e-15)


def test_cast_time_reads_the_profile() -> None:
    """Only a stack with torchao's float8 TP styles pays it, in the backward only."""
    m, gpu = model_preset("llama3-8b"), get_gpu("H100")
    on = elementwise_time.cast_time(m, 2, 8, 1, 1, gpu, "fp8-current", fw=TORCHTITAN_COMPILE)
    off = elementwise_time.cast_time(m, 2, 8, 1, 1, gpu, "fp8-current",
                                     fw=replace(TORCHTITAN_COMPILE, torchao_float8_tp=False))
    extra = quantise.gathered_transpose_bytes(m, 2, 8, 1, 1, gpu, "fp8-current") \
        / hbm_rate.usable_hbm(gpu)
    assert on[0] == off[0] and on[1] == pytest.approx(off[1] + extra, rel=1e-12)
    assert elementwise_time.cast_time(m, 2, 8, 1, 1, gpu, "fp8-current", fw=MEGATRON_CORE) == \
        elementwise_time.cast_time(m, 2, 8, 1, 1, gpu, "fp8-current",
                                   fw=replace(MEGATRON_CORE, torchao_float8_tp=False))


@pytest.mark.parametrize("rc", ["none", "op", "full"])
def test_closed_form_of_the_step(rc: str, monkeypatch) -> None:
    """One pipeline, no DP: the step moves by ``m·L·bytes/HBM`` whatever the recomputation
    (the copies are the backward's)."""
    mbs, mb = 2, 3
    on, off, job = _pair(f"tp=8,pp=1,mbs={mbs},gbs={mbs * mb},sp=true,zero=0,recompute={rc}",
                         monkeypatch)
    gpu = job.cluster.gpu
    t = quantise.gathered_transpose_bytes(job.model, mbs, 8, 1, 1, gpu, "fp8-current") \
        / hbm_rate.usable_hbm(gpu)
    assert on - off == pytest.approx(mb * LAYERS * t, rel=1e-9)


@pytest.mark.parametrize("spec,nodes", [
    ("tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0,recompute=op", 1),
    ("tp=8,pp=2,mbs=1,gbs=8,sp=true,zero=0,recompute=full,schedule=1f1b", 2)])
def test_estimate_meets_contention_free_simulation(spec: str, nodes: int, monkeypatch) -> None:
    job = tp_job(spec, layers=LAYERS, fw=TORCHTITAN_COMPILE, dtype="fp8-current", nodes=nodes)
    e_on = estimate(job).step_time_s
    s_on = simulate(job, network="contention-free").step_time_s
    with monkeypatch.context() as mp:
        mp.setattr(quantise, "TORCHAO_GATHERED", (0.0, 0.0))
        e_off = estimate(job).step_time_s
        s_off = simulate(job, network="contention-free").step_time_s
    assert e_on > e_off
    assert s_on == pytest.approx(e_on, rel=1e-9) and s_off == pytest.approx(e_off, rel=1e-9)
    assert bound(job) <= s_on * (1 + 1e-9)


@pytest.mark.parametrize("fw,dtype", [(TORCHTITAN_COMPILE, "bf16"), (MEGATRON_CORE, "fp8-current"),
                                      (MEGATRON_CORE, "fp8")])
def test_other_stacks_and_bf16_unchanged(fw, dtype: str, monkeypatch) -> None:
    on, off, _ = _pair("tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0,recompute=full", monkeypatch,
                       fw=fw, dtype=dtype)
    assert on == off
