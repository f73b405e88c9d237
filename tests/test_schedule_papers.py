"""experiments/schedule_papers.py: the DualPipe table of DeepSeek's README against our orders
(exact at F = B = W, one W below the published form at 0 < W < F), and the zero-bubble
paper's model shapes from its reference rows."""
from __future__ import annotations

import pytest

from experiments.schedule_papers import dualpipe_rows, gpt_like, layers_per_stage, load


def test_dualpipe_table_matches_at_equal_times():
    rows = dualpipe_rows(stages=8, m=20, f=1.0, b=1.0, w=1.0)
    assert [r["method"] for r in rows] == ["1F1B", "ZB1P", "DualPipe", "DualPipeV"]
    for r in rows:
        assert r["bubble"] == pytest.approx(r["published_bubble"], rel=1e-12), r
        assert r["params"] == r["published_params"]
        assert r["activations"] == r["published_activations"]


def test_dualpipe_table_one_w_below_between():
    """At ``0 < W < F`` the dual orders idle exactly one ``W`` less than the published form;
    1F1B and ZB1P still match."""
    w = 0.5
    rows = {r["method"]: r for r in dualpipe_rows(stages=8, m=20, f=1.0, b=1.0, w=w)}
    for name in ("1F1B", "ZB1P"):
        assert rows[name]["bubble"] == pytest.approx(rows[name]["published_bubble"], rel=1e-12)
    for name in ("DualPipe", "DualPipeV"):
        assert rows[name]["bubble"] == pytest.approx(rows[name]["published_bubble"] - w,
                                                     rel=1e-12)


def test_zero_bubble_models():
    """The hidden size inferred from the parameter count recovers the one the 28.3B row
    states, and the first/last-stage-one-layer-fewer split sums to the layers."""
    rows = load()["rows"]
    spec, how = gpt_like(rows[0])
    assert (spec.num_layers, spec.hidden_size) == (62, 6144) and "published" in how
    no_hidden = dict(rows[0], model="GPT-like 28.3B (62 layers)")
    assert gpt_like(no_hidden)[0].hidden_size == 6144
    split = layers_per_stage(62, 32).split("/")
    assert len(split) == 32 and sum(map(int, split)) == 62 and split[0] == split[-1] == "1"
    assert layers_per_stage(61, 32) is None


def test_post_validation_period():
    """The period of back-to-back iterations: 1F1B's is its makespan (rank 0 starts first and
    ends last); ZB-2p's parallelogram is shorter than its one-iteration makespan, by no more
    than the start skew (the rank that ends last started within it), and at least as long
    as its busiest rank's compute."""
    from experiments.schedule_papers import post_validation_period
    from simulator.simulate import simulate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset
    from tests.norm_barrier_checks import without_barrier

    def run(sched):
        job = make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1),
                       parse_plan(f"tp=2,pp=4,mbs=1,schedule={sched}"), global_batch=32)
        # post-validation: no rank waits for the others before its optimizer, so no norm
        # barrier (§5.202 off)
        return simulate(without_barrier(job))

    one = run("1f1b")
    assert post_validation_period(one) == pytest.approx(one.step_time_s, rel=1e-12)
    zb = run("zb-2p")
    period = post_validation_period(zb)
    first_f = {}
    busy = {}
    for rec in zb.records:
        if rec.stream == "compute":
            busy[rec.rank] = busy.get(rec.rank, 0.0) + rec.end - rec.start
            if rec.label.startswith("F0."):
                first_f.setdefault(rec.rank, rec.start)
    skew = max(first_f.values()) - min(first_f.values())
    assert skew > 0
    assert zb.step_time_s - skew <= period < zb.step_time_s
    assert period >= max(busy.values())
