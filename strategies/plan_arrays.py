"""``PlanArrays``: many resolved plans as numpy columns with the plans' own field names.

The array-first cost model (``strategies.cost.stage``, ``strategies.estimate``,
``strategies.memory.arrays``) reads plans in this form, one entry per plan, so one code path
scores one plan or a hundred thousand. ``strategies.search.space`` keeps short column names
internally (``search.plan_rows.COLUMNS``) and converts with ``PlanArrays.from_columns``.

>>> from strategies.plan import Plan
>>> from strategies.plan.choices import DEFAULT_MOE_IMBALANCE
>>> pa = PlanArrays.from_plans([Plan(tp=2, pp=2, dp=2, gbs=8), Plan(tp=4, dp=2, gbs=8)])
>>> len(pa), pa.tp.tolist(), pa.schedule.tolist(), pa.overlap_grad_reduce.tolist()
(2, [2.0, 4.0], [1, 1], [True, True])
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping

import numpy as np

from strategies.cost.offload import offload_mask
from strategies.cost.recompute import METHOD_CODE, modules_mask
from strategies.errors import SpecError
from strategies.plan import DISPATCHERS, Plan
from strategies.plan.choices import BALANCED_ROUTINGS, CP_COMMS, DEFAULT_MOE_IMBALANCE, ROUTINGS
from strategies.schedules import attr_by_code, dispatch, schedule_code

#: Integer codes of the recomputation modes in ``PlanArrays`` (a schedule's code is its
#: registration order, ``strategies.schedules.schedule_code``).
RECOMPUTE_CODE = {"none": 0, "selective": 1, "full": 2, "op": 3}

# PlanArrays field -> the search space's short column name
SHORT = {"tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "mbs": "mbs", "gbs": "gbs",
         "vpp": "vpp", "schedule": "sched", "recompute": "rc", "sp": "sp", "zero": "zero",
         "flash_attn": "flash", "overlap_grad_reduce": "ogr",
         "overlap_param_gather": "opg", "tp_comm_overlap": "tpo",
         "recompute_layers": "rcl", "recompute_method": "rcu", "recompute_modules": "rcm",
         "first_stage_layers": "lf", "last_stage_layers": "ll", "account_slots": "acc",
         "flushes": "fl", "microbatch_group_size": "mgs"}
#: Columns a mapping may leave out (0: all layers / block / the default modules; no uneven
#: layout; one pipeline flush per step; the schedule's default micro-batch group).
OPTIONAL = ("rcl", "rcu", "rcm", "lf", "ll", "acc", "fl", "mgs")
_FLOAT = ("tp", "pp", "dp", "dp_shard", "cp", "ep", "mbs", "gbs", "vpp", "recompute_layers", "etp",
          "moe_imbalance", "moe_capacity_factor", "first_stage_layers", "last_stage_layers",
          "layout_first", "layout_mid", "layout_last", "layout_least", "layout_most",
          "layout_mid_most", "flushes", "microbatch_group_size", "hierarchical_cp",
          "cpu_offloading_num_layers")
#: ``PlanArrays`` fields read from a plan's layout string (``layout.layout_string_extremes``;
#: NaN: none), in its order
LAYOUT_STRING = ("layout_first", "layout_mid", "layout_last", "layout_least", "layout_most")
# expert fields the search space's columns may leave out: (PlanArrays field, short column,
# the resolved value of a plan that names none; ``etp`` None means = tp)
EXPERT_OPTIONAL = (("etp", "etp", None), ("moe_imbalance", "imb", DEFAULT_MOE_IMBALANCE),
                   ("moe_capacity_factor", "cf", float("inf")), ("ep_overlap", "epo", False),
                   ("moe_dispatcher", "disp", 0), ("cuda_graph", "cg", False),
                   ("moe_routing", "route", 0), ("delay_wgrad", "dw", False),
                   ("moe_pad_to_capacity", "pad", False),
                   ("param_gather_with_optimizer", "pgo", False),
                   ("offload_modules", "ofm", 0), ("cpu_offloading_num_layers", "cpo", 0))
_INT = ("schedule", "recompute", "zero", "recompute_method", "recompute_modules",
        "moe_dispatcher", "moe_routing", "cp_comm", "offload_modules")


@dataclass(frozen=True, eq=False)
class PlanArrays:
    """Resolved plans, one entry per plan: sizes as float arrays (``tp`` … ``vpp``),
    ``schedule`` and ``recompute`` as ``schedule_code``/``RECOMPUTE_CODE`` integers, ``zero``
    as an integer, switches as booleans; partial recomputation (``strategies.cost.recompute``)
    as ``recompute_layers`` (0: every layer), ``recompute_method`` (``METHOD_CODE``) and
    ``recompute_modules`` (a ``MODULES`` bit mask, 0: the default ``core_attn``); pipeline
    ``flushes`` per step (``strategies.flushes``: every figure is one flush's of
    ``gbs/flushes``, composed) and Megatron's ``microbatch_group_size`` (0: the schedule's
    default, ``pp``). Built with ``from_plans``/``from_columns``."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    mbs: np.ndarray
    gbs: np.ndarray
    vpp: np.ndarray
    schedule: np.ndarray
    recompute: np.ndarray
    sp: np.ndarray
    zero: np.ndarray
    flash_attn: np.ndarray
    overlap_grad_reduce: np.ndarray
    overlap_param_gather: np.ndarray
    tp_comm_overlap: np.ndarray
    etp: np.ndarray = None                  # expert tensor-parallel size (resolved: tp)
    moe_imbalance: np.ndarray = None        # hottest EP rank's routed load / the mean (>= 1)
    moe_capacity_factor: np.ndarray = None  # expert capacity / mean share (inf: no dropping)
    ep_overlap: np.ndarray = None           # Megatron's combined 1F1B (EP a2a overlap)
    moe_dispatcher: np.ndarray = None       # index in plan.DISPATCHERS (0: alltoall)
    cuda_graph: np.ndarray = None           # the step runs as one full-iteration CUDA graph
    moe_routing: np.ndarray = None          # index in plan.choices.ROUTINGS (0: random)
    delay_wgrad: np.ndarray = None          # with ep_overlap: --delay-wgrad-compute
    moe_pad_to_capacity: np.ndarray = None  # drop-and-pad: every expert at its capacity
    # Megatron-Core's --overlap-param-gather-with-optimizer-step (plan param_gather_with_optimizer)
    param_gather_with_optimizer: np.ndarray = None
    # Megatron-Core's --offload-modules (plan offload_modules): a ``cost.offload.MODULES`` bit
    # mask, 0: no activation offloading
    offload_modules: np.ndarray = None
    # Megatron-Core's --cpu-offloading-num-layers (plan cpu_offloading_num_layers; short column
    # ``cpo``, optional): the first N layers' activations offloaded, 0: none
    cpu_offloading_num_layers: np.ndarray = None
    recompute_layers: np.ndarray = 0.0
    recompute_method: np.ndarray = 0
    recompute_modules: np.ndarray = 0
    # the two uneven layouts the search proposes (docs/layout.md): Megatron's
    # --decoder-first/last-pipeline-num-layers (0: not given) and NeMo's embedding and loss
    # counted as layer slots (both switches on); ``rank_layers`` reads them
    first_stage_layers: np.ndarray = 0.0
    last_stage_layers: np.ndarray = 0.0
    account_slots: np.ndarray = False
    flushes: np.ndarray = 1.0               # pipeline flushes per optimizer step
    microbatch_group_size: np.ndarray = 0.0  # interleaved micro-batch group (0: pp)
    # a layout string (``Plan.layout``; NaN: none), which no search column says: rank 0's,
    # rank pp-2's and rank pp-1's layers (per copy under DualPipe) and the fewest and most a
    # virtual stage holds (``layout.layout_string_extremes``); only the lower bound reads
    # them (the estimate prices a job's own layout, ``estimate.scalar``)
    layout_first: np.ndarray = np.nan
    layout_mid: np.ndarray = np.nan
    layout_last: np.ndarray = np.nan
    layout_least: np.ndarray = np.nan
    layout_most: np.ndarray = np.nan
    # ... and the most layers of any middle rank (``layout.layout_middle_most``; NaN: none)
    layout_mid_most: np.ndarray = np.nan
    # hybrid sharding: the data-parallel ranks a ZeRO shard spans (``Plan.shard_dp``;
    # resolved: dp, no replicas; short column ``dps``, optional)
    dp_shard: np.ndarray = None
    # the context-parallel K/V exchange (plan ``cp_comm``; short column ``cpc``, optional):
    # 0 the stack's own, then 1 + the index in ``plan.choices.CP_COMMS`` (the stack rules' codes);
    # the stage costs price one exchange per call (``stacks.variants.arrays_stack``)
    cp_comm: np.ndarray = 0
    # a2a+p2p's all-to-all group size (plan ``hierarchical_cp``; short column ``cpk``,
    # optional; 1: none, the ring alone)
    hierarchical_cp: np.ndarray = 1.0

    def __post_init__(self) -> None:
        if self.dp_shard is None:
            object.__setattr__(self, "dp_shard", self.dp)
        for name, _, default in EXPERT_OPTIONAL:
            if getattr(self, name) is None:
                object.__setattr__(self, name, self.tp if default is None
                                   else np.full(np.shape(self.tp), default))
        for f in fields(self):
            v = getattr(self, f.name)
            kind = float if f.name in _FLOAT else np.int64 if f.name in _INT else bool
            object.__setattr__(self, f.name, np.asarray(v, dtype=kind))
        # a routing balanced by construction takes 1 where no imbalance is named (Plan.imbalance)
        even = np.isin(self.moe_routing, [ROUTINGS.index(r) for r in BALANCED_ROUTINGS])
        if np.any(even & np.isnan(self.moe_imbalance)):
            object.__setattr__(self, "moe_imbalance",
                               np.where(even & np.isnan(self.moe_imbalance), 1.0,
                                        self.moe_imbalance))

    def __len__(self) -> int:
        return int(np.size(self.tp))

    @classmethod
    def from_plans(cls, plans: Iterable[Plan]) -> "PlanArrays":
        """The arrays of resolved plans (``dp`` and ``gbs`` set, e.g. ``Job.plan``)."""
        plans = list(plans)
        for p in plans:
            if p.dp is None or p.gbs is None:
                raise SpecError("plan", p, "must be resolved (dp and gbs set; see make_job)")
        col = {f.name: [] for f in fields(cls)}
        resolved = {"etp": "expert_tp", "moe_imbalance": "imbalance",
                    "moe_capacity_factor": "capacity_factor", "dp_shard": "shard_dp"}
        from strategies.layout import layout_middle_most, layout_string_extremes
        for p in plans:
            ext = layout_string_extremes(p) or (np.nan,) * len(LAYOUT_STRING)
            for name, x in zip(LAYOUT_STRING, ext):
                col[name].append(x)
            col["layout_mid_most"].append(layout_middle_most(p))
            for name in col:
                if name in LAYOUT_STRING or name == "layout_mid_most":
                    continue
                if name == "account_slots":
                    col[name].append(bool(p.account_embedding and p.account_loss))
                    continue
                v = getattr(p, resolved.get(name, name))
                col[name].append(value_code(name, v))
        return cls(**col)

    @classmethod
    def of_plan(cls, plan: Plan) -> "PlanArrays":
        """One resolved plan as 0-d arrays (the estimate's results are then 0-d too)."""
        one = cls.from_plans([plan])
        return cls(**{f.name: getattr(one, f.name)[0] for f in fields(cls)})

    @classmethod
    def from_columns(cls, cols: Mapping[str, Any]) -> "PlanArrays":
        """From the search space's short columns (``tp pp dp cp ep mbs gbs vpp sched rc sp
        zero flash ogr opg tpo``; ``rcl rcu rcm lf ll acc fl mgs`` optional: all layers,
        block, the default modules, the even layout, one flush, the default group; ``etp imb
        cf epo disp cg route dw pad pgo ofm cpo`` optional: tp, the default imbalance, no
        dropping, no expert-parallel overlap, Megatron's alltoall dispatcher, no CUDA graph,
        random routing, the overlap's weight gradient delayed, no padding to capacity, no
        parameter gathers inside the optimizer step, no activation offloading, fine-grained
        or by layer)."""
        missing = [s for s in SHORT.values() if s not in cols and s not in OPTIONAL]
        if missing:
            raise SpecError("plan columns", sorted(cols), f"missing {', '.join(missing)}")
        extra = {name: cols[short] for name, short, _ in EXPERT_OPTIONAL if short in cols}
        if "dps" in cols:
            extra["dp_shard"] = cols["dps"]
        if "cpc" in cols:
            extra["cp_comm"] = cols["cpc"]
        if "cpk" in cols:
            extra["hierarchical_cp"] = cols["cpk"]
        return cls(**{name: cols[short] for name, short in SHORT.items() if short in cols},
                   **extra)

    def to_columns(self) -> dict[str, np.ndarray]:
        """The search space's short columns (integers and booleans), ``etp`` (resolved) among
        them as in every space; the other expert columns are left out (their defaults), and
        the exchange ``cpc``, ``pgo``, ``ofm`` and ``cpo`` where a plan names one."""
        n = np.shape(self.tp)
        cols = {short: (getattr(self, name).astype(bool) if getattr(self, name).dtype == bool
                        else (getattr(self, name) + np.zeros(n)).astype(np.int64))
                for name, short in (*SHORT.items(), ("etp", "etp"))}
        if np.any(self.cp_comm):
            cols["cpc"] = (self.cp_comm + np.zeros(n)).astype(np.int64)
        if np.any(self.hierarchical_cp != 1):
            cols["cpk"] = (self.hierarchical_cp + np.zeros(n)).astype(np.int64)
        if np.any(self.param_gather_with_optimizer):
            cols["pgo"] = self.param_gather_with_optimizer + np.zeros(n, dtype=bool)
        if np.any(self.offload_modules):
            cols["ofm"] = (self.offload_modules + np.zeros(n)).astype(np.int64)
        if np.any(self.cpu_offloading_num_layers):
            cols["cpo"] = (self.cpu_offloading_num_layers + np.zeros(n)).astype(np.int64)
        return cols


def value_code(name: str, v: Any) -> Any:
    """A Plan field's value as its array entry (codes for the string fields, 0 for None)."""
    if name == "schedule":
        return schedule_code(v)
    if name == "recompute":
        return RECOMPUTE_CODE[v]
    if name == "recompute_method":
        return METHOD_CODE[v] if v is not None else 0
    if name == "recompute_modules":
        return modules_mask(v) if v is not None else 0
    if name == "offload_modules":
        return offload_mask(v)
    if name == "moe_dispatcher":
        return DISPATCHERS.index(v)
    if name == "moe_routing":
        return ROUTINGS.index(v)
    if name == "cp_comm":
        return 0 if v is None else 1 + CP_COMMS.index(v)
    if name == "hierarchical_cp":
        return 1 if v is None else v
    return 0 if v is None and name in ("recompute_layers", "first_stage_layers",
                                       "last_stage_layers", "microbatch_group_size",
                                       "cpu_offloading_num_layers") else v


def as_plan_arrays(plans: PlanArrays | Mapping[str, Any]) -> PlanArrays:
    """``plans`` as ``PlanArrays`` (a mapping of short columns is converted)."""
    return plans if isinstance(plans, PlanArrays) else PlanArrays.from_columns(plans)


def rank_layers(num_layers: int, P: PlanArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                          np.ndarray, np.ndarray]:
    """``(first, mid, last, least_chunk, uneven)`` per plan: the transformer layers on
    pipeline rank 0, on each middle rank and on rank ``pp-1`` (all their chunks), the fewest
    layers any one model chunk holds, and whether the plan gives an uneven layout. The one
    rule the array estimate, the bound and the memory model read (``strategies.layout``
    builds the same layouts for one plan):

    * even: ``num_layers / pp`` on every rank, ``floor(num_layers / (pp·vpp))`` per chunk;
    * ``account_slots``: ``k = (num_layers + 2)/(pp·vpp)`` slots per chunk, the embedding
      one of rank 0's first chunk's and the loss one of the last virtual stage's, on the
      rank holding the LM head (``Schedule.head_rank_array``): ``k·vpp - 1`` layers on each
      end rank of the ring, ``k·vpp`` on the middle ones; on a V (head on rank 0) ``k·vpp - 2``
      on rank 0 and ``k·vpp`` on every other rank;
    * ``first/last_stage_layers`` ``f``, ``l``: the middle ranks share the rest evenly;
    * a mirrored schedule (DualPipe, ``pp > 1``: rank ``r`` holds stages ``r`` and
      ``pp-1-r``): per copy, each end rank ``(f + l)/2`` (``cost.stage.stage_params.copy_layers``), so
      twice it is what the rank holds and it is the layers a micro-batch crosses there on
      average.

    >>> pa = PlanArrays.from_plans([Plan(tp=1, pp=8, dp=1, gbs=8, vpp=8,
    ...                                  schedule="interleaved", account_embedding=True,
    ...                                  account_loss=True)])
    >>> [x.tolist() for x in rank_layers(126, pa)]
    [[15.0], [16.0], [15.0], [1.0], [True]]
    """
    pp, v = P.pp, P.vpp
    f, la, acc = P.first_stage_layers, P.last_stage_layers, P.account_slots
    given = (f > 0) | (la > 0)
    even = num_layers / pp
    k = (num_layers + 2) / (pp * v)
    ends = (f > 0).astype(float) + (la > 0)
    mid_fl = np.where(pp > ends, (num_layers - np.where(f > 0, f, 0.0)
                                  - np.where(la > 0, la, 0.0)) / np.maximum(pp - ends, 1), even)
    f_eff = np.where(f > 0, f, mid_fl)          # an end not given is a middle rank
    l_eff = np.where(la > 0, la, mid_fl)
    # a V (ZB-V, DualPipeV): the loss slot on rank 0 beside the embedding's
    v_head = (dispatch(P.schedule, "head_rank_array", pp, v) == 0) & (pp > 1)
    first = np.where(acc, k * v - 1 - v_head, np.where(given, f_eff, even))
    last = np.where(acc, k * v - 1 + v_head, np.where(given, l_eff, even))
    mid = np.where(acc, k * v, np.where(given, mid_fl, even))
    least = np.where(acc, k - 1, np.where(
        given, np.minimum(np.minimum(first, last), np.where(pp > 2, mid, first)) / v,
        np.floor(num_layers / (pp * v))))
    mirrored = attr_by_code(P.schedule, "mirrored").astype(bool) & (pp > 1)
    ends = (first + last) / 2
    first, last = np.where(mirrored, ends, first), np.where(mirrored, ends, last)
    return first, mid, last, least, acc | given
