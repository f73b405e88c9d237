"""The program builder's per-builder memo (``ProgramBuilder._once``) changes no program: each
job below compiles to the same ops with the memo on and with every rule worked out again at
each block, and ``_once`` works a key out once."""
from __future__ import annotations

import pytest

import simulator.program.builder as builder
from simulator.program.compiler import compile_job
from strategies.stacks.megatron import MEGATRON_CORE
from tests.test_mla_reduce import NO_SP, SP, _mla
from tests.tp_backward_checks import tp_job

JOBS = {
    # MLA: latent-width TP swaps, down projections, rope key, SP re-gathers, reductions
    "mla sp": lambda: _mla(SP),
    "mla no sp": lambda: _mla(NO_SP),
    "mla sp tp overlap": lambda: _mla(SP + ",tp_comm_overlap=true"),
    # dense, interleaved with overlapped point-to-point calls (``_overlapped_lane``)
    "llama interleaved": lambda: tp_job("tp=2,pp=2,vpp=2,schedule=interleaved,mbs=1,gbs=8,"
                                        "sp=true", layers=8, fw=MEGATRON_CORE),
}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_memo_changes_no_program(name: str, monkeypatch) -> None:
    job = JOBS[name]()
    memo = compile_job(job)
    monkeypatch.setattr(builder.ProgramBuilder, "_once", lambda self, key, make: make())
    fresh = compile_job(job)
    assert sorted(memo) == sorted(fresh)
    for r in memo:
        assert repr(memo[r]) == repr(fresh[r]), f"rank {r}"


def test_once_works_a_key_out_once() -> None:
    b = builder.ProgramBuilder.__new__(builder.ProgramBuilder)
    b._memo = {}
    calls = []

    def make() -> list:
        calls.append(1)
        return [len(calls)]
    first = b._once(("k", 1.0), make)
    assert b._once(("k", 1.0), make) is first and calls == [1]
    assert b._once(("k", 2.0), make) == [2] and calls == [1, 1]
