"""experiments/zero3_deepspeed_2021.py: the what-ifs of docs/calibration.md §3.19 start from the
model's own charge, and DeepSpeed's gradient buckets keep every element once."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.zero3_deepspeed_2021 import (PERSISTENCE_THRESHOLD, REDUCE_BUCKET, _gathers,
                                              grad_buckets, z3_traffic)
from simulator.studies.validate import load_cases
from strategies.cost import param_counts
from strategies.estimate.scalar import estimate

from tests.norm_barrier_checks import barrier_s


@pytest.fixture(scope="module")
def rows():
    return [c for c in load_cases(tiers=None) if c.id.startswith("narayanan2021_t2_zero3")]


def test_the_six_rows_resolve(rows):
    assert len(rows) == 6 and all(c.job is not None for c in rows)


def test_no_what_if_is_the_estimate(rows):
    # the starting column is the estimate's per-tensor ZeRO-3 term, to floating-point precision
    for c in rows:
        t, _ = z3_traffic(c.job)
        # the estimate's dp_comm also holds the gradient norm's all-reduce (§5.202)
        assert t + barrier_s(c.job) == pytest.approx(estimate(c.job).breakdown_s["dp_comm"],
                                                     rel=1e-12)


def test_buckets_keep_every_gradient_once(rows):
    for c in rows:
        m = c.job.model
        b = grad_buckets(m)
        total = param_counts.zero3_tensor_gathers(m, 1, 1, 1, True, 1e9)["rs_params"]
        assert sum(b) == pytest.approx(float(total), rel=1e-12)
        # a bucket passes the limit only when it is one tensor larger than the limit
        biggest = max(param_counts.layer_param_tensors(m)
                      + (param_counts.embedding_params_per_gpu(m, 1),))
        assert max(b) <= max(REDUCE_BUCKET, biggest)


def test_persistence_drops_eight_tensors_per_layer_and_the_final_norm(rows):
    m = rows[0].job.model                  # GPT-3 175B: 12 tensors per layer, 4 of them weights
    whole = _gathers(m, True, 1e9, 0.0)
    kept = _gathers(m, True, 1e9, PERSISTENCE_THRESHOLD)
    assert whole["fwd_n"] - kept["fwd_n"] == 8 * m.num_layers + 2
    assert kept["rs_n"] == whole["rs_n"]   # their gradients are still reduced


def test_buckets_are_a_small_closed_form(monkeypatch):
    # a final RMSNorm of 1 element, one layer of three 3e8 tensors, a 1-element embedding: no two
    # 3e8 tensors share a 5e8 bucket, the small ones join their neighbours
    class M:
        hidden_size = 1
        norm = "rmsnorm"
        num_layers = 1
        tie_word_embeddings = True
    monkeypatch.setattr(param_counts, "layer_param_tensors", lambda m: (3e8, 3e8, 3e8))
    monkeypatch.setattr(param_counts, "embedding_params_per_gpu", lambda m, tp: 1.0)
    assert grad_buckets(M()) == [3e8 + 1.0, 3e8, 3e8 + 1.0]


def test_prefetch_hides_what_the_live_limit_allows(rows):
    # with compute to spare every allowed gather hides whole: 175B's four weights are all under
    # stage3_max_live_parameters (1e9), so all of them (forward, recomputed forward, the three
    # regathered in the backward); 530B's qkv and MLP weights are over it, so only proj and
    # fc1 in the forwards and qkv (after proj) in the backward
    from experiments.zero3_deepspeed_2021 import prefetch_hidden
    from strategies.cost import comm as cm
    from strategies.cost.hbm_rate import usable_hbm
    for c in (rows[0], rows[3]):
        job = c.job
        h, L, n = job.model.hidden_size, job.model.num_layers, job.plan.dp
        g = {k: float(cm.per_tensor_time(1, 2.0 * v * h * h, n, 1, job.cluster,
                                         job.framework.launch_gap_s,
                                         copy_rate=usable_hbm(job.cluster.gpu, job.system)))
             for k, v in (("qkv", 3), ("proj", 1), ("fc1", 4), ("fc2", 4))}
        if h * h * 4 < 1e9:
            want = L * (2 * sum(g.values()) + g["fc1"] + g["proj"] + g["qkv"])
        else:
            want = L * (2 * (g["proj"] + g["fc1"]) + g["qkv"])
        assert prefetch_hidden(job, 1e12) == pytest.approx(want, rel=1e-12)
        assert prefetch_hidden(job, 0.0) == 0.0


def test_host_loop_is_one_iteration_per_rank_and_gather(rows):
    """``_allgather_param``'s loop: ``n`` iterations per gather call, the persistent tensors'
    calls gone under the threshold."""
    from experiments.zero3_deepspeed_2021 import PERSISTENCE_THRESHOLD, host_loop_time
    job = rows[0].job
    z = param_counts.zero3_tensor_gathers(job.model, 1, 1, 1, True,
                                          job.framework.zero3_reuse_params)
    assert host_loop_time(job, 1e-6) == pytest.approx(1e-6 * job.plan.dp
                                                      * (z["fwd_n"] + z["bwd_n"]), rel=1e-12)
    assert host_loop_time(job, 1e-6, PERSISTENCE_THRESHOLD) < 0.5 * host_loop_time(job, 1e-6)


def test_post_step_gather_is_one_call_and_a_copy_per_rank_and_tensor(rows):
    """GPT-3 175B at 384 ranks: 770 persistent tensors (8 per layer, the final norm's 2), each
    of at least 384 elements, so 384 copy kernels each; the one all-gather of their partitions
    (``ceil(numel/n)`` elements each) and every copy's bytes read and written at the HBM rate."""
    from experiments.zero3_deepspeed_2021 import (copy_rate, persistent_tensors,
                                                  post_step_gather_time)
    from strategies.cost import comm as cm
    job = rows[0].job
    n, gap = job.plan.dp, job.framework.launch_gap_s
    ts = persistent_tensors(job.model)
    assert len(ts) == 8 * job.model.num_layers + 2 and min(ts) >= n
    gathered = 2.0 * n * sum(np.ceil(t / n) for t in ts)
    want = (float(cm.per_tensor_time(1, gathered, n, 1, job.cluster, gap,
                                     copy_rate=copy_rate(job)))
            + len(ts) * n * gap + 4.0 * sum(ts) / copy_rate(job))
    assert post_step_gather_time(job) == pytest.approx(want, rel=1e-12)
