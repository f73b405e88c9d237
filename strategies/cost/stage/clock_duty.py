"""The one-micro-batch data-parallel reduction's SM clock as a duty cycle (``duty_clock``,
``SystemConfig.overlap_clock_duty``): where that reduction is the only communication beside
the compute (``overlap_clock.dp_overlaps_whole_step``), the compute-bound kernels run at
``overlap_clock.duty_cycle_factor`` of its collectives' seconds against the rank's compute,
not at ``1/OVERLAP_CLOCK_RATIO`` for the whole step. The record the estimate, the bound and
the simulator read. docs/calibration.md §5.226."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import numpy as np

from strategies.cost import comm as cm
from strategies.cost import overlap_clock
from strategies.cost.stage.array_record import StageCostArrays
from strategies.cost.stage.inputs import StageInputs
from strategies.stacks.comm_rules import full_grad_reduce


def dp_window_comm(si: StageInputs, sc: StageCostArrays) -> Any:
    """Seconds pipeline rank 0's overlapped data-parallel collectives keep its links busy in
    a step: its gradient reduce-scatter (a whole all-reduce with ZeRO-0 or DeepSpeed's
    BF16_Optimizer, ``comm_rules.full_grad_reduce``) and, with ZeRO >= 1 and
    ``overlap_param_gather``, its parameter all-gather (at ``gather_first`` bytes a
    parameter), each alone on its links (``comm.dp_collective_time``, the estimate's
    ``terms.grad_reduce`` calls). Arrays over plans."""
    P = si.P

    def call(kind: str, nbytes: Any) -> Any:
        return cm.dp_collective_time(kind, nbytes, sc.params_first, sc.expert_params_first,
                                     P.tp, P.cp, P.dp, P.ep, P.etp, si.cl, P.dp_shard)
    full = full_grad_reduce(si.fw, si.dtype, P.zero)
    t_grad = np.where(full, call("allreduce", sc.grad_bytes),
                      call("reduce_scatter", sc.grad_bytes))
    gather = (np.asarray(P.zero) >= 1) & np.asarray(P.overlap_param_gather, dtype=bool)
    return t_grad + np.where(gather, call("allgather", sc.gather_first), 0.0)


def rank_compute(si: StageInputs, sc: StageCostArrays) -> Any:
    """Seconds of pipeline rank 0's compute in a one-micro-batch step: its ``l/pp`` mean
    layers' forward, backward and recomputation, the embedding's passes and, with one
    stage, the LM head's. Arrays over plans."""
    P = si.P
    layers = si.m.num_layers / P.pp * (sc.layer_fwd + sc.layer_bwd + sc.layer_recompute)
    head = np.where(P.pp == 1, sc.head_fwd + sc.head_bwd, 0.0)
    return layers + sc.embedding_fwd + sc.embedding_bwd + head


def switched_on(si: StageInputs) -> bool:
    """Whether ``si``'s system prices the one-micro-batch clock as a duty cycle
    (``SystemConfig.overlap_clock_duty``)."""
    return bool(si.sy.overlap_clock_duty)


def duty_clock(si: StageInputs,
               build: Callable[[StageInputs], StageCostArrays]) -> StageCostArrays:
    """``build(si)``, the stage-cost record, with ``SystemConfig.overlap_clock_duty`` on:
    the plans whose only overlapped communication is the one-micro-batch reduction are
    built once at the full clock, for their compute and collectives' seconds, and again at
    ``overlap_clock.duty_cycle_factor`` of them. Off, or with no such plan: ``build(si)``."""
    P = si.P
    args = (P.tp, P.tp_comm_overlap, P.cp, si.zero_g, si.whole, si.paired)
    base = overlap_clock.overlap_slowdown(*args, dp_duty=1.0)
    if not switched_on(si) or np.array_equal(base + si.zeros, si.slow + si.zeros):
        return build(si)
    sc = build(replace(si, slow=base))
    duty = overlap_clock.duty_cycle_factor(dp_window_comm(si, sc), rank_compute(si, sc))
    return build(replace(si, slow=overlap_clock.overlap_slowdown(*args, dp_duty=duty)))
