#!/usr/bin/env python
"""The alltoall dispatcher's count all-gather and device-to-host synchronisation on the
drop-and-pad MoE rows: what the dropless path would pay, and what the model charges them
(docs/calibration.md §5.114 found them charged, §5.125 took them off).

Run (a few seconds, analytic only):

    python experiments/moe_drop_pad_sync.py        # Markdown table on stdout

Megatron-Core's ``MoEAlltoAllTokenDispatcher.preprocess`` (``token_dispatcher.py``,
``core_v0.10.0`` to ``core_v0.17.0``) returns early under ``drop_and_pad``
(``moe_pad_expert_input_to_capacity`` with a capacity factor): the tokens per expert are the
capacity, known on the host, so it neither all-gathers the counts over ``tp_ep_group`` nor
moves its ``cuda_sync_point`` off ``"no_sync"``. NeMo 2's ``MegatronTokenDropCallback`` sets
both on the rows that state ``moe_capacity_factor`` 1.0 and ``moe_pad_to_capacity`` (§5.73,
§5.125). For every such row of ``FILES``: the sync (``moe_time.moe_sync_time``) and the count
all-gather (``comm.dispatcher_metadata_time``'s) per MoE layer forward as the dropless path
pays them (``pad`` off), their sum over the step's MoE layer forwards on the busiest rank as a
share of the estimated step, and what the model charges the row (``pad`` as the plan says:
``moe_bytes.count_exchange``).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import comm, ep_dispatch, moe_bytes, moe_time  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

FILES = ("strategies/reference/data/dgxc_2505.json",
         "strategies/reference/data/nemo_performance_25.json")


def drop_pad_rows(paths: tuple[str, ...] = FILES) -> list[tuple]:
    """``(id, ep, sync s, count all-gather s, share of the estimated step %, charged s)`` per
    MoE layer forward of every alltoall row of ``paths`` that states a capacity factor: the
    sync and the gather the dropless path pays, and the two as the model charges the row's
    plan (0 where it pads to capacity)."""
    out = []
    for path in paths:
        for entry in load_reference(path):
            job = case_from_entry(entry).job
            if job is None or not job.model.is_moe or job.plan.moe_capacity_factor is None:
                continue
            P = job.plan
            if P.moe_dispatcher != "alltoall":
                continue
            m = job.model.of_kind("moe") if job.model.layer_counts().get("dense") else job.model
            etp = P.etp or P.tp
            counts, _ = ep_dispatch.dispatcher_metadata_bytes(m, P.mbs, P.tp, P.cp, P.ep, etp)
            gather = float(comm.collective_time("allgather", counts, etp * P.ep, 1,
                                                job.cluster)) if P.ep > 1 else 0.0
            sync = float(moe_time.moe_sync_time(m, job.framework, job.cluster.gpu, 0))
            charged = float(moe_time.moe_sync_time(m, job.framework, job.cluster.gpu, 0,
                                                   P.moe_pad_to_capacity)) \
                + gather * float(moe_bytes.count_exchange(P.moe_pad_to_capacity))
            est = estimate(job)
            n = job.model.num_moe_layers / P.pp * est.num_microbatches
            out.append((entry["id"], P.ep, sync, gather,
                        100.0 * n * (sync + gather) / est.step_time_s, charged))
    return out


def main() -> None:
    print("| run | ep | sync µs | count all-gather µs | share of the estimated step | "
          "charged µs |")
    print("|---|---|---|---|---|---|")
    for rid, ep, sync, gather, share, charged in drop_pad_rows():
        print(f"| {rid} | {ep} | {1e6 * sync:.1f} | {1e6 * gather:.1f} | {share:.2f} % | "
              f"{1e6 * charged:.1f} |")


if __name__ == "__main__":
    main()
