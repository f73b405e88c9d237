"""The GEMMs of one layer on one GPU, ``(count, M tokens, N out, K in, row_parallel)``: as the
layer runs them (``layer_gemms``, ``layer_gemm_parts`` by part), as torchtitan's op-level
selective checkpointing orders and saves them (``op_sac_gemm_parts``), and the ones an
early-stopping full recomputation skips (``early_stop_gemms``). Vectorised over the plan
fields; notation: ``strategies.cost.token_counts``."""
from __future__ import annotations

import numpy as np

from strategies.cost.dsv4_cost import bf16_einsum, dsv4_gemms, router_share
from strategies.cost.token_counts import Num, expert_tokens, tokens_per_gpu
from strategies.model import ModelSpec


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
GEMM_PARTS = ("attn", "mla_up", "dense_mlp", "routed_mlp", "shared_mlp", "mamba")


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
    a = 1                                           # attention blocks per (mean) layer
    if m.is_hybrid:
        a = m.attention_share if kind is None else float(kind == "attention")
    for name, k_in, n_out, split in m.attention_linears():
        part = "mla_up" if name in ("q_up", "kv_up") else "attn"
        if split == "row":
            out.append((part, (a, T, n_out, k_in / tp, True)))
        elif split == "col":   # DeepSeek-V4's wo_a: an einsum over 16-bit weights (dsv4_cost)
            out.append((part, (a, T, n_out / tp, k_in, None if bf16_einsum(m, name) else False)))
        else:
            out.append((part, (a, T_rep, n_out / cols, k_in, False)))
    out += [("attn", g) for g in dsv4_gemms(m, T)]     # DeepSeek-V4's compressors, indexer
    for kind_, w in m.layer_shares(kind).items():
        if kind_ == "dense":
            F = m.ffn_hidden_size
            out += [("dense_mlp", (w, T, up * F / tp, h, False)),
                    ("dense_mlp", (w, T, h, F / tp, True))]
            continue
        F, local, he = m.expert_ffn, m.num_experts / ep, m.expert_hidden
        Me = expert_tokens(m, b, tp, cp, ep, etp, load)
        out += [("routed_mlp", (w * local, Me, up * F / etp, he, False)),
                ("routed_mlp", (w * local, Me, he, F / etp, True)),
                ("routed_mlp", (w * router_share(m), T_gate, m.num_experts, h, None))]
        out += [("routed_mlp", g) for g in latent_gemms(m, w, T_gate)]
        if m.num_shared_experts:
            Fs = m.num_shared_experts * m.shared_ffn
            out += [("shared_mlp", (w, T, up * Fs / tp, h, False)),
                    ("shared_mlp", (w, T, h, Fs / tp, True))]
        if m.shared_expert_gate:
            out.append(("shared_mlp", (w, T_gate, 1, h, None)))
    if m.is_hybrid and m.mamba_share and kind in (None, "mamba"):
        # the Mamba-2 mixers' in_proj and out_proj (strategies.cost.mamba_mixer), last so
        # the attention-then-MLP order the TP rules read stays as it is
        from strategies.cost.mamba_mixer import mamba_gemms
        w = 1.0 if kind == "mamba" else m.mamba_share
        out += [("mamba", (w * c, M, N, K, r)) for c, M, N, K, r in mamba_gemms(m, b, tp, cp)]
    return out


def latent_gemms(m: ModelSpec, w: Num, T: Num) -> list[tuple]:
    """A latent MoE's two projections on ``T`` rows (``w`` layers' worth): ``h -> L`` before
    the dispatch and ``L -> h`` after the combine, whole on every tensor-parallel rank
    (Megatron-Core's ``parallel_mode="duplicated"``; ``row_parallel`` None, priced as the
    router is: ``strategies.model.latent``); [] without ``moe_latent_size``. Forward FLOPs
    ``2·(2·T·h·L)``."""
    L = m.moe_latent_size
    if not L:
        return []
    h = m.hidden_size
    return [(w, T, L, h, None), (w, T, h, L, None)]


def mlp_part_widths(m: ModelSpec) -> dict[str, float]:
    """MLP intermediate width per token of the mean layer by part: the dense MLP ``F`` (its
    share of the layers), the routed experts ``k·F_e`` and the shared experts (the MoE
    layers' share); they sum to ``ModelSpec.mean_mlp_width``."""
    sh = m.layer_shares()
    wd, wm = sh.get("dense", 0.0), sh.get("moe", 0.0)
    return {"dense_mlp": wd * m.ffn_hidden_size,
            "routed_mlp": wm * m.moe_router_topk * m.expert_ffn if m.is_moe else 0.0,
            "shared_mlp": wm * m.num_shared_experts * m.shared_ffn if m.is_moe else 0.0}


def separate_qkv_gemms(m: ModelSpec, T: Num, tp: Num, k_in: Num) -> list[tuple]:
    """A non-MLA attention's Q, K and V run as three linears over one input of width ``k_in``
    (torchtitan's ``wq``, ``wk``, ``wv``), each column-parallel on ``T`` rows: ``layer_gemms``
    tuples ``(1, T, a·d/tp, k_in, False)``, ``(1, T, g·d/tp, k_in, False)`` twice."""
    a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
    return [(1, T, a * d / tp, k_in, False), (1, T, g * d / tp, k_in, False),
            (1, T, g * d / tp, k_in, False)]


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
            attn += separate_qkv_gemms(m, T, tp, k_in)
        elif split == "row":
            attn.append((1, T, n_out, k_in / tp, True))
        else:
            attn.append((1, T, n_out / tp if split == "col" else n_out, k_in, False))

    def mlp(w: Num, M: Num, F: Num, t: Num = tp, k: Num = h) -> list[tuple]:
        ups = [(w, M, F / t, k, False)] * up           # w1 (and w3 when gated)
        return ups + [(w, M, k, F / t, True)]

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
            counted += [("routed_mlp", g) for g in latent_gemms(m, w, T)]
            uncounted += [(c * local, M, N, K, r) for c, M, N, K, r in
                          mlp(w, Me, m.expert_ffn, tp if etp is None else etp,
                              m.expert_hidden)]
            if m.num_shared_experts:
                counted += [("shared_mlp", g)
                            for g in mlp(w, T, m.num_shared_experts * m.shared_ffn)]
            if m.shared_expert_gate:
                counted.append(("shared_mlp", (w, T, 1, h, None)))
        out += [(p, g + (i % 2 == 0,)) for i, (p, g) in enumerate(counted)]
        out += [("routed_mlp", g + (False,)) for g in uncounted]
    return out


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
