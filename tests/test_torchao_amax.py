"""torchao's tensorwise float8 under TP (docs/calibration.md §5.84, ``cost.amax``): each cast
of a sharded DTensor all-reduces its 4-byte amax over the TP group, per layer and
micro-batch 4 forward, 7 backward and, recomputed, the forward's 4 again; the same
``comm.small_allreduce_time`` as Transformer Engine's current-scaling reductions (§5.64)."""
import numpy as np
import pytest

from strategies.cost import amax, quantise
from strategies.cost import hbm_rate
from strategies.cost import comm as cm
from strategies.estimate import estimate
from strategies.stacks.megatron import MEGATRON_CORE, NEMO
from strategies.stacks.pytorch import TORCHTITAN
from strategies.stacks.variants import TORCHTITAN_COMPILE
from strategies.presets import model_preset
from tests.tp_backward_checks import SIM_CASES, assert_moves_with_simulation, switch_pair
from topologies.cluster import cluster_preset

LAYERS = 4


def _pair(spec: str, fw=TORCHTITAN_COMPILE, dtype: str = "fp8-current", nodes: int = 1):
    return switch_pair(spec, fw, "torchao_float8_tp", dtype, nodes, LAYERS)


def test_profile_facts_and_counts() -> None:
    assert TORCHTITAN.torchao_float8_tp and TORCHTITAN_COMPILE.torchao_float8_tp
    assert not MEGATRON_CORE.torchao_float8_tp and not NEMO.torchao_float8_tp
    assert amax.torchao_tp_amax_reductions(model_preset("llama3-8b")) == (4.0, 7.0)
    qwen = model_preset("qwen3-30b-a3b")     # every layer MoE: the attention's only
    assert amax.torchao_tp_amax_reductions(qwen) == (2.0, 4.0)


@pytest.mark.parametrize("rc,rerun", [("none", 0), ("op", 4), ("full", 4)])
def test_rule(rc: str, rerun: int) -> None:
    cl = cluster_preset("dgx-h100", 1)
    m = model_preset("llama3-8b")
    code = {"none": 0, "op": 3, "full": 2}[rc]
    t = float(cm.small_allreduce_time(4.0, 8, 1, cl))
    f, b = amax.amax_reduction_time(m, 8.0, 8, 1, 1, 1, 1, "fp8-current", TORCHTITAN, cl, code)
    assert f == pytest.approx(4 * t, rel=1e-12) and b == pytest.approx((7 + rerun) * t, rel=1e-12)
    # nothing in bf16, with delayed scaling (the stack's own, not torchao's tensorwise), mxfp8,
    # without SP or TP
    for dtype in ("bf16", "fp8", "mxfp8"):
        assert amax.amax_reduction_time(m, 8.0, 8, 1, 1, 1, 1, dtype, TORCHTITAN, cl,
                                        code) == (0.0, 0.0)
    assert np.all(np.asarray(amax.amax_reduction_time(m, 8.0, 8, 1, 1, 1, 0, "fp8-current",
                                                      TORCHTITAN, cl, code)) == 0.0)
    assert np.all(np.asarray(amax.amax_reduction_time(m, 8.0, 1, 1, 1, 1, 1, "fp8-current",
                                                      TORCHTITAN, cl, code)) == 0.0)


@pytest.mark.parametrize("rc", ["none", "op", "full"])
def test_closed_form_of_the_step(rc: str) -> None:
    """One pipeline: the step moves by ``m·L·((4 + 7 + r)·t + x)``, ``r`` 4 recomputed, ``x``
    the same flag's transposed copies of the gathered fp8 tensors (§5.89)."""
    mbs, mb = 2, 3
    on, off = _pair(f"tp=8,pp=1,mbs={mbs},gbs={mbs * mb},sp=true,zero=0,recompute={rc}")
    t = float(cm.small_allreduce_time(4.0, 8, 1, on.cluster))
    gpu = on.cluster.gpu
    x = quantise.gathered_transpose_bytes(on.model, mbs, 8, 1, 1, gpu, "fp8-current") \
        / hbm_rate.usable_hbm(gpu)
    r = 0 if rc == "none" else 4
    got = estimate(on).step_time_s - estimate(off).step_time_s
    assert got == pytest.approx(mb * LAYERS * ((11 + r) * t + x), rel=1e-9)


@pytest.mark.parametrize("spec,nodes", SIM_CASES)
def test_estimate_meets_contention_free_simulation(spec: str, nodes: int) -> None:
    s_on = assert_moves_with_simulation(*_pair(spec, nodes=nodes))


def test_megatron_current_scaling_unchanged() -> None:
    """Transformer Engine's current scaling keeps its own counts (§5.64), whatever the
    recompute argument."""
    cl = cluster_preset("dgx-h100", 1)
    m = model_preset("llama3-8b")
    for code in (0, 2):
        assert amax.amax_reduction_time(m, 8.0, 8, 1, 1, 1, 1, "fp8-current", MEGATRON_CORE,
                                        cl, code) == \
            amax.amax_reduction_time(m, 8.0, 8, 1, 1, 1, 1, "fp8-current", MEGATRON_CORE, cl)
