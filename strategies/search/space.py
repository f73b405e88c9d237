"""The plan space of one job, its constraints, and what each constraint prunes. Pure numpy.

The raw space is the product of: every ``(tp, pp, cp, dp)`` whose product is the GPU count
(on a mixture of experts, ``etp`` over the divisors of ``tp`` that divide the expert width,
and ``ep`` over the divisors of the expert count, the ``etp·ep`` expert ranks cut from the
``tp·cp·dp`` ranks of a pipeline stage, as Megatron-Core does: ``strategies.job.
expert_plan_ok``), micro-batch sizes ``1, 2, 4, … max_mbs``, schedules ``gpipe``, ``1f1b`` and
``interleaved`` with every ``vpp >= 2`` that divides the layer count, recomputation
``none/selective/full`` (``--fix recompute_modules=`` keeps selective with those modules),
SP off/on and ZeRO 0–3; one pipeline flush per step and the schedule's default micro-batch
group, unless ``--fix`` gives them or a row needs them (``fitting.least_group``: an interleaved row
whose micro-batches are not a multiple of ``pp``; ``fitting.fewest_flushes``: under a stack that
flushes, a row that does not fit with one flush). Each plan is pruned by the *first* rule it
breaks, in the order of ``rules.RULES``, so the counts add up to the raw size minus the survivors.

>>> from strategies.presets import model_preset
>>> from topologies.cluster import cluster_preset
>>> sp = enumerate_space(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1), 64,
...                      SpaceOptions(max_mbs=2))
>>> sp.raw == sp.size + sum(sp.pruned.values())
True
>>> sp.plan(0).dp is not None and sp.key(0).startswith("tp=")
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from strategies.cost.system import SystemConfig
from strategies.errors import SpecError
from strategies.framework import DEFAULT as DEFAULT_FRAMEWORK
from strategies.model import ModelSpec
from strategies.model.dsv4 import refuse_cost
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.search.fitting import fewest_flushes, least_group, least_recompute
from strategies.search.layouts import layer_costs
from strategies.search.options import SpaceOptions
from strategies.search.plan_rows import plan_key, plan_of
from strategies.search.product import raw_product
from strategies.search.prune_rules import (framework_ok, pipeline_bubble, row_rules, schedule_ok,
                                          stack_schedules)
from strategies.search.space_memory import SpaceMemory, space_memory
from strategies.search.zero2_dominance import zero1_twins, zero2_slower
from strategies.stacks.profile import FrameworkProfile
from topologies.cluster import Cluster

__all__ = ["Space", "SpaceOptions", "enumerate_space"]


@dataclass
class Space:
    """The survivors (``cols``: arrays, one entry per plan) and the pruning counts."""

    model: ModelSpec
    cluster: Cluster
    gbs: int
    cols: dict[str, np.ndarray]
    pruned: dict[str, int]
    raw: int
    peak_memory: np.ndarray
    memory_limit: float
    #: the named stack's switch defaults (``FrameworkProfile.plan_defaults``), which keys
    #: leave out (``plan_key``)
    switch_defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(len(self.cols["tp"]))

    @property
    def arrays(self) -> PlanArrays:
        """The survivors as ``PlanArrays`` (what the estimate and the bound read)."""
        return PlanArrays.from_columns(self.cols)

    def plan(self, i: int) -> Plan:
        return plan_of(self.cols, i)

    def key(self, i: int) -> str:
        return plan_key(self.plan(i), self.switch_defaults)

    def subset(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        return {k: v[idx] for k, v in self.cols.items()}


def enumerate_space(model: ModelSpec, cluster: Cluster, gbs: int,
                    opts: SpaceOptions | None = None,
                    framework: FrameworkProfile | None = None, dtype: str = "bf16",
                    system: SystemConfig | None = None) -> Space:
    """Every plan the constraints allow, with the count each rule pruned (see module doc).
    ``framework``: a named software stack; only what it can run, with its default switches.
    ``dtype`` and ``system`` set the memory model (gradient bytes, policy constants)."""
    opts = opts or SpaceOptions()
    refuse_cost(model, fp8_attention=bool(framework and framework.fp8_attention))
    if isinstance(gbs, bool) or not isinstance(gbs, int) or gbs < 1:
        raise SpecError("gbs", gbs, "must be an integer >= 1")
    if opts.max_mbs < 1:
        raise SpecError("--max-mbs", opts.max_mbs, "must be >= 1")
    costs = (layer_costs(model, cluster, dtype, framework, system)
             if cluster.uniform and opts.layouts else None)
    stack = framework or DEFAULT_FRAMEWORK
    # the stack's memory terms, its system's as the stack sets them (memory.stack_terms)
    mem = space_memory(model, cluster.gpu, dtype, stack, system)
    c = raw_product(cluster.num_gpus, model, cluster, gbs, opts, framework, costs)
    raw = len(c["tp"])
    pruned: dict[str, int] = {}
    c = _prune_by_rules(c, pruned, model, cluster, opts, framework)
    limit = opts.memory_limit(cluster)
    peak = mem.peak(c) if len(c["tp"]) else np.zeros(0)
    if (framework is not None and framework.pipeline_flushes and "flushes" not in opts.fixed
            and len(c["tp"])):
        peak = fewest_flushes(c, peak, limit, mem.peak, model.num_layers, framework,
                              opts.max_bubble, "microbatch_group_size" not in opts.fixed)
    ok = peak <= limit
    c = _keep(c, pruned, "memory", ok)
    peak = peak[ok]
    peak, ok = _lighten(c, peak, mem, limit, cluster, framework, stack, system)
    c = _keep(c, pruned, "zero2_dominated", ok)
    peak = peak[ok]
    return Space(model, cluster, gbs, c, pruned, raw, peak, limit,
                 framework.plan_defaults() if framework is not None else {})


def _keep(c: dict[str, np.ndarray], pruned: dict[str, int], reason: str, ok: np.ndarray
          ) -> dict[str, np.ndarray]:
    """The rows of ``c`` where ``ok``, counting the others in ``pruned[reason]``."""
    pruned[reason] = int((~ok).sum())
    if pruned[reason] or np.ndim(ok) != 1:    # a rule that keeps every row copies nothing
        c = {k: v[ok] for k, v in c.items()}
    return c


def _prune_by_rules(c: dict[str, np.ndarray], pruned: dict[str, int], model: ModelSpec,
                    cluster: Cluster, opts: SpaceOptions,
                    framework: FrameworkProfile | None) -> dict[str, np.ndarray]:
    """The rows of the raw product ``c`` that pass every rule before the memory rule, in
    ``prune_rules.RULES`` order, each row with its least micro-batch group (``fitting.least_group``)
    before the schedule rule; counts in ``pruned``."""
    for reason, rule in row_rules(model, cluster, opts, framework):
        c = _keep(c, pruned, reason, rule(c))
        if reason == "zero3_pp":
            c = _keep(c, pruned, "framework", framework_ok(c, framework))
            c["sched"] = stack_schedules(c, framework)    # the schedule the stack runs
    if "microbatch_group_size" not in opts.fixed:
        c["mgs"] = least_group(c)
    c = _keep(c, pruned, "schedule", schedule_ok(c, model.num_layers))
    return _keep(c, pruned, "bubble", pipeline_bubble(c) <= opts.max_bubble + 1e-12)


def _lighten(c: dict[str, np.ndarray], peak: np.ndarray, mem: SpaceMemory, limit: float,
             cluster: Cluster, framework: FrameworkProfile | None, stack: FrameworkProfile,
             system: SystemConfig | None) -> tuple[np.ndarray, np.ndarray]:
    """Each fitting row's fewest recomputed layers (``fitting.least_recompute``, where the
    stack runs Megatron's block method) and the ``zero2_dominated`` rule: ``(peaks, ok)``,
    ``ok`` False on each ZeRO-2 row whose ZeRO-1 twin fits, with its own fewest recomputed
    layers, and the estimate ranks at least as fast (``zero2_dominance``). ``c`` gains the
    recompute columns and changes in place; ``system`` as given to ``enumerate_space``."""
    z2, twin, fits, twin_peak = zero1_twins(c, mem.peak, limit, 1 in stack.zero_stages)
    for k in ("rcl", "rcu", "rcm"):        # every layer / block / default (or fixed) modules
        c.setdefault(k, np.zeros(len(c["tp"]), dtype=np.int64))
        twin.setdefault(k, np.zeros(len(z2), dtype=np.int64))
    least = framework is None or "block" in framework.recompute_methods

    def lighten(cols: dict[str, np.ndarray], pk: np.ndarray) -> np.ndarray:
        return least_recompute(mem, cols, pk, limit) if least else pk
    peak = lighten(c, peak)
    ok = np.ones(len(c["tp"]), bool)
    if fits.any():
        # the twins that fit, each with its own fewest recomputed layers (as its row in the
        # space gets them), against the ZeRO-2 rows as they now stand: pruned only where the
        # estimate ranks the twin at least as fast (``zero2_slower``)
        rows = z2[fits]
        tw = {k: v[fits] for k, v in twin.items()}
        lighten(tw, twin_peak[fits])
        ok[rows] = ~zero2_slower(mem.model, cluster, mem.dtype, framework, system,
                                 {k: v[rows] for k, v in c.items()}, tw)
    return peak, ok
