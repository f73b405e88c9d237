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
from strategies.estimate.analytic import RECOMPUTE_CODE
from strategies.job import Job


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
    bucket_params: float        # Megatron DDP bucket size (SystemConfig)
    tp_overlap_chunks: int      # SystemConfig.tp_overlap_chunks
    cp_exposed_fraction: float  # SystemConfig.cp_exposed_fraction
    param_bytes: float          # SystemConfig.param_bytes: a parameter all-gathered over dp
    params_by_stage: tuple[float, ...]     # parameters per GPU of each pipeline stage
    optimizer_by_stage: tuple[float, ...]  # optimizer step seconds of each stage


def plan_floats(job: Job) -> dict[str, float]:
    """The plan fields as estimate_core converts them (floats)."""
    p = job.plan
    return {k: float(getattr(p, k)) for k in ("tp", "pp", "dp", "cp", "ep", "mbs", "gbs", "vpp")}


def stage_costs(job: Job) -> StageCosts:
    """Read the cost model for ``job`` (see the module docstring)."""
    m, cl, p, f = job.model, job.cluster, job.plan, plan_floats(job)
    gpu = cl.gpu
    tp, cp, ep, b, pp = f["tp"], f["cp"], f["ep"], f["mbs"], f["pp"]
    rc = RECOMPUTE_CODE[p.recompute]
    fw, sy = job.framework, job.system
    slow = float(ct.overlap_slowdown(tp, p.tp_comm_overlap, cp, p.zero))
    shard = float(ct.accum_shard(f["dp"], p.zero))
    lt = ct.layer_time(m, b=b, tp=tp, cp=cp, ep=ep, sp=p.sp, flash=p.flash_attn, recompute=rc,
                       gpu=gpu, dtype=job.dtype, tpo=p.tp_comm_overlap, fw=fw, slow=slow,
                       shard=shard, system=sy)
    a_f, a_b = ct.attention_time_fwd(m, b, tp, cp, p.flash_attn, gpu, slow, fw, sy)
    head_f, head_b = ct.lm_head_time(m, b, tp, cp, gpu, job.dtype, fw, slow, shard, sy)
    emb = ct.embedding_time(m, b, tp, cp, gpu, sy)
    emb_b = ct.embedding_time_bwd(m, b, tp, cp, gpu, job.dtype, fw, shard, sy)
    cp_buf = costs.cp_comm_bytes_fwd(m, b, tp, cp) * cp / max(cp - 1.0, 1.0) if p.cp > 1 else 0.0
    p2p = costs.pp_p2p_bytes(m, b, tp, cp, p.sp)
    lp = float(costs.layer_params_per_gpu(m, tp, ep))
    ep_ = float(costs.embedding_params_per_gpu(m, tp))
    hp = float(costs.head_params_per_gpu(m, tp, pp))
    params = tuple(float(costs.stage_params_per_gpu(m, tp, ep, pp, s)) for s in range(p.pp))
    shard = float(p.dp) if p.zero >= 1 else 1.0
    opt = tuple(float(ct.optimizer_time(n / shard, gpu, sy)) for n in params)
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
        grad_bytes=sy.main_grad_bytes(job.dtype), bucket_params=float(sy.bucket_params),
        tp_overlap_chunks=int(sy.tp_overlap_chunks), cp_exposed_fraction=sy.cp_exposed_fraction,
        param_bytes=sy.param_bytes,
        params_by_stage=params, optimizer_by_stage=opt)
