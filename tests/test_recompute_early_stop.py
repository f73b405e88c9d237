"""Full recomputation on a stack whose checkpoint stops early (issue 15, pytorch-eager).

PyTorch's non-reentrant ``torch.utils.checkpoint`` (Composer's ``NO_REENTRANT`` wrapper,
torchtitan's full AC) stops replaying a layer once every tensor its forward saved has been saved
again, before the kernel of the op that saves the last ones: the MLP's down projection. So full
recomputation costs the forward less that GEMM; reentrant stacks (Megatron, DeepSpeed) rerun it
all (``strategies.framework``).
"""
from __future__ import annotations

import numpy as np
import pytest

from strategies.cost import flop_counts, gemm_shapes
from strategies.cost.gemm_shapes import early_stop_gemms
from strategies.cost.gemm_time import gemms_time_fwd
from strategies.cost.layer_time import early_stop_saving, layer_time
from strategies.framework import PROFILES, get_profile
from strategies.stacks.pytorch import PYTORCH_EAGER, TORCHTITAN
from strategies.presets import model_preset
from topologies.gpus import get_gpu

GPT = model_preset("gpt3-175b")
LLAMA = model_preset("llama3-70b")
H100, A100 = get_gpu("H100"), get_gpu("A100")


def _layer(m, fw, rc, gpu=H100, b=2, tp=1, slow=1.0):
    return layer_time(m, b=b, tp=tp, cp=1, ep=1, sp=False, flash=True, recompute=rc, gpu=gpu,
                      dtype="bf16", fw=fw, slow=slow)


def test_which_stacks_stop_early():
    """PyTorch eager stacks checkpoint non-reentrantly and JAX dead-code-eliminates the
    recomputed forward (docs/calibration.md §3.17); the others rerun the whole forward."""
    stops = {name for name, p in PROFILES.items() if p.recompute_early_stop}
    # automodel: apply_ac's ptd_checkpoint_wrapper, non-reentrant as torchtitan's
    assert stops == {"pytorch-eager", "torchtitan", "jax-xla", "automodel"}
    assert get_profile("composer").recompute_early_stop


@pytest.mark.parametrize("m", [GPT, LLAMA])
@pytest.mark.parametrize("tp", [1, 4])
def test_skipped_gemm_is_the_down_projection(m, tp):
    """One GEMM, (T, h, F/tp): the dense MLP's last."""
    b = 2
    T = b * m.seq_length
    (g,) = early_stop_gemms(m, b, tp, 1, 1)
    count, M, N, K, row = g
    assert (count, M, N, K, row) == (1, T, m.hidden_size, m.ffn_hidden_size / tp, True)
    assert 2 * M * N * K == pytest.approx(2 * T * m.hidden_size * m.ffn_hidden_size / tp,
                                          rel=1e-15)


@pytest.mark.parametrize("fw", [PYTORCH_EAGER, TORCHTITAN])
@pytest.mark.parametrize("gpu", [H100, A100])
@pytest.mark.parametrize("slow", [1.0, 1 / 0.88])
def test_full_recompute_is_forward_less_the_down_projection(fw, gpu, slow):
    """Closed form: recompute = forward - slow x (down-projection forward), to rounding."""
    m, b = GPT, 2
    lt = _layer(m, fw, 2, gpu, b, slow=slow)
    down = slow * gemms_time_fwd(early_stop_gemms(m, b, 1, 1, 1), 1, gpu, "bf16")
    assert lt.recompute == pytest.approx(lt.fwd - down, rel=1e-12)
    assert early_stop_saving(m, b, 1, 1, 1, gpu, "bf16", fw=fw, slow=slow) == \
        pytest.approx(down, rel=1e-15)
    # a GPT MLP's down projection is a quarter of the layer's GEMM FLOPs (8h² of 24h² + ...)
    assert 0 < down < lt.fwd


def test_reentrant_stacks_rerun_the_whole_forward():
    """Megatron-Core / DeepSpeed / JAX: full recompute == the forward, exactly."""
    for name, fw in PROFILES.items():
        if fw.recompute_early_stop:
            continue
        lt = _layer(GPT, fw, 2)
        assert float(lt.recompute) == float(lt.fwd), name
        assert float(early_stop_saving(GPT, 2, 1, 1, 1, H100, "bf16", fw=fw)) == 0.0


def test_only_full_recompute_changes():
    """None, selective and op recomputation, forward and backward are those of a stack that
    reruns the whole forward (the profile's other fields equal)."""
    from dataclasses import replace
    reentrant = replace(TORCHTITAN, recompute_early_stop=False)
    for rc in (0, 1, 3):
        a, e = _layer(LLAMA, reentrant, rc), _layer(LLAMA, TORCHTITAN, rc)
        assert (float(a.fwd), float(a.bwd), float(a.recompute)) == \
            (float(e.fwd), float(e.bwd), float(e.recompute))
    a, e = _layer(LLAMA, reentrant, 2), _layer(LLAMA, TORCHTITAN, 2)
    assert float(e.recompute) < float(a.recompute) == float(a.fwd)


def test_saving_grows_with_the_micro_batch_and_vectorises():
    """The skipped GEMM's time grows with the tokens; arrays give the scalars' values."""
    bs = np.array([1, 2, 4, 8])
    arr = early_stop_saving(GPT, bs, 1, 1, 1, H100, "bf16", fw=PYTORCH_EAGER)
    assert np.all(np.diff(arr) > 0)
    for b, x in zip(bs, arr):
        assert early_stop_saving(GPT, int(b), 1, 1, 1, H100, "bf16", fw=PYTORCH_EAGER) == \
            pytest.approx(x, rel=1e-15)


def test_moe_layer_skips_nothing():
    """A MoE layer ends in the experts' combine: no GEMM is skipped."""
    m = model_preset("mixtral-8x22b")
    assert m.is_moe and not m.layer_shares().get("dense")
    assert early_stop_gemms(m, 1, 1, 1, 1) == []
    assert gemm_shapes.layer_gemm_parts(m, 1, 1, 1, 1)   # it has GEMMs, just none skipped


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_hfu_counts_what_runs(share):
    """HFU's hardware FLOPs drop by the skipped GEMM's forward FLOPs over every recomputed
    layer (``share`` of them), only for full recomputation on an early-stopping stack."""
    m, gbs = GPT, 16
    T = gbs * m.seq_length
    down = 2 * T * m.hidden_size * m.ffn_hidden_size * m.num_layers
    full = flop_counts.hardware_flops_per_step(m, gbs, True, 2, share)
    early = flop_counts.hardware_flops_per_step(m, gbs, True, 2, share, early_stop=True)
    assert full - early == pytest.approx(share * down, rel=1e-12)
    for rc in (0, 1, 3):
        assert flop_counts.hardware_flops_per_step(m, gbs, True, rc, share, early_stop=True) == \
            flop_counts.hardware_flops_per_step(m, gbs, True, rc, share)
    ex = flop_counts.executed_flops_per_step(m, gbs, True, 2, share)
    assert ex - flop_counts.executed_flops_per_step(m, gbs, True, 2, share, early_stop=True) == \
        pytest.approx(share * down, rel=1e-12)
    assert flop_counts.hfu(m, gbs, True, 2, 1.0, 8, 1e15, share, early_stop=True) == \
        pytest.approx(early / 8e15, rel=1e-15)


def test_estimate_and_simulation_report_the_same_hfu():
    """The analytic estimate and the simulation's report read the stack's flag alike."""
    from strategies.estimate import estimate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from topologies.cluster import cluster_preset
    plan = parse_plan("tp=1,pp=1,dp=8,mbs=1,gbs=8,zero=3,recompute=full")
    cl = cluster_preset("dgx-h100", 1)
    m = model_preset("mpt-1b")
    eager = estimate(make_job(m, cl, plan, framework="pytorch-eager"))
    want = flop_counts.hardware_flops_per_step(m, 8, True, 2, early_stop=True) / (
        8 * eager.step_time_s * cl.mean_peak("bf16"))
    assert eager.hfu == pytest.approx(want, rel=1e-12)


def test_simulation_report_counts_the_same_hfu():
    """``simulate``'s JSON HFU reads the stack's flag as the estimate does."""
    from simulator.simulate import simulate, to_json
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from topologies.cluster import cluster_preset
    plan = parse_plan("tp=1,pp=1,dp=8,mbs=1,gbs=8,zero=3,recompute=full")
    cl = cluster_preset("dgx-h100", 1)
    j = make_job(model_preset("mpt-1b"), cl, plan, framework="pytorch-eager")
    d = to_json(simulate(j), j)
    want = flop_counts.hardware_flops_per_step(j.model, 8, True, 2, early_stop=True) / (
        8 * d["step_time_s"] * cl.mean_peak("bf16"))
    assert d["hfu"] == pytest.approx(want, rel=1e-12)
