"""Every data-parallel gradient reduction waits for the backward that produces its gradients:
ZeRO-3's reduce-scatter of each layer (PyTorch FSDP's post-backward hook per unit) and
ZeRO-2's overlapped bucket reduce-scatters (Megatron's bucket is ready once its last
parameter's gradient is accumulated), in the compiled program and in the simulated times."""
from dataclasses import replace

import pytest

from simulator.program.compiler import compile_job
from simulator.program.ops import Collective, Compute
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

TWO = replace(cluster_preset("dgx-h100", 1), gpus_per_node=2)
LAYERS = 4


def _ancestors(streams: dict, op_id: int) -> set[int]:
    """Every op ``op_id`` waits for: its explicit deps and its stream predecessors, transitively."""
    prev, by_id = {}, {}
    for ops in streams.values():
        for a, b in zip(ops, ops[1:]):
            prev[b.id] = a.id
        by_id.update({o.id: o for o in ops})
    seen, todo = set(), [op_id]
    while todo:
        o = by_id[todo.pop()]
        for d in (*o.deps, *([prev[o.id]] if o.id in prev else [])):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


@pytest.mark.parametrize("plan,label", [("zero=3,mbs=1,gbs=4", "RS z3"),
                                        ("zero=2,mbs=1,gbs=4", "RS dp")])
def test_each_reduce_scatter_waits_for_its_backward(plan, label):
    model = replace(model_preset("llama3-8b"), num_layers=LAYERS, seq_length=1024)
    job = make_job(model, TWO, parse_plan(plan))
    assert job.plan.dp == 2
    streams = compile_job(job)[0].streams
    compute = streams["compute"]
    rs = [o for o in streams["dp-comm"]
          if type(o) is Collective and o.kind == "reduce_scatter" and o.label.startswith(label)]
    # the producer of each reduction: the last compute op emitted before it (the layer's or
    # the bucket's last item's backward, the embedding's for the pass's last reduction)
    producers = [max((c for c in compute if c.id < o.id), key=lambda c: c.id) for o in rs]
    assert all(p.kind in ("backward", "lm_head", "embedding") for p in producers)
    for o, p in zip(rs, producers):
        assert p.id in _ancestors(streams, o.id), (o.label, p.label)
    mbs = job.num_microbatches
    if label == "RS z3":
        # one reduce-scatter per layer per micro-batch, each after its own layer's backward
        assert len(rs) == LAYERS * mbs
        assert len({p.id for p in producers}) == len(rs)
        for o, p in zip(rs, producers):
            assert o.microbatch == p.microbatch and o.label == f"RS z3 {p.label}"
        # (each a call of one layer's gradients: repeat 1, 1/LAYERS of the stage's bytes)
        assert sum(o.repeat for o in rs) == pytest.approx(LAYERS * mbs, rel=1e-12)
    else:
        # every micro-batch: the LM head's, each layer's two (its MLP's, 176M parameters,
        # then its attention's, 42M: each above the 40M bucket) and the embedding's bucket
        assert len(rs) == (2 * LAYERS + 2) * mbs
        assert len({p.id for p in producers}) == len(rs)
    # simulated: each reduce-scatter starts no earlier than its producer ends (one record per
    # op, in stream order)
    res = simulate(job, fold=False)
    recs = {s: [r for r in res.records if r.rank == 0 and r.stream == s]
            for s in ("compute", "dp-comm")}
    assert [len(recs[s]) for s in recs] == [len(streams[s]) for s in recs]
    start = {o.id: r.start for o, r in zip(streams["dp-comm"], recs["dp-comm"])}
    end = {o.id: r.end for o, r in zip(compute, recs["compute"])}
    for o, p in zip(rs, producers):
        assert start[o.id] >= end[p.id], (o.label, start[o.id], end[p.id])
