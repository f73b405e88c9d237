#!/usr/bin/env python
"""The eager expert path's cost per local expert against the public measurements of it
(docs/calibration.md §5.181). Nothing is fitted; no cost of the model changes here.

Run (a few seconds; ``--whatif`` about half a minute, analytic only):

    python experiments/eager_host_sources.py            # Markdown tables on stdout
    python experiments/eager_host_sources.py --whatif   # + Table 4

Table 1: what Transformer Engine's unfused ``GroupedLinear`` (v2.9 / v2.14 / v2.16, the
25.11 / 26.04 / 26.06 containers') runs on the host and serialises on the GPU per MoE layer
and micro-batch with ``k`` local experts, as Megatron-Core's ``TEGroupedMLP`` calls it (fc1
and fc2; fused weight-gradient accumulation; no bias): the per-expert terms and the per-call
ones (``per_layer_counts``).

Table 2: the public measurements (``SOURCES``): what each timed, on which host and GPU, and
the figure per local expert it gives, where it gives one.

Table 3: the eager rows' extra time per local expert beyond their graphed twins
(``moe_graph_pairs.pair_rows``, the pairs with the same ep, micro-batch and precision)
beside each source's per-expert figure, and the Grace / x86 ratio the rows show beside the
host ratio the public host timings show.

Table 4 (``--whatif``): the model's own host rule (``moe_time.moe_host_time``, exposed
``max(0, host - GPU)``) with each expert GEMM charged TE PR #3134's excess of the multi-stream
cuBLASLt loop over one grouped launch (SM100, host not stated), on top of
``EXPERT_HOST_S``: MAPE of the MoE rows of the held-out files the eager path runs in. A
what-if, not a rule: the source states no host and times another recipe.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.moe_expert_launches import (GRACE_HOST_RATIO, LAUNCHES,  # noqa: E402
                                             TORCH_LINEAR_HOST_S, host_cpu)
from strategies.cost import moe_time  # noqa: E402

#: Compute streams of TE's multi-stream cuBLASLt GEMM (``common/util/multi_stream.cpp`` v2.14
#: L53 ``num_compute_streams = 4``; the same at v2.9 and v2.16)
STREAMS = 4
#: ``GroupedLinear`` modules of an MoE layer's experts (fc1, fc2)
MODULES = 2
#: ``general_grouped_gemm`` calls per module, (forward, backward): the forward GEMM; dgrad
#: and wgrad (``grouped_linear.py`` v2.14 L207, L411, L466-489), each one fork and join
GEMM_CALLS = (1, 2)
#: Per local expert and module, (forward, backward): cuBLASLt GEMMs, each with its own
#: layouts, descriptor, preference and heuristic query (``cublaslt_gemm.cu`` v2.14
#: L451-458, L746-786 inside the loop at L986-1011), one per call
GEMMS = GEMM_CALLS
#: Per local expert and module, MXFP8: per-split quantise launches on the main stream, each
#: creating one quantised tensor object (``cast.cpp`` v2.14 L1467 -> L316-364, the
#: unfused loop ``quantizer->quantize``; forward the input, backward the gradient)
QUANTISE = (1, 1)
#: Per local expert and module, the Python-level operations of ``_GroupedLinear`` (v2.14):
#: forward input and weight quantizer ``set_usage`` (L112-130), ``get_weight_workspace``
#: (L174), ``update_usage`` of the saved input (L243), ``prepare_for_saving`` of its input,
#: weight workspace and weight (L260), the ``main_grad`` closure (L283); backward the
#: ``main_grad`` call and assignment (L325, L335), the weight's ``update_usage`` (L410),
#: ``clear_tensor_data`` (L495), ``handle_custom_ddp_from_mcore`` (L497-522)
PY_OPS = (8, 5)
#: Per local expert and module in the backward, CUDA caching-allocator calls: v2.9's
#: ``handle_custom_ddp_from_mcore`` allocates a placeholder weight gradient per expert
#: (``torch.empty``, v2.9 L457); v2.14 / v2.16 return a cached one (``get_dummy_wgrad``)
ALLOCS_BWD = {"v2.9": 1, "v2.14": 0, "v2.16": 0}


def per_layer_counts(k: int, dtype: str = "mxfp8", tag: str = "v2.14") -> dict:
    """What one MoE layer and micro-batch with ``k`` local experts runs, as ``{name: (forward,
    backward)}``: ``gemms`` (cuBLASLt setups and launches), ``quantise`` (per-split launches,
    MXFP8 and block-scaled fp8 only), ``py_ops`` (per-expert Python operations), ``allocs``
    (per-expert allocations), ``cross_stream_waits`` (GPU-side waits between the main and the
    compute streams: per call one event fork to ``min(4, k)`` streams and a join back, not per
    expert), ``event_records``."""
    if k < 1:
        raise ValueError(f"k (local experts): {k!r} must be at least 1")
    if tag not in ALLOCS_BWD:
        raise ValueError(f"tag: {tag!r} is not one of {sorted(ALLOCS_BWD)}")
    if dtype not in LAUNCHES:
        raise ValueError(f"dtype: {dtype!r} has no launch count; expected one of "
                         f"{sorted(LAUNCHES)}")
    s = min(STREAMS, k)
    q = dtype in ("mxfp8", "fp8-blockwise")
    return {"gemms": tuple(MODULES * g * k for g in GEMMS),
            "quantise": tuple(MODULES * n * k * q for n in QUANTISE),
            "py_ops": tuple(MODULES * n * k for n in PY_OPS),
            "allocs": (0, MODULES * ALLOCS_BWD[tag] * k),
            "cross_stream_waits": tuple(MODULES * c * 2 * s for c in GEMM_CALLS),
            "event_records": tuple(MODULES * c * (1 + s) for c in GEMM_CALLS)}


#: (source, what it timed, host, GPU, seconds per local expert per MoE layer and micro-batch
#: or None where it gives none, applies to the rows' unfused path)
SOURCES = (
    ("TE #2897", "fused grouped MLP ops (TE PR #2769), 64 experts, hidden 128: host-bound "
     "forward ~1.2 ms, backward ~2.1 ms", "Grace (GB200)", "GB200",
     (1.2e-3 + 2.1e-3) / 64, "no: the fused op, already EXPERT_HOST_S"),
    ("TE #3134", "per-tensor NVFP4, 8 experts x 128 tokens, N = K = 2048, kernel only: "
     "multi-stream cuBLASLt loop 0.267 ms, one CUTLASS grouped launch 0.069 ms",
     "not stated", "SM100", MODULES * sum(GEMMS) * (0.267e-3 - 0.069e-3) / 8,
     "partly: the same loop, another recipe, no host"),
    ("TE #2053", "one PyTorch Linear forward (bf16, 2048, 8192 tokens), host time",
     "Xeon 8480C / Grace", "H100 / GB200", None, "no: a whole Python module, not a launch"),
    ("TE #2939", "Mixtral 8x7B bf16, 4 local experts: nsys expert region of one layer, "
     "GroupedLinear 966.614 us against a loop of F.linear 952.678 us", "not stated", "B300",
     (966.614e-6 - 952.678e-6) / 4, "bound: GroupedLinear over a per-expert loop"),
    ("TE #1499", "TE 1.13 TEGroupedLinear forward ~1 ms in nsys, gap to the GEMM kernel put "
     "on torch.split and 2 x num_gemms torch.empty", "not stated", "H800", None,
     "no: local experts not stated, TE 1.13 code since replaced"),
)


def source_rows() -> list[tuple]:
    """``SOURCES`` with the per-expert figure in µs (None kept)."""
    return [(n, w, h, g, None if s is None else 1e6 * s, a) for n, w, h, g, s, a in SOURCES]


def pair_extra() -> list[tuple[str, str, int, float]]:
    """``(eager id, host class, local experts, extra µs per local expert)`` of the graphed
    pairs with the same ep, micro-batch and precision (``moe_graph_pairs`` Table 2)."""
    from experiments.moe_graph_pairs import pair_rows
    out = []
    for r in pair_rows():
        if r["graph"] and r["same"]:
            extra = r["miss"][0] - r["miss"][2]
            out.append((r["eager"], host_cpu(r["gpu"]), r["local"], 1e3 * extra / r["local"]))
    return out


def grace_x86_ratio(rows: list[tuple[str, str, int, float]]) -> float:
    """Mean extra per local expert of the Grace rows over that of the x86 rows."""
    g = [r[3] for r in rows if r[1] == "grace"]
    x = [r[3] for r in rows if r[1] == "x86"]
    if not g or not x:
        raise ValueError("rows: need both a grace and an x86 row")
    return (sum(g) / len(g)) / (sum(x) / len(x))


@contextmanager
def _gemm_host(per_gemm_s: float):
    """``EXPERT_HOST_S`` plus ``per_gemm_s`` per expert GEMM of each pass inside the block."""
    kept = moe_time.EXPERT_HOST_S
    f, b = (MODULES * g * per_gemm_s for g in GEMMS)
    moe_time.EXPERT_HOST_S = (kept[0] + f, kept[1] + b)
    try:
        yield
    finally:
        moe_time.EXPERT_HOST_S = kept


WHATIF_FILES = ("megatron_bridge_2604.json", "heldout_2026b.json", "hybrid_2026.json",
                "published_2026.json")


def whatif_rows(per_gemm_s: float) -> list[tuple[str, str, float, float]]:
    """``(file, id, error %, error % under the what-if)`` of every MoE row of
    ``WHATIF_FILES`` that resolves."""
    from strategies.estimate import estimate
    from strategies.reference.cases import case_from_entry, load_reference
    out = []
    for f in WHATIF_FILES:
        for e in load_reference(os.path.join("strategies/reference/data", f)):
            case = case_from_entry(e)
            job = case.job
            if job is None or not job.model.is_moe or case.measured_step_s is None:
                continue
            m = case.measured_step_s
            base = estimate(job).step_time_s
            with _gemm_host(per_gemm_s):
                what = estimate(job).step_time_s
            out.append((f, e["id"], 100 * (base / m - 1), 100 * (what / m - 1)))
    return out


def main() -> None:
    print("| TE tag, precision, k local experts | cuBLASLt GEMMs | quantise launches | "
          "Python ops | allocations | cross-stream waits | event records |")
    print("|---|---|---|---|---|---|---|")
    for tag in ("v2.9", "v2.14", "v2.16"):
        for d in ("mxfp8", "bf16"):
            for k in (4, 16, 64):
                c = per_layer_counts(k, d, tag)
                cells = " | ".join(f"{a} + {b}" for a, b in c.values())
                print(f"| {tag} {d} k={k} | {cells} |")
    print()
    print("| source | what was timed | host | GPU | µs per local expert, MoE layer and "
          "micro-batch | the rows' path? |")
    print("|---|---|---|---|---|---|")
    for n, w, h, g, us, a in source_rows():
        print(f"| {n} | {w} | {h} | {g} | {'-' if us is None else f'{us:.1f}'} | {a} |")
    print()
    rows = pair_extra()
    print("| eager row (graphed twin: same ep, mbs, precision) | host | local experts | "
          "extra µs per local expert |")
    print("|---|---|---|---|")
    for rid, h, k, us in rows:
        print(f"| {rid} | {h} | {k} | {us:.0f} |")
    print(f"| Grace / x86, the rows | | | {grace_x86_ratio(rows):.2f} |")
    same = [r for r in rows if "qwen330ba3b_gb300" in r[0] or "qwen330ba3b_b300" in r[0]]
    print(f"| Grace / x86, Qwen3-30B-A3B GB300 / B300 (same chip) | | | "
          f"{grace_x86_ratio(same):.2f} |")
    print(f"| Grace / x86, a PyTorch Linear's host path (TE #2053) | | | "
          f"{GRACE_HOST_RATIO:.2f} |")
    x86 = 1e6 * TORCH_LINEAR_HOST_S["x86"] * sum(LAUNCHES["mxfp8"])
    print(f"| 10 MXFP8 launches at a whole x86 PyTorch Linear each (TE #2053) | x86 | | "
          f"{x86:.0f} |")
    if "--whatif" not in sys.argv[1:]:
        return
    per_gemm = (0.267e-3 - 0.069e-3) / 8
    res = whatif_rows(per_gemm)
    print()
    print(f"| file, MoE rows | MAPE as priced | MAPE, + {1e6 * per_gemm:.2f} µs host per "
          f"expert GEMM (TE #3134) | mean signed as priced -> what-if |")
    print("|---|---|---|---|")
    for f in WHATIF_FILES:
        r = [x for x in res if x[0] == f]
        if not r:
            continue
        a, b = (sum(abs(x[i]) for x in r) / len(r) for i in (2, 3))
        sa, sb = (sum(x[i] for x in r) / len(r) for i in (2, 3))
        print(f"| {f}, {len(r)} | {a:.2f} % | {b:.2f} % | {sa:+.2f} -> {sb:+.2f} % |")
    print()
    print("| MoE row | as priced | what-if |")
    print("|---|---|---|")
    for f, rid, a, b in res:
        print(f"| {rid} | {a:+.1f} % | {b:+.1f} % |")


if __name__ == "__main__":
    main()
