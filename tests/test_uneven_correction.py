"""The scalar estimate of an uneven pipeline layout (``estimate.chunk_correction.per_chunk``,
docs/calibration.md §5.93): the real chunks' order with each layer's own communication
replaces the even composition, so time added to a stage never shortens the step, and on a
data-parallel-free plan the estimate is the contention-free simulation (the same order over
the same costs)."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.simulate import simulate
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from tests.fuzz_profile import fuzz
from topologies.cluster import cluster_preset

SLOTS = "schedule=interleaved,mbs=1,zero=0,account_embedding=true,account_loss=true"
NO_ENDS = replace(MEGATRON_CORE, tp_end_collectives=False)


def job(spec: str, layers: int, fw=MEGATRON_CORE, nodes: int = 1):
    """Llama 3 8B cut to ``layers`` layers on ``nodes`` DGX H100 under ``spec``."""
    m = replace(model_preset("llama3-8b"), num_layers=layers)
    return make_job(m, cluster_preset("dgx-h100", nodes), parse_plan(spec), framework=fw,
                    dtype="bf16")


#: (plan, layers, nodes): one pipeline (dp 1), the embedding and the loss a layer slot each
EXACT = [(f"tp=2,pp=4,vpp=2,gbs=8,sp=true,{SLOTS}", 14, 1),
         (f"tp=2,pp=4,vpp=2,gbs=16,sp=true,{SLOTS}", 14, 1),
         (f"tp=4,pp=2,vpp=2,gbs=8,sp=true,{SLOTS}", 6, 1),
         (f"tp=8,pp=4,vpp=2,gbs=8,sp=true,{SLOTS}", 14, 4),
         ("tp=2,pp=4,vpp=2,gbs=8,sp=true,schedule=interleaved,mbs=1,zero=0,"
          "account_embedding=true", 15, 1)]


@pytest.mark.parametrize("spec,layers,nodes", EXACT)
def test_estimate_is_the_contention_free_simulation(spec, layers, nodes):
    """The same order over the same chunk costs and the same blocking collectives: the
    estimate equals the contention-free simulation, and §5.88's end collectives move both by
    the same seconds (before §5.93 the estimate kept the even composition's excess, and
    every case here failed)."""
    on, off = job(spec, layers, nodes=nodes), job(spec, layers, NO_ENDS, nodes)
    s_on = simulate(on, network="contention-free").step_time_s
    s_off = simulate(off, network="contention-free").step_time_s
    e_on, e_off = estimate(on).step_time_s, estimate(off).step_time_s
    assert e_on == pytest.approx(s_on, rel=1e-9)
    assert e_on - e_off == pytest.approx(s_on - s_off, rel=1e-9)
    assert e_on > e_off


@pytest.mark.parametrize("spec", [
    f"tp=1,pp=4,vpp=2,gbs=8,{SLOTS}",
    "tp=1,pp=4,vpp=2,gbs=8,mbs=1,zero=0,schedule=interleaved,first_stage_layers=2,"
    "last_stage_layers=4"])
def test_pipeline_part_is_the_free_order(spec):
    """Without layer communication (tp 1) the estimate's pipeline part (the step less the
    pipeline messages, the data-parallel tail and the optimizer) is the free-communication
    simulation's step less its optimizer: the order's makespan over the real chunks."""
    j = job(spec, 14)
    e = estimate(j)
    b = e.breakdown_s
    s = simulate(j, network="contention-free", free_comm=True)
    assert e.step_time_s - b["pp_comm"] - b["dp_comm"] - b["optimizer"] == pytest.approx(
        s.step_time_s - s.metrics["breakdown_s"]["optimizer"], rel=1e-12)


@pytest.mark.slow
@fuzz(60)
@given(pp=st.sampled_from([2, 4]), vpp=st.sampled_from([1, 2, 3]), k=st.integers(1, 2),
       tp=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(), m=st.sampled_from([1, 2, 3]),
       slots=st.sampled_from(["E", "L", "EL"]), zero=st.sampled_from([0, 2]))
def test_time_added_to_an_end_stage_never_shortens_the_step(pp, vpp, k, tp, sp, m, slots,
                                                            zero):
    """Monotonicity: the embedding's and the loss's stages get longer along the chain (no end
    collectives; §5.88's with one, three, five loss all-reduces per token), the other stages
    unchanged: the estimate never gets shorter (interleaved: ``per_chunk``; 1F1B with the
    slots: ``per_stage``); with ZeRO-2 and dp > 1 the reduce-scatters hide under the real
    pipeline (``scalar._real_tail``). Before §5.93, 168 of this grid's 840 plans that build
    got shorter, by up to 0.83 ms (``python -m experiments.uneven_correction --grid``)."""
    layers = pp * vpp * k - len(slots)
    nodes, dp = max(1, tp * pp // 8), max(1, 8 // (tp * pp))    # a whole number of nodes
    spec = (f"tp={tp},pp={pp},vpp={vpp},gbs={m * pp * dp},mbs=1,zero={zero},"
            f"sp={str(sp).lower()},"
            f"schedule={'interleaved' if vpp > 1 else '1f1b'},"
            f"account_embedding={str('E' in slots).lower()},"
            f"account_loss={str('L' in slots).lower()}")
    chain = [NO_ENDS] + [replace(MEGATRON_CORE, tp_loss_allreduces=(1,) * n) for n in (1, 3, 5)]
    try:
        steps = [estimate(job(spec, layers, fw, nodes)).step_time_s for fw in chain]
    except SpecError:       # a plan the layout grammar refuses (too few layers for a chunk)
        return
    assert all(b >= a * (1 - 1e-12) for a, b in zip(steps, steps[1:])), steps


def test_llama3_405b_row_no_longer_faster_with_the_end_collectives():
    """The §5.88 finding: llama3_405b_8192gpu_seq8k (interleaved pp 16 vpp 8, the embedding
    and the loss a slot each) got 19.8 ms faster when its end collectives were priced; the
    estimate now moves up, as its contention-free simulation does."""
    from strategies.reference.cases import DATA, case_from_entry
    path = os.path.join(os.path.dirname(DATA), "frontier_papers.json")
    with open(path) as fh:
        rows = json.load(fh)
    row = next(r for r in rows if r["id"] == "llama3_405b_8192gpu_seq8k")
    j = case_from_entry(row, rows).job
    off = replace(j, framework=replace(j.framework, tp_end_collectives=False))
    assert j.framework.tp_end_collectives and not j.layout.uniform
    assert estimate(j).step_time_s > estimate(off).step_time_s
