"""``Plan``: how a job is split (tp, pp, dp, cp, ep, etp, sp, zero, schedule, recompute, mbs,
gbs), how its context parallelism exchanges K/V (``cp_comm``) and how its mixture-of-experts
layers route (``moe_imbalance``, ``moe_capacity_factor``, ``moe_pad_to_capacity``).

Parsed from ``key=value`` strings or YAML; every value checked where it is read, and the
cross-checks against a model and a cluster live in ``strategies.job``.

Modules (imports point one way: ``choices`` <- ``checks``, ``recompute_fields`` <- ``spec``
<- ``parse``):

* ``choices``: the values plan fields take (``RECOMPUTE``, ``DISPATCHERS``, ``ROUTINGS``,
  ``CP_COMMS``, ``CP_IMPL_OF``, ``DEFAULT_MOE_IMBALANCE``, ``BALANCED_ROUTINGS``,
  ``MAX_MOE_FACTOR``);
* ``spec``: the frozen ``Plan``, its checks in order, its derived properties and short label;
* ``checks``: the rules of its fields (MoE factors, drop-and-pad, hybrid sharding with
  ``expert_shard_whole``, uneven stages, layout switches, per-group micro-batches) and
  ``int_limit``;
* ``recompute_fields``: ``parse_modules``, the partial-recomputation rule;
* ``parse``: ``parse_plan``, ``plan_mapping``, ``plan_from_mapping``, ``coerce``,
  ``parse_layers``, ``ALIAS`` (Megatron's long names), ``tp_overlap_default``.

The names most callers import are here: ``Plan``, ``parse_plan``, ``plan_from_mapping``,
``plan_mapping``, ``DISPATCHERS``; the rest from their module.
"""
from strategies.plan.choices import DISPATCHERS
from strategies.plan.parse import parse_plan, plan_from_mapping, plan_mapping
from strategies.plan.spec import Plan

__all__ = ["DISPATCHERS", "Plan", "parse_plan", "plan_from_mapping", "plan_mapping"]
