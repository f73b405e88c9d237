#!/usr/bin/env python
"""The FP8 speed-up against BF16 in twin rows: every pair of reference rows that are the same
job but for the precision, the measured bf16/quantised step ratio against the model's, and the
model's own decomposition of the saving (docs/calibration.md §5.184). Analytic only.

    python experiments/fp8_twins.py            # Markdown tables on stdout (about 15 s)

**How rows are paired** (``twin_key``): two rows of one reference file are twins when the
jobs the reader builds (``case_from_entry``) are equal once the fields the precision sets are
put to one value (``PRECISION_FIELDS``: the job's ``dtype``, the plan's ``fp8_attention`` and
the system's ``param_gather_bytes``, ``quantised_weights``, ``grad_buffer_bytes`` and
``quant_scope``) and their stacks are the same (``stack_of``: the source's ``ref`` and the
container, read from the source's ``also``/``software`` text or the row's ``release``, else the
release token the row id starts with). The job carries the model, the cluster (GPU type and
count), the plan and the framework profile (Transformer Engine release included), so every
other field must match. Within a key every two rows of different precisions pair, the base
the one earlier in ``ORDER`` (bf16 before every quantised precision); rows without a job or a
measured step are left out. ``LAUNCH_DIFFERS`` flags (†) pairs whose launch scripts differ in
something the job does not carry.

Table 1: per bf16 twin, the measured and the modelled step ratio ``bf16 / quantised``, their
quotient ``model / measured`` (above 1: the model credits the precision with more than it
saved), and the modelled saving in seconds split by step term (``breakdown_s``: compute, TP,
data-parallel, expert and pipeline communication, bubble, optimizer).

Table 2: per pair, the compute saving per layer and micro-batch of the mean layer (ms, forward
and backward), by the cost model's own term functions as ``layer_time`` calls them while
``stage_costs`` runs (``recording``): the GEMMs saved, the casts (``cast_time``: quantise,
transpose and amax passes), the per-expert quantise launches, the expert padding copies, the
permutation bytes, the attention core (FP8 attention) and the amax all-reduces; the remainder
of the compute term per layer-micro-batch is "other"; the mean layer's GFLOP per GEMM.

Table 3: the quotient grouped by GPU family, precision, dense/MoE and stack; and per GPU
family, the NeMo pairs by dense/MoE.

Table 4: the MoE twins' gap (the modelled saving less the measured one, ms per layer and
micro-batch) against the model's GEMM saving by part (``gemm_by_part``).

Table 5: the twins of two quantised precisions.

Table 6: the repository's one Hopper measurement of both precisions per GEMM shape (the H200
profile ``moe_fp8_twin.gemm_pairs`` reads, every size): the measured fp8/bf16 time against the
model's, geometric means by size, and the profile's points nearest Grok-1's expert GEMMs
(``GROK_EXPERT_GEMMS``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from experiments.blackwell_dense_rows import table  # noqa: E402
from experiments.calibration_ablation import cost_holders, patched  # noqa: E402
from experiments.fp8_rows import family  # noqa: E402
from strategies.cost import amax, gemm_shapes, gemm_time, layer_time  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference, run_file_names  # noqa: E402
from topologies.precision import get_precision  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "strategies", "reference",
                    "data")
#: the job's fields the precision sets (object path -> field names), put to one value to pair
PRECISION_FIELDS = {"": ("dtype",), "plan": ("fp8_attention",),
                    "system": ("param_gather_bytes", "quantised_weights", "grad_buffer_bytes",
                               "quant_scope")}
#: a container image named in a source's text (``nvcr.io/nvidia/nemo:25.04.00``)
IMAGE = re.compile(r"[\w.-]+(?:/[\w.-]+)+:[\w.-]+")
#: the release token a row id starts with (``dgxc2505_``, ``mbridge260401_``,
#: ``torchtitan_2506_``)
ID_RELEASE = re.compile(r"^[a-z_]*?\d{4,6}(?=_)")
#: the layer terms recorded: function name -> the label of Table 2; each returns (forward,
#: backward) seconds of the mean layer, ``units_time_fwd`` the forward alone and
#: ``units_time_bwd`` (all, weight-gradient) of which the first is read; ``layer_time`` itself
#: is recorded for its ``slow`` (the overlap clock factor its GEMMs take)
TERMS = (("layer_time", None), ("units_time_fwd", "GEMM"), ("units_time_bwd", "GEMM"),
         ("cast_time", "casts"), ("expert_quantise_time", "quantise launches"), ("expert_pad_time", "expert padding"),
         ("moe_permute_time", "permute"), ("attention_time_fwd", "attention"),
         ("amax_reduction_time", "amax all-reduce"))
LABELS = ("GEMM", "casts", "quantise launches", "expert padding", "permute", "attention",
          "amax all-reduce")
#: precisions from the most bits to the fewest; a pair's base is the earlier
ORDER = ("bf16", "fp8", "fp8-delayed", "fp8-current", "fp8-blockwise", "fp8-rowwise", "mxfp8",
         "nvfp4")
#: pairs the reader's jobs make twins but whose launch scripts differ in something the job
#: does not carry (quantised row id -> what differs, with its source)
LAUNCH_DIFFERS = {
    "dgxc2505_llama4_400b_h100_512_fp8":
        "fp8 only runs per-layer CUDA graphs: NVIDIA/dgxc-benchmarking v25.05.05 "
        "llama4/launch.sh, h100 branch: CUDA_GRAPH true if DTYPE is fp8, else false",
}
#: Grok-1's expert GEMMs (M, N, K) on the H100 rows: fc1 and fc2 at etp 4 (NeMo 24.12) and 1
#: (NeMo 25.04), forward shapes (``gemm_shapes.layer_gemm_parts``)
GROK_EXPERT_GEMMS = ((8192, 16384, 6144), (8192, 6144, 8192), (2048, 65536, 6144),
                     (2048, 6144, 32768))
#: FLOP bins of Table 6
GEMM_BINS = ((0.0, 1e11), (1e11, 1e12), (1e12, 4e12), (4e12, 1e14))
STEP_TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm",
              "bubble", "optimizer")


def twin_key(job) -> str:
    """The job with the fields the precision sets (``PRECISION_FIELDS``) put to one value, as
    text: equal for two rows that differ only in precision."""
    plan = dataclasses.replace(job.plan, fp8_attention=False)
    system = dataclasses.replace(job.system, **{f: 0.0 for f in PRECISION_FIELDS["system"]})
    return repr(dataclasses.replace(job, dtype="", plan=plan, system=system))


def stack_of(entry: dict) -> str:
    """The stack a reference row ran: its source's ``ref`` and container image (read from the
    source's ``also``/``software`` text or the row's ``release``), else the release token its
    id starts with."""
    src = entry.get("source") or {}
    text = " ".join(str(src.get(k, "")) for k in ("also", "software")) \
        + " " + json.dumps(entry.get("release", ""))
    m = IMAGE.search(text)
    rel = m.group(0) if m else (ID_RELEASE.match(entry["id"]) or [""])[0]
    return f"{src.get('ref', '')} | {rel}"


def pairs_of(rows: list[dict], cases: list) -> list[tuple]:
    """``(base case, other case)`` of every twin among ``cases`` (built from ``rows``, in the
    same order): same ``twin_key`` and ``stack_of``, different precisions, the base the one
    earlier in ``ORDER`` (bf16 before every quantised precision); sorted by the other row's,
    then the base row's place in ``cases``."""
    groups = defaultdict(list)
    for r, c in zip(rows, cases):
        if c.job is None or not c.measured_step_s:
            continue
        groups[(stack_of(r), twin_key(c.job))].append(c)
    rank = {d: i for i, d in enumerate(ORDER)}
    out = [(x, y) for g in groups.values() for x in g for y in g
           if rank.get(x.job.dtype, len(ORDER)) < rank.get(y.job.dtype, len(ORDER))]
    order = {c.id: i for i, c in enumerate(cases)}
    return sorted(out, key=lambda p: (order[p[1].id], order[p[0].id]))


def file_pairs(name: str) -> list[tuple]:
    """``pairs_of`` one reference file (a name in ``DATA``)."""
    rows = load_reference(os.path.join(DATA, name))
    return pairs_of(rows, [case_from_entry(r, rows) for r in rows])


def all_pairs() -> list[tuple[str, object, object]]:
    """``(file, base case, other case)`` over every reference file (the schedule studies left
    out, as ``reference_mape``)."""
    return [(n, b, q) for n in run_file_names(DATA) for b, q in file_pairs(n)]


def _s(x) -> float:
    return float(np.asarray(x, dtype=float).ravel()[0])


@contextlib.contextmanager
def recording():
    """Wrap ``TERMS`` (and ``gemm_shapes.layer_gemm_parts``) in every cost module that holds
    them, and keep what each returns inside the first ``layer_time`` call of ``stage_costs``
    (the mean layer's), with ``units_time_fwd``'s arguments (``gemm_args``: the GEMMs' counts
    and priced units) and ``layer_time``'s ``slow``; the amax all-reduces, priced outside
    ``layer_time``, their first value. Restored on exit."""
    seen: dict[str, object] = {}
    state = {"depth": 0, "done": False}
    names = [n for n, _ in TERMS] + ["layer_gemm_parts"]
    home = {"amax_reduction_time": amax, "layer_gemm_parts": gemm_shapes}
    held = [(m, n, getattr(m, n)) for n in names
            for m in cost_holders(home.get(n, layer_time), n)]

    def wrap(name, f):
        def g(*a, **k):
            first = name == "layer_time" and not state["done"]
            if first:
                state["depth"] += 1
            try:
                r = f(*a, **k)
            finally:
                if first:
                    state["depth"] -= 1
                    state["done"] = True
            if first:
                seen["layer_time"] = r
                seen["slow"] = _s(k.get("slow", 1.0))
            elif name == "amax_reduction_time" or state["depth"]:
                seen.setdefault(name, r)
                if name == "units_time_fwd":
                    seen.setdefault("gemm_args", a)
            return r
        return g
    with contextlib.ExitStack() as stack:
        for m, n, f in held:
            stack.enter_context(patched(m, n, wrap(n, f)))
        yield seen


def layer_record(job) -> dict:
    """``recording``'s record of ``job``'s ``stage_costs``."""
    with recording() as r:
        stage_costs(job)
    return r


def layer_terms(job, r: dict | None = None) -> dict[str, float]:
    """Seconds of one mean layer and micro-batch (forward + backward) of each ``LABELS`` term
    as the cost model prices ``job`` (GEMMs with the overlap clock factor ``layer_time``
    gives them); ``r``: ``layer_record(job)`` if already made."""
    r = layer_record(job) if r is None else r
    out = dict.fromkeys(LABELS, 0.0)
    for name, label in TERMS:
        v = r.get(name)
        if v is None or label is None:
            continue
        if name.startswith("units_time"):
            out[label] += _s(v if name == "units_time_fwd" else v[0]) * r["slow"]
        else:
            out[label] += sum(_s(x) for x in v)
    return out


def gemm_by_part(r: dict) -> dict[str, float]:
    """Seconds of the mean layer's GEMMs (forward + backward, with ``slow``) by the part
    ``gemm_shapes.layer_gemm_parts`` names (attn, dense_mlp, routed_mlp, shared_mlp, ...),
    from ``layer_record``'s ``gemm_args``; they sum to ``layer_terms``' GEMM."""
    counts, units = r["gemm_args"]
    out: dict[str, float] = defaultdict(float)
    for (part, _), c, u in zip(r["layer_gemm_parts"], counts, units):
        out[part] += r["slow"] * (_s(gemm_time.units_time_fwd([c], [u]))
                                  + _s(gemm_time.units_time_bwd([c], [u])[0]))
    return dict(out)


def mean_gemm_flops(r: dict) -> float:
    """FLOPs per forward GEMM of the mean layer in ``layer_record``'s ``r``, weighted by the
    GEMMs' counts (2·M·N·K each)."""
    parts = [g for _, g in r["layer_gemm_parts"]]
    return sum(_s(g[0]) * 2.0 * _s(g[1]) * _s(g[2]) * _s(g[3]) for g in parts) \
        / sum(_s(g[0]) for g in parts)


def layer_microbatches(job) -> float:
    """Layer-micro-batches of the busiest rank's compute: layers per pipeline stage times the
    micro-batches of the step."""
    P = job.plan
    return job.model.num_layers / P.pp * P.gbs / (P.mbs * P.dp)


def pair_record(name: str, b, q) -> dict:
    """The tables' figures of one pair (``b`` the base row, ``q`` the other): measured and
    estimated steps, their ratios and quotient, the estimate's saving by step term
    (``d_step``, s), the mean layer's compute saving by term (``d_layer``, ms per layer and
    micro-batch, "other" the rest of the compute term) and its GEMM saving by part
    (``d_gemm``, ms)."""
    eb, eq = estimate(b.job), estimate(q.job)
    rb, rq = layer_record(b.job), layer_record(q.job)
    tb, tq = layer_terms(b.job, rb), layer_terms(q.job, rq)
    gb, gq = gemm_by_part(rb), gemm_by_part(rq)
    n = layer_microbatches(q.job)
    d_step = {k: eb.breakdown_s.get(k, 0.0) - eq.breakdown_s.get(k, 0.0) for k in STEP_TERMS}
    d_layer = {k: 1e3 * (tb[k] - tq[k]) for k in LABELS}
    d_layer["other"] = 1e3 * (d_step["compute"] + d_step["recompute"]) / n \
        - sum(d_layer.values())
    m_ratio = b.measured_step_s / q.measured_step_s
    e_ratio = eb.step_time_s / eq.step_time_s
    return {"file": name[:-5], "bf16": b.id, "q": q.id, "gpu": family(q.job.cluster.gpu.name),
            "base": b.job.dtype, "dtype": q.job.dtype,
            "moe": "MoE" if q.job.model.is_moe else "dense",
            "stack": q.job.framework.name, "meas": (b.measured_step_s, q.measured_step_s),
            "est": (eb.step_time_s, eq.step_time_s), "m_ratio": m_ratio, "e_ratio": e_ratio,
            "quot": e_ratio / m_ratio, "d_step": d_step, "d_layer": d_layer, "n": n,
            "d_gemm": {k: 1e3 * (gb.get(k, 0.0) - gq.get(k, 0.0)) for k in {*gb, *gq}},
            "gap": 1e3 * ((eb.step_time_s - eq.step_time_s)
                          - (b.measured_step_s - q.measured_step_s)) / n,
            "note": LAUNCH_DIFFERS.get(q.id, ""), "gemm_gflop": mean_gemm_flops(rq) / 1e9,
            "err": (100 * (eb.step_time_s / b.measured_step_s - 1),
                    100 * (eq.step_time_s / q.measured_step_s - 1))}


def group_table(recs: list[dict], key: str) -> list[list[str]]:
    """Table 3's rows for one grouping: pairs, mean measured and modelled ratio, mean and
    range of the quotient."""
    g = defaultdict(list)
    for r in recs:
        g[r[key]].append(r)
    out = []
    for k in sorted(g):
        v = g[k]
        qs = [r["quot"] for r in v]
        out.append([str(k), str(len(v)), f"{np.mean([r['m_ratio'] for r in v]):.3f}",
                    f"{np.mean([r['e_ratio'] for r in v]):.3f}", f"{np.mean(qs):.3f}",
                    f"{min(qs):.3f}-{max(qs):.3f}"])
    return out


def gemm_rate_tables() -> None:
    """Table 6 (``gemm_pairs`` of the H200 profile at every size)."""
    from experiments.moe_fp8_twin import gemm_pairs
    pts = gemm_pairs(max_flops=1e16, max_side=10 ** 6)
    gm = lambda xs: float(np.exp(np.mean(np.log(xs))))  # noqa: E731
    rows = []
    for lo, hi in GEMM_BINS:
        v = [p for p in pts if lo <= p[0] < hi]
        if v:
            rows.append([f"{lo:.0e}-{hi:.0e}", str(len(v)), f"{gm([p[4] for p in v]):.3f}",
                         f"{gm([p[5] for p in v]):.3f}", f"{gm([p[4] / p[5] for p in v]):.3f}"])
    table("Table 6: H200 profile, fp8/bf16 GEMM time by size (geometric means)",
          ["FLOPs", "shapes", "measured", "model", "measured / model"], rows)
    near = []
    for t in GROK_EXPERT_GEMMS:
        p = min(pts, key=lambda p: sum(abs(np.log(a / b)) for a, b in zip(p[1:4], t)))
        near.append([str(t), str(p[1:4]), f"{p[4]:.3f}", f"{p[5]:.3f}", f"{p[4] / p[5]:.3f}"])
    table("Table 6b: the profile's points nearest Grok-1's expert GEMMs",
          ["expert GEMM (M, N, K)", "nearest point", "measured fp8/bf16", "model",
           "measured / model"], near)


def _row1(r: dict) -> list[str]:
    d = r["d_step"]
    return [r["file"], r["q"] + (" †" if r["note"] else ""), r["bf16"], r["gpu"], r["dtype"],
            r["moe"], f"{r['meas'][0]:.3f} / {r['meas'][1]:.3f}",
            f"{r['est'][0]:.3f} / {r['est'][1]:.3f}",
            f"{r['err'][0]:+.1f} / {r['err'][1]:+.1f} %", f"{r['m_ratio']:.3f}",
            f"{r['e_ratio']:.3f}", f"{r['quot']:.3f}",
            f"{d['compute'] + d['recompute']:.3f}", f"{d['tp_comm']:.3f}",
            f"{d['dp_comm']:.3f}", f"{d['ep_comm']:.3f}", f"{d['pp_comm'] + d['bubble']:.3f}",
            f"{d['cp_comm'] + d['optimizer']:.3f}"]


HEAD1 = ["file", "row", "base row", "gpu", "dtype", "kind", "measured s", "est s",
         "err base / row", "meas ratio", "model ratio", "quotient", "Δ compute", "Δ tp",
         "Δ dp", "Δ ep", "Δ pp+bubble", "Δ other"]
GROUP_HEAD = ["pairs", "meas ratio", "model ratio", "quotient", "quotient range"]


def main() -> None:
    recs = [pair_record(n, b, q) for n, b, q in all_pairs()]
    bf = [r for r in recs if r["base"] == "bf16"]
    table("Table 1: bf16 twins (ratio = bf16 step / quantised step; quotient = model / "
          "measured, above 1 the model credits the precision with more than it saved; Δ: the "
          "estimate's saving, s, by step term; † the launch scripts differ, see the notes)",
          HEAD1, [_row1(r) for r in bf], left=6)
    table("Table 2: the modelled compute saving per mean layer and micro-batch, ms (bf16 − "
          "quantised; negative: the quantised run pays more), and the measured step saving "
          "over the same layer-micro-batches",
          ["row", "gpu", "dtype", "layer-mb", "GFLOP per GEMM", *LABELS, "other",
           "meas saving"], [
        [r["q"], r["gpu"], r["dtype"], f"{r['n']:.0f}", f"{r['gemm_gflop']:.0f}",
         *[f"{r['d_layer'][k]:+.3f}" for k in (*LABELS, "other")],
         f"{1e3 * (r['meas'][0] - r['meas'][1]) / r['n']:+.3f}"] for r in bf], left=3)
    for key, title in (("gpu", "GPU family"), ("dtype", "precision"), ("moe", "dense / MoE"),
                       ("stack", "stack")):
        table(f"Table 3: bf16 twins by {title}", [title, *GROUP_HEAD], group_table(bf, key))
    for fam in ("H100", "GB200"):
        sub = [r for r in bf if r["gpu"] == fam]
        table(f"Table 3 ({fam}, NeMo only): by dense / MoE", ["kind", *GROUP_HEAD],
              group_table([r for r in sub if r["stack"] == "nemo"], "moe"))
    moe = [r for r in bf if r["moe"] == "MoE"]
    table("Table 4: the MoE twins' gap (ms per layer and micro-batch: the modelled saving "
          "less the measured one) against the model's GEMM saving by part",
          ["row", "gpu", "meas ratio", "model ratio", "gap", "GEMM: attn", "dense_mlp",
           "routed_mlp", "shared_mlp", "casts+pad+amax", "gap / routed"], [
        [r["q"], r["gpu"], f"{r['m_ratio']:.3f}", f"{r['e_ratio']:.3f}", f"{r['gap']:+.3f}",
         *[f"{r['d_gemm'].get(k, 0.0):+.3f}" for k in ("attn", "dense_mlp", "routed_mlp",
                                                       "shared_mlp")],
         f"{sum(r['d_layer'][k] for k in LABELS[1:]):+.3f}",
         f"{r['gap'] / r['d_gemm']['routed_mlp']:.2f}"] for r in moe], left=2)
    table("Table 5: twins between two quantised precisions (ratio = base step / row step)",
          HEAD1, [_row1(r) for r in recs if r["base"] != "bf16"], left=6)
    gemm_rate_tables()
    print("\nNotes (†):")
    for r in recs:
        if r["note"]:
            print(f"- {r['q']}: {r['note']}")


if __name__ == "__main__":
    main()
