"""What every term of the many-plans stage-cost record reads (``StageInputs``): the plans'
columns, the stack's profile and constants, the GPU, and the figures derived once from them
(the MoE load, the data-parallel copies, the gradient path, the overlap clock, the
dispatcher's copies per token, the recomputed share), for one model."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from strategies import placement
from strategies.cost import ep_dispatch, grad_time, moe_bytes, overlap_clock
from strategies.cost import token_counts
from strategies.cost import recompute as rcp
from strategies.cost.system import SystemConfig, get_system
from strategies.framework import get_profile
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays, as_plan_arrays
from strategies.schedules import attr_by_code
from strategies.stacks.comm_rules import grad_path, grad_sync_once
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.variants import arrays_stack
from topologies.cluster import Cluster
from topologies.gpus import GPU


@dataclass(frozen=True, eq=False)
class StageInputs:
    """The inputs of ``stage_cost_arrays`` for model ``m`` and the figures every term reads
    (numpy columns, one entry per plan, or scalars that broadcast against them)."""

    m: ModelSpec
    cl: Cluster
    dtype: str
    P: PlanArrays
    fw: FrameworkProfile
    sy: SystemConfig
    gpu: GPU
    pad: Any           # drop-and-pad: counts known, rows at capacity
    load: Any          # token_counts.moe_load
    mb: Any            # micro-batches per step and pipeline
    copies: Any        # placement.dense_dp_group's size
    once: Any          # comm_rules.grad_sync_once
    zero_g: Any        # the ZeRO stage the gradients run with (comm_rules.grad_path)
    paired: Any        # the expert dispatch overlapped in pairs
    slow: Any          # overlap_clock.overlap_slowdown
    whole: Any         # overlap_clock.dp_overlaps_whole_step
    shard_acc: Any     # grad_time.accum_shard
    dedup_bytes: Any   # ep_dispatch.ep_dedup
    dedup_remote: Any
    disp: Any          # the dispatch's bytes per element
    lpc: Any           # layers per model chunk, mean
    zeros: np.ndarray  # the plans' broadcast shape
    share: Any         # recompute.plan_share: the share of a chunk's layers redone
    cap: Any           # block partial recompute: N layers per chunk, else 0

    def full(self, x: Any) -> np.ndarray:
        """``x`` as floats in the plans' shape."""
        return np.asarray(x, dtype=float) + self.zeros


def stage_inputs(m: ModelSpec, cl: Cluster, dtype: str,
                 plans: PlanArrays | Mapping[str, Any],
                 framework: FrameworkProfile | str | None = None,
                 system: SystemConfig | None = None,
                 gpu: GPU | None = None) -> StageInputs:
    """``StageInputs`` of ``stage_cost_arrays``'s arguments (the same defaults)."""
    P = as_plan_arrays(plans)
    fw, sy = arrays_stack(get_profile(framework), P.cp_comm), get_system(system)
    gpu = cl.gpu if gpu is None else gpu
    tp, pp, dp, cp, ep, b = P.tp, P.pp, P.dp, P.cp, P.ep, P.mbs
    rc, zero, tpo = P.recompute, P.zero, P.tp_comm_overlap
    etp = P.etp
    pad = P.moe_pad_to_capacity               # drop-and-pad: counts known, rows at capacity
    load = token_counts.moe_load(ep, P.moe_imbalance, P.moe_capacity_factor, m, b, tp, cp, etp,
                                 pad)

    mb = P.gbs / (b * dp)                      # micro-batches per step and pipeline
    # the ranks holding a dense parameter's copies (dp·cp), or with hybrid sharding those its
    # ZeRO shard spans (dp_shard·cp): its gradient reduction, its ZeRO shard
    # (``placement.dense_dp_group``)
    copies = placement.dense_dp_group(tp, cp, P.dp_shard)[0]
    # the ZeRO stage and overlap the gradients run with (pipelined torchtitan: ZeRO-1's
    # without overlap, ``comm_rules.grad_path``)
    once = grad_sync_once(fw.fsdp2, pp, zero)
    zero_g, ogr_g = grad_path(fw.fsdp2, pp, zero, P.overlap_grad_reduce)
    paired = (ep > 1) & (P.ep_overlap | attr_by_code(P.schedule, "overlaps_pairs").astype(bool))
    whole = overlap_clock.dp_overlaps_whole_step(copies, mb, ogr_g)
    slow = overlap_clock.overlap_slowdown(tp, tpo, cp, zero_g, whole, paired)
    shard_acc = grad_time.accum_shard(copies, zero_g)
    # the dispatcher's copies per token (DeepEP/HybridEP send one per destination rank and
    # node; Megatron's alltoall one per expert)
    dedup_bytes, dedup_remote = ep_dispatch.ep_dedup(m, ep, etp, cl.gpus_per_node, P.moe_dispatcher,
                                                     P.moe_routing)
    # the dispatch's bytes per element (the stack's FP8 dispatch; the combine 16-bit)
    disp = moe_bytes.dispatch_element_bytes(fw.fp8_dispatch, dtype)
    lpc = m.num_layers / (pp * P.vpp)
    zeros = np.zeros(np.broadcast(tp, pp, dp, cp, ep, b).shape)
    # partial full recomputation (recompute_layers): the share of a chunk's layers redone,
    # on the mean chunk of l/(p·v) layers (strategies.cost.recompute)
    share = rcp.plan_share(m.num_layers, P)
    cap = np.where((rc == 2) & (P.recompute_method == rcp.METHOD_CODE["block"]),
                   P.recompute_layers, 0.0)
    return StageInputs(m=m, cl=cl, dtype=dtype, P=P, fw=fw, sy=sy, gpu=gpu, pad=pad, load=load,
                       mb=mb, copies=copies, once=once, zero_g=zero_g, paired=paired, slow=slow,
                       whole=whole,
                       shard_acc=shard_acc, dedup_bytes=dedup_bytes, dedup_remote=dedup_remote,
                       disp=disp, lpc=lpc, zeros=zeros, share=share, cap=cap)
