"""The segments PyTorch's caching allocator keeps after DeepSpeed v0.5.10's ZeRO-1/2 step
(``strategies.memory.deepspeed_zero.step_reserve_bytes``; docs/calibration.md §5.129): closed
forms of the best-fit allocator over the step's transients, BigScience's halved optimizer
groups, and the BLOOM prototype rows reading both."""
from __future__ import annotations

import os

import numpy as np
import pytest

from simulator.studies.validate import load_cases
from strategies.framework import get_profile
from strategies.memory import deepspeed_zero as dsz
from strategies.memory.scalar import memory_components, peak_memory
from strategies.reference.entry_stack import with_source_fork

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "strategies", "reference", "data", "published.json")

#: BLOOM prototype (h 14336, ffn 4h, 64 heads, V 250,000 as the reader has it) at tp 8
H, T, V = 14336, 8, 250_000
LAYER = (3 * H * H, H * H, 4 * H * H, 4 * H * H)          # QKV, proj, fc1, fc2 (whole)
EMB = V / T * H                                           # 448e6 elements per GPU


def test_one_group_two_copies_of_the_widest_view():
    """One group, its widest tensor G below the partition, the backward's largest free block
    2G (the embedding gradient of a later micro-batch): the fp32 copy 4G and the fp64 copy 8G
    each need a segment; the flat 16-bit partition (2·P/d <= 4G) and its fp32 cast
    (4·P/d <= 8G) fit in them; Adam's moments (4·P/d each) fit nowhere and make their own:
    12·G stay reserved."""
    P, d = 2.298e9, 4
    got = dsz._reserve_one([(EMB, P)], d, 2 * EMB, 2.0, 4.0)
    assert got == pytest.approx(12 * EMB, rel=1e-15)
    assert 2 * P / d <= 4 * EMB and 4 * P / d <= 8 * EMB      # the case's conditions


def test_no_segment_where_the_backward_freed_a_larger_block():
    assert dsz._reserve_one([(EMB, 2.298e9)], 4, 1e12, 2.0, 4.0) == 0.0


def test_small_tensors_large_partition():
    """d = 1, widest tensor t far below P: 4t, 8t, the flat copy 2P and the fp32 cast 4P each
    take a segment (none fits in an earlier one); the moments make their own: 12t + 6P."""
    t, P = 1e8, 3e9
    got = dsz._reserve_one([(t, P)], 1, 0.0, 2.0, 4.0)
    assert got == pytest.approx(12 * t + 6 * P, rel=1e-15)


def test_halved_groups_by_count():
    """BigScience's workaround: the weight-decay list (tied embedding first, then each layer's
    four weights) split at n // 2 tensors."""
    groups = dsz.optimizer_groups(EMB, 6, tuple(x / T for x in LAYER), halved=True)
    n0 = EMB + 2 * sum(LAYER) / T + sum(LAYER[:3]) / T       # 1 + 11 of 25 tensors
    assert len(groups) == 2
    assert groups[0] == (EMB, pytest.approx(n0, rel=1e-15), EMB)
    assert groups[1][1] == pytest.approx(6 * sum(LAYER) / T + EMB - n0, rel=1e-15)
    assert groups[1][0] == groups[1][2] == 4 * H * H / T
    assert dsz.optimizer_groups(EMB, 6, tuple(x / T for x in LAYER), halved=False) == [
        (EMB, pytest.approx(EMB + 6 * sum(LAYER) / T, rel=1e-15), EMB)]
    assert dsz.optimizer_groups(0.0, 0, (), halved=True) == []
    # a tied copy the rank does not own: the norm's widest tensor is a layer's
    rep = dsz.optimizer_groups(EMB, 6, tuple(x / T for x in LAYER), halved=True,
                               norm_skips_head=True)
    assert rep[0][0] == EMB and rep[0][2] == 4 * H * H / T


def test_halved_bloom_stage0_dp4():
    """dp 4, pp 12, stage 0 (6 layers) with the halved groups: group 0's partition P0/4 is
    below the embedding, so its widest view is the partition, G0 = P0/4. The fp32 copy 4·G0
    takes segment A, the fp64 copy 8·G0 segment B; group 0's fp32 cast (4·G0) fills A,
    group 1's (4·P1/4) splits B, whose rest then holds group 0's first moment (4·G0):
    4·G0 + 8·G0 - 4·G0 = 8·G0 stay reserved."""
    groups = dsz.optimizer_groups(EMB, 6, tuple(x / T for x in LAYER), halved=True)
    g0 = groups[0][1] / 4
    assert g0 < EMB
    got = dsz.step_reserve_bytes(EMB, 6, LAYER, T, 4, 2 * EMB, 2.0, 4.0, halved=True)
    assert float(got) == pytest.approx(8 * g0, rel=1e-15)


def test_last_stage_norm_skips_the_tied_copy():
    """The last stage (6 layers, dp 4, halved groups) holds the tied head's copy, which
    DeepSpeed's norm skips: the overflow check's fp32 copy of group 0's widest view (its
    partition, 4·G0) takes a segment and hosts group 0's fp32 cast, the fp64 copies are of
    fc1 (8·t, smaller than the freed block 2·V/t·h) and take none; group 1's fp32 cast
    (4·P1/4) then needs its own, which the first moment (4·G0) cannot use: 4·G0 + 4·P1/4."""
    fc1 = 4 * H * H / T
    groups = dsz.optimizer_groups(EMB, 6, tuple(x / T for x in LAYER), halved=True,
                                  norm_skips_head=True)
    g0, p1 = groups[0][1] / 4, groups[1][1] / 4
    assert 8 * fc1 < 2 * EMB < 4 * g0 and 4 * p1 > 2 * EMB and 4 * g0 > 4 * p1
    got = dsz.step_reserve_bytes(EMB, 6, LAYER, T, 4, 2 * EMB, 2.0, 4.0, halved=True,
                                 replicated=True)
    assert float(got) == pytest.approx(4 * g0 + 4 * p1, rel=1e-15)


def test_freed_block_of_a_bloom_rank():
    """Stage 0, several micro-batches: the embedding gradient's 2·V/t·h bytes exceed the
    16-bit scores b·(a/t)·s² and fc1's b·s·4h/t at mbs 8; the loss rank's fp32 logits
    4·b·s·V/t exceed it at mbs 8."""
    from strategies.presets import model_preset
    m = model_preset("gpt-1.7b")
    from dataclasses import replace
    m = replace(m, hidden_size=H, ffn_hidden_size=4 * H, num_attention_heads=64,
                vocab_size=V, num_layers=72, seq_length=2048)
    tensors, freed = dsz.rank_tensor_sizes(m, T, 8, False, EMB, 256, 2.0, False, 6)
    assert tensors == LAYER
    assert float(freed) == 2 * EMB
    assert float(freed) > 2.0 * 8 * (64 / T) * 2048 ** 2
    _, last = dsz.rank_tensor_sizes(m, T, 8, False, EMB, 256, 2.0, True, 6)
    assert float(last) == 4.0 * 8 * 2048 * V / T
    _, one = dsz.rank_tensor_sizes(m, T, 1, True, EMB, 1, 2.0, False, 6)
    assert float(one) == 2.0 * 2048 * 4 * H / T        # one micro-batch, flash: fc1's output


def _bloom_cases():
    return {c.raw["id"]: c for c in load_cases(DATA, None)
            if c.raw["id"].startswith("bloom") and c.job is not None}


def test_bloom_rows_read_the_halved_groups_and_the_reserve():
    """The reader gives the 02-21 prototype rows (ZeRO-1, no BF16 optimizer, a tr11 source)
    the halved groups, not BLOOM 176B (BF16 optimizer); the peak stage's ``other`` bytes are
    the fixed allowance, fragmentation and exactly the reserve's closed form."""
    cases = _bloom_cases()
    job = cases["bloom_prequel_181B_dp4_pp12_mbs1"].job
    assert job.framework.zero_buffers == "deepspeed-halved"
    assert job.system.deepspeed_zero == 0.0          # stack_system sets it from the profile
    final = [c for k, c in cases.items() if k.startswith("bloom176B")]
    assert final and all(c.job.framework.zero_buffers == "deepspeed" for c in final)
    s, _ = peak_memory(job)
    assert s == 0
    parts = memory_components(job, s)
    from strategies.stacks.profile import stack_system
    sy = stack_system(job.framework, job.system)
    assert sy.deepspeed_zero == 2.0
    act = sum(p.activations for p in parts.values())
    groups = dsz.optimizer_groups(EMB, 6, tuple(x / T for x in LAYER), halved=True)
    want = sy.fixed_other_bytes + sy.fragmentation * act + 8 * groups[0][1] / 4
    assert parts["other"].other == pytest.approx(want, rel=1e-12)


def test_source_fork_rule():
    notes: list[str] = []
    fw = get_profile("megatron-deepspeed")
    tr11 = {"source": {"ref": "bigscience-workshop/bigscience train/tr11-176B-ml/x.md"}}
    from dataclasses import replace
    no_bf16 = replace(fw, bf16_optimizer=False)
    assert with_source_fork(no_bf16, tr11, notes).zero_buffers == "deepspeed-halved"
    assert notes and "541b967f" in notes[0]
    assert with_source_fork(fw, tr11, []) is fw                       # BF16_Optimizer
    assert with_source_fork(no_bf16, {"source": {"ref": "arXiv 2201.11990"}}, []) is no_bf16
    assert with_source_fork(get_profile("megatron-core"), tr11, []).zero_buffers == ""
    assert np.isfinite(float(dsz.step_reserve_bytes(0.0, 0, LAYER, T, 4, 0.0, 2.0, 4.0)))
