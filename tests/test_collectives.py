"""Closed forms and contention for collectives on the flow network."""
import networkx as nx
import pytest
import simpy

from simulator.network import stepwise_oracle as C
from strategies.collectives import ring
from simulator.network.flows import FlowNetwork

GB = 1e9
REL = 1e-12
HOP = 0.7e-6        # latency of one link (s); a GPU -> switch -> GPU route has two


def star(n, bw=25 * GB, lat=HOP):
    """n GPUs on one non-blocking switch: an up-link and a down-link each."""
    g = nx.DiGraph()
    for r in range(n):
        g.add_edge(r, "sw", bandwidth=bw, latency=lat)
        g.add_edge("sw", r, bandwidth=bw, latency=lat)
    return g


def run(graph, *jobs):
    """Start ``(name, ranks, nbytes, kw)`` jobs together; return (end times, net)."""
    env = simpy.Environment()
    net = FlowNetwork(env, graph)
    ends = [None] * len(jobs)

    def stamp(i):
        return lambda _e: ends.__setitem__(i, env.now)
    procs = []
    for i, (name, ranks, nbytes, kw) in enumerate(jobs):
        procs.append(C.start_collective(net, name, ranks, nbytes, **kw))
        procs[-1].callbacks.append(stamp(i))
    env.run(env.all_of(procs))
    return ends, net


@pytest.mark.parametrize("n", range(2, 9))
def test_ring_allreduce_alone(n):
    size, bw = 3e8, 25 * GB
    (t,), net = run(star(n, bw), ("ring_allreduce", list(range(n)), size, {}))
    assert t == pytest.approx(ring.allreduce_time(size, n, bw, 2 * HOP), rel=REL)
    assert t == pytest.approx(2 * (n - 1) / n * size / bw + 2 * (n - 1) * 2 * HOP, rel=REL)
    assert net.flows_completed == 2 * (n - 1) * n


@pytest.mark.parametrize("n", range(2, 9))
@pytest.mark.parametrize("name, closed", [("ring_reduce_scatter", ring.reduce_scatter_time),
                                          ("ring_allgather", ring.allgather_time)])
def test_reduce_scatter_and_allgather_alone(n, name, closed):
    size, bw = 1.2e8, 50 * GB
    (t,), _ = run(star(n, bw), (name, list(range(n)), size, {}))
    assert t == pytest.approx(closed(size, n, bw, 2 * HOP), rel=REL)
    assert t == pytest.approx((n - 1) / n * size / bw + (n - 1) * 2 * HOP, rel=REL)


@pytest.mark.parametrize("n", [2, 4, 7])
def test_two_allreduces_sharing_links_halve_bandwidth(n):
    size, bw = 2e8, 25 * GB
    ranks = list(range(n))
    ends, _ = run(star(n, bw), ("ring_allreduce", ranks, size, {}),
                  ("ring_allreduce", ranks[::-1], size, {}))
    shared = ring.allreduce_time(size, n, bw / 2, 2 * HOP)
    assert ends == pytest.approx([shared, shared], rel=REL)
    assert shared > ring.allreduce_time(size, n, bw, 2 * HOP)


def test_allreduces_on_disjoint_ranks_do_not_interfere():
    size, bw = 2e8, 25 * GB
    ends, _ = run(star(8, bw), ("ring_allreduce", [0, 1, 2, 3], size, {}),
                  ("ring_allreduce", [4, 5, 6, 7], size, {}))
    assert ends == pytest.approx([ring.allreduce_time(size, 4, bw, 2 * HOP)] * 2, rel=REL)


@pytest.mark.parametrize("n", [2, 4, 5])
def test_smaller_allreduce_then_the_larger_speeds_up(n):
    """Same ring, sizes S and 2S, no latency: per 4s/bw the small one does two steps
    and the large one one step (s = S/n); then the large one runs alone."""
    size, bw = 1e8, 20 * GB
    ranks, s, steps = list(range(n)), size / n, 2 * (n - 1)
    ends, _ = run(star(n, bw, 0.0), ("ring_allreduce", ranks, size, {}),
                  ("ring_allreduce", ranks, 2 * size, {}))
    assert ends == pytest.approx([steps * 2 * s / bw, steps * 3 * s / bw], rel=REL)


def test_link_bytes_of_ring_allreduce():
    n, size = 6, 6e8
    _, net = run(star(n), ("ring_allreduce", list(range(n)), size, {}))
    carried = net.link_bytes()
    for r in range(n):
        assert carried[(r, "sw")] == pytest.approx(2 * (n - 1) * size / n, rel=REL)
        assert carried[("sw", r)] == pytest.approx(2 * (n - 1) * size / n, rel=REL)


def test_tree_allreduce_unpipelined():
    size, bw = 1e8, 10 * GB
    (t2,), _ = run(star(2, bw), ("tree_allreduce", [0, 1], size, {}))
    assert t2 == pytest.approx(2 * (2 * HOP + size / bw), rel=REL)
    (t3,), _ = run(star(3, bw), ("tree_allreduce", [0, 1, 2], size, {}))
    # two children share the root's down-link, then the root's up-link
    assert t3 == pytest.approx(2 * (2 * HOP + 2 * size / bw), rel=REL)


@pytest.mark.parametrize("chunks", [1, 2, 5, 16])
def test_tree_allreduce_pipelined_two_ranks(chunks):
    size, bw = 1e8, 10 * GB
    (t,), _ = run(star(2, bw), ("tree_allreduce", [0, 1], size, {"chunks": chunks}))
    assert t == pytest.approx((chunks + 1) * (2 * HOP + size / chunks / bw), rel=REL)


def two_level(nodes, gpus, intra=300 * GB, inter=50 * GB, lat_in=0.5e-6, lat_out=2e-6):
    """GPU (n, j) -- ("nvsw", n) at ``intra``; GPU -- ("spine",) at ``inter``."""
    g = nx.DiGraph()
    for n in range(nodes):
        for j in range(gpus):
            for a, b, bw, lat in [((n, j), ("nvsw", n), intra, lat_in),
                                  ((n, j), ("spine",), inter, lat_out)]:
                g.add_edge(a, b, bandwidth=bw, latency=lat)
                g.add_edge(b, a, bandwidth=bw, latency=lat)
    return g


@pytest.mark.parametrize("nodes, gpus", [(2, 2), (2, 4), (3, 4), (4, 8)])
def test_hierarchical_allreduce(nodes, gpus):
    size, intra, inter, lat_in, lat_out = 4e8, 300 * GB, 50 * GB, 0.5e-6, 2e-6
    ranks = [(n, j) for n in range(nodes) for j in range(gpus)]
    (t,), _ = run(two_level(nodes, gpus, intra, inter, lat_in, lat_out),
                  ("hierarchical_allreduce", ranks, size, {"node_of": lambda r: r[0]}))
    expected = (2 * ring.reduce_scatter_time(size, gpus, intra, 2 * lat_in)
                + ring.allreduce_time(size / gpus, nodes, inter, 2 * lat_out))
    assert t == pytest.approx(expected, rel=REL)


def test_hierarchical_refuses_uneven_nodes():
    with pytest.raises(ValueError, match="ranks per node"):
        run(two_level(2, 2), ("hierarchical_allreduce", [(0, 0), (0, 1), (1, 0)], 1e6,
                              {"node_of": lambda r: r[0]}))


@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_all_to_all(n):
    size, bw = 1.6e8, 25 * GB
    (t,), net = run(star(n, bw), ("all_to_all", list(range(n)), size, {}))
    assert t == pytest.approx(2 * HOP + (n - 1) / n * size / bw, rel=REL)
    assert net.flows_completed == n * (n - 1)


def test_send_recv():
    (t,), _ = run(star(2), ("send_recv", [1, 0], 5e7, {}))
    assert t == pytest.approx(2 * HOP + 5e7 / (25 * GB), rel=REL)
    with pytest.raises(ValueError):
        run(star(3), ("send_recv", [0, 1, 2], 1.0, {}))


@pytest.mark.parametrize("name", ["ring_allreduce", "ring_reduce_scatter", "ring_allgather",
                                  "tree_allreduce", "all_to_all"])
def test_single_rank_takes_no_time(name):
    (t,), net = run(star(2), (name, [0], 1e9, {}))
    assert t == 0.0 and net.flows_started == 0


def test_determinism_with_mixed_traffic():
    def once():
        ranks = [(n, j) for n in range(3) for j in range(4)]
        return run(two_level(3, 4),
                   ("hierarchical_allreduce", ranks, 3e8, {"node_of": lambda r: r[0]}),
                   ("all_to_all", ranks, 1e8, {}),
                   ("tree_allreduce", ranks[::-1], 2e8, {"chunks": 4}),
                   ("ring_allreduce", ranks[::2], 1e8, {}))
    (a, net_a), (b, net_b) = once(), once()
    assert a == b and net_a.link_bytes() == net_b.link_bytes()


def test_registry():
    assert {"ring_allreduce", "ring_reduce_scatter", "ring_allgather", "tree_allreduce",
            "hierarchical_allreduce", "all_to_all", "send_recv"} <= set(C.COLLECTIVES)
    with pytest.raises(ValueError, match="already registered"):
        C.register("ring_allreduce")(lambda net, ranks, nbytes: iter(()))
    with pytest.raises(KeyError, match="unknown collective"):
        C.get_collective("butterfly")


def test_closed_forms():
    assert ring.allreduce_time(1e9, 1, 1e9, 1.0) == 0.0
    assert ring.allreduce_time(4e9, 4, 1e9, 0.5) == pytest.approx(6.0 + 3.0, rel=REL)
    assert ring.reduce_scatter_time(4e9, 4, 1e9, 0.5) == pytest.approx(3.0 + 1.5, rel=REL)
