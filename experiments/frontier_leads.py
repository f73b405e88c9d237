"""The frontier-scale papers' runs (``strategies/reference/data/frontier_papers.json``): the
figures behind docs/calibration.md §5.16 (an analysis; the model is not changed).

Four tables, all analytic (``strategies.estimate.scalar.estimate``):

1. ``assumptions``: each row's error under the assumptions its source leaves open, one
   changed at a time (stack profile, recomputation, FlashAttention, TP overlap, ZeRO stage,
   chunks per rank), so the filed choice can be read against the others.
2. ``per-microbatch``: a strong-scaling series at a fixed model and pipeline is ``step = a +
   b·M`` (``M`` micro-batches per pipeline, ``b`` a micro-batch's time through the busiest
   stage, ``a`` what is paid once per step: the pipeline's fill and drain, the exposed
   data-parallel reduction, the optimizer); the least-squares ``a``, ``b`` of the measured and
   of the estimated steps say which of the two the model misses.
3. ``cp-allgather``: Llama 3's context parallelism gathers K and V before attention and
   reduce-scatters their gradients after it, exposed (Dubey et al. 2024 §3.3.2); the model
   runs Transformer Engine's overlapped ring. The upper bound of what exposing it costs:
   ``M · layer slots per rank · (t_allgather + t_reduce_scatter)`` of the K,V buffer of one
   layer and micro-batch (``comm.collective_time`` over the ``cp`` ranks ``tp`` apart).
4. ``convention``: the Llama rows' measured step under the FLOP count the paper cites (PaLM's
   ``6N + 12LHQT``, the attention square in full, as torchtitan's ``get_num_flop_per_token``
   counts) and under the causal count (``flop_counts.training_flops_per_token(causal=True)``).
5. ``memory``: the estimated peak of each Llama row (Meta trained 8K without recomputation).
6. ``Table 3``: what each of MegaScale's optimizations saved per step at 256 GPUs and batch
   256 (the step at each MFU, from the baseline row's measured step).

Run:
    python experiments/frontier_leads.py
"""
from __future__ import annotations

import copy
import os
import sys
from dataclasses import replace
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import comm as cm                                      # noqa: E402
from strategies.cost.flop_counts import training_flops_per_token  # noqa: E402
from strategies.estimate.scalar import estimate                             # noqa: E402
from strategies.job import Job, make_job                                    # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference      # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategies",
                    "reference", "data", "frontier_papers.json")


def _rows(prefix: str, rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["id"].startswith(prefix)]


def _job(entry: dict, siblings: list[dict], change: Callable[[dict], Any] = lambda c: None,
         job_change: Callable[[Job], Job] | None = None) -> tuple[Job, float]:
    """The job of a copy of ``entry`` with ``change`` applied (then ``job_change``), and its
    measured step."""
    c = copy.deepcopy(entry)
    change(c)
    case = case_from_entry(c, siblings)
    return (job_change(case.job) if job_change else case.job), case.measured_step_s


def errors(rows: list[dict], change: Callable[[dict], Any], siblings: list[dict],
           job_change: Callable[[Job], Job] | None = None) -> list[float]:
    """Analytic error (%) of each row with ``change`` applied to a copy of its entry."""
    out = []
    for r in rows:
        job, measured = _job(r, siblings, change, job_change)
        out.append(100.0 * (estimate(job).step_time_s / measured - 1.0))
    return out


def with_flash(job: Job) -> Job:
    """What-if: the job's stack running FlashAttention-2's rate (``megatron-lm-2021`` cannot:
    the FA1-class kernel its 2023 commit added is not in the catalog, §3.8)."""
    fw = replace(job.framework, flash_attn=True, attention_kernel="fa2")
    return make_job(job.model, job.cluster, replace(job.plan, flash_attn=True), dtype=job.dtype,
                    framework=fw, system=job.system)


def _plan(**kw: Any) -> Callable[[dict], None]:
    return lambda c: c["plan"].update(kw)


def _framework(name: str, **kw: Any) -> Callable[[dict], None]:
    def f(c: dict) -> None:
        c["framework"] = name
        c["plan"].update(kw)
    return f


#: (label, change) per series; the first is the file as filed
MEGASCALE_VARIANTS = [
    ("as filed: megatron-lm-2021, selective, no flash, no overlap", lambda c: None),
    ("full recompute", _plan(recompute="full")),
    ("megatron-core (Transformer Engine kernels), overlaps off", _framework("megatron-core")),
    ("megatron-core with its default overlaps", lambda c: (
        c.update(framework="megatron-core"),
        [c["plan"].pop(k) for k in ("tp_comm_overlap", "overlap_grad_reduce",
                                    "overlap_param_gather")]))]
LLAMA_VARIANTS = [
    ("as filed: megatron-core defaults, zero 2, vpp 8", lambda c: None),
    ("tp_comm_overlap off", _plan(tp_comm_overlap=False)),
    ("zero 1 (gradients reduced once per step)", _plan(zero_stage=1)),
    ("vpp 4", _plan(virtual_stages=4)),
    ("vpp 2", _plan(virtual_stages=2)),
    ("torchtitan profile (eager kernels)", _framework("torchtitan"))]


#: MegaScale Table 3, the MFU after each optimization in turn (its rows 2-9)
TABLE3 = [("parallel transformer block", 0.523), ("sliding window attention", 0.533),
          ("TP overlap", 0.555), ("PP overlap", 0.580), ("DP overlap", 0.595),
          ("efficient operators", 0.612), ("misc (data pipeline, code)", 0.623)]
#: (row 9, LAMB at 3x the batch, is another job: no per-step saving to read)


def assumptions(rows: list[dict]) -> list[tuple[str, str, list[float]]]:
    out = []
    for series, variants in (("megascale_", MEGASCALE_VARIANTS), ("llama3_", LLAMA_VARIANTS)):
        for label, change in variants:
            out.append((series, label, errors(_rows(series, rows), change, rows)))
    out.append(("megascale_", "what-if: as filed with FlashAttention-2's rate",
                errors(_rows("megascale_", rows), lambda c: None, rows, with_flash)))
    return out


def per_microbatch(rows: list[dict], series: list[str],
                   job_change: Callable[[Job], Job] | None = None) -> dict[str, Any]:
    """Least-squares ``step = a + b·M`` of the measured and of the estimated steps of
    ``series`` (row ids): ``(a_meas, b_meas, a_est, b_est)``, with each estimate's bubble and
    exposed data-parallel seconds."""
    M, meas, est, parts = [], [], [], []
    for rid in series:
        job, measured = _job(next(r for r in rows if r["id"] == rid), rows,
                             job_change=job_change)
        e = estimate(job)
        M.append(job.num_microbatches)
        meas.append(measured)
        est.append(e.step_time_s)
        parts.append((e.breakdown_s["bubble"], e.breakdown_s["dp_comm"]))
    bm, am = np.polyfit(M, meas, 1)
    be, ae = np.polyfit(M, est, 1)
    return {"M": tuple(M), "fit": (float(am), float(bm), float(ae), float(be)), "parts": parts}


def cp_allgather(rows: list[dict], rid: str = "llama3_405b_16384gpu_seq128k") -> dict[str, float]:
    """Exposed seconds per step of an all-gather context parallelism (K,V gathered in the
    forward, their gradients reduce-scattered in the backward) and the error with it added."""
    case = case_from_entry(next(r for r in rows if r["id"] == rid), rows)
    j = case.job
    m, p = j.model, j.plan
    kv = max(1, m.num_query_groups // p.tp) * m.head_dim * m.seq_length * 2 * 2   # K,V bf16
    t_ag = float(cm.collective_time("allgather", kv, p.cp, p.tp, j.cluster))
    t_rs = float(cm.collective_time("reduce_scatter", kv, p.cp, p.tp, j.cluster))
    slots = (m.num_layers + p.account_embedding + p.account_loss) / p.pp
    exposed = j.num_microbatches * slots * (t_ag + t_rs)
    # from the overlapped ring (the row states the all-gather since §5.62: priced from it)
    ring = make_job(m, j.cluster, p, dtype=j.dtype, system=j.system,
                    framework=replace(j.framework, cp_impl="ring"))
    step = estimate(ring).step_time_s
    return {"kv_bytes": kv, "t_ag": t_ag, "t_rs": t_rs, "exposed": exposed, "step": step,
            "err": 100 * (step / case.measured_step_s - 1),
            "err_with": 100 * ((step + exposed) / case.measured_step_s - 1)}


def convention(rows: list[dict]) -> list[tuple[str, float, float, float, float]]:
    """Per Llama row: (id, causal/full FLOP ratio, measured step under each count, analytic)."""
    out = []
    for r in _rows("llama3_", rows):
        case = case_from_entry(r, rows)
        m = case.job.model
        ratio = training_flops_per_token(m, causal=True) / training_flops_per_token(m, causal=False)
        out.append((r["id"], ratio, case.measured_step_s, case.measured_step_s * ratio,
                    estimate(case.job).step_time_s))
    return out


def main() -> int:
    rows = load_reference(DATA)
    print("1. Analytic error (%) per row under each open assumption")
    for series, label, errs in assumptions(rows):
        ids = [r["id"].split("_", 1)[1] for r in _rows(series, rows)]
        print(f"  {series:11s} {label:58s} MAPE {np.mean(np.abs(errs)):5.1f}  "
              + " ".join(f"{i}:{e:+.1f}" for i, e in zip(ids, errs)))
    print("\n2. step = a + b·M (least squares): a (s, once per step), b (s per micro-batch)")
    groups = {"MegaScale 175B, batch 768 (256-1024 GPUs)": [
                  f"megascale_megatron_175b_{n}gpu_gbs768" for n in (256, 512, 768, 1024)],
              "MegaScale 175B, batch 6144 (3072-12288 GPUs)": [
                  f"megascale_megatron_175b_{n}gpu_gbs6144" for n in (3072, 6144, 8192, 12288)],
              "MegaScale 175B on 256 GPUs, dp 4 (Table 3 batch 256, Table 2 batch 768)": [
                  "megascale_megatron_175b_256gpu_gbs256_table3",
                  "megascale_megatron_175b_256gpu_gbs768"],
              "Llama 3 405B 8K, 8192 and 16384 GPUs": [
                  "llama3_405b_8192gpu_seq8k", "llama3_405b_16384gpu_seq8k"]}
    for name, ids in groups.items():
        for how, change in (("", None), (" [what-if: FlashAttention-2]", with_flash)):
            if change and "MegaScale" not in name:
                continue
            f = per_microbatch(rows, ids, change)
            am, bm, ae, be = f["fit"]
            print(f"  {name}{how}: M={f['M']}  measured a={am:.3f} b={bm:.4f}  "
                  f"analytic a={ae:.3f} b={be:.4f}; analytic (bubble, exposed DP) s: "
                  + ", ".join(f"({b:.3f}, {d:.3f})" for b, d in f["parts"]))
    c = cp_allgather(rows)
    print(f"\n3. All-gather CP on the 128K row: K,V {c['kv_bytes'] / 1e6:.1f} MB per layer and "
          f"micro-batch; all-gather {c['t_ag'] * 1e3:.2f} ms, reduce-scatter "
          f"{c['t_rs'] * 1e3:.2f} ms; {c['exposed']:.3f} s exposed per step; error "
          f"{c['err']:+.1f} % -> {c['err_with']:+.1f} %")
    print("\n4. FLOP convention (measured step from TFLOP/s per GPU)")
    for rid, ratio, full, causal, est in convention(rows):
        print(f"  {rid}: causal/full {ratio:.4f}; measured {full:.3f} s (square in full) or "
              f"{causal:.3f} s (causal); analytic {est:.3f} s: {100 * (est / full - 1):+.1f} % or "
              f"{100 * (est / causal - 1):+.1f} %")
    print("\n5. Estimated peak memory of the Llama rows")
    for r in _rows("llama3_", rows):
        job = case_from_entry(r, rows).job
        e = estimate(job)
        print(f"  {r['id']}: {e.memory.total / 2 ** 30:.1f} GiB of "
              f"{job.cluster.min_hbm_bytes / 2 ** 30:.1f} GiB, fits {e.fits}")
    print("\n6. MegaScale Table 3 (175B, 256 GPUs, batch 256): each step's saving, the step "
          "taken as the baseline row's measured step x 47.7 % / MFU")
    base = case_from_entry(next(r for r in rows if r["id"] ==
                                "megascale_megatron_175b_256gpu_gbs256_table3"), rows)
    prev = 0.477
    for label, mfu in TABLE3:
        saved = base.measured_step_s * 0.477 * (1 / prev - 1 / mfu)
        print(f"  {label:28s} MFU {100 * prev:.1f} -> {100 * mfu:.1f} %: {saved:.3f} s")
        prev = mfu
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
