"""``paraplan whatif``'s search as a property: more bandwidth never a longer best step.

Its own file (from tests/test_whatif_cli.py): the heaviest test of that file, so that
``--dist loadfile`` can run it on one worker while the rest of the file runs on the other."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.studies.whatif import WhatifConfig, run_whatif
from simulator.studies.whatif_variants import dominated_pairs, variants
from strategies.presets import model_preset
from strategies.search.space import SpaceOptions
from tests.test_properties import cases
from topologies.cluster import cluster_preset


@st.composite
def bandwidth_questions(draw):
    """A small search question and two bandwidth settings, the second at least the first."""
    model = draw(st.sampled_from(["gpt-1.7b", "llama3-8b"]))
    cluster = cluster_preset(draw(st.sampled_from(["dgx-a100", "dgx-h100", "hgx-h100-pcie"])),
                             draw(st.integers(1, 2)))
    gbs = draw(st.sampled_from([4, 8]))
    inter = sorted(draw(st.lists(st.sampled_from([25, 100, 200, 800]), min_size=2,
                                 max_size=2, unique=True)))
    intra = sorted(draw(st.lists(st.sampled_from([32, 64, 300, 900]), min_size=2,
                                 max_size=2, unique=True)))
    which = draw(st.sampled_from(["inter", "intra", "both"]))
    return model, cluster, gbs, inter, intra, which


@pytest.mark.slow
@cases(6)
@given(bandwidth_questions())
def test_best_plan_never_slower_with_more_bandwidth(q):
    """The searched best plan (exact top-1) never takes longer when only bandwidth rises,
    and each variant's own search finds it (no plan carried over from a variant with less
    bandwidth ever has to win)."""
    model, cluster, gbs, inter, intra, which = q
    vary = []
    if which in ("inter", "both"):
        vary.append(("inter_node_gbps", inter))
    if which in ("intra", "both"):
        vary.append(("intra_node_GBps", intra))
    vs = variants(model_preset(model), cluster, gbs, vary)
    cfg = WhatifConfig(variants=vs, vary=vary, base={"model": model, "cluster": cluster.name},
                       options=SpaceOptions(max_mbs=1, max_vpp=2))
    rep = run_whatif(cfg)
    assert rep["checks"]["bandwidth_monotone"]["ok"], rep["warnings"]
    # every variant's own search already found the fastest plan: nothing carried over won
    assert all(r["best_from"] == "search" for r in rep["rows"])
    t = [r["step_time_s"] for r in rep["rows"]]
    for i, j in dominated_pairs(vs):
        assert t[j] <= t[i] * (1 + 1e-9)
