"""Adding a schedule touches one new module: a toy schedule, defined here and nowhere else,
registered for these tests only, runs through estimate, simulate, compare and search (the
library functions and the CLI), with every other fact taken from the ``Schedule`` defaults.

The toy, "eager 1F1B", is 1F1B with one more warm-up forward on every rank (Megatron-LM adds
one when it overlaps the expert all-to-all with another micro-batch's compute): the same
makespan with free communication, one more micro-batch stashed on each rank.
"""
from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.search.run import SearchConfig, run_search
from simulator.simulate import simulate
from simulator.studies.compare_schedules import compare, parse_schedules
from strategies.errors import SpecError
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate, plan_arrays
from strategies.job import make_job
from strategies.memory.activations import activation_bytes_per_chunk, in_flight_microbatches
from strategies.plan import Plan, parse_plan
from strategies.presets import model_preset
from strategies.schedules import (Schedule, Step, get_schedule, register, schedule_code,
                                  schedule_names, unregister)
from strategies.schedules.analysis import (bubble_fraction_closed_form, peak_stash,
                                           simulate_free_comm)
from strategies.schedules.step import check_common, warmup_steady_cooldown
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset

NAME = "eager-1f1b"
BUILTIN = ["1f1b", "deepspeed-1f1b", "dualpipe", "dualpipev", "gpipe", "interleaved", "zb-1p",
           "zb-2p", "zb-h1", "zb-h2", "zb-v"]
CLI = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1"]
PLAN = "tp=2,pp=4,gbs=8"            # 8 micro-batches per pipeline, 4 stages


class EagerOneFOneB(Schedule):
    """1F1B with ``min(pp - stage, m)`` warm-up forwards: only the order is given."""

    def steps(self, stage: int, pp: int, m: int, vpp: int = 1,
              group_size: int | None = None) -> list[Step]:
        check_common(stage, pp, m)
        self.check_plan(pp, vpp)
        forwards = [Step("F", i) for i in range(m)]
        backwards = [Step("B", i) for i in range(m)]
        return warmup_steady_cooldown(forwards, backwards, min(pp - stage, m))


@pytest.fixture
def toy():
    register(NAME)(EagerOneFOneB)
    try:
        yield get_schedule(NAME)
    finally:
        unregister(NAME)


def job(schedule: str = NAME, gbs: int = 8, **kw):
    plan = Plan(tp=2, pp=4, gbs=gbs, schedule=schedule, **kw)
    return make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1), plan)


# ------------------------------------------------------------------ the defaults

def test_defaults_read_the_order(toy):
    assert schedule_code(NAME) == len(BUILTIN)
    for pp, m in [(1, 1), (4, 8), (4, 2), (8, 3), (3, 10)]:
        for s in range(pp):
            if m > pp:      # else the order alone cannot tell warm-up from steady state
                assert toy.num_warmup(s, pp, m) == pp - s
            assert toy.in_flight(s, pp, m) == min(pp - s + 1, m) == peak_stash(toy(s, pp, m))
    import numpy as np
    st, pp, m = np.array([0, 1, 3, 0]), np.array([4, 4, 4, 8]), np.array([8, 8, 8, 2])
    assert toy.in_flight_array(st, pp, m, np.ones(4)).tolist() == [5, 4, 2, 2]


@pytest.mark.parametrize("pp,m", [(2, 2), (4, 8), (3, 7), (8, 16)])
def test_free_comm_makespan_is_the_default_closed_form(toy, pp, m):
    t_f, t_b = 1.0, 2.0
    span = simulate_free_comm(NAME, pp, m, 1, t_f, t_b)
    ideal = m * (t_f + t_b)
    assert span / ideal - 1 == pytest.approx(bubble_fraction_closed_form(NAME, pp, m), rel=1e-12)


def test_default_exchanges_pair_every_message(toy):
    sent, received = set(), set()
    for r in range(4):
        for a in toy.actions(r, 4, 6):
            if not isinstance(a, Step):
                sent |= {(d, i, c, r) for d, i, c in a.sends}
                received |= {(d, i, c, toy.peer(r, c, i, 4, 1, d, False)) for d, i, c in a.recvs}
    assert sent and sent == received


def test_rules_come_from_the_defaults(toy):
    with pytest.raises(SpecError) as e:
        parse_plan(f"pp=4,schedule={NAME}:2")
    assert e.value.field == "vpp" and "interleaved" in str(e.value)
    with pytest.raises(SpecError) as e:
        Plan(pp=4, schedule=NAME, microbatch_group_size=4)
    assert e.value.field == "microbatch_group_size"


# ------------------------------------------------------------------ library

def test_estimate_simulate_and_bound(toy):
    j, ref = job(), job("1f1b")
    est, est_ref = estimate(j), estimate(ref)
    # the same pipeline closed form, one more stashed micro-batch on every stage; the
    # default's two messages per round, 2(m + p - 1), where 1F1B charges its own path's, here
    # the last stage's (the LM head): m + 2p - 3 (``OneFOneB.bottleneck_messages``,
    # docs/calibration.md §5.21)
    pp_comm, pp_ref = est.breakdown_s["pp_comm"], est_ref.breakdown_s["pp_comm"]
    assert est.step_time_s - pp_comm == pytest.approx(est_ref.step_time_s - pp_ref, rel=1e-12)
    assert pp_comm / pp_ref == pytest.approx(2 * (8 + 4 - 1) / (8 + 2 * 4 - 3), rel=1e-9)
    assert est.memory.activations > est_ref.memory.activations
    res = simulate(j)
    for stage, peak in enumerate(res.metrics["peak_activation_bytes"]):
        want = in_flight_microbatches(j, stage) * activation_bytes_per_chunk(j, stage)
        assert peak == pytest.approx(want, rel=1e-12)
    assert in_flight_microbatches(j, 0) == 5
    bound = step_time_lower_bound(j.model, j.cluster, j.dtype, plan_arrays(j.plan))
    assert float(bound) <= res.step_time_s


def test_compare(toy):
    rows, results = compare(job("1f1b"), parse_schedules(f"1f1b,{NAME}"))
    by = {r["schedule"]: r for r in rows}
    assert by[NAME]["valid"] and len(results) == 2
    assert by[NAME]["bubble_closed_form"] == by["1f1b"]["bubble_closed_form"] == 3 / 8
    assert by[NAME]["memory"]["peak_gib"] > by["1f1b"]["memory"]["peak_gib"]


def test_search_space_and_search(toy):
    m, cl = model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 1)
    sp = enumerate_space(m, cl, 16, SpaceOptions(max_mbs=2))
    toy_rows = sp.cols["sched"] == schedule_code(NAME)
    assert toy_rows.any() and (sp.cols["pp"][toy_rows] >= 2).all()
    rep = run_search(SearchConfig(m, cl, 16, options=SpaceOptions(max_mbs=2,
                                                                  fixed={"schedule": NAME})))
    assert rep["plans"] and all(p["plan"]["schedule"] == NAME for p in rep["plans"])
    assert all(p["lower_bound_s"] <= p["step_time_s"] for p in rep["plans"])


# ------------------------------------------------------------------ CLI

def _json(capsys, *args: str) -> dict:
    assert main([*args]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli(capsys, toy):
    plan = f"{PLAN},schedule={NAME}"
    est = _json(capsys, "estimate", *CLI, "--plan", plan, "--json")
    sim = _json(capsys, "simulate", *CLI, "--plan", plan, "--json")
    assert est["inputs"]["plan"]["schedule"] == sim["inputs"]["plan"]["schedule"] == NAME
    assert sim["step_time_s"] > 0 and est["step_time_s"] == sim["analytic_step_time_s"]
    cmp_ = _json(capsys, "compare", *CLI, "--plan", PLAN, "--schedules", f"1f1b,{NAME}", "--json")
    assert [r["schedule"] for r in cmp_["rows"]] == ["1f1b", NAME]
    assert all(r["valid"] for r in cmp_["rows"])
    rep = _json(capsys, "search", *CLI, "--global-batch", "16", "--max-mbs", "2",
                "--fix", f"schedule={NAME}", "--workers", "1", "--json")
    assert rep["plans"] and all(p["plan"]["schedule"] == NAME for p in rep["plans"])
    assert main(["estimate", *CLI, "--plan", f"{PLAN},schedule={NAME},vpp=2"]) == 2
    assert "vpp=2" in capsys.readouterr().err


def test_registry_is_clean_afterwards():
    """No fixture here: after the tests above, only the built-in schedules are registered."""
    assert schedule_names() == BUILTIN
    with pytest.raises(SpecError) as e:
        Plan(pp=4, schedule=NAME)
    assert e.value.field == "schedule"


# ------------------------------------------------------------------ a V-shaped placement

class VShapedGPipe(Schedule):
    """Two chunks per rank placed in a V (chunk 0 of rank ``r`` at position ``r``, chunk 1
    at ``2p - 1 - r``, as ZB-V and DualPipeV place them), every forward then every backward."""

    chunked = True
    default_vpp = 2
    steady_state = False

    def shape_rules(self, pp, vpp, group_size):
        return [("vpp", vpp, vpp == 2, lambda: "the V needs exactly 2 chunks per rank"),
                ("microbatch_group_size", group_size, group_size is None, lambda: "unused")]

    def num_virtual_stages(self, pp, vpp):
        return 2 * pp

    def virtual_stage(self, rank, chunk, pp, vpp, microbatch=0):
        return rank if chunk == 0 else 2 * pp - 1 - rank

    def rank_chunk(self, position, pp, vpp, microbatch=0):
        return (position, 0) if position < pp else (2 * pp - 1 - position, 1)

    def steps(self, stage, pp, m, vpp=2, group_size=None):
        check_common(stage, pp, m)
        self.check_plan(pp, vpp, group_size)
        return ([Step("F", i, 0) for i in range(m)] + [Step("F", i, 1) for i in range(m)]
                + [Step("B", i, 1) for i in range(m)] + [Step("B", i, 0) for i in range(m)])


@pytest.fixture
def vshape():
    register("v-gpipe")(VShapedGPipe)
    try:
        yield get_schedule("v-gpipe")
    finally:
        unregister("v-gpipe")


def test_v_placement_reaches_the_compiler_and_the_engine(vshape):
    """Peers, the embedding and the LM head follow the schedule's placement: both ends of the
    pipeline sit on rank 0, and every message is matched (the engine raises otherwise)."""
    pp, m = 4, 6
    for r in range(pp):
        for c in range(2):
            assert vshape.rank_chunk(vshape.virtual_stage(r, c, pp, 2), pp, 2) == (r, c)
    assert vshape.peer(0, 0, 0, pp, 2, "fwd", True) == 1
    assert vshape.peer(pp - 1, 0, 0, pp, 2, "fwd", True) == pp - 1    # the V's turn: same rank
    assert vshape.peer(0, 1, 0, pp, 2, "bwd", True) == 1
    assert simulate_free_comm("v-gpipe", pp, m, 2, 1.0, 2.0) > m * 3.0
    j = job("v-gpipe", gbs=m, vpp=2)
    res = simulate(j, fold=False)
    heads = {(r.rank // 2, r.chunk) for r in res.records if r.kind == "lm_head"}
    embeds = {(r.rank // 2, r.chunk) for r in res.records if r.kind == "embedding"}
    assert heads == {(0, 1)} and embeds == {(0, 0)} and vshape.ends(pp, 2) == (0, 0)
    assert get_schedule("interleaved").ends(pp, 3) == (0, pp - 1)
    sends = [r for r in res.records if r.kind == "pp_send"]
    # fwd+bwd per link between ranks, times tp=2 ranks; the V's turn on rank pp-1 is a local
    # hand-off, no message (DualPipeV's last rank feeds chunk 0's output to chunk 1 unsent)
    assert len(sends) == 2 * m * (2 * pp - 2) * 2
