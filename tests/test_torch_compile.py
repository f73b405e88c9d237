"""torchtitan under torch.compile (``--framework torchtitan-compile``, docs/calibration.md
§5.69): the compiled block's memory-bound kernels
(``elementwise_bytes.compiled_elementwise_bytes_fwd``), the switch refused for stacks without one,
the eager profile unchanged, the reader's rows that state compile, and the exporter's ``[compile]
enable``."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import replace

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.cost import elementwise_bytes
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.layer_time import layer_time
from strategies.cost.split_projections import split_projection_time
from strategies.errors import SpecError
from strategies.framework import PROFILES, get_profile
from strategies.stacks.pytorch import TORCHTITAN
from strategies.stacks.variants import COMPILED_KERNELS_PER_LAYER, TORCHTITAN_COMPILE, compiled
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry, load_reference
from strategies.reference.stated_switches import stated_compile
from topologies.gpus import get_gpu

L8 = replace(model_preset("llama3-8b"), seq_length=8192)
DATA = os.path.join(os.path.dirname(__file__), "..", "strategies", "reference", "data")


def test_llama8b_compiled_bytes_closed_form():
    """Llama 3.1 8B (h 4096, 32 heads, 8 KV heads of 128, F 14336), tp 1, per token: norm 4,
    add + norm 8, add 6 bytes over h, 18·4096 = 73728; rotary q 4·32·128 = 16384; k rotated
    into repeat_kv's copy and v's copy, each read 8·128 and write 32·128 at 2 B, 4·40·128 =
    20480; SwiGLU 6·14336 = 86016: 196608 bytes, against eager's 610304."""
    T = 8192
    assert elementwise_bytes.compiled_elementwise_bytes_fwd(L8, 1, 1, 1, False) == 196608 * T
    assert elementwise_bytes.elementwise_bytes_fwd(L8, 1, 1, 1, False, "compiled") == 196608 * T
    # tp 2 with sequence parallelism: every part split by 2
    assert elementwise_bytes.compiled_elementwise_bytes_fwd(L8, 1, 2, 1, True) == 196608 * T / 2
    # without sp the h part is replicated on each TP rank
    assert elementwise_bytes.compiled_elementwise_bytes_fwd(L8, 1, 2, 1, False) == \
        73728 * T + (196608 - 73728) * T / 2
    # multi-head attention (g = a): no repeat, rotary on q and k, read and write
    mha = replace(L8, num_query_groups=None)
    assert elementwise_bytes.compiled_elementwise_bytes_fwd(mha, 1, 1, 1, False) == \
        (73728 + 4 * 64 * 128 + 86016) * T


def test_compiled_bytes_broadcast_over_arrays():
    tp = np.array([1, 2, 4, 8])
    sp = np.array([False, True, False, True])
    arr = elementwise_bytes.compiled_elementwise_bytes_fwd(L8, 2, tp, 1, sp)
    for i in range(4):
        assert arr[i] == elementwise_bytes.compiled_elementwise_bytes_fwd(L8, 2, int(tp[i]), 1,
                                                                          bool(sp[i]))


def test_layer_time_reads_the_compiled_count():
    """The compiled profile's layer differs from the eager one by the byte difference over the
    usable HBM bandwidth (forward once, backward twice), the launch gaps of the kernels
    compile removes and, in the backward, the separate projections' input-gradient sum, which
    compile fuses into the norm's backward (``split_projections``, docs/calibration.md
    §5.142)."""
    gpu = get_gpu("h100-sxm")
    kw = dict(b=2, tp=1, cp=1, ep=1, sp=False, flash=True, gpu=gpu, dtype="bf16", recompute=0)
    eager = layer_time(L8, fw=TORCHTITAN, **kw)
    comp = layer_time(L8, fw=TORCHTITAN_COMPILE, **kw)
    less = (elementwise_bytes.eager_elementwise_bytes_fwd(L8, 2, 1, 1, False)
            - elementwise_bytes.compiled_elementwise_bytes_fwd(L8, 2, 1, 1, False)) \
        / usable_hbm(gpu)
    gaps = (TORCHTITAN.kernels_per_layer - COMPILED_KERNELS_PER_LAYER) * TORCHTITAN.launch_gap_s
    assert eager.fwd - comp.fwd == pytest.approx(less + gaps, rel=1e-9)
    sums = split_projection_time(L8, 2, 1, 1, False, gpu, "bf16", TORCHTITAN)[1] \
        - split_projection_time(L8, 2, 1, 1, False, gpu, "bf16", TORCHTITAN_COMPILE)[1]
    assert sums > 0
    assert eager.bwd - comp.bwd == pytest.approx(2 * less + 2 * gaps + sums, rel=1e-9)


def test_compile_off_is_the_eager_profile_unchanged():
    """The variant differs from torchtitan only in its name, description, elementwise
    kernels, kernel count and its loss's peak bytes (the loss compiled with the model,
    docs/calibration.md §5.74); torchtitan itself stays eager."""
    assert TORCHTITAN.elementwise_kernels == "eager" and TORCHTITAN.kernels_per_layer == 30
    assert get_profile("torchtitan") is TORCHTITAN
    differ = {f.name for f in dataclasses.fields(TORCHTITAN)
              if getattr(TORCHTITAN, f.name) != getattr(TORCHTITAN_COMPILE, f.name)}
    assert differ == {"name", "description", "elementwise_kernels", "kernels_per_layer",
                      "loss"}
    assert TORCHTITAN_COMPILE.loss == dataclasses.replace(
        TORCHTITAN.loss, peak_bytes=4.0, peak_source=TORCHTITAN_COMPILE.loss.peak_source,
        peak_bytes_sharded=None, peak_sharded_source="")
    assert get_profile("torchtitan-compile") is TORCHTITAN_COMPILE
    assert "torchtitan-compile" not in PROFILES        # a variant, not a stack of its own
    assert compiled(TORCHTITAN_COMPILE) is TORCHTITAN_COMPILE


@pytest.mark.parametrize("name", ["megatron-core", "nemo", "pytorch-eager", "jax-xla",
                                  "automodel"])
def test_refused_for_stacks_without_the_switch(name, capsys):
    with pytest.raises(SpecError, match="torch.compile is a switch of torchtitan only"):
        compiled(get_profile(name))
    with pytest.raises(SpecError, match=f"{name} has none"):
        get_profile(f"{name}-compile")
    assert main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1",
                 "--plan", "tp=1,pp=1,mbs=1,gbs=8", "--framework", f"{name}-compile"]) == 2
    err = capsys.readouterr().err
    assert "--framework" in err and "torch.compile is a switch of torchtitan only" in err


def _entries(name: str) -> dict[str, dict]:
    return {e["id"]: e for e in load_reference(os.path.join(DATA, name))}


def test_reader_sets_compile_where_the_row_states_it():
    held = _entries("heldout_2026b.json")
    pub = _entries("published.json")
    for e, said in ((held["torchtitan_2506_8b_64gpu_bf16_tp"], "plan.compile true"),
                    (pub["torchtitan_2412_8B_t1_fsdp_compile"], "FSDP+torch.compile")):
        assert said in stated_compile(e)
        case = case_from_entry(e)
        assert case.job is not None, case.skipped
        assert case.job.framework.name == "torchtitan-compile"
        assert any(n.startswith("torch.compile:") and said in n for n in case.assumptions)
    plain = pub["torchtitan_2412_8B_t1_fsdp"]     # the same table's eager row
    assert stated_compile(plain) is None
    assert case_from_entry(plain).job.framework.name == "torchtitan"


def test_reader_skips_compile_on_a_stack_without_it():
    e = dict(_entries("published.json")["torchtitan_2412_8B_t1_fsdp_compile"],
             framework="pytorch-eager")
    case = case_from_entry(e)
    assert case.job is None and "torch.compile" in case.skipped and "pytorch-eager" in \
        case.skipped


def test_export_writes_compile_enable():
    tomllib = pytest.importorskip("tomllib")
    from strategies.job import make_job
    from strategies.launch import export
    from strategies.plan import parse_plan
    from topologies.cluster import cluster_preset
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    for fw, on in (("torchtitan", False), ("torchtitan-compile", True)):
        job = make_job(m, cl, parse_plan("tp=1,mbs=1,gbs=64,zero=3"), framework=fw)
        text, _ = export("torchtitan", job)
        assert tomllib.loads(text)["compile"] == {"enable": on}


def test_estimate_arrays_bound_and_simulator_read_the_compiled_count():
    """The compiled profile reaches the scalar estimate, its array form, the lower bound and
    the simulator through the same rule: arrays = scalar to 1e-12, the bound below the
    simulation, the simulation within 1 % of the estimate, and every one faster than eager."""
    from simulator.simulate import simulate
    from strategies.estimate.analytic import estimate_arrays
    from strategies.estimate.scalar import estimate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.plan_arrays import PlanArrays
    from topologies.cluster import cluster_preset
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 1)
    got = {}
    for fw in (TORCHTITAN, TORCHTITAN_COMPILE):
        job = make_job(m, cl, parse_plan("tp=2,pp=2,mbs=1,gbs=16,zero=2,sp=true"),
                       seq_len=4096, framework=fw)
        pa = PlanArrays.of_plan(job.plan)
        t = estimate(job).step_time_s
        arr = float(estimate_arrays(job.model, job.cluster, job.dtype, pa, fw)["step_time_s"])
        bound = float(step_time_lower_bound(job.model, job.cluster, job.dtype, pa, fw))
        sim = simulate(job).step_time_s
        assert arr == pytest.approx(t, rel=1e-12)
        assert bound <= sim * (1 + 1e-9)
        assert sim == pytest.approx(t, rel=0.01)
        got[fw.name] = (t, bound, sim)
    assert all(c < e for c, e in zip(got["torchtitan-compile"], got["torchtitan"]))
