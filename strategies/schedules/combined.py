"""Megatron-Core's combined 1F1B: the order a plan with ``ep_overlap`` runs.

With ``--overlap-moe-expert-parallel-comm`` Megatron-Core runs the steady state of its
pipeline as overlapped pairs: one micro-batch's forward and an earlier one's backward are a
single combined step, layer by layer, so each one's expert all-to-all runs beside the other's
compute (``megatron/core/pipeline_parallel/combined_1f1b.py``). Two orders exist there:

* no pipelining (``pp == 1``): the first forward alone, then forward ``i`` paired with
  backward ``i - 1``, then the last backward alone
  (``combined_1f1b_schedule_for_no_pipelining``);
* interleaved 1F1B (``pp > 1`` needs ``vpp``; ``TransformerConfig`` asserts it): the
  interleaved order with one more warm-up forward (``get_pp_rank_microbatches`` adds one
  "to ensure the forward and backward computations are independent in all 1f1b steps"),
  each steady-state F-B pair one combined step, Megatron's exchanges around it.

Paired steps carry ``Step.overlap`` (the mechanism DualPipe's ``F&B`` uses): the simulator's
builder runs them as an overlapped group; the estimate prices every pass paired and the
lone passes on the critical path once (``lone_passes_exposed``). Which plans may turn it on is a stack limit
(``strategies.stacks.rules.stack_rules``). Pure; no SimPy.

>>> " ".join(s.label for s in combined_steps("1f1b", 0, 1, 3))
'F0.c0 F1.c0& B0.c0 F2.c0& B1.c0 B2.c0'
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from strategies.schedules.registry import get_schedule
from strategies.schedules.step import Step

def pair_exposed(t_comm: Any, fwd: Any, bwd: Any) -> Any:
    """Seconds one layer's expert communication adds to an overlapped pair: the forward's
    (``t_comm``) runs beside the partner's backward layer (``bwd`` seconds of compute), the
    backward's (``t_comm`` too) beside the next forward layer (``fwd``), each exposed only by
    what outlasts that compute. 0 when both are hidden; ``2 t_comm - fwd - bwd`` when both
    outlast it (the pair then runs at the communication stream's pace)."""
    return np.maximum(0.0, t_comm - bwd) + np.maximum(0.0, t_comm - fwd)


def pair_message_hiding(hiding: Any, on: Any, delayed: Any = 0.0) -> Any:
    """Seconds of compute that hide one steady pipeline call's transfer: ``hiding`` (the
    pass of the other kind run before the call is waited for, ``overlap_p2p_comm``) where
    Megatron-Core's combined 1F1B does not run; where it runs (``on``) only ``delayed``, the
    weight gradient of the pair's last backward layer's attention that
    ``delay_wgrad_compute`` leaves to run after the call is posted (``dw_attn``).

    A steady pair's backward output leaves when its backward's layers end
    (``post_backward`` on the compute stream after the last layer's attention backward;
    Megatron-LM d98e8a64 ``models/common/model_chunk_schedule_plan.py``
    ``TransformerModelChunkSchedulePlan.run``, "so the p2p comm could be overlapped with the
    wgrad of pre_dispatch backward"), then ``b_layer.pre_dispatch_computation.backward_dw()``
    runs the deferred weight gradient; the peer's next pair waits for the output before its
    first layer (``pre_backward``), while that peer ran its own pair meanwhile: with
    interleaving a rank's next pair needs its neighbour's current pair's outputs, so
    nothing else hides the call (docs/calibration.md §5.82, §5.87). Megatron-Bridge's
    performance configs turn ``delay_wgrad_compute`` on with the overlap
    (``_set_moe_a2a_overlap_overrides``)."""
    return np.where(np.asarray(on, dtype=bool), delayed, hiding)


#: schedules whose steady state Megatron-Core's combined 1F1B pairs when ``pp > 1``
COMBINED_SCHEDULES = ("interleaved",)


def combined_order(forwards: Sequence[Step], backwards: Sequence[Step], w: int) -> list[Step]:
    """``w`` forwards alone, then each remaining forward paired with the next backward
    (``overlap=True`` links it to that backward), then the remaining backwards."""
    rem = len(forwards) - w
    out = list(forwards[:w])
    for k in range(rem):
        f = forwards[w + k]
        out += [Step(f.kind, f.microbatch, f.chunk, overlap=True), backwards[k]]
    return out + list(backwards[rem:])


def combined_warmup(schedule: str, stage: int, pp: int, m: int, vpp: int = 1,
                    group_size: int | None = None) -> int:
    """Forwards before the first pair: 1 without pipelining, the interleaved warm-up plus
    one with it (at most all ``m·vpp``)."""
    if pp == 1:
        return min(1, m)
    sched = get_schedule(schedule)
    return min(sched.num_warmup(stage, pp, m, vpp, group_size) + 1, m * vpp)


def combined_steps(schedule: str, stage: int, pp: int, m: int, vpp: int = 1,
                   group_size: int | None = None) -> list[Step]:
    """The combined-1F1B order of rank ``stage`` (the schedule's own forwards and
    backwards, re-paired)."""
    if pp == 1:
        return combined_order([Step("F", i, 0) for i in range(m)],
                              [Step("B", i, 0) for i in range(m)], min(1, m))
    plain = [s for s in get_schedule(schedule).steps(stage, pp, m, vpp, group_size)]
    fwd = [s for s in plain if s.kind == "F"]
    bwd = [s for s in plain if s.kind == "B"]
    return combined_order(fwd, bwd, combined_warmup(schedule, stage, pp, m, vpp, group_size))


def combined_actions(schedule: str, stage: int, pp: int, m: int, vpp: int = 1,
                     group_size: int | None = None) -> list:
    """``combined_steps`` with the schedule's exchanges (none without pipelining)."""
    steps = combined_steps(schedule, stage, pp, m, vpp, group_size)
    if pp == 1:
        return steps
    w = combined_warmup(schedule, stage, pp, m, vpp, group_size)
    return get_schedule(schedule).exchanges(steps, w, stage, pp, vpp)


def ep_overlap_share(schedule: str, stage: int, pp: int, m: int, vpp: int = 1) -> float:
    """Share of rank ``stage``'s forwards that run paired in the combined order."""
    fwd = [s for s in combined_steps(schedule, stage, pp, m, vpp) if s.kind == "F"]
    return sum(s.overlap for s in fwd) / max(len(fwd), 1)


def lone_passes_exposed(layers: Any, t_comm: Any, paired: Any) -> Any:
    """Seconds the combined order's lone passes add to its step beyond running every pass
    paired: ``layers·(2·t_comm − paired)`` (``layers``: the model's transformer layers,
    ``t_comm`` one layer's expert all-to-all of a pass, ``paired`` its ``pair_exposed``).

    On the critical path of the combined order with equal stages, the first micro-batch's
    forward crosses every virtual stage alone (the warm-up, Megatron's
    ``forward_backward_helper_wrapper(f_virtual_microbatch_id=k)`` with no backward: each
    layer's dispatch and combine before the next layer, and ``wait_current_stream`` at the
    pass's end), and the last one's backward crosses them back alone (the cool-down); every
    other slot of the path is a pair. The span is ``(m·v + pp − 1)·(F + B + P) +
    layers·(2t − P)`` per chunk's ``F``, ``B`` and pair exposure ``P``, whatever the rank's
    own warm-up count (rank 0's ``2(pp − 1) + (v − 1)·pp + 1`` lone forwards are partly in
    its fill bubble): the contention-free simulation to 1e-12 (tests/test_ep_overlap_lone.py,
    docs/calibration.md §5.91). Without pipelining the first forward and the last backward
    are the lone ones: the same rule."""
    return np.asarray(layers, dtype=float) * (2.0 * np.asarray(t_comm, dtype=float)
                                              - np.asarray(paired, dtype=float))
