"""The interleaved warm-up's pace counts each forward's send whether or not the stack runs
``overlap_p2p_comm`` (docs/calibration.md §5.205): Megatron-Core waits for the warm-up's
``send_forward_recv_forward`` at once (``wait_on_reqs``) unless
``overlap_p2p_comm_warmup_flush`` is set (default off; core_v0.13.0 ``schedules.py``
L1188-1236, ``p2p_communication.py`` L389-392), so the lock-step ``warmup_pace`` reads one
rule for both settings."""
from dataclasses import replace

import numpy as np
import pytest

from strategies.cost import comm as cm
from strategies.cost.stage import stage_costs
from strategies.cost.system import SystemConfig
from strategies.estimate.analytic import estimate_arrays
from strategies.estimate.scalar import plan_arrays, rank_fields
from strategies.estimate.stage_cost_memo import StageCostMemo
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.stacks.param_gather import warmup_pace
from topologies.cluster import cluster_preset

# Llama 3 8B cut to 16 layers, a 2,048-token vocabulary and 256-token sequences
SMALL = replace(model_preset("llama3-8b"), num_layers=16, seq_length=256, vocab_size=2048)
PLAN = ("tp=1,pp=2,dp=8,mbs=1,gbs=32,zero=1,schedule=interleaved,vpp=4,"
        "microbatch_group_size={g}")


def _job(g: int, overlap_p2p_comm: bool):
    """Two DGX H100 with NVLink at a quarter of its bandwidth: each chunk's parameter
    gather (one bucket, dp 8 on one node) outlasts the ``g`` forwards before its first use,
    while the pipeline's messages (stride 8: between the nodes) keep their time."""
    cl = cluster_preset("dgx-h100", 2)
    cl = replace(cl, intra_node_bandwidth=cl.intra_node_bandwidth / 4)
    job = make_job(SMALL, cl, parse_plan(PLAN.format(g=g)), framework="megatron-core",
                   system=SystemConfig(bucket_params=1e12))
    return replace(job, framework=replace(job.framework, overlap_p2p_comm=overlap_p2p_comm))


def _fill(job) -> float:
    a = estimate_arrays(job.model, job.cluster, job.dtype, plan_arrays(job.plan), job.framework,
                        job.system, rank_fields(job, None, StageCostMemo(job)))
    return float(a["param_gather_fill_s"])


@pytest.mark.parametrize("g", [2, 4])
def test_gather_chain_paces_forward_and_send_with_the_switch_on_and_off(g):
    """pp 2, four chunks a rank, every chunk's gather (8.5-8.7 ms) longer than ``g`` warm-up
    forwards: the estimate's fill term is ``A_0 + Σ_{c>=1} (A_c − g·T)`` with ``T`` a chunk
    forward and its send, ``2·layer_fwd + t_p2p`` (1e-12), the same with ``overlap_p2p_comm``
    on and off (bit for bit). At ``g = 4 > pp`` a pace without the send in the lock-step
    (``max(f, pp·T / g)``, what a non-blocking warm-up would give) hides ``12·t_p2p``
    (0.62 ms) less of the gathers, so the test tells the two apart; at ``g = pp`` that
    pace is ``T`` too."""
    on, off = _job(g, True), _job(g, False)
    c, p = stage_costs(on), on.plan
    body = 2 * c.layer_params                 # 16 layers over 2 stages of 4 chunks

    def ag(params: float) -> float:
        return float(cm.dp_collective_time("allgather", c.param_bytes, params, 0.0, p.tp,
                                           p.cp, p.dp, 1, 1, on.cluster))
    a = [ag(body + c.embedding_params)] + [ag(body)] * 3
    t = float(cm.p2p_time(c.p2p_bytes, on.cluster, p.tp * p.dp))
    f = 2 * c.layer_fwd
    pace = float(warmup_pace([f + t] * 3, 2, g))
    assert pace == f + t and min(a[1:]) > g * pace          # gather-bound on rank 0
    want = a[0] + sum(x - g * pace for x in a[1:])
    assert _fill(on) == pytest.approx(want, rel=1e-12)
    assert _fill(on) == _fill(off)
    loose = max(f, 2 * (f + t) / g)           # no send in the lock-step, the ring kept
    assert np.isclose(loose, f + t) == (g == 2)
    assert (a[0] + sum(x - g * loose for x in a[1:])) - want == pytest.approx(
        3 * g * (pace - loose), rel=1e-9)
    if g == 4:
        assert 3 * g * (pace - loose) == pytest.approx(12 * t, rel=1e-9) and 12 * t > 5e-4
