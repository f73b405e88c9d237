"""Pipeline schedules: golden Megatron orders, invariants over grids, closed forms, errors."""
from __future__ import annotations

import itertools

import pytest

from strategies.errors import SpecError
from strategies.schedules import Step, get_schedule, registry, schedule_names
from strategies.schedules import gpipe as gpipe_mod
from strategies.schedules import interleaved as il_mod
from strategies.schedules import one_f_one_b as ofob_mod
from strategies.schedules.analysis import (bubble_fraction_closed_form, peak_stash,
                                           simulate_free_comm)

# ---------------------------------------------------------------- golden orders

ONE_F_ONE_B_P4_M8 = [
    "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
    "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
    "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
    "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
]
INTERLEAVED_P4_M8_V2 = {
    0: ("F0.c0 F1.c0 F2.c0 F3.c0 F0.c1 F1.c1 F2.c1 F3.c1 F4.c0 F5.c0 F6.c0 B0.c1 F7.c0 "
        "B1.c1 F4.c1 B2.c1 F5.c1 B3.c1 F6.c1 B0.c0 F7.c1 B1.c0 B2.c0 B3.c0 B4.c1 B5.c1 "
        "B6.c1 B7.c1 B4.c0 B5.c0 B6.c0 B7.c0"),
    3: ("F0.c0 F1.c0 F2.c0 F3.c0 F0.c1 B0.c1 F1.c1 B1.c1 F2.c1 B2.c1 F3.c1 B3.c1 F4.c0 "
        "B0.c0 F5.c0 B1.c0 F6.c0 B2.c0 F7.c0 B3.c0 F4.c1 B4.c1 F5.c1 B5.c1 F6.c1 B6.c1 "
        "F7.c1 B7.c1 B4.c0 B5.c0 B6.c0 B7.c0"),
}
INTERLEAVED_P2_M5_V2_G3 = "1 1 1 2 2 2 -2 1 -2 1 -2 2 -1 2 -1 -1 -2 -2 -1 -1"


@pytest.mark.parametrize("rank", range(4))
def test_1f1b_golden_p4_m8(rank):
    steps = get_schedule("1f1b")(rank, 4, 8)
    assert " ".join(f"{s.kind}{s.microbatch}" for s in steps) == ONE_F_ONE_B_P4_M8[rank]
    assert all(s.chunk == 0 for s in steps)


@pytest.mark.parametrize("rank", sorted(INTERLEAVED_P4_M8_V2))
def test_interleaved_golden_p4_m8_v2(rank):
    steps = get_schedule("interleaved")(rank, 4, 8, vpp=2, group_size=4)
    assert " ".join(map(str, steps)) == INTERLEAVED_P4_M8_V2[rank]
    assert steps == get_schedule("interleaved")(rank, 4, 8, vpp=2)  # g defaults to p
    assert il_mod.num_warmup_microbatches(rank, 4, 8, 2) == {0: 10, 3: 4}[rank]


def test_interleaved_golden_p2_m5_v2_g3():
    steps = get_schedule("interleaved")(0, 2, 5, vpp=2, group_size=3)
    signed = [(c + 1) if s.kind == "F" else -(c + 1) for s in steps for c in [s.chunk]]
    assert " ".join(map(str, signed)) == INTERLEAVED_P2_M5_V2_G3


def test_gpipe_golden():
    steps = get_schedule("gpipe")(1, 3, 3)
    assert " ".join(map(str, steps)) == "F0.c0 F1.c0 F2.c0 B0.c0 B1.c0 B2.c0"


def test_step_label_and_str():
    s = Step("B", 7, 2)
    assert s.label == "B7.c2" and str(s) == "B7.c2"
    with pytest.raises(SpecError) as e:
        Step("X", 0, 0)
    assert e.value.field == "kind"


def test_virtual_microbatch_table():
    table = il_mod.virtual_microbatch_table(5, 2, 3)
    assert table == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1),
                     (3, 0), (4, 0), (3, 1), (4, 1)]


def test_num_warmup_microbatches():
    assert [ofob_mod.num_warmup_microbatches(r, 4, 8) for r in range(4)] == [3, 2, 1, 0]
    assert ofob_mod.num_warmup_microbatches(0, 8, 3) == 3
    assert gpipe_mod.num_warmup_microbatches(2, 4, 8) == 8
    assert il_mod.num_warmup_microbatches(0, 2, 5, 2, 3) == 5
    assert il_mod.num_warmup_microbatches(0, 4, 4, 4) == 16  # capped at m*v


# ---------------------------------------------------------------- invariant grids

def _valid_cases():
    """(schedule, p, m, v, g) over p in 1..8, including every valid interleaved group size."""
    for p in range(1, 9):
        for m in sorted({1, 2, p - 1, p, p + 1, 2 * p, 2 * p + 3, 3 * p} - {0}):
            yield "gpipe", p, m, 1, None
            yield "1f1b", p, m, 1, None
            yield "deepspeed-1f1b", p, m, 1, None
            for v, g in itertools.product((2, 3, 4), range(p, m + 1)):
                if m % g == 0 or m % g >= p:
                    yield "interleaved", p, m, v, g


VALID = list(_valid_cases())


def _check_rank(steps: list[Step], m: int, v: int) -> None:
    assert len(steps) == 2 * m * v
    fwd = [(s.microbatch, s.chunk) for s in steps if s.kind == "F"]
    bwd = [(s.microbatch, s.chunk) for s in steps if s.kind == "B"]
    everything = sorted(itertools.product(range(m), range(v)))
    assert sorted(fwd) == everything and sorted(bwd) == everything
    at = {(s.kind, s.microbatch, s.chunk): k for k, s in enumerate(steps)}
    assert all(at[("B", i, c)] > at[("F", i, c)] for i, c in everything)
    for c in range(v):  # FIFO per chunk: backwards in the order of the forwards
        assert [i for i, cc in fwd if cc == c] == [i for i, cc in bwd if cc == c]


@pytest.mark.parametrize("case", VALID, ids=lambda c: "-".join(map(str, c)))
def test_invariants(case):
    name, p, m, v, g = case
    fn = get_schedule(name)
    for r in range(p):
        steps = fn(r, p, m, v, g)
        _check_rank(steps, m, v)
        if name == "1f1b":
            assert peak_stash(steps) == min(p - r, m)
        elif name == "gpipe":
            assert peak_stash(steps) == m


def test_grid_is_broad():
    names = {c[0] for c in VALID}
    # schedules that split the backward into B and W have their own tests (test_zb_h1.py)
    assert names == {n for n in schedule_names() if not get_schedule(n).splits_backward}
    assert sum(c[0] == "interleaved" and c[4] != c[1] for c in VALID) > 100


def test_peak_stash_counts_per_chunk():
    steps = [Step("F", 0, 0), Step("F", 0, 1), Step("B", 0, 1), Step("F", 1, 0)]
    assert peak_stash(steps) == 2
    assert peak_stash([]) == 0


# ---------------------------------------------------------------- closed forms

TIMES = [(1.0, 2.0), (0.3, 0.7), (1.25e-3, 2.5e-3)]


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(1, 1), (1, 5), (2, 2), (4, 8), (4, 3), (8, 8), (8, 13), (5, 1)])
@pytest.mark.parametrize("t_f,t_b", TIMES)
def test_makespan_non_interleaved(name, p, m, t_f, t_b):
    makespan = simulate_free_comm(name, p, m, 1, t_f, t_b)
    assert makespan == pytest.approx((m + p - 1) * (t_f + t_b), rel=1e-12)
    bubble = (makespan - m * (t_f + t_b)) / (m * (t_f + t_b))
    assert bubble == pytest.approx(bubble_fraction_closed_form(name, p, m, 1), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("p,k,v", [(1, 3, 2), (2, 1, 2), (2, 3, 3), (4, 2, 2), (4, 1, 4),
                                   (8, 2, 2), (3, 4, 3), (8, 1, 3)])
@pytest.mark.parametrize("t_f,t_b", TIMES)
def test_makespan_interleaved(p, k, v, t_f, t_b):
    m = k * p
    makespan = simulate_free_comm("interleaved", p, m, v, t_f, t_b)
    bubble = makespan - m * (t_f + t_b)
    assert bubble == pytest.approx((p - 1) * (t_f + t_b) / v, rel=1e-12, abs=1e-15)
    frac = bubble / (m * (t_f + t_b))
    assert frac == pytest.approx(bubble_fraction_closed_form("interleaved", p, m, v),
                                 rel=1e-12, abs=1e-15)


def test_makespan_interleaved_all_valid_groups():
    for name, p, m, v, g in VALID:
        if name == "interleaved":
            bubble = simulate_free_comm(name, p, m, v, 1.0, 2.0, g) - 3.0 * m
            assert bubble == pytest.approx(3.0 * (p - 1) / v, rel=1e-12, abs=1e-12)


def test_closed_form_values():
    assert bubble_fraction_closed_form("1f1b", 4, 8) == 3 / 8
    assert bubble_fraction_closed_form("gpipe", 4, 8) == 3 / 8
    assert bubble_fraction_closed_form("interleaved", 4, 8, 2) == 3 / 16


def test_simulate_detects_deadlock(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register("backwards_first")(
        lambda stage, pp, m, vpp=1, group_size=None:
        [Step("B", i, 0) for i in range(m)] + [Step("F", i, 0) for i in range(m)])
    with pytest.raises(RuntimeError, match="deadlock"):
        simulate_free_comm("backwards_first", 2, 2, 1, 1.0, 1.0)


# ---------------------------------------------------------------- validation

BAD = [
    ("gpipe", dict(stage=4, pp=4, num_microbatches=8), "stage"),
    ("1f1b", dict(stage=-1, pp=4, num_microbatches=8), "stage"),
    ("1f1b", dict(stage=0, pp=0, num_microbatches=8), "pp"),
    ("1f1b", dict(stage=0, pp=4, num_microbatches=0), "num_microbatches"),
    ("gpipe", dict(stage=0, pp=4, num_microbatches=0), "num_microbatches"),
    ("interleaved", dict(stage=0, pp=4, num_microbatches=0, vpp=2), "num_microbatches"),
    ("interleaved", dict(stage=5, pp=4, num_microbatches=8, vpp=2), "stage"),
    ("gpipe", dict(stage=0, pp=4, num_microbatches=8, vpp=2), "vpp"),
    ("1f1b", dict(stage=0, pp=4, num_microbatches=8, vpp=2), "vpp"),
    ("interleaved", dict(stage=0, pp=4, num_microbatches=8), "vpp"),
    ("interleaved", dict(stage=0, pp=4, num_microbatches=8, vpp=1), "vpp"),
    ("interleaved", dict(stage=0, pp=4, num_microbatches=8, vpp=2, group_size=3),
     "microbatch_group_size"),
    ("interleaved", dict(stage=0, pp=4, num_microbatches=8, vpp=2, group_size=9),
     "num_microbatches"),
    ("interleaved", dict(stage=0, pp=4, num_microbatches=6, vpp=2), "num_microbatches"),
    ("interleaved", dict(stage=0, pp=4, num_microbatches=9, vpp=2, group_size=6),
     "num_microbatches"),
]


@pytest.mark.parametrize("name,kwargs,field", BAD, ids=[f"{b[0]}-{b[2]}-{i}" for i, b in enumerate(BAD)])
def test_validation(name, kwargs, field):
    with pytest.raises(SpecError) as e:
        get_schedule(name)(**kwargs)
    assert e.value.field == field
    assert field in str(e.value)


def test_vpp_messages_say_what_to_use():
    with pytest.raises(SpecError, match="interleaved"):
        get_schedule("1f1b")(0, 4, 8, vpp=2)
    with pytest.raises(SpecError, match="1f1b"):
        get_schedule("interleaved")(0, 4, 8, vpp=1)


# ---------------------------------------------------------------- registry

def test_registry_names():
    assert schedule_names() == ["1f1b", "deepspeed-1f1b", "dualpipe", "dualpipev", "gpipe",
                                "interleaved", "zb-1p", "zb-2p", "zb-h1", "zb-h2", "zb-v"]


def test_unknown_schedule():
    with pytest.raises(SpecError) as e:
        get_schedule("zb-h9")
    assert e.value.field == "schedule" and e.value.value == "zb-h9"
    assert ("1f1b, deepspeed-1f1b, dualpipe, dualpipev, gpipe, interleaved, zb-1p, zb-2p, "
            "zb-h1, zb-h2, zb-v" in str(e.value))
    with pytest.raises(SpecError):
        bubble_fraction_closed_form("zb-h9", 4, 8, 1)
    with pytest.raises(SpecError):
        simulate_free_comm("zb-h9", 4, 8, 1, 1.0, 1.0)


def test_duplicate_registration_refused(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    original = get_schedule("1f1b")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("1f1b")(lambda *a, **k: [])
    assert get_schedule("1f1b") is original
    registry.register("new_one")(original)
    with pytest.raises(ValueError):
        registry.register("new_one")(original)


# ---------------------------------------------------------------- one rule, three readers

def _grid():
    for name in schedule_names():
        for p, m, v in itertools.product(range(1, 7), range(1, 14), (1, 2, 3)):
            yield name, p, m, v


def test_array_rules_and_stash_equal_the_scalar_ones():
    """``Schedule.valid`` (arrays, the search) accepts exactly what ``check`` (plans, jobs)
    accepts, and ``in_flight_array`` equals ``in_flight`` wherever it does (default group)."""
    import numpy as np
    seen = set()
    for name, p, m, v in _grid():
        sched = get_schedule(name)
        try:
            sched.check(p, m, v)
            ok = True
        except SpecError:
            ok = False
        valid = np.broadcast_to(sched.valid(np.array([p]), np.array([m]), np.array([v])), (1,))
        assert bool(valid[0]) == ok, (name, p, m, v)
        if ok:
            seen.add(name)
            st = np.arange(p)
            arr = sched.in_flight_array(st, np.full(p, p), np.full(p, m), np.full(p, v))
            assert arr.tolist() == [sched.in_flight(r, p, m, v) for r in range(p)]
            assert [sched.in_flight(r, p, m, v) for r in range(p)] == \
                [peak_stash(sched.steps(r, p, m, v)) for r in range(p)]
    assert seen == {"gpipe", "1f1b", "interleaved", "deepspeed-1f1b", "zb-h1", "zb-h2", "zb-v",
                    "dualpipev", "dualpipe", "zb-1p", "zb-2p"}
