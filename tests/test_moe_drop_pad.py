"""MoE drop-and-pad (``Plan.moe_pad_to_capacity``, Megatron's
``--moe-pad-expert-input-to-capacity``; docs/calibration.md §5.125): every expert runs exactly
its capacity ``ceil(T/t·k/E·cf)`` rows from each GPU (``token_counts.expert_capacity``), so
the expert GEMMs' rows and the all-to-all's bytes are at capacity whatever the routing, and
the dispatcher skips the count all-gather and the device-to-host sync
(``moe_bytes.count_exchange``), in the estimate, the lower bound and the simulator alike."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import comm as cm
from strategies.cost import ep_dispatch, gemm_shapes, moe_bytes, moe_time, token_counts
from strategies.cost.stage import stage_cost_arrays
from strategies.errors import SpecError
from strategies.estimate import estimate
from strategies.estimate.lower_bound import step_time_lower_bound
from strategies.job import make_job
from strategies.plan import Plan, parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.search.fix_parse import parse_fix
from strategies.search.plan_rows import plan_key
from strategies.search.space import SpaceOptions, enumerate_space
from strategies.framework import get_profile
from simulator.simulate import simulate
from topologies.cluster import cluster_preset

MIX = model_preset("mixtral-8x7b")          # E = 8, k = 2


def test_capacity_closed_form_with_its_ceiling():
    """``ceil(b·s/(c·t)·k/E·cf)``: Megatron-Core's ``get_capacity`` on the router's rows;
    1.1 on 8192 copies over 8 experts is 1126.4, so 1127, and the load is 1127·8/8192."""
    s, E, k = MIX.seq_length, MIX.num_experts, MIX.moe_router_topk
    for b, tp, cp, cf in ((2, 1, 1, 1.1), (1, 2, 2, 1.0), (3, 4, 1, 0.5), (1, 1, 1, 2.0)):
        want = math.ceil(b * s / (cp * tp) * k / E * cf)
        assert token_counts.expert_capacity(MIX, b, tp, cp, cf) == want
        assert token_counts.padded_load(MIX, b, tp, cp, cf) == pytest.approx(
            want * E / (b * s / (cp * tp) * k), rel=1e-15)
    assert s == 4096
    assert token_counts.expert_capacity(MIX, 1, 1, 1, 1.1) == 1127
    assert token_counts.padded_load(MIX, 1, 1, 1, 1.1) == pytest.approx(1127 * 8 / 8192,
                                                                       rel=1e-15)


def test_padded_load_ignores_the_routing_and_ep():
    """Padding runs every expert at its capacity: the load is the padded one whatever the
    imbalance (above or below the factor, the default rule's NaN) and with ``ep = 1``;
    without padding the factor only caps it. Vectorised over ``pad``."""
    pad = float(token_counts.padded_load(MIX, 1, 1, 1, 1.25))
    assert pad == pytest.approx(1.25, rel=1e-15)       # 1024·1.25 = 1280 exactly
    for imb in (1.0, 1.1, 2.0, float("nan")):
        assert token_counts.moe_load(8, imb, 1.25, MIX, 1, 1, 1, None, True) == pad
    assert token_counts.moe_load(1, 1.0, 1.25, MIX, 1, 1, 1, None, True) == pad
    assert token_counts.moe_load(8, 1.0, 1.25, MIX, 1, 1, 1) == 1.0   # dropping only caps
    assert token_counts.moe_load(8, 2.0, 1.25, MIX, 1, 1, 1) == 1.25
    got = token_counts.moe_load(8, np.array([1.0, 1.0, 2.0]), np.array([1.25, np.inf, 1.25]),
                                MIX, 1, 1, 1, None, np.array([True, False, False]))
    assert got.tolist() == [pad, 1.0, 1.25]
    with pytest.raises(ValueError, match="padding to capacity needs the model"):
        token_counts.moe_load(8, 1.0, 1.25, pad=True)


def test_expert_rows_and_alltoall_bytes_at_capacity():
    """At the padded load each local expert's grouped GEMM runs ``capacity·etp·ep`` rows
    (Megatron-Core's ``num_tokens_per_local_expert``) and each GPU sends ``capacity·E``
    routed copies of ``h`` 16-bit values into the dispatch (``num_out_tokens``), the
    combine the same: the all-to-all's buffers."""
    b, tp, cp, ep, etp, cf = 2, 2, 1, 4, 1, 1.1
    cap = token_counts.expert_capacity(MIX, b, tp, cp, cf)
    load = token_counts.moe_load(ep, 1.0, cf, MIX, b, tp, cp, etp, True)
    rows = token_counts.expert_tokens(MIX, b, tp, cp, ep, etp, load)
    assert rows == pytest.approx(cap * etp * ep, rel=1e-14)
    routed = [g for part, g in gemm_shapes.layer_gemm_parts(MIX, b, tp, cp, ep, None, etp, load)
              if part == "routed_mlp" and g[4] is not None]
    assert all(g[1] == pytest.approx(cap * etp * ep, rel=1e-14) for g in routed)
    sent = moe_bytes.routed_token_bytes(MIX, b, tp, cp, load)
    assert sent == pytest.approx(cap * MIX.num_experts * MIX.hidden_size * 2, rel=1e-14)
    assert ep_dispatch.ep_alltoall_bytes_fwd(MIX, b, tp, cp, ep, load) == pytest.approx(
        2 * sent, rel=1e-14)


def test_count_exchange_and_the_skipped_collectives():
    """``count_exchange``: 1 dropless or dropping, 0 padded. Padded, the sync is 0 for every
    dispatcher and the alltoall dispatcher's forward loses exactly the count all-gather over
    ``etp·ep`` ranks (its probabilities' all-to-alls stay); HybridEP keeps its routing-map
    gather. Vectorised over ``pad``."""
    assert moe_bytes.count_exchange(False) == 1.0 and moe_bytes.count_exchange(True) == 0.0
    assert moe_bytes.count_exchange(np.array([True, False])).tolist() == [0.0, 1.0]
    m, cl, fw = model_preset("qwen3-30b-a3b"), cluster_preset("dgx-h100", 2), get_profile(None)
    for code in (0, 1, 2):
        assert moe_time.moe_sync_time(m, fw, cl.gpu, code) > 0
        assert moe_time.moe_sync_time(m, fw, cl.gpu, code, True) == 0.0
    c_bytes, _ = ep_dispatch.dispatcher_metadata_bytes(m, 2, 1, 1, 16, 1)
    gather = cm.collective_time("allgather", c_bytes, 16, 1, cl)
    f0, b0 = cm.dispatcher_metadata_time(m, 2, 1, 1, 16, 1, 0, cl)
    f1, b1 = cm.dispatcher_metadata_time(m, 2, 1, 1, 16, 1, 0, cl, pad=True)
    assert gather > 0 and f0 - f1 == pytest.approx(gather, rel=1e-12) and b1 == b0
    assert cm.dispatcher_metadata_time(m, 2, 1, 1, 16, 1, 2, cl, pad=True) == \
        cm.dispatcher_metadata_time(m, 2, 1, 1, 16, 1, 2, cl)
    fa, _ = cm.dispatcher_metadata_time(m, 2, 1, 1, 16, 1, 0, cl, pad=np.array([False, True]))
    assert fa.tolist() == pytest.approx([f0, f1], rel=1e-12)


def _pair(cf: float = 1.0):
    m, cl = model_preset("qwen3-30b-a3b"), cluster_preset("dgx-h100", 2)
    plan = Plan(tp=1, pp=1, dp=16, ep=16, mbs=1, gbs=64, moe_capacity_factor=cf)
    return (make_job(m, cl, plan, dtype="bf16"),
            make_job(m, cl, replace(plan, moe_pad_to_capacity=True), dtype="bf16"))


def test_estimate_bound_and_simulator_drop_the_same_charge():
    """At ``cf = 1`` (the padded load is the capped one, 1, exactly) padding changes only the
    skipped collectives: the stage record's layer forward loses the sync and the count
    all-gather to floating-point precision, its backward nothing; the estimate's step loses
    them once per MoE layer and micro-batch (one stage), the lower bound no more than it, and
    the simulator's step about as much."""
    drop, pad = _pair()
    m, cl, fw = drop.model, drop.cluster, drop.framework
    assert drop.plan.capacity_factor == 1.0
    assert token_counts.padded_load(m, 1, 1, 1, 1.0) == 1.0
    c_bytes, _ = ep_dispatch.dispatcher_metadata_bytes(m, 1, 1, 1, 16, 1)
    per_layer = moe_time.moe_sync_time(m, fw, cl.gpu, 0) \
        + m.layer_shares()["moe"] * cm.collective_time("allgather", c_bytes, 16, 1, cl)
    a = stage_cost_arrays(m, cl, "bf16", PlanArrays.of_plan(drop.plan), fw)
    z = stage_cost_arrays(m, cl, "bf16", PlanArrays.of_plan(pad.plan), fw)
    assert float(a.layer_fwd - z.layer_fwd) == pytest.approx(per_layer, rel=1e-9)
    assert float(a.layer_bwd) == pytest.approx(float(z.layer_bwd), rel=1e-12)
    e_drop, e_pad = estimate(drop), estimate(pad)
    n = m.num_layers * e_drop.num_microbatches
    assert e_drop.step_time_s - e_pad.step_time_s == pytest.approx(n * per_layer, rel=1e-6)
    bounds = step_time_lower_bound(m, cl, "bf16", PlanArrays.from_plans([drop.plan, pad.plan]),
                                   fw)
    assert 0.0 <= float(bounds[0] - bounds[1]) <= n * per_layer * (1 + 1e-9)
    assert float(bounds[1]) <= e_pad.step_time_s * (1 + 1e-9)
    saved = simulate(drop).step_time_s - simulate(pad).step_time_s
    assert saved == pytest.approx(n * per_layer, rel=0.05)


def test_capacity_above_one_runs_padded_rows_in_every_model():
    """At ``cf = 1.5`` with balanced routing padding runs 1.5 times the rows: the estimate is
    slower than dropping's (which only caps) despite the skipped collectives, and the memory
    model's peak higher (the permutation buffers at capacity), the search's arrays equal to
    the scalar peak (1e-12)."""
    from strategies.memory.scalar import peak_memory
    drop, pad = _pair(1.5)
    drop = make_job(drop.model, drop.cluster, replace(drop.plan, moe_imbalance=1.0), dtype="bf16")
    pad = make_job(pad.model, pad.cluster, replace(pad.plan, moe_imbalance=1.0), dtype="bf16")
    from strategies.memory.peak_arrays import peak_memory_arrays
    assert estimate(pad).step_time_s > estimate(drop).step_time_s
    assert peak_memory(pad)[1].total > peak_memory(drop)[1].total
    for job in (drop, pad):          # the search's arrays read the same load
        assert float(peak_memory_arrays(job.model, PlanArrays.of_plan(job.plan), "bf16")) == \
            pytest.approx(peak_memory(job)[1].total, rel=1e-12)


@pytest.mark.parametrize("text, field, words", [
    ("ep=8,gbs=16,moe_pad_to_capacity=true", "moe_pad_to_capacity",
     ["needs moe_capacity_factor"]),
    ("ep=8,gbs=16,moe_capacity_factor=0,moe_pad_to_capacity=true", "moe_capacity_factor",
     ["> 0"]),
    ("ep=8,gbs=16,moe_capacity_factor=-0.5,moe_pad_to_capacity=true", "moe_capacity_factor",
     ["> 0"]),
    ("ep=8,gbs=16,moe_capacity_factor=1,moe_pad_to_capacity=true,moe_dispatcher=deepep",
     "moe_pad_to_capacity", ["deepep", "does not support"]),
    ("ep=8,gbs=16,moe_capacity_factor=1,moe_pad_to_capacity=maybe", "moe_pad_to_capacity",
     ["true or false"]),
])
def test_bad_input_names_field_value_and_rule(text, field, words):
    with pytest.raises(SpecError) as e:
        parse_plan(text)
    assert e.value.field == field
    for w in words:
        assert w in str(e.value)


def test_dense_model_refuses_padding_and_fix_needs_a_factor():
    with pytest.raises(SpecError, match="dense"):
        make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1),
                 Plan(tp=8, gbs=8, moe_capacity_factor=1.0, moe_pad_to_capacity=True), dtype="bf16")
    with pytest.raises(SpecError, match="needs moe_capacity_factor"):
        parse_fix("moe_pad_to_capacity=true")
    assert parse_fix("moe_capacity_factor=1,moe_pad_to_capacity=true") == {
        "moe_capacity_factor": 1.0, "moe_pad_to_capacity": True}


def test_plan_syntax_alias_key_round_trip_and_export():
    """Megatron's long name reads as the field; the search's key writes it and reads back;
    the Megatron-LM export passes the flag."""
    from strategies.launch import megatron_args
    p = parse_plan("ep=8,dp=8,gbs=16,moe_expert_capacity_factor=1.5,"
                   "moe_pad_expert_input_to_capacity=true")
    assert p.moe_pad_to_capacity is True and p.moe_capacity_factor == 1.5
    assert "pad1.5" in p.short()
    key = plan_key(p)
    assert "moe_pad_to_capacity=true" in key and parse_plan(key) == p
    assert "moe_pad_to_capacity" not in plan_key(replace(p, moe_pad_to_capacity=False))
    job = make_job(MIX, cluster_preset("dgx-h100", 1), p, dtype="bf16")
    assert "--moe-pad-expert-input-to-capacity" in megatron_args(job)[0]


def test_reader_maps_the_token_drop_rows():
    """Every dgxc_2505 / nemo_performance_25 row that states a capacity factor states
    padding (NeMo 2's ``MegatronTokenDropCallback``) and reads as a padded plan; a row
    without the key reads unpadded."""
    from strategies.reference.cases import case_from_entry, load_reference
    seen = 0
    for f in ("dgxc_2505", "nemo_performance_25"):
        for e in load_reference(f"strategies/reference/data/{f}.json"):
            pl = e.get("plan") or {}
            if "moe_capacity_factor" not in pl:
                continue
            assert pl["moe_pad_to_capacity"] is True
            assert "moe_pad_expert_input_to_capacity true" in e["notes"]
            job = case_from_entry(e).job
            if job is None:
                continue
            seen += 1
            assert job.plan.moe_pad_to_capacity and job.plan.moe_capacity_factor == 1.0
            if seen == 1:
                e2 = {**e, "plan": {k: v for k, v in pl.items() if k != "moe_pad_to_capacity"}}
                assert case_from_entry(e2).job.plan.moe_pad_to_capacity is False
    assert seen == 42


def test_fixed_padding_is_carried_by_every_searched_plan_and_round_trips():
    """``--fix moe_capacity_factor=1,moe_pad_to_capacity=true``: every candidate pads, its
    key reads back to the same plan, and a job builds from it."""
    m, cl = model_preset("qwen3-30b-a3b"), cluster_preset("dgx-h100", 2)
    fixed = parse_fix("moe_capacity_factor=1,moe_pad_to_capacity=true")
    sp = enumerate_space(m, cl, 256, SpaceOptions(max_mbs=1, layouts=False, fixed=fixed))
    assert sp.size > 0 and bool(np.all(sp.cols["pad"]))
    for i in (0, sp.size // 2, sp.size - 1):
        p = sp.plan(i)
        assert p.moe_pad_to_capacity and p.moe_capacity_factor == 1.0
        back = parse_plan(plan_key(p))
        assert back == p and plan_key(back) == plan_key(p)
        make_job(m, cl, p)


def test_local_permutation_moves_the_padded_rows():
    """The alltoall dispatcher's permutation under drop-and-pad lays out ``capacity·E`` rows
    (``moe_utils.permute(..., drop_and_pad=True)``): its forward bytes are the unpadded ones
    plus ``3·(R - R0)`` (the permute's read and write and the unpermute's read of the padded
    rows, 16-bit), on the MoE layers' share; at ``cf = 1`` with whole capacities, the same."""
    b, tp, cp, ep = 1, 1, 1, 8
    load = float(token_counts.padded_load(MIX, b, tp, cp, 1.1))
    R0 = moe_bytes.routed_token_bytes(MIX, b, tp, cp, 1.0)
    f0, b0 = moe_bytes.moe_permute_bytes(MIX, b, tp, cp, ep, load)
    f1, b1 = moe_bytes.moe_permute_bytes(MIX, b, tp, cp, ep, load, pad=True)
    assert f1 - f0 == pytest.approx(3 * (load - 1) * R0, rel=1e-12) and b1 - b0 == f1 - f0
    one = token_counts.padded_load(MIX, b, tp, cp, 1.0)
    assert one == 1.0 and moe_bytes.moe_permute_bytes(MIX, b, tp, cp, ep, one, pad=True) == \
        moe_bytes.moe_permute_bytes(MIX, b, tp, cp, ep, one)
