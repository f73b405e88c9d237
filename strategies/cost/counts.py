"""The cost model: FLOPs, bytes and communication volumes of one transformer layer, one
micro-batch, on one GPU. The one source of truth that the analytic estimator and the
simulator's compiler both read.

Every function takes plain numbers *or numpy arrays* for the plan fields (tp, cp, mbs, sp, ...)
and broadcasts, so the search can score thousands of plans in one call with the very same
arithmetic as a single estimate. Units: FLOP, bytes, tokens.

Notation (Narayanan 2021 / Korthikanti 2022): b micro-batch, s sequence length, h hidden,
a heads, g KV heads, d head dim, F MLP hidden, V vocabulary, t tensor-parallel size,
c context-parallel size.
"""
from __future__ import annotations

from typing import Any

from math import comb, gcd

import numpy as np

from strategies.cost import recompute as rcp
from strategies.model import ModelSpec
from strategies.moe_balance import default_imbalance
from strategies.plan import DISPATCHERS  # noqa: F401  (codes of ep_dedup's dispatcher)
from topologies.precision import get_precision

Num = Any  # float or np.ndarray

ACT_BYTES = 2  # bf16/fp16 activations


def tokens_per_gpu(b: Num, s: int, cp: Num) -> Num:
    """Tokens of one micro-batch held by one GPU of a context-parallel group."""
    return b * s / cp


def moe_load(ep: Num, imbalance: Num = 1.0, capacity_factor: Num = np.inf,
             m: ModelSpec | None = None, b: Num = 1, tp: Num = 1, cp: Num = 1,
             etp: Num | None = None) -> Num:
    """Routed tokens of the hottest expert-parallel rank over the mean (the pace of its expert
    GEMMs and of its all-to-all): ``moe_imbalance`` where ``ep > 1`` (with every expert on
    one rank there is no hottest rank), capped by ``moe_capacity_factor``, beyond which an
    expert drops its tokens (Megatron's token dropping: an expert takes at most
    ``capacity_factor`` times its mean share). An imbalance of NaN (a plan that names none,
    ``plan.DEFAULT_MOE_IMBALANCE``) is ``moe_balance.default_imbalance`` of the model ``m``
    and the micro-batch's shape (``b``, ``tp``, ``cp``, ``etp``). Vectorised."""
    imb = np.asarray(imbalance, dtype=float)
    if np.isnan(imb).any():
        if m is None:
            raise ValueError("moe_load: the default imbalance (NaN) needs the model and the "
                             "micro-batch's shape (m, b, tp, cp, etp)")
        imb = np.where(np.isnan(imb), default_imbalance(m, b, tp, cp, ep, etp), imb)
    return np.minimum(np.where(np.asarray(ep) > 1, imb, 1.0), capacity_factor)[()]


def expert_tokens(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, etp: Num | None = None,
                  load: Num = 1.0) -> Num:
    """Tokens one local expert's GEMMs run on one GPU per micro-batch, the ``M`` of its
    grouped GEMM: the ``etp·ep`` ranks of an expert group hold ``etp·ep/tp`` tensor-parallel
    groups' ``T = b·s/c`` tokens, each routed to ``topk`` of ``E`` experts, and the ``etp``
    ranks of an expert's tensor-parallel group all run all of its tokens:
    ``T·topk·etp·ep/(tp·E)`` times ``load`` (``moe_load``; ``T·topk/(E/ep)`` with
    ``etp = tp``)."""
    etp = tp if etp is None else etp
    return tokens_per_gpu(b, m.seq_length, cp) * m.moe_router_topk * etp * ep \
        / (tp * m.num_experts) * load


def layer_gemms(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                kind: str | None = None, etp: Num | None = None,
                load: Num = 1.0) -> list[tuple]:
    """The GEMMs of one layer on one GPU: ``(count, M tokens, N out, K in, row_parallel)``.

    Attention: ``ModelSpec.attention_linears`` (column-parallel weights split N over tp,
    row-parallel split K, replicated ones, MLA's down projections, whole). Dense MLP: up
    (``F`` or ``2F`` gated) and down. MoE: ``num_experts/ep`` local experts, each a GEMM of
    ``expert_tokens`` rows (``load``: the hottest rank's, ``moe_load``) with its width split
    over the expert tensor-parallel size ``etp`` (default ``tp``), the shared experts as one
    MLP of their summed width, the router (``row_parallel`` None: replicated, bf16) and
    Qwen2-MoE's shared-expert gate. Summed, the routed experts' FLOPs
    ``2·T·topk·(2 or 3)·h·F_e·load/tp`` depend on neither ``ep`` nor ``etp``.
    ``kind`` None: the mean layer (``ModelSpec.layer_shares`` scales each kind's counts)."""
    return [g for _, g in layer_gemm_parts(m, b, tp, cp, ep, kind, etp, load)]


#: The part of a layer each GEMM of ``layer_gemm_parts`` belongs to (what a selective
#: recomputation module redoes: ``strategies.cost.recompute.MODULE_PARTS``).
GEMM_PARTS = ("attn", "mla_up", "dense_mlp", "routed_mlp", "shared_mlp")


def whole_gemm_split(tp: Num, sp: Num, shard_rows: bool, down_column: bool
                     ) -> tuple[Num, Num]:
    """``(rows, cols)``: what divides the shape of the GEMMs tensor parallelism leaves whole
    (``ModelSpec.attention_linears``' ``"rep"``: MLA's down projections; the router and a
    shared-expert gate, ``row_parallel`` None) on one rank. ``rows``: ``tp`` where the stack
    runs them on the rank's sequence shard under SP (``shard_rows``,
    ``FrameworkProfile.sp_shard_whole_gemms``; ``sp``), else 1. ``cols``: ``tp`` where MLA's
    down projections are column-parallel (``down_column``, ``FrameworkProfile.mla_down_proj``
    "column": ``T`` gathered rows, ``w/tp`` outputs), else 1; a column-parallel down
    projection takes its rows whole (its input all-gathered), so ``layer_gemm_parts``
    divides its rows by ``rows`` only where ``cols`` is 1. Vectorised."""
    t = np.asarray(tp, dtype=float)
    rows = np.where(np.logical_and(shard_rows, sp) & (t > 1), t, 1.0)
    cols = np.where(np.logical_and(down_column, t > 1), t, 1.0)
    return rows[()], cols[()]


def layer_gemm_parts(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                     kind: str | None = None, etp: Num | None = None,
                     load: Num = 1.0, whole: tuple[Num, Num] = (1.0, 1.0)
                     ) -> list[tuple[str, tuple]]:
    """``layer_gemms`` in order, each with its part (``GEMM_PARTS``): the attention's
    linears (``mla_up``: MLA's ``q_up`` and ``kv_up``), the dense MLP, the routed experts
    (over ``etp``, ``load`` times the mean rows) with their router, the shared experts with
    their gate. ``whole``: ``whole_gemm_split``'s ``(rows, cols)`` of the GEMMs tensor
    parallelism leaves whole: MLA's down projections ``(T/rows, w, h)``, or ``(T, w/cols,
    h)`` column-parallel; the router and the gate ``T/rows`` rows. (1, 1): every rank runs
    them on all ``T`` rows at the full width."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    h, up = m.hidden_size, (2 if m.gated else 1)
    etp = tp if etp is None else etp
    rows, cols = whole
    T_rep = T / np.where(np.asarray(cols) > 1, 1.0, rows)[()]
    T_gate = T / rows
    out: list[tuple[str, tuple]] = []
    for name, k_in, n_out, split in m.attention_linears():
        part = "mla_up" if name in ("q_up", "kv_up") else "attn"
        if split == "row":
            out.append((part, (1, T, n_out, k_in / tp, True)))
        elif split == "col":
            out.append((part, (1, T, n_out / tp, k_in, False)))
        else:
            out.append((part, (1, T_rep, n_out / cols, k_in, False)))
    for kind_, w in m.layer_shares(kind).items():
        if kind_ == "dense":
            F = m.ffn_hidden_size
            out += [("dense_mlp", (w, T, up * F / tp, h, False)),
                    ("dense_mlp", (w, T, h, F / tp, True))]
            continue
        F, local = m.expert_ffn, m.num_experts / ep
        Me = expert_tokens(m, b, tp, cp, ep, etp, load)
        out += [("routed_mlp", (w * local, Me, up * F / etp, h, False)),
                ("routed_mlp", (w * local, Me, h, F / etp, True)),
                ("routed_mlp", (w, T_gate, m.num_experts, h, None))]
        if m.num_shared_experts:
            Fs = m.num_shared_experts * m.shared_ffn
            out += [("shared_mlp", (w, T, up * Fs / tp, h, False)),
                    ("shared_mlp", (w, T, h, Fs / tp, True))]
        if m.shared_expert_gate:
            out.append(("shared_mlp", (w, T_gate, 1, h, None)))
    return out


def mlp_part_widths(m: ModelSpec) -> dict[str, float]:
    """MLP intermediate width per token of the mean layer by part: the dense MLP ``F`` (its
    share of the layers), the routed experts ``k·F_e`` and the shared experts (the MoE
    layers' share); they sum to ``ModelSpec.mean_mlp_width``."""
    sh = m.layer_shares()
    wd, wm = sh.get("dense", 0.0), sh.get("moe", 0.0)
    return {"dense_mlp": wd * m.ffn_hidden_size,
            "routed_mlp": wm * m.moe_router_topk * m.expert_ffn if m.is_moe else 0.0,
            "shared_mlp": wm * m.num_shared_experts * m.shared_ffn if m.is_moe else 0.0}


def op_sac_gemms(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                 kind: str | None = None, etp: Num | None = None,
                 load: Num = 1.0) -> list[tuple]:
    """``op_sac_gemm_parts`` without the parts."""
    return [g for _, g in op_sac_gemm_parts(m, b, tp, cp, ep, kind, etp, load)]


def op_sac_gemm_parts(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                      kind: str | None = None, etp: Num | None = None,
                      load: Num = 1.0) -> list[tuple[str, tuple]]:
    """The GEMMs of one layer on one GPU in torchtitan's forward order, each flagged as saved or
    recomputed by its op-level selective checkpointing (``recompute=op``), with its part
    (``GEMM_PARTS``; MLA's up projections under ``attn``):
    ``(part, (count, M, N, K, row_parallel, saved))``.

    torchtitan's policy (``torchtitan/distributed/activation_checkpoint.py``, ``SelectiveAC``):
    inside one layer's checkpoint, a counter numbers every ``mm``/``linear`` in forward order;
    odd ones (1st, 3rd, ...) are saved, even ones recomputed. Its models run Q, K and V as
    three linears (``wq, wk, wv``) and the gated MLP as ``w2(silu(w1 x) * w3 x)``, so the
    order is q, k, v, out-projection, then w1, w3, w2 (gated) or fc1, fc2; MLA keeps
    ``ModelSpec.attention_linears``' order. MoE: the router's linear counts; the routed
    experts run as grouped GEMMs, which are not in its save list (recomputed, not counted);
    the shared experts (w1, w3, w2) and a shared-expert gate count after them. The counter
    restarts with each layer; per ``kind`` the MLP continues the attention's count.
    ``kind`` None: the mean layer (``ModelSpec.layer_shares``); the routed experts as
    ``layer_gemms`` runs them (``etp``, ``load``)."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    h, up = m.hidden_size, (2 if m.gated else 1)
    attn: list[tuple] = []
    for name, k_in, n_out, split in m.attention_linears():  # part "attn"
        if name == "qkv":                    # torchtitan: wq, wk, wv
            a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
            attn += [(1, T, a * d / tp, k_in, False), (1, T, g * d / tp, k_in, False),
                     (1, T, g * d / tp, k_in, False)]
        elif split == "row":
            attn.append((1, T, n_out, k_in / tp, True))
        else:
            attn.append((1, T, n_out / tp if split == "col" else n_out, k_in, False))

    def mlp(w: Num, M: Num, F: Num, t: Num = tp) -> list[tuple]:
        ups = [(w, M, F / t, h, False)] * up           # w1 (and w3 when gated)
        return ups + [(w, M, h, F / t, True)]

    out: list[tuple[str, tuple]] = []
    shares = m.layer_shares(kind)
    for kind_, w in shares.items():
        counted = [("attn", (w * c, M, N, K, r)) for c, M, N, K, r in attn]
        uncounted: list[tuple] = []
        if kind_ == "dense":
            counted += [("dense_mlp", g) for g in mlp(w, T, m.ffn_hidden_size)]
        else:
            local = m.num_experts / ep
            Me = expert_tokens(m, b, tp, cp, ep, etp, load)
            counted.append(("routed_mlp", (w, T, m.num_experts, h, None)))
            uncounted += [(c * local, M, N, K, r) for c, M, N, K, r in
                          mlp(w, Me, m.expert_ffn, tp if etp is None else etp)]
            if m.num_shared_experts:
                counted += [("shared_mlp", g)
                            for g in mlp(w, T, m.num_shared_experts * m.shared_ffn)]
            if m.shared_expert_gate:
                counted.append(("shared_mlp", (w, T, 1, h, None)))
        out += [(p, g + (i % 2 == 0,)) for i, (p, g) in enumerate(counted)]
        out += [("routed_mlp", g + (False,)) for g in uncounted]
    return out


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


def causal_fraction(s: int) -> float:
    """Share of the ``s x s`` score square a causal FlashAttention kernel computes: the lower
    triangle of 128x128 blocks, diagonal blocks in full, ``(n+1)/(2n)`` for ``n = ceil(s/128)``
    blocks per side (``0.5 + 64/s`` when 128 divides ``s``; 1 for one block)."""
    n = max(1, -(-int(s) // 128))
    return (n + 1) / (2.0 * n)


def _causal_blocks(n: int, w: int) -> int:
    """128x128 blocks a causal kernel computes over ``n`` query blocks when each reaches back
    at most ``w`` key blocks (its own included): ``sum min(i+1, w)``."""
    if n <= w:
        return n * (n + 1) // 2
    return w * (w + 1) // 2 + (n - w) * w


SCORE_MODES = ("square", "causal", "kernel")


def score_elements(s: int, window: int | None = None, kind: str = "sliding",
                   mode: str = "square") -> float:
    """Score elements one head of one sequence computes (QK^T entries, per layer).

    ``mode`` "square": the model-FLOP convention, ``s²`` for full attention, the band
    ``s² - (s-W)²`` for a sliding window of ``W < s`` keys, ``sum ℓ²`` over the chunks of
    chunked attention (Llama 4: each chunk of ``C`` tokens attends within itself). "causal":
    the pairs a causal mask keeps, ``s(s+1)/2``, ``sum min(i+1, W)`` in a sliding window,
    ``sum ℓ(ℓ+1)/2`` over chunks. "kernel": the 128x128 blocks a causal kernel that skips
    masked blocks computes, ``s²·causal_fraction(s)``; in a sliding window each query block
    reaches back ``ceil((W-1)/128) + 1`` key blocks. A window of at least ``s`` is full
    attention."""
    if mode not in SCORE_MODES:
        raise ValueError(f"mode={mode!r}: must be one of {', '.join(SCORE_MODES)}")
    if window is None or window >= s:
        return {"square": float(s * s), "causal": s * (s + 1) / 2.0,
                "kernel": s * s * causal_fraction(s)}[mode]
    if kind == "chunked":
        q, r = divmod(s, window)
        return sum(score_elements(c, None, mode=mode) for c in [window] * q + ([r] if r else []))
    if mode == "square":
        return float(s * s - (s - window) ** 2)
    if mode == "causal":
        return window * (window + 1) / 2.0 + (s - window) * window
    n = max(1, -(-int(s) // 128))
    return s * s * _causal_blocks(n, -(-(window - 1) // 128) + 1) / (n * n)


def mean_score_elements(m: ModelSpec, mode: str = "square", windows: bool = True) -> float:
    """``score_elements`` of the mean layer: windowed and full layers weighted by count
    (``windows`` False: every layer full, what an unfused kernel computes before masking)."""
    s, L, nw = m.seq_length, m.num_layers, m.num_windowed_layers
    full = score_elements(s, None, mode=mode)
    if not nw or not windows:
        return full
    win = score_elements(s, m.sliding_window, m.window_kind, mode)
    return ((L - nw) * full + nw * win) / L


def attn_core_flops_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, causal_skip: Num,
                        windows: bool = True) -> Num:
    """QK^T and AV FLOPs per GPU of the mean layer: ``2·b·a·(d_qk + d_v)/(t·c)`` per score
    element (``4·b·s²·h/(t·c)`` for the full square of a standard layer, ``a·d = h``), over
    ``mean_score_elements`` (the full square, or the causal kernel's blocks when it skips the
    masked ones, ``causal_skip`` = 1; windows as ``score_elements``, or ignored with
    ``windows`` False: the unfused path computes the whole square and masks it)."""
    per = 2 * b * m.num_attention_heads * (m.head_dim + m.v_dim) / (tp * cp)
    full = mean_score_elements(m, "square", windows)
    skip = mean_score_elements(m, "kernel")
    return per * np.where(causal_skip, skip, full) if np.ndim(causal_skip) else \
        per * (skip if causal_skip else full)


def attn_exponentials_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Exponentials per GPU of the mean layer's fused (Flash) attention forward: one per score
    element the causal kernel computes, ``b·a/(t·c)`` times ``mean_score_elements(m,
    "kernel")`` (``attn_core_flops_fwd`` with causal skipping over its ``2·(d_qk + d_v)`` FLOPs
    per element); the backward recomputes each once more (``P = exp(S - LSE)``)."""
    return b * m.num_attention_heads / (tp * cp) * mean_score_elements(m, "kernel")


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
    attn = attn_core_flops_fwd(m, gbs, 1, 1, flash) * L
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


def early_stop_gemms(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                     etp: Num | None = None, load: Num = 1.0) -> list[tuple]:
    """The GEMMs of the mean layer that a full recomputation which stops early does not rerun
    (``FrameworkProfile.recompute_early_stop``: PyTorch's non-reentrant checkpoint): the
    dense MLP's down projection, the layer's last GEMM, whose input and weight are the last
    tensors its forward saves (its count is the dense layers' share). A MoE layer ends in the
    experts' combine (a gather and a weighted sum that save the routing), after which nothing
    is skipped: none of its GEMMs."""
    return [g for part, g in layer_gemm_parts(m, b, tp, cp, ep, None, etp, load)
            if part == "dense_mlp" and g[4]]


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
    attn = attn_core_flops_fwd(m, gbs, 1, 1, False) * L
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


def attn_core_flops_per_token(m: ModelSpec, causal: bool = False) -> float:
    """Forward QK^T and AV FLOPs per token of all layers: ``2·a·(d_qk + d_v)`` per score
    element, over the square or (``causal``) the causal pairs, ``mean_score_elements / s``."""
    per = 2.0 * m.num_attention_heads * (m.head_dim + m.v_dim)
    return per * m.num_layers * mean_score_elements(m, "causal" if causal else "square") \
        / m.seq_length


def mtp_flops_fwd_per_token(m: ModelSpec, causal: bool = False) -> float:
    """Forward FLOPs per token of the multi-token-prediction modules (DeepSeek-V3 §2.2): per
    module, the ``2h -> h`` projection, one transformer layer (MoE when the model is) with its
    attention and a pass through the shared output head."""
    if not m.num_nextn_predict_layers:
        return 0.0
    kind = "moe" if m.is_moe else "dense"
    attn = 2.0 * m.num_attention_heads * (m.head_dim + m.v_dim) / m.seq_length * \
        score_elements(m.seq_length, mode="causal" if causal else "square")
    per = (2.0 * 2 * m.hidden_size ** 2 + gemm_flops_fwd(m, 1, 1, 1, kind) / m.seq_length
           + attn + head_flops_fwd_per_token(m))
    return m.num_nextn_predict_layers * per


def training_flops_per_token(m: ModelSpec, causal: bool = False, mtp: bool = False) -> float:
    """FLOPs of one token's forward and backward (3 x forward): every layer's GEMMs, the
    attention core (the full square, or the causal pairs ``s(s+1)/2`` when ``causal``: the
    count behind DeepSeek's published FLOPs per token), the output head, and with ``mtp`` the
    multi-token-prediction modules. Embedding lookups, norms and activations not counted."""
    fwd = gemm_flops_fwd(m, 1, 1, 1) * m.num_layers / m.seq_length \
        + attn_core_flops_per_token(m, causal) + head_flops_fwd_per_token(m)
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


# ----------------------------------------------------------------------------- memory traffic
def elementwise_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num,
                          kernels: str = "fused") -> Num:
    """HBM bytes of the memory-bound kernels of one layer's forward, per GPU.

    Counted per token (bf16, 1-byte dropout masks), with Megatron's fusions: two LayerNorms
    (read + write h each: 4h·2 B), two bias-dropout-add (read x and residual, write out, write
    mask: 3h·2 B + h; no mask for a model trained without dropout, ``ModelSpec.dropout``),
    the MLP activation (read F or 2F if gated, write F: 2F·2 B or 3F·2 B), and rotary
    embedding on Q and K when used. Without sequence parallelism the LayerNorm and dropout
    work is replicated on every tensor-parallel rank; with it, divided by t.
    ``kernels="eager"`` (``FrameworkProfile.elementwise_kernels``): the model's own eager
    PyTorch ops instead, ``eager_elementwise_bytes_fwd``; ``kernels="compiled"``: the same
    model under torch.compile, ``compiled_elementwise_bytes_fwd``.
    """
    if kernels == "eager":
        return eager_elementwise_bytes_fwd(m, b, tp, cp, sp)
    if kernels == "compiled":
        return compiled_elementwise_bytes_fwd(m, b, tp, cp, sp)
    T = tokens_per_gpu(b, m.seq_length, cp)
    h = m.hidden_size
    # the 1-byte mask only where the model trains with dropout (ModelSpec.dropout: with
    # p = 0 the fused bias-dropout-add reads x and the residual and writes the sum, no mask)
    norm_drop = (norm_bytes_per_token(m) + 2 * (6 * h + (h if m.dropout else 0))) * T
    act = activation_fn_bytes_fwd(m, b, tp, cp, m.mean_mlp_width())
    rope = 2 * 2 * rope_width(m) * T / tp if m.position_embedding == "rope" else 0
    return norm_drop / _seq_shard(tp, sp) + act + rope


#: HBM bytes per hidden element of torchtitan's eager ``RMSNorm`` (2024, models/norms.py:
#: ``self._norm(x.float()).type_as(x) * self.weight``; ``torch.nn.RMSNorm``'s composite is the
#: same ops): ``x.float()`` 2 + 4, ``pow(2)`` 4 + 4, ``mean`` 4, ``x * rsqrt(...)`` 4 + 4,
#: ``type_as`` 4 + 2, ``* weight`` 2 + 2; an eager ``nn.LayerNorm`` is one kernel, 2 + 2.
EAGER_RMSNORM_BYTES = 36.0
EAGER_LAYERNORM_BYTES = 4.0
#: per element of q and k, torchtitan's ``apply_rotary_emb`` (complex multiply in fp32):
#: ``x.float()`` 2 + 4, ``x_ * freqs_cis`` 4 + 4, ``type_as`` 4 + 2.
EAGER_ROPE_BYTES = 20.0
#: per element of the MLP intermediate: ``F.silu(w1(x))`` 2 + 2, ``* w3(x)`` 2 + 2 + 2 (an
#: ungated activation is the first kernel alone).
EAGER_SWIGLU_BYTES = 10.0
EAGER_ACT_BYTES = 4.0
#: per element, a residual add ``x + f(x)``: 2 + 2 + 2.
EAGER_ADD_BYTES = 6.0


def eager_elementwise_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """HBM bytes of one layer's memory-bound forward kernels, per GPU, as torchtitan's eager
    Llama block runs them (models/llama/model.py ``TransformerBlock.forward``, no
    torch.compile): two norms (``EAGER_RMSNORM_BYTES`` per element) and two residual adds
    over ``h`` (divided by ``t`` with sequence parallelism, as ``elementwise_bytes_fwd``),
    rotary embedding on q and k (``EAGER_ROPE_BYTES``), ``repeat_kv``'s copy of K and V to
    every query head where ``g < a`` (read ``g·d``, write ``a·d``, 2 B each, twice), and the
    MLP activation (``EAGER_SWIGLU_BYTES`` over ``F``); per token, times the GPU's tokens."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    h = m.hidden_size
    norm = EAGER_RMSNORM_BYTES if m.norm == "rmsnorm" else EAGER_LAYERNORM_BYTES
    per_h = (2 * norm + 2 * EAGER_ADD_BYTES) * h * T
    rope = EAGER_ROPE_BYTES * rope_width(m) * T / tp if m.position_embedding == "rope" else 0.0
    a, g = m.num_attention_heads, m.kv_heads
    repeat = 2 * 2 * (g + a) * m.head_dim * T / tp if (g < a and not m.is_mla) else 0.0
    act = (EAGER_SWIGLU_BYTES if m.gated else EAGER_ACT_BYTES) * m.mean_mlp_width() * T / tp
    return per_h / _seq_shard(tp, sp) + rope + repeat + act


#: HBM bytes per hidden element of one torch.compile'd torchtitan block's norm and residual
#: kernels (``TransformerBlock.forward``: ``h = x + attention(attention_norm(x))``, ``out = h +
#: feed_forward(ffn_norm(h))``, compiled per block by ``apply_compile``): inductor makes one
#: Triton kernel per fusible region and leaves the matmuls and SDPA to cuBLAS and the flash
#: kernel, so the fp32 upcasts stay in registers and what is left is each region's bf16 reads
#: and writes. ``attention_norm``: read x, write its output (2 + 2); the first residual add
#: fused into ``ffn_norm``'s kernel: read x and the attention output, write h (kept for the
#: second add and the backward) and the norm's output (2 + 2 + 2 + 2); the second add, the
#: block graph's last op after the w2 matmul (no epilogue fusion into cuBLAS by default):
#: 2 + 2 + 2. docs/calibration.md §5.69.
COMPILED_NORM_ADD_BYTES = 4.0 + 8.0 + 6.0
#: per element of the MLP intermediate: ``silu(w1(x)) * w3(x)`` one kernel, read both, write
#: the product (2 + 2 + 2); an ungated activation reads and writes (2 + 2).
COMPILED_SWIGLU_BYTES = 6.0
COMPILED_ACT_BYTES = 4.0


def compiled_elementwise_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """HBM bytes of one layer's memory-bound forward kernels, per GPU, as torchtitan's Llama
    block runs them under torch.compile (``--compile.enable``, ``apply_compile`` per
    ``TransformerBlock``; docs/calibration.md §5.69): the norms and residual adds
    (``COMPILED_NORM_ADD_BYTES`` over ``h``, divided by ``t`` with sequence parallelism);
    rotary embedding on q, read and write (2 + 2 B over ``a·d``); on k, fused with
    ``repeat_kv``'s copy where ``g < a`` (read ``g·d``, write ``a·d``, else 2 + 2 over
    ``g·d``); v's ``repeat_kv`` copy where ``g < a`` (read ``g·d``, write ``a·d``); the MLP
    activation (``COMPILED_SWIGLU_BYTES`` over ``F``); per token, times the GPU's tokens. An
    MLA model's rotary is counted as ``elementwise_bytes_fwd``'s (read and write its rope
    width), with no repeat."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    per_h = COMPILED_NORM_ADD_BYTES * m.hidden_size * T
    a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
    if m.is_mla:
        qkv = 2 * 2 * rope_width(m) if m.position_embedding == "rope" else 0.0
    else:
        rope = m.position_embedding == "rope"
        q = 2 * 2 * a * d if rope else 0.0
        if g < a:       # k (rotated in the same kernel when rope) and v, repeated to a heads
            qkv = q + 2 * 2 * (g + a) * d
        else:
            qkv = q + (2 * 2 * g * d if rope else 0.0)
    act = (COMPILED_SWIGLU_BYTES if m.gated else COMPILED_ACT_BYTES) * m.mean_mlp_width()
    return per_h / _seq_shard(tp, sp) + (qkv + act) * T / tp


def _seq_shard(tp: Num, sp: Num) -> Num:
    """What sequence parallelism divides the replicated per-token work by (``tp`` or 1)."""
    return np.where(sp, tp, 1) if np.ndim(sp) or np.ndim(tp) else (tp if sp else 1)


def norm_bytes_per_token(m: ModelSpec) -> float:
    """HBM bytes per token of one layer's two norms' forward: each reads and writes ``h``
    bf16 elements, ``8h``."""
    return 8 * m.hidden_size


def norm_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """HBM bytes of one layer's two norms' forward per GPU (``norm_bytes_per_token`` over
    the GPU's tokens; divided by ``t`` with SP)."""
    return norm_bytes_per_token(m) * tokens_per_gpu(b, m.seq_length, cp) / _seq_shard(tp, sp)


def activation_fn_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, width: Num) -> Num:
    """HBM bytes of the MLP activation function's forward per GPU over an intermediate of
    ``width`` per token (read ``F`` or ``2F`` gated, write ``F``; bf16), split by ``t``."""
    act_elems = (3 if m.gated else 2) * width
    return 2 * act_elems * tokens_per_gpu(b, m.seq_length, cp) / tp


def rope_width(m: ModelSpec) -> int:
    """Elements per token rotary embedding rotates: q and k, ``(a + g)·d``; MLA rotates only
    the rope part of each query head and the one shared rope key, ``(a + 1)·d_rope``."""
    if m.is_mla:
        return (m.num_attention_heads + 1) * m.qk_rope_head_dim
    return (m.num_attention_heads + m.kv_heads) * m.head_dim


#: HBM bytes per score element of the unfused attention path (Megatron's, no FlashAttention),
#: forward: QK^T's ``baddbmm`` writes the score (2), the fused scale-mask-softmax reads and
#: writes it (2 + 2), attention dropout reads it and writes it and its 1-byte mask (2 + 2 + 1)
#: and AV's ``bmm`` reads it (2). NVIDIA/Megatron-LM v2.x and bigscience-workshop/
#: Megatron-DeepSpeed ``megatron/model/transformer.py`` ``ParallelAttention.forward``.
SCORE_BYTES_FWD = 13.0
#: ... and backward (autograd of the same ops): AV's backward writes ``dP = dO·V^T`` (2) and
#: reads the dropped-out probabilities for ``dV = P^T·dO`` (2); dropout's backward reads ``dP``
#: and the mask and writes (2 + 1 + 2); the fused softmax backward reads the gradient and the
#: saved softmax output and writes in place (2 + 2 + 2); QK^T's backward reads ``dS`` for
#: ``dQ = dS·K`` and for ``dK = dS^T·Q`` (2 + 2). docs/calibration.md §3.25.
SCORE_BYTES_BWD = 19.0
#: The attention dropout's share of those bytes, forward (it reads the probabilities, writes
#: them and its 1-byte mask: 2 + 2 + 1) and backward (reads ``dP`` and the mask, writes:
#: 2 + 1 + 2). A model trained without dropout (``ModelSpec.dropout`` False) never spends
#: them: ``F.dropout(x, p=0)`` returns ``x`` itself (PyTorch ``aten/src/ATen/native/
#: Dropout.cpp``, ``_dropout_impl``), so AV reads the softmax output directly, as Transformer
#: Engine's ``UnfusedDotProductAttention`` runs it (``torch.nn.Dropout(0.0)``). §5.44.
DROPOUT_SCORE_BYTES_FWD = 5.0
DROPOUT_SCORE_BYTES_BWD = 5.0


def score_bytes(m: ModelSpec) -> tuple[float, float]:
    """HBM bytes per score element of the unfused attention path, (forward, backward):
    ``SCORE_BYTES_FWD``/``SCORE_BYTES_BWD``, less the dropout's share
    (``DROPOUT_SCORE_BYTES_*``) for a model trained without dropout."""
    if m.dropout:
        return SCORE_BYTES_FWD, SCORE_BYTES_BWD
    return (SCORE_BYTES_FWD - DROPOUT_SCORE_BYTES_FWD,
            SCORE_BYTES_BWD - DROPOUT_SCORE_BYTES_BWD)


def score_elements_per_gpu(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Elements of the unfused path's score tensors per GPU and layer: ``a·s²·b/(t·c)`` (the
    whole square: the unfused path computes it, the causal mask only hides a half)."""
    s = m.seq_length
    return m.num_attention_heads * s * s * b / (tp * cp)


def _unless_flash(flash: Num, per: Num) -> Num:
    """``per`` where the plan runs the unfused attention path, 0 under FlashAttention (scalar
    ``flash`` keeps a scalar)."""
    return np.where(flash, 0.0, per) if np.ndim(flash) else (0.0 if flash else per)


def softmax_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, flash: Num,
                      bias_bytes: float = 0.0) -> Num:
    """HBM bytes of the unfused attention path (no FlashAttention), per GPU, forward:
    ``score_bytes(m)[0]`` per score element (``score_elements_per_gpu``), plus ``bias_bytes``
    per element where the stack adds a position bias into the score tensor
    (``FrameworkProfile.alibi_score_bytes`` for ALiBi). Zero with FlashAttention (scores stay
    on chip)."""
    return _unless_flash(flash, (score_bytes(m)[0] + bias_bytes)
                         * score_elements_per_gpu(m, b, tp, cp))


def softmax_bytes_bwd(m: ModelSpec, b: Num, tp: Num, cp: Num, flash: Num) -> Num:
    """HBM bytes of the unfused attention path's backward per GPU: ``score_bytes(m)[1]`` per
    score element (a bias added in the forward has no gradient: ALiBi's is a buffer). Zero
    with FlashAttention."""
    return _unless_flash(flash, score_bytes(m)[1] * score_elements_per_gpu(m, b, tp, cp))


# ----------------------------------------------------------------------- communication volumes
def tp_comm_bytes_fwd(m: ModelSpec, b: Num, cp: Num) -> Num:
    """Bytes of the activation tensor that one tensor-parallel collective moves: ``b·s·h/c``
    elements of 2 bytes. A layer's forward runs two such all-reduces (or, with SP, two
    all-gather + reduce-scatter pairs); the backward runs the same two (Korthikanti §4.2.2)."""
    return ACT_BYTES * tokens_per_gpu(b, m.seq_length, cp) * m.hidden_size


def pp_p2p_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num) -> Num:
    """Bytes sent between consecutive pipeline stages per micro-batch, each direction, by one
    GPU: ``b·s·h`` activations, split over the tensor-parallel ranks with sequence parallelism
    (or Megatron's scatter/gather optimisation, which does the same thing across the node's
    NICs); ``/c`` with context parallelism."""
    full = ACT_BYTES * tokens_per_gpu(b, m.seq_length, cp) * m.hidden_size
    return full / tp  # scatter/gather (2021) and SP (2022+) both shard the boundary tensor


def sent_kv_heads(m: ModelSpec, heads: str = "kv") -> int:
    """Heads of the K/V block a context-parallel rank sends: the model's KV heads (``"kv"``;
    MLA's up-projected K and V have ``a``), or every query head where the stack repeats K and
    V before attention (``"query"``, ``FrameworkProfile.cp_kv_heads``: torchtitan's Llama calls
    ``repeat_kv`` before ``F.scaled_dot_product_attention``, models/llama/model.py)."""
    return m.num_attention_heads if heads == "query" else m.kv_heads


def cp_comm_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, heads: str = "kv") -> Num:
    """Ring attention: each GPU passes its K and V blocks around the ring, ``c-1`` steps of
    ``T·g·(d + d_v)/t`` elements (``2·T·g·d/t`` for a standard layer; ``g``:
    ``sent_kv_heads``); the backward sends K, V and their gradients (2×)."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    return ACT_BYTES * T * sent_kv_heads(m, heads) * (m.head_dim + m.v_dim) / tp * (cp - 1)


def routed_token_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, load: Num = 1.0) -> Num:
    """Bytes of the routed token copies one GPU sends into one MoE layer's dispatch (and
    receives back in its combine), per micro-batch, in 16 bits: its ``T/tp`` tokens (sequence
    parallel, as Megatron-Core runs MoE under tensor parallelism), each a hidden vector for
    each of its ``topk`` experts, ``load`` times the mean for the hottest rank
    (``moe_load``). A dispatch in a low format moves ``dispatch_bytes/ACT_BYTES`` of it
    (``dispatch_element_bytes``)."""
    return ACT_BYTES * tokens_per_gpu(b, m.seq_length, cp) / tp * m.hidden_size \
        * m.moe_router_topk * load


def dispatch_element_bytes(fp8_dispatch: bool, dtype: str) -> float:
    """Bytes per element of the tokens an expert-parallel dispatch moves: the precision's
    operand bytes (one row-wise copy with its scales: ``1 + 4/128`` for fp8-blockwise, one
    fp32 scale per 128 channels of a token) where the stack dispatches in its low format
    (``FrameworkProfile.fp8_dispatch``) and ``dtype`` is quantised; else ``ACT_BYTES``.
    The combine, and the combine-direction all-to-all of the backward, stay 16-bit; the
    backward's dispatch-direction all-to-all (the output gradients sent to the experts) is
    quantised like the forward's dispatch. Sources: DeepSeek-V3 (arXiv 2412.19437 §3.3.3
    "Low-Precision Communication": the activations before the MoE up-projections quantised
    to FP8 and then dispatched, the same for the activation gradients before the MoE
    down-projections, both combines kept in BF16); DeepEP's ``Buffer.dispatch`` takes
    ``(x: [tokens, hidden] float8_e4m3fn, scales: [tokens, hidden // 128] float)``
    (deepseek-ai/DeepEP ``deep_ep/buffer.py`` at ebfe47e). The one rule the all-to-all's
    bytes (``ep_alltoall_bytes_fwd``), the permutations' HBM bytes (``moe_permute_bytes``)
    and the memory model's send buffer (``activations.permutation_buffer_bytes``) read."""
    if not fp8_dispatch:
        return float(ACT_BYTES)
    p = get_precision(dtype)
    return float(p.operand_bytes) if p.quantised else float(ACT_BYTES)


#: Device-to-host synchronisations one MoE layer's forward makes in Megatron-Core's dropless
#: token dispatchers (``megatron/core/transformer/moe/token_dispatcher.py``): the alltoall
#: dispatcher copies the tokens-per-expert counts to the host for the all-to-all's split sizes
#: (``cuda_sync_point`` "before_ep_alltoall", or "before_finish" without EP), DeepEP's normal
#: dispatch waits on the host for the received counts, and HybridEP without a static token
#: budget reads ``tokens_per_expert.sum()`` to size the combine. The backward reuses the saved
#: split sizes: no synchronisation.
MOE_SYNCS_FWD = 1
#: Python-level operators the host runs between that synchronisation and the next kernel it
#: launches, by ``plan.DISPATCHERS`` code (Megatron-Core 0.17, ``core_v0.17.0``): the GPU's
#: queue is empty, so it waits for them. ``alltoall``: ``d2h_event.synchronize()`` returns in
#: Python and the next launch is the ``all_to_all`` autograd operator's (``token_dispatch``,
#: ``token_dispatcher.py`` L668-676): one operator's host path. ``deepep`` and ``hybridep``
#: wait inside their C++ dispatch (DeepEP's ``Buffer.dispatch`` polls the received counts;
#: HybridEP's ``dispatch_with_permute`` waits for its pinned-memory counts, ``fused_a2a.py``
#: L365-384) and allocate and launch the dispatch from there: no Python operator, the launch
#: gap only. Their ``tokens_per_expert`` arrive as host tensors (``torch.tensor`` of DeepEP's
#: list, HybridEP's pinned copy), so the experts' ``tolist()`` and DeepEP's ``.sum().item()``
#: do not synchronise again.
MOE_SYNC_HOST_OPS = (1, 0, 0)


def moe_permute_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, load: Num = 1.0,
                      dispatcher: Num = 0, dedup: Num = 1.0,
                      etp: Num | None = None,
                      dispatch_bytes: float = ACT_BYTES) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU of the token permutations of the mean
    layer's MoE part (its share of the layers), as Megatron-Core's token dispatchers run them
    (``megatron/core/transformer/moe/token_dispatcher.py``, ``moe_utils.permute``/``unpermute``).

    ``R0 = routed_token_bytes(load=1)``: the GPU's ``T/t`` tokens in ``k`` copies; ``R``: the
    routed copies its experts receive (``load`` times ``R0``). A permutation gathers rows: it
    reads and writes each routed copy once. ``dispatcher`` (``plan.DISPATCHERS`` code):

    * 0 ``alltoall``: permute the local tokens into ``k`` copies sorted by expert (read
      ``R0``, write ``R0``); with ``ep > 1`` and more than one local expert, sort the received
      chunks (all-gathered over the ``etp`` expert-TP ranks first, ``etp·R``; ``etp`` default
      ``tp``) by local expert after the dispatch and back before the combine
      (``sort_chunks_by_idxs``: ``2·etp·R`` each); unpermute (read ``R0``, write the ``T/t``
      tokens, ``R0/k``: the sum of each token's copies). The router probabilities multiply
      the experts' activation (``experts.py``, fused into the SwiGLU kernel), not a pass.
    * 1 ``deepep``, 2 ``hybridep`` (the flex dispatcher): the dispatch delivers each token
      once per destination rank (``dedup`` times ``R``, ``ep_dedup``'s byte scale); the
      receiver permutes them into per-expert copies (read ``dedup·R``, write ``R``;
      ``_DeepepManager`` calls ``permute``, HybridEP's ``dispatch_with_permute`` runs its own
      permute kernel unless ``moe_permute_fusion_into_hybridep``, off by default and in
      Megatron-Bridge's performance scripts) and unpermutes before the combine (read ``R``,
      write ``dedup·R``).

    ``dispatch_bytes`` (``dispatch_element_bytes``): the tokens between the permutation before
    the dispatch and the expert GEMM move at that width (``s = dispatch_bytes/ACT_BYTES`` of
    the 16-bit bytes: the local permute and the sort after the dispatch, the receiver's
    permute), the experts' outputs back to the combine at 16 bits. The backward of a
    permutation is the inverse permutation: the same bytes (its dispatch-direction gradients
    quantised as the forward's dispatch, DeepSeek-V3 §3.3.3). Vectorised."""
    if not m.is_moe:
        z = 0.0 * np.asarray(ep, dtype=float)
        return z[()], z[()]
    share = m.layer_shares().get("moe", 0.0)
    k = m.moe_router_topk
    etp = tp if etp is None else etp
    R0 = routed_token_bytes(m, b, tp, cp, 1.0)
    R = R0 * load
    code = np.asarray(dispatcher)
    sort = np.where((np.asarray(ep) > 1) & (m.num_experts / np.asarray(ep, dtype=float) > 1),
                    4 * R * etp, 0.0)
    q = dispatch_bytes / ACT_BYTES           # 1.0 in 16 bits: the same arithmetic
    a2a = 2 * R0 * q + R0 + R0 / k + sort * (q + 1) / 2
    deep = (dedup * R + R) * q + (R + dedup * R)
    fwd = np.where(code > 0, deep, a2a)
    return (share * fwd)[()], (share * fwd)[()]


#: 16-bit copies of the routed tokens that Megatron-Core's ``TEGroupedMLP`` makes in a quantised
#: precision to align each local expert's rows to the quantised GEMM (``experts.py``:
#: ``self.quantization_padding(permuted_local_hidden_states, tokens_per_expert)`` before fc1,
#: ``self.quantization_unpadding(output, actual_tokens_per_expert)`` after fc2; Transformer
#: Engine ``pytorch/module/fp8_padding.py``/``fp8_unpadding.py``: ``fused_multi_row_padding``
#: reads the tokens and writes them into the padded buffer, 32-row alignment for MXFP8, 16
#: otherwise). The copy is skipped only when every split is already aligned, which the
#: benchmarks' forced balancing (random router logits, ``moe_router_force_load_balancing``)
#: does not give, and unless the router pads instead (``moe_router_padding_for_quantization``,
#: off by default and in the Megatron-Bridge performance configs, e.g. the resolved
#: ``scripts/performance/dryrun_configs/qwen/qwen3_235b_a22b_pretrain_gb200_nvfp4_v1.yaml``).
#: Forward: pad the fc1 input and unpad the fc2 output, each read and written once (2 + 2
#: passes); backward: their inverses on the gradients (2 + 2). The padded rows themselves
#: (under 32 per expert) and the router probabilities' padding (one value per row) are not
#: counted.
EXPERT_PAD_PASSES = (4, 4)


def expert_pad_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, load: Num = 1.0,
                     etp: Num | None = None) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU of the mean layer's quantisation padding of
    the routed tokens (``EXPERT_PAD_PASSES`` 16-bit passes, half over the fc1 input
    ``T/t·k·h·load`` and half over the fc2 output, ``etp`` times that as in
    ``expert_bias_bytes``), on the MoE layers' share; the caller decides whether the stack
    pads (``FrameworkProfile.quant_padding``) and the precision is quantised. Vectorised."""
    if not m.is_moe:
        z = 0.0 * np.asarray(tp, dtype=float)
        return z[()], z[()]
    etp = tp if etp is None else etp
    share = m.layer_shares().get("moe", 0.0)
    R = np.asarray(routed_token_bytes(m, b, tp, cp, load), dtype=float)
    rows = R * (1.0 + np.asarray(etp, dtype=float)) / 2.0   # mean of the input and output copies
    f, bw = EXPERT_PAD_PASSES
    return (share * f * rows)[()], (share * bw * rows)[()]


#: 16-bit passes over the routed experts' fc2 output that Megatron-Core 0.17's
#: ``TEGroupedMLP._apply_bias`` makes to add each local expert's output bias weighted by the
#: router probability, one expert at a time (``torch.split`` of the output, ``t + b * p`` per
#: expert, ``torch.cat``): forward, write ``b·p``, read ``t`` and ``b·p`` and write the sum,
#: read and write it again in the ``cat`` (6); backward, the gradients of ``b`` and ``p``
#: (``(g·p).sum(0)``, ``(g·b).sum(-1)``): each product read and written, then read by its
#: reduction (6). The fc1 bias rides the fused bias-activation kernel (no pass).
EXPERT_BIAS_PASSES = (6, 6)
#: Kernels that per-expert bias path launches per local expert: forward ``b·p`` and the add
#: (plus one ``cat`` per layer), backward the two products and their two reductions.
EXPERT_BIAS_KERNELS = (2, 4)


def expert_bias_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, load: Num = 1.0,
                      etp: Num | None = None) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU of the mean layer's routed-expert output
    bias (models whose experts have biases, gpt-oss; 0 otherwise): ``EXPERT_BIAS_PASSES``
    16-bit passes over the fc2 output the GPU's local experts produce, ``T/t·k·h`` rows
    times ``etp`` (the expert-TP ranks each hold the full hidden width of the partial
    outputs) times ``load``, on the MoE layers' share. Vectorised."""
    etp = tp if etp is None else etp
    if not (m.is_moe and m.bias):
        z = 0.0 * np.asarray(tp, dtype=float)
        return z[()], z[()]
    share = m.layer_shares().get("moe", 0.0)
    out = np.asarray(routed_token_bytes(m, b, tp, cp, load) * etp, dtype=float)
    f, bw = EXPERT_BIAS_PASSES
    return (share * f * out)[()], (share * bw * out)[()]


def expert_bias_kernels(m: ModelSpec, ep: Num) -> tuple[Num, Num]:
    """Kernels ``(forward, backward)`` of the mean layer's per-expert bias path
    (``EXPERT_BIAS_KERNELS`` per local expert, ``E/ep``, and the forward's ``cat``), 0 for
    experts without biases. Vectorised."""
    if not (m.is_moe and m.bias):
        z = 0.0 * np.asarray(ep, dtype=float)
        return z[()], z[()]
    share = m.layer_shares().get("moe", 0.0)
    local = m.num_experts / np.asarray(ep, dtype=float)
    f, bw = EXPERT_BIAS_KERNELS
    return (share * (f * local + 1))[()], (share * bw * local)[()]


#: HBM bytes per element of the routed experts' intermediate (``F`` per routed row) of the
#: eager clamp Megatron-Core 0.15-0.18 runs before its fused quick-GEGLU when
#: ``activation_func_clamp_value`` is set (``fusions/fused_bias_geglu.py``
#: ``weighted_bias_quick_geglu_impl``: ``input.chunk(2, -1)``, ``x_glu.clamp(max=c)``,
#: ``x_linear.clamp(-c, c)``, ``torch.cat``, outside the compiled function). Forward: each
#: clamp reads and writes its half (2·2 B per element of ``F``), the cat reads and writes
#: both (2·2·2 B): 16. Backward (autograd's ``clamp_backward``): ``where(self <= c, g, 0)``,
#: a comparison (read 2 B, write a 1-byte mask) and a ``where`` (read mask and g, write 2 B),
#: 8; the two-sided clamp compares twice and ``logical_and_``s the masks, 14; the chunk's
#: backward ``cat``s the two halves' gradients, 8: 30.
CLAMP_BYTES = (16.0, 30.0)
#: Kernels of that clamp per MoE layer: forward 2 clamps and the cat; backward 2 + 4
#: (comparisons, ``logical_and_``, ``where``s) and the cat.
CLAMP_KERNELS = (3, 7)
#: HBM bytes per rotated element (q and k, ``rope_width``) of Megatron-Core's unfused RoPE
#: (``rope_utils._apply_rotary_pos_emb_bshd``), which it runs instead of Transformer Engine's
#: fused kernel when YaRN's attention factor is not 1 ("mscale ... is not supported by TE's
#: fused RoPE. Using unfused implementation", ``apply_rotary_pos_emb``: the dev 0.15 branch
#: the 25.11 container ships, from "Fixes for gpt-oss" #2076 of 2025-11-05, and 0.16-0.18;
#: the core_v0.15.0 tag still ran the fused kernel and dropped the factor). Forward,
#: in 2-byte elements: ``t * cos`` 2, ``-x2`` 1, ``cat((-x2, x1))`` 2, ``* sin`` 2, the add
#: 3, ``cat((t, t_pass))`` 2: 12, 24 bytes. Backward: the two products' gradients 2 + 2, the
#: negation 1, the chunk's ``cat`` 2, the empty ``t_pass`` slice's ``slice_backward`` (zeros
#: of the full tensor) 1, and the three uses' gradients of ``t`` accumulated, 3 + 3 (the
#: full slice ``t[..., :rot_dim]`` is ``t`` itself: PyTorch skips a slice of the whole
#: dimension): 14, 28 bytes. The fused kernel's (read + write, 4; backward twice, 8) is in
#: ``elementwise_bytes_fwd``.
ROPE_UNFUSED_BYTES = (24.0, 28.0)
ROPE_FUSED_BYTES = (4.0, 8.0)
#: Kernels of the unfused RoPE per rotated tensor (q, k): forward the six above and six on
#: the position table (cos, sin, their scaling and casts), backward seven; less the fused
#: kernel each replaces.
ROPE_UNFUSED_KERNELS = (12, 7)


def clamp_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, load: Num = 1.0) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU of the mean layer's eager activation clamp
    (``CLAMP_BYTES`` per element of the routed intermediate: ``T/t·k·F_e`` elements times
    ``load``, on the MoE layers' share; the ``etp`` ranks of an expert each hold ``F_e/etp``
    of all its rows); 0 without ``activation_clamp``. Vectorised."""
    if m.activation_clamp is None:
        z = 0.0 * np.asarray(tp, dtype=float)
        return z[()], z[()]
    elems = np.asarray(tokens_per_gpu(b, m.seq_length, cp) / tp
                       * mlp_part_widths(m)["routed_mlp"] * load, dtype=float)
    f, bw = CLAMP_BYTES
    return (f * elems)[()], (bw * elems)[()]


def rope_unfused_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU that the unfused RoPE of a model with
    ``rope_attention_factor != 1`` adds over the fused kernel ``elementwise_bytes_fwd``
    prices (``ROPE_UNFUSED_BYTES - ROPE_FUSED_BYTES`` per rotated element, ``rope_width``
    per token over ``t``); 0 for plain RoPE. Vectorised."""
    z = 0.0 * np.asarray(tp, dtype=float)
    if m.rope_attention_factor == 1.0 or m.position_embedding != "rope":
        return z[()], z[()]
    elems = np.asarray(tokens_per_gpu(b, m.seq_length, cp) * rope_width(m) / tp, dtype=float)
    return tuple(((u - f) * elems)[()] for u, f in zip(ROPE_UNFUSED_BYTES, ROPE_FUSED_BYTES))


def eager_variant_kernels(m: ModelSpec, rope: bool = True) -> tuple[float, float]:
    """Kernels ``(forward, backward)`` the mean layer adds with the eager clamp
    (``CLAMP_KERNELS`` on the MoE layers' share) and the unfused RoPE (``ROPE_UNFUSED_KERNELS``
    less one fused kernel, for q and k); ``rope`` False: the clamp's alone."""
    f = b = 0.0
    if m.activation_clamp is not None and m.is_moe:
        share = m.layer_shares().get("moe", 0.0)
        f, b = share * CLAMP_KERNELS[0], share * CLAMP_KERNELS[1]
    if rope and m.rope_attention_factor != 1.0 and m.position_embedding == "rope":
        f += 2 * (ROPE_UNFUSED_KERNELS[0] - 1)
        b += 2 * (ROPE_UNFUSED_KERNELS[1] - 1)
    return f, b


def ep_alltoall_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                          load: Num = 1.0, dispatch_bytes: float = ACT_BYTES) -> Num:
    """Bytes per GPU of the expert all-to-alls of one forward of the mean layer, as Megatron-
    Core's alltoall token dispatcher runs them: the dispatch and the combine, each an
    all-to-all whose per-member buffer is ``routed_token_bytes`` (the member's own share
    included: the all-to-all's closed form takes ``(ep-1)/ep`` of it onto the wire); the
    backward runs the same two. ``dispatch_bytes`` (``dispatch_element_bytes``): the
    dispatch's bytes per element, the combine's 16 bits: ``(dispatch_bytes/ACT_BYTES + 1)``
    routed buffers (2 in 16 bits; the backward's pair likewise, one quantised and one
    16-bit). Only MoE layers (their share of the layers) exchange tokens; 0 with
    ``ep = 1``."""
    if not m.is_moe:
        return 0.0 * ep
    moe_share = m.num_moe_layers / m.num_layers
    return np.where(np.asarray(ep) > 1,
                    (dispatch_bytes / ACT_BYTES + 1) * routed_token_bytes(m, b, tp, cp, load)
                    * moe_share, 0.0)[()]


#: Bytes of one token count Megatron-Core's alltoall dispatcher all-gathers (``preprocess``:
#: ``routing_map.sum(dim=0).long()``, int64) and bytes of one routed copy's router probability it
#: sends in its second all-to-all (``token_dispatch``: ``all_to_all(ep_group, permuted_probs,
#: ...)``), in the router's dtype: the input's 16 bits, since the Megatron-Bridge v0.4.2
#: gpt-oss and Qwen3-MoE bridges set no ``moe_router_dtype`` (only ``qwen3_next_bridge.py``
#: L75 sets ``fp32``)
MOE_COUNT_BYTES = 8
MOE_PROB_BYTES = ACT_BYTES


def dispatcher_metadata_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                              etp: Num | None = None, load: Num = 1.0) -> tuple[Num, Num]:
    """``(counts, probs)`` bytes per GPU of one MoE layer's small collectives that Megatron-
    Core's ``alltoall`` token dispatcher runs besides the tokens' dispatch and combine
    (``megatron/core/transformer/moe/token_dispatcher.py``, ``core_v0.17.0``,
    ``MoEAlltoAllTokenDispatcher``): ``counts``, the all-gather of every rank's tokens per
    expert over the ``etp·ep`` ranks of ``tp_ep_group`` (``preprocess`` L541-543,
    ``gather_from_sequence_parallel_region``), the whole gathered buffer ``etp·ep·E``
    counts of ``MOE_COUNT_BYTES`` (the ring all-gather's ``nbytes``); ``probs``, the router
    probabilities of the rank's routed copies (``routed_token_bytes`` over the hidden size:
    one ``MOE_PROB_BYTES`` value per copy), each rank's all-to-all buffer over the ``ep``
    group (``token_dispatch`` L672-676, its gradient's all-to-all in the backward). Per MoE
    layer (not the mean layer's share). Vectorised."""
    etp = tp if etp is None else etp
    n = np.asarray(etp, dtype=float) * np.asarray(ep, dtype=float)
    counts = n * m.num_experts * MOE_COUNT_BYTES
    probs = routed_token_bytes(m, b, tp, cp, load) / (ACT_BYTES * m.hidden_size) \
        * MOE_PROB_BYTES
    return counts[()], np.asarray(probs, dtype=float)[()]


def ep_remote_scale(m: ModelSpec, ep: Num, etp: Num, gpus_per_node: int) -> Num:
    """Share of the all-to-all's per-pair bytes that crosses between nodes, 1 unless the
    router is node-limited. DeepSeek-V3 (technical report, arXiv:2412.19437, "node-limited
    routing" and its cross-node all-to-all: each token to at most ``M = 4`` nodes; its
    ``config.json``: ``n_group`` 8, ``topk_group`` 4) groups the experts so that
    the groups are the nodes of its expert-parallel group, picks ``M`` groups per token, and
    dispatches a token once to each chosen node over InfiniBand, to be forwarded to its
    experts there over NVLink. A token then leaves its node ``M·(N-1)/N`` times on average
    (its own node is one of the ``M`` with chance ``M/N``) instead of once per expert,
    ``k·(N-1)/N``: the inter-node bytes scale by ``M/k``. Applies where the expert group of
    ``ep`` ranks ``etp`` apart spans exactly ``moe_router_num_groups`` nodes (groups = nodes)
    and ``M < k``. Vectorised."""
    G, M, k = m.moe_router_num_groups, m.moe_router_group_topk, m.moe_router_topk
    if not m.is_moe or not G or not M or M >= k:
        return 1.0 + 0.0 * np.asarray(ep, dtype=float)
    ep, etp = np.asarray(ep, dtype=float), np.asarray(etp, dtype=float)
    per_node = np.maximum(1.0, np.minimum(ep, np.floor(gpus_per_node / etp)))
    nodes = ep / per_node
    return np.where((nodes == G) & (G > 1), M / k, 1.0)[()]


def expert_hit_probability(E: int, k: int, units: Num, G: int | None = None,
                           M: int | None = None) -> Num:
    """Chance that a token's ``k`` experts include one of a unit's (a rank's or a node's
    ``E/units`` consecutive experts), routing uniformly at random (the balanced routing of
    the published benchmarks, which force-balance tokens). With group-limited routing
    (``G`` groups of ``E/G`` consecutive experts, ``M`` chosen uniformly, the ``k`` experts
    among their ``M·E/G``) and units that are whole groups or parts of one: a unit of ``w``
    whole groups is hit when some of its chosen groups (hypergeometric count ``g``) hold one
    of the ``k``, ``1 - C((M-g)E/G, k)/C(ME/G, k)``; a unit inside a group when its group is
    chosen (``M/G``) and one of the ``k`` is its ``E/units``. Otherwise
    ``1 - C(E - E/units, k)/C(E, k)``. Vectorised over ``units`` (divisors of ``E``)."""
    def one(u: float) -> float:
        u = int(u)
        if u <= 1:
            return 1.0
        per = E // u
        if G and M and M < G and E % G == 0:
            size = E // G
            pool = M * size
            if u % G == 0:          # a unit inside one group
                return M / G * (1 - comb(pool - per, k) / comb(pool, k))
            if G % u == 0:          # a unit of w whole groups
                w = G // u
                return sum(comb(w, g) * comb(G - w, M - g) / comb(G, M)
                           * (1 - comb((M - g) * size, k) / comb(pool, k))
                           for g in range(0, min(w, M) + 1))
        return 1 - comb(E - per, k) / comb(E, k)
    arr = np.asarray(units, dtype=float)
    return np.vectorize(one, otypes=[float])(arr)[()]


def contiguous_hit_probability(E: int, k: int, units: Num) -> Num:
    """Chance that a token's experts include one of a unit's (a rank's or a node's ``e = E/units``
    consecutive experts) when token ``t`` takes the ``k`` consecutive experts ``t·k ...
    t·k + k - 1`` (mod ``E``): NeMo AutoModel's benchmark ``FakeBalancedGate``
    (``nemo_automodel/components/moe/layers.py`` at 89e3a9fdd: ``indices = arange(T·k).view(-1,
    k) % E``; plan ``moe_routing=contiguous``). With ``k | E`` every block starts at a multiple
    of ``k``, its offset inside a unit uniform over the multiples of ``g = gcd(k, e)``, and a
    block of ``k`` meets ``1 + (k - g)/e`` units on average (the unit boundaries it crosses:
    ``(k - g)/e``), so the chance is ``(1 + (k - g)/e)/units``; otherwise the mean over the
    ``E/gcd(E, k)`` distinct starts, counted. Routing ignores expert groups (the gate does).
    Vectorised over ``units`` (divisors of ``E``)."""
    def one(u: float) -> float:
        u = int(u)
        if u <= 1:
            return 1.0
        e = E // u
        if E % k == 0:
            return (1 + (k - gcd(k, e)) / e) / u
        starts = [(t * k) % E for t in range(E // gcd(E, k))]
        return sum(len({((s + j) % E) // e for j in range(k)}) for s in starts) / (
            len(starts) * u)
    return np.vectorize(one, otypes=[float])(np.asarray(units, dtype=float))[()]


def ep_dedup(m: ModelSpec, ep: Num, etp: Num, gpus_per_node: int,
             dispatcher: Num, routing: Num = 0) -> tuple[Num, Num]:
    """``(byte_scale, remote_scale)`` of a dispatcher's all-to-all against Megatron's
    ``alltoall`` (``ep_alltoall_bytes_fwd``: one copy per token and expert, ``k``): DeepEP's
    normal kernels and HybridEP (``dispatcher`` code 1, 2) send a token once to each
    destination rank of the node (NVLink) and once to each destination node (RDMA, to the
    GPU of the same local index, which forwards it over NVLink). Per token, ``ep·P_rank``
    distinct ranks against ``k`` copies (``byte_scale``), and ``(N-1)·P_node`` remote nodes
    against ``k(N-1)/N`` remote copies, ``N`` the expert group's nodes (``remote_scale``,
    relative to the scaled bytes, as ``two_level_time`` takes it), ``P`` from
    ``expert_hit_probability``, or where ``routing`` (``plan.ROUTINGS`` code) is 1
    (``contiguous``) from ``contiguous_hit_probability``. ``alltoall``: ``(1,
    ep_remote_scale)`` (one copy per expert whatever the routing). Vectorised."""
    ep, etp = np.asarray(ep, dtype=float), np.asarray(etp, dtype=float)
    code = np.asarray(dispatcher)
    base = ep_remote_scale(m, ep, etp, gpus_per_node)
    if not m.is_moe or not np.any(code > 0):
        return 1.0 + 0.0 * ep, base
    E, k = m.num_experts, m.moe_router_topk
    G, M = m.moe_router_num_groups, m.moe_router_group_topk
    per_node = np.maximum(1.0, np.minimum(ep, np.floor(gpus_per_node / etp)))
    nodes = np.maximum(1.0, ep / per_node)
    ok = (ep > 1) & (E % np.maximum(ep, 1) == 0)
    ranks_u, nodes_u = np.where(ok, ep, 1.0), np.where(ok, nodes, 1.0)
    contiguous = np.asarray(routing) == 1
    p_rank = expert_hit_probability(E, k, ranks_u, G, M)
    p_node = expert_hit_probability(E, k, nodes_u, G, M)
    if np.any(contiguous):
        p_rank = np.where(contiguous, contiguous_hit_probability(E, k, ranks_u), p_rank)
        p_node = np.where(contiguous, contiguous_hit_probability(E, k, nodes_u), p_node)
    byte_scale = np.where(ok, ep * p_rank / k, 1.0)
    nic = np.where(nodes > 1, nodes * p_node / k, 1.0)
    dedup = (code > 0) & ok
    remote = np.where(nodes > 1, nic / np.where(dedup, byte_scale, 1.0), 1.0)
    return np.where(dedup, byte_scale, 1.0)[()], np.where(dedup, remote, base)[()]


#: Share of NCCL's achievable NVLink rate (``comm.NVLINK_EFFICIENCY`` of the link: nccl-tests'
#: bus bandwidth; NVIDIA's "effective NVLink bandwidth of 370GB/s" of 450 for collectives other
#: than all-reduce, NVIDIA/nccl-tests issue #212) that DeepEP's and HybridEP's dispatch and
#: combine kernels reach on NVLink, as their authors publish them: the median of the model's
#: time over the published one at share 1, over every published NVLink-bound case in BF16
#: (each combine and HybridEP's BF16 dispatch: DeepEP V1 on H800 EP8 0.87 and EP16's forwarding
#: leg 0.77, V2 on B200 0.90, HybridEP on B200 0.90 / 0.82 and on GB200 NVL72 0.93 / 0.90 at
#: EP8, 0.86 / 0.81 at EP36: median 0.865), ``python experiments/a2a_measured.py``,
#: docs/calibration.md §5.27. Their FP8 dispatches (half the bytes, the same per-token work)
#: reach less (0.67-0.89 at share 1); a stack that dispatches in FP8 (``dispatch_element_bytes``,
#: §5.40) is priced at its bytes with this share. Megatron's ``alltoall`` dispatcher runs
#: NCCL's all-to-all: share 1.
EP_KERNEL_NVLINK_SHARE = 0.87


def ep_nvlink_share(dispatcher: Num) -> Num:
    """Share of the node fabric's achievable rate an expert all-to-all gets, by
    ``plan.DISPATCHERS`` code: ``EP_KERNEL_NVLINK_SHARE`` for DeepEP and HybridEP (1, 2), 1
    for NCCL's all-to-all (0). Vectorised."""
    return np.where(np.asarray(dispatcher) > 0, EP_KERNEL_NVLINK_SHARE, 1.0)[()]


def etp_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, etp: Num,
                  load: Num = 1.0) -> Num:
    """Bytes of one expert tensor-parallel collective of the mean layer's forward, per GPU:
    after the dispatch the ``etp`` ranks of an expert's tensor-parallel group all-gather the
    tokens each received (``routed_token_bytes``), and before the combine reduce-scatter the
    partial outputs: each collective's buffer is ``etp`` members' tokens. The forward runs one
    all-gather and one reduce-scatter, the backward the same two. 0 with ``etp = 1``. (With
    ``ep = 1`` Megatron gathers the unrouted tokens instead, the dense MLP's tensor-parallel
    collective, and the stage record charges none of this.)"""
    if not m.is_moe:
        return 0.0 * etp
    moe_share = m.num_moe_layers / m.num_layers
    return np.where(np.asarray(etp) > 1,
                    etp * routed_token_bytes(m, b, tp, cp, load) * moe_share, 0.0)[()]


# ----------------------------------------------------------------------------- parameters
# One family of per-GPU parameter counts: the estimate (DP traffic, optimizer), the lower
# bound, the stage-cost record (gradient buckets), cost/compute (gradient accumulation) and
# memory all read these. docs/memory.md "Parameters on stage s".

def expert_params(m: ModelSpec) -> float:
    """Routed-expert parameters of the mean layer, their biases included (0 for a dense
    model; ``ModelSpec.expert_params_per_layer``): the part expert parallelism shards over
    ``tp·ep``; shared experts and the router stay in the dense share."""
    return m.expert_params_per_layer()


def layer_params_split(m: ModelSpec, tp: Num, ep: Num,
                       etp: Num | None = None) -> tuple[Num, Num]:
    """``(dense, expert)`` parameters of the mean layer on one GPU: the routed experts
    (``expert_params``) over ``etp·ep`` (``etp`` default ``tp``); MLA's down projections
    whole on every tensor-parallel rank (``ModelSpec.tp_replicated_params``); everything else
    (attention, norms, router, shared experts, dense biases) over ``tp``."""
    experts, rep = expert_params(m), m.tp_replicated_params()
    etp = tp if etp is None else etp
    return (m.layer_params() - experts - rep) / tp + rep, experts / (etp * ep)


def mtp_layer_kind(m: ModelSpec) -> str:
    """The kind of the transformer layer a multi-token-prediction module holds: ``moe`` when
    the model has experts, else ``dense`` (its parameters and its stash are that kind's)."""
    return "moe" if m.is_moe else "dense"


def mtp_params_split(m: ModelSpec, tp: Num, ep: Num,
                     etp: Num | None = None) -> tuple[Num, Num]:
    """``(dense, expert)`` parameters on one GPU of one multi-token-prediction module
    (``ModelSpec.mtp_params``): its layer (MoE when the model is; ``layer_params_split`` of
    that kind, routed experts over ``etp·ep``), the ``2h -> h`` projection over ``tp`` and
    three norms."""
    dense, expert = layer_params_split(m.of_kind(mtp_layer_kind(m)), tp, ep, etp)
    return dense + 2.0 * m.hidden_size ** 2 / tp + 3 * m.norm_params(), expert


def mtp_embedding_copy_params(m: ModelSpec, tp: Num, mtp_modules: Num,
                              has_embedding: Any) -> Num:
    """Parameters per GPU of the copy of the word embedding Megatron builds on a rank that
    holds multi-token-prediction modules (``mtp_modules > 0``) but not the embedding
    (``embedding_params_per_gpu``); 0 elsewhere. Vectorised."""
    here = (np.asarray(mtp_modules) > 0) & ~np.asarray(has_embedding, dtype=bool)
    return np.where(here, embedding_params_per_gpu(m, tp), 0.0)[()]


def content_params(m: ModelSpec, content: Any, tp: Num, ep: Num, etp: Num | None,
                   has_embedding: Any) -> tuple[Num, Num]:
    """``(dense, expert)`` parameters per GPU of the layers and MTP modules a rank holds,
    ``content`` ``{"dense", "moe", "mtp": counts}`` (per plan; ``layout.stage_content`` of a
    job's layout, ``layout.even_stage_content_arrays`` of the plans' columns): each kind's
    layer (``layer_params_split`` of ``ModelSpec.of_kind``) times its count, the MTP modules'
    (``mtp_params_split``) and, on a rank holding MTP modules without the embedding
    (``has_embedding`` false), the copy of the embedding Megatron builds there. The one
    reading of a rank's parameters by kind: the memory model, the stage-cost record (so the
    estimate's per-rank data-parallel traffic, the lower bound and the simulator's buckets)
    take it. Vectorised."""
    dense, expert = 0.0, 0.0
    for k in ("dense", "moe"):
        n = np.asarray(content.get(k, 0.0), dtype=float)
        if np.any(n):
            d_k, e_k = layer_params_split(m.of_kind(k), tp, ep, etp)
            dense, expert = dense + n * d_k, expert + n * e_k
    mtp = np.asarray(content.get("mtp", 0.0), dtype=float)
    if np.any(mtp):
        d_m, e_m = mtp_params_split(m, tp, ep, etp)
        dense = dense + mtp * d_m + mtp_embedding_copy_params(m, tp, mtp, has_embedding)
        expert = expert + mtp * e_m
    return dense + np.zeros_like(mtp), expert + np.zeros_like(mtp)


def layer_params_per_gpu(m: ModelSpec, tp: Num, ep: Num, etp: Num | None = None) -> Num:
    """Parameters of the mean layer held by one GPU (``layer_params_split``, summed)."""
    dense, expert = layer_params_split(m, tp, ep, etp)
    return dense + expert


def embedding_params_per_gpu(m: ModelSpec, tp: Num) -> Num:
    """Word (+ learned position) embedding on the first stage, ``/tp``."""
    return m.embedding_params() / tp


def head_params_per_gpu(m: ModelSpec, tp: Num, pp: Num, with_embedding: Any = False) -> Num:
    """The output layer on the rank that holds it, ``/tp``: the final norm plus the LM head's
    weights, or, tied, a copy of the word embedding (Megatron) unless that rank holds the
    embedding too (``with_embedding``: a V, ZB-V and DualPipeV, whose rank 0 holds the first
    and the last chunk; DualPipe's end ranks; always with ``pp = 1``): the tied head is then
    the embedding's own tensor and adds only the final norm. Parameters."""
    own = m.vocab_size * m.hidden_size
    if m.tie_word_embeddings:
        copy = (np.asarray(pp) > 1) & ~np.asarray(with_embedding, dtype=bool)
        head = np.where(copy, own, 0.0) if np.ndim(copy) else (own if copy else 0.0)
    else:
        head = m.lm_head_params() + 0 * pp
    return (head + m.norm_params()) / tp


def stage_params_split(m: ModelSpec, tp: Num, ep: Num, pp: Num, stage: Num,
                       layers: Num | None = None,
                       head_stage: Num | None = None, mirrored: Any = False,
                       etp: Num | None = None, content: Any = None) -> tuple[Num, Num]:
    """``(dense, expert)`` parameters held by one GPU of pipeline rank ``stage``: its
    ``layers`` (default ``l/p``; ``Job.layers_of_stage`` for uneven stages) mean layers, or,
    given ``content`` (``{"dense", "moe", "mtp": counts}``, both copies where mirrored), the
    layers and MTP modules it holds by kind (``content_params``), the embedding on
    stage 0 and the output layer on stage ``head_stage`` (default ``pp-1``; the schedule's
    ``head_rank_array``: 0 on a V). ``mirrored`` (``Schedule.mirrored``, DualPipe): the rank
    also holds stage ``pp-1-stage``, so twice the layers and, on both end ranks, the embedding
    and the output layer. ``etp``: the expert tensor-parallel size (default tp)."""
    dense_l, expert_l = layer_params_split(m, tp, ep, etp)
    lps = m.num_layers // pp if layers is None else layers
    head = np.asarray(pp) - 1 if head_stage is None else np.asarray(head_stage)
    first, last = np.asarray(stage) == 0, np.asarray(stage) == head
    mirrored = np.asarray(mirrored, dtype=bool)
    end = first | (np.asarray(stage) == np.asarray(pp) - 1)
    first, last = np.where(mirrored, end, first), np.where(mirrored, end, last)
    lps = np.where(mirrored, 2, 1) * lps
    if content is None:
        layer_d, layer_e = lps * dense_l, lps * expert_l
    else:
        layer_d, layer_e = content_params(m, content, tp, ep, etp, first)
    dense = (layer_d + np.where(first, embedding_params_per_gpu(m, tp), 0.0)
             + np.where(last, head_params_per_gpu(m, tp, pp, first), 0.0))
    return dense, layer_e


def stage_params_per_gpu(m: ModelSpec, tp: Num, ep: Num, pp: Num, stage: Num,
                         layers: Num | None = None, head_stage: Num | None = None,
                         mirrored: Any = False, etp: Num | None = None) -> Num:
    """Parameters held by one GPU of pipeline rank ``stage`` (``stage_params_split``, summed)."""
    dense, expert = stage_params_split(m, tp, ep, pp, stage, layers, head_stage, mirrored, etp)
    return dense + expert


def layer_param_tensors(m: ModelSpec) -> tuple[int, ...]:
    """Numel of each parameter tensor of one layer in forward order (the whole tensor, before
    any split): input norm, attention weights and biases, second norm, MLP weights and biases
    (a MoE layer: the router, then every routed and shared expert's). What a stack that
    gathers one tensor at a time (DeepSpeed ZeRO-3, ``zero3_tensor_gathers``) gathers."""
    h = m.hidden_size
    norm = (h, h) if m.norm == "layernorm" else (h,)
    attn: list[int] = []
    for name, i, o, _ in m.attention_linears():
        attn.append(i * o)
        if name in ("qkv", "q", "kv_up") and (m.bias or m.qkv_bias):
            attn.append(o)
        if name == "proj" and m.bias:
            attn.append(h)

    def mlp(ffn: int) -> list[int]:
        up = (2 if m.gated else 1) * ffn
        return [h * up] + ([up] if m.bias else []) + [ffn * h] + ([h] if m.bias else [])

    if m.is_moe:
        body = [h * m.num_experts] + mlp(m.expert_ffn) * m.num_experts
        body += mlp(m.shared_ffn) * m.num_shared_experts
    else:
        body = mlp(m.ffn_hidden_size)
    return tuple(norm) + tuple(attn) + tuple(norm) + tuple(body)


def zero3_tensor_gathers(m: ModelSpec, tp: Num, ep: Num, pp: Num, full_recompute: Num,
                         reuse_params: float) -> dict[str, Num]:
    """ZeRO-3 run one parameter tensor at a time (DeepSpeed v0.3.13-v0.5, 2021): per
    micro-batch on the first pipeline stage, the all-gathers of the forward (every tensor
    of its ``l/p`` layers, the embedding and, with ``pp = 1``, the final norm and the LM head,
    a tied head gathering the word embedding again), of the backward (with full recompute the
    recomputed forward's and the backward's), and the gradient reduce-scatters (one per
    tensor). A tensor released after use is gathered again at its next use unless fewer than
    ``reuse_params`` parameters are used in between (``stage3_max_reuse_distance``):
    DeepSpeed's ``PartitionedParameterCoordinator._keep_for_later``. Returns counts and
    parameters per GPU (``/tp``; experts ``/(tp·ep)`` folded into the layer's mean):
    ``fwd_n, fwd_params, bwd_n, bwd_params, rs_n, rs_params``. Vectorised."""
    tensors = np.asarray(layer_param_tensors(m), dtype=float)
    T = len(tensors)
    share = tensors / tensors.sum()                       # each tensor's share of the layer
    after = share[::-1].cumsum()[::-1] - share            # share used after it in the layer
    L = m.num_layers // np.asarray(pp)
    P = layer_params_per_gpu(m, tp, ep)                   # one layer on one GPU
    single = np.asarray(pp) == 1
    tied = bool(m.tie_word_embeddings)
    word = m.vocab_size * m.hidden_size / tp
    norm_n = 2 if m.norm == "layernorm" else 1
    head_n = np.where(single, norm_n + 1, 0)              # final norm + head (or tied word)
    head_p = np.where(single, m.norm_params() / tp + (word if tied else m.lm_head_params() / tp),
                      0.0)
    emb_n = 2 if m.position_embedding == "learned" else 1
    emb_p = embedding_params_per_gpu(m, tp)
    R = float(reuse_params)
    rc = np.asarray(full_recompute, dtype=bool)
    bwd_n = 0.0
    bwd_p = 0.0
    for j in range(T):
        s_j, a_j = share[j] * P, after[j] * P
        # k = layers after this one on the stage: forward use -> next use (the recomputed
        # forward, or the backward) passes the rest of this layer, k layers, the head, k
        # layers again and (recompute) the part of this layer before the tensor
        k_rc = np.ceil((R - head_p + s_j - P) / (2 * P))
        n_rc = L - np.clip(k_rc, 0, L)                    # layers whose distance >= R
        k_nr = np.ceil((R - head_p - 2 * a_j) / (2 * P))
        n_nr = L - np.clip(k_nr, 0, L)
        again_bwd = np.where(2 * a_j >= R, L, 0)          # recomputed forward -> backward
        n_j = np.where(rc, n_rc + again_bwd, n_nr)
        bwd_n = bwd_n + n_j
        bwd_p = bwd_p + n_j * s_j
    emb_again = 2 * L * P + head_p >= R                   # embedding: whole stage in between
    bwd_n = bwd_n + np.where(emb_again, emb_n, 0)
    bwd_p = bwd_p + np.where(emb_again, emb_p, 0.0)
    fwd_n = L * T + emb_n + head_n
    fwd_p = L * P + emb_p + head_p
    rs_n = L * T + emb_n + np.where(single, norm_n + (0 if tied else 1), 0)
    rs_p = L * P + emb_p + np.where(single, m.norm_params() / tp + m.lm_head_params() / tp, 0.0)
    return {"fwd_n": fwd_n + 0.0 * P, "fwd_params": fwd_p, "bwd_n": bwd_n + 0.0 * P,
            "bwd_params": bwd_p, "rs_n": rs_n + 0.0 * P, "rs_params": rs_p + 0.0 * P}
