"""``search --fix hierarchical_context_parallel_sizes=[k,cp/k]``: read by the plans' own reading
(``plan.parse.read_hierarchical_sizes``) as ``hierarchical_cp=k``, as a plan file and
``--plan`` read it; refused on ``--fix`` naming the key where a plan refuses it."""
from __future__ import annotations

import pytest

from simulator.cli.search import plan_fix
from strategies.errors import SpecError
from strategies.plan import parse_plan
from strategies.search.fix_parse import parse_fix
from tests.fuzz_profile import run_cli

HIER = {"cp": 8, "cp_comm": "a2a+p2p", "hierarchical_cp": 2}


@pytest.mark.parametrize("sizes", ["[2,4]", "[2, 4]", "2/4", "2,4", "2 4"])
def test_fix_reads_the_sizes_as_a_plan_does(sizes: str) -> None:
    text = f"cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes={sizes}"
    assert parse_fix(text) == HIER
    assert parse_fix("cp=8,cp_comm=a2a+p2p,hierarchical_cp=2") == HIER
    assert plan_fix(text + ",gbs=8") == (HIER, 8)
    assert parse_plan(text + ",gbs=8").hierarchical_cp == 2


def test_fix_sizes_fix_cp_where_it_is_not() -> None:
    """Megatron-LM asserts ``context_parallel_size`` is the sizes' product: without ``cp``
    fixed, the sizes fix it; other keys are kept."""
    assert parse_fix("cp_comm=a2a+p2p,hierarchical_context_parallel_sizes=4/2,tp=2") == \
        {"cp_comm": "a2a+p2p", "hierarchical_cp": 4, "tp": 2, "cp": 8}


@pytest.mark.parametrize("text, words", [
    ("cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes=[2,2]", "not cp=8"),
    ("cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes=[2,2,2]", "two sizes"),
    ("cp=8,hierarchical_context_parallel_sizes=[2,4]", "read with cp_comm=a2a+p2p"),
    ("cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes=[2,x]", "integer"),
    ("cp=8,cp_comm=a2a+p2p,hierarchical_cp=2,hierarchical_context_parallel_sizes=[2,4]",
     "key given twice"),
])
def test_fix_refusals_name_the_key(text: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_fix(text)
    assert e.value.field == "--fix" and words in str(e.value)


def test_search_cli_takes_the_sizes() -> None:
    """Through ``paraplan search``: the sizes run (the ranked plans are ``cp8:a2a2+p2p``, the
    all-to-all over 2 ranks), a bad pair exits 2 with one line naming the key."""
    base = ["search", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch",
            "8", "--seq-len", "32768", "--framework", "megatron-core", "--top", "2", "--fix"]
    rc, out, err = run_cli(base + ["cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes"
                                   "=[2,4]"])
    assert rc == 0, err
    assert "cp8:a2a2+p2p" in out and "cp8:a2a4" not in out
    rc, _, err = run_cli(base + ["cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes"
                                 "=[2,2]"])
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "hierarchical_context_parallel_sizes=[2,2]" in err and "not cp=8" in err
