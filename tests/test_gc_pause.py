"""The collector pause around a simulation: off inside, restored after, also on errors."""
from __future__ import annotations

import gc

import pytest

from simulator.engine.gc_pause import paused_gc


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


def test_a_finished_simulation_leaves_no_cyclic_garbage_per_op():
    """The engine breaks its reference cycles when a run ends, so a dropped result is freed by
    reference counting: what a collection still finds is SimPy's environment (its bound event
    classes), a few hundred objects whatever the run's size, not one per op."""
    from simulator.simulate import simulate
    from strategies.job import make_job
    from strategies.plan import Plan
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2),
                   Plan(tp=2, pp=2, dp=4, gbs=256))
    gc.collect()
    res = simulate(job, fold=False)
    records = len(res.records)
    del res
    left = gc.collect()
    assert records > 5_000
    assert left < 1_000
