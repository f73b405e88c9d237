"""ZeRO-2 where ZeRO-1 would do: each ZeRO-2 row's ZeRO-1 twin (``zero1_twins``) and whether
the estimate ranks the ZeRO-2 plan no faster than its twin (``zero2_slower``: the rule
``zero2_dominated``)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from strategies.cost.comm.catalog import kept_links
from strategies.cost.system import SystemConfig
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays
from strategies.stacks.profile import FrameworkProfile
from topologies.cluster import Cluster


def zero1_twins(c: dict[str, np.ndarray], memory: Callable[[dict], np.ndarray], limit: float,
                runs_zero1: bool
                ) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, np.ndarray | None]:
    """Each ZeRO-2 row's ZeRO-1 twin: ``(rows, twins, fits, twin peaks)``, the rows of ``c``
    with ZeRO-2, their columns with ZeRO-1, whether each twin fits under ``limit`` bytes
    (``memory``: columns -> peak bytes) and the twins' peaks (None where none was priced). A
    ZeRO-2 plan is dominated by a ZeRO-1 twin only where the stack runs ZeRO-1
    (``runs_zero1``; torchtitan's FSDP2 and Composer's FSDP have none): else no twin fits."""
    z2 = np.flatnonzero(c["zero"] == 2)       # each ZeRO-2 row's ZeRO-1 twin (rows only)
    twin = {k: v[z2] for k, v in c.items()}
    twin["zero"] = np.ones(len(z2), dtype=c["zero"].dtype)
    fits = np.zeros(len(z2), bool)
    twin_peak = None
    if len(z2) and runs_zero1:
        twin_peak = memory(twin)
        fits = twin_peak <= limit
    return z2, twin, fits, twin_peak


def zero2_slower(model: ModelSpec, cluster: Cluster, dtype: str,
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
    with kept_links():          # the twins' groups are the rows': their link terms once
        t2, t1 = (estimate_arrays_mixed(model, cluster, dtype, PlanArrays.from_columns(x),
                                        framework, system)["step_time_s"] for x in (z2, z1))
    return np.asarray(t2) >= np.asarray(t1)
