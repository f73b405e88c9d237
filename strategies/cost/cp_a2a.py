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
* one ``all_to_all_single(async_op=True)`` per tensor (``flash_attn_a2a_communicate``
  L387-536 at d0067d0, the same loop from v1.11 on): Q, K and V are three calls, each with
  its own latency, issued in order on the process group's NCCL stream; each tensor's send
  copy runs on the compute stream after the previous tensor's call is issued, and each
  received tensor's reorder on ``cp_stream`` after ``a2a_reqs[i].wait()``, so the copies of
  a group's later tensors and the reorders of its earlier ones run beside its all-to-alls
  (``group_wait``); the kernel waits for the last reorder
  (``current_stream().wait_stream(cp_stream)``). A group of one tensor (O, dO) is serial.
* the backward sends dO alone from TE 2.8 on (``TE_DO_ONLY``); from 1.11 to 2.7 it sent the
  saved output again with it (``[out, dout]``, two calls; ``cp_hier.bwd_out_tensors``).
* the bytes on the wire: 16-bit under BF16 and under the MXFP8 attention the project models
  (TE quantises Q/K/V and dO after the all-to-all there, ``combine_and_quantize`` /
  ``mxfp8_quantize_fast_path`` on the post-all-to-all tensors); only TE's per-tensor FP8
  attention (delayed or current scaling, which ``with_fp8_attention`` refuses) sends
  ``._data`` in 8 bits. GQA's K and V go with their own ``g/t`` heads (no repeat).
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

#: the first Transformer Engine release whose ``AttnFuncWithCPAndQKVOA2A`` backward sends dO
#: alone and saves the head-sharded output: NVIDIA/TransformerEngine#2012 (25252e9f2 on main,
#: 789c6ca63 on the 2.8 branch, 2025-09-30); 1.11-2.7 saved the returned output and sent it
#: again with dO (``out, dout = flash_attn_a2a_communicate([out, dout], ...)``, v2.7
#: ``context_parallel.py`` L3561, v1.11 ``attention.py`` L3814)
TE_DO_ONLY = (2, 8)

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


def qkv_parts(m: ModelSpec) -> tuple[float, float, float]:
    """Shares of Q, K and V in ``qkv_bytes``, one all-to-all each (``a·d_qk``, ``g·d_qk``,
    ``g·d_v`` over their sum; ``g`` = ``sent_kv_heads``: GQA's K and V go with their own
    heads, MLA's up-projected ones with ``a``)."""
    g = sent_kv_heads(m)
    q, k, v = m.num_attention_heads * m.head_dim, g * m.head_dim, g * m.v_dim
    return q / (q + k + v), k / (q + k + v), v / (q + k + v)


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
        how = "a2a" if field == "cp" else "a2a+p2p"     # the exchange the value belongs to
        raise SpecError(field, cp, f"cp_comm={how} scatters attention heads over its all-to-all "
                        f"group: {field} must divide the rank's query heads "
                        f"num_attention_heads/tp="
                        f"{m.num_attention_heads}/{tp} and KV heads {sent_kv_heads(m)}/{tp} "
                        "(Transformer Engine's AttnFuncWithCPAndQKVOA2A asserts num_heads % "
                        "cp_size == 0 for Q, K, V)")


def side_copy_seconds(nbytes: Num, copy_rate: float) -> Num:
    """Seconds of one side's copy of a tensor a rank sends ``nbytes`` of (the send copy
    before its all-to-all, or the reorder after it: ``COPY_PASSES / 2`` passes at
    ``copy_rate`` bytes/s); 0 without a rate."""
    return 0.5 * COPY_PASSES * nbytes / copy_rate if copy_rate > 0 else 0.0 * nbytes


def group_wait(t_a2a: Callable[[Num], Num], sizes: list, copy_rate: float) -> Num:
    """Seconds one ``flash_attn_a2a_communicate`` call of ``len(sizes)`` tensors waits beyond
    its copies' HBM time (which the attention core carries, ``copy_bytes``): tensor ``j``
    (``sizes[j]`` bytes a rank sends) copied (``COPY_PASSES / 2`` passes at ``copy_rate``),
    its all-to-all after that copy and the previous all-to-all (one NCCL stream), its reorder
    (the other half of the passes) after its all-to-all and the previous copies (one HBM).
    The finish time less the copies: ``Σ t_a2a`` for one tensor; for Q/K/V the copies of K
    and V and the reorders of Q and K hidden where the all-to-alls outlast them. The form
    the estimate, the bound and the simulator's ``LayerBlocks.a2a_calls`` share."""
    sent, copied = 0.0, 0.0
    ends = []
    for n in sizes:
        copied = copied + side_copy_seconds(n, copy_rate)
        sent = np.maximum(sent, copied) + t_a2a(n)
        ends.append(sent)
    done = copied
    for n, e in zip(sizes, ends):
        done = np.maximum(done, e) + side_copy_seconds(n, copy_rate)
    return done - 2.0 * copied


def layer_waits(t_a2a: Callable[[Num], Num], sc: "StageCosts | StageCostArrays", cp: Num
                ) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` one layer pass waits on its all-to-alls, ``t_a2a(n)``
    being one all-to-all over the CP group of ``n`` bytes sent per rank (the estimate's
    ``collective_time``, the bound's floor): Q/K/V (``sc.cp_bytes``) and O
    (``sc.cp_out_bytes``) in the forward, dO and dQ/dK/dV in the backward, all exposed, the
    backward with its recomputed forwards' (``cp_ring.with_rerun``); 0 where ``cp`` is 1.
    The one form the estimate and the lower bound read."""
    return exchange_waits(t_a2a, sc, cp, sc.cp_bytes)


def pass_copy_seconds(sc: "StageCosts | StageCostArrays", qkv: Num) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of a layer pass's all-to-all copies inside its attention
    core's ``attn_fwd``/``attn_bwd`` (``copy_bytes``: ``COPY_PASSES`` of Q/K/V, ``qkv`` bytes,
    and of O, ``sc.cp_bwd_out`` times backward, at ``sc.copy_rate``): they run before and
    after the kernel, not beside it (a2a+p2p's ring window, ``cp_hier.ring_record``)."""
    if not sc.copy_rate > 0:
        return 0.0, 0.0
    o = sc.cp_out_bytes
    return (COPY_PASSES * (qkv + o) / sc.copy_rate,
            COPY_PASSES * (qkv + sc.cp_bwd_out * o) / sc.copy_rate)


def exchange_waits(t_a2a: Callable[[Num], Num], sc: "StageCosts | StageCostArrays", cp: Num,
                   qkv: Num) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` of one layer pass's all-to-alls, call by call
    (``group_wait``): Q, K and V (``qkv`` bytes a rank sends, split by ``sc.cp_qkv_parts``)
    then O (``sc.cp_out_bytes``) forward; ``sc.cp_bwd_out`` outputs (dO, and the saved output
    where the release sends it again, ``cp_hier.bwd_out_tensors``) then dQ, dK, dV backward,
    with its recomputed forwards' (``cp_ring.with_rerun``): the forward's wait again, since
    Transformer Engine's rerun is the forward's code (the simulator's ``cp_rerun`` through
    ``a2a_calls``, its copies out of the rerun's core); 0 where ``cp`` is 1. Read by
    ``layer_waits`` and ``cp_hier.layer_waits``."""
    on = np.asarray(cp) > 1
    qkv_l = [qkv * x for x in sc.cp_qkv_parts]
    o, r = sc.cp_out_bytes, sc.copy_rate
    w_qkv, w_o = group_wait(t_a2a, qkv_l, r), group_wait(t_a2a, [o], r)
    n_out = int(sc.cp_bwd_out)      # the backward's outputs: dO alone is the forward's O call
    w_dout = w_o if n_out == 1 else group_wait(t_a2a, [o] * n_out, r)
    f = np.where(on, w_qkv + w_o, 0.0)
    b = np.where(on, w_dout + w_qkv, 0.0)
    return f, with_rerun(sc, f, b)
