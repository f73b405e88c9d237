"""torchao's float8 rowwise recipe as a precision (``fp8-rowwise``, docs/calibration.md §5.147):
the casts of each GEMM in closed form, the layer's sum, bf16 gathers, async TP's unfused
all-gathers, the stacks that refuse it, the reference reader, and estimate against the
contention-free simulation."""
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from simulator.simulate import simulate
from strategies.cost import async_tp, quantise, rowwise_casts
from strategies.cost.token_counts import tokens_per_gpu
from strategies.estimate import estimate
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry
from strategies.reference.entry_specs import entry_dtype
from strategies.stacks.pytorch import TORCHTITAN
from strategies.stacks.variants import TORCHTITAN_COMPILE
from tests.fuzz_profile import run_cli
from tests.tp_backward_checks import SIM_CASES, bound, tp_job
from topologies.gpus import get_gpu
from topologies.precision import get_precision

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "strategies" / "reference" / "data" / "heldout_2026b.json"
RW_ROWS = ("torchtitan_2506_70b_256gpu_fp8rw_tp", "torchtitan_2506_70b_256gpu_fp8rw_asynctp",
           "torchtitan_2506_8b_64gpu_fp8rw_tp", "torchtitan_2506_8b_64gpu_fp8rw_asynctp")


@pytest.mark.parametrize("x_fused,dy_fused,resc", [(False, False, False), (True, False, True),
                                                   (False, True, False), (True, True, True)])
def test_closed_form_per_gemm(x_fused: bool, dy_fused: bool, resc: bool) -> None:
    t, k, n = 131072.0, 8192.0, 1024.0
    out, gi, gw = rowwise_casts.linear_cast_bytes(t, k, n, x_fused, dy_fused, resc)
    row_x = 1.0 if x_fused else 3.0     # fp8 copy beside the producer's bf16 / read + write
    row_dy = 1.0 if dy_fused else 3.0
    assert out == pytest.approx(t * k * row_x + 4 * t + n * k * 3 + 4 * n, rel=1e-12)
    assert gi == pytest.approx(t * n * row_dy + 4 * t + n * k * 5 + 4 * k
                               + (t * k * 4 if resc else 0.0), rel=1e-12)
    assert gw == pytest.approx(t * n * 5 + 4 * n + t * k * 5 + 4 * k + n * k * 4, rel=1e-12)


def test_activation_bytes_match_torchaos_roofline() -> None:
    """Per element of an activation, scales aside: 8 bytes unfused, 6 fused (torchao's
    roofline_utils rowwise input/grad_output: 2+1+2 and 2+1 unfused, 1+2 and 2+1 fused)."""
    p = get_precision("fp8-rowwise")
    assert p.cast_bytes(1, False) + p.column_cast_bytes() == 8.0
    assert p.cast_bytes(1, True) + p.column_cast_bytes() == 6.0
    assert not p.gathers_quantised and p.row_scaled and p.rate == "fp8"


def test_layer_sum_and_sequence_parallel_gathers() -> None:
    """The layer's bytes are its linears' sum; under SP the norm outputs are cast after the bf16
    gather (2 bytes more per element of the attention's and the MLP's ``T·h`` input)."""
    m = model_preset("llama3-8b")
    b, tp, cp = 2, 8, 1
    f_sp, b_sp = rowwise_casts.layer_cast_bytes(m, b, tp, cp, True)
    f_no, b_no = rowwise_casts.layer_cast_bytes(m, b, tp, cp, False)
    T, h = tokens_per_gpu(b, m.seq_length, cp), m.hidden_size
    assert f_sp - f_no == pytest.approx(2 * 2.0 * T * h, rel=1e-12)
    assert b_sp == pytest.approx(b_no, rel=1e-12)
    lin = rowwise_casts.layer_linears(m, b, tp, cp, True)
    fwd = sum(w * rowwise_casts.linear_cast_bytes(t, k, n, xf, dyf, r)[0]
              for w, t, k, n, xf, dyf, r in lin)
    assert f_sp == pytest.approx(fwd, rel=1e-12)
    gpu = get_gpu("H100-SXM5-80GB")
    assert quantise.layer_cast_bytes(m, b, tp, cp, True, gpu, "fp8-rowwise") == \
        (f_sp, b_sp)


def test_bf16_communication_and_no_cached_copies() -> None:
    gpu = get_gpu("H100-SXM5-80GB")
    m = model_preset("llama3-8b")
    assert float(quantise.tp_allgather_bytes_factor("fp8-rowwise", True)) == 1.0
    assert float(quantise.tp_collective_bytes_factor("fp8-rowwise", True)) == 1.0
    assert quantise.gathered_transpose_bytes(m, 2, 8, 1, True, gpu, "fp8-rowwise") == 0.0
    assert quantise.weight_copy_bytes("fp8-rowwise", gpu) == 0.0
    assert float(quantise.weight_cast_bytes(1e9, gpu, "fp8-rowwise")) == 0.0


def test_async_tp_leaves_the_allgathers() -> None:
    assert async_tp.overlap_exposed(TORCHTITAN, "fp8-rowwise") == (0.5, 1.0)
    assert async_tp.overlap_exposed(TORCHTITAN, "fp8-current") == \
        (0.0, TORCHTITAN.tp_overlap_bwd_exposed)
    assert async_tp.overlap_exposed(TORCHTITAN, "bf16") == \
        (0.0, TORCHTITAN.tp_overlap_bwd_exposed)


@pytest.mark.parametrize("spec,nodes", SIM_CASES + [
    ("tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=0,recompute=op,tp_comm_overlap=true", 1)])
def test_estimate_meets_contention_free_simulation(spec: str, nodes: int) -> None:
    job = tp_job(spec, layers=4, fw=TORCHTITAN_COMPILE, dtype="fp8-rowwise", nodes=nodes)
    e = estimate(job).step_time_s
    s = simulate(job, network="contention-free").step_time_s
    assert s == pytest.approx(e, rel=1e-9)
    assert bound(job) <= s * (1 + 1e-9)
    tw = estimate(tp_job(spec, layers=4, fw=TORCHTITAN_COMPILE, dtype="fp8-current",
                         nodes=nodes)).step_time_s
    assert e > tw          # more casts, bf16 gathers


def _cli(*args: str) -> SimpleNamespace:
    """``paraplan args`` in this process (``run_cli``): returncode, stdout, stderr. The
    process's own exit status and stderr are tests/test_cli_errors.py's."""
    rc, out, err = run_cli(list(args))
    return SimpleNamespace(returncode=rc, stdout=out, stderr=err)


@pytest.mark.parametrize("framework", ["megatron-core", "nemo", "jax-xla", "pytorch-eager"])
def test_refused_where_the_stack_cannot_run_it(framework: str) -> None:
    r = _cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--plan",
             "tp=2,pp=1,mbs=1,gbs=8", "--dtype", "fp8-rowwise", "--framework", framework)
    assert r.returncode == 2
    err = r.stderr.strip()
    assert "dtype" in err and "fp8-rowwise" in err and "torchtitan" in err \
        and framework in err


def test_search_refuses_it_on_megatron_and_runs_it_on_torchtitan() -> None:
    r = _cli("search", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch",
             "8", "--dtype", "fp8-rowwise", "--framework", "megatron-core")
    assert r.returncode == 2 and "fp8-rowwise" in r.stderr
    ok = _cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--plan",
              "tp=2,pp=1,mbs=1,gbs=8,sp=true", "--dtype", "fp8-rowwise", "--framework",
              "torchtitan", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["step_time_s"] > 0


def test_reader_maps_rowwise_rows() -> None:
    rows = {r["id"]: r for r in json.loads(HELDOUT.read_text())}
    for rid in RW_ROWS:
        assert "skip_reason" not in rows[rid]
        assert entry_dtype(rows[rid]) == "fp8-rowwise"
        c = case_from_entry(rows[rid])
        assert c.job is not None and c.job.dtype == "fp8-rowwise"
        twin = rows[rid.replace("fp8rw", "fp8tw")]
        assert entry_dtype(twin) == "fp8-current"
    for text in ("fp8 row-wise scaling", "float8 per-row scales"):
        assert entry_dtype({"id": "x", "precision": text}) == "fp8-rowwise"
    assert entry_dtype({"id": "x", "precision": "fp8 (delayed scaling)"}) == "fp8"


def test_memory_is_bf16s() -> None:
    """torchao's rowwise linear saves its bf16 input and weight (``ctx.save_for_backward(
    input_hp, weight_hp_t)``) and caches no quantised weight: the peak of the bf16 job."""
    spec = "tp=8,pp=1,mbs=2,gbs=4,sp=true,zero=2,recompute=op"
    rw = estimate(tp_job(spec, fw=TORCHTITAN_COMPILE, dtype="fp8-rowwise"))
    bf = estimate(tp_job(spec, fw=TORCHTITAN_COMPILE, dtype="bf16"))
    tw = estimate(tp_job(spec, fw=TORCHTITAN_COMPILE, dtype="fp8-current"))
    assert rw.memory == bf.memory
    assert tw.memory.params > rw.memory.params      # tensorwise's cached fp8 weights
    assert np.isfinite(rw.step_time_s)


def test_plan_file_and_exporters(tmp_path) -> None:
    """A searched rowwise plan is saved and read back for the same precision (another one
    warns); torchtitan's exporter writes the rowwise recipe, Megatron's refuses it."""
    plan = tmp_path / "best.yaml"
    r = _cli("search", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch",
             "16", "--dtype", "fp8-rowwise", "--framework", "torchtitan-compile", "--workers",
             "1", "--save-plan", str(plan))
    assert r.returncode == 0, r.stderr
    assert "dtype: fp8-rowwise" in plan.read_text()
    same = _cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--plan",
                str(plan), "--dtype", "fp8-rowwise", "--framework", "torchtitan-compile")
    assert same.returncode == 0 and "warning" not in same.stderr
    other = _cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--plan",
                 str(plan), "--dtype", "fp8-current", "--framework", "torchtitan-compile")
    assert other.returncode == 0 and "fp8-rowwise" in other.stderr
    tt = _cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--plan",
              "tp=2,pp=1,mbs=1,gbs=8,sp=true,zero=3", "--dtype", "fp8-rowwise",
              "--framework", "torchtitan", "--export", "torchtitan")
    assert tt.returncode == 0, tt.stderr
    assert 'recipe_name = "rowwise"' in tt.stdout
    mg = _cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--plan",
              "tp=2,pp=1,mbs=1,gbs=8", "--dtype", "fp8-rowwise", "--export", "megatron")
    assert mg.returncode == 2 and "--export" in mg.stderr and "fp8-rowwise" in mg.stderr
