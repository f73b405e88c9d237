"""A model chunk's seconds for the lower bound (points 1 and 3 of
``strategies.estimate.lower_bound``'s docstring): per layer its compute plus the
communication that blocks it (``blocking.block_comm``), per chunk ``lpc`` such layers (a
model of dense and MoE layers: the cheapest, or the dearest, ``LayerMix``), on one GPU type
or at the fastest of each."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from strategies.cost import layer_time
from strategies.cost.stage import StageCostArrays
from strategies.estimate.bound.blocking import block_comm
from strategies.estimate.bound.gpu_types import TypeRecords, fastest_of_each
from strategies.estimate.bound.layer_mix import LayerMix
from topologies.cluster import Cluster
from topologies.gpus import GPU


class ChunkSeconds(NamedTuple):
    """A chunk's seconds as a stage's chain reads them (``chains.chain``): the LM head's and
    the embedding's forward and backward, ``f_blk``/``b_blk`` the chunk's forward and
    backward with their blocking communication; on one GPU type (``Chunk``) or at the
    fastest of each GPU type present (``ChunkTimes.least``)."""

    head_f: np.ndarray
    head_b: np.ndarray
    emb: np.ndarray
    emb_b: np.ndarray
    f_blk: np.ndarray
    b_blk: np.ndarray


class Chunk(NamedTuple):
    """One model chunk on one GPU type: ``layer`` the layer's compute (seconds),
    ``seconds`` the chunk's, ``record`` the stage-cost record they come from."""

    layer: layer_time.LayerTime
    seconds: ChunkSeconds
    record: StageCostArrays


@dataclass(frozen=True, eq=False)
class ChunkTimes:
    """Chunk seconds of the plans ``records`` holds on the links of ``cl``: ``tp``, ``cp``,
    ``ep`` (1 where a pair's overlap hides the all-to-all), ``etp``, ``tpo``
    (``tp_comm_overlap``) and ``sp`` are the plans' columns; ``lpc`` the layers of a chunk
    unless told; ``mix`` the model's layer kinds (None: one kind)."""

    cl: Cluster
    records: TypeRecords
    mix: LayerMix | None
    tp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    tpo: np.ndarray
    sp: np.ndarray
    lpc: np.ndarray
    cache: dict[str, list] = field(default_factory=dict)

    def layer_blocks(self, r: StageCostArrays, ceiling: bool = False) -> list[tuple]:
        """``(forward, backward, forward compute)`` blocking seconds of one layer of each
        kind (the mean layer for a model of one kind) from the record ``r``."""
        mix = self.mix
        per = []
        for rk in (mix.records(r, ceiling) if mix else [r]):
            c_f, c_b, tau = block_comm(self.cl, rk, self.tp, self.cp, self.ep, self.etp,
                                       self.tpo, self.sp, hide=not ceiling)
            n_rc = np.where(rk.layer_recompute > 0, rk.tp_per_layer_recompute, 0.0)
            per.append((rk.layer_fwd + c_f,
                        rk.layer_bwd + rk.layer_recompute + c_b + n_rc * tau, rk.layer_fwd))
        return per

    def type_blocks(self, g: GPU) -> list[tuple]:
        """``layer_blocks`` of the record on GPU type ``g``, computed once."""
        if repr(g) not in self.cache:
            self.cache[repr(g)] = self.layer_blocks(self.records(g))
        return self.cache[repr(g)]

    def on(self, g: GPU, lpc: np.ndarray | None = None, ceiling: bool = False,
           chunks: float | np.ndarray = 1.0) -> Chunk:
        """Per-chunk seconds on GPU type ``g`` with ``lpc`` layers a chunk (default
        ``self.lpc``), from the stage-cost record on ``g``; a model of several layer kinds
        (``LayerMix``): the ``chunks·lpc`` cheapest layers (``ceiling``: the dearest) over
        ``chunks`` chunks (a rank's chunks hold distinct layers)."""
        lpc = self.lpc if lpc is None else lpc
        mix = self.mix
        r = self.records(g)
        per = self.layer_blocks(r, True) if ceiling else self.type_blocks(g)
        if mix:
            f_blk = mix.fill(lpc * chunks, *(p[0] for p in per), dearest=ceiling) / chunks
            b_blk = mix.fill(lpc * chunks, *(p[1] for p in per), dearest=ceiling) / chunks
            pick = np.maximum if ceiling else np.minimum
            lt = layer_time.LayerTime(functools.reduce(pick, (p[2] for p in per)), r.layer_bwd,
                                      r.layer_recompute)
        else:
            f_blk, b_blk = lpc * per[0][0], lpc * per[0][1]
            lt = layer_time.LayerTime(r.layer_fwd, r.layer_bwd, r.layer_recompute)
        return Chunk(lt, ChunkSeconds(r.head_fwd, r.head_bwd, r.embedding_fwd, r.embedding_bwd,
                                      f_blk, b_blk), r)

    def least(self, lpc: np.ndarray | None = None,
              chunks: float | np.ndarray = 1.0) -> ChunkSeconds:
        """``on``'s seconds at the fastest of each GPU type present (``fastest_of_each``)."""
        per = [self.on(g, lpc, chunks=chunks).seconds for g in self.records.types]
        return ChunkSeconds(*(fastest_of_each([t[i] for t in per]) for i in range(6)))
