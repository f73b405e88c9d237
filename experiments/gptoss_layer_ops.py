#!/usr/bin/env python
"""Every operation one gpt-oss-120b layer (attention + MoE) runs in Megatron-Core at the 26.04
container (core_v0.17.0, Transformer Engine v2.14, Megatron-Bridge v0.4.2's gpt-oss bridge),
set beside the term the model charges for it, in ms per layer and micro-batch at one reference
row's rank shape (docs/calibration.md §5.163). Default row: ``mbridge260401_gptoss120b_gb300_64_bf16``
(tp 1, ep 64, mbs 4, bf16, no recomputation); ``--row ID [--file PATH]`` for another. Analytic,
a few seconds.

    python experiments/gptoss_layer_ops.py [--row ID] [--file PATH]

Columns: the operation with its source (file:line at those tags), the model's term, forward
and backward ms, and its state: ``priced`` (a term prices it; a bias in a cuBLASLt epilogue
rides its GEMM's), ``§5.163`` (priced there), ``view`` (no kernel), ``host`` (no device
work), ``sized`` (a few µs, not priced; the figure is its bytes over the usable HBM
bandwidth). The last line: the model's layer, what the row misses per
layer and micro-batch (``moe_residuals.py``'s figure), and what the §5.163 terms add.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import elementwise_bytes as eb  # noqa: E402
from strategies.cost import elementwise_time as et  # noqa: E402
from strategies.cost import gemm_shapes, moe_bytes, moe_time  # noqa: E402
from strategies.cost.attention_time import attention_time_fwd  # noqa: E402
from strategies.cost.gemm_time import (fixed_shares, gemm_units, units_time_bwd,  # noqa: E402
                                       units_time_fwd, whole_split)
from strategies.cost.hbm_rate import usable_hbm  # noqa: E402
from strategies.cost.qkv_split import qkv_split_time  # noqa: E402
from strategies.cost.quant_scope import scope_formats  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.cost.token_counts import tokens_per_gpu  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.plan import DISPATCHERS  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

ROW = "mbridge260401_gptoss120b_gb300_64_bf16"
FILE = "strategies/reference/data/megatron_bridge_2604.json"
MC, TE, BR = "Megatron-LM core_v0.17.0", "TransformerEngine v2.14", "Megatron-Bridge v0.4.2"


def _ms(x) -> str:
    return f"{1e3 * float(x):.3f}"


def layer_ops(job, ep_comm: float = 0.0) -> tuple[list[tuple], dict]:
    """``(rows, totals)``: one row per operation, ``(op, source, model term, fwd s, bwd s,
    state)``, and the §5.163 terms. ``ep_comm``: the estimate's exposed all-to-all seconds
    per layer and micro-batch, shown on its row (forward and backward together)."""
    m, p, fw, g, sy, dtype = (job.model, job.plan, job.framework, job.cluster.gpu, job.system,
                              job.dtype)
    b, tp, cp, ep, sp, etp, load = p.mbs, p.tp, p.cp, p.ep, p.sp, p.etp, p.moe_imbalance
    code = DISPATCHERS.index(p.moe_dispatcher)
    hbm = usable_hbm(g, sy)
    T = tokens_per_gpu(b, m.seq_length, cp)
    parts = gemm_shapes.layer_gemm_parts(m, b, tp, cp, ep, None, etp, load,
                                         whole_split(tp, sp, fw))
    units = gemm_units([x for _, x in parts], tp, g, dtype, False, fw, sy,
                       shares=fixed_shares(parts, m, ep, fw),
                       formats=scope_formats(parts, m, sy.quant_scope, dtype))

    def gemm(i):
        f = units_time_fwd([parts[i][1][0]], [units[i]])
        return f, units_time_bwd([parts[i][1][0]], [units[i]])[0]

    qkv, proj, fc1, fc2, router = (gemm(i) for i in range(5))
    norm = eb.norm_bytes_fwd(m, b, tp, cp, sp) / hbm / 2          # one of the two norms
    bda = 6 * m.hidden_size * T / hbm                              # one fused residual add
    act = eb.activation_fn_bytes_fwd(m, b, tp, cp, gemm_shapes.mlp_part_widths(m)[
        "routed_mlp"]) / hbm
    rope_fused = 2 * 2 * eb.rope_width(m) * T / tp / hbm
    clamp_f, clamp_b = (x / hbm for x in eb.clamp_bytes(m, b, tp, cp, load))
    var_f, var_b = et.eager_variant_time(m, b, tp, cp, g, load, fw, sy)
    rope_f, rope_b = var_f - clamp_f - 3 * fw.launch_gap_s, var_b - clamp_b - 7 * fw.launch_gap_s
    att_f, att_b = attention_time_fwd(m, b, tp, cp, p.flash_attn, g, 1.0, fw, sy)
    perm_f, perm_b = moe_time.moe_permute_time(m, b, tp, cp, ep, g, load, code, 1.0, sy, etp)
    bias_f, bias_b = moe_time.expert_bias_time(m, b, tp, cp, ep, g, load, etp, fw, sy)
    # of which the split's backward cat: 2 of its backward passes and one kernel a layer
    cat = (moe_bytes.expert_bias_bytes(m, b, tp, cp, load, etp)[1] * 2
           / moe_bytes.EXPERT_BIAS_PASSES[1] / hbm + fw.launch_gap_s) * moe_time.bias_loop(fw)
    sync = moe_time.moe_sync_time(m, fw, g, code, p.moe_pad_to_capacity)
    geglu = moe_time.geglu_sync_time(m, fw, g)
    u_f, u_b = et.attn_bias_add_time(m, b, tp, cp, sp, g, fw, sy)
    qs_f, qs_b = qkv_split_time(m, b, tp, cp, p.flash_attn, g, fw, sy)
    host_f, host_b = moe_time.moe_host_time(m, b=b, tp=tp, cp=cp, ep=ep, gpu=g, dtype=dtype,
                                            fw=fw, system=sy, etp=etp, load=load,
                                            permute=(perm_f, perm_b), bias=(bias_f, bias_b))
    sink = 3 * 4 * b * m.num_attention_heads / tp * m.seq_length / hbm   # fp32 [b,h,s] x3
    logits = 6 * T * m.num_experts / hbm      # random logits, top-k softmax: T x E, 16-bit
    rows = [
        ("RMSNorm inside TELayerNormColumnParallelLinear",
         f"{TE} module/layernorm_linear.py", "norm_bytes_fwd", norm, 2 * norm, "priced"),
        ("QKV GEMM, its bias in cuBLASLt's BIAS / BGRADB epilogue",
         f"{TE} common/gemm/cublaslt_gemm.cu L665-670", "GEMM (attn, qkv)", *qkv, "priced"),
        ("split q/k/v (views)", f"{MC} transformer/attention.py L1469", "-", 0.0, 0.0,
         "view"),
        ("q's reshape (a copy at g/t > 1) and TE's contiguous() of v (no layout matches)",
         f"{MC} transformer/attention.py L1474; {TE} attention/dot_product_attention/utils.py "
         "L2054-2055", "qkv_split_time (forward)", qs_f, 0.0, "§5.167"),
        ("backward of torch.split (TE 2.14 has no _SplitAlongDim): a cat of dq, dk, dv",
         f"PyTorch split_with_sizes_backward (at::cat); {MC} extensions/transformer_engine.py",
         "qkv_split_time (backward)", 0.0, qs_b, "§5.167"),
        ("YaRN RoPE, unfused (mscale != 1) on q and k",
         f"{MC} models/common/embeddings/rope_utils.py L92-126",
         "rope fused + ROPE_UNFUSED_BYTES", rope_fused + rope_f, 2 * rope_fused + rope_b,
         "priced"),
        ("cuDNN fused attention, window 128 on alternate layers, learnable sinks",
         f"{TE} attention/dot_product_attention/utils.py; window_kernel.py",
         "attention_time_fwd", att_f, att_b, "priced"),
        ("sink: softmax term in-kernel; dSink chain in the dO.O pre-pass",
         "cudnn-frontend 3929da2 node/scaled_dot_product_flash_attention.h L1527-1547",
         "-", 0.0, sink, "sized"),
        ("linear_proj GEMM (returns its bias, skip_bias_add)",
         f"{MC} transformer/attention.py L1217", "GEMM (attn, proj)", *proj, "priced"),
        ("x + bias, unfused bias-dropout-add (bias_dropout_fusion False)",
         f"{MC} fusions/fused_bias_dropout.py L43-47; {BR} gpt_oss_bridge.py L74",
         "attn_bias_add_time", u_f, u_b, "§5.163"),
        ("dropout at p = 0 (returns its input)", "PyTorch ATen Dropout.cpp", "-", 0.0, 0.0,
         "view"),
        ("residual + out (attention)", f"{MC} fusions/fused_bias_dropout.py L48-52",
         "fused bias-dropout-add bytes", bda, 2 * bda, "priced"),
        ("pre-MLP RMSNorm (TENorm)", f"{TE} module/rmsnorm.py", "norm_bytes_fwd", norm,
         2 * norm, "priced"),
        ("router GEMM with its bias (router_gating_linear)",
         f"{MC} transformer/moe/router.py L101-106", "GEMM (router)", *router, "priced"),
        ("random logits (force load balancing), fused top-k softmax",
         f"{MC} transformer/moe/moe_utils.py L1231; router.py L697-699", "-", logits,
         2 * logits, "sized"),
        ("counts all-gather, D2H copy, the dispatcher's sync",
         f"{MC} transformer/moe/token_dispatcher.py L867-905", "moe_sync_time", sync, 0.0,
         "priced"),
        ("permute, sort_chunks, unsort, unpermute (TE fused)",
         f"{MC} transformer/moe/token_dispatcher.py", "moe_permute_time", perm_f, perm_b,
         "priced"),
        ("tokens_per_expert.tolist() (a host tensor after the sync)",
         f"{MC} transformer/moe/experts.py L344", "-", 0.0, 0.0, "host"),
        ("fc1 GroupedLinear, per-expert bias in the GEMM epilogue, dbias by BGRADB",
         f"{TE} module/grouped_linear.py L207-218, L379-383, L474", "GEMM (routed fc1)", *fc1,
         "priced"),
        ("clamp of both halves and cat (eager)", f"{MC} fusions/fused_bias_geglu.py L424-432",
         "CLAMP_BYTES", clamp_f + 3 * fw.launch_gap_s, clamp_b + 7 * fw.launch_gap_s,
         "priced"),
        ("torch.tensor(linear_offset, device=...): a synchronising H2D copy",
         f"{MC} fusions/fused_bias_geglu.py L434", "geglu_sync_time", geglu, 0.0, "§5.163"),
        ("weighted quick-GEGLU (torch.compile)", f"{MC} fusions/fused_bias_geglu.py L205-216",
         "activation_fn_bytes_fwd", act, 2 * act, "priced"),
        ("fc2 GroupedLinear (returns its biases)", f"{MC} transformer/moe/experts.py L203-215",
         "GEMM (routed fc2)", *fc2, "priced"),
        ("t + b * p per local expert, cat; dbias and dprobs reductions",
         f"{MC} transformer/moe/experts.py L251-268", "expert_bias_time", bias_f, bias_b - cat,
         "priced"),
        ("backward of its torch.split: a cat of the per-expert gradients",
         "PyTorch split_with_sizes_backward (at::cat)", "EXPERT_BIAS_PASSES 6 -> 8 backward",
         0.0, cat, "§5.163"),
        ("dispatch and combine all-to-alls", f"{MC} transformer/moe/token_dispatcher.py",
         "the estimate's ep_comm (fwd + bwd, exposed)", ep_comm, 0.0,
         "priced"),
        ("residual + out (MoE: no bias left)", f"{MC} fusions/fused_bias_dropout.py L54-59",
         "fused bias-dropout-add bytes", bda, 2 * bda, "priced"),
        ("host issue of the expert path over its GPU time", "§5.6", "moe_host_time", host_f,
         host_b, "priced"),
    ]
    return rows, {"geglu": geglu, "bias_add": (u_f, u_b), "split_cat": cat,
                  "qkv_split": (qs_f, qs_b)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--row", default=ROW)
    ap.add_argument("--file", default=FILE)
    a = ap.parse_args()
    entry = {e["id"]: e for e in load_reference(a.file)}[a.row]
    case = case_from_entry(entry)
    job = case.job
    p = job.plan
    print(f"{a.row}: tp {p.tp}, ep {p.ep}, mbs {p.mbs}, {job.dtype}, recompute "
          f"{p.recompute_modules or p.recompute}, {p.moe_dispatcher}, {job.cluster.gpu.name}")
    print()
    print("| # | operation | source | model's term | fwd ms | bwd ms | state |")
    print("|---|---|---|---|---:|---:|---|")
    sc = stage_costs(job)
    est = estimate(job)
    layer = sc.layer_fwd + sc.layer_bwd
    per = est.num_microbatches * job.model.num_layers / p.pp
    rows, tot = layer_ops(job, est.breakdown_s["ep_comm"] / per)
    for i, (op, src, term, f, b, state) in enumerate(rows, 1):
        print(f"| {i} | {op} | {src} | {term} | {_ms(f)} | {_ms(b)} | {state} |")
    miss = (case.measured_step_s - est.step_time_s) / per
    new = tot["geglu"] + sum(tot["bias_add"]) + tot["split_cat"]
    print()
    print(f"model layer (stage record, fwd + bwd): {_ms(layer)} ms; the row misses {_ms(miss)} "
          f"ms per layer and micro-batch (moe_residuals.py's figure); the §5.163 terms are "
          f"{_ms(new)} ms of the layer (+ the sync's rerun where moe_act is recomputed)")


if __name__ == "__main__":
    main()
