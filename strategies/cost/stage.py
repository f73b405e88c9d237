"""The stage-cost record: every duration, byte count and parameter count of a pipeline stage,
computed once from the cost model and read by the analytic estimate
(``strategies.estimate.analytic``), the lower bound (``strategies.estimate.lower_bound``) and
the compiler (``simulator.program``).

``stage_cost_arrays(model, cluster, dtype, plans, framework, system)`` computes the record
for many plans at once (``StageCostArrays``, one entry per plan); ``stage_costs(job)`` is the
same record for one job (``StageCosts``: element 0 of a one-plan ``StageCostArrays``), so
the estimate's per-stage costs and the simulator's compiled costs are one computation, not
two that are kept equal. ``StageCosts`` is frozen; tests may ``dataclasses.replace`` fields
(e.g. zero the embedding and the LM head to get perfectly balanced stages).

Each backward (``layer_bwd``, ``head_bwd``, ``embedding_bwd``) is the whole pass, ``B + W``,
as schedules that do not split it run it; ``*_wgrad`` is its weight-gradient part ``W``
(``strategies.cost.layer_time.layer_time``), so a schedule that splits the backward runs ``B``
in ``*_bwd - *_wgrad`` and ``W`` in ``*_wgrad`` (docs/schedules.md, "Split backward").

Units: seconds per layer (or per stage) and per micro-batch on one GPU; bytes; parameters.

>>> from strategies.presets import model_preset
>>> from strategies.plan import Plan
>>> from strategies.job import make_job
>>> from topologies.cluster import cluster_preset
>>> job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1),
...                Plan(tp=2, pp=2, dp=2, gbs=8))
>>> c = stage_costs(job)
>>> c.layer_bwd > c.layer_fwd > 0, len(c.params_by_stage), c.tp_overlap_chunks
(True, 2, 4)
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np

from strategies import placement
from strategies.cost import amax
from strategies.cost import comm as cm
from strategies.cost import attention_time, comm_bytes, elementwise_time, embedding_head_time
from strategies.cost import ep_dispatch, gemm_time, grad_time, layer_time, moe_bytes, overlap_clock
from strategies.cost import param_counts, token_counts
from strategies.cost import quantise
from strategies.cost import recompute as rcp
from strategies.cost import ring_attention as ring
from strategies.cost import step as steps
from strategies.cost import tp_ends
from strategies.cost.tp_collectives import (  # noqa: F401 (re-exported: callers import them here)
    per_width,
    sp_regather_pieces,
    sp_regather_exposed,
    dgrad_reduce_pieces,
    dgrad_reduce_time,
    dgrad_reduce_hidden,
    down_reduce_pieces,
    down_reduce_hidden,
    tp_kind_bytes,
    attn_tp_swap,
    attn_tp_saved,
    attn_rc_gathers,
    attn_rope_time,
    attn_rope_bytes,
    attn_down_ops,
    attn_down_time,
    attn_full_rc_ops,
    attn_full_rc_time,
    sp_grad_allreduce_bytes)
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import SystemConfig, get_system
from strategies.framework import get_profile
from strategies.stacks.comm_rules import cp_exposed_fraction, grad_path, grad_sync_once
from strategies.stacks.profile import FrameworkProfile, stack_system
from strategies.job import Job
from strategies.layout import chunk_kinds, even_stage_content_arrays, mixed_layers
from strategies.model import ModelSpec
from strategies.plan_arrays import RECOMPUTE_CODE, PlanArrays, as_plan_arrays, rank_layers
from strategies.schedules import attr_by_code, dispatch, get_schedule, head_rank
from topologies.cluster import Cluster
from topologies.gpus import GPU


#: ``param_counts.zero3_tensor_gathers``' keys (``StageCostArrays.z3_*``)
Z3_KEYS = ("fwd_n", "fwd_params", "bwd_n", "bwd_params", "rs_n", "rs_params")


@dataclass(frozen=True, eq=False)
class KindCostArrays:
    """One layer of one kind (``dense``, ``moe``) or one multi-token-prediction module
    (``mtp``: its projection, its transformer layer and its pass through the shared LM head),
    per micro-batch on one GPU, for many plans (seconds, bytes, parameters). Field names as
    ``StageCostArrays``'s mean layer, so that a chunk's cost reads either."""

    layer_fwd: np.ndarray
    layer_bwd: np.ndarray
    layer_wgrad: np.ndarray
    layer_recompute: np.ndarray
    attn_fwd: np.ndarray
    attn_bwd: np.ndarray
    ep_bytes: np.ndarray          # all-to-all bytes per forward (0 for a dense layer)
    layer_params: np.ndarray      # parameters on one GPU (dense + expert share)
    expert_params: np.ndarray     # the routed experts' part of layer_params
    # block partial recompute (``recompute_cap`` > 0): one recomputed layer of this kind's
    # extra forward (``StageCosts.chunk_recompute_comm`` prices a chunk's layers by kind)
    layer_recompute_each: np.ndarray = 0.0


@dataclass(frozen=True)
class KindCosts:
    """``KindCostArrays`` of one plan, as Python numbers."""

    layer_fwd: float
    layer_bwd: float
    layer_wgrad: float
    layer_recompute: float
    attn_fwd: float
    attn_bwd: float
    ep_bytes: float
    layer_params: float
    expert_params: float
    layer_recompute_each: float = 0.0


@dataclass(frozen=True, eq=False)
class StageCostArrays:
    """Per-layer and per-stage costs of many plans (numpy arrays, one entry per plan;
    seconds, bytes, parameters). Zero where the plan has no such traffic (``tp_bytes`` with
    ``tp = 1`` …). ``*_first``/``*_mid``/``*_last``: pipeline rank 0, a rank that is neither
    first nor last, rank ``pp - 1`` (with ``pp = 1`` rank 0 is both: use ``*_first``); the LM
    head's parameters count where the schedule places it (``head_rank_array``: rank 0 on a
    V, so there ``*_last`` holds layers only)."""

    layer_fwd: np.ndarray         # one layer's forward compute
    layer_bwd: np.ndarray         # its backward (B + W)
    layer_wgrad: np.ndarray       # the weight-gradient part W of layer_bwd (split schedules)
    layer_recompute: np.ndarray   # extra forward redone in the backward, mean per layer
    attn_fwd: np.ndarray          # the attention core's share of layer_fwd (hides CP traffic)
    attn_bwd: np.ndarray          # its share of layer_bwd
    gemm_fwd: np.ndarray          # the dense GEMMs' share of layer_fwd (hides TP traffic)
    slowdown: np.ndarray          # clock factor on compute-bound kernels (overlap_slowdown)
    embedding_fwd: np.ndarray     # first virtual stage, per micro-batch
    embedding_bwd: np.ndarray
    head_fwd: np.ndarray          # last virtual stage: LM head + cross-entropy
    head_bwd: np.ndarray
    embedding_wgrad: np.ndarray   # W part of embedding_bwd: all of it (a table gradient only)
    head_wgrad: np.ndarray        # W part of head_bwd: the output weight's gradient GEMM
    tp_bytes: np.ndarray          # one tensor-parallel collective (b·s·h/c activations; the
    #                               mean of quantised all-gathers and bf16 reduce-scatters
    #                               under SP in low precision, quantise)
    tp_per_layer_fwd: np.ndarray  # collectives per mean layer: 2 forward (fewer with EP, below)
    tp_per_layer_bwd: np.ndarray  # 2 backward
    tp_per_layer_recompute: np.ndarray  # rerun by full or op recomputation (recompute.tp_rerun)
    cp_bytes: np.ndarray          # ring-attention buffer per layer forward (x2 backward)
    ep_bytes: np.ndarray          # MoE all-to-all bytes per layer forward (same backward)
    etp_bytes: np.ndarray         # one expert-TP all-gather / reduce-scatter per layer forward
    ep_remote_scale: np.ndarray   # share of the all-to-all's bytes between nodes (node-limited)
    ep_nvlink_share: np.ndarray   # share of NVLink's rate the dispatcher's kernel reaches
    p2p_bytes: np.ndarray         # one pipeline message (per GPU, per direction)
    p2p_gather_bytes: np.ndarray  # all-gather over tp after each receive (no SP), else 0
    layer_params: np.ndarray      # parameters of one layer on one GPU
    embedding_params: np.ndarray
    head_params: np.ndarray       # final norm + LM head (or tied copy, none on the embedding's rank) on its rank
    params_first: np.ndarray      # parameters per GPU of pipeline rank 0
    params_mid: np.ndarray
    params_last: np.ndarray
    optimizer_first: np.ndarray   # optimizer step seconds (ZeRO >= 1: the 1/dp shard) + the
    #                               per-step quantisation of the stage's weights (fp8 etc.)
    optimizer_mid: np.ndarray
    optimizer_last: np.ndarray
    passes_first: np.ndarray      # the stack's per-step passes over the gradient buffer and
    passes_mid: np.ndarray        # the optimizer shard (``strategies.cost.step``), seconds
    passes_last: np.ndarray
    tied_bytes: np.ndarray        # tied embedding gradient all-reduced first <-> last stage
    grad_bytes: float             # bytes per gradient element reduced over dp
    param_bytes: float            # bytes per parameter all-gathered over dp (ZeRO)
    # mean bytes per parameter of each kind of rank's all-gather after the optimizer
    # (``gather_width``: the quantised weights at ``SystemConfig.gather_bytes``)
    gather_first: np.ndarray
    gather_mid: np.ndarray
    gather_last: np.ndarray
    bucket_params: np.ndarray     # DP gradient bucket, parameters (SystemConfig.dp_bucket_params)
    tp_overlap_chunks: int
    tp_overlap_bwd_exposed: float  # FrameworkProfile.tp_overlap_bwd_exposed
    cp_exposed_fraction: float
    # ZeRO-3 one tensor at a time (``FrameworkProfile.zero3_gather == "per-tensor"``), per
    # micro-batch on the first stage: counts and parameters per GPU of the forward's and the
    # backward's all-gathers and of the gradient reduce-scatters
    # (``param_counts.zero3_tensor_gathers``); all 0 for other plans and stacks
    z3_fwd_n: np.ndarray
    z3_fwd_params: np.ndarray
    z3_bwd_n: np.ndarray
    z3_bwd_params: np.ndarray
    z3_rs_n: np.ndarray
    z3_rs_params: np.ndarray
    copy_gap: float               # seconds per copy kernel (the stack's launch gap)
    copy_rate: float              # bytes/s of the calls' HBM passes (the usable HBM rate)
    # layers that differ from the mean layer: each kind of a model with dense and MoE layers,
    # and ``mtp`` for a model with multi-token prediction (empty for one-kind models, whose
    # layers are all the mean layer)
    by_kind: Mapping[str, KindCostArrays] = field(default_factory=dict)

    ep_per_layer_recompute: np.ndarray = 0.0  # MoE all-to-all rounds redone (mean per layer)
    # PyTorch's ring attention (FrameworkProfile.cp_impl "torch"): seconds one layer's forward
    # and backward (with full recomputation its rerun forward's too) wait on the network
    # (ring_attention.torch_ring_stalls); cp_torch says the stack runs it
    cp_stall_fwd: np.ndarray = 0.0
    cp_stall_bwd: np.ndarray = 0.0
    cp_torch: bool = False
    recompute_cap: np.ndarray = 0.0          # block partial recompute: N layers per chunk, else 0
    layer_recompute_each: np.ndarray = 0.0   # then: one recomputed layer's extra forward
    # the routed experts' part of ``params_*``: their gradients are reduced over the
    # expert-data-parallel group (``strategies.placement.expert_sizes``), not the dense dp one
    # (``strategies.cost.comm.dp_collective_time``)
    expert_params_first: np.ndarray = 0.0
    expert_params_mid: np.ndarray = 0.0
    expert_params_last: np.ndarray = 0.0
    # sequence parallelism's backward re-gathers (``FrameworkProfile.sp_regather``): the bytes
    # of one (the forward all-gather's; 0 where none runs) and, per kind of re-gather, the
    # mean layer's share of it and the data-gradient GEMM seconds it overlaps
    # (``layer_time.regather_dgrad``: attention, dense fc1, shared experts' fc1);
    # ``sp_regather_exposed`` prices them
    rg_bytes: np.ndarray = 0.0
    rg_attn: np.ndarray = 0.0
    rg_attn2: np.ndarray = 0.0    # MLA's second column linear (kv_up); 0 without MLA
    rg_dense_n: np.ndarray = 0.0
    rg_dense: np.ndarray = 0.0
    rg_shared_n: np.ndarray = 0.0
    rg_shared: np.ndarray = 0.0
    # MLA's column-parallel down projections (core 0.12-0.13) re-gather their hidden-state
    # input too: the width of each (1 where that layout runs the projection, else 0) and its
    # data-gradient GEMM seconds (``layer_time.down_dgrad``), ``sp_regather_pieces``
    rg_down_qw: float = 0.0
    rg_down_kvw: float = 0.0
    rg_down_q: np.ndarray = 0.0
    rg_down_kv: np.ndarray = 0.0
    # their weight-gradient GEMMs' seconds (``layer_time.down_wgrad``): what each one's
    # input-gradient reduction runs beside where it is asynchronous (``rd_bytes`` > 0,
    # ``down_reduce_hidden``, §5.99)
    rd_down_q: np.ndarray = 0.0
    rd_down_kv: np.ndarray = 0.0
    # the column-parallel linears' data-gradient reductions run beside their weight-gradient
    # GEMMs (``FrameworkProfile.dgrad_overlap``): the bytes of one (a bf16 reduce-scatter
    # under SP, an all-reduce without; 0 where none overlaps: no such stack path, TP
    # overlap, a split backward) and the weight-gradient seconds of each piece
    # (``layer_time.column_wgrad``; shares ``rg_dense_n``/``rg_shared_n``);
    # ``dgrad_reduce_hidden`` prices them
    rd_bytes: np.ndarray = 0.0
    rd_attn: np.ndarray = 0.0
    rd_attn2: np.ndarray = 0.0
    # the attention block's weight-gradient seconds of the mean layer
    # (``layer_time.attention_wgrad``): Megatron-Core's ``delay_wgrad_compute`` runs a combined
    # pair's last backward layer's after the pair's backward message is posted
    # (``combined.pair_message_hiding``, the builder's ``combined_pair``; §5.87)
    dw_attn: np.ndarray = 0.0
    # the input width of the attention's column linears over the hidden size
    # (``layer_time.attention_column_widths``): what the two pieces above re-gather and reduce
    # is ``width`` times ``rg_bytes``/``rd_bytes`` (1 and 0 without MLA)
    attn_w: float = 1.0
    attn_w2: float = 0.0
    rd_dense: np.ndarray = 0.0
    rd_shared: np.ndarray = 0.0
    # the bytes of one hidden-width TP all-gather (the quantised norm output under SP in low
    # precision, ``tp_bytes`` otherwise; 0 with tp 1): with ``tp_bytes`` the one record
    # ``tp_kind_bytes`` reads each kind's bytes from (MLA's latent collectives, §5.81)
    tp_ag_bytes: np.ndarray = 0.0
    # MLA's up projections' forward rerun in the backward per mean layer (selective
    # ``mla_up_proj`` recomputation under SP: each re-gathers its latent, ``attn_rc_gathers``)
    tp_attn_rc: np.ndarray = 0.0
    # MLA's rope key under SP: its width over the hidden size (0 elsewhere), gathered in the
    # forward and reduce-scattered in the backward on its own (``attn_rope_time``)
    tp_rope_w: np.ndarray = 0.0
    # MLA's down projections column-parallel (``FrameworkProfile.mla_down_proj`` "column",
    # tp > 1): 1, else 0; their outputs' widths over the hidden size (``q_lora_rank``, 0
    # without a query down projection; ``kv_lora_rank + qk_rope_head_dim``), what the
    # forward gathers over tp (``attn_down_ops``)
    tp_down: np.ndarray = 0.0
    down_q_w: float = 0.0
    down_kv_w: float = 0.0
    # MLA's layers whose forward full recomputation reruns, per mean layer (its share of
    # the layers under ``recompute="full"``, tp > 1; else 0): their forward's own gathers
    # (the rope key's, the column-parallel down projections') rerun (``attn_full_rc_ops``)
    tp_attn_full_rc: np.ndarray = 0.0
    # bytes per layer of the gradients of MLA's tp-replicated, sequence-parallel-marked
    # parameters, all-reduced over tp once per step (``sp_grad_allreduce_bytes``)
    tp_rep_grad_bytes: np.ndarray = 0.0

    def __len__(self) -> int:
        return int(np.size(self.layer_fwd))


@dataclass(frozen=True)
class StageCosts:
    """Per-layer and per-stage costs of one job (seconds, bytes, parameters): one entry of
    ``StageCostArrays`` as Python numbers, with the per-stage values as tuples."""

    layer_fwd: float
    layer_bwd: float
    layer_recompute: float
    layer_wgrad: float
    attn_fwd: float
    attn_bwd: float
    embedding_fwd: float
    embedding_bwd: float
    head_fwd: float
    head_bwd: float
    embedding_wgrad: float
    head_wgrad: float
    tp_bytes: float
    tp_per_layer_fwd: float
    tp_per_layer_bwd: float
    tp_per_layer_recompute: float
    cp_bytes: float
    ep_bytes: float
    etp_bytes: float
    ep_remote_scale: float
    ep_nvlink_share: float
    p2p_bytes: float
    p2p_gather_bytes: float
    layer_params: float
    embedding_params: float
    head_params: float
    grad_bytes: float
    bucket_params: float
    tp_overlap_chunks: int
    tp_overlap_bwd_exposed: float  # FrameworkProfile.tp_overlap_bwd_exposed
    cp_exposed_fraction: float
    param_bytes: float
    params_by_stage: tuple[float, ...]     # parameters per GPU of each pipeline stage
    optimizer_by_stage: tuple[float, ...]  # optimizer step (+ weight quantisation) seconds
    passes_by_stage: tuple[float, ...] = ()  # per-step passes (strategies.cost.step), seconds
    # mean bytes per parameter of each stage's all-gather after the optimizer
    # (``gather_width``); empty: ``param_bytes``
    gather_by_stage: tuple[float, ...] = ()
    tied_bytes: float = 0.0                # tied embedding gradient, first <-> head stage
    z3_fwd_n: float = 0.0                  # per-tensor ZeRO-3 (StageCostArrays)
    z3_fwd_params: float = 0.0
    z3_bwd_n: float = 0.0
    z3_bwd_params: float = 0.0
    z3_rs_n: float = 0.0
    z3_rs_params: float = 0.0
    copy_gap: float = 0.0
    copy_rate: float = 0.0                 # bytes/s (StageCostArrays.copy_rate)
    by_kind: Mapping[str, KindCosts] = field(default_factory=dict)  # StageCostArrays.by_kind
    # the layers each chunk holds, by kind: chunk_kinds[stage][chunk] = ((kind, count), ...)
    # (strategies.layout.chunk_kinds); empty: every chunk holds the even split's mean layers
    chunk_kinds: tuple = ()

    ep_per_layer_recompute: float = 0.0  # MoE all-to-all rounds redone in the backward
    cp_stall_fwd: float = 0.0           # PyTorch's ring attention: network waits per layer
    cp_stall_bwd: float = 0.0           # (StageCostArrays)
    cp_torch: bool = False
    recompute_cap: float = 0.0          # block partial recompute: N layers per chunk, else 0
    layer_recompute_each: float = 0.0   # then: one recomputed layer's extra forward (seconds)
    # the routed experts' part of ``params_by_stage`` (reduced over the expert-DP group)
    expert_params_by_stage: tuple[float, ...] = ()
    rg_bytes: float = 0.0               # SP backward re-gathers (StageCostArrays)
    rg_attn: float = 0.0
    rg_attn2: float = 0.0
    rg_dense_n: float = 0.0
    rg_dense: float = 0.0
    rg_shared_n: float = 0.0
    rg_shared: float = 0.0
    rg_down_qw: float = 0.0             # column down projections' re-gathers (StageCostArrays)
    rg_down_kvw: float = 0.0
    rg_down_q: float = 0.0
    rg_down_kv: float = 0.0
    rd_down_q: float = 0.0              # their weight gradients (StageCostArrays)
    rd_down_kv: float = 0.0
    rd_bytes: float = 0.0               # async data-gradient reductions (StageCostArrays)
    rd_attn: float = 0.0
    rd_attn2: float = 0.0
    dw_attn: float = 0.0                # (StageCostArrays)
    rd_dense: float = 0.0
    rd_shared: float = 0.0
    attn_w: float = 1.0                 # (StageCostArrays)
    attn_w2: float = 0.0
    tp_ag_bytes: float = 0.0            # (StageCostArrays)
    tp_attn_rc: float = 0.0
    tp_rope_w: float = 0.0
    tp_down: float = 0.0                # (StageCostArrays)
    down_q_w: float = 0.0
    down_kv_w: float = 0.0
    tp_attn_full_rc: float = 0.0
    tp_rep_grad_bytes: float = 0.0

    def chunk_recompute(self, nl: float, chunk: float | None = None,
                        items: list[tuple[int, Any]] | None = None) -> tuple[float, float]:
        """(seconds, TP collectives) that ``nl`` layers of a model chunk of ``chunk`` layers
        (default ``nl``: the whole chunk) recompute in one backward: ``nl`` times the
        per-layer mean, or under block partial recomputation (``recompute_cap`` = N) the
        ``nl/chunk`` share of the chunk's ``min(N, chunk)`` layers at one full layer's cost
        each, exact per chunk of any size (uneven stages; ``strategies.cost.recompute``).
        ``items``: the ``nl`` layers as ``chunk_layers`` runs; then that share of each
        layer's own kind's recomputation (``layer_recompute_each`` of its record: a chunk of
        MoE layers redoes MoE layers, host time included), as the per-kind
        ``layer_recompute`` and the lower bound price it; a chunk of mixed kinds takes each
        kind's share of the ``min(N, chunk)`` layers, not the kinds of its first ``N``."""
        return self.chunk_recompute_comm(nl, chunk, items)[:2]

    def chunk_recompute_comm(self, nl: float, chunk: float | None = None,
                             items: list[tuple[int, Any]] | None = None
                             ) -> tuple[float, float, float]:
        """``chunk_recompute`` with the MoE all-to-all rounds (dispatch + combine, as
        ``ep_bytes`` counts them) the recomputed forward runs again."""
        if self.recompute_cap > 0:
            chunk = nl if chunk is None else chunk
            k = min(chunk, self.recompute_cap) * nl / chunk
            secs = k * self.layer_recompute_each if not items else sum(
                (k if n == nl else k * n / nl) * x.layer_recompute_each for n, x in items)
            return secs, 2.0 * k, k * (self.ep_bytes > 0)
        return (nl * self.layer_recompute, nl * self.tp_per_layer_recompute,
                nl * self.ep_per_layer_recompute)

    @property
    def w_share(self) -> float:
        """The weight gradient's share of a layer's compute per micro-batch,
        ``W / (F + B + W + recompute)`` (the ``w_share`` of ``Schedule.bubble_fraction``)."""
        total = self.layer_fwd + self.layer_bwd + self.layer_recompute
        return self.layer_wgrad / total if total > 0 else 0.0


def stage_cost_arrays(m: ModelSpec, cl: Cluster, dtype: str,
                      plans: PlanArrays | Mapping[str, Any],
                      framework: FrameworkProfile | str | None = None,
                      system: SystemConfig | None = None,
                      gpu: GPU | None = None) -> StageCostArrays:
    """The stage-cost record of every plan in ``plans`` (``PlanArrays`` or the search space's
    short columns) on ``cl`` in ``dtype`` with the ``framework`` profile and ``system``
    constants (defaults: Megatron-Core, ``DEFAULT_SYSTEM``), computed on ``gpu`` (default:
    the cluster's ``gpu``, its slowest type)."""
    P = as_plan_arrays(plans)
    fw, sy = get_profile(framework), get_system(system)
    gpu = cl.gpu if gpu is None else gpu
    tp, pp, dp, cp, ep, b = P.tp, P.pp, P.dp, P.cp, P.ep, P.mbs
    rc, zero, sp, flash, tpo = P.recompute, P.zero, P.sp, P.flash_attn, P.tp_comm_overlap
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
    slow = overlap_clock.overlap_slowdown(
        tp, tpo, cp, zero_g, overlap_clock.dp_overlaps_whole_step(copies, mb, ogr_g), paired)
    shard_acc = grad_time.accum_shard(copies, zero_g)
    # the dispatcher's copies per token (DeepEP/HybridEP send one per destination rank and
    # node; Megatron's alltoall one per expert)
    dedup_bytes, dedup_remote = ep_dispatch.ep_dedup(m, ep, etp, cl.gpus_per_node, P.moe_dispatcher,
                                                     P.moe_routing)
    # the dispatch's bytes per element (the stack's FP8 dispatch; the combine 16-bit)
    disp = moe_bytes.dispatch_element_bytes(fw.fp8_dispatch, dtype)
    n_tp = tp_collectives_per_layer(m.num_moe_layers / m.num_layers if m.is_moe else 0.0,
                                    ep, m.num_shared_experts)
    lt = layer_time.layer_time(m, b=b, tp=tp, cp=cp, ep=ep, sp=sp, flash=flash, recompute=rc,
                               gpu=gpu, dtype=dtype, tpo=tpo, fw=fw, slow=slow, shard=shard_acc,
                               system=sy, etp=etp, load=load, modules=P.recompute_modules,
                               dispatcher=P.moe_dispatcher, dedup=dedup_bytes,
                               graphed=P.cuda_graph, gathered=(zero == 3) & (copies > 1),
                               tp_pairs=n_tp, pad=pad)
    lpc = m.num_layers / (pp * P.vpp)

    def blocking_small(mm: ModelSpec) -> tuple[Any, Any]:
        """(forward, backward) seconds per mean layer of ``mm`` of the small collectives that
        block the compute stream: the alltoall dispatcher's count all-gather and
        probabilities' all-to-alls, HybridEP's routing-map all-gather where the dispatch is
        not ``paired`` (``comm.dispatcher_metadata_time``) and Transformer Engine's amax
        all-reduces (``amax.amax_reduction_time``)."""
        d_f, d_b = cm.dispatcher_metadata_time(mm, b, tp, cp, ep, etp, P.moe_dispatcher, cl,
                                               load, paired, pad)
        r_f, r_b = amax.amax_reduction_time(mm, lpc, tp, cp, dp, ep, sp, dtype, fw, cl, rc)
        return d_f + r_f, d_b + r_b

    md_f, md_b = blocking_small(m)
    a_f, a_b = attention_time.attention_time_fwd(m, b, tp, cp, flash, gpu, slow, fw, sy)
    g_f = slow * gemm_time.gemm_time_fwd(m, b, tp, cp, ep, gpu, dtype, tpo, sy, etp, load, fw, sp)
    head_f, head_b, head_w = embedding_head_time.lm_head_time_split(m, b, tp, cp, gpu, dtype, fw,
                                                                    slow, shard_acc, sy)
    emb_f = embedding_head_time.embedding_time(m, b, tp, cp, gpu, sy)
    emb_b = embedding_head_time.embedding_time_bwd(m, b, tp, cp, gpu, dtype, fw, shard_acc, sy)
    # the embedding's and the output's TP collectives on their stage (§5.84, §5.88): the
    # output's backward reduction hides under its weight-gradient GEMM where asynchronous
    end_ef, end_eb, end_hf, end_hb = tp_ends.tp_end_times(m, b, tp, cp, sp, gpu, cl, fw, sy,
                                                          head_w)
    emb_f, emb_b = emb_f + end_ef, emb_b + end_eb
    head_f, head_b = head_f + end_hf, head_b + end_hb
    cp_buf = comm_bytes.cp_gather_bytes(m, b, tp, cp, fw.cp_kv_heads)
    torch_cp = fw.cp_impl == "torch"
    st_f, st_b = ring.torch_ring_stalls(m, b, tp, cp, a_f, a_b, cl, fw.cp_kv_heads) \
        if torch_cp else (0.0, 0.0)
    st_b = st_b + np.where(rc == 2, st_f, 0.0)     # the recomputed forward's ring again
    p2p = comm_bytes.pp_p2p_bytes(m, b, tp, cp, sp)
    zeros = np.zeros(np.broadcast(tp, pp, dp, cp, ep, b).shape)
    shard = np.where(zero >= 1, copies, 1.0)
    # expert states are sharded over the expert-data-parallel group, tp·cp·dp/(etp·ep) ranks
    # (with hybrid sharding its grid within a replica: dp_shard in place of dp)
    shard_e = np.where(zero >= 1, placement.expert_dp_group(tp, cp, P.dp_shard, ep, etp)[0],
                       1.0)
    head_at = dispatch(P.schedule, "head_rank_array", pp, P.vpp)   # Schedule.ends
    mirrored = attr_by_code(P.schedule, "mirrored")                  # DualPipe: stages r, p-1-r
    # the layers each kind of rank holds: an uneven layout's (plan_arrays.rank_layers), else
    # the even split's l // p
    n_first, n_mid, n_last, _, uneven = rank_layers(m.num_layers, P)
    held = {k: np.where(uneven, n, m.num_layers // pp)
            for k, n in (("first", n_first), ("mid", n_mid), ("last", n_last))}
    # a model of dense and MoE layers or MTP modules: what each kind of rank holds by kind
    # (``layout.even_stage_content_arrays`` of the plans' columns: the even split, or the
    # search's first/last-stage counts and slots; "mid" is rank 1, the middle rank nearest
    # rank 0, whose data-parallel tail the least compute hides, ``analytic.rank_slack``;
    # DualPipe's ranks both copies), the parameters the memory model reads
    # (``param_counts.content_params``), so the estimate's per-rank data-parallel traffic and
    # optimizer read the layers the rank holds, not the even split's mean layer
    content = dict.fromkeys(("first", "mid", "last"))
    if mixed_layers(m):
        lay = (P.first_stage_layers, P.last_stage_layers, P.account_slots)
        for k, r in (("first", 0 * pp), ("mid", np.minimum(1, pp - 1)), ("last", pp - 1)):
            have = even_stage_content_arrays(m, P.schedule, pp, P.vpp, r, *lay, strict=False)
            mirror = even_stage_content_arrays(m, P.schedule, pp, P.vpp, pp - 1 - r, *lay,
                                               strict=False)
            both = np.asarray(mirrored, dtype=bool) & (pp > 1)
            content[k] = {x: have[x] + np.where(both, mirror[x], 0.0) for x in have}

    def params_split(k: str, s: Any) -> tuple[Any, Any]:
        mean = param_counts.stage_params_split(m, tp, ep, pp, s, layers=held[k], head_stage=head_at,
                                               mirrored=mirrored, etp=etp)
        if content[k] is None:
            return mean
        # (a plan whose columns give no layout, NaN: a job's layout string, which
        # ``stage_costs`` and the scalar estimate read instead; the mean layers here)
        known = np.isfinite(content[k]["dense"])
        own = param_counts.stage_params_split(m, tp, ep, pp, s, layers=held[k], head_stage=head_at,
                                              mirrored=mirrored, etp=etp,
                                              content={x: np.where(known, n, 0.0)
                                                       for x, n in content[k].items()})
        return tuple(np.where(known, o, e) for o, e in zip(own, mean))
    split = {k: params_split(k, s) for k, s in (("first", 0), ("mid", -1), ("last", pp - 1))}
    params = {k: d + e + zeros for k, (d, e) in split.items()}
    # the embedding and the LM head each kind of rank holds (never quantised)
    ends = {k: param_counts.stage_params_split(m, tp, ep, pp, s, layers=0, head_stage=head_at,
                                               mirrored=mirrored, etp=etp)[0]
            for k, s in (("first", 0), ("mid", -1), ("last", pp - 1))}
    w_cast = elementwise_time.weight_cast_time(
        param_counts.layer_params_per_gpu(m, tp, ep, etp) * m.num_layers / pp, gpu, dtype, sy) \
        * quantise.weight_cast_passes(fw.weight_cast_per_forward, mb, rc)
    opt = {k: grad_time.optimizer_time(d / shard + e / shard_e, gpu, sy, fw) + w_cast + zeros
           for k, (d, e) in split.items()}
    # the per-step passes over the gradient buffer a GPU holds and the shard it updates, the
    # dense and the expert parameters each over its own group (reducing once per step, the
    # stack's passes over the unsharded gradient run once, before that reduce-scatter, §3.14)
    passes = {k: steps.stage_pass_time(params[k], e + zeros, tp, cp, dp, ep, etp, zero, zero_g,
                                       once, fw, gpu, dtype, sy, P.dp_shard)
              for k, (_, e) in split.items()}

    def full(x):
        return np.asarray(x, dtype=float) + zeros

    widths = layer_time.attention_column_widths(m)
    ag_w = quantise.tp_allgather_bytes_factor(dtype, sp)   # an all-gather's bytes over bf16

    # partial full recomputation (recompute_layers): the share of a chunk's layers redone,
    # on the mean chunk of l/(p·v) layers (strategies.cost.recompute)
    share = rcp.plan_share(m.num_layers, P)
    cap = np.where((rc == 2) & (P.recompute_method == rcp.METHOD_CODE["block"]),
                   P.recompute_layers, 0.0)

    def kind_arrays(mk: ModelSpec) -> KindCostArrays:
        """One layer of ``mk``'s (a ``ModelSpec.of_kind`` view's) only kind."""
        ltk = layer_time.layer_time(mk, b=b, tp=tp, cp=cp, ep=ep, sp=sp, flash=flash,
                                    recompute=rc, gpu=gpu, dtype=dtype, tpo=tpo, fw=fw, slow=slow,
                                    shard=shard_acc, system=sy, etp=etp, load=load,
                                    modules=P.recompute_modules,
                                    dispatcher=P.moe_dispatcher, dedup=dedup_bytes,
                                    graphed=P.cuda_graph, gathered=(zero == 3) & (copies > 1),
                                    tp_pairs=tp_collectives_per_layer(
                                mk.num_moe_layers / mk.num_layers if mk.is_moe else 0.0, ep,
                                mk.num_shared_experts), pad=pad)
        ak_f, ak_b = attention_time.attention_time_fwd(mk, b, tp, cp, flash, gpu, slow, fw, sy)
        dense_p, expert_p = param_counts.layer_params_split(mk, tp, ep, etp)
        mk_f, mk_b = blocking_small(mk)
        return KindCostArrays(
            layer_fwd=full(ltk.fwd + mk_f), layer_bwd=full(ltk.bwd + mk_b),
            layer_wgrad=full(ltk.wgrad),
            layer_recompute=full(share * ltk.recompute), attn_fwd=full(ak_f),
            attn_bwd=full(ak_b),
            ep_bytes=np.where(ep > 1, ep_dispatch.ep_alltoall_bytes_fwd(mk, b, tp, cp, ep, load,
                                                                        disp) * dedup_bytes, 0.0)
            + zeros, layer_params=full(dense_p + expert_p), expert_params=full(expert_p),
            layer_recompute_each=full(np.where(cap > 0, ltk.recompute, 0.0)))

    by_kind: dict[str, KindCostArrays] = {}
    kinds = [k for k, n in m.layer_counts().items() if n]
    if len(kinds) > 1:
        by_kind = {k: kind_arrays(m.of_kind(k)) for k in kinds}
    if m.num_nextn_predict_layers:
        k = "moe" if m.is_moe else "dense"
        layer = by_kind.get(k) or kind_arrays(m.of_kind(k))
        by_kind["mtp"] = mtp_arrays(m, layer, b, tp, cp, ep, tpo, gpu, dtype, slow, sy,
                                    (head_f, head_b, head_w), full, etp)
    per_tensor = (zero == 3) & (copies > 1) & (fw.zero3_gather == "per-tensor")
    if np.any(per_tensor):
        z3 = param_counts.zero3_tensor_gathers(m, tp, ep, pp, rc == 2, fw.zero3_reuse_params)
        z3 = {k: np.where(per_tensor, v, 0.0) + zeros for k, v in z3.items()}
    else:   # no plan gathers one tensor at a time: every count 0, without the tensor walk
        #     (a loop over each layer's tensors, ~800 with DeepSeek-V3's 256 experts)
        z3 = {k: np.where(per_tensor, 0.0, 0.0) + zeros for k in Z3_KEYS}

    return StageCostArrays(
        layer_fwd=full(lt.fwd + md_f), layer_bwd=full(lt.bwd + md_b),
        layer_recompute=full(share * lt.recompute),
        recompute_cap=full(cap), layer_recompute_each=full(np.where(cap > 0, lt.recompute, 0.0)),
        # the MoE dispatch and combine again: full recompute (its share of the layers) and the
        # moe module (the whole MoE layer is checkpointed); op is left as it was
        ep_per_layer_recompute=np.where(ep > 1, np.where(rc == 2, share, np.where(
            rcp.part_selected(rc, P.recompute_modules, "routed_mlp"), 1.0, 0.0)), 0.0) + zeros,
        layer_wgrad=full(lt.wgrad), embedding_wgrad=full(emb_b), head_wgrad=full(head_w),
        attn_fwd=full(a_f), attn_bwd=full(a_b), gemm_fwd=full(g_f), slowdown=full(slow),
        embedding_fwd=full(emb_f), embedding_bwd=full(emb_b),
        head_fwd=full(head_f), head_bwd=full(head_b),
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
        ep_bytes=np.where(ep > 1, ep_dispatch.ep_alltoall_bytes_fwd(m, b, tp, cp, ep, load, disp)
                          * dedup_bytes, 0.0) + zeros,
        etp_bytes=np.where((etp > 1) & (ep > 1), ep_dispatch.etp_bytes_fwd(m, b, tp, cp, ep, etp,
                                                                           load), 0.0)
        + zeros,
        ep_remote_scale=dedup_remote + zeros,
        ep_nvlink_share=ep_dispatch.ep_nvlink_share(P.moe_dispatcher) + zeros,
        p2p_bytes=np.where(pp > 1, p2p, 0.0) + zeros,
        p2p_gather_bytes=np.where((pp > 1) & (tp > 1) & ~sp, p2p * tp, 0.0) + zeros,
        layer_params=full(param_counts.layer_params_per_gpu(m, tp, ep, etp)),
        embedding_params=full(param_counts.embedding_params_per_gpu(m, tp)),
        # the head's rank: a tied head on the embedding's rank (a V, DualPipe) is one tensor
        head_params=full(param_counts.head_params_per_gpu(m, tp, pp, (head_at == 0) | mirrored)),
        params_first=params["first"], params_mid=params["mid"], params_last=params["last"],
        expert_params_first=split["first"][1] + zeros, expert_params_mid=split["mid"][1] + zeros,
        expert_params_last=split["last"][1] + zeros,
        optimizer_first=opt["first"], optimizer_mid=opt["mid"], optimizer_last=opt["last"],
        passes_first=passes["first"], passes_mid=passes["mid"], passes_last=passes["last"],
        # (DualPipe's mirror all-reduce already sums the end ranks' embedding and head copies)
        tied_bytes=np.where(mirrored, 0.0,
                            steps.tied_grad_bytes(m, tp, pp, head_at, fw.step, dtype, sy)) + zeros,
        grad_bytes=sy.main_grad_bytes(dtype), param_bytes=float(sy.param_bytes),
        **{f"gather_{k}": gather_width(params[k], ends[k], sy) + zeros for k in params},
        # the stack's bucket rule at each plan's dp (docs/calibration.md §5.86)
        bucket_params=stack_system(fw, sy).dp_bucket_params(dp) + zeros,
        tp_overlap_chunks=int(sy.tp_overlap_chunks),
        tp_overlap_bwd_exposed=float(fw.tp_overlap_bwd_exposed),
        cp_exposed_fraction=cp_exposed_fraction(fw.cp_impl, sy.cp_exposed_fraction),
        cp_stall_fwd=full(st_f), cp_stall_bwd=full(st_b), cp_torch=torch_cp,
        z3_fwd_n=z3["fwd_n"], z3_fwd_params=z3["fwd_params"], z3_bwd_n=z3["bwd_n"],
        z3_bwd_params=z3["bwd_params"], z3_rs_n=z3["rs_n"], z3_rs_params=z3["rs_params"],
        copy_gap=float(fw.launch_gap_s), copy_rate=float(usable_hbm(gpu, sy)), by_kind=by_kind,
        # SP's backward re-gathers: the forward all-gather's bytes again, on stacks that save
        # the local shard (``FrameworkProfile.sp_regather``)
        rg_bytes=np.where((tp > 1) & sp & fw.sp_regather, comm_bytes.tp_comm_bytes_fwd(m, b, cp)
                          * quantise.tp_allgather_bytes_factor(dtype, sp), 0.0) + zeros,
        rg_attn=full(lt.regather[0][1]),
        rg_attn2=full(lt.regather[1][1] if len(lt.regather) > 3 else 0.0),
        rg_dense_n=full(lt.regather[-2][0]),
        rg_dense=full(lt.regather[-2][1]), rg_shared_n=full(lt.regather[-1][0]),
        rg_shared=full(lt.regather[-1][1]),
        rg_down_qw=1.0 if m.is_mla and m.q_lora_rank and fw.mla_down_proj == "column" else 0.0,
        rg_down_kvw=1.0 if m.is_mla and fw.mla_down_proj == "column" else 0.0,
        rg_down_q=full(lt.down_dgrad[0]), rg_down_kv=full(lt.down_dgrad[1]),
        rd_down_q=full(lt.down_wgrad[0]), rd_down_kv=full(lt.down_wgrad[1]),
        # the column-parallel data gradients' reductions, asynchronous beside the weight
        # gradient where the stack's path does it and the backward is whole (a split one
        # defers the weight gradient; TP overlap prices its own, ``tp_overlap_bwd_exposed``)
        rd_bytes=np.where((tp > 1) & ~np.asarray(tpo, dtype=bool)
                          & ~attr_by_code(P.schedule, "splits_backward").astype(bool)
                          & ((fw.dgrad_overlap == "all") | ((fw.dgrad_overlap == "sp") & sp)),
                          comm_bytes.tp_comm_bytes_fwd(m, b, cp), 0.0) + zeros,
        rd_attn=full(lt.col_wgrad[0]),
        rd_attn2=full(lt.col_wgrad[1] if len(lt.col_wgrad) > 3 else 0.0),
        rd_dense=full(lt.col_wgrad[-2]), rd_shared=full(lt.col_wgrad[-1]),
        dw_attn=full(lt.attn_wgrad),
        attn_w=widths[0], attn_w2=widths[1] if len(widths) > 1 else 0.0,
        tp_ag_bytes=np.where(tp > 1, comm_bytes.tp_comm_bytes_fwd(m, b, cp)
                             * quantise.tp_allgather_bytes_factor(dtype, sp), 0.0) + zeros,
        tp_attn_rc=np.where((tp > 1) & sp & m.is_mla
                            & rcp.part_selected(rc, P.recompute_modules, "mla_up"), 1.0, 0.0)
        + zeros,
        # (column-parallel down projections gather the rope key inside the kv latent)
        tp_rope_w=np.where((tp > 1) & sp & m.is_mla & (fw.mla_down_proj != "column"),
                           (m.qk_rope_head_dim or 0) / m.hidden_size, 0.0) + zeros,
        tp_down=np.where((tp > 1) & m.is_mla & (fw.mla_down_proj == "column"), 1.0, 0.0)
        + zeros,
        tp_attn_full_rc=np.where((tp > 1) & m.is_mla & (rc == 2), share, 0.0) + zeros,
        # the replicated down projections (and the latents' norms; with column-parallel
        # down projections the norms only) under SP, in main-gradient bytes
        tp_rep_grad_bytes=np.where((tp > 1) & sp & m.is_mla, sy.main_grad_bytes(dtype) * (
            m.tp_replicated_params() if fw.mla_down_proj == "replicated"
            else (m.q_lora_rank or 0) + (m.kv_lora_rank or 0)), 0.0) + zeros,
        down_q_w=(m.q_lora_rank or 0) / m.hidden_size if m.is_mla else 0.0,
        down_kv_w=((m.kv_lora_rank or 0) + (m.qk_rope_head_dim or 0)) / m.hidden_size
        if m.is_mla else 0.0)


def mixes_kinds(m: ModelSpec) -> bool:
    """Whether ``m``'s layers are of more than one kind (dense and MoE layers, or a
    multi-token-prediction module beside them): the record then has ``by_kind`` entries and
    a pipeline's stages differ by the kinds they hold, which the plan columns' mean layer
    cannot say (``estimate.scalar.by_chunk``, ``estimate.kinds``)."""
    return sum(1 for n in m.layer_counts().values() if n) > 1 \
        or bool(m.num_nextn_predict_layers)


def mtp_arrays(m: ModelSpec, layer: KindCostArrays, b, tp, cp, ep, tpo, gpu: GPU, dtype: str,
               slow, sy: SystemConfig, head: tuple, full, etp=None) -> KindCostArrays:
    """One multi-token-prediction module (DeepSeek-V3 §2.2; Megatron's ``m`` slot): the
    ``2h -> h`` projection of the normed hidden state and the next token's embedding (a
    column-parallel GEMM over ``tp``; its backward, data and weight gradient, twice its
    forward), one transformer ``layer`` and a pass through the shared LM head and the loss
    (``head``: the LM head's forward, backward and weight-gradient seconds). Parameters:
    ``param_counts.mtp_params_split``."""
    h = m.hidden_size
    T = token_counts.tokens_per_gpu(b, m.seq_length, cp)
    proj = slow * gemm_time.gemms_time_fwd([(1, T, h / tp, 2 * h, False)], tp, gpu, dtype, tpo, sy)
    head_f, head_b, head_w = head
    d_mtp, e_mtp = param_counts.mtp_params_split(m, tp, ep, etp)
    return KindCostArrays(
        layer_fwd=full(layer.layer_fwd + proj + head_f),
        layer_bwd=full(layer.layer_bwd + 2 * proj + head_b),
        layer_wgrad=full(layer.layer_wgrad + proj + head_w),
        layer_recompute=layer.layer_recompute, attn_fwd=layer.attn_fwd,
        attn_bwd=layer.attn_bwd, ep_bytes=layer.ep_bytes,
        layer_params=full(d_mtp + e_mtp), expert_params=full(e_mtp),
        layer_recompute_each=layer.layer_recompute_each)


def gather_width(params: Any, ends: Any, sy: SystemConfig) -> Any:
    """Mean bytes per parameter of a rank's data-parallel all-gather after the optimizer:
    its ``params`` less the embedding and LM head it holds (``ends``, never quantised) at
    ``sy.gather_bytes()``, ``ends`` at ``sy.param_bytes``; ``param_bytes`` itself where the
    stack states no narrower gather. Vectorised."""
    pb, g = float(sy.param_bytes), sy.gather_bytes()
    if g == pb:
        return np.full(np.shape(params), pb)[()]
    p = np.asarray(params, dtype=float)
    e = np.minimum(np.asarray(ends, dtype=float), p)
    return np.where(p > 0, (g * (p - e) + pb * e) / np.maximum(p, 1e-30), g)[()]


def stage_costs_at(arrays: StageCostArrays, i: int, pp: int) -> StageCosts:
    """Entry ``i`` (a plan with ``pp`` stages) of ``arrays`` as a ``StageCosts`` record."""
    def f(name: str) -> float:
        return float(getattr(arrays, name)[i])

    def stage(kind: str, s: int) -> float:
        which = "first" if s == 0 else "last" if s == pp - 1 else "mid"
        return f(f"{kind}_{which}")

    return StageCosts(
        layer_fwd=f("layer_fwd"), layer_bwd=f("layer_bwd"), layer_recompute=f("layer_recompute"),
        layer_wgrad=f("layer_wgrad"), embedding_wgrad=f("embedding_wgrad"),
        head_wgrad=f("head_wgrad"),
        attn_fwd=f("attn_fwd"), attn_bwd=f("attn_bwd"),
        embedding_fwd=f("embedding_fwd"), embedding_bwd=f("embedding_bwd"),
        head_fwd=f("head_fwd"), head_bwd=f("head_bwd"), tp_bytes=f("tp_bytes"),
        tp_per_layer_fwd=float(arrays.tp_per_layer_fwd[i]),
        tp_per_layer_bwd=float(arrays.tp_per_layer_bwd[i]),
        tp_per_layer_recompute=f("tp_per_layer_recompute"),
        recompute_cap=f("recompute_cap"), layer_recompute_each=f("layer_recompute_each"),
        ep_per_layer_recompute=f("ep_per_layer_recompute"),
        cp_stall_fwd=f("cp_stall_fwd"), cp_stall_bwd=f("cp_stall_bwd"),
        cp_torch=bool(arrays.cp_torch),
        cp_bytes=f("cp_bytes"), ep_bytes=f("ep_bytes"), etp_bytes=f("etp_bytes"),
        ep_remote_scale=f("ep_remote_scale"), ep_nvlink_share=f("ep_nvlink_share"),
        p2p_bytes=f("p2p_bytes"),
        p2p_gather_bytes=f("p2p_gather_bytes"), layer_params=f("layer_params"),
        embedding_params=f("embedding_params"), head_params=f("head_params"),
        grad_bytes=arrays.grad_bytes, bucket_params=f("bucket_params"),
        tp_overlap_chunks=arrays.tp_overlap_chunks,
        tp_overlap_bwd_exposed=arrays.tp_overlap_bwd_exposed,
        cp_exposed_fraction=arrays.cp_exposed_fraction, param_bytes=arrays.param_bytes,
        params_by_stage=tuple(stage("params", s) for s in range(pp)),
        gather_by_stage=tuple(stage("gather", s) for s in range(pp)),
        expert_params_by_stage=tuple(stage("expert_params", s) for s in range(pp)),
        optimizer_by_stage=tuple(stage("optimizer", s) for s in range(pp)),
        passes_by_stage=tuple(stage("passes", s) for s in range(pp)),
        tied_bytes=f("tied_bytes"),
        rg_bytes=f("rg_bytes"), rg_attn=f("rg_attn"), rg_attn2=f("rg_attn2"),
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
        by_kind={k: KindCosts(**{f: float(getattr(v, f)[i]) for f in KindCosts.__dataclass_fields__})
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
    arrays = stage_cost_arrays(job.model, job.cluster, job.dtype,
                               PlanArrays.from_plans([p]), job.framework, sy, gpu=gpu)
    rec = stage_costs_at(arrays, 0, p.pp)
    lay = job.layout
    if lay.uniform and not rec.by_kind:
        return rec
    kinds = tuple(tuple(tuple(chunk_kinds(job.model, lay, s, c).items()) for c in range(p.vpp))
                  for s in range(p.pp))
    rec = replace(rec, chunk_kinds=kinds)
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
    return replace(rec, params_by_stage=params, optimizer_by_stage=opt, passes_by_stage=passes,
                   expert_params_by_stage=tuple(e for _, e in split), gather_by_stage=gather)


def chunk_layers(c: StageCosts, stage: int, chunk: int, layers: int) -> list[tuple[int, Any]]:
    """``(count, per-layer costs)`` of the layers ``stage``'s ``chunk`` holds: each kind's
    record (``by_kind``; the mean layer ``c`` itself for a model of one kind), or ``layers``
    mean layers where ``chunk_kinds`` is empty (the even split). A chunk's time, bytes and
    parameters are ``sum(n * x.field for n, x in chunk_layers(...))``."""
    if not c.chunk_kinds:
        return [(layers, c)]
    return [(n, c.by_kind.get(k, c)) for k, n in c.chunk_kinds[stage][chunk]]


def chunk_sum(items: list[tuple[int, Any]], f) -> float:
    """``sum(n * f(x))`` over ``chunk_layers`` items (``f``: a per-layer figure)."""
    if len(items) == 1:                # the common case, without a generator (same sum)
        n, x = items[0]
        return 0 + n * f(x)
    return sum(n * f(x) for n, x in items)


def stage_params(job: Job, c: StageCosts, stage: int) -> float:
    """Parameters per GPU of pipeline rank ``stage`` (``stage_params_split``, summed)."""
    dense, expert = stage_params_split(job, c, stage)
    return dense + expert


def tp_collectives_per_layer(moe_share: token_counts.Num, ep: token_counts.Num,
                             shared_experts: int) -> token_counts.Num:
    """Tensor-parallel collectives (or SP pairs) per layer and pass: the attention's and the
    MLP's; a MoE layer under expert parallelism has no MLP one unless a shared expert needs
    it (the routed tokens travel by the all-to-all and the etp collectives, ``etp_bytes``).
    ``moe_share``: the share of MoE layers (1 for one MoE layer, 0 for a dense one, the
    model's share for its mean layer)."""
    return 2.0 - np.where((np.asarray(ep) > 1) & (shared_experts == 0), moe_share, 0.0)


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
