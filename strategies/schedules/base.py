"""The ``Schedule`` interface of the pipeline schedules: one class whose defaults derive every
fact of a schedule from its order. Around it: ``step`` (the ``Step`` record an order is made
of), ``stash`` (what an order stashes), ``per_distinct`` (scalar figures over the search's
arrays), ``validity`` (the ``Rule`` lists) and ``registry`` (registration and look-ups by
name and by code).

A schedule is one module holding one ``Schedule`` subclass, registered under its name with
``@register("name")``. The subclass owns every fact that depends on the schedule (see
docs/architecture.md, "Schedules: the plug-in interface"):

* **order**: ``steps(stage, pp, m, vpp, group_size)``, the ordered ``list[Step]`` that one
  pipeline rank runs in one training step (the only method without a default);
* **placement**: which rank and model chunk hold each position of a micro-batch's path
  through the pipeline (``virtual_stage``, ``rank_chunk``, ``num_virtual_stages``; default
  Megatron's ring: chunk ``c`` on rank ``r`` is position ``c·pp + r``) and so the peer of
  every point-to-point message (``peer``);
* **exchanges**: ``actions(...)``, the steps with the blocking ``Exchange`` calls between
  them (default: receive before a step, send after it);
* **warm-up and memory**: ``num_warmup``, ``in_flight`` (stashed ``(micro-batch, chunk)``
  entries at the peak, scalar) and ``in_flight_array`` (over numpy arrays, for the search),
  ``stash_frontier`` and ``stash_frontier_array`` (the ``(stashed, pending W)`` pairs a
  rank's activations can peak at, of which the memory model and the simulator's activation
  track take the one with the most bytes: ``peak_pair``), ``chunk_stash_moments`` (the same
  moments counted per chunk, where a rank's chunks keep different bytes:
  ``peak_chunk_moment``), ``logits_stashed`` (the last stage
  keeps every micro-batch's logits until its backward);
* **time**: ``fill_chunks`` (pieces a stage's work is cut into on the fill and drain),
  ``pipeline_span``, ``exchange_rounds``, ``exposed_messages`` and ``bottleneck_messages``
  (the analytic estimate),
  ``bubble_fraction``
  (the closed form), ``blocks_fwd_send``/``blocks_bwd_send`` and ``reduce_window_steps``
  (the lower bound), ``steady_state``/``period`` (extension from short runs);
* **validity**: ``check_plan`` (pp, vpp, group size), ``check`` (plus the micro-batch
  count) and ``valid`` (the same rules over arrays, for the search): one list of rules,
  ``rules(...)``, read by all three;
* **search space**: ``search_vpps`` (which chunk counts the search enumerates);
* **exports**: ``megatron_args`` and ``deepspeed_refusal``.

Defaults derive everything from ``steps`` where they can, so a new schedule that only gives
its order already runs through estimate, simulate, compare and search; it overrides the
rest with closed forms. Array methods take numpy arrays (or scalars) and must be pure.
Code that holds plans as arrays refers to a schedule by its integer ``schedule_code`` (the
order of registration) and asks ``dispatch``/``attr_by_code`` for per-schedule facts.

>>> from strategies.schedules import get_schedule, schedule_code
>>> get_schedule("1f1b").in_flight(0, 4, 8)
4
>>> [schedule_code(n) for n in ("gpipe", "1f1b", "interleaved")]
[0, 1, 2]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.distinct_rows import distinct_rows
from strategies.schedules.per_distinct import order_figure, per_distinct
from strategies.schedules.stash import (chunk_stash_moments, peak_pending_w, peak_stash,
                                        stash_frontier, trailing_w)
from strategies.schedules.step import Step
from strategies.schedules.validity import Rule, all_ok, raise_first


class Schedule:
    """A pipeline schedule: its order and every fact that depends on it (module docstring).

    Units: seconds for times; counts for steps and micro-batches. ``stage`` is the pipeline
    rank, ``pp`` the ranks, ``m`` the micro-batches per pipeline and optimizer step, ``vpp``
    the model chunks per rank, ``group_size`` the micro-batch group (None: the default).
    """

    name: str = ""
    #: other spellings accepted in ``--schedules`` lists
    aliases: tuple[str, ...] = ()
    #: regular expressions naming this schedule in a publication's free text (lower case;
    #: ``strategies.reference.text.schedule_kind`` tries chunked schedules first)
    text_patterns: tuple[str, ...] = ()
    #: runs ``vpp >= 2`` model chunks per rank (``name:V`` in plans and lists)
    chunked: bool = False
    #: the chunk count of ``schedule=name`` with no ``vpp``
    default_vpp: int = 1
    #: takes Megatron's ``microbatch_group_size``
    uses_group: bool = False
    #: the last stage keeps each micro-batch's logits until its backward (else one at a time)
    logits_stashed: bool = False
    #: every rank but the last keeps each stashed micro-batch's stage output until its
    #: backward (``stage_ends.stage_output_bytes``: DeepSpeed's pipeline engine); else the
    #: output's storage is not held (Megatron's ``deallocate_output_tensor``)
    keeps_stage_output: bool = False
    #: a send waits until the receiver posts its receive (a rendezvous, as synchronous
    #: ``torch.distributed.send`` calls do); else it starts at once (eager)
    blocking_sends: bool = False
    #: runs Megatron's ``overlap_p2p_comm`` calls where the stack does
    #: (``FrameworkProfile.overlap_p2p_comm``; ``overlapped_actions``, docs/calibration.md §5.68)
    overlaps_p2p: bool = False
    #: whether a forward's (backward's) output send blocks the next step (lower bound)
    blocks_fwd_send: bool = True
    blocks_bwd_send: bool = True
    #: step time affine in ``m`` once ``m`` is a multiple of ``period`` (validation extends
    #: long runs from two short ones)
    steady_state: bool = True
    #: the first multiple of ``period`` from which every figure of a step (not only its time)
    #: is affine in ``m``, measured against full simulation (tests/test_extend.py); None: not
    #: known, the search simulates such plans in full (``simulator.extend``)
    figures_affine_from: int | None = None
    #: the backward is split into ``B`` (input gradient) and ``W`` (weight gradient) steps
    splits_backward: bool = False
    #: after rank 0's first backward, forwards still run between its backwards (1F1B's steady
    #: state), so a micro-batch's gradient reduce-scatter (ZeRO-2) can hide under later
    #: forwards as well as backwards; False: only the backwards follow (GPipe's all-forward
    #: then all-backward; DualPipe's deferred weight gradients) (estimate's ZeRO-2 window)
    reduces_under_forwards: bool = True
    #: with ``overlap_grad_reduce`` a chunk's gradient buckets are reduced together once the
    #: whole backward of its last micro-batch has ended (Megatron-Core's interleaved schedule
    #: calls ``grad_sync_func`` per chunk after ``backward_step``, the backward run under
    #: ``no_sync``); False: each bucket as soon as its layers' backward ends (the DDP hooks)
    #: (compiler and estimate, ``terms.dp_exposure.grad_window_exposed``)
    reduces_chunk_after_backward: bool = False
    #: the messages on the critical path depend on which kind of rank (first, middle, last)
    #: bounds the steady state (``bottleneck_messages``; 1F1B, whose middle ranks block on
    #: two exchanges per micro-batch and its end ranks on one); False: one count,
    #: ``exposed_messages`` (estimate's ``pp_comm``)
    messages_by_rank: bool = False
    #: False: plannable, but the default search leaves it out; ``--fix schedule=`` (and
    #: ``search --schedules all``) enumerate it with one chunk per rank
    in_default_search: bool = True
    #: the order links steps into overlapped groups (``Step.overlap``: DualPipe's ``F&B``),
    #: whose expert all-to-all hides under the partner's compute (compiler, estimate, bound)
    overlaps_pairs: bool = False
    #: rank ``r`` also holds stage ``pp-1-r`` (DualPipe's two pipelines in opposite
    #: directions): the parameters of both stages, the embedding and the LM head on both end
    #: ranks, and each rank's first micro-batch comes from its nearer end
    mirrored: bool = False

    def order_chunks(self, pp: int, vpp: int) -> int:
        """Chunk ids of a rank's order (``Step.chunk``): ``vpp``, or a mirrored schedule's
        two copies (chunk 1: stage ``pp-1-r``'s, ``layout.order_chunk_kinds``) where
        ``pp > 1``."""
        return 2 if self.mirrored and pp > 1 else vpp

    # ------------------------------------------------------------------ order
    def steps(self, stage: int, pp: int, m: int, vpp: int = 1,
              group_size: int | None = None) -> list[Step]:
        """The ordered steps of pipeline rank ``stage`` in one training step."""
        raise NotImplementedError(f"schedule {self.name!r} gives no steps()")

    def for_job(self, job: Any) -> "Schedule":
        """This schedule as ``job`` runs it: itself, unless its order depends on the job's
        times (ZB-1p/ZB-2p's heuristic, ``strategies.schedules.zb_auto``), which binds them."""
        return self

    def __call__(self, stage: int, pp: int, num_microbatches: int, vpp: int = 1,
                 group_size: int | None = None) -> list[Step]:
        return self.steps(stage, pp, num_microbatches, vpp, group_size)

    def num_warmup(self, stage: int, pp: int, m: int, vpp: int = 1,
                   group_size: int | None = None) -> int:
        """Warm-up forwards on ``stage`` (Megatron's ``num_warmup_microbatches``), from the
        order: the forwards before the first backward, less the forward that the first
        steady-state pair starts with (none when every forward comes first)."""
        steps = self.steps(stage, pp, m, vpp, group_size)
        n = next((k for k, s in enumerate(steps) if s.kind != "F"), len(steps))
        return n if n == sum(s.kind == "F" for s in steps) else n - 1

    # ------------------------------------------------------------------ placement
    def num_virtual_stages(self, pp: int, vpp: int) -> int:
        """Positions on a micro-batch's path through the pipeline."""
        return pp * vpp

    def virtual_stage(self, rank: int, chunk: int, pp: int, vpp: int,
                      microbatch: int = 0) -> int:
        """Position of ``(rank, chunk)`` on ``microbatch``'s path (ring: ``chunk·pp + rank``)."""
        return chunk * pp + rank

    def rank_chunk(self, position: int, pp: int, vpp: int,
                   microbatch: int = 0) -> tuple[int, int]:
        """``(rank, chunk)`` at ``position`` of ``microbatch``'s path (inverse of
        ``virtual_stage``)."""
        return position % pp, position // pp

    def path_hops(self, pp: int, vpp: int) -> tuple[tuple[int, int], ...]:
        """``(rank, next rank)`` of every message on a micro-batch's forward path (its
        backward crosses the same hops the other way): consecutive positions on different
        ranks (``rank_chunk``; the interleaved ring's wrap from rank ``pp-1`` to rank 0
        included, a V's turn on one rank not).

        >>> from strategies.schedules import get_schedule
        >>> get_schedule("interleaved").path_hops(2, 2)
        ((0, 1), (1, 0), (0, 1))
        """
        ranks = [self.rank_chunk(p, pp, vpp)[0] for p in range(self.num_virtual_stages(pp, vpp))]
        return tuple((a, b) for a, b in zip(ranks, ranks[1:]) if a != b)

    def ends(self, pp: int, vpp: int, microbatch: int = 0) -> tuple[int, int]:
        """Ranks holding the first position (the embedding) and the last (the LM head and
        the loss): ``(0, pp - 1)`` on the ring, ``(0, 0)`` on a V."""
        last = self.num_virtual_stages(pp, vpp) - 1
        return (self.rank_chunk(0, pp, vpp, microbatch)[0],
                self.rank_chunk(last, pp, vpp, microbatch)[0])

    def head_rank_array(self, pp: Any, vpp: Any) -> np.ndarray:
        """Pipeline rank holding the LM head and the loss (``ends``' second) for each
        ``(pp, vpp)``: ``pp - 1`` on the ring, 0 on a V. The embedding is on rank 0 for every
        schedule (``ends``' first). The one placement rule cost, memory and estimate read."""
        return per_distinct(lambda s, p, m, v: self.ends(p, v)[1], 0, pp, 1, vpp)

    def peer(self, rank: int, chunk: int, microbatch: int, pp: int, vpp: int,
             direction: str, sending: bool) -> int:
        """Rank at the other end of message ``(direction, microbatch, chunk)`` of ``rank``:
        ``fwd`` goes to the next position, ``bwd`` to the previous one."""
        towards_next = (direction == "fwd") == sending
        pos = self.virtual_stage(rank, chunk, pp, vpp, microbatch) + (1 if towards_next else -1)
        return self.rank_chunk(pos, pp, vpp, microbatch)[0]

    # ------------------------------------------------------------------ exchanges
    def actions(self, stage: int, pp: int, m: int, vpp: int = 1,
                group_size: int | None = None) -> list:
        """The steps with the blocking exchanges between them (default: each step receives
        its input just before it and sends its output just after it)."""
        from strategies.schedules.exchanges import Boundary, around_each_step
        steps = self.steps(stage, pp, m, vpp, group_size)
        if pp == 1:
            return list(steps)
        return around_each_step(steps, Boundary(self, stage, pp, vpp))

    # ------------------------------------------------------------------ validity
    def shape_rules(self, pp: Any, vpp: Any, group_size: Any) -> list[Rule]:
        """Rules on ``pp``, ``vpp`` and the group size alone (checked when a plan is made).
        Default: one model chunk per rank and no micro-batch group."""
        # (the registry holds schedules, so it is imported here, where a message names them)
        from strategies.schedules.registry import chunked_names, grouped_names
        return [("vpp", vpp, vpp == 1,
                 lambda: f"schedule={self.name} runs one model chunk per rank: vpp > 1 needs "
                         f"schedule={' or '.join(chunked_names()) or 'a chunked schedule'}"),
                ("microbatch_group_size", group_size, group_size is None,
                 lambda: f"only applies to schedule={' or '.join(grouped_names())}, "
                         f"not {self.name}")]

    def batch_rules(self, pp: Any, m: Any, vpp: Any, group_size: Any) -> list[Rule]:
        """Rules that involve the micro-batch count too (checked when a job is made)."""
        return []

    def rules(self, pp: Any, m: Any, vpp: Any, group_size: Any = None) -> list[Rule]:
        return self.shape_rules(pp, vpp, group_size) + self.batch_rules(pp, m, vpp, group_size)

    def check_plan(self, pp: int, vpp: int, group_size: int | None = None) -> None:
        """``SpecError`` (field, value, rule) where ``pp``/``vpp``/the group size do not fit."""
        raise_first(self.shape_rules(pp, vpp, group_size))

    def check(self, pp: int, m: int, vpp: int = 1, group_size: int | None = None) -> None:
        """``check_plan`` plus the rules on the micro-batch count ``m``."""
        raise_first(self.rules(pp, m, vpp, group_size))

    def valid(self, pp: Any, m: Any, vpp: Any) -> Any:
        """``rules`` over arrays (default group size): a bool array."""
        return all_ok(self.rules(pp, m, vpp, None))

    # ------------------------------------------------------------------ memory
    def in_flight(self, stage: int, pp: int, m: int, vpp: int = 1,
                  group_size: int | None = None) -> int:
        """Peak stashed ``(microbatch, chunk)`` entries on ``stage`` (from the order)."""
        return peak_stash(self.steps(stage, pp, m, vpp, group_size))

    def pending_weight_grads(self, stage: int, pp: int, m: int, vpp: int = 1,
                             group_size: int | None = None) -> int:
        """Peak waiting weight gradients on ``stage`` (``peak_pending_w`` of the order; 0
        for a schedule that does not split the backward)."""
        return peak_pending_w(self.steps(stage, pp, m, vpp, group_size))

    def in_flight_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> np.ndarray:
        """``in_flight`` over arrays (default group size); default: ``in_flight`` once per
        distinct ``(stage, pp, m, vpp)``."""
        return per_distinct(order_figure(self, "in_flight"), stage, pp, m, vpp)

    def pending_weight_grads_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> np.ndarray:
        """``pending_weight_grads`` over arrays (default group size): zeros unless the
        backward is split, else once per distinct ``(stage, pp, m, vpp)``."""
        if not self.splits_backward:
            return np.zeros(np.broadcast(*(np.asarray(x) for x in (stage, pp, m, vpp))).shape)
        return per_distinct(order_figure(self, "pending_weight_grads"), stage, pp, m, vpp)

    def stash_frontier(self, stage: int, pp: int, m: int, vpp: int = 1,
                       group_size: int | None = None) -> tuple[tuple[int, int], ...]:
        """The ``(stashed, pending W)`` pairs ``stage``'s activations can peak at
        (``base.stash_frontier`` of the order, most stashed first; ``peak_pair`` picks the
        peak for given bytes): ``((in_flight, 0),)`` unless the backward is split."""
        if not self.splits_backward:
            return ((self.in_flight(stage, pp, m, vpp, group_size), 0),)
        return stash_frontier(self.steps(stage, pp, m, vpp, group_size))

    def chunk_stash_moments(self, stage: int, pp: int, m: int, vpp: int = 1,
                            group_size: int | None = None
                            ) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
        """``base.chunk_stash_moments`` of ``stage``'s order, per chunk id (``vpp`` ids; a
        mirrored schedule's two copies are chunks 0 and 1)."""
        return chunk_stash_moments(self.steps(stage, pp, m, vpp, group_size),
                                   self.order_chunks(pp, vpp))

    def stash_frontier_array(self, stage: Any, pp: Any, m: Any, vpp: Any
                             ) -> tuple[np.ndarray, np.ndarray]:
        """``stash_frontier`` over arrays (default group size): ``(stashed, pending)``, each
        of shape ``(K,) + broadcast shape``, a row's frontier padded with its first pair to
        the longest ``K``; once per distinct ``(stage, pp, m, vpp)``."""
        if not self.splits_backward:
            n = np.asarray(self.in_flight_array(stage, pp, m, vpp), dtype=float)
            return n[None], np.zeros_like(n)[None]
        keys, inv, shape = distinct_rows(stage, pp, m, vpp)
        if not keys:
            return np.zeros((1,) + shape), np.zeros((1,) + shape)
        fn = order_figure(self, "stash_frontier")
        fronts = [fn(*k) for k in keys]
        depth = max((len(f) for f in fronts), default=1)
        table = np.array([list(f) + [f[0]] * (depth - len(f)) for f in fronts],
                         dtype=float).reshape(len(fronts), depth, 2)
        rows = table[inv]                                   # (N, K, 2)
        n = np.moveaxis(rows[..., 0], 1, 0).reshape((depth,) + shape)
        w = np.moveaxis(rows[..., 1], 1, 0).reshape((depth,) + shape)
        return n, w

    # ------------------------------------------------------------------ time
    def fill_chunks(self, vpp: Any) -> Any:
        """Pieces a stage's per-micro-batch work is cut into on the pipeline fill and drain
        (the bubble shrinks by this factor): 1."""
        return np.ones_like(np.asarray(vpp, dtype=float))

    def bubble_fraction(self, pp: Any, m: Any, vpp: Any = 1, w_share: Any = 0.0) -> Any:
        """Closed-form idle over ideal time, balanced stages, free communication:
        ``(pp-1)/(fill_chunks·m)``. ``w_share``: the weight gradient's share of a stage's
        time per micro-batch, which only a schedule that splits the backward can use."""
        return (pp - 1) / (self.fill_chunks(vpp) * m)

    def pipeline_span(self, m: Any, t_max: Any, t_sum: Any, vpp: Any,
                      w_share: Any = 0.0, f_share: Any = 0.5, pp: Any = None) -> Any:
        """Seconds of the pipeline with free communication, from the slowest stage's and the
        sum of all stages' seconds per micro-batch: ``m·t_max + (t_sum - t_max)/fill``.
        ``w_share``/``f_share``: the weight gradient's and the forward's share of a stage's
        seconds per micro-batch, which only a schedule that splits the backward uses
        (``bubble_fraction``); ``pp``: the pipeline ranks (None: not needed)."""
        return m * t_max + (t_sum - t_max) / self.fill_chunks(vpp)

    def exchange_rounds(self, m: Any, pp: Any, vpp: Any) -> Any:
        """Point-to-point exchange rounds on the critical path: ``m·fill + pp - 1``."""
        return m * self.fill_chunks(vpp) + pp - 1

    def overlapped_p2p_time(self, m: Any, pp: Any, vpp: Any, t: Any, hiding: Any) -> Any:
        """Seconds of pipeline messages exposed under ``overlap_p2p_comm`` (``t`` one
        message, ``hiding`` the pass that runs before a steady call is waited for): a
        schedule without overlapped calls (``overlaps_p2p`` False) blocks on each,
        ``t·exposed_messages``."""
        return np.asarray(t, dtype=float) * self.exposed_messages(m, pp, vpp)

    def exposed_messages(self, m: Any, pp: Any, vpp: Any) -> Any:
        """Point-to-point messages on the critical path (each costs one message's time):
        two blocking exchanges per round, ``2·exchange_rounds``."""
        return 2 * self.exchange_rounds(m, pp, vpp)

    def bottleneck_messages(self, m: Any, pp: Any, vpp: Any, rank: Any) -> Any:
        """Point-to-point messages on the critical path when rank kind ``rank`` (0 the first,
        1 a middle, 2 the last rank) is the slowest: ``exposed_messages`` for every kind
        unless ``messages_by_rank``."""
        return self.exposed_messages(m, pp, vpp) + 0 * np.asarray(rank, dtype=float)

    def reduce_window_steps(self, pp: Any, vpp: Any) -> Any:
        """Backward steps at most left on a rank once its first chunk's gradients are
        complete (the window the gradient reduction can hide in): 1."""
        return np.ones_like(np.asarray(pp, dtype=float))

    def end_skew(self, f_share: Any, w_share: Any) -> Any:
        """Seconds by which each rank ends its compute after the rank before it, over a
        rank's seconds per micro-batch, where the order ends the ranks in a parallelogram
        (``terms.ranks.rank_slack``); NaN: the ranks end as 1F1B's trapezoid does, rank 0 last."""
        return np.full(np.shape(np.asarray(f_share, dtype=float)), np.nan)

    def trailing_w_steps(self, stage: Any, pp: Any, m: Any) -> Any:
        """Weight-gradient steps ``W`` a rank (one chunk) runs after its last ``B`` (the
        lower bound lets them overlap that micro-batch's way back): 0 unless the backward
        is split, else counted on the order (``trailing_w``), once per distinct
        ``(stage, pp, m)`` and memoised across calls (``order_figure``)."""
        s, p, mm = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (stage, pp, m)))
        if not self.splits_backward or not s.size:
            return np.zeros(s.shape)
        return per_distinct(order_figure(self, "trailing_w_count"), s, p, mm, 1)

    def trailing_w_count(self, stage: int, pp: int, m: int, vpp: int = 1) -> int:
        """``trailing_w`` of the schedule's own order at ``(stage, pp, m)`` (its default
        chunks; ``vpp`` is the memo's key and not read)."""
        return trailing_w(self.steps(stage, pp, m))

    def overlapped_share(self, stage: int, pp: int, m: int, vpp: int = 1) -> float:
        """Share of ``stage``'s forwards that run in an overlapped group (``Step.overlap``):
        0 unless ``overlaps_pairs``, else counted on the order."""
        if not self.overlaps_pairs or not bool(self.valid(pp, m, vpp)):
            return 0.0
        fwd = [s for s in self.steps(stage, pp, m, vpp) if s.kind == "F"]
        return sum(s.overlap for s in fwd) / max(len(fwd), 1)

    def overlapped_share_array(self, stage: Any, pp: Any, m: Any, vpp: Any) -> np.ndarray:
        """``overlapped_share`` over arrays, once per distinct ``(stage, pp, m, vpp)``."""
        if not self.overlaps_pairs:
            return np.zeros(np.broadcast(*(np.asarray(x) for x in (stage, pp, m, vpp))).shape)
        return per_distinct(order_figure(self, "overlapped_share"), stage, pp, m, vpp)

    def period(self, pp: int, group_size: int | None = None) -> int:
        """Micro-batches per steady-state period."""
        return pp

    # ------------------------------------------------------------------ search
    def search_vpps(self, num_layers: int, max_vpp: int | None = None,
                    fixed_vpp: int | None = None) -> list[int]:
        """Chunk counts the search enumerates for this schedule: ``[1]`` (``[]`` when
        ``in_default_search`` is False)."""
        return [1] if self.in_default_search else []

    def fixed_search_vpps(self, num_layers: int, max_vpp: int | None = None,
                          fixed_vpp: int | None = None) -> list[int]:
        """Chunk counts the search enumerates when ``--fix schedule=`` names this schedule
        (``search_vpps``; for one left out of the default search, ``[1]`` unless another
        chunk count is fixed)."""
        if self.in_default_search:
            return self.search_vpps(num_layers, max_vpp, fixed_vpp)
        return [1] if fixed_vpp in (None, 1) else []

    # ------------------------------------------------------------------ exports
    def megatron_args(self, job: Any) -> tuple[list[str], list[str]]:
        """Megatron-LM arguments selecting this schedule, and notes (none: 1F1B is its
        default)."""
        return [], []

    def deepspeed_refusal(self, job: Any) -> str | None:
        """Why DeepSpeed's pipeline engine (1F1B) cannot run this schedule, or None."""
        return None

    def __repr__(self) -> str:
        return f"<schedule {self.name!r} ({type(self).__module__}.{type(self).__name__})>"
