"""A Mamba-2 layer's kernel launches under Megatron-Core (``strategies.cost.mamba_launches``,
docs/calibration.md §5.165): the tables' sums, the per-plan terms, and the DGX-Cloud
Nemotron-H 56B row's step moving by exactly the extra launches times the gap."""
from __future__ import annotations

import numpy as np
import pytest

import strategies.cost.layer_time as lt
from strategies.cost import mamba_launches as ml
from strategies.cost import ssd_traffic as st
from strategies.errors import SpecError
from strategies.presets import model_preset
from strategies.stacks.pytorch import AUTOMODEL

M56 = model_preset("nemotron-h-56b")


def test_tables_sum_to_the_counted_launches():
    """Forward 15 (10 around the 5 SSD kernels), backward 55 (40 around the 15): the SSD rows
    are ``ssd_traffic``'s tables' lengths, every row a positive whole count."""
    assert ml.table_count(ml.LAYER_FWD) == 15 and ml.table_count(ml.LAYER_BWD) == 55
    ssd = {name: n for name, _, n in ml.LAYER_FWD + ml.LAYER_BWD if name.startswith("SSD")}
    assert ssd == {"SSD forward kernels": len(st.SSD_FWD_KERNELS),
                   "SSD backward kernels": len(st.SSD_BWD_KERNELS)} == {
        "SSD forward kernels": 5, "SSD backward kernels": 15}
    assert all(isinstance(n, int) and n > 0 for _, _, n in ml.LAYER_FWD + ml.LAYER_BWD)


def test_layer_kernels_at_the_56b_rank_and_one_gpu():
    """tp 8 with SP in fp8 (delayed scaling), one sequence: forward 15 + 2 collectives + 1 cast
    = 18; backward 55 + 6 main-grad adds + 3 for the conv bias + 3 collectives + 2 casts = 69.
    tp 1 in bf16: 15 and 64."""
    assert ml.layer_kernels(M56, 1, 8, True, "fp8") == (18, 69)
    assert ml.layer_kernels(M56, 1, 1, False, "bf16") == (15, 64)
    # without SP one all-reduce each way; current scaling an amax kernel before each cast
    assert ml.layer_kernels(M56, 1, 8, False, "fp8") == (17, 67)
    assert ml.layer_kernels(M56, 1, 8, True, "fp8-current") == (19, 71)


def test_layout_copies_and_vectorised():
    f, b = ml.layer_kernels(M56, np.array([1, 2, 4]), np.array([1, 1, 8]),
                            np.array([False, False, True]), "bf16")
    assert f.tolist() == [15, 17, 19] and b.tolist() == [64, 66, 69]


def test_scope_keeps_casts_of_bf16_layers_and_alt_format():
    """Nemotron 3 Super's NVFP4 scope (code 1): ``out_proj`` in MXFP8 (one cast kernel, no amax
    pass), ``in_proj`` in NVFP4 (amax pass: two), both on the quantised layers' share."""
    from strategies.cost.quant_scope import QUANT_SCOPES, quantised_layers
    m = model_preset("nemotron3-super")
    q = quantised_layers(m, QUANT_SCOPES[1], "mamba")
    assert 0 < q < 1
    f, b = ml.layer_kernels(m, 1, 1, False, "nvfp4", 1.0)
    f0, b0 = ml.layer_kernels(m, 1, 1, False, "bf16")
    assert f - f0 == pytest.approx(q * 1, rel=1e-12)
    assert b - b0 == pytest.approx(q * (1 + 2), rel=1e-12)


def test_launch_time_only_for_megatron_mixer_and_mamba_models():
    from strategies.framework import DEFAULT
    from topologies.gpus import get_gpu
    g = get_gpu("H100-SXM5-80GB")
    f, b = ml.mamba_launch_time(M56, 1, 8, True, "fp8", DEFAULT, g)
    gap = 3e-6 if g.profile is None or g.profile.launch_gap_s is None else g.profile.launch_gap_s
    assert f == pytest.approx(M56.mamba_share * gap * (18 - 16), rel=1e-12)
    assert b == pytest.approx(M56.mamba_share * gap * (69 - 32), rel=1e-12)
    assert ml.mamba_launch_time(M56, 1, 8, True, "fp8", AUTOMODEL, g) == (0.0, 0.0)
    assert ml.mamba_launch_time(model_preset("llama3-8b"), 1, 8, True, "fp8", DEFAULT,
                                g) == (0.0, 0.0)


def test_56b_row_step_moves_by_the_launches_times_the_gap(monkeypatch):
    """DGX-Cloud Nemotron-H 56B on 32 H100 (tp 8, SP, fp8, 24 micro-batches of one sequence,
    54 Mamba layers a rank): the step grows by (18 − 16 + 69 − 32) · 54 · 24 gaps of 3 µs."""
    from strategies.estimate.scalar import estimate
    from strategies.reference.cases import reference_cases
    case = next(c for c in reference_cases(["strategies/reference/data/hybrid_2026.json"])
                if c.id == "dgxc2505_nemotronh_56b_h100_32_fp8")
    with_launches = estimate(case.job)
    monkeypatch.setattr(lt, "mamba_launch_time", lambda *a, **k: (0.0, 0.0))
    without = estimate(case.job)
    assert with_launches.num_microbatches == 24 and M56.layer_counts()["mamba"] == 54
    gap = case.job.framework.launch_gap_s
    assert with_launches.step_time_s - without.step_time_s == pytest.approx(
        (18 - 16 + 69 - 32) * 54 * 24 * gap, rel=1e-9)


def test_tables_name_a_source_each():
    for name, src, _ in ml.LAYER_FWD + ml.LAYER_BWD:
        assert name and src
    with pytest.raises(SpecError):
        ml.layer_kernels(M56, 1, 8, True, "fp8", 7.0)
