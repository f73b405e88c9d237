"""Interleaved 1F1B with ``vpp`` model chunks per rank
(Megatron ``forward_backward_pipelining_with_interleaving``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.schedules.base import Schedule
from strategies.schedules.registry import get_schedule, register
from strategies.schedules.step import (Step, check_common, steps_of_columns,
                                       warmup_steady_cooldown_positions)
from strategies.schedules.validity import Rule, raise_first
from strategies.schedules.exchanges import Boundary, add_exchange, split_passes
from strategies.schedules.p2p_streams import overlapped_exposed


@register("interleaved")
class Interleaved(Schedule):
    """Interleaved 1F1B (Narayanan et al., 2021): each rank holds ``vpp`` model chunks, chunk
    ``c`` of rank ``r`` is virtual stage ``c·pp + r``; micro-batches go in groups of
    ``group_size`` (default ``pp``). The bubble shrinks by ``vpp``; a forward's output send
    is batched with the next backward's exchange (so it does not block)."""

    aliases = ("1f1b-interleaved", "interleaved-1f1b")
    text_patterns = (r"\binterleaved\b", r"\bvirtual (pipeline|stage)")
    #: from g and 2g micro-batches the step time is exact but not its breakdown
    figures_affine_from = 2
    chunked = True
    default_vpp = 2
    uses_group = True
    blocks_fwd_send = False
    overlaps_p2p = True
    #: ``backward_step_helper`` launches ``config.grad_sync_func[chunk]`` after the backward
    #: of the chunk's last micro-batch (Megatron-Core core_r0.8.0
    #: ``megatron/core/pipeline_parallel/schedules.py``)
    reduces_chunk_after_backward = True

    # ------------------------------------------------------------------ validity
    def shape_rules(self, pp: Any, vpp: Any, group_size: Any) -> list[Rule]:
        """``vpp >= 2``, ``pp >= 2`` and ``group_size >= pp`` (Megatron's
        ``microbatch_group_size_per_vp_stage``)."""
        g = pp if group_size is None else group_size
        return [
            ("vpp", vpp, vpp >= 2,
             lambda: "schedule=interleaved needs vpp >= 2 model chunks per pipeline rank "
                     "(use schedule=1f1b for vpp=1)"),
            ("schedule", self.name, pp >= 2, lambda: "interleaved needs pp >= 2"),
            ("microbatch_group_size", g, g >= pp, lambda: f"must be >= pp={pp}"),
        ]

    def batch_rules(self, pp: Any, m: Any, vpp: Any, group_size: Any) -> list[Rule]:
        """``group_size <= m`` and ``m % group_size`` 0 or ``>= pp`` (docs/schedules.md)."""
        g = pp if group_size is None else group_size
        return [
            ("num_microbatches", m, m >= g,
             lambda: f"interleaved needs at least microbatch_group_size={g} micro-batches "
                     "(gbs/(mbs*dp))"),
            ("num_microbatches", m, (m % g == 0) | (m % g >= pp),
             lambda: f"interleaved needs num_microbatches % {g} to be 0 or >= pp={pp} "
                     "(with the default group size, a multiple of pp)"),
        ]

    # ------------------------------------------------------------------ order
    def steps(self, stage: int, pp: int, m: int, vpp: int = 1,
              group_size: int | None = None) -> list[Step]:
        """Interleaved 1F1B order for pipeline rank ``stage``.

        >>> " ".join(map(str, get_schedule("interleaved").steps(1, 2, 2, vpp=2)))
        'F0.c0 F1.c0 F0.c1 B0.c1 F1.c1 B1.c1 B0.c0 B1.c0'
        """
        return steps_of_columns(*self.order_columns(stage, pp, m, vpp, group_size))

    def order_columns(self, stage: int, pp: int, m: int, vpp: int = 1,
                      group_size: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The order of ``steps`` as ``step_columns``, built as arrays: forward ``k`` is
        virtual micro-batch ``k`` (``virtual_microbatch_columns``), backward ``k`` the same
        micro-batch on the mirrored chunk ``vpp - 1 - c``, placed in 1F1B order
        (``warmup_steady_cooldown_positions``)."""
        w = self.num_warmup(stage, pp, m, vpp, group_size)
        g = pp if group_size is None else group_size
        micro, chunk = virtual_microbatch_columns(m, vpp, g)
        is_forward, index = warmup_steady_cooldown_positions(m * vpp, w)
        kind = np.where(is_forward, 0, 1).astype(np.int8)
        chunk = np.where(is_forward, chunk[index], vpp - 1 - chunk[index])
        return kind, micro[index], chunk, np.zeros(len(index), dtype=bool)

    def num_warmup(self, stage: int, pp: int, m: int, vpp: int = 1,
                   group_size: int | None = None) -> int:
        """Warm-up virtual micro-batches: ``min(2(pp-stage-1) + (vpp-1)·g, m·vpp)``."""
        check_common(stage, pp, m)
        # the order is defined for pp=1 too; only plans refuse it (rule "schedule")
        raise_first(r for r in self.rules(pp, m, vpp, group_size) if r[0] != "schedule")
        g = pp if group_size is None else group_size
        return min(2 * (pp - stage - 1) + (vpp - 1) * g, m * vpp)

    def actions(self, stage: int, pp: int, m: int, vpp: int = 1,
                group_size: int | None = None) -> list:
        """Megatron ``forward_backward_pipelining_with_interleaving``'s exchanges (no p2p
        overlap): in the steady state one exchange after each F-B pair sends both outputs and
        receives the next pair's inputs."""
        steps = self.steps(stage, pp, m, vpp, group_size)
        if pp == 1:
            return list(steps)
        return self.exchanges(steps, self.num_warmup(stage, pp, m, vpp, group_size), stage,
                              pp, vpp)

    def exchanges(self, steps: list[Step], w: int, stage: int, pp: int, vpp: int) -> list:
        """``steps`` (``w`` warm-up forwards, then F-B pairs, then backwards) with Megatron's
        exchanges: in the steady state one after each F-B pair (an overlapped pair of
        Megatron's combined 1F1B too: ``strategies.schedules.combined``)."""
        ring = Boundary(self, stage, pp, vpp)
        fwd, bwd = split_passes(steps)
        total, out = len(fwd), []
        rem = total - w
        add_exchange(out, recvs=ring.recv_in(fwd[0]))
        for k in range(w):
            out.append(fwd[k])
            nxt = ring.recv_in(fwd[k + 1] if k + 1 < total else None)
            grad = ring.recv_in(bwd[0]) if (k == w - 1 and rem) else ()
            add_exchange(out, ring.send_out(fwd[k]), nxt + grad)
        for k in range(rem):
            out += [fwd[w + k], bwd[k]]
            nxt_f = fwd[w + k + 1] if w + k + 1 < total else None
            add_exchange(out, ring.send_out(fwd[w + k]) + ring.send_out(bwd[k]),
                         ring.recv_in(nxt_f) + ring.recv_in(bwd[k + 1]))
        if not rem:
            add_exchange(out, recvs=ring.recv_in(bwd[0]))
        for k in range(rem, total):
            out.append(bwd[k])
            nxt_b = bwd[k + 1] if k + 1 < total else None
            add_exchange(out, ring.send_out(bwd[k]), ring.recv_in(nxt_b))
        return out

    def overlapped_actions(self, stage: int, pp: int, m: int, vpp: int = 1,
                           group_size: int | None = None, warmup_flush: bool = False) -> list:
        """Megatron-Core's order with ``overlap_p2p_comm`` (``schedules.
        forward_backward_pipelining_with_interleaving``): after each forward one
        ``send_forward_recv_forward`` (its output, the next forward's input), after the last
        warm-up forward a ``recv_backward``, after each backward one
        ``send_backward_recv_backward``; every call ``Exchange.overlapped`` (its receive waited
        for just before the next pass of the same kind). The warm-up's and the cool-down's
        calls are ``Exchange.waited`` (the next pass waits for the whole call: core_v0.13.0
        ``schedules.py`` L1188-1215, L1575, ``wait_on_reqs``) unless ``warmup_flush``
        (``overlap_p2p_comm_warmup_flush``; docs/calibration.md §5.207).

        >>> [str(a) for a in get_schedule("interleaved").overlapped_actions(1, 2, 2, 2)][:5]
        ['X(recv fwd 0.0)', 'F0.c0', 'X(send fwd 0.0 | recv fwd 1.0)', 'F1.c0', \
'X(send fwd 1.0 | recv fwd 0.1)']
        """
        steps = self.steps(stage, pp, m, vpp, group_size)
        w = self.num_warmup(stage, pp, m, vpp, group_size)
        ring = Boundary(self, stage, pp, vpp)
        fwd, bwd = split_passes(steps)
        total, out = len(fwd), []
        rem = total - w

        def call(sends: tuple = (), recvs: tuple = (), waited: bool = False) -> None:
            add_exchange(out, sends, recvs, overlapped=True, waited=waited and not warmup_flush)

        def after_f(k: int) -> None:
            call(ring.send_out(fwd[k]), ring.recv_in(fwd[k + 1] if k + 1 < total else None),
                 k < w)

        def after_b(k: int) -> None:
            call(ring.send_out(bwd[k]), ring.recv_in(bwd[k + 1] if k + 1 < total else None),
                 k >= rem)

        call(recvs=ring.recv_in(fwd[0]))
        for k in range(w):
            out.append(fwd[k])
            after_f(k)
        call(recvs=ring.recv_in(bwd[0]))
        for k in range(rem):
            out.append(fwd[w + k])
            after_f(w + k)
            out.append(bwd[k])
            after_b(k)
        for k in range(rem, total):
            out.append(bwd[k])
            after_b(k)
        return out

    # ------------------------------------------------------------------ memory and time
    def in_flight(self, stage: int, pp: int, m: int, vpp: int = 1,
                  group_size: int | None = None) -> int:
        """``min(w + 1, m·vpp)`` with ``w`` the warm-up count."""
        return min(self.num_warmup(stage, pp, m, vpp, group_size) + 1, m * vpp)

    def in_flight_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> Any:
        return np.minimum(2 * (pp - stage - 1) + (vpp - 1) * pp + 1, m * vpp)

    def fill_chunks(self, vpp: Any) -> Any:
        """The fill and drain run chunk by chunk: ``vpp``."""
        return vpp

    def exposed_messages(self, m: Any, pp: Any, vpp: Any) -> Any:
        """One exchange per step of rank 0's order, each a message's time: Megatron batches a
        steady pair's four transfers into one blocking ``send_forward_backward_recv_forward_
        backward``; the warm-up forwards and the cool-down backwards have one each, the last
        backward (chunk 0's, virtual stage 0) none: ``m·v + w − 1``, ``w = 2(pp−1) + (v−1)·pp``
        rank 0's warm-up (default group). Where ``m·v < w`` (``m = pp > 2``) the order runs
        ``m·v`` warm-up forwards but the fill's chain through the ranks still takes ``w``
        messages, so ``w`` is not capped: ``m·v + pp·v + pp − 3``. The simulation of a pipeline
        alone on NVLink exposes exactly this count (``experiments/p2p_exchange_count.py``,
        ``tests/test_interleaved_grad_window.py``)."""
        m, pp, vpp = (np.asarray(x, dtype=float) for x in (m, pp, vpp))
        return m * vpp + 2 * (pp - 1) + (vpp - 1) * pp - 1

    def overlapped_p2p_time(self, m: Any, pp: Any, vpp: Any, t: Any, hiding: Any,
                            group: Any = None) -> Any:
        """``overlap_p2p_comm`` (``overlapped_actions``; docs/calibration.md §5.68): the
        fill and the drain have nothing to hide under. The warm-up's calls are waited for
        whole (§5.207), so rank 0 runs the ``(v − 1)·G`` forwards before its first of the
        last chunk at a forward and a message each (``G = max(group, pp)``, ``group`` the
        micro-batch group, None: ``pp``), then the micro-batch crosses the ``pp − 1`` hops
        left; the drain mirrors it: ``2((v − 1)·G + pp − 1)`` messages, at ``G = pp`` the
        chain of one micro-batch through the ``pp·v`` virtual stages and back,
        ``2(pp·v − 1)``. Each of the other exchanges the blocking order charges
        (``exposed_messages`` less the chain) leaves what outlasts the pass run before its
        wait, ``p2p_streams.overlapped_exposed(t, hiding)`` (0 where every pass outlasts a
        message: the step is then the compute span plus the chain, as simulated)."""
        m, pp, vpp = (np.asarray(x, dtype=float) for x in (m, pp, vpp))
        g = pp if group is None else np.maximum(np.asarray(group, dtype=float), pp)
        chain = 2 * ((vpp - 1) * g + pp - 1)
        steady = np.maximum(self.exposed_messages(m, pp, vpp) - chain, 0.0)
        return np.asarray(t, dtype=float) * chain + steady * overlapped_exposed(t, hiding)

    def reduce_window_steps(self, pp: Any, vpp: Any) -> Any:
        """After the last backward of chunk ``vpp-1`` come ``(vpp-1)·pp`` more backwards."""
        return 1 + (vpp - 1) * pp

    def period(self, pp: int, group_size: int | None = None) -> int:
        return max(pp, group_size or 1)

    # ------------------------------------------------------------------ search and exports
    def search_vpps(self, num_layers: int, max_vpp: int | None = None,
                    fixed_vpp: int | None = None) -> list[int]:
        """Every ``vpp >= 2`` dividing the layers (up to ``max_vpp``), and a fixed one."""
        vpps = [v for v in range(2, num_layers + 1) if num_layers % v == 0
                and (max_vpp is None or v <= max_vpp)]
        if fixed_vpp is not None and fixed_vpp >= 2 and fixed_vpp not in vpps:
            vpps.append(fixed_vpp)
        return vpps

    def megatron_args(self, job: Any) -> tuple[list[str], list[str]]:
        """The virtual stages: none with a layout string (Megatron reads them from it),
        ``--num-virtual-stages-per-pipeline-rank`` with uneven stages (Megatron's rule),
        else the layers per virtual stage."""
        p = job.plan
        if p.layout is not None:
            return [], []
        if job.layout.source != "even":
            return [f"--num-virtual-stages-per-pipeline-rank {p.vpp}"], []
        return [f"--num-layers-per-virtual-pipeline-stage "
                f"{job.model.num_layers // (p.pp * p.vpp)}"], []

    def deepspeed_refusal(self, job: Any) -> str | None:
        return "DeepSpeed's pipeline engine has no interleaved schedule"


def virtual_microbatch_table(num_microbatches: int, vpp: int,
                             group_size: int) -> list[tuple[int, int]]:
    """Virtual micro-batch ``k`` -> ``(microbatch, model_chunk_id)`` of forward ``k``.

    Micro-batches go in groups of ``group_size`` (the last group takes what is left);
    inside a group over chunks, inside a chunk over the group's micro-batches.

    >>> virtual_microbatch_table(3, 2, 2)
    [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]
    """
    return list(zip(*(c.tolist() for c in virtual_microbatch_columns(num_microbatches, vpp,
                                                                     group_size))))


def virtual_microbatch_columns(num_microbatches: int, vpp: int, group_size: int
                               ) -> tuple[np.ndarray, np.ndarray]:
    """``virtual_microbatch_table`` as two int64 arrays ``(microbatch, model_chunk_id)``: a
    group of ``g`` micro-batches (the last one ``m mod g`` or ``g``) spans ``g·vpp``
    virtual micro-batches, chunk-major inside."""
    k = np.arange(num_microbatches * vpp)
    start = k // (group_size * vpp) * group_size
    size = np.minimum(group_size, num_microbatches - start)
    within = k - start * vpp
    return start + within % size, within // size


def num_warmup_microbatches(stage: int, pp: int, num_microbatches: int, vpp: int,
                            group_size: int | None = None) -> int:
    """Warm-up virtual micro-batches (``Interleaved.num_warmup``)."""
    return get_schedule("interleaved").num_warmup(stage, pp, num_microbatches, vpp, group_size)
