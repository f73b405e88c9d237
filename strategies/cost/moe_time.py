"""Seconds of a MoE layer's expert path besides its GEMMs on one GPU: the token permutations,
quantisation padding, per-expert quantisation launches and output bias, the dispatcher's
and gpt-oss's activation's device-to-host synchronisations, and the host time of issuing the experts where it exceeds
their GPU time. Vectorised."""
from __future__ import annotations

import numpy as np

from strategies.cost import gemm_shapes, moe_bytes, token_counts
from strategies.cost import measured
from strategies.cost import quantise
from strategies.cost.gemm_time import fixed_shares, gemm_units, units_time_bwd, units_time_fwd
from strategies.cost.quant_scope import scope_formats
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num
from strategies.framework import DEFAULT
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.variants import runs_eager_clamp, runs_gpt_oss_bridge
from strategies.launch_blocking import HOST_PATH_S
from strategies.model import ModelSpec
from topologies.gpus import GPU
from topologies.precision import get_precision


# Host (CPU) seconds per local expert that Transformer Engine's grouped MLP block (fc1, SwiGLU,
# fc2 over the experts' token splits) spends issuing one micro-batch, (forward, backward):
# NVIDIA's measurement on GB200 with 64 experts and hidden size 128, so that the GPU work is
# negligible, forward ~1.2 ms and backward ~2.1 ms (TransformerEngine issue #2897, "Reduce CPU
# overhead in grouped MLP block", 2026-04-16: wgrad allocations, scale swizzles, tensor
# clean-up and quantizer set-up, each per expert), taken per expert (/64). The figure is of
# TE's fused grouped-MLP ops (``ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8`` and its backward, TE
# PR #2769: one cuDNN grouped-GEMM kernel per fc), not of the unfused ``GroupedLinear`` module
# the 25.11 / 26.04 rows run (6-18 launches per local expert, docs/calibration.md §5.29)
EXPERT_HOST_S = (1.2e-3 / 64, 2.1e-3 / 64)


def moe_permute_time(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU,
                     load: Num = 1.0, dispatcher: Num = 0, dedup: Num = 1.0,
                     system: SystemConfig = DEFAULT_SYSTEM,
                     etp: Num | None = None,
                     dispatch_bytes: float = token_counts.ACT_BYTES,
                     pad: Num = False) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of the mean layer's MoE token permutations on one GPU:
    ``moe_bytes.moe_permute_bytes`` over the usable HBM bandwidth (0 for a dense model)."""
    f, bw = moe_bytes.moe_permute_bytes(m, b, tp, cp, ep, load, dispatcher, dedup, etp,
                                        dispatch_bytes, pad)
    hbm = usable_hbm(gpu, system)
    return f / hbm, bw / hbm


def expert_pad_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, dtype: str,
                    load: Num = 1.0, etp: Num | None = None, fw: FrameworkProfile = DEFAULT,
                    system: SystemConfig = DEFAULT_SYSTEM,
                    dispatcher: Num = 0) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of the mean layer's quantisation padding of the routed
    tokens (``moe_bytes.expert_pad_bytes`` over the usable HBM bandwidth) where the stack pads
    (``fw.quant_padding``), ``dtype`` is quantised and the ``dispatcher`` (``plan.DISPATCHERS``
    code) has not padded the rows already (``moe_bytes.DISPATCH_PADS``); 0 otherwise.
    Vectorised over ``dispatcher``."""
    if not (fw.quant_padding and get_precision(dtype).quantised):
        z = 0.0 * np.asarray(b, dtype=float) * np.asarray(dispatcher)
        return z[()], z[()]
    f, bw = moe_bytes.expert_pad_bytes(m, b, tp, cp, load, etp)
    hbm = usable_hbm(gpu, system)
    copies = np.logical_not(np.asarray(moe_bytes.DISPATCH_PADS)[np.asarray(dispatcher).astype(int)])
    return (f / hbm * copies)[()], (bw / hbm * copies)[()]


def expert_quantise_time(m: ModelSpec, ep: Num, gpu: GPU, dtype: str,
                         fw: FrameworkProfile = DEFAULT) -> tuple[Num, Num]:
    """GPU idle seconds ``(forward, backward)`` of the mean layer's per-expert quantisation
    launches (``quantise.expert_quantise_kernels`` on a stack that runs Transformer Engine's
    ``GroupedLinear``, ``fw.grouped_mlp_casts``) at one launch gap each; their bytes are
    ``cast_time``'s."""
    k_f, k_b = quantise.expert_quantise_kernels(m, ep, dtype, fw.grouped_mlp_casts)
    gap = measured.launch_gap(gpu, fw.launch_gap_s)
    return k_f * gap, k_b * gap


def bias_loop(fw: FrameworkProfile) -> bool:
    """Whether stack ``fw`` adds the routed experts' output biases in Megatron-Core's
    per-expert loop (``TEGroupedMLP._apply_bias``, ``moe/experts.py`` core_v0.17.0
    L251-268, after its unfused ``GroupedLinear`` fc2: ``grouped_mlp_casts``). Transformer
    Engine's fused grouped MLP (Megatron-Core 0.18 ``_fused_forward`` returns before the loop)
    passes both biases to cuDNN's grouped GEMM (TE v2.16 ``ops/fused/forward_grouped_mlp.py``
    ``_pack_grouped_linear_bias_for_cudnn``, its ``bias_tensor``), and NeMo AutoModel adds
    them in its own loop (``elementwise_bytes.expert_bias_bytes``, §5.157): neither runs
    it (docs/calibration.md §5.163)."""
    return bool(fw.grouped_mlp_casts)


def expert_bias_time(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU,
                     load: Num = 1.0, etp: Num | None = None, fw: FrameworkProfile = DEFAULT,
                     system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of the mean layer's routed-expert output bias as
    Megatron-Core applies it, one local expert at a time (``moe_bytes.expert_bias_bytes`` over
    the usable HBM bandwidth, plus ``moe_bytes.expert_bias_kernels`` launch gaps); 0 for experts
    without biases and on a stack that does not run that loop (``bias_loop``)."""
    if not bias_loop(fw):
        z = 0.0 * np.asarray(b, dtype=float) * np.asarray(ep, dtype=float)
        return z[()], z[()]
    f, bw = moe_bytes.expert_bias_bytes(m, b, tp, cp, load, etp)
    kf, kb = moe_bytes.expert_bias_kernels(m, ep)
    hbm, gap = usable_hbm(gpu, system), measured.launch_gap(gpu, fw.launch_gap_s)
    return f / hbm + kf * gap, bw / hbm + kb * gap


def queue_drain_time(ops: Num, fw: FrameworkProfile = DEFAULT, gpu: GPU | None = None) -> Num:
    """GPU idle seconds after one device-to-host synchronisation (docs/calibration.md §5.13):
    the host waited until the GPU drained its queue, so the GPU then waits, serially, for
    everything the host runs up to its next launch: the launch gap, plus ``HOST_PATH_S`` (the
    host's path of one operator, ``strategies.launch_blocking``) per Python operator ``ops``
    before it. The one rule every synchronisation is priced with (``moe_sync_time``,
    ``geglu_sync_time``). Vectorised over ``ops``."""
    return measured.launch_gap(gpu, fw.launch_gap_s) + ops * HOST_PATH_S


def geglu_sync_time(m: ModelSpec, fw: FrameworkProfile = DEFAULT,
                    gpu: GPU | None = None) -> float:
    """GPU idle seconds per mean-layer call of the routed activation from Megatron-Core's
    clamped quick-GEGLU building its ``linear_offset`` on the device
    (``moe_bytes.GEGLU_SYNCS`` per call, each ``queue_drain_time`` of
    ``moe_bytes.GEGLU_SYNC_HOST_OPS``), on the MoE layers' share, where the stack runs
    gpt-oss as Megatron-Bridge's bridge builds it (``variants.runs_gpt_oss_bridge``) with the
    eager activation (``variants.runs_eager_clamp``: not Transformer Engine's fused grouped
    MLP); 0 otherwise. The caller adds it to each forward and each rerun of the activation,
    and drops it under a full-iteration CUDA graph."""
    if not (m.is_moe and runs_gpt_oss_bridge(m, fw) and runs_eager_clamp(fw)):
        return 0.0
    share = m.layer_shares().get("moe", 0.0)
    return float(share * moe_bytes.GEGLU_SYNCS
                 * queue_drain_time(moe_bytes.GEGLU_SYNC_HOST_OPS, fw, gpu))


def moe_sync_time(m: ModelSpec, fw: FrameworkProfile = DEFAULT, gpu: GPU | None = None,
                  dispatcher: Num = 0, pad: Num = False) -> Num:
    """GPU idle seconds per mean-layer forward from the token dispatcher's device-to-host
    synchronisations (``moe_bytes.MOE_SYNCS_FWD`` per MoE layer): the host waits until the GPU
    has drained its queue, so the GPU then waits, serially, for everything the host runs up
    to its next launch: the launch gap, plus ``HOST_PATH_S`` (the host's path of one operator,
    ``strategies.launch_blocking``) per Python operator the ``dispatcher`` (``plan.DISPATCHERS``
    code) runs before it (``moe_bytes.MOE_SYNC_HOST_OPS``), i.e. ``SYNC_LAUNCH_GAP_S`` for the
    alltoall dispatcher, as under ``CUDA_LAUNCH_BLOCKING``. 0 for a dense model and where the
    plan pads to capacity (``pad``: ``moe_bytes.count_exchange``, no synchronisation).
    Vectorised over ``dispatcher`` and ``pad``."""
    code = np.asarray(dispatcher).astype(int)
    if not m.is_moe:
        return (0.0 * code * moe_bytes.count_exchange(pad))[()]
    share = m.layer_shares().get("moe", 0.0)
    ops = np.asarray(moe_bytes.MOE_SYNC_HOST_OPS, dtype=float)[code]
    return (share * moe_bytes.MOE_SYNCS_FWD * moe_bytes.count_exchange(pad)
            * queue_drain_time(ops, fw, gpu))[()]


def moe_host_time(m: ModelSpec, *, b: Num, tp: Num, cp: Num, ep: Num, gpu: GPU, dtype: str,
                  tpo: Num = False, slow: Num = 1.0, fw: FrameworkProfile = DEFAULT,
                  system: SystemConfig = DEFAULT_SYSTEM, etp: Num | None = None,
                  load: Num = 1.0, permute: tuple[Num, Num] = (0.0, 0.0),
                  bias: tuple[Num, Num] = (0.0, 0.0), graphed: Num = False,
                  priced: tuple[list, list] | None = None) -> tuple[Num, Num]:
    """GPU idle seconds ``(forward, backward)`` of the mean layer while the host issues an MoE
    layer's expert path (0 for a dense model, and under a full-iteration CUDA graph,
    ``graphed``, which replays the step with no host work in it).

    The dispatcher's device-to-host synchronisation (``moe_sync_time``) empties the GPU's
    queue before the experts, so their host work shows wherever it exceeds the GPU time of
    the same kernels. Host seconds per MoE layer and pass: ``EXPERT_HOST_S`` per local expert
    (``E/ep``) and, for experts with biases, ``HOST_PATH_S`` per operator of Megatron-Core's
    per-expert bias loop (``moe_bytes.expert_bias_kernels``, where the stack runs it,
    ``bias_loop``). GPU seconds ``G``: the routed
    experts' GEMMs (``slow`` times; backward data and weight gradients), the permutations
    ``permute`` and the bias path ``bias`` (both as the mean layer's ``moe_permute_time``/
    ``expert_bias_time`` give them). Exposed per MoE layer ``max(0, host - G)``, times the
    MoE layers' share of the layers. ``priced``: the caller's ``layer_gemm_parts`` of the
    mean layer and their ``gemm_units`` (``layer_time``), whose routed experts' GEMMs have
    the MoE layer's shapes; None: priced here. Vectorised."""
    share = m.layer_shares().get("moe", 0.0) if m.is_moe else 0.0
    if share == 0.0:
        z = 0.0 * np.asarray(b, dtype=float)
        return z[()], z[()]
    local = m.num_experts / np.asarray(ep, dtype=float)
    k_f, k_b = (x * bias_loop(fw) for x in moe_bytes.expert_bias_kernels(m, ep))
    h_f = local * EXPERT_HOST_S[0] + k_f / share * HOST_PATH_S
    h_b = local * EXPERT_HOST_S[1] + k_b / share * HOST_PATH_S

    def routed(parts):
        return [i for i, (part, g) in enumerate(parts)
                if part == "routed_mlp" and g[4] is not None]

    # one MoE layer's routed expert GEMMs: its counts, the mean layer's shapes and prices
    own = gemm_shapes.layer_gemm_parts(m, b, tp, cp, ep, "moe", etp, load)
    counts = [own[i][1][0] for i in routed(own)]
    if priced is None:
        sh = fixed_shares(own, m, ep, fw)
        fm = scope_formats(own, m, system.quant_scope, dtype)
        units = gemm_units([own[i][1] for i in routed(own)], tp, gpu, dtype, tpo, fw, system,
                           shares=[sh[i] for i in routed(own)],
                           formats=None if fm is None else [fm[i] for i in routed(own)])
    else:
        units = [priced[1][i] for i in routed(priced[0])]
    g_f = slow * units_time_fwd(counts, units) + (permute[0] + bias[0]) / share
    g_b = slow * units_time_bwd(counts, units)[0] + (permute[1] + bias[1]) / share
    on = np.logical_not(graphed)
    fwd = share * np.maximum(h_f - g_f, 0.0) * on
    bwd = share * np.maximum(h_b - g_b, 0.0) * on
    return np.asarray(fwd)[()], np.asarray(bwd)[()]
