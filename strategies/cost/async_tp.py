"""PyTorch async TP's own HBM passes on the compute stream (docs/calibration.md §5.94).

Inductor's micro-pipeline pass (``torch/_inductor/fx_passes/micro_pipeline_tp.py``) turns a
sequence-parallel ``all_gather -> mm`` into ``symm_mem.fused_all_gather_matmul`` and
``mm -> reduce_scatter`` into ``fused_matmul_reduce_scatter``
(``torch/distributed/_symmetric_memory/__init__.py``, the same code in the Dec 2024 torch the
torchtitan benchmarks name and at HEAD). Besides the chunked matmuls (``gemm_time._tp_split``)
and the copy-engine peer copies (no SMs), each fused op runs one pass over HBM that the
NCCL collective it replaces did not put on the compute stream:

* **all-gather**: ``_pipelined_multi_all_gather_and_consume`` copies the local shard into
  its symmetric buffer (``copy_shard(dst=local_p2p_bufs, src=shard)``) and waits on a
  barrier *before* the first matmul; the code says so ("we are giving up the chance to
  overlap "mv" and "b" with the first shard_consumer"): a read and a write of the shard,
  ``2·S/tp`` bytes for ``S`` the gathered tensor's bytes (at the gather's element size:
  torchao's float8 TP gathers fp8). The closing copy of the shard into the gathered output
  runs beside the last matmul ("opportunistically overlap") and is not charged.
* **reduce-scatter**: ``_pipelined_produce_and_all2all`` gathers every rank's partial
  product of the local rows into ``stacked_partials`` (``tp`` chunks of ``M/tp`` rows, the
  peer copies again), then ``_fused_matmul_reduce_scatter_impl`` sums them with one
  ``torch.sum(..., dim)`` (HEAD: ``reduce_partials``) after the last chunk: a read of all
  ``tp`` partials and a write of one, ``S·(1 + 1/tp)`` bytes of the matmul's output dtype
  (bf16: ``_scaled_mm`` writes bf16 too). NCCL's reduce-scatter does this sum inside its
  kernel, which the vanilla rows already price in the collective's time.

* **the gathered tensor's layout**: the fused all-gather returns the gathered tensor as
  ``unflatten(A_flat)``, a ``movedim`` view of the ``[s, b, h]`` buffer it filled (the
  op's ``Meta`` fallback states the same strides). The pass hands that tensor to every other
  consumer (``ag_res_node.replace_all_uses_with(new_ag_node)``); its only consumer besides
  the fused matmuls is the weight gradient, ``mm(grad_2d.t(), A_2d)``, whose
  ``reshape(A, [b·s, h])`` is not a view of those strides when ``b > 1``: Inductor copies
  the gathered tensor, ``2·S`` bytes, once per fused all-gather in the backward graph (the
  recomputed inputs' two, the output gradients' two). In 16 bits only: torchao's float8
  weight gradient copies each gathered fp8 operand for ``_scaled_mm`` anyway
  (``quantise.gathered_transpose_bytes``, §5.89), a copy that writes any layout.

Which collectives the pass fuses is §5.84's reading: per layer and micro-batch the
forward's ``pairs`` all-gathers and ``pairs`` reduce-scatters, the backward's ``pairs``
output-gradient all-gathers (its summed-dgrad reduce-scatters stay NCCL collectives,
``FrameworkProfile.tp_overlap_bwd_exposed``), op-level recomputation's rerun all-gathers,
full recomputation's forward less the reduce-scatter an early-stopping checkpoint does not
rerun (``recompute.stopped_collectives``). Not charged: the barriers (a few per op, no
public latency figure read here) and the sleep kernel (100 cycles).

Under torchao's rowwise recipe (``fp8-rowwise``) torchtitan runs regular TP, so each
all-gather carries bf16 and its consumers are the casts (``torch.amax(abs(x), dim)`` and the
scaling), not a matmul: ``micro_pipeline_tp``'s all-gather fusion finds no matmul consumer
and leaves the gather a NCCL collective, while the forward's ``_scaled_mm -> reduce_scatter``
fuses (pytorch/pytorch#149247 added rowwise scales to that pattern in March 2025;
pytorch/pytorch#149990, open at the rows' torch of 2025-06-14: "the matmul-reduce-scatters
were being fused properly ... however, the all-gather-matmul patterns were NOT being fused
properly"). So every all-gather blocks as in plain TP (``overlap_exposed``: their half of a
pass's collectives, forward and backward), and only the reduce-scatters' passes are
charged (``fused_pass_time``)."""
from __future__ import annotations

import numpy as np

from strategies.cost import comm_bytes
from strategies.cost import quantise
from strategies.cost import recompute as rcp
from strategies.cost.token_counts import Num
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from topologies.precision import get_precision


#: the all-gathers' share of a pass's TP collectives (all-gather / reduce-scatter pairs of
#: the same bf16 bytes under the rowwise recipe)
ALLGATHER_SHARE = 0.5


def fuses_allgathers(dtype: str) -> bool:
    """Async TP fuses the sequence-parallel all-gathers with their matmuls: False under the
    rowwise recipe, whose gathered bf16 tensor feeds its casts (module doc)."""
    return not get_precision(dtype).row_scaled


def overlap_exposed(fw: FrameworkProfile, dtype: str) -> tuple[float, float]:
    """(forward, backward) share of a layer's TP collectives that TP overlap leaves blocking
    whole: the stack's backward share (``fw.tp_overlap_bwd_exposed``: async TP's summed-dgrad
    reduce-scatters) and, under async TP where the all-gathers do not fuse
    (``fuses_allgathers``), the all-gathers' ``ALLGATHER_SHARE`` of each pass (capped at 1)."""
    bwd = float(fw.tp_overlap_bwd_exposed)
    if fw.tp_overlap != "async-tp" or fuses_allgathers(dtype):
        return 0.0, bwd
    return ALLGATHER_SHARE, min(1.0, bwd + ALLGATHER_SHARE)


def fused_pass_time(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, tpo: Num, pairs: Num,
                    dtype: str, fw: FrameworkProfile,
                    hbm: float) -> tuple[Num, Num, Num, Num]:
    """(forward, backward, op rerun, full rerun) seconds per layer and micro-batch of async
    TP's compute-stream HBM passes (module docstring) at ``hbm`` usable bytes/s: per fused
    all-gather ``2·S_ag/tp``, per fused reduce-scatter ``S·(1 + 1/tp)``, ``S`` the
    activation's bytes (``comm_bytes.tp_comm_bytes_fwd``), ``S_ag`` at the gather's element size
    (``quantise.tp_allgather_bytes_factor``); in the backward, in 16 bits with ``b > 1``,
    ``2·pairs`` copies of ``2·S`` (the gathered tensors the weight gradients reshape). 0
    unless TP overlap runs as async TP (``fw.tp_overlap == "async-tp"``, ``tpo``, ``sp``,
    ``tp > 1``). ``pairs``: the layer's collective pairs (``stage.layers.tp_collectives_per_layer``);
    ``b``: sequences per micro-batch. No all-gather passes where the all-gathers do not
    fuse (``fuses_allgathers``)."""
    on = (np.asarray(tp) > 1) & np.asarray(sp, dtype=bool) & np.asarray(tpo, dtype=bool) \
        & (fw.tp_overlap == "async-tp")
    tp = np.asarray(tp, dtype=float)
    s = comm_bytes.tp_comm_bytes_fwd(m, b, cp) / hbm
    ag = 2.0 * s * quantise.tp_allgather_bytes_factor(dtype, sp) / tp * on \
        * fuses_allgathers(dtype)
    rs = s * (1.0 + 1.0 / tp) * on
    layout = 2.0 * s * (np.asarray(b) > 1) * (not get_precision(dtype).quantised) * on
    last = rcp.stopped_collectives(pairs, fw.recompute_early_stop)
    fwd = pairs * (ag + rs)
    return fwd, pairs * (ag + 2.0 * layout), pairs * ag, fwd - last * rs
