"""Plan ``cp_comm=a2a+p2p`` with ``hierarchical_cp=k``: Megatron-Core's hierarchical context
parallelism (``--hierarchical-context-parallel-sizes k cp/k``; Transformer Engine's ring with
``cp_group = [a2a group, p2p group]``). Each level's exchanged bytes as closed forms; the
waits the sum of the a2a rule at ``k`` and the ring's at ``(t·k, c/k)``; ``k = c`` pricing as
``a2a``; the estimate, bound and contention-free simulation agreeing; the simulator's two
sub-groups; memory; the recomputation rerun; the plan's field, its refusals by name, the
round trip and the export; determinism. docs/calibration.md §5.189."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.cli.main import main
from simulator.program.compiler import compile_job
from simulator.program.ops import Collective
from simulator.simulate import simulate
from strategies.cost import comm_bytes, cp_a2a, cp_hier, cp_ring
from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.memory.scalar import memory_components
from strategies.placement import groups
from strategies.plan import Plan, parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.plan_file import plan_file_text, read_plan_file
from strategies.presets import model_preset
from strategies.search.fix_parse import parse_fix
from topologies.cluster import cluster_preset

MIB = 2 ** 20
G17 = replace(model_preset("gpt-1.7b"), seq_length=16384)   # 24 heads (MHA), head dim 96


def _job(spec: str, framework="megatron-core", nodes: int = 2):
    return make_job(G17, cluster_preset("dgx-h100", nodes), parse_plan(spec),
                    framework=framework)


def _bound(job) -> float:
    return float(step_time_lower_bound(job.model, job.cluster, job.dtype,
                                       PlanArrays.from_plans([job.plan]), job.framework)[0])


HIER = "tp=1,cp=16,mbs=1,gbs=4,cp_comm=a2a+p2p,hierarchical_cp="


def test_each_levels_bytes_closed_forms() -> None:
    """Llama 2 7B (32 heads of 128, MHA) at 64K, tp 1, cp 16, k 2: a rank sends Q/K/V of its
    4,096 tokens over 32 heads, 96 MiB, and O, 32 MiB, in its all-to-all (as a2a: the bytes
    do not depend on the group); the ring then gathers K/V of the 65,536 tokens over
    ``32/(t·k)`` = 16 heads, 512 MiB (the ring's buffer at tensor size ``t·k``)."""
    m = model_preset("llama2-7b").with_seq_length(65536)
    job = make_job(m, cluster_preset("dgx-h100", 2),
                   parse_plan("tp=1,cp=16,mbs=1,gbs=16,cp_comm=a2a+p2p,hierarchical_cp=2"),
                   framework="megatron-core")
    sc = stage_costs(job)
    assert sc.cp_hier and not sc.cp_a2a and sc.cp_a2a_size == 2.0
    assert sc.cp_qkv_bytes == 96 * MIB == 2 * 4096 * 3 * 32 * 128
    assert sc.cp_out_bytes == 32 * MIB
    assert sc.cp_bytes == 512 * MIB == 2 * 65536 * 16 * 2 * 128
    assert sc.cp_bytes == comm_bytes.cp_gather_bytes(m, 1, *cp_hier.ring_sizes(1, 16, 2))
    assert cp_hier.ring_sizes(2, 8, 4) == (8, 2.0)
    assert cp_hier.a2a_size("a2a", 8, 2) == 8 and cp_hier.a2a_size("ring", 8, 2) == 1


def test_waits_are_the_two_rules_sum() -> None:
    """gpt-1.7b, tp 1, cp 16 over two nodes, k 8: the all-to-all inside a node (8 ranks 1
    apart), the ring across (2 ranks 8 apart). Transformer Engine's calls, one per tensor
    (``cp_a2a.group_wait``): forward Q, K, V then O, backward dO (the newest releases send
    it alone) then dQ, dK, dV; multi-head attention's four are ``S`` each and the calls
    outlast two copies (``c``), so each pass waits ``3·t(S) - 4·c + t(S)``; plus the ring's
    exposure of its all-gathers over ``c/k`` at stride ``t·k`` beside the core less the
    copies (``ring_record``); the estimate's CP seconds are ``L·m·(forward + backward)``."""
    job = _job(HIER + "8")
    cl, sc = job.cluster, stage_costs(job)

    def t(n):
        return float(cm.collective_time("alltoall", n, 8, 1, cl))

    t_ag = float(cm.collective_time("allgather", sc.cp_bytes, 2, 8, cl))
    S, c = float(sc.cp_out_bytes), 2 * float(sc.cp_out_bytes) / sc.copy_rate
    assert float(sc.cp_qkv_bytes) == pytest.approx(3 * S, rel=1e-15) and t(S) >= 2 * c
    copies = cp_a2a.COPY_PASSES * 4 * S / sc.copy_rate
    ring = replace(sc, attn_fwd=sc.attn_fwd - copies, attn_bwd=sc.attn_bwd - copies)
    r_f, r_b = cp_ring.layer_waits(t_ag, ring, 16)
    f, b = cp_hier.layer_waits(lambda n: cm.collective_time("alltoall", n, 8, 1, cl), t_ag,
                               sc, 16)
    assert float(r_f) > 0 and sc.cp_bwd_out == 1.0
    assert float(f) == pytest.approx(4 * t(S) - 4 * c + float(r_f), rel=1e-12)
    assert float(b) == pytest.approx(4 * t(S) - 4 * c + float(r_b), rel=1e-12)
    e = estimate(job)
    layers = job.model.num_layers * job.num_microbatches
    assert e.breakdown_s["cp_comm"] == pytest.approx(layers * (float(f) + float(b)), rel=1e-9)


def test_core_is_the_rings_at_t_k_plus_the_copies() -> None:
    """The attention core at ``(t·k, c/k)`` with the ring's grid, plus the all-to-all's HBM
    copies, ``COPY_PASSES`` of Q/K/V and O each pass; of O once more backward where the
    release sends the saved output again (Transformer Engine before 2.15)."""
    from strategies.cost import attention_time
    from strategies.cost.hbm_rate import usable_hbm
    job = _job(HIER + "4")
    sc, fw, gpu = stage_costs(job), job.framework, job.cluster.gpu
    ring_fw = replace(fw, cp_impl="ring")
    f0, b0 = attention_time.attention_time_fwd(G17, 1, 4, 4, True, gpu, 1.0, ring_fw,
                                               job.system)
    hbm = usable_hbm(gpu, job.system)
    c = cp_a2a.copy_bytes(G17, 1, 1, 16)
    f1, b1 = attention_time.attention_time_fwd(G17, 1, 1, 16, True, gpu, 1.0, fw, job.system,
                                               4.0)
    assert float(sc.attn_fwd) > float(f0)
    assert float(f1) == pytest.approx(float(f0) + c / hbm, rel=1e-12)
    assert float(b1) == pytest.approx(float(b0) + c / hbm, rel=1e-12)
    old = replace(fw, te_version=(2, 14))
    _, b2 = attention_time.attention_time_fwd(G17, 1, 1, 16, True, gpu, 1.0, old, job.system,
                                              4.0)
    assert float(b2) == pytest.approx(
        float(b0) + (c + cp_a2a.COPY_PASSES * cp_a2a.out_bytes(G17, 1, 1, 16)) / hbm, rel=1e-12)


def test_waits_at_k_equal_cp_are_a2as() -> None:
    """At ``k = c`` (refused as a plan: that is ``a2a``, another function) the arrays
    estimate's CP seconds are ``a2a``'s: the ring over one rank sends nothing, and the
    newest releases' ring function, like a2a's, sends dO alone (Transformer Engine 2.15)."""
    m, cl = G17, cluster_preset("dgx-h100", 2)
    p = Plan(tp=2, cp=4, dp=2, mbs=1, gbs=4, cp_comm="a2a")
    one = PlanArrays.from_plans([p])
    hier = replace(one, cp_comm=np.array([4]), hierarchical_cp=np.array([4.0]))
    a = estimate_arrays(m, cl, "bf16", one, "megatron-core")
    h = estimate_arrays(m, cl, "bf16", hier, "megatron-core")
    assert float(a["cp_comm"][0]) > 0
    assert float(h["cp_comm"][0]) == pytest.approx(float(a["cp_comm"][0]), rel=1e-12)


@pytest.mark.parametrize("spec", [HIER + "2", HIER + "8",
                                  "tp=2,cp=8,mbs=1,gbs=4,cp_comm=a2a+p2p,hierarchical_cp=4"])
def test_estimate_bound_and_contention_free_simulation_agree(spec: str) -> None:
    """What a2a+p2p changes against the ring alone (cp_comm p2p): the estimate's and the
    contention-free simulation's within 1 % of each other (measured: 0.1 %; the same rules,
    the simulator's flows on the two sub-groups), each plan within 1.5 % of its simulation
    (the ring's own small-job gap, 0.4-0.9 % here), the bound below the estimate."""
    job, ring = _job(spec), _job(spec.split(",cp_comm")[0])
    e, e_r = estimate(job).step_time_s, estimate(ring).step_time_s
    s = simulate(job, network="contention-free").step_time_s
    s_r = simulate(ring, network="contention-free").step_time_s
    assert e < e_r and s < s_r
    assert s - s_r == pytest.approx(e - e_r, rel=0.01)
    assert s == pytest.approx(e, rel=0.015)
    assert _bound(job) <= e


def test_simulator_runs_the_alltoall_on_the_inner_groups_and_the_ring_across() -> None:
    """tp 2, cp 8, k 2 (CP group 0, 2, ..., 14): rank 0's all-to-alls run over (0, 2), its
    ring over (0, 4, 8, 12); the all-to-alls move ``L·m·(2·Q/K/V + 2·O)`` (O, then dO in
    the backward), one call per tensor (``8·L·m`` calls), the ring ``L·m·3`` all-gathers of
    ``cp_bytes`` (one forward, two backward)."""
    job = _job("tp=2,cp=8,mbs=1,gbs=4,cp_comm=a2a+p2p,hierarchical_cp=2")
    p = job.plan
    assert groups(p, "cpa")[:2] == [[0, 2], [1, 3]] and groups(p, "cpr")[0] == [0, 4, 8, 12]
    sc = stage_costs(job)
    prog = compile_job(job, ranks=[0])[0]
    ops = [op for op in prog.streams["cp-comm"] if type(op) is Collective]
    a2a = [op for op in ops if op.kind == "alltoall"]
    ring = [op for op in ops if op.kind == "allgather"]
    assert a2a and ring and len(a2a) + len(ring) == len(ops)
    assert all(op.group == (0, 2) for op in a2a) and all(op.group == (0, 4, 8, 12)
                                                         for op in ring)
    L, m = job.model.num_layers, job.num_microbatches
    assert sum(op.nbytes * op.repeat for op in a2a) == pytest.approx(
        L * m * (2 * sc.cp_qkv_bytes + 2 * sc.cp_out_bytes), rel=1e-12)
    assert sum(op.repeat for op in a2a) == pytest.approx(8 * L * m, rel=1e-12)
    assert sum(op.nbytes * op.repeat for op in ring) == pytest.approx(3 * L * m * sc.cp_bytes,
                                                                      rel=1e-12)


def test_memory_the_alltoalls_buffers_only() -> None:
    """Against the ring alone: "other" holds the all-to-all's buffers (``3·qkv_bytes``, as
    a2a's), and each layer's stash the head-sharded output the newest releases' ring
    function saves (Transformer Engine 2.15: ``out_part``, as a2a's, ``cp_a2a.saved_delta``);
    its Q/K/V hold the rank's bytes in another layout."""
    h = memory_components(_job("tp=1,cp=8,mbs=1,gbs=4,cp_comm=a2a+p2p,hierarchical_cp=2"), 0)
    p = memory_components(_job("tp=1,cp=8,mbs=1,gbs=4"), 0)
    a = memory_components(_job("tp=1,cp=8,mbs=1,gbs=4,cp_comm=a2a"), 0)
    assert h["recompute"] == p["recompute"]
    assert a["layers"].activations > p["layers"].activations
    assert h["layers"].activations - p["layers"].activations == \
        a["layers"].activations - p["layers"].activations
    stash = G17.num_layers * cp_a2a.out_bytes(G17, 1, 1, 8)
    assert h["layers"].activations - p["layers"].activations == pytest.approx(stash, rel=1e-12)
    frag = _job("tp=1,cp=8,mbs=1,gbs=4").system.fragmentation
    assert h["other"].other - p["other"].other == pytest.approx(
        cp_a2a.working_bytes(G17, 1, 1, 8) + frag * stash, rel=1e-9)


@pytest.mark.parametrize("rc", ["full", "selective"])
def test_recomputed_forward_waits_again(rc: str) -> None:
    """Full recomputation reruns the layer's attention forward (and Megatron-Core's
    selective ``core_attn`` the core): its backward waits once more on both levels, the
    all-to-all's calls as the forward's (§5.191) and the ring's wait at the rerun's window
    less the all-to-all's copies; the forward's own unchanged."""
    base, rec = stage_costs(_job(HIER + "4")), stage_costs(_job(HIER + f"4,recompute={rc}"))
    cl = _job(HIER + "4").cluster
    t_ag = float(cm.collective_time("allgather", base.cp_bytes, 4, 4, cl))

    def waits(sc):
        return cp_hier.layer_waits(lambda n: cm.collective_time("alltoall", n, 4, 1, cl),
                                   t_ag, sc, 16)

    f0, b0 = waits(base)
    f1, b1 = waits(rec)
    assert rec.cp_per_layer_recompute == 1.0
    def t(n):
        return cm.collective_time("alltoall", n, 4, 1, cl)

    # the rerun's calls as the forward's (``group_wait``, TE's rerun is the forward's code),
    # the ring beside the rerun's core less the forward's copies
    parts = [rec.cp_qkv_bytes * x for x in rec.cp_qkv_parts]
    a = float(cp_a2a.group_wait(t, parts, rec.copy_rate)
              + cp_a2a.group_wait(t, [rec.cp_out_bytes], rec.copy_rate))
    assert a < sum(float(t(n)) for n in parts + [rec.cp_out_bytes])   # copies hidden
    c_f = float(cp_a2a.pass_copy_seconds(rec, rec.cp_qkv_bytes)[0])
    assert 0 < c_f < rec.cp_rerun_attn
    ring_rerun = float(cp_ring.ring_exposed(t_ag, rec.cp_rerun_attn - c_f,
                                            rec.cp_exposed_fraction))
    assert float(f1) == pytest.approx(float(f0), rel=1e-12)
    assert float(b1) == pytest.approx(float(b0) + a + ring_rerun, rel=1e-12)


def test_plan_field_refusals_by_name(capsys) -> None:
    """``hierarchical_cp`` is required by ``a2a+p2p``, an integer dividing ``cp`` strictly
    between 1 and ``cp``, refused with any other ``cp_comm``, and the all-to-all's heads rule
    holds at ``k`` (gpt-1.7b's 24 heads at tp 2: 12 do not split over 8); a stack stating a
    Transformer Engine before 1.12 and torchtitan refuse it; the search has no axis for it.
    The CLI answers exit 2 and one line."""
    for spec, match in (("cp=8,cp_comm=a2a+p2p", r"cp_comm='a2a\+p2p': a2a\+p2p needs "
                                                 r"hierarchical_cp"),
                        ("cp=8,cp_comm=a2a+p2p,hierarchical_cp=8", r"hierarchical_cp=8: must "
                                                                   r"divide cp=8"),
                        ("cp=8,cp_comm=a2a+p2p,hierarchical_cp=3", r"hierarchical_cp=3"),
                        ("cp=8,cp_comm=a2a+p2p,hierarchical_cp=1", r"hierarchical_cp=1"),
                        ("cp=8,cp_comm=p2p,hierarchical_cp=2", r"hierarchical_cp=2: is the "
                                                               r"all-to-all size"),
                        ("cp=8,hierarchical_cp=2", r"hierarchical_cp=2")):
        with pytest.raises(SpecError, match=match):
            parse_plan(spec)
    with pytest.raises(SpecError, match=r"hierarchical_cp=8: cp_comm=a2a\+p2p scatters attention "
                                        r"heads .*num_attention_heads/tp=24/2"):
        _job("tp=2,cp=16,mbs=1,gbs=4,cp_comm=a2a+p2p,hierarchical_cp=8", nodes=4)
    _job("tp=2,cp=16,mbs=1,gbs=4,cp_comm=a2a+p2p,hierarchical_cp=4", nodes=4)
    assert cp_hier.TE_FIRST == (1, 12)
    old = replace(get_profile("megatron-core"), te_version=(1, 11))
    with pytest.raises(SpecError, match=r"a2a\+p2p needs Transformer Engine >= 1.12, it "
                                        r"states 1.11"):
        _job("tp=2,cp=8,mbs=1,gbs=4,cp_comm=a2a+p2p,hierarchical_cp=2", framework=old)
    _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=a2a", framework=old)
    with pytest.raises(SpecError, match=r"cp_comm='a2a\+p2p': torchtitan"):
        _job("tp=2,cp=8,mbs=1,gbs=4,zero=3,cp_comm=a2a+p2p,hierarchical_cp=2",
             framework="torchtitan")
    assert parse_fix("cp_comm=a2a+p2p") == {"cp_comm": "a2a+p2p"}   # the search sizes k
    # the CLI in this process (its exit status in a real process: tests/test_cli_errors.py)
    rc = main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:2", "--plan",
               "tp=2,cp=8,gbs=8,cp_comm=a2a+p2p,hierarchical_cp=8"])
    out, err = capsys.readouterr()
    err = err.strip()
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and "hierarchical_cp=8" in err


def test_plan_round_trip_label_and_export(tmp_path) -> None:
    """In text and in a plan file; the label ``cp8:a2a2+p2p``; the Megatron-LM export passes
    ``--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 4``."""
    p = parse_plan("tp=2,cp=8,cp_comm_type=A2A+P2P,hierarchical_cp=2")
    assert p.cp_comm == "a2a+p2p" and p.hierarchical_cp == 2 and "cp8:a2a2+p2p" in p.short()
    path = tmp_path / "plan.yaml"
    path.write_text(plan_file_text(p, str(path)))
    back, _ = read_plan_file(str(path))
    assert back == p
    args = megatron_args(_job("tp=2,cp=8,mbs=1,gbs=4,cp_comm=a2a+p2p,hierarchical_cp=2"))[0]
    assert "--cp-comm-type a2a+p2p" in args
    assert "--hierarchical-context-parallel-sizes 2 4" in args
    cols = PlanArrays.from_plans([p.__class__(**{**p.to_dict(), "dp": 1, "gbs": 1})]
                                 ).to_columns()
    assert cols["cpk"].tolist() == [2] and PlanArrays.from_columns(cols).hierarchical_cp == [2]


def test_deterministic_and_folding_keeps_the_sub_groups() -> None:
    """The same plan twice: the same floats, estimate and flows simulation; the folded
    simulation (ranks standing for others only where both sub-groups map onto themselves)
    the unfolded one's, bit for bit."""
    a, b = (_job(HIER + "4") for _ in range(2))
    assert estimate(a).step_time_s == estimate(b).step_time_s
    assert simulate(a, network="flows").step_time_s == simulate(b, network="flows").step_time_s
    j = _job("tp=2,cp=8,mbs=1,gbs=4,cp_comm=a2a+p2p,hierarchical_cp=2")
    assert simulate(j, network="flows").step_time_s == \
        simulate(j, network="flows", fold=False).step_time_s
