"""``cp_comm`` as an axis of the search (docs/search.md "The space"): under a named stack that
lets a plan choose its K/V exchange (``FrameworkProfile.cp_comms``), each row with ``cp > 1``
once per exchange, an ``a2a+p2p`` row once per all-to-all size ``hierarchical_cp``
(``axes.cp_exchanges``, ``product._with_exchanges``).

* the axis appears only where ``cp > 1`` and the stack runs the exchange: the rows with
  ``cp = 1`` are those of the space without it, those with ``cp = c`` that many times
  ``3 + #{k : 1 < k < c, k | c}``; none with no stack named, a ``--fix cp_comm=``, or a stack
  without the choice; an exchange the stack's Transformer Engine predates is never proposed;
* every proposed plan estimates (step and peak memory) equal to its key, to 1e-9, the search
  pricing its mixed exchanges group by group (``estimate.exchanges``);
* the heads rule (``cost.cp_a2a.heads_ok``, at ``cp`` for a2a, at ``k`` for a2a+p2p) prunes;
* determinism: the space and the report, bit for bit.
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.cost.cp_a2a import heads_ok
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan.parse import plan_from_mapping, plan_mapping
from strategies.plan.choices import CP_COMMS
from strategies.presets import model_preset
from strategies.search.axes import cp_exchanges
from strategies.search.fix_parse import parse_fix
from strategies.search.options import SpaceOptions
from strategies.search.plan_rows import plan_key
from strategies.search.product import raw_product
from strategies.search.space import enumerate_space
from topologies.cluster import cluster_preset

M = replace(model_preset("llama3-8b"), seq_length=32768)     # 32 heads, 8 KV heads
CL = cluster_preset("dgx-h100", 2)
FW = get_profile("megatron-core")
OPTS = SpaceOptions(max_mbs=1, layouts=False)
AG, A2A, HIER = (1 + CP_COMMS.index(c) for c in ("all_gather", "a2a", "a2a+p2p"))


def _sizes(c: int) -> int:
    return sum(1 for k in range(2, c) if c % k == 0)


def test_axis_only_where_cp_above_1_and_the_stack_runs_it():
    assert cp_exchanges({}, FW) == [AG, A2A, HIER]    # p2p is the stack's own ring (code 0)
    assert cp_exchanges({}, None) == [] and cp_exchanges({"cp_comm": "a2a"}, FW) == []
    assert cp_exchanges({}, get_profile("torchtitan")) == []
    plain = raw_product(CL.num_gpus, M, CL, 32, OPTS, None)
    named = raw_product(CL.num_gpus, M, CL, 32, OPTS, FW)
    assert "cpc" not in plain and "cpk" not in plain
    one = named["cp"] == 1
    assert (named["cpc"][one] == 0).all() and (named["cpk"][one] == 1).all()
    assert one.sum() == (plain["cp"] == 1).sum()      # no new candidate where cp is 1
    for c in (2, 4, 8, 16):
        assert (named["cp"] == c).sum() == (plain["cp"] == c).sum() * (3 + _sizes(c))
        sel = (named["cp"] == c) & (named["cpc"] == HIER)
        ks = set(named["cpk"][sel].tolist())
        assert ks == {k for k in range(2, c) if c % k == 0}
    assert (named["cpk"][named["cpc"] != HIER] == 1).all()
    # the plain space's rows come first, in their order (the stack's own exchange)
    assert all((named[k][:len(plain["tp"])] == plain[k]).all()
               for k in ("tp", "pp", "cp", "dp", "mbs", "sched", "vpp", "rc", "sp", "zero"))


def test_an_exchange_the_stack_cannot_run_is_never_proposed():
    old = replace(FW, te_version=(1, 11))     # a2a from TE 1.11, a2a+p2p from 1.12
    sp = enumerate_space(M, CL, 32, OPTS, framework=old)
    assert A2A in sp.cols["cpc"] and HIER not in sp.cols["cpc"]
    assert sp.pruned["framework"] > 0


def test_every_proposed_plan_estimates_equal_to_its_key():
    sp = enumerate_space(M, CL, 32, OPTS, framework=FW)
    codes = sp.cols["cpc"]
    assert set(codes[sp.cols["cp"] > 1].tolist()) == {0, AG, A2A, HIER}
    a = estimate_arrays(M, CL, "bf16", sp.arrays, FW)
    bound = step_time_lower_bound(M, CL, "bf16", sp.arrays, FW, costs=a["stage_costs"])
    rows = np.concatenate([np.flatnonzero(codes == c)[::97][:6] for c in (0, AG, A2A, HIER)])
    for i in rows.tolist():
        p = parse_plan(plan_key(sp.plan(i)))      # the key read back (the CLI test: --framework)
        assert p == sp.plan(i) and ("hierarchical_cp=" in sp.key(i)) == (codes[i] == HIER)
        e = estimate(make_job(M, CL, p, framework=FW))
        assert a["step_time_s"][i] == pytest.approx(e.step_time_s, rel=1e-9, abs=0)
        assert sp.peak_memory[i] == pytest.approx(e.memory.total, rel=1e-9, abs=0)
        assert bound[i] <= a["step_time_s"][i]
    # the groups priced apart equal each group priced alone (nothing leaks between them)
    for c in (AG, HIER):
        g = np.flatnonzero(codes == c)
        alone = estimate_arrays(M, CL, "bf16", sp.subset(g), FW)["step_time_s"]
        assert np.array_equal(alone, a["step_time_s"][g])


def test_heads_rule_prunes():
    """llama3-8b's 8 KV heads: a2a needs tp·cp | 8, a2a+p2p tp·k | 8; rows breaking it are in
    the raw product and none survives (rule ``cp_seq``)."""
    raw = raw_product(CL.num_gpus, M, CL, 32, OPTS, FW)
    bad = lambda c: np.where(c["cpc"] == A2A, ~heads_ok(M, c["tp"], c["cp"]),  # noqa: E731
                             (c["cpc"] == HIER) & ~heads_ok(M, c["tp"], c["cpk"]))
    assert bad(raw).sum() > 0
    sp = enumerate_space(M, CL, 32, OPTS, framework=FW)
    assert not bad(sp.cols).any()
    off = enumerate_space(M, CL, 32, replace(OPTS, fixed=parse_fix("cp_comm=p2p")),
                          framework=FW)
    assert sp.pruned["cp_seq"] > off.pruned["cp_seq"]


def test_fixed_a2a_p2p_searches_its_sizes():
    sp = enumerate_space(M, CL, 32, replace(OPTS, fixed=parse_fix("cp_comm=a2a+p2p")),
                         framework=FW)
    assert sp.size > 0 and (sp.cols["cpc"] == HIER).all()
    k, cp = sp.cols["cpk"], sp.cols["cp"]
    assert ((k > 1) & (k < cp) & (cp % k == 0)).all()     # cp 1 and 2 have no size: pruned
    assert 2 in k and set(k.tolist()) <= {2, 4, 8}


def test_exchange_sentence_names_it():
    from strategies.plan import Plan
    from strategies.search.recommend import Without, exchange_sentence
    p = Plan(tp=1, cp=16, dp=4, gbs=64, cp_comm="a2a+p2p", hierarchical_cp=8)
    s = exchange_sentence(p, 10.0, Without("cp_comm", Plan(cp=16, dp=4, gbs=64), 10.5, True),
                          "ring")
    assert s.startswith("K/V exchange (cp_comm a2a+p2p, hierarchical_cp 8: the all-to-all "
                        "over 8 ranks, then the ring over 2 groups)") and "5.0% slower" in s
    s = exchange_sentence(Plan(cp=4, dp=4, gbs=64), 10.0, Without("cp_comm", None, 11.0, False),
                          "ring")
    assert "the stack's own, ring" in s and "at least 10.0% slower (lower bound" in s


def test_search_names_the_exchange_and_is_deterministic(capsys):
    argv = ["search", "--model", "llama3-8b", "--cluster", "dgx-h100:2", "--seq-len", "32768",
            "--global-batch", "32", "--max-mbs", "1", "--framework", "megatron-core",
            "--top", "2", "--workers", "1", "--reference", "none", "--json"]
    outs = []
    for _ in range(2):
        assert main(argv) == 0
        d = json.loads(capsys.readouterr().out)
        d.pop("wall_s")
        d.pop("execution")
        outs.append(json.dumps(d, sort_keys=True))
    assert outs[0] == outs[1]
    d = json.loads(outs[0])
    rec = d["recommended"]
    if rec["plan"]["cp"] > 1:
        assert any(w.startswith("K/V exchange") for w in rec["why"]), rec["why"]
    for row in d["plans"]:      # estimate of its own key (experiments/preset_matrix.py)
        assert main(["estimate", *argv[1:7], "--framework", "megatron-core", "--plan",
                     row["key"], "--global-batch", "32", "--json"]) == 0
        e = json.loads(capsys.readouterr().out)
        assert row["analytic_step_time_s"] == pytest.approx(e["step_time_s"], rel=1e-9, abs=0)
        assert row["memory"]["peak_gib"] == pytest.approx(e["memory"]["peak_gib"], rel=1e-9)
