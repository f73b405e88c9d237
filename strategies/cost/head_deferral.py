"""The last stage's deferred output-layer weight gradient: Megatron-Core's
``defer_embedding_wgrad_compute`` (docs/calibration.md §5.232). Vectorised.

With it the output layer's backward keeps each micro-batch's input activation and output
gradient instead of running its weight-gradient GEMM (Megatron-LM 24.09-alpha.rc0
``tensor_parallel/layers.py`` L423-428 and L873-877: buffered while the buffer holds fewer
than ``wgrad_deferral_limit``, every one at limit 0; the later ones run in line), and the
stack drains the buffer once the last stage's part of the pipeline returns
(``utils.drain_embedding_wgrad_compute``, called by NeMo's ``megatron_gpt_model.py`` after
the forward-backward call on the last stage: "Defer the embedding GEMM Wgrads of the last PP
stage to pipeline flush waiting time"). The last stage's final backward is the first chunk's
of the last micro-batch; the ``pp - 1`` stages before it then run theirs one after another
while it waits: that wait is the window the drained GEMMs fill, and what does not fit
extends the step."""
from __future__ import annotations

import numpy as np

from strategies.cost.token_counts import Num


def drain_window(chunk_bwd: Num, pp: Num) -> Num:
    """Seconds the last stage waits at the pipeline's drain after its final backward: the
    ``pp - 1`` earlier stages' backwards of one model chunk (``chunk_bwd`` seconds each)."""
    return np.maximum(np.asarray(pp, float) - 1.0, 0.0) * chunk_bwd


def deferred_head_wgrad(head_w: Num, chunk_bwd: Num, pp: Num, mb: Num, deferral: float) -> Num:
    """Seconds per micro-batch the deferral takes off the last stage's backward: of the
    ``min(mb, deferral)`` micro-batches' output-layer weight gradients (``head_w`` seconds
    each) the part the drain window (``drain_window``) holds, spread over the step's ``mb``
    micro-batches per pipeline. 0 with ``deferral`` 0 or one stage.

    >>> float(deferred_head_wgrad(2e-3, 16e-3, 8, 64, float("inf")))    # 7 x 16 ms of 128
    0.00175
    >>> float(deferred_head_wgrad(2e-3, 16e-3, 8, 64, 10.0))             # 10 x 2 ms, all held
    0.0003125
    """
    n = np.minimum(np.asarray(mb, float), deferral)
    held = np.minimum(n * head_w, drain_window(chunk_bwd, pp))
    return np.where(np.asarray(pp) > 1, held, 0.0) / mb
