"""Windowed attention under context parallelism, per stack and exchange (``stacks.cp_windows``,
docs/calibration.md §5.196): Transformer Engine runs a sliding window only over its K/V
all-gather and its all-to-all (``attn_forward_func_with_cp``), gpt-oss's sinks only over the
all-to-all; MaxText refuses windows under CP; PyTorch's SDPA ring is causal only. Each refusal
exits 2 with one line naming the field, the stack and the exchange; the search never proposes
a refused plan; the all-gather's windowed kernels are priced on the slowest rank (closed
form)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import attention_grid as ag
from strategies.cost.attention_counts import score_elements
from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.scalar import estimate
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.search.fix_parse import parse_fix
from strategies.search.space import SpaceOptions, enumerate_space
from strategies.stacks.cp_windows import window_exchange_ok
from tests.fuzz_profile import run_cli
from topologies.cluster import cluster_preset

#: a sliding window of 4096 keys on every other layer, no sinks (Mistral's window, gpt-oss's
#: alternation)
WIN = replace(model_preset("llama3-8b"), name="llama3-8b-w4096", sliding_window=4096,
              global_attention_every=2).with_seq_length(32768)
OSS = model_preset("gpt-oss-120b").with_seq_length(32768)
CL = cluster_preset("dgx-h100", 1)
OSS_ARGS = ["estimate", "--model", "gpt-oss-120b", "--cluster", "dgx-h100:8", "--seq-len",
            "32768"]


def _refused(argv: list[str], *words: str) -> None:
    rc, _, err = run_cli(argv)
    assert rc == 2 and len(err.strip().splitlines()) == 1, (rc, err)
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize("plan, words", [
    # no exchange named: the stack's own, Transformer Engine's ring
    ("cp=2", ["cp=2:", "megatron-core", "cp_comm=p2p", "sliding-window", "give cp_comm=a2a"]),
    ("cp=2,cp_comm=p2p", ["cp_comm='p2p'", "megatron-core", "sliding-window"]),
    ("cp=4,cp_comm=a2a+p2p,hierarchical_cp=2", ["cp_comm='a2a+p2p'", "a p2p ring inside"]),
    # gpt-oss's sinks: Transformer Engine's all-gather runs the window, not the sinks
    ("cp=2,cp_comm=all_gather", ["cp_comm='all_gather'", "attention sinks", "a2a"]),
])
def test_gpt_oss_refusals_under_megatron_core(plan: str, words: list[str]) -> None:
    _refused(OSS_ARGS + ["--plan", f"ep=8,gbs=64,{plan}"], *words)


def test_gpt_oss_runs_its_all_to_all() -> None:
    rc, out, err = run_cli(OSS_ARGS + ["--plan", "ep=8,gbs=64,cp=2,cp_comm=a2a"])
    assert rc == 0, err


@pytest.mark.parametrize("fw, words", [
    ("jax-xla", ["jax-xla", "the K/V all-gather", "MaxText", "give cp=1"]),
    ("torchtitan", ["torchtitan", "SDPA ring", "is_causal"]),
    ("nemo", ["nemo", "cp_comm=p2p", "give cp_comm=a2a"])])
def test_other_stacks_refuse(fw: str, words: list[str]) -> None:
    _refused(OSS_ARGS + ["--plan", "ep=8,gbs=64,cp=2", "--framework", fw], "cp=2:", *words)


@pytest.mark.parametrize("comm, ok", [("p2p", False), ("all_gather", True), ("a2a", True),
                                      ("a2a+p2p", False)])
def test_rule_per_exchange_without_sinks(comm: str, ok: bool) -> None:
    """A window without sinks: Transformer Engine's all-gather and all-to-all run it."""
    spec = f"cp=4,gbs=8,cp_comm={comm}" + (",hierarchical_cp=2" if comm == "a2a+p2p" else "")
    plan = parse_plan(spec)
    if ok:
        make_job(WIN, CL, plan, framework="megatron-core")
    else:
        with pytest.raises(SpecError, match=r"sliding-window layers \(window 4096\)"):
            make_job(WIN, CL, plan, framework="megatron-core")
    # cp 1 and a model without windows are never refused
    make_job(WIN, CL, parse_plan("gbs=8"), framework="torchtitan")
    make_job(model_preset("llama3-8b").with_seq_length(32768), CL, plan,
             framework="megatron-core")


def test_mask_is_the_plan_check() -> None:
    """``window_exchange_ok`` over arrays: the rows ``make_job`` refuses, code for code."""
    fw = get_profile("megatron-core")
    cp = np.array([1, 2, 2, 2, 2, 4])
    cpc = np.array([0, 0, 1, 2, 3, 4])       # own (p2p), p2p, all_gather, a2a, a2a+p2p
    assert window_exchange_ok(WIN, fw, cp, cpc).tolist() == [True, False, False, True, True,
                                                             False]
    assert window_exchange_ok(OSS, fw, cp, cpc).tolist() == [True, False, False, False, True,
                                                             False]


@pytest.mark.parametrize("model, allowed", [(WIN, {2, 3}), (OSS, {3})])
def test_search_never_proposes_a_refused_exchange(model, allowed) -> None:
    """A search over a windowed model with cp fixed at 2 under Megatron-Core (which explores
    its exchanges) keeps only the exchanges the stack runs the model with, and every row's
    plan passes ``make_job``."""
    cl = cluster_preset("dgx-h100", 8 if model is OSS else 1)
    sp = enumerate_space(model, cl, 64, SpaceOptions(max_mbs=1, layouts=False,
                                                     fixed=parse_fix("cp=2")),
                         framework=get_profile("megatron-core"))
    assert sp.size > 0 and set(sp.cols["cpc"].tolist()) <= allowed
    for i in range(0, sp.size, max(1, sp.size // 5)):
        make_job(model, cl, sp.plan(i), framework="megatron-core")


def test_allgather_window_excess_closed_form() -> None:
    """Under the all-gather each rank runs its chunks ``r`` and ``2c-1-r`` against the
    window: the slowest rank computes the whole band, ``2·q·w`` tiles (``q`` tiles a chunk,
    ``w = ceil((W-1)/128) + 1``), the mean ``Σ_{i<=n} min(i, w) / c`` (the model's kernel
    count). 32K tokens, W 4096, cp 4: q 32, w 33, n 256; 1e-12."""
    q, w, n, c = 32, 33, 256, 4
    mean = (w * (w + 1) / 2 + (n - w) * w) / c
    assert ag.allgather_window_excess(32768, c, w) == pytest.approx(2 * q * w / mean, rel=1e-12)
    # the model's count of the same tiles (attention_counts "kernel"), per rank
    assert score_elements(32768, 4096, mode="kernel") / 128**2 / c == pytest.approx(mean,
                                                                                  rel=1e-12)
    assert ag.allgather_window_excess(32768, 1, w) == 1.0


def test_allgather_full_layers_unchanged() -> None:
    """Without a window the all-gather's grid is the causal one of §5.134: the mean rank's
    tiles ``(2c - 1)·q² + q·(q + 1)`` are every rank's."""
    k = ag.CUDNN_FWD
    q, c = 32, 4
    assert ag._window_total(2 * c * q, 0) / c == (2 * c - 1) * q * q + q * (q + 1)
    assert ag.allgather_factor(k, 64, 32768, c, 132, True, 0) == \
        ag.allgather_factor(k, 64, 32768, c, 132, True)


def test_windowed_backward_lengths_mirror_the_forward() -> None:
    """The backward's key-tile CTAs of a windowed chunk cover the same tiles as its forward's
    query-tile CTAs (each score tile once), at the sequence start and past it."""
    for j in (0, 1, 5):
        f = ag._gather_lengths("head_asc", 8, j, True, 3)
        b = ag._gather_lengths("head_asc", 8, j, False, 3)
        assert sum(f) == sum(b) == sum(min(j * 8 + i, 3) for i in range(1, 9))


def test_windowed_all_gather_arrays_equal_the_scalar_estimate() -> None:
    """The search's arrays price a windowed model's all-gather rows as ``estimate`` prices
    each plan (one rule: ``attention_grid.allgather_factor`` with the window's reach), 1e-12."""
    fw = get_profile("megatron-core")
    sp = enumerate_space(WIN, CL, 16, SpaceOptions(max_mbs=1, layouts=False,
                                                   fixed=parse_fix("cp=4,cp_comm=all_gather")),
                         framework=fw)
    assert sp.size > 0 and (sp.cols["cpc"] == 2).all()
    a = estimate_arrays(WIN, CL, "bf16", sp.arrays, fw)
    for i in range(0, sp.size, max(1, sp.size // 4)):
        e = estimate(make_job(WIN, CL, sp.plan(i), framework=fw))
        assert a["step_time_s"][i] == pytest.approx(e.step_time_s, rel=1e-12, abs=0)


def test_allgather_accumulates_the_windows_key_ranges() -> None:
    """The all-gather's backward adds each chunk's dK/dV into the key range its window
    reached (``dk[seq_start_idx:seq_end_idx].add_``): on the slowest rank ``2·(q + W - 1)``
    of ``s`` tokens against a full layer's ``(2c + 1)·q``. 64K tokens, W 4096, cp 8 (q 4096),
    half the layers windowed: the mean layer's share and the bytes, 1e-12; a model windowed
    on every layer holds ``(3 + 2·(q + W - 1)/s)·G`` at its peak."""
    from strategies.cost import cp_allgather
    from strategies.cost.comm_bytes import cp_gather_bytes
    m = WIN.with_seq_length(65536)
    full, win = 1 + 1 / 16, 2 * (4096 + 4095) / 65536
    mean, most = cp_allgather.chunk_key_shares(m, 8)
    assert mean == pytest.approx((full + win) / 2, rel=1e-12) and most == full
    g = cp_gather_bytes(m, 1, 1, 8)
    q = 65536 / 8 * 32 * 128 * 2          # the rank's query bytes (32 heads of 128, bf16)
    assert cp_allgather.copy_bytes_bwd(m, 1, 1, 8) == pytest.approx(
        (5 + 3 * (full + win) / 2) * g + 2 * q, rel=1e-12)
    every = replace(m, global_attention_every=0)
    assert cp_allgather.working_bytes(every, 1, 1, 8) == pytest.approx((3 + win) * g,
                                                                       rel=1e-12)
    plain = model_preset("llama3-8b").with_seq_length(65536)
    assert cp_allgather.working_bytes(plain, 1, 1, 8) == (4 + 1 / 16) * g
