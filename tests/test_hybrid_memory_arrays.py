"""A hybrid Mamba-2 model's memory in the search's array model equals the scalar model's on
every pipeline rank where a rank's model chunks are priced one by one (interleaved and
DualPipe schedules): a chunk's stashed layers count its Mamba-2 and attention layers too
(``stage_stash.stashed_count``), not only its MLP and MoE layers."""
from __future__ import annotations

import pytest

from strategies.job import make_job
from strategies.memory.stage_stash import stashed_count
from strategies.plan import parse_plan
from strategies.presets import model_preset
from tests.memory_checks import assert_arrays_match_scalar
from topologies.cluster import cluster_preset


@pytest.mark.parametrize("name,plan", [
    ("nemotron3-nano-30b-a3b", "tp=1,pp=2,ep=8,mbs=1,gbs=32,schedule=interleaved,vpp=2"),
    ("nemotron3-nano-30b-a3b", "tp=1,pp=2,ep=8,mbs=1,gbs=32,schedule=dualpipev"),
    ("nemotron-h-8b", "tp=2,pp=2,vpp=2,schedule=interleaved,mbs=1,gbs=16")])
def test_chunked_hybrid_arrays_equal_scalar(name, plan):
    job = make_job(model_preset(name), cluster_preset("dgx-h100", 2), parse_plan(plan))
    assert_arrays_match_scalar(job)


def test_stashed_count_counts_every_kind_and_each_mtp_layer():
    """Two of each hybrid kind and one MTP module: 8 layers plus the module's block
    (``mtp_stash_layers``); a transformer counts its dense and MoE layers."""
    m = model_preset("nemotron3-nano-30b-a3b")
    content = {"dense": 2, "moe": 2, "mamba": 2, "attention": 2, "mtp": 1}
    assert float(stashed_count(m, content)) == 8 + m.mtp_stash_layers
    t = model_preset("qwen3-30b-a3b")
    assert float(stashed_count(t, {"dense": 3, "moe": 4, "mtp": 0})) == 7
