"""Transformer Engine's all-to-all context parallelism (``AttnFuncWithCPAndQKVOA2A``,
``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`` L4170-4960,
read at d0067d0; first in v1.11, NVIDIA/TransformerEngine#1160; Megatron-Core
``--cp-comm-type a2a``, plan ``cp_comm``): DeepSpeed-Ulysses' head scatter (Jacobs et al.
2023, arXiv 2309.14509 §3: an all-to-all of Q, K, V of aggregate size ``3Nh`` before the
attention and one of the output, ``Nh``, after it). docs/calibration.md §5.185. Units: bytes,
seconds.

What the function does, sbhd layout (Megatron-Core's), per layer and micro-batch on a rank
holding ``s/c`` tokens of ``a/t`` query and ``g/t`` KV heads:

* forward: Q, K and V each viewed as ``[s/c, b, c, h/c, d]``, moved head-group first and made
  contiguous (a copy), sent by ``all_to_all_single`` over the CP group, the received chunks
  reordered into sequence order (``torch.index_select``, a copy): every rank then holds the
  whole sequence over ``a/(t·c)`` query and ``g/(t·c)`` KV heads, and the attention runs
  there, causal over the whole sequence with no ring steps; its output ``O`` reordered back
  (a copy), all-to-all'd to the rank's tokens and made contiguous (a copy). Saved for the
  backward: the head-sharded Q, K, V and O (as many bytes as the rank's own).
* backward: ``dO`` all-to-all'd to head shards (two copies), the kernel, and ``dQ``, ``dK``,
  ``dV`` all-to-all'd back (two copies each).
* every all-to-all waits on its request before the next kernel reads it (``a2a_reqs[i].wait()``
  on ``cp_stream``, ``current_stream().wait_stream(cp_stream)``): exposed, nothing overlaps
  it but the neighbouring tensor's reorder.
* ``q.shape[-2] % cp_size == 0 and k.shape[-2] % cp_size == 0`` is asserted: the rank's query
  and KV heads must divide by ``c`` (``heads_ok``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from strategies.cost.comm_bytes import sent_kv_heads
from strategies.cost.cp_ring import with_rerun
from strategies.cost.token_counts import ACT_BYTES, Num, tokens_per_gpu
from strategies.errors import SpecError
from strategies.model import ModelSpec

if TYPE_CHECKING:
    from strategies.cost.stage.array_record import StageCostArrays
    from strategies.cost.stage.record import StageCosts

#: The first Transformer Engine release with ``AttnFuncWithCPAndQKVOA2A``
#: (NVIDIA/TransformerEngine#1160, 40dda924a, 2024-09-09): a stack stating an older
#: ``FrameworkProfile.te_version`` does not run ``cp_comm=a2a`` (``stacks.rules``)
TE_FIRST = (1, 11)

#: HBM passes per exchanged byte, each direction of each tensor: the head-major
#: ``contiguous()`` copy before the all-to-all and the ``index_select`` reorder after it (or,
#: after the attention, the reorder before and the ``contiguous()`` after), each a read and a
#: write
COPY_PASSES = 4.0


def qkv_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Bytes one rank sends (its own share included) in the all-to-all of Q, K and V before
    the attention (and of dQ, dK, dV after its backward): its ``b·s/c`` tokens over ``a/t``
    query heads of ``d_qk`` and ``g/t`` KV heads of ``d_qk + d_v``, 16-bit."""
    T = tokens_per_gpu(b, m.seq_length, cp)
    g = sent_kv_heads(m)
    return ACT_BYTES * T * (m.num_attention_heads * m.head_dim
                            + g * (m.head_dim + m.v_dim)) / tp


def out_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Bytes one rank sends in the all-to-all of the attention output after the forward's
    kernel (and of ``dO`` before the backward's): ``b·s/c`` tokens over ``a/t`` heads of
    ``d_v``, 16-bit."""
    return ACT_BYTES * tokens_per_gpu(b, m.seq_length, cp) * m.num_attention_heads \
        * m.v_dim / tp


def copy_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """HBM bytes of one layer pass (forward, or backward: the same tensors' gradients)
    besides its kernels and all-to-alls: ``COPY_PASSES`` of Q, K, V and O."""
    return COPY_PASSES * (qkv_bytes(m, b, tp, cp) + out_bytes(m, b, tp, cp))


def working_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num) -> Num:
    """Bytes the exchange holds at its peak besides the saved tensors: Q, K, V (or dQ, dK,
    dV) three times, the caller's tensors, their contiguous send copies and the receive
    buffers (``torch.empty_like``), ``3·qkv_bytes``. One layer at a time (a transient)."""
    return 3.0 * qkv_bytes(m, b, tp, cp)


def saved_delta(m: ModelSpec, b: Num, tp: Num, cp: Num, rc: Num, mask: Num, flash: Num
                ) -> tuple[Num, Num]:
    """Bytes one layer's stash holds beyond the ring's, ``(with the plan's recomputation,
    without any)``: the kernel's head-sharded output ``out_part``, which the function saves
    for its backward, is another tensor than the all-to-all'd output the projection saves
    (the ring saves the one tensor it returns), ``out_bytes`` more where the fused kernel runs
    and keeps it (not where selective recomputation reruns the core, ``part_selected``
    "scores", nor under full or op recomputation, whose checkpoints keep the layer input).
    Vectorised; 0 at ``cp`` 1."""
    from strategies.cost.recompute import part_selected
    o = np.where((np.asarray(cp) > 1) & np.asarray(flash, dtype=bool), out_bytes(m, b, tp, cp),
                 0.0)
    rc = np.asarray(rc)
    kept = ~part_selected(rc, mask, "scores") & (rc != 2) & (rc != 3)
    return np.where(kept, o, 0.0), o


def heads_ok(m: ModelSpec, tp: Num, cp: Num) -> Num:
    """Where Transformer Engine runs the exchange: the rank's query heads ``a/t`` and KV heads
    ``g/t`` (MLA: ``a/t``, K and V up-projected) divide by ``c`` (``tp`` dividing both, as
    ``job.check_plan_against_model`` requires). Vectorised."""
    tc = np.asarray(tp) * np.asarray(cp)
    return (np.asarray(cp) == 1) | ((m.num_attention_heads % tc == 0)
                                    & (sent_kv_heads(m) % tc == 0))


def check_heads(m: ModelSpec, tp: int, cp: int, field: str = "cp") -> None:
    """``SpecError`` (field ``field``: ``cp``, or ``hierarchical_cp`` for a2a+p2p's
    all-to-all group) where ``heads_ok`` fails."""
    if not bool(heads_ok(m, tp, cp)):
        raise SpecError(field, cp, f"cp_comm=a2a scatters attention heads over its all-to-all "
                        f"group: {field} must divide the rank's query heads "
                        f"num_attention_heads/tp="
                        f"{m.num_attention_heads}/{tp} and KV heads {sent_kv_heads(m)}/{tp} "
                        "(Transformer Engine's AttnFuncWithCPAndQKVOA2A asserts num_heads % "
                        "cp_size == 0 for Q, K, V)")


def layer_waits(t_a2a: Callable[[Num], Num], sc: "StageCosts | StageCostArrays", cp: Num
                ) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` one layer pass waits on its all-to-alls, ``t_a2a(n)``
    being one all-to-all over the CP group of ``n`` bytes sent per rank (the estimate's
    ``collective_time``, the bound's floor): Q/K/V (``sc.cp_bytes``) and O
    (``sc.cp_out_bytes``) in the forward, dO and dQ/dK/dV in the backward, all exposed, the
    backward with its recomputed forwards' (``cp_ring.with_rerun``); 0 where ``cp`` is 1.
    The one form the estimate and the lower bound read."""
    return exchange_waits(t_a2a, sc, cp, sc.cp_bytes)


def exchange_waits(t_a2a: Callable[[Num], Num], sc: "StageCosts | StageCostArrays", cp: Num,
                   qkv: Num, bwd_out: float = 1.0) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of one layer pass's exposed all-to-alls: Q/K/V
    (``qkv`` bytes a rank sends) and O (``sc.cp_out_bytes``) forward; ``bwd_out`` outputs'
    bytes (dO, and the saved output where the function sends it again) and dQ/dK/dV backward,
    with its recomputed forwards' (``cp_ring.with_rerun``); 0 where ``cp`` is 1. Read by
    ``layer_waits`` and ``cp_hier.layer_waits``."""
    on = np.asarray(cp) > 1
    f = np.where(on, t_a2a(qkv) + t_a2a(sc.cp_out_bytes), 0.0)
    b = f if bwd_out == 1.0 else np.where(on, t_a2a(bwd_out * sc.cp_out_bytes) + t_a2a(qkv),
                                          0.0)
    return f, with_rerun(sc, f, b)
