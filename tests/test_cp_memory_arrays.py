"""The search's array memory equals the scalar memory of the same plan under context
parallelism, for every stack that runs it and each K/V exchange the stack runs (its own, a
plan naming none, and each ``cp_comm`` it lets a plan name): one rule says which exchange a
row runs (``memory.rank_components.runs_exchange``), read by both. MaxText's own all-gather
(``jax-xla``, §5.195) holds the gathered K/V and dK/dV a layer at a time
(``cost.cp_allgather.working_bytes``); the search's rule left that out of a plan naming no
``cp_comm`` and ranked Llama 3 8B at 64K ``cp=4`` on two DGX B200 about 1.2 % light
(``experiments/preset_matrix_cp.py``'s search, docs/reports/preset_matrix.md)."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from strategies.cost import cp_allgather
from strategies.framework import PROFILES
from strategies.job import make_job
from strategies.memory.rank_components import runs_exchange
from strategies.memory.scalar import peak_memory
from strategies.plan import parse_plan
from strategies.plan.choices import CP_COMMS
from strategies.presets import model_preset
from strategies.search.plan_rows import columns_from_plans
from strategies.search.space import SpaceOptions, enumerate_space
from strategies.search.space_memory import space_memory
from strategies.stacks.profile import stack_system
from topologies.cluster import cluster_preset

L8 = model_preset("llama3-8b").with_seq_length(65536)
B200 = cluster_preset("dgx-b200", 2)


def _cases() -> list[tuple[str, dict]]:
    out = []
    for name, fw in PROFILES.items():
        if not fw.context_parallel:
            continue
        out.append((name, {}))
        for c in fw.cp_comms:
            out.append((name, {"cp_comm": c, **({"hierarchical_cp": 2} if c == "a2a+p2p"
                                                else {})}))
    return out


@pytest.mark.parametrize("stack, comm", _cases(),
                         ids=[f"{n}-{c.get('cp_comm', 'own')}" for n, c in _cases()])
def test_search_peak_equals_estimate_peak(stack: str, comm: dict) -> None:
    """``cp=4`` (and the exchange) fixed: every sampled plan's search peak is the scalar
    ``peak_memory`` of its job, 1e-12 relative."""
    fw = PROFILES[stack]
    sp = enumerate_space(L8, B200, 16, SpaceOptions(memory_limit_bytes=math.inf,
                                                    max_bubble=1e9,
                                                    fixed={"cp": 4, **comm}),
                         framework=fw)
    assert sp.size > 0
    for i in range(0, sp.size, max(1, sp.size // 12)):
        job = make_job(L8, B200, sp.plan(i), framework=fw)
        assert sp.peak_memory[i] == pytest.approx(peak_memory(job)[1].total, rel=1e-12), \
            sp.plan(i)


def test_maxtext_own_exchange_holds_the_gathered_kv() -> None:
    """MaxText's plan naming no exchange (code 0) runs the all-gather: its search peak of
    ``tp=1,cp=4,mbs=1,zero=3`` is the same rule's with no own exchange (``cp_impl`` None,
    the ring's) plus ``cp_allgather.working_bytes`` (the gathered K/V and dK/dV, 1.03 GiB
    here; closed form, 1e-12), and equals ``peak_memory`` of its job; code 0 is the
    all-gather under ``allgather`` only."""
    assert bool(runs_exchange(0, "allgather", "all_gather"))
    assert not bool(runs_exchange(0, "ring", "all_gather"))
    assert not bool(runs_exchange(0, None, "a2a"))
    assert bool(runs_exchange(1 + CP_COMMS.index("a2a"), "allgather", "a2a"))
    jx = PROFILES["jax-xla"]
    plan = parse_plan("tp=1,pp=1,dp=4,cp=4,mbs=1,gbs=16,recompute=none,zero=3")
    job = make_job(L8, B200, plan, framework=jx)
    sm = space_memory(L8, B200.gpu, "bf16", jx, stack_system(jx, None))
    assert sm.stack.cp_impl == "allgather"
    cols = columns_from_plans([job.plan])
    w = cp_allgather.working_bytes(L8, 1, 1, 4)
    assert w == pytest.approx(1.03125 * 2**30, rel=1e-12)
    ring_rule = replace(sm, stack=replace(sm.stack, cp_impl=None))
    got, ring = float(sm.peak(cols)[0]), float(ring_rule.peak(cols)[0])
    assert got - ring == pytest.approx(w, rel=1e-12)
    assert got == pytest.approx(peak_memory(job)[1].total, rel=1e-12)
