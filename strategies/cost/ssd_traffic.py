"""The Mamba-2 SSD scan's kernels one by one, as Megatron-Core's training path launches them:
each kernel's HBM reads and writes and its FLOPs, per token, the one table
``mamba_mixer.shape_bytes``/``shape_flops`` sum (docs/calibration.md §5.146, §5.149, §5.160).

Source: state-spaces/mamba v2.2.0, the release NeMo 25.04's container builds (NVIDIA/NeMo
v2.3.0 ``reinstall.sh`` l.136 ``MAMBA_TAG=v2.2.0``; v2.2.4 has the same kernels and calls),
``mamba_ssm/ops/triton/ssd_combined.py``: the forward ``_mamba_chunk_scan_combined_fwd``
(l.312-324) and the backward ``_mamba_chunk_scan_combined_bwd`` (l.376-444), which
``MambaSplitConv1dScanCombinedFn.backward`` (l.836-908) calls with ``z`` and without the norm
and out_proj (Megatron-Core core_r0.12.0 ``mamba_mixer.py`` l.321-340 passes neither
``rmsnorm_weight`` nor ``outproj_weight``: nothing of the output is recomputed).

Bytes are multiples of the per-token sizes ``(X, BC, CBt, H, S)``: ``X = 2·H·P`` (x, z, the
outputs and their gradients, 16-bit per head dim), ``BC = 2·G·N`` (B or C, 16-bit),
``CBt = 4·G·Q`` (C·Bᵀ, fp32, per token of a chunk), ``H = 4·H`` (dt and its cumsum, fp32; a
16-bit per-head tensor is half of one), ``S = 4·H·N·P/Q`` (a chunk's states in fp32, per token;
16-bit states are half of one). FLOPs are multiples of ``(Σq²·N·G, Σq²·P·H, s·N·P·H,
c·N·P·H)`` per sequence of ``s`` tokens in ``c`` chunks of ``q`` tokens (the C·Bᵀ products,
the intra-chunk products, the state contractions, the state passing)."""
from __future__ import annotations

import numpy as np

from strategies.cost.token_counts import Num

#: bytes of a 16-bit activation and of the scan's fp32 intermediates (dt, dA_cumsum, CB, states)
B16, F32 = 2, 4

#: (kernel, source line, bytes (X, BC, CBt, H, S), FLOPs (q²NG, q²PH, sNPH, cNPH)) of the forward
#: with the gate ``z`` (Megatron-Core's path). ``_state_passing_fwd`` is called with
#: ``out_dtype=C.dtype`` (l.317-319): it reads the fp32 chunk states and writes 16-bit ones,
#: which ``_chunk_scan_fwd`` reads (§5.160; §5.146's table counted both fp32).
SSD_FWD_KERNELS = (
    ("_chunk_cumsum_fwd", "l.312", (0, 0, 0, 2.5, 0), (0, 0, 0, 0)),   # dt 16-bit in; dt, dA fp32
    ("_chunk_state_fwd", "l.313", (1, 1, 0, 2, 1), (0, 0, 2, 0)),      # x, B, dt, dA in; fp32 states
    ("_state_passing_fwd", "l.317", (0, 0, 0, 0, 1.5), (0, 0, 0, 2)),  # fp32 in, 16-bit out
    ("_bmm_chunk_fwd", "l.323", (0, 2, 1, 0, 0), (2, 0, 0, 0)),        # C, B in; C·Bᵀ fp32 out
    ("_chunk_scan_fwd", "l.324", (4, 1, 1, 2, 0.5), (0, 2, 2, 0)),     # CB, x, z, dt, dA, C, states
)                                                                      # in; y and y before z out
#: ``_chunk_scan_fwd`` without ``z`` (vLLM's forward, the calibration's): x in, y out, (2 1 1 2 .5)
FWD_NO_GATE_X = 2

#: the backward's kernels (same layout). The first four recompute the forward's (the states
#: passed in fp32: ``_state_passing_fwd`` without ``out_dtype``, l.381); ``_chunk_scan_bwd_dz``
#: (l.386) reads x, z, the saved output, dout and writes dz and the gated dout;
#: ``_chunk_scan_bwd_dstates`` (l.391) writes fp32 dstates (``dtype=states.dtype``);
#: ``_state_passing_bwd`` (l.396) reads both fp32 and writes both 16-bit; dB and dC count one
#: 16-bit write each here (their fp32 head-split partials are ``mamba_mixer.ssd_eager_bytes_bwd``'s);
#: the two ``_bmm_chunk_bwd`` (l.423-424) read C or B, dCB and the fp32 ``residual`` (``dB.sum(2)``,
#: ssd_chunk_state.py l.839) and write a 16-bit slice of ``dxBC``; ``_chunk_cumsum_bwd`` (l.444)
#: reads fp32 ddA and ddt and the 16-bit dt and writes the 16-bit ddt into ``dzxbcdt``.
SSD_BWD_KERNELS = (
    ("_chunk_cumsum_fwd", "l.377", (0, 0, 0, 2.5, 0), (0, 0, 0, 0)),
    ("_bmm_chunk_fwd", "l.379", (0, 2, 1, 0, 0), (2, 0, 0, 0)),
    ("_chunk_state_fwd", "l.380", (1, 1, 0, 2, 1), (0, 0, 2, 0)),
    ("_state_passing_fwd", "l.381", (0, 0, 0, 0, 2), (0, 0, 0, 2)),
    ("_chunk_scan_bwd_dz", "l.386", (6, 0, 0, 0, 0), (0, 0, 0, 0)),
    ("_chunk_scan_bwd_dstates", "l.391", (1, 1, 0, 1, 1), (0, 0, 2, 0)),
    ("_state_passing_bwd", "l.396", (0, 0, 0, 0, 3), (0, 0, 0, 2)),
    ("_chunk_scan_chunk_state_bwd_dx", "l.414", (3, 1, 1, 3, 0.5), (0, 2, 2, 0)),
    ("_chunk_state_bwd_db", "l.416", (1, 2, 0, 3, 0.5), (0, 0, 2, 0)),
    ("_chunk_scan_bwd_dC", "l.418", (1, 2, 0, 2, 0.5), (0, 0, 2, 0)),
    ("_chunk_scan_bwd_dcb", "l.420", (2, 0, 1, 2, 0), (0, 2, 0, 0)),
    ("_bmm_chunk_bwd (dB)", "l.423", (0, 4, 1, 0, 0), (2, 0, 0, 0)),
    ("_bmm_chunk_bwd (dC)", "l.424", (0, 4, 1, 0, 0), (2, 0, 0, 0)),
    ("_chunk_scan_bwd_ddAcs_stable", "l.441", (2, 0, 1, 3, 0), (0, 2, 0, 0)),
    ("_chunk_cumsum_bwd", "l.444", (0, 0, 0, 3, 0), (0, 0, 0, 0)),
)

#: Per-token bytes per head of the backward's passes beside these kernels, fp32 over
#: ``(b, H, chunks, Q)`` (4 bytes a head and token) unless said. §5.149's: ``dt.clone()``
#: (l.376, 16-bit read and written), the reverse cumsum of ``ddA_cumsum_prev`` as ``flip``,
#: ``cumsum``, ``flip`` (l.437, three passes), ``ddA += ddA_next + ddA_prev`` (l.442, two).
#: §5.160's: the zero-fills of the three atomically accumulated outputs (Triton
#: ``pre_hook=init_to_zero``: ``ddt``, ssd_combined.py l.52-60; ``ddA_next``,
#: ssd_chunk_state.py l.356-363; ``ddA_cumsum_prev``, ssd_chunk_scan.py l.511-518), the
#: in-place ``torch.cumsum`` of ``ddA_next`` after the dB kernel (ssd_chunk_state.py l.845), and
#: the ddA kernel's per-row-block partials summed by ``.sum(dim=3)`` (ssd_chunk_scan.py
#: l.1652-1670: at least one block, read and written).
BWD_EAGER_PER_HEAD = (("dt.clone", 4), ("flip-cumsum-flip", 3 * 8), ("ddA adds", 2 * 12),
                      ("zero-fills", 3 * 4), ("ddA_next cumsum", 8), ("ddA partial sum", 8))
#: the entries §5.160 added
BWD_EAGER_NEW = ("zero-fills", "ddA_next cumsum", "ddA partial sum")


def eager_per_head(names: tuple[str, ...] | None = None) -> float:
    """Bytes per head and token of ``BWD_EAGER_PER_HEAD`` (``names``: only those entries)."""
    return float(sum(v for k, v in BWD_EAGER_PER_HEAD if names is None or k in names))


#: passes over the conv1d's ``conv_dim`` channels (16-bit) the combined function's backward
#: makes beyond twice its forward's read and write (what ``layer_time`` charges every
#: elementwise kernel): ``causal_conv1d_fwd`` again to recompute x, B, C (l.853-857: read and
#: write, 2) and ``causal_conv1d_bwd`` (l.903-906: read xBC and dxBC, write dxBC, 3): 5 - 4.
CONV_BWD_EXTRA_PASSES = 1


def _sum(rows: tuple, field: int) -> tuple[float, ...]:
    return tuple(float(sum(r[field][i] for r in rows)) for i in range(len(rows[0][field])))


def traffic(backward: bool = False, gate: bool = True) -> tuple[float, ...]:
    """``(X, BC, CBt, H, S)`` multiples per token of all the scan's kernels, forward or
    ``backward``; ``gate`` False: the forward's chunk scan without ``z`` (``FWD_NO_GATE_X``)."""
    if backward:
        return _sum(SSD_BWD_KERNELS, 2)
    x, *rest = _sum(SSD_FWD_KERNELS, 2)
    return (x - (0 if gate else FWD_NO_GATE_X), *rest)


def flop_multiples(backward: bool = False) -> tuple[float, ...]:
    """``(Σq²·N·G, Σq²·P·H, s·N·P·H, c·N·P·H)`` multiples of all the scan's kernels."""
    return _sum(SSD_BWD_KERNELS if backward else SSD_FWD_KERNELS, 3)


def chunk_sums(T: Num, Q: int) -> tuple[Num, Num, Num]:
    """``(chunks, Σq, Σq²)`` over the chunks of ``T`` tokens cut every ``Q``."""
    T = np.asarray(T, dtype=float)
    full, r = np.floor(T / Q), np.mod(T, Q)
    return full + (r > 0), T, full * Q * Q + r * r


def unit_bytes(s: Num, b: Num, H: Num, G: Num, P: int, N: int, Q: int) -> tuple[Num, ...]:
    """Bytes of one ``(X, BC, CBt, H, S)`` unit over ``b`` sequences of ``s`` tokens: the
    per-token sizes times the tokens, a chunk's states once per chunk (a partial last chunk
    whole)."""
    T = b * np.asarray(s, dtype=float)
    chunks = chunk_sums(s, Q)[0] * b
    return (T * H * P * B16, T * G * N * B16, T * G * Q * F32, T * H * F32,
            chunks * H * N * P * F32)


def flop_units(s: Num, b: Num, H: Num, G: Num, P: int, N: int, Q: int) -> tuple[Num, ...]:
    """FLOPs of one ``(Σq²·N·G, Σq²·P·H, s·N·P·H, c·N·P·H)`` unit over ``b`` sequences."""
    c, sq, sq2 = chunk_sums(s, Q)
    return (b * sq2 * N * G, b * sq2 * P * H, b * sq * N * P * H, b * c * N * P * H)


def dot(multiples: tuple[float, ...], units: tuple[Num, ...]) -> Num:
    """``Σ multiple · unit``: one kernel's (or a table's) bytes or FLOPs."""
    return sum(k * u for k, u in zip(multiples, units))
