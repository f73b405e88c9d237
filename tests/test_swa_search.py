"""Windowed attention in a search with no stack named, Llama 4's chunked windows under
context parallelism, and Megatron's ``hierarchical_context_parallel_sizes`` in a plan
(docs/search.md, docs/cli.md; ``stacks.cp_windows``, ``search.axes.cp_exchanges``,
``plan.parse.hierarchical_cp_of``)."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import numpy as np
import pytest

from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.hf_config import model_from_hf
from strategies.plan import parse_plan
from strategies.plan.choices import CP_COMMS
from strategies.plan_file import read_plan_file
from strategies.presets import model_preset
from strategies.search.axes import cp_exchanges
from strategies.search.fix_parse import parse_fix
from strategies.search.recommend import Without, exchange_sentence
from strategies.search.space import SpaceOptions, enumerate_space
from strategies.stacks.cp_windows import own_exchange_refusal, runnable_comms
from tests.fuzz_profile import run_cli
from topologies.cluster import cluster_preset

AG, A2A, HIER = (1 + CP_COMMS.index(c) for c in ("all_gather", "a2a", "a2a+p2p"))
#: a 4096-token sliding window on every other layer, no sinks
WIN = replace(model_preset("llama3-8b"), name="llama3-8b-w4096", sliding_window=4096,
              global_attention_every=2).with_seq_length(32768)
OSS = model_preset("gpt-oss-120b").with_seq_length(32768)
DENSE = model_preset("llama3-8b").with_seq_length(32768)
L4_PATH = "tests/data/hf/llama4_scout.json"


def _llama4():
    with open(L4_PATH) as f:
        return model_from_hf(json.load(f)).with_seq_length(65536)


def test_no_stack_adds_only_the_exchanges_that_run_the_model() -> None:
    """No stack named: the default's own ring alone where it runs the model (a full-attention
    model: the space of earlier releases), else the ``--cp-comm-type`` exchanges Transformer
    Engine runs it over: a sliding window all_gather and a2a, gpt-oss's sinks a2a, Llama 4's
    chunked windows none; a fixed exchange adds none."""
    assert cp_exchanges({}, None, DENSE) == [] and cp_exchanges({}, None) == []
    assert cp_exchanges({}, None, WIN) == [AG, A2A]
    assert cp_exchanges({}, None, OSS) == [A2A]
    assert cp_exchanges({}, None, _llama4()) == []
    assert cp_exchanges({"cp_comm": "a2a"}, None, OSS) == []
    # a named stack explores what it lists, whatever the model
    assert cp_exchanges({}, get_profile("megatron-core"), DENSE) == [AG, A2A, HIER]


@pytest.mark.parametrize("model, gpus, allowed", [(WIN, 1, {AG, A2A}), (OSS, 8, {A2A})])
def test_search_keeps_cp_rows_with_no_stack(model, gpus, allowed) -> None:
    """With cp fixed at 2 and no stack named the space keeps plans (before: none, every row
    over the ring pruned by ``cp_seq``), each over an exchange that runs the model, and every
    plan passes ``make_job`` with no framework."""
    cl = cluster_preset("dgx-h100", gpus)
    sp = enumerate_space(model, cl, 64, SpaceOptions(max_mbs=1, layouts=False,
                                                     fixed=parse_fix("cp=2")))
    assert sp.size > 0 and (sp.cols["cp"] == 2).all()
    assert set(sp.cols["cpc"].tolist()) == allowed
    for i in range(0, sp.size, max(1, sp.size // 5)):
        make_job(model, cl, sp.plan(i))


def test_search_without_cp_fixed_keeps_dense_space() -> None:
    """A full-attention model's space with no stack named has no exchange column (the
    README search's space is unchanged)."""
    sp = enumerate_space(DENSE, cluster_preset("dgx-h100", 1), 64,
                         SpaceOptions(max_mbs=1, layouts=False))
    assert "cpc" not in sp.cols and (sp.cols["cp"] > 1).any()


def test_own_exchange_refusal_names_why() -> None:
    fw = get_profile(None)
    assert own_exchange_refusal(DENSE, fw) is None
    oss = own_exchange_refusal(OSS, fw)
    assert oss.startswith("megatron-core's own exchange, cp_comm=p2p (Transformer Engine's "
                          "ring), cannot run gpt-oss-120b's sliding-window layers")
    assert oss.endswith("over cp_comm=a2a only")
    assert own_exchange_refusal(WIN, fw).endswith("over cp_comm=all_gather or a2a only")
    assert own_exchange_refusal(_llama4(), fw).endswith("over no exchange")
    assert runnable_comms(DENSE, fw) == list(CP_COMMS)


def test_exchange_sentence_says_why() -> None:
    p = parse_plan("cp=2,ep=8,gbs=64,cp_comm=a2a")
    why = own_exchange_refusal(OSS, get_profile(None))
    s = exchange_sentence(p, 6.0, None, "ring", why)
    assert s == ("K/V exchange (cp_comm a2a: Q, K, V and O all-to-all'd over the 2 CP ranks), "
                 f"chosen because {why}")
    s = exchange_sentence(p, 6.0, Without("cp_comm", None, None, False), "ring", why)
    assert s.endswith(f"chosen because {why}: no feasible plan with context parallelism runs "
                      "another exchange")


def test_search_recommendation_through_the_cli(tmp_path) -> None:
    """``paraplan search`` over a windowed model with no stack: a plan with cp 2 over
    all_gather or a2a, the recommendation saying why its exchange."""
    spec = dataclasses.asdict(WIN)
    path = tmp_path / "win.json"
    path.write_text(json.dumps({k: v for k, v in spec.items() if v is not None}))
    rc, out, err = run_cli(["search", "--model", str(path), "--cluster", "dgx-h100:1",
                            "--global-batch", "16", "--fix", "cp=2,tp=1,pp=1", "--max-mbs",
                            "1", "--top", "2", "--json"])
    assert rc == 0, err
    rec = json.loads(out)["recommended"]
    assert rec["plan"]["cp"] == 2 and rec["plan"]["cp_comm"] in ("all_gather", "a2a")
    said = [w for w in rec["why"] if w.startswith("K/V exchange")]
    assert len(said) == 1 and "chosen because megatron-core's own exchange, cp_comm=p2p" in \
        said[0]


@pytest.mark.parametrize("plan, fw, words", [
    ("cp=2,ep=16,gbs=64", None, ["cp=2:", "megatron-core", "chunked-window layers (window "
                                 "8192)", "cp_comm=p2p", "Llama4SelfAttention",
                                 "no stack modelled here runs it"]),
    ("cp=2,ep=16,gbs=64,cp_comm=a2a", None, ["cp_comm='a2a'", "over cp_comm=a2a",
                                             "Transformer Engine's window_size cannot"]),
    ("cp=2,ep=16,gbs=64,cp_comm=all_gather", "nemo", ["cp_comm='all_gather'", "nemo",
                                                      "the K/V all-gather"]),
    ("cp=2,ep=16,gbs=64", "jax-xla", ["jax-xla", "MaxText"]),
])
def test_llama4_chunked_refused_under_cp(plan: str, fw, words: list[str]) -> None:
    argv = ["estimate", "--model", L4_PATH, "--cluster", "dgx-h100:8", "--seq-len", "65536",
            "--plan", plan] + (["--framework", fw] if fw else [])
    rc, _, err = run_cli(argv)
    assert rc == 2 and len(err.strip().splitlines()) == 1, (rc, err)
    for w in words:
        assert w in err, (w, err)


def test_llama4_runs_at_cp_1() -> None:
    make_job(_llama4(), cluster_preset("dgx-h100", 8), parse_plan("ep=16,gbs=64"))


def test_llama4_search_keeps_no_cp_rows() -> None:
    """The mask is the check: a search over Llama 4 keeps no row with cp > 1, with no stack
    named as under Megatron-Core."""
    m, cl = _llama4().with_seq_length(16384), cluster_preset("dgx-h100", 8)
    for fw in (None, get_profile("megatron-core")):
        sp = enumerate_space(m, cl, 64, SpaceOptions(max_mbs=1, layouts=False,
                                                     fixed=parse_fix("ep=16")),
                             framework=fw)
        assert sp.size > 0 and (sp.cols["cp"] == 1).all() and sp.pruned["cp_seq"] > 0


@pytest.mark.parametrize("text, k", [("[2, 4]", 2), ("'4/2'", 4), ("'2 4'", 2)])
def test_hierarchical_sizes_in_a_plan_file(tmp_path, text: str, k: int) -> None:
    """Megatron's ``hierarchical_context_parallel_sizes: [k, cp/k]`` is ``hierarchical_cp=k``
    (the all-to-all over the first level's consecutive ranks)."""
    path = tmp_path / "p.yaml"
    path.write_text("context_parallel_size: 8\ncp_comm_type: a2a+p2p\n"
                    f"hierarchical_context_parallel_sizes: {text}\ngbs: 8\n")
    plan, _ = read_plan_file(str(path))
    assert plan.cp == 8 and plan.cp_comm == "a2a+p2p" and plan.hierarchical_cp == k
    assert plan == parse_plan(f"cp=8,cp_comm=a2a+p2p,hierarchical_cp={k},gbs=8")


def test_hierarchical_sizes_as_plan_text() -> None:
    assert parse_plan("cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes=2,4"
                      ).hierarchical_cp == 2


@pytest.mark.parametrize("plan, words", [
    ("cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes=2/2", ["multiply to 4, not cp=8"]),
    ("cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes=2/2/2", ["two sizes"]),
    ("cp=8,hierarchical_context_parallel_sizes=2/4", ["read with cp_comm=a2a+p2p"]),
    ("cp=8,cp_comm=p2p,hierarchical_context_parallel_sizes=2/4", ["read with cp_comm=a2a+p2p"]),
    ("cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes=1/8", ["strictly between"]),
    ("cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes=x/4", ["integer"]),
    ("cp=8,cp_comm=a2a+p2p,hierarchical_cp=2,hierarchical_context_parallel_sizes=2/4",
     ["key given twice"]),
])
def test_hierarchical_sizes_refused(plan: str, words: list[str]) -> None:
    with pytest.raises(SpecError) as e:
        parse_plan(plan)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_hierarchical_sizes_refused_through_the_cli(tmp_path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("cp: 8\ncp_comm: a2a+p2p\nhierarchical_context_parallel_sizes: [2, 2]\n"
                    "gbs: 8\n")
    rc, _, err = run_cli(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1",
                          "--plan", str(path)])
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "hierarchical_context_parallel_sizes=[2, 2]" in err and "not cp=8" in err


def test_hierarchical_sizes_in_a_search_plan(tmp_path) -> None:
    """``search --plan FILE`` reads the key as every ``--plan`` does: ``hierarchical_cp``
    fixed; refused (exit 2, the key named) where the sizes do not multiply to ``cp``."""
    from simulator.cli.search import plan_fix
    path = tmp_path / "p.yaml"
    path.write_text("cp: 8\ncp_comm_type: a2a+p2p\nhierarchical_context_parallel_sizes: [4, 2]\n"
                    "gbs: 8\n")
    fixed, gbs = plan_fix(str(path))
    assert fixed["hierarchical_cp"] == 4 and fixed["cp"] == 8 and gbs == 8
    assert plan_fix("cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes=2,4")[0][
        "hierarchical_cp"] == 2
    rc, _, err = run_cli(["search", "--model", "llama3-8b", "--cluster", "dgx-h100:1",
                          "--plan", "cp=8,cp_comm=a2a+p2p,hierarchical_context_parallel_sizes"
                          "=2/2,gbs=8"])
    assert rc == 2 and "hierarchical_context_parallel_sizes=2/2" in err and "not cp=8" in err


def test_no_stack_rows_estimate_equal_to_their_keys() -> None:
    """With no stack named, the exchanges the space adds for a windowed model are priced as
    ``estimate`` prices each plan (no framework), step and peak to 1e-9."""
    from strategies.estimate.analytic import estimate_arrays
    from strategies.estimate.scalar import estimate
    cl = cluster_preset("dgx-h100", 1)
    sp = enumerate_space(WIN, cl, 16, SpaceOptions(max_mbs=1, layouts=False,
                                                   fixed=parse_fix("cp=4")))
    codes = sp.cols["cpc"]
    assert set(codes.tolist()) == {AG, A2A}
    a = estimate_arrays(WIN, cl, "bf16", sp.arrays)
    for c in (AG, A2A):
        for i in np.flatnonzero(codes == c)[::7][:4].tolist():
            e = estimate(make_job(WIN, cl, sp.plan(i)))
            assert a["step_time_s"][i] == pytest.approx(e.step_time_s, rel=1e-9, abs=0)
            assert sp.peak_memory[i] == pytest.approx(e.memory.total, rel=1e-9, abs=0)
