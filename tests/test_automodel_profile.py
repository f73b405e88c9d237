"""The ``automodel`` stack profile (NeMo AutoModel's MoE path, docs/calibration.md §5.38): its
defaults and limits from AutoModel's code, refusals naming stack, feature and rule (exit 2),
and its bf16-built model state in closed form (``FrameworkProfile.master_bytes``,
``profile.stack_system``) in the scalar memory model and the search's arrays alike."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.cli import main
from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.stacks.profile import stack_system
from strategies.stacks.pytorch import AUTOMODEL, TORCHTITAN
from strategies.stacks.rules import check_plan, check_precision, plan_violations
from strategies.job import make_job
from strategies.memory import memory_by_stage
from strategies.memory.arrays import peak_memory_arrays, state_bytes_per_param
from strategies.plan import plan_from_mapping, plan_mapping
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


def _plan(fw, text: str):
    return plan_from_mapping(plan_mapping(text), fw.plan_defaults())


def test_profile_fields_from_automodel_code():
    fw = get_profile("automodel")
    assert fw is AUTOMODEL and get_profile("nemo-automodel") is AUTOMODEL
    # FSDP2 over a bf16-built model: master 2 + Adam m 2 + v 2
    assert fw.fsdp2 and fw.optimizer_state_bytes == 6.0 and fw.master_bytes == 2.0
    assert "deepep" in fw.moe_dispatchers and fw.max_tp == 1 and not fw.context_parallel
    assert fw.zero_stages == (2, 3) and fw.zero_follows_pp and fw.precisions == ("bf16",)
    assert fw.attention_kernel == "native" and fw.recompute == ("none", "full")
    # torchtitan keeps its fp32-built model (no master override)
    assert TORCHTITAN.master_bytes is None and not TORCHTITAN.zero_follows_pp


@pytest.mark.parametrize("plan,field", [
    ("tp=2,zero=3", "tp"), ("cp=2,zero=3", "cp"), ("zero=1", "zero"),
    ("zero=2", "zero"),                                   # pp = 1 reshards: ZeRO-3
    ("pp=2,schedule=zb-h1,zero=2", "schedule"),           # not a pipelining schedule
    ("zero=3,recompute=selective", "recompute"),
    ("zero=3,dp=8,ep=16", "ep"),                          # ep must divide dp
    ("zero=3,dp=8,ep=2,moe_dispatcher=hybridep", "moe_dispatcher"),
])
def test_refusals_name_stack_feature_rule(plan, field):
    bad = plan_violations(AUTOMODEL, _plan(AUTOMODEL, plan))
    assert bad and bad[0][0] == field
    with pytest.raises(SpecError) as e:
        check_plan(AUTOMODEL, _plan(AUTOMODEL, plan))
    assert e.value.field == field and "automodel" in e.value.rule


@pytest.mark.parametrize("plan", ["zero=3", "zero=3,dp=8,ep=8,moe_dispatcher=deepep",
                                  "pp=2,schedule=interleaved,vpp=2,zero=2",
                                  "pp=2,schedule=zb-v,zero=2,recompute=full"])
def test_what_automodel_runs(plan):
    assert plan_violations(AUTOMODEL, _plan(AUTOMODEL, plan)) == []


def test_precision_refused():
    with pytest.raises(SpecError) as e:
        check_precision(AUTOMODEL, "fp8")
    assert e.value.field == "dtype" and "automodel" in e.value.rule


def test_cli_refusal_exit_2(capsys):
    rc = main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1",
               "--plan", "tp=2,zero=3,gbs=64", "--framework", "automodel"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "automodel" in err and "tp" in err and "tensor parallelism" in err


def test_stack_system_states_master_bytes():
    assert stack_system(TORCHTITAN).master_bytes == 4.0
    assert stack_system(AUTOMODEL).master_bytes == 2.0
    with pytest.raises(SpecError):
        replace(TORCHTITAN, master_bytes=8.0, optimizer_state_bytes=6.0)


@pytest.mark.parametrize("d", [1, 8, 64, 256])
def test_state_bytes_closed_forms(d):
    """bf16-built FSDP2: ZeRO-3 ``2/d, 4/d, 4/d``; pipelined ZeRO-2 ``2 + 2/d, 4, 4/d``."""
    sy = stack_system(AUTOMODEL)
    sizes = (sy.param_bytes, sy.main_grad_bytes("bf16"), sy.optimizer_bytes(6.0))
    p, g, o = state_bytes_per_param(np.array(3), d, *sizes, fsdp2=True, pp=1,
                                    master_bytes=sy.master_bytes)
    assert (float(p), float(g), float(o)) == pytest.approx((2 / d, 4 / d, 4 / d), rel=1e-12)
    p, g, o = state_bytes_per_param(np.array(2), d, *sizes, fsdp2=True, pp=4,
                                    master_bytes=sy.master_bytes)
    assert (float(p), float(g), float(o)) == pytest.approx((2 + 2 / d, 4.0, 4 / d), rel=1e-12)


def test_job_state_six_bytes_per_parameter_below_torchtitan():
    """pp 1, ZeRO-3 over dp 8 on one rank holding every parameter ``N``: layers ``16/d`` ->
    ``10/d``, the gathered root ``2 + 16/d`` -> ``2 + 10/d``: the state falls by ``6N/d``
    exactly; the search's arrays read the same rule (peak equal to the scalar's)."""
    m = replace(model_preset("llama3-8b"), seq_length=2048)
    cl = cluster_preset("dgx-h100", 1)
    got = {}
    for fw in (TORCHTITAN, AUTOMODEL):
        job = make_job(m, cl, _plan(fw, "zero=3,mbs=1,gbs=8,recompute=full"), framework=fw)
        st = memory_by_stage(job)[0]
        got[fw.name] = st.params + st.grads + st.optimizer
        got[fw.name + "/params"], got[fw.name + "/opt"] = st.params, st.optimizer
        arr = peak_memory_arrays(m, PlanArrays.of_plan(job.plan), job.dtype,
                                 stack_system(fw, job.system), cl.gpu,
                                 loss_bytes=fw.loss.peak_bytes,
                                 optimizer_bytes=fw.optimizer_state_bytes, fsdp2=fw.fsdp2)
        assert float(np.ravel(arr)[0]) == pytest.approx(st.total, rel=1e-9)
    n = float(m.num_params())
    assert got["torchtitan"] - got["automodel"] == pytest.approx(6 * n / 8, rel=1e-12)
    # the bf16 shard is the master (params 4/d -> 2/d), m and v bf16 (optimizer 8/d -> 4/d)
    assert got["torchtitan/params"] - got["automodel/params"] == pytest.approx(2 * n / 8,
                                                                               rel=1e-12)
    assert got["torchtitan/opt"] - got["automodel/opt"] == pytest.approx(4 * n / 8, rel=1e-12)


def _brute_hit(E: int, k: int, u: int) -> float:
    """The fake gate counted: token ``t`` takes experts ``t*k + j`` (mod E), ``j < k``; the
    mean over one period of tokens of the units of ``E/u`` experts it reaches, over ``u``."""
    from math import gcd
    e, starts = E // u, [(t * k) % E for t in range(E // gcd(E, k))]
    return sum(len({((s + j) % E) // e for j in range(k)}) for s in starts) / (len(starts) * u)


@pytest.mark.parametrize("E,k,u,units_per_token", [
    (256, 8, 64, 2.0),        # DeepSeek-V3, ep 64: 4 experts per rank, 8 consecutive
    (256, 8, 8, 1.0),         # ... its 8 nodes of 32 experts: one node
    (384, 8, 32, 4 / 3),      # Kimi K2, ep 32: 12 per rank, blocks at 0, 8, 16 span 1, 2, 1
    (128, 8, 8, 1.0),         # Qwen3-30B-A3B, ep 8: 16 per rank
    (32, 4, 8, 1.0),          # gpt-oss-20b, ep 8, top-4
    (24, 8, 8, 10 / 3),       # 3 per rank: offsets 0, 1, 2 reach 3, 3, 4 ranks
])
def test_contiguous_routing_closed_form(E, k, u, units_per_token):
    from strategies.cost.ep_dispatch import contiguous_hit_probability as hit
    assert hit(E, k, u) * u == pytest.approx(units_per_token, rel=1e-12)
    assert hit(E, k, u) == pytest.approx(_brute_hit(E, k, u), rel=1e-12)
    assert hit(E, k, 1) == 1.0


@pytest.mark.parametrize("E,k,u", [(20, 3, 4), (20, 3, 10), (30, 4, 5), (12, 5, 3)])
def test_contiguous_routing_without_k_dividing_e_counts(E, k, u):
    from strategies.cost.ep_dispatch import contiguous_hit_probability as hit
    assert hit(E, k, u) == pytest.approx(_brute_hit(E, k, u), rel=1e-12)


def test_deepep_copies_under_the_fake_gate():
    """DeepSeek-V3 at ep 64 over 8 nodes of 8, DeepEP: a token reaches 2 ranks of 1 node, so
    2 of the 8 copies (byte scale 1/4) and 1·7/8 remote nodes against 8·7/8 copies' 2·7/8
    (remote scale 1/2), with the router's groups ignored (the gate does)."""
    from strategies.cost.ep_dispatch import ep_dedup
    m = model_preset("deepseek-v3")
    b, r = ep_dedup(m, 64, 1, 8, 1, routing=1)
    assert (float(b), float(r)) == pytest.approx((0.25, 0.5), rel=1e-12)
    # alltoall sends one copy per expert whatever the routing
    assert ep_dedup(m, 64, 1, 8, 0, routing=1) == ep_dedup(m, 64, 1, 8, 0, routing=0)
    # vectorised: one row per routing
    bb, _ = ep_dedup(m, np.array([64.0, 64.0]), np.array([1.0, 1.0]), 8, np.array([1, 1]),
                     routing=np.array([0, 1]))
    assert float(bb[1]) == pytest.approx(0.25, rel=1e-12) and float(bb[0]) > 0.25


def test_moe_routing_plan_field():
    p = _plan(AUTOMODEL, "zero=3,moe_routing=contiguous")
    assert p.moe_routing == "contiguous" and "contiguous" in p.short()
    assert p.to_dict()["moe_routing"] == "contiguous"
    assert int(PlanArrays.of_plan(replace(p, dp=8, gbs=8)).moe_routing) == 1
    with pytest.raises(SpecError) as e:
        _plan(AUTOMODEL, "zero=3,moe_routing=round-robin")
    assert e.value.field == "moe_routing"


def test_search_space_prunes_with_the_stacks_state():
    """The search prunes with the same state as the scalar model: each kept plan's peak under
    ``automodel`` (6 bytes of optimizer state, ZeRO set by pp) equals ``peak_memory`` of its
    job. (The master's bytes move state between params and optimizer, not the total.)"""
    from strategies.memory import peak_memory
    from strategies.search.space import enumerate_space
    m = replace(model_preset("llama3-8b"), seq_length=2048)
    cl = cluster_preset("dgx-h100", 2)
    sp = enumerate_space(m, cl, 64, framework=AUTOMODEL)
    assert sp.size > 0
    for i in range(0, sp.size, max(1, sp.size // 25)):
        job = make_job(m, cl, sp.plan(i), framework=AUTOMODEL)
        assert job.plan.zero == (3 if job.plan.pp == 1 else 2)
        assert float(sp.peak_memory[i]) == pytest.approx(peak_memory(job)[1].total,
                                                         rel=1e-9), sp.key(i)
