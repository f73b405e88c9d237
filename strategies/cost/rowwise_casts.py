"""torchao's float8 rowwise recipe (``fp8-rowwise``): the HBM bytes of the casts of one
``Float8Linear``'s three GEMMs, and of a layer's, per micro-batch on one GPU.

What torchao runs (pytorch/ao 6243040, 2025-06-13, the commit torchtitan's June 2025 async-TP
benchmark names; ``torchao/float8/float8_linear.py`` ``matmul_with_hp_or_float8_args``,
``config.py`` ``Float8LinearConfig.from_recipe_name(ROWWISE)``,
``float8_utils.py`` ``tensor_to_amax``/``amax_to_scale``, ``float8_ops.py``
``addmm_float8_unwrapped``). For ``Y = X·Wᵀ``, ``X`` ``t x k`` tokens by input features, ``W``
``n x k``, ``dY`` ``t x n``, every operand is cast from bf16 by the GEMM that reads it, along
that GEMM's K, with one fp32 scale per reduced line (``torch.amax(abs(x), dim)``):

* output (``X·Wᵀ``, K = k): ``X`` along k (``axiswise_dim=-1``: ``t`` scales) and ``W`` along
  k (``axiswise_dim=0`` of ``Wᵀ``: ``n`` scales);
* grad-input (``dY·W``, K = n): ``dY`` along n (``t`` scales) and ``W`` again, along n
  (``axiswise_dim=-1`` of ``Wᵀ``: ``k`` scales), from the bf16 weight (a second quantisation,
  not a transpose of the first: the scales run along the other axis);
* grad-weight (``dYᵀ·X``, K = t): ``dY`` along t (``n`` scales) and ``X`` along t (``k``
  scales), both again from bf16: the forward saves ``X`` in bf16 (``ctx.save_for_backward(
  input_hp, weight_hp_t)``).

A cast along the contiguous axis (a row of the row-major tensor) finds its amax in its own
kernel (a row reduction followed by the cast, one Inductor kernel: ``Precision.cast_bytes``,
2 + 1 bytes per element, or the fp8 copy alone where the producing norm or activation
kernel writes it beside its bf16 output); a cast along the strided axis (a column: the
weight gradient's ``X`` and ``dY``, the data gradient's ``W``) needs the column amaxes
before any element is cast, so an amax kernel reads the tensor and the cast kernel reads it
again (``Precision.column_cast_bytes``, 2 + 2 + 1). torchao's own roofline
(``torchao/testing/float8/roofline_utils.py`` ``get_tensor_memory_traffic_ovhd_s``, rowwise)
counts the same 8 bytes per element of an activation or gradient unfused and 6 fused (a
bf16 transposed copy and a row cast where we count an amax pass and a strided cast), and
10 for a weight where we count 8. Each scale is ``Precision.scale_bytes`` (fp32).

The backward GEMMs do not fast-accumulate (``gemm_config_grad_input`` and
``_grad_weight`` default ``use_fast_accum=False``), and for rowwise scales without fast
accumulation torchao runs cuBLAS's tensorwise kernel with unit scales and rescales the
output afterwards (``addmm_float8_unwrapped``: "The rowwise CUTLASS-based kernel is so slow
without fast-accum that we'd rather use the tensorwise cuBLAS-based kernel and do the
scaling manually afterwards (hoping Inductor will be able to fuse it)": ``output *=
post_inverse_scale``). So the two backward GEMMs run at the per-tensor fp8 rate, and each
output is read and written once more (``RESCALE_BYTES``) unless a pointwise consumer
absorbs the multiply: the data gradient of a column-parallel linear flows into the sum of
the projections' data gradients or the norm's backward, and ``w2``'s into the activation's
backward, both pointwise kernels Inductor fuses it into; ``wo``'s flows into the attention
kernel's backward (an extern kernel) and every weight gradient is the graph's output, so
those pay the pass. The forward GEMM fast-accumulates and runs PyTorch's CUTLASS rowwise
kernel (``aten/src/ATen/native/cuda/RowwiseScaledMM.cu``), scales applied in its epilogue.

Units: bytes per micro-batch, one GPU. Vectorised over numpy arrays of plan fields.
"""
from __future__ import annotations

import numpy as np

from strategies.cost.token_counts import Num, tokens_per_gpu
from strategies.model import ModelSpec
from topologies.precision import get_precision

#: bytes one rescale of a backward GEMM's bf16 output moves where no pointwise consumer
#: absorbs it (module doc): a read and a write of 2 bytes
RESCALE_BYTES = 4.0
ROWWISE = "fp8-rowwise"


def linear_cast_bytes(t: Num, k: Num, n: Num, x_fused: Num = False, dy_fused: Num = False,
                      dgrad_rescaled: Num = False) -> tuple[Num, Num, Num]:
    """HBM bytes of one rowwise ``Float8Linear``'s casts per micro-batch, by GEMM:
    ``(output, grad_input, grad_weight)`` (module doc), for ``t`` tokens, ``k`` input and
    ``n`` output features on this GPU. ``x_fused``: the input's row cast is written by the
    kernel that produces it (a norm or an activation); ``dy_fused``: the same for the output
    gradient (an activation's backward); ``dgrad_rescaled``: the data gradient's rescale is a
    pass of its own (no pointwise consumer). Closed form, ``c = Precision.cast_bytes``,
    ``col = Precision.column_cast_bytes()``, ``s`` the scale bytes:
    output ``t·k·c(x_fused) + s·t + n·k·c(False) + s·n``; grad-input ``t·n·c(dy_fused) + s·t
    + n·k·col + s·k + dgrad_rescaled·t·k·RESCALE_BYTES``; grad-weight ``t·n·col + s·n +
    t·k·col + s·k + n·k·RESCALE_BYTES``."""
    p = get_precision(ROWWISE)
    s, col = p.scale_bytes, p.column_cast_bytes()
    t, k, n = (np.asarray(v, dtype=float) for v in (t, k, n))

    def row(fused: Num) -> Num:
        return np.where(fused, p.cast_bytes(1, True), p.cast_bytes(1, False))
    out = t * k * row(x_fused) + s * t + n * k * row(False) + s * n
    gi = t * n * row(dy_fused) + s * t + n * k * col + s * k \
        + np.where(dgrad_rescaled, t * k * RESCALE_BYTES, 0.0)
    gw = t * n * col + s * n + t * k * col + s * k + n * k * RESCALE_BYTES
    return out[()], gi[()], gw[()]


def layer_linears(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num,
                  routed_unfused: Num = False, mlp_unfused: Num = False) -> list[tuple]:
    """The converted linears of the mean layer on one GPU per micro-batch, each
    ``(weight, t, k, n, x_fused, dy_fused, dgrad_rescaled)`` with ``weight`` its share of the
    mean layer. torchtitan's regular TP runs under rowwise (``apply_tp`` with
    ``enable_float8_tensorwise_tp`` False): a column-parallel linear reads the bf16 input
    all-gathered over ``T`` tokens under sequence parallelism (cast after the gather, so not
    by the norm), ``n/tp`` output features; a row-parallel one (the attention's output
    projection, the MLP's second GEMM) ``k/tp`` input features, its output gradient
    all-gathered in bf16 (cast after the gather). The attention's projections as the model
    lists them (``ModelSpec.attention_linears``; torchtitan's separate ``wq``/``wk``/``wv`` cast
    the one input once, Inductor's CSE of identical ops, and their weights and gradients sum
    to the fused widths), at the mean layer's share of them (``ModelSpec.mixer_linears``: a
    hybrid model's attention share, its Mamba-2 mixers' ``in_proj`` and ``out_proj`` at theirs,
    cast as the attention's projections of the same split); MLPs as
    ``quantise.layer_cast_elements`` reads them (``up`` projections of a gated MLP in one,
    fc2's input and fc1's gradient cast by the activation unless
    ``routed_unfused``/``mlp_unfused``; routed experts at ``topk`` tokens with one
    expert's weight: torchao's ``Float8Linear`` converts ``nn.Linear`` modules, and the
    rows' torchtitan runs its grouped experts outside it, so a rowwise MoE plan is priced
    as if its experts were one linear)."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    h, up = m.hidden_size, (2 if m.gated else 1)
    gathered = (np.asarray(tp) > 1) & np.asarray(sp, dtype=bool)
    out: list[tuple] = []
    for _, w0, linears in m.mixer_linears():   # a hybrid model's at their shares
        for _, k_in, n_out, split in linears:
            if split == "row":                 # input from the attention (or scan) kernel
                out.append((w0, T, k_in / tp, n_out, False, False, True))
            else:                              # after a norm; dY from the attention kernel
                out.append((w0, T, k_in, n_out / (tp if split == "col" else 1.0),
                            ~gathered, False, False))
    for kind, w in m.layer_shares().items():
        widths = [(1.0, m.ffn_hidden_size, False)] if kind == "dense" else \
            [(float(m.moe_router_topk), m.expert_ffn, True)] + \
            ([(1.0, m.num_shared_experts * m.shared_ffn, False)] if m.num_shared_experts
             else [])
        for copies, F, routed in widths:
            act = ~np.asarray(routed_unfused if routed else mlp_unfused, dtype=bool)
            first_fused = False if routed else ~gathered   # routed: after the permutation
            k = m.expert_hidden if routed else h         # a latent MoE's experts: L wide
            out.append((w, copies * T, k, up * F / tp, first_fused, act, False))
            out.append((w, copies * T, F / tp, k, act, False, False))
    return out


def layer_cast_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num,
                     routed_unfused: Num = False, mlp_unfused: Num = False
                     ) -> tuple[Num, Num]:
    """(forward, backward) HBM bytes of the mean layer's rowwise casts per micro-batch on one
    GPU: ``linear_cast_bytes`` over ``layer_linears``, the output GEMM's casts forward, the
    two gradient GEMMs' backward (recomputation reruns the forward's with the forward)."""
    fwd = bwd = 0.0
    for w, t, k, n, xf, dyf, resc in layer_linears(m, b, tp, cp, sp, routed_unfused,
                                                    mlp_unfused):
        o, gi, gw = linear_cast_bytes(t, k, n, xf, dyf, resc)
        fwd = fwd + w * o
        bwd = bwd + w * (gi + gw)
    return fwd, bwd
