#!/usr/bin/env python
"""What NeMo's DeepSeek-V3 recipe ran, fact by fact, behind docs/calibration.md §5.44: the
analytic step of dgxc_2505.json's five DeepSeek-V3 rows (2 on H100, 3 on GB200) as the facts
read from the recipe's source are added one at a time, and the miss left per layer and
micro-batch.

    python experiments/dgxc_deepseek_facts.py

Each row is taken from the committed file (which holds every fact, written by
``experiments/transcribe_dgxc.py``) and the facts are removed, then put back cumulatively:

1. ``none``: the row as §5.18 ran it (recompute ``core_attn`` by Megatron-Core's default,
   the stack's TP overlap, no multi-token prediction, the layers balanced over the stages,
   fused attention);
2. ``+recompute_modules``: the module launch.sh names (``mla_up_proj`` on H100);
3. ``+tp_comm_overlap=false``: NeMo's script turns the TP overlap off;
4. ``+mtp+stages``: one MTP layer and the script's first/last stage layer counts;
5. ``+unfused attention``: Transformer Engine's ``UnfusedDotProductAttention`` (GB200 only);
   ``(dropout bytes)``: the same with the attention dropout's score bytes charged although
   the model has none (``counts.DROPOUT_SCORE_BYTES_*``, the time model before §5.44).

The last column is the measured step minus the full estimate over the layer-micro-batches
of the busiest stage (micro-batches per pipeline x its layers). Nothing is fitted.
"""
from __future__ import annotations

import contextlib
import copy
import os
import sys
from typing import Any, Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import attention_counts  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

FILE = os.path.join("strategies", "reference", "data", "dgxc_2505.json")
STEPS = ("none", "+recompute_modules", "+tp_comm_overlap=false", "+mtp+stages",
         "+unfused attention")


def with_facts(row: dict[str, Any], upto: int) -> dict[str, Any]:
    """``row`` with the first ``upto`` facts of ``STEPS[1:]`` kept, the rest removed."""
    r = copy.deepcopy(row)
    pl, hf = r["plan"], r["model"]["hf_config"]
    if upto < 1:
        pl.pop("recompute_modules", None)
    if upto < 2:
        pl.pop("tp_comm_overlap", None)
    if upto < 3:
        pl.pop("first_stage_layers", None)
        pl.pop("last_stage_layers", None)
        hf["num_nextn_predict_layers"] = 0
    if upto < 4:
        pl.pop("flash_attn", None)
    return r


@contextlib.contextmanager
def dropout_bytes_charged() -> Iterator[None]:
    """The unfused path charging the dropout's score bytes to a model without dropout."""
    saved = attention_counts.DROPOUT_SCORE_BYTES_FWD, attention_counts.DROPOUT_SCORE_BYTES_BWD
    attention_counts.DROPOUT_SCORE_BYTES_FWD = attention_counts.DROPOUT_SCORE_BYTES_BWD = 0.0
    try:
        yield
    finally:
        attention_counts.DROPOUT_SCORE_BYTES_FWD, attention_counts.DROPOUT_SCORE_BYTES_BWD = saved


def step_s(row: dict[str, Any], rows: list[dict[str, Any]]) -> float:
    return float(estimate(case_from_entry(row, rows).job).step_time_s)


def main() -> int:
    rows = load_reference(FILE)
    ds = [r for r in rows if "_deepseek_v3_" in r["id"]]
    print("| row | measured s | " + " | ".join(STEPS) + " | (dropout bytes) | "
          "miss per layer-micro-batch |")
    print("|---|---:|" + "---:|" * (len(STEPS) + 2))
    for r in ds:
        steps = [step_s(with_facts(r, k), rows) for k in range(len(STEPS))]
        with dropout_bytes_charged():
            old = step_s(r, rows)
        pl = r["plan"]
        mbs = pl["global_batch"] // (pl["microbatch"] * pl["dp"])
        layers = 64 // pl["pp"]       # the script's middle stages: 64/pp layers
        meas = r["measured"]["step_time_s"]
        miss_ms = (meas - steps[-1]) / (mbs * layers) * 1e3
        cells = " | ".join(f"{s:.2f} ({(s / meas - 1) * 100:+.1f} %)" for s in steps)
        print(f"| {r['id']} | {meas} | {cells} | {old:.2f} | {miss_ms:.1f} ms "
              f"({mbs} x {layers}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
