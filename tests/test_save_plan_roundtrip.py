"""Every plan ``search --save-plan`` writes reads back (docs/cli.md, "Plan files"): a search's
winner saved, then ``search --plan FILE`` fixes each key the file holds and returns the same
plan at the same step time (bit for bit: the one plan is simulated again), ``whatif --plan
FILE`` and ``estimate --plan FILE`` read it. The winners are steered (``--fix``) to hold each
key the writer emits beyond the always-written ones (``plan_file.ALWAYS``): an uneven layout
(first/last-stage layers, with 1F1B and interleaved; the embedding and loss slots), partial
recomputation (``recompute_layers``, ``recompute_method`` block and uniform), selective
modules, a2a+p2p with its size under a named stack (``framework`` kept), ZeRO-3, and ``ep`` /
``etp`` on a MoE preset. The keys a search holds no column for (a layout string, per-stage
layers, per-group micro-batches) and a half-given slot layout are refused in one line naming
the key, its value and what to run instead. In process (``simulator.cli.main``): seconds.
"""
from __future__ import annotations

import json

import pytest
import yaml

from simulator.cli.main import main
from tests.cli_cases import refused_in_one_line

H1 = ["--model", "llama3-8b", "--cluster", "dgx-h100:1", "--global-batch", "16"]
GPT = ["--model", "gpt-3.6b", "--cluster", "dgx-h100:1", "--global-batch", "16"]   # 30 layers
MIXTRAL = ["--model", "mixtral-8x7b", "--cluster", "dgx-h100:2", "--global-batch", "16"]
RUN = ["--workers", "1", "--top", "1", "--json"]

# (id, job argv, --fix steering the winner, {key: value} the saved file must hold)
CASES = [
    ("first-last-1f1b", H1, "pp=4,schedule=1f1b",
     {"first_stage_layers": 8, "last_stage_layers": 6}),
    ("first-last-interleaved", H1, "pp=4,schedule=interleaved:2",
     {"vpp": 2, "first_stage_layers": 8, "last_stage_layers": 4}),
    ("slots", GPT, "pp=4,schedule=interleaved",
     {"account_embedding": True, "account_loss": True}),
    ("recompute-layers", H1, "recompute=full,tp=2,pp=1",
     {"recompute": "full", "recompute_layers": 3}),
    ("recompute-uniform", H1, "recompute_layers=2,recompute_method=uniform,tp=2,pp=1",
     {"recompute_layers": 2, "recompute_method": "uniform"}),
    ("selective-modules", H1, "recompute=selective,recompute_modules=core_attn+mlp,tp=2",
     {"recompute_modules": ["core_attn", "mlp"]}),
    ("a2a-p2p-megatron-core", [*H1, "--framework", "megatron-core"],
     "cp=4,cp_comm=a2a+p2p,hierarchical_cp=2",
     {"cp": 4, "cp_comm": "a2a+p2p", "hierarchical_cp": 2, "framework": "megatron-core"}),
    ("zero3", H1, "zero=3,tp=2", {"zero": 3}),
    ("moe-ep-etp", MIXTRAL, "ep=8,etp=1,pp=2", {"ep": 8, "etp": 1}),
]


def _run(capsys, argv: list[str]) -> dict:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.parametrize("job,fix,holds", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_saved_winner_reads_back(tmp_path, capsys, job, fix, holds):
    saved = tmp_path / "best.yaml"
    first = _run(capsys, ["search", *job, "--fix", fix, *RUN, "--save-plan", str(saved)])
    data = yaml.safe_load(saved.read_text(encoding="utf-8"))
    assert {k: data.get(k) for k in holds} == holds, data
    again = _run(capsys, ["search", *job, *RUN, "--plan", str(saved)])
    a, b = first["recommended"], again["recommended"]
    assert (b["key"], b["step_time_s"]) == (a["key"], a["step_time_s"])
    # the file's keys fixed: only that plan (and the switches it leaves to the stack) passes
    assert all(p["key"] == a["key"] for p in again["plans"]), [p["key"] for p in again["plans"]]
    model_cluster = [x for x in job if x != "--global-batch" and x != "16"]
    _run(capsys, ["whatif", *model_cluster, "--workers", "1", "--vary", "nodes=1,2",
                  "--plan", str(saved), "--json"])
    est = _run(capsys, ["estimate", *model_cluster, "--plan", str(saved), "--json"])
    assert all(est["inputs"]["plan"].get(k) == v for k, v in holds.items()
               if k not in ("framework", "recompute_modules")), est["inputs"]["plan"]


# (id, plan file text, words the one line must hold)
REFUSED = [
    ("layout-string", "pp: 2\ngbs: 16\nlayout: Et*16|t*16L\n",
     ["layout=Et*16|t*16L", "not a key a search can fix", "estimate --plan FILE"]),
    ("layers-per-stage", "pp: 2\ngbs: 16\nlayers_per_stage: [15, 17]\n",
     ["layers_per_stage", "not a key a search can fix", "estimate --plan FILE"]),
    ("group-microbatches", "gbs: 16\ngroup_microbatches: [8, 8]\n",
     ["group_microbatches", "not a key a search can fix", "estimate --plan FILE"]),
    ("embedding-slot-alone", "pp: 4\ngbs: 16\naccount_embedding: true\n",
     ["account_embedding=true", "together", "estimate --plan FILE"]),
    ("slots-and-first-stage", "pp: 4\ngbs: 16\naccount_embedding: true\naccount_loss: true\n"
     "first_stage_layers: 6\n", ["account_embedding=true", "two layouts"]),
    ("method-without-layers", "gbs: 16\nrecompute: full\nrecompute_method: uniform\n",
     ["recompute_method=uniform", "needs recompute_layers"]),
    ("layers-not-full", "gbs: 16\nrecompute: selective\nrecompute_layers: 2\n",
     ["recompute_layers=2", "needs recompute=full"]),
]


@pytest.mark.parametrize("text,words", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_search_refuses_what_it_cannot_fix(tmp_path, capsys, text, words):
    line = refused_in_one_line(tmp_path, capsys, ["search", *H1[:4], "--workers", "1",
                                                  "--plan", "{d}/p.yaml"], {"p.yaml": text})
    assert all(w in line for w in words), line


def test_fixed_recompute_layers_bounded_by_the_largest_chunk(capsys):
    """A fixed ``recompute_layers`` is at most the layers of a row's largest chunk (``job``'s
    rule, read by ``prune_rules.fixed_mask``): llama3-8b (32 layers) at pp=4 holds 8 per rank
    evenly, 9 on the middle ranks of the uneven candidate (first 8, last 6), none 10."""
    rep = _run(capsys, ["search", *H1, "--fix", "pp=4,recompute_layers=9", "--workers", "1",
                        "--top", "3", "--json"])
    assert rep["plans"] and all("recompute_layers=9,recompute_method=block" in p["key"]
                                and "first_stage_layers=8,last_stage_layers=6" in p["key"]
                                for p in rep["plans"]), [p["key"] for p in rep["plans"]]
    assert main(["search", *H1, "--workers", "1", "--fix", "pp=4,recompute_layers=10"]) == 2
    assert "pruned by rule fixed" in capsys.readouterr().err
