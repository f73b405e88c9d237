#!/usr/bin/env python
"""What the per-tensor ZeRO-3 model leaves on Narayanan et al. 2021's ZeRO-3 rows, and what the
DeepSpeed 2021 mechanisms read from its code would do to it (docs/calibration.md §3.19, §5.124).

Run (about two seconds, analytic only, changes nothing in the model):

    python experiments/zero3_deepspeed_2021.py

Table 1, for the six ``narayanan2021_t2_zero3_*`` rows of ``published.json`` (GPT-3 175B and
530B, DeepSpeed ZeRO-3 without model parallelism, full recompute, one micro-batch per GPU): the
measured step, the estimate, the model's compute (the step less its ZeRO-3 traffic), the model's
ZeRO-3 traffic (``strategies.estimate.analytic``'s per-tensor term, ``comm.per_tensor_time``),
the time the measurement leaves after the model's compute, and both per collective call (the
gathers and reduce-scatters that ``param_counts.zero3_tensor_gathers`` counts). A missed cost per
call that is the same for both models points at latency or host time; one that grows with the
tensor (530B's weights are 2.8x 175B's) points at bytes.

Table 2: each row's error under what-ifs, each applied to the per-tensor traffic only:

* ``persist``: DeepSpeed's ``stage3_param_persistence_threshold`` (default 1e5 elements,
  v0.3.13-v0.5 ``runtime/zero/constants.py``; ``stage3.py`` ``persistent_parameters`` marks
  every tensor under it ``ds_persist``, ``fetch_sub_module`` finds it AVAILABLE and gathers
  nothing, ``release_sub_module`` never re-partitions it): the layer norms' weights and biases
  and every bias (hidden 12,288 or 20,480, the MLP's 4h bias 49,152 or 81,920) are not
  gathered; their gradients are still reduce-scattered one by one.
* ``ar-buckets``: the gradient path of DeepSpeed's ZeRO-3 before v0.4.5 (2021-08-06):
  ``contiguous_gradients`` defaulted to False for stage 3 (``ZERO3_OPTIMIZATION_CONTIGUOUS_
  GRADIENTS_DEFAULT`` in ``constants.py`` at v0.3.13-v0.4.4), so ``reduce_ipg_grads`` took
  ``buffered_reduce_fallback``: each bucket of gradients (closed when the next tensor would
  take it past ``reduce_bucket_size``, default 5e8 elements) flattened, divided and
  all-reduced in fp16 (``allreduce_bucket``, the project's all-reduce: ``comm.collective_time``),
  then copied back; instead of one reduce-scatter per tensor. The flatten / divide / copy-back
  passes over the gradient in HBM (six of 2 bytes per element) are charged at the GPU's HBM rate.
* ``persist+ar``: the two DeepSpeed defaults of March-June 2021 together.
* ``persist+ar+prefetch``: ``persist+ar`` less the gathers the prefetch hides under compute
  (``prefetch_hidden``, the ``stage3_max_live_parameters`` rule).
* ``host loop``: the model plus the GPU idle of ``_allgather_param``'s Python loop over the
  ``n`` ranks after its ``torch.cuda.synchronize()`` (``host_loop_time``), at the stack's
  launch gap per iteration (a stand-in: PyTorch 1.8's host time per iteration is not published).
* ``persist+post-step``: ``persist`` plus what persistence costs once per step: ``_post_step``
  gathers the persistent tensors again (``post_step_gather_time``: one all-gather, then a copy
  kernel per tensor and rank).
* ``persist+post-step+host``: that plus the host loop of the gathers persistence leaves: every
  per-step mechanism of March-June 2021 read from the source, with the model's gradient path.

Table 3: the seconds per step of the HBM passes the model charges since docs/calibration.md
§5.124 (``comm.zero3_per_tensor.per_tensor_passes``), of the host loop and of the post-step gather.

Table 4: what rate the rows ask for under ``persist+ar`` with nothing hidden (``demanded_rate``).

The persistence threshold is a default of the code the paper ran (the paper does not give its
ZeRO configuration). The ring's latency is the model's (``comm.per_tensor_time`` reads
``comm.collective_time``: NCCL's tuning model's summed hops, docs/calibration.md §5.115); §3.19's
``nccl-lat`` what-if, which swapped it in, is the model since.
"""
from __future__ import annotations

import os
import sys
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases, mape  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.comm.zero3_per_tensor import per_tensor_passes  # noqa: E402
from strategies.cost import param_counts  # noqa: E402
from strategies.cost.hbm_rate import usable_hbm  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402

PERSISTENCE_THRESHOLD = 1e5     # DeepSpeed stage3_param_persistence_threshold default (elements)
REDUCE_BUCKET = 5e8             # DeepSpeed reduce_bucket_size default (elements)


def grad_buckets(m, bucket: float = REDUCE_BUCKET) -> list[float]:
    """Elements of each all-reduced gradient bucket of one backward (tp = pp = 1), in the order
    the gradients complete: the head's (untied: the LM head, then the final norm), every
    layer's tensors last to first, the embeddings; a bucket is closed before a tensor that
    would take it past ``bucket`` (``reduce_independent_p_g_buckets_and_remove_grads``)."""
    h = m.hidden_size
    order: list[float] = []
    if not m.tie_word_embeddings:
        order.append(float(m.lm_head_params()))
    order += [float(h)] * (2 if m.norm == "layernorm" else 1)
    order += [float(t) for t in reversed(param_counts.layer_param_tensors(m))] * m.num_layers
    order.append(float(param_counts.embedding_params_per_gpu(m, 1)))
    out, cur = [], 0.0
    for t in order:
        if cur and cur + t > bucket:
            out.append(cur)
            cur = 0.0
        cur += t
    return out + [cur]


def _gathers(m, full_recompute: bool, reuse: float, persist: float) -> dict:
    """``param_counts.zero3_tensor_gathers`` with the tensors under ``persist`` elements left out of
    the gathers (their gradients' reduce-scatters kept)."""
    rs = param_counts.zero3_tensor_gathers(m, 1, 1, 1, full_recompute, reuse)
    if not persist:
        return rs
    whole = param_counts.layer_param_tensors(m)
    with mock.patch.object(param_counts, "layer_param_tensors",
                           lambda mm: tuple(t for t in whole if t >= persist)):
        ag = param_counts.zero3_tensor_gathers(m, 1, 1, 1, full_recompute, reuse)
    # the final norm (hidden-size tensors) is under it too; the embeddings and the head are not
    if m.hidden_size < persist:
        norm_n = 2 if m.norm == "layernorm" else 1
        ag = {**ag, "fwd_n": ag["fwd_n"] - norm_n, "fwd_params": ag["fwd_params"] - m.norm_params()}
    return {**ag, "rs_n": rs["rs_n"], "rs_params": rs["rs_params"]}


def copy_rate(job) -> float:
    """Bytes/s of the per-tensor calls' HBM passes on ``job``'s GPU: the usable HBM rate, as
    the stage record's ``copy_rate`` has it (``strategies.cost.stage``)."""
    return float(usable_hbm(job.cluster.gpu, job.system))


def z3_traffic(job, persist: float = 0.0, ar_buckets: bool = False) -> tuple[float, float]:
    """(seconds, calls) of one micro-batch's per-tensor ZeRO-3 traffic of ``job`` (tp = pp = 1),
    as ``strategies.estimate.analytic`` charges it, under the what-ifs of the module docstring."""
    m, cl, fw, n = job.model, job.cluster, job.framework, job.plan.dp
    z = _gathers(m, job.plan.recompute == "full", fw.zero3_reuse_params, persist)
    pb, gb = 2.0, 2.0                     # fp16 parameters and gradients (the rows' precision)
    n_ag, n_rs = z["fwd_n"] + z["bwd_n"], z["rs_n"]
    rate = copy_rate(job)
    t = float(cm.per_tensor_time(n_ag, pb * (z["fwd_params"] + z["bwd_params"]), n, 1, cl,
                                 fw.launch_gap_s, copy_rate=rate)
              + cm.per_tensor_time(n_rs, gb * z["rs_params"], n, 1, cl, fw.launch_gap_s,
                                   "reduce_scatter", copy_rate=rate))
    if ar_buckets:
        t -= float(cm.per_tensor_time(n_rs, gb * z["rs_params"], n, 1, cl, fw.launch_gap_s,
                                      "reduce_scatter", copy_rate=rate))
        b = grad_buckets(m)
        t += sum(float(cm.collective_time("allreduce", gb * e, n, 1, cl)) for e in b)
        t += 6 * gb * sum(b) / cl.gpu.hbm_bandwidth
        n_rs = len(b)
    return t, float(n_ag + n_rs)


def prefetch_hidden(job, step_compute: float) -> float:
    """Seconds per step of the weight gathers that DeepSpeed's prefetch hides under compute
    (``prefetch_next_sub_modules``): a weight is gathered during the module before it when the
    module's own weight (the live gathered elements there) is under ``stage3_max_live_
    parameters`` (1e9), else from the parameterless module between them if there is one (the
    core attention before ``proj``, the second norm before ``fc1``; nothing between ``fc1``
    and ``fc2``, the first norm before the next ``qkv`` is negligible). Forward and recomputed
    forward as such, the backward's regathered ``fc1``, ``proj``, ``qkv`` under the backward of
    the module after them (twice the forward's time); ``fc2`` is kept from the recomputed
    forward to its backward (``_keep_for_later``). Each module's compute is its share of the
    layer's forward FLOPs (qkv 6h², core attention 4sh, proj 2h², fc1 and fc2 8h² per token,
    the MLP 4h wide) of ``step_compute`` (the model's compute and recompute: four forward
    passes per layer). An approximation for GPT-style layers at tp = pp = 1."""
    m, cl, n, fw = job.model, job.cluster, job.plan.dp, job.framework
    h, s_len, L = m.hidden_size, job.seq_len, m.num_layers
    numel = {"qkv": 3 * h * h, "proj": h * h, "fc1": 4 * h * h, "fc2": 4 * h * h}
    flops = {"qkv": 6 * h * h, "core": 4 * s_len * h, "proj": 2 * h * h, "fc1": 8 * h * h,
             "fc2": 8 * h * h}
    t_fwd = step_compute / (4 * L)
    c = {k: t_fwd * v / sum(flops.values()) for k, v in flops.items()}
    g = {k: float(cm.per_tensor_time(1, 2.0 * v, n, 1, cl, fw.launch_gap_s,
                                     copy_rate=copy_rate(job)))
         for k, v in numel.items()}
    live_ok = {k: v < 1e9 for k, v in numel.items()}
    fwd = {"qkv": c["fc2"] if live_ok["fc2"] else 0.0,
           "proj": c["qkv"] + c["core"] if live_ok["qkv"] else c["core"],
           "fc1": c["proj"] if live_ok["proj"] else 0.0,
           "fc2": c["fc1"] if live_ok["fc1"] else 0.0}
    bwd = {"fc1": 2 * c["fc2"] if live_ok["fc2"] else 0.0,
           "proj": 2 * c["fc1"] if live_ok["fc1"] else 0.0,
           "qkv": 2 * (c["proj"] + c["core"]) if live_ok["proj"] else 2 * c["core"]}
    hidden = 2 * sum(min(g[k], w) for k, w in fwd.items()) \
        + sum(min(g[k], w) for k, w in bwd.items())
    return L * hidden


def host_loop_time(job, per_iter: float, persist: float = 0.0) -> float:
    """Seconds per micro-batch the GPU idles in ``_allgather_param``'s Python loop (v0.3.13-
    v0.5.0 ``partition_parameters.py``): after its ``torch.cuda.synchronize()`` nothing is
    queued, and the host builds the ``n`` list entries (``flat_tensor.narrow`` and
    ``dist.get_rank(group)`` each iteration) before it launches the all-gather; ``n``
    iterations of ``per_iter`` seconds per gather call (``param_counts.zero3_tensor_gathers``;
    with ``persist`` the tensors under it are not gathered). The per-iteration host time of
    PyTorch 1.8 on Selene's CPUs is not published: a what-if."""
    z = _gathers(job.model, job.plan.recompute == "full", job.framework.zero3_reuse_params,
                 persist)
    return float(per_iter * job.plan.dp * (z["fwd_n"] + z["bwd_n"]))


def persistent_tensors(m, persist: float = PERSISTENCE_THRESHOLD) -> list[float]:
    """Numel of each tensor under ``stage3_param_persistence_threshold`` (``ds_persist``): a
    layer's norms and biases, every layer, then the final norm (tp = pp = 1)."""
    small = [float(t) for t in param_counts.layer_param_tensors(m) if t < persist]
    final = [float(m.hidden_size)] * (2 if m.norm == "layernorm" else 1)
    return small * m.num_layers + (final if m.hidden_size < persist else [])


def post_step_gather_time(job, persist: float = PERSISTENCE_THRESHOLD) -> float:
    """Seconds per step of ``_post_step``'s gather of the persistent tensors (``stage3.py``
    ``self.persistent_parameters[0].all_gather(...)``, after every optimizer step; they were
    released after the backward, ``_partition_all_parameters``): one all-gather of all their
    partitions together (``_allgather_params``; ``comm.per_tensor_time`` with one call), then
    per tensor one copy kernel for each rank whose partition (``ceil(numel / n)`` elements,
    the aligned size over ``n``) holds some of it, at the stack's launch gap (the project's
    price of a copy kernel, as for the list copies) and its bytes at the HBM rate."""
    n, fw = job.plan.dp, job.framework
    ts = persistent_tensors(job.model, persist)
    part = [np.ceil(t / n) for t in ts]
    copies = sum(float(np.ceil(t / p)) for t, p in zip(ts, part))
    gathered = 2.0 * n * sum(part)
    return float(cm.per_tensor_time(1, gathered, n, 1, job.cluster, fw.launch_gap_s,
                                    copy_rate=copy_rate(job))
                 + copies * fw.launch_gap_s + 2 * 2.0 * sum(ts) / copy_rate(job))


def demanded_rate(job, need: float) -> tuple[float, float, float]:
    """Under DeepSpeed's defaults of March-June 2021 (``persist`` and ``ar-buckets``), nothing
    hidden under compute: (bytes each GPU puts on the wire per step, seconds of the traffic that
    do not depend on the rate (ring latency, list copies, HBM passes), the per-GPU rate in
    bytes/s at which the wire bytes take the rest of ``need``). The model's rate is
    ``comm.group_bandwidth``'s."""
    m, cl, n = job.model, job.cluster, job.plan.dp
    z = _gathers(m, job.plan.recompute == "full", job.framework.zero3_reuse_params,
                 PERSISTENCE_THRESHOLD)
    bw, _ = cm.group_bandwidth(cl, n, 1)
    wire = (n - 1) / n * (2.0 * (z["fwd_params"] + z["bwd_params"])
                          + 2 * 2.0 * sum(grad_buckets(m)))    # all-reduce: twice the buffer
    total, _ = z3_traffic(job, PERSISTENCE_THRESHOLD, ar_buckets=True)
    fixed = total - float(wire / bw)
    return float(wire), fixed, float(wire / max(need - fixed, 1e-9))


def main() -> None:
    cases = [c for c in load_cases(tiers=None) if c.id.startswith("narayanan2021_t2_zero3")]
    print("| row | measured s | estimate s | error | model compute s | model ZeRO-3 s | "
          "left for ZeRO-3 s | calls | model ms/call | left ms/call | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for c in cases:
        job = c.job
        est = estimate(job)
        z3, calls = z3_traffic(job)
        assert abs(z3 - est.breakdown_s["dp_comm"]) < 1e-6 * z3, (z3, est.breakdown_s)
        base = est.step_time_s - z3
        left = c.measured_step_s - base
        rows.append((c, job, base))
        print(f"| {c.id} | {c.measured_step_s:.1f} | {est.step_time_s:.1f} | "
              f"{100 * (est.step_time_s / c.measured_step_s - 1):+.1f} % | {base:.1f} | "
              f"{z3:.1f} | {left:.1f} | {calls:.0f} | {1e3 * z3 / calls:.1f} | "
              f"{1e3 * left / calls:.1f} | {left / z3:.2f} |")
    print()
    variants = (("model", {}), ("persist", {"persist": PERSISTENCE_THRESHOLD}),
                ("ar-buckets", {"ar_buckets": True}),
                ("persist+ar", {"persist": PERSISTENCE_THRESHOLD, "ar_buckets": True}))
    later = ("defaults+prefetch", "host loop", "persist+post-step", "persist+post-step+host")
    print("| row | " + " | ".join(v for v, _ in variants) + " | persist+ar+prefetch | "
          + " | ".join(later[1:]) + " |")
    print("|---|" + "---:|" * (len(variants) + len(later)))
    errs: dict[str, list[float]] = {v: [] for v, _ in variants}
    errs.update({k: [] for k in later})
    for c, job, base in rows:
        cells = []
        for v, kw in variants:
            e = 100 * ((base + z3_traffic(job, **kw)[0]) / c.measured_step_s - 1)
            errs[v].append(e)
            cells.append(f"{e:+.1f} %")
        t = base + z3_traffic(job, PERSISTENCE_THRESHOLD, ar_buckets=True)[0] \
            - prefetch_hidden(job, base - estimate(job).breakdown_s["optimizer"])
        errs["defaults+prefetch"].append(100 * (t / c.measured_step_s - 1))
        t = base + z3_traffic(job)[0] + host_loop_time(job, job.framework.launch_gap_s)
        errs["host loop"].append(100 * (t / c.measured_step_s - 1))
        t = base + z3_traffic(job, PERSISTENCE_THRESHOLD)[0] + post_step_gather_time(job)
        errs["persist+post-step"].append(100 * (t / c.measured_step_s - 1))
        t += host_loop_time(job, job.framework.launch_gap_s, PERSISTENCE_THRESHOLD)
        errs["persist+post-step+host"].append(100 * (t / c.measured_step_s - 1))
        cells += [f"{errs[k][-1]:+.1f} %" for k in later]
        print(f"| {c.id} | " + " | ".join(cells) + " |")
    print("| MAPE (6 rows) | " + " | ".join(f"{mape(errs[v]):.1f} %" for v, _ in variants)
          + " | " + " | ".join(f"{mape(errs[k]):.1f} %" for k in later) + " |")
    print()
    print("| row | HBM passes s (in the model) | host loop s at the launch gap per iteration | "
          "post-step persistent gather s | persistent tensors |")
    print("|---|---:|---:|---:|---:|")
    for c, job, base in rows:
        z = param_counts.zero3_tensor_gathers(job.model, 1, 1, 1, True,
                                              job.framework.zero3_reuse_params)
        hbm = (per_tensor_passes("allgather") * 2.0 * (z["fwd_params"] + z["bwd_params"])
               + per_tensor_passes("reduce_scatter") * 2.0 * z["rs_params"]) / copy_rate(job)
        print(f"| {c.id} | {hbm:.2f} | {host_loop_time(job, job.framework.launch_gap_s):.2f} | "
              f"{post_step_gather_time(job):.2f} | {len(persistent_tensors(job.model))} |")
    sign = {v: "".join("+" if b > a else "-" for a, b in zip(errs["model"], errs[v]))
            for v, _ in variants[1:]}
    print()
    print("direction of each what-if per row (+ slower, - faster than the model): "
          + ", ".join(f"{v} {s}" for v, s in sign.items()))
    print()
    print("| row | left for ZeRO-3 s | wire bytes per GPU (TB) | rate-free s | demanded rate GB/s "
          "| model's rate GB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for c, job, base in rows:
        wire, fixed, rate = demanded_rate(job, c.measured_step_s - base)
        bw, _ = cm.group_bandwidth(job.cluster, job.plan.dp, 1)
        print(f"| {c.id} | {c.measured_step_s - base:.1f} | {wire / 1e12:.2f} | {fixed:.1f} | "
              f"{rate / 1e9:.1f} | {float(bw) / 1e9:.1f} |")
    print(f"calls per row: {np.round([z3_traffic(j)[1] for _, j, _ in rows]).astype(int)}; "
          f"with persist: "
          f"{np.round([z3_traffic(j, PERSISTENCE_THRESHOLD)[1] for _, j, _ in rows]).astype(int)}")


if __name__ == "__main__":
    main()
