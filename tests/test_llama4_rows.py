"""Llama 4 Maverick rows of dgxc_2505.json (docs/calibration.md §5.57): the model the reader
builds against a hand count, the recipe's token dropping read into the plan, chunked
attention of the sequence's length the same as global attention."""
import copy
import os
import sys

import pytest

from strategies.cost import flop_counts
from strategies.estimate import estimate
from strategies.reference.cases import case_from_entry, load_reference

PATH = "strategies/reference/data/dgxc_2505.json"


def _rows(prefix: str) -> list[dict]:
    return [e for e in load_reference(PATH) if e["id"].startswith(prefix)]


MAVERICK = _rows("dgxc2505_llama4_400b")


def test_eight_maverick_rows():
    assert len(MAVERICK) == 8


def test_maverick_params_and_flops_match_a_hand_count():
    m = case_from_entry(MAVERICK[0]).job.model
    h, V, L, d, kv, a = 5120, 202048, 48, 128, 8, 40
    attn = h * (a * d) + 2 * h * (kv * d) + (a * d) * h         # q, k, v, o (no bias)
    dense_mlp = 3 * h * 16384                                   # SwiGLU, intermediate_size_mlp
    expert = 3 * h * 8192                                       # SwiGLU, intermediate_size
    n_moe = L // 2                                              # interleave_moe_layer_step 2
    total = (2 * V * h + L * attn + (L - n_moe) * dense_mlp
             + n_moe * ((128 + 1) * expert + h * 128)           # routed + shared + router
             + 2 * L * h + h)                                   # RMSNorms
    active = total - n_moe * 127 * expert                       # top-1 of 128 routed
    assert m.num_params() == total
    assert m.active_params() == active
    assert 399e9 < total < 402e9 and 17.0e9 < active < 17.3e9   # Meta: 400B total, 17B active
    assert m.layer_kinds() == ("dense", "moe") * 24              # NeMo moe_layer_freq [0, 1] * 24
    s = 8192
    # 6 x the weights a token multiplies (the input embedding is a lookup) + the full square
    flops = 6 * (active - V * h - (2 * L * h + h)) * s + 3 * 2 * a * (2 * d) * s * s * L
    assert flop_counts.model_flops_per_step(m, 1) == pytest.approx(flops, rel=1e-12)
    # NVIDIA's README counts the causal half: 8.92e14 per sequence
    causal = flops - 3 * 2 * a * (2 * d) * L * (s * s - s * (s + 1) / 2)
    assert causal == pytest.approx(8.92e14, rel=2e-3)


def test_recipe_token_dropping_is_read():
    for e in MAVERICK:
        assert case_from_entry(e).job.plan.moe_capacity_factor == 1.0
        assert case_from_entry(e).job.plan.moe_pad_to_capacity      # drop-and-pad (§5.125)
    e = copy.deepcopy(MAVERICK[0])
    del e["plan"]["moe_capacity_factor"]
    assert case_from_entry(e).job is None       # padding without a capacity is refused
    del e["plan"]["moe_pad_to_capacity"]
    assert case_from_entry(e).job.plan.moe_capacity_factor is None
    # Grok-1's pinned NeMo 6f2c6fd pretrain_grok1_314b.py builds its recipe with
    # performance_mode=True (L300), which adds MegatronTokenDropCallback (L212): capacity 1.0
    for e in _rows("dgxc2505_grok1"):
        assert case_from_entry(e).job.plan.moe_capacity_factor == 1.0


def test_chunk_of_the_sequence_is_global_attention():
    for e in MAVERICK:
        job = case_from_entry(e).job
        assert job.model.sliding_window == 8192 and job.model.window_kind == "chunked"
        e2 = copy.deepcopy(e)
        del e2["model"]["hf_config"]["attention_chunk_size"]
        assert estimate(job).step_time_s == estimate(case_from_entry(e2).job).step_time_s


def test_residuals_experiment_lists_the_maverick_rows():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "experiments"))
    import llama4_residuals as lr
    rows = {r[0]: r for r in lr.residual_rows()}
    for e in MAVERICK:
        r = rows[e["id"]]
        assert r[4] == case_from_entry(e).measured_step_s
        assert r[6] == pytest.approx(100 * (r[5] / r[4] - 1))
    # pipelined GB200 rows: exposed exchanges m*v + 2(pp-1) + (v-1)pp - 1 = 16*12 + 2 + 22 - 1
    assert rows["dgxc2505_llama4_400b_gb200_128_bf16"][10] == 215
    assert rows["dgxc2505_llama4_400b_h100_512_bf16"][10] == 0
