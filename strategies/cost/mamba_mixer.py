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
(``2·q·N·P`` per head). ``ssd_flops`` is the closed form of that sum over the chunks, and of
the backward's kernels (``_mamba_chunk_scan_combined_bwd``); ``SSD_TRAFFIC`` their HBM
reads and writes. The five unfused kernels are "mostly bottlenecked by memory bandwidth
and latency", writing and reading their intermediates (PyTorch blog, "Accelerating Mamba2
with kernel fusion", 2025, which measured 1.5-2.5x from fusing them on A100/H100): the scan's
time is the larger of its FLOPs at the fused-attention rate the GPU is given
(``GPU.attention_efficiency``, the class of kernel it is) and its HBM bytes at the usable
bandwidth (``ssd_bytes``), over the kernels' measured fraction of that roofline at their grid
(``mamba_kernels``, docs/calibration.md §5.149), plus the backward's eager PyTorch passes
(``ssd_eager_bytes_bwd``) at the HBM rate.
"""
from __future__ import annotations

import numpy as np

from strategies.cost.ssd_traffic import (B16 as _B16, CONV_BWD_EXTRA_PASSES, chunk_sums, dot,
                                         eager_per_head, flop_multiples, flop_units, traffic,
                                         unit_bytes)
from strategies.cost.token_counts import Num, tokens_per_gpu
from strategies.errors import SpecError
from strategies.model import ModelSpec
from topologies.gpus import GPU



def check_tp(m: ModelSpec, tp: int) -> None:
    """``SpecError`` unless tensor parallelism ``tp`` divides the mixer's heads and groups
    (``mamba_mixer.py`` l.262 and l.270: ``nheads % tp_size == 0``, ``ngroups % tp_size == 0``)."""
    if not bool(tp_divides_mixer(m, tp)):
        f = "mamba_num_heads" if m.mamba_num_heads % tp else "mamba_num_groups"
        raise SpecError("plan.tp", tp, f"must divide {m.name}'s {f}={getattr(m, f)} "
                        "(Megatron-Core's MambaMixer splits heads and groups over tp)")


def has_mamba(m: ModelSpec) -> bool:
    """True where ``m`` has Mamba-2 layers (a hybrid pattern with an ``M``)."""
    return bool(m.is_hybrid and m.layer_counts()["mamba"])


def mamba_plan_ok(m: ModelSpec, cp: Num, op_recompute: Num) -> Num:
    """True where context parallelism ``cp`` and op-level recomputation (``op_recompute``)
    are modelled with ``m``'s Mamba-2 layers: ``cp == 1`` and no op-level recomputation
    (True for a model without them). The rule ``check_cp`` and ``check_hybrid_plan`` raise
    and the search's ``cp_seq`` mask applies. Vectorised."""
    if not has_mamba(m):
        return True
    return (np.asarray(cp) == 1) & ~np.asarray(op_recompute, dtype=bool)


def check_cp(m: ModelSpec, cp: int) -> None:
    """``SpecError`` for context parallelism over a model with Mamba layers: Megatron-Core runs
    it (``megatron/core/ssm/mamba_context_parallel.py``: all-to-alls that trade the sequence
    shard for a head shard around the conv and the scan) but it is not modelled here."""
    if not bool(mamba_plan_ok(m, cp, False)):
        raise SpecError("plan.cp", cp, f"{m.name} has Mamba-2 layers: their context "
                        "parallelism (Megatron-Core MambaContextParallel's all-to-alls) is not "
                        "modelled; use cp=1")


def check_hybrid_plan(m: ModelSpec, tp: int, cp: int, recompute: str) -> None:
    """The plan rules of a model with Mamba-2 layers: ``check_tp``, ``check_cp``, and no
    torchtitan op-level recomputation (its save list is written for attention and MLP
    GEMMs only)."""
    if not has_mamba(m):
        return
    check_tp(m, tp)
    check_cp(m, cp)
    if not bool(mamba_plan_ok(m, 1, recompute == "op")):
        raise SpecError("plan.recompute", recompute, f"{m.name} has Mamba-2 layers: op-level "
                        "recomputation (torchtitan's save list) is not modelled for them")


def tp_divides_mixer(m: ModelSpec, tp: Num) -> Num:
    """True where ``tp`` divides the mixer's heads and groups (``mamba_mixer.py`` l.262,
    l.270; True for a model without Mamba layers): the rule ``check_tp`` raises and the
    search's ``tp_heads`` mask applies. Vectorised."""
    if not has_mamba(m):
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


#: Per-token HBM traffic of the SSD kernels, as multiples of ``(X, BC, CBt, H, S)`` bytes:
#: ``X = 2·H·P`` (x, z, y, dout: 16-bit per head dim), ``BC = 2·G·N`` (B or C, 16-bit),
#: ``CBt = 4·G·Q`` (C·Bᵀ, fp32, per token of a chunk), ``H = 4·H`` (dt and its cumsum, fp32),
#: ``S = 4·H·N·P/Q`` (a chunk's states, fp32, per token): the sums of ``ssd_traffic``'s
#: kernel-by-kernel table (mamba_ssm v2.2.0 ``ssd_combined.py``; forward 5 4 2 6.5 3, backward
#: 17 17 6 21.5 8.5).
SSD_TRAFFIC = {False: traffic(False), True: traffic(True)}
#: the forward without the gate ``z`` (the chunk scan reads x, not z, and writes y alone)
SSD_FWD_NO_GATE = traffic(False, gate=False)


def shape_flops(s: Num, b: Num, H: Num, G: Num, P: int, N: int, Q: int,
                backward: bool = False) -> Num:
    """FLOPs of the SSD scan over ``b`` sequences of ``s`` tokens with ``H`` heads of ``P``
    dims, ``G`` groups of state ``N``, chunks of ``Q``: ``ssd_flops``' closed form at any
    shape (the benchmarks' shapes of ``mamba_kernels`` too), ``ssd_traffic``'s kernels summed:
    ``(2, 2, 4, 2)`` forward, ``(6, 6, 10, 4)`` backward units."""
    return dot(flop_multiples(backward), flop_units(s, b, H, G, P, N, Q))


def shape_bytes(s: Num, b: Num, H: Num, G: Num, P: int, N: int, Q: int,
                backward: bool = False, gate: bool = True) -> Num:
    """HBM bytes of the SSD kernels over ``b`` sequences of ``s`` tokens (``shape_flops``'
    shape): ``SSD_TRAFFIC``'s multiples of ``ssd_traffic.unit_bytes`` (the chunk states once
    per chunk, a partial last chunk whole). ``gate`` False: the forward without ``z``
    (``mamba_chunk_scan_combined(..., z=None)``: the chunk scan reads no ``z`` and writes
    one output, ``SSD_FWD_NO_GATE``)."""
    k = SSD_TRAFFIC[backward] if (backward or gate) else SSD_FWD_NO_GATE
    return dot(k, unit_bytes(s, b, H, G, P, N, Q))


def ssd_flops(m: ModelSpec, b: Num, tp: Num, cp: Num = 1, backward: bool = False) -> Num:
    """FLOPs of the SSD scan on one GPU, forward or ``backward`` (module docstring): per
    sequence of ``s`` tokens, with ``H/tp`` heads and ``G/tp`` groups, chunks ``c``, ``Σq = s``,
    ``Σq²``, the forward ``2·Σq²·N·G + 2·Σq²·P·H + 4·s·N·P·H + 2·c·N·P·H`` (C·Bᵀ, the
    intra-chunk output, the chunk states and their read-out, the state passing); the
    backward (``_mamba_chunk_scan_combined_bwd``: C·Bᵀ, the chunk states and their passing
    recomputed; dstates, their passing back, dx's two contractions, dB, dC, dCB, the two
    C·Bᵀ backwards, ddA) ``6·Σq²·N·G + 6·Σq²·P·H + 10·s·N·P·H + 4·c·N·P·H``; times ``b``
    sequences. The ``D`` skip and the gate are elementwise (``SSD_TRAFFIC``)."""
    s = tokens_per_gpu(1, m.seq_length, cp)
    return shape_flops(s, b, m.mamba_num_heads / tp, m.mamba_num_groups / tp,
                       m.mamba_head_dim, m.mamba_state_dim, m.mamba_chunk_size, backward)


def ssd_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num = 1, backward: bool = False) -> Num:
    """HBM bytes the SSD kernels move on one GPU (per rank: ``H/tp`` heads, ``G/tp`` groups),
    forward or ``backward``: ``SSD_TRAFFIC``'s multiples of the per-token sizes over the
    GPU's tokens (the chunk states per chunk: ``T/Q`` of them, a partial last chunk whole)."""
    s = tokens_per_gpu(1, m.seq_length, cp)
    return shape_bytes(s, b, m.mamba_num_heads / tp, m.mamba_num_groups / tp,
                       m.mamba_head_dim, m.mamba_state_dim, m.mamba_chunk_size, backward)


def mixer_elementwise_bytes_fwd(m: ModelSpec, b: Num, tp: Num, cp: Num = 1,
                                layout_copies: bool = True) -> Num:
    """HBM bytes of the mixer's kernels around the scan in the forward, one GPU: the causal
    conv1d reads ``x, B, C`` (``conv_dim/tp`` 16-bit per token) and writes its SiLU output;
    the gated RMSNorm reads the scan's output and writes its own (``d_inner/tp`` each; the
    gate ``z`` is read by the scan, ``SSD_TRAFFIC``). With a micro-batch of more than one
    sequence, ``MambaMixer`` copies ``in_proj``'s output from Megatron's ``[s, b, h]`` to
    ``[b, s, h]`` before the scan and the scan's output back before the norm (``rearrange(...)
    .contiguous()``, Megatron-Core core_v0.12.0 mamba_mixer.py l.313 and l.423, d98e8a64
    l.691 and l.727; with one sequence both are views): ``in_proj_width/tp + d_inner/tp``
    read and written. The backward prices twice these bytes (``layer_time``): its gradients
    come back through the same permutes and are copied by their consumers.
    ``layout_copies`` False: a batch-first model (NeMo AutoModel's ``NemotronV3Mamba2Mixer``,
    whose ``in_proj`` output is already ``[b, s, h]``) makes no such copies."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    conv, di = m.mamba_conv_dim / tp, m.mamba_d_inner / tp
    copies = np.where(np.asarray(b) > 1, 2 * (m.mamba_in_proj_width / tp + di), 0.0) \
        * float(layout_copies)
    return T * _B16 * (2 * conv + 2 * di + copies)


#: Per-token bytes per head of the backward's eager passes and zero-fills beside
#: ``SSD_TRAFFIC``'s kernels (``ssd_traffic.BWD_EAGER_PER_HEAD``: 52 from §5.149, 28 from §5.160);
#: and the head-split partials of dB, dC (``_chunk_state_bwd_db``, ``_chunk_scan_bwd_dC``) and
#: dCB (``_chunk_scan_bwd_dcb``; mamba_ssm v2.2.0 ssd_chunk_state.py l.815-839, ssd_chunk_scan.py
#: l.1443-1463 and l.1489-1510): each kernel writes ``nsplits`` fp32 partials where the table
#: counts one 16-bit dB/dC (one fp32 dCB), and an eager ``.sum(2)`` reads them and writes
#: one fp32 result: ``(8·k + 2)`` bytes per B or C element, ``8·k`` per dCB element.
SSD_BWD_EAGER_H = eager_per_head()


def head_splits(b: Num, chunks: Num, H: Num, G: Num, sms: int) -> Num:
    """``nsplits`` of the backward's dB/dC/dCB kernels (ssd_chunk_state.py l.815-818):
    ``ceil((H/G) / max(min(ceil(b·chunks·H/sms), H/G), 1))``."""
    ratio = np.asarray(H, dtype=float) / G
    per = np.maximum(np.minimum(np.ceil(b * chunks * np.asarray(H, dtype=float) / sms), ratio), 1)
    return np.ceil(ratio / per)


def ssd_eager_bytes_bwd(m: ModelSpec, b: Num, tp: Num, cp: Num, sms: int) -> Num:
    """HBM bytes of the SSD backward's passes outside ``SSD_TRAFFIC`` on one GPU
    (``SSD_BWD_EAGER_H``, the head-split partials and their sums) with ``sms`` SMs, plus the
    combined function's conv passes beyond twice its forward's (``conv_recompute_bytes``)."""
    s = tokens_per_gpu(1, m.seq_length, cp)
    T = b * np.asarray(s, dtype=float)
    N, Q = m.mamba_state_dim, m.mamba_chunk_size
    H, G = m.mamba_num_heads / tp, m.mamba_num_groups / tp
    k = head_splits(b, chunk_sums(s, Q)[0], H, G, sms)
    return T * ((8 * k + 2) * 2 * G * N + 8 * k * G * Q + SSD_BWD_EAGER_H * H) \
        + conv_recompute_bytes(m, b, tp, cp)


def conv_recompute_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num = 1) -> Num:
    """HBM bytes on one GPU of the conv1d passes ``MambaSplitConv1dScanCombinedFn.backward``
    makes beyond the twice-forward ``layer_time`` charges its elementwise kernels: it reruns
    ``causal_conv1d_fwd`` (read and write) before ``causal_conv1d_bwd`` (two reads, one
    write), ``ssd_traffic.CONV_BWD_EXTRA_PASSES`` pass of ``conv_dim/tp`` 16-bit per token."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    return T * _B16 * CONV_BWD_EXTRA_PASSES * m.mamba_conv_dim / tp


def scan_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, hbm: float,
              backward: bool = False) -> Num:
    """Seconds of the SSD scan on one GPU, forward or ``backward``: the larger of its kernels'
    FLOPs at ``peak · attention_efficiency`` and their bytes at ``hbm`` (bytes/s,
    ``usable_hbm``; ``mamba_kernels.roofline_s``, the roofline its calibration reads), over the kernels' measured fraction of that roofline at this grid
    (``mamba_kernels.scan_factor``); the backward's eager passes and head-split partials
    (``ssd_eager_bytes_bwd``) at ``hbm``."""
    from strategies.cost.mamba_kernels import roofline_s, scan_factor, sm_count
    s = tokens_per_gpu(1, m.seq_length, cp)
    roof = roofline_s(s, b, m.mamba_num_heads / tp, m.mamba_num_groups / tp, m.mamba_head_dim,
                      m.mamba_state_dim, m.mamba_chunk_size, hbm,
                      gpu.peak("bf16") * gpu.attention_efficiency, backward)
    t = roof * scan_factor(s, b, m.mamba_num_heads / np.asarray(tp, dtype=float),
                           m.mamba_chunk_size, gpu)
    if backward:
        t = t + ssd_eager_bytes_bwd(m, b, tp, cp, sm_count(gpu)) / hbm
    return t


def mamba_scan_time(m: ModelSpec, b: Num, tp: Num, cp: Num, gpu: GPU, hbm: float
                    ) -> tuple[Num, Num]:
    """(forward, backward) seconds of the mean layer's SSD scans on one GPU:
    ``ModelSpec.mamba_share`` scans at ``scan_time`` (the backward's own kernels: the chunk
    states and C·Bᵀ recomputed from the saved ``zxBCdt``, then its gradients)."""
    w = m.mamba_share
    return (w * scan_time(m, b, tp, cp, gpu, hbm),
            w * scan_time(m, b, tp, cp, gpu, hbm, backward=True))


#: ``d_inner``-wide 16-bit tensors Megatron-Core's mixer keeps for its backward
#: (``saved_terms``): the function's ``out_x``, the norm's input, ``out_proj``'s input
SAVED_D_INNER = 3


def saved_terms(m: ModelSpec, seq_len: int, micro_batch_size: int) -> dict[str, float]:
    """Bytes one mixer layer keeps for its backward, one micro-batch, before any parallel split,
    as ``memory.layer_terms`` names its tensors: ``mamba_seq`` (split by ``t`` only with SP)
    the pre-norm's input and ``in_proj``'s input (the normed hidden state), ``2sbh`` each;
    ``mamba_tp`` (split by ``t``) what ``MambaSplitConv1dScanCombinedFn.forward`` saves
    (mamba_ssm v2.2.0 ``ssd_combined.py`` l.822: ``zxbcdt``, ``in_proj_width`` wide, and
    ``out_x``, the scan's output before the ``silu(z)`` gate, ``d_inner``; it recomputes the
    conv and the chunk states), the gated output the function returns, which Megatron's
    ``self.norm(y)`` saves as its input (``layernorm_gated.py`` l.360, Megatron-LM 3cdfd613
    ``mamba_mixer.py`` l.340), and the norm's output, ``out_proj``'s input (l.424): three
    ``d_inner`` tensors (§5.165; the norm's fp32 ``rstd``, 4 bytes a token and group, left
    out as every norm's is)."""
    sb = seq_len * micro_batch_size
    return {"mamba_seq": 2 * _B16 * sb * m.hidden_size,
            "mamba_tp": _B16 * sb * (m.mamba_in_proj_width + SAVED_D_INNER * m.mamba_d_inner)}
