"""DualPipe (mirrored: rank ``r`` holds stages ``r`` and ``pp-1-r``) with a model whose layers
differ by kind (dense first layers, MoE, an MTP module): each copy reads its own stage's layers
from the layout record, in the compiled programs, the stage-cost record's parameters and the
memory model (scalar and arrays alike); an overlapped pair's pieces are split into single
layers with each MoE layer's all-to-all; an uneven layout's copies each at their own stage's
layers (``tests/test_dualpipe_uneven.py``)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.program.compiler import compile_job
from strategies.cost import param_counts
from strategies.cost.stage import chunk_layers, chunk_sum, stage_costs
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.memory.arrays import memory_component_arrays
from strategies.memory.scalar import memory_components
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

A100x2 = cluster_preset("dgx-a100", 2)
PLAN = "tp=2,pp=2,ep=4,gbs=16,schedule=dualpipe"


def small_deepseek():
    """DeepSeek-V3's layer shapes on 8 layers (2 dense first) with one MTP module."""
    return replace(model_preset("deepseek-v3"), name="ds-small", num_layers=8,
                   first_k_dense_replace=2, vocab_size=32000, seq_length=1024)


def test_each_copy_runs_its_own_stage_layers():
    """Rank 0's chunk 0 is stage 0 (2 dense + 2 MoE layers), its chunk 1 stage 1 (4 MoE
    layers + the MTP module), and the reverse on rank 1: each micro-batch's forward is its
    stage's per-kind sum; the all-to-alls count the MoE layers (and the MTP module's) of
    that copy, forward and backward; a paired forward runs one layer at a time."""
    j = make_job(small_deepseek(), A100x2, parse_plan(PLAN))
    c = stage_costs(j)
    assert c.chunk_kinds == (((("dense", 2), ("moe", 2)),), ((("moe", 4), ("mtp", 1)),))
    fwd = {s: chunk_sum(chunk_layers(c, s, 0, 0), lambda x: x.layer_fwd) for s in (0, 1)}
    a2a = {0: 2 * 2, 1: 2 * 5}           # MoE layers (and the MTP module) x fwd and bwd
    progs = compile_job(j, [0, 8])
    split = 0
    for rank, stage in ((0, 0), (8, 1)):
        ops = progs[rank].streams["compute"]
        # the all-to-alls (with expert TP the etp all-gathers and reduce-scatters share the
        # ep-comm stream)
        eps = [o for o in progs[rank].streams["ep-comm"] if o.kind == "alltoall"]
        for mb in range(j.num_microbatches):
            chunk = mb % 2                     # even micro-batches: direction 0, chunk 0
            held = stage if chunk == 0 else 1 - stage
            f = [o for o in ops if o.kind == "forward" and o.microbatch == mb]
            assert {o.chunk for o in f} == {chunk}
            assert sum(o.seconds for o in f) == pytest.approx(fwd[held], rel=1e-12)
            split += len(f) > 1
            assert len(f) in (1, 5 if held == 1 else 4)
            assert sum(o.repeat for o in eps if o.microbatch == mb) == a2a[held]
    assert split > 0                           # the overlapped pairs: layer by layer


def test_two_copies_parameters_and_memory_by_kind():
    """Both ranks hold both stages' layers by kind, the MTP module, the embedding and the
    LM head (closed form); the memory model's parameter states agree with the cost record,
    and the search's arrays (no layout given) with the per-job scalar, to 1e-12."""
    m = small_deepseek()
    j = make_job(m, A100x2, parse_plan(PLAN))
    c = stage_costs(j)
    d, e = param_counts.layer_params_split(m.of_kind("dense"), 2, 4)
    dm, em = param_counts.layer_params_split(m.of_kind("moe"), 2, 4)
    dmt, emt = param_counts.mtp_params_split(m, 2, 4)
    emb = param_counts.embedding_params_per_gpu(m, 2)
    head = param_counts.head_params_per_gpu(m, 2, 2)
    want = emb + head + 2 * (d + e) + 6 * (dm + em) + dmt + emt
    assert c.params_by_stage[0] == pytest.approx(want, rel=1e-14)
    assert c.params_by_stage[1] == pytest.approx(want, rel=1e-14)
    P = PlanArrays.from_plans([j.plan])
    for stage in (0, 1):
        scalar = memory_components(j, stage)
        arr, _ = memory_component_arrays(m, P, stage, j.dtype, j.system, gpu=j.cluster.gpu)
        for origin in ("layers", "embedding", "output"):
            for kind in ("params", "grads", "optimizer"):
                assert float(arr[origin][kind][0]) == pytest.approx(
                    getattr(scalar[origin], kind), rel=1e-12), (stage, origin, kind)
        assert float(arr["layers"]["activations"][0]) == pytest.approx(
            scalar["layers"].activations, rel=1e-12)


def test_even_layout_string_is_the_even_plan():
    """The even split written as a layout string (or reached by counting the embedding and
    the loss as layer slots) is the same plan, bit for bit."""
    m = small_deepseek()
    even = estimate(make_job(m, A100x2, parse_plan(PLAN)))
    for extra in (",layout=Etttt|ttttmL", ",account_embedding=true,account_loss=true"):
        assert estimate(make_job(m, A100x2, parse_plan(PLAN + extra))).step_time_s \
            == even.step_time_s


@pytest.mark.parametrize("extra", [",first_stage_layers=2", ",layout=Ettt|tttttmL"])
def test_uneven_layout_taken(capsys, extra):
    """An uneven layout (calibration §5.33; formerly refused): rank 0's copies hold stage 0
    and stage 1 as the layout gives them, by kind; the CLI estimates it (exit 0)."""
    j = make_job(small_deepseek(), A100x2, parse_plan(PLAN + extra))
    c = stage_costs(j)
    assert c.chunk_kinds == (((("dense", 2), ("moe", 1)),), ((("moe", 5), ("mtp", 1)),)) \
        if "layout" in extra else (((("dense", 2),),), ((("moe", 6), ("mtp", 1)),))
    rc = main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-a100:2",
               "--plan", "tp=2,pp=4,mbs=1,schedule=dualpipe" + extra.replace(
                   "Ettt|tttttmL", "Et*4|t*10|t*10|t*8L"), "--global-batch", "16"])
    out, err = capsys.readouterr()
    assert rc == 0 and out and "Traceback" not in err, err
