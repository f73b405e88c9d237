"""Input bugs of the third fuzzing round (tests/test_fuzz_inputs2.py left two; the rest were
found by fuzzing the plan switches, ``--fix``, ``--framework``, MoE config.json fields, GPU
profile files, ``paraplan calibrate``, ``validate --reference`` and output paths).

Each test holds one refusal to the input rule (tests/fuzz_profile.py ``cli``): exit 2, one
line on stderr naming the field, the value and the rule, no traceback, no output file left.
"""
from __future__ import annotations

import json

import pytest
import yaml

from tests.fuzz_profile import cli

BASE = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--global-batch", "16"]


def refused(argv: list[str], *words: str, outputs: tuple[str, ...] = ()) -> str:
    """``paraplan argv`` exits 2 with one line holding every one of ``words``."""
    rc, _, e = cli(argv, outputs)
    assert rc == 2, (argv, e)
    for w in words:
        assert w in e, (w, e)
    return e


# ----------------------------------------------------------------- left by fuzz2

@pytest.mark.parametrize("degrade,k", [("plane:0=4", "0,1"), ("plane:0=1.5", "0,1")])
def test_whatif_failed_planes_over_a_degraded_plane(degrade, k):
    """``--vary failed_planes=1 --degrade plane:0=4``: the variant's failure replaced the
    degrade given without a word. A degraded plane among the failed ones is refused; one
    above them composes (plane 0 failed and plane 1 at 1/4)."""
    refused(["whatif", "--model", "gpt-1.7b", "--cluster", "dgx-b300-2plane:2",
             "--global-batch", "16", "--fix", "tp=8,pp=1", "--workers", "1",
             "--vary", f"failed_planes={k}", "--degrade", degrade],
            "--vary failed_planes=", degrade.split("=")[0], "already degraded")
    from simulator.studies.whatif_variants import apply_cluster
    from topologies.cluster import parse_cluster_arg
    from topologies.faults import Faults
    c = parse_cluster_arg("dgx-b300-2plane:2").with_faults(Faults.from_texts([], ["plane:1=4"]))
    assert apply_cluster(c, "failed_planes", 1).faults.degraded == (
        ("plane:0", 1e6), ("plane:1", 4.0))
    assert apply_cluster(c, "failed_planes", 0) is c


@pytest.mark.parametrize("items,word", [("memory,memory", "given twice"),
                                        ("Memory, memory", "given twice"),
                                        ("memory,,links", "empty"), ("links,", "empty")])
def test_timeline_detail_repeated_or_empty(tmp_path, items, word):
    """``--timeline-detail memory,memory`` (and an empty item) was accepted: a repeat is a
    typo, not a choice."""
    out = str(tmp_path / "t.svg")
    refused(["simulate", *BASE, "--plan", "tp=1,mbs=1", "--timeline", out,
             "--timeline-detail", items], "--timeline-detail=", word, outputs=(out,))


@pytest.mark.parametrize("tiers,word", [("1,1", "given twice"), ("2, 1,2", "given twice"),
                                        ("1,,2", "integers"), ("\uff11", "integers"),
                                        ("1_0", "integers"), ("0", ">= 1")])
def test_validate_tiers_repeated_or_not_ascii(tiers, word):
    """``--tiers 1,1`` ran tier 1 once without a word; ``--tiers １`` (full width) and
    ``1_0`` were read by ``int()`` as tiers 1 and 10."""
    refused(["validate", "--no-sim", "--tiers", tiers], "--tiers=", word)


def test_validate_tiers_parsed():
    from simulator.cli.validate import parse_tiers
    assert parse_tiers(" 2, 1") == (1, 2) and parse_tiers("ALL") is None


@pytest.mark.parametrize("refs,word", [(["tp=2,pp=1,mbs=1", "pp=1, mbs=1,tp=2"], "same plan"),
                                       (["tp=2,mbs=1", "tp=2,mbs=1"], "same plan"),
                                       (["none", "tp=2,mbs=1"], "'none'")])
def test_search_reference_repeated(refs, word):
    """``--reference tp=2,pp=1 --reference pp=1,tp=2`` simulated one plan twice and listed it
    twice."""
    argv = ["search", *BASE, "--fix", "tp=2,pp=1,mbs=1", "--workers", "1"]
    for r in refs:
        argv += ["--reference", r]
    refused(argv, "--reference=", word)
