"""Llama 4's chunked windows under context parallelism where the sequence fits one chunk
(``stacks.cp_windows.chunk_fits``): the mask is causal, nothing is folded, every exchange
runs it under Transformer Engine and PyTorch's SDPA ring, MaxText still refuses it; it is
priced as causal attention; above one chunk every exchange is refused, in the plan check and
in the search's mask alike."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.framework import get_profile
from strategies.hf_config import model_from_hf
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan.choices import CP_COMMS
from strategies.search.fix_parse import parse_fix
from strategies.search.space import SpaceOptions, enumerate_space
from strategies.stacks.cp_windows import chunk_fits, window_exchange_ok
from tests.fuzz_profile import run_cli
from topologies.cluster import cluster_preset

L4_PATH = "tests/data/hf/llama4_scout.json"
CL = cluster_preset("dgx-h100", 8)
#: own exchange, then each of ``CP_COMMS`` (p2p, all_gather, a2a, a2a+p2p)
CODES = np.array([0, 1, 2, 3, 4])


def _llama4(seq: int):
    with open(L4_PATH) as f:
        return model_from_hf(json.load(f)).with_seq_length(seq)


@pytest.mark.parametrize("seq, ok", [(4096, True), (8192, True), (8194, False),
                                     (16384, False)])
@pytest.mark.parametrize("fw", ["megatron-core", "nemo", "torchtitan"])
def test_mask_at_and_above_one_chunk(seq: int, ok: bool, fw: str) -> None:
    """``window_exchange_ok``: every exchange at ``seq <= 8192`` (the chunk), none above,
    for the stacks that fold (Transformer Engine) or run SDPA's causal mask."""
    prof = get_profile(fw)
    m = _llama4(seq)
    assert chunk_fits(m, prof) is ok
    got = window_exchange_ok(m, prof, np.full(5, 2), CODES).tolist()
    assert got == [ok] * 5
    assert window_exchange_ok(m, prof, np.ones(5, dtype=int), CODES).tolist() == [True] * 5


def test_maxtext_refuses_whatever_the_length() -> None:
    prof = get_profile("jax-xla")
    assert not chunk_fits(_llama4(4096), prof)
    assert window_exchange_ok(_llama4(4096), prof, 2, 0) is False


@pytest.mark.parametrize("comm", [None] + list(CP_COMMS))
def test_plan_check_accepts_at_one_chunk(comm) -> None:
    extra = "" if comm is None else f",cp_comm={comm}" + (
        ",hierarchical_cp=2" if comm == "a2a+p2p" else "")
    plan = parse_plan(f"cp=4,ep=16,gbs=64{extra}")
    make_job(_llama4(8192), CL, plan, framework="megatron-core")
    with pytest.raises(SpecError, match=r"chunked-window layers \(window 8192\)") as e:
        make_job(_llama4(16384), CL, plan, framework="megatron-core")
    assert "or a sequence of at most 8192 tokens" in str(e.value)


def test_priced_as_causal_attention() -> None:
    """At one chunk the chunked layers are full causal layers: step time and peak memory are
    those of the same model without windows, to 1e-12, with and without cp (MXFP8 attention
    too, whose windowed kernels have their own rate)."""
    m = _llama4(8192)
    plain = replace(m, sliding_window=None)
    for spec in ("cp=2,ep=16,gbs=64", "cp=2,ep=16,gbs=64,cp_comm=all_gather", "ep=16,gbs=64",
                 "cp=2,ep=16,gbs=64,fp8_attention=true"):
        plan = parse_plan(spec)
        fp8 = "fp8_attention" in spec
        cl, kw = (cluster_preset("dgx-b200", 8), {"dtype": "mxfp8"}) if fp8 else (CL, {})
        a = estimate(make_job(m, cl, plan, framework="megatron-core", **kw))
        b = estimate(make_job(plain, cl, plan, framework="megatron-core", **kw))
        assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12, abs=0), spec
        assert a.memory.total == pytest.approx(b.memory.total, rel=1e-12, abs=0), spec


@pytest.mark.parametrize("seq, has_cp", [(8192, True), (16384, False)])
def test_search_mask_is_the_check(seq: int, has_cp: bool) -> None:
    """A search with ep fixed at 16 keeps cp > 1 rows at one chunk (each passing
    ``make_job``) and none above, with no stack named as under Megatron-Core."""
    m = _llama4(seq)
    for fw in (None, get_profile("megatron-core")):
        sp = enumerate_space(m, CL, 64, SpaceOptions(max_mbs=1, layouts=False,
                                                     fixed=parse_fix("ep=16")), framework=fw)
        cp = sp.cols["cp"]
        assert sp.size > 0 and bool((cp > 1).any()) is has_cp
        for i in np.flatnonzero(cp > 1)[::11][:4].tolist():
            make_job(m, CL, sp.plan(i), framework=None if fw is None else "megatron-core")


def test_cli_accepts_at_one_chunk_and_says_so_above() -> None:
    base = ["estimate", "--model", L4_PATH, "--cluster", "dgx-h100:8", "--plan",
            "cp=2,ep=16,gbs=64"]
    rc, _, err = run_cli(base + ["--seq-len", "8192"])
    assert rc == 0, err
    rc, _, err = run_cli(base + ["--seq-len", "16384"])
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "cp=2:" in err and "at most 8192 tokens" in err
