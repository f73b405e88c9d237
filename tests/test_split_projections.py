"""torchtitan's separate Q/K/V and gate/up linears (``strategies.cost.split_projections``,
docs/calibration.md §5.142): the groups and their shapes, the input-gradient sum's bytes, the
term as ``layer_time`` adds it, and every stack that fuses them unchanged."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.studies.validate import load_cases
from strategies.cost import split_projections as spj
from strategies.cost.gemm_time import gemms_time_bwd_split, gemms_time_fwd
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.layer_time import layer_time
from strategies.estimate.scalar import estimate
from strategies.framework import PROFILES, get_profile
from strategies.presets import model_preset
from topologies.gpus import get_gpu

EXACT = dict(rel=1e-12, abs=1e-15)
GPU = get_gpu("H100-96GB-500W")


def _405b():
    return replace(model_preset("llama3-405b"), seq_length=8192)


def test_groups_of_llama_405b_at_tp8():
    m = _405b()
    (qf, qs, qk, qe), (mf, ms, mk, me) = spj.projection_groups(m, 4, 8, 1)
    T = 4 * 8192
    assert qf == (1, T, (128 + 16) * 128 / 8, 16384, False)
    assert [g[2] for g in qs] == [2048.0, 128.0, 128.0] and qk == 3 and qe == T * 16384
    assert mf == (1.0, T, 2 * 53248 / 8, 16384, False)
    assert [g[2] for g in ms] == [6656.0, 6656.0] and mk == 2 and me == T * 16384
    # the separate GEMMs are the fused one's columns: the same FLOPs
    assert sum(g[2] for g in qs) == qf[2] and sum(g[2] for g in ms) == mf[2]


@pytest.mark.parametrize("k,kernels,tp,per", [
    (3, "eager", 1, 12.0), (2, "eager", 8, 6.0), (3, "compiled", 8, 8.0),
    (2, "compiled", 8, 6.0), (3, "compiled", 1, 4.0), (2, "compiled", 1, 2.0)])
def test_grad_sum_bytes(k, kernels, tp, per):
    assert float(spj.grad_sum_bytes(k, 1e9, kernels, tp)) == pytest.approx(per * 1e9, **EXACT)


def test_the_term_in_closed_form():
    m, fw = _405b(), get_profile("torchtitan-compile")
    f, b, w = spj.split_projection_time(m, 4, 8, 1, False, GPU, "fp8-current", fw, slow=1.1)
    ef = eb = ew = 0.0
    hbm = usable_hbm(GPU)
    for fused, sep, k, el in spj.projection_groups(m, 4, 8, 1):
        ef += 1.1 * (gemms_time_fwd(sep, 8, GPU, "fp8-current")
                     - gemms_time_fwd([fused], 8, GPU, "fp8-current"))
        sb, sw = gemms_time_bwd_split(sep, 8, GPU, "fp8-current", False, fw)
        fb, fw_ = gemms_time_bwd_split([fused], 8, GPU, "fp8-current", False, fw)
        eb += 1.1 * (sb - fb) + (2 * k + 2) * el / hbm
        ew += 1.1 * (sw - fw_)
    assert (float(f), float(b), float(w)) == pytest.approx((ef, eb, ew), **EXACT)
    # K's and V's one-tile-wide GEMMs run slower per FLOP than the fused one
    assert float(f) > 0 and float(b) > float(w) > 0


def test_layer_time_adds_it_and_full_recomputation_reruns_it():
    m, on = _405b(), get_profile("torchtitan-compile")
    off = replace(on, separate_projections=False)
    kw = dict(b=4, tp=8, cp=1, ep=1, sp=True, flash=True, recompute=2, gpu=GPU,
              dtype="fp8-current", tpo=True)
    a, z = layer_time(m, fw=on, **kw), layer_time(m, fw=off, **kw)
    f, b, w = spj.split_projection_time(m, 4, 8, 1, True, GPU, "fp8-current", on)
    assert float(a.fwd - z.fwd) == pytest.approx(float(f), **EXACT)
    assert float(a.bwd - z.bwd) == pytest.approx(float(b), **EXACT)
    assert float(a.wgrad - z.wgrad) == pytest.approx(float(w), **EXACT)
    assert float(a.recompute - z.recompute) == pytest.approx(float(f), **EXACT)
    # vectorised over plan arrays
    arr = spj.split_projection_time(m, np.array([1, 4]), np.array([8, 8]), 1, False, GPU,
                                    "fp8-current", on)
    assert np.shape(arr[0]) == (2,)


def test_only_torchtitan_runs_them_apart_and_a_megatron_row_is_unchanged():
    assert {n for n, fw in PROFILES.items() if fw.separate_projections} == {"torchtitan"}
    assert get_profile("torchtitan-compile").separate_projections
    m = _405b()
    zero = spj.split_projection_time(m, 4, 8, 1, False, GPU, "fp8", get_profile("megatron-core"))
    assert all(float(x) == 0.0 for x in zero)
    cases = {c.id: c for c in load_cases("strategies/reference/data/published.json",
                                         tiers=None)}
    mc = cases["dgxc_nemo2411_gpt3_175B_fp8_128gpu"]
    j = mc.job
    flipped = replace(j, framework=replace(j.framework, separate_projections=False))
    assert estimate(mc.job).step_time_s == estimate(flipped).step_time_s
    tt = cases["torchtitan_2412_405B_t5_1f1b"].job
    assert estimate(tt).step_time_s > estimate(replace(tt, framework=replace(
        tt.framework, separate_projections=False))).step_time_s
