"""MaxText's context parallelism (the ``jax-xla`` profile): K/V all-gathered before the
attention and dK/dV reduce-scattered after it (``context_parallel_strategy: "all_gather"``,
Transformer Engine's ``FusedAttnCPWithAllGather*Primitive`` under ``cudnn_flash_te``), priced
by ``cost.cp_allgather``'s rule, not the ring. The exchange's seconds and the gathered
buffers as closed forms, the estimate against the contention-free simulation, the plan's
``cp_comm`` naming the stack's own exchange a no-op, MaxText's ring refused.
docs/calibration.md §5.195."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.simulate import simulate
from strategies.cost import comm as cm
from strategies.cost import cp_allgather
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.export.maxtext import maxtext_config
from strategies.job import make_job
from strategies.memory.scalar import memory_components
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.stacks.jax_xla import JAX_XLA
from tests.fuzz_profile import run_cli
from topologies.cluster import cluster_preset

L8 = model_preset("llama3-8b").with_seq_length(65536)   # 8 KV heads, head dim 128, 32 layers


def _job(spec: str, framework=JAX_XLA):
    return make_job(L8, cluster_preset("dgx-h100", 2), parse_plan(spec), framework=framework)


def test_profile_runs_the_all_gather_not_the_ring() -> None:
    """The finding: MaxText's default ``context_parallel_strategy`` is ``all_gather`` (base.yml
    at e591f30cb), so the profile's exchange is the all-gather path, exposed whole, and its
    export states it with ``cp > 1``."""
    assert JAX_XLA.cp_impl == "allgather"
    job = _job("tp=1,cp=8,mbs=1,gbs=16,zero=3")
    assert float(stage_costs(job).cp_exposed_fraction) == 1.0
    assert "context_parallel_strategy: all_gather" in maxtext_config(job)[0]


@pytest.mark.parametrize("recompute, passes", [("none", 3), ("full", 4)])
def test_exchange_seconds_closed_form(recompute: str, passes: int) -> None:
    """Llama 3 8B at 64K, cp 8, tp 1: the gathered K/V ``G = 2·s·g·(d + d_v)`` = 2·65,536·8·256
    = 256 MiB; a layer waits one all-gather of it forward, one all-gather and one
    reduce-scatter (priced as a gather) backward, and under full remat the rerun forward's
    gather again: ``cp_comm = L·m·passes·t_ag(G)`` (32 layers, 8 micro-batches), 1e-12."""
    job = _job(f"tp=1,cp=8,mbs=1,gbs=16,zero=3,recompute={recompute}")
    sc = stage_costs(job)
    assert float(sc.cp_bytes) == 2 * 65536 * 8 * 256 == 256 * 2**20
    t = float(cm.collective_time("allgather", sc.cp_bytes, 8, 1, job.cluster))
    assert job.num_microbatches == 8
    assert estimate(job).breakdown_s["cp_comm"] == pytest.approx(32 * 8 * passes * t,
                                                                 rel=1e-12)


def test_gathered_buffers_in_memory() -> None:
    """The peak holds the all-gather path's working set (``cp_allgather.working_bytes``,
    ``(4 + 1/(2c))·G``) in "other" beyond the ring's; the layers' stash is the same."""
    job = _job("tp=2,cp=4,mbs=1,gbs=16,sp=true,zero=3")
    ring = _job("tp=2,cp=4,mbs=1,gbs=16,sp=true,zero=3", replace(JAX_XLA, cp_impl="ring"))
    a, b = memory_components(ring, 0), memory_components(job, 0)
    g = 2 * 65536 * 8 * 256 / 2                                 # G over tp 2
    w = cp_allgather.working_bytes(job.model, 1, 2, 4)
    assert w == pytest.approx((4 + 1 / 8) * g, rel=1e-15)
    assert b["other"].other - a["other"].other == pytest.approx(w, rel=1e-12)
    assert b["layers"] == a["layers"]


def test_estimate_agrees_with_the_simulation() -> None:
    """The simulator compiles the same exchange: estimate and contention-free simulation of
    a jax-xla cp 8 plan within 0.01 % (``cp_a2a_terms.py --agree``: -0.0047 %)."""
    job = _job("tp=1,cp=8,mbs=1,gbs=16,zero=3")
    e = estimate(job).step_time_s
    assert simulate(job, network="contention-free").step_time_s == pytest.approx(e, rel=1e-4)


def test_stating_its_own_exchange_changes_nothing() -> None:
    """``cp_comm=all_gather`` names what jax-xla runs anyway: the same floats."""
    e0 = estimate(_job("tp=1,cp=8,mbs=1,gbs=16,zero=3"))
    e1 = estimate(_job("tp=1,cp=8,mbs=1,gbs=16,zero=3,cp_comm=all_gather"))
    assert e1.step_time_s == e0.step_time_s and e1.breakdown_s == e0.breakdown_s


@pytest.mark.parametrize("comm", ["p2p", "a2a"])
def test_maxtexts_ring_is_refused(comm: str) -> None:
    """MaxText's ``context_parallel_strategy: "ring"`` (Transformer Engine's JAX ring) is not
    modelled: ``cp_comm=p2p`` (and a2a) refused naming stack, field and rule; the CLI exits 2
    with one line."""
    with pytest.raises(SpecError, match=rf"cp_comm='{comm}': jax-xla runs context parallelism "
                                        r"only its own way \(cp_impl allgather\): no cp_comm "
                                        r"but all_gather"):
        _job(f"tp=1,cp=8,mbs=1,gbs=16,zero=3,cp_comm={comm}")
    rc, _, err = run_cli(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1",
                          "--framework", "jax-xla", "--plan", f"cp=2,gbs=8,cp_comm={comm}"])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "jax-xla" in err
