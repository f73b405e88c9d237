"""The stage output DeepSpeed's pipeline engine keeps per stashed micro-batch
(``Schedule.keeps_stage_output``, ``stage_ends.stage_output_bytes``; DeepSpeed v0.5.10
``runtime/pipe/engine.py`` ``_exec_forward_pass``; docs/calibration.md §5.129)."""
from __future__ import annotations

import numpy as np
import pytest

from strategies.framework import get_profile
from strategies.job import make_job
from strategies.memory.scalar import memory_components
from strategies.memory.stage_ends import stage_output_bytes
from strategies.memory.stage_stash import entry_extra_bytes
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from topologies.cluster import cluster_preset


def _job(stack: str, tp: int = 2):
    return make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 2),
                    parse_plan(f"tp={tp},pp=4,gbs=64,zero=1,recompute=full,flash_attn=false"),
                    dtype="bf16", framework=get_profile(stack))


def test_closed_form():
    m = model_preset("gpt-1.7b")
    s, h = m.seq_length, m.hidden_size
    assert stage_output_bytes(m, s, 2, 8, 1) == 2 * s * 2 * h / 8
    assert stage_output_bytes(m, s, 2, 1, 2) == 2 * s * 2 * h / 2       # tp 1: not partitioned
    assert np.allclose(stage_output_bytes(m, s, 1, np.array([1, 4]), 1),
                       [2 * s * h, 2 * s * h / 4], rtol=1e-15)
    assert get_schedule("deepspeed-1f1b").keeps_stage_output
    assert not get_schedule("1f1b").keeps_stage_output


@pytest.mark.parametrize("tp", [1, 2])
def test_every_stashed_entry_but_the_last_stages(tp):
    """Stage 0 of the DeepSpeed schedule holds pp stashed entries, each with the kept output
    beside the same layers as Megatron's 1F1B; the last stage keeps none."""
    ds, mg = _job("megatron-deepspeed", tp), _job("megatron-lm-2021", tp)
    assert ds.plan.schedule == "deepspeed-1f1b" and mg.plan.schedule == "1f1b"
    m, p = ds.model, ds.plan
    one = 2.0 * m.seq_length * p.mbs * m.hidden_size / (tp if tp > 1 else 1)
    assert entry_extra_bytes(ds, 0) - entry_extra_bytes(mg, 0) == pytest.approx(one, rel=1e-15)
    assert entry_extra_bytes(ds, p.pp - 1) == entry_extra_bytes(mg, p.pp - 1)
    a, b = memory_components(ds, 0), memory_components(mg, 0)
    assert a["layers"].activations - b["layers"].activations == pytest.approx(
        p.pp * one, rel=1e-12)
    last = p.pp - 1
    assert memory_components(ds, last)["layers"].activations == pytest.approx(
        memory_components(mg, last)["layers"].activations, rel=1e-15)
