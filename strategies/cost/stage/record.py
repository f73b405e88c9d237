"""The stage-cost record of one job (``StageCosts``: one entry of ``StageCostArrays`` as
Python numbers, with the per-stage values as tuples) and of one layer of each kind in it
(``KindCosts``), as ``stage_costs`` computes them and the scalar estimate and the
simulator's compiler read them. ``StageCosts`` is frozen; tests may ``dataclasses.replace``
fields (e.g. zero the embedding and the LM head to get perfectly balanced stages).

A schedule that splits the backward runs ``B`` in ``*_bwd - *_wgrad`` and ``W`` in
``*_wgrad`` (docs/schedules.md, "Split backward"). Units: seconds per layer (or per stage)
and per micro-batch on one GPU; bytes; parameters."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np


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
    layer_lead_params: float = 0.0      # KindCostArrays.layer_lead_params
    layer_lead_work: float = 0.0
    layer_offload_fwd: float = 0.0      # KindCostArrays.layer_offload_fwd
    layer_offload_bwd: float = 0.0



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
    tp_overlap_bwd_exposed: float  # async_tp.overlap_exposed: FrameworkProfile's, or 1 rowwise
    cp_exposed_fraction: float
    param_bytes: float
    params_by_stage: tuple[float, ...]     # parameters per GPU of each pipeline stage
    optimizer_by_stage: tuple[float, ...]  # optimizer step (+ weight quantisation) seconds
    passes_by_stage: tuple[float, ...] = ()  # per-step passes (strategies.cost.step), seconds
    # mean bytes per parameter of each stage's all-gather after the optimizer
    # (``gather_width``); empty: ``param_bytes``
    gather_by_stage: tuple[float, ...] = ()
    tied_bytes: float = 0.0                # tied embedding gradient, first <-> head stage
    layer_offload_fwd: float = 0.0         # StageCostArrays.layer_offload_fwd (in layer_fwd)
    layer_offload_bwd: float = 0.0
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
    cp_a2a: bool = False                # TE's all-to-all CP (StageCostArrays)
    cp_out_bytes: float = 0.0
    cp_hier: bool = False               # Megatron-Core's a2a+p2p (StageCostArrays)
    cp_qkv_bytes: float = 0.0
    cp_a2a_size: float = 1.0
    cp_qkv_parts: tuple = (1.0, 0.0, 0.0)  # Q, K, V shares of the Q/K/V bytes (StageCostArrays)
    cp_bwd_out: float = 1.0             # output-size tensors before the backward's kernel
    cp_per_layer_recompute: float = 0.0  # CP exchanges the recomputation reruns (StageCostArrays)
    cp_rerun_attn: float = 0.0          # the attention core beside each (StageCostArrays)
    tp_overlap_fwd_exposed: float = 0.0  # StageCostArrays.tp_overlap_fwd_exposed
    recompute_cap: float = 0.0          # block partial recompute: N layers per chunk, else 0
    layer_recompute_each: float = 0.0   # then: one recomputed layer's extra forward (seconds)
    # the routed experts' part of ``params_by_stage`` (reduced over the expert-DP group)
    expert_params_by_stage: tuple[float, ...] = ()
    layer_lead_params: float = 0.0      # StageCostArrays.layer_lead_params
    layer_lead_work: float = 0.0
    rg_bytes: float = 0.0               # SP backward re-gathers (StageCostArrays)
    rg_attn_n: float = 1.0
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
            secs, k = block_recompute(self, nl, chunk, items)
            return secs, 2.0 * k, k * (self.ep_bytes > 0)
        return (nl * self.layer_recompute, nl * self.tp_per_layer_recompute,
                nl * self.ep_per_layer_recompute)

    def chunk_cp_reruns(self, nl: float, chunk: float | None = None) -> float:
        """Recomputed attention forwards of ``nl`` layers of a chunk of ``chunk`` whose
        context-parallel exchange runs again (``cp_per_layer_recompute``; under block partial
        recomputation, its ``min(N, chunk)`` layers' share, ``block_recompute``)."""
        if self.recompute_cap > 0 and self.cp_per_layer_recompute > 0:
            return float(block_recompute(self, nl, chunk)[1])
        return nl * self.cp_per_layer_recompute

    def rerun_tp_exposed(self, nl: float, n_tp: float) -> float:
        """Share of a recomputation's ``n_tp`` TP collectives (``chunk_recompute_comm`` of
        ``nl`` layers) that TP overlap leaves blocking whole: the rerun forward's all-gathers
        where async TP does not fuse them (``tp_overlap_fwd_exposed`` of each layer's
        forward collectives: op SAC and full recomputation rerun every all-gather), else 0."""
        if n_tp <= 0 or self.tp_overlap_fwd_exposed <= 0:
            return 0.0
        return min(1.0, nl * self.tp_overlap_fwd_exposed * self.tp_per_layer_fwd / n_tp)

    @property
    def w_share(self) -> float:
        """The weight gradient's share of a layer's compute per micro-batch,
        ``W / (F + B + W + recompute)`` (the ``w_share`` of ``Schedule.bubble_fraction``)."""
        total = self.layer_fwd + self.layer_bwd + self.layer_recompute
        return self.layer_wgrad / total if total > 0 else 0.0


def block_recompute(c: Any, nl: Any, chunk: Any = None,
                    items: list[tuple[Any, Any]] | None = None) -> tuple[Any, Any]:
    """(seconds, layers) that ``nl`` layers of a model chunk of ``chunk`` layers (default
    ``nl``) recompute in one backward under block partial recomputation (``recompute_cap``
    = N > 0): the ``nl/chunk`` share of the chunk's ``min(N, chunk)`` layers at one full
    layer's cost each (``layer_recompute_each``; with ``items``, the ``nl`` layers as
    ``chunk_layers`` runs them, each kind's share at its own record's). ``c``: a
    ``StageCosts`` (one plan, Python numbers: ``StageCosts.chunk_recompute``) or a record of
    the same fields as arrays over plans (``estimate.mixed_stages``)."""
    chunk = nl if chunk is None else chunk
    cap = c.recompute_cap
    k = (min(chunk, cap) if np.ndim(cap) == 0 else np.minimum(chunk, cap)) * nl / chunk
    secs = k * c.layer_recompute_each if not items else sum(
        (k if n == nl else k * n / nl) * x.layer_recompute_each for n, x in items)
    return secs, k
