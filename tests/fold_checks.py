"""The check the folding tests share: the folded run equals the unfolded one bit for bit."""
from __future__ import annotations

from simulator.fold import FoldSpec
from simulator.simulate import simulate
from strategies.job import Job

FIGURES = ("step_time_s", "engine_end_s", "breakdown_s", "exposed_comm_s", "overlapped_comm_s",
           "bubble_fraction", "bubble_fraction_by_stage", "idle_fraction_by_stage",
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
