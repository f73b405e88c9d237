"""Which single slow GPU or link hurts a plan most? (docs/faults.md)

Candidates are one GPU per symmetry class of the healthy job (``simulator.fold``: ranks of a
class run identical timelines on identical links, so slowing any one of them costs the
same), each tried as a straggler of ``factor`` and, for its links, at ``1/link_factor`` of
the bandwidth: its NVLink/NVSwitch link (a switch node) and its NIC link (several nodes).
So a plan on 1,024 GPUs that folds to 16 classes costs at most 32 simulations, not 3,000.

``sensitivity(job)`` returns the healthy step time and one row per candidate, worst first:
``fault`` (the ``--straggler``/``--degrade`` text), ``kind``, ``gpu``, ``stands_for`` (how
many GPUs share its class), ``step_time_s`` and ``slowdown`` (the fraction the step grows).
Seconds throughout.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from simulator.fold import fold_spec
from simulator.simulate import simulate
from strategies.errors import SpecError
from strategies.job import Job
from topologies.faults import Faults, check_factor


def candidates(job: Job, factor: float, link_factor: float) -> list[dict[str, Any]]:
    """The faults to try: ``(text, kind, gpu, stands_for, Faults)`` as dicts."""
    if job.cluster.faults:
        raise SpecError("cluster.faults", job.cluster.faults.to_dict(),
                        "the sensitivity study starts from a healthy cluster; drop the faults")
    check_factor("--factor", factor)
    check_factor("--link-factor", link_factor)
    spec = fold_spec(job)
    members = spec.rank_map()
    cl = job.cluster
    out = []
    for r in spec.reps:
        n = len(members[r])
        out.append({"fault": f"--straggler {r}={factor:g}", "kind": "straggler", "gpu": r,
                    "stands_for": n, "faults": Faults(((r, factor),))})
        if cl.intra_node_topology == "switch" and cl.gpus_per_node > 1:
            link = f"{r}-nvswitch:{r // cl.gpus_per_node}"
            out.append({"fault": f"--degrade {link}={link_factor:g}", "kind": "nvlink",
                        "gpu": r, "stands_for": n, "faults": Faults((), ((link, link_factor),))})
        if cl.num_nodes > 1:
            out.append({"fault": f"--degrade nic:{r}={link_factor:g}", "kind": "nic", "gpu": r,
                        "stands_for": n,
                        "faults": Faults((), ((f"nic:{r}", link_factor),))})
    return out


def sensitivity(job: Job, factor: float = 1.5, link_factor: float = 4.0) -> dict[str, Any]:
    """Simulate the healthy job and every candidate fault (see the module docstring)."""
    base = simulate(job)
    rows = []
    for c in candidates(job, factor, link_factor):
        faulty = replace(job, cluster=job.cluster.with_faults(c.pop("faults")))
        t = simulate(faulty).step_time_s
        rows.append({**c, "step_time_s": t, "slowdown": t / base.step_time_s - 1.0})
    rows.sort(key=lambda r: (-r["slowdown"], r["fault"]))
    return {"healthy_step_time_s": base.step_time_s, "factor": factor,
            "link_factor": link_factor, "classes": len(fold_spec(job).reps),
            "fold_note": base.metrics["fold_note"], "rows": rows}
