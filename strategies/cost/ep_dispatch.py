"""Expert parallelism's all-to-all: its bytes per GPU (dispatch and combine, the dispatcher's
metadata, the expert tensor-parallel collectives), the share of them that crosses nodes under
DeepEP/HybridEP's per-rank and per-node deduplication (node-limited routing included), and
the NVLink share those kernels reach. Vectorised over the plan fields."""
from __future__ import annotations

from math import comb, gcd

import numpy as np

from strategies.cost.moe_bytes import routed_token_bytes
from strategies.cost.token_counts import ACT_BYTES, Num, tokens_per_gpu
from strategies.model import ModelSpec
from strategies.plan import DISPATCHERS  # noqa: F401  (codes of ep_dedup's dispatcher)


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


#: Bytes per token and expert column of the routing map HybridEP all-gathers over its group
#: before each dispatch (a ``torch.bool`` map): Megatron-Core 0.17 ``_HybridEPManager``
#: (``token_dispatcher.py``) hands ``dispatch_with_permute`` the ``[T/tp, etp·E]`` map that
#: ``MoEFlexTokenDispatcher._initialize_metadata`` expands over the ``etp·ep`` ranks of
#: ``tp_ep_group``; DeepEP's hybrid-ep ``metadata_preprocessing`` first gathers every rank's map
#: (``csrc/hybrid_ep/executor/executor.cu`` ``allgather_routing_map``: NCCL
#: ``all_gather_into_tensor`` across NVLink domains, a custom all-gather within one, at
#: a0d27f1 of 2026-03-31; ``deep_ep/hybrid_ep_buffer.py`` at 017a520 and 13d8379 of 2025 calls
#: ``all_gather_into_tensor`` itself), then scans it on the GPU for the dispatch layout. Once
#: per MoE layer forward; the backward reuses the handle.
HYBRIDEP_MAP_BYTES = 1


def hybridep_map_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                       etp: Num | None = None) -> Num:
    """Bytes of the routing map HybridEP gathers per MoE layer forward, the whole gathered
    buffer (the ring all-gather's ``nbytes``): each of the ``etp·ep`` ranks' ``T/tp`` tokens
    by ``etp·E`` columns of ``HYBRIDEP_MAP_BYTES``. 0 for a dense model. Vectorised."""
    etp = tp if etp is None else etp
    n = np.asarray(etp, dtype=float) * np.asarray(ep, dtype=float)
    if not m.is_moe:
        return (0.0 * n)[()]
    rows = tokens_per_gpu(b, m.seq_length, cp) / np.asarray(tp, dtype=float)
    return (n * rows * np.asarray(etp, dtype=float) * m.num_experts * HYBRIDEP_MAP_BYTES)[()]


def dispatcher_metadata_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num,
                              etp: Num | None = None, load: Num = 1.0) -> tuple[Num, Num]:
    """``(counts, probs)`` bytes per GPU of one MoE layer's small collectives that Megatron-
    Core's ``alltoall`` token dispatcher runs besides the tokens' dispatch and combine
    (``megatron/core/transformer/moe/token_dispatcher.py``, ``core_v0.17.0``,
    ``MoEAlltoAllTokenDispatcher``): ``counts``, the all-gather of every rank's tokens per
    expert over the ``etp·ep`` ranks of ``tp_ep_group`` (``preprocess`` L541-543,
    ``gather_from_sequence_parallel_region``), the whole gathered buffer ``etp·ep·E``
    counts of ``MOE_COUNT_BYTES`` (the ring all-gather's ``nbytes``); ``probs``, the router
    probabilities of the rank's routed copies (``routed_token_bytes`` over its width:
    one ``MOE_PROB_BYTES`` value per copy), each rank's all-to-all buffer over the ``ep``
    group (``token_dispatch`` L672-676, its gradient's all-to-all in the backward). Per MoE
    layer (not the mean layer's share). Vectorised."""
    etp = tp if etp is None else etp
    n = np.asarray(etp, dtype=float) * np.asarray(ep, dtype=float)
    counts = n * m.num_experts * MOE_COUNT_BYTES
    probs = routed_token_bytes(m, b, tp, cp, load) / (ACT_BYTES * m.expert_hidden) \
        * MOE_PROB_BYTES
    return counts[()], np.asarray(probs, dtype=float)[()]


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
    ``expert_hit_probability``, or where ``routing`` (``plan.choices.ROUTINGS`` code) is 1
    (``contiguous``) from ``contiguous_hit_probability``; group-limited routing (``G``
    groups, ``M`` per token) enters through ``P``. ``alltoall``: ``(1, 1)`` whatever the
    routing: Megatron-Core's ``MoEAlltoAllTokenDispatcher`` (``core_v0.17.0``
    ``token_dispatcher.py``) permutes one row per (token, expert) (``num_out_tokens = T·k``
    L526, ``permute`` L641) and sends each rank the rows of its experts (``input_splits``
    L533-535, ``all_to_all`` L671-673), so with ``M`` of ``N = G`` nodes chosen the copies
    that stay home average ``(M/N)·(k/M) = k/N``, as without groups: node-limited routing
    saves inter-node bytes only for a dispatcher that sends a token once per node.
    Vectorised."""
    ep, etp = np.asarray(ep, dtype=float), np.asarray(etp, dtype=float)
    code = np.asarray(dispatcher)
    if not m.is_moe or not np.any(code > 0):
        return 1.0 + 0.0 * ep, 1.0 + 0.0 * ep
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
    return np.where(dedup, byte_scale, 1.0)[()], np.where(dedup, remote, 1.0)[()]


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
