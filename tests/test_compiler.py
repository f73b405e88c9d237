"""The compiler: schedule order step for step, Megatron's exchanges, send/recv pairing,
costs read from the shared cost model, gradient buckets, determinism."""
from __future__ import annotations

from collections import defaultdict, deque

import pytest

from simulator.program.compiler import Layout, compile_job, compile_rank
from simulator.program.ops import Collective, Compute, Recv, Send
from strategies.schedules.exchanges import Exchange, pipeline_actions
from strategies.cost.stage import dgrad_reduce_pieces, dgrad_reduce_time, stage_costs
from strategies.cost import comm_bytes
from strategies.errors import SpecError
from strategies.job import make_job
from strategies.plan import Plan
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from topologies.cluster import cluster_preset


def _job(model="gpt-1.7b", nodes=2, **plan):
    return make_job(model_preset(model), cluster_preset("dgx-a100", nodes), Plan(**plan))


def pass_order(program) -> list[str]:
    """Labels of the forward/backward passes on the compute stream, consecutive pieces merged."""
    out: list[str] = []
    for op in program.streams["compute"]:
        if op.kind in ("forward", "backward") and (not out or out[-1] != op.label):
            out.append(op.label)
    return out


SCHEDULES = [
    dict(tp=2, pp=4, gbs=32),                                           # 1F1B p4 m8
    dict(tp=4, pp=4, gbs=8, schedule="gpipe"),
    dict(tp=2, pp=4, gbs=16, schedule="interleaved", vpp=2),            # p4 m8 v2
    dict(tp=4, pp=2, gbs=10, schedule="interleaved", vpp=2, microbatch_group_size=3),
    dict(tp=2, pp=2, gbs=8, schedule="interleaved", vpp=3, zero=1),
]


@pytest.mark.parametrize("plan", SCHEDULES)
@pytest.mark.parametrize("granularity", ["chunk", "layer"])
def test_compiled_order_reproduces_schedule(plan, granularity):
    job = _job(**plan)
    p = job.plan
    progs = compile_job(job, granularity=granularity)
    for rank, prog in progs.items():
        steps = get_schedule(p.schedule)(prog.stage, p.pp, job.num_microbatches, p.vpp,
                                         p.microbatch_group_size)
        assert pass_order(prog) == [s.label for s in steps], rank


def test_megatron_1f1b_exchanges():
    acts = [str(a) for a in pipeline_actions("1f1b", 1, 4, 8)]
    # warm-up: receive, forward, send; steady: F, (send fwd | recv bwd), B, (send bwd | recv fwd)
    assert acts[:6] == ["X(recv fwd 0.0)", "F0.c0", "X(send fwd 0.0)", "X(recv fwd 1.0)",
                        "F1.c0", "X(send fwd 1.0)"]
    assert "X(send fwd 2.0 | recv bwd 0.0)" in acts
    assert "X(send bwd 0.0 | recv fwd 3.0)" in acts
    first = [str(a) for a in pipeline_actions("1f1b", 0, 4, 8)]
    last = [str(a) for a in pipeline_actions("1f1b", 3, 4, 8)]
    assert not any("recv fwd" in a or "send bwd" in a for a in first)
    assert not any("send fwd" in a or "recv bwd" in a for a in last)
    assert last[:3] == ["X(recv fwd 0.0)", "F0.c0", "B0.c0"]   # F(i) followed at once by B(i)


def test_interleaved_ring_wraps():
    acts = pipeline_actions("interleaved", 0, 2, 4, 2)
    recvs = [m for a in acts if isinstance(a, Exchange) for m in a.recvs]
    assert ("fwd", 0, 1) in recvs          # rank 0 chunk 1 is fed by rank 1 chunk 0
    assert ("fwd", 0, 0) not in recvs      # the first virtual stage receives nothing


@pytest.mark.parametrize("plan", SCHEDULES)
def test_every_send_has_exactly_one_recv(plan):
    job = _job(**plan)
    p = job.plan
    progs = compile_job(job)
    sends, recvs = defaultdict(list), defaultdict(deque)
    for rank, prog in progs.items():
        for op in prog.streams.get("pp-comm", ()):
            if isinstance(op, Send):
                sends[(rank, op.dst, op.tag)].append(op)
            elif isinstance(op, Recv):
                recvs[(op.src, rank, op.tag)].append(op)
    assert sorted(sends) == sorted(recvs)
    stage_of = Layout(job).stage
    for (src, dst, tag), ops in sends.items():
        assert len(ops) == len(recvs[(src, dst, tag)])
        for s in ops:                                   # first-in first-out pairing
            r = recvs[(src, dst, tag)].popleft()
            assert s.microbatch == r.microbatch
            vs_s = s.chunk * p.pp + stage_of(src)
            vs_r = r.chunk * p.pp + stage_of(dst)
            assert vs_r == vs_s + (1 if tag == "fwd" else -1)


def _by_rank_ops(prog, cls):
    return [op for op in prog.ops() if isinstance(op, cls)]


def test_costs_come_from_the_cost_model():
    job = _job("llama3-8b", tp=4, pp=2, gbs=8, recompute="full")
    c = stage_costs(job)
    prog = compile_job(job, ranks=[0])[0]
    L = job.model.num_layers // job.plan.pp
    fwd = [op for op in prog.streams["compute"] if op.kind == "forward" and op.label == "F0.c0"]
    assert sum(op.seconds for op in fwd) == pytest.approx(L * c.layer_fwd, rel=1e-12)
    tp = [op for op in _by_rank_ops(prog, Collective) if op.category == "tp"]
    per_mb = sum(op.repeat for op in tp if op.label.endswith("F0.c0") or op.label.endswith("B0.c0"))
    # 2 fwd, 2 bwd, 2 in the full recompute; of the backward's, the data gradients'
    # reductions their weight-gradient GEMMs hide are not compiled (§5.75; here both)
    t_red = float(dgrad_reduce_time(c, 4, False, job.cluster))
    hidden = sum(share for share, pieces in dgrad_reduce_pieces(c)
                 if share > 0 and all(w >= t_red for _, w in pieces))
    assert hidden == 2
    assert per_mb == pytest.approx((2 + 2 - hidden + 2) * L)
    assert {op.nbytes for op in tp} == {comm_bytes.tp_comm_bytes_fwd(job.model, 1.0, 1.0)}
    sends = _by_rank_ops(prog, Send)
    assert {op.nbytes for op in sends} == {comm_bytes.pp_p2p_bytes(job.model, 1.0, 4.0, 1.0, False)}
    gathers = [op for op in _by_rank_ops(prog, Collective) if op.category == "pp_gather"]
    assert len(gathers) == len(_by_rank_ops(prog, Recv)) > 0      # no SP: gather each receive


def test_sequence_parallel_uses_reduce_scatter_and_allgather():
    prog = compile_job(_job(tp=4, pp=2, gbs=8, sp=True), ranks=[0])[0]
    kinds = {op.kind for op in _by_rank_ops(prog, Collective) if op.category == "tp"}
    assert kinds == {"reduce_scatter", "allgather"}
    assert not [op for op in _by_rank_ops(prog, Collective) if op.category == "pp_gather"]


@pytest.mark.parametrize("zero,overlap", [(0, True), (1, True), (1, False)])
def test_gradient_buckets(zero, overlap):
    job = _job(tp=2, pp=2, gbs=16, zero=zero, overlap_grad_reduce=overlap)
    c = stage_costs(job)
    prog = compile_job(job, ranks=[0])[0]
    dp = [op for op in prog.streams["dp-comm"] if op.label.startswith(("AR", "RS"))]
    assert {op.kind for op in dp} == {"allreduce" if zero == 0 else "reduce_scatter"}
    assert sum(op.nbytes for op in dp) == pytest.approx(c.grad_bytes * c.params_by_stage[0])
    assert all(op.nbytes <= c.grad_bytes * 2 * c.bucket_params for op in dp)
    ids = {op.id: op for op in prog.ops()}
    last_b = [op for op in prog.streams["compute"] if op.kind in ("backward", "embedding")][-1]
    deps = [ids[d] for op in dp for d in op.deps]
    if overlap:   # reduced during the last micro-batch's backward, bucket by bucket
        assert len({d.id for d in deps}) == len(dp) > 1
        assert all(d.label == f"B{job.num_microbatches - 1}.c0" for d in deps)
    else:         # all after the last backward
        assert {d.id for d in deps} == {last_b.id}
    gathers = [op for op in prog.streams["dp-comm"] if op.label.startswith("AG params")]
    assert len(gathers) == (len(dp) if zero >= 1 else 0)
    opt = [op for op in prog.streams["compute"] if op.kind == "optimizer"]
    # the stack's per-step passes (strategies.cost.step), then the optimizer itself
    assert [op.label for op in opt] == ["step passes", "optimizer"]
    assert (opt[0].seconds, opt[1].seconds) == (c.passes_by_stage[0], c.optimizer_by_stage[0])


def test_ids_unique_and_deps_local():
    progs = compile_job(_job(tp=2, pp=4, gbs=16, schedule="interleaved", vpp=3, cp=1))
    for prog in progs.values():
        ids = [op.id for op in prog.ops()]
        assert len(ids) == len(set(ids))
        assert all(d in set(ids) for op in prog.ops() for d in op.deps)


def test_compile_is_deterministic_and_relabel_exact():
    job = make_job(model_preset("gpt-1.7b"), cluster_preset("dgx-a100", 3),
                   Plan(tp=3, pp=2, gbs=8))            # tp groups straddle nodes
    a, b = compile_job(job), compile_job(job)
    assert a == b
    layout, c = Layout(job), stage_costs(job)
    assert all(a[r] == compile_rank(job, c, layout, r) for r in a)


def test_bad_granularity_is_refused():
    with pytest.raises(SpecError, match="granularity"):
        compile_job(_job(tp=2, pp=2, gbs=8), granularity="kernel")


def test_compute_ops_are_frozen():
    op = compile_job(_job(tp=8, pp=2, gbs=4), ranks=[0])[0].streams["compute"][0]
    assert isinstance(op, Compute)
    with pytest.raises(AttributeError):
        op.seconds = 0.0


@pytest.mark.parametrize("plan", ["pp=2,ep=16,gbs=16,moe_dispatcher=deepep,recompute=full",
                                  "pp=2,ep=8,etp=1,tp=2,gbs=16,zero=1"])
def test_members_of_a_collective_call_carry_the_same_op(plan):
    """Every member of a collective's n-th call on its (group, tag) channel carries the same
    kind, bytes, repeat, algorithm and remote share (the engine starts the call with the last
    member's op): the template rank's ops and the relabelled ones alike (``relabel`` once
    dropped the node-limited all-to-all's ``remote_scale``)."""
    import dataclasses
    from strategies.plan import parse_plan
    m = dataclasses.replace(model_preset("deepseek-v3"), num_layers=4, first_k_dense_replace=1,
                            num_nextn_predict_layers=0, seq_length=1024)
    job = make_job(m, cluster_preset("hgx-h800", 4), parse_plan(plan))
    calls: dict = defaultdict(list)
    for r, prog in compile_job(job).items():
        seen: dict = defaultdict(int)
        for ops in prog.streams.values():
            for op in ops:
                if type(op) is Collective:
                    ch = (op.group, op.tag)
                    calls[(ch, seen[ch])].append(
                        (op.kind, op.nbytes, op.repeat, op.algorithm, op.remote_scale))
                    seen[ch] += 1
    scales = {x[4] for v in calls.values() for x in v if x[0] == "alltoall"}
    if "deepep" in plan:                                   # deduplicated between nodes
        assert scales and all(0 < s < 1 for s in scales)
    bad = {k: set(v) for k, v in calls.items() if len(set(v)) > 1}
    assert not bad, list(bad.items())[:2]
