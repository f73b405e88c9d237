"""What each pipeline stage of one job holds, where its layout is not the even split of one
kind of layer (``StageCosts``' ``*_by_stage`` fields): its parameters by kind of layer
(``stage_params_split``, ``copy_layers`` under a mirrored schedule), its optimizer step and
weight quantisation, the stack's per-step passes and the mean width of its all-gather after
the optimizer (``stage_rank_fields``). Seconds, bytes, parameters per GPU."""
from __future__ import annotations

from typing import Any

from strategies import placement
from strategies.cost import elementwise_time, grad_time, param_counts, quantise
from strategies.cost import step as steps
from strategies.cost.stage.chunks import chunk_layers, chunk_sum
from strategies.cost.stage.rank_params import gather_width
from strategies.cost.stage.record import StageCosts
from strategies.job import Job
from strategies.plan_arrays import RECOMPUTE_CODE
from strategies.schedules import get_schedule, head_rank
from strategies.stacks.comm_rules import grad_path, grad_sync_once
from topologies.gpus import GPU


def stage_rank_fields(job: Job, rec: StageCosts, gpu: GPU) -> dict[str, tuple[float, ...]]:
    """``StageCosts``' per-stage fields of ``job`` on ``gpu``, each stage summing its own
    layers by kind (``rec.chunk_kinds``, ``stage_params_split``): ``params_by_stage``,
    ``optimizer_by_stage``, ``passes_by_stage``, ``expert_params_by_stage``,
    ``gather_by_stage``."""
    p, sy = job.plan, job.system
    split = tuple(stage_params_split(job, rec, s) for s in range(p.pp))
    params = tuple(d + e for d, e in split)
    copies = float(placement.dense_dp_group(p.tp, p.cp, p.shard_dp)[0])
    shard = copies if p.zero >= 1 else 1.0
    # expert states are sharded over the expert-data-parallel group (within a replica)
    shard_e = float(placement.expert_dp_group(p.tp, p.cp, p.shard_dp, p.ep, p.expert_tp)[0]) \
        if p.zero >= 1 else 1.0
    layer_w = param_counts.layer_params_per_gpu(job.model, p.tp, p.ep, p.expert_tp)
    casts = float(quantise.weight_cast_passes(job.framework.weight_cast_per_forward,
                                              p.gbs / (p.mbs * p.dp),
                                              RECOMPUTE_CODE[p.recompute]))
    opt = tuple(float(grad_time.optimizer_time(d / shard + e / shard_e, gpu, sy, job.framework)
                      + elementwise_time.weight_cast_time(layer_w * copy_layers(job, s), gpu,
                                                          job.dtype, sy) * casts)
                for s, (d, e) in enumerate(split))
    fw = job.framework
    once = bool(grad_sync_once(fw.fsdp2, p.pp, p.zero))
    zero_g = grad_path(fw.fsdp2, p.pp, p.zero)[0]
    passes = tuple(float(steps.stage_pass_time(d + e, e, p.tp, p.cp, p.dp, p.ep, p.expert_tp,
                                               p.zero, zero_g, once, fw, gpu, job.dtype, sy,
                                               p.shard_dp)) for d, e in split)
    head_at = head_rank(p.schedule, p.pp, p.vpp)
    mirrored = bool(get_schedule(p.schedule).mirrored) and p.pp > 1
    gather = tuple(float(gather_width(n, param_counts.stage_params_split(
        job.model, p.tp, p.ep, p.pp, s, layers=0, head_stage=head_at, mirrored=mirrored,
        etp=p.expert_tp)[0], sy)) for s, n in enumerate(params))
    return dict(params_by_stage=params, optimizer_by_stage=opt, passes_by_stage=passes,
                expert_params_by_stage=tuple(e for _, e in split), gather_by_stage=gather)


def stage_params(job: Job, c: StageCosts, stage: int) -> float:
    """Parameters per GPU of pipeline rank ``stage`` (``stage_params_split``, summed)."""
    dense, expert = stage_params_split(job, c, stage)
    return dense + expert


def copy_layers(job: Job, stage: int) -> float:
    """Transformer layers of pipeline rank ``stage`` per copy: ``Job.layers_of_stage``, or
    under a mirrored schedule (DualPipe, ``pp > 1``: the rank holds stages ``stage`` and
    ``pp-1-stage``, each micro-batch crossing one of them) the mean of the two copies'
    (equal under the even split; an uneven layout's copies differ), so that twice it is the
    layers the rank holds (``param_counts.stage_params_split``'s ``mirrored``) and the micro-batches
    times it the layers they cross (the weight casts)."""
    p = job.plan
    n = job.layers_of_stage(stage)
    if get_schedule(p.schedule).mirrored and p.pp > 1:
        other = job.layers_of_stage(p.pp - 1 - stage)
        if other != n:
            return (n + other) / 2
    return n


def stage_params_split(job: Job, c: StageCosts, stage: int) -> tuple[float, float]:
    """``(dense, expert)`` parameters per GPU of pipeline rank ``stage``: its layers by kind
    (and its multi-token-prediction modules, with the copy of the embedding Megatron builds
    on a rank holding them without the embedding), the embedding on rank 0 and the LM head
    where the schedule puts it (``param_counts.stage_params_split``; a one-kind model: its
    ``layers`` mean layers). DualPipe (``Schedule.mirrored``): the rank also holds the layers
    of stage ``pp-1-stage``, and both end ranks the embedding and the LM head."""
    p, m = job.plan, job.model
    head_at = head_rank(p.schedule, p.pp, p.vpp)
    mirrored = bool(get_schedule(p.schedule).mirrored) and p.pp > 1
    kinds = {k for chunks in c.chunk_kinds for ch in chunks for k, _ in ch}
    if not (kinds & set(c.by_kind)):
        d, e = param_counts.stage_params_split(m, p.tp, p.ep, p.pp, stage,
                                               layers=copy_layers(job, stage), head_stage=head_at,
                                               mirrored=mirrored, etp=p.expert_tp)
        return float(d), float(e)
    d, e = param_counts.stage_params_split(m, p.tp, p.ep, p.pp, stage, layers=0, head_stage=head_at,
                                           mirrored=mirrored, etp=p.expert_tp)
    dense, expert = float(d), float(e)
    # a kind's record carries its expert part; the mean layer (``c``, a one-kind model's
    # layers beside its MTP modules) the model's per-layer split
    mean_e = float(param_counts.layer_params_split(m, p.tp, p.ep, p.expert_tp)[1])

    def expert_of(x: Any) -> float:
        return x.expert_params if x is not c else mean_e
    copies = (stage, p.pp - 1 - stage) if mirrored else (stage,)
    for s in copies:
        for ch in range(p.vpp):
            items = chunk_layers(c, s, ch, 0)
            expert += chunk_sum(items, expert_of)
            dense += chunk_sum(items, lambda x: x.layer_params - expert_of(x))
    has_embedding = stage == 0 or (mirrored and stage == p.pp - 1)
    mtp = sum(job.layout.mtp_of_stage(s) for s in copies)
    dense += float(param_counts.mtp_embedding_copy_params(m, p.tp, mtp, has_embedding))
    return dense, expert
