"""Compute time of one layer for one micro-batch on one GPU (``layer_time``, a ``LayerTime``):
forward, backward (with its weight-gradient part), recomputation, and the GEMM seconds each
overlapped collective runs beside; summed from ``gemm_time``, ``attention_time``,
``elementwise_time``, ``grad_time`` and ``moe_time`` (the efficiency model and every
constant: docs/calibration.md). Every function broadcasts over numpy arrays of plan fields.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strategies.cost import async_tp
from strategies.cost import dsv4_cost, elementwise_bytes, gemm_shapes, moe_bytes, param_counts
from strategies.cost import measured
from strategies.cost import recompute as rcp
from strategies.cost.attention_time import attention_time_fwd
from strategies.cost.elementwise_time import (attn_bias_add_time, cast_time, eager_variant_time,
                                              launch_time, tp_layout_copy_time)
from strategies.cost.qkv_split import qkv_split_time
from strategies.cost.quant_scope import scope_formats
from strategies.cost.gemm_time import (fixed_shares, gemm_units, gemms_time_fwd, units_time_bwd,
                                       units_time_fwd, whole_split)
from strategies.cost.grad_time import (bf16_optimizer_launch_time, gather_copy_out_time,
                                       grad_accum_time, sharded_grad_pass_time)
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.mamba_launches import mamba_launch_time
from strategies.cost.mamba_mixer import mamba_scan_time
from strategies.cost.split_projections import split_projection_time
from strategies.cost.moe_time import (expert_bias_time, expert_pad_time, expert_quantise_time,
                                      geglu_sync_time, moe_host_time, moe_permute_time,
                                      moe_sync_time)
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num
from strategies.framework import DEFAULT
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from topologies.gpus import GPU


@dataclass(frozen=True)
class LayerTime:
    """Seconds for one layer, one micro-batch, one GPU (compute only, no communication)."""

    fwd: Num
    bwd: Num
    recompute: Num   # extra forward work redone in the backward (selective or full)
    wgrad: Num = 0.0  # the weight-gradient part of ``bwd`` (its GEMMs + their accumulation)
    #: the data-gradient GEMMs each sequence-parallel re-gather of the backward overlaps
    #: (``regather_dgrad``): ``(share of the mean layer, seconds)`` per re-gather, the
    #: attention's one per column linear (``attention_column_widths``), then fc1's two
    regather: tuple = ()
    #: the weight-gradient GEMMs of the column-parallel linears (``column_wgrad``): seconds
    #: of the attention's (one per column linear), the dense fc1's and the shared experts'
    #: fc1's, each the window its data gradient's asynchronous reduction runs in (shares:
    #: ``regather``'s)
    col_wgrad: tuple = ()
    #: the attention block's weight-gradient GEMMs (every attention linear, ``attention_
    #: wgrad``): what Megatron-Core's ``delay_wgrad_compute`` defers from a combined pair's
    #: last backward layer (``strategies.schedules.combined.pair_message_hiding``)
    attn_wgrad: Num = 0.0
    #: the data-gradient GEMM seconds of MLA's down projections, ``(q, kv)`` (``down_dgrad``):
    #: what each one's backward re-gather runs beside where the stack makes them
    #: column-parallel (``FrameworkProfile.mla_down_proj``)
    down_dgrad: tuple = (0.0, 0.0)
    #: the weight-gradient GEMM seconds of MLA's down projections, ``(q, kv)``
    #: (``down_wgrad``): what each column-parallel one's input-gradient reduction runs
    #: beside (``tp_collectives.down_reduce_hidden``, §5.99)
    down_wgrad: tuple = (0.0, 0.0)


def attention_column_widths(m: ModelSpec) -> tuple[float, ...]:
    """Input width of each column-parallel linear of one attention block, as a share of the
    hidden size: what its backward re-gathers under SP and what its data gradient reduces
    across tp is that input (``b·s·width·h`` elements). QKV (or MLA's ``linear_q_proj``)
    reads the hidden state, 1.0; MLA's up projections read the latents,
    ``q_lora_rank/h`` and ``kv_lora_rank/h`` (Megatron-Core ``transformer/
    multi_latent_attention.py``: the down projections are ``TELinear`` with
    ``parallel_mode="duplicated"``, the up projections column-parallel with
    ``gather_output=False``; docs/calibration.md §5.76)."""
    h = m.hidden_size
    return tuple(i / h for _, i, _, split in m.attention_linears() if split == "col")


def column_wgrad(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
                 slow: Num = 1.0) -> tuple[Num, ...]:
    """Seconds of the weight-gradient GEMMs of one layer's column-parallel linears:
    ``(attention's, dense fc1, shared experts' fc1)``, the attention's one per column
    linear (QKV; MLA's ``q_proj`` or ``q_up`` and ``kv_up``, ``attention_column_widths``),
    each fc1 one GEMM (its share of the layers is ``regather_dgrad``'s). Each runs while its
    linear's data gradient is reduced across tp (``cost.stage.dgrad_reduce_hidden``).
    ``parts``/``units``: as ``regather_dgrad``; ``slow``: the overlap clock factor."""
    linears = m.attention_linears()
    attn = []
    for (_, _, _, split), (_, g), u in zip(linears, parts, units):
        if split == "col":
            attn.append(slow * (g[0] * u[4]))
    if m.is_hybrid:         # per linear, the attention's QKV and the Mamba in_proj averaged
        attn = [slow * _mixer_column(m, parts, units, 4)[1]]
    dense, shared = 0.0, 0.0
    for (part, g), u in zip(parts[len(linears):], units[len(linears):]):
        if g[4] is False and part == "dense_mlp":
            dense = u[4]
        elif g[4] is False and part == "shared_mlp":
            shared = u[4]
    return (*attn, slow * dense, slow * shared)


def attention_wgrad(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
                    slow: Num = 1.0) -> Num:
    """Seconds of the weight-gradient GEMMs of one layer's attention block, every attention
    linear (``ModelSpec.attention_linears``: QKV or MLA's projections, the output
    projection): Megatron-Core's ``pre_dispatch_computation.backward_dw`` (the attention
    sub-module's TE linears with ``delay_wgrad_compute``; Megatron-LM d98e8a64
    ``models/common/model_chunk_schedule_plan.py``). The accumulation into the main gradient
    stays with the layer (``LayerTime.wgrad``). ``parts``/``units``: as ``column_wgrad``;
    ``slow``: the overlap clock factor."""
    t = 0.0
    for _, (_, g), u in zip(m.attention_linears(), parts, units):
        t = t + g[0] * u[4]
    return slow * t


def down_dgrad(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
               slow: Num = 1.0) -> tuple[Num, Num]:
    """Seconds of the data-gradient GEMMs of MLA's down projections, ``(q, kv)`` (0 for one
    that does not exist: no MLA, no query latent): the attention linears
    ``ModelSpec.attention_linears`` marks ``"rep"``, priced as ``layer_gemm_parts`` prices
    them at the stack's shapes (``whole_split``: ``T`` rows at ``w/tp`` column-parallel,
    §5.99). Under SP a column-parallel down
    projection (Megatron-Core core_v0.12-v0.13) re-gathers its hidden-state input beside this
    GEMM (``tp_collectives.sp_regather_pieces``). ``parts``/``units``: as
    ``regather_dgrad``; ``slow``: the overlap clock factor."""
    rep = [slow * (g[0] * pieces * d)
           for (_, _, _, split), (_, g), (_, _, pieces, d, _)
           in zip(m.attention_linears(), parts, units) if split == "rep"]
    if not rep:
        return 0.0, 0.0
    return (rep[0], rep[1]) if len(rep) > 1 else (0.0, rep[0])


def down_wgrad(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
               slow: Num = 1.0) -> tuple[Num, Num]:
    """Seconds of the weight-gradient GEMMs of MLA's down projections, ``(q, kv)``, at the
    shapes ``layer_gemm_parts`` gives them (0 for one that does not exist), as
    ``down_dgrad`` finds them. A column-parallel down projection (Megatron-Core
    core_v0.12-v0.13, ``TEColumnParallelLinear``) starts its input gradient's reduction
    before this GEMM and waits after it (``tp_collectives.down_reduce_hidden``, §5.99).
    ``slow``: the overlap clock factor."""
    rep = [slow * (g[0] * w)
           for (_, _, _, split), (_, g), (*_, w) in zip(m.attention_linears(), parts, units)
           if split == "rep"]
    if not rep:
        return 0.0, 0.0
    return (rep[0], rep[1]) if len(rep) > 1 else (0.0, rep[0])


def regather_dgrad(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
                   slow: Num = 1.0) -> tuple[tuple[Num, Num], ...]:
    """The data-gradient GEMMs the backward's sequence-parallel re-gathers overlap, one
    ``(share, seconds)`` per re-gather of the mean layer: the attention's (share 1 each: one
    per column-parallel linear, QKV, or MLA's ``q_proj``/``q_up`` and ``kv_up``, each
    re-gathering its own input, ``attention_column_widths``), the dense MLP's fc1 (share:
    the dense layers') and the shared experts' fc1 (the MoE layers' share when the model has
    shared experts). A re-gather of the routed experts'
    input does not exist: the token dispatcher gathers it (``gather_from_sequence_parallel_
    region``, whose backward is a reduce-scatter) and the experts keep the gathered tokens.
    ``parts``/``units``: ``gemm_shapes.layer_gemm_parts`` and their ``gemm_units`` prices (the
    column-parallel data gradient runs as one GEMM: ``pieces`` 1); ``slow``: the overlap
    clock factor the layer's GEMMs run at (``overlap_slowdown``)."""
    linears = m.attention_linears()
    attn = []
    for (_, _, _, split), (_, g), (_, _, pieces, d, _) in zip(linears, parts, units):
        if split == "col":
            attn.append((1.0, slow * (g[0] * pieces * d)))
    if m.is_hybrid:         # the attention's QKV and the Mamba in_proj: their shares
        n, t = _mixer_column(m, parts, units, 3)
        attn = [(n, slow * t)]
    dense, dense_n, shared, shared_n = 0.0, 0.0, 0.0, 0.0
    for (part, g), (_, _, pieces, d, _) in zip(parts[len(linears):], units[len(linears):]):
        if g[4] is False and part == "dense_mlp":
            dense, dense_n = pieces * d, g[0]
        elif g[4] is False and part == "shared_mlp":
            shared, shared_n = pieces * d, g[0]
    return (*attn, (dense_n, slow * dense), (shared_n, slow * shared))


def _mixer_column(m: ModelSpec, parts: list[tuple[str, tuple]], units: list[tuple],
                  field: int) -> tuple[float, Num]:
    """A hybrid model's column-parallel linears on the hidden state before its MLPs: the
    attention's QKV and the Mamba-2 ``in_proj`` (``gemm_shapes.layer_gemm_parts``' ``attn``
    and ``mamba`` column GEMMs): ``(share, seconds)``, ``share`` their count per mean layer,
    ``seconds`` one linear's mean GEMM seconds over them (``units``' ``field``: 3 the data
    gradient, times its pieces; 4 the weight gradient). ``(0, 0)`` where there is none."""
    n, t = 0.0, 0.0
    for (part, g), u in zip(parts, units):
        if part in ("attn", "mamba") and g[4] is False:
            n = n + g[0]
            t = t + g[0] * (u[2] * u[3] if field == 3 else u[4])
    return n, (t / n if n else 0.0)


def layer_time(m: ModelSpec, *, b: Num, tp: Num, cp: Num, ep: Num, sp: Num, flash: Num,
               recompute: Num, gpu: GPU, dtype: str, tpo: Num = False,
               fw: FrameworkProfile = DEFAULT, slow: Num = 1.0, shard: Num = 1.0,
               system: SystemConfig = DEFAULT_SYSTEM, etp: Num | None = None,
               load: Num = 1.0, modules: Num = 0, dispatcher: Num = 0,
               dedup: Num = 1.0, graphed: Num = False, gathered: Num = False,
               tp_pairs: Num = 2.0, pad: Num = False, a2a_size: Num = 1.0) -> LayerTime:
    """Compute seconds of one layer: forward, backward and recomputation (keyword-only).

    ``recompute`` is 0 (none), 1 (selective: the attention core is recomputed), 2 (full: the
    whole forward is recomputed) or 3 (op: torchtitan's op-level policy, the unsaved GEMMs of
    ``gemm_shapes.op_sac_gemms`` and the elementwise kernels). ``tpo``: TP communication overlap
    (GEMMs split along M). ``fw``: the framework profile (gradient accumulation, kernel launches).
    ``slow``: factor on the compute-bound kernels (GEMMs, attention), ``overlap_slowdown``.
    ``shard``: the gradient is accumulated over ``1/shard`` of the layer's parameters
    (``accum_shard``). ``wgrad`` is the weight-gradient part of ``bwd`` (``W`` of a split backward):
    the weight-gradient GEMMs and the separate accumulation into the main gradient; the rest
    (data-gradient GEMMs, attention and elementwise backward, launch gaps) is ``B``.
    ``etp``: expert tensor-parallel size (default tp); ``load``: the hottest expert-parallel
    rank's routed tokens over the mean (``token_counts.moe_load``), the pace of its expert GEMMs.
    ``dispatcher`` (``plan.DISPATCHERS`` code) and ``dedup`` (``ep_dispatch.ep_dedup``'s byte
    scale): the MoE token permutations (``moe_permute_time``) and the dispatcher's host
    synchronisation (``moe_sync_time``; none where ``pad``, the plan's
    ``moe_pad_to_capacity``), in ``B`` for the backward. ``graphed``: the step runs
    as one full-iteration CUDA graph (plan ``cuda_graph``): no host launches or
    synchronisations left (``moe_host_time``, ``moe_sync_time`` 0); else the expert path's
    host launches (``moe_host_time``), in ``B`` for the backward. ``gathered``: ZeRO-3 with
    dp > 1 gathers the layer before its forward and its backward, each gather's copy-out
    (``gather_copy_out_time``) in the pass, in ``B`` for the backward. ``tp_pairs``: the
    layer's tensor-parallel collective pairs per pass (``stage.layers.tp_collectives_per_layer``),
    whose sequence-dim layout copies (``tp_layout_copy_time``), or under async TP the fused
    ops' own HBM passes (``async_tp.fused_pass_time``), run in the pass, in ``B``."""
    # the mean layer's GEMMs (``linear_shapes``) at the stack's shapes of the GEMMs tensor
    # parallelism leaves whole (``whole_split``), each shape priced once for every sum below
    parts = gemm_shapes.layer_gemm_parts(m, b, tp, cp, ep, None, etp, load, whole_split(tp, sp, fw))
    units = gemm_units([g for _, g in parts], tp, gpu, dtype, tpo, fw, system,
                       shares=fixed_shares(parts, m, ep, fw),
                       formats=scope_formats(parts, m, system.quant_scope, dtype))
    counts = [g[0] for _, g in parts]
    g_f = slow * units_time_fwd(counts, units)
    g_b, g_w = units_time_bwd(counts, units)
    g_b, g_w = slow * g_b, slow * g_w
    # a stack's separate Q/K/V and gate/up linears beyond the fused GEMMs priced above
    s_f, s_b, s_w = split_projection_time(m, b, tp, cp, tpo, gpu, dtype, fw, system, slow)
    g_f, g_b, g_w = g_f + s_f, g_b + s_b, g_w + s_w
    a_f, a_b = attention_time_fwd(m, b, tp, cp, flash, gpu, slow, fw, system, a2a_size)
    a_core = a_f          # what a selective recomputation of the attention core redoes
    if m.is_hybrid and m.mamba_share:   # the Mamba-2 mixers' SSD scans, beside the attention
        m_f, m_b = mamba_scan_time(m, b, tp, cp, gpu, usable_hbm(gpu, system))
        a_f, a_b = a_f + slow * m_f, a_b + slow * m_b
    c_f, c_b = cast_time(m, b, tp, cp, sp, gpu, dtype, system, fw)
    e_plain = elementwise_bytes.elementwise_bytes_fwd(m, b, tp, cp, sp, fw.elementwise_kernels) \
        / usable_hbm(gpu, system)
    # DeepSeek-V4's Sinkhorn kernels: their backward is not twice their forward
    sk_f, sk_b = dsv4_cost.sinkhorn_time(m, b, tp, cp, sp, usable_hbm(gpu, system))
    e = e_plain + c_f + sk_f
    layer_w = param_counts.layer_params_per_gpu(m, tp, ep, etp)
    acc = grad_accum_time(layer_w / shard, gpu, dtype, fw, system) \
        + bf16_optimizer_launch_time(m, fw, dtype, gpu) \
        + sharded_grad_pass_time(layer_w, shard, gpu, dtype, fw, system)
    launch = launch_time(fw, gpu=gpu)
    # a Mamba layer's own launches beyond the profile's count (``mamba_launches``)
    l_f, l_b = mamba_launch_time(m, b, tp, sp, dtype, fw, gpu, system.quant_scope)
    # ZeRO-3 gathers the layer before its forward and again before its backward
    gco = gather_copy_out_time(layer_w, gathered, gpu, fw, system)
    # the sequence-dim collectives' layout copies (torchtitan's Shard(1) plan)
    y_f, y_b, y_op, y_full = tp_layout_copy_time(m, b, tp, cp, sp, tpo, tp_pairs, gpu,
                                                 dtype, fw, system)
    # async TP's own passes in their place (the shard's copy-in, the partial sums)
    z_f, z_b, z_op, z_full = async_tp.fused_pass_time(m, b, tp, cp, sp, tpo, tp_pairs, dtype,
                                                      fw, usable_hbm(gpu, system))
    y_f, y_b, y_op, y_full = y_f + z_f, y_b + z_b, y_op + z_op, y_full + z_full
    p_f, p_b = moe_permute_time(m, b, tp, cp, ep, gpu, load, dispatcher, dedup, system, etp,
                                moe_bytes.dispatch_element_bytes(fw.fp8_dispatch, dtype), pad)
    # the experts' quantisation padding: HBM copies on the expert path, priced with the
    # permutations (the same record, the same host comparison)
    q_f, q_b = expert_pad_time(m, b, tp, cp, gpu, dtype, load, etp, fw, system, dispatcher)
    # and TE's per-expert quantisation launches (split_quantize), with them for the same reason
    k_f, k_b = expert_quantise_time(m, ep, gpu, dtype, fw)
    p_f, p_b = p_f + q_f + k_f, p_b + q_b + k_b
    x_f, x_b = expert_bias_time(m, b, tp, cp, ep, gpu, load, etp, fw, system)
    v_f, v_b = eager_variant_time(m, b, tp, cp, gpu, load, fw, system)
    # gpt-oss's attention-output bias add, unfused in Megatron-Core (§5.163)
    u_f, u_b = attn_bias_add_time(m, b, tp, cp, sp, gpu, fw, system)
    v_f, v_b = v_f + u_f, v_b + u_b
    # the copies of q, k, v around the fused QKV's split and its backward cat (§5.167)
    qs_f, qs_b = qkv_split_time(m, b, tp, cp, flash, gpu, fw, system)
    v_f, v_b = v_f + qs_f, v_b + qs_b
    # the dispatcher's synchronisation and gpt-oss's activation's, each a queue drain
    sync = (moe_sync_time(m, fw, gpu, dispatcher, pad) + geglu_sync_time(m, fw, gpu)) \
        * np.logical_not(graphed)
    bwd0 = (g_b + a_b + 2 * e_plain + c_b + sk_b + acc + 2 * launch + l_b + p_b + x_b + v_b
            + gco + y_b)
    h_f, h_b = moe_host_time(m, b=b, tp=tp, cp=cp, ep=ep, gpu=gpu, dtype=dtype, tpo=tpo,
                             slow=slow, fw=fw, system=system, etp=etp, load=load,
                             permute=(p_f, p_b), bias=(x_f, x_b), graphed=graphed,
                             priced=(parts, units))
    fwd = g_f + a_f + e + launch + l_f + p_f + x_f + v_f + sync + h_f + gco + y_f
    bwd = bwd0 + h_b
    # the last GEMM an early-stopping checkpoint does not rerun: priced once, read by the
    # selective and the full recomputation below
    stop = early_stop_saving(m, b, tp, cp, ep, gpu, dtype, tpo, fw, slow, system, etp, load)
    sel = selective_time(m, b=b, tp=tp, cp=cp, ep=ep, sp=sp, flash=flash, a_f=a_core,
                         modules=modules, gpu=gpu, dtype=dtype, tpo=tpo, slow=slow,
                         system=system, etp=etp, load=load, fw=fw, priced=(parts, units),
                         stop=stop, graphed=graphed)
    # op (torchtitan's SAC): the GEMMs its policy does not save and every memory-bound kernel
    # between them (norms, rotary, activation function, residual adds), each relaunched; the
    # saved GEMMs and the attention kernel are not rerun
    op_parts = gemm_shapes.op_sac_gemm_parts(m, b, tp, cp, ep, etp=etp, load=load)
    rerun = [(p, g) for p, g in op_parts if not g[-1]]
    kernels = max(fw.kernels_per_layer - (len(op_parts) - len(rerun)) - 1, 0)
    op = (slow * gemms_time_fwd([g for _, g in rerun], tp, gpu, dtype, tpo, system,
                                fixed_shares(rerun, m, ep, fw),
                                scope_formats(rerun, m, system.quant_scope, dtype)) + e + y_op
          + kernels * measured.launch_gap(gpu, fw.launch_gap_s))
    # full: the whole forward again, less the last GEMM when the stack's checkpoint stops early
    full = fwd - gco - stop - (y_f - y_full)
    rc = np.where(recompute == 2, full, np.where(recompute == 1, sel,
                                                np.where(recompute == 3, op, 0.0)))
    return LayerTime(fwd, bwd, rc, g_w + acc, regather_dgrad(m, parts, units, slow),
                     column_wgrad(m, parts, units, slow), attention_wgrad(m, parts, units, slow),
                     down_dgrad(m, parts, units, slow), down_wgrad(m, parts, units, slow))


def early_stop_saving(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU, dtype: str,
                      tpo: Num = False, fw: FrameworkProfile = DEFAULT, slow: Num = 1.0,
                      system: SystemConfig = DEFAULT_SYSTEM, etp: Num | None = None,
                      load: Num = 1.0) -> Num:
    """Seconds per layer and micro-batch that full recomputation does not rerun on a stack
    whose checkpoint stops early: the forward of ``gemm_shapes.early_stop_gemms`` (``slow``: the
    overlap clock factor, as on the forward); 0 on a stack that reruns the whole forward."""
    if not fw.recompute_early_stop:
        return 0.0 * np.asarray(b, dtype=float)
    return slow * gemms_time_fwd(gemm_shapes.early_stop_gemms(m, b, tp, cp, ep, etp, load), tp, gpu,
                                 dtype, tpo, system)


def selective_time(m: ModelSpec, *, b: Num, tp: Num, cp: Num, ep: Num, sp: Num, flash: Num,
                   a_f: Num, modules: Num, gpu: GPU, dtype: str, tpo: Num = False,
                   slow: Num = 1.0, system: SystemConfig = DEFAULT_SYSTEM,
                   etp: Num | None = None, load: Num = 1.0,
                   fw: FrameworkProfile = DEFAULT,
                   priced: tuple[list, list] | None = None, stop: Num | None = None,
                   graphed: Num = False) -> Num:
    """Seconds one layer's selective recomputation of the modules in ``modules`` (a
    ``strategies.cost.recompute`` mask, 0: ``core_attn``) redoes in its backward, the sum
    of its parts (``MODULE_PARTS``, each once): the attention core ``a_f`` (0 under
    FlashAttention, whose backward already recomputes the scores, unless the stack reruns
    the fused kernel's forward, ``FrameworkProfile.recompute_flash_fwd``), the norms' and the
    activation functions' HBM traffic (``elementwise_bytes.norm_bytes_fwd``,
    ``elementwise_bytes.activation_fn_bytes_fwd`` over each part's width; the routed activation with
    its eager clamp where the stack runs one, ``eager_variant_time`` without the RoPE), and
    the forward of each part's GEMMs (``gemm_shapes.layer_gemm_parts``; ``priced``: those and
    their ``gemm_units`` as the caller has them, ``layer_time``; None: priced here), the
    dense MLP's less its down projection on a stack whose recomputation never reruns the
    layer's last GEMM (``early_stop_saving``; ``stop``: that saving as the caller priced it
    with the same arguments, ``layer_time``; None: priced here). The routed activation's
    rerun repeats gpt-oss's activation synchronisation (``geglu_sync_time``; none under a
    full-iteration graph, ``graphed``)."""
    hbm = usable_hbm(gpu, system)
    widths = gemm_shapes.mlp_part_widths(m)
    if priced is None:
        gemms = gemm_shapes.layer_gemm_parts(m, b, tp, cp, ep, None, etp, load,
                                             whole_split(tp, sp, fw))
        units = gemm_units([x for _, x in gemms], tp, gpu, dtype, tpo, system=system,
                           backward=False, shares=fixed_shares(gemms, m, ep, fw),
                           formats=scope_formats(gemms, m, system.quant_scope, dtype))
    else:
        gemms, units = priced

    def g(part):
        sel = [i for i, (p, _) in enumerate(gemms) if p == part]
        return slow * units_time_fwd([gemms[i][1][0] for i in sel],
                                     [units[i] for i in sel]) if sel else 0.0

    def act(part):
        return elementwise_bytes.activation_fn_bytes_fwd(m, b, tp, cp, widths[part]) / hbm

    clamp = eager_variant_time(m, b, tp, cp, gpu, load, fw, system, rope=False)[0] \
        + geglu_sync_time(m, fw, gpu) * np.logical_not(graphed)
    if stop is None:
        stop = early_stop_saving(m, b, tp, cp, ep, gpu, dtype, tpo, fw, slow, system, etp,
                                 load)
    work = {"scores": rcp.core_rerun(a_f, flash, fw.recompute_flash_fwd),
            "norm_outputs": elementwise_bytes.norm_bytes_fwd(m, b, tp, cp, sp) / hbm,
            "dense_mlp": g("dense_mlp") - stop + act("dense_mlp"),
            "routed_act": act("routed_mlp") + clamp,
            "routed_mlp": g("routed_mlp"),
            "shared_mlp": g("shared_mlp") + act("shared_mlp"),
            "mla_up": g("mla_up")}
    return sum(np.where(rcp.part_selected(1, modules, part), t, 0.0) for part, t in work.items())
