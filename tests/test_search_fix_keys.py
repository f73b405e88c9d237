"""``--fix``/``--plan recompute_modules`` in a search (docs/search.md "The space", docs/cli.md).

* the fixed modules ride on every candidate (each a selective plan carrying them) and
  round-trip through ``plan_key``/``parse_plan`` (``--resume``);
* they reach the arrays the search scores: each candidate's estimate and peak memory are the
  scalar ones of its plan (``estimate --plan``), and ``core_attn+mlp`` costs more time and
  less memory than the default ``core_attn``;
* selective recompute of more than ``core_attn`` is not "redundant" with FlashAttention;
* bad values exit 2 naming field, value and rule (a module the model or the stack lacks,
  a recompute mode other than selective, a stack with no selective recompute);
* (``flushes`` and ``microbatch_group_size``: tests/test_search_flushes.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.memory.arrays import peak_memory_arrays
from strategies.memory.scalar import peak_memory
from strategies.plan import parse_plan
from strategies.plan_arrays import RECOMPUTE_CODE, PlanArrays
from strategies.presets import model_preset
from strategies.search.fix_parse import FIX_KEYS, parse_fix
from strategies.search.plan_rows import plan_key
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset

DENSE, CL = model_preset("llama3-8b"), cluster_preset("dgx-h100", 1)
OPTS = dict(max_mbs=2, layouts=False)


def _space(text: str):
    return enumerate_space(DENSE, CL, 64, SpaceOptions(**OPTS, fixed=parse_fix(text)))


def test_parse_fix_reads_modules_in_module_order():
    assert parse_fix("recompute_modules=mlp+core_attn") == \
        {"recompute_modules": ("core_attn", "mlp")}
    assert parse_fix("recompute=selective,recompute_modules=layernorm/mlp") == \
        {"recompute": "selective", "recompute_modules": ("layernorm", "mlp")}
    assert "recompute_modules" in FIX_KEYS


def test_fixed_modules_are_carried_and_round_trip():
    sp = _space("recompute_modules=core_attn+mlp")
    assert sp.size > 0 and (sp.cols["rc"] == RECOMPUTE_CODE["selective"]).all()
    for i in range(0, sp.size, max(1, sp.size // 7)):
        p = sp.plan(i)
        assert p.recompute == "selective" and p.recompute_modules == ("core_attn", "mlp")
        key = plan_key(p)
        assert ",recompute_modules=core_attn+mlp" in key
        back = parse_plan(key)
        assert back == p and plan_key(back) == key
        make_job(DENSE, CL, p)


def test_fixed_modules_reach_the_estimate_and_memory():
    """The arrays the search scores price each candidate as the scalar estimate and memory
    model price its plan (what ``estimate --plan`` prints), and the modules matter: the same
    plans with the default ``core_attn`` (FlashAttention off, else they are redundant) run
    faster and hold more."""
    sp = enumerate_space(DENSE, CL, 64, SpaceOptions(**OPTS, fixed=parse_fix(
        "recompute_modules=core_attn+mlp,flash_attn=false")))
    rows = list(range(0, sp.size, max(1, sp.size // 6)))
    a = estimate_arrays(DENSE, CL, "bf16", sp.arrays)
    peaks = peak_memory_arrays(DENSE, sp.arrays, "bf16", None, CL.gpu)
    for i in rows:
        j = make_job(DENSE, CL, sp.plan(i))
        assert a["step_time_s"][i] == pytest.approx(estimate(j).step_time_s, rel=1e-12, abs=0)
        assert peaks[i] == pytest.approx(peak_memory(j)[1].total, rel=1e-12, abs=0)
        assert sp.peak_memory[i] == pytest.approx(peaks[i], rel=1e-12, abs=0)
        d = make_job(DENSE, CL, parse_plan(plan_key(sp.plan(i)).replace(
            ",recompute_modules=core_attn+mlp", "")))
        assert d.plan.recompute_modules is None
        assert estimate(d).step_time_s < estimate(j).step_time_s
        assert peak_memory(d)[1].total > peak_memory(j)[1].total


def test_more_than_core_attn_is_not_redundant_with_flash():
    """FlashAttention recomputes the scores already: selective ``core_attn`` with it is pruned
    as redundant from a free search, ``core_attn+mlp`` is not; a selective plan the user fixes
    (``recompute=selective``, ``recompute_modules=core_attn``) is kept: the search answers
    with it rather than with no plan."""
    free = enumerate_space(DENSE, CL, 64, SpaceOptions(**OPTS))
    sel = np.asarray(free.arrays.recompute) == RECOMPUTE_CODE["selective"]
    assert free.size > 0 and not (sel & np.asarray(free.arrays.flash_attn, dtype=bool)).any()
    assert free.pruned["redundant"] > 0
    for text in ("recompute_modules=core_attn", "recompute=selective"):
        sp = _space(text)
        assert sp.size > 0
        assert (np.asarray(sp.arrays.recompute) == RECOMPUTE_CODE["selective"]).all()
        assert np.asarray(sp.arrays.flash_attn, dtype=bool).all()
    assert _space("recompute_modules=core_attn+mlp").size > 0
    assert _space("recompute_modules=mlp").size > 0


def test_the_cli_search_carries_the_modules(capsys):
    import json
    argv = ["search", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch",
            "32", "--plan", "tp=2,pp=1,mbs=1,zero=1,sp=true,recompute_modules=mlp",
            "--top", "1", "--workers", "1", "--reference", "none", "--json"]
    assert main(argv) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["inputs"]["fixed"]["recompute_modules"] == ["mlp"]
    best = rep["plans"][0]
    assert best["key"].endswith(",recompute_modules=mlp") or \
        ",recompute_modules=mlp," in best["key"]
    assert best["plan"]["recompute"] == "selective"


@pytest.mark.parametrize("argv,words", [
    (["--fix", "recompute_modules=foo"],
     ["--fix='recompute_modules=foo'", "unknown module; valid: core_attn"]),
    (["--fix", "recompute=full,recompute_modules=mlp"],
     ["recompute_modules=mlp", "needs recompute=selective", "not recompute=full"]),
    (["--plan", "recompute=none,recompute_modules=mlp,gbs=64"],
     ["recompute_modules=mlp", "needs recompute=selective"]),
    (["--fix", "recompute_modules=moe"], ["recompute_modules=moe", "needs an MoE model",
                                          "llama3-8b has none"]),
    (["--fix", "recompute_modules=mlp", "--framework", "megatron-lm-2021"],
     ["recompute_modules=mlp", "megatron-lm-2021 recomputes the modules core_attn"]),
    (["--fix", "recompute_modules=mlp", "--framework", "pytorch-eager"],
     ["recompute_modules=mlp", "needs recompute=selective; pytorch-eager runs recompute"]),
])
def test_bad_values_exit_2(capsys, argv, words):
    assert main(["search", "--model", "llama3-8b", "--cluster", "dgx-h100:1", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err, err


def test_parse_fix_refuses_an_empty_module_list():
    with pytest.raises(SpecError) as e:
        parse_fix("recompute_modules=+")
    assert "recompute_modules" in str(e.value) and "at least one" in str(e.value)
