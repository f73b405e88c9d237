"""The stage-cost record of one job (``StageCosts``): ``stage_costs(job)`` is element 0 of a
one-plan ``stage_cost_arrays`` (``stage_costs_at``), so the estimate's per-stage costs and
the simulator's compiled costs are one computation, not two that are kept equal; where the
job's layout is not the even split of one kind of layer, each chunk's kinds of layer and
each stage's own parameters, optimizer and passes (``stage_params``) replace the mean."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from strategies.cost.stage.array_record import StageCostArrays
from strategies.cost.stage.cost_arrays import stage_cost_arrays
from strategies.cost.stage.record import KindCosts, StageCosts
from strategies.cost.stage.stage_params import stage_rank_fields
from strategies.job import Job
from strategies.layout import chunk_kinds
from strategies.plan_arrays import PlanArrays
from topologies.gpus import GPU


def stage_costs_at(arrays: StageCostArrays, i: int, pp: int) -> StageCosts:
    """Entry ``i`` (a plan with ``pp`` stages) of ``arrays`` as a ``StageCosts`` record."""
    def at(x) -> float:
        return float(np.reshape(x, -1)[i])     # (one plan's 0-d arrays: entry 0)

    def f(name: str) -> float:
        return at(getattr(arrays, name))

    def stage(kind: str, s: int) -> float:
        which = "first" if s == 0 else "last" if s == pp - 1 else "mid"
        return f(f"{kind}_{which}")

    return StageCosts(
        layer_fwd=f("layer_fwd"), layer_bwd=f("layer_bwd"), layer_recompute=f("layer_recompute"),
        layer_offload_fwd=f("layer_offload_fwd"), layer_offload_bwd=f("layer_offload_bwd"),
        layer_wgrad=f("layer_wgrad"), embedding_wgrad=f("embedding_wgrad"),
        head_wgrad=f("head_wgrad"),
        attn_fwd=f("attn_fwd"), attn_bwd=f("attn_bwd"),
        embedding_fwd=f("embedding_fwd"), embedding_bwd=f("embedding_bwd"),
        head_fwd=f("head_fwd"), head_bwd=f("head_bwd"), tp_bytes=f("tp_bytes"),
        tp_per_layer_fwd=at(arrays.tp_per_layer_fwd),
        tp_per_layer_bwd=at(arrays.tp_per_layer_bwd),
        tp_per_layer_recompute=f("tp_per_layer_recompute"),
        recompute_cap=f("recompute_cap"), layer_recompute_each=f("layer_recompute_each"),
        ep_per_layer_recompute=f("ep_per_layer_recompute"),
        cp_stall_fwd=f("cp_stall_fwd"), cp_stall_bwd=f("cp_stall_bwd"),
        cp_torch=bool(arrays.cp_torch), cp_a2a=bool(arrays.cp_a2a),
        cp_out_bytes=f("cp_out_bytes"), cp_hier=bool(arrays.cp_hier),
        cp_qkv_bytes=f("cp_qkv_bytes"), cp_a2a_size=f("cp_a2a_size"),
        cp_qkv_parts=arrays.cp_qkv_parts, cp_bwd_out=arrays.cp_bwd_out,
        cp_per_layer_recompute=f("cp_per_layer_recompute"),
        cp_rerun_attn=f("cp_rerun_attn"),
        cp_bytes=f("cp_bytes"), ep_bytes=f("ep_bytes"), etp_bytes=f("etp_bytes"),
        ep_remote_scale=f("ep_remote_scale"), ep_nvlink_share=f("ep_nvlink_share"),
        p2p_bytes=f("p2p_bytes"),
        p2p_gather_bytes=f("p2p_gather_bytes"), layer_params=f("layer_params"),
        embedding_params=f("embedding_params"), head_params=f("head_params"),
        grad_bytes=arrays.grad_bytes, bucket_params=f("bucket_params"),
        tp_overlap_chunks=arrays.tp_overlap_chunks,
        tp_overlap_bwd_exposed=arrays.tp_overlap_bwd_exposed,
        tp_overlap_fwd_exposed=arrays.tp_overlap_fwd_exposed,
        cp_exposed_fraction=arrays.cp_exposed_fraction, param_bytes=arrays.param_bytes,
        params_by_stage=tuple(stage("params", s) for s in range(pp)),
        gather_by_stage=tuple(stage("gather", s) for s in range(pp)),
        expert_params_by_stage=tuple(stage("expert_params", s) for s in range(pp)),
        layer_lead_params=f("layer_lead_params"), layer_lead_work=f("layer_lead_work"),
        optimizer_by_stage=tuple(stage("optimizer", s) for s in range(pp)),
        passes_by_stage=tuple(stage("passes", s) for s in range(pp)),
        tied_bytes=f("tied_bytes"),
        rg_bytes=f("rg_bytes"), rg_attn=f("rg_attn"), rg_attn2=f("rg_attn2"),
        rg_attn_n=float(arrays.rg_attn_n),
        rg_dense_n=f("rg_dense_n"),
        rg_dense=f("rg_dense"), rg_shared_n=f("rg_shared_n"), rg_shared=f("rg_shared"),
        rg_down_qw=float(arrays.rg_down_qw), rg_down_kvw=float(arrays.rg_down_kvw),
        rg_down_q=f("rg_down_q"), rg_down_kv=f("rg_down_kv"),
        rd_down_q=f("rd_down_q"), rd_down_kv=f("rd_down_kv"),
        rd_bytes=f("rd_bytes"), rd_attn=f("rd_attn"), rd_attn2=f("rd_attn2"),
        dw_attn=f("dw_attn"),
        rd_dense=f("rd_dense"), rd_shared=f("rd_shared"), attn_w=float(arrays.attn_w),
        attn_w2=float(arrays.attn_w2), tp_ag_bytes=f("tp_ag_bytes"),
        tp_attn_rc=f("tp_attn_rc"), tp_rope_w=f("tp_rope_w"), tp_down=f("tp_down"),
        down_q_w=float(arrays.down_q_w), down_kv_w=float(arrays.down_kv_w),
        tp_attn_full_rc=f("tp_attn_full_rc"), tp_rep_grad_bytes=f("tp_rep_grad_bytes"),
        z3_fwd_n=f("z3_fwd_n"), z3_fwd_params=f("z3_fwd_params"), z3_bwd_n=f("z3_bwd_n"),
        z3_bwd_params=f("z3_bwd_params"), z3_rs_n=f("z3_rs_n"), z3_rs_params=f("z3_rs_params"),
        copy_gap=arrays.copy_gap, copy_rate=arrays.copy_rate,
        by_kind={k: KindCosts(**{f: at(getattr(v, f)) for f in KindCosts.__dataclass_fields__})
                 for k, v in arrays.by_kind.items()})


def stage_costs(job: Job, gpu: GPU | None = None) -> StageCosts:
    """The stage-cost record of ``job`` on ``gpu`` (default: the cluster's slowest GPU type;
    the compiler asks for each rank's own): ``stage_cost_arrays`` of its one plan, entry 0.
    Where the layout is not the even split of one kind of layer (``Job.layout``: uneven
    stages or chunks, dense and MoE layers, multi-token prediction), ``chunk_kinds`` says
    which layers each chunk holds and each stage's parameters and optimizer time sum its own
    layers by kind (``stage_params``)."""
    p, sy = job.plan, job.system
    gpu = job.cluster.gpu if gpu is None else gpu
    arrays = stage_cost_arrays(job.model, job.cluster, job.dtype, PlanArrays.of_plan(p),
                               job.framework, sy, gpu=gpu)
    rec = stage_costs_at(arrays, 0, p.pp)
    lay = job.layout
    if lay.uniform and not rec.by_kind:
        return rec
    kinds = tuple(tuple(tuple(chunk_kinds(job.model, lay, s, c).items()) for c in range(p.vpp))
                  for s in range(p.pp))
    rec = replace(rec, chunk_kinds=kinds)
    return replace(rec, **stage_rank_fields(job, rec, gpu))
