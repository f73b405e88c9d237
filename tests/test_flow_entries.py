"""The flow network's queue entries (simulator.network.flows): a latency that ends at an
instant of its own starts its flow and recomputes the rates without a zero-delay entry, a
superseded completion timeout calls nothing, and rates looked up by slot order are the
multiset lookup's. The times are the same either way (closed forms below)."""
import networkx as nx
import numpy as np
import pytest
import simpy

from simulator.network.flows import FlowNetwork
from simulator.network.maxmin import max_min_rates
from simulator.network.queue_entry import QueueEntry

GB = 1e9


def link(bw: float = 1 * GB, lat: float = 1e-6) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_edge("a", "b", bandwidth=bw, latency=lat)
    g.add_edge("c", "d", bandwidth=bw, latency=lat)
    return g


def run_counting(env: simpy.Environment) -> int:
    """``env.run()``, one ``step`` at a time: the queue entries taken."""
    n = 0
    while env._queue:
        env.step()
        n += 1
    return n


def test_lone_send_settles_at_its_latency_end_without_a_zero_delay_entry():
    env = simpy.Environment()
    net = FlowNetwork(env, link())
    ends = []
    net.transfer("a", "b", 2e9, "m", lambda tag: ends.append((tag, env.now)), share=("s", 0))
    # the latency's entry (which starts the flow and recomputes at once) and the timer: two,
    # not three (a zero-delay recomputation entry in between)
    assert run_counting(env) == 2
    assert ends == [("m", 1e-6 + 2e9 / GB)]
    assert net.recomputations == 2         # the start, then the end


def test_latencies_ending_together_share_one_recomputation():
    """Two sends whose latencies end at one instant (different ``share`` keys: two entries):
    the first keeps the zero-delay entry (another entry is due then), the second folds into
    it; both flows share the link from the same instant."""
    env = simpy.Environment()
    net = FlowNetwork(env, link())
    ends = []
    for k in range(2):
        net.transfer("a", "b", 1e9, k, lambda tag: ends.append((tag, env.now)), share=("s", k))
    assert run_counting(env) == 4          # two latencies, one recomputation, one timer
    assert [t for _, t in ends] == [1e-6 + 2e9 / GB] * 2
    assert net.recomputations == 2


def test_superseded_timer_calls_nothing_and_the_ends_are_max_min():
    """Flow A (2 GB) alone from 0, flow B (1 GB) on the same link from 0.5 s: A's first
    timer (due at 2 s) is superseded and calls nothing; B ends at 0.5 + 2 = 2.5 s, A at 3 s."""
    g = nx.DiGraph()
    g.add_edge("a", "b", bandwidth=1 * GB, latency=0.0)
    env = simpy.Environment()
    net = FlowNetwork(env, g)
    ends = {}
    net.transfer("a", "b", 2e9, "A", lambda tag: ends.__setitem__(tag, env.now))
    env.run(until=0.25)
    first = net._timer
    assert isinstance(first, QueueEntry) and first.callbacks
    env.timeout(0.25).callbacks.append(
        lambda _e: net.transfer("a", "b", 1e9, "B", lambda tag: ends.__setitem__(tag, env.now)))
    env.run(until=1.0)
    assert first.callbacks == [] and net._timer is not first    # superseded at 0.5 s
    env.run()
    assert net._timer is None
    assert ends["B"] == pytest.approx(2.5, rel=1e-12)
    assert ends["A"] == pytest.approx(3.0, rel=1e-12)


def test_rates_by_slot_order_are_the_multiset_rates():
    """The same routes in the same slots again: the slot-order lookup gives the rates the
    multiset lookup gave (one entry per distinct order), and the ends repeat exactly."""
    env = simpy.Environment()
    net = FlowNetwork(env, link(lat=0.0))
    ends = []

    def burst(_e=None):
        for src, dst, nb in (("a", "b", 1e9), ("c", "d", 3e9), ("a", "b", 2e9)):
            net.transfer(src, dst, nb, nb, lambda tag: ends.append((tag, env.now)))
    burst()
    env.run()
    first = [(tag, t) for tag, t in ends]
    ends.clear()
    start = env.now
    burst()
    env.run()
    again = [(tag, t - start) for tag, t in ends]
    first, again = sorted(first), sorted(again)     # same-instant ends: any slot order
    assert [tag for tag, _ in again] == [tag for tag, _ in first]
    for (_, a), (_, b) in zip(first, again):
        assert b == pytest.approx(a, rel=1e-12)
    # a-b shared by 1 GB and 2 GB flows (0.5 GB/s each, then 1 GB/s), c-d alone (1 GB/s)
    assert dict(first) == pytest.approx({1e9: 2.0, 2e9: 3.0, 3e9: 3.0}, rel=1e-12)
    # each rate kept by slot order is progressive filling's for those routes, bit for bit
    links_of = {no: np.frombuffer(key, dtype=np.int64) for key, no in net._route_no.items()}
    assert net._rates_by_slot
    for key, rates in net._rates_by_slot.items():
        rows = [links_of[no] for no in np.frombuffer(key, dtype=net._rno.dtype).tolist()]
        hops = max(r.size for r in rows)
        table = np.full((len(rows), hops), net._pad, dtype=np.int64)
        for i, r in enumerate(rows):
            table[i, :r.size] = r
        assert np.array_equal(rates, max_min_rates(net._capacity, table))
