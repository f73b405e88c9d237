"""``cp_comm`` fixed in the search (``--fix``/``--plan``; docs/search.md "The space"): a
whole-space fix (the explored axis under a named stack: tests/test_search_cp_axis.py).

* every candidate carries the fixed exchange (column ``cpc``, ``PlanArrays.cp_comm``) and its
  plan, label (``cp2:ag``), key and ``--export`` name it;
* the arrays the search scores (estimate and peak memory) equal the scalar ``estimate`` of
  each candidate's plan to 1e-12 (the stage costs read the stack ``with_cp_comm`` gives,
  ``stacks.variants.arrays_stack``), and the ranked plans' analytic step is the estimate's;
* a stack without the exchange, or a value that is none, exits 2 at parse time naming the
  stack, the field and the rule (or the accepted values);
* arrays naming two exchanges are refused by the stage costs (one exchange per call; the
  estimate and the bound split them by exchange, ``estimate.exchanges``).
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.scalar import estimate
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.memory.arrays import peak_memory_arrays
from strategies.plan import Plan, parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.fix_parse import FIX_KEYS, parse_fix
from strategies.search.plan_rows import plan_key
from strategies.search.space import SpaceOptions, enumerate_space
from strategies.stacks.variants import arrays_stack
from topologies.cluster import cluster_preset

M = replace(model_preset("llama3-8b"), seq_length=16384)
CL = cluster_preset("dgx-h100", 1)
FW = get_profile("megatron-core")
BASE = ["search", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--seq-len", "16384",
        "--global-batch", "16", "--top", "2", "--workers", "1", "--reference", "none"]


def test_parse_fix_reads_cp_comm_and_its_alias():
    assert "cp_comm" in FIX_KEYS
    assert parse_fix("cp_comm=all_gather") == {"cp_comm": "all_gather"}
    assert parse_fix("cp_comm_type=P2P") == {"cp_comm": "p2p"}   # Megatron's name
    with pytest.raises(SpecError) as e:
        parse_fix("cp_comm=bogus")
    assert "cp_comm=bogus" in str(e.value) and "p2p, all_gather" in str(e.value)


@pytest.mark.parametrize("comm", ["all_gather", "p2p", "a2a"])
def test_candidates_carry_the_exchange_and_price_as_their_plans(comm):
    sp = enumerate_space(M, CL, 16, SpaceOptions(max_mbs=2, layouts=False,
                                                 fixed=parse_fix(f"cp=2,cp_comm={comm}")),
                         framework=FW)
    assert sp.size > 0
    code = 1 + ("p2p", "all_gather", "a2a").index(comm)
    if comm == "a2a":   # 8 KV heads: tp·cp divides 8 (cost.cp_a2a.heads_ok, §5.185)
        assert set(sp.cols["tp"].tolist()) == {1, 2, 4}
    assert (sp.cols["cpc"] == code).all() and (sp.arrays.cp_comm == code).all()
    a = estimate_arrays(M, CL, "bf16", sp.arrays, FW)
    peaks = peak_memory_arrays(M, sp.arrays, "bf16", None, CL.gpu)
    for i in range(0, sp.size, max(1, sp.size // 6)):
        p = sp.plan(i)
        assert p.cp_comm == comm and p.cp == 2
        assert f"cp2:{ {'all_gather': 'ag'}.get(comm, comm)}" in p.short()
        assert parse_plan(plan_key(p)) == p and f",cp_comm={comm}" in plan_key(p)
        e = estimate(make_job(M, CL, p, framework=FW))
        assert a["step_time_s"][i] == pytest.approx(e.step_time_s, rel=1e-12, abs=0)
        assert a["cp_comm"][i] == pytest.approx(e.breakdown_s["cp_comm"], rel=1e-12, abs=1e-15)
        assert peaks[i] == pytest.approx(e.memory.total, rel=1e-12, abs=0)


def test_all_gather_prices_differently_from_the_ring():
    """The fix reaches the figures: the same rows priced with all_gather and with p2p differ
    (its exposed exchange and its working set), so the test above could fail."""
    sp = enumerate_space(M, CL, 16, SpaceOptions(max_mbs=2, layouts=False,
                                                 fixed=parse_fix("cp=2,cp_comm=p2p")),
                         framework=FW)
    ag = PlanArrays(**{**vars(sp.arrays), "cp_comm": np.full(sp.size, 2)})
    ring, gathered = (estimate_arrays(M, CL, "bf16", P, FW)["step_time_s"]
                      for P in (sp.arrays, ag))
    assert np.all(ring != gathered)
    assert np.all(peak_memory_arrays(M, ag, "bf16", None, CL.gpu)
                  > peak_memory_arrays(M, sp.arrays, "bf16", None, CL.gpu))


def test_ranked_plans_step_is_the_estimate_and_export_names_it(capsys):
    assert main([*BASE, "--framework", "megatron-core", "--fix", "cp=2,cp_comm=all_gather",
                 "--json", "--export", "megatron"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plans"]
    for row in out["plans"]:
        p = parse_plan(row["key"])
        assert p.cp_comm == "all_gather" and row["plan"]["cp_comm"] == "all_gather"
        assert "cp2:ag" in row["label"]
        e = estimate(make_job(M, CL, p, framework=FW))
        assert row["analytic_step_time_s"] == pytest.approx(e.step_time_s, rel=1e-12, abs=0)
    assert "--cp-comm-type all_gather" in out["export"]["text"]


@pytest.mark.parametrize("cmd", ["search", "whatif"])
def test_a_stack_without_it_exits_2_at_parse_time(capsys, cmd):
    argv = [*BASE, "--framework", "torchtitan", "--fix", "cp_comm=all_gather"]
    if cmd == "whatif":
        argv = ["whatif", *BASE[1:7], "--vary", "global_batch=16,32", "--framework",
                "torchtitan", "--fix", "cp_comm=all_gather"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for w in ("cp_comm=all_gather", "torchtitan", "runs context parallelism only its own way",
              "no cp_comm"):
        assert w in err, err


def test_bogus_value_exits_2_naming_the_accepted_values(capsys):
    assert main([*BASE, "--fix", "cp_comm=bogus"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "cp_comm=bogus" in err and "p2p, all_gather" in err, err


def test_arrays_naming_two_exchanges_are_refused():
    assert arrays_stack(FW, np.array([2, 2])).cp_impl == "allgather"
    assert arrays_stack(FW, np.array([0, 0])) is FW
    with pytest.raises(SpecError, match="one context-parallel exchange per call"):
        arrays_stack(FW, np.array([1, 2]))
    assert PlanArrays.from_plans([Plan(cp=2, dp=1, gbs=4)]).cp_comm.tolist() == [0]
