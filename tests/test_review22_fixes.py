"""Session 22's review fixes: NeMo AutoModel's Mamba-2 mixer saves one ``d_inner`` tensor,
not Megatron-Core's three (``memory.mixer_saved``), in the scalar and the array memory
models alike; and the bad-input paths the review found."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.memory.arrays import peak_memory_arrays
from strategies.memory.job_layers import job_layer_activation_bytes
from strategies.memory.mixer_saved import mixer_saved_delta
from strategies.memory.scalar import memory_by_stage
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.space_memory import space_memory
from topologies.cluster import cluster_preset

NANO = "nemotron3-nano-30b-a3b"


def _jobs(plan: str):
    m = model_preset(NANO)
    am = get_profile("automodel")
    cl = cluster_preset("dgx-h100", 2)
    return (m, make_job(m, cl, parse_plan(plan), framework=am),
            make_job(m, cl, parse_plan(plan), framework=replace(am, mamba_saved_d_inner=3)))


def test_automodel_mixer_saves_one_d_inner_tensor_not_three():
    """AutoModel passes the norm and out_proj into mamba_split_conv1d_scan_combined, which
    saves zxbcdt and out_x only: 2·(3 − 1)·s·b·d_inner bytes less per Mamba layer (the mean
    layer: times ``mamba_share``), exactly, in the stash of every held layer."""
    m, j, j3 = _jobs("tp=1,pp=1,ep=8,mbs=2,gbs=64,zero=3,recompute=none")
    assert get_profile("automodel").mamba_saved_d_inner == 1
    assert get_profile("megatron-core").mamba_saved_d_inner == 3
    one = 2 * 2 * m.seq_length * 2 * m.mamba_d_inner * m.mamba_share   # bytes, mean layer
    assert job_layer_activation_bytes(j3) - job_layer_activation_bytes(j) == \
        pytest.approx(one, rel=1e-12)
    a, a3 = memory_by_stage(j)[0], memory_by_stage(j3)[0]
    assert a3.activations - a.activations == pytest.approx(m.num_layers * one, rel=1e-9)


def test_under_full_recomputation_only_the_rebuilt_layer_saves_less():
    m, j, j3 = _jobs("tp=1,pp=1,ep=8,mbs=2,gbs=64,zero=3,recompute=full")
    one = 2 * 2 * m.seq_length * 2 * m.mamba_d_inner * m.mamba_share
    assert job_layer_activation_bytes(j3) == job_layer_activation_bytes(j)   # checkpoints
    assert job_layer_activation_bytes(j3, "none") - job_layer_activation_bytes(j, "none") == \
        pytest.approx(one, rel=1e-12)
    a, a3 = memory_by_stage(j)[0], memory_by_stage(j3)[0]
    assert a3.activations - a.activations == pytest.approx(one, rel=1e-9)


@pytest.mark.parametrize("plan", ["tp=1,pp=1,ep=8,mbs=2,gbs=64,zero=3,recompute=none",
                                  "tp=1,pp=2,ep=8,mbs=1,gbs=64,zero=2,recompute=full"])
def test_the_search_memory_rule_reads_the_same_mixer(plan):
    m, j, _ = _jobs(plan)
    rule = space_memory(m, j.cluster.gpu, j.dtype, j.framework, j.system)
    assert rule.stack.mixer_d_inner == 1
    got = float(rule.peak(PlanArrays.from_plans([j.plan]))[0])      # the search's own rule
    assert got == pytest.approx(max(s.total for s in memory_by_stage(j)), rel=1e-9)
    off = float(peak_memory_arrays(m, PlanArrays.from_plans([j.plan]), j.dtype, j.system,
                                   j.cluster.gpu, loss_bytes=j.framework.loss,
                                   fsdp2=j.framework.fsdp2,
                                   optimizer_bytes=j.framework.optimizer_state_bytes)[0])
    assert off > got          # without the stack's mixer count: Megatron-Core's three


def test_mixer_delta_is_zero_off_hybrid_and_on_megatrons_count():
    m = model_preset(NANO)
    assert mixer_saved_delta(model_preset("llama3-8b"), 8192, 1, 1, 0, 1) == 0.0
    assert mixer_saved_delta(m, 8192, 1, 1, 0, 3) == 0.0
    assert mixer_saved_delta(m, 8192, 1, 1, 0, None) == 0.0
    assert mixer_saved_delta(m, 8192, 1, 1, 2, 1) == 0.0            # full recomputation
    assert mixer_saved_delta(m, 8192, 2, 4, 0, 1) == pytest.approx(
        -m.mamba_share * 2 * 8192 * 2 * 2 * m.mamba_d_inner / 4, rel=1e-15)


def test_a_profile_mixer_count_outside_1_to_3_is_refused():
    for bad in (0, 4, True, "1"):
        with pytest.raises(SpecError, match="framework.mamba_saved_d_inner") as e:
            replace(get_profile("automodel"), mamba_saved_d_inner=bad)
        assert e.value.value == bad and "1, 2 or 3" in e.value.rule


def test_no_private_name_imported_across_library_modules():
    """No module of the library imports another module's underscore-prefixed name (session
    21's ``dsv4_cost.sinkhorn_time`` imported ``elementwise_bytes._seq_shard``, now
    ``seq_shard``; ``heldout_2026b_sources`` imported ``_bridge_row``)."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    files = [*root.glob("strategies/**/*.py"), *root.glob("simulator/**/*.py"),
             *root.glob("topologies/**/*.py"), root / "experiments/heldout_2026b_sources.py"]
    bad = []
    for f in files:
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in (
                    "strategies", "simulator", "topologies", "experiments"):
                bad += [f"{f.relative_to(root)}:{n.lineno} {a.name}" for a in n.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []


def test_sinkhorn_time_splits_by_sequence_parallelism_as_the_other_passes():
    from strategies.cost import dsv4_cost
    from strategies.cost.elementwise_bytes import seq_shard
    from strategies.hf_config import model_from_hf
    import json
    from pathlib import Path
    m = model_from_hf(json.loads(
        (Path(__file__).parent / "data/hf/deepseek_v4_flash.json").read_text()))
    one = dsv4_cost.sinkhorn_time(m, 1, 4, 1, False, 1.0)
    sp = dsv4_cost.sinkhorn_time(m, 1, 4, 1, True, 1.0)
    assert seq_shard(4, True) == 4 and seq_shard(4, False) == 1
    assert sp[0] == pytest.approx(one[0] / 4, rel=1e-15) and sp[1] == pytest.approx(
        one[1] / 4, rel=1e-15) and one[1] > 2 * one[0] > 0


def test_docs_name_the_engine_loop_where_it_lives():
    from pathlib import Path
    from simulator.engine import core
    text = (Path(__file__).resolve().parents[1] / "docs/simulator.md").read_text()
    assert "`simulator.engine.core._loop`" not in text
    assert hasattr(core.Engine, "_loop")


def test_maxtext_export_of_deepseek_v4_is_refused_before_the_estimate(capsys):
    """Session 21 refused ``--export megatron`` for DeepSeek-V4 and ``--export maxtext`` for a
    hybrid model; ``--export maxtext`` of DeepSeek-V4 wrote a one-KV-head transformer of
    head_dim 512 (no compressed attention, no hyper-connections): exit 2, field, value and
    rule, no traceback."""
    from simulator.cli.main import main
    argv = ["estimate", "--model", "deepseek-v4-flash", "--cluster", "dgx-h100:8", "--plan",
            "tp=1,pp=1,ep=8,mbs=1,gbs=64", "--export", "maxtext"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--export='maxtext': cannot express this model" in err
    assert "compressed sparse attention" in err and "Traceback" not in err
    assert main(argv[:-2]) == 0          # without the export it runs
