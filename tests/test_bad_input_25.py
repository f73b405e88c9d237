"""A hostile user's sweep of the inputs added since session 23's (tests/test_bad_input_sweep.py):
context parallelism's K/V exchanges (``cp_comm``, ``hierarchical_cp``) under every
``--framework`` and alias, per-module recomputation (``recompute_modules``), ``--fix`` and
``search``/``whatif --plan`` with them, plan files holding them at the wrong type, GPU
profile files that are not profiles, and the ``--match``/``--rows``/``--only`` filters of the
validation scripts. Each bad input exits 2 with one stderr line naming the field, the value and
the rule, no traceback, nothing on stdout or disk; a valid neighbour runs (exit 0).

The cases are enumerated from the code that owns each rule: the stacks' feature fields
(``FrameworkProfile.cp_comms``, ``cp_impl``, ``context_parallel``, ``recompute``,
``recompute_modules``: ``strategies.stacks.rules``), the values a field takes
(``plan.choices.CP_COMMS``, ``cost.recompute.MODULES``) and the parsers' kinds (``plan.parse.
coerce``). ``BROKEN``: answered otherwise before this sweep (a valid plan refused, a duplicate
taken silently, a rule that did not fit the value, exit 1 or 0 for a typo), each fixed where
its rule lives; the rest guard what already held. In process (``simulator.cli.main``): seconds.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli.common import resolve_job
from simulator.cli.main import build_parser, main
from strategies.cost.recompute import MODULES
from strategies.errors import SpecError
from strategies.framework import ALIASES, PROFILES, get_profile
from strategies.plan.choices import CP_COMMS, CP_IMPL_OF
from tests.cli_cases import refused_in_one_line

H1 = ["--model", "llama3-8b", "--cluster", "dgx-h100:1"]        # 32 heads, 8 KV heads
H4 = ["--model", "llama3-8b", "--cluster", "dgx-h100:4"]
DSV3 = ["--model", "deepseek-v3", "--cluster", "dgx-h100:8"]     # MoE, MLA, shared experts
SEARCH = ["search", *H1, "--global-batch", "16", "--workers", "1", "--top", "1"]
WHATIF = ["whatif", *H1, "--global-batch", "16", "--workers", "1", "--vary", "nodes=1,2"]
HIER = "cp=4,gbs=16,cp_comm=a2a+p2p,hierarchical_cp=2"
CLUSTER = ("gpu: {{profile: {p}}}\nnodes: 1\ngpus_per_node: 8\nintra_node_GBps: 450\n"
           "nics_per_node: 8\ninter_node_gbps: 400\n")


def _est(name, base, plan, words, *extra):
    return (name, ["estimate", *base, "--plan", plan, *extra], {}, words)


def _file(name, text, words, cmd=("estimate", *H1)):
    return (name, [*cmd, "--plan", "{d}/p.yaml"], {"p.yaml": text}, words)


def _profile(name, files, words):
    return (name, ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml", "--plan",
                   "tp=8,gbs=8"], files, words)


# (id, argv, files {name: text or bytes; a/x makes folder a}, words the one line must hold)
BROKEN = [
    # a module named twice was taken (stored once), where a key or a tier given twice is refused
    _est("modules-twice", H1, "gbs=8,recompute=selective,recompute_modules=core_attn,core_attn",
         ["recompute_modules='core_attn+core_attn'", "names core_attn twice"]),
    _file("modules-twice-yaml-list",
          "gbs: 8\nrecompute: selective\nrecompute_modules: [mlp, mlp]\n",
          ["recompute_modules='mlp+mlp'", "names mlp twice"]),
    ("fix-modules-twice", [*SEARCH, "--fix", "recompute=selective,recompute_modules=mlp+mlp"], {},
     ["--fix='recompute_modules=mlp+mlp'", "names mlp twice"]),
    ("search-plan-modules-twice", [*SEARCH, "--plan", "recompute=selective,recompute_modules="
                                   "mlp/mlp"], {},
     ["--plan='recompute_modules=mlp+mlp'", "names mlp twice"]),
    # a stack's refusal showed the modules as a Python tuple: recompute_modules=('mlp',)
    _est("stack-modules-as-given", H1, "gbs=8,recompute=selective,recompute_modules=core_attn,mlp",
         ["recompute_modules='core_attn+mlp'", "megatron-lm-2021 recomputes the modules "
          "core_attn"], "--framework", "megatron-lm"),
    # a2a+p2p's heads rule said cp_comm=a2a
    _est("hier-heads-named-as-a2a-p2p", H4, "cp=32,gbs=32,cp_comm=a2a+p2p,hierarchical_cp=16",
         ["hierarchical_cp=16", "cp_comm=a2a+p2p scatters attention heads", "8/1"]),
    # a --reference that does not parse did not name the flag (one that cannot run did)
    ("reference-does-not-parse", [*SEARCH, "--reference", "tp=x,gbs=16"], {},
     ["--reference='tp=x,gbs=16'", "tp='x'", "integer"]),
    ("reference-hier-not-dividing", [*SEARCH, "--reference",
                                     "cp=4,gbs=16,cp_comm=a2a+p2p,hierarchical_cp=4"], {},
     ["--reference='cp=4,gbs=16,cp_comm=a2a+p2p,hierarchical_cp=4'", "must divide cp=4"]),
    # a2a+p2p fixed on a cp without a size: the search ran, every row pruned by a rule
    # about the sequence length
    ("fix-a2a-p2p-cp-without-a-size", [*SEARCH, "--fix", "cp=2,cp_comm=a2a+p2p"], {},
     ["--fix='cp=2'", "1 < k < cp", "cp=2 has none"]),
    # hierarchical_cp, which every saved a2a+p2p plan holds, was no key a search could fix
    ("search-plan-hier-not-dividing", [*SEARCH, "--plan", "cp=4,cp_comm=a2a+p2p,"
                                       "hierarchical_cp=3"], {},
     ["--plan='hierarchical_cp=3'", "must divide cp=4"]),
    ("fix-hier-without-a2a-p2p", [*SEARCH, "--fix", "cp=4,hierarchical_cp=2"], {},
     ["--fix='hierarchical_cp=2'", "fix cp_comm=a2a+p2p with it"]),
    ("fix-hier-one", [*SEARCH, "--fix", "cp_comm=a2a+p2p,hierarchical_cp=1"], {},
     ["--fix='hierarchical_cp=1'", "must be >= 2"]),
    ("fix-hier-is-cp", [*SEARCH, "--fix", "cp=4,cp_comm=a2a+p2p,hierarchical_cp=4"], {},
     ["--fix='hierarchical_cp=4'", "must divide cp=4"]),
    ("whatif-plan-hier-not-dividing", [*WHATIF, "--plan", "cp=4,cp_comm=a2a+p2p,"
                                       "hierarchical_cp=3"], {},
     ["--plan='hierarchical_cp=3'", "must divide cp=4"]),
    # an empty reference file was refused as if --tiers had picked nothing
    ("validate-reference-empty-list", ["validate", "--no-sim", "--reference", "{d}/r.json"],
     {"r.json": "[]"}, ["--reference=", "r.json'", "holds no case (an empty list)"]),
]

HELD = [
    # cp_comm and hierarchical_cp as text
    _est("cp-comm-unknown", H1, "cp=2,gbs=8,cp_comm=bogus",
         ["cp_comm='bogus'", "p2p, all_gather, a2a, a2a+p2p"]),
    _est("cp-comm-allgather-spelling", H1, "cp=2,gbs=8,cp_comm=allgather",
         ["cp_comm='allgather'", "all_gather"]),
    _est("cp-comm-empty", H1, "cp=2,gbs=8,cp_comm=", ["cp_comm=''", "must be one of"]),
    _est("a2a-p2p-without-size", H1, "cp=4,gbs=8,cp_comm=a2a+p2p",
         ["cp_comm='a2a+p2p'", "needs hierarchical_cp"]),
    _est("hier-without-a2a-p2p", H1, "cp=4,gbs=8,cp_comm=a2a,hierarchical_cp=2",
         ["hierarchical_cp=2", "all-to-all size of cp_comm=a2a+p2p"]),
    _est("hier-without-cp-comm", H1, "cp=4,gbs=8,hierarchical_cp=2",
         ["hierarchical_cp=2", "cp_comm is None"]),
    *[_est(f"hier-{k}", H1, f"cp=4,gbs=8,cp_comm=a2a+p2p,hierarchical_cp={k}", words)
      for k, words in (("1", ["hierarchical_cp=1", "strictly between 1 and cp"]),
                       ("3", ["hierarchical_cp=3", "must divide cp=4"]),
                       ("4", ["hierarchical_cp=4", "k=cp is cp_comm=a2a"]),
                       ("0", ["hierarchical_cp=0", ">= 1"]),
                       ("-2", ["hierarchical_cp=-2", ">= 1"]),
                       ("x", ["hierarchical_cp='x'", "integer"]),
                       ("nan", ["hierarchical_cp='nan'", "integer"]),
                       ("9" * 40, ["hierarchical_cp=" + "9" * 40, "sanity limit"]))],
    _est("a2a-gqa-heads", ["--model", "llama3-8b", "--cluster", "dgx-h100:2"],
         "cp=16,gbs=16,cp_comm=a2a", ["cp=16", "cp_comm=a2a scatters", "KV heads 8/1"]),
    # recompute_modules as text, against the plan and against the model
    _est("modules-unknown", H1, "gbs=8,recompute=selective,recompute_modules=attn",
         ["recompute_modules='attn'", "unknown module", "core_attn"]),
    _est("modules-empty", H1, "gbs=8,recompute=selective,recompute_modules=+",
         ["recompute_modules=''", "must name at least one"]),
    _est("modules-without-selective", H1, "gbs=8,recompute=full,recompute_modules=mlp",
         ["recompute_modules='mlp'", "needs recompute=selective"]),
    _est("modules-without-recompute", H1, "gbs=8,recompute_modules=mlp",
         ["recompute_modules='mlp'", "not recompute=none"]),
    *[_est(f"modules-{m}-on-llama", H1, f"gbs=8,recompute=selective,recompute_modules={m}",
           [f"recompute_modules='{m}'", f"needs {what}", "llama3-8b has none"])
      for m, what in (("mla_up_proj", "multi-latent attention"), ("moe", "an MoE model"),
                      ("moe_act", "an MoE model"), ("shared_experts", "shared experts"))],
    # --fix
    ("fix-blank", [*SEARCH, "--fix", ""], {}, ["--fix=''", "is empty"]),
    ("fix-recompute-empty", [*SEARCH, "--fix", "recompute="], {},
     ["--fix='recompute='", "recompute must be one of"]),
    ("fix-cp-comm-unknown", [*SEARCH, "--fix", "cp_comm=bogus"], {},
     ["--fix='cp_comm=bogus'", "cp_comm must be one of"]),
    ("fix-cp-comm-empty", [*SEARCH, "--fix", "cp_comm="], {},
     ["--fix='cp_comm='", "cp_comm must be one of"]),
    ("fix-key-twice", [*SEARCH, "--fix", "cp_comm=a2a,cp_comm=p2p"], {},
     ["--fix='cp_comm'", "key given twice"]),
    ("fix-unknown-key-twice", [*SEARCH, "--fix", "k=v,k=w"], {},
     ["--fix='k=v'", "key one of"]),
    ("fix-modules-empty", [*SEARCH, "--fix", "recompute_modules="], {},
     ["--fix='recompute_modules='", "must name at least one"]),
    ("fix-modules-unknown", [*SEARCH, "--fix", "recompute_modules=bogus"], {},
     ["--fix='recompute_modules=bogus'", "unknown module"]),
    ("fix-modules-the-model-lacks", [*SEARCH, "--fix", "recompute_modules=mla_up_proj"], {},
     ["--fix='recompute_modules=mla_up_proj'", "llama3-8b has none"]),
    ("fix-modules-not-selective", [*SEARCH, "--fix", "recompute=full,recompute_modules=mlp"],
     {}, ["--fix='recompute_modules=mlp'", "needs recompute=selective"]),
    ("whatif-fix-cp-comm-unknown", [*WHATIF, "--fix", "cp_comm=bogus"], {},
     ["--fix='cp_comm=bogus'", "must be one of"]),
    # GPU profile files that are not profiles
    _profile("profile-a-folder", {"prof/x": "", "c.yaml": CLUSTER.format(p="prof")},
             ["gpu.profile=", "prof'", "is not a regular file"]),
    _profile("profile-whitespace", {"p.yaml": " \n", "c.yaml": CLUSTER.format(p="p.yaml")},
             ["gpu.profile=", "p.yaml'", "not nothing (an empty file)"]),
    _profile("profile-not-utf8", {"p.yaml": b"\xff\xfe", "c.yaml": CLUSTER.format(p="p.yaml")},
             ["gpu.profile=", "p.yaml'", "not UTF-8"]),
]


def _yaml_type_cases():
    """Each new plan field at each wrong kind of YAML value (``plan.parse.coerce``)."""
    bad = {"list": "[a2a]", "bool": "true", "float": "2.5", "negative": "-1", "zero": "0",
           "huge": "1000000000000000000000000000000", "nan": ".nan", "map": "{a: 1}"}
    rule = {"cp_comm": {k: "must be a string" for k in bad},
            "hierarchical_cp": {"list": "must be an integer", "bool": "must be an integer",
                                "float": "must be an integer", "negative": ">= 1",
                                "zero": ">= 1", "huge": "sanity limit",
                                "nan": "must be an integer", "map": "must be an integer"},
            "recompute_modules": {**{k: "must be module names" for k in bad},
                                  "list": "unknown module"}}
    given = {"cp_comm": "cp: 4\n", "hierarchical_cp": "cp: 4\ncp_comm: a2a+p2p\n",
             "recompute_modules": "recompute: selective\n"}
    out = []
    for key, rules in rule.items():
        for kind, text in bad.items():
            shown = {"list": "['a2a']", "bool": "True", "nan": "nan", "map": "{'a': 1}",
                     "huge": text}.get(kind, text)
            if key == "recompute_modules" and kind == "list":
                shown = "'a2a'"
            out.append(_file(f"yaml-{key}-{kind}", f"gbs: 8\n{given[key]}{key}: {text}\n",
                             [f"{key}={shown}", rules[kind]]))
    return out


CASES = BROKEN + HELD + _yaml_type_cases()


def _refused(tmp_path: Path, capsys, argv: list[str], files: dict | None = None) -> str:
    """``tests.cli_cases.refused_in_one_line``, and no Python tuple shown as a value."""
    err = refused_in_one_line(tmp_path, capsys, argv, files or {})
    assert "',)" not in err, err
    return err


def test_cases_are_distinct():
    assert len({c[0] for c in CASES}) == len(CASES) >= 70


@pytest.mark.parametrize("name,argv,files,words", CASES, ids=[c[0] for c in CASES])
def test_refused_in_one_line(tmp_path, capsys, name, argv, files, words):
    err = _refused(tmp_path, capsys, argv, files)
    for w in words:
        assert w in err, (w, err)


# --- every stack (and alias) x every new feature, from the stacks' own feature fields -------

STACKS = sorted(PROFILES) + ["torchtitan-compile"] + sorted(ALIASES)


def _exchange_runs(fw, comm: str) -> bool:
    """Whether stack ``fw`` runs K/V exchange ``comm`` as its profile states it: one a plan may
    choose (``cp_comms``) or its own way named in plan terms (``cp_impl``)."""
    return fw.context_parallel and (comm in fw.cp_comms or CP_IMPL_OF[comm] == fw.cp_impl)


def _module_runs(fw, module: str) -> bool:
    return "selective" in fw.recompute and module in fw.recompute_modules


def _job(argv: list[str]) -> None:
    """The job the CLI builds for ``argv`` (model, cluster, plan, stack: every rule), without
    the estimate."""
    resolve_job(build_parser(argv).parse_args(argv))


@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_each_exchange(tmp_path, capsys, stack):
    """A K/V exchange the stack runs builds; one it lacks is refused in one line naming the
    stack, the field and its value (or ``cp`` where the stack has no context parallelism)."""
    fw = get_profile(stack)
    for comm in CP_COMMS:
        plan = HIER if comm == "a2a+p2p" else f"cp=2,gbs=16,cp_comm={comm}"
        argv = ["estimate", *H1, "--plan", plan, "--framework", stack]
        if _exchange_runs(fw, comm):
            _job(argv)
            continue
        err = _refused(tmp_path, capsys, argv)
        assert f"{fw.name} " in err and "(choose another --framework" in err, err
        assert (f"cp_comm='{comm}'" if fw.context_parallel else "cp=") in err, err


@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_each_module(tmp_path, capsys, stack):
    """A recompute module the stack runs builds (on a model that has it); one it lacks, or
    selective recomputation it lacks, is refused in one line naming the stack and the field."""
    fw = get_profile(stack)
    for module in MODULES:
        base = H1 if module in ("core_attn", "layernorm", "mlp") else DSV3
        argv = ["estimate", *base, "--plan", f"gbs=64,recompute=selective,recompute_modules="
                f"{module}", "--framework", stack]
        if _module_runs(fw, module):
            _job(argv)
            continue
        err = _refused(tmp_path, capsys, argv)
        assert f"{fw.name} " in err and "(choose another --framework" in err, err
        assert ("recompute='selective'" if "selective" not in fw.recompute
                else f"recompute_modules='{module}'") in err, err


def test_the_matrix_holds_both_answers():
    """The two tests above are not vacuous: each feature is run by some stack, refused by
    another."""
    for feature, runs in ([(c, _exchange_runs) for c in CP_COMMS]
                          + [(m, _module_runs) for m in MODULES]):
        said = {runs(get_profile(s), feature) for s in STACKS}
        assert said == {True, False}, feature


# --- valid neighbours run ----------------------------------------------------------------

def _runs(capsys, argv: list[str]) -> dict:
    rc = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def test_valid_plans_are_not_refused(tmp_path, capsys):
    """Each feature valid: exit 0 (the refusals above are not over-eager)."""
    for plan, stack in (("cp=2,gbs=16,cp_comm=all_gather", "maxtext"),
                        ("cp=2,gbs=16,cp_comm=a2a", "megatron-bridge"),
                        (HIER, "megatron"),
                        ("gbs=8,recompute=selective,recompute_modules=core_attn,mlp", "jax-xla"),
                        ("gbs=8,recompute=selective,recompute_modules=CORE_ATTN", "megatron-lm")):
        _runs(capsys, ["estimate", *H1, "--plan", plan, "--framework", stack])
    # a float that is a whole number is taken for an integer field, as for every one
    (tmp_path / "p.yaml").write_text("cp: 4.0\ngbs: 16\ncp_comm: a2a+p2p\nhierarchical_cp: 2.0\n",
                                     encoding="utf-8")
    plan = _runs(capsys, ["estimate", *H1, "--plan", str(tmp_path / "p.yaml")])["inputs"]["plan"]
    assert (plan["cp"], plan["cp_comm"], plan["hierarchical_cp"]) == (4, "a2a+p2p", 2)


def test_saved_a2a_p2p_plan_reads_back_into_search_and_whatif(tmp_path, capsys):
    """``search --save-plan`` writes ``hierarchical_cp`` with ``cp_comm=a2a+p2p``; docs/cli.md
    "Plan files": every ``--plan`` reads such a file back, ``search`` and ``whatif`` fixing its
    keys (refused before: not a key a search can fix)."""
    saved = tmp_path / "best.yaml"
    assert main([*SEARCH, "--fix", "cp=8,cp_comm=a2a+p2p,hierarchical_cp=4", "--save-plan",
                 str(saved)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert "hierarchical_cp: 4" in saved.read_text(encoding="utf-8")
    rep = _runs(capsys, [*SEARCH, "--plan", str(saved)])
    assert rep["plans"] and all(p["key"].endswith("cp_comm=a2a+p2p,hierarchical_cp=4")
                                for p in rep["plans"]), [p["key"] for p in rep["plans"]]
    rep = _runs(capsys, ["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100:1",
                         "--workers", "1", "--vary", "nodes=1,2", "--plan", str(saved)])
    assert "cp8:a2a4+p2p" in json.dumps(rep)


def test_search_reads_a_plan_file_as_estimate_does(tmp_path, capsys):
    """A plan file's ``null`` (the key not given) and whole ``2.0`` (an integer) are read by
    ``search --plan`` as by ``estimate --plan`` (``plan.parse.coerce``; was: ``--plan=
    'cp_comm=none': cp_comm must be one of ...``, ``--plan='hierarchical_cp=2.0': must be an
    integer``, ``--plan=None: must be module names``)."""
    p = tmp_path / "p.yaml"
    for text, tail in (("cp: 4\ncp_comm: null\ngbs: 16.0\n", "cp=4,ep=1"),
                       ("cp: 4.0\ncp_comm: a2a+p2p\nhierarchical_cp: 2.0\n",
                        "cp_comm=a2a+p2p,hierarchical_cp=2"),
                       ("recompute: selective\nrecompute_modules: null\n", "recompute=selective")):
        p.write_text(text, encoding="utf-8")
        _runs(capsys, ["estimate", *H1, "--plan", str(p), "--global-batch", "16"])
        rep = _runs(capsys, [*SEARCH, "--plan", str(p)])
        assert rep["plans"] and all(tail in x["key"] for x in rep["plans"]), text
    p.write_text("tp: 2.5\n", encoding="utf-8")
    assert main([*SEARCH, "--plan", str(p)]) == 2
    assert "--plan='tp=2.5': must be an integer" in capsys.readouterr().err


def test_modules_joined_by_commas_in_search(capsys):
    """``recompute_modules=core_attn,mlp`` reads as one list in ``search --plan`` and ``--fix``,
    as in every other ``--plan`` (was: ``--plan='mlp': each item must be key=value``)."""
    for flag in ("--plan", "--fix"):
        rep = _runs(capsys, [*SEARCH, flag, "recompute=selective,recompute_modules=core_attn,mlp"])
        assert all("recompute_modules=core_attn+mlp" in p["key"] for p in rep["plans"])
    with pytest.raises(SpecError, match="each item must be key=value"):
        from strategies.search.fix_parse import parse_fix
        parse_fix("tp=2,mlp")               # a name after any other key is still refused


# --- the validation scripts' filters ---------------------------------------------------------

@pytest.mark.parametrize("script,argv,words", [
    ("doc_commands", ["--list", "--only", "nope.md"], ["--only='nope.md'", "not one of the docs"]),
    ("doc_commands", ["--list", "--match", "zzz-no-such-command"],
     ["--match='zzz-no-such-command'", "no command of the docs holds it"]),
    ("doc_commands", ["--list", "--match", " "], ["--match=' '", "is empty"]),
    ("reference_mape", ["--rows", "zzz-no-such-run"],
     ["--rows='zzz-no-such-run'", "matches no run id"]),
    ("reference_mape", ["--rows", ""], ["--rows=''", "is empty"]),
    ("attention_in_situ", ["--match", "(mosaic"], ["--match='(mosaic'",
                                                   "is not a regular expression"]),
    ("gemm_in_situ", ["--match", "^zzz"], ["--match='^zzz'", "matches no run id"]),
], ids=["doc-only-unknown", "doc-match-none", "doc-match-blank", "rows-none", "rows-blank",
        "in-situ-bad-regex", "in-situ-match-none"])
def test_script_filters_refused_in_one_line(capsys, script, argv, words):
    """A filter that is blank, not a pattern, or matches nothing exits 2 in one line before
    anything runs (was: exit 0 with an empty table, exit 1, or a traceback)."""
    import importlib
    mod = importlib.import_module(f"experiments.{script}")
    with pytest.raises(SystemExit) as e:
        mod.main(argv)
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "", out
    assert err.startswith(f"{script}: error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, (w, err)
