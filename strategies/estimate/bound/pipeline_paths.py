"""The pipeline chain of the lower bound (point 5 of ``strategies.estimate.lower_bound``'s
docstring): how micro-batch 0 reaches a stage and how its last micro-batch goes back
(``PassThrough``), the weight gradients a split backward leaves after a stage's last ``B``
(``trailing_wgrads``), and each stage's bound from its chain, its data-parallel terms and
those paths (``StageBounds``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.cost.stage import StageCostArrays
from strategies.estimate.bound.chunks import ChunkSeconds, ChunkTimes
from strategies.estimate.bound.data_parallel import DpTerms
from strategies.estimate.bound.gpu_types import TypeRecords, fastest_of_each
from strategies.estimate.bound.layer_mix import LayerMix
from strategies.schedules import dispatch
from topologies.cluster import Cluster


def wgrad(mix: LayerMix | None, r: StageCostArrays, n: np.ndarray) -> np.ndarray:
    """W seconds of ``n`` layers of the record ``r`` at most (subtracted: the dearest
    kinds)."""
    return mix.fill(n, *(r.by_kind[x].layer_wgrad for x in mix.kinds), dearest=True) \
        if mix else n * r.layer_wgrad


def trailing_wgrads(records: TypeRecords, real: Cluster, sc: StageCostArrays,
                    mix: LayerMix | None, lpc_most: np.ndarray,
                    head_first: np.ndarray) -> dict[str, np.ndarray]:
    """Per kind of stage, the W seconds of a chunk at most (the largest chunk's; the first
    stage's with the embedding's, the one holding the LM head with its): what a split
    backward runs after a stage's last ``B`` while that micro-batch goes back. On a mixed
    cluster the longest on any GPU type (the chains are per GPU type)."""
    w_chunk = {"first": wgrad(mix, sc, lpc_most) + sc.embedding_wgrad
               + np.where(head_first, sc.head_wgrad, 0.0),
               "last": np.where(head_first, wgrad(mix, sc, lpc_most),
                                wgrad(mix, sc, lpc_most) + sc.head_wgrad),
               "mid": wgrad(mix, sc, lpc_most)}
    if not real.uniform:
        per_gpu = [records(g) for g in records.types]
        w_chunk = {"first": np.max([wgrad(mix, r, lpc_most) + r.embedding_wgrad
                                    + np.where(head_first, r.head_wgrad, 0.0)
                                    for r in per_gpu], axis=0),
                   "last": np.max([np.where(head_first, wgrad(mix, r, lpc_most),
                                            wgrad(mix, r, lpc_most) + r.head_wgrad)
                                   for r in per_gpu], axis=0),
                   "mid": np.max([wgrad(mix, r, lpc_most) for r in per_gpu], axis=0)}
    w_chunk["heavy"] = w_chunk["mid"]
    return w_chunk


@dataclass(frozen=True, eq=False)
class PassThrough:
    """The way of micro-batch 0's forward into stage ``s`` (``chain_in``) and of the last
    micro-batch's backward from it back to stage 0 (``tail``), at the fastest of each GPU
    type (seconds): ``least`` a chunk of ``lpc`` layers (the fewest of any chunk),
    ``send`` one send's floor; ``b_pass`` a middle stage's backward chunk less its W where
    the backward is split; a model of dense and MoE layers (``mix``): per layer of each
    kind the forward ``kf``, backward ``kb`` and backward less a split-off W ``kbw``, the
    cheapest ``s·lpc`` layers (``s`` chunks on ``s`` ranks hold distinct layers)."""

    mix: LayerMix | None
    lpc: np.ndarray
    least: ChunkSeconds
    send: np.ndarray
    b_pass: np.ndarray
    kf: list | None
    kb: list | None
    kbw: list | None

    @classmethod
    def of(cls, chunks: ChunkTimes, least: ChunkSeconds, send: np.ndarray,
           split: np.ndarray) -> "PassThrough":
        """From the plans' chunk seconds; ``split``: 1 where the schedule splits the
        backward (``Schedule.splits_backward``)."""
        mix, lpc, records = chunks.mix, chunks.lpc, chunks.records
        types = records.types
        b_pass = fastest_of_each([chunks.on(g).seconds.b_blk - split * (
            lpc * records(g).layer_wgrad if not mix else wgrad(mix, records(g), lpc))
            for g in types])
        kf = kb = kbw = None
        if mix:
            kf, kb, kbw = [], [], []
            for i, x in enumerate(mix.kinds):
                per = [(chunks.type_blocks(g)[i], records(g).by_kind[x]) for g in types]
                kf.append(fastest_of_each([p[0] for p, _ in per]))
                kb.append(fastest_of_each([p[1] for p, _ in per]))
                kbw.append(fastest_of_each([p[1] - split * k.layer_wgrad for p, k in per]))
        return cls(mix, lpc, least, send, b_pass, kf, kb, kbw)

    def chain_in(self, s: np.ndarray) -> np.ndarray:
        """Seconds before stage ``s`` can start: micro-batch 0's forwards on stages
        ``0..s-1`` (the first with the embedding) and their sends."""
        mix, lpc, c, send = self.mix, self.lpc, self.least, self.send
        if mix:
            return np.where(s >= 1, mix.fill(s * lpc, *self.kf) + c.emb + s * send, 0.0)
        return np.where(s >= 1, c.f_blk + c.emb + (s - 1) * c.f_blk + s * send, 0.0)

    def tail(self, s: np.ndarray) -> np.ndarray:
        """Seconds after stage ``s``'s last backward before stage 0's optimizer: that
        micro-batch's backwards on stages ``s-1..0`` (the last with the embedding's) and
        their sends."""
        mix, lpc, c, send = self.mix, self.lpc, self.least, self.send
        if mix:
            return np.where(s >= 1, mix.fill(lpc, *self.kb) + c.emb_b + (s - 1) * send
                            + mix.fill((s - 1) * lpc, *self.kbw), 0.0)
        return np.where(s >= 1, c.b_blk + c.emb_b + (s - 1) * (self.b_pass + send), 0.0)


@dataclass(frozen=True, eq=False)
class StageBounds:
    """Each kind of stage's bound on the step (seconds), from its chain ``T`` and optimizer
    ``opt`` (``chains.stage_chains``), its data-parallel ``terms`` and ``mirror``
    all-reduce (``data_parallel``), the share ``known`` of its parameter-driven terms
    (``stage_layers``), ``window`` the seconds after the first bucket can launch at most
    (the reduce window's steps times the largest backward chunk and two sends), the
    ``paths`` in and back and ``w_chunk`` the trailing W of a split backward (``split``);
    ``pp``, ``nmb``, ``sched`` (schedule codes) and ``mirrored`` (DualPipe) the plans'."""

    T: dict[str, np.ndarray]
    opt: dict[str, np.ndarray]
    terms: dict[str, DpTerms]
    mirror: dict[str, np.ndarray]
    known: dict[str, np.ndarray]
    window: np.ndarray
    paths: PassThrough
    w_chunk: dict[str, np.ndarray]
    split: np.ndarray
    pp: np.ndarray
    nmb: np.ndarray
    sched: np.ndarray
    mirrored: np.ndarray
    #: the plans whose ranks wait for the gradient norm's all-reduce (``cost.norm_barrier``)
    #: on one GPU type: every kind's optimizer then starts after each stage's reduction
    barrier: Any = False

    def of(self, kind: str, s: np.ndarray, own_only: bool = False) -> np.ndarray:
        """The bound of stage ``s`` of ``kind``: ``chain_in(s) + max(T(s), T(s) - post(s)
        + R(s), busy) + mirror + opt(s) + A(s)`` and (not ``own_only``, ``s >= 1``)
        ``chain_in(s) + T(s) - trailing W + tail(s) + opt(0) + A(0)``."""
        red, ag, z3 = self.terms[kind]
        pp = self.pp
        # DualPipe: a rank's first micro-batch enters at its nearer end, and its last
        # backward goes back to that end
        s = np.where(self.mirrored, np.minimum(s, pp - 1 - s), s)
        t, o = self.T[kind], self.opt[kind]
        pre = np.maximum(0.0, t - self.window)
        chain_in, tail = self.paths.chain_in(s), self.paths.tail(s)
        trail = self.split * dispatch(self.sched, "trailing_w_steps", s, pp, self.nmb) \
            * self.w_chunk[kind]
        ok = self.known[kind]
        red, z3, ag, mirror, o = (np.where(ok > 0, ok * x, 0.0)
                                  for x in (red, z3, ag, self.mirror[kind], o))
        post = o + ag
        if np.any(self.barrier):
            # behind the norm's all-reduce every live kind's optimizer and gather follow
            # this stage's reduction: the longest of them (each a floor of its own)
            live = {"first": pp >= 1, "last": pp >= 2, "mid": pp >= 3}
            most = post
            for k, on in live.items():
                kk = self.known[k]
                x = self.opt[k] + self.terms[k][1]
                most = np.maximum(most, np.where(on & (kk > 0), kk * x, 0.0))
            post = np.where(self.barrier, most, post)
        own = chain_in + np.maximum(np.maximum(t, pre + red), z3) + mirror + post
        down = chain_in + t - trail + tail + np.where(self.known["first"] > 0,
                                                      self.opt["first"]
                                                      + self.terms["first"].ag_tail, 0.0)
        return own if own_only else np.maximum(own, np.where(s >= 1, down, 0.0))
