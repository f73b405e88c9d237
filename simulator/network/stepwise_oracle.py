"""The test oracle: collective algorithms run step by step, in lock-step, as point-to-point
transfers on a FlowNetwork.

The engine does not run these (it runs ``strategies.collectives``' phases, one flow per ring
hop for the whole collective); they exist to check that description. Each algorithm is a SimPy
process generator ``fn(net, ranks, nbytes, **kw)`` registered by name; ``nbytes`` is the
per-rank buffer size in bytes, as NCCL counts it (the full vector for all-reduce, the
gathered/unscattered vector for all-gather/reduce-scatter). Every step is a real transfer
that waits for the previous step's data, so collectives contend with all other traffic on the
wire. ``tests/test_collectives.py`` checks them against the closed forms of
``strategies.collectives`` (the ring's ``time``), and ``tests/test_engine.py`` runs the
engine's ``ring_stepwise`` algorithm on them. ``experiments/bench_network.py`` times them.

>>> import simpy, networkx as nx
>>> from simulator.network.flows import FlowNetwork
>>> g = nx.DiGraph()
>>> for r in range(4):
...     g.add_edge(r, "sw", bandwidth=1e9, latency=0.0)
...     g.add_edge("sw", r, bandwidth=1e9, latency=0.0)
>>> env = simpy.Environment(); net = FlowNetwork(env, g)
>>> env.run(start_collective(net, "ring_allreduce", range(4), 4e9)); env.now
6.0
>>> from strategies.collectives import ring
>>> float(ring.allreduce_time(4e9, 4, 1e9, 0.0))
6.0
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable

from simulator.network.flows import FlowNetwork

COLLECTIVES: dict = {}


def register(name: str) -> Callable:
    """Decorator registering a collective under ``name``; refuses duplicates."""
    def deco(fn: Callable) -> Callable:
        if name in COLLECTIVES:
            raise ValueError(f"collective {name!r} is already registered")
        COLLECTIVES[name] = fn
        return fn
    return deco


def get_collective(name: str) -> Callable:
    """The collective registered as ``name``."""
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise KeyError(f"unknown collective {name!r}; known: {sorted(COLLECTIVES)}") from None


def start_collective(net: FlowNetwork, name: str, ranks: Iterable, nbytes: float, **kw):
    """Start collective ``name`` as a SimPy process (an event that ends with it)."""
    return net.env.process(get_collective(name)(net, list(ranks), nbytes, **kw))


# -- ring ------------------------------------------------------------------------
def _ring(net: FlowNetwork, ranks: list, chunk: float, steps: int, tag):
    """``steps`` ring steps: rank i sends ``chunk`` bytes to rank i+1 once it has
    received the previous step's chunk and its own previous send has landed."""
    n, env = len(ranks), net.env
    if n < 2 or steps < 1:
        return
    got = [[env.event() for _ in range(n)] for _ in range(steps)]

    def rank(i: int):
        succ = (i + 1) % n
        for k in range(steps):
            sent = net.transfer(ranks[i], ranks[succ], chunk, tag)
            sent.callbacks.append(lambda _e, arrived=got[k][succ]: arrived.succeed())
            if k + 1 < steps:
                yield got[k][i] & sent
    for i in range(n):
        env.process(rank(i))
    yield env.all_of(got[-1])


@register("ring_allreduce")
def ring_allreduce(net: FlowNetwork, ranks: list, nbytes: float, tag=None):
    """Ring all-reduce: 2(n-1) steps of nbytes/n bytes to the ring successor."""
    yield from _ring(net, ranks, nbytes / max(len(ranks), 1), 2 * (len(ranks) - 1), tag)


@register("ring_reduce_scatter")
def ring_reduce_scatter(net: FlowNetwork, ranks: list, nbytes: float, tag=None):
    """Ring reduce-scatter of an nbytes buffer: n-1 steps of nbytes/n bytes."""
    yield from _ring(net, ranks, nbytes / max(len(ranks), 1), len(ranks) - 1, tag)


@register("ring_allgather")
def ring_allgather(net: FlowNetwork, ranks: list, nbytes: float, tag=None):
    """Ring all-gather into an nbytes buffer: n-1 steps of nbytes/n bytes."""
    yield from _ring(net, ranks, nbytes / max(len(ranks), 1), len(ranks) - 1, tag)


# -- tree ------------------------------------------------------------------------
@register("tree_allreduce")
def tree_allreduce(net: FlowNetwork, ranks: list, nbytes: float, chunks: int = 1, tag=None):
    """Binary-tree all-reduce: reduce to ``ranks[0]``, then broadcast back.

    Rank ``i``'s parent is ``(i-1)//2``. The buffer is cut into ``chunks`` pieces
    of nbytes/chunks bytes: a rank sends piece c up once all its children's piece c
    arrived, and forwards piece c down once it holds the result. ``chunks=1`` is the
    plain reduce-then-broadcast; more chunks pipeline the levels (and overlap the
    broadcast of early pieces with the reduction of later ones). Each link carries
    one piece at a time, in order.
    """
    n, env = len(ranks), net.env
    if n < 2:
        return
    piece = nbytes / chunks
    arrived_up = [[env.event() for _ in range(chunks)] for _ in range(n)]
    reduced = [[env.all_of([arrived_up[k][c] for k in (2 * i + 1, 2 * i + 2) if k < n])
                for c in range(chunks)] for i in range(n)]
    final = [reduced[0]] + [[env.event() for _ in range(chunks)] for _ in range(1, n)]

    def hop(src: int, dst: int, ready: list, arrived: list):
        for c in range(chunks):
            yield ready[c]
            yield net.transfer(ranks[src], ranks[dst], piece, tag)
            arrived[c].succeed()
    for i in range(1, n):
        env.process(hop(i, (i - 1) // 2, reduced[i], arrived_up[i]))
        env.process(hop((i - 1) // 2, i, final[(i - 1) // 2], final[i]))
    yield env.all_of([ev for row in final for ev in row])


# -- hierarchical ----------------------------------------------------------------
@register("hierarchical_allreduce")
def hierarchical_allreduce(net: FlowNetwork, ranks: list, nbytes: float,
                           node_of: Callable[[Hashable], Hashable], tag=None):
    """Intra-node ring reduce-scatter, inter-node ring all-reduce of nbytes/k among
    the ranks with the same local index (k ranks per node), intra-node all-gather.
    Phases are separated by barriers; groups within a phase run concurrently."""
    groups: dict = {}
    for r in ranks:
        groups.setdefault(node_of(r), []).append(r)
    nodes = list(groups.values())
    k = len(nodes[0]) if nodes else 0
    if any(len(g) != k for g in nodes):
        raise ValueError(f"ranks per node={[len(g) for g in nodes]}: must all be equal")
    env = net.env
    yield env.all_of([env.process(ring_reduce_scatter(net, g, nbytes, tag)) for g in nodes])
    peers = [[g[j] for g in nodes] for j in range(k)]
    yield env.all_of([env.process(ring_allreduce(net, p, nbytes / k, tag)) for p in peers])
    yield env.all_of([env.process(ring_allgather(net, g, nbytes, tag)) for g in nodes])


# -- point to point ----------------------------------------------------------------
@register("all_to_all")
def all_to_all(net: FlowNetwork, ranks: list, nbytes: float, tag=None):
    """Every rank sends nbytes/n bytes to every other rank, all at once."""
    n = len(ranks)
    sends = [net.transfer(a, b, nbytes / n, tag) for a in ranks for b in ranks if a != b]
    yield net.env.all_of(sends)


@register("send_recv")
def send_recv(net: FlowNetwork, ranks: list, nbytes: float, tag=None):
    """``ranks = [src, dst]``: send nbytes bytes from src to dst."""
    if len(ranks) != 2:
        raise ValueError(f"ranks={ranks!r}: send_recv needs exactly [src, dst]")
    yield net.transfer(ranks[0], ranks[1], nbytes, tag)
