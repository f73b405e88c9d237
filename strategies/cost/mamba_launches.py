"""Kernel launches of one Mamba-2 layer as Megatron-Core runs it in training, counted one by
one, and the launch gaps they cost beside the stack profile's per-layer count
(docs/calibration.md §5.165).

The stack profile charges every layer ``FrameworkProfile.kernels_per_layer`` launch gaps in
its forward and twice as many in its backward (``elementwise_time.launch_time``; 16 and 32 on
Megatron-Core, counted from a transformer layer). A hybrid model's Mamba layer launches
more: this table counts them from the code of the stack the DGX-Cloud Nemotron-H rows ran
(NeMo 25.04.01: Megatron-LM 3cdfd613, mamba_ssm v2.2.0, causal-conv1d v1.2.2.post1; the SSD
kernels themselves are ``ssd_traffic``'s table, counted from it), and ``mamba_launch_time``
charges the difference at the same gap per kernel boundary (``measured.launch_gap``).

What is a launch here: a CUDA kernel, a Triton kernel or a NCCL collective on the compute
stream. Views (``torch.split``, ``rearrange`` of a contiguous tensor, ``.contiguous()`` of a
contiguous one, ``.to()`` to the same dtype, ``torch.empty``) launch nothing. Every Triton
``pre_hook=init_to_zero`` is one ``zero_()`` per named tensor. Megatron's ``Float16Module``
casts every parameter to bf16 (``megatron/core/transformer/module.py`` l.162), ``A_log``,
``dt_bias`` and ``D`` included, so their ``.float()`` is a kernel. ``MambaLayer``'s own norm
is the identity (the pre-norm is fused into ``in_proj``, ``TELayerNormColumnParallelLinear``;
``mamba_layer_specs.py``). With one sequence a micro-batch the ``[s, b, h]``/``[b, s, h]``
rearranges are views (``mamba_mixer.mixer_elementwise_bytes_fwd``); with more, each is a copy
(``LAYOUT_COPIES``). Host cost: the rule charges the GPU-side gap per boundary. Triton's
launcher spends more host time per launch than a CUDA kernel's, but nothing in this path
synchronises the host (no ``.item()``, no ``torch.cuda.synchronize``; the autotuners'
``best_config`` reads are host-side after the first step), so host time shows only where it
exceeds the GPU time of the queue, which ``layer_time`` does not price for asynchronous
streams; no public measurement of Triton's per-launch host time at the rows' version was
found (§5.165): the CUDA launch gap is charged."""
from __future__ import annotations

import numpy as np

from strategies.cost import measured
from strategies.cost.quant_scope import QuantScope, gemm_key, quantised_share, scope_of
from strategies.cost.ssd_traffic import SSD_BWD_KERNELS, SSD_FWD_KERNELS
from strategies.cost.token_counts import Num
from strategies.framework import FrameworkProfile
from strategies.model import ModelSpec
from topologies.gpus import GPU
from topologies.precision import get_precision

#: (launch, source, count) of one ``MambaLayer`` forward with ``tp = 1``, 16-bit GEMMs and one
#: sequence (Megatron-LM 3cdfd613 ``megatron/core/ssm/mamba_mixer.py``,
#: ``mamba_layer.py``; mamba_ssm v2.2.0 ``ops/triton/ssd_combined.py``,
#: ``layernorm_gated.py``; causal-conv1d v1.2.2.post1 ``csrc/causal_conv1d.cpp``)
LAYER_FWD = (
    ("A_log.float(), exp, neg", "mamba_mixer.py l.308", 3),
    ("in_proj: TE RMSNorm (the fused pre-norm)", "mamba_mixer.py l.310", 1),
    ("in_proj: GEMM", "mamba_mixer.py l.310", 1),
    ("dt_bias.float()", "mamba_mixer.py l.325", 1),
    ("causal_conv1d_fwd (channel-last)", "ssd_combined.py l.779", 1),
    ("SSD forward kernels", "ssd_traffic.SSD_FWD_KERNELS", len(SSD_FWD_KERNELS)),
    ("gated RMSNorm _layer_norm_fwd", "mamba_mixer.py l.340; layernorm_gated.py l.359", 1),
    ("out_proj: GEMM", "mamba_mixer.py l.424", 1),
    ("bias-dropout-add (fused)", "mamba_layer.py l.124", 1),
)

#: the same for its backward (autograd runs them in reverse; the combined function's
#: backward is ``MambaSplitConv1dScanCombinedFn.backward``, ssd_combined.py l.836-908, and
#: ``_mamba_chunk_scan_combined_bwd``, l.376-444)
LAYER_BWD = (
    ("gradient sum at the layer input (residual + in_proj dgrad)", "mamba_layer.py l.114", 1),
    ("out_proj: dgrad and wgrad GEMMs", "TERowParallelLinear", 2),
    ("gated RMSNorm: _layer_norm_bwd, _dw.sum(0), .to(bf16)", "layernorm_gated.py l.333", 3),
    ("causal_conv1d_fwd again (x, B, C recomputed)", "ssd_combined.py l.853", 1),
    ("dt.clone()", "ssd_combined.py l.376", 1),
    ("SSD backward kernels", "ssd_traffic.SSD_BWD_KERNELS", len(SSD_BWD_KERNELS)),
    ("dz kernel's dD: sum, .to(bf16)", "ssd_chunk_scan.py l.1387", 2),
    ("state passing's ddA: sum over blocks", "ssd_state_passing.py l.278", 1),
    ("dx kernel: zero_() of ddt (pre_hook)", "ssd_combined.py l.50-60", 1),
    ("dx kernel's dD: sum, .to(bf16)", "ssd_combined.py l.275", 2),
    ("dB kernel: zero_() of ddA (pre_hook), dB.sum(2), cumsum", "ssd_chunk_state.py l.354-845", 3),
    ("dC kernel: zero_() of ddA_prev (pre_hook), dC.sum(2)", "ssd_chunk_scan.py l.509-1463", 2),
    ("dCB's dcb.sum(2)", "ssd_chunk_scan.py l.1510", 1),
    ("ddA_cumsum_prev[..., -1] += ddA_chunk_cumsum", "ssd_combined.py l.436", 1),
    ("flip, cumsum, flip", "ssd_combined.py l.437", 3),
    ("ddAcs kernel's sum(dim=3)", "ssd_chunk_scan.py l.1670", 1),
    ("ddA += ddA_next + ddA_prev", "ssd_combined.py l.442", 2),
    ("cumsum backward: zero_() of dA and ddt_bias (pre_hook)", "ssd_chunk_state.py l.83-91", 2),
    ("causal_conv1d_bwd: zeros dweight, kernel, .to(bf16)", "causal_conv1d.cpp l.75-142", 3),
    ("A's backward: neg, exp, cast; dt_bias's cast", "mamba_mixer.py l.308, l.325", 4),
    ("in_proj: dgrad and wgrad GEMMs", "TELayerNormColumnParallelLinear", 2),
    ("in_proj: TE RMSNorm backward and its dgamma reduction", "TELayerNormColumnParallelLinear", 2),
)

#: per parameter whose gradient is not accumulated by a fused GEMM, each micro-batch's
#: ``main_grad.add_(grad)`` (Megatron-Core DDP's hook, ``distributed_data_parallel.py``
#: l.413-415): ``A_log``, ``D``, ``dt_bias``, the conv weight, the gated norm's and the fused
#: pre-norm's weights; the conv bias and the projections' biases where the model has them
MAIN_GRAD_ADDS = 6
#: with a conv bias: ``causal_conv1d_bwd``'s ``zeros_like`` and ``.to()`` of dbias, its add
CONV_BIAS_BWD = 3
#: with projection biases: each bias's add into ``main_grad`` (2)
PROJ_BIAS_BWD = 2
#: with dropout (``ModelSpec.dropout``): the bias-dropout-add's mask product in the backward
#: (with ``p = 0`` PyTorch's ``dropout`` returns its input: no kernel either way)
DROPOUT_BWD = 1
#: tensor-parallel collectives (forward, backward) at ``tp > 1``; with sequence parallelism
#: the all-gather before ``in_proj`` and the reduce-scatter after ``out_proj``, in the
#: backward the all-gather of ``out_proj``'s dY, ``in_proj``'s re-gather of its saved local
#: input for the weight gradient and the reduce-scatter of its dgrad; without, one all-reduce
#: each way
TP_COLLECTIVES = {True: (2, 3), False: (1, 1)}
#: (forward, backward) ``rearrange(...).contiguous()`` copies with several sequences a
#: micro-batch (``mixer_elementwise_bytes_fwd``'s two, their gradients copied back)
LAYOUT_COPIES = (2, 2)
#: per linear, (forward, backward) cast kernels where it runs quantised, as
#: ``quantise.layer_cast_elements`` prices the mixer's casts: ``out_proj``'s input (from the
#: Triton norm) and its dY; ``in_proj``'s dY (its input is cast by the fused pre-norm); each
#: cast one kernel more where the recipe needs the tensor's amax first (``Precision.amax_pass``)
CASTS = {"out_proj": (1, 1), "in_proj": (0, 1)}


def table_count(rows: tuple) -> int:
    """Launches of a table (``LAYER_FWD`` or ``LAYER_BWD``)."""
    return sum(n for _, _, n in rows)


def cast_kernels(m: ModelSpec, scope: QuantScope | None, row_parallel: bool, dtype: str) -> int:
    """Kernels of one cast of a mixer linear's operand in its format (the scope's ``alt`` one
    where it names the linear, else ``dtype``): 1, 2 where the recipe needs the tensor's amax
    first (``Precision.amax_pass``), 0 in 16 bits."""
    fmt = dict(scope.alt).get(gemm_key("mamba", row_parallel), dtype) if scope else dtype
    p = get_precision(fmt)
    return (1 + int(p.amax_pass)) if p.quantised else 0


def layer_kernels(m: ModelSpec, b: Num, tp: Num, sp: Num, dtype: str,
                  scope: float = 0.0) -> tuple[Num, Num]:
    """(forward, backward) launches of one Mamba layer and micro-batch of ``b`` sequences on one
    GPU: the tables, the bias and dropout terms where ``m`` has them, the TP collectives at ``tp > 1``
    (``sp``: sequence parallelism), the layout copies with ``b > 1``, and ``CASTS`` weighted by
    the mixer GEMMs' quantised share (``quant_scope.quantised_share``; 0 in 16 bits).
    Vectorised."""
    b, tp = np.asarray(b, dtype=float), np.asarray(tp, dtype=float)
    sp_on = np.asarray(sp, dtype=bool)
    multi = np.where(tp > 1, 1.0, 0.0)
    coll_f = multi * np.where(sp_on, TP_COLLECTIVES[True][0], TP_COLLECTIVES[False][0])
    coll_b = multi * np.where(sp_on, TP_COLLECTIVES[True][1], TP_COLLECTIVES[False][1])
    copies = np.where(b > 1, 1.0, 0.0)
    sc = scope_of(scope)
    q = {name: quantised_share(m, sc, "mamba", row) * cast_kernels(m, sc, row, dtype)
         for name, row in (("out_proj", True), ("in_proj", False))}
    bias_b = (CONV_BIAS_BWD if m.mamba_conv_bias else 0) \
        + (PROJ_BIAS_BWD if m.mamba_proj_bias else 0) + (DROPOUT_BWD if m.dropout else 0)
    fwd = table_count(LAYER_FWD) + coll_f + LAYOUT_COPIES[0] * copies \
        + sum(CASTS[k][0] * q[k] for k in CASTS)
    bwd = table_count(LAYER_BWD) + MAIN_GRAD_ADDS + bias_b + coll_b \
        + LAYOUT_COPIES[1] * copies + sum(CASTS[k][1] * q[k] for k in CASTS)
    return fwd, bwd


def runs_megatron_mixer(fw: FrameworkProfile) -> bool:
    """True where the stack runs Megatron-Core's ``MambaMixer`` (its fused elementwise
    kernels, ``fw.elementwise_kernels == "fused"``); NeMo AutoModel's eager mixer
    (``"eager_te"``) gates and norms inside the combined function and is not counted here."""
    return fw.elementwise_kernels == "fused"


def mamba_launch_time(m: ModelSpec, b: Num, tp: Num, sp: Num, dtype: str, fw: FrameworkProfile,
                      gpu: GPU | None, scope: float = 0.0) -> tuple[Num, Num]:
    """(forward, backward) seconds of the mean layer's Mamba launches beyond what the profile's
    count charges them: ``mamba_share · gap · (K_f − k, K_b − 2k)`` with ``(K_f, K_b)``
    ``layer_kernels`` and ``k = fw.kernels_per_layer``, ``gap`` ``measured.launch_gap``;
    0 for a model without Mamba layers or a stack that does not run Megatron-Core's mixer."""
    z = 0.0 * np.asarray(b, dtype=float)
    if not (m.is_hybrid and m.mamba_share) or not runs_megatron_mixer(fw):
        return z[()], z[()]
    k_f, k_b = layer_kernels(m, b, tp, sp, dtype, scope)
    w = m.mamba_share * measured.launch_gap(gpu, fw.launch_gap_s)
    k = fw.kernels_per_layer
    return (w * (k_f - k) + z)[()], (w * (k_b - 2 * k) + z)[()]
