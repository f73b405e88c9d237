"""The fused attention kernel on a short sliding window, as cuDNN runs it (docs/calibration.md
§5.120): the fraction of the bf16 peak cuDNN's BF16 kernel reaches on gpt-oss's windowed
layers, measured, in place of ``GPU.flash_efficiency`` for those layers.

Why a measured rate: with a 128-token window each 128-row query tile of the causal kernel
visits two key blocks (``attention_counts.score_elements`` "kernel"), so the kernel's per-tile
fill and drain (loading Q, the first K/V blocks, the softmax chain, writing O and the
log-sum-exp) are not hidden behind a long key loop, as they are in full attention. NVIDIA's
public cuDNN SDPA training benchmark (``fp8_attention.CUDNN_SOURCE``, cuDNN 9.22, the kernel
Transformer Engine 2.14-2.16 select for gpt-oss's learnable-softmax sinks, §5.120) times it at
12-16 % of the bf16 peak on GB200 and GB300 (head dim 64, window 128, causal, batch 2 x 128
heads, non-deterministic backward) where the catalog's fused-attention efficiency (0.55) is
3-6x faster; GB300's doubled exponential rate buys it 4 % (no SFU bound: a latency bound).
The numbers are kernel timings on the chips, not a fit to any training row. Only the measured
class is read (``window_class``); other windows and head sizes keep ``flash_efficiency``.

``EFFICIENCY``: ``{(chip, class): (forward, backward)}`` per ``fp8_attention.SEQS``: forward
``F/(t·peak)`` and backward ``FLASH_BWD_FACTOR·F/(t·peak)``, ``F`` the model's forward FLOPs of
the shape (``2·b·a·(d_qk + d_v)`` per causal-kernel score element), ``peak`` the chip's bf16
peak (2.5 PFLOP/s both), printed by ``python experiments/window_kernel_rates.py --table``."""
from __future__ import annotations

from strategies.cost.fp8_attention import SEQS, seq_ratio, chip_class
from strategies.cost.token_counts import Num
from strategies.model import ModelSpec
from topologies.gpus import GPU

#: the one windowed shape the benchmark measures: q/k and v heads of 64, a sliding window of
#: 128 tokens (gpt-oss; Megatron-Bridge's ``window_size = (sliding_window - 1, 0)``)
WINDOW_CLASS = "64/64w128"
EFFICIENCY: dict[tuple[str, str], tuple[tuple[float, ...], tuple[float, ...]]] = {
    ("gb200", WINDOW_CLASS): ((0.1222, 0.1288, 0.1318, 0.1332, 0.0833),
                              (0.1404, 0.1455, 0.1497, 0.1506, 0.1486)),
    ("gb300", WINDOW_CLASS): ((0.1280, 0.1340, 0.1374, 0.1386, 0.0867),
                              (0.1466, 0.1530, 0.1582, 0.1599, 0.1590)),
}
assert all(len(f) == len(b) == len(SEQS) for f, b in EFFICIENCY.values())


def window_class(m: ModelSpec) -> str | None:
    """``WINDOW_CLASS`` where ``m``'s windowed layers have the measured shape (a sliding, not
    chunked, window of 128 keys, q/k and v heads of 64, no MLA), else None."""
    if (m.num_windowed_layers and m.sliding_window == 128 and m.window_kind == "sliding"
            and not m.is_mla and m.head_dim == 64 and m.v_dim == 64):
        return WINDOW_CLASS
    return None


def window_efficiency(m: ModelSpec, gpu: GPU, seq: Num) -> tuple[Num, Num] | None:
    """(forward, backward) fraction of ``gpu``'s bf16 peak the fused kernel reaches on ``m``'s
    windowed layers at ``seq`` tokens per sequence (per GPU, after context parallelism),
    log-linear between the measured sequences, the end values outside them; None where the
    shape (``window_class``) or the chip (``fp8_attention.chip_class``: GB200's figures stand
    for B200, GB300's for B300) has no measurement."""
    cls, chip = window_class(m), chip_class(gpu)
    if cls is None or chip is None:
        return None
    f, b = EFFICIENCY[(chip, cls)]
    return seq_ratio(f, seq), seq_ratio(b, seq)
