"""The plan space of one job, its constraints, and what each constraint prunes. Pure numpy.

The raw space is the product of: every ``(tp, pp, cp, dp)`` whose product is the GPU count
(on a mixture of experts, ``etp`` over the divisors of ``tp`` that divide the expert width,
and ``ep`` over the divisors of the expert count, the ``etp·ep`` expert ranks cut from the
``tp·cp·dp`` ranks of a pipeline stage, as Megatron-Core does: ``strategies.job.
expert_plan_ok``), micro-batch sizes ``1, 2, 4, … max_mbs``, schedules ``gpipe``, ``1f1b`` and
``interleaved`` with every ``vpp >= 2`` that divides the layer count, recomputation
``none/selective/full`` (``--fix recompute_modules=`` keeps selective with those modules),
SP off/on and ZeRO 0–3; one pipeline flush per step and the schedule's default micro-batch
group, unless ``--fix`` gives them or a row needs them (``_least_group``: an interleaved row
whose micro-batches are not a multiple of ``pp``; ``_fewest_flushes``: under a stack that
flushes, a row that does not fit with one flush). Each plan is pruned by the *first* rule it
breaks, in the order of ``RULES``, so the counts add up to the raw size minus the survivors.

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
from typing import Any, Iterable, Mapping

import numpy as np

from strategies.errors import SpecError
from topologies.limits import check_int, parse_int_text
from strategies.flushes import flush_rules
from strategies.plan_arrays import PlanArrays
from strategies.framework import DEFAULT as DEFAULT_FRAMEWORK
from strategies.stacks.passes import LossPasses
from strategies.stacks.profile import FrameworkProfile, stack_system
from strategies.stacks.rules import ep_overlap_rules, stack_mask, stack_tp_overlap
from strategies.stacks.variants import runs_eager_clamp
from strategies.job import check_modules_against_model, expert_plan_ok
from strategies.plan_arrays import RECOMPUTE_CODE, rank_layers
from strategies.search.layouts import (LayerCosts, candidate_columns, candidate_layout,
                                       layer_costs, slot_vpps)
from strategies.cost.recompute import METHODS, MODULES, has_module, modules_mask
from strategies.cost.system import SystemConfig
from strategies.cost.moe_bytes import dispatch_element_bytes
from strategies.memory.activations import (activation_cache_bytes, expert_input_bytes,
                                           job_te_linear_inputs, runs_te_experts)
from strategies.memory.arrays import peak_memory_arrays
from strategies.model import ModelSpec
from strategies.plan import (DISPATCHERS, ROUTINGS, Plan, coerce, expert_shard_whole,
                             int_limit, parse_modules, tp_overlap_default)
from strategies.schedules import (DEFAULT_SCHEDULE, attr_by_code, dispatch, get_schedule,
                                  schedule_code, schedule_names, schedule_of_code, schedules)
from strategies.schedules.base import Schedule
from strategies.schedules.registry import chunked_names, grouped_names
from strategies.schedules.validity import all_ok
from topologies.cluster import Cluster
from topologies.cluster.nvlink_domain import fits_nvlink_domain
from topologies.gpus import GPU

RC_NAME = {v: k for k, v in RECOMPUTE_CODE.items()}
#: (reason key, what it means), in the order the rules are applied.
RULES: tuple[tuple[str, str], ...] = (
    ("fixed", "differs from a dimension fixed with --fix"),
    ("tp_heads", "tp does not divide the attention heads or the KV heads"),
    ("pp_layers", "pp does not divide the layers"),
    ("cp_seq", "2*cp does not divide the sequence length"),
    ("ep", "ep needs an MoE model and must divide the experts; etp must divide the expert "
           "width and etp*ep the tp*cp*dp ranks of a stage; ep_overlap's own rules"),
    ("tp_cross_node", "tp spans NVLink domains (allow with --allow-cross-node-tp)"),
    ("sp_seq", "sequence parallelism needs tp*cp to divide the sequence length"),
    ("zero3_pp", "ZeRO-3 is not combined with pipeline parallelism"),
    ("framework", "the named software stack (--framework) cannot run it"),
    ("redundant", "same as a simpler plan (SP with tp=1, ZeRO with no data parallelism, "
                  "a schedule with pp=1, selective recompute with FlashAttention, which "
                  "already recomputes the attention scores)"),
    ("batch", "global batch is not a multiple of mbs*dp"),
    ("schedule", "pp*vpp does not divide the layers, or the schedule's own rules refuse the "
                 "plan (interleaving: pp>=2 and a multiple of pp micro-batches)"),
    ("bubble", "the schedule's closed-form pipeline bubble (pp-1)/(vpp*m) above the maximum"),
    ("memory", "peak memory above the limit"),
    ("zero2_dominated", "ZeRO-2 where the same plan with ZeRO-1 fits and the estimate ranks it "
                        "at least as fast (ZeRO-2 reduce-scatters every micro-batch's "
                        "gradients, ZeRO-1 once per step; ZeRO-2 wins where those hide under "
                        "the step's backwards, its passes stream a gradient shard, or its "
                        "memory spares recomputation)"),
)
#: the values of ``SpaceOptions.schedules`` (``--schedules``)
SCHEDULE_SETS = ("default", "all")
#: the single-value plan fields ``--fix`` carries into every candidate, with their short
#: column (``plan_arrays.EXPERT_OPTIONAL``, ``SHORT``): the estimate, the bound and the
#: simulator read each from the plan
SWITCH_KEYS = {"moe_dispatcher": "disp", "ep_overlap": "epo", "delay_wgrad": "dw",
               "tp_comm_overlap": "tpo",
               "cuda_graph": "cg", "moe_routing": "route", "moe_imbalance": "imb",
               "moe_capacity_factor": "cf", "moe_pad_to_capacity": "pad", "flash_attn": "flash",
               "overlap_grad_reduce": "ogr", "overlap_param_gather": "opg"}
#: the mixture-of-experts fields: a dense model refuses them (``job.check_expert_plan``)
MOE_KEYS = ("etp", "moe_dispatcher", "ep_overlap", "delay_wgrad", "moe_routing",
            "moe_imbalance", "moe_capacity_factor", "moe_pad_to_capacity")
FIX_KEYS = ("tp", "pp", "dp", "cp", "ep", "etp", "mbs", "schedule", "vpp", "recompute",
            "recompute_modules", "sp", "zero", "flushes", "microbatch_group_size", "dp_shard",
            *SWITCH_KEYS)
COLUMNS = ("tp", "pp", "dp", "cp", "ep", "etp", "mbs", "gbs", "vpp", "sched", "rc", "sp",
           "zero", "flash", "ogr", "opg", "tpo", "rcl", "rcu", "rcm", "lf", "ll", "acc",
           "disp", "epo", "dw", "cg", "route", "imb", "cf", "pad", "fl", "mgs", "dps")


@dataclass(frozen=True)
class SpaceOptions:
    """Knobs of the space. ``memory_limit_bytes`` overrides ``capacity·(1 - headroom)``;
    ``max_bubble`` bounds ``(pp-1)/(vpp·m)`` (idle over useful pipeline time)."""

    max_mbs: int = 8
    allow_cross_node_tp: bool = False
    memory_limit_bytes: float | None = None
    headroom: float = 0.05
    max_bubble: float = 0.5
    max_vpp: int | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    #: ``"default"``: each schedule's ``search_vpps`` (gpipe, 1f1b, interleaved); ``"all"``:
    #: every registered schedule with the chunk counts it is planned with
    #: (``fixed_search_vpps``: ZB-H1/H2/V and DualPipe(V) too), but those whose order is
    #: solved per job (``solved_per_job``: ZB-1p/ZB-2p)
    schedules: str = "default"
    #: propose one uneven pipeline layout per (pp, vpp) (``strategies.search.layouts``)
    layouts: bool = True
    #: also search hybrid sharding (``search --hybrid``): each row's twins with ``dp_shard``
    #: a node's worth of ranks and its power-of-two multiples below ``dp`` (``_with_hybrid``)
    hybrid: bool = False

    def memory_limit(self, cluster: Cluster) -> float:
        if self.memory_limit_bytes is not None:
            return float(self.memory_limit_bytes)
        return cluster.min_hbm_bytes * (1.0 - self.headroom)


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


def plan_of(cols: Mapping[str, np.ndarray], i: int) -> Plan:
    """The resolved ``Plan`` of row ``i``."""
    c = {k: cols[k][i].item() for k in COLUMNS if k in cols}
    lf, ll, acc = int(c.get("lf", 0)), int(c.get("ll", 0)), bool(c.get("acc", False))
    etp = int(c.get("etp", c["tp"]))
    cf = float(c.get("cf", np.inf))
    return Plan(tp=c["tp"], pp=c["pp"], dp=c["dp"], cp=c["cp"], ep=c["ep"],
                etp=None if etp == c["tp"] else etp,
                moe_dispatcher=DISPATCHERS[int(c.get("disp", 0))],
                ep_overlap=bool(c.get("epo", False)), delay_wgrad=bool(c.get("dw", False)),
                cuda_graph=bool(c.get("cg", False)),
                moe_routing=ROUTINGS[int(c.get("route", 0))],
                moe_imbalance=float(c["imb"]) if "imb" in c else None,
                moe_capacity_factor=None if np.isinf(cf) else cf,
                moe_pad_to_capacity=bool(c.get("pad", False)), mbs=c["mbs"],
                gbs=c["gbs"], schedule=schedule_of_code(c["sched"]).name, vpp=c["vpp"],
                recompute=RC_NAME[c["rc"]], sp=bool(c["sp"]), zero=c["zero"],
                flushes=int(c.get("fl", 1)),
                microbatch_group_size=int(c.get("mgs", 0)) or None,
                dp_shard=int(c["dps"]) if int(c.get("dps", c["dp"])) != c["dp"] else None,
                flash_attn=bool(c["flash"]), overlap_grad_reduce=bool(c["ogr"]),
                overlap_param_gather=bool(c["opg"]), tp_comm_overlap=bool(c["tpo"]),
                recompute_layers=int(c["rcl"]) or None,
                recompute_method=METHODS[c["rcu"]] if c["rcl"] else None,
                recompute_modules=tuple(n for n in MODULES if has_module(c["rcm"], n))
                or None, first_stage_layers=lf or None, last_stage_layers=ll or None,
                account_embedding=acc, account_loss=acc)


def plan_key(plan: Plan, defaults: Mapping[str, Any] | None = None) -> str:
    """Canonical key of a resolved plan (``parse_plan`` reads it back; a switch of
    ``defaults``, a named stack's ``plan_defaults``, is left out where the plan has that value,
    and ``plan_from_mapping(..., defaults)`` reads it back)."""
    return (f"tp={plan.tp},pp={plan.pp},dp={plan.dp},cp={plan.cp},ep={plan.ep},mbs={plan.mbs},"
            f"gbs={plan.gbs},schedule={plan.schedule},vpp={plan.vpp},recompute={plan.recompute},"
            f"sp={str(plan.sp).lower()},zero={plan.zero}"
            + (f",recompute_layers={plan.recompute_layers},recompute_method="
               f"{plan.recompute_method}" if plan.recompute_layers is not None else "")
            + (",recompute_modules=" + "+".join(plan.recompute_modules)
               if plan.recompute_modules is not None else "")
            + "".join(f",{k}={getattr(plan, k)}" for k in ("first_stage_layers",
                                                          "last_stage_layers")
                      if getattr(plan, k) is not None)
            + "".join(f",{k}=true" for k in ("account_embedding", "account_loss")
                      if getattr(plan, k))
            + "".join(f",{k}=" + "/".join(map(str, getattr(plan, k)))
                      for k in ("layers_per_stage", "group_microbatches")
                      if getattr(plan, k) is not None)
            + (f",flushes={plan.flushes}" if plan.flushes != 1 else "")
            + (f",microbatch_group_size={plan.microbatch_group_size}"
               if plan.microbatch_group_size is not None else "")
            + (f",dp_shard={plan.dp_shard}" if plan.dp_shard is not None else "")
            + _switch_key(plan, defaults or {}))


def _switch_key(plan: Plan, defaults: Mapping[str, Any]) -> str:
    """The key's tail for ``etp`` (where it is not ``tp``) and the ``SWITCH_KEYS`` whose value
    is not ``Plan``'s default: two plans that differ only in them have different keys (a
    results file's ``--resume`` never mixes them), and ``parse_plan`` reads them back."""
    out = f",etp={plan.etp}" if plan.etp is not None and plan.etp != plan.tp else ""
    for k in SWITCH_KEYS:
        v = getattr(plan, k)
        default = defaults.get(k, _PLAN_DEFAULTS[k])
        if k == "tp_comm_overlap":
            default = tp_overlap_default(default, plan.tp, plan.sp)
        if v != default:
            out += f",{k}=" + (str(v).lower() if isinstance(v, bool) else f"{v}")
    return out


_PLAN_DEFAULTS = {k: getattr(Plan(), k) for k in SWITCH_KEYS}


def columns_from_plans(plans: Iterable[Plan]) -> dict[str, np.ndarray]:
    """Plan arrays (``COLUMNS``) of resolved plans."""
    return PlanArrays.from_plans(plans).to_columns()


def parse_fix(text: str | None) -> dict[str, Any]:
    """``--fix tp=8,schedule=1f1b`` -> checked values (``schedule=interleaved:3`` sets vpp).

    >>> parse_fix("tp=8,schedule=interleaved:3,sp=true")
    {'tp': 8, 'schedule': 'interleaved', 'vpp': 3, 'sp': True}
    """
    if not text:
        return {}
    out: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in str(text).split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        if not eq or key not in FIX_KEYS:
            raise SpecError("--fix", item, f"each item must be key=value with key one of "
                            f"{', '.join(FIX_KEYS)}")
        if key in out:
            raise SpecError("--fix", key, "key given twice")
        if key == "schedule":
            name, _, vpp = value.partition(":")
            if name not in schedule_names():
                raise SpecError("--fix", item, f"schedule must be one of "
                                f"{', '.join(schedule_names())}")
            out[key] = name
            if vpp:
                out["vpp"] = _fix_int("vpp", vpp)
        elif key == "recompute":
            if value not in RECOMPUTE_CODE:
                raise SpecError("--fix", item, f"recompute must be one of "
                                f"{', '.join(RECOMPUTE_CODE)}")
            out[key] = value
        elif key == "recompute_modules":
            out[key] = _fix_modules(value)
        elif key == "sp":
            if value not in ("true", "false", "1", "0", "on", "off", "yes", "no"):
                raise SpecError("--fix", item, "sp must be true or false")
            out[key] = value in ("true", "1", "on", "yes")
        elif key in SWITCH_KEYS:
            out[key] = _fix_switch(key, value)
        else:
            out[key] = _fix_int(key, value)
            if key == "zero" and out[key] > 3:
                raise SpecError("--fix", item, "zero must be 0, 1, 2 or 3")
    if "microbatch_group_size" in out and "schedule" in out and \
            not get_schedule(out["schedule"]).uses_group:
        raise SpecError("--fix", f"microbatch_group_size={out['microbatch_group_size']}",
                        f"only applies to schedule={' or '.join(grouped_names())}, not "
                        f"{out['schedule']}")
    if "recompute_modules" in out and out.get("recompute", "selective") != "selective":
        raise SpecError("--fix", "recompute_modules=" + "+".join(out["recompute_modules"]),
                        "needs recompute=selective (Megatron's --recompute-granularity "
                        f"selective), not recompute={out['recompute']}")
    if out.get("moe_pad_to_capacity"):    # Plan's rule between the fields (_check_pad_to_capacity)
        try:
            Plan(moe_pad_to_capacity=True, moe_capacity_factor=out.get("moe_capacity_factor"),
                 moe_dispatcher=out.get("moe_dispatcher", "alltoall"))
        except SpecError as e:
            raise SpecError("--fix", "moe_pad_to_capacity=true", e.rule) from None
    chunked = chunked_names()
    if out.get("vpp", 1) >= 2 and chunked and \
            not get_schedule(out.setdefault("schedule", chunked[0])).chunked:
        raise SpecError("--fix", f"vpp={out['vpp']}",
                        f"vpp >= 2 needs schedule={' or '.join(chunked)}")
    return out


def _fix_switch(key: str, value: str) -> Any:
    """A ``SWITCH_KEYS`` value, coerced and checked by ``Plan`` itself (one rule: the field,
    the value and the rule ``Plan`` states, e.g. ``moe_dispatcher`` one of
    ``plan.DISPATCHERS``)."""
    try:
        v = coerce(key, value)
        # (padding's need of a capacity factor is a rule between fields: parse_fix's)
        Plan(**{key: v}, **({"moe_capacity_factor": 1.0} if key == "moe_pad_to_capacity"
                            else {}))
    except SpecError as e:
        raise SpecError("--fix", f"{key}={value}", f"{key} {e.rule}") from None
    return v


def _fix_modules(value: str) -> tuple[str, ...]:
    """``recompute_modules=core_attn+mlp`` (``+`` or ``/`` between names: ``,`` separates
    ``--fix`` items): the names checked by ``Plan`` (known, at least one), in ``MODULES``
    order as ``plan_key`` writes them. Only selective plans carry them (``_fixed_mask``)."""
    try:
        return Plan(recompute="selective", recompute_modules=parse_modules(value)
                    ).recompute_modules
    except SpecError as e:
        raise SpecError("--fix", f"recompute_modules={e.value}",
                        f"recompute_modules {e.rule}") from None


def _fix_int(key: str, value: str) -> int:
    """An integer ``--fix`` value, read as ``Plan`` reads it (ASCII digits only,
    ``limits.parse_int_text``) and held to the plan's own range for that field
    (``plan.int_limit``; ``zero`` 0-3 is checked by the caller)."""
    try:
        v = parse_int_text(key, value)
        check_int(key, v, 0 if key == "zero" else 1, int_limit(key))
    except SpecError as e:
        raise SpecError("--fix", f"{key}={value}", e.rule) from None
    return v


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _factorizations(n: int) -> np.ndarray:
    """Every ``(tp, pp, cp, dp)`` with product ``n``, as rows."""
    rows = [(t, p, c, n // (t * p * c)) for t in _divisors(n) for p in _divisors(n // t)
            for c in _divisors(n // (t * p))]
    return np.array(rows, dtype=np.int64)


def tp_divides_heads(model: ModelSpec, tp):
    """The ``tp_heads`` rule: ``tp`` divides the attention heads and the KV heads.
    Vectorised."""
    return (model.num_attention_heads % tp == 0) & (model.kv_heads % tp == 0)


def _with_etp(fac: np.ndarray, model: ModelSpec, fixed: Mapping[str, Any]) -> np.ndarray:
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


def _axes(model: ModelSpec, cluster: Cluster, opts: SpaceOptions,
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
            if k != "etp" and k in fx and fx[k] != _PLAN_DEFAULTS[k]:
                raise SpecError("--fix", f"{k}={fx[k]}", f"{k} applies to mixture-of-experts "
                                f"layers; {model.name} is dense")
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
          "zero": [0, 1, 2, 3], "switches": _switch_columns(fx)}
    if "recompute_modules" in fx:
        ax["rcm"] = modules_mask(fx["recompute_modules"])
    if "flushes" in fx:
        ax["fl"] = fx["flushes"]
    if "microbatch_group_size" in fx:
        ax["mgs"] = fx["microbatch_group_size"]
    if "dp_shard" in fx:
        ax["dps"] = fx["dp_shard"]
    return ax


def _layout_axis(model: ModelSpec, cluster: Cluster, ax: dict, opts: SpaceOptions
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


def _product(n: int, model: ModelSpec, cluster: Cluster, gbs: int,
             opts: SpaceOptions, framework: FrameworkProfile | None = None,
             costs: LayerCosts | None = None) -> dict[str, np.ndarray]:
    ax = _axes(model, cluster, opts, framework)
    fac = _with_etp(_factorizations(n), model, opts.fixed)
    cols = _grid(fac, ax, ax["sched"], gbs, framework)
    for k in ("lf", "ll"):
        cols[k] = np.zeros(len(cols["tp"]), dtype=np.int64)
    cols["acc"] = np.zeros(len(cols["tp"]), dtype=bool)
    lay = _layout_axis(model, cluster, ax, opts) if costs is not None else []
    if lay:
        # one candidate layout per (pp, vpp) (strategies.search.layouts), as extra rows
        pv = {(int(p), v) for p in fac[:, 1] for _, v in lay}
        keep = {pair: candidate_layout(model.num_layers, pair[0], pair[1], costs)
                for pair in pv}
        lay = [(code, v) for code, v in lay
               if any(keep[(int(p), v)] is not None for p in set(fac[:, 1].tolist()))]
    if lay:
        extra = _grid(fac, ax, lay, gbs, framework)
        has, lf, ll, acc = candidate_columns(model.num_layers, extra["pp"], extra["vpp"], costs)
        extra = {k: v[has] for k, v in extra.items()}
        extra.update(lf=lf[has], ll=ll[has], acc=acc[has])
        cols = {k: np.concatenate([cols[k], extra[k]]) for k in cols}
    if opts.hybrid and "dp_shard" not in opts.fixed:
        cols = _with_hybrid(cols, cluster.gpus_per_node, framework)
    return _both_delay_wgrad(cols, ax["switches"])


def _with_hybrid(cols: dict[str, np.ndarray], gpus_per_node: int,
                 framework: FrameworkProfile | None) -> dict[str, np.ndarray]:
    """``cols`` (``dp_shard = dp``) and, for ``search --hybrid``, their hybrid twins: shard
    groups of ``k`` nodes, ``dp_shard = k·G/(tp·cp)`` for ``k = 1, 2, 4, …`` (FSDP's HSDP
    within a node, replicas across: the shard group's ranks on the fastest links), where it
    is a whole number below ``dp`` that divides it, on the rows ``Plan`` takes it on
    (``zero ≥ 1``, ``dp_shard·cp ≥ 2``, with ``ep > 1`` a whole expert shard group:
    ``plan.expert_shard_whole``) and at the ZeRO stages the stack runs it with
    (``FrameworkProfile.hybrid_zero``; any ZeRO >= 1 without a named stack; with ``ep > 1``
    only where ``FrameworkProfile.hybrid_ep``)."""
    dp, tc = cols["dp"], cols["tp"] * cols["cp"]
    zeros = framework.hybrid_zero if framework is not None else (1, 2, 3)
    moe_ok = framework.hybrid_ep if framework is not None else True
    base = np.isin(cols["zero"], zeros) & (gpus_per_node % tc == 0) \
        & ((cols["ep"] == 1) | moe_ok)
    node = np.where(base, gpus_per_node // np.maximum(tc, 1), 0)
    parts, shards = [cols], [dp]
    k = 1
    while True:
        s = node * k
        ok = base & (s >= 1) & (s < dp) & (dp % np.maximum(s, 1) == 0) & (s * cols["cp"] >= 2) \
            & ((cols["ep"] == 1) | expert_shard_whole(cols["tp"], cols["cp"], s, cols["ep"],
                                                      cols["etp"]))
        if not (base & (s < dp)).any():
            break
        if ok.any():
            parts.append({key: v[ok] for key, v in cols.items()})
            shards.append(s[ok])
        k *= 2
    out = {key: np.concatenate([p[key] for p in parts]) for key in cols}
    out["dps"] = np.concatenate(shards).astype(np.int64)
    return out


def _both_delay_wgrad(cols: dict[str, np.ndarray], switches: Mapping[str, Any]
                      ) -> dict[str, np.ndarray]:
    """``cols`` twice, with ``delay_wgrad`` off then on, where ``--fix ep_overlap=true`` leaves
    ``delay_wgrad`` free: Megatron-Core runs the overlap with or without it (default off,
    ``--delay-wgrad-compute`` on), and the estimate prices each (docs/calibration.md §5.101);
    ``cols`` unchanged otherwise (``delay_wgrad`` is refused without the overlap)."""
    if not switches.get("epo") or "dw" in switches:
        return cols
    n = len(cols["tp"])
    out = {k: np.concatenate([v, v]) for k, v in cols.items()}
    out["dw"] = np.repeat(np.array([False, True]), n)
    return out


def _grid(fac: np.ndarray, ax: dict, sched_axis: list, gbs: int,
          framework: FrameworkProfile | None) -> dict[str, np.ndarray]:
    """The product of the factorizations with the axes, over ``sched_axis``."""
    sched = np.array(sched_axis, dtype=np.int64)
    grids = np.meshgrid(np.arange(len(fac)), np.array(ax["ep"]), np.array(ax["mbs"]),
                        np.arange(len(sched)), np.array(ax["rc"]), np.array(ax["sp"]),
                        np.array(ax["zero"]), indexing="ij")
    fi, ep, mbs, si, rc, sp, zero = (g.ravel() for g in grids)
    cols = {"tp": fac[fi, 0], "pp": fac[fi, 1], "cp": fac[fi, 2], "dp": fac[fi, 3], "ep": ep,
            "etp": fac[fi, 4],
            "mbs": mbs, "gbs": np.full(fi.shape, gbs, dtype=np.int64), "sched": sched[si, 0],
            "vpp": sched[si, 1], "rc": rc, "sp": sp.astype(bool), "zero": zero}
    for k, v in _switches(framework, ax["switches"]).items():
        cols[k] = np.full(fi.shape, v)
    if "tpo" not in ax["switches"]:     # the stack's default, where it runs (tp > 1 with sp)
        cols["tpo"] = tp_overlap_default(cols["tpo"], cols["tp"], cols["sp"])
    if framework is not None:           # where the stack turns it off (NeMo, no sp)
        cols["tpo"] = stack_tp_overlap(framework, cols["tp"], cols["sp"], cols["tpo"])
    if "rcm" in ax:     # --fix recompute_modules: carried by the selective rows only
        cols["rcm"] = np.where(rc == RECOMPUTE_CODE["selective"], ax["rcm"], 0)
    # --fix flushes: on every row (``flush_rules`` prunes those that cannot flush); --fix
    # microbatch_group_size: on the rows of a schedule that takes a group (the rest pruned)
    cols["fl"] = np.full(fi.shape, ax.get("fl", 1), dtype=np.int64)
    cols["mgs"] = np.where(attr_by_code(cols["sched"], "uses_group").astype(bool),
                           ax.get("mgs", 0), 0).astype(np.int64)
    if "dps" in ax:     # --fix dp_shard: the rows it divides (``_fixed_mask`` prunes the rest)
        cols["dps"] = np.where(cols["dp"] % ax["dps"] == 0, ax["dps"], cols["dp"])
    return cols


def _fixed_mask(c: dict[str, np.ndarray], fixed: Mapping[str, Any]) -> np.ndarray:
    ok = np.ones(len(c["tp"]), dtype=bool)
    for k, v in fixed.items():
        if k in SWITCH_KEYS:        # carried by every row (``_switches``)
            continue
        if k == "recompute_modules":      # the modules of a selective plan (``_grid``)
            ok &= c["rc"] == RECOMPUTE_CODE["selective"]
        elif k == "flushes":              # carried by every row (``_grid``)
            continue
        elif k == "microbatch_group_size":    # a schedule that takes a group (``_grid``)
            ok &= c["mgs"] == int(v)
        elif k == "dp_shard":     # the rows ``Plan`` takes it on (``plan._check_dp_shard``)
            flat = c["dp"] == int(v)
            ok &= (c["dp"] % int(v) == 0) & (flat | (
                (c["zero"] >= 1) & (int(v) * c["cp"] >= 2)
                & ((c["ep"] == 1) | expert_shard_whole(c["tp"], c["cp"], int(v), c["ep"],
                                                       c["etp"]))))
        elif k == "schedule":
            ok &= c["sched"] == schedule_code(v)
        elif k == "recompute":
            ok &= c["rc"] == RECOMPUTE_CODE[v]
        else:
            ok &= c[k] == (bool(v) if k == "sp" else int(v))
    return ok


def _framework_ok(c: dict[str, np.ndarray], fw: FrameworkProfile | None) -> np.ndarray:
    """What stack ``fw`` can run: ``strategies.stacks.rules.stack_mask``, the rule list
    ``plan_violations`` reads for one plan; every plan when no stack is named."""
    return stack_mask(fw, c)


def _switches(fw: FrameworkProfile | None,
              fixed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The plan switches every searched plan carries: the named stack's defaults, or (no stack
    named) FlashAttention and the DP overlaps on, TP overlap off; then the ``SWITCH_KEYS``
    ``--fix`` gives (``fixed``, by short column, coded as ``PlanArrays`` codes them)."""
    if fw is None:
        out: dict[str, Any] = {"flash": True, "ogr": True, "opg": True, "tpo": False}
    else:
        out = {"flash": fw.default_flash_attn, "ogr": fw.default_overlap_grad_reduce,
               "opg": fw.default_overlap_param_gather, "tpo": fw.default_tp_comm_overlap}
    return {**out, **(fixed or {})}


def _switch_columns(fixed: Mapping[str, Any]) -> dict[str, Any]:
    """The ``SWITCH_KEYS`` of ``fixed`` as short columns' values (``_switches``)."""
    out: dict[str, Any] = {}
    for k, v in fixed.items():
        if k in SWITCH_KEYS:
            out[SWITCH_KEYS[k]] = (DISPATCHERS.index(v) if k == "moe_dispatcher" else
                                   ROUTINGS.index(v) if k == "moe_routing" else v)
    return out


def _rules(model: ModelSpec, cluster: Cluster, opts: SpaceOptions):
    """``(reason, columns -> ok-mask)`` in ``RULES`` order, up to the batch rule."""
    s, L, G = model.seq_length, model.num_layers, cluster.nvlink_domain_size

    def ep_ok(c):
        ok = expert_plan_ok(model, c["tp"], c["cp"], c["dp"], c["ep"], c["etp"])
        if "epo" in c or "dw" in c:     # the combined 1F1B's own limits, whatever stack runs
            # it (make_job)
            P = PlanArrays.from_columns(c)
            for _, _, rule_ok, _ in ep_overlap_rules(DEFAULT_FRAMEWORK, P):
                ok = ok & np.broadcast_to(rule_ok, ok.shape)
        return ok

    def cross(c):
        tp = c["tp"]
        return fits_nvlink_domain(cluster, tp) | (opts.allow_cross_node_tp & (tp % G == 0))

    default = schedule_code(DEFAULT_SCHEDULE)

    core = modules_mask(("core_attn",))

    def redundant(c):
        # selective recompute of core_attn alone (the default modules) with FlashAttention
        scores_only = (c["rcm"] == 0) | (c["rcm"] == core) if "rcm" in c else True
        return ~(c["sp"] & (c["tp"] == 1)) & ~((c["zero"] > 0) & (c["dp"] * c["cp"] == 1)) \
            & ~((c["pp"] == 1) & (c["sched"] != default)) \
            & ~((c["rc"] == 1) & c["flash"] & scores_only)

    return (
        ("fixed", lambda c: _fixed_mask(c, opts.fixed)),
        ("tp_heads", lambda c: tp_divides_heads(model, c["tp"])),
        ("pp_layers", lambda c: (L % c["pp"] == 0) | _uneven(c)),
        ("cp_seq", lambda c: (c["cp"] == 1) | (s % (2 * c["cp"]) == 0)),
        ("ep", ep_ok),
        ("tp_cross_node", cross),
        ("sp_seq", lambda c: ~c["sp"] | (s % (c["tp"] * c["cp"]) == 0)),
        ("zero3_pp", lambda c: (c["zero"] < 3) | (c["pp"] == 1)),
        ("redundant", redundant),
        ("batch", lambda c: c["gbs"] % (c["mbs"] * c["dp"]) == 0),
    )


def _schedule_ok(c: dict[str, np.ndarray], L: int) -> np.ndarray:
    """pp*vpp divides the layers, the flushes divide the micro-batches (``flushes.
    flush_rules``, the rule ``make_job`` raises) and each plan's schedule accepts one flush's
    micro-batches (``Schedule.valid``; a named micro-batch group: the schedule's ``rules``
    with it, as ``make_job`` checks them)."""
    pp, v = c["pp"], c["vpp"]
    m = c["gbs"] // (c["mbs"] * c["dp"])
    k = c.get("fl", np.ones_like(pp))
    ok = ((L % (pp * v) == 0) | _uneven(c)) & all_ok(flush_rules(pp, m, k))
    m = m // np.maximum(k, 1)
    g = c.get("mgs", np.zeros_like(pp))
    valid = dispatch(c["sched"], "valid", pp, m, v) > 0
    for code in np.unique(c["sched"][g > 0]).tolist():
        sel = (g > 0) & (c["sched"] == code)
        valid[sel] = np.broadcast_to(all_ok(schedule_of_code(code).rules(
            pp[sel], m[sel], v[sel], g[sel])), (int(sel.sum()),))
    return ok & valid


def _bubble(c: dict[str, np.ndarray]) -> np.ndarray:
    """The schedule's closed-form bubble fraction of one pipeline flush (``bubble`` rule)."""
    m = c["gbs"] // (c["mbs"] * c["dp"] * c["fl"])
    return dispatch(c["sched"], "bubble_fraction", c["pp"], m, c["vpp"])


def _least_group(c: dict[str, np.ndarray]) -> np.ndarray:
    """The micro-batch group of each row (``mgs``; 0: the default, ``pp``): a row of a
    schedule that takes one (interleaved) whose micro-batches per flush ``m`` the default
    group refuses (``m`` not a multiple of ``pp``) takes the least group ``g > pp`` its rules
    accept (``m >= g`` and ``m % g`` 0 or ``>= pp``; ``g = m`` always does where ``m >= pp``):
    Megatron-Core's ``--microbatch-group-size-per-virtual-pipeline-stage``. A larger group
    runs more warm-up forwards, so it stashes more (``Schedule.in_flight``) and leaves the
    free-communication span unchanged: the least one is the one to run. Other rows keep
    theirs."""
    g = c["mgs"].copy()
    pp = c["pp"]
    m = c["gbs"] // (c["mbs"] * c["dp"] * c["fl"])
    need = np.flatnonzero(attr_by_code(c["sched"], "uses_group").astype(bool) & (g == 0)
                          & (pp > 1) & (m % pp != 0) & (m > pp))
    if not need.size:
        return g
    p, mm = pp[need], m[need]
    best = mm.copy()                        # g = m: one group
    for cand in range(int(p.min()) + 1, int(mm.max())):
        hit = (cand > p) & (cand < best) & ((mm % cand == 0) | (mm % cand >= p))
        best = np.where(hit, cand, best)
    g[need] = best
    return g


def _fewest_flushes(c: dict[str, np.ndarray], peak: np.ndarray, limit: float, memory,
                    L: int, fw: FrameworkProfile, max_bubble: float,
                    regroup: bool = True) -> np.ndarray:
    """Give each pipelined row that does not fit with one flush the fewest pipeline flushes
    per step (``flushes``, a power of two as the micro-batch sizes) that fit, under a stack
    that runs several (``FrameworkProfile.pipeline_flushes``: torchtitan, NeMo AutoModel, whose
    ``local_batch_size`` sets them): one flush's memory holds ``m/k`` micro-batches, and each
    flush pays its own fill and drain, so ``k`` flushes are never faster than one
    (``strategies.flushes``) and are only worth it where one does not fit. The rows change in
    place (the space does not grow), each checked by the rules a flushed plan obeys
    (``_schedule_ok``, the stack's, the bubble). ``memory``: columns -> peak bytes. Returns the
    updated peaks. ``regroup``: the micro-batch group is the least for one flush's count
    (``_least_group``; False: a group fixed with ``--fix``)."""
    rows = np.flatnonzero((peak > limit) & (c["pp"] > 1) & (c["fl"] == 1))
    if not rows.size:
        return peak
    peak = peak.copy()
    m = c["gbs"][rows] // (c["mbs"][rows] * c["dp"][rows])
    left = np.ones(rows.size, dtype=bool)
    k = 2
    while left.any() and k <= int(m[left].max()):
        pick = np.flatnonzero(left & (m % k == 0))
        if pick.size:
            idx = rows[pick]
            trial = {key: v[idx] for key, v in c.items()}
            trial["fl"] = np.full(idx.size, k, dtype=np.int64)
            if regroup:
                trial["mgs"] = _least_group({**trial, "mgs": trial["mgs"] * 0})
            ok = (_schedule_ok(trial, L) & _framework_ok(trial, fw)
                  & (_bubble(trial) <= max_bubble + 1e-12))
            sub = np.flatnonzero(ok)
            if sub.size:
                pk = memory({key: v[sub] for key, v in trial.items()})
                fit = sub[pk <= limit]
                c["fl"][idx[fit]] = k
                c["mgs"][idx[fit]] = trial["mgs"][fit]
                peak[idx[fit]] = pk[pk <= limit]
                left[pick[fit]] = False
        k *= 2
    return peak


def _uneven(c: dict[str, np.ndarray]) -> np.ndarray:
    """Rows that carry an uneven layout (``strategies.search.layouts``)."""
    return (c["lf"] > 0) | (c["ll"] > 0) | c["acc"]


def _least_recompute(model: ModelSpec, c: dict[str, np.ndarray], peak: np.ndarray,
                     limit: float, dtype: str, system: SystemConfig | None,
                     gpu: GPU | None = None, clamp: bool = False,
                     remat_named: bool = False, loss_bytes: LossPasses | None = None,
                     act_cache: float | None = None,
                     optimizer_bytes: float | None = None, fsdp2: bool = False,
                     dispatch_bytes: float | None = None,
                     expert_input: float | None = None,
                     te_inputs: tuple[float, float, float, float] | None = None) -> np.ndarray:
    """Give each fitting full-recompute plan the fewest recomputed layers per chunk that still
    fit (Megatron's block method, ``recompute_layers``; the rows change in place, the space
    does not grow): memory falls monotonically with ``N`` (each recomputed layer keeps its
    input instead of its activations), so a bisection over ``1 … l/(pp·vpp)`` finds it.
    ``gpu``: the chip, as the memory rule reads it (fp8 weight copies); ``clamp``: the stack
    runs gpt-oss's eager clamp, ``remat_named`` a JAX remat policy; ``loss_bytes``,
    ``act_cache``, ``optimizer_bytes``, ``fsdp2``, ``dispatch_bytes``, ``expert_input``,
    ``te_inputs`` the stack's (``memory.arrays``).
    Returns the updated peaks."""
    rows = np.flatnonzero(c["rc"] == RECOMPUTE_CODE["full"])
    if not len(rows):
        return peak
    sub = {k: v[rows] for k, v in c.items()}
    lpc = rank_layers(model.num_layers, PlanArrays.from_columns(sub))[3].astype(np.int64)
    lo, hi = np.ones_like(lpc), lpc.copy()         # the full plan (N = l) fits
    best = peak[rows].copy()
    while True:
        act = np.flatnonzero(lo < hi)
        if not len(act):
            break
        mid = (lo[act] + hi[act]) // 2
        sub = {k: v[rows[act]] for k, v in c.items()}
        sub["rcl"] = mid
        sub["rcu"] = np.zeros_like(mid)
        pk = peak_memory_arrays(model, sub, dtype, system, gpu, clamp, remat_named,
                                loss_bytes, act_cache, optimizer_bytes, fsdp2, dispatch_bytes,
                                expert_input, te_inputs)
        fit = pk <= limit
        hi[act] = np.where(fit, mid, hi[act])
        lo[act] = np.where(fit, lo[act], mid + 1)
        best[act] = np.where(fit, pk, best[act])
    c["rcl"][rows] = np.where(hi < lpc, hi, 0)
    peak = peak.copy()
    peak[rows] = np.where(hi < lpc, best, peak[rows])
    return peak


def _zero2_slower(model: ModelSpec, cluster: Cluster, dtype: str,
                  framework: FrameworkProfile | None, system: SystemConfig | None,
                  z2: dict[str, np.ndarray], z1: dict[str, np.ndarray]) -> np.ndarray:
    """True where the analytic estimate (``estimate_arrays_mixed``, the search's score) of
    each ZeRO-2 plan of ``z2`` is no faster than that of its ZeRO-1 twin in ``z1`` (the same
    row). ZeRO-2 reduce-scatters every micro-batch's gradients where ZeRO-1 does it once per
    step, but it can still win: its reduce-scatters run under the whole step's backwards
    where ZeRO-1's one runs under the last micro-batch's, the stack's per-step passes over
    the gradient buffer stream the shard only, and the memory it saves may spare recomputed
    layers (docs/calibration.md §5.108)."""
    from strategies.estimate.mixed import estimate_arrays_mixed
    t2, t1 = (estimate_arrays_mixed(model, cluster, dtype, PlanArrays.from_columns(x),
                                    framework, system)["step_time_s"] for x in (z2, z1))
    return np.asarray(t2) >= np.asarray(t1)


def enumerate_space(model: ModelSpec, cluster: Cluster, gbs: int,
                    opts: SpaceOptions | None = None,
                    framework: FrameworkProfile | None = None, dtype: str = "bf16",
                    system: SystemConfig | None = None) -> Space:
    """Every plan the constraints allow, with the count each rule pruned (see module doc).
    ``framework``: a named software stack; only what it can run, with its default switches.
    ``dtype`` and ``system`` set the memory model (gradient bytes, policy constants)."""
    opts = opts or SpaceOptions()
    if isinstance(gbs, bool) or not isinstance(gbs, int) or gbs < 1:
        raise SpecError("gbs", gbs, "must be an integer >= 1")
    if opts.max_mbs < 1:
        raise SpecError("--max-mbs", opts.max_mbs, "must be >= 1")
    costs = (layer_costs(model, cluster, dtype, framework, system)
             if cluster.uniform and opts.layouts else None)
    # the stack's eager activation clamp (gpt-oss) stashes its inputs (memory.arrays)
    clamp = runs_eager_clamp(framework or DEFAULT_FRAMEWORK)
    # a JAX remat policy's selective stash (memory.activations.named_remat_bytes)
    remat_named = bool((framework or DEFAULT_FRAMEWORK).remat_named)
    # what the stack's cross-entropy holds per logit element (memory.activations.output_bytes)
    loss_bytes = (framework or DEFAULT_FRAMEWORK).loss      # its peak_bytes_at(tp) per plan
    # activations cached in low precision, the optimizer's state bytes (memory.arrays)
    act_cache = activation_cache_bytes((framework or DEFAULT_FRAMEWORK).fp8_activation_cache,
                                       dtype)
    optimizer_bytes = (framework or DEFAULT_FRAMEWORK).optimizer_state_bytes
    # the MoE dispatch's bytes per element, its send buffer (moe_bytes.dispatch_element_bytes)
    dispatch_bytes = dispatch_element_bytes((framework or DEFAULT_FRAMEWORK).fp8_dispatch, dtype)
    # the routed experts' saved GEMM inputs (memory.activations.expert_input_bytes)
    stack = framework or DEFAULT_FRAMEWORK
    expert_input = expert_input_bytes(runs_te_experts(stack), dtype, stack.te_version,
                                      cluster.gpu.fp8_tn_only)
    # Transformer Engine's dense modules' saved inputs (memory.te_linear_saved)
    te_inputs = job_te_linear_inputs(stack, dtype, cluster.gpu.fp8_tn_only)
    # PyTorch FSDP2's state (memory.arrays.state_bytes_per_param)
    fsdp2 = bool((framework or DEFAULT_FRAMEWORK).fsdp2)
    # the master's bytes of a stack that builds its model in 16 bits (profile.stack_system)
    system_in, system = system, stack_system(framework or DEFAULT_FRAMEWORK, system)
    c = _product(cluster.num_gpus, model, cluster, gbs, opts, framework, costs)
    raw = len(c["tp"])
    pruned: dict[str, int] = {}

    def keep(reason: str, ok: np.ndarray) -> None:
        nonlocal c
        pruned[reason] = int((~ok).sum())
        if pruned[reason] or np.ndim(ok) != 1:    # a rule that keeps every row copies nothing
            c = {k: v[ok] for k, v in c.items()}

    for reason, rule in _rules(model, cluster, opts):
        keep(reason, rule(c))
        if reason == "zero3_pp":
            keep("framework", _framework_ok(c, framework))
    if "microbatch_group_size" not in opts.fixed:
        c["mgs"] = _least_group(c)
    keep("schedule", _schedule_ok(c, model.num_layers))
    keep("bubble", _bubble(c) <= opts.max_bubble + 1e-12)
    limit = opts.memory_limit(cluster)

    def memory(cols: dict[str, np.ndarray]) -> np.ndarray:
        return peak_memory_arrays(model, cols, dtype, system, cluster.gpu, clamp, remat_named,
                                  loss_bytes, act_cache, optimizer_bytes, fsdp2, dispatch_bytes,
                                  expert_input, te_inputs)
    peak = memory(c) if len(c["tp"]) else np.zeros(0)
    if (framework is not None and framework.pipeline_flushes and "flushes" not in opts.fixed
            and len(c["tp"])):
        peak = _fewest_flushes(c, peak, limit, memory, model.num_layers, framework,
                               opts.max_bubble, "microbatch_group_size" not in opts.fixed)
    ok = peak <= limit
    keep("memory", ok)
    peak = peak[ok]
    z2 = np.flatnonzero(c["zero"] == 2)       # each ZeRO-2 row's ZeRO-1 twin (rows only)
    twin = {k: v[z2] for k, v in c.items()}
    twin["zero"] = np.ones(len(z2), dtype=c["zero"].dtype)
    fits = np.zeros(len(z2), bool)
    # a ZeRO-2 plan is dominated by a ZeRO-1 twin only where the stack runs ZeRO-1
    # (torchtitan's FSDP2 and Composer's FSDP have none)
    if len(z2) and 1 in (framework or DEFAULT_FRAMEWORK).zero_stages:
        twin_peak = memory(twin)
        fits = twin_peak <= limit
    for k in ("rcl", "rcu", "rcm"):        # every layer / block / default (or fixed) modules
        c.setdefault(k, np.zeros(len(c["tp"]), dtype=np.int64))
        twin.setdefault(k, np.zeros(len(z2), dtype=np.int64))
    least = framework is None or "block" in framework.recompute_methods

    def lighten(cols: dict[str, np.ndarray], pk: np.ndarray) -> np.ndarray:
        return _least_recompute(model, cols, pk, limit, dtype, system, cluster.gpu, clamp,
                                remat_named, loss_bytes, act_cache, optimizer_bytes, fsdp2,
                                dispatch_bytes, expert_input, te_inputs) if least else pk
    peak = lighten(c, peak)
    ok = np.ones(len(c["tp"]), bool)
    if fits.any():
        # the twins that fit, each with its own fewest recomputed layers (as its row in the
        # space gets them), against the ZeRO-2 rows as they now stand: pruned only where the
        # estimate ranks the twin at least as fast (``_zero2_slower``)
        rows = z2[fits]
        tw = {k: v[fits] for k, v in twin.items()}
        lighten(tw, twin_peak[fits])
        ok[rows] = ~_zero2_slower(model, cluster, dtype, framework, system_in,
                                  {k: v[rows] for k, v in c.items()}, tw)
    keep("zero2_dominated", ok)
    peak = peak[ok]
    return Space(model, cluster, gbs, c, pruned, raw, peak, limit,
                 framework.plan_defaults() if framework is not None else {})
