"""A one-chunk stage's parameter gathers at its first forward in the analytic step
(``fill_gather_wait``): its gradient buckets cut as Megatron-Core cuts them
(``cost.bucket_cut``), gathered in forward order by the one-ahead rule
(``stacks.param_gather_wait``; docs/calibration.md §5.194). Arrays over plans; seconds."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from strategies.cost.bucket_cut import chunk_items, greedy_cut
from strategies.cost.stage import StageCostArrays
from strategies.stacks.param_gather_wait import gather_wait


def fill_gather_wait(sc: StageCostArrays, f_layer: Any, n: Any, head: Any, tail: Any,
                     gather: Callable[[Any], Any]) -> Any:
    """Seconds a stage of ``n`` like layers (``f_layer`` a layer's forward with its exposed
    communication) (``head`` the output layer's parameters there,
    ``tail`` the embedding's; 0 where none) waits at its first forward for its parameter
    gathers; ``gather(params)`` one bucket's gather seconds. The points the forward waits at,
    as the simulator's ``FillGathers`` places them (one compute op a layer): the embedding's
    (with the remainder bucket: the first gathered), each layer's attention at its start, its
    MLP at the next layer's start (the bucket after it dispatched at the layer's start, where
    the layer's attention waits or it is the stage's first), the last layer's MLP at its
    start, the LM head's. Arrays over plans."""
    n = np.rint(np.asarray(n, dtype=float))
    count = int(np.max(n)) if n.size else 0
    size = sc.bucket_params
    own = [(np.where(j < n, sc.layer_params, 0.0), np.where(j < n, sc.layer_lead_params, 0.0))
           for j in range(count)]
    *closes, rest = greedy_cut(chunk_items(head, own, tail), size)
    zero = 0.0 * n

    def a(params: Any) -> Any:
        return np.where(params > 0, gather(np.maximum(params, 1.0)), 0.0) + zero
    # points in forward order: (gather, forward after it, early); items: 0 the head, 1 + 2j
    # layer j's MLP (j from the last), 2 + 2j its attention, 2·count + 1 the embedding
    points = [(a(closes[2 * count + 1] + rest), sc.embedding_fwd * (tail > 0) + zero, False)]
    for j in range(count - 1, -1, -1):
        live, last = j < n, j == 0
        attn, mlp = a(closes[2 + 2 * j]), a(closes[1 + 2 * j])
        points.append((attn, np.where(live & ~last, f_layer, 0.0) + zero, False))
        points.append((mlp, np.where(live & last, f_layer, 0.0) + zero,
                       live & ~last & ((attn > 0) | (j == n - 1))))
    points.append((a(closes[0]), zero, False))
    g, f, e = zip(*points)
    return gather_wait(g, f, [np.asarray(x, dtype=bool) for x in e])
