"""Sustained GEMM rate and SM clock, alone and beside memory traffic (needs PyTorch, a CUDA GPU
and nvidia-smi; run on hardware, docs/calibration.md §7.5).

``paraplan calibrate`` times kernels in 2 ms samples, short enough that the power limiter may
not act. A training step runs GEMMs for seconds, and beside them communication kernels that
move data through HBM. This runs, for ``--seconds`` each, back-to-back bf16 GEMMs of one shape
alone and with a second CUDA stream copying a 1 GiB buffer (8 or 40 copies per 20 GEMMs: an
HBM and SM load standing in for the memory side of collectives, heavier than NCCL's few
channels; NVLink traffic needs several GPUs), while
``nvidia-smi`` samples the SM clock and the board power every 100 ms. It prints and writes
(``--out``) per case: TFLOP/s over the whole run and over its last half, the median SM clock
and power over the last half, and the copy's bytes/s.

    python experiments/sustained_probe.py --out sustained.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments._report import emit_json  # noqa: E402

SHAPES = ((8192, 8192, 8192), (16384, 28672, 8192), (8192, 8192, 3584))
COPIES = (0, 8, 40)   # 1 GiB copies issued on the side stream per 20 GEMMs


def sampler(path: str) -> subprocess.Popen:
    """nvidia-smi writing ``timestamp, clocks.sm, power.draw`` every 100 ms to ``path``."""
    fh = open(path, "w")
    return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
                             "--format=csv,noheader,nounits", "-lms", "100"], stdout=fh,
                            stderr=subprocess.DEVNULL)


def run_case(torch, shape, seconds: float, copies_per_batch: int, log: str) -> dict:
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    x = torch.empty(1 << 29, device="cuda", dtype=torch.bfloat16)   # 1 GiB
    y = torch.empty_like(x)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    proc = sampler(log)
    t_start = time.time()
    marks, copies = [], 0
    try:
        ev0 = torch.cuda.Event(enable_timing=True)
        ev0.record()
        while time.time() - t_start < seconds:
            for _ in range(20):
                torch.matmul(a, b, out=c)
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            marks.append(ev)
            if copies_per_batch:
                with torch.cuda.stream(side):
                    for _ in range(copies_per_batch):
                        y.copy_(x)
                        copies += 1
            if len(marks) > 4:          # keep the host at most a few batches ahead
                marks[-4].synchronize()
        torch.cuda.synchronize()
        t_end = time.time()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    times = [ev0.elapsed_time(e) / 1e3 for e in marks]
    flop = 2.0 * m * n * k * 20
    half = len(times) // 2
    total = flop * len(times) / times[-1]
    late = flop * (len(times) - half) / (times[-1] - times[half - 1])
    clocks, power = [], []
    for line in open(log):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            try:
                clocks.append(float(parts[1]))
                power.append(float(parts[2]))
            except ValueError:
                pass
    lc, lp = clocks[len(clocks) // 2:], power[len(power) // 2:]
    return {"shape": [m, n, k], "copies_per_20_gemms": copies_per_batch, "seconds": times[-1],
            "tflops_whole": total / 1e12, "tflops_second_half": late / 1e12,
            "sm_clock_mhz_median_second_half": statistics.median(lc) if lc else None,
            "power_w_median_second_half": statistics.median(lp) if lp else None,
            "copy_bytes_per_s": copies * 2 * x.numel() * 2 / (t_end - t_start),
            "samples": len(clocks)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--seconds", type=float, default=6.0)
    a = ap.parse_args()
    import torch
    log = (a.out or "sustained") + ".smi.csv"
    recs = []
    for shape in SHAPES:
        for copies in COPIES:
            r = run_case(torch, shape, a.seconds, copies, log)
            recs.append(r)
            print(json.dumps(r), flush=True)
    os.remove(log)
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "seconds_each": a.seconds, "records": recs}
    emit_json(doc, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
