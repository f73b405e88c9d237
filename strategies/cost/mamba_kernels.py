"""The SSD scan's measured rate: mamba_ssm's Triton kernels against the HBM/FLOP roofline the
cost model prices them at (``mamba_mixer.shape_bytes``/``shape_flops``), from the one public
timing found at a stated shape and GPU, as a factor on the roofline interpolated over the
kernels' grid. docs/calibration.md §5.149.

The points (``SSD_FWD_POINTS``): vllm-project/vllm#27299 (comment of 2025-10-25, "supporting
performance results on single H100", the microbenchmark of @RishiAstra's gist with the sizes
of ``granite-4.0-h-small``), column "Original": ``_mamba_chunk_scan_combined_fwd``'s five
kernels (chunk cumsum, C·Bᵀ, chunk states, state passing, chunk scan) in tokens per second
at ``(seq, nheads, headdim, ngroups, dstate) = (T, 128, 64, 1, 128)``, batch 1; the chunk
``Q`` 256 (the model's ``mamba_chunk_size``; the comment's second table sets the fused
kernel's chunk to 256 "matching mamba config"), no gate ``z`` (vLLM gates in its own norm).
Its state passing writes 16-bit states as mamba_ssm's does (vLLM's ``ssd_combined.py``
``out_dtype=state_dtype if state_dtype is not None else C.dtype``; the roofline is
``ssd_traffic``'s table, §5.160).
Of the nine rows, those at 1024, 2048 and 4096 tokens take 0.30, 0.29 and 0.34 ms, a floor
that does not grow with the work (a host-bound benchmark loop, not a GPU rate) and are left
out; from 8192 tokens on the time grows with the tokens (x1.95 from 8192 to 16384).

The rule (``scan_factor``): the roofline time over the measured time at each point,
``efficiency``, is a property of the kernels at a grid (programs of one (chunk, head) each,
``b·ceil(s/Q)·H``, per SM), log-interpolated over that grid and held at the end points
outside it (no extrapolation); the scan's time is its roofline divided by it. The backward's
kernels (``_mamba_chunk_scan_combined_bwd``) are of the same family (Triton, the same tiles
and grids) and no public timing of them at a stated shape was readable (state-spaces/
mamba#827's per-kernel table at the Nemotron-H 56B shape is not in the stored thread;
searched again in §5.160: mamba#1012 gives a B200 fwd+bwd speed-up, no time; mamba#530 times
the whole backward at no stated shape): the forward's factor is applied to them too, a stated
assumption. The factor carries to another
chip through its SM count, as ``attention_grid`` does."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from strategies.cost.token_counts import Num
from topologies.gpus import GPU

#: the benchmark's GPU ("single H100", the SXM part assumed): the catalog's entry, whose SM
#: count, usable HBM rate (``hbm_rate.usable_hbm``) and fused-attention FLOP rate the
#: efficiencies are relative to
BENCH_GPU = "H100-SXM5-80GB"
#: (heads, head dim, groups, state, chunk) of the benchmark, batch 1, no gate
BENCH_SHAPE = (128, 64, 1, 128, 256)
#: (tokens, tokens per second) of the five forward kernels, vllm#27299 "Original"
SSD_FWD_POINTS = ((8192, 1.262327e7), (16384, 1.292440e7), (32768, 1.180002e7),
                  (65536, 1.106830e7), (131072, 1.070444e7), (262144, 1.081547e7))


def roofline_s(s: Num, b: Num, H: Num, G: Num, P: int, N: int, Q: int, hbm: float,
               flop_rate: float, backward: bool = False, gate: bool = True) -> Num:
    """Seconds of the SSD scan at the roofline the cost model prices: the larger of its FLOPs
    at ``flop_rate`` and its bytes at ``hbm`` (``mamba_mixer.shape_flops``, ``shape_bytes``)."""
    from strategies.cost.mamba_mixer import shape_bytes, shape_flops
    return np.maximum(shape_flops(s, b, H, G, P, N, Q, backward) / flop_rate,
                      shape_bytes(s, b, H, G, P, N, Q, backward, gate) / hbm)


def programs_per_sm(s: Num, b: Num, H: Num, Q: int, sms: int) -> Num:
    """The scan kernels' (chunk, head) programs per SM: ``b·ceil(s/Q)·H/sms``."""
    return b * np.ceil(np.asarray(s, dtype=float) / Q) * H / sms


@lru_cache(maxsize=1)
def efficiency_points() -> tuple[tuple[float, float], ...]:
    """``(programs per SM, roofline / measured)`` at each of ``SSD_FWD_POINTS``."""
    from strategies.cost.hbm_rate import usable_hbm
    from topologies.gpus import get_gpu
    g = get_gpu(BENCH_GPU)
    hbm, flop = usable_hbm(g), g.peak("bf16") * g.attention_efficiency
    H, P, G, N, Q = BENCH_SHAPE
    out = []
    for T, rate in SSD_FWD_POINTS:
        roof = float(roofline_s(T, 1, H, G, P, N, Q, hbm, flop, gate=False))
        out.append((float(programs_per_sm(T, 1, H, Q, g.sm_count)), roof / (T / rate)))
    return tuple(out)


def efficiency(waves: Num) -> Num:
    """The kernels' fraction of the roofline at ``waves`` programs per SM: log-linear
    interpolation of ``efficiency_points`` in the programs, the end points' values outside
    them. Vectorised."""
    pts = efficiency_points()
    x = np.log([p for p, _ in pts])
    w = np.log(np.maximum(np.asarray(waves, dtype=float), 1e-9))
    return np.interp(w, x, [e for _, e in pts])


def sm_count(gpu: GPU) -> int:
    """``gpu``'s SMs, or the benchmark GPU's where the catalog gives none."""
    from topologies.gpus import get_gpu
    return gpu.sm_count or get_gpu(BENCH_GPU).sm_count


def scan_factor(s: Num, b: Num, H: Num, Q: int, gpu: GPU) -> Num:
    """Factor on the scan's roofline seconds at this shape on ``gpu``: ``1/efficiency`` at
    its programs per SM (``sm_count``)."""
    return 1.0 / efficiency(programs_per_sm(s, b, H, Q, sm_count(gpu)))
