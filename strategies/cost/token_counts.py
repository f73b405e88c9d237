"""The cost model's units: the tokens one GPU holds of a micro-batch, the routed tokens of
an expert's GEMMs, and the plain-number-or-array type every count takes.

Every function of the cost model's counts (``token_counts``, ``gemm_shapes``, ``flop_counts``,
``attention_counts``, ``elementwise_bytes``, ``comm_bytes``, ``moe_bytes``, ``ep_dispatch``,
``param_counts``: FLOPs, bytes, communication volumes and parameters of one transformer layer,
one micro-batch, on one GPU; the one source of truth that the analytic estimator and the
simulator's compiler both read) takes plain numbers *or numpy arrays* for the plan fields
(tp, cp, mbs, sp, ...) and broadcasts, so the search can score thousands of plans in one call
with the very same arithmetic as a single estimate. Units: FLOP, bytes, tokens.

Notation (Narayanan 2021 / Korthikanti 2022): b micro-batch, s sequence length, h hidden,
a heads, g KV heads, d head dim, F MLP hidden, V vocabulary, t tensor-parallel size,
c context-parallel size.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.model import ModelSpec
from strategies.moe_balance import default_imbalance


Num = Any  # float or np.ndarray

ACT_BYTES = 2  # bf16/fp16 activations


def tokens_per_gpu(b: Num, s: int, cp: Num) -> Num:
    """Tokens of one micro-batch held by one GPU of a context-parallel group."""
    return b * s / cp


def expert_capacity(m: ModelSpec, b: Num, tp: Num, cp: Num, capacity_factor: Num) -> Num:
    """Tokens each expert takes from one GPU's micro-batch under a capacity factor, as
    Megatron-Core computes it (``moe_utils.get_capacity``, ``core_v0.10.0`` to
    ``core_v0.17.0``: ``ceil(num_tokens / num_experts * capacity_factor)``, ``num_tokens`` the
    router's rows times ``topk``): the GPU's ``T/t = b·s/(c·t)`` tokens in ``topk`` copies over
    ``E`` experts, ``ceil(T/t·topk/E · capacity_factor)``. Under drop-and-pad
    (``Plan.moe_pad_to_capacity``) the dispatcher sends exactly this many rows to every expert
    (``MoEAlltoAllTokenDispatcher.preprocess``: ``num_out_tokens = capacity·E``), so each local
    expert runs ``capacity·etp·ep`` rows. Vectorised."""
    n = tokens_per_gpu(b, m.seq_length, cp) / np.asarray(tp, dtype=float) * m.moe_router_topk
    return np.ceil(n / m.num_experts * np.asarray(capacity_factor, dtype=float))[()]


def padded_load(m: ModelSpec, b: Num, tp: Num, cp: Num, capacity_factor: Num) -> Num:
    """Routed rows under drop-and-pad over the dropless mean: ``expert_capacity·E`` over the
    GPU's ``T/t·topk`` routed copies (``capacity_factor`` up to the ceiling's rounding), the
    same on every expert-parallel rank. Vectorised."""
    n = tokens_per_gpu(b, m.seq_length, cp) / np.asarray(tp, dtype=float) * m.moe_router_topk
    return (expert_capacity(m, b, tp, cp, capacity_factor) * m.num_experts / n)[()]


def moe_load(ep: Num, imbalance: Num = 1.0, capacity_factor: Num = np.inf,
             m: ModelSpec | None = None, b: Num = 1, tp: Num = 1, cp: Num = 1,
             etp: Num | None = None, pad: Num = False) -> Num:
    """Routed tokens of the hottest expert-parallel rank over the mean (the pace of its expert
    GEMMs and of its all-to-all): ``moe_imbalance`` where ``ep > 1`` (with every expert on
    one rank there is no hottest rank), capped by ``moe_capacity_factor``, beyond which an
    expert drops its tokens (Megatron's token dropping: an expert takes at most
    ``capacity_factor`` times its mean share). Where ``pad`` (``Plan.moe_pad_to_capacity``)
    every expert runs exactly its capacity, whatever the routing: ``padded_load``. An
    imbalance of NaN (a plan that names none, ``plan.choices.DEFAULT_MOE_IMBALANCE``) is
    ``moe_balance.default_imbalance`` of the model ``m`` and the micro-batch's shape (``b``,
    ``tp``, ``cp``, ``etp``). The one rule the expert GEMMs' rows, the all-to-all's bytes,
    the permutations and the memory model's buffers read. Vectorised."""
    imb = np.asarray(imbalance, dtype=float)
    if np.isnan(imb).any():
        if m is None:
            raise ValueError("moe_load: the default imbalance (NaN) needs the model and the "
                             "micro-batch's shape (m, b, tp, cp, etp)")
        imb = np.where(np.isnan(imb), default_imbalance(m, b, tp, cp, ep, etp), imb)
    load = np.minimum(np.where(np.asarray(ep) > 1, imb, 1.0), capacity_factor)
    if np.any(pad):
        if m is None:
            raise ValueError("moe_load: padding to capacity needs the model and the "
                             "micro-batch's shape (m, b, tp, cp)")
        cf = np.where(pad, capacity_factor, 1.0)    # (no capacity where nothing is padded)
        load = np.where(pad, padded_load(m, b, tp, cp, cf), load)
    return load[()]


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
