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
simulator read ``embedding_*`` and ``head_*``. Megatron's vocab-parallel embedding and output
layer run analogous collectives that the model does not price (``FrameworkProfile.
tp_end_collectives`` False there: its rows are read as before, docs/calibration.md §5.84).
"""
from __future__ import annotations

import numpy as np

from strategies.cost import comm as cm
from strategies.cost import counts
from strategies.cost.compute import usable_hbm
from strategies.cost.counts import Num
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.framework import FrameworkProfile
from strategies.model import ModelSpec
from topologies.cluster import Cluster
from topologies.gpus import GPU

LOSS_ALLREDUCES = 3        # loss_parallel: max, sum of exponentials, target logit
LOSS_ELEMENT_BYTES = 4.0   # fp32 (the loss upcasts the logits)


def tp_end_times(m: ModelSpec, b: Num, tp: Num, cp: Num, sp: Num, gpu: GPU, cl: Cluster,
                 fw: FrameworkProfile,
                 system: SystemConfig = DEFAULT_SYSTEM) -> tuple[Num, Num, Num, Num]:
    """(embedding forward, embedding backward, output forward, output backward) seconds per
    micro-batch of the TP collectives outside the blocks (module doc) where the stack runs
    them and the model prices them (``fw.tp_end_collectives``, tp > 1, sequence parallel):
    with ``x = b·s·h·2/cp`` bytes (``counts.tp_comm_bytes_fwd``) and ``c`` one copy of it
    (read + write at the usable HBM rate, where ``fw.tp_seq_dim_copies``), the embedding's
    ``RS(x) + c`` forward and ``AG(x) + c`` backward, the output's ``AG(x) + c`` forward
    plus the loss's three fp32 all-reduces of ``b·s/cp`` elements, and ``RS(x) + c``
    backward (``comm.collective_time`` over the tp group; ``comm.small_allreduce_time`` for
    the loss's). 0 elsewhere. Vectorised."""
    on = (np.asarray(tp) > 1) & np.asarray(sp, dtype=bool) & fw.tp_end_collectives
    x = counts.tp_comm_bytes_fwd(m, b, cp)
    copy = 2.0 * x / usable_hbm(gpu, system) * fw.tp_seq_dim_copies
    rs = cm.collective_time("reduce_scatter", x, tp, 1, cl) + copy
    ag = cm.collective_time("allgather", x, tp, 1, cl) + copy
    tokens = counts.tokens_per_gpu(b, m.seq_length, cp)
    loss = LOSS_ALLREDUCES * cm.small_allreduce_time(LOSS_ELEMENT_BYTES * tokens, tp, 1, cl)
    return (np.where(on, rs, 0.0), np.where(on, ag, 0.0), np.where(on, ag + loss, 0.0),
            np.where(on, rs, 0.0))
