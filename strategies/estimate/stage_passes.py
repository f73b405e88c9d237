"""A pipeline stage's or chunk's forward, backward (+ recomputation) and weight-gradient
(``W``) seconds per micro-batch from the stage-cost record: the one rule the scalar
estimate's corrections (``stage_correction.stage_times``, ``chunk_correction.chunk_times``:
a ``StageCosts`` of Python numbers, one plan) and the search's arrays on a mixed cluster
(``mixed_stages``: a record of the same fields as arrays over plans) read, and the exposed
offload seconds the breakdown's ``offload`` entry takes of the busiest rank's
(``offload_seconds``, ``busiest``)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from strategies.cost.stage import chunk_sum
from strategies.cost.stage.record import block_recompute


def _pick(cond: Any, yes: Callable[[], Any], no: Callable[[], Any]) -> Any:
    """``yes()`` where ``cond`` holds, else ``no()``: plan by plan over arrays (both
    evaluated), one branch for a number (only that one evaluated)."""
    if np.ndim(cond):
        return np.where(cond, yes(), no())
    return yes() if cond else no()


def stage_seconds(c: Any, n: Any, vpp: int, emb: bool, head: bool) -> tuple[Any, Any, Any]:
    """``(F, B + recompute, W)`` seconds per micro-batch of a stage of ``n`` mean layers of
    ``c`` in ``vpp`` chunks (block partial recomputation: ``min(N, n/vpp)`` layers of each
    chunk, ``block_recompute``), with the embedding (``emb``) and the LM head (``head``)."""
    bwd = _pick(c.recompute_cap > 0,
                lambda: n * c.layer_bwd + vpp * block_recompute(c, n / vpp)[0],
                lambda: n * (c.layer_bwd + c.layer_recompute))
    return (n * c.layer_fwd + (c.embedding_fwd if emb else 0.0)
            + (c.head_fwd if head else 0.0),
            bwd + (c.embedding_bwd if emb else 0.0) + (c.head_bwd if head else 0.0),
            n * c.layer_wgrad + (c.embedding_wgrad if emb else 0.0)
            + (c.head_wgrad if head else 0.0))


def chunk_seconds(c: Any, items: list[tuple[Any, Any]], emb: bool, head: bool
                  ) -> tuple[Any, Any, Any]:
    """``(F, B + recompute, W)`` seconds per micro-batch of a chunk that holds ``items``
    (``cost.stage.chunk_layers``: ``(count, per-layer record)`` of each kind), with the
    embedding (``emb``) and the LM head (``head``) of ``c``; block partial recomputation:
    ``min(N, chunk)`` layers, each kind's share at its own cost (``block_recompute``)."""
    b = _pick(c.recompute_cap > 0,
              lambda: chunk_sum(items, lambda x: x.layer_bwd) + block_recompute(
                  c, chunk_sum(items, lambda x: 1.0), None, items)[0],
              lambda: chunk_sum(items, lambda x: x.layer_bwd + x.layer_recompute))
    b = b + ((c.embedding_bwd if emb else 0.0) + (c.head_bwd if head else 0.0))
    return (chunk_sum(items, lambda x: x.layer_fwd) + (c.embedding_fwd if emb else 0.0)
            + (c.head_fwd if head else 0.0), b,
            chunk_sum(items, lambda x: x.layer_wgrad) + (c.embedding_wgrad if emb else 0.0)
            + (c.head_wgrad if head else 0.0))


def offload_seconds(items: list[tuple[Any, Any]]) -> Any:
    """Exposed activation-offload seconds per micro-batch (forward + backward) of the layers
    ``items`` (``cost.stage.chunk_layers``: ``(count, per-layer record)`` of each kind; a
    stage of ``n`` mean layers: ``[(n, c)]``): the records' ``layer_offload_fwd`` +
    ``layer_offload_bwd`` (``cost.stage.offload_time.with_offload``, which their layer times
    hold; the embedding, the LM head and the MTP block offload nothing), as the simulator's
    ``offload`` ops read them (``program.layer_blocks``)."""
    return chunk_sum(items, lambda x: x.layer_offload_fwd + x.layer_offload_bwd)


def busiest(busy: list, values: list) -> Any:
    """``values`` of the busiest rank: the one of largest ``busy`` (seconds per micro-batch),
    the first on a tie. Numbers, or arrays over plans (rank by rank, plan by plan)."""
    b = np.stack(np.broadcast_arrays(*busy))
    v = np.stack(np.broadcast_arrays(*values))
    b, v = np.broadcast_arrays(b, v)
    return np.take_along_axis(v, np.argmax(b, axis=0)[None], axis=0)[0][()]
