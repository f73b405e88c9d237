"""Each stashed entry at its own chunk's bytes (issues 14 and 17): where a rank's chunks hold
different layers (dense and MoE layers, an MTP module, an uneven layout, DualPipe's two
copies) its activation peak is the order's per-chunk moment (``schedules.stash.
chunk_stash_moments``) with the most bytes, each stashed ``(micro-batch, chunk)`` and pending
``W`` priced by its own chunk's layers by kind (``activations.chunk_stash``), in the scalar
model, the array model and the simulator's activation track alike; ranks whose chunks all
keep the same bytes keep the mean-chunk rule bit for bit."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.output.metrics_json import activation_memory_json
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.layout import chunk_kinds
from strategies.memory import activations as act
from strategies.memory.arrays import rank_memory_arrays
from strategies.memory.scalar import memory_by_stage, memory_components
from strategies.plan import parse_plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from strategies.schedules.stash import chunk_stash_moments, peak_chunk_moment
from topologies.cluster import cluster_preset

REL = 1e-9


def _moe(layers: int, dense: int):
    """DeepSeek-V3's layer: ``dense`` dense layers then MoE ones, one MTP module, s = 512."""
    return replace(model_preset("deepseek-v3"), name="ds-small", num_layers=layers,
                   first_k_dense_replace=dense, vocab_size=32000, seq_length=512)


def _job(model, text: str, nodes: int = 1):
    return make_job(model, cluster_preset("dgx-h100", nodes), parse_plan(text))


def _kind_bytes(job, kind: str, recompute: str | None = None) -> float:
    """One layer of ``kind`` (``ModelSpec.of_kind``) as the job stashes it."""
    return act.job_layer_activation_bytes(job, recompute, job.model.of_kind(kind))


def _kind_wgrad(job, kind: str) -> float:
    p = job.plan
    return act.layer_wgrad_bytes(job.model.of_kind(kind), job.seq_len, p.mbs, p.tp, p.sp, p.cp)


def test_two_rank_v_closed_form():
    """ZB-V on 2 ranks, 4 layers (1 dense, 3 MoE) and one MTP module: rank 0 holds chunk 0
    = the dense layer and chunk 1 = the last MoE layer and the MTP module (an MoE layer's
    activations: ``param_counts.mtp_layer_kind``). Each chunk's bytes by hand from the per-kind
    layer; the peak is the largest ``Σ_c n_c·(A_c + E) + w_c·W_c`` over the order's moments,
    which the order lists (checked), and the simulator's track reaches it."""
    job = _job(_moe(4, 1), "tp=1,pp=2,dp=4,ep=2,mbs=1,gbs=16,schedule=zb-v,vpp=2")
    assert chunk_kinds(job.model, job.layout, 0, 0) == {"dense": 1}
    assert chunk_kinds(job.model, job.layout, 0, 1) == {"moe": 1, "mtp": 1}
    a0, a1 = _kind_bytes(job, "dense"), 2 * _kind_bytes(job, "moe")
    w0, w1 = _kind_wgrad(job, "dense"), 2 * _kind_wgrad(job, "moe")
    assert a1 > 2 * a0                       # the chunks differ: the mean chunk is wrong
    acts, wgrads = act.chunk_stash(job, 0)
    assert acts == pytest.approx((a0, a1), rel=1e-12)
    assert wgrads == pytest.approx((w0, w1), rel=1e-12)
    # ZB-V, rank 0, m = 4: F0.c0 F1.c0 F2.c0 F0.c1 B0.c1 W0.c1 F1.c1 … ; the moments that
    # can peak: 3 chunk-0 entries and 1 chunk-1 (after F0.c1), 4 chunk-0 (after F3.c0),
    # 3 chunk-0 and a pending W of chunk 1 (after B0.c1) or of chunk 0 (after B0.c0)
    assert job.num_microbatches == 4
    moments = chunk_stash_moments(get_schedule("zb-v").steps(0, 2, 4, 2), 2)
    for mo in [((3, 1), (0, 0)), ((4, 0), (0, 0)), ((3, 0), (0, 1)), ((3, 0), (1, 0))]:
        assert mo in moments
    assert all(n[0] <= 4 and n[1] <= 1 and sum(n) <= 4 and sum(n) + sum(w) <= 4
               for n, w in moments)
    e = act.embedding_activation_bytes(job) / 2      # spread over the rank's two chunks
    cands = {(3 * a0 + a1, 4): 3 * a0 + a1 + 4 * e, (4 * a0, 4): 4 * a0 + 4 * e,
             (3 * a0 + w1, 3): 3 * a0 + w1 + 3 * e, (3 * a0 + w0, 3): 3 * a0 + w0 + 3 * e}
    (layers, stashed), _ = max(cands.items(), key=lambda kv: kv[1])
    n = (stashed,)
    w = (4 - stashed,) if stashed == 3 else (0,)
    got_n, got_w, got_layers = act.stash_at_peak(job, 0)
    assert (got_n, got_w) == (sum(n), sum(w))
    assert got_layers == pytest.approx(layers, rel=1e-12)
    want = layers + sum(n) * e + act.transient_activation_bytes(job, 0)
    assert memory_by_stage(job)[0].activations == pytest.approx(want, rel=1e-12)
    assert act.stage_activation_bytes(job, 0) == pytest.approx(want, rel=1e-12)
    parts = memory_components(job, 0)
    assert parts["layers"].activations == pytest.approx(layers, rel=1e-12)
    assert parts["embedding"].activations == pytest.approx(sum(n) * e, rel=1e-12)
    # the mean chunk ((a0 + a1)/2 per entry) at its own peak pair was another figure
    mean = act.chunk_layer_activation_bytes(job, 0)
    assert mean == pytest.approx((a0 + a1) / 2, rel=1e-12)
    rows = activation_memory_json(simulate(job), job)
    peak0 = [r["peak_bytes"] for r in rows if r["stage"] == 0]
    assert peak0 and all(x == pytest.approx(want, rel=REL) for x in peak0)


def test_peak_chunk_moment():
    moments = (((2, 0), (0, 0)), ((1, 1), (0, 0)), ((1, 0), (0, 1)))
    assert peak_chunk_moment(moments, (1.0, 3.0), (0.0, 0.0)) == ((1, 1), (0, 0))
    assert peak_chunk_moment(moments, (3.0, 1.0), (0.0, 0.0)) == ((2, 0), (0, 0))
    assert peak_chunk_moment(moments, (1.0, 1.0), (0.0, 5.0)) == ((1, 0), (0, 1))
    assert peak_chunk_moment(moments, (1.0, 1.0), (0.0, 0.0)) == ((2, 0), (0, 0))  # first


def test_moments_sum_to_the_frontier_pairs():
    """Summed over the chunks, the per-chunk moments pass through the pairs of
    ``stash_frontier`` (the same walk)."""
    from strategies.schedules.stash import stash_frontier
    for sched, v in (("zb-v", 2), ("dualpipev", 2), ("interleaved", 2)):
        steps = get_schedule(sched).steps(1, 4, 8, v)
        sums = {(sum(n), sum(w)) for n, w in chunk_stash_moments(steps, v)}
        assert set(stash_frontier(steps)) <= sums


# uneven mixed layouts (3 dense layers, then MoE ones, one MTP module): the first and last
# stages cut short, the embedding and loss as layer slots, a layout string whose chunks
# hold 1 to 3 layers; (layers, cut) by vpp
UNEVEN = {2: [(12, ",first_stage_layers=2,last_stage_layers=2"),
              (14, ",account_embedding=true,account_loss=true"),
              (12, ",layout=Ett|ttt|t|tt|t|tt|t|mL")],
          3: [(24, ",first_stage_layers=3,last_stage_layers=3"),
              (22, ",account_embedding=true,account_loss=true")]}
CASES = [(s, v, n, cut) for s, v in (("interleaved", 2), ("zb-v", 2), ("dualpipev", 2),
                                      ("interleaved", 3)) for n, cut in UNEVEN[v]]


@pytest.mark.parametrize("sched,v,layers,cut", CASES)
@pytest.mark.parametrize("rc", ["none", "selective", "op", "full"])
def test_uneven_mixed_sim_scalar_array(sched, v, layers, cut, rc):
    """Uneven mixed layouts: the simulated peak is ``memory_by_stage``'s activations to
    1e-9 and the array model (no counts given: its own per-chunk moments and chunk
    contents, ``layout.even_chunks_content_arrays``) its total where the search proposes
    the layout (not a layout string); some rank's chunks differ."""
    job = _job(_moe(layers, 3), f"tp=1,pp=4,dp=2,ep=2,mbs=1,gbs=16,schedule={sched},"
               f"vpp={v},recompute={rc}" + cut)
    stages = memory_by_stage(job)
    assert any(act.chunk_stash(job, r) is not None for r in range(job.plan.pp))
    for r in activation_memory_json(simulate(job), job):
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=REL), r
    if "layout=" in cut:
        return
    P = PlanArrays.from_plans([job.plan])
    for s, want in enumerate(stages):
        got = rank_memory_arrays(job.model, P, s, job.dtype, job.system, job.cluster.gpu)[0]
        assert float(got) == pytest.approx(want.total, rel=REL), s


@pytest.mark.parametrize("sched,v", [("interleaved", 2), ("zb-v", 2), ("dualpipev", 2),
                                     ("dualpipe", 1)])
@pytest.mark.parametrize("rc", ["none", "full"])
def test_one_kind_even_plans_keep_the_mean_chunk(sched, v, rc):
    """A dense model cut evenly: every chunk keeps the same bytes (``chunk_stash`` None) and
    the layers' stash is the mean chunk's, bit for bit."""
    m = replace(model_preset("llama3-8b"), num_layers=16, seq_length=512, vocab_size=32000)
    job = _job(m, f"tp=1,pp=4,dp=2,mbs=1,gbs=16,schedule={sched},vpp={v},recompute={rc}")
    for r in range(job.plan.pp):
        assert act.chunk_stash(job, r) is None
        n, w, layers = act.stash_at_peak(job, r)
        assert layers == (n * act.chunk_layer_activation_bytes(job, r)
                          + w * act.wgrad_bytes_per_chunk(job, r))
        assert memory_components(job, r)["layers"].activations == layers


def test_one_kind_uneven_v_prices_each_chunk():
    """A dense model whose V chunks hold 1 to 3 layers (a layout string): each entry at its
    own chunk's; the simulator agrees."""
    m = replace(model_preset("llama3-8b"), num_layers=13, seq_length=512, vocab_size=32000)
    job = _job(m, "tp=1,pp=4,dp=2,mbs=1,gbs=16,schedule=zb-v,vpp=2,"
               "layout=Ett|ttt|t|tt|t|tt|t|tL")
    stages = memory_by_stage(job)
    assert any(act.chunk_stash(job, r) is not None for r in range(job.plan.pp))
    for r in activation_memory_json(simulate(job), job):
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=REL), r


def test_order_chunks_one_rule():
    """``Schedule.order_chunks``: the chunk ids of a rank's order, ``vpp`` or DualPipe's two
    copies where ``pp > 1``; ``chunk_stash_moments`` counts that many per moment."""
    assert get_schedule("dualpipe").order_chunks(4, 1) == 2
    assert get_schedule("dualpipe").order_chunks(1, 1) == 1
    assert get_schedule("interleaved").order_chunks(4, 3) == 3
    assert get_schedule("1f1b").order_chunks(4, 1) == 1
    mo = get_schedule("dualpipe").chunk_stash_moments(0, 4, 8, 1)
    assert all(len(n) == len(w) == 2 for n, w in mo)
