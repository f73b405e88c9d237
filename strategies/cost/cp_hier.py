"""Megatron-Core's hierarchical context parallelism (``--cp-comm-type a2a+p2p`` with
``--hierarchical-context-parallel-sizes k cp/k``; plan ``cp_comm=a2a+p2p``,
``hierarchical_cp=k``): Transformer Engine's ring (``AttnFuncWithCPAndKVP2P``) given a list
``cp_group = [a2a group, p2p group]`` (``context_parallel.py`` @d0067d0 L1407-1419,
L1486-1497, L2032-2049, L2405-2416, L2889-2900; Megatron-Core @d98e8a6
``parallel_state.create_hierarchical_groups`` L378-437, ``extensions/transformer_engine.py``
L2143-2150). docs/calibration.md §5.187 (read), §5.189 (priced). Units: bytes, seconds.

A rank holding ``s/c`` tokens of ``a/t`` heads first runs the all-to-all of ``cp_a2a`` over
its ``k`` consecutive CP ranks (``tp`` apart): the same Q/K/V and O bytes as ``a2a``
(``cp_a2a.qkv_bytes``, ``out_bytes``: what a rank sends does not depend on the group size),
the same copies (``cp_a2a.copy_bytes``) and working set; it then holds ``k·s/c`` tokens of
``a/(t·k)`` heads and runs the ring of ``cp_ring`` at tensor size ``t·k`` and CP size
``c/k`` over the ``c/k`` ranks ``t·k`` apart (``ring_sizes``), the core the ring's at those
sizes. Until Transformer Engine 2.14 (read at 015d225, §5.189) ``AttnFuncWithCPAndKVP2P``
differed from ``AttnFuncWithCPAndQKVOA2A`` twice: the forward saved the output after its
all-to-all back (``out_save = out_f16``, the tensor the projection saves too) and the backward
all-to-alled it again with ``dO`` (``flash_attn_a2a_communicate([out, dout], ...)``, v2.14
L2258). From 2.15 on (NVIDIA/TransformerEngine#2719, ee5dcec22 on main, 8e73f54fe on the 2.15
branch) it saves the head-sharded ``out_part`` and sends ``dout`` alone (d0067d0 L2411-2421),
as a2a does from 2.8 (``cp_a2a.TE_DO_ONLY``): ``bwd_out_tensors``, ``bwd_copy_extra``."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from strategies.cost import cp_a2a, cp_ring
from strategies.cost.token_counts import Num
from strategies.model import ModelSpec

if TYPE_CHECKING:
    from strategies.cost.stage.array_record import StageCostArrays
    from strategies.cost.stage.record import StageCosts

#: The first Transformer Engine release whose ring takes a list ``cp_group`` (Megatron-Core
#: ``extensions/transformer_engine.py`` L2143-2150 requires Transformer Engine 1.12 for the
#: list, read in §5.185)
TE_FIRST = (1, 12)

#: the first Transformer Engine release whose ``AttnFuncWithCPAndKVP2P`` backward sends dO
#: alone (NVIDIA/TransformerEngine#2719, in v2.15)
TE_DO_ONLY = (2, 15)


def bwd_out_tensors(cp_impl: str, te_version: tuple[int, int] | None) -> float:
    """Tensors of the output's size the backward all-to-alls before its kernel, one call
    each: dO alone from ``TE_DO_ONLY`` on (a2a: ``cp_a2a.TE_DO_ONLY``), the saved output and
    dO before; ``te_version`` None (not stated) reads the newest releases'. 0 for an
    exchange without an all-to-all."""
    first = {"a2a": cp_a2a.TE_DO_ONLY, "a2a+p2p": TE_DO_ONLY}.get(cp_impl)
    if first is None:
        return 0.0
    return 1.0 if te_version is None or tuple(te_version) >= first else 2.0


def a2a_size(cp_impl: str, cp: Num, hierarchical_cp: Num) -> Num:
    """The all-to-all group's size ``k`` of exchange ``cp_impl``: ``cp`` for ``"a2a"``,
    the plan's ``hierarchical_cp`` for ``"a2a+p2p"``, 1 (no all-to-all) otherwise."""
    if cp_impl == "a2a":
        return cp
    if cp_impl == "a2a+p2p":
        return hierarchical_cp
    return 1


def ring_sizes(tp: Num, cp: Num, k: Num) -> tuple[Num, Num]:
    """``(tensor size, CP size)`` the ring and its attention core run at after an all-to-all
    over ``k`` CP ranks: ``(t·k, c/k)`` (the ring's neighbours ``t·k`` ranks apart)."""
    return tp * k, cp / k


def bwd_copy_extra(m: ModelSpec, b: Num, tp: Num, cp: Num, n_out: float) -> Num:
    """HBM bytes the backward's all-to-all adds to ``cp_a2a.copy_bytes``: the saved output's
    ``COPY_PASSES`` beside dO's where the release sends it again (``n_out`` =
    ``bwd_out_tensors`` 2), 0 where it sends dO alone."""
    return cp_a2a.COPY_PASSES * (n_out - 1.0) * cp_a2a.out_bytes(m, b, tp, cp)


def layer_waits(t_a2a: Callable[[Num], Num], t_allgather: Num,
                sc: "StageCosts | StageCostArrays", cp: Num) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` one layer pass waits: the all-to-alls over the ``k``
    ranks, ``t_a2a(n)`` one of ``n`` bytes a rank sends, each exposed (``cp_a2a``'s rule):
    forward Q, K, V (``sc.cp_qkv_bytes``) and O (``sc.cp_out_bytes``), backward dO (with the
    saved output before TE 2.15, ``sc.cp_bwd_out``) and dQ, dK, dV, call by call
    (``cp_a2a.exchange_waits``), the backward with its recomputed forwards'
    (``cp_ring.with_rerun``); plus ``cp_ring.layer_waits`` of the ring, ``t_allgather`` one
    all-gather of ``sc.cp_bytes`` (the K/V at ``ring_sizes``) over the ``c/k`` ranks. The one
    form the estimate and the lower bound read."""
    a_f, a_b = cp_a2a.exchange_waits(t_a2a, sc, cp, sc.cp_qkv_bytes)
    r_f, r_b = cp_ring.layer_waits(t_allgather, ring_record(sc), cp)
    return a_f + r_f, a_b + r_b


def ring_record(sc: "StageCosts | StageCostArrays") -> "StageCosts | StageCostArrays":
    """``sc`` with the attention cores the ring runs beside: ``attn_fwd``/``attn_bwd`` and
    the recomputed forward's ``cp_rerun_attn`` less the all-to-all's copies
    (``cp_a2a.pass_copy_seconds``), which run before the ring's first step and after its
    last (the simulator's ``LayerBlocks.hier_block`` and ``cp_rerun`` the same); read by
    ``layer_waits`` and the ring's SM share (``cp_ring.layer_sm_extra``)."""
    c_f, c_b = cp_a2a.pass_copy_seconds(sc, sc.cp_qkv_bytes)
    return replace(sc, attn_fwd=np.maximum(sc.attn_fwd - c_f, 0.0),
                   attn_bwd=np.maximum(sc.attn_bwd - c_b, 0.0),
                   cp_rerun_attn=np.maximum(sc.cp_rerun_attn - c_f, 0.0))


def check(m: ModelSpec, tp: int, cp: int, k: int) -> None:
    """``SpecError`` where the inner all-to-all cannot scatter the rank's heads over ``k``
    (``cp_a2a.check_heads`` at ``k``: Transformer Engine asserts it on the a2a group)."""
    cp_a2a.check_heads(m, tp, k, "hierarchical_cp")
