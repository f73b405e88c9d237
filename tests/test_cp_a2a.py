"""Plan ``cp_comm=a2a``: Transformer Engine's all-to-all context parallelism
(``AttnFuncWithCPAndQKVOA2A``, Megatron-Core ``--cp-comm-type a2a``, DeepSpeed-Ulysses' head
scatter). The exchanged bytes, HBM copies, working set and saved output as closed forms; the
core's FLOPs (the whole sequence on ``a/(t·c)`` heads) equal to the ring's; the all-to-all's
closed form alone in one node and the estimate's CP seconds built from it; the estimate, the
lower bound and the contention-free simulation agreeing; the simulator's all-to-all flows; the
head divisibility refusal (make_job, CLI, the search's mask); the stacks that run it; the plan
syntax and file round trip; determinism. docs/calibration.md §5.185."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from simulator.cli.main import main
from simulator.program.compiler import compile_job
from simulator.program.ops import Collective
from simulator.simulate import simulate
from strategies.collectives.phase import CALL_LATENCY_S as CALL
from strategies.cost import attention_counts, attention_time, comm_bytes, cp_a2a
from strategies.cost import comm as cm
from strategies.cost.comm.catalog import NVLINK_EFFICIENCY
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.memory.scalar import memory_components
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.plan_file import plan_file_text, read_plan_file
from strategies.presets import model_preset
from strategies.framework import get_profile
from strategies.stacks.comm_rules import cp_exposed_fraction
from topologies.cluster import cluster_preset

L405 = model_preset("llama3-405b")          # 8 KV heads, 128 query heads, head dim 128
MIB = 2 ** 20


def _job(spec: str, framework: str | None = "megatron-core", seq: int = 16384, nodes: int = 2):
    m = replace(model_preset("gpt-1.7b"), seq_length=seq)   # 24 heads (MHA), head dim 96
    return make_job(m, cluster_preset("dgx-h100", nodes), parse_plan(spec),
                    framework=framework)


def _bound(job) -> float:
    return float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                       PlanArrays.from_plans([job.plan]), job.framework)[0])


def test_exchanged_bytes_closed_forms() -> None:
    """Llama 3 405B at 128K, tp 8, cp 16: a rank holds 8,192 tokens of 16 query heads and one
    KV head of 128: Q 32 MiB, K and V 2 MiB each, O 32 MiB; the HBM copies four passes of
    each (``COPY_PASSES``), the working set three of Q/K/V. Multi-head attention (g = a, d_v =
    d) sends ``4·(s/c)·h/t`` elements a layer pass, the Ulysses paper's ``4Nh/P`` (§3.2:
    ``3Nh`` for Q/K/V, ``Nh`` for the output)."""
    m = L405.with_seq_length(131072)
    assert cp_a2a.qkv_bytes(m, 1, 8, 16) == 36 * MIB
    assert cp_a2a.out_bytes(m, 1, 8, 16) == 32 * MIB
    assert cp_a2a.copy_bytes(m, 1, 8, 16) == 4 * 68 * MIB
    assert cp_a2a.working_bytes(m, 1, 8, 16) == 3 * 36 * MIB
    g = replace(model_preset("gpt-1.7b"), seq_length=16384)
    assert g.kv_heads == g.num_attention_heads and g.v_dim == g.head_dim
    h, s = g.hidden_size, g.seq_length
    assert cp_a2a.qkv_bytes(g, 2, 2, 4) + cp_a2a.out_bytes(g, 2, 2, 4) == \
        pytest.approx(2 * 4 * (2 * s / 4) * h / 2, rel=1e-15)
    sc = stage_costs(_job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a"))
    assert sc.cp_a2a and float(sc.cp_bytes) == cp_a2a.qkv_bytes(g, 1, 2, 4)
    assert float(sc.cp_out_bytes) == cp_a2a.out_bytes(g, 1, 2, 4)
    assert sc.cp_exposed_fraction == 1.0 == cp_exposed_fraction("a2a", 0.1)
    ring = stage_costs(_job("tp=2,cp=4,mbs=1,gbs=4"))
    assert not ring.cp_a2a and float(ring.cp_out_bytes) == 0.0
    assert float(ring.cp_bytes) == comm_bytes.cp_gather_bytes(g, 1, 2, 4)


def test_core_on_whole_sequence_equals_the_ring_total() -> None:
    """The core runs the whole sequence on ``a/(t·c)`` heads: its FLOPs and exponentials are
    the ring's per rank (the causal square over ``t·c`` either way), and its seconds are the
    cp = 1 core's at ``t·c`` plus the exchange's copies at the usable HBM rate."""
    m = L405.with_seq_length(131072)
    for b, tp, cp in ((1, 8, 16), (2, 4, 2)):
        assert attention_counts.attn_core_flops_fwd(m, b, tp * cp, 1, True) == pytest.approx(
            attention_counts.attn_core_flops_fwd(m, b, tp, cp, True), rel=1e-15)
        assert attention_counts.attn_exponentials_fwd(m, b, tp * cp, 1) == pytest.approx(
            attention_counts.attn_exponentials_fwd(m, b, tp, cp), rel=1e-15)
    job = _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a")
    fw, gpu, g = job.framework, job.cluster.gpu, job.model
    plain = replace(fw, cp_impl="ring")
    f0, b0 = attention_time.attention_time_fwd(g, 1, 8, 1, True, gpu, fw=plain,
                                               system=job.system)
    f1, b1 = attention_time.attention_time_fwd(g, 1, 2, 4, True, gpu, fw=fw, system=job.system)
    hbm = usable_hbm(gpu, job.system)
    copies = cp_a2a.copy_bytes(g, 1, 2, 4) / hbm
    assert float(f1) == pytest.approx(float(f0) + copies, rel=1e-12)
    assert float(b1) == pytest.approx(float(b0) + copies, rel=1e-12)
    f2, _ = attention_time.attention_time_fwd(g, 1, 2, 1, True, gpu, fw=fw, system=job.system)
    f3, _ = attention_time.attention_time_fwd(g, 1, 2, 1, True, gpu, fw=plain, system=job.system)
    assert float(f2) == float(f3)            # cp 1: nothing scattered, nothing copied


def test_alltoall_alone_in_one_node_and_the_estimates_cp_seconds() -> None:
    """tp 2, cp 4 on 8-GPU nodes: the CP group (ranks 2 apart) is inside one node, so one
    all-to-all of ``S`` bytes a rank takes ``(n-1)/n·S/B + lat`` (``B`` NVLink's rate at its
    efficiency). Transformer Engine runs one call per tensor: Q, K, V, then O forward; dO,
    then dQ, dK, dV backward. Multi-head attention's Q, K, V and O are ``S`` each; the
    copies of K and V and the reorders of Q and K (``c = 2·S/rate`` each) run beside the
    calls, which outlast two of them here: a pass waits ``3·t(S) - 4·c + t(S)`` beyond its
    copies. The estimate's CP seconds are ``L·m·2`` of that."""
    job = _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a")
    cl, sc = job.cluster, stage_costs(job)
    B = cl.intra_node_bandwidth * NVLINK_EFFICIENCY

    def t(nbytes):
        return float(cm.collective_time("alltoall", nbytes, 4, 2, cl))

    S = float(sc.cp_out_bytes)
    assert sc.cp_qkv_parts == pytest.approx((1 / 3, 1 / 3, 1 / 3), rel=1e-15)
    assert float(sc.cp_bytes) == pytest.approx(3 * S, rel=1e-15) and sc.cp_bwd_out == 1.0
    assert t(S) == pytest.approx(3 / 4 * S / B + cl.intra_node_latency + CALL, rel=1e-12)
    c = cp_a2a.COPY_PASSES / 2 * S / sc.copy_rate
    assert t(S) >= 2 * c and sc.copy_rate == usable_hbm(job.cluster.gpu, job.system)
    pass_s = 3 * t(S) - 4 * c + t(S)
    f, b = cp_a2a.layer_waits(lambda n: cm.collective_time("alltoall", n, 4, 2, cl), sc, 4)
    assert float(f) == pytest.approx(pass_s, rel=1e-12)
    assert float(b) == pytest.approx(pass_s, rel=1e-12)
    e = estimate(job)
    layers = job.model.num_layers * job.num_microbatches
    assert e.breakdown_s["cp_comm"] == pytest.approx(layers * 2 * pass_s, rel=1e-9)


def test_group_wait_closed_forms() -> None:
    """``group_wait`` of one ``flash_attn_a2a_communicate``: one tensor waits its call alone
    (copy, call and reorder serial); calls on a free network (0 s), or shorter than the
    copies beside them, wait nothing beyond the copies; with the calls dominating the group
    takes ``c_1 + Σa + p_n``; without a copy rate the calls' sum."""
    rate = 1e12
    half = cp_a2a.COPY_PASSES / 2 / rate
    sizes = [4e6, 1e6, 1e6]
    assert cp_a2a.group_wait(lambda n: 7e-6, [3e6], rate) == pytest.approx(7e-6, rel=1e-12)
    assert cp_a2a.group_wait(lambda n: 0.0, sizes, rate) == pytest.approx(0.0, abs=1e-18)
    c = [half * n for n in sizes]
    slow = cp_a2a.group_wait(lambda n: n * 1e-9, sizes, rate)      # 4 ms, 1 ms, 1 ms calls
    assert slow == pytest.approx(c[0] + 6e-3 + c[2] - 2 * sum(c), rel=1e-12)
    fast = cp_a2a.group_wait(lambda n: 3e-6, sizes, rate)          # 3 µs calls: Q's
    assert fast == pytest.approx(0.0, abs=1e-18)                    # reorder hides them
    assert cp_a2a.group_wait(lambda n: n * 1e-9, sizes, 0.0) == pytest.approx(6e-3, rel=1e-12)


def test_bytes_per_call_gqa_and_fp8() -> None:
    """Llama 3 405B at 128K, tp 8, cp 16: Q 32 MiB, K and V 2 MiB each (its own 8 KV heads,
    not repeated to 128: TE views K as ``[.., g/t, d]`` and splits those heads), O 32 MiB;
    one call each. Under FP8 attention (MXFP8, the one the model runs: TE quantises after
    the all-to-all) the calls carry the same 16-bit bytes, to the byte."""
    m = L405.with_seq_length(131072)
    q, k, v = (x * cp_a2a.qkv_bytes(m, 1, 8, 16) for x in cp_a2a.qkv_parts(m))
    assert (q, k, v) == (32 * MIB, 2 * MIB, 2 * MIB)
    g = replace(model_preset("gpt-1.7b"), seq_length=16384)
    spec = "tp=1,cp=8,mbs=1,gbs=8,cp_comm=a2a"
    b16 = stage_costs(make_job(g, cluster_preset("dgx-b200", 1), parse_plan(spec),
                               framework="megatron-core", dtype="mxfp8"))
    f8 = stage_costs(make_job(g, cluster_preset("dgx-b200", 1),
                              parse_plan(spec + ",fp8_attention=true"),
                              framework="megatron-core", dtype="mxfp8"))
    assert float(f8.attn_fwd) != float(b16.attn_fwd)
    assert (float(f8.cp_bytes), float(f8.cp_out_bytes)) == \
        (float(b16.cp_bytes), float(b16.cp_out_bytes)) == \
        (cp_a2a.qkv_bytes(g, 1, 1, 8), cp_a2a.out_bytes(g, 1, 1, 8))


def test_backward_output_tensors_by_release() -> None:
    """Transformer Engine's a2a backward sends dO alone from 2.8 on and the saved output
    with it before; a2a+p2p's from 2.15 on; a stack stating no release reads the newest:
    the backward then all-to-alls one output (or two), its copies ``COPY_PASSES`` of O more."""
    from strategies.cost import cp_hier
    assert cp_hier.bwd_out_tensors("a2a", None) == 1.0
    assert cp_hier.bwd_out_tensors("a2a", (2, 8)) == 1.0
    assert cp_hier.bwd_out_tensors("a2a", (2, 7)) == 2.0
    assert cp_hier.bwd_out_tensors("a2a", (1, 11)) == 2.0
    assert cp_hier.bwd_out_tensors("a2a+p2p", (2, 14)) == 2.0
    assert cp_hier.bwd_out_tensors("a2a+p2p", (2, 15)) == 1.0
    assert cp_hier.bwd_out_tensors("ring", None) == 0.0
    job = _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a")
    old = replace(job, framework=replace(job.framework, te_version=(2, 7)))
    sc, so = stage_costs(job), stage_costs(old)
    assert so.cp_bwd_out == 2.0 and sc.cp_bwd_out == 1.0
    assert float(so.attn_fwd) == float(sc.attn_fwd)
    assert float(so.attn_bwd) - float(sc.attn_bwd) == pytest.approx(
        cp_a2a.COPY_PASSES * float(sc.cp_out_bytes) / sc.copy_rate, rel=1e-9)
    cl = job.cluster

    def t(n):
        return cm.collective_time("alltoall", n, 4, 2, cl)

    f0, b0 = cp_a2a.layer_waits(t, sc, 4)
    f1, b1 = cp_a2a.layer_waits(t, so, 4)
    assert float(f1) == float(f0)
    two = cp_a2a.group_wait(t, [float(sc.cp_out_bytes)] * 2, sc.copy_rate)
    assert float(b1) - float(b0) == pytest.approx(float(two) - float(t(sc.cp_out_bytes)),
                                                  rel=1e-12)


@pytest.mark.parametrize("spec", ["tp=2,cp=4,mbs=1,gbs=4", "tp=1,cp=8,mbs=1,gbs=4",
                                  "tp=1,cp=4,pp=2,mbs=1,gbs=8"])
def test_estimate_bound_and_contention_free_simulation_agree(spec: str) -> None:
    """What a2a changes against the ring: the estimate's and the contention-free
    simulation's within 0.05 % of the step of each other (measured 0.01-0.03 %: the
    simulator's gradient reduction starts after the last dQ/dK/dV call, §5.191), each plan
    within 1.5 % of its simulation (the ring's own small-job gap), the bound below the
    estimate."""
    ring, a2a = _job(spec), _job(spec + ",cp_comm=a2a")
    e_r, e_a = estimate(ring).step_time_s, estimate(a2a).step_time_s
    s_r = simulate(ring, network="contention-free").step_time_s
    s_a = simulate(a2a, network="contention-free").step_time_s
    assert abs(e_a - e_r) > 1e-3 * e_a
    assert abs((s_a - s_r) - (e_a - e_r)) <= 5e-4 * e_a
    assert s_a == pytest.approx(e_a, rel=0.015)
    assert _bound(a2a) <= e_a


def test_simulator_emits_alltoalls_on_the_cp_group() -> None:
    """Each layer block's exchange is all-to-alls over the rank's CP group on the cp-comm
    stream, as flows on the network (algorithm ``all_to_all``, like the expert all-to-alls),
    one call per tensor: Q, K, V then O forward, dO then dQ, dK, dV backward (the copies on
    the compute stream between them, out of the core's seconds)."""
    job = _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a")
    sc = stage_costs(job)
    prog = compile_job(job, ranks=[0])[0]
    ops = [op for op in prog.streams["cp-comm"] if type(op) is Collective]
    assert ops and all(op.kind == "alltoall" and op.algorithm == "all_to_all"
                       and op.group == (0, 2, 4, 6) and op.category == "cp" for op in ops)
    L, m = job.model.num_layers, job.num_microbatches
    moved = sum(op.nbytes * op.repeat for op in ops)
    assert moved == pytest.approx(2 * L * m * (float(sc.cp_bytes) + float(sc.cp_out_bytes)),
                                  rel=1e-12)
    assert sum(op.repeat for op in ops) == pytest.approx(8 * L * m, rel=1e-12)
    assert {op.nbytes for op in ops} == {float(sc.cp_out_bytes)}     # MHA: Q = K = V = O
    flows = simulate(job, network="flows").step_time_s
    assert flows == pytest.approx(simulate(job, network="contention-free").step_time_s,
                                  rel=0.05)


def test_memory_working_set_and_saved_output() -> None:
    """Against the ring: "other" holds the exchange's buffers (``3·qkv_bytes``, with the
    fragmentation allowance on the activations), each layer's stash the kernel's own output
    (``out_bytes``, one micro-batch in flight here); selective recomputation of the core
    drops it from the stash, full recomputation keeps it for the one layer rebuilt."""
    g = replace(model_preset("gpt-1.7b"), seq_length=16384)
    o, w = cp_a2a.out_bytes(g, 1, 2, 4), cp_a2a.working_bytes(g, 1, 2, 4)
    for rc, stash, rebuilt in (("none", g.num_layers * o, 0.0), ("selective", 0.0, 0.0),
                               ("full", 0.0, o)):
        a, b = (memory_components(_job(f"tp=2,cp=4,mbs=1,gbs=4,recompute={rc},cp_comm={c}"), 0)
                for c in ("p2p", "a2a"))
        assert b["layers"].activations - a["layers"].activations == pytest.approx(stash,
                                                                                   rel=1e-12)
        assert b["recompute"].activations - a["recompute"].activations == pytest.approx(
            rebuilt, rel=1e-12)
        frag = _job("tp=2,cp=4,mbs=1,gbs=4").system.fragmentation
        assert b["other"].other - a["other"].other == pytest.approx(
            w + frag * (stash + rebuilt), rel=1e-9)


def test_heads_must_divide_by_cp(capsys) -> None:
    """Transformer Engine asserts ``num_heads % cp_size == 0`` for Q, K and V on the rank:
    gpt-1.7b's 24 heads at tp 2 (12 a rank) do not split over cp 8; Llama 3 8B's 8 KV heads at
    tp 2 (4) not over cp 8 either, though its 32 query heads (16) would. Refused with field,
    value and rule by make_job and by the CLI (exit 2, one line); the ring runs both."""
    with pytest.raises(SpecError, match=r"cp=8: cp_comm=a2a scatters attention heads .* "
                                        r"num_attention_heads/tp=24/2"):
        _job("tp=2,cp=8,mbs=1,gbs=4,cp_comm=a2a")
    _job("tp=2,cp=8,mbs=1,gbs=4")
    m8 = model_preset("llama3-8b")
    assert not cp_a2a.heads_ok(m8, 2, 8) and cp_a2a.heads_ok(m8, 2, 4)
    assert cp_a2a.heads_ok(m8, 8, 1)
    assert list(cp_a2a.heads_ok(m8, np.array([1, 2, 4]), np.array([8, 8, 2]))) == \
        [True, False, True]
    # the CLI in this process (its exit status in a real process: tests/test_cli_errors.py)
    rc = main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:2", "--plan",
               "tp=2,cp=8,gbs=8,cp_comm=a2a"])
    out, err = capsys.readouterr()
    err = err.strip()
    assert rc == 2 and out == "" and len(err.splitlines()) == 1
    assert "cp=8" in err and "KV heads 8/2" in err and "num_heads % cp_size" in err


@pytest.mark.slow
def test_search_with_a2a_fixed_keeps_only_divisible_plans(capsys) -> None:
    """``search --fix cp_comm=a2a``: every candidate's heads divide by its cp (the mask
    applies ``heads_ok``, the rule make_job raises): Llama 3 8B at cp 8 keeps tp 1 only (8
    KV heads: 4 a rank at tp 2). Global batch 32, not the default 1536: the same plans'
    shapes (the mask reads no batch), each simulated with 2 to 32 micro-batches, not 96 to
    1536 (dp 1 or 2, mbs 1 to 8)."""
    rc = main(["search", "--model", "llama3-8b", "--cluster", "dgx-h100:2", "--framework",
               "megatron-core", "--global-batch", "32", "--fix", "cp=8,cp_comm=a2a", "--json",
               "--top", "5"])
    stdout, stderr = capsys.readouterr()
    assert rc == 0, stderr
    out = json.loads(stdout)
    plans = [c["plan"] for c in out["plans"]]
    assert plans and all(p["cp"] == 8 and p["tp"] == 1 and p.get("cp_comm") == "a2a"
                         for p in plans)
    assert out["pruned"]["cp_seq"] > 0 and "cp_comm=a2a" in out["pruned_rules"]["cp_seq"]


def test_stacks_that_run_it() -> None:
    """Megatron-Core and the stacks built on it run a2a (from Transformer Engine 1.11 where
    the stack states a release); torchtitan (PyTorch's own ring) refuses it naming stack,
    feature and rule; a2a+p2p without its inner size is refused with its own message."""
    for name in ("megatron-core", "nemo"):
        assert "a2a" in get_profile(name).cp_comms
    assert _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a", framework="nemo").framework.cp_impl == "a2a"
    with pytest.raises(SpecError, match=r"cp_comm='a2a': torchtitan runs context parallelism "
                                        r"only its own way"):
        _job("tp=2,cp=4,mbs=1,gbs=4,zero=3,cp_comm=a2a", framework="torchtitan")
    with pytest.raises(SpecError, match=r"cp_comm='a2a\+p2p': .*hierarchical-context-parallel"):
        parse_plan("cp=4,cp_comm=a2a+p2p")
    # a stack stating a Transformer Engine before 1.11 (no AttnFuncWithCPAndQKVOA2A)
    assert cp_a2a.TE_FIRST == (1, 11)
    old = replace(get_profile("megatron-core"), te_version=(1, 10))
    with pytest.raises(SpecError, match=r"runs cp_comm p2p, all_gather .*; a2a needs "
                                        r"Transformer Engine >= 1.11, it states 1.10"):
        _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a", framework=old)
    new = replace(old, te_version=(1, 11))
    assert _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a", framework=new).framework.cp_impl == "a2a"


def test_plan_syntax_file_round_trip_and_export(tmp_path) -> None:
    """``cp_comm=a2a`` (alias ``cp_comm_type``) in text and in a plan file; the label says
    ``cp4:a2a``; the Megatron-LM export passes ``--cp-comm-type a2a``; a cp = 1 plan is the
    same floats with or without it."""
    p = parse_plan("tp=2,cp=4,cp_comm_type=A2A")
    assert p.cp_comm == "a2a" and "cp4:a2a" in p.short()
    path = tmp_path / "plan.yaml"
    path.write_text(plan_file_text(p, str(path)))
    back, _ = read_plan_file(str(path))
    assert back == p
    job = _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a")
    args = megatron_args(job)[0]
    assert "--cp-comm-type a2a" in args
    base, other = _job("tp=2,pp=2,mbs=1,gbs=16", seq=4096), \
        _job("tp=2,pp=2,mbs=1,gbs=16,cp_comm=a2a", seq=4096)
    e0, e1 = estimate(base), estimate(other)
    assert e1.step_time_s == e0.step_time_s and e1.breakdown_s == e0.breakdown_s
    assert memory_components(other, 0) == memory_components(base, 0)


def test_deterministic() -> None:
    """The same plan twice: the same floats, estimate and flows simulation."""
    a, b = (_job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a") for _ in range(2))
    assert estimate(a).step_time_s == estimate(b).step_time_s
    assert simulate(a, network="flows").step_time_s == simulate(b, network="flows").step_time_s


@pytest.mark.parametrize("rc", ["recompute=none", "recompute=full,recompute_layers=1,recompute_method=block"])
def test_uneven_interleaved_memory_arrays_equal_scalar(rc: str) -> None:
    """An interleaved plan whose chunks differ (``account_embedding``/``account_loss``: the
    scalar model prices each chunk's layers, ``memory.job_layers``) keeps a2a's saved
    head-sharded output there too: the search's memory rule (``space_memory``, the arrays
    path) equals ``peak_memory`` to 1e-12, and a2a holds more than p2p (Qwen3-30B-A3B on one
    DGX B200, fp8, tp 2 pp 2 vpp 5 cp 2; the two paths were 2.9 GiB apart before)."""
    from strategies.memory import peak_memory
    from strategies.search.space_memory import space_memory
    from strategies.stacks.profile import stack_system
    m, cl = model_preset("qwen3-30b-a3b"), cluster_preset("dgx-b200", 1)
    peaks = {}
    for comm in ("p2p", "a2a"):
        spec = (f"tp=2,pp=2,dp=1,cp=2,ep=4,mbs=8,gbs=16,schedule=interleaved,vpp=5,{rc},sp=true,"
                f"zero=2,etp=1,cp_comm={comm},account_embedding=true,account_loss=true")
        job = make_job(m, cl, parse_plan(spec), dtype="fp8")
        rule = space_memory(m, cl.gpu, "fp8", job.framework, stack_system(job.framework, job.system))
        arrays = float(rule.peak(PlanArrays.from_plans([job.plan]))[0])
        peaks[comm] = peak_memory(job)[1].total
        assert arrays == pytest.approx(peaks[comm], rel=1e-12)
    assert peaks["a2a"] > peaks["p2p"]
