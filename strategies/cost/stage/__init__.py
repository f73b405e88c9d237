"""The stage-cost record: every duration, byte count and parameter count of a pipeline stage,
computed once from the cost model and read by the analytic estimate
(``strategies.estimate.analytic``), the lower bound (``strategies.estimate.lower_bound``) and
the compiler (``simulator.program``).

``stage_cost_arrays(model, cluster, dtype, plans, framework, system)`` computes the record
for many plans at once (``StageCostArrays``, one entry per plan); ``stage_costs(job)`` is the
same record for one job (``StageCosts``: element 0 of a one-plan ``StageCostArrays``), so
the estimate's per-stage costs and the simulator's compiled costs are one computation, not
two that are kept equal. ``StageCosts`` is frozen; tests may ``dataclasses.replace`` fields
(e.g. zero the embedding and the LM head to get perfectly balanced stages).

Each backward (``layer_bwd``, ``head_bwd``, ``embedding_bwd``) is the whole pass, ``B + W``,
as schedules that do not split it run it; ``*_wgrad`` is its weight-gradient part ``W``
(``strategies.cost.layer_time.layer_time``), so a schedule that splits the backward runs ``B``
in ``*_bwd - *_wgrad`` and ``W`` in ``*_wgrad`` (docs/schedules.md, "Split backward").

Units: seconds per layer (or per stage) and per micro-batch on one GPU; bytes; parameters.

Modules (imports point one way: ``inputs`` <- ``layers``, ``rank_params``, ``tp_fields`` <-
``cost_arrays`` <- ``job_costs``; ``record`` <- ``chunks`` <- ``stage_params`` <-
``job_costs``; ``array_record`` and ``record`` import nothing of the package):

* ``array_record``: ``StageCostArrays``, ``KindCostArrays``, ``Z3_KEYS`` (many plans);
* ``record``: ``StageCosts``, ``KindCosts`` (one job; ``chunk_recompute``, ``w_share``);
* ``inputs``: ``StageInputs``, ``stage_inputs`` (what every term of the arrays reads);
* ``layers``: ``tp_collectives_per_layer``, ``layer_times``, ``blocking_small``,
  ``kind_arrays``, ``mtp_arrays``, ``mixes_kinds``, ``kinds_by_name``;
* ``rank_params``: each kind of rank's parameters, optimizer, passes (``rank_param_fields``)
  and ``gather_width``;
* ``tp_fields``: the fields the TP collectives' rules read (``tp_rule_fields``);
* ``cost_arrays``: ``stage_cost_arrays`` (with ``comm_fields``, ``zero3_fields``,
  ``record_of``);
* ``clock_duty``: ``duty_clock``, the one-micro-batch reduction's clock as a duty cycle
  (``SystemConfig.overlap_clock_duty``);
* ``chunks``: ``chunk_layers``, ``chunk_sum`` (the layers a chunk holds, by kind);
* ``stage_params``: one job's ``stage_params_split``, ``stage_params``, ``copy_layers``,
  ``stage_rank_fields``;
* ``job_costs``: ``stage_costs``, ``stage_costs_at``.

The names most callers use are re-exported here, and so are the TP collectives' rules of
``strategies.cost.tp_collectives`` that the estimate, the bound, the compiler and their
tests import from here.

>>> from strategies.job_text import job_from_text
>>> job = job_from_text("gpt-1.7b", "dgx-a100:1", "tp=2,pp=2,dp=2,gbs=8")
>>> c = stage_costs(job)
>>> c.layer_bwd > c.layer_fwd > 0, len(c.params_by_stage), c.tp_overlap_chunks
(True, 2, 4)
"""
from strategies.cost.stage.array_record import StageCostArrays
from strategies.cost.stage.chunks import chunk_layers, chunk_sum
from strategies.cost.stage.cost_arrays import stage_cost_arrays
from strategies.cost.stage.job_costs import stage_costs
from strategies.cost.stage.record import StageCosts
from strategies.cost.tp_collectives import (
    sp_regather_pieces,
    sp_regather_exposed,
    dgrad_reduce_pieces,
    dgrad_reduce_time,
    dgrad_reduce_hidden,
    down_reduce_pieces,
    down_reduce_hidden,
    tp_kind_bytes,
    attn_tp_swap,
    attn_tp_saved,
    attn_rc_gathers,
    attn_rope_time,
    attn_rope_bytes,
    attn_down_ops,
    attn_down_time,
    attn_full_rc_ops,
    attn_full_rc_time,
    sp_grad_allreduce_bytes)

__all__ = [
    "StageCostArrays", "StageCosts", "chunk_layers", "chunk_sum", "stage_cost_arrays",
    "stage_costs",
    "attn_down_ops", "attn_down_time", "attn_full_rc_ops", "attn_full_rc_time",
    "attn_rc_gathers", "attn_rope_bytes", "attn_rope_time", "attn_tp_saved", "attn_tp_swap",
    "dgrad_reduce_hidden", "dgrad_reduce_pieces", "dgrad_reduce_time", "down_reduce_hidden",
    "down_reduce_pieces", "sp_grad_allreduce_bytes", "sp_regather_exposed",
    "sp_regather_pieces", "tp_kind_bytes"]
