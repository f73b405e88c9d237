"""The attention rate published runs imply, against the catalog's and a FlashAttention-1-class
kernel's (docs/calibration.md §3.8).

For each unpipelined run whose id matches ``--match``: the analytic step time, the share of it
the attention core takes in the model, and the attention rate the run implies if everything
else is as the model charges it: executed attention FLOPs per step (forward, a full
recompute's second forward, backward = 2.5x forward) over (measured step - the model's
non-attention seconds). Rates are forward + backward combined, in TFLOP/s and as a fraction of
the bf16 peak. ``fa1 err`` is the run's error if its attention ran at ``FA1_OVER_FA2`` (0.43, the
FlashAttention-1 / FlashAttention-2 throughput ratio of the FlashAttention-2 paper's A100 and
H100 figures) times the modelled kernel's rate.

Run: python experiments/attention_in_situ.py [--match REGEX]
"""
from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import compute, counts  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402

FA1_OVER_FA2 = 0.43   # A100 0.44, H100 0.42: causal, head dim 128, sequences 2k-16k


def row(case) -> tuple[str, ...] | None:
    j = case.job
    m, p, fw = j.model, j.plan, j.framework
    if p.pp != 1 or not p.flash_attn:
        return None
    gpu = j.cluster.groups[0].gpu
    step = estimate(j).step_time_s
    mb = j.num_microbatches
    fwd, bwd = compute.attention_time_fwd(m, p.mbs, p.tp, p.cp, True, gpu, 1.0, fw, j.system)
    passes = 2 if p.recompute == "full" else 1
    slow = float(compute.overlap_slowdown(
        p.tp, p.tp_comm_overlap, p.cp, p.zero,
        compute.dp_overlaps_whole_step(p.dp, mb, p.overlap_grad_reduce)))
    attn = slow * m.num_layers * mb * (passes * fwd + bwd)
    flops = m.num_layers * mb * (passes + 2.5) * counts.attn_core_flops_fwd(m, p.mbs, p.tp,
                                                                            p.cp, True)
    left = case.measured_step_s - (step - attn)
    implied = flops / left if left > 0 else float("nan")
    modelled = flops / (attn / slow)
    fa1_step = step + attn * (1 / FA1_OVER_FA2 - 1)
    peak = gpu.peak("bf16")
    return (case.id, fw.attention_kernel, f"{attn / step:.2f}",
            f"{100 * (step / case.measured_step_s - 1):+.1f} %",
            f"{modelled / 1e12:.0f} ({modelled / peak:.2f})",
            f"{implied / 1e12:.0f} ({implied / peak:.2f})",
            f"{100 * (fa1_step / case.measured_step_s - 1):+.1f} %")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--match", default=r"^mosaic_", help="regex on the run id")
    args = ap.parse_args(argv)
    head = ("run", "kernel", "attn share", "error", "modelled TF/s", "implied TF/s", "fa1 err")
    rows = [r for c in load_cases(tiers=None)
            if c.job is not None and re.search(args.match, c.id) for r in [row(c)] if r]
    w = [max(len(x) for x in col) for col in zip(head, *rows)]
    for r in (head, *rows):
        print("  ".join(x.ljust(n) for x, n in zip(r, w)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
