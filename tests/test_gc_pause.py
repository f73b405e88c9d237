"""The collector pause around a simulation: off inside, restored after, also on errors."""
from __future__ import annotations

import gc

import pytest

from simulator.gc_pause import paused_gc


def test_paused_inside_and_restored_after():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():                       # nested: the inner exit keeps it paused
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_after_an_exception():
    with pytest.raises(KeyError):
        with paused_gc():
            raise KeyError("x")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_what_the_block_allocated_is_promoted_not_left_young():
    """On the way out everything the block allocated goes to the oldest generation: the next
    young collection does not walk it (issue 17: it walked a whole result and freed nothing)."""
    with paused_gc():
        kept = [[i] for i in range(20_000)]
    assert gc.get_count()[0] < 100
    assert any(kept[0] is o for o in gc.get_objects(generation=2))


@pytest.mark.parametrize("network", ["flows", "contention-free"])
def test_a_finished_simulation_leaves_no_cyclic_garbage(network):
    """The engine and the network break their reference cycles when a run ends
    (``Engine.close``, ``FlowNetwork.close``), so a dropped result is freed by reference
    counting: a full collection after it finds nothing. Before, it found the SimPy environment
    (its bound event classes), the network (its bound ``_recompute``) and all they held: 578
    objects on Qwen3-30B-A3B tp2 pp2 ep8, 9,199 (2.8 MB) on the README's GPT-3 175B plan. The
    job is simulated once first: a process's first simulation leaves one-time garbage of its
    imports (``ast.literal_eval``'s and ``inspect``'s closures)."""
    from simulator.simulate import simulate
    from strategies.job import make_job
    from strategies.plan import Plan
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2),
                   Plan(tp=2, pp=2, dp=4, gbs=256))
    simulate(job, fold=False, network=network)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        res = simulate(job, fold=False, network=network)
        records = len(res.records)
        del res
        gc.collect()
        left = [type(o).__qualname__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert records > 5_000
    assert left == []


def test_a_closed_network_holds_no_cycle():
    """``FlowNetwork.close`` empties the SimPy queue and drops the bound methods that refer
    back to their owner (the environment's event classes, ``SimNetwork._recompute``)."""
    import simpy
    from simulator.network.cluster_net import SimNetwork
    from topologies.cluster import cluster_preset
    from topologies.graph import build_graph
    graph = build_graph(cluster_preset("dgx-a100", 1))
    net = SimNetwork(simpy.Environment(), graph)
    done = net.transfer(0, 1, 1e6)
    net.env.run(done)
    assert net.link_bytes()[(0, ("nvswitch", 0))] > 0
    net.close()
    assert net.env._queue == [] and "_recompute" not in vars(net)
    assert not any(getattr(v, "__self__", None) is net.env for v in vars(net.env).values())
    assert net.link_bytes()[(0, ("nvswitch", 0))] > 0       # read-only queries still answer
    gc.collect()
    del net, done
    assert gc.collect() == 0
