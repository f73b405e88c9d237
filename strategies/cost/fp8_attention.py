"""Transformer Engine's FP8 attention under an MXFP8 recipe, as cuDNN runs it (docs/calibration.md
§5.98): the fused attention kernel's time in MXFP8 over its BF16 time, and the quantisation
passes TE adds around it.

Which kernel: Megatron-Core's ``fp8_dot_product_attention`` (Megatron-Bridge's
``mixed_precision.fp8_dot_product_attention``, set by the v0.5.0 performance configs'
``fp8_dot_product_attention=True``, ``scripts/performance/utils/overrides.py``) turns on TE's
``fp8_dpa``; under the MXFP8 linear recipe TE 2.16 runs the attention in MXFP8 too
(``dot_product_attention.py``'s recipe table: "MXFP8 | MXFP8 | Pass MXFP8 to autocast()";
``NVTE_DPA_FP8_RECIPE`` unset in Bridge's scripts), its backward in FP8 as well
(``NVTE_FP8_DPA_BWD`` default 1, ``backends.py`` ``FusedAttnFunc``), and only with cuDNN's
fused attention on compute capability 10 with cuDNN >= 9.21 (``utils.py``
``get_attention_backend``: "Disabling FusedAttention for MXFP8 on arch < sm100" / "with
cuDNN < 9.21.0"; the 26.06 container has 9.21.1).

The rates: NVIDIA's public cuDNN SDPA training benchmark (``CUDNN_SOURCE``), the same shapes
timed in ``bfloat16`` and ``mxfp8`` on GB200 and GB300 (cuDNN 9.22), batch 2, causal
(``top_left``), non-deterministic backward, sequence 2k-32k; per head-dim class the BF16 time
over the MXFP8 time at each sequence length (``RATIOS``, printed by ``python
experiments/fp8_attention_ratios.py --table``). The model's BF16 attention time
(``attention_time.attention_time_fwd``) is divided by the ratio at the layer's sequence (log-linear
between the measured points, the end value outside them)."""
from __future__ import annotations

import numpy as np

from strategies.cost.attention_counts import window_share
from strategies.cost.token_counts import Num
from strategies.model import ModelSpec
from topologies.gpus import GPU

CUDNN_SOURCE = ("NVIDIA/cudnn-frontend 3929da2ef4c1 benchmark/sdpa_benchmark_training/results/"
                "{dsv3,llama3.1,gpt_oss}/{gb200,gb300}/*_20260424_*.csv (cuDNN 9.22, causal, "
                "bfloat16 / mxfp8 time_ms)")
#: the sequence lengths every table below is measured at (tokens, q = kv)
SEQS = (2048.0, 4096.0, 8192.0, 16384.0, 32768.0)
#: ``{(chip, class): (forward ratios, backward ratios)}``: BF16 time / MXFP8 time per ``SEQS``.
#: Classes: ``"192/128"`` (MLA: DeepSeek-V3's 128 heads), ``"128/128"`` (Llama 3.1 70B's 64/8
#: heads), ``"64/64w128"`` (gpt-oss's 64/64 heads in a 128-token sliding window). GB200's
#: figures stand for the B200 die, GB300's for B300 (``chip_class``).
RATIOS: dict[tuple[str, str], tuple[tuple[float, ...], tuple[float, ...]]] = {
    ("gb200", "192/128"): ((1.433, 1.368, 1.400, 1.403, 1.336),
                           (1.237, 1.291, 1.253, 1.369, 1.424)),
    ("gb300", "192/128"): ((1.614, 1.582, 1.550, 1.524, 1.486),
                           (1.266, 1.332, 1.379, 1.416, 1.446)),
    ("gb200", "128/128"): ((1.214, 1.199, 1.208, 1.170, 1.261),
                           (0.844, 0.918, 0.966, 1.081, 1.163)),
    ("gb300", "128/128"): ((1.266, 1.335, 1.384, 1.424, 1.426),
                           (0.840, 0.915, 0.978, 1.037, 1.067)),
    ("gb200", "64/64w128"): ((1.000, 1.000, 0.993, 0.995, 1.609),
                             (0.369, 0.224, 0.123, 0.065, 0.034)),
    ("gb300", "64/64w128"): ((1.130, 1.154, 1.161, 1.169, 1.881),
                             (0.391, 0.236, 0.130, 0.068, 0.036)),
}
#: bytes per element of an MXFP8 quantisation of a 16-bit tensor that attention reads along
#: both its dimensions (TE 2.16 ``utils.mxfp8_quantize_fast_path``: "quantization along S and
#: D"): read 2, write the rowwise and the columnwise copy (1 + 1) and their E8M0 scales (one
#: byte per 32 elements each)
MXFP8_BOTH_BYTES = 2.0 + 2.0 + 2.0 / 32.0


def chip_class(gpu: GPU) -> str | None:
    """The benchmark chip whose figures stand for ``gpu``: ``"gb300"`` (GB300, B300: Blackwell
    Ultra), ``"gb200"`` (GB200, B200); None for a chip with no MXFP8 attention (before sm 100)
    or no public timing."""
    name = gpu.name.upper()
    if name.startswith(("GB300", "B300")):
        return "gb300"
    if name.startswith(("GB200", "B200")):
        return "gb200"
    return None


def seq_ratio(table: tuple[float, ...], seq: Num) -> Num:
    """``table`` (per ``SEQS``) at ``seq`` tokens: log-linear in the sequence, the end values
    outside the measured range."""
    return np.interp(np.log(np.asarray(seq, float)), np.log(SEQS), table)


def full_class(m: ModelSpec) -> str:
    """The measured class a full-attention layer of ``m`` is read at: ``"192/128"`` where its
    q/k head is wider than 128 (MLA), else ``"128/128"`` (a 64-wide head, gpt-oss's global
    layers, has no full-attention timing: the 128 one is assumed)."""
    return "192/128" if m.head_dim > 128 else "128/128"


def kind_ratios(m: ModelSpec, gpu: GPU, seq: Num) -> tuple[tuple[Num, Num], tuple[Num, Num]]:
    """((forward, backward) of full layers, (forward, backward) of sliding-window layers):
    the BF16 over MXFP8 time ratios at ``seq`` tokens per sequence, full layers at
    ``full_class``, windowed ones at ``"64/64w128"`` (the only windowed shape measured).
    ValueError for a chip without figures (``chip_class``)."""
    chip = chip_class(gpu)
    if chip is None:
        raise ValueError(f"no MXFP8 attention figures for {gpu.name}")
    full_f, full_b = RATIOS[(chip, full_class(m))]
    win_f, win_b = RATIOS[(chip, "64/64w128")]
    return ((seq_ratio(full_f, seq), seq_ratio(full_b, seq)),
            (seq_ratio(win_f, seq), seq_ratio(win_b, seq)))


def time_factors(m: ModelSpec, gpu: GPU, seq: Num) -> tuple[Num, Num]:
    """(forward, backward) factor on the mean layer's BF16 fused-attention time at ``seq``
    tokens per sequence (per GPU, after context parallelism) in MXFP8, where every layer kind
    runs at one BF16 rate per score block: each kind's time over its ``kind_ratios``, weighted
    by its share of the causal kernel's score blocks (``attention_counts.window_share``).
    ValueError for a chip without figures (``chip_class``)."""
    full, win = kind_ratios(m, gpu, seq)
    nw = m.num_windowed_layers
    w = window_share(m)
    out = []
    for i in (0, 1):
        f = (1.0 - w) / full[i]
        if nw:
            f = f + w / win[i]
        out.append(f)
    return out[0], out[1]


def cast_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num) -> tuple[Num, Num]:
    """(forward, backward) HBM bytes per GPU of the mean layer's MXFP8 attention casts: Q, K
    and V quantised before the forward kernel, dO before the backward one
    (``MXFP8_BOTH_BYTES`` per element; TE 2.16 ``backends.FusedAttnFunc``: the kernel writes
    O in 16 bits and the backward reads the 16-bit O, so O has no cast of its own)."""
    tokens = b * m.seq_length / cp
    q = m.num_attention_heads * m.head_dim / tp
    k = m.kv_heads * m.head_dim / tp if not m.is_mla else m.num_attention_heads * m.head_dim / tp
    v = (m.kv_heads if not m.is_mla else m.num_attention_heads) * m.v_dim / tp
    do = m.num_attention_heads * m.v_dim / tp
    return (tokens * (q + k + v) * MXFP8_BOTH_BYTES, tokens * do * MXFP8_BOTH_BYTES)
