"""Two questions the calibrate profile leaves open, timed on this machine's GPU (needs PyTorch
and a CUDA GPU; run on hardware, docs/calibration.md §7.5):

* **attention batch against heads**: does a fused attention kernel's rate follow the heads
  per GPU (what the profile is keyed by) or the batch × heads the kernel's grid spans? The
  same ``scaled_dot_product_attention`` (cuDNN, FlashAttention-2) at batch 1, 2, 4 and heads
  4 ... 32, causal, head dim 128, timed by calibrate's own ``TorchBackend.attention_seconds``;
* **launch gap, eager against graph**: calibrate's gap is a chain of dependent 1-element adds
  launched from Python (host dispatch included); the same chain captured in a CUDA graph and
  replayed gives the GPU's own gap between kernels, when the host runs ahead.

Writes one JSON object (``--out``; stdout without it).

    python experiments/device_probes.py --out probes.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.calibrate.torch_backend import TorchBackend  # noqa: E402
from experiments._report import emit_json  # noqa: E402

CHAIN = 1000


def launch_gaps(torch) -> dict:
    """Seconds per kernel of ``CHAIN`` dependent 1-element adds: eager and graph-replayed."""
    x = torch.zeros(1, device="cuda")
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def eager():
        for _ in range(CHAIN):
            x.add_(1.0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        eager()
    out = {}
    for name, fn in (("eager", eager), ("graph", g.replay)):
        vals = []
        for _ in range(7):
            fn()
            s.record()
            fn()
            e.record()
            e.synchronize()
            vals.append(s.elapsed_time(e) / 1e3 / CHAIN)
        out[name + "_s"] = sorted(vals)[len(vals) // 2]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    b = TorchBackend()
    torch = b.torch
    info = b.describe()
    att = []
    for kernel in info["attention_kernels"]:
        for seq in (2048, 4096, 8192):
            for batch in (1, 2, 4):
                for heads in (4, 8, 16, 32):
                    r = b.attention_seconds(kernel, batch, heads, seq, 128, True)
                    rec = {"kernel": kernel, "batch": batch, "heads": heads, "seq": seq,
                           "head_dim": 128, "causal": True,
                           "fwd_seconds": r[0] if r else None,
                           "bwd_seconds": r[1] if r else None}
                    att.append(rec)
                    print(json.dumps(rec), flush=True)
    gaps = launch_gaps(torch)
    print(json.dumps(gaps), flush=True)
    doc = {"device": info["device"], "software": info["software"], "attention": att,
           "launch_gap": gaps}
    emit_json(doc, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
