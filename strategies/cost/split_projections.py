"""Projections a stack runs as separate linears over one input (``FrameworkProfile.
separate_projections``): what they cost beyond the fused GEMM the layer's GEMM list prices
(docs/calibration.md §5.142).

The cost model's layer lists Megatron's fused linears (``gemm_shapes.layer_gemm_parts``):
one ``linear_qkv`` of ``(a + 2g)·d/tp`` columns and a gated MLP's one ``linear_fc1`` of
``2F/tp``. torchtitan's Llama (pytorch/torchtitan 9dec370 ``torchtitan/models/llama/
model.py``: ``Attention.__init__`` lines 158-163, ``self.wq``/``self.wk``/``self.wv``, three
``nn.Linear``; ``forward`` line 189, ``xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)``;
``FeedForward`` lines 248-253, ``self.w2(F.silu(self.w1(x)) * self.w3(x))``) runs them
apart, and so does torchao's ``Float8Linear``, which swaps each ``nn.Linear`` alone. So per
layer and micro-batch it runs, for each group of ``k`` projections of one input:

* ``k`` forward GEMMs of their own widths in place of one: Q's ``a·d/tp`` and K's and V's
  ``g·d/tp`` columns (128 for Llama 3.1 70B and 405B at tp 8: one tile wide, about half the
  rate of a wide GEMM), the gate's and the up projection's ``F/tp`` each;
* ``k`` data-gradient and ``k`` weight-gradient GEMMs, the data gradients each writing the
  whole ``T × h`` input gradient (K's and V's at a depth of ``g·d/tp``: output-bound);
* the sum of the ``k`` input gradients, which autograd forms before the gradient leaves the
  projections (``grad_sum_bytes``): eager, ``k − 1`` in-place adds (read 2, read 2, write 2
  bytes per element each; autograd's ``InputBuffer::accumulate``); compiled under tensor
  parallelism, one inductor kernel that reads the ``k`` bf16 gradients and writes their sum
  for the collective that follows (the all-reduce, or under sequence parallelism the
  all-gather's backward reduce-scatter: an extern kernel, so its input is materialised;
  ``2k + 2`` bytes per element); compiled at ``tp = 1``, the sum fuses into the norm's
  backward, which reads the gradient anyway (``k − 1`` more reads).

Each GEMM is priced by ``gemm_time`` as the layer's are (its shape, rate, waves, fixed
time, async TP's pieces); the term is the separate GEMMs' seconds less the fused one's, and
the sum's bytes at the usable HBM rate. The op-level SAC rerun (``recompute = op``) keeps the
fused price (its saved GEMMs are read per op, ``gemm_shapes.op_sac_gemm_parts``); full
recomputation reruns the forward's share with the rest of the forward. MLA's projections and
routed experts are left as priced. Units: seconds per layer and micro-batch on one GPU;
vectorised over plan arrays."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost.gemm_shapes import separate_qkv_gemms
from strategies.cost.gemm_time import gemms_time_bwd_split, gemms_time_fwd
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num, tokens_per_gpu
from strategies.model import ModelSpec
from strategies.stacks.profile import FrameworkProfile
from topologies.gpus import GPU

#: bytes per input-gradient element of a bf16 gradient
GRAD_ELEMENT_BYTES = 2.0


def projection_groups(m: ModelSpec, b: Num, tp: Num, cp: Num
                      ) -> list[tuple[tuple, list[tuple], int, Any]]:
    """The groups of projections over one input that a separate-projection stack runs apart:
    ``(fused GEMM, separate GEMMs, k, input-gradient elements)``, GEMMs as
    ``gemm_shapes.layer_gemms`` tuples ``(count, M, N, K, row_parallel)``: the attention's
    Q, K, V (not MLA's) and the dense share of a gated MLP's gate and up projections."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    h = m.hidden_size
    out: list[tuple[tuple, list[tuple], int, Any]] = []
    if not m.is_mla:
        a, g, d = m.num_attention_heads, m.kv_heads, m.head_dim
        fused = (1, T, (a + 2 * g) * d / tp, h, False)
        out.append((fused, separate_qkv_gemms(m, T, tp, h), 3, T * h))
    w = m.layer_shares().get("dense", 0.0)
    if m.gated and w > 0:
        F = m.ffn_hidden_size
        fused = (w, T, 2 * F / tp, h, False)
        sep = [(w, T, F / tp, h, False), (w, T, F / tp, h, False)]
        out.append((fused, sep, 2, w * T * h))
    return out


def grad_sum_bytes(k: int, elements: Num, kernels: str, tp: Num) -> Num:
    """HBM bytes of summing ``k`` bf16 input gradients of ``elements`` each beyond the one
    gradient a fused GEMM writes: eager (``kernels``, ``FrameworkProfile.
    elementwise_kernels``), ``k − 1`` in-place adds of 6 bytes per element; compiled with
    ``tp > 1``, one kernel reading ``k`` and writing the sum the tensor-parallel collective
    then reads (``2k + 2``); compiled with ``tp = 1``, the sum fused into the norm's backward
    that reads the gradient anyway: ``k − 1`` more reads (``2k − 2``)."""
    b = GRAD_ELEMENT_BYTES
    eager = (k - 1) * 3 * b
    compiled = np.where(np.asarray(tp) > 1, (k + 1) * b, (k - 1) * b)
    return np.where(kernels == "compiled", compiled, eager) * elements


def split_projection_time(m: ModelSpec, b: Num, tp: Num, cp: Num, tpo: Num, gpu: GPU,
                          dtype: str, fw: FrameworkProfile,
                          system: SystemConfig = DEFAULT_SYSTEM, slow: Num = 1.0
                          ) -> tuple[Num, Num, Num]:
    """(forward, backward, weight-gradient part of the backward) seconds per layer and
    micro-batch that separate projections add to the fused GEMMs' price (module doc);
    ``slow`` the overlap clock factor on the GEMMs, as ``layer_time``'s. Zeros on a stack
    that fuses them."""
    zero = 0.0 * np.asarray(b, dtype=float)
    if not fw.separate_projections:
        return zero, zero, zero
    f = bw = w = zero
    hbm = usable_hbm(gpu, system)
    for fused, sep, k, elements in projection_groups(m, b, tp, cp):
        f = f + slow * (gemms_time_fwd(sep, tp, gpu, dtype, tpo, system)
                        - gemms_time_fwd([fused], tp, gpu, dtype, tpo, system))
        sb, sw = gemms_time_bwd_split(sep, tp, gpu, dtype, tpo, fw, system)
        fb, fw_ = gemms_time_bwd_split([fused], tp, gpu, dtype, tpo, fw, system)
        bw = bw + slow * (sb - fb) + grad_sum_bytes(k, elements, fw.elementwise_kernels, tp) / hbm
        w = w + slow * (sw - fw_)
    return f, bw, w
