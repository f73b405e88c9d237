"""The program builder's block memo (``simulator.program.block_memo``: a layer block built once
per pass, layers, chunk and pending pattern, stamped for the other micro-batches) changes no
program: each job below compiles to the same ops, field for field and in the same order, with
stamping on and with every block built (``ProgramBuilder.stamp_blocks = False``), and the memo
is used (fewer blocks built than compiled)."""
from __future__ import annotations

import pytest

import simulator.program.builder as builder
from simulator.program.compiler import compile_job
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from tests.ep_overlap_jobs import pair_job
from tests.test_mla_reduce import NO_SP, SP, _mla
from topologies.cluster import cluster_preset


def _job(model: str, cluster: str, nodes: int, plan: str):
    return make_job(model_preset(model), cluster_preset(cluster, nodes), parse_plan(plan))


JOBS = {
    # 1F1B, interleaved (overlapped p2p calls), ZB-V and DualPipeV (split backward, pairs)
    "1f1b": lambda: _job("gpt-1.7b", "dgx-a100", 4, "tp=2,pp=2,gbs=64"),
    "interleaved": lambda: _job("gpt-1.7b", "dgx-a100", 4,
                                "tp=1,pp=4,gbs=64,schedule=interleaved,vpp=2"),
    "zb-v": lambda: _job("gpt-1.7b", "dgx-a100", 2, "tp=1,pp=4,gbs=32,schedule=zb-v"),
    "dualpipev": lambda: _job("gpt-1.7b", "dgx-a100", 2, "tp=1,pp=4,gbs=32,schedule=dualpipev"),
    # MoE (all-to-alls closing blocks), CP, ZeRO-3 by layer, recompute with SP, DeepSpeed
    "moe": lambda: _job("mixtral-8x7b", "dgx-h100", 2, "tp=2,pp=2,ep=4,gbs=32"),
    "cp": lambda: _job("gpt-1.7b", "dgx-a100", 2, "tp=2,pp=1,cp=2,gbs=16"),
    "zero3": lambda: _job("llama3-8b", "dgx-h100", 2, "tp=2,pp=1,zero=3,gbs=32"),
    "recompute sp": lambda: _job("gpt-1.7b", "dgx-a100", 4,
                                 "tp=2,pp=2,gbs=64,recompute=full,sp=true"),
    "deepspeed": lambda: _job("gpt-1.7b", "dgx-a100", 4,
                              "tp=2,pp=4,gbs=64,schedule=deepspeed-1f1b"),
    # Megatron-Core's combined 1F1B pairs (ep_overlap, delay_wgrad): pair state skips the memo
    "ep overlap": lambda: pair_job(2, 2, 4),
    # MLA: latent-width TP swaps, down projections, rope key, SP re-gathers, reductions
    "mla sp": lambda: _mla(SP),
    "mla no sp": lambda: _mla(NO_SP),
    "mla sp tp overlap": lambda: _mla(SP + ",tp_comm_overlap=true"),
}


@pytest.mark.parametrize("granularity", ["chunk", "layer"])
@pytest.mark.parametrize("name", sorted(JOBS))
def test_stamped_blocks_change_no_program(name: str, granularity: str, monkeypatch) -> None:
    job = JOBS[name]()
    built, blocks = [], []
    build, block = builder.ProgramBuilder._build_block, builder.ProgramBuilder.block

    def counted_build(self, *a):
        built.append(1)
        return build(self, *a)

    def counted_block(self, *a):
        blocks.append(1)
        return block(self, *a)
    monkeypatch.setattr(builder.ProgramBuilder, "_build_block", counted_build)
    monkeypatch.setattr(builder.ProgramBuilder, "block", counted_block)
    stamped = compile_job(job, granularity=granularity)
    assert len(built) < len(blocks), "no block was stamped"
    monkeypatch.setattr(builder.ProgramBuilder, "stamp_blocks", False)
    fresh = compile_job(job, granularity=granularity)
    assert sorted(stamped) == sorted(fresh)
    for r in stamped:
        assert repr(stamped[r]) == repr(fresh[r]), f"rank {r}"
