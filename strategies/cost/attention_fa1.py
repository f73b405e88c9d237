"""The FlashAttention-1-class fused attention kernel (``FrameworkProfile.attention_kernel``
``"fa1"``) at its published rate: flash-attn 1.x and llm-foundry's ``attn_impl: triton``
(``llmfoundry/models/layers/flash_attn_triton.py``, a copy of FlashAttention v1's Triton port
run on the pre-MLIR Triton fork). docs/calibration.md §5.140.

Rate. The FlashAttention-2 paper (Dao 2023, arXiv 2307.08691) times FlashAttention (v1) forward
+ backward on A100 80GB SXM4 (Figure 4(d), "With causal mask, head dimension 128") and on H100
80GB SXM5 (the same panel of its H100 figure; Dao-AILab/flash-attention v2.0.0
``assets/flash2_a100_fwd_bwd_benchmark.png``, ``assets/flash2_h100_fwd_bwd_benchmark.png``) at
batch·sequence 16k, hidden 2048, sequences 512..16k: ``FA1_BARS``, TFLOP/s counted as
``4·b·s²·h·d/2`` forward and 2.5x that backward (``benchmarks/benchmark_flash_attention.py``).
Between bars the rate is log-linear in the sequence; beyond the end bars it is held at them
(no bar measured past 16k). The bars carry the kernel's own grid at their shape; no grid
factor (``attention_grid``) is applied on top. The Triton port's own docstring: its forward is
faster and its backward slower than the CUDA kernel's, "overall ... slightly slower"; no
public per-sequence timing of the port at head dim 128 exists, so the CUDA kernel's bars
price the class.

Split. A bar is one forward and one backward (``1 + FLASH_BWD_FACTOR`` forward-FLOP units)
in ``(1 + FLASH_BWD_FACTOR)·F/R`` seconds; the split between the two is the model's fused
kernels' (the backward at ``FLASH_BWD_EFFICIENCY`` of the forward's rate), so a forward runs at
``R·(1 + FLASH_BWD_FACTOR/FLASH_BWD_EFFICIENCY)/(1 + FLASH_BWD_FACTOR)`` and forward +
backward take the bar's time exactly; a recomputed forward (full recomputation) costs a
forward again."""
from __future__ import annotations

import numpy as np

from strategies.errors import SpecError
from topologies.gpus import GPU

#: sequence lengths of the bars (tokens)
BAR_SEQS = (512, 1024, 2048, 4096, 8192, 16384)
#: FlashAttention (v1) forward + backward TFLOP/s, causal, head dim 128, at ``BAR_SEQS``, by
#: the catalog's GPU name: FlashAttention-2 paper Figure 4(d) (A100) and its H100 figure (d)
FA1_BARS: dict[str, tuple[float, ...]] = {
    "A100-SXM4-80GB": (55.0, 62.0, 69.0, 76.0, 80.0, 83.0),
    "H100-SXM5-80GB": (98.0, 109.0, 108.0, 126.0, 135.0, 137.0),
}


def has_rate(gpu: GPU) -> bool:
    """True where ``FA1_BARS`` holds the chip's published bars."""
    return gpu.name in FA1_BARS


_LOG_SEQS = np.log(BAR_SEQS)


def combined_rate(gpu: GPU, seq):
    """Forward + backward FLOP/s of the FlashAttention-1-class kernel on ``gpu`` at ``seq``
    tokens a sequence (a number or an array): ``FA1_BARS`` log-linear between ``BAR_SEQS``,
    the end bars outside; SpecError for a chip without published bars or a sequence below
    1."""
    if not has_rate(gpu):
        raise SpecError("framework.attention_kernel", "fa1",
                        f"has no published rate on {gpu.name} (bars for: "
                        f"{', '.join(FA1_BARS)})")
    s = np.asarray(seq, dtype=float)
    if not np.all(s >= 1):
        raise SpecError("attention_fa1.seq", seq, "must be >= 1 token")
    r = np.interp(np.log(s), _LOG_SEQS, FA1_BARS[gpu.name]) * 1e12
    return float(r) if r.ndim == 0 else r


def forward_rate(gpu: GPU, seq, bwd_factor: float, bwd_efficiency: float):
    """FLOP/s of the kernel's forward: ``combined_rate·(1 + bwd_factor/bwd_efficiency)/(1 +
    bwd_factor)``, so that one forward at it and one backward (``bwd_factor`` times the
    FLOPs at ``bwd_efficiency`` of its rate) take the bar's time; ``seq`` a number or an
    array."""
    return combined_rate(gpu, seq) * (1.0 + bwd_factor / bwd_efficiency) / (1.0 + bwd_factor)
