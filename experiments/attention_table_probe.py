"""A dense table of the fused attention kernels' times on this machine's GPU (needs PyTorch and a
CUDA GPU; run on hardware, docs/calibration.md §7.5): causal, batch 1, head dim 128, every
sequence of ``SEQS`` × every head count of ``HEADS`` (the kernel's grid is batch × heads ×
query tiles, and batch × heads is what counts: ``device_probes.py``), for each fused kernel
calibrate knows, plus head dim 64 and 192 on cuDNN at a few shapes. Timed by calibrate's own
``TorchBackend.attention_seconds``. Writes one JSON object (``--out``; stdout without it).

    python experiments/attention_table_probe.py --out attention_table.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.calibrate.torch_backend import TorchBackend  # noqa: E402
from experiments._report import emit_json  # noqa: E402

SEQS = (512, 1024, 2048, 3072, 4096, 6144, 8192, 16384, 32768)
HEADS = (1, 2, 4, 8, 16, 32, 64, 128)
OTHER_DIMS = ((64, (1024, 4096, 16384), (4, 16, 64)), (192, (1024, 4096, 16384), (4, 16, 64)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    b = TorchBackend()
    info = b.describe()
    recs = []

    def one(kernel: str, heads: int, seq: int, d: int) -> None:
        r = b.attention_seconds(kernel, 1, heads, seq, d, True)
        rec = {"kernel": kernel, "batch": 1, "heads": heads, "seq": seq, "head_dim": d,
               "causal": True, "fwd_seconds": r[0] if r else None,
               "bwd_seconds": r[1] if r else None}
        recs.append(rec)
        print(json.dumps(rec), flush=True)
    for kernel in info["attention_kernels"]:
        for seq in SEQS:
            for heads in HEADS:
                one(kernel, heads, seq, 128)
    for d, seqs, heads_ in OTHER_DIMS:
        for seq in seqs:
            for heads in heads_:
                one("native", heads, seq, d)
    doc = {"device": info["device"], "software": info["software"], "attention": recs}
    emit_json(doc, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
