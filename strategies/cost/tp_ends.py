"""Tensor-parallel collectives outside the transformer blocks: the embedding's and the
output layer's, on the first and the last pipeline stage (docs/calibration.md §5.84).

torchtitan 9dec370 (Dec 2024, ``parallelisms/parallelize_llama.py``) and 2887250bb (June
2025, ``models/llama3/infra/parallelize.py``) ``apply_tp`` plan, outside the blocks:

* ``tok_embeddings``: ``RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))``:
  the vocabulary-sharded lookup's partial sums reduce-scattered along the sequence (forward),
  the output gradient all-gathered (backward);
* ``norm``: ``SequenceParallel()`` (no collective);
* ``output``: ``ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1))`` under
  ``loss_parallel`` (the default with tp > 1): the final norm's output all-gathered along the
  sequence (forward), its gradient reduce-scattered (backward), both in 16 bits (the output
  layer is kept out of torchao's float8 conversion);
* the loss under ``loss_parallel`` (``torch/distributed/tensor/parallel/loss.py``):
  ``_log_softmax`` all-reduces the rows' max and sum of exponentials, ``_nll_loss_forward``
  the target logits (``_MaskPartial._reduce_value``): three fp32 all-reduces of one element
  per token in the forward; ``_nll_loss_and_log_softmax_backward`` communicates nothing.

Each of the four ``b·s·h`` collectives runs along the sequence dim, so PyTorch's functional
collectives copy the gathered tensor once on the compute stream (``compute.
tp_layout_copy_time``'s rule, §5.80); torchtitan compiles the blocks only
(``apply_compile``), so these copies run eager whatever ``--compile``. Every one blocks the
next op (the first block reads the embedding's output; the loss reads the logits), so they
are priced on the compute stream of their stage, as the estimate, the lower bound and the
simulator read ``embedding_*`` and ``head_*``.

Megatron's stacks (docs/calibration.md §5.88) run the same collectives in ``[s, b, h]``
(gathers along dim 0: no copy):

* ``VocabParallelEmbedding.forward`` (Megatron-Core ``tensor_parallel/layers.py``; Megatron-LM
  2021 and BigScience's Megatron-DeepSpeed ``mpu/layers.py``): the partial lookups
  reduce-scattered to the sequence shard where ``LanguageModelEmbedding.
  reduce_scatter_embeddings`` (SP and no learned absolute positions:
  ``models/common/embeddings/language_model_embedding.py``), else all-reduced
  (``reduce_from_tensor_model_parallel_region``); under SP with learned positions the sum is
  then split (``scatter_to_sequence_parallel_region``), whose backward all-gathers the
  gradient, as the reduce-scatter's does; without SP the backward communicates nothing;
* the output layer, a ``ColumnParallelLinear`` over the vocabulary (``gpt_model.py``
  ``output_layer``; 2021's ``parallel_lm_logits``): under SP its input all-gathered (forward)
  and the data gradient reduce-scattered (backward); without SP its input's backward
  all-reduce (``copy_to_tensor_model_parallel_region``, or the linear's ``allreduce_dgrad``).
  The backward reduction is issued ``async_op=True`` before the weight-gradient GEMM where
  ``FrameworkProfile.dgrad_overlap`` says so (``cost.stage.dgrad_reduce_hidden``'s rule,
  §5.75), so only ``max(0, t - wgrad)`` is exposed; blocking elsewhere;
* ``vocab_parallel_cross_entropy`` (``tensor_parallel/cross_entropy.py``): three fp32
  all-reduces over tp of one element per token (the logits' max, the predicted logit, the
  sum of exponentials), as ``loss_parallel``'s; the fused path (``cross_entropy_loss_fusion``,
  ``core/fusions/fused_cross_entropy.py``, NeMo 2's configs) concatenates the last two into
  one all-reduce of two elements per token (``FrameworkProfile.tp_loss_allreduces``).

The same rule reads torchtitan's DTensor plan without SP (``Replicate`` inputs: the
embedding's partial sums all-reduced, the output's input gradient all-reduced, blocking).
"""
from __future__ import annotations

import numpy as np

from strategies.cost import comm as cm
from strategies.cost import comm_bytes, token_counts
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from topologies.cluster import Cluster
from topologies.gpus import GPU

LOSS_ELEMENT_BYTES = 4.0   # fp32 (the loss upcasts the logits)


def tp_end_times(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, gpu: GPU, cl: Cluster,
                 fw: FrameworkProfile, system: SystemConfig = DEFAULT_SYSTEM,
                 head_wgrad: Num = 0.0) -> tuple[Num, Num, Num, Num]:
    """(embedding forward, embedding backward, output forward, output backward) seconds per
    micro-batch of the TP collectives outside the blocks (module doc) where the stack runs
    them and the model prices them (``fw.tp_end_collectives``, tp > 1): with
    ``x = b·s·h·2/cp`` bytes (``comm_bytes.tp_comm_bytes_fwd``) and ``c`` one copy of it (read +
    write at the usable HBM rate, where ``fw.tp_seq_dim_copies``), under sequence
    parallelism the embedding's ``RS(x) + c`` forward (``AR(x)`` with learned absolute
    positions, Megatron's reduce-then-split) and ``AG(x) + c`` backward, the output's
    ``AG(x) + c`` forward and ``RS(x) + c`` backward; without it the embedding's ``AR(x)``
    forward and the output's ``AR(x)`` backward; plus the loss's fp32 all-reduces of
    ``n·b·s/cp`` elements each (``n`` in ``fw.tp_loss_allreduces``) in the output's forward (``comm.collective_time`` over the tp group;
    ``comm.small_allreduce_time`` for the loss's). The output's backward reduction hides
    under ``head_wgrad`` seconds (the output layer's weight-gradient GEMM) where the stack
    issues it asynchronously (``fw.dgrad_overlap``: ``"all"``; ``"sp"`` under SP only):
    ``max(0, t - head_wgrad)``. 0 elsewhere. Vectorised."""
    tp_on = (np.asarray(tp) > 1) & fw.tp_end_collectives
    seq = np.asarray(sp, dtype=bool)
    x = comm_bytes.tp_comm_bytes_fwd(m, b, cp)
    copy = 2.0 * x / usable_hbm(gpu, system) * fw.tp_seq_dim_copies
    rs = cm.collective_time("reduce_scatter", x, tp, 1, cl) + copy
    ag = cm.collective_time("allgather", x, tp, 1, cl) + copy
    ar = cm.collective_time("allreduce", x, tp, 1, cl)
    tokens = token_counts.tokens_per_gpu(b, m.seq_length, cp)
    loss = sum(cm.small_allreduce_time(n * LOSS_ELEMENT_BYTES * tokens, tp, 1, cl)
               for n in fw.tp_loss_allreduces)
    emb_f = np.where(seq, ar if m.position_embedding == "learned" else rs, ar)
    emb_b = np.where(seq, ag, 0.0)
    red = np.where(seq, rs, ar)
    hides = (fw.dgrad_overlap == "all") | ((fw.dgrad_overlap == "sp") & seq)
    head_b = np.where(hides, np.maximum(red - head_wgrad, 0.0), red)
    head_f = np.where(seq, ag, 0.0) + loss
    return (np.where(tp_on, emb_f, 0.0), np.where(tp_on, emb_b, 0.0),
            np.where(tp_on, head_f, 0.0), np.where(tp_on, head_b, 0.0))
