"""The model states of low-precision runs under Megatron-Core (docs/calibration.md §5.151):
bytes per layer weight per precision x chip x ``SystemConfig.quantised_weights``
(``state_arrays.layer_state_bytes_per_param``) as closed forms, and the published
Nemotron-H 56B FP8 recipe (tp 8 on 80 GB H100s) that fits its GPU."""
from __future__ import annotations

import os

import numpy as np
import pytest

from strategies.cost.system import SystemConfig
from strategies.errors import SpecError
from strategies.memory.scalar import memory_components, peak_memory
from strategies.memory.state_arrays import layer_state_bytes_per_param
from topologies.cluster import cluster_preset

H100 = cluster_preset("dgx-h100", 1).gpu         # per-tensor fp8 GEMMs take only TN
B200 = cluster_preset("dgx-b200", 1).gpu         # reads either layout

#: (dtype, gpu, stored quantised bytes per weight): the row-wise copy, the column-wise one
#: where the chip needs a transpose or the format is block-scaled, each with its scales
QUANTISED = [("fp8", H100, 1.0 + 1.0), ("fp8-current", H100, 2.0), ("fp8", B200, 1.0),
             ("fp8-current", B200, 1.0), ("mxfp8", B200, 2 * (1 + 1 / 32)),
             ("nvfp4", B200, 2 * (0.5 + 1 / 16)), ("fp8-blockwise", H100, 2 * (1 + 4 / 128))]


def _params(dtype, gpu, zero, d, switch, param_bytes=2.0):
    p, g, o = layer_state_bytes_per_param(np.array([zero]), d, param_bytes, 2.0, 12.0, dtype,
                                          gpu, switch)
    return float(p[0]), float(g[0]), float(o[0])


@pytest.mark.parametrize("dtype,gpu,q", QUANTISED)
@pytest.mark.parametrize("zero", [0, 1, 2])
def test_quantised_weights_replace_the_16bit_weight(dtype, gpu, q, zero):
    d = 8
    cached = _params(dtype, gpu, zero, d, 0.0)
    stored = _params(dtype, gpu, zero, d, 1.0)
    # 16-bit weight + TE's cached copies, against the quantised tensor alone
    assert cached[0] == pytest.approx(2.0 + q, rel=1e-12)
    assert stored[0] == pytest.approx(q, rel=1e-12)
    # the gradient and the optimizer's shard (fp32 master included) are the switch's neither
    grads = 2.0 / d if zero >= 2 else 2.0
    opt = 12.0 / d if zero >= 1 else 12.0
    for x in (cached, stored):
        assert x[1] == pytest.approx(grads, rel=1e-12)
        assert x[2] == pytest.approx(opt, rel=1e-12)


@pytest.mark.parametrize("switch", [0.0, 1.0])
def test_sixteen_bit_and_rowwise_keep_their_weight(switch):
    # bf16 caches nothing; torchao's rowwise recipe casts inside each GEMM: the 16-bit weight
    # is the parameter whatever the switch says
    for dtype in ("bf16", "fp8-rowwise"):
        assert _params(dtype, H100, 1, 8, switch)[0] == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize("switch", [0.0, 1.0])
def test_zero3_gathers_the_16bit_weight(switch):
    # ZeRO-3 shards the 16-bit weight and casts each gathered layer per use: no copy kept
    assert _params("fp8", H100, 3, 8, switch)[0] == pytest.approx(2.0 / 8, rel=1e-12)


def test_quantised_weights_is_a_switch():
    with pytest.raises(SpecError, match="quantised_weights"):
        SystemConfig(quantised_weights=0.5)


def _case(row_id: str):
    from simulator.studies.validate import load_cases
    path = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data",
                        "hybrid_2026.json")
    cases = [c for c in load_cases(path, None) if c.raw.get("id") == row_id]
    assert len(cases) == 1 and cases[0].job is not None
    return cases[0].job


def test_published_fp8_recipe_fits_its_gpu():
    """NVIDIA's DGX Cloud Nemotron-H 56B FP8 recipe (tp 8, pp 1, 32 H100 80 GB) ran; NeMo's
    performance scripts build it with ``bf16_with_fp8_mixed`` (``fp8_param_gather``) and
    ``grad_reduce_in_fp32 = False``: FP8 weights with their transpose (2 bytes) and bf16
    gradients (2 bytes) per layer parameter, and it fits."""
    job = _case("dgxc2505_nemotronh_56b_h100_32_fp8")
    sy = job.system
    assert (sy.quantised_weights, sy.param_gather_bytes, sy.grad_buffer_bytes) == (1.0, 1.0, 2.0)
    stage, peak = peak_memory(job)
    assert peak.total <= job.cluster.gpu.hbm_bytes
    layers = memory_components(job, stage)["layers"]
    # FP8 data + Hopper's transpose against the bf16 gradient: equal bytes per parameter
    assert layers.params == pytest.approx(layers.grads, rel=1e-12)
    # the same job with 16-bit weights (the cached copies beside them) holds 4 bytes
    from dataclasses import replace
    from strategies.job import make_job
    bf16_weights = make_job(job.model, job.cluster, job.plan, dtype=job.dtype,
                            framework=job.framework, system=replace(sy, quantised_weights=0.0))
    before = memory_components(bf16_weights, stage)["layers"]
    assert before.params == pytest.approx(2.0 * layers.params, rel=1e-12)
    assert peak_memory(bf16_weights)[1].total > peak.total
