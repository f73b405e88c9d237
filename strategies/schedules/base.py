"""The ``Schedule`` interface of the pipeline schedules: one class whose defaults derive every
fact of a schedule from its order. Its methods come one concern a mixin: ``placement``
(``Placement``), ``order_figures`` (``OrderFigures``: what the order stashes and counts),
``closed_forms`` (``ClosedForms``: time) and ``validity`` (``RuleChecks``: the ``Rule``
lists); this module keeps the order, the exchanges, the search space and the exports. Around
it: ``step`` (the ``Step`` record an order is made of), ``stash`` (what an order stashes),
``per_distinct`` (scalar figures over the search's arrays) and ``registry`` (registration and
look-ups by name and by code).

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

from strategies.schedules.closed_forms import ClosedForms
from strategies.schedules.order_figures import OrderFigures
from strategies.schedules.placement import Placement
from strategies.schedules.step import Step
from strategies.schedules.validity import RuleChecks


class Schedule(Placement, OrderFigures, ClosedForms, RuleChecks):
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

    # ------------------------------------------------------------------ exchanges
    def actions(self, stage: int, pp: int, m: int, vpp: int = 1,
                group_size: int | None = None) -> list:
        """The steps with the blocking exchanges between them (default: each step receives
        its input just before it and sends its output just after it). A registered schedule's
        actions must depend on these arguments only: the simulator's compiler keeps them per
        argument tuple for the process (``compiler._actions``); a schedule whose order needs
        the job's times is bound by ``for_job`` and not kept."""
        from strategies.schedules.exchanges import Boundary, around_each_step
        steps = self.steps(stage, pp, m, vpp, group_size)
        if pp == 1:
            return list(steps)
        return around_each_step(steps, Boundary(self, stage, pp, vpp))

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
