"""``--backend ray`` on a local Ray instance ranks exactly as local processes do."""
from __future__ import annotations

import pytest

pytest.importorskip("ray")

from strategies.presets import model_preset  # noqa: E402
from strategies.search.space import SpaceOptions  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402


@pytest.mark.ray
@pytest.mark.slow
def test_ray_backend_gives_the_same_ranking_as_local_processes():
    from simulator.search.run import SearchConfig, run_search
    cfg = dict(model=model_preset("gpt-1.7b"), cluster=cluster_preset("dgx-a100", 2), gbs=16,
               options=SpaceOptions(max_mbs=2), workers=2, k=5)
    local = run_search(SearchConfig(**cfg))
    ray = run_search(SearchConfig(backend="ray", **cfg))
    drop = ("wall_s", "execution")
    assert ray["execution"]["backend"] == "ray"
    assert {k: v for k, v in ray.items() if k not in drop} == \
        {k: v for k, v in local.items() if k not in drop}
