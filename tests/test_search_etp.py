"""Expert tensor parallelism in the search space (issue 14 item 6, docs/search.md "The space").

* the space's ``ep`` rule (``job.expert_plan_ok``: ``ep | experts``, ``etp | expert width``,
  ``etp·ep | tp·cp·dp``) and the plan check (``job.check_plan_against_model`` /
  ``check_expert_plan``) agree: every plan the search keeps passes the check, every plan the
  rule drops fails it;
* the arrays the search scores price ``etp != tp`` as the scalar estimate and memory model do;
* a fixed search finds Megatron-Bridge's Qwen3-235B-A22B H100 shape (tp 2, pp 8, ep 32,
  etp 1 on 256 GPUs: ep 32 > dp·cp = 16);
* ``--fix`` of each single-value plan field is carried into every candidate and round-trips
  through ``plan_key``/``parse_plan``; bad values exit 2 naming field, value and rule;
* a dense model's space is the product it was (no ``etp`` plans).
"""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.scalar import estimate
from strategies.job import check_plan_against_model, expert_plan_ok, make_job
from strategies.memory.arrays import peak_memory_arrays
from strategies.memory.scalar import peak_memory
from strategies.framework import get_profile
from strategies.plan import Plan, parse_plan, plan_from_mapping, plan_mapping
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.axes import search_axes, factorizations
from strategies.search.fix_parse import FIX_KEYS, parse_fix
from strategies.search.plan_rows import SWITCH_KEYS, plan_key
from strategies.search.space import SpaceOptions, enumerate_space
from strategies.search.recommend import expert_choice
from topologies.cluster import cluster_preset

MOE = model_preset("qwen3-30b-a3b")        # 128 experts, expert width 768, 4 KV heads
SMALL = SpaceOptions(max_mbs=1, layouts=False)


def _passes(model, plan: Plan) -> bool:
    try:
        check_plan_against_model(model, plan)
    except SpecError:
        return False
    return True


def test_rule_and_plan_check_agree_over_a_grid():
    """``expert_plan_ok`` (the space's vectorised rule) is ``check_plan_against_model``'s
    expert verdict, plan by plan, over tp, cp, dp, ep, etp in small ranges."""
    seen = {True: 0, False: 0}
    for tp, cp, dp, ep, etp in itertools.product((1, 2, 4), (1, 2), (1, 2, 4, 8),
                                                 (1, 2, 4, 8, 16, 32, 3), (1, 2, 4, 3)):
        plan = Plan(tp=tp, cp=cp, dp=dp, ep=ep, etp=etp, gbs=64)
        ok = bool(expert_plan_ok(MOE, tp, cp, dp, ep, etp))
        assert ok == _passes(MOE, plan), plan
        seen[ok] += 1
    assert seen[True] > 50 and seen[False] > 50


def test_every_kept_plan_passes_and_a_dropped_one_fails():
    cl = cluster_preset("dgx-h100", 2)
    sp = enumerate_space(MOE, cl, 256, SMALL)
    combos = {tuple(int(sp.cols[k][i]) for k in ("tp", "cp", "dp", "ep", "etp")): i
              for i in range(sp.size)}
    for i in combos.values():
        make_job(MOE, cl, sp.plan(i))            # raises if the plan check refuses it
    etp = sp.cols["etp"]
    assert (etp < sp.cols["tp"]).any()        # etp 1 with tp > 1 is in the space
    # ep beyond dp*cp: legal only because etp*ep divides tp*cp*dp (etp < tp)
    beyond = sp.cols["ep"] > sp.cols["dp"] * sp.cols["cp"]
    assert beyond.any() and (etp[beyond] < sp.cols["tp"][beyond]).all()
    # a plan the rule drops: tp 2, dp 8, ep 16 needs etp 1 (etp 2: 32 does not divide 16)
    assert (2, 1, 8, 16, 1) in combos and (2, 1, 8, 16, 2) not in combos
    with pytest.raises(SpecError, match="etp\\*ep"):
        make_job(MOE, cl, Plan(tp=2, ep=16, etp=2, gbs=256))


def test_arrays_price_etp_as_the_scalar_estimate():
    cl = cluster_preset("dgx-h100", 4)
    plans = [Plan(tp=2, pp=2, ep=8, etp=1, gbs=256),
             Plan(tp=4, ep=8, etp=1, gbs=256, sp=True),
             Plan(tp=4, pp=2, ep=4, etp=1, gbs=256, sp=True, recompute="full"),
             Plan(tp=4, pp=2, ep=8, etp=2, gbs=256, sp=True, schedule="interleaved", vpp=2),
             Plan(tp=4, ep=32, etp=1, gbs=256, sp=True, zero=1),
             Plan(tp=2, pp=4, ep=8, etp=1, gbs=256, moe_dispatcher="deepep"),
             Plan(tp=2, pp=4, ep=8, etp=1, gbs=256, schedule="interleaved", vpp=2,
                  ep_overlap=True)]
    jobs = [make_job(MOE, cl, p) for p in plans]
    P = PlanArrays.from_plans([j.plan for j in jobs])
    a = estimate_arrays(MOE, cl, "bf16", P)
    peaks = peak_memory_arrays(MOE, P, "bf16", None, cl.gpu)
    for i, j in enumerate(jobs):
        assert a["step_time_s"][i] == pytest.approx(estimate(j).step_time_s, rel=1e-12, abs=0)
        assert peaks[i] == pytest.approx(peak_memory(j)[1].total, rel=1e-12, abs=0)


@pytest.mark.slow
def test_fixed_search_finds_the_qwen3_235b_h100_shape():
    """Megatron-Bridge's Qwen3-235B-A22B on 256 H100: tp 2, pp 8, dp 16, ep 32, etp 1."""
    m, cl = model_preset("qwen3-235b-a22b"), cluster_preset("dgx-h100", 32)
    fixed = parse_fix("tp=2,pp=8,ep=32,etp=1")
    sp = enumerate_space(m, cl, 2048, SpaceOptions(fixed=fixed))
    assert sp.size > 0
    rows = np.flatnonzero(sp.cols["cp"] == 1)       # the recipe's cp 1: dp 16
    assert rows.size > 0
    p = sp.plan(int(rows[np.argmin(sp.peak_memory[rows])]))
    assert (p.tp, p.pp, p.dp, p.ep, p.expert_tp) == (2, 8, 16, 32, 1)
    c = expert_choice(p, cl.gpus_per_node, m.num_experts)
    assert (c["ep"], c["etp"], c["edp"], c["experts_per_rank"]) == (32, 1, 1, 4)
    assert c["a2a"] == "across nodes" and c["a2a_nodes"] == 4
    assert "etp=1" in plan_key(p) and parse_plan(plan_key(p)).etp == 1


FIXES = [("etp", "1", 1), ("moe_dispatcher", "deepep", "deepep"),
         ("ep_overlap", "true", True), ("delay_wgrad", "false", False),
         ("tp_comm_overlap", "true", True),
         ("cuda_graph", "true", True), ("moe_routing", "contiguous", "contiguous"),
         ("moe_imbalance", "1.25", 1.25), ("moe_capacity_factor", "1.5", 1.5),
         ("flash_attn", "false", False), ("overlap_grad_reduce", "false", False),
         ("overlap_param_gather", "false", False), ("cp_comm", "all_gather", "all_gather"),
         ("param_gather_with_optimizer", "true", True),
         ("offload_modules", "expert_fc1+moe_act", ("expert_fc1", "moe_act"))]


def test_fix_keys_cover_the_switches():
    # moe_pad_to_capacity needs moe_capacity_factor fixed beside it: its round trip is
    # tests/test_moe_drop_pad.py's; cpu_offloading_num_layers runs on dense models and fixes
    # pp and recompute beside it: tests/test_layer_offload.py's
    assert {k for k, _, _ in FIXES} | {"moe_pad_to_capacity", "cpu_offloading_num_layers"} \
        == {"etp", *SWITCH_KEYS} \
        <= set(FIX_KEYS)


@pytest.mark.parametrize("key,text,value", FIXES)
def test_fix_is_carried_and_round_trips(key, text, value):
    cl = cluster_preset("dgx-h100", 2)
    fixed = parse_fix(f"{key}={text}")
    assert fixed == {key: value}
    sp = enumerate_space(MOE, cl, 256, SpaceOptions(max_mbs=1, layouts=False, fixed=fixed))
    assert sp.size > 0
    for i in (0, sp.size // 2, sp.size - 1):
        p = sp.plan(i)
        assert (p.expert_tp if key == "etp" else getattr(p, key)) == value
        back = parse_plan(plan_key(p))
        assert back == p and plan_key(back) == plan_key(p)
        make_job(MOE, cl, p)
    # two plans that differ only in the fixed field have different keys (--resume)
    p = sp.plan(0)
    plain = Plan(**{**p.to_dict(), key: None if key == "etp" else Plan().__getattribute__(key)})
    if plain != p:
        assert plan_key(plain) != plan_key(p)


def test_recommendation_names_the_expert_choice(capsys):
    """The search's JSON ``recommended.expert`` and last ``why`` sentence (a fixed, small
    search: 5 plans, 1 simulated)."""
    argv = ["search", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100:1", "--global-batch",
            "32", "--fix", "tp=2,pp=1,etp=1,mbs=1,zero=1,sp=true", "--top", "1",
            "--workers", "1", "--reference", "none", "--json"]
    assert main(argv) == 0
    rec = json.loads(capsys.readouterr().out)["recommended"]
    assert rec["expert"] == {"ep": 8, "etp": 1, "edp": 1, "experts_per_rank": 16,
                             "a2a_nodes": 1, "a2a": "within a node"}
    assert ",etp=1" in rec["key"] and rec["plan"]["etp"] == 1
    assert rec["why"][-1].startswith("expert parallelism: ep 8, 16 experts per rank, each "
                                     "expert whole on its rank (etp 1)")
    assert "within a node" in rec["why"][-1]


@pytest.mark.slow
def test_a_named_stacks_default_switch_stays_out_of_the_key():
    """Keys leave out a named stack's default switches (megatron-core: TP overlap on), as
    ``row_job`` reads them back with the stack's defaults; a fixed other value is in it."""
    fw = get_profile("megatron-core")
    cl = cluster_preset("dgx-h100", 2)
    # the space's tp = 2, SP rows only (a quarter of it): the row read below is the same plan
    # as in the whole space (tp=2,pp=2,dp=1,cp=4,ep=8,...,cp_comm=a2a+p2p,hierarchical_cp=2)
    for text, inkey in (("", False), (",tp_comm_overlap=false", True)):
        sp = enumerate_space(MOE, cl, 256, SpaceOptions(max_mbs=1, layouts=False,
                                                        fixed=parse_fix("tp=2,sp=true" + text)),
                             framework=fw)
        # the last row where the stack's TP overlap runs (tp > 1 with SP; the rows after it
        # may be the K/V exchange axis's, tests/test_search_cp_axis.py)
        i = int(np.flatnonzero((sp.cols["tp"] > 1) & sp.cols["sp"])[-1])
        key, p = sp.key(i), sp.plan(i)
        assert ("tp_comm_overlap" in key) == inkey and p.tp_comm_overlap == (not inkey)
        assert plan_from_mapping(plan_mapping(key), fw.plan_defaults()) == p


@pytest.mark.parametrize("argv,words", [
    (["--fix", "etp=0"], ["--fix='etp=0'", ">= 1"]),
    (["--fix", "moe_dispatcher=foo"], ["moe_dispatcher=foo", "alltoall, deepep, hybridep"]),
    (["--plan", "ep_overlap=maybe,gbs=256"], ["--plan='ep_overlap=maybe'", "true or false"]),
    (["--fix", "moe_imbalance=0.5"], ["moe_imbalance=0.5", ">= 1"]),
    (["--fix", "ep_overlap=true", "--framework", "torchtitan"],
     ["ep_overlap=true", "torchtitan has no expert-parallel communication overlap"]),
    (["--fix", "cuda_graph=true", "--framework", "torchtitan"],
     ["cuda_graph=true", "torchtitan has no full-iteration CUDA graph"]),
    (["--model", "llama3-8b", "--fix", "moe_dispatcher=deepep"],
     ["moe_dispatcher=deepep", "llama3-8b is dense"]),
])
def test_bad_fix_values_exit_2(capsys, argv, words):
    base = ["search", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100:2"]
    if "--model" in argv:
        base = ["search", "--cluster", "dgx-h100:1"]
    assert main([*base, *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err, err


def test_dense_space_unchanged():
    """A dense model: the etp column is tp, no key names etp, and the raw space is the
    product of its axes as before (one row per factorization, no etp rows)."""
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    sp = enumerate_space(m, cl, 64, SMALL)
    assert (sp.cols["etp"] == sp.cols["tp"]).all() and (sp.cols["ep"] == 1).all()
    assert not any("etp" in sp.key(i) for i in range(0, sp.size, 97))
    ax = search_axes(m, cl, SMALL)
    assert sp.raw == len(factorizations(16)) * len(ax["sched"]) * 1 * 1 * 3 * 2 * 4
