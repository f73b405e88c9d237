"""A stage's compute chain ``T(s)`` for the lower bound (points 1, 3 and 5 of
``strategies.estimate.lower_bound``'s docstring): its chunks' compute and blocking
communication for every micro-batch, the embedding and LM head where the stage holds them,
and the pipeline sends that block (``ChainShape``); on a mixed cluster each stage's own
chain on its own GPUs (``own_chains``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from strategies.estimate.bound.chunks import Chunk, ChunkSeconds, ChunkTimes
from strategies.estimate.bound.gpu_types import fastest_of_each
from strategies.plan_arrays import PlanArrays
from strategies.schedules import attr_by_code, dispatch
from strategies.stacks.profile import FrameworkProfile
from topologies.cluster import Cluster
from topologies.gpus import GPU

STAGE_KINDS = ("first", "last", "mid", "heavy")


@dataclass(frozen=True, eq=False)
class ChainShape:
    """What a stage's chain reads beside its chunks' seconds (arrays over plans): ``nmb``
    micro-batches, ``v`` chunks a rank, ``fwd_blocks``/``bwd_blocks`` 1 where a forward's /
    a backward's send blocks the next compute, ``sends_mid`` a middle stage's blocking sends,
    ``send`` one send's floor (seconds), ``single`` pp = 1, ``head_first`` a V (the LM head
    on rank 0), ``mirrored`` DualPipe."""

    nmb: np.ndarray
    v: np.ndarray
    fwd_blocks: np.ndarray
    bwd_blocks: np.ndarray
    sends_mid: np.ndarray
    send: np.ndarray
    single: np.ndarray
    head_first: np.ndarray
    mirrored: np.ndarray


def chain_shape(P: PlanArrays, profile: FrameworkProfile, nmb: np.ndarray,
                send: np.ndarray) -> ChainShape:
    """The plans' ``ChainShape``. Blocking sends: those the schedule says block
    (``Schedule.blocks_fwd_send``/``blocks_bwd_send``: all of them with GPipe and 1F1B, the
    backward ones with interleaving, where a forward's output waits in the exchange after
    the next backward, so its transfer may overlap that backward); the first stage sends no
    backward output and the last no forward output."""
    sched, pp, v = P.schedule, P.pp, P.vpp
    single = pp == 1
    fwd_blocks = attr_by_code(sched, "blocks_fwd_send").astype(float)
    bwd_blocks = attr_by_code(sched, "blocks_bwd_send").astype(float)
    # with ``overlap_p2p_comm`` (Megatron-Core's interleaving) no send blocks: a call's
    # receive is waited for only before the next pass of its kind (docs/calibration.md §5.68)
    if profile.overlap_p2p_comm:
        bwd_blocks = np.where(attr_by_code(sched, "overlaps_p2p").astype(bool), 0.0, bwd_blocks)
    sends_mid = nmb * v * (fwd_blocks + bwd_blocks)
    head_first = (dispatch(sched, "head_rank_array", pp, v) == 0) & ~single   # a V
    mirrored = attr_by_code(sched, "mirrored").astype(bool) & ~single          # DualPipe
    return ChainShape(nmb, v, fwd_blocks, bwd_blocks, sends_mid, send, single, head_first,
                      mirrored)


def chain(kind: str, c: ChunkSeconds, sh: ChainShape) -> np.ndarray:
    """The compute chain T(s) of a stage of ``kind`` (first, last, mid) from its per-chunk
    times ``c`` (seconds)."""
    nmb, send, sends_mid = sh.nmb, sh.send, sh.sends_mid
    per_mb = sh.v * (c.f_blk + c.b_blk)
    # a V: the LM head on rank 0 (Schedule.ends); rank 0 sends neither chunk 0's backward
    # output nor chunk 1's forward output, and rank pp-1 hands both on to itself (the turn)
    ends_sends = np.where(sh.head_first, sends_mid - nmb * (sh.fwd_blocks + sh.bwd_blocks),
                          0.0)
    # DualPipe (``mirrored``): each end rank embeds half the micro-batches and runs the LM
    # head of the other half, and sends as an end of each direction does
    both = nmb * (per_mb + (c.emb + c.emb_b + c.head_f + c.head_b) / 2) \
        + (sends_mid - nmb * (sh.fwd_blocks + sh.bwd_blocks) / 2) * send
    if kind in ("first", "last"):
        return np.where(sh.mirrored, both, _chain_ring(kind, c, per_mb, sh, ends_sends))
    return nmb * per_mb + sends_mid * send


def _chain_ring(kind: str, c: ChunkSeconds, per_mb: np.ndarray, sh: ChainShape,
                ends_sends: np.ndarray) -> np.ndarray:
    """``chain`` of the first or the last stage on the ring or a V."""
    nmb, head_first, send = sh.nmb, sh.head_first, sh.send
    if kind == "first":
        return nmb * (per_mb + c.emb + c.emb_b
                      + np.where(sh.single | head_first, c.head_f + c.head_b, 0.0)) \
            + np.where(head_first, ends_sends, sh.sends_mid - nmb * sh.bwd_blocks) * send
    return np.where(head_first, nmb * per_mb, nmb * (per_mb + c.head_f + c.head_b)) \
        + np.where(head_first, ends_sends, sh.sends_mid - nmb * sh.fwd_blocks) * send


def stage_chains(chunks: ChunkTimes, sh: ChainShape, least: ChunkSeconds,
                 own: dict[str, np.ndarray], content: dict | None, cheapest: np.ndarray,
                 opt: dict[str, np.ndarray], real: Cluster, n: np.ndarray,
                 pp: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per kind of stage (``STAGE_KINDS``), its chain T(s) (seconds) and its optimizer's and
    per-step passes' seconds (``opt``, "heavy" as "mid"): from its own layers (``own``,
    ``stage_layers``) at the fastest of each GPU type (``least``: its other chunk seconds);
    a model of dense and MoE layers: each kind of stage's own layers by kind (``content``,
    ``layout.even_stage_content``: the even split, first/last-stage counts, slots; "mid" is
    rank pp-2, whose bound it feeds), but the cheapest layers where ``cheapest`` (DualPipe's
    ranks hold two stages; a layout string's kinds are not read); on a mixed cluster
    (``real``) each stage's own chain on its own GPUs where that is longer."""
    v = sh.v
    blocks = {k: (c.f_blk, c.b_blk) for k, c in ((k, chunks.least(own[k], v)) for k in own)}
    if chunks.mix:
        per_type = [chunks.type_blocks(g) for g in chunks.records.types]
        kinds = chunks.mix.kinds

        def own_sum(nk, per, i):          # the stage's layers of each kind at their seconds
            if len(kinds) == 2:
                return (nk["dense"] * per[0][i] + nk["moe"] * per[1][i]) / v
            return sum(nk[x] * per[j][i] for j, x in enumerate(kinds)) / v
        for k, nk in content.items():
            f_own = fastest_of_each([own_sum(nk, per, 0) for per in per_type])
            b_own = fastest_of_each([own_sum(nk, per, 1) for per in per_type])
            blocks[k] = (np.where(cheapest, blocks[k][0], f_own),
                         np.where(cheapest, blocks[k][1], b_own))
    T = {k: chain(k if k != "heavy" else "mid",
                  least._replace(f_blk=blocks[k][0], b_blk=blocks[k][1]), sh)
         for k in STAGE_KINDS}
    opt = dict(opt, heavy=opt["mid"])           # (its GPU type not known: the least of each)
    if not real.uniform:          # a mixed cluster: each stage's own chain on its own GPUs
        mine = own_chains(real, n, pp, {"first": 0.0 * pp, "last": pp - 1.0, "mid": pp - 2.0},
                          lambda g, k: chunks.on(g, own[k], chunks=v),
                          lambda k, c: chain(k, c, sh))
        for kind, (t, o) in mine.items():
            take = t + o > T[kind] + opt[kind]
            T[kind], opt[kind] = np.where(take, t, T[kind]), np.where(take, o, opt[kind])
    return T, opt


def own_chains(cl: Cluster, n: np.ndarray, pp: np.ndarray, stages: dict[str, np.ndarray],
               chunk_of: Callable[[GPU, str], Chunk],
               chain_of: Callable[[str, ChunkSeconds], np.ndarray]) -> dict:
    """Per stage kind, ``(T, optimizer seconds)`` of the rank of that stage whose GPU type
    makes its own chain longest (a mixed cluster; stage ``s`` holds ranks ``s·n/pp`` to
    ``(s+1)·n/pp - 1``; ``chunk_of(gpu, kind)``: that kind of stage's own chunks on ``gpu``;
    ``chain_of(kind, seconds)``: its chain). Every rank runs its own chain, so any one of
    the stage's ranks bounds the step; both figures come from the same GPU type."""
    ends = np.cumsum([g.num_nodes for g in cl.groups])
    G, per = cl.gpus_per_node, n / pp
    gpus = [g.gpu for g in cl.groups]
    out = {}
    for kind, s in stages.items():
        s = np.maximum(s, 0.0)
        lo = np.searchsorted(ends, np.floor(s * per / G), side="right")
        hi = np.searchsorted(ends, np.floor(((s + 1) * per - 1) / G), side="right")
        best_t, best_o = 0.0, 0.0
        for gi, gpu in enumerate(gpus):
            on = (lo <= gi) & (gi <= hi)
            ch = chunk_of(gpu, kind)
            t = chain_of(kind, ch.seconds)
            rec = ch.record
            o = getattr(rec, f"optimizer_{kind}") + getattr(rec, f"passes_{kind}")   # step work
            take = on & (t + o > best_t + best_o)
            best_t, best_o = np.where(take, t, best_t), np.where(take, o, best_o)
        out[kind] = (best_t, best_o)
    return out
