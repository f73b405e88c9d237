"""Every duration and byte count the compiler needs, read from the shared cost model.

``stage_costs(job)`` calls ``strategies.cost.compute`` and ``strategies.cost.counts`` with exactly
the arguments ``strategies.estimate.analytic`` uses (the plan fields as floats), so that any
difference between an analytic estimate and a simulation comes from dynamics only. The
record is frozen; tests may ``dataclasses.replace`` fields (e.g. zero the embedding and the
LM head to get perfectly balanced stages).

Units: seconds per layer (or per stage) and per micro-batch on one GPU; bytes; parameters.
"""
from __future__ import annotations

from dataclasses import dataclass

from strategies.cost import compute as ct
from strategies.cost import counts as costs
from strategies.estimate.analytic import (BUCKET_PARAMS, RECOMPUTE_CODE, TP_OVERLAP_CHUNKS,
                                      grad_bytes)
from strategies.job import Job
from topologies.gpus import GPU

CP_EXPOSED_FRACTION = 0.1     # estimate_core: at least 10% of the ring-attention traffic shows
PARAM_BYTES = 2.0             # bf16 parameters all-gathered after the optimizer (ZeRO >= 1)


@dataclass(frozen=True)
class StageCosts:
    """Per-layer and per-stage costs of one job (seconds, bytes, parameters)."""

    layer_fwd: float            # one layer's forward compute
    layer_bwd: float            # its backward
    layer_recompute: float      # extra forward redone in the backward (selective or full)
    attn_fwd: float             # the attention core's share of layer_fwd (hides CP traffic)
    attn_bwd: float             # its share of layer_bwd
    embedding_fwd: float        # first virtual stage, per micro-batch
    embedding_bwd: float
    head_fwd: float             # last virtual stage: LM head + cross-entropy
    head_bwd: float
    tp_bytes: float             # one tensor-parallel collective (b·s·h/c activations)
    tp_per_layer_fwd: int       # collectives per layer: 2 forward
    tp_per_layer_bwd: int       # 2 backward
    tp_per_layer_recompute: int  # 2 more with full recomputation
    cp_bytes: float             # ring-attention buffer per layer forward (x2 backward)
    ep_bytes: float             # MoE all-to-all bytes per layer forward (same backward)
    p2p_bytes: float            # one pipeline message (per GPU, per direction)
    p2p_gather_bytes: float     # all-gather over tp after each receive (no SP), else 0
    layer_params: float         # parameters of one layer on one GPU
    embedding_params: float
    head_params: float
    grad_bytes: float           # bytes per gradient element reduced over dp
    bucket_params: float        # Megatron DDP bucket size
    tp_overlap_chunks: int
    cp_exposed_fraction: float
    params_by_stage: tuple[float, ...]     # parameters per GPU of each pipeline stage
    optimizer_by_stage: tuple[float, ...]  # optimizer step seconds of each stage


def plan_floats(job: Job) -> dict[str, float]:
    """The plan fields as estimate_core converts them (floats)."""
    p = job.plan
    return {k: float(getattr(p, k)) for k in ("tp", "pp", "dp", "cp", "ep", "mbs", "gbs", "vpp")}


def stage_params(job: Job, stage: int, layer_params: float, embedding: float,
                 head: float) -> float:
    """Parameters held by one GPU of ``stage``: its layers, the embedding on the first stage
    and the output layer on the last (``costs.lm_head_params_per_gpu``)."""
    n = job.layers_of_stage(stage) * layer_params
    if stage == 0:
        n = n + embedding
    if stage == job.plan.pp - 1:
        n = n + head
    return n


def stage_costs(job: Job, gpu: GPU | None = None) -> StageCosts:
    """Read the cost model for ``job`` (see the module docstring) on ``gpu`` (default: the
    cluster's slowest GPU type; the compiler asks for each rank's own)."""
    m, cl, p, f = job.model, job.cluster, job.plan, plan_floats(job)
    gpu = cl.gpu if gpu is None else gpu
    tp, cp, ep, b, pp = f["tp"], f["cp"], f["ep"], f["mbs"], f["pp"]
    rc = RECOMPUTE_CODE[p.recompute]
    fw = job.framework
    slow = float(ct.overlap_slowdown(tp, p.tp_comm_overlap, cp, p.zero))
    shard = float(ct.accum_shard(f["dp"], p.zero))
    lt = ct.layer_time(m, b, tp, cp, ep, p.sp, p.flash_attn, rc, gpu, job.dtype,
                       p.tp_comm_overlap, fw, slow, shard)
    a_f, a_b = ct.attention_time_fwd(m, b, tp, cp, p.flash_attn, gpu, slow, fw)
    head_f, head_b = ct.lm_head_time(m, b, tp, cp, gpu, job.dtype, fw, slow, shard)
    emb = ct.embedding_time(m, b, tp, cp, gpu)
    emb_b = ct.embedding_time_bwd(m, b, tp, cp, gpu, job.dtype, fw, shard)
    cp_buf = costs.cp_comm_bytes_fwd(m, b, tp, cp) * cp / max(cp - 1.0, 1.0) if p.cp > 1 else 0.0
    p2p = costs.pp_p2p_bytes(m, b, tp, cp, p.sp)
    lp = float(costs.layer_params_per_gpu(m, tp, ep))
    ep_ = float(costs.embedding_params_per_gpu(m, tp))
    hp = float(costs.lm_head_params_per_gpu(m, tp, pp))
    params = tuple(float(stage_params(job, s, lp, ep_, hp)) for s in range(p.pp))
    shard = float(p.dp) if p.zero >= 1 else 1.0
    opt = tuple(float(ct.optimizer_time(n / shard, gpu)) for n in params)
    return StageCosts(
        layer_fwd=float(lt.fwd), layer_bwd=float(lt.bwd), layer_recompute=float(lt.recompute),
        attn_fwd=float(a_f), attn_bwd=float(a_b),
        embedding_fwd=float(emb), embedding_bwd=float(emb_b),
        head_fwd=float(head_f), head_bwd=float(head_b),
        tp_bytes=float(costs.tp_comm_bytes_fwd(m, b, cp)) if p.tp > 1 else 0.0,
        tp_per_layer_fwd=2, tp_per_layer_bwd=2, tp_per_layer_recompute=2 if rc == 2 else 0,
        cp_bytes=float(cp_buf),
        ep_bytes=float(costs.ep_alltoall_bytes_fwd(m, b, tp, cp, ep)) if p.ep > 1 else 0.0,
        p2p_bytes=float(p2p) if p.pp > 1 else 0.0,
        p2p_gather_bytes=float(p2p * tp) if (p.pp > 1 and p.tp > 1 and not p.sp) else 0.0,
        layer_params=lp, embedding_params=ep_, head_params=hp,
        grad_bytes=grad_bytes(job.dtype), bucket_params=float(BUCKET_PARAMS),
        tp_overlap_chunks=TP_OVERLAP_CHUNKS, cp_exposed_fraction=CP_EXPOSED_FRACTION,
        params_by_stage=params, optimizer_by_stage=opt)
