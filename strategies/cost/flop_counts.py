"""FLOPs of the layers' GEMMs and of a whole training step: model FLOPs (MFU), the hardware
FLOPs with the recomputed forward (HFU), per token and per step. Units: FLOP; vectorised over
the plan fields (notation: ``strategies.cost.token_counts``)."""
from __future__ import annotations

import numpy as np

from strategies.cost import recompute as rcp
from strategies.cost.attention_counts import (attn_core_flops_fwd, attn_core_flops_per_token,
                                              score_elements)
from strategies.cost.gemm_shapes import (early_stop_gemms, layer_gemm_parts, layer_gemms,
                                         op_sac_gemms)
from strategies.cost.token_counts import Num
from strategies.model import ModelSpec


def op_recompute_flops_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num = 1,
                           kind: str | None = None) -> Num:
    """Forward FLOPs of the GEMMs that ``recompute=op`` redoes in the backward (per GPU, per
    micro-batch): ``2·M·N·K`` over the unsaved entries of ``op_sac_gemms``."""
    return sum(2.0 * c * M * N * K for c, M, N, K, _, saved in op_sac_gemms(m, b, tp, cp, ep, kind)
               if not saved)


def gemm_flops_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, kind: str | None = None) -> Num:
    """Forward FLOPs of the matmuls of one layer (per GPU, per micro-batch): ``2·M·N·K`` over
    ``layer_gemms``. For a standard layer: QKV ``2T·h·(a+2g)d/t``, output ``2T·ad·h/t``, MLP
    ``2T·h·F·(3 if gated else 2)/t`` (times top-k for MoE, plus the shared experts) and the
    router ``2T·h·E`` (replicated across tp). ``kind`` None: the mean layer."""
    return sum(2.0 * c * M * N * K for c, M, N, K, _ in layer_gemms(m, b, tp, cp, 1, kind))


def executed_flops_per_step(m: ModelSpec, gbs: Num, flash: Num, recompute: Num,
                            share: Num = 1.0, modules: Num = 0,
                            early_stop: bool = False, flash_rerun: bool = False) -> Num:
    """FLOPs the hardware executes in one step (for HFU): forward and backward (3 x forward)
    of the GEMMs, the attention core as the kernel runs it (causal blocks skipped with
    FlashAttention) and the LM head, plus the recomputed forward (``recompute``: 0 none,
    1 selective = the attention core when it is not FlashAttention, 2 full = the layers,
    3 op = the GEMMs torchtitan's policy does not save).
    FlashAttention's own recomputation of the scores inside its backward is not counted, so
    HFU stays at most the fraction of peak the time model charges. ``early_stop`` and
    ``flash_rerun`` as ``hardware_flops_per_step``."""
    L = m.num_layers
    gemm = gemm_flops_fwd(m, gbs, 1, 1) * L
    attn = attn_core_flops_fwd(m, gbs, 1, 1, flash) * L + scan_flops_fwd(m, gbs)
    head = 2 * gbs * m.seq_length * m.hidden_size * m.vocab_size
    redo = gemm - (_early_stop_flops(m, gbs) if early_stop else 0.0)
    extra = np.where(recompute == 2, share * (redo + attn),
                     np.where(recompute == 1, _selective_extra(m, gbs, flash, attn, modules,
                                                               early_stop, flash_rerun),
                              np.where(recompute == 3, op_recompute_flops_fwd(m, gbs, 1, 1) * L,
                                       0.0)))
    mtp = 3 * gbs * m.seq_length * mtp_flops_fwd_per_token(m, causal=False)
    mtp = np.where(flash, 3 * gbs * m.seq_length * mtp_flops_fwd_per_token(m, causal=True),
                   mtp) if m.num_nextn_predict_layers else 0.0
    return 3 * (gemm + attn + head) + extra + mtp


def scan_flops_fwd(m: ModelSpec, gbs: Num) -> Num:
    """Forward FLOPs of a hybrid model's SSD scans over ``gbs`` sequences, every Mamba-2
    layer (``mamba_mixer.ssd_flops``; 0 without Mamba layers). Counted with the attention
    core: model FLOPs, and redone by a full recomputation. (Megatron-LM's ``hybrid_flops``
    counts the scan as ``7·T·2h·N``, its own note calling it an estimate to update for the
    SSD kernels; this is the SSD kernels' count.)"""
    if not (m.is_hybrid and m.mamba_share):
        return 0.0
    from strategies.cost.mamba_mixer import ssd_flops
    return m.num_layers * m.mamba_share * ssd_flops(m, gbs, 1, 1)


def _early_stop_flops(m: ModelSpec, gbs: Num) -> Num:
    """Forward FLOPs of ``early_stop_gemms`` over the whole step (every layer, ``gbs``
    sequences)."""
    return m.num_layers * sum(2.0 * c * M * N * K
                              for c, M, N, K, _ in early_stop_gemms(m, gbs, 1, 1, 1))


def hardware_flops_per_step(m: ModelSpec, gbs: Num, flash: Num, recompute: Num,
                            share: Num = 1.0, modules: Num = 0,
                            early_stop: bool = False, flash_rerun: bool = False) -> Num:
    """Model FLOPs plus the recomputed forward, in the same convention (attention square in
    full; for HFU, which docs/cli.md defines as MFU "with recomputation counted"): full
    recomputation (``recompute`` 2) redoes each layer's forward, less ``early_stop_gemms``
    on a stack whose checkpoint stops early (``early_stop``); selective (1) redoes the
    attention core, except under FlashAttention, which recomputes it inside its own backward
    (not counted, as in MFU), unless the stack reruns the fused kernel's forward
    (``flash_rerun``, ``FrameworkProfile.recompute_flash_fwd``), and the selected modules'
    GEMMs (the dense MLP's less its down projection with ``early_stop``). With no
    recomputation this equals ``model_flops_per_step``."""
    L = m.num_layers
    gemm = gemm_flops_fwd(m, gbs, 1, 1) * L
    if early_stop:
        gemm = gemm - _early_stop_flops(m, gbs)
    attn = attn_core_flops_fwd(m, gbs, 1, 1, False) * L + scan_flops_fwd(m, gbs)
    extra = np.where(recompute == 2, share * (gemm + attn),
                     np.where(recompute == 1, _selective_extra(m, gbs, flash, attn, modules,
                                                               early_stop, flash_rerun),
                              np.where(recompute == 3, op_recompute_flops_fwd(m, gbs, 1, 1) * L,
                                       0.0)))
    return model_flops_per_step(m, gbs) + extra


def selective_recompute_flops_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                                  modules: Num, early_stop: bool = False) -> Num:
    """Forward GEMM FLOPs of one layer that selective recomputation of ``modules`` (a
    ``strategies.cost.recompute`` mask, 0: ``core_attn``) redoes: ``2·M·N·K`` over the
    ``layer_gemm_parts`` of its parts (per GPU, per micro-batch; the attention core apart),
    less ``early_stop_gemms`` (the dense MLP's down projection) when the ``mlp`` module is
    selected on a stack whose recomputation never reruns the layer's last GEMM
    (``early_stop``)."""
    out = 0.0
    for part, (c, M, N, K, _) in layer_gemm_parts(m, b, tp, cp, ep):
        out = out + np.where(rcp.part_selected(1, modules, part), 2.0 * c * M * N * K, 0.0)
    if early_stop:
        stop = sum(2.0 * c * M * N * K for c, M, N, K, _ in early_stop_gemms(m, b, tp, cp, ep))
        out = out - np.where(rcp.part_selected(1, modules, "dense_mlp"), stop, 0.0)
    return out


def _selective_extra(m: ModelSpec, gbs: Num, flash: Num, attn: Num, modules: Num,
                     early_stop: bool = False, flash_rerun: bool = False) -> Num:
    """The whole step's recomputed forward FLOPs under selective recomputation: the
    attention core ``attn`` where its scores are redone (not under FlashAttention, unless
    the stack reruns the fused kernel's forward, ``flash_rerun``) plus the selected parts'
    GEMMs over every layer (``early_stop``: ``selective_recompute_flops_fwd``)."""
    scores = rcp.part_selected(1, modules, "scores") & (np.logical_not(flash) | flash_rerun)
    return np.where(scores, attn, 0.0) + selective_recompute_flops_fwd(
        m, gbs, 1, 1, 1, modules, early_stop) * m.num_layers


def model_flops_per_step(m: ModelSpec, gbs: Num) -> Num:
    """Model FLOPs of one optimizer step (no recomputation): 3 × forward, the attention square
    counted in full (Narayanan eq. 3 without the recompute forward; docs/formulas.md §2b).
    The multi-token-prediction modules are counted (``training_flops_per_token`` with
    ``mtp``): they are trained work a layout places on a pipeline stage."""
    return gbs * m.seq_length * training_flops_per_token(m, causal=False, mtp=True)


def head_flops_fwd_per_token(m: ModelSpec) -> float:
    """The output layer's logits GEMM, ``2·h·V`` per token."""
    return 2.0 * m.hidden_size * m.vocab_size


def mtp_flops_fwd_per_token(m: ModelSpec, causal: bool = False) -> float:
    """Forward FLOPs per token of the multi-token-prediction modules (DeepSeek-V3 §2.2): per
    module and depth, the ``2h -> h`` projection, its block's layers
    (``ModelSpec.mtp_block_kinds``: one transformer layer, MoE when the model is; a hybrid
    model's ``mtp_hybrid_pattern``, its Mamba layers' scans included) with their attention
    and a pass through the shared output head; each module ``mtp_repeats`` times (one
    physical block run at each depth)."""
    if not m.num_nextn_predict_layers:
        return 0.0
    kinds = m.mtp_block_kinds()
    attn = 2.0 * m.num_attention_heads * (m.head_dim + m.v_dim) / m.seq_length * \
        score_elements(m.seq_length, mode="causal" if causal else "square")
    gemm = sum(gemm_flops_fwd(m, 1, 1, 1, k) for k in kinds) / m.seq_length
    if "mamba" in kinds:
        from strategies.cost.mamba_mixer import ssd_flops
        gemm += kinds.count("mamba") * ssd_flops(m, 1, 1, 1) / m.seq_length
    per = (2.0 * 2 * m.hidden_size ** 2 + gemm + m.mtp_attention_layers() * attn
           + head_flops_fwd_per_token(m))
    return m.num_nextn_predict_layers * m.mtp_repeats * per


def training_flops_per_token(m: ModelSpec, causal: bool = False, mtp: bool = False) -> float:
    """FLOPs of one token's forward and backward (3 x forward): every layer's GEMMs, the
    attention core (the full square, or the causal pairs ``s(s+1)/2`` when ``causal``: the
    count behind DeepSeek's published FLOPs per token), the output head, and with ``mtp`` the
    multi-token-prediction modules. Embedding lookups, norms and activations not counted."""
    fwd = gemm_flops_fwd(m, 1, 1, 1) * m.num_layers / m.seq_length \
        + attn_core_flops_per_token(m, causal) + head_flops_fwd_per_token(m)
    if m.is_hybrid:
        fwd = fwd + scan_flops_fwd(m, 1) / m.seq_length
    return 3.0 * (fwd + (mtp_flops_fwd_per_token(m, causal) if mtp else 0.0))


def mfu(m: ModelSpec, gbs: Num, step_time_s: Num, n_gpus: Num, peak_flops: Num) -> Num:
    """Model FLOPs utilisation: ``model_flops_per_step / (n_gpus · step_time_s · peak)``
    (``peak_flops`` in FLOP/s per GPU for the job's dtype). The one definition: the
    estimate, the simulation's report and the search's rows all call it."""
    return model_flops_per_step(m, gbs) / (n_gpus * step_time_s * peak_flops)


def hfu(m: ModelSpec, gbs: Num, flash: Num, recompute: Num, step_time_s: Num, n_gpus: Num,
        peak_flops: Num, share: Num = 1.0, modules: Num = 0, early_stop: bool = False,
        flash_rerun: bool = False) -> Num:
    """Hardware FLOPs utilisation: ``hardware_flops_per_step`` (model FLOPs plus the
    recomputed forward; ``early_stop``: the stack's checkpoint stops before the last GEMM)
    over ``n_gpus · step_time_s · peak_flops``; equals ``mfu`` without recomputation."""
    return hardware_flops_per_step(m, gbs, flash, recompute, share, modules, early_stop,
                                   flash_rerun) / (
        n_gpus * step_time_s * peak_flops)
