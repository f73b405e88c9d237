"""DualPipe's mirror all-reduce on every rank of a stage: the compiler builds one program per
stage and moves it to the stage's other ranks (``compiler.relabel``); the pair group moves
with the pipeline peers (before the fix a second rank of a stage raised ``KeyError``)."""
from __future__ import annotations

from simulator.program.compiler import compile_job
from simulator.program.ops import Collective
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


def test_every_rank_all_reduces_with_its_own_mirror():
    m, cl = model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1)
    job = make_job(m, cl, parse_plan("tp=2,pp=4,dp=1,mbs=1,gbs=16,schedule=dualpipe"))
    programs = compile_job(job)
    assert sorted(programs) == list(range(8))
    for r, prog in programs.items():
        pairs = [op.group for ops in prog.streams.values() for op in ops
                 if type(op) is Collective and op.tag == "mirror"]
        stage, within = divmod(r, 2)          # pp outermost: stage s holds ranks 2s, 2s+1
        mirror = (4 - 1 - stage) * 2 + within
        assert pairs == [tuple(sorted((r, mirror)))], (r, pairs)
