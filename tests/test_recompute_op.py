"""``recompute=op``: torchtitan's op-level selective activation checkpointing (issue 15 item 3).

Its policy (``torchtitan/distributed/activation_checkpoint.py``): inside a layer every other
``mm``/``linear`` in forward order is recomputed (the 2nd, 4th, ...), the rest saved; the
attention kernel's and the reduce-scatters' outputs are saved; elementwise work is recomputed.
"""
from __future__ import annotations

import numpy as np
import pytest

from simulator.cli.main import main
from strategies.cost import flop_counts, gemm_shapes
from strategies.cost.elementwise_time import elementwise_time_fwd
from strategies.cost.gemm_time import gemms_time_fwd
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.layer_time import layer_time
from strategies.errors import SpecError
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.pytorch import TORCHTITAN
from strategies.stacks.rules import check_plan
from topologies.gpus import get_gpu
from strategies.memory.activations import layer_activation_bytes, op_saved_bytes
from strategies.memory.arrays import layer_act_arrays
from strategies.plan import parse_plan
from strategies.plan_arrays import RECOMPUTE_CODE
from strategies.presets import model_preset

GPT = model_preset("gpt3-175b")
LLAMA = model_preset("llama3-70b")


def test_code_appended_last():
    assert RECOMPUTE_CODE == {"none": 0, "selective": 1, "full": 2, "op": 3}
    assert parse_plan("recompute=op").recompute == "op"
    with pytest.raises(SpecError, match="recompute"):
        parse_plan("recompute=ops")


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_recomputed_flops_closed_form_gpt(tp):
    """GPT: q(save) k(rec) v(save) proj(rec) fc1(save) fc2(rec): 2T·h·(d·g + a·d + F)/t."""
    m, b = GPT, 2
    T = b * m.seq_length
    h, a, g, d, F = m.hidden_size, m.num_attention_heads, m.kv_heads, m.head_dim, m.ffn_hidden_size
    want = 2 * T * h * (g * d + a * d + F) / tp
    assert [s for *_, s in gemm_shapes.op_sac_gemms(m, b, tp, 1, 1)] == [True, False] * 3
    assert flop_counts.op_recompute_flops_fwd(m, b, tp, 1) == pytest.approx(want, rel=1e-15)
    # GPT (g = a, F = 4h): exactly half the layer's GEMM FLOPs
    assert flop_counts.op_recompute_flops_fwd(m, b, tp, 1) == pytest.approx(
        flop_counts.gemm_flops_fwd(m, b, tp, 1) / 2, rel=1e-15)


def test_recomputed_flops_closed_form_llama():
    """Llama (GQA, SwiGLU): wq s, wk r, wv s, wo r, w1 s, w3 r, w2 s -> wk, wo, w3."""
    m, b, tp = LLAMA, 1, 8
    T = b * m.seq_length
    h, a, g, d, F = m.hidden_size, m.num_attention_heads, m.kv_heads, m.head_dim, m.ffn_hidden_size
    assert [s for *_, s in gemm_shapes.op_sac_gemms(m, b, tp, 1, 1)] == [True, False, True, False,
                                                                         True, False, True]
    want = 2 * T * (h * g * d + a * d * h + h * F) / tp
    assert flop_counts.op_recompute_flops_fwd(m, b, tp, 1) == pytest.approx(want, rel=1e-15)
    # the op list is the layer's GEMMs, only split as torchtitan runs them
    total = sum(2 * c * M * N * K for c, M, N, K, *_ in gemm_shapes.op_sac_gemms(m, b, tp, 1, 1))
    assert total == pytest.approx(flop_counts.gemm_flops_fwd(m, b, tp, 1), rel=1e-15)


def test_moe_experts_recomputed_not_counted():
    m = model_preset("qwen3-30b-a3b")
    gemms = gemm_shapes.op_sac_gemms(m, 1, 1, 1, 1)
    total = sum(2 * c * M * N * K for c, M, N, K, *_ in gemms)
    assert total == pytest.approx(flop_counts.gemm_flops_fwd(m, 1, 1, 1), rel=1e-12)
    # attention q k v o, then the router (5th mm: saved); grouped expert GEMMs recomputed
    assert [s for *_, s in gemms][:5] == [True, False, True, False, True]
    assert not any(s for *_, s in gemms[5:])


def test_saved_bytes_closed_form_gpt():
    """input 2sbh/t (SP) + q 2sbh/t + v 2sbh/t + fc1 out 8sbh/t + SDPA out 2sbh/t + two
    reduce-scatter outputs 4sbh/t = 20sbh/t; without SP: 2sbh + 14sbh/t."""
    s, b, h, t = GPT.seq_length, 1, GPT.hidden_size, 8
    sbh = s * b * h
    assert layer_activation_bytes(GPT, s, b, t, True, 1, "op") == pytest.approx(20 * sbh / t,
                                                                                 rel=1e-15)
    assert layer_activation_bytes(GPT, s, b, t, False, 1, "op") == pytest.approx(
        2 * sbh + 14 * sbh / t, rel=1e-15)
    assert layer_activation_bytes(GPT, s, b, 1, False, 2, "op") == pytest.approx(
        16 * sbh / 2, rel=1e-15)


@pytest.mark.parametrize("m", [GPT, LLAMA], ids=["gpt", "llama"])
@pytest.mark.parametrize("tp,sp", [(1, False), (8, True), (8, False)])
def test_memory_between_none_and_full(m, tp, sp):
    s = m.seq_length
    by = {rc: layer_activation_bytes(m, s, 1, tp, sp, 1, rc) for rc in
          ("none", "selective", "op", "full")}
    assert by["full"] < by["op"] < by["none"]
    # with FlashAttention selective drops nothing, so op is also below selective
    assert by["op"] < by["selective"] == by["none"]
    # array form (search, memory report) equals the scalar one
    stored, none = layer_act_arrays(m, np.array([1.0]), np.array([tp]), np.array([1]),
                                    np.array([sp]), np.array([3]), np.array([True]))
    assert stored[0] == pytest.approx(by["op"], rel=1e-12)
    assert none[0] == pytest.approx(by["none"], rel=1e-12)
    assert op_saved_bytes(m, s, 1, tp, sp, 1) == pytest.approx(by["op"], rel=1e-15)


@pytest.mark.parametrize("m", [GPT, LLAMA], ids=["gpt", "llama"])
def test_recompute_time_between_none_and_full(m):
    gpu = get_gpu("h100-sxm")
    kw = dict(b=1, tp=8, cp=1, ep=1, sp=True, flash=True, gpu=gpu, dtype="bf16",
              fw=TORCHTITAN)
    rc = {k: layer_time(m, recompute=c, **kw).recompute for k, c in RECOMPUTE_CODE.items()}
    assert rc["none"] == 0.0 == rc["selective"]           # FlashAttention: nothing to redo
    assert 0.0 < rc["op"] < rc["full"]
    # exactly: the unsaved GEMMs' time plus the layer's elementwise kernels, relaunched, and
    # the two all-gathers' sequence-dim copies (not in the save list; read + write of the
    # bf16 b·s·h tensor each, docs/calibration.md §5.80)
    gemms = gemm_shapes.op_sac_gemms(m, 1, 8, 1, 1)
    unsaved = [g for g in gemms if not g[-1]]
    # every kernel of the layer but the saved GEMMs and the attention kernel is relaunched
    relaunched = TORCHTITAN.kernels_per_layer - (len(gemms) - len(unsaved)) - 1
    want = (gemms_time_fwd(unsaved, 8, gpu, "bf16")
            + elementwise_time_fwd(m, 1, 8, 1, True, gpu, "bf16",
                                   kernels=TORCHTITAN.elementwise_kernels)
            + relaunched * TORCHTITAN.launch_gap_s
            + 2 * 2 * 2 * m.seq_length * m.hidden_size / usable_hbm(gpu))
    assert rc["op"] == pytest.approx(want, rel=1e-15)
    # vectorised over the code, as the search calls it
    arr = layer_time(m, recompute=np.array([0, 1, 2, 3]), **kw).recompute
    assert np.allclose(arr, [rc["none"], rc["selective"], rc["full"], rc["op"]], rtol=1e-15)


def test_hfu_flops_count_op():
    L, gbs = GPT.num_layers, 8
    extra = (flop_counts.executed_flops_per_step(GPT, gbs, True, 3)
             - flop_counts.executed_flops_per_step(GPT, gbs, True, 0))
    assert extra == pytest.approx(L * flop_counts.op_recompute_flops_fwd(GPT, gbs, 1, 1), rel=1e-12)


def test_only_torchtitan_runs_op(capsys):
    plan = parse_plan("recompute=op,gbs=16")
    check_plan(TORCHTITAN, plan)
    with pytest.raises(SpecError, match="recompute"):
        check_plan(MEGATRON_CORE, plan)
    small = ["--model", "llama3-8b", "--cluster", "dgx-a100:2", "--plan", "recompute=op,gbs=16"]
    assert main(["estimate", *small, "--framework", "megatron-core"]) == 2
    err = capsys.readouterr().err
    assert "recompute='op'" in err and "megatron-core" in err and "Traceback" not in err
    assert main(["estimate", *small, "--framework", "torchtitan", "--json"]) == 0


def test_op_recomputes_the_tp_all_gathers_and_ranks_between():
    """With TP, op's recompute repeats the 2 forward all-gathers (not in the save list; the
    reduce-scatters' outputs are: one all-reduce equivalent, docs/calibration.md §5.84),
    full its forward's less the MLP's reduce-scatter (early stop); the step ranks
    none < op < full, and the stash full < op < none."""
    from strategies.cost.stage import stage_costs
    from strategies.estimate import estimate
    from strategies.job import make_job
    from topologies.cluster import cluster_preset
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 2)
    jobs = {rc: make_job(m, cl, parse_plan(f"tp=8,sp=true,zero=3,recompute={rc},gbs=16"),
                         framework="torchtitan") for rc in ("none", "op", "full")}
    assert stage_costs(jobs["op"]).tp_per_layer_recompute == 1
    assert stage_costs(jobs["full"]).tp_per_layer_recompute == 1.5
    assert stage_costs(jobs["none"]).tp_per_layer_recompute == 0
    step = {rc: estimate(j).step_time_s for rc, j in jobs.items()}
    assert step["none"] < step["op"] < step["full"]


def test_reference_rows_stating_op_level_sac_run_op():
    """The torchtitan rows that state "op-level SAC" run recompute=op; the same words under
    a stack without that policy fall back to selective, with the assumption stated."""
    import copy

    from strategies.reference.cases import case_from_entry, load_reference
    rows = {c["id"]: c for c in load_reference()}
    row = rows["torchtitan_2412_8B_t1_fsdp"]
    assert "op-level SAC" in row["plan"]["recompute"]
    case = case_from_entry(row)
    assert case.job.plan.recompute == "op" and case.job.framework.name == "torchtitan"
    other = copy.deepcopy(row)
    other["source"]["ref"] = "Megatron-Core benchmark"
    other["model"]["seq_len"] = 8192
    case = case_from_entry(other)
    assert case.job.framework.name == "megatron-core"
    assert case.job.plan.recompute == "selective"
    assert any("no op policy" in a for a in case.assumptions)


def test_recompute_component_is_what_op_did_not_save():
    """The layer being recomputed holds, for one micro-batch, the no-recompute set less the
    op set: the memory report's ``recompute`` part equals that, scalar form and report alike."""
    from strategies.job import make_job
    from strategies.memory import activations as act
    from strategies.memory.scalar import memory_components
    from topologies.cluster import cluster_preset
    # tp=8 fills the node (dp = 1): torchtitan runs zero=0 only as DDP alone
    job = make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1),
                   parse_plan("tp=8,sp=true,recompute=op,gbs=16"), framework="torchtitan")
    want = (act.job_layer_activation_bytes(job, recompute="none")
            - act.job_layer_activation_bytes(job))
    assert want > 0
    assert memory_components(job, 0)["recompute"].activations == pytest.approx(want, rel=1e-12)
    # 1F1B: the last stage's loss, one micro-batch at a time, at what torchtitan's eager
    # cross-entropy holds per logit element (12 bytes: docs/calibration.md §5.19; 16 under
    # TP, loss_parallel's DTensor handlers: §5.74)
    p = job.plan
    logits = float(act.output_bytes(job.model, job.seq_len, p.mbs, p.tp, p.sp, p.cp, 16.0))
    assert job.framework.loss.peak_bytes == 12.0
    assert job.framework.loss.peak_bytes_at(p.tp) == 16.0
    assert act.transient_activation_bytes(job, 0) == pytest.approx(want + logits, rel=1e-12)


def test_lower_bound_holds_for_op_plans():
    """The search stays exact with op plans: the lower bound never beats their simulation."""
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.job import make_job
    from strategies.search.space import SpaceOptions, enumerate_space
    from topologies.cluster import cluster_preset
    m, cl = model_preset("llama3-8b"), cluster_preset("dgx-h100", 1)
    sp = enumerate_space(m, cl, 16, SpaceOptions(max_mbs=2, max_vpp=2,
                                                 memory_limit_bytes=float("inf")),
                         framework=TORCHTITAN)
    op = [i for i in range(sp.size) if sp.plan(i).recompute == "op"]
    assert op
    bounds = step_time_lower_bound(m, cl, "bf16", sp.cols, framework=TORCHTITAN)
    rng = np.random.default_rng(5)
    for i in rng.choice(op, size=min(5, len(op)), replace=False).tolist():
        t = simulate(make_job(m, cl, sp.plan(i), framework=TORCHTITAN)).step_time_s
        assert bounds[i] <= t, (sp.key(i), bounds[i], t)
