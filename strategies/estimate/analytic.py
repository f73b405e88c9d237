"""The analytic step-time model, written over numpy arrays of plan fields so that one code path
scores one plan (``strategies.estimate``) or a hundred thousand (``strategies.search.space``).

Model (per optimizer step, seconds):

* stage time per micro-batch ``t_s`` = layers on the stage × (forward + backward + recompute +
  exposed TP/CP/EP communication) + the embedding on the first stage and the LM head on the last;
  the compute comes from ``strategies.cost.compute`` (sustained GEMM efficiency, shape
  penalty, memory-bound kernels, gradient accumulation and kernel launches of the job's
  ``strategies.framework`` profile, the clock penalty of overlapped communication; every
  constant and its source: docs/calibration.md);
* pipeline: ``m·max_s t_s + (Σ_s t_s − max_s t_s)/v`` — exact for balanced stages and free
  communication ((m + p − 1)·t for 1F1B and GPipe, m·t + (p − 1)·t/v interleaved) and the
  steady-state-bound form when the last stage carries the LM head;
* point-to-point: two blocking exchanges per virtual pipeline step on the critical path;
* data parallel: gradient reduce (all-reduce, or reduce-scatter + all-gather with the
  distributed optimizer / ZeRO), overlapped with the last micro-batch's backward only when
  ``overlap_grad_reduce`` (as Megatron-LM does), the last bucket always exposed;
* the optimizer step (memory-bound Adam).

MFU counts the model FLOPs of docs/formulas.md §2b (the attention square in full, the published
convention); HFU the same plus the recomputed forward (``costs.hardware_flops_per_step``), as
docs/cli.md defines it, so HFU >= MFU, equal without recomputation. Both are conventions: with
FlashAttention skipping causal blocks the hardware executes fewer FLOPs
(``costs.executed_flops_per_step``, at most peak · step time by construction), so at very long
sequences either may exceed 1.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost import comm as cm
from strategies.cost import compute as ct
from strategies.cost import counts as costs
from strategies.cost.system import SystemConfig, get_system
from strategies.framework import FrameworkProfile, get_profile
from strategies.model import ModelSpec
from topologies.cluster import Cluster

SCHED_CODE = {"gpipe": 0, "1f1b": 1, "interleaved": 2}
RECOMPUTE_CODE = {"none": 0, "selective": 1, "full": 2}


def estimate_arrays(m: ModelSpec, cl: Cluster, dtype: str, P: dict[str, Any],
                    framework: FrameworkProfile | str | None = None,
                    system: SystemConfig | None = None) -> dict[str, Any]:
    """Score plans given as arrays. ``P`` keys: tp pp dp cp ep mbs gbs vpp sched rc sp zero
    flash ogr opg tpo (ints/bools, broadcastable). ``framework``: the software profile
    (``strategies.framework``; default Megatron-Core); ``system``: the policy constants
    (``strategies.cost.system``). Returns arrays of seconds and ratios."""
    fw = get_profile(framework)
    sy = get_system(system)
    tp, pp, dp, cp, ep = (np.asarray(P[k], dtype=float) for k in ("tp", "pp", "dp", "cp", "ep"))
    b, gbs, v = (np.asarray(P[k], dtype=float) for k in ("mbs", "gbs", "vpp"))
    sched, rc, zero = (np.asarray(P[k]) for k in ("sched", "rc", "zero"))
    sp, flash, ogr, opg, tpo = (np.asarray(P[k], dtype=bool) for k in ("sp", "flash", "ogr", "opg", "tpo"))
    gpu, G = cl.gpu, cl.gpus_per_node
    L = m.num_layers
    mb = gbs / (b * dp)                                     # micro-batches per pipeline
    lps = L / pp                                            # layers per pipeline rank

    slow = ct.overlap_slowdown(tp, tpo, cp, zero)
    shard = ct.accum_shard(dp, zero)
    lt = ct.layer_time(m, b=b, tp=tp, cp=cp, ep=ep, sp=sp, flash=flash, recompute=rc, gpu=gpu,
                       dtype=dtype, tpo=tpo, fw=fw, slow=slow, shard=shard, system=sy)
    # tensor parallel: 2 collectives fwd, 2 bwd, 2 more in a full recompute
    bw_tp, lat_tp = cm.group_bandwidth(cl, tp, 1)
    t_ar = cm.allreduce_time(costs.tp_comm_bytes_fwd(m, b, cp), tp, bw_tp, lat_tp)
    n_tp = 4 + 2 * (rc == 2)
    g_fwd = slow * ct.gemm_time_fwd(m, b, tp, cp, ep, gpu, dtype, tpo, sy)
    tp_raw = n_tp * t_ar
    tp_hidden = np.maximum(tp_raw - (3 + (rc == 2)) * g_fwd, tp_raw / sy.tp_overlap_chunks)
    tp_layer = np.where(tpo, tp_hidden, tp_raw)
    # context parallel ring attention, overlapped with the attention blocks it feeds
    bw_cp, lat_cp = cm.group_bandwidth(cl, cp, tp)
    t_cp = 3 * cm.reduce_scatter_time(costs.cp_comm_bytes_fwd(m, b, tp, cp) * cp / np.maximum(cp - 1, 1),
                                      cp, bw_cp, lat_cp)
    a_f, a_b = ct.attention_time_fwd(m, b, tp, cp, flash, gpu, slow, fw, sy)
    cp_layer = np.where(cp > 1, np.maximum(t_cp - (a_f + a_b), sy.cp_exposed_fraction * t_cp), 0.0)
    # expert parallel all-to-all: dispatch + combine, forward and backward
    bw_ep, lat_ep = cm.group_bandwidth(cl, ep, tp * cp)
    ep_layer = 2 * cm.alltoall_time(costs.ep_alltoall_bytes_fwd(m, b, tp, cp, ep), ep, bw_ep, lat_ep)

    comp_layer = lt.fwd + lt.bwd
    per_layer = comp_layer + lt.recompute + tp_layer + cp_layer + ep_layer
    head_f, head_b = ct.lm_head_time(m, b, tp, cp, gpu, dtype, fw, slow, shard, sy)
    emb = ct.embedding_time(m, b, tp, cp, gpu, sy) + ct.embedding_time_bwd(
        m, b, tp, cp, gpu, dtype, fw, shard, sy)
    t_mid = lps * per_layer
    t_first = t_mid + emb
    t_last = t_mid + head_f + head_b
    single = pp == 1
    t_max = np.where(single, t_first + head_f + head_b, np.maximum(t_first, t_last))
    t_min = np.where(single, t_max, np.where(pp > 2, t_mid, np.minimum(t_first, t_last)))
    t_sum = np.where(single, t_max, t_first + t_last + (pp - 2) * t_mid)
    vv = np.where(sched == 2, v, 1.0)
    pipe = mb * t_max + (t_sum - t_max) / vv
    bubble = pipe - mb * t_max

    # pipeline point-to-point (scatter/gather over the tp ranks' NICs, then an NVLink all-gather)
    stride_pp = tp * cp * dp
    p2p_b = costs.pp_p2p_bytes(m, b, tp, cp, sp)
    t_p2p = cm.p2p_time(p2p_b, cl, stride_pp >= G) + np.where(
        sp, 0.0, cm.allgather_time(p2p_b * tp, tp, bw_tp, lat_tp))
    pp_exposed = np.where(pp > 1, 2 * t_p2p * (mb * vv + pp - 1), 0.0)

    # data parallel gradient reduction on the first stage (the last to finish its backward)
    params = costs.stage_params_per_gpu(m, tp, ep, pp, 0)
    bw_dp, lat_dp = cm.group_bandwidth(cl, dp, tp * cp)
    gb = sy.main_grad_bytes(dtype)
    t_ar_dp = cm.allreduce_time(gb * params, dp, bw_dp, lat_dp)
    t_rs_dp = cm.reduce_scatter_time(gb * params, dp, bw_dp, lat_dp)
    t_ag_dp = cm.allgather_time(sy.param_bytes * params, dp, bw_dp, lat_dp)
    t_grad = np.where(zero == 0, t_ar_dp, t_rs_dp)
    # the embedding's gradient is complete only when the backward ends (and its weights are the
    # first the next forward needs), so its bucket is never overlapped: the exposed share is the
    # larger of one bucket and the embedding (``dp_plan``: the embedding closes the last bucket)
    last = np.minimum(1.0, np.maximum(sy.bucket_params, costs.embedding_params_per_gpu(m, tp)) / params)
    window = lps * (lt.bwd + lt.recompute)
    grad_exposed = np.where(ogr, np.maximum(t_grad - window, t_grad * last), t_grad)
    fwd_window = lps * lt.fwd
    ag_exposed = np.where(zero >= 1, np.where(opg, np.maximum(t_ag_dp - fwd_window, t_ag_dp * last),
                                               t_ag_dp), 0.0)
    # ZeRO-2: gradients are sharded, so every micro-batch's are reduce-scattered into the shard,
    # each behind that micro-batch's backward; the last bucket of the last one is exposed
    z2_grad = np.where(ogr, mb * np.maximum(t_rs_dp - window, 0.0) + t_rs_dp * last,
                       mb * t_rs_dp)
    # ZeRO-3: parameters gathered for forward and backward, gradients scattered, every micro-batch
    z3_mb = 2 * t_ag_dp + t_rs_dp
    z3_exposed = mb * np.maximum(z3_mb - t_max, 0.0) + z3_mb / np.maximum(lps, 1)
    dp_exposed = np.where(dp > 1, np.where(zero == 3, z3_exposed,
                                           np.where(zero == 2, z2_grad, grad_exposed) + ag_exposed),
                          0.0)

    opt_params = params / np.where(zero >= 1, dp, 1.0)
    t_opt = ct.optimizer_time(opt_params, gpu, sy)
    step = pipe + pp_exposed + dp_exposed + t_opt

    # breakdown on the slowest stage (exposed seconds per step)
    share = lps * mb
    n = tp * pp * dp * cp
    tokens = gbs * m.seq_length
    model_flops = costs.model_flops_per_step(m, gbs)
    hw_flops = costs.hardware_flops_per_step(m, gbs, flash, rc)
    peak = gpu.peak(dtype)
    return {
        "step_time_s": step, "tokens_per_s": tokens / step,
        "mfu": model_flops / (n * step * peak), "hfu": hw_flops / (n * step * peak),
        "bubble_fraction": (pipe - mb * t_min) / step,
        "compute": share * comp_layer + mb * (t_max - t_mid) , "recompute": share * lt.recompute,
        "tp_comm": share * tp_layer, "cp_comm": share * cp_layer, "ep_comm": share * ep_layer,
        "pp_comm": pp_exposed, "dp_comm": dp_exposed, "bubble": bubble, "optimizer": t_opt,
        "num_microbatches": mb, "stage_time_s": t_max,
    }
