"""A rank's activation peak is one rule (issue 17: ``simulate --json``'s ``activation_memory``
peaks agree with ``memory_by_stage``): of the ``(stashed, pending W)`` pairs the schedule's
order passes through (``schedules.stash.stash_frontier``: after each forward and after each
backward's release), the one with the most bytes (``peak_pair``) at the rank's bytes per
stashed ``(micro-batch, chunk)`` and per pending weight gradient. The scalar memory model
(``activations.stash_peak``), the array model (``stash_arrays.stash_frontier_arrays``) and the
simulator's activation track (which replays the run op by op) all land on it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.output.metrics_json import activation_memory_json
from simulator.program.compiler import compile_job
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.memory import activations as act
from strategies.memory.arrays import rank_memory_arrays
from strategies.memory.scalar import memory_by_stage, memory_components
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from strategies.schedules.stash import peak_pair, stash_frontier
from topologies.cluster import cluster_preset

REL = 1e-9


def _dense():
    """Llama-3-8B's layer, 8 layers, s = 512 (small and fast to simulate)."""
    return replace(model_preset("llama3-8b"), name="dense-small", num_layers=8,
                   seq_length=512, vocab_size=32000)


def _moe():
    """DeepSeek-V3's layer, 8 layers (2 dense, 6 MoE) and one MTP module, s = 512."""
    return replace(model_preset("deepseek-v3"), name="ds-small", num_layers=8,
                   first_k_dense_replace=2, vocab_size=32000, seq_length=512)


MODELS = {"dense": _dense(), "moe": _moe()}
SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("deepspeed-1f1b", 1), ("interleaved", 2),
             ("zb-h1", 1), ("zb-h2", 1), ("zb-1p", 1), ("zb-2p", 1), ("zb-v", 2),
             ("dualpipe", 1), ("dualpipev", 2)]
RECOMPUTE = ["none", "selective", "op", "full"]


def _job(model: str, sched: str, v: int, rc: str, extra: str = ""):
    text = (f"tp=1,pp=4,dp=2,mbs=1,gbs=16,schedule={sched},vpp={v},recompute={rc}"
            + (",ep=2" if model == "moe" else "") + extra)
    return make_job(MODELS[model], cluster_preset("dgx-h100", 1), parse_plan(text))


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("sched,v", SCHEDULES)
@pytest.mark.parametrize("rc", RECOMPUTE)
def test_simulated_peak_equals_memory_by_stage(model, sched, v, rc):
    """Every schedule, recomputation (none, selective, op, full) and a dense and a mixed
    dense/MoE model: each simulated rank's activation peak (its stash track's maximum plus
    the transient, ``activation_memory_json``'s ``peak_bytes``) is ``memory_by_stage``'s
    activations of its stage to 1e-9, and the array model (its own frontier and pick, no
    counts passed in) gives the stage's total; ZB-1p/ZB-2p's array default orders with
    unit times (their order is solved per job), so they get the job's counts."""
    job = _job(model, sched, v, rc)
    stages = memory_by_stage(job)
    rows = activation_memory_json(simulate(job), job)
    assert {r["stage"] for r in rows} == set(range(job.plan.pp))
    for r in rows:
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=REL), r
    P = PlanArrays.from_plans([job.plan])
    solved = sched in ("zb-1p", "zb-2p")
    for s, want in enumerate(stages):
        n, w = act.stash_peak(job, s)
        got = rank_memory_arrays(job.model, P, s, job.dtype, job.system, job.cluster.gpu,
                                 in_flight=[n] if solved else None,
                                 pending_w=[w] if solved else None)[0]
        assert float(got) == pytest.approx(want.total, rel=REL), s


@pytest.mark.parametrize("p", [2, 3, 4, 6])
def test_zb_h1_h2_frontier_closed_form(p):
    """Rank ``r`` of ZB-H1 passes through ``(p - r, r)`` (Qi et al. §2.3's ``(p-r)M_B +
    r·M_W``, just after a forward) and ``(p - r - 1, r + 1)`` (just after the next ``B``,
    which turns a stashed entry into a pending ``W``); ZB-H2 through ``(2p - 2r - 1, 2r)`` and
    ``(2p - 2r - 2, 2r + 1)``; nothing else is maximal."""
    m = 2 * p + 2
    for r in range(p):
        assert get_schedule("zb-h1").stash_frontier(r, p, m) == ((p - r, r), (p - r - 1, r + 1))
        assert get_schedule("zb-h2").stash_frontier(r, p, m) == (
            (2 * p - 2 * r - 1, 2 * r), (2 * p - 2 * r - 2, 2 * r + 1))
    # a schedule that does not split the backward: its in-flight count alone
    assert get_schedule("1f1b").stash_frontier(1, p, m) == ((p - 1, 0),)


def test_peak_pair_picks_the_most_bytes():
    front = ((3, 1), (2, 2))
    assert peak_pair(front, 10.0, 5.0) == (3, 1)
    assert peak_pair(front, 10.0, 20.0) == (2, 2)
    assert peak_pair(front, 10.0, 10.0) == (3, 1)          # a tie: the most stashed


@pytest.mark.parametrize("sched,v", [("zb-h1", 1), ("zb-h2", 1), ("zb-v", 2),
                                     ("dualpipe", 1), ("dualpipev", 2), ("zb-2p", 1)])
def test_frontier_array_equals_the_order(sched, v):
    """``stash_frontier_array`` holds each row's frontier, padded with its first pair."""
    sc = get_schedule(sched)
    stage = np.array([0, 1, 2, 3, 0, 3])
    pp = np.array([4, 4, 4, 4, 4, 4])
    m = np.array([8, 8, 8, 8, 12, 12])
    n_k, w_k = sc.stash_frontier_array(stage, pp, m, v)
    for i in range(len(stage)):
        front = sc.stash_frontier(int(stage[i]), 4, int(m[i]), v)
        got = list(zip(n_k[:, i].astype(int).tolist(), w_k[:, i].astype(int).tolist()))
        assert got[:len(front)] == list(front)
        assert set(got[len(front):]) <= {front[0]}


def test_full_recompute_peaks_after_a_backward():
    """ZB-H1 with full recomputation: a stashed entry keeps the layer inputs ``A`` and a
    pending ``W`` the GEMM inputs and output gradients ``W > A`` (recomputed in ``B``, kept
    until ``W``), so rank ``r`` peaks just after a ``B``, ``(p-r-1)·A + (r+1)·W`` plus the
    rebuilt layer, not at its most stashed forwards, ``(p-r)·A + r·W``."""
    job = _job("dense", "zb-h1", 1, "full")
    p = job.plan.pp
    for r in range(p):
        a, w = act.activation_bytes_per_chunk(job, r), act.wgrad_bytes_per_chunk(job, r)
        assert w > a
        assert act.stash_peak(job, r) == (p - r - 1, r + 1)
        want = (p - r - 1) * a + (r + 1) * w + act.transient_activation_bytes(job, r)
        assert memory_by_stage(job)[r].activations == pytest.approx(want, rel=1e-12)
        assert act.stage_activation_bytes(job, r) == pytest.approx(want, rel=1e-12)
    # without recomputation the peak is the paper's, after a forward
    plain = _job("dense", "zb-h1", 1, "none")
    assert [act.stash_peak(plain, r) for r in range(p)] == [(p - r, r) for r in range(p)]


def test_components_use_the_peak_pair():
    """``memory_components``' layer and embedding activations are those of the peak pair."""
    job = _job("moe", "zb-h2", 1, "op")
    for r in range(job.plan.pp):
        n, w = act.stash_peak(job, r)
        parts = memory_components(job, r)
        layers = n * act.chunk_layer_activation_bytes(job, r) + w * act.wgrad_bytes_per_chunk(
            job, r)
        assert parts["layers"].activations == pytest.approx(layers, rel=1e-12)


def test_compiler_records_each_overlapped_pair():
    """DualPipeV with one layer per chunk: each overlapped forward's partner is the group's
    backward in ``Program.meta["paired_forwards"]`` (its records need not interleave: the
    forward of a one-layer chunk runs as one piece before the backward's)."""
    job = _job("dense", "dualpipev", 2, "none")
    progs = compile_job(job)
    sched = get_schedule("dualpipev")
    for rank, prog in progs.items():
        steps = sched.steps(prog.stage, job.plan.pp, job.num_microbatches, 2)
        want, group = {}, []
        for s in steps:
            group.append(s)
            if s.overlap:
                continue
            b = next((g for g in group if g.kind == "B"), None)
            for g in group:
                if g.kind == "F" and len(group) > 1:
                    want[f"F{g.microbatch}.c{g.chunk}"] = f"B{b.microbatch}.c{b.chunk}"
            group = []
        assert want and prog.meta["paired_forwards"] == want


def test_stash_frontier_of_an_empty_order():
    assert stash_frontier([]) == ((0, 0),)


@pytest.mark.parametrize("sched,v", [("dualpipe", 1), ("zb-h2", 1), ("zb-v", 2),
                                     ("dualpipev", 2)])
def test_search_peak_reads_every_rank_where_the_middle_may_peak(sched, v):
    """A one-kind model, full recomputation, long sequences and a small vocabulary: a
    pending ``W`` outweighs a stashed entry and DualPipe's middle ranks hold the most
    ``W`` (its peak is rank 3 of 8); ``peak_memory_arrays`` (the search's pruning) reads
    every rank of a split-backward or mirrored schedule, so it is ``peak_memory``'s total
    (the first and last ranks alone were 20 % low on DualPipe)."""
    from strategies.memory.arrays import peak_memory_arrays
    from strategies.memory.scalar import peak_memory
    m = replace(_dense(), seq_length=8192, num_layers=16, vocab_size=1000)
    job = make_job(m, cluster_preset("dgx-h100", 1), parse_plan(
        f"tp=1,pp=8,dp=1,mbs=1,gbs=32,schedule={sched},vpp={v},recompute=full".replace(
            ",vpp=1,", ",")))
    stage, want = peak_memory(job)
    if sched == "dualpipe":
        assert 0 < stage < job.plan.pp - 1
    P = PlanArrays.from_plans([job.plan, job.plan])
    got = peak_memory_arrays(m, P, job.dtype, job.system, job.cluster.gpu)
    assert got.tolist() == pytest.approx([want.total] * 2, rel=REL)


@pytest.mark.parametrize("extra", [
    ",schedule=interleaved,vpp=2,ep_overlap=true",            # Megatron-Core's combined 1F1B
    ",tp=2,sp=true,etp=1,mbs=2,gbs=32,schedule=zb-v,vpp=2,recompute=op",
    ",tp=2,sp=true,etp=1,mbs=2,gbs=32,schedule=dualpipe,recompute=full,recompute_layers=1",
    ",tp=2,sp=true,etp=1,mbs=2,gbs=32,schedule=zb-h2,recompute=selective,"
    "recompute_modules=mlp+layernorm",
])
def test_simulated_peak_other_settings(extra):
    """The same agreement with overlapped expert all-to-all pairs (the simulator runs the
    combined order, the memory model the interleaved one: Megatron's extra warm-up forward
    makes their peaks equal), tensor and sequence parallelism, larger micro-batches, block
    recomputation and recomputed modules, on the MoE model."""
    base = "tp=1,pp=4,dp=2,ep=2,mbs=1,gbs=16,schedule=1f1b,recompute=none"
    items = dict(kv.split("=", 1) for kv in (base + extra).split(","))   # extra overrides
    text = ",".join(f"{k}={v}" for k, v in items.items())
    nodes = int(items["tp"])                   # tp x pp 4 x dp 2 GPUs
    job = make_job(MODELS["moe"], cluster_preset("dgx-h100", nodes), parse_plan(text))
    stages = memory_by_stage(job)
    for r in activation_memory_json(simulate(job), job):
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=REL), r
