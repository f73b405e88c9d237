"""Gradient buckets as Megatron-Core's DDP cuts them: the one rule the simulator's buckets
(``simulator.program.grad_buckets``) and the estimate's bucket windows
(``estimate.terms.buckets``) read (docs/calibration.md §5.192, §5.193).

Megatron-Core ``_ParamAndGradBuffer.__init__`` (``param_and_grad_buffer.py``, @d98e8a6)
walks a chunk's parameters in backward order and closes a bucket as soon as it holds
``size`` parameters; the remainder forms the last one. The items in backward order
(``chunk_items``): the output layer where the chunk holds it, then each layer from the last
as its lead (MLP with its norm: gradients complete before the attention's backward) and its
rest (attention, input norm), then the embedding. ``greedy_cut`` works item by item on
numbers or on numpy arrays over plans alike: ``greedy_buckets`` is its one-chunk list form
(the simulator's), ``chunk_cut`` its form over plans of like layers (the estimate's).
Units: parameters; ``lead_tail`` seconds.

>>> greedy_buckets([30e6, 30e6, 20e6, 50e6], 40e6)
((1, 60000000.0), (3, 70000000.0))
>>> [float(x) for x in greedy_cut([30e6, 30e6, 20e6], 40e6)]
[0.0, 60000000.0, 0.0, 20000000.0]
>>> list(chunk_items(1.0, [(5.0, 3.0), (4.0, 1.0)], 9.0))
[1.0, 3.0, 2.0, 1.0, 3.0, 9.0]
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import numpy as np


def greedy_cut(items: Iterable[Any], size: Any) -> Iterator[Any]:
    """Megatron-Core's greedy cut of ``items`` (parameters in backward order; numbers, or
    arrays over plans): yields, item by item, the parameters of the bucket that closes with
    it (0 where none: the bucket closes once it holds ``size``), then the remainder (the last
    bucket where one is left short of ``size``; 0 where none)."""
    acc: Any = 0.0
    for n in items:
        acc = acc + n
        shut = acc >= size
        yield np.where(shut, acc, 0.0)
        acc = np.where(shut, 0.0, acc)
    yield acc


def greedy_buckets(items: list[float], size: float) -> tuple[tuple[int, float], ...]:
    """``greedy_cut`` of one chunk's ``items`` as ``(index of the bucket's last item,
    parameters)`` in reduction order."""
    *closes, rest = greedy_cut(items, size)
    out = [(i, float(c)) for i, c in enumerate(closes) if c > 0]
    if rest > 0:
        out.append((len(items) - 1, float(rest)))
    return tuple(out)


def chunk_items(head: Any, layers: Iterable[tuple[Any, Any]], tail: Any,
                pre: Iterable[Any] = ()) -> Iterator[Any]:
    """A chunk's items in backward order: ``head`` (the output layer; 0 where the chunk
    does not hold it), ``pre`` (items whose gradients complete whole before the layers':
    multi-token-prediction modules), then each of ``layers`` (``(parameters, lead
    parameters)``, in backward order: the last layer first) as its lead then its rest,
    then ``tail`` (the embedding; 0 where none)."""
    yield head
    yield from pre
    for n, lead in layers:
        yield lead
        yield n - lead
    yield tail


def chunk_cut(size: Any, head: Any, layer: Any, lead: Any, layers: Any, tail: Any,
              pre: Any = 0.0, pre_n: int = 0, calls: bool = False) -> tuple:
    """``greedy_cut`` of a chunk of ``layers`` like layers (``layer`` parameters each,
    ``lead`` of them its MLP's), arrays over plans (broadcast): ``chunk_items(head, layers,
    tail, pre_n x [pre])``. Returns ``(first, last)``: the index of the item the first
    bucket closes with (``1 + pre_n + 2·j`` layer ``j``'s lead, ``+ 1`` its rest, counted
    from the chunk's last layer; ``1 + pre_n + 2·layers`` or more: the embedding or the
    remainder) and the last bucket's parameters (the remainder, else the last full one);
    with ``calls``, third, how many buckets the chunk is cut into (each one collective call
    of the data-parallel group: ``start_grad_sync``/``start_param_sync`` per bucket group).
    Each distinct row is cut once."""
    cols = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in
                                 (size, head, layer, lead, np.rint(layers), tail, pre)))
    flat = [c.ravel() for c in cols]
    inv, pick = _distinct_rows(flat)
    B, h, lp, ap, n, tl, pr = (c[pick] for c in flat)
    count = int(n.max()) if n.size else 0
    own = ((np.where(j < n, lp, 0.0), np.where(j < n, ap, 0.0)) for j in range(count))
    first = np.full(len(pick), float(2 * count + 2 + pre_n))
    last = np.zeros(len(pick))
    n_b = np.zeros(len(pick))
    for i, c in enumerate(greedy_cut(chunk_items(h, own, tl, [pr] * pre_n), B)):
        first = np.where((c > 0) & (first > i), i, first)
        last = np.where(c > 0, c, last)
        n_b = n_b + (c > 0)
    out = (first[inv].reshape(cols[0].shape), last[inv].reshape(cols[0].shape))
    return out + (n_b[inv].reshape(cols[0].shape),) if calls else out


def _distinct_rows(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(inv, pick)``: each row's distinct-row number and a row of each (``cols`` 1-D, of
    one length): rows grouped by one mixed sum of the columns, the grouping checked exact
    (else each column coded and the codes folded, exact whatever the values)."""
    if not cols[0].size:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    mix = sum(c * w for c, w in zip(cols, (1.0, 3.14159, 2.71828, 1.41421, 1.73205, 2.23607,
                                           2.64575)))
    _, pick, inv = np.unique(mix, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    if all(np.array_equal(c, c[pick][inv]) for c in cols):
        return inv, pick
    inv = np.zeros(cols[0].size, dtype=np.int64)
    for c in cols:
        _, code = np.unique(c, return_inverse=True)
        _, inv = np.unique(inv * (int(code.max()) + 1) + code.reshape(-1), return_inverse=True)
        inv = inv.reshape(-1)
    pick = np.zeros(int(inv.max()) + 1, dtype=np.int64)
    pick[inv[::-1]] = np.arange(inv.size)[::-1]
    return inv, pick


def lead_tail(gemm: Any, attn: Any, lead_work: Any, core: Any = 1.0) -> Any:
    """Seconds of a layer's backward left after its lead's (MLP's) gradients complete: its
    attention's GEMMs (``1 - lead_work`` of the ``gemm`` seconds outside the attention core,
    ``param_counts.layer_lead_split``) and ``core`` times the core's ``attn`` seconds (0
    where the core runs apart, a context-parallel block)."""
    return (1.0 - lead_work) * gemm + core * attn
