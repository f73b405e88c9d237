"""What blocks the compute stream in a layer (seconds; point 3 of
``strategies.estimate.lower_bound``'s docstring): its TP collectives without overlap, the
expert all-to-all and expert-TP collectives, the ring attention's waits, SP's re-gathers and
MLA's down projections, each at its floor (``floors``)."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from strategies.cost.cp_a2a import layer_waits as a2a_layer_waits
from strategies.cost.cp_hier import layer_waits as hier_layer_waits
from strategies.cost.cp_hier import ring_sizes
from strategies.cost.cp_ring import layer_waits as cp_layer_waits
from strategies.cost.stage import (StageCostArrays, attn_down_time, attn_tp_saved,
                                   dgrad_reduce_hidden, down_reduce_hidden,
                                   sp_regather_exposed)
from strategies.estimate.bound.floors import a2a_floor, group_floor
from topologies.cluster import Cluster


def block_comm(cl: Cluster, sc: StageCostArrays, tp: ArrayLike, cp: ArrayLike, ep: ArrayLike,
               etp: ArrayLike, tpo: ArrayLike, sp: ArrayLike = False,
               hide: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocking seconds per layer: (forward, backward, one TP collective). ``sp``: sequence
    parallelism (the data gradients' reductions are reduce-scatters); ``hide``: subtract
    what the weight gradients hide of them (False for the dearest layers, an upper figure).
    A MoE layer's all-to-all, then its expert-TP all-gather and reduce-scatter (the ep-comm
    stream, after the block's compute), then its blocking TP collectives (which wait for the
    last of them: ``ProgramBuilder._close_block``, docs/calibration.md §5.53) run in
    sequence; the ring attention's waits, inside the attention, add to them
    (``cp_ring.ring_exposed``, docs/calibration.md §5.110)."""
    tau_raw = group_floor(sc.tp_bytes, tp, 1, 2, cl)
    tau = tau_raw * np.where(tpo, 1.0 / sc.tp_overlap_chunks, 1.0)
    # the backward's share TP overlap leaves unfused blocks whole (tp_overlap_bwd_exposed)
    s = sc.tp_overlap_bwd_exposed
    tau_b = s * tau_raw + (1 - s) * tau
    tau_f = sc.tp_overlap_fwd_exposed * tau_raw + (1 - sc.tp_overlap_fwd_exposed) * tau
    moe = (ep > 1) & (sc.ep_bytes > 0)
    a2a = np.where(moe, a2a_floor(cl, sc.ep_bytes, ep, etp, sc.ep_remote_scale), 0.0)
    # expert TP: one all-gather and one reduce-scatter over the etp consecutive ranks
    etp_c = np.where(moe & (etp > 1) & (sc.etp_bytes > 0),
                     2 * group_floor(sc.etp_bytes, etp, 1, 1, cl), 0.0)
    # the ring's waits inside the attention, at its all-gathers' floor, on top of what closes
    # the block (``cp_ring.ring_exposed``, §5.110)
    # (PyTorch's ring: the simulator charges its waits as they are)
    cp_pass = np.where(cp > 1, group_floor(sc.cp_bytes, cp, tp, 1, cl), 0.0)  # one all-gather
    cp_f, cp_b = a2a_layer_waits(lambda n: a2a_floor(cl, n, cp, tp, 1.0), sc, cp) \
        if sc.cp_a2a else cp_layer_waits(cp_pass, sc, cp)   # TE's all-to-all (§5.185)
    if sc.cp_hier:   # a2a+p2p (§5.189): the all-to-all over k ranks, the ring at (t·k, c/k)
        k = sc.cp_a2a_size
        r_tp, r_cp = ring_sizes(tp, cp, k)
        cp_f, cp_b = hier_layer_waits(
            lambda n: a2a_floor(cl, n, k, tp, 1.0), np.where(
                cp > 1, group_floor(sc.cp_bytes, r_cp, r_tp, 1, cl), 0.0), sc, cp)
    n_f, n_b = sc.tp_per_layer_fwd, sc.tp_per_layer_bwd       # 2, fewer for MoE under EP
    # MLA's attention runs its column-side collective at its latents' widths
    # (``attn_tp_saved``, §5.81): the forward's all-gather under SP, the backward's
    # reduction where it is blocking, at the collectives' floors and TP overlap's share
    # (not for the dearest layers' upper figure, ``hide`` False)
    def t_floor(kind: str, nbytes):
        return group_floor(nbytes, tp, 1, 2 if kind == "allreduce" else 1, cl)
    saved_f = np.where(tp > 1, np.where(sp, attn_tp_saved(t_floor, sc, True, True), 0.0), 0.0)
    saved_b = np.where((tp > 1) & (sc.rd_bytes <= 0),
                       np.where(sp, attn_tp_saved(t_floor, sc, True, False),
                                attn_tp_saved(t_floor, sc, False, False)), 0.0)
    over = np.where(tpo, 1.0 / sc.tp_overlap_chunks, 1.0) * (1.0 if hide else 0.0)
    # SP's backward re-gathers stall the compute stream inside the block, before what closes
    # it: at least their exposure at the all-gather's floor (``sp_regather_exposed``)
    rg = sp_regather_exposed(lambda w: np.where(sc.rg_bytes > 0, group_floor(
        sc.rg_bytes * w, tp, 1, 1, cl), 0.0), sc)
    # the column-parallel data gradients' reductions the weight gradients hide, at most
    # their floor each (``dgrad_reduce_hidden``; rd_bytes 0 under TP overlap)
    tp_b = np.maximum(n_b * tau_b - (s * hide + (1 - s) * over) * saved_b, 0.0)
    if hide:
        rd = sc.rd_bytes

        def t_red(w: float) -> np.ndarray:
            return np.where(rd > 0, np.where(sp, group_floor(rd * w, tp, 1, 1, cl),
                                             group_floor(rd * w, tp, 1, 2, cl)), 0.0)
        tp_b = np.maximum(tp_b - dgrad_reduce_hidden(t_red, sc), 0.0)
    # MLA's column-parallel down projections' own collectives (``attn_down_time``, §5.85),
    # blocking after the block, at their floors (the lower figure only)
    dn_f, dn_b = 0.0, 0.0
    if hide and np.any(sc.tp_down > 0):
        dn_f = np.where(sp, attn_down_time(t_floor, sc, True, True),
                        attn_down_time(t_floor, sc, False, True))
        dn_b = np.where(sp, attn_down_time(t_floor, sc, True, False),
                        attn_down_time(t_floor, sc, False, False))
        # less the input-gradient reductions their weight gradients hide, at the floor
        # (``down_reduce_hidden``, §5.99; ``t_red`` 0 where blocking)
        dn_b = np.maximum(dn_b - down_reduce_hidden(t_red, sc), 0.0)
    return (np.maximum(n_f * tau_f - over * saved_f, 0.0) + a2a + etp_c + dn_f + cp_f,
            tp_b + a2a + etp_c + dn_b + cp_b + rg, tau)
