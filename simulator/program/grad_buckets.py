"""Gradient buckets of one model chunk, as Megatron-LM's DDP builds them.

Parameters are registered in backward order (the output layer first, then the layers from
last to first, then the embedding); a bucket is closed as soon as it holds at least
``bucket_params`` parameters (``strategies.cost.bucket_cut``, the rule the estimate's
windows read too; the stack's size at the plan's dp, ``SystemConfig.dp_bucket_params``:
Megatron-Core ``max(40M, 1M x dp)``, NeMo 2 128 Mi; docs/calibration.md §5.86). A layer is two
items, in its backward's order: its MLP with its norm (``layer_lead_params``: gradients
complete before the attention's backward) then the rest (attention, input norm, whose QKV
gradient completes last); a tensor is never split across buckets, and an item's tensors stay
together here (docs/calibration.md §5.192). Units: parameters.

>>> from types import SimpleNamespace as NS
>>> costs = NS(layer_params=30e6, head_params=0.0, embedding_params=50e6, bucket_params=40e6)
>>> b = chunk_buckets(costs, first=True, last=False, layers=4)
>>> b.buckets
((3, 60000000.0), (7, 60000000.0), (8, 50000000.0))
>>> bucket_segments(b, 4, split=True, per_layer=False)
[2, 2]
>>> chunk_buckets(costs, first=True, last=False, layers=4, bucketed=False).buckets
((8, 170000000.0),)
>>> b = chunk_buckets(costs, True, False, 2, params=[30e6, 30e6], leads=[20e6, 20e6])
>>> b.buckets, bucket_segments(b, 2, split=True, per_layer=False)
(((2, 50000000.0), (4, 60000000.0)), [2])
"""
from __future__ import annotations

from dataclasses import dataclass

from strategies.cost.bucket_cut import chunk_items, greedy_buckets


@dataclass(frozen=True)
class ChunkBuckets:
    """Items in backward order: ``[head]`` + each layer's lead and rest (last layer first) +
    ``[embedding]``. ``buckets``: ``(index of the bucket's last item, parameters)``, in
    reduction order."""

    head: bool
    embedding: bool
    buckets: tuple[tuple[int, float], ...]


def chunk_buckets(costs, first: bool, last: bool, layers: int,
                  params: list[float] | None = None, bucketed: bool = True,
                  leads: list[float] | None = None) -> ChunkBuckets:
    """Buckets of one model chunk of ``layers`` layers; ``first``/``last``: the chunk is the
    first (holds the embedding) or the last (the output layer) position of the pipeline;
    ``params``: each layer's parameters in forward order (default ``costs.layer_params``
    each, the mean layer); ``leads``: each layer's lead parameters, forward order (default
    0: a layer's gradients complete together at its end); ``bucketed`` False: the whole
    chunk is one bucket (``BucketRule.chunk_bucketed``: Megatron-Core's ranks and chunks
    past the first)."""
    head = last and costs.head_params > 0
    emb = first and costs.embedding_params > 0
    total = [costs.layer_params] * layers if params is None else list(params)
    lead = [0.0] * layers if leads is None else list(leads)
    items = list(chunk_items(costs.head_params if head else 0.0, zip(total[::-1], lead[::-1]),
                             costs.embedding_params if emb else 0.0))
    items = items[0 if head else 1:len(items) - (0 if emb else 1)]
    return ChunkBuckets(head, emb, greedy_buckets(
        items, costs.bucket_params if bucketed else float("inf")))


def bucket_segments(plan: ChunkBuckets, layers: int, split: bool, per_layer: bool) -> list[int]:
    """Layer counts of the backward's compute pieces: one piece, one per layer, or pieces
    that end with the layer where a bucket ends (so its reduction can start there: after
    the piece, or inside its last layer where the bucket ends with that layer's lead)."""
    if per_layer:
        return [1] * layers
    if not split:
        return [layers]
    h = 1 if plan.head else 0
    cuts = sorted({(idx - h) // 2 + 1 for idx, _ in plan.buckets if h <= idx < h + 2 * layers}
                  | {layers})
    out, prev = [], 0
    for cut in cuts:
        if cut > prev:
            out.append(cut - prev)
            prev = cut
    return out
