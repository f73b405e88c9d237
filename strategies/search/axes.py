"""The axes of the raw plan space: every ``(tp, pp, cp, dp)`` with the GPU count as product
(``factorizations``) and each row's expert tensor parallelism (``with_etp``), the values of
the other dimensions (``search_axes``: micro-batch sizes, ``(schedule, vpp)`` pairs, ``ep``,
recomputation, SP, ZeRO and the switches ``--fix`` gives) and the ``(schedule, vpp)`` pairs
the uneven layouts are proposed for (``layout_axis``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from strategies.cost.recompute import modules_mask
from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.job import check_modules_against_model
from strategies.model import ModelSpec
from strategies.plan.choices import CP_COMMS, CP_IMPL_OF
from strategies.plan_arrays import RECOMPUTE_CODE, value_code
from strategies.schedules import schedules
from strategies.schedules.base import Schedule
from strategies.cost.layer_offload import check_model_layers
from strategies.cost.offload import check_offload_model
from strategies.search.fix_parse import MOE_KEYS
from strategies.search.layouts import slot_vpps
from strategies.search.options import SCHEDULE_SETS, SpaceOptions
from strategies.search.plan_rows import SWITCH_DEFAULTS, SWITCH_KEYS
from strategies.search.prune_rules import tp_divides_heads
from strategies.stacks.cp_windows import own_exchange_refusal, runnable_comms
from strategies.stacks.profile import FrameworkProfile
from topologies.cluster import Cluster


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def factorizations(n: int) -> np.ndarray:
    """Every ``(tp, pp, cp, dp)`` with product ``n``, as rows."""
    rows = [(t, p, c, n // (t * p * c)) for t in _divisors(n) for p in _divisors(n // t)
            for c in _divisors(n // (t * p))]
    return np.array(rows, dtype=np.int64)


def with_etp(fac: np.ndarray, model: ModelSpec, fixed: Mapping[str, Any]) -> np.ndarray:
    """``fac``'s rows with a fifth column, ``etp``: ``tp`` on a dense model (one row each, the
    order kept); on a mixture of experts each row once per ``etp`` among the divisors of
    ``tp`` that divide the expert width (Megatron-Core's ``expert_tensor_parallel_size``:
    ``etp = 1`` keeps every expert whole on its rank, DeepSeek-V3's and Megatron-Bridge's
    MoE recipes), ``etp = tp`` first, then the rest in descending order; ``--fix etp=`` keeps
    that value only (the rule ``ep`` refuses it where the width does not allow it). A ``tp``
    the ``tp_heads`` rule refuses keeps one row (``etp = tp``): the space does not grow by
    plans pruned anyway."""
    if not model.is_moe:
        return np.column_stack([fac, fac[:, 0]])
    rows = []
    for r in fac.tolist():
        tp = r[0]
        if "etp" in fixed:
            etps = [fixed["etp"]]
        elif not tp_divides_heads(model, tp):
            etps = [tp]
        else:
            etps = [tp] + [d for d in reversed(_divisors(tp))
                           if d != tp and model.expert_ffn % d == 0]
        rows += [r + [e] for e in etps]
    return np.array(rows, dtype=np.int64).reshape(-1, 5)


def solved_per_job(sched) -> bool:
    """The schedule's order is solved for each job's times (``Schedule.for_job`` overridden:
    ZB-1p/ZB-2p's heuristic), so scoring it over a space means a heuristic search per
    ``(stage, pp, m)``: ``--schedules all`` leaves it out (minutes on a 1,024-GPU space);
    ``--fix schedule=`` still searches it."""
    return type(sched).for_job is not Schedule.for_job


def search_axes(model: ModelSpec, cluster: Cluster, opts: SpaceOptions,
                framework: FrameworkProfile | None = None) -> dict[str, list]:
    fx = opts.fixed
    mbs = [1 << i for i in range(0, 31) if (1 << i) <= opts.max_mbs]
    if "mbs" in fx and fx["mbs"] not in mbs:
        mbs.append(fx["mbs"])
    # a schedule named by --fix schedule= gives the chunk counts it is searched with when
    # fixed (Schedule.fixed_search_vpps: plannable schedules the default search leaves out)
    # (``--schedules all``: every schedule so, the zero-bubble family and DualPipe(V) too;
    # a named stack's list still limits them, the ``framework`` rule)
    if opts.schedules not in SCHEDULE_SETS:
        raise SpecError("--schedules", opts.schedules,
                        f"must be one of {', '.join(SCHEDULE_SETS)}")
    every = opts.schedules == "all"
    sched = [(code, v) for code, sc in enumerate(schedules())
             for v in (sc.fixed_search_vpps if fx.get("schedule") == sc.name
                       or (every and not solved_per_job(sc))
                       else sc.search_vpps)(model.num_layers, opts.max_vpp, fx.get("vpp"))]
    if not model.is_moe:          # job.check_expert_plan's rule, before any plan is built
        for k in MOE_KEYS:
            if k != "etp" and k in fx and fx[k] != SWITCH_DEFAULTS[k]:
                v = "+".join(fx[k]) if isinstance(fx[k], tuple) else fx[k]
                raise SpecError("--fix", f"{k}={v}", f"{k} applies to mixture-of-experts "
                                f"layers; {model.name} is dense")
    if fx.get("cpu_offloading_num_layers"):   # make_job's rule, before any plan is built
        try:
            check_model_layers(fx["cpu_offloading_num_layers"], model.num_layers,
                               not model.is_moe and not model.is_hybrid, model.name)
        except SpecError as e:
            raise SpecError("--fix", f"cpu_offloading_num_layers={e.value}", e.rule) from None
    if fx.get("offload_modules"):   # make_job's rule, before any plan is built
        try:
            check_offload_model(fx["offload_modules"], model)
        except SpecError as e:
            raise SpecError("--fix", f"offload_modules={e.value}", e.rule) from None
    if "recompute_modules" in fx:  # job.check_modules_against_model's rule, before any plan
        try:
            check_modules_against_model(model, fx["recompute_modules"])
        except SpecError as e:
            raise SpecError("--fix", f"recompute_modules={e.value}", e.rule) from None
    eps = _divisors(model.num_experts) if model.is_moe else [1]
    if "ep" in fx and fx["ep"] not in eps:
        eps.append(fx["ep"])
    # op-level recompute (torchtitan's) only where the named stack runs it or --fix names it
    rc = [0, 1, 2] + ([RECOMPUTE_CODE["op"]] if fx.get("recompute") == "op" or (
        framework is not None and "op" in framework.recompute) else [])
    ax = {"mbs": mbs, "sched": sched, "ep": eps, "rc": rc, "sp": [False, True],
          "zero": [0, 1, 2, 3], "switches": _switch_columns(fx),
          "cpx": cp_exchanges(fx, framework, model)}
    if "recompute_modules" in fx:
        ax["rcm"] = modules_mask(fx["recompute_modules"])
    if "recompute_layers" in fx:     # carried by the full rows (``product._grid``)
        ax["rcl"] = fx["recompute_layers"]
        ax["rcu"] = value_code("recompute_method", fx["recompute_method"])
    if "flushes" in fx:
        ax["fl"] = fx["flushes"]
    if "microbatch_group_size" in fx:
        ax["mgs"] = fx["microbatch_group_size"]
    if "dp_shard" in fx:
        ax["dps"] = fx["dp_shard"]
    return ax


def cp_exchanges(fixed: Mapping[str, Any], framework: FrameworkProfile | None,
                 model: ModelSpec | None = None) -> list[int]:
    """The K/V exchanges (``PlanArrays.cp_comm`` codes) the space adds beside the stack's own
    (code 0) to each row with ``cp > 1`` (``product._with_exchanges``): those the named stack
    lets a plan choose (``FrameworkProfile.cp_comms``, Megatron-Core's ``--cp-comm-type``)
    but its own (``cp_impl``: ``p2p`` is Megatron-Core's ring, code 0 already), in
    ``CP_COMMS`` order; none where ``--fix cp_comm=`` gives one (every row carries it). With
    no stack named, the default's own exchange only (Megatron-Core's costs without its
    limits, the space of earlier releases), unless it cannot run ``model``'s attention
    (``stacks.cp_windows``: a sliding window, attention sinks): then the exchanges of
    Megatron-Core's ``--cp-comm-type`` that can (gpt-oss: ``a2a``; a sliding window:
    ``all_gather``, ``a2a``), as a Megatron-Core user switches ``--cp-comm-type`` from its
    default ``p2p`` only where Transformer Engine refuses it. A Transformer Engine older than
    an exchange needs is the ``framework`` rule's to prune (``stacks.rules``)."""
    if "cp_comm" in fixed:
        return []
    if framework is None:
        stack = get_profile(None)
        if model is None or own_exchange_refusal(model, stack) is None:
            return []
        return [1 + CP_COMMS.index(c) for c in runnable_comms(model, stack)
                if c in stack.cp_comms and CP_IMPL_OF[c] != stack.cp_impl]
    return [1 + CP_COMMS.index(c) for c in CP_COMMS
            if c in framework.cp_comms and CP_IMPL_OF[c] != framework.cp_impl]


def layout_axis(model: ModelSpec, cluster: Cluster, ax: dict, opts: SpaceOptions
                ) -> list[tuple[int, int]]:
    """``(schedule code, vpp)`` pairs the uneven layouts are proposed for (``layouts``): the
    ring schedules of the space's axis (not mirrored, the LM head on the last rank: those a
    Megatron layout describes), with the chunked ones also at the chunk counts only a slot
    layout fills; none on a mixed cluster (its stages are sized by ``uneven``)."""
    if not cluster.uniform:
        return []
    out = []
    for code, v in ax["sched"]:
        sc = schedules()[code]
        if sc.mirrored or int(sc.head_rank_array(4, v)) != 3 \
                or sc.num_virtual_stages(4, v) != 4 * v:
            continue
        out.append((code, v))
    extra = slot_vpps(model.num_layers, opts.max_vpp)
    for code, sc in enumerate(schedules()):
        if any(c == code and v >= 2 for c, v in out):
            out += [(code, v) for v in extra if "vpp" not in opts.fixed
                    or opts.fixed["vpp"] == v]
    return out


def _switch_columns(fixed: Mapping[str, Any]) -> dict[str, Any]:
    """The ``SWITCH_KEYS`` of ``fixed`` as short columns' values (``product._switches``)."""
    out: dict[str, Any] = {}
    for k, v in fixed.items():
        if k in SWITCH_KEYS:
            out[SWITCH_KEYS[k]] = value_code(k, v)    # coded as PlanArrays codes it
    return out
