"""The stage-cost record of many plans (``StageCostArrays``: numpy arrays, one entry per
plan) and of one layer of each kind in it (``KindCostArrays``), as ``stage_cost_arrays``
computes them and the analytic estimate and the lower bound read them.

Each backward (``layer_bwd``, ``head_bwd``, ``embedding_bwd``) is the whole pass, ``B + W``;
``*_wgrad`` is its weight-gradient part ``W`` (``strategies.cost.layer_time.layer_time``).
Units: seconds per layer (or per stage) and per micro-batch on one GPU; bytes; parameters."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np


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
    # the layer's MLP with its norm, whose gradients its backward completes before the
    # attention's (``param_counts.layer_lead_split``): parameters on one GPU and share of the
    # GEMM work; 0 (an MTP module): the layer's gradients complete together at its end
    layer_lead_params: np.ndarray = 0.0
    layer_lead_work: np.ndarray = 0.0
    # activation offloading's exposed copies in layer_fwd / layer_bwd (the breakdown's
    # ``offload``; ``cost.stage.offload_time.with_offload``)
    layer_offload_fwd: np.ndarray = 0.0
    layer_offload_bwd: np.ndarray = 0.0


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
    ep_remote_scale: np.ndarray   # share of the all-to-all's bytes between nodes (DeepEP/HybridEP)
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
    tp_overlap_bwd_exposed: float  # async_tp.overlap_exposed: FrameworkProfile's, or 1 rowwise
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
    # TE's all-to-all CP (FrameworkProfile.cp_impl "a2a", §5.185): cp_a2a says the stack runs
    # it (cp_bytes then the Q/K/V all-to-all's bytes); the output's all-to-all's bytes
    cp_a2a: bool = False
    cp_out_bytes: np.ndarray = 0.0
    # Megatron-Core's a2a+p2p (§5.189, ``cost.cp_hier``): cp_hier says the stack runs it
    # (cp_bytes then the ring's K/V at (t·k, c/k), cp_out_bytes the O all-to-all's); the
    # Q/K/V all-to-all's bytes; the all-to-all's group size k (the plan's hierarchical_cp)
    cp_hier: bool = False
    cp_qkv_bytes: np.ndarray = 0.0
    cp_a2a_size: np.ndarray = 1.0
    # the all-to-alls call by call (``cp_a2a.exchange_waits``, §5.191): Q's, K's and V's shares
    # of the Q/K/V bytes (``cp_a2a.qkv_parts``: one call each) and the output-size tensors the
    # backward sends before its kernel (``cp_hier.bwd_out_tensors``: dO, with the saved output
    # before TE 2.8 / 2.15)
    cp_qkv_parts: tuple = (1.0, 0.0, 0.0)
    cp_bwd_out: float = 1.0
    # attention forwards per layer whose CP exchange recomputation reruns
    # (``recompute.cp_reruns``, §5.187): the waits' rules add that many forward waits
    cp_per_layer_recompute: np.ndarray = 0.0
    # seconds of attention core each rerun's exchange runs beside (``recompute.cp_rerun_window``)
    cp_rerun_attn: np.ndarray = 0.0
    # the forward's share of the TP collectives TP overlap leaves blocking whole
    # (``async_tp.overlap_exposed``: the rowwise recipe's all-gathers under async TP)
    tp_overlap_fwd_exposed: float = 0.0
    recompute_cap: np.ndarray = 0.0          # block partial recompute: N layers per chunk, else 0
    layer_recompute_each: np.ndarray = 0.0   # then: one recomputed layer's extra forward
    # the routed experts' part of ``params_*``: their gradients are reduced over the
    # expert-data-parallel group (``strategies.placement.expert_sizes``), not the dense dp one
    # (``strategies.cost.comm.dp_collective_time``)
    expert_params_first: np.ndarray = 0.0
    expert_params_mid: np.ndarray = 0.0
    expert_params_last: np.ndarray = 0.0
    # the mean layer's lead (``KindCostArrays.layer_lead_params``, ``layer_lead_work``)
    layer_lead_params: np.ndarray = 0.0
    layer_lead_work: np.ndarray = 0.0
    # the exposed copies of activation offloading that layer_fwd / layer_bwd hold (the step
    # breakdown's ``offload``; ``cost.stage.offload_time.with_offload``)
    layer_offload_fwd: np.ndarray = 0.0
    layer_offload_bwd: np.ndarray = 0.0
    # sequence parallelism's backward re-gathers (``FrameworkProfile.sp_regather``): the bytes
    # of one (the forward all-gather's; 0 where none runs) and, per kind of re-gather, the
    # mean layer's share of it and the data-gradient GEMM seconds it overlaps
    # (``layer_time.regather_dgrad``: attention, dense fc1, shared experts' fc1);
    # ``sp_regather_exposed`` prices them
    rg_bytes: np.ndarray = 0.0
    #: the mean layer's column-parallel linears on the hidden state beside the MLP's: its
    #: attention blocks' (1 a layer) and a hybrid model's Mamba-2 in_proj (their shares)
    rg_attn_n: float = 1.0
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

