"""The analytic arrays on a mixed cluster (node groups of different GPU types), and the rule by
which ranks of different GPU types running side by side make one step.

Ranks that run the same work on different GPU types meet at the gradient reduction: it
waits for the longest part before the optimizer, the step for the longest optimizer after
it (``synchronised_step``; the scalar estimate's ``_synchronised`` and ``_by_group`` read
it). Which type is slower is each type's own kernel times, not the peak: a GEMM's fixed time
(``cost.gemm_kernel.gemm_fixed_s``: none on A100, 4.7 us on H100) can make the H100 the slower
type on small GEMMs (docs/calibration.md §5.39).

``estimate_arrays_mixed`` scores the search's plans as the scalar estimate prices each one:
without pipelining (``pp = 1``, every rank holds the whole model) each GPU type's own run,
synchronised; pipelined plans the run on ``Cluster.gpu`` with its compute makespan replaced by
the real stages', each on the type it waits for (``mixed_stages.pipelined_mixed``, the scalar
``per_stage``/``per_chunk`` as arrays; models of one kind of layer).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from strategies.cost.system import SystemConfig
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.exchanges import by_exchange, exchange_rows
from strategies.estimate.terms.stages import bubble_share
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays, as_plan_arrays
from topologies.cluster import Cluster

# the fields scaled with the step (rates and utilisations); the others are the run's own
_RATES = ("mfu", "hfu", "tokens_per_s")


def synchronised_step(before: list, opt: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs side by side that meet at the gradient reduction: ``before[k]`` the seconds of run
    ``k`` before its optimizer, ``opt[k]`` its optimizer's (numbers or arrays, plan by plan).
    Returns (the index of the run with the longest part before the optimizer, the first on a
    tie; the step, that part plus the longest optimizer; the longest optimizer), seconds."""
    b = np.asarray(before, dtype=float)
    i = np.argmax(b, axis=0)
    longest = np.take_along_axis(b, i[None, ...], axis=0)[0] if b.ndim > 1 else b[i]
    most = np.max(np.asarray(opt, dtype=float), axis=0)
    return i, longest + most, most


def synchronised_runs(runs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """One step of ranks that run ``runs`` (analytic arrays of the same plans on different GPU
    types) side by side (``synchronised_step``): the step and the optimizer from the rule,
    every other array from the run with the longest part before the optimizer, its rates
    and utilisations scaled to the step, its bubble fraction its bubble over it; entries that are not per-plan arrays (the
    stage-cost record) from ``runs[0]`` (one plan: from that run)."""
    before = [np.asarray(r["step_time_s"], dtype=float) - np.asarray(r["optimizer"], dtype=float)
              for r in runs]
    i, step, opt = synchronised_step(before, [r["optimizer"] for r in runs])
    shape = np.shape(runs[0]["step_time_s"])

    def pick(key):
        return np.choose(i, [np.asarray(r[key], dtype=float) for r in runs])

    first = runs[int(i)] if np.ndim(i) == 0 else runs[0]     # one plan: its own run's
    out = {k: (pick(k) if isinstance(v, np.ndarray) and v.shape == shape else first[k])
           for k, v in runs[0].items()}
    scale = out["step_time_s"] / step
    out.update({"step_time_s": step, "optimizer": opt,
                "bubble_fraction": bubble_share(out["bubble"], step)},
               **{k: out[k] * scale for k in _RATES})
    return out


def slowest_gpu(gpus, seconds: Callable[[Any], float]):
    """The GPU type among ``gpus`` whose own ``seconds(gpu)`` for a piece of work (a pipeline
    stage's chunks per micro-batch) is longest, the first on a tie: the one the ranks that
    share that work wait for. Not the lowest peak: on small kernels the fixed GEMM time can
    make the H100 slower than the A100 (docs/calibration.md §5.39)."""
    gpus = list({g.name: g for g in gpus}.values())
    if len(gpus) == 1:
        return gpus[0]
    t = [seconds(g) for g in gpus]
    return gpus[max(range(len(gpus)), key=t.__getitem__)]


def gpu_types(cl: Cluster) -> list:
    """The GPU types of ``cl``'s node groups, once each, in node order."""
    return list({g.gpu.name: g.gpu for g in cl.groups}.values())


def estimate_arrays_mixed(m: ModelSpec, cl: Cluster, dtype: str,
                          P: PlanArrays | Mapping[str, Any],
                          framework: FrameworkProfile | str | None = None,
                          system: SystemConfig | None = None) -> dict[str, Any]:
    """``analytic.estimate_arrays`` of the plans ``P`` on ``cl``; on a mixed cluster the plans
    without pipelining priced from every GPU type's run (``synchronised_runs``), as the
    scalar estimate prices one. A uniform cluster: ``estimate_arrays`` unchanged."""
    P = as_plan_arrays(P)
    if not cl.uniform and exchange_rows(P) is not None:   # different K/V exchanges: apart
        return by_exchange(P, lambda Q: estimate_arrays_mixed(m, cl, dtype, Q, framework,
                                                              system))
    base = estimate_arrays(m, cl, dtype, P, framework, system)
    if cl.uniform or len(gpu_types(cl)) < 2:
        return base
    # each type's run, in node order as the scalar estimate takes them (the first of equal
    # parts wins); the run on ``Cluster.gpu`` is ``base``
    runs = [base if g == cl.gpu else estimate_arrays(m, cl, dtype, P, framework, system,
                                                     None, g) for g in gpu_types(cl)]
    sync = synchronised_runs(runs)
    single = np.asarray(P.pp) == 1
    out = dict(base)
    for k, v in sync.items():
        if isinstance(v, np.ndarray) and v.shape == np.shape(base["step_time_s"]):
            out[k] = np.where(single, v, base[k])
    sc = base["stage_costs"]
    if not sc.by_kind and not np.all(single):
        # pipelined: each stage on the GPU type it waits for (``mixed_stages``); the stage
        # costs of each type as the scalar estimate reads them (``cost.stage.stage_costs``:
        # the cluster as given, not its degraded view)
        from strategies.cost.stage import stage_cost_arrays
        from strategies.estimate.terms.faults import degraded_view
        from strategies.estimate.mixed_stages import pipelined_mixed
        same = degraded_view(cl) is cl
        costs = {g.name: (r["stage_costs"] if same else stage_cost_arrays(
            m, cl, dtype, P, framework, system, g)) for g, r in zip(gpu_types(cl), runs)}
        piped = pipelined_mixed(m, cl, P, base, costs)
        for k, v in piped.items():
            out[k] = np.where(single, out[k], v.reshape(np.shape(out[k])))
    return out
