"""What the folding tests share: their clusters and jobs, and the check that the folded run
equals the unfolded one bit for bit."""
from __future__ import annotations

from dataclasses import replace

from simulator.fold import FoldSpec
from simulator.simulate import simulate
from strategies.job import Job, make_job
from strategies.plan.parse import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

H800 = cluster_preset("hgx-h800", 4)
CLUSTERS = {"h800x4": H800,
            "h800x1": cluster_preset("hgx-h800", 1),
            "spine": replace(H800, nodes_per_leaf=1),      # every route between nodes: a spine
            "fat_tree": replace(cluster_preset("dgx-h100", 4), nodes_per_leaf=2,
                                inter_node_topology="fat_tree"),
            "rail_only": replace(cluster_preset("dgx-h100", 2), inter_node_topology="rail_only"),
            "rail_only4": replace(cluster_preset("dgx-h100", 4),
                                  inter_node_topology="rail_only")}


def fold_job(plan: str, cluster: str = "h800x4", framework: str | None = None,
             model: str = "llama3-8b") -> Job:
    """The job of ``model`` with ``plan`` (plan text) on ``CLUSTERS[cluster]``."""
    return make_job(model_preset(model), CLUSTERS[cluster], parse_plan(plan),
                    framework=framework)

FIGURES = ("step_time_s", "engine_end_s", "breakdown_s", "exposed_comm_s", "overlapped_comm_s",
           "bubble_fraction", "bubble_fraction_by_stage", "breakdown_s_by_stage",
           "idle_fraction_by_stage",
           "critical_rank", "peak_activation_bytes")


def assert_folded_is_full(job: Job, spec: FoldSpec) -> None:
    """``simulate(job)`` simulates ``spec``'s representatives and equals the unfolded run:
    the same records, every rank its representative's timeline, the same figures."""
    folded, full = simulate(job), simulate(job, fold=False)
    assert folded.simulated_ranks == list(spec.reps) and len(spec.reps) < len(full.simulated_ranks)
    assert folded.metrics["fold_note"] == spec.note
    # the same records (ranks that finish at one instant are listed in event order)
    mine = set(folded.simulated_ranks)
    assert sorted(folded.records) == sorted(r for r in full.records if r.rank in mine)
    # every rank runs its representative's timeline
    by: dict[int, list] = {}
    for r in full.records:
        by.setdefault(r.rank, []).append(r._replace(rank=0, peer=0))
    for rep, ranks in folded.rank_map.items():
        assert all(sorted(by[q]) == sorted(by[rep]) for q in ranks)
    for k in FIGURES:
        assert folded.metrics[k] == full.metrics[k], k
    for k in ("activation_memory", "rank_ends_s"):
        assert folded.metrics[k] == {r: full.metrics[k][r] for r in folded.simulated_ranks}
