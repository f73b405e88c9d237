"""DualPipe's end ranks: how long the rank that holds the embedding and the LM head idles.

Under DualPipe rank 0 holds stages 0 and p-1 (and rank p-1 the same two), so the two end ranks
run the embedding of half the micro-batches and the LM head (with the MTP module) of the other
half: they are the slowest ranks. The estimate's span is ``max(m·t_max, m·t_fill +
span_excess)`` (``strategies.schedules.dualpipe.DualPipe.pipeline_span``): exact for balanced
ranks, and no idle time at all on an end rank once ``m·t_max`` is the larger. This script runs
DualPipe's per-rank order with free communication (``strategies.schedules.analysis.
free_comm_ranks``, each chunk's own F, B, W) on the stage times of the DeepSeek-V3 report's
run as validate builds it (``strategies.reference``, case ``deepseekv3_report_h800_2048``:
4 layers per stage, compute and recompute only, no communication), with the head's cost
scaled, and prints rank 0's busy and idle seconds per step.

    python experiments/dualpipe_end_ranks.py
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASE_ID = "deepseekv3_report_h800_2048"


def main() -> int:
    from strategies.cost.stage import stage_costs
    from strategies.reference.cases import DATA, case_from_entry, load_reference
    from strategies.schedules.analysis import free_comm_ranks
    entries = load_reference(os.path.join(os.path.dirname(DATA), "published_2026.json"))
    job = case_from_entry(next(c for c in entries if c["id"] == CASE_ID), entries).job
    sc, pp = stage_costs(job), job.plan.pp
    n = job.model.num_layers // pp
    f, b, w = (n * sc.layer_fwd, n * (sc.layer_bwd + sc.layer_recompute), n * sc.layer_wgrad)
    print(f"{job.model.name} {job.plan.short()}: per stage F {1e3 * f:.1f} ms, B {1e3 * b:.1f} "
          f"ms (W {1e3 * w:.1f} ms); LM head with MTP F {1e3 * sc.head_fwd:.1f} ms, B "
          f"{1e3 * sc.head_bwd:.1f} ms")
    print("head scale   m   rank 0 busy s   span s   rank 0 idle s")
    for scale in (0.0, 0.5, 1.0, 2.0):
        head = [f + scale * sc.head_fwd, b + scale * sc.head_bwd, w]
        embed = [f + scale * sc.embedding_fwd, b + scale * sc.embedding_bwd, w]
        mid = [f, b, w]
        # DualPipe's chunk 0 is the rank's own stage, chunk 1 stage p-1-r
        times = [[embed, head] if r == 0 else [head, embed] if r == pp - 1 else [mid, mid]
                 for r in range(pp)]
        for m in (2 * pp, job.num_microbatches):
            spans = free_comm_ranks("dualpipe", pp, m, 1, f, b, t_w=w, chunk_times=times)
            end = max(s.end for s in spans)
            print(f"{scale:10.1f} {m:4d} {spans[0].busy:15.3f} {end:8.3f} "
                  f"{end - spans[0].busy:15.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
