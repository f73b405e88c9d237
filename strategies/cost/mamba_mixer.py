"""Cost of one Mamba-2 mixer (Megatron-Core ``MambaMixer``, ``megatron/core/ssm/mamba_mixer.py`` at
d98e8a64) on one GPU for one micro-batch: its two GEMMs, the SSD chunked scan's FLOPs and HBM
bytes, the small elementwise kernels' bytes, the scan's seconds, the activations its backward
keeps, and the tensor-parallel rules. Vectorised over the plan fields (numpy arrays).

The layer (``mamba_layer.py``): a pre-norm fused into ``in_proj`` (``TELayerNormColumnParallel
Linear``), ``in_proj`` column-parallel ``h -> 2·d_inner + 2·G·N + H`` (z, x, B, C, dt), then in
training ``mamba_split_conv1d_scan_combined`` (``MambaMixer._ssm_training``, l.688-732: the
depthwise causal conv1d over x, B, C with its SiLU, the SSD scan, the ``D`` skip and the
``silu(z)`` gate in one autograd function that saves its input ``zxBCdt`` and recomputes the
conv in the backward), the gated RMSNorm over ``d_inner`` (l.730), ``out_proj`` row-parallel
``d_inner -> h`` (l.437-450, l.525). Tensor parallelism splits the heads ``H`` and the groups
``G`` (l.259-271): every piece below is per rank, ``H/tp`` heads and ``G/tp`` groups; a ``tp``
that does not divide both is refused (``check_tp``). Sequence parallelism gathers the
hidden state before ``in_proj`` and reduce-scatters after ``out_proj``: the same pair of
collectives as an attention block (one pair per layer and pass).

The SSD scan (Dao & Gu 2024, "Transformers are SSMs", §6; ``mamba_ssm/ops/triton/
ssd_combined.py``, ``_mamba_chunk_scan_combined_fwd``) cuts the ``T`` tokens into chunks of
``Q``, ``T/Q`` of them (the last one ``T mod Q`` long where ``Q`` does not divide ``T``), and runs
five kernels: the chunk cumsum of ``dt·A``; ``_bmm_chunk_fwd``, ``C·Bᵀ`` per chunk and group
(``2·q²·N`` FLOPs per group); ``_chunk_state_fwd``, each chunk's final state ``Bᵀ·x`` per head
(``2·q·N·P``); ``_state_passing_fwd``, the sequential pass of the states across chunks (a
multiply-add per state element per chunk, ``2·N·P`` per head); ``_chunk_scan_fwd``, the
intra-chunk output ``(L∘CBᵀ)·x`` (``2·q²·P`` per head) plus the states' contribution ``C·h``
(``2·q·N·P`` per head). ``ssd_flops_fwd`` is the closed form of that sum over the chunks; the
backward's contractions are two per forward contraction (each operand's gradient), twice
the forward's FLOPs. The five unfused kernels are "mostly bottlenecked by memory bandwidth
and latency", writing and reading their intermediates (PyTorch blog, "Accelerating Mamba2
with kernel fusion", 2025, which measured 1.5-2.5x from fusing them on A100/H100): the scan's
time is the larger of its FLOPs at the fused-attention rate the GPU is given
(``GPU.attention_efficiency``, the class of kernel it is) and its HBM bytes at the usable
bandwidth (``ssd_bytes_fwd``).
"""
from __future__ import annotations

import numpy as np

from strategies.cost.token_counts import Num, tokens_per_gpu
from strategies.errors import SpecError
from strategies.model import ModelSpec
from topologies.gpus import GPU

#: bytes of a 16-bit activation and of the scan's fp32 intermediates (dt, dA_cumsum, CB, states)
_B16, _F32 = 2, 4


def check_tp(m: ModelSpec, tp: int) -> None:
    """``SpecError`` unless tensor parallelism ``tp`` divides the mixer's heads and groups
    (``mamba_mixer.py`` l.262 and l.270: ``nheads % tp_size == 0``, ``ngroups % tp_size == 0``)."""
    for f in ("mamba_num_heads", "mamba_num_groups"):
        if getattr(m, f) % tp:
            raise SpecError("plan.tp", tp, f"must divide {m.name}'s {f}={getattr(m, f)} "
                            "(Megatron-Core's MambaMixer splits heads and groups over tp)")


def check_cp(m: ModelSpec, cp: int) -> None:
    """``SpecError`` for context parallelism over a model with Mamba layers: Megatron-Core runs
    it (``megatron/core/ssm/mamba_context_parallel.py``: all-to-alls that trade the sequence
    shard for a head shard around the conv and the scan) but it is not modelled here."""
    if cp > 1 and m.is_hybrid and m.layer_counts()["mamba"]:
        raise SpecError("plan.cp", cp, f"{m.name} has Mamba-2 layers: their context "
                        "parallelism (Megatron-Core MambaContextParallel's all-to-alls) is not "
                        "modelled; use cp=1")


def check_hybrid_plan(m: ModelSpec, tp: int, cp: int, recompute: str) -> None:
    """The plan rules of a model with Mamba-2 layers: ``check_tp``, ``check_cp``, and no
    torchtitan op-level recomputation (its save list is written for attention and MLP
    GEMMs only)."""
    if not (m.is_hybrid and m.layer_counts()["mamba"]):
        return
    check_tp(m, tp)
    check_cp(m, cp)
    if recompute == "op":
        raise SpecError("plan.recompute", recompute, f"{m.name} has Mamba-2 layers: op-level "
                        "recomputation (torchtitan's save list) is not modelled for them")


def tp_divides_mixer(m: ModelSpec, tp: Num) -> Num:
    """Vectorised ``check_tp``: True where ``tp`` divides the mixer's heads and groups (True
    for a model without Mamba layers)."""
    if not (m.is_hybrid and m.layer_counts()["mamba"]):
        return np.ones_like(np.asarray(tp), dtype=bool)
    return (m.mamba_num_heads % np.asarray(tp) == 0) & (m.mamba_num_groups % np.asarray(tp) == 0)


def mamba_gemms(m: ModelSpec, b: Num, tp: Num, cp: Num = 1) -> list[tuple]:
    """The mixer's GEMMs on one GPU, ``(count, M tokens, N out, K in, row_parallel)`` as
    ``gemm_shapes.layer_gemms`` gives a layer's: ``in_proj`` (column-parallel, ``N/tp``) and
    ``out_proj`` (row-parallel, ``K/tp``)."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    out = []
    for _, k_in, n_out, split in m.mamba_linears():
        out.append((1, T, n_out, k_in / tp, True) if split == "row"
                   else (1, T, n_out / tp, k_in, False))
    return out


def _chunk_sums(T: Num, Q: int) -> tuple[Num, Num, Num]:
    """``(chunks, Σq, Σq²)`` over the chunks of ``T`` tokens cut every ``Q``."""
    T = np.asarray(T, dtype=float)
    full, r = np.floor(T / Q), np.mod(T, Q)
    return full + (r > 0), T, full * Q * Q + r * r


def ssd_flops_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num = 1) -> Num:
    """FLOPs of the SSD scan's forward on one GPU (module docstring): per sequence of ``s``
    tokens, with ``H/tp`` heads and ``G/tp`` groups, chunks ``c``, ``Σq = s``, ``Σq²``:
    ``2·Σq²·N·G + 2·Σq²·P·H + 4·s·N·P·H + 2·c·N·P·H`` (the four matmul kernels and the state
    passing), times ``b`` sequences. The ``D`` skip and the gate are elementwise
    (``mixer_elementwise_bytes``)."""
    s = tokens_per_gpu(1, m.seq_length, cp)
    c, sq, sq2 = _chunk_sums(s, m.mamba_chunk_size)
    N, P = m.mamba_state_dim, m.mamba_head_dim
    H, G = m.mamba_num_heads / tp, m.mamba_num_groups / tp
    per_seq = 2 * sq2 * N * G + 2 * sq2 * P * H + 4 * sq * N * P * H + 2 * c * N * P * H
    return b * per_seq


def ssd_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num = 1) -> Num:
    """HBM bytes the five SSD kernels move in the forward on one GPU (per rank: ``H/tp``
    heads, ``G/tp`` groups), per token: ``x`` read twice (chunk state, chunk scan) and ``y``
    written (16-bit, ``H·P`` each); ``B`` read twice and ``C`` twice (``G·N``); ``dt`` read
    once (16-bit) and its fp32 cumsum and ``dt`` written once and read by two kernels
    (``H``); ``C·Bᵀ`` written and read in fp32 (``G·Q``); the chunk states (fp32 ``H·N·P``
    per chunk) written, read and written by the state passing, read by the chunk scan."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    N, P, Q = m.mamba_state_dim, m.mamba_head_dim, m.mamba_chunk_size
    H, G = m.mamba_num_heads / tp, m.mamba_num_groups / tp
    s = tokens_per_gpu(1, m.seq_length, cp)
    chunks = _chunk_sums(s, Q)[0] * b
    per_token = (3 * H * P * _B16 + 4 * G * N * _B16 + H * (_B16 + 6 * _F32)
                 + 2 * G * Q * _F32)
    return T * per_token + chunks * 4 * H * N * P * _F32


def mixer_elementwise_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num = 1) -> Num:
    """HBM bytes of the mixer's kernels around the scan in the forward, one GPU: the fused
    conv1d reads ``x, B, C`` (``conv_dim/tp`` 16-bit per token) and writes its SiLU output;
    the gate reads ``z`` (``d_inner/tp``); the gated RMSNorm reads ``y`` and writes its output
    (``d_inner/tp`` each)."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    conv, di = m.mamba_conv_dim / tp, m.mamba_d_inner / tp
    return T * _B16 * (2 * conv + 3 * di)


def scan_time_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, hbm: float,
                  dtype: str = "bf16") -> Num:
    """Forward seconds of the SSD scan on one GPU: the larger of its FLOPs at
    ``peak · attention_efficiency`` and its bytes at ``hbm`` (bytes/s, ``usable_hbm``)."""
    flops = ssd_flops_fwd(m, b, tp, cp) / (gpu.peak("bf16") * gpu.attention_efficiency)
    return np.maximum(flops, ssd_bytes_fwd(m, b, tp, cp) / hbm)


def mamba_scan_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, hbm: float
                    ) -> tuple[Num, Num]:
    """(forward, backward) seconds of the mean layer's SSD scans on one GPU:
    ``ModelSpec.mamba_share`` scans at ``scan_time_fwd``; the backward's FLOPs and bytes are
    twice the forward's (each contraction's two operand gradients; the chunk states and the
    conv recomputed from the saved ``zxBCdt``), ``2 × scan_time_fwd``."""
    t = m.mamba_share * scan_time_fwd(m, b, tp, cp, gpu, hbm)
    return t, 2.0 * t


def saved_terms(m: ModelSpec, seq_len: int, micro_batch_size: int) -> dict[str, float]:
    """Bytes one mixer layer keeps for its backward, one micro-batch, before any parallel split,
    as ``memory.layer_terms`` names its tensors: ``mamba_seq`` (split by ``t`` only with SP)
    the pre-norm's input and ``in_proj``'s input (the normed hidden state), ``2sbh`` each;
    ``mamba_tp`` (split by ``t``) ``zxBCdt``, what ``mamba_split_conv1d_scan_combined``
    saves (``in_proj_width``; it recomputes the conv and the chunk states), the scan's output
    before the gated norm and the norm's output (``out_proj``'s input), ``d_inner`` each."""
    sb = seq_len * micro_batch_size
    return {"mamba_seq": 2 * _B16 * sb * m.hidden_size,
            "mamba_tp": _B16 * sb * (m.mamba_in_proj_width + 2 * m.mamba_d_inner)}


def mixer_saved_bytes(m: ModelSpec, b: Num, tp: Num, sp: Num, cp: Num = 1) -> Num:
    """``saved_terms`` on one GPU: ``mamba_seq`` over ``tp`` under sequence parallelism,
    ``mamba_tp`` over ``tp``, both over ``cp``."""
    t = saved_terms(m, m.seq_length, 1)
    shard = np.where(np.asarray(sp, dtype=bool) & (np.asarray(tp) > 1), tp, 1)
    return b * (t["mamba_seq"] / shard + t["mamba_tp"] / tp) / cp
