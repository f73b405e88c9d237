"""One source for per-stage costs: for random plans (seeded) of a dense, a GQA and an MoE model,
every duration and byte count the compiler puts into the programs equals, with ``==``, the
stage-cost record the analytic estimate read for the same plans (computed for all of them
at once), and so does every per-stage parameter count and optimizer time."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.program.compiler import compile_job
from simulator.program.ops import Collective, Compute, Recv, Send
from strategies.cost.stage import (StageCostArrays, dgrad_reduce_pieces, dgrad_reduce_time,
                                   sp_regather_pieces, stage_cost_arrays, stage_costs)
from strategies.cost.stage.job_costs import stage_costs_at
from strategies.cost.comm import collective_time, dp_parts
from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.job import make_job
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset

MODELS = [("gpt-1.7b", "dgx-a100", 2, 32),      # dense, multi-head attention
          ("llama3-8b", "dgx-h100", 2, 32),     # grouped-query attention
          ("mixtral-8x7b", "dgx-h100", 2, 32)]  # mixture of experts
PER_MODEL = 8
SWITCHES = ("flash_attn", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")


def random_jobs(name: str, cluster: str, nodes: int, gbs: int, seed: int):
    """``PER_MODEL`` valid jobs drawn from the whole plan space (memory not pruned), with
    the switches the space keeps constant, the dtype and the framework drawn too."""
    m, cl = model_preset(name), cluster_preset(cluster, nodes)
    space = enumerate_space(m, cl, gbs, SpaceOptions(max_mbs=2, max_vpp=2, max_bubble=1.0,
                                                     memory_limit_bytes=1e30))
    rng = np.random.default_rng(seed)
    jobs = []
    for i in rng.permutation(space.size):
        plan = space.plan(int(i))
        plan = replace(plan, **{s: bool(rng.integers(2)) for s in SWITCHES})
        dtype = str(rng.choice(["bf16", "fp16"]))
        fw = str(rng.choice(["megatron-core", "megatron-lm-2021", "pytorch-eager"]))
        try:
            jobs.append(make_job(m, cl, plan, dtype=dtype, framework=fw))
        except SpecError:
            continue
        if len(jobs) == PER_MODEL:
            break
    assert len(jobs) == PER_MODEL
    return jobs


def record_of(jobs) -> list[StageCostArrays]:
    """The estimate's stage-cost record of each job, computed for all plans of one dtype and
    framework at once (as the search does), with the entry index of each job."""
    out = []
    for j in jobs:
        same = [k for k in jobs if (k.dtype, k.framework) == (j.dtype, j.framework)]
        arrays = PlanArrays.from_plans([k.plan for k in same])
        est = estimate_arrays(j.model, j.cluster, j.dtype, arrays, j.framework, j.system)
        out.append((est["stage_costs"], same.index(j)))
    return out


def expected_compute(sc: StageCostArrays, i: int, job, stage: int) -> dict[str, set]:
    """The durations each kind of compute op may take on ``stage`` (seconds), built from the
    record's entry ``i`` the way the builder composes them (``nl`` layers per block; a split
    backward: ``B`` without the ``*_wgrad`` parts, ``W`` of kind ``wgrad`` with them)."""
    p = job.plan
    # the largest chunk of the job's layout (the search proposes uneven ones)
    sizes = {job.layout.layers(r, c) for r in range(p.pp) for c in range(p.vpp)}
    lpc = max(sizes)
    g = {k: float(getattr(sc, k)[i]) for k in ("layer_fwd", "layer_bwd", "layer_recompute",
                                               "attn_fwd", "attn_bwd", "layer_wgrad")}
    split = get_schedule(p.schedule).splits_backward
    layer_b = g["layer_bwd"] - g["layer_wgrad"] if split else g["layer_bwd"]
    fwd, bwd, rc, wg = set(), set(), set(), set()
    one = stage_costs_at(sc, i, p.pp)
    for nl in range(1, lpc + 1):
        for n in (n for n in sizes if n >= nl):     # block partial recompute: per chunk
            secs = one.chunk_recompute(nl, n)[0]
            if p.cp > 1 and one.cp_per_layer_recompute > 0 and not one.cp_torch:
                # a rerun CP exchange: its non-attention part, then its attention core
                # (``LayerBlocks.cp_rerun``, docs/calibration.md §5.187)
                core = min(one.chunk_cp_reruns(nl, n) * one.cp_rerun_attn, secs)
                rc.update({secs - core, core})
            else:
                rc.add(secs)
        wg.add(nl * g["layer_wgrad"])
        # a bucket closing with the block's last layer's MLP: the work before that layer's
        # attention, then the rest (``LayerBlocks._lead_split``, ``Passes.wgrad``, §5.192)
        w = float(sc.layer_lead_work[i])
        gemm = layer_b - g["attn_bwd"]
        tail_w = min(nl * g["layer_wgrad"], (1.0 - w) * g["layer_wgrad"])
        wg.update({nl * g["layer_wgrad"] - tail_w, tail_w})
        # SP's re-gathers that outlast their data-gradient GEMMs: those GEMMs carved out of
        # the backward block first (``ProgramBuilder.regather``), the rest after them
        carved = 0.0
        if one.rg_bytes > 0 and p.tp > 1:
            for share, width, dgrad in sp_regather_pieces(one):
                t_ag = float(collective_time("allgather", one.rg_bytes * width, p.tp, 1,
                                             job.cluster))
                if share > 0 and dgrad < t_ag:
                    carved += nl * share * dgrad
            if carved > 0:
                bwd.add(carved)
        # the column-parallel data gradients' reductions that outlast their weight-gradient
        # GEMMs: those GEMMs carved out of the rest (``ProgramBuilder.reduce_split``)
        rest = nl * layer_b - carved
        if one.rd_bytes > 0 and p.tp > 1:
            d = 0.0
            for share, pieces in dgrad_reduce_pieces(one):
                for width, wgrad in pieces:
                    t_red = float(dgrad_reduce_time(one, p.tp, bool(p.sp), job.cluster, width))
                    if share > 0 and wgrad < t_red:
                        d += nl * share * wgrad
            d = min(d, rest)
            if d > 0:
                bwd.add(d)
            rest -= d
        for secs, attn, out in ((nl * g["layer_fwd"], nl * g["attn_fwd"], fwd),
                                (rest, nl * g["attn_bwd"], bwd)):
            if p.cp > 1:
                out.update({secs - attn, attn})
            else:
                out.add(secs)
        o, core = (rest - nl * g["attn_bwd"], 0.0) if p.cp > 1 else (rest, g["attn_bwd"])
        tail = min(o, max(0.0, (1.0 - w) * gemm + core))
        bwd.update({o - tail, tail})
    which = "first" if stage == 0 else "last" if stage == p.pp - 1 else "mid"
    e_b, e_w, h_b, h_w = (float(getattr(sc, k)[i]) for k in (
        "embedding_bwd", "embedding_wgrad", "head_bwd", "head_wgrad"))
    return {"forward": fwd, "backward": bwd, "recompute": rc,
            "embedding": {float(sc.embedding_fwd[i]), e_b - e_w if split else e_b},
            "lm_head": {float(sc.head_fwd[i]), h_b - h_w if split else h_b},
            "wgrad": wg | {h_w, e_w} if split else set(),
            "optimizer": {float(getattr(sc, f"optimizer_{which}")[i]),
                          float(getattr(sc, f"passes_{which}")[i])}}


def split_variants(jobs):
    """The jobs with one chunk per rank and ``pp > 1`` under ZB-H1, ZB-H2 and ZB-V (two
    chunks in a V, the LM head on rank 0; ZB-H1 where the layers, or a drawn first/last-stage
    layout, do not split over a V's chunks) in
    turn (with the default framework where the drawn stack has no such schedule)."""
    out = []
    for k, j in enumerate(x for x in jobs if x.plan.vpp == 1 and x.plan.pp > 1):
        sched = ("zb-h1", "zb-h2", "zb-v")[k % 3]
        if sched == "zb-v" and j.model.num_layers % (2 * j.plan.pp):
            sched = "zb-h1"
        plan = replace(j.plan, schedule=sched, vpp=2 if sched == "zb-v" else 1)
        if sched == "zb-v":
            try:        # a stated first/last-stage layout may not split over a V's two chunks
                make_job(j.model, j.cluster, plan, dtype=j.dtype)
            except SpecError:
                plan = replace(j.plan, schedule="zb-h1", vpp=1)
        try:
            out.append(make_job(j.model, j.cluster, plan, dtype=j.dtype, framework=j.framework))
        except SpecError:
            out.append(make_job(j.model, j.cluster, plan, dtype=j.dtype))
    return out


@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
@pytest.mark.parametrize("name,cluster,nodes,gbs", MODELS, ids=[m[0] for m in MODELS])
def test_compiled_costs_are_the_estimates_record(name, cluster, nodes, gbs, split):
    """Every compute op's seconds and every message's bytes in the compiled programs are the
    estimate's record, with the backward whole or (``split``: ZB-H1/ZB-H2) split into ``B``
    and ``W``."""
    jobs = random_jobs(name, cluster, nodes, gbs, seed=12)
    if split:
        jobs = split_variants(jobs)
        assert jobs
    for job, (sc, i) in zip(jobs, record_of(jobs)):
        p = job.plan
        per_stage = p.tp * p.cp * p.dp
        progs = compile_job(job, ranks=[s * per_stage for s in range(p.pp)])
        one = stage_costs(job)
        # the compiler's record is the estimate's entry, field by field
        for f in ("layer_fwd", "layer_bwd", "layer_recompute", "attn_fwd", "attn_bwd",
                  "embedding_fwd", "embedding_bwd", "head_fwd", "head_bwd", "tp_bytes",
                  "cp_bytes", "ep_bytes", "p2p_bytes", "p2p_gather_bytes", "layer_params",
                  "embedding_params", "head_params"):
            assert getattr(one, f) == float(getattr(sc, f)[i]), (job.plan, f)
        which = ["first" if s == 0 else "last" if s == p.pp - 1 else "mid" for s in range(p.pp)]
        assert one.params_by_stage == tuple(float(getattr(sc, f"params_{w}")[i]) for w in which)
        assert one.optimizer_by_stage == tuple(float(getattr(sc, f"optimizer_{w}")[i])
                                               for w in which)
        assert one.passes_by_stage == tuple(float(getattr(sc, f"passes_{w}")[i]) for w in which)
        assert one.tied_bytes == float(sc.tied_bytes[i])
        assert (one.grad_bytes, one.param_bytes) == (sc.grad_bytes, sc.param_bytes)

        for prog in progs.values():
            want = expected_compute(sc, i, job, prog.stage)
            params = one.params_by_stage[prog.stage]
            seen = set()
            for ops in prog.streams.values():
                for op in ops:
                    if isinstance(op, Compute):
                        assert op.seconds in want[op.kind], (job.plan, prog.stage, op)
                        seen.add(op.kind)
                    elif isinstance(op, Send):
                        assert op.nbytes == float(sc.p2p_bytes[i])
                    elif isinstance(op, Collective):
                        cat = op.category
                        if cat == "tp":
                            assert op.nbytes == float(sc.tp_bytes[i])
                        elif cat == "cp":
                            assert op.nbytes == float(sc.cp_bytes[i])
                        elif cat == "ep" and op.kind == "alltoall":
                            assert op.nbytes == float(sc.ep_bytes[i])
                        elif cat == "ep":                     # expert-TP AG / RS
                            assert op.nbytes == float(sc.etp_bytes[i])
                        elif cat == "pp_gather":
                            assert op.nbytes == float(sc.p2p_gather_bytes[i])
                        elif "tied" in op.label:    # first <-> head stage, once per step
                            assert op.nbytes == float(sc.tied_bytes[i]) > 0
                        elif "z3" in op.label:      # ZeRO-3: one layer's share per call
                            # (FSDP's unit, calibration §5.26), the whole stage every
                            # micro-batch; its routed experts over their expert-DP group
                            # (comm.dp_parts)
                            (d, _, _), (e, _, _) = dp_parts(
                                params, one.expert_params_by_stage[prog.stage], p.tp, p.cp,
                                p.dp, p.ep, p.expert_tp)
                            k = float(e if op.label.endswith("experts") else d)
                            n = sum(job.layers_of_chunk(prog.stage, c) for c in range(p.vpp))
                            assert op.nbytes in (pytest.approx(sc.param_bytes * k / n, rel=1e-12),
                                                 pytest.approx(sc.grad_bytes * k / n, rel=1e-12))
                        else:                         # gradient buckets and parameter gathers
                            assert cat == "dp"
                            assert op.nbytes <= max(sc.grad_bytes, sc.param_bytes) * params
                    else:
                        assert isinstance(op, Recv)
            assert {"forward", "backward", "optimizer"} <= seen
            assert ("wgrad" in seen) == get_schedule(p.schedule).splits_backward
            # the gradient buckets of one step cover the stage's parameters exactly once
            red = [op for op in prog.streams.get("dp-comm", ()) if " dp bucket " in op.label
                   and op.label.startswith(("AR", "RS"))]
            # (the routed experts' part only where their group has copies: an expert-data-
            # parallel group of one rank, tp·cp·dp = etp·ep, reduces nothing; comm.dp_parts)
            if p.dp > 1 and p.zero < 3:
                (_, _, _), (e, n_e, _) = dp_parts(params, one.expert_params_by_stage[prog.stage],
                                                  p.tp, p.cp, p.dp, p.ep, p.expert_tp)
                reduced = params - (float(e) if n_e <= 1 else 0.0)
                assert sum(op.nbytes for op in red) == pytest.approx(sc.grad_bytes * reduced,
                                                                     rel=1e-12)


def test_record_of_many_plans_is_the_record_of_each():
    """Computing the record for a batch of plans or for one plan gives the same numbers
    (the record is elementwise in the plans)."""
    jobs = random_jobs("llama3-8b", "dgx-h100", 2, 32, seed=3)
    jobs = [j for j in jobs if (j.dtype, j.framework) == (jobs[0].dtype, jobs[0].framework)]
    j0 = jobs[0]
    batch = stage_cost_arrays(j0.model, j0.cluster, j0.dtype,
                              PlanArrays.from_plans([j.plan for j in jobs]), j0.framework)
    for i, j in enumerate(jobs):
        single = stage_cost_arrays(j.model, j.cluster, j.dtype, PlanArrays.from_plans([j.plan]),
                                   j.framework)
        for f in ("layer_fwd", "layer_bwd", "head_bwd", "params_first", "optimizer_last",
                  "tp_bytes", "p2p_bytes"):
            assert getattr(batch, f)[i] == getattr(single, f)[0], f


def test_the_bound_reads_the_estimates_record():
    """The lower bound given the estimate's record equals the bound computing its own: both
    are the same function of the plans."""
    from strategies.estimate.lower_bound import step_time_lower_bound
    jobs = random_jobs("mixtral-8x7b", "dgx-h100", 2, 32, seed=5)
    j0 = jobs[0]
    pa = PlanArrays.from_plans([j.plan for j in jobs])
    est = estimate_arrays(j0.model, j0.cluster, j0.dtype, pa, j0.framework)
    shared = step_time_lower_bound(j0.model, j0.cluster, j0.dtype, pa, j0.framework,
                                   costs=est["stage_costs"])
    own = step_time_lower_bound(j0.model, j0.cluster, j0.dtype, pa, j0.framework)
    assert np.array_equal(shared, own) and (shared > 0).all()


@pytest.mark.parametrize("name,cluster,nodes,gbs", MODELS)
def test_weight_gradient_part_of_the_backward(name, cluster, nodes, gbs):
    """``W`` (``*_wgrad``) is a part of each backward, from the same GEMM list: for random
    plans, 0 < W < backward; the layer's W is exactly its weight-gradient GEMMs (times the
    clock factor) plus the separate accumulation, and the backward's GEMMs are exactly the
    data- plus weight-gradient GEMMs that ``gemm_time_bwd`` sums."""
    from strategies.cost import gemm_time, grad_time, overlap_clock, param_counts, token_counts
    for job in random_jobs(name, cluster, nodes, gbs, seed=7):
        c, p = stage_costs(job), job.plan
        assert 0 < c.layer_wgrad < c.layer_bwd
        assert 0 < c.head_wgrad < c.head_bwd
        assert c.embedding_wgrad == c.embedding_bwd
        gpu, fw, sy = job.cluster.gpu, job.framework, job.system
        args = (job.model, p.mbs, p.tp, p.cp, p.ep, gpu, job.dtype, p.tp_comm_overlap, fw, sy)
        both, w = gemm_time.gemm_time_bwd_split(*args, etp=p.expert_tp)
        assert 0 < w < both
        if p.expert_tp == p.tp:     # gemm_time_bwd: the experts split as the dense layers
            assert both == gemm_time.gemm_time_bwd(*args)
        # the record prices the hottest expert-parallel rank's routed tokens (token_counts.moe_load)
        load = token_counts.moe_load(p.ep, p.imbalance, p.capacity_factor, job.model, p.mbs, p.tp,
                                     p.cp, p.expert_tp)
        # (at the stack's SP shapes of the GEMMs tensor parallelism leaves whole, §5.99)
        w = gemm_time.gemm_time_bwd_split(*args, p.expert_tp, load, sp=p.sp)[1]
        whole = overlap_clock.dp_overlaps_whole_step(p.dp, job.num_microbatches,
                                                     p.overlap_grad_reduce)
        slow = float(overlap_clock.overlap_slowdown(p.tp, p.tp_comm_overlap, p.cp, p.zero, whole))
        layer_w = param_counts.layer_params_per_gpu(job.model, p.tp, p.ep, p.expert_tp)
        acc = grad_time.grad_accum_time(layer_w / float(grad_time.accum_shard(p.dp, p.zero)), gpu,
                                        job.dtype, fw, sy)
        assert c.layer_wgrad == pytest.approx(slow * w + acc, rel=1e-12)
