"""Llama 3 405B's Table 4 rows (Dubey et al. 2024, arXiv 2407.21783; ``frontier_papers.json``)
decomposed: what the model's estimate is made of at 128K with CP 16 and at 8K on 8,192 and
16,384 GPUs, and what each lead the paper leaves open is worth (an analysis; the model is not
changed here; docs/calibration.md §5.62).

1. ``flop_count``: the measured step is the paper's TFLOP/s read back through the count its MFU
   cites (PaLM, Chowdhery et al.: ``6N + 12·L·H·Q·T``, the attention square in full), with
   ``N`` counted here from the config alone (every weight but the input embedding's lookup).
2. ``decompose``: per row the estimate's parts, the attention core's forward and backward per
   layer and micro-batch, and the rate the attention kernel runs at in the model (causal
   blocks over time).
3. ``leads``: the analytic error of each row under each open assumption, one at a time: the
   attention kernel (FlashAttention-2's catalog rate, ``fa2``), the CP exchange (the exposed
   K/V all-gather the 128K row states, or Transformer Engine's p2p ring), recomputation.
4. ``cp_rank_blocks``: the 128x128 blocks each CP rank's causal kernel computes under the
   paper's split (rank ``i`` holds chunks ``i`` and ``2·CP-1-i``), with and without a document
   mask: equal on every rank without one (the model's ``s²·causal_fraction / cp``), at most
   that with one, so the document mask cannot make the slowest rank slower than the model's.
5. ``eight_k``: the 8K pair, ``step = a + b·M`` per row with the model's once-per-step part,
   the bubble against the paper's ``(PP-1)/(V·M)``, and where the data-parallel groups sit
   in Meta's 3,072-GPU pods (order [TP, CP, PP, DP], §3.3.2).
6. ``allgather_kernels``: the 128K row's all-gather attention (two kernels a rank, one per
   local query chunk, on two streams) against the ring's steps: grid factors, attention per
   layer, HBM passes, working set and peak under each ``cp_comm`` (docs/calibration.md §5.134).

Run:
    python experiments/llama3_405b_decomposition.py [--simulate]   (table 6 adds the 128K
    row's full simulation)
"""
from __future__ import annotations

import copy
import json
import os
import sys
from dataclasses import replace
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies import placement                                            # noqa: E402
from strategies.cost import comm as cm                                      # noqa: E402
from strategies.cost import attention_grid, comm_bytes, cp_allgather, param_counts  # noqa: E402
from strategies.cost.attention_counts import causal_fraction, score_elements  # noqa: E402
from strategies.cost.stage import stage_costs                               # noqa: E402
from strategies.estimate.scalar import estimate                             # noqa: E402
from strategies.job import Job, make_job                                    # noqa: E402
from strategies.reference.cases import case_from_entry                      # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data", "frontier_papers.json")
IDS = ("llama3_405b_8192gpu_seq8k", "llama3_405b_16384gpu_seq8k",
       "llama3_405b_16384gpu_seq128k")
#: Meta's RoCE cluster (§3.3.1): pods of 3,072 GPUs at full bisection, 1:7 above them
POD_GPUS, AGG_OVERSUBSCRIPTION = 3072, 7
BLOCK = 128      # the causal kernel's tile (attention_counts.causal_fraction)


def _rows() -> list[dict]:
    with open(DATA) as f:
        return json.load(f)


def _case(rid: str, rows: list[dict], change: Callable[[dict], Any] = lambda c: None):
    c = copy.deepcopy(next(r for r in rows if r["id"] == rid))
    change(c)
    return case_from_entry(c, rows)


def _with_kernel(job: Job, kernel: str) -> Job:
    fw = replace(job.framework, attention_kernel=kernel)
    return make_job(job.model, job.cluster, job.plan, dtype=job.dtype, framework=fw,
                    system=job.system)


def palm_flops_per_token(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int,
                         vocab: int, seq: int) -> float:
    """PaLM's ``6N + 12·L·H·Q·T`` (Chowdhery et al. 2022, App. B), ``N`` every GEMM weight:
    q, k, v, o and the gated MLP per layer and the output head (the input embedding is a
    lookup, the norms no matmul)."""
    q = hidden // heads
    per_layer = 2 * hidden * heads * q + 2 * hidden * kv_heads * q + 3 * hidden * ffn
    n = layers * per_layer + hidden * vocab
    return 6.0 * n + 12.0 * layers * heads * q * seq


def flop_count(rows: list[dict]) -> list[tuple[str, float, float]]:
    """Per row: (id, the reader's measured step, the step from PaLM's count of the config)."""
    out = []
    for rid in IDS:
        r = next(x for x in rows if x["id"] == rid)
        mo, hw, pl = r["model"], r["hardware"], r["plan"]
        tok = palm_flops_per_token(mo["layers"], mo["hidden"], mo["heads"], mo["kv_heads"],
                                   mo["ffn_hidden"], mo["vocab"], mo["seq_len"])
        step = pl["global_batch"] * mo["seq_len"] * tok / (
            hw["n_gpus"] * r["measured"]["tflops_per_gpu"] * 1e12)
        out.append((rid, _case(rid, rows).measured_step_s, step))
    return out


def decompose(rows: list[dict]) -> list[dict[str, Any]]:
    """Per row: measured and estimated step, the estimate's parts, per layer and micro-batch the
    layer and attention times, and the attention kernel's rate in the model (TFLOP/s of the
    causal blocks, forward and backward)."""
    out = []
    for rid in IDS:
        case = _case(rid, rows)
        j = case.job
        e, c = estimate(j), stage_costs(j)
        m, p = j.model, j.plan
        # forward QK^T + AV FLOPs per GPU of one layer, the causal kernel's blocks
        f_attn = 2 * p.mbs * m.num_attention_heads * (m.head_dim + m.v_dim) / (p.tp * p.cp) * \
            score_elements(m.seq_length, mode="kernel")
        slots = (m.num_layers + p.account_embedding + p.account_loss) // p.pp
        out.append({"id": rid, "measured": case.measured_step_s, "est": e.step_time_s,
                    "M": j.num_microbatches, "parts": dict(e.breakdown_s),
                    "layer_f": c.layer_fwd, "layer_b": c.layer_bwd,
                    "attn_f": c.attn_fwd, "attn_b": c.attn_bwd, "slots": slots,
                    "attn_rate_f": f_attn / c.attn_fwd / 1e12,
                    "attn_rate_b": 2.5 * f_attn / c.attn_bwd / 1e12})
    return out


def leads(rows: list[dict]) -> list[tuple[str, list[float]]]:
    """(label, analytic error % of each of ``IDS``) under each open assumption."""
    def err(change=lambda c: None, job_change=None) -> list[float]:
        out = []
        for rid in IDS:
            case = _case(rid, rows, change)
            j = job_change(case.job) if job_change else case.job
            out.append(100 * (estimate(j).step_time_s / case.measured_step_s - 1))
        return out

    def plan(**kw):
        return lambda c: c["plan"].update(kw) if c["model"]["seq_len"] > 8192 else None

    def cp(comm: str):      # the plan's K/V exchange (plan cp_comm, §5.134)
        return lambda j: j if j.plan.cp == 1 else make_job(
            j.model, j.cluster, replace(j.plan, cp_comm=comm), dtype=j.dtype, system=j.system,
            framework=j.framework)

    return [("as filed (native kernel, all-gather CP exposed)", err()),
            ("the p2p ring instead (before 5.62)", err(job_change=cp("p2p"))),
            ("FlashAttention-2's rate (catalog fa2)",
             err(job_change=lambda j: _with_kernel(j, "fa2"))),
            ("fa2 with the p2p ring",
             err(job_change=lambda j: _with_kernel(cp("p2p")(j), "fa2"))),
            ("selective recomputation at 128K", err(plan(recompute="selective"))),
            ("full recomputation at 128K", err(plan(recompute="full")))]


def doc_ids(seq: int, lengths: list[int]) -> np.ndarray:
    """The document id of each position of a packed sequence of documents ``lengths`` (the
    last one cut at ``seq``)."""
    ids = np.repeat(np.arange(len(lengths)), lengths)
    if ids.size < seq:
        raise ValueError(f"lengths sum to {ids.size} < seq {seq}")
    return ids[:seq]


def cp_rank_blocks(seq: int, cp: int, rank: int, docs: np.ndarray | None = None,
                   block: int = BLOCK) -> int:
    """BLOCK x BLOCK tiles CP rank ``rank`` computes against the gathered keys under Llama 3's
    split (chunks ``rank`` and ``2·cp-1-rank`` of ``2·cp``), a causal kernel that skips a tile
    with no unmasked pair, with a document mask when ``docs`` (a document id per position,
    nondecreasing) is given: tile (qb, kb), kb < qb, has a pair iff the last document of kb
    is the first of qb; a diagonal tile always has one."""
    chunk = seq // (2 * cp)
    if seq % (2 * cp * block):
        raise ValueError(f"seq {seq} must be a multiple of 2·cp·block = {2 * cp * block}")
    nb = seq // block
    qbs = [range(c * chunk // block, (c + 1) * chunk // block) for c in (rank, 2 * cp - 1 - rank)]
    if docs is None:
        return sum(qb + 1 for r in qbs for qb in r)
    first, last = docs[::block], docs[block - 1::block]
    assert first.size == nb
    total = 0
    for r in qbs:
        for qb in r:
            total += 1 + int(np.count_nonzero(last[:qb] == first[qb]))
    return total


def eight_k(rows: list[dict]) -> dict[str, Any]:
    """The 8K pair: per row M, bubble, exposed DP, per-micro-batch rest; the paper's bubble
    ``(PP-1)/(V·M)`` of the model's busy time; the measured pair's ``a``, ``b`` when ``a`` is
    the model's at dp 64; each row's DP group span in pods."""
    out: dict[str, Any] = {"rows": []}
    for rid in IDS[:2]:
        case = _case(rid, rows)
        j, e = case.job, estimate(case.job)
        p = j.plan
        busy = e.breakdown_s["compute"]
        once = e.breakdown_s["bubble"] + e.breakdown_s["dp_comm"]
        stride = p.tp * p.cp * p.pp          # DP outermost: ranks tp·cp·pp apart
        # one layer slot's fp32 gradient reduce-scatter over the model's DP group
        size, apart = placement.dense_dp_group(p.tp, p.cp, p.dp)
        rs = float(cm.collective_time(
            "reduce_scatter", param_counts.layer_params_per_gpu(j.model, p.tp, p.ep, p.expert_tp)
            * j.system.main_grad_bytes(j.dtype), size, apart, j.cluster))
        span = p.dp * stride
        out["rows"].append({"id": rid, "M": j.num_microbatches, "dp": p.dp,
                            "measured": case.measured_step_s, "est": e.step_time_s,
                            "bubble": e.breakdown_s["bubble"],
                            "paper_bubble": (p.pp - 1) / (p.vpp * j.num_microbatches) * busy,
                            "dp_comm": e.breakdown_s["dp_comm"], "once": once, "rs": rs,
                            "per_mb": (e.step_time_s - once) / j.num_microbatches,
                            "pods": -(-span // POD_GPUS),
                            # ring reduce-scatter: per pod one outgoing edge per DP group
                            "pod_out_flows": stride,
                            "pod_uplinks": POD_GPUS / AGG_OVERSUBSCRIPTION})
    a, b = out["rows"]
    out["ratio_measured"] = 2 * b["measured"] / a["measured"]
    out["ratio_est"] = 2 * b["est"] / a["est"]
    bm = (a["measured"] - a["once"]) / a["M"]
    out["b_measured_at_model_a"] = bm
    out["a16_measured"] = b["measured"] - b["M"] * bm
    return out


def allgather_kernels(rows: list[dict]) -> dict[str, Any]:
    """The 128K row's all-gather attention as the model prices it (§5.134), against the ring's
    steps: each direction's grid factor on the chip (``attention_grid.allgather_factor``,
    ``ring_factor``), the attention core per layer and micro-batch under each exchange (plan
    ``cp_comm``), the all-gather path's HBM passes (``cp_allgather.copy_bytes_fwd``/``_bwd``)
    and working set (``working_bytes``), and the peak memory under each."""
    case = _case(IDS[2], rows)
    j = case.job
    m, p, gpu = j.model, j.plan, j.cluster.gpu
    kf, kb = attention_grid.kernels(gpu, j.framework.attention_kernel)
    groups = p.mbs * m.num_attention_heads // p.tp
    out = {"grid": {name: (attention_grid.ring_factor(k, groups, m.seq_length, p.cp,
                                                      gpu.sm_count),
                           attention_grid.allgather_factor(k, groups, m.seq_length, p.cp,
                                                           gpu.sm_count, k is kf))
                    for name, k in (("forward", kf), ("backward", kb))},
           "bytes": (comm_bytes.cp_gather_bytes(m, p.mbs, p.tp, p.cp),
                     cp_allgather.copy_bytes_fwd(m, p.mbs, p.tp, p.cp),
                     cp_allgather.copy_bytes_bwd(m, p.mbs, p.tp, p.cp),
                     cp_allgather.working_bytes(m, p.mbs, p.tp, p.cp))}
    for comm in ("all_gather", "p2p"):
        jc = make_job(m, j.cluster, replace(p, cp_comm=comm), dtype=j.dtype, system=j.system,
                      framework=j.framework)
        c, e = stage_costs(jc), estimate(jc)
        out[comm] = (c.attn_fwd, c.attn_bwd, e.breakdown_s.get("cp_comm", 0.0),
                     e.memory.total / 2**30, e.step_time_s / case.measured_step_s - 1)
    return out


def simulated_128k(rows: list[dict]) -> tuple[float, float]:
    """``(simulated step s, error)`` of the 128K row, simulated in full (``--simulate``;
    ``simulator.studies.validate.simulated_step_time``, minutes on two cores)."""
    from simulator.studies.validate import simulated_step_time
    case = _case(IDS[2], rows)
    s, _ = simulated_step_time(case.job)
    return s, s / case.measured_step_s - 1


def main() -> int:
    rows = _rows()
    print("1. Measured step: the reader's and PaLM's 6N + 12LHQT from the config")
    for rid, reader, palm in flop_count(rows):
        print(f"  {rid:30s} reader {reader:.4f} s  PaLM {palm:.4f} s  ratio {reader / palm:.6f}")
    print("\n2. The estimate decomposed (seconds per step; per layer and micro-batch in ms)")
    for d in decompose(rows):
        parts = ", ".join(f"{k} {v:.3f}" for k, v in d["parts"].items() if v > 5e-4)
        print(f"  {d['id']}: measured {d['measured']:.3f}, est {d['est']:.3f} "
              f"({100 * (d['est'] / d['measured'] - 1):+.1f} %), M {d['M']}: {parts}")
        print(f"    layer fwd {1e3 * d['layer_f']:.2f} bwd {1e3 * d['layer_b']:.2f}; attention "
              f"fwd {1e3 * d['attn_f']:.2f} bwd {1e3 * d['attn_b']:.2f} "
              f"({100 * (d['attn_f'] + d['attn_b']) / (d['layer_f'] + d['layer_b']):.0f} % of "
              f"the layer); kernel {d['attn_rate_f']:.0f} TFLOP/s fwd, {d['attn_rate_b']:.0f} "
              f"bwd (2.5x the forward's FLOPs); per micro-batch and rank "
              f"{d['slots'] * (d['layer_f'] + d['layer_b']):.3f} s of layers, "
              f"{d['slots'] * (d['attn_f'] + d['attn_b']):.3f} s of attention")
    d = decompose(rows)[2]
    attn = d["M"] * d["slots"] * (d["attn_f"] + d["attn_b"])
    need = attn + d["measured"] - d["est"]
    print(f"  128K: the model's attention {attn:.3f} s per step; the measured step leaves "
          f"{need:.3f} s for it if the rest is as modelled: {attn / need:.3f} of the model's "
          "attention rate")
    print("\n3. Analytic error (%) per row under each open assumption "
          "(8192 8K, 16384 8K, 16384 128K)")
    for label, errs in leads(rows):
        print(f"  {label:52s} " + "  ".join(f"{e:+6.1f}" for e in errs))
    print("\n4. Tiles per CP rank at 128K, cp 16 (rank i: chunks i and 31-i)")
    s, cp = 131072, 16
    model = score_elements(s, mode="kernel") / BLOCK ** 2 / cp
    causal = [cp_rank_blocks(s, cp, r) for r in range(cp)]
    print(f"  causal: min {min(causal)} max {max(causal)}; the model's s²·causal_fraction/cp/"
          f"128² = {model:.1f} (causal_fraction {causal_fraction(s):.6f})")
    rng = np.random.default_rng(0)
    for mean in (4096, 16384, 65536):
        lens = list(rng.geometric(1.0 / mean, size=4 * s // mean + 64))
        docs = doc_ids(s, lens)
        per = [cp_rank_blocks(s, cp, r, docs) for r in range(cp)]
        print(f"  document mask, geometric lengths mean {mean} (illustrative, seed 0): "
              f"{docs[-1] + 1} documents, tiles per rank min {min(per)} max {max(per)}, "
              f"max/mean {max(per) / np.mean(per):.2f}, max/causal {max(per) / causal[0]:.3f}")
    k = eight_k(rows)
    print("\n5. The 8K pair")
    for r in k["rows"]:
        print(f"  {r['id']}: M {r['M']}, dp {r['dp']}: measured {r['measured']:.3f}, est "
              f"{r['est']:.3f}; bubble {r['bubble']:.3f} (paper's (PP-1)/(V·M) of the busy "
              f"time {r['paper_bubble']:.3f}), exposed DP {r['dp_comm']:.3f} (one layer's "
              f"fp32 reduce-scatter {1e3 * r['rs']:.1f} ms), the rest per "
              f"micro-batch {r['per_mb']:.4f}; DP group spans {r['pods']} pods, "
              f"{r['pod_out_flows']} ring edges leave a pod, its uplinks carry "
              f"{r['pod_uplinks']:.0f} GPUs' worth at 1:{AGG_OVERSUBSCRIPTION}")
    print(f"  per-GPU throughput 8,192 over 16,384: measured {k['ratio_measured']:.3f}, "
          f"model {k['ratio_est']:.3f}")
    print(f"  with the model's once-per-step part at dp 64 the measured micro-batch is "
          f"{k['b_measured_at_model_a']:.4f} s and the measured once-per-step part at dp 128 "
          f"{k['a16_measured']:.3f} s (the model's {k['rows'][1]['once']:.3f})")
    print("\n6. 128K: the all-gather's kernels against the ring's steps (docs/calibration.md "
          "§5.134)")
    g = allgather_kernels(rows)
    for name, (ring, gather) in g["grid"].items():
        print(f"  {name} grid factor: ring {ring:.4f}, all-gather {gather:.4f}")
    G, cf, cb, w = g["bytes"]
    print(f"  gathered K/V {G / 2**20:.1f} MiB; HBM passes fwd {cf / 2**20:.1f} MiB, bwd "
          f"{cb / 2**20:.1f} MiB; working set {w / 2**20:.1f} MiB")
    for comm in ("all_gather", "p2p"):
        f, b, t_cp, peak, err = g[comm]
        print(f"  cp_comm={comm:10s} attention fwd {1e3 * f:.3f} ms bwd {1e3 * b:.3f} ms per "
              f"layer and micro-batch; exposed CP {t_cp:.3f} s; peak {peak:.2f} GiB; "
              f"error {100 * err:+.1f} %")
    if "--simulate" in sys.argv[1:]:
        sim, err = simulated_128k(rows)
        print(f"  simulated (as filed): {sim:.3f} s, error {100 * err:+.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
