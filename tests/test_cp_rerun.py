"""The recomputed forward's context-parallel exchange (docs/calibration.md §5.187): full
recomputation (Megatron-Core's ``checkpointed_forward``, torchtitan's ``FullAC``) and
Megatron-Core's selective ``core_attn`` (``_checkpointed_attention_forward``) rerun the CP
attention function, which sends again. The rerun count (``recompute.cp_reruns``); each
implementation's backward wait growing by exactly its forward's (``cp_ring.with_rerun``);
the estimate's CP seconds by ``L·m`` of them; the simulator's cp-comm flows by the forward's
bytes per rerun, placed as the forward's around the rerun's attention core (the step's
closed form); the estimate, the bound and the contention-free simulation agreeing."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.program.compiler import compile_job
from simulator.program.ops import Collective
from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost import cp_ring
from strategies.cost import cp_a2a
from strategies.cost.recompute import cp_reruns, modules_mask
from strategies.cost.stage import stage_costs
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.estimate.scalar import estimate
from strategies.estimate.terms.layer_comm import cp_waits
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

COMMS = ("p2p", "all_gather", "a2a")


def _job(spec: str, framework: str = "megatron-core", modules: tuple | None = None):
    m = replace(model_preset("gpt-1.7b"), seq_length=16384)   # 24 layers, 24 heads
    plan = parse_plan(spec)
    if modules is not None:
        plan = replace(plan, recompute_modules=modules)
    return make_job(m, cluster_preset("dgx-h100", 2), plan, framework=framework)


def _waits(job):
    """``(forward, backward)`` seconds of one layer pass's CP waits, the estimate's rule
    (``cp_ring.layer_waits`` or ``cp_a2a.layer_waits`` by the stack's exchange)."""
    return cp_waits(stage_costs(job), job.cluster, job.plan.tp, job.plan.cp)


def test_rerun_counts() -> None:
    """Full: the recomputed share of the layers; selective with ``core_attn`` (the default
    module) where the stack checkpoints the core attention: one; selective without it, op
    and none: zero."""
    core, mlp = modules_mask(("core_attn",)), modules_mask(("mlp",))
    rc = np.array([2, 2, 1, 1, 1, 3, 0])
    mask = np.array([0, 0, 0, core | mlp, mlp, 0, 0])
    share = np.array([1.0, 0.25, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert cp_reruns(rc, mask, share, True).tolist() == [1.0, 0.25, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert cp_reruns(rc, mask, share, False).tolist() == [1.0, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0]
    spec = "tp=2,cp=4,mbs=1,gbs=4,pp=2,"
    assert stage_costs(_job(spec + "recompute=full")).cp_per_layer_recompute == 1.0
    part = stage_costs(_job(spec + "recompute=full,recompute_layers=3"))
    assert part.cp_per_layer_recompute == pytest.approx(3 / 12, rel=1e-15)  # 12 a stage
    assert stage_costs(_job(spec + "recompute=selective")).cp_per_layer_recompute == 1.0
    assert stage_costs(_job(spec + "recompute=selective", modules=("mlp",))
                       ).cp_per_layer_recompute == 0.0
    assert stage_costs(_job("tp=2,mbs=1,gbs=8,recompute=full")).cp_per_layer_recompute == 0.0


@pytest.mark.parametrize("comm", COMMS)
def test_backward_waits_grow_by_the_forwards(comm: str) -> None:
    """Each implementation's rule: the forward's wait unchanged, the backward's grown by
    exactly the forward's per rerun under full recomputation (the core rerun beside the
    ring as in the forward). Megatron-Core's selective ``core_attn`` reruns the fused
    kernel's forward too (``recompute_flash_fwd``, docs/calibration.md §5.188), so the ring
    hides behind the same core and every implementation grows by the forward's, as under
    full; a stack that reruns no fused core (``recompute_flash_fwd`` off) leaves the ring
    its whole pass with nothing beside it."""
    spec = f"tp=2,cp=4,mbs=1,gbs=4,cp_comm={comm},recompute="
    j0 = _job(spec + "none")
    f0, b0 = _waits(j0)
    f1, b1 = _waits(_job(spec + "full"))
    assert f0 > 0 and float(f1) == float(f0)
    rr = float(f0)      # a2a's four calls too: TE's rerun is the forward's code (§5.191)
    assert float(b1) - float(b0) == pytest.approx(rr, rel=1e-12)
    js = _job(spec + "selective")
    sc = stage_costs(js)
    assert sc.cp_rerun_attn == stage_costs(_job(spec + "full")).cp_rerun_attn == \
        sc.attn_fwd > 0
    fs, bs = _waits(js)
    assert float(bs) - float(b0) == pytest.approx(rr, rel=1e-12)
    bare = replace(js, framework=replace(js.framework, recompute_flash_fwd=False))
    sb = stage_costs(bare)
    assert sb.cp_rerun_attn == 0.0
    whole = cp_ring.PASS_VOLUME[True] * float(cm.collective_time(
        "allgather", sb.cp_bytes, 4, 2, bare.cluster))
    assert float(_waits(bare)[1]) - float(b0) == pytest.approx(
        whole if comm == "p2p" else rr, rel=1e-12)
    if comm == "p2p":
        assert whole > float(f0)        # the forward hides part of its ring
    sc = replace(stage_costs(j0), cp_per_layer_recompute=0.25)
    assert cp_ring.with_rerun(sc, 2.0, 3.0) == 3.5


@pytest.mark.parametrize("comm", COMMS)
def test_estimate_cp_seconds_grow_by_the_forwards(comm: str) -> None:
    """The step's CP seconds grow by ``L·m`` forward waits under full recomputation (every
    layer rerun): exposed whole, nothing hides the rerun's exchange."""
    spec = f"tp=2,cp=4,mbs=1,gbs=4,cp_comm={comm},recompute="
    j0, j1 = _job(spec + "none"), _job(spec + "full")
    f0, _ = _waits(j0)
    layers = j0.model.num_layers * j0.num_microbatches
    d = estimate(j1).breakdown_s["cp_comm"] - estimate(j0).breakdown_s["cp_comm"]
    assert d == pytest.approx(layers * float(f0), rel=1e-9)


@pytest.mark.parametrize("comm", COMMS)
def test_simulator_emits_the_reruns_flows(comm: str) -> None:
    """The cp-comm stream carries the forward's exchange once more per recomputed layer:
    Q/K/V and O (a2a), one K/V all-gather's worth (ring, all-gather), on the CP group."""
    spec = f"tp=2,cp=4,mbs=1,gbs=4,cp_comm={comm},recompute="
    j0, j1 = _job(spec + "none"), _job(spec + "full")
    sc = stage_costs(j0)

    def moved(job):
        ops = [op for op in compile_job(job, ranks=[0])[0].streams["cp-comm"]
               if type(op) is Collective]
        assert all(op.group == (0, 2, 4, 6) for op in ops)
        return sum(op.nbytes * op.repeat for op in ops)

    per = float(sc.cp_bytes) + float(sc.cp_out_bytes) if comm == "a2a" else \
        float(sc.cp_bytes) * cp_ring.PASS_VOLUME[True]
    layers = j0.model.num_layers * j0.num_microbatches
    assert moved(j1) - moved(j0) == pytest.approx(layers * per, rel=1e-12)
    # block partial recomputation, 3 of a stage's 12 layers: their reruns only
    jp = _job(f"tp=2,cp=4,pp=2,mbs=1,gbs=4,cp_comm={comm},recompute=full,recompute_layers=3")
    j0p = _job(f"tp=2,cp=4,pp=2,mbs=1,gbs=4,cp_comm={comm},recompute=none")
    assert moved(jp) - moved(j0p) == pytest.approx(3 * j0p.num_microbatches * per, rel=1e-12)


@pytest.mark.parametrize("comm", COMMS)
@pytest.mark.parametrize("rc", ("full", "selective"))
def test_estimate_bound_and_contention_free_simulation_agree(comm: str, rc: str) -> None:
    """With recomputation each plan's estimate within 1.5 % of its contention-free
    simulation (as without: ``test_cp_a2a``), the bound below the estimate; under selective
    ``core_attn`` (FlashAttention: the exchange alone rerun) the rerun adds the same
    seconds to both within 2 %."""
    job = _job(f"tp=2,cp=4,mbs=1,gbs=4,cp_comm={comm},recompute={rc}")
    e = estimate(job).step_time_s
    s = simulate(job, network="contention-free").step_time_s
    assert s == pytest.approx(e, rel=0.015)
    if rc == "selective":
        j0 = _job(f"tp=2,cp=4,mbs=1,gbs=4,cp_comm={comm},recompute=none")
        d_e = e - estimate(j0).step_time_s
        assert d_e > 0
        assert s - simulate(j0, network="contention-free").step_time_s == \
            pytest.approx(d_e, rel=0.02)
    bound = step_time_lower_bound(job.model, job.cluster, job.dtype,
                                  PlanArrays.from_plans([job.plan]), job.framework)[0]
    assert float(bound) <= e


def test_torch_ring_stalls_once_more() -> None:
    """PyTorch's ring (torchtitan's FullAC reruns the block, SDPA and ring inside): the
    backward's stalls grow by the forward's, the rule's own field (unchanged by §5.187)."""
    spec = "tp=2,cp=4,mbs=1,gbs=4,recompute="
    s0, s1 = (stage_costs(_job(spec + r, "torchtitan")) for r in ("none", "full"))
    assert s0.cp_torch and s1.cp_per_layer_recompute == 1.0
    assert s1.cp_stall_bwd - s0.cp_stall_bwd == pytest.approx(s0.cp_stall_fwd, rel=1e-12)


@pytest.mark.parametrize("comm", COMMS)
def test_arrays_price_each_plans_reruns(comm: str) -> None:
    """The search's arrays path scores no, selective and full recomputation in one call,
    each plan's CP seconds equal to its scalar estimate's."""
    from strategies.estimate.analytic import estimate_arrays
    jobs = [_job(f"tp=2,cp=4,mbs=1,gbs=4,cp_comm={comm},recompute={rc}")
            for rc in ("none", "selective", "full")]
    j = jobs[0]
    got = estimate_arrays(j.model, j.cluster, j.dtype,
                          PlanArrays.from_plans([x.plan for x in jobs]), j.framework)
    want = [estimate(x).breakdown_s["cp_comm"] for x in jobs]
    assert np.asarray(got["cp_comm"]).reshape(-1).tolist() == pytest.approx(want, rel=1e-12)
    assert want[0] < want[1] and want[0] < want[2]


#: (cp_comm, plan tail, CP size) of the closed forms: one node, tp 1
EXCHANGES = (("p2p", "", 2), ("all_gather", "", 2), ("a2a", "", 2),
             ("a2a+p2p", ",hierarchical_cp=2", 4))


@pytest.mark.parametrize("comm,tail,cp", EXCHANGES)
@pytest.mark.parametrize("window", ("none", "part", "whole"))
@pytest.mark.parametrize("gran", ("chunk", "layer"))
def test_rerun_exchange_closed_form(comm: str, tail: str, cp: int, window: str,
                                    gran: str) -> None:
    """One micro-batch on one stage (no embedding, head, optimizer or gradient reduction),
    full recomputation, contention-free: the step is each pass's compute plus its exchange
    as Transformer Engine runs it, the rerun cut as the forward (its non-attention part,
    then its attention core ``a_r`` with the exchange around it; docs/calibration.md §5.187):
    ``L·(X - a) + L·pre + max(L·a, (1 - f)·L·t·v) + f·L·t·v + L·post`` for each pass ``X``
    (forward, rerun, backward) with its core ``a``, all-to-alls ``pre``/``post`` and ring
    volume ``v`` (1 forward, 2 backward), ``t`` one K/V all-gather at the ring's sizes. The
    rerun's core: none (the ring's rerun exposed whole), a quarter of the ring's
    overlappable share (part of it exposed), or longer than it (hidden but its last step),
    the rest of the rerun (3 ms a layer) beside nothing. Equal to 1e-12."""
    job = make_job(replace(model_preset("gpt-1.7b"), seq_length=16384),
                   cluster_preset("dgx-h100", 1),
                   parse_plan(f"tp=1,cp={cp},mbs=1,gbs={8 // cp},recompute=full,"
                              f"cp_comm={comm}{tail}"))
    sc = stage_costs(job)
    cl, L, f = job.cluster, job.model.num_layers, sc.cp_exposed_fraction

    def a2a(n: float, k: int) -> float:
        return float(cm.collective_time("alltoall", n, k, 1, cl))

    t_ring, pre_f, post_f, pre_b, post_b = 0.0, 0.0, 0.0, 0.0, 0.0
    cf = cb = 0.0
    if sc.cp_a2a or sc.cp_hier:     # one call a tensor (§5.191): each pass's beyond its
        # copies (``group_wait``), the copies out of the core the ring runs beside; the
        # rerun's as the forward's (TE's rerun is the forward's code)
        k = 2 if sc.cp_hier else cp
        qkv = sc.cp_qkv_bytes if sc.cp_hier else sc.cp_bytes
        parts, o = [qkv * x for x in sc.cp_qkv_parts], sc.cp_out_bytes

        def gw(ns: list) -> float:
            return float(cp_a2a.group_wait(lambda n: a2a(n, k), ns, sc.copy_rate))

        pre_f, post_f = gw(parts), gw([o])
        pre_b, post_b = gw([o] * int(sc.cp_bwd_out)), pre_f
        cf, cb = (float(x) for x in cp_a2a.pass_copy_seconds(sc, qkv))
    if sc.cp_hier:          # the all-to-all over 2 ranks, the ring at (t·k, c/k) = (2, 2)
        t_ring = float(cm.collective_time("allgather", sc.cp_bytes, cp // 2, 2, cl))
    elif not sc.cp_a2a:
        t_ring = float(cm.collective_time("allgather", sc.cp_bytes, cp, 1, cl))
    assert (t_ring > 0) == (comm != "a2a") and (pre_f > 0) == comm.startswith("a2a")
    R = 3e-3
    a_r = {"none": 0.0, "part": 0.25 * (1 - f) * t_ring,
           "whole": 2 * (1 - f) * t_ring + 1e-4}[window]
    # the rerun's core carries its copies, as the forward's ``attn_fwd`` does
    costs = replace(sc, embedding_fwd=0.0, embedding_bwd=0.0, head_fwd=0.0, head_bwd=0.0,
                    optimizer_by_stage=(0.0,), passes_by_stage=(0.0,), grad_bytes=0.0,
                    layer_recompute=R, cp_rerun_attn=a_r + cf, by_kind={})

    def one_pass(x: float, a: float, pre: float, post: float, vol: float) -> float:
        ring = L * vol * t_ring
        return L * (x - a) + L * pre + max(L * a, (1 - f) * ring) + f * ring + L * post

    rerun = one_pass(R - cf, a_r, pre_f, post_f, 1.0) + L * cf
    closed = (one_pass(sc.layer_fwd - cf, sc.attn_fwd - cf, pre_f, post_f, 1.0) + L * cf
              + rerun + one_pass(sc.layer_bwd - cb, sc.attn_bwd - cb, pre_b, post_b, 2.0)
              + L * cb)
    got = simulate(job, network="contention-free", costs=costs, granularity=gran).step_time_s
    assert got == pytest.approx(closed, rel=1e-12)
    if comm == "p2p":       # the ring's rerun exposed whole, in part, or but its last step
        exposed = rerun - L * R
        want = {"none": L * t_ring, "part": L * (t_ring - a_r), "whole": L * f * t_ring}
        assert exposed == pytest.approx(want[window], rel=1e-9)
