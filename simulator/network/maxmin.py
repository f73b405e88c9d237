"""Max-min fair rates of flows that share links, by progressive filling: the flow network's
solver (``flows.FlowNetwork`` calls it on each set of concurrent flows it has not rated yet),
and a memo of its answers kept for the process (``solved``), shared by every network over the
same links: a search simulates plan after plan on one cluster, and the plans of a search meet
the same sets of concurrent flows again (GPT-3 175B's default search in one process,
``python -m simulator.cli search --workers 1``: 16,303 solves, 9,438 with the memo, counted
with a wrapper around ``max_min_rates``).
"""
from __future__ import annotations

from functools import partial

import numpy as np

TIE_RTOL = 1e-12       # links whose fair shares differ by less are saturated together
# ``solved``: bytes of keys (flow sets' link matrices) the process-wide memo may still take
_SOLVED_BYTES = 64 << 20
_solved: dict[bytes, dict] = {}       # capacity vector (bytes) -> {(hops, links bytes): rates}
_room = [_SOLVED_BYTES]
_any_row = partial(np.logical_or.reduce, axis=1)     # ``a.any(axis=1)`` without its wrapper
_WORD = 8       # bools per uint64: rows this wide are tested for a crossing word by word


def max_min_rates(capacity: np.ndarray, links: np.ndarray) -> np.ndarray:
    """Max-min fair rates (bytes/s) by progressive filling.

    ``capacity[l]`` is link ``l``'s bandwidth (bytes/s); the last entry is a padding
    link of infinite capacity. ``links`` is an ``(flows, hops)`` index matrix padded
    with that last index. Each round saturates the links with the smallest fair share
    and freezes every live flow crossing them (one vectorised pass over ``links``), so many
    flows with few distinct levels take few rounds.

    >>> cap = np.array([1.0, 2.0, np.inf])
    >>> max_min_rates(cap, np.array([[0, 1], [0, 2], [1, 2]])).tolist()
    [0.5, 0.5, 1.5]
    """
    # only the links the flows cross (and the padding link, last) take part: the rounds then
    # work on those few, not on every link of the network (thousands); the same values link
    # by link, so the same rates bit for bit
    count = np.bincount(links.ravel(), minlength=capacity.shape[0])  # flows per link
    count[-1] = 1                             # the padding link kept (its count set to 0)
    # in index order, the padding link last (a boolean's ``nonzero``: several times cheaper
    # than an integer array's over the thousands of links of a large cluster)
    used = (count != 0).nonzero()[0]
    local = np.empty(capacity.shape[0], dtype=np.int64)
    local[used] = np.arange(used.size)
    nlinks, pad = used.size, used.size - 1
    nflows, hops = links.shape
    if hops < _WORD:    # rows padded to 8 columns: a row's crossings are one 8-byte word
        wide = np.full((nflows, _WORD), pad, dtype=np.int64)
        wide[:, :hops] = local[links]
        links = wide
    else:
        links = local[links]
    word = links.shape[1] == _WORD
    count = count[used]
    count[pad] = 0
    rates, spare = np.zeros(nflows), capacity[used].astype(float, copy=False)
    live, share, left = np.ones(nflows, dtype=bool), np.empty(nlinks), nflows
    saturated = np.zeros(nlinks, dtype=bool)
    while left:
        share.fill(np.inf)
        np.divide(np.maximum(spare, 0.0), count, out=share, where=count > 0)
        level = share[share.argmin()]     # ``share.min()`` without a ufunc reduction
        saturated[:] = share <= level * (1.0 + TIE_RTOL)
        # the live flows crossing a saturated link, in flow order: one vector pass over the
        # (flows, hops) matrix (a slice per saturated link was most of the time with hundreds
        # of flows and links saturating together, issue 17)
        # (the padding columns added change no row: the padding link saturates only when
        # every link does, at an infinite level, and then every live flow is hit anyway)
        crossed = saturated[links]
        crossed = crossed.view(np.uint64).ravel() != 0 if word else _any_row(crossed)
        hit = (crossed & live).nonzero()[0]
        rates[hit], live[hit] = level, False
        left -= hit.size
        if not left:                  # the last level (inf where no live flow had a link)
            break
        freed = np.bincount(links[hit].ravel(), minlength=nlinks)
        freed[pad] = 0
        spare -= freed * level
        count -= freed
    return rates


def solved(capacity: np.ndarray) -> dict:
    """The process-wide memo of ``max_min_rates`` over the links of ``capacity`` (bytes/s
    per link, the padding link last): one dict per distinct capacity vector, keyed by the
    flow set's link-index matrix (``max_min_memo``)."""
    return _solved.setdefault(capacity.tobytes(), {})


def max_min_memo(memo: dict, capacity: np.ndarray, links: np.ndarray) -> np.ndarray:
    """``max_min_rates(capacity, links)``, looked up in ``memo`` (``solved(capacity)``) first
    and kept there while the memo has room: a pure function of the capacities and the
    matrix, so the same rates bit for bit. The array returned may be the memo's: never
    written to."""
    key = (links.shape[1], links.dtype.char, links.tobytes())
    rates = memo.get(key)
    if rates is None:
        rates = max_min_rates(capacity, links)
        room = _room[0] - len(key[2]) - rates.nbytes
        if room >= 0:
            _room[0] = room
            memo[key] = rates
    return rates


def forget() -> None:
    """Empty the process-wide memo and restore its budget (benchmarks: a cold start)."""
    _solved.clear()
    _room[0] = _SOLVED_BYTES
