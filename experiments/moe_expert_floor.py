#!/usr/bin/env python
"""Implied time per MoE layer and micro-batch against the experts each GPU holds, on the
published Megatron-Bridge MoE rows (docs/calibration.md §5.25).

Run (a few seconds, analytic only):

    python experiments/moe_expert_floor.py        # Markdown table on stdout

For every MoE row of ``megatron_bridge_2604.json`` and ``published_2026.json`` that resolves:
its GPU, dispatcher, whether its recipe captures parts of each layer in CUDA graphs, the
micro-batch, the local experts ``E/ep``, the model's forward + backward time of one MoE layer
for one micro-batch (``moe_residuals.residual_rows``), the time the estimate misses per MoE
layer and micro-batch, their sum (the time the measured step implies per layer and
micro-batch) and that sum per local expert. Rows sorted by local experts. Nothing is fitted:
the table only shows where the misses fall.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.moe_residuals import FILES, residual_rows  # noqa: E402
from strategies.reference.bridge_recipes import recipe_for  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402


def floor_rows() -> list[tuple]:
    """``(id, GPU, dispatcher, graphs, mbs, local experts, model ms, missed ms, implied ms,
    implied ms per local expert, error %)`` of every MoE row of ``FILES``, by local experts."""
    out = []
    for path in FILES:
        entries = {e["id"]: e for e in load_reference(path)}
        for rid, gpu, _dtype, mbs, _meas, _est, err, missed, layer in residual_rows(path):
            job = case_from_entry(entries[rid]).job
            m, p = job.model, job.plan
            local = m.num_experts // p.ep
            r = recipe_for(entries[rid])
            graphs = "+".join(r.cuda_graph_scope) if r and r.cuda_graph_scope else "none"
            disp = p.moe_dispatcher + (" + overlap" if p.ep_overlap else "")
            implied = layer + missed
            out.append((rid, gpu, disp, graphs, mbs, local, layer, missed, implied,
                        implied / local, err))
    return sorted(out, key=lambda r: (r[5], r[0]))


def main() -> int:
    print("| run | GPU | dispatcher | CUDA graphs (recipe) | mbs | local experts | model ms "
          "| missed ms | implied ms | implied ms per local expert | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (rid, gpu, disp, graphs, mbs, local, layer, missed, implied, per, err) in floor_rows():
        print(f"| {rid} | {gpu} | {disp} | {graphs} | {mbs} | {local} | {layer:.2f} | "
              f"{missed:.2f} | {implied:.2f} | {per:.2f} | {err:+.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
