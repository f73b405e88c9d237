"""Context parallelism as Transformer Engine runs it (``FrameworkProfile.cp_impl`` ``"ring"``
or ``"allgather"``): the seconds one layer pass waits on its K/V traffic. PyTorch's ring
(torchtitan, ``"torch"``) has its own waits (``ring_attention.torch_ring_stalls``).

The ring (``AttnFuncWithCPAndKVP2P``, ``transformer_engine/pytorch/attention/
dot_product_attention/context_parallel.py``) splits the attention into ``cp`` steps and
overlaps each step's compute with the next step's K/V send, waiting on it (``req.wait()``)
before that step; the backward sends dK/dV round the ring too and waits for each ("wait
until dKV is received") before returning. So the waits sit inside the attention, whose
output the layer's next GEMM and its tensor-parallel collective (forward), or the QKV data
and weight gradients (backward), need: the ring's exposure adds to the layer's other
exposed communication, it does not run beside it. The all-gather path
(``AttnFuncWithCPAndKVAllGather``) gathers K/V before the attention and reduce-scatters
dK/dV after it, before the QKV backward: all exposed.

The one rule the estimate (scalar and arrays) and the lower bound read; the simulator
compiles the same traffic (``simulator.program.layer_blocks``: the share ``1 - f`` beside
the attention core, ``f`` after it, the block's closing collectives after both).
docs/calibration.md §5.110. Seconds.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from strategies.cost.token_counts import Num

if TYPE_CHECKING:
    from strategies.cost.stage.array_record import StageCostArrays
    from strategies.cost.stage.record import StageCosts

#: the ring's traffic per layer pass, in all-gathers of ``StageCosts.cp_bytes``: K/V
#: forward; K/V again and dK/dV backward (the simulator's volumes)
PASS_VOLUME = {True: 1.0, False: 2.0}


def ring_exposed(t_pass: Num, attn: Num, f: Num) -> Num:
    """Seconds one layer pass waits on its context-parallel traffic: ``t_pass`` (the
    pass's K/V traffic, ``PASS_VOLUME`` all-gathers of ``cp_bytes``) of which the share
    ``f`` (``StageCosts.cp_exposed_fraction``: the ring's last step, 1 for the all-gather
    path) is exposed whole and the rest where it outlasts the attention core ``attn`` it
    runs beside: ``f·t + max((1 - f)·t - attn, 0)``. Vectorised; 0 where ``t_pass`` is 0."""
    return f * t_pass + np.maximum((1 - f) * t_pass - attn, 0.0)


def layer_waits(t_allgather: Num, sc: "StageCosts | StageCostArrays", cp: Num
                ) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` one layer pass waits on its context-parallel traffic,
    ``t_allgather`` being one all-gather of ``sc.cp_bytes`` (the estimate's
    ``collective_time``, the bound's floor): ``ring_exposed`` of each pass's ``PASS_VOLUME``
    beside its attention core (``sc.attn_fwd``, ``sc.attn_bwd``) at
    ``sc.cp_exposed_fraction``; PyTorch's ring (``sc.cp_torch``) its own stalls
    (``sc.cp_stall_fwd``, ``sc.cp_stall_bwd``); 0 where ``cp`` is 1. ``sc``: a
    ``cost.stage`` cost record (scalars or arrays). The backward carries the recomputed
    forwards' waits too (``with_rerun``; PyTorch's ring: in ``cp_stall_bwd``). The one form
    the scalar and arrays estimate and the lower bound read."""
    on = np.asarray(cp) > 1
    if sc.cp_torch:
        return np.where(on, sc.cp_stall_fwd, 0.0), np.where(on, sc.cp_stall_bwd, 0.0)
    f = sc.cp_exposed_fraction
    t_f = PASS_VOLUME[True] * t_allgather
    fwd = np.where(on, ring_exposed(t_f, sc.attn_fwd, f), 0.0)
    bwd = np.where(on, ring_exposed(PASS_VOLUME[False] * t_allgather, sc.attn_bwd, f), 0.0)
    return fwd, with_rerun(sc, np.where(on, ring_exposed(t_f, sc.cp_rerun_attn, f), 0.0), bwd)


def with_rerun(sc: "StageCosts | StageCostArrays", rerun: Num, bwd: Num) -> Num:
    """Seconds one layer's backward waits on its context-parallel exchange, ``bwd``, plus its
    recomputed forwards' (``sc.cp_per_layer_recompute``, ``recompute.cp_reruns``): each
    calls the same CP attention function again, so waits ``rerun``, the forward's rule
    beside the core the rerun runs (``sc.cp_rerun_attn``: the forward's under full
    recomputation, where the forward's wait exactly). Every implementation's
    ``layer_waits`` reads it. docs/calibration.md §5.187."""
    return bwd + sc.cp_per_layer_recompute * rerun


def layer_sm_extra(t_allgather: Num, sc: "StageCosts | StageCostArrays", cp: Num,
                   extra: Callable[[Num, Num], Num]) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` the ring's SMs add to the attention core of one layer
    pass: ``extra(c, w)`` (``sm_share.WindowSMs.extra`` at the ring's SMs) of the share
    ``1 − f`` of each pass's ``PASS_VOLUME`` that runs beside its attention core (the
    ``ring_exposed`` window); 0 on PyTorch's ring (its own stalls, not modelled here) and
    where ``cp`` is 1; the backward's with its recomputed forwards' (``with_rerun``).
    ``t_allgather``, ``sc``: as ``layer_waits``."""
    on = (np.asarray(cp) > 1) & (not sc.cp_torch)
    f = sc.cp_exposed_fraction
    x_f, x_b, x_r = (np.where(on, extra((1 - f) * PASS_VOLUME[fwd] * t_allgather, attn), 0.0)
                     for fwd, attn in ((True, sc.attn_fwd), (False, sc.attn_bwd),
                                       (True, sc.cp_rerun_attn)))
    return x_f, with_rerun(sc, x_r, x_b)
