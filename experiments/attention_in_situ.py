"""The attention rate published runs imply, against the catalog's and a FlashAttention-1-class
kernel's (docs/calibration.md §3.8).

For each unpipelined run whose id matches ``--match``: the analytic step time, the share of it
the attention core takes in the model, and the attention rate the run implies if everything
else is as the model charges it: executed attention FLOPs per step (forward, a full
recompute's second forward, backward = 2.5x forward) over (measured step - the model's
non-attention seconds). Rates are forward + backward combined, in TFLOP/s and as a fraction of
the bf16 peak. ``fa1 err`` is the run's error if its attention ran at ``FA1_OVER_FA2`` (0.43, the
FlashAttention-1 / FlashAttention-2 throughput ratio of the FlashAttention-2 paper's A100 and
H100 figures) times the modelled kernel's rate. The summary gives, per family
(``validate_published.family``) and over all matched runs, the MAPE as modelled and with that
rate for the runs whose source states a FlashAttention-1-class kernel (``plan.attn_impl``).

Run: python experiments/attention_in_situ.py [--match REGEX]
"""
from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.validate_published import family  # noqa: E402
from experiments._report import check_id_filter  # noqa: E402
from simulator.studies.validate import load_cases, mape  # noqa: E402
from strategies.cost import attention_counts, attention_time, overlap_clock  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.text import attention_kernel  # noqa: E402

FA1_OVER_FA2 = 0.43   # A100 0.44, H100 0.42: causal, head dim 128, sequences 2k-16k


def row(case) -> tuple[tuple[str, ...], float, float] | None:
    """The printed columns, the modelled error and the error with a FlashAttention-1-class
    rate where the source states that kernel (percent)."""
    j = case.job
    m, p, fw = j.model, j.plan, j.framework
    if p.pp != 1 or not p.flash_attn:
        return None
    gpu = j.cluster.groups[0].gpu
    step = estimate(j).step_time_s
    mb = j.num_microbatches
    fwd, bwd = attention_time.attention_time_fwd(m, p.mbs, p.tp, p.cp, True, gpu, 1.0, fw, j.system)
    passes = 2 if p.recompute == "full" else 1
    slow = float(overlap_clock.overlap_slowdown(
        p.tp, p.tp_comm_overlap, p.cp, p.zero,
        overlap_clock.dp_overlaps_whole_step(p.dp, mb, p.overlap_grad_reduce)))
    attn = slow * m.num_layers * mb * (passes * fwd + bwd)
    flops = m.num_layers * mb * (passes + 2.5) \
        * attention_counts.attn_core_flops_fwd(m, p.mbs, p.tp, p.cp, True)
    left = case.measured_step_s - (step - attn)
    implied = flops / left if left > 0 else float("nan")
    modelled = flops / (attn / slow)
    fa1_step = step + attn * (1 / FA1_OVER_FA2 - 1)
    peak = gpu.peak("bf16")
    err = 100 * (step / case.measured_step_s - 1)
    fa1_err = 100 * (fa1_step / case.measured_step_s - 1)
    stated = attention_kernel((case.raw.get("plan") or {}).get("attn_impl")) or "-"
    cols = (case.id, f"{fw.attention_kernel}/{stated}", f"{attn / step:.2f}", f"{err:+.1f} %",
            f"{modelled / 1e12:.0f} ({modelled / peak:.2f})",
            f"{implied / 1e12:.0f} ({implied / peak:.2f})", f"{fa1_err:+.1f} %")
    return cols, err, fa1_err if stated == "fa1" else err


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--match", default=r"^mosaic_", help="regex on the run id")
    args = ap.parse_args(argv)
    check_id_filter("attention_in_situ", "--match", args.match, regex=True)
    head = ("run", "kernel/stated", "attn share", "error", "modelled TF/s", "implied TF/s",
            "fa1 err")
    out = [(c.id, r) for c in load_cases(tiers=None)
           if c.job is not None and re.search(args.match, c.id) for r in [row(c)] if r]
    rows = [r[0] for _, r in out]
    w = [max(len(x) for x in col) for col in zip(head, *rows)]
    for r in (head, *rows):
        print("  ".join(x.ljust(n) for x, n in zip(r, w)))
    print()
    fams: dict[str, list] = {}
    for ident, r in out:
        fams.setdefault(family(ident), []).append(r)
    fams["all matched"] = [r for _, r in out]
    print("family  runs  MAPE as modelled  MAPE with the FA1-class rate where stated")
    for f, rs in fams.items():
        print(f"{f}  {len(rs)}  {mape([r[1] for r in rs]):.1f} %  {mape([r[2] for r in rs]):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
