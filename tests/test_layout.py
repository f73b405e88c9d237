"""Pipeline layouts (strategies.layout): Megatron-LM's layout grammar, the NeMo 405B recipe's
embedding and loss slots, first/last stage layers, and per-chunk costs by layer kind."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from strategies.cost import flop_counts, param_counts
from strategies.cost.stage import chunk_layers, chunk_sum, stage_costs
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.layout import build_layout, parse_layout
from strategies.layout.grammar import layout_text
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.schedules.analysis import simulate_free_comm
from tests.fuzz_profile import run_cli
from topologies.cluster import cluster_preset

ROOT = Path(__file__).resolve().parents[1]
A100x2 = cluster_preset("dgx-a100", 2)


def job(model: str, cluster, plan: str):
    m = model if not isinstance(model, str) else model_preset(model)
    return make_job(m, cluster, parse_plan(plan))


def small_deepseek():
    """DeepSeek-V3's layer shapes on 8 layers (2 dense first) with one MTP module."""
    return replace(model_preset("deepseek-v3"), name="ds-small", num_layers=8,
                   first_k_dense_replace=2, vocab_size=32000, seq_length=1024)


# ----------------------------------------------------------------------------- grammar

def test_megatron_documented_example():
    """Megatron's docs: DeepSeek-V3 (61 layers, one MTP) on pp 16, vpp 2."""
    st = parse_layout("Et*3|(tt|)*29,m|L")
    assert len(st) == 32
    assert st[0] == ("E", "t", "t", "t") and st[30] == ("m",) and st[31] == ("L",)
    assert sum(s.count("t") for s in st) == 61


@pytest.mark.parametrize("text,stages", [
    ("E|t|L", (("E",), ("t",), ("L",))),
    ("Et,t|t*2L", (("E", "t", "t"), ("t", "t", "L"))),
    ("(|t)*2", ((), ("t",), ("t",))),                 # Megatron: (|ab)*2 -> |ab|ab
    ("((t|)*2E)*2", (("t",), ("t",), ("E", "t"), ("t",), ("E",))),   # nested groups
    ("Et|*2L", (("E", "t"), (), ("L",))),            # a repeated separator
])
def test_grammar(text, stages):
    assert parse_layout(text) == stages


@pytest.mark.parametrize("text", ["Et*3|(tt|)*29,m|L", "Et|(t*2|)*62,tL", "E|t|t|L",
                                  "Ettt|tt|mL"])
def test_layout_text_round_trips(text):
    st = parse_layout(text)
    assert parse_layout(layout_text(st)) == st


@pytest.mark.parametrize("text,rule", [
    ("Etx|L", "unknown symbol 'x'"), ("E(tt|L", "without its ')'"), ("Et)|L", "unmatched ')'"),
    ("E(t|)|L", "must be followed by *N"), ("Et*|L", "followed by a count"),
    ("Et*0|L", ">= 1"), ("", "Megatron pipeline layout string")])
def test_strings_that_do_not_parse(text, rule):
    with pytest.raises(SpecError) as e:
        parse_layout(text)
    assert e.value.field == "layout" and rule in str(e.value)


# ----------------------------------------------------------------------------- plans

@pytest.mark.parametrize("plan,field,rule", [
    ("pp=4,layout=Et|t|tL,gbs=8", "layout", "must name pp*vpp = 4*1 = 4 stages"),
    ("pp=2,schedule=interleaved,vpp=2,layout=Et|t||tL,gbs=8", "layout", "leaves stage 2 empty"),
    ("pp=2,layout=Et|tL,first_stage_layers=1,gbs=8", "first_stage_layers", "cannot be combined"),
    ("pp=2,first_stage_layers=3,account_loss=1,gbs=8", "account_loss", "cannot be combined"),
    ("pp=1,account_embedding=1,gbs=8", "account_embedding", "pp > 1"),
])
def test_plan_rules(plan, field, rule):
    with pytest.raises(SpecError) as e:
        parse_plan(plan)
    assert e.value.field == field and rule in str(e.value)


@pytest.mark.parametrize("plan,field,rule", [
    ("tp=2,pp=4,layout=Et*6|t*6|t*6|t*5L,gbs=32", "layout", "num_layers=24 transformer layers"),
    ("tp=2,pp=4,layout=t*6|Et*6|t*6|t*6L,gbs=32", "layout", "embedding E exactly once, as the first"),
    ("tp=2,pp=4,layout=Et*6|t*6|t*6L|t*6,gbs=32", "layout", "loss L exactly once, as the last"),
    ("tp=2,pp=4,first_stage_layers=5,gbs=32", "first_stage_layers", "must divide evenly"),
    ("tp=2,pp=4,schedule=interleaved,vpp=2,first_stage_layers=5,last_stage_layers=5,gbs=32",
     "first_stage_layers", "over 2 model chunks"),
    ("tp=2,pp=4,account_embedding=1,gbs=32", "num_layers", "must be divisible by pp*vpp"),
])
def test_model_rules(plan, field, rule):
    with pytest.raises(SpecError) as e:
        job("gpt-1.7b", A100x2, plan)
    assert e.value.field == field and rule in str(e.value)


def test_mtp_must_follow_every_layer():
    m = small_deepseek()
    with pytest.raises(SpecError) as e:
        make_job(m, A100x2, parse_plan("tp=2,pp=2,layout=Et*3m|t*5L,gbs=8"))
    assert e.value.field == "layout" and "after every transformer layer" in str(e.value)
    with pytest.raises(SpecError) as e:
        make_job(m, A100x2, parse_plan("tp=2,pp=2,layout=Et*4|t*4L,gbs=8"))
    assert "num_nextn_predict_layers=1 MTP modules m, not 0" in str(e.value)


def test_bad_layout_exits_2_naming_field_value_and_rule():
    rc, _, err = run_cli(["estimate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:2",
                          "--plan", "tp=2,pp=4,gbs=32,layout=Et*6|t*6|t*8|t*5L"])
    assert rc == 2 and "Traceback" not in err
    assert "layout" in err and "Et*6|t*6|t*8|t*5L" in err
    assert "num_layers=24" in err


# ----------------------------------------------------------------------------- the NeMo recipe

def nemo_405b():
    return job("llama3.1-405b", cluster_preset("dgx-h100", 64),
               "tp=8,pp=8,cp=2,schedule=interleaved,vpp=8,account_embedding=true,"
               "account_loss=true,sp=true,zero=1,gbs=2048")


def test_nemo_405b_layout():
    """126 layers + the embedding and the loss = 128 slots over 64 chunks: 2 per chunk, the
    first chunk of rank 0 and the last of rank 7 one layer short (Megatron's
    ``get_num_layers_to_build``)."""
    j = nemo_405b()
    lay = j.layout
    assert lay.layers_per_stage == (15, 16, 16, 16, 16, 16, 16, 15)
    assert lay.layers(0, 0) == 1 and lay.layers(7, 7) == 1 and lay.layers(3, 4) == 2
    assert lay.held[0][0] == ("E", "t") and lay.held[7][7] == ("t", "L")
    assert lay.text == "Et|(t*2|)*62,tL"
    # the same layout given as a string is the same record
    same = job("llama3.1-405b", cluster_preset("dgx-h100", 64),
               "tp=8,pp=8,cp=2,schedule=interleaved,layout=Et|(tt|)*62,tL,sp=true,zero=1,"
               "gbs=2048")
    assert same.plan.vpp == 8 and same.layout.held == lay.held


def test_nemo_405b_estimate_and_export():
    j = nemo_405b()
    r = estimate(j)
    assert len(r.memory_by_stage) == 8 and r.step_time_s > 0
    out = r.to_json()
    assert out["inputs"]["layout"]["text"] == "Et|(t*2|)*62,tL"
    assert out["inputs"]["layout"]["layers_per_stage"] == [15] + [16] * 6 + [15]
    # the first and last stages hold one layer less: less parameter memory
    p = [s.params for s in r.memory_by_stage]
    assert p[0] < p[1] == p[3] and p[7] < p[1]
    text, _ = megatron_args(j)
    assert "--account-for-embedding-in-pipeline-split" in text
    assert "--account-for-loss-in-pipeline-split" in text
    assert "--num-virtual-stages-per-pipeline-rank 8" in text
    assert "--num-layers-per-virtual-pipeline-stage" not in text


def test_layout_string_exported_as_given_shape():
    j = job("gpt-1.7b", A100x2, "tp=2,pp=4,schedule=interleaved,vpp=2,gbs=32,"
            "layout=Et*2|(t*3|)*6,t*4L")
    text, _ = megatron_args(j)
    assert "--pipeline-model-parallel-layout 'Et*2|(t*3|)*6,t*4L'" in text
    assert "virtual" not in text          # Megatron reads vpp from the layout


def test_first_last_stage_layers_with_interleaving():
    """Megatron: the first and last stage's layers split evenly over their vpp chunks, the
    middle stages even."""
    j = job("gpt-1.7b", A100x2, "tp=2,pp=4,schedule=interleaved,vpp=2,gbs=32,"
            "first_stage_layers=4,last_stage_layers=4")
    assert j.layout.layers_per_stage == (4, 8, 8, 4)
    assert [j.layers_of_chunk(s, c) for s in range(4) for c in range(2)] == \
        [2, 2, 4, 4, 4, 4, 2, 2]
    text, _ = megatron_args(j)
    assert "--decoder-first-pipeline-num-layers 4" in text
    assert "--decoder-last-pipeline-num-layers 4" in text


# ----------------------------------------------------------------------------- one record

def test_even_layout_string_is_the_even_plan_bit_for_bit():
    even = job("gpt-1.7b", A100x2, "tp=2,pp=4,schedule=interleaved,vpp=2,gbs=32")
    given = job("gpt-1.7b", A100x2, "tp=2,pp=4,schedule=interleaved,vpp=2,gbs=32,"
                "layout=Et*3|(t*3|)*6,t*3L")
    assert given.layout.held == even.layout.held
    assert stage_costs(given) == stage_costs(even)
    assert estimate(given).step_time_s == estimate(even).step_time_s


def test_layers_per_stage_is_a_view_of_the_layout():
    a = job("gpt-1.7b", A100x2, "tp=2,pp=4,gbs=32,layers_per_stage=7/6/6/5")
    b = job("gpt-1.7b", A100x2, "tp=2,pp=4,gbs=32,layout=Et*7|t*6|t*6|t*5L")
    assert a.layout.layers_per_stage == b.layout.layers_per_stage == (7, 6, 6, 5)
    assert a.layout.held == b.layout.held
    assert stage_costs(a) == stage_costs(b)
    assert estimate(a).step_time_s == estimate(b).step_time_s
    assert [x.total for x in estimate(a).memory_by_stage] == \
        [x.total for x in estimate(b).memory_by_stage]


def test_free_comm_chunk_times_equal_the_uniform_closed_form():
    """Equal chunk times reproduce the uniform makespan exactly (1F1B: (m + p - 1)(F + B))."""
    for sched, pp, m, vpp in (("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2), ("zb-h1", 4, 8, 1)):
        f, b, w = 2.0, 4.0, 1.0
        uniform = simulate_free_comm(sched, pp, m, vpp, f, b, t_w=w)
        times = [[(f / vpp, b / vpp, w / vpp)] * vpp for _ in range(pp)]
        assert simulate_free_comm(sched, pp, m, vpp, 0.0, 0.0, chunk_times=times) == uniform
    assert simulate_free_comm("1f1b", 4, 8, 1, 0.0, 0.0,
                              chunk_times=[[(1.0, 2.0, 0.0)]] * 4) == (8 + 3) * 3.0


# ----------------------------------------------------------------------------- kinds

def test_dense_first_layers_and_mtp_are_charged_where_they_sit():
    m = small_deepseek()
    j = make_job(m, A100x2, parse_plan("tp=2,pp=2,ep=4,gbs=16"))
    c = stage_costs(j)
    assert c.chunk_kinds[0][0] == (("dense", 2), ("moe", 2))
    assert c.chunk_kinds[1][0] == (("moe", 4), ("mtp", 1))
    dense, moe, mtp = c.by_kind["dense"], c.by_kind["moe"], c.by_kind["mtp"]
    assert dense.ep_bytes == 0.0 and moe.ep_bytes > 0
    # stage 0's parameters: its own layers by kind, the embedding (per-kind closed form)
    d, e = param_counts.layer_params_split(m.of_kind("dense"), 2, 4)
    dm, em = param_counts.layer_params_split(m.of_kind("moe"), 2, 4)
    emb = param_counts.embedding_params_per_gpu(m, 2)
    assert c.params_by_stage[0] == pytest.approx(emb + 2 * (d + e) + 2 * (dm + em), rel=1e-15)
    # the last stage holds the MTP module: its layer, projection and norms, and the copy of
    # the embedding Megatron builds there
    dmt, emt = param_counts.mtp_params_split(m, 2, 4)
    head = param_counts.head_params_per_gpu(m, 2, 2)
    assert c.params_by_stage[1] == pytest.approx(head + 4 * (dm + em) + dmt + emt + emb,
                                                 rel=1e-15)
    assert dmt + emt - (dm + em) == 2 * m.hidden_size ** 2 / 2 + 3 * m.norm_params()
    # time: the MTP module is a MoE layer plus its projection and a pass through the head
    assert mtp.layer_fwd > moe.layer_fwd + c.head_fwd
    f0 = chunk_sum(chunk_layers(c, 0, 0, 0), lambda x: x.layer_fwd)
    assert f0 == 2 * dense.layer_fwd + 2 * moe.layer_fwd


def test_compiled_chunks_sum_their_own_layers():
    """The simulator's programs read the same per-kind record: stage 0's forward compute is
    its two dense and two MoE layers (plus the embedding), the last stage's holds the MTP
    module; dense layers send no all-to-all."""
    from simulator.program.compiler import compile_job
    m = small_deepseek()
    j = make_job(m, A100x2, parse_plan("tp=2,pp=2,ep=4,gbs=16"))
    c = stage_costs(j)
    progs = compile_job(j, [0, 8])
    for rank, stage in ((0, 0), (8, 1)):
        ops = progs[rank].streams["compute"]
        fwd = sum(o.seconds for o in ops if o.kind == "forward" and o.microbatch == 0)
        want = chunk_sum(chunk_layers(c, stage, 0, 0), lambda x: x.layer_fwd)
        assert fwd == pytest.approx(want, rel=1e-12)
    a2a = [o for o in progs[0].streams.get("ep-comm", ())
           if o.microbatch == 0 and o.kind == "alltoall"]     # (not the etp collectives)
    assert sum(o.repeat for o in a2a) == 2 * 2      # 2 MoE layers, forward and backward


def test_mtp_counted_in_model_flops():
    m = small_deepseek()
    none = replace(m, num_nextn_predict_layers=0)
    diff = flop_counts.model_flops_per_step(m, 8) - flop_counts.model_flops_per_step(none, 8)
    assert diff == pytest.approx(8 * m.seq_length * 3 * flop_counts.mtp_flops_fwd_per_token(m),
                                 rel=1e-12)


def test_layout_in_json_and_text_reports():
    argv = ["estimate", "--model", "gpt-1.7b", "--cluster", "dgx-a100:2", "--plan",
            "tp=2,pp=4,gbs=32,schedule=interleaved,vpp=2,first_stage_layers=2,"
            "last_stage_layers=2"]
    rc, out, err = run_cli([*argv, "--json"])
    assert rc == 0, err
    lay = json.loads(out)["inputs"]["layout"]
    assert lay["layers_per_stage"] == [2, 10, 10, 2] and lay["source"] == "first/last"
    rc, t_out, err = run_cli(argv)
    assert rc == 0, err
    text = job("gpt-1.7b", A100x2, "tp=2,pp=4,gbs=32,schedule=interleaved,vpp=2,"
               "first_stage_layers=2,last_stage_layers=2").layout.text
    assert parse_layout(text)[1] == ("t",) * 5 and f"layout  {text}" in t_out


def test_yaml_plan_file_takes_megatron_names(tmp_path):
    f = tmp_path / "plan.yaml"
    f.write_text("tp: 2\npp: 4\nschedule: interleaved\nglobal_batch_size: 32\n"
                 "pipeline_layout: 'Et*2|(t*3|)*6,t*4L'\n")
    p = parse_plan(str(f))
    assert p.vpp == 2 and p.layout == "Et*2|(t*3|)*6,t*4L"
    f.write_text("tp: 2\npp: 4\nglobal_batch_size: 32\n"
                 "account_for_embedding_in_pipeline_split: true\n"
                 "account_for_loss_in_pipeline_split: true\n")
    j = make_job(model_preset("gpt-3.6b"), A100x2, parse_plan(str(f)))   # 30 + 2 slots
    assert j.layout.layers_per_stage == (7, 8, 8, 7)


def test_simulation_runs_each_chunk_with_its_own_layers():
    """Simulated: the interleaved plan whose first and last chunks hold fewer layers; its
    programs' forward compute per chunk is the chunk's own layers (closed form from the
    record), and the report has one memory entry per stage and the layout."""
    from simulator.program.compiler import compile_job
    from simulator.simulate import simulate, to_json
    j = job("gpt-3.6b", A100x2, "tp=2,pp=4,schedule=interleaved,vpp=2,gbs=16,"
            "account_embedding=true,account_loss=true")       # 32 slots over 8 chunks
    assert [j.layers_of_chunk(s, c) for c in range(2) for s in range(4)] == \
        [3, 4, 4, 4, 4, 4, 4, 3]
    c = stage_costs(j)
    progs = compile_job(j, [0])
    f = [o.seconds for o in progs[0].streams["compute"]
         if o.kind == "forward" and o.microbatch == 0]
    assert f == [3 * c.layer_fwd, 4 * c.layer_fwd]
    out = to_json(simulate(j), j)
    assert len(out["memory_by_stage"]) == 4
    assert out["inputs"]["layout"]["layers_per_stage"] == [7, 8, 8, 7]
    assert out["step_time_s"] > 0


def _entry(ref: str, case_id: str) -> dict:
    data = json.loads((ROOT / "strategies" / "reference" / "data" / ref).read_text())
    items = data if isinstance(data, list) else data.get("runs", data)
    return next(e for e in items if e["id"] == case_id)


def test_published_megatron_405b_runs_count_the_embedding_and_loss_slots():
    """Validation cases: a Megatron-family run whose layers do not divide over its chunks but
    do with the embedding and the loss as slots runs the real 126 layers that way (no longer
    126 padded to 128); BLOOM's stated partition (embedding counted as a block) is the same
    rule on 12 stages."""
    from strategies.reference.cases import case_from_entry
    c = case_from_entry(_entry("megatron_bridge_2604.json",
                               "mbridge260401_llama31405b_h100_1024_fp8"))
    j = c.job
    assert j.model.num_layers == 126 and j.plan.account_embedding and j.plan.account_loss
    assert (j.plan.pp, j.plan.vpp) == (8, 8)
    assert j.layout.layers_per_stage == (15, 16, 16, 16, 16, 16, 16, 15)
    b = case_from_entry(_entry("published.json", "bloom176B_final_384gpu")).job
    assert b.model.num_layers == 70
    assert b.layout.layers_per_stage == (5,) + (6,) * 10 + (5,)
