#!/usr/bin/env python
"""DeepSeek-V3 at tp 2 in DGX Cloud 25.05 (NeMo 25.04.01, Megatron-Core 0.12): every
tensor-parallel cost the stack's code runs on these rows, priced with the model's own
functions, against the miss per MoE layer and micro-batch (docs/calibration.md §5.97).

    python experiments/dsv3_tp2_costs.py

Table 1, per row: the estimate, the measurement, the miss per layer and micro-batch of the
busiest stage (micro-batches per pipeline x the script's ``64/pp`` middle-stage layers, as
§5.44/§5.47 count them), the model's TP seconds (breakdown ``tp_comm``) on the same scale, and
the estimate of the same row at tp 1 (dp doubled, the same GPUs, ep and etp): what tp 2 costs
in the model.

Table 2, per row, one MoE layer and micro-batch (contention-free microseconds at the row's
tp; ``comm.collective_time``, the estimate's): each candidate the brief names, read in
core_v0.12.0, with its sign (+ the model misses a cost, - the model charges one that does not
run, 0 none runs or it is priced: §5.99 prices the down projections' and the router's shapes
and the down projections' reductions beside their weight gradients, each shown with what it
moved). Then the sum of the unpriced positive ones against the miss. Nothing is fitted.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import comm as cm  # noqa: E402
from strategies.cost import gemm_shapes, gemm_time, token_counts  # noqa: E402
from strategies.cost.stage import (attn_down_time, attn_rc_gathers,  # noqa: E402
                                   dgrad_reduce_time, down_reduce_hidden,
                                   sp_grad_allreduce_bytes, stage_costs, tp_kind_bytes)
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry  # noqa: E402
from experiments.dgxc_deepseek_h100 import deepseek_rows, layer_microbatches  # noqa: E402

#: fp32 bytes: the router's scores with ``moe_router_dtype='fp32'`` (NeMo 7a8f1cc7bc40
#: ``scripts/performance/llm/pretrain_deepseek_v3.py``) and the main gradients
FP32 = 4.0


def tp1_job(job: Any) -> Any:
    """The same row at tp 1: dp doubled (the same GPUs, ep, etp, batch), SP off."""
    p = job.plan
    return replace(job, plan=replace(p, tp=1, dp=2 * p.dp, sp=False))


def _priced(job: Any, parts: list[tuple[str, tuple]]
            ) -> tuple[list[float], float, list[float]]:
    """(each GEMM's data-gradient seconds, the forward + backward seconds of all, each one's
    weight-gradient seconds) of ``parts`` as the model prices them (``gemm_time.gemm_units``;
    ``units_time_fwd``/``_bwd``)."""
    m, p, cl = job.model, job.plan, job.cluster
    units = gemm_time.gemm_units([g for _, g in parts], p.tp, cl.gpu, job.dtype, False,
                                 job.framework, job.system,
                                 shares=gemm_time.fixed_shares(parts, m, p.ep, job.framework))
    n = [g[0] for _, g in parts]
    dgrad = [float(g[0] * pieces * d) for (_, g), (_, _, pieces, d, _) in zip(parts, units)]
    wgrad = [float(g[0] * w) for (_, g), (*_, w) in zip(parts, units)]
    return dgrad, float(gemm_time.units_time_fwd(n, units)
                        + gemm_time.units_time_bwd(n, units)[0]), wgrad


def replicated_gemms(job: Any) -> tuple[list[tuple[str, tuple]], list[tuple[str, tuple]]]:
    """(the GEMMs the model ran whole on every tp rank before §5.99, ``T x w x h``, the same
    at the shape Megatron-Core 0.12 runs under SP, which the model prices since §5.99,
    ``gemm_time.whole_split``): MLA's down projections (``ModelSpec.attention_linears`` marked
    ``"rep"``) are column-parallel in core 0.12-0.13 (``T x w/tp x h``), and the router runs
    on the rank's sequence shard (``T/tp x E x h``: ``MoELayer.forward`` routes the SP shard,
    ``router.py`` ``gating``)."""
    m, p = job.model, job.plan
    args = (m, p.mbs, p.tp, p.cp, p.ep, "moe", p.expert_tp, 1.0)
    before = gemm_shapes.layer_gemm_parts(*args)
    now = gemm_shapes.layer_gemm_parts(*args, gemm_time.whole_split(p.tp, p.sp, job.framework))
    splits = [s for _, _, _, s in m.attention_linears()]
    pick = [i for i, (_, g) in enumerate(before)
            if (i < len(splits) and splits[i] == "rep") or g[4] is None]
    return [before[i] for i in pick], [now[i] for i in pick]


def candidates(job: Any, layers: int, microbatches: int) -> list[tuple[str, str, float]]:
    """``(name, sign, seconds per MoE layer and micro-batch)`` of each candidate."""
    m, p, cl = job.model, job.plan, job.cluster
    tp, sp = p.tp, bool(p.sp)
    c = stage_costs(job)
    x = c  # the TP fields are per layer (the attention's; ``tp_bytes`` the same in each kind)

    def t(kind: str, nb: float) -> float:
        return float(cm.collective_time(kind, nb, tp, 1, cl))
    T = float(token_counts.tokens_per_gpu(p.mbs, m.seq_length, p.cp))
    ag_h, rs_h = t("allgather", tp_kind_bytes(x, "allgather")), \
        t("reduce_scatter", tp_kind_bytes(x, "reduce_scatter"))
    out: list[tuple[str, str, float]] = []
    # 1. the dispatcher's tp gather: MoEAlltoAllTokenDispatcher.tp_size is the EXPERT tp size
    #    (token_dispatcher.py line 53), 1 here (launch.sh ETP=1), so no gather (line 537)
    out.append((f"dispatcher gather over etp (etp {p.expert_tp})", "0",
                0.0 if p.expert_tp == 1 else float("nan")))
    # 2. seq_aux_loss: probs gathered over tp x cp forward (moe_utils.py line 113), their
    #    gradient reduce-scattered backward; fp32 scores, T x E elements gathered
    aux = T * m.num_experts * FP32
    out.append((f"seq_aux_loss probs AG + RS ({aux / 1e6:.2f} MB)", "+",
                t("allgather", aux) + t("reduce_scatter", aux)))
    # 3. column down projections' backward re-gathers of the hidden state (TE's SP input
    #    re-gather beside its dgrad GEMM, §5.70): priced since §5.97 (``sp_regather_pieces``),
    #    beside the code's dgrad GEMM (``T x w/tp x h``) since §5.99; the model's GEMM before
    #    §5.99 (``T x w x h``) was longer and hid more
    have, want = replicated_gemms(job)
    dg = _priced(job, [q for q in want if q[1][4] is not None])[0] if x.tp_down > 0 and sp \
        else []
    dg0 = _priced(job, [q for q in have if q[1][4] is not None])[0] if dg else []
    model = [d_ for w_, d_ in ((x.rg_down_qw, x.rg_down_q), (x.rg_down_kvw, x.rg_down_kv))
             if w_ > 0 and x.rg_bytes > 0]
    priced = sum(max(0.0, ag_h - d_) for d_ in model)
    out.append(("down projections' re-gathers exposed (priced §5.97, §5.99)", "0", priced))
    out.append(("  the same, less beside the model's dgrad GEMM before §5.99", "0",
                priced - sum(max(0.0, ag_h - d_) for d_ in dg0)))
    out.append(("  (the same, whole, were no dgrad beside them)", "0", len(dg) * ag_h))
    # 3a. the column down projections' input-gradient reduce-scatters (§5.85 priced them
    #     blocking) start async before their weight-gradient GEMM (TE ``linear.py``
    #     backward, as §5.75's rule for every column linear): what that GEMM hides,
    #     min(t_rs, wgrad) each, is priced since §5.99 (``down_reduce_hidden``)
    red = (lambda w: dgrad_reduce_time(x, tp, sp, cl, w))
    out.append(("down projections' reduce-scatters hidden by their wgrad (priced §5.99)", "0",
                -float(down_reduce_hidden(red, x))))
    # 3b. the model priced the down projections and the router whole (T rows, full width)
    #     on each rank before §5.99; the code runs T x w/tp (column) and T/tp rows (the
    #     router), which the model prices since
    for name, keep in (("down projections'", lambda q: q[1][4] is not None),
                       ("router's", lambda q: q[1][4] is None)):
        out.append((f"{name} GEMMs fwd + bwd at the code's shape, less the whole ones "
                    "(priced §5.99)", "0",
                    _priced(job, [q for q in want if keep(q)])[1]
                    - _priced(job, [q for q in have if keep(q)])[1]))
    # 4. per-step all-reduce over tp of the SP-marked gradients core 0.12 sums
    #    (finalize_model_grads._allreduce_layernorm_grads): router weight E x h
    #    (router.py line 48), two norms h, MLA's latent norms; per layer-mb of the fullest stage
    per_layer = (m.num_experts * m.hidden_size + 2 * m.hidden_size
                 + (m.q_lora_rank or 0) + (m.kv_lora_rank or 0)) * FP32
    priced = float(sp_grad_allreduce_bytes(c, layers))
    full = per_layer * layers
    out.append((f"per-step SP-marked grads AR ({full / 1e6:.1f} MB, {priced / 1e6:.2f} "
                "priced)", "+", (t("allreduce", full) - (t("allreduce", priced)
                                                         if priced > 0 else 0.0))
                / (layers * microbatches)))
    # 5. moe_shared_expert_overlap: the shared expert's AG/RS run on a side stream beside the
    #    dispatch/combine all-to-alls (shared_experts.py pre_forward_comm/post_forward_comm);
    #    the model charges them blocking: at most what it over-charges in the forward
    out.append(("shared expert's AG + RS on the side stream (forward)", "-", -(ag_h + rs_h)))
    # 6. priced already: the column layout's forward/backward collectives (§5.85) and the
    #    mla_up_proj rerun gathers (§5.81)
    tt = lambda kind, nb: t(kind, float(nb))  # noqa: E731
    out.append(("column down projections' collectives fwd + bwd (priced §5.85)", "0",
                float(attn_down_time(tt, x, sp, True) + attn_down_time(tt, x, sp, False))))
    out.append(("mla_up_proj rerun gathers (priced §5.81)", "0",
                float(attn_rc_gathers(tt, x))))
    # 7. TP comm overlap: MegatronCommOverlapCallback(tp_comm_overlap=False)
    out.append((f"TP comm overlap (tp_comm_overlap {p.tp_comm_overlap})", "0", 0.0))
    return out


def shared_side_stream(job: Any) -> tuple[float, float]:
    """(the shared expert's SP all-gather + reduce-scatter, its forward GEMMs), seconds per
    MoE layer and micro-batch forward, contention-free and as the model prices them
    (``comm.collective_time``; ``gemm_time.gemms_time_fwd`` at the shapes of
    ``gemm_time.whole_split``): what ``moe_shared_expert_overlap``'s side stream runs beside
    the dispatch -> experts -> combine path (core_v0.12.0 ``token_dispatcher.py`` lines
    512-656), at most what it would take off the forward (§5.99, not priced)."""
    m, p, cl = job.model, job.plan, job.cluster
    c = stage_costs(job)
    coll = float(cm.collective_time("allgather", tp_kind_bytes(c, "allgather"), p.tp, 1, cl)
                 + cm.collective_time("reduce_scatter", tp_kind_bytes(c, "reduce_scatter"),
                                      p.tp, 1, cl))
    parts = gemm_shapes.layer_gemm_parts(m, p.mbs, p.tp, p.cp, p.ep, "moe", p.expert_tp, 1.0,
                                         gemm_time.whole_split(p.tp, p.sp, job.framework))
    shared = [(n, g) for n, g in parts if n == "shared_mlp"]
    gemm = float(gemm_time.gemms_time_fwd([g for _, g in shared], p.tp, cl.gpu, job.dtype, False,
                                          job.system,
                                          gemm_time.fixed_shares(shared, m, p.ep, job.framework)))
    return coll, gemm


def main() -> int:
    ds, allr = deepseek_rows()
    print("Table 1: the rows, per layer and micro-batch of the busiest stage (ms)\n")
    print("| row | estimate s | measured s | miss | model's TP | estimate at tp 1, s | "
          "tp 2 - tp 1 per layer-mb |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    jobs = []
    for r in ds:
        job = case_from_entry(r, allr).job
        n = layer_microbatches(r)
        e, e1 = estimate(job), estimate(tp1_job(job))
        meas = r["measured"]["step_time_s"]
        print(f"| {r['id']} | {e.step_time_s:.3f} | {meas:.3f} | "
              f"{1e3 * (meas - e.step_time_s) / n:.2f} | "
              f"{1e3 * float(e.breakdown_s['tp_comm']) / n:.2f} | {e1.step_time_s:.3f} | "
              f"{1e3 * (e.step_time_s - e1.step_time_s) / n:+.2f} |")
        jobs.append((r, job, n, meas, e.step_time_s))
    for r, job, n, meas, est in jobs:
        if not r["id"].endswith(("h100_512_bf16", "gb200_256_bf16")):
            continue
        layers = max(job.layers_of_stage(s) for s in range(job.plan.pp))
        mb = job.plan.gbs // (job.plan.mbs * job.plan.dp)
        print(f"\nTable 2, {r['id']}: one MoE layer and micro-batch (µs)\n")
        print("| candidate | sign | µs |")
        print("|---|---|---:|")
        plus, minus = 0.0, 0.0
        for name, sign, s in candidates(job, layers, mb):
            print(f"| {name} | {sign} | {1e6 * s:.1f} |")
            if sign == "+":
                plus += s
            elif sign == "-":
                minus += s
        miss = 1e6 * (meas - est) / n
        print(f"\nunpriced costs (+): {1e6 * plus:.1f} µs, over-charges (-): {1e6 * minus:.1f} "
              f"µs, net {1e6 * (plus + minus):+.1f} µs against a miss of {miss:.0f} µs "
              f"({100 * 1e6 * plus / miss:.2f} % and {100 * 1e6 * (plus + minus) / miss:+.2f} %)")
        coll, gemm = shared_side_stream(job)
        print(f"shared expert's side stream (moe_shared_expert_overlap, not priced), forward: "
              f"AG + RS {1e6 * coll:.1f} µs + GEMMs {1e6 * gemm:.1f} µs = "
              f"{1e6 * (coll + gemm):.1f} µs at most, {100 * 1e6 * (coll + gemm) / miss:.2f} % "
              "of the miss, in the direction away from it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
