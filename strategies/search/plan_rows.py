"""The space's rows as plans: the column names (``COLUMNS``), a row as its resolved ``Plan``
(``plan_of``), a plan's canonical key (``plan_key``, which ``parse_plan`` reads back; the
switches of ``SWITCH_KEYS`` only where they differ from the default) and the columns of given
plans (``columns_from_plans``)."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from strategies.cost.offload import MODULES as OFFLOAD_MODULES
from strategies.cost.offload import offloads
from strategies.cost.recompute import METHODS, MODULES, has_module
from strategies.plan import DISPATCHERS, Plan
from strategies.plan.choices import CP_COMMS, ROUTINGS
from strategies.plan.parse import tp_overlap_default
from strategies.plan_arrays import RECOMPUTE_CODE, PlanArrays
from strategies.schedules import schedule_of_code

RC_NAME = {v: k for k, v in RECOMPUTE_CODE.items()}
#: the single-value plan fields ``--fix`` carries into every candidate, with their short
#: column (``plan_arrays.EXPERT_OPTIONAL``, ``SHORT``): the estimate, the bound and the
#: simulator read each from the plan
SWITCH_KEYS = {"moe_dispatcher": "disp", "ep_overlap": "epo", "delay_wgrad": "dw",
               "tp_comm_overlap": "tpo",
               "cuda_graph": "cg", "moe_routing": "route", "moe_imbalance": "imb",
               "moe_capacity_factor": "cf", "moe_pad_to_capacity": "pad", "flash_attn": "flash",
               "overlap_grad_reduce": "ogr", "overlap_param_gather": "opg", "cp_comm": "cpc",
               "param_gather_with_optimizer": "pgo", "offload_modules": "ofm",
               "cpu_offloading_num_layers": "cpo"}
#: the uneven pipeline layout's fields (``layouts``: the ``lf``, ``ll`` and ``acc`` columns)
LAYOUT_KEYS = ("first_stage_layers", "last_stage_layers", "account_embedding", "account_loss")
COLUMNS = ("tp", "pp", "dp", "cp", "ep", "etp", "mbs", "gbs", "vpp", "sched", "rc", "sp",
           "zero", "flash", "ogr", "opg", "tpo", "rcl", "rcu", "rcm", "lf", "ll", "acc",
           "disp", "epo", "dw", "cg", "route", "imb", "cf", "pad", "fl", "mgs", "dps", "cpc",
           "cpk", "pgo", "ofm", "cpo")


def plan_of(cols: Mapping[str, np.ndarray], i: int) -> Plan:
    """The resolved ``Plan`` of row ``i``."""
    c = {k: cols[k][i].item() for k in COLUMNS if k in cols}
    lf, ll, acc = int(c.get("lf", 0)), int(c.get("ll", 0)), bool(c.get("acc", False))
    etp = int(c.get("etp", c["tp"]))
    cf = float(c.get("cf", np.inf))
    cpc = int(c.get("cpc", 0))      # 0: the stack's own exchange (PlanArrays.cp_comm)
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
                param_gather_with_optimizer=bool(c.get("pgo", False)),
                offload_modules=tuple(n for n in OFFLOAD_MODULES if offloads(c.get("ofm", 0), n))
                or None,
                cpu_offloading_num_layers=int(c.get("cpo", 0)) or None,
                recompute_layers=int(c["rcl"]) or None,
                recompute_method=METHODS[c["rcu"]] if c["rcl"] else None,
                recompute_modules=tuple(n for n in MODULES if has_module(c["rcm"], n))
                or None, first_stage_layers=lf or None, last_stage_layers=ll or None,
                account_embedding=acc, account_loss=acc,
                cp_comm=CP_COMMS[cpc - 1] if cpc else None,
                hierarchical_cp=int(c["cpk"]) if int(c.get("cpk", 1)) > 1 else None)


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
            + _switch_key(plan, defaults or {})
            + (f",hierarchical_cp={plan.hierarchical_cp}" if plan.hierarchical_cp is not None
               else ""))


def _switch_key(plan: Plan, defaults: Mapping[str, Any]) -> str:
    """The key's tail for ``etp`` (where it is not ``tp``) and the ``SWITCH_KEYS`` whose value
    is not ``Plan``'s default: two plans that differ only in them have different keys (a
    results file's ``--resume`` never mixes them), and ``parse_plan`` reads them back."""
    out = f",etp={plan.etp}" if plan.etp is not None and plan.etp != plan.tp else ""
    for k in SWITCH_KEYS:
        v = getattr(plan, k)
        default = defaults.get(k, SWITCH_DEFAULTS[k])
        if k == "tp_comm_overlap":
            default = tp_overlap_default(default, plan.tp, plan.sp)
        if v != default:
            out += f",{k}=" + (str(v).lower() if isinstance(v, bool)
                               else "+".join(v) if isinstance(v, tuple) else f"{v}")
    return out


#: ``Plan``'s own value of each ``SWITCH_KEYS`` field (a key leaves it out)
SWITCH_DEFAULTS = {k: getattr(Plan(), k) for k in SWITCH_KEYS}


def columns_from_plans(plans: Iterable[Plan]) -> dict[str, np.ndarray]:
    """Plan arrays (``COLUMNS``) of resolved plans."""
    return PlanArrays.from_plans(plans).to_columns()
