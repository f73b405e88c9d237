"""A hybrid Mamba-2 model's memory in the search's array model equals the scalar model's on
every pipeline rank where a rank's model chunks are priced one by one (interleaved and
DualPipe schedules): a chunk's stashed layers count its Mamba-2 and attention layers too, and
an MTP module as its block's layers (``stage_stash.stashed_count``, the one count the array
model, the scalar model's chunks and ``stash_kinds`` read)."""
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
    ("nemotron-h-8b", "tp=2,pp=2,vpp=2,schedule=interleaved,mbs=1,gbs=16"),
    # an MTP block of two layers (*E) on the last rank's last chunk: the scalar chunk path
    # counted it as one layer (stage_stash._layers_bytes)
    ("nemotron3-super", "tp=2,pp=4,vpp=2,ep=8,mbs=1,gbs=64,schedule=interleaved")])
def test_chunked_hybrid_arrays_equal_scalar(name, plan):
    nodes = 8 if name == "nemotron3-super" else 2
    job = make_job(model_preset(name), cluster_preset("dgx-h100", nodes), parse_plan(plan))
    assert_arrays_match_scalar(job)


def test_stashed_count_counts_every_kind_and_each_mtp_layer():
    """Two of each hybrid kind and one MTP module: 8 layers plus the module's block
    (``mtp_stash_layers``); a transformer counts its dense and MoE layers."""
    m = model_preset("nemotron3-nano-30b-a3b")
    content = {"dense": 2, "moe": 2, "mamba": 2, "attention": 2, "mtp": 1}
    assert float(stashed_count(m, content)) == 8 + m.mtp_stash_layers
    t = model_preset("qwen3-30b-a3b")
    assert float(stashed_count(t, {"dense": 3, "moe": 4, "mtp": 0})) == 7
