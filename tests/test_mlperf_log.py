"""experiments/mlperf_log.py: MLLOG lines parsed with and without a rank prefix, broken JSON
skipped, tracked statistics read in order with their steps."""
from experiments import mlperf_log

LOG = """junk line
0: :::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "INTERVAL_START", "key": "block_start", "value": null, "metadata": {"samples_count": 0}}
:::MLLOG {"namespace": "", "time_ms": 2000, "event_type": "POINT_IN_TIME", "key": "tracked_stats", "value": {"throughput": 10.0}, "metadata": {"step": 100}}
:::MLLOG {"namespace": "", "time_ms": 2500, "key": "tracked_stats", "value": {"train_epoch_timing": 3.5}, "metadata": {"step": 100}}
3: :::MLLOG {"namespace": "", "time_ms": 3000, "key": "tracked_stats", "value": {"throughput": 30.0}, "metadata": {"step": 200}}
:::MLLOG {"namespace": "", "time_ms": 3500, "key": "tracked_stats", "value": {"throu
:::MLLOG {"namespace": "", "time_ms": 4000, "key": "tracked_stats", "value": {"throughput": 12.0}, "metadata": {"step": 300}}
"""


def test_events_and_tracked():
    evs = mlperf_log.events(LOG.splitlines())
    assert [e["key"] for e in evs] == ["block_start"] + ["tracked_stats"] * 4
    assert mlperf_log.tracked(evs, "throughput") == [(100, 10.0), (200, 30.0), (300, 12.0)]
    assert mlperf_log.median_tracked(evs, "throughput") == 12.0
    assert mlperf_log.values(evs, "block_start") == [None]


def test_median_without_events_raises():
    import pytest
    with pytest.raises(ValueError, match="throughput"):
        mlperf_log.median_tracked([], "throughput")
