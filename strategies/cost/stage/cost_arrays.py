"""``stage_cost_arrays``: the stage-cost record (``StageCostArrays``) of many plans at once,
in named steps: the inputs every term reads (``inputs.stage_inputs``), the mean layer's
compute and blocking collectives (``layers``), the embedding's and the LM head's stage
terms, each traffic's bytes (``comm_fields``), what each kind of rank holds
(``rank_params``), ZeRO-3's per-tensor gathers (``zero3_fields``), the layers of each kind
(``layers.kinds_by_name``) and the fields the TP collectives' rules read (``tp_fields``).
Seconds per layer (or per stage) and per micro-batch on one GPU; bytes; parameters."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, ContextManager, Mapping

import numpy as np

from strategies.cost import async_tp, attention_time, comm_bytes, embedding_head_time, ep_dispatch
from strategies.cost import head_deferral
from strategies.cost import cp_a2a, cp_hier, gemm_time, param_counts, quantise
from strategies.cost import recompute as rcp
from strategies.cost import ring_attention as ring
from strategies.cost import tp_ends
from strategies.cost.comm.links import keep_answer, memo_block
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.stage.array_record import Z3_KEYS, StageCostArrays
from strategies.cost.stage.clock_duty import duty_clock
from strategies.cost.stage.inputs import StageInputs, stage_inputs
from strategies.cost.stage.offload_time import with_offload
from strategies.cost.stage.layers import (blocking_small, kinds_by_name, layer_times,
                                          tp_collectives_per_layer)
from strategies.cost.stage.rank_params import rank_param_fields
from strategies.cost.stage.tp_fields import tp_rule_fields
from strategies.cost.system import SystemConfig
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays
from strategies.stacks.comm_rules import cp_exposed_fraction
from strategies.stacks.profile import FrameworkProfile, stack_system
from topologies.cluster import Cluster
from topologies.gpus import GPU


#: ``stage_cost_arrays`` of one plan (0-d ``PlanArrays``, the scalar estimate's), kept within
#: ``kept_records`` blocks by the arguments' identities (each held, so an id stays its own
#: while kept) and the plan's exact values: one estimate reads the same record for the
#: job's stage costs, its even run and its tail's re-run (``estimate.scalar``). Emptied when
#: the outermost block ends, so a cost function changed between two estimates (an
#: experiment's what-if, a test's monkeypatch) is read afresh; every kept array is
#: read-only.
_ONE_PLAN: dict[tuple, tuple[tuple, StageCostArrays]] = {}
_OPEN = {"depth": 0}
ONE_PLAN_KEPT = 64


def kept_records() -> ContextManager[None]:
    """Within the block ``stage_cost_arrays`` keeps each one-plan record it computes
    (``_ONE_PLAN``); blocks nest, and the outermost one's end drops them
    (``links.memo_block``)."""
    return memo_block(_ONE_PLAN, _OPEN)


def stage_cost_arrays(m: ModelSpec, cl: Cluster, dtype: str,
                      plans: PlanArrays | Mapping[str, Any],
                      framework: FrameworkProfile | str | None = None,
                      system: SystemConfig | None = None,
                      gpu: GPU | None = None) -> StageCostArrays:
    """The stage-cost record of every plan in ``plans`` (``PlanArrays`` or the search space's
    short columns) on ``cl`` in ``dtype`` with the ``framework`` profile and ``system``
    constants (defaults: Megatron-Core, ``DEFAULT_SYSTEM``), computed on ``gpu`` (default:
    the cluster's ``gpu``, its slowest type). One plan's (0-d arrays) is kept within a
    ``kept_records`` block (``_ONE_PLAN``): the same record a fresh call computes, bit for
    bit."""
    if not _OPEN["depth"] or not isinstance(plans, PlanArrays) or plans.tp.ndim != 0:
        return computed_stage_costs(m, cl, dtype, plans, framework, system, gpu)
    gpu = cl.gpu if gpu is None else gpu
    held = (m, cl, framework, system, gpu)
    key = (dtype, *(x if x is None or isinstance(x, str) else id(x) for x in held),
           *(getattr(plans, f.name).tobytes() for f in fields(PlanArrays)))
    hit = _ONE_PLAN.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], held)):
        return hit[1]
    out = computed_stage_costs(m, cl, dtype, plans, framework, system, gpu)
    return keep_answer(_ONE_PLAN, key, held, out, (getattr(r, f.name) for r in (
        out, *out.by_kind.values()) for f in fields(r)), ONE_PLAN_KEPT)


def computed_stage_costs(m: ModelSpec, cl: Cluster, dtype: str,
                         plans: PlanArrays | Mapping[str, Any],
                         framework: FrameworkProfile | str | None = None,
                         system: SystemConfig | None = None,
                         gpu: GPU | None = None) -> StageCostArrays:
    """``stage_cost_arrays`` computed (never kept): ``record_of`` the plans' inputs, with
    the one-micro-batch reduction's clock as a duty cycle where the system says
    (``clock_duty.duty_clock``)."""
    return duty_clock(stage_inputs(m, cl, dtype, plans, framework, system, gpu), record_of)


def record_of(si: StageInputs) -> StageCostArrays:
    """The stage-cost record of inputs ``si`` (their clock factor ``si.slow`` as given)."""
    m, cl, dtype = si.m, si.cl, si.dtype
    P, fw, sy, gpu, full, zeros = si.P, si.fw, si.sy, si.gpu, si.full, si.zeros
    tp, dp, cp, ep, b = P.tp, P.dp, P.cp, P.ep, P.mbs
    rc, sp, flash, tpo = P.recompute, P.sp, P.flash_attn, P.tp_comm_overlap
    etp, load = P.etp, si.load
    share, cap, slow, shard_acc = si.share, si.cap, si.slow, si.shard_acc
    n_tp = tp_collectives_per_layer(m.num_moe_layers / m.num_layers if m.is_moe else 0.0,
                                    ep, m.num_shared_experts, m.blocks_per_layer)
    lt = layer_times(m, si)
    md_f, md_b = blocking_small(m, si)
    a_f, a_b = attention_time.attention_time_fwd(m, b, tp, cp, flash, gpu, slow, fw, sy,
                                                 P.hierarchical_cp)
    g_f = slow * gemm_time.gemm_time_fwd(m, b, tp, cp, ep, gpu, dtype, tpo, sy, etp, load, fw, sp)
    head_f, head_b, head_w = embedding_head_time.lm_head_time_split(m, b, tp, cp, gpu, dtype, fw,
                                                                    slow, shard_acc, sy)
    if sy.head_wgrad_deferral:
        # the output weight gradients the drain holds, off the last stage's backward (§5.232)
        held = head_deferral.deferred_head_wgrad(
            head_w, si.lpc * (lt.bwd + md_b + share * lt.recompute), P.pp, si.mb,
            sy.head_wgrad_deferral)
        head_b, head_w = head_b - held, head_w - held
    emb_f = embedding_head_time.embedding_time(m, b, tp, cp, gpu, sy)
    emb_b = embedding_head_time.embedding_time_bwd(m, b, tp, cp, gpu, dtype, fw, shard_acc, sy)
    # the embedding's and the output's TP collectives on their stage (§5.84, §5.88): the
    # output's backward reduction hides under its weight-gradient GEMM where asynchronous
    end_ef, end_eb, end_hf, end_hb = tp_ends.tp_end_times(m, b, tp, cp, sp, gpu, cl, fw, sy,
                                                          head_w)
    emb_f, emb_b = emb_f + end_ef, emb_b + end_eb
    head_f, head_b = head_f + end_hf, head_b + end_hb
    torch_cp = fw.cp_impl == "torch"
    st_f, st_b = ring.torch_ring_stalls(m, b, tp, cp, a_f, a_b, cl, fw.cp_kv_heads) \
        if torch_cp else (0.0, 0.0)
    # the attention forwards whose CP exchange the recomputation reruns (§5.187): PyTorch's
    # ring waits on its forward's stalls again; the others' rule reads the count
    cp_rc = np.where(cp > 1, rcp.cp_reruns(rc, P.recompute_modules, share,
                                           not torch_cp and not fw.remat_named), 0.0)
    st_b = st_b + cp_rc * st_f
    ex_f, ex_b = async_tp.overlap_exposed(fw, dtype)   # TP overlap's blocking shares
    # activation offloading's exposed copies on each offloaded layer (plan offload_modules)
    l_f, l_b, by_kind, off_f, off_b = with_offload(m, si, full(lt.fwd + md_f),
                                                   full(lt.bwd + md_b),
                                                   kinds_by_name(si, (head_f, head_b, head_w)),
                                                   a_b)

    return StageCostArrays(
        layer_fwd=full(l_f), layer_bwd=full(l_b),
        layer_offload_fwd=full(off_f), layer_offload_bwd=full(off_b),
        layer_recompute=full(share * lt.recompute),
        recompute_cap=full(cap), layer_recompute_each=full(np.where(cap > 0, lt.recompute, 0.0)),
        layer_wgrad=full(lt.wgrad), embedding_wgrad=full(emb_b), head_wgrad=full(head_w),
        attn_fwd=full(a_f), attn_bwd=full(a_b), gemm_fwd=full(g_f), slowdown=full(slow),
        embedding_fwd=full(emb_f), embedding_bwd=full(emb_b),
        head_fwd=full(head_f), head_bwd=full(head_b),
        **comm_fields(si, n_tp),
        layer_params=full(param_counts.layer_params_per_gpu(m, tp, ep, etp)),
        **dict(zip(("layer_lead_params", "layer_lead_work"),
                   map(full, param_counts.layer_lead_split(m, tp, ep, etp)))),
        embedding_params=full(param_counts.embedding_params_per_gpu(m, tp)),
        **rank_param_fields(si),
        grad_bytes=sy.main_grad_bytes(dtype), param_bytes=float(sy.param_bytes),
        # the stack's bucket rule at each plan's dp (docs/calibration.md §5.86)
        bucket_params=stack_system(fw, sy).dp_bucket_params(dp) + zeros,
        tp_overlap_chunks=int(sy.tp_overlap_chunks),
        tp_overlap_fwd_exposed=ex_f, tp_overlap_bwd_exposed=ex_b,
        cp_exposed_fraction=cp_exposed_fraction(fw.cp_impl, sy.cp_exposed_fraction),
        cp_stall_fwd=full(st_f), cp_stall_bwd=full(st_b), cp_torch=torch_cp,
        cp_a2a=fw.cp_impl == "a2a", cp_hier=fw.cp_impl == "a2a+p2p",
        cp_per_layer_recompute=full(cp_rc),
        cp_rerun_attn=full(rcp.cp_rerun_window(rc, a_f, flash, fw.recompute_flash_fwd)),
        **zero3_fields(si),
        copy_gap=float(fw.launch_gap_s), copy_rate=float(usable_hbm(gpu, sy)),
        by_kind=by_kind,
        **tp_rule_fields(si, lt))


def comm_fields(si: StageInputs, n_tp: Any) -> dict[str, Any]:
    """``StageCostArrays``' traffic fields of ``si``'s model and plans: the TP collectives'
    bytes and counts per layer (``n_tp``: ``tp_collectives_per_layer`` of the mean layer;
    what recomputation reruns), the ring attention's buffer, the expert all-to-all's and
    expert-TP collectives' bytes (and the rounds recomputation reruns), the pipeline
    messages' bytes."""
    m, P, fw, dtype, zeros = si.m, si.P, si.fw, si.dtype, si.zeros
    tp, pp, cp, ep, b = P.tp, P.pp, P.cp, P.ep, P.mbs
    rc, sp, etp = P.recompute, P.sp, P.etp
    load, disp, dedup_bytes, dedup_remote = si.load, si.disp, si.dedup_bytes, si.dedup_remote
    share = si.share
    cp_buf = comm_bytes.cp_gather_bytes(m, b, tp, cp, fw.cp_kv_heads)
    a2a = fw.cp_impl == "a2a"   # TE's all-to-all: Q/K/V, then O (cost.cp_a2a, §5.185)
    if a2a:
        cp_buf = cp_a2a.qkv_bytes(m, b, tp, cp)
    # Megatron-Core's a2a+p2p (cost.cp_hier, §5.189): the ring's K/V at (t·k, c/k), and the
    # all-to-all's Q/K/V and O as a2a's
    hier = fw.cp_impl == "a2a+p2p"
    k = P.hierarchical_cp if hier else 1.0
    if hier:
        cp_buf = comm_bytes.cp_gather_bytes(m, b, *cp_hier.ring_sizes(tp, cp, k),
                                            fw.cp_kv_heads)
    p2p = comm_bytes.pp_p2p_bytes(m, b, tp, cp, sp)
    ag_w = quantise.tp_allgather_bytes_factor(dtype, sp)   # an all-gather's bytes over bf16
    return dict(
        # the MoE dispatch and combine again: full recompute (its share of the layers) and the
        # moe module (the whole MoE layer is checkpointed); op is left as it was
        ep_per_layer_recompute=np.where(ep > 1, np.where(rc == 2, share, np.where(
            rcp.part_selected(rc, P.recompute_modules, "routed_mlp"), 1.0, 0.0)), 0.0) + zeros,
        tp_bytes=np.where(tp > 1, comm_bytes.tp_comm_bytes_fwd(m, b, cp)
                          * quantise.tp_collective_bytes_factor(dtype, sp), 0.0) + zeros,
        tp_per_layer_fwd=n_tp + zeros, tp_per_layer_bwd=n_tp + zeros,
        # full: the layer's forward collectives again, less the MLP's reduce-scatter where
        # the checkpoint stops early; op (torchtitan): its all-gathers (all-reduces without
        # SP), the reduce-scatters' outputs are saved (``recompute.tp_rerun``, §5.84);
        # selective mlp: the collective closing the dense MLP, on its share of the layers
        tp_per_layer_recompute=np.where((rc == 2) | (rc == 3), rcp.tp_rerun(
            rc, n_tp, sp, ag_w / (1.0 + ag_w), fw.recompute_early_stop) * share, np.where(
            rcp.part_selected(rc, P.recompute_modules, "dense_mlp"),
            m.layer_shares().get("dense", 0.0), 0.0)) + zeros,
        cp_bytes=np.where(cp > 1, cp_buf, 0.0) + zeros,
        cp_out_bytes=np.where(cp > 1, cp_a2a.out_bytes(m, b, tp, cp) if a2a or hier else 0.0,
                              0.0) + zeros,
        cp_qkv_bytes=np.where(cp > 1, cp_a2a.qkv_bytes(m, b, tp, cp) if hier else 0.0, 0.0)
        + zeros,
        cp_a2a_size=k + zeros,
        cp_qkv_parts=cp_a2a.qkv_parts(m), cp_bwd_out=cp_hier.bwd_out_tensors(fw.cp_impl,
                                                                             fw.te_version),
        ep_bytes=np.where(ep > 1, ep_dispatch.ep_alltoall_bytes_fwd(m, b, tp, cp, ep, load, disp)
                          * dedup_bytes, 0.0) + zeros,
        etp_bytes=np.where((etp > 1) & (ep > 1), ep_dispatch.etp_bytes_fwd(m, b, tp, cp, ep, etp,
                                                                           load), 0.0)
        + zeros,
        ep_remote_scale=dedup_remote + zeros,
        ep_nvlink_share=ep_dispatch.ep_nvlink_share(P.moe_dispatcher) + zeros,
        p2p_bytes=np.where(pp > 1, p2p, 0.0) + zeros,
        p2p_gather_bytes=np.where((pp > 1) & (tp > 1) & ~sp, p2p * tp, 0.0) + zeros,
    )


def zero3_fields(si: StageInputs) -> dict[str, Any]:
    """``StageCostArrays.z3_*``: ZeRO-3 one tensor at a time
    (``FrameworkProfile.zero3_gather == "per-tensor"``) per micro-batch on the first stage
    (``param_counts.zero3_tensor_gathers``); all 0 for other plans and stacks."""
    m, P, fw, zeros = si.m, si.P, si.fw, si.zeros
    tp, pp, ep = P.tp, P.pp, P.ep
    rc, zero, copies = P.recompute, P.zero, si.copies
    per_tensor = (zero == 3) & (copies > 1) & (fw.zero3_gather == "per-tensor")
    if np.any(per_tensor):
        z3 = param_counts.zero3_tensor_gathers(m, tp, ep, pp, rc == 2, fw.zero3_reuse_params)
        z3 = {k: np.where(per_tensor, v, 0.0) + zeros for k, v in z3.items()}
    else:   # no plan gathers one tensor at a time: every count 0, without the tensor walk
        #     (a loop over each layer's tensors, ~800 with DeepSeek-V3's 256 experts)
        z3 = {k: np.where(per_tensor, 0.0, 0.0) + zeros for k in Z3_KEYS}
    return {f"z3_{k}": v for k, v in z3.items()}
