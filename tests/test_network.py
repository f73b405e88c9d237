"""Golden numbers and invariants for the fluid flow network (simulator.network.flows)."""
import networkx as nx
import numpy as np
import pytest
import simpy

from simulator.network.flows import FlowNetwork
from simulator.network.maxmin import max_min_rates
from simulator.network.routes import shortest_route

GB = 1e9
REL = 1e-12


def chain(bandwidths, latencies=None):
    """Nodes 0..k joined by links i -> i+1 with the given bandwidths (bytes/s)."""
    g = nx.DiGraph()
    for i, bw in enumerate(bandwidths):
        g.add_edge(i, i + 1, bandwidth=bw, latency=(latencies or [0.0] * len(bandwidths))[i])
    return g


def finish_times(graph, specs, route_fn=None):
    """Run transfers ``(start_s, src, dst, nbytes)``; return (arrival times, net)."""
    env = simpy.Environment()
    net = FlowNetwork(env, graph, route_fn)
    times = [None] * len(specs)

    def one(i, start, src, dst, nbytes):
        yield env.timeout(start)
        yield net.transfer(src, dst, nbytes, tag=i)
        times[i] = env.now
    for i, spec in enumerate(specs):
        env.process(one(i, *spec))
    env.run()
    return times, net


@pytest.mark.parametrize("nbytes, bw, lat", [(1e9, 25 * GB, 2e-6), (12345.0, 3.3 * GB, 0.0),
                                              (7.5e6, 900 * GB, 1.7e-7)])
def test_one_flow_alone(nbytes, bw, lat):
    (t,), _ = finish_times(chain([bw], [lat]), [(0.0, 0, 1, nbytes)])
    assert t == pytest.approx(lat + nbytes / bw, rel=REL)


def test_two_links_bottleneck_and_summed_latency():
    g = chain([50 * GB, 12.5 * GB, 100 * GB], [1e-6, 2e-6, 3e-6])
    (t,), _ = finish_times(g, [(0.0, 0, 3, 3e8)])
    assert t == pytest.approx(6e-6 + 3e8 / (12.5 * GB), rel=REL)


@pytest.mark.parametrize("n", range(1, 9))
def test_n_equal_flows_on_one_link(n):
    bw, lat, size = 40 * GB, 5e-6, 2.5e8
    times, net = finish_times(chain([bw], [lat]), [(0.0, 0, 1, size)] * n)
    for t in times:
        assert t == pytest.approx(lat + n * size / bw, rel=REL)
    assert net.recomputations == 2          # simultaneous starts fold into one recompute


@pytest.mark.parametrize("n", range(2, 9))
def test_unequal_sizes_on_one_link(n):
    bw, lat = 10 * GB, 1e-6
    sizes = [1e6 * (k + 1) ** 1.5 for k in range(n)]
    times, _ = finish_times(chain([bw], [lat]), [(0.0, 0, 1, s) for s in reversed(sizes)])
    expected, t, prev = [], 0.0, 0.0
    for k, s in enumerate(sizes):           # k flows done; n-k share the link
        t += (n - k) * (s - prev) / bw
        prev = s
        expected.append(lat + t)
    assert times[::-1] == pytest.approx(expected, rel=REL)
    assert times[-1] == pytest.approx(lat + n * sizes[0] / bw, rel=REL)


def test_parking_lot_max_min():
    """Long flow 0->3 over links of 1, 2, 3 GB/s, one short flow per link."""
    size = 1e9
    g = chain([1 * GB, 2 * GB, 3 * GB])
    specs = [(0.0, 0, 3, size), (0.0, 0, 1, size), (0.0, 1, 2, size), (0.0, 2, 3, size)]
    times, _ = finish_times(g, specs)
    assert times == pytest.approx([size / (0.5 * GB), size / (0.5 * GB),
                                   size / (1.5 * GB), size / (2.5 * GB)], rel=REL)


def test_parking_lot_rates_mid_run():
    env = simpy.Environment()
    net = FlowNetwork(env, chain([1 * GB, 2 * GB, 3 * GB]))
    for tag, (src, dst) in enumerate([(0, 3), (0, 1), (1, 2), (2, 3)]):
        net.transfer(src, dst, 1e9, tag=tag)
    env.run(until=0.1)
    rates = {tag: rate for tag, rate, _ in net.active_flows()}
    assert rates == pytest.approx({0: 0.5 * GB, 1: 0.5 * GB, 2: 1.5 * GB, 3: 2.5 * GB}, rel=REL)


def test_parking_lot_speedup_after_bottleneck_leaves():
    """Long flow over links of 1 and 1.5 GB/s; as competitors leave it speeds up."""
    g = chain([1 * GB, 1.5 * GB])
    times, _ = finish_times(g, [(0.0, 0, 2, 1e9), (0.0, 0, 1, 1e8), (0.0, 1, 2, 1e9)])
    t1 = 1e8 / (0.5 * GB)                  # rates 0.5 | 0.5 | 1.0 until the short one ends
    long_left, other_left = 1e9 - 0.5 * GB * t1, 1e9 - 1.0 * GB * t1
    t2 = t1 + other_left / (0.75 * GB)     # then link 2 is shared 0.75 | 0.75
    t3 = t2 + (long_left - other_left) / (1 * GB)   # then link 1 limits the long flow
    assert times == pytest.approx([t3, t1, t2], rel=REL)


def test_flow_starting_mid_way():
    bw, size, lat = 8 * GB, 4e9, 3e-6
    t_half = lat + size / (2 * bw)
    times, _ = finish_times(chain([bw], [lat]), [(0.0, 0, 1, size), (t_half - lat, 0, 1, size)])
    # at t_half flow 0 has size/2 left; both then share bw/2
    assert times[0] == pytest.approx(t_half + size / bw, rel=REL)
    assert times[1] == pytest.approx(t_half + size / bw + size / (2 * bw), rel=REL)


def test_longer_route_joins_later():
    """A 4-hop flow joins a 1-hop flow half-way on their shared first link."""
    bw, size = 2 * GB, 1e9
    times, _ = finish_times(chain([bw] * 4), [(0.0, 0, 1, size), (size / (2 * bw), 0, 4, size)])
    assert times == pytest.approx([1.5 * size / bw, 2 * size / bw], rel=REL)


def test_zero_bytes_and_self_transfer_take_no_time():
    env = simpy.Environment()
    net = FlowNetwork(env, chain([GB], [1.0]))
    a, b = net.transfer(0, 1, 0), net.transfer(1, 1, 1e9, tag="x")
    env.run(env.all_of([a, b]))
    assert env.now == 0.0 and b.value == "x" and net.flows_started == 0


def test_link_bytes_accounting():
    g = chain([GB, 2 * GB, GB])
    specs = [(0.0, 0, 3, 3e8), (0.1, 1, 2, 5e8), (0.0, 2, 3, 7e7), (0.05, 0, 2, 1e8)]
    _, net = finish_times(g, specs)
    got = net.link_bytes()
    assert got[(0, 1)] == pytest.approx(3e8 + 1e8, rel=REL)
    assert got[(1, 2)] == pytest.approx(3e8 + 5e8 + 1e8, rel=REL)
    assert got[(2, 3)] == pytest.approx(3e8 + 7e7, rel=REL)


def test_link_bytes_counts_partial_flows():
    env = simpy.Environment()
    net = FlowNetwork(env, chain([GB, GB]))
    net.transfer(0, 2, 1e9)
    net.transfer(1, 2, 1e9)
    env.run(until=0.5)                      # link 1->2 shared: 0.25 GB each so far
    got = net.link_bytes()
    assert got[(0, 1)] == pytest.approx(2.5e8, rel=REL)
    assert got[(1, 2)] == pytest.approx(5e8, rel=REL)


def star(n, bw, lat):
    g = nx.DiGraph()
    for r in range(n):
        g.add_edge(r, "sw", bandwidth=bw, latency=lat)
        g.add_edge("sw", r, bandwidth=bw, latency=lat)
    return g


def random_specs(seed, n, count):
    rng = np.random.default_rng(seed)
    specs = []
    for _ in range(count):
        a, b = rng.choice(n, size=2, replace=False)
        specs.append((float(rng.uniform(0, 1e-3)), int(a), int(b), float(rng.uniform(1e3, 1e7))))
    return specs


def test_determinism_bit_identical():
    specs = random_specs(7, 16, 600)
    first, net1 = finish_times(star(16, 25 * GB, 1e-6), specs)
    second, net2 = finish_times(star(16, 25 * GB, 1e-6), specs)
    assert first == second
    assert net1.link_bytes() == net2.link_bytes()
    assert net1.recomputations == net2.recomputations


def test_work_conserving_single_link():
    """With every flow on one link, the last arrival is lat + total/bw."""
    specs = [(0.0, 0, 1, float(s)) for s in np.random.default_rng(3).uniform(1, 1e6, 200)]
    times, _ = finish_times(chain([GB], [1e-6]), specs)
    assert max(times) == pytest.approx(1e-6 + sum(s[3] for s in specs) / GB, rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_max_min_rates_are_feasible_and_bottlenecked(seed):
    rng = np.random.default_rng(seed)
    nlinks, nflows = 12, 40
    cap = np.append(rng.uniform(1, 10, nlinks), np.inf)
    links = np.full((nflows, 4), nlinks)
    for f in range(nflows):
        hops = rng.choice(nlinks, size=rng.integers(1, 5), replace=False)
        links[f, :hops.size] = hops
    rates = max_min_rates(cap, links)
    load = np.bincount(links.ravel(), weights=np.repeat(rates, 4), minlength=nlinks + 1)
    assert np.all(load[:nlinks] <= cap[:nlinks] * (1 + 1e-9))
    for f in range(nflows):              # each flow has a saturated link where it is largest
        ok = [l for l in links[f] if l < nlinks and load[l] >= cap[l] * (1 - 1e-9)
              and rates[f] >= rates[(links == l).any(axis=1)].max() * (1 - 1e-9)]
        assert ok, f"flow {f} has no bottleneck link"


def _progressive_filling(cap, links):
    """Max-min rates by the textbook rounds, one flow at a time (pure Python): the smallest
    fair share saturates its links (ties within 1e-12), every live flow crossing one gets it,
    and their hops leave the links (a link counted as often as a flow crosses it: folded routes
    cross a representative link more than once)."""
    pad = len(cap) - 1
    count = [0] * len(cap)
    for row in links:
        for l in row:
            if l != pad:
                count[l] += 1
    spare, live, rates = [float(c) for c in cap], [True] * len(links), [0.0] * len(links)
    while any(live):
        share = [max(spare[l], 0.0) / count[l] if count[l] else np.inf for l in range(len(cap))]
        level = min(share)
        sat = {l for l in range(len(cap)) if share[l] <= level * (1.0 + 1e-12)}
        freed = [0] * len(cap)
        for f, row in enumerate(links):
            if live[f] and any(l in sat for l in row):
                rates[f], live[f] = level, False
                for l in row:
                    if l != pad:
                        freed[l] += 1
        for l in range(len(cap)):
            spare[l] -= freed[l] * level
            count[l] -= freed[l]
    return rates


@pytest.mark.parametrize("seed", range(6))
def test_max_min_rates_equal_textbook_progressive_filling_exactly(seed):
    """Same floats as the one-at-a-time rounds, ties included (few distinct capacities make
    many links saturate together): the vectorised rounds only change how flows are found."""
    rng = np.random.default_rng(seed)
    nlinks, nflows = 30, 300
    cap = np.append(rng.choice([1.0, 2.0, 4.0, 3.7], nlinks), np.inf)
    links = np.full((nflows, 5), nlinks)
    for f in range(nflows):
        hops = rng.choice(nlinks, size=rng.integers(1, 6), replace=True)
        links[f, :hops.size] = hops
    assert max_min_rates(cap, links).tolist() == _progressive_filling(cap.tolist(), links.tolist())


def test_default_route_is_deterministic_by_repr():
    g1, g2 = nx.DiGraph(), nx.DiGraph()
    edges = [("a", "c"), ("c", "d"), ("a", "b"), ("b", "d"), ("a", "x"), ("x", "y"), ("y", "d")]
    g1.add_edges_from(edges)
    g2.add_edges_from(reversed(edges))
    assert shortest_route(g1, "a", "d") == shortest_route(g2, "a", "d") == ["a", "b", "d"]


def test_custom_route_fn():
    g = nx.DiGraph()
    g.add_edge(0, 1, bandwidth=GB, latency=0.0)
    g.add_edge(0, 2, bandwidth=GB / 4, latency=0.0)
    g.add_edge(2, 1, bandwidth=GB, latency=0.0)
    (t,), _ = finish_times(g, [(0.0, 0, 1, 1e9)], route_fn=lambda _g, s, d: [s, 2, d])
    assert t == pytest.approx(4.0, rel=REL)


def test_bad_inputs_are_refused():
    g = chain([0.0])
    with pytest.raises(ValueError, match="bandwidth"):
        FlowNetwork(simpy.Environment(), g)
    net = FlowNetwork(simpy.Environment(), chain([GB]))
    with pytest.raises(ValueError, match="nbytes"):
        net.transfer(0, 1, -1.0)
    with pytest.raises(nx.NetworkXNoPath):
        net.transfer(1, 0, 1.0)


def test_many_concurrent_flows_on_star():
    """n(n-1) equal flows on a star: every up-link carries n-1 of them."""
    n, size, bw, lat = 40, 1e6, 50 * GB, 1e-6
    specs = [(0.0, a, b, size) for a in range(n) for b in range(n) if a != b]
    times, net = finish_times(star(n, bw, lat), specs)
    assert times == pytest.approx([2 * lat + (n - 1) * size / bw] * len(specs), rel=REL)
    assert net.flows_completed == len(specs) and net.recomputations == 2
