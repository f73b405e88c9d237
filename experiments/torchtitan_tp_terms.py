#!/usr/bin/env python
"""torchtitan's tensor-parallel rows: the TP collectives its code runs against those the cost
model prices (docs/calibration.md §5.80).

    python experiments/torchtitan_tp_terms.py            # every torchtitan row with tp > 1
    python experiments/torchtitan_tp_terms.py --rows 8b  # rows whose id contains "8b"

Per row, one layer and one micro-batch: each collective of torchtitan's TP plan
(``models/llama3/infra/parallelize.py`` ``apply_tp`` at 2887250bb, the same plan at 9dec370:
``SequenceParallel`` norms, ``PrepareModuleInput`` ``Shard(1) -> Replicate`` before attention and
the feed-forward, ``ColwiseParallel`` wq/wk/wv/w1/w3, ``RowwiseParallel(output_layouts=Shard(1))``
wo/w2), by pass, with its bytes per GPU (``comm_bytes.tp_comm_bytes_fwd`` at the collective's
element size: torchao's float8 TP gathers fp8) and contention-free seconds
(``comm.collective_time``), and what the model prices: ``tp_per_layer_*`` all-reduce equivalents
(one all-gather + one reduce-scatter each), the layer's exposed TP seconds (``layer_comm_s``, with
async TP what its rule leaves exposed) and the sequence-dim layout copies
(``elementwise_time.tp_layout_copy_time``). Then per step the collectives outside the blocks (priced
since §5.84, ``cost.tp_ends``: the embedding's ``RowwiseParallel(output_layouts=Shard(1))``
reduce-scatter, the output projection's ``ColwiseParallel(input_layouts=Shard(1))`` all-gather, and
their backward pair), and the estimate's error. Reads the rows as ``paraplan validate`` does
(``simulator.studies.validate``).
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from simulator.studies.validate import load_cases  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost import comm_bytes, elementwise_time  # noqa: E402
from strategies.cost import quantise  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.estimate.analytic import estimate_arrays  # noqa: E402
from strategies.estimate.scalar import plan_arrays  # noqa: E402
from strategies.job import make_job  # noqa: E402

DATA = os.path.join("strategies", "reference", "data")
FILES = ("heldout_2026b.json", "published.json", "published_2026.json")


def _f(x) -> float:
    return float(np.ravel(x)[0])


def row_terms(case) -> dict:
    """The figures of one row (see the module docstring); seconds per layer and micro-batch
    unless named per step."""
    job = case.job
    m, cl, p, fw = job.model, job.cluster, job.plan, job.framework
    tp, b, cp = p.tp, p.mbs, p.cp
    r = estimate_arrays(m, cl, job.dtype, plan_arrays(p), fw)
    sc = r["stage_costs"]
    x = _f(comm_bytes.tp_comm_bytes_fwd(m, b, cp))                 # bf16 b·s·h/cp per GPU
    g = _f(quantise.tp_allgather_bytes_factor(job.dtype, p.sp))
    t_ag = _f(cm.collective_time("allgather", x * g, tp, 1, cl))
    t_ag16 = _f(cm.collective_time("allgather", x, tp, 1, cl))
    t_rs = _f(cm.collective_time("reduce_scatter", x, tp, 1, cl))
    t_ar = _f(cm.collective_time("allreduce", _f(sc.tp_bytes), tp, 1, cl))
    n_f, n_b, n_rc = _f(sc.tp_per_layer_fwd), _f(sc.tp_per_layer_bwd), \
        _f(sc.tp_per_layer_recompute)
    # the code: per pair, forward AG (fp8 under float8 TP) + RS (bf16); backward the output
    # gradient's AG (fp8: torchao casts it to e5m2 before) + the input gradient's RS (bf16);
    # recomputation: full AC the forward's pairs less the MLP's RS (the checkpoint stops
    # early: nothing saved reads it), op SAC its all-gathers (the RS outputs are saved)
    early = max(n_f - 1.0, 0.0) if fw.recompute_early_stop else 0.0
    n_ag_rc, n_rs_rc = {"full": (n_f, n_f - early), "op": (n_f, 0.0)}.get(p.recompute,
                                                                        (0.0, 0.0))
    code_s = (n_f + n_b + n_ag_rc) * t_ag + (n_f + n_b + n_rs_rc) * t_rs
    pairs = n_f
    y = elementwise_time.tp_layout_copy_time(m, b, tp, cp, p.sp, p.tp_comm_overlap, pairs, cl.gpu,
                                             job.dtype, fw, job.system)
    rc_copy = {"full": y[3], "op": y[2]}.get(p.recompute, 0.0)
    mb = p.gbs / (b * p.dp)
    lps = m.num_layers / p.pp
    est = estimate(job)
    return {
        "id": case.id, "fw": fw.name, "dtype": job.dtype, "tp": tp, "mbs": b, "rc": p.recompute,
        "async": bool(p.tp_comm_overlap), "MB": x / 1e6, "ag_elem": g,
        "code_colls": f"{2 * n_f:g}+{2 * n_b:g}+{n_ag_rc + n_rs_rc:g}",
        "priced_ar": f"{n_f:g}+{n_b:g}+{n_rc:g}",
        "code_ms": 1e3 * code_s, "priced_ms": 1e3 * (n_f + n_b + n_rc) * t_ar,
        "exposed_ms": 1e3 * _f(r["layer_comm_s"]),
        "copy_ms": 1e3 * _f(y[0] + y[1] + rc_copy),
        "outside_ms": 1e3 * mb * (t_rs + t_ag16 + t_ag16 + t_rs),   # per step (cost.tp_ends)
        "copies_step_s": lps * mb * _f(y[0] + y[1] + rc_copy),
        # the collectives priced beyond the code's, per step (before any overlap)
        "over_step_s": lps * mb * ((n_f + n_b + n_rc) * t_ar - code_s),
        "tp_step_s": est.breakdown_s["tp_comm"], "step_s": est.step_time_s,
        "meas_s": case.measured_step_s,
        "err": 100 * (est.step_time_s / case.measured_step_s - 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="", help="only rows whose id contains this")
    args = ap.parse_args(argv)
    print("per layer and micro-batch: code = the collectives torchtitan's plan runs (fwd + bwd "
          "+ recompute, AG and RS each), priced = all-reduce equivalents the model charges; "
          "ms contention-free; copies = sequence-dim layout copies (§5.80); outside = the "
          "embedding's and output's TP collectives per step (priced, §5.84)")
    head = (f"{'row':46s} {'stack':18s} {'dtype':11s} {'rc':4s} {'async':5s} {'MB':>7s} "
            f"{'AGel':>4s} {'code':>7s} {'priced':>7s} {'code ms':>8s} {'priced':>7s} "
            f"{'exposed':>7s} {'copies':>7s} {'outside':>7s} {'copies/step':>11s} "
            f"{'over/step':>9s} {'tp/step':>7s} {'est s':>8s} {'meas s':>8s} {'err':>7s}")
    print(head)
    for name in FILES:
        for c in load_cases(os.path.join(DATA, name), tiers=None):
            if "torchtitan" not in c.id or c.job is None or c.job.plan.tp == 1:
                continue
            if args.rows and args.rows not in c.id:
                continue
            t = row_terms(c)
            print(f"{t['id']:46s} {t['fw']:18s} {t['dtype']:11s} {t['rc']:4s} "
                  f"{str(t['async']):5s} {t['MB']:7.1f} {t['ag_elem']:4.2f} "
                  f"{t['code_colls']:>7s} {t['priced_ar']:>7s} {t['code_ms']:8.3f} "
                  f"{t['priced_ms']:7.3f} {t['exposed_ms']:7.3f} {t['copy_ms']:7.3f} "
                  f"{t['outside_ms']:7.2f} {t['copies_step_s']:11.3f} {t['over_step_s']:9.3f} "
                  f"{t['tp_step_s']:7.3f} "
                  f"{t['step_s']:8.3f} {t['meas_s']:8.3f} {t['err']:+6.1f}%")
            stated = " ".join(str(c.raw.get("plan", {}).get(k, "")) for k in ("techniques",))
            if "async" in stated.lower() and not c.job.plan.tp_comm_overlap:
                # a row that states async TP in its techniques, not as tp_comm_overlap
                job = c.job
                est = estimate(make_job(job.model, job.cluster,
                                        replace(job.plan, tp_comm_overlap=True),
                                        framework=job.framework, dtype=job.dtype,
                                        system=job.system)).step_time_s
                print(f"{'':46s} read with async TP ({stated!r}): est {est:.3f} s, "
                      f"{100 * (est / c.measured_step_s - 1):+.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
