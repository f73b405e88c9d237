"""The flow network's state between rate recomputations (``simulator.network.flows``): the
last recomputation's rates, seconds left and first finish (``FlowNetwork._cur``,
``FlowNetwork._first``), read instead of per-slot rate and finish arrays, and the finished
flows' bytes added to their links in one call when the table's rows changed width, and
flows started together (``_start_flows``) as if started one by one."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import simpy

from simulator.network.flow_table import FEW_FLOWS
from simulator.network.flows import FlowNetwork
from simulator.network.maxmin import max_min_rates


def _line(n: int, bw: float = 1e9) -> nx.DiGraph:
    """Hosts 0..n-1 in a line, both ways, links of ``bw`` bytes/s and no latency."""
    g = nx.DiGraph()
    for a in range(n - 1):
        g.add_edge(a, a + 1, bandwidth=bw, latency=0.0)
        g.add_edge(a + 1, a, bandwidth=bw * 1.5, latency=0.0)
    return g


def _timer_time(env: simpy.Environment, net: FlowNetwork) -> float:
    return next(t for t, _, _, item in env._queue if item is net._timer)


def test_first_finish_is_the_timer_and_the_least_finish_of_the_rated_flows():
    env = simpy.Environment()
    net = FlowNetwork(env, _line(4))
    for src, dst, nbytes in [(0, 3, 3e8), (1, 2, 1e8 / 3), (0, 1, 7e7), (2, 3, 2.5e8)]:
        net.transfer(src, dst, nbytes)
    env.run(until=0.01)
    idx, rates, secs, then = net._cur
    assert idx.tolist() == net._active_idx().tolist()
    # the rates are progressive filling's for the active flows, bit for bit
    assert rates.tolist() == max_min_rates(net._capacity, net._links[idx]).tolist()
    assert (then + secs).min() == net._first == _timer_time(env, net)
    assert net._slot_rates()[idx].tolist() == rates.tolist()
    # a flow started since the last recomputation has no rate yet and moves nothing
    net.transfer(2, 1, 1e8)
    new = sorted(set(net._active_idx().tolist()) - set(idx.tolist()))
    assert len(new) == 1 and net._slot_rates()[new[0]] == 0.0
    flows = dict(zip(net._active_idx().tolist(), net.active_flows()))
    assert flows[new[0]][1:] == (0.0, 1e8)


def test_no_flow_ends_before_the_first_finish_and_all_end_at_their_closed_form():
    # n equal flows on one link: each ends at n * nbytes / bw (closed form), together
    env = simpy.Environment()
    net = FlowNetwork(env, _line(2))
    ends = []
    for _ in range(5):
        net.transfer(0, 1, 2e8, then=lambda _t: ends.append(env.now))
    env.run()
    assert ends == [5 * 2e8 / 1e9] * 5
    assert net._first == np.inf and net._cur[0].size == 0


def test_finished_bytes_on_rows_of_two_widths_are_the_sums_in_finishing_order():
    # one-hop flows end, then a three-hop flow widens the table: both kinds of row are in the
    # log when the bytes are added; each link's total is the sum in the order flows ended
    env = simpy.Environment()
    net = FlowNetwork(env, _line(4))
    order = []

    def send(src, dst, nbytes):
        net.transfer(src, dst, nbytes, then=lambda _t: order.append((src, dst, nbytes)))
    send(0, 1, 1e8 / 3)
    send(1, 0, 2e8 / 7)
    env.run()
    send(0, 3, 1e8 / 9)
    send(2, 3, 5e7 / 11)
    env.run()
    assert len(net._done_log) == 4 and {rows.shape[1] for rows, _ in net._done_log} == {1, 3}
    want = {e: 0.0 for e in net.edges}
    for src, dst, nbytes in order:
        nodes = net.route(src, dst)[0]
        for hop in zip(nodes[:-1], nodes[1:]):
            want[hop] += nbytes
    assert net.link_bytes() == want


@pytest.mark.parametrize("k", [3, 12])
def test_flows_started_together_are_the_flows_started_one_by_one(k):
    # ``_start_flows``: up to ``FEW_FLOWS`` flows one by one, more with one array write per column;
    # either way the same slots, table and arrivals as ``_start_flow`` for each in order
    assert (k <= FEW_FLOWS) == (k == 3)
    pairs = [(a, b) for a in range(5) for b in range(5) if a != b][:k]
    nets, ends = [], []
    for together in (True, False):
        env = simpy.Environment()
        net = FlowNetwork(env, _line(5))
        got = []
        flows = [(net.route(a, b)[1], 1e7 * (1 + n % 4) / 3, lambda t: got.append((t, env.now)),
                  n) for n, (a, b) in enumerate(pairs)]
        net._start_flow(net.route(0, 1)[1], 5e6, lambda t: got.append((t, env.now)), "first", None)
        if together:
            net._start_flows(flows)
        else:
            for flow in flows:
                net._start_flow(*flow, None)
        nets.append(net)
        env.run()
        ends.append(got)
    one, two = nets
    for name in ("_links", "_rno", "_size", "_active"):
        assert np.array_equal(getattr(one, name), getattr(two, name)), name
    assert one._free == two._free and ends[0] == ends[1] and len(ends[0]) == k + 1
    assert one.link_bytes() == two.link_bytes()


def test_a_reused_slot_holds_its_new_flows_row_and_route():
    # a finished flow leaves its row and route number in its slot; the next flow there
    # rewrites them when its route differs (three hops, one, one other, three again); a slot
    # never used holds no route (-1)
    env = simpy.Environment()
    net = FlowNetwork(env, _line(4))
    net.transfer(0, 3, 1e8)
    env.run()
    slot = net._free[-1]                # the slot the next flow takes
    for src, dst in [(0, 3), (1, 2), (0, 1), (0, 3)]:
        net.transfer(src, dst, 1e8)
        links = net.route(src, dst)[1]
        row = net._links[slot]
        assert row[:links.size].tolist() == links.tolist()
        assert (row[links.size:] == net._pad).all()
        assert net._rno[slot] == net._route_of(links)
        env.run()
    assert (net._rno[[s for s in net._free if s != slot]] == -1).all()


def test_the_kept_bytes_left_are_the_tables():
    # ``_cur_rem`` is ``_rem`` of the rated slots after every settle
    env = simpy.Environment()
    net = FlowNetwork(env, _line(4))
    for n, (src, dst) in enumerate([(0, 3), (1, 2), (0, 1), (2, 3), (3, 0)]):
        net.transfer(src, dst, 1e8 * (n + 1) / 3)
    for t in (0.05, 0.1, 0.2, 0.3, 0.45, 0.7):
        env.run(until=t)
        assert net._cur_rem.tolist() == net._rem[net._cur[0]].tolist()
    env.run()
    assert net._cur[0].size == 0


def test_a_network_that_counts_no_bytes_times_its_flows_the_same():
    # ``count_bytes`` False (``simulate(figures_only=True)``): the same arrivals, nothing
    # logged, and ``link_bytes`` refuses rather than answer zeros
    ends = []
    for count in (True, False):
        env = simpy.Environment()
        net = FlowNetwork(env, _line(4))
        net.count_bytes = count
        got = []
        for n, (src, dst) in enumerate([(0, 3), (1, 2), (0, 1), (2, 3), (3, 0)]):
            net.transfer(src, dst, 1e8 * (n + 1) / 3,
                         then=lambda _t, n=n: got.append((n, env.now)))
        env.run()
        ends.append(got)
    assert ends[0] == ends[1] and len(ends[0]) == 5
    assert not net._done_log
    with pytest.raises(RuntimeError, match="count_bytes"):
        net.link_bytes()
