#!/usr/bin/env python
"""What Transformer Engine's ``GroupedLinear`` launches per local expert, and what host time
per launch the published Megatron-Bridge MoE rows would need if their per-expert miss were
host time (docs/calibration.md §5.29). Nothing is fitted; no cost of the model changes.

Run (about 15 s, analytic only):

    python experiments/moe_expert_launches.py      # Markdown tables on stdout

Table 1: launches per local expert, per MoE layer and micro-batch (forward + backward of
fc1 and fc2), by precision, counted in the source the rows ran (``LAUNCHES``).
Table 2: every MoE row with at least ``MIN_LOCAL`` local experts: its host CPU class, the
time the measured step implies per MoE layer and micro-batch (as ``moe_expert_floor``), the
launches of its expert path, and the host time per launch that the implied time (if the whole
layer were host-bound) and the missed time (if the miss were host time added per launch)
would take, beside the public host time of a whole PyTorch ``Linear`` forward on the same
class of CPU (``TORCH_LINEAR_HOST_S``).
Table 3: pairs of rows that differ only in the host CPU (same model, container, precision,
layout, micro-batch and dispatcher; x86 DGX against Grace): the miss per MoE layer and
micro-batch on each and the largest part of it that can be host time, ``h = (M_grace -
M_x86) / (r - 1)`` on x86, with ``r`` the Grace/x86 ratio of measured host time
(``GRACE_HOST_RATIO``).
"""
from __future__ import annotations

import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.moe_residuals import FILES, residual_rows  # noqa: E402
from strategies.cost.moe_bytes import EXPERT_BIAS_KERNELS  # noqa: E402
from strategies.cost.moe_time import EXPERT_HOST_S  # noqa: E402
from strategies.reference.bridge_recipes import recipe_for  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

#: Kernel launches per local expert, per MoE layer and micro-batch, ``(forward, backward)``,
#: of Megatron-Core's ``TEGroupedMLP`` (fc1 and fc2 are ``te.GroupedLinear``s) as Transformer
#: Engine 2.9 (NeMo 25.11) and 2.14 (26.04) run them, weights cached after the first
#: micro-batch (Megatron's ``TEGroupedLinear`` passes ``is_first_microbatch``), no expert bias:
#: per GroupedLinear forward, ``tex.split_quantize`` quantises each split with its own kernel
#: (``multi_tensor_quantize_impl``: a fused multi-tensor kernel exists only for delayed
#: scaling; MXFP8 and block scaling bulk-allocate the outputs but still call ``quantize`` per
#: split; current scaling runs amax, scale and cast, three kernels) and
#: ``general_grouped_gemm`` calls ``multi_stream_cublas_gemm``, one cuBLASLt matmul per expert
#: (descriptor, layouts and heuristic query built each call; CUTLASS grouped GEMM only on
#: Hopper with ``NVTE_USE_CUTLASS_GROUPED_GEMM`` and bf16); per backward, the gradient's
#: ``split_quantize``, one dgrad and one wgrad GEMM per expert. Batched per call, not per
#: expert: the MXFP8 scale swizzle (``nvte_multi_tensor_swizzle_scaling_factors``), TE's
#: padding copies (``nvte_multi_padding``, <= 64 tensors a kernel), the stream events.
#: Source: NVIDIA/TransformerEngine v2.9 and v2.14 ``pytorch/module/grouped_linear.py``,
#: ``pytorch/csrc/extensions/{cast,gemm}.cpp``, ``pytorch/csrc/quantizer.cpp``,
#: ``common/gemm/cublaslt_gemm.cu``; NVIDIA/Megatron-LM core_v0.15.0 / core_v0.17.0
#: ``megatron/core/transformer/moe/experts.py``, ``extensions/transformer_engine.py``.
LAUNCHES = {
    "bf16": (2, 4),             # GEMM x 2; dgrad + wgrad x 2
    "mxfp8": (4, 6),            # (quantise + GEMM) x 2; (quantise + dgrad + wgrad) x 2
    "fp8-blockwise": (4, 6),    # as MXFP8: one quantise kernel per split
    "fp8": (8, 10),             # current scaling: (amax + scale + cast + GEMM) x 2; ...
}
#: cuBLASLt matmuls set up and launched per local expert, per MoE layer and micro-batch
#: (fc1, fc2: forward, dgrad, wgrad), every precision
GEMMS_PER_EXPERT = 6
#: Rows with at least this many local experts (the rows of §5.25's per-expert floor)
MIN_LOCAL = 16
#: Host (CPU) seconds of one PyTorch ``Linear`` forward (one cuBLAS GEMM: Python dispatch,
#: ATen, cuBLASLt), bf16, hidden 2048, 8192 tokens, measured on each system's own CPU:
#: TransformerEngine issue #2053 ("High CPU overhead on Grace systems", 2025-08-11): GB200
#: 37.08 µs, GH200 33.17 µs (NVIDIA Grace), H100 DGX 13.48 µs (Intel Xeon Platinum 8480C).
TORCH_LINEAR_HOST_S = {"grace": 37.08e-6, "x86": 13.48e-6}
#: Grace / x86 host time of the same operation (issue #2053, GB200 against the H100 DGX; GH200
#: gives 33.17 / 13.48 = 2.46)
GRACE_HOST_RATIO = TORCH_LINEAR_HOST_S["grace"] / TORCH_LINEAR_HOST_S["x86"]


def host_cpu(gpu_name: str) -> str:
    """``grace`` for the Grace-hosted GB200 / GB300 systems, ``x86`` for the DGX systems
    (H100, H800, B200, B300: Intel Xeon hosts)."""
    return "grace" if gpu_name.upper().startswith("G") else "x86"


def launches_per_expert(dtype: str, bias: bool = False) -> int:
    """Kernel launches per local expert, per MoE layer and micro-batch (``LAUNCHES``), plus
    Megatron-Core's per-expert output-bias path for experts with biases
    (``moe_bytes.EXPERT_BIAS_KERNELS``, gpt-oss)."""
    if dtype not in LAUNCHES:
        raise ValueError(f"dtype: {dtype!r} has no launch count; expected one of "
                         f"{sorted(LAUNCHES)}")
    return sum(LAUNCHES[dtype]) + (sum(EXPERT_BIAS_KERNELS) if bias else 0)


@functools.lru_cache(maxsize=None)
def _residuals() -> dict:
    """``{id: (residual row, job)}`` of every MoE row of ``FILES`` (estimated once)."""
    out = {}
    for path in FILES:
        entries = {e["id"]: e for e in load_reference(path)}
        for r in residual_rows(path):
            out[r[0]] = (r, entries[r[0]], case_from_entry(entries[r[0]]).job)
    return out


def launch_rows(min_local: int = MIN_LOCAL) -> list[tuple]:
    """``(id, GPU, host CPU, precision, mbs, local experts, launches per expert, implied ms,
    missed ms, implied µs per launch, missed µs per launch, torch Linear host µs)`` of every
    MoE row with at least ``min_local`` local experts and a counted precision."""
    out = []
    for rid, (r, _entry, job) in _residuals().items():
        gpu, d, mbs, missed, layer = r[1], r[2], r[3], r[7], r[8]
        local = job.model.num_experts // job.plan.ep
        if local < min_local or d not in LAUNCHES:
            continue
        implied = layer + missed           # as experiments/moe_expert_floor.py
        n = launches_per_expert(d, bool(job.model.bias))
        cpu = host_cpu(gpu)
        out.append((rid, gpu, cpu, d, mbs, local, n, implied, missed,
                    1e3 * implied / (local * n), 1e3 * missed / (local * n),
                    1e6 * TORCH_LINEAR_HOST_S[cpu]))
    return sorted(out, key=lambda row: (row[5], row[0]))


def _key(entry: dict, job) -> tuple:
    """What a host-CPU pair must share: model, container (the id's prefix), precision,
    GPUs, parallel layout, micro-batch, dispatcher, overlap."""
    p = job.plan
    return (entry["id"].split("_")[0], job.model.name, job.dtype, job.cluster.num_gpus,
            p.tp, p.pp, p.ep, p.vpp, p.mbs, p.gbs, p.moe_dispatcher, p.ep_overlap)


def _graphs(entry: dict) -> str:
    r = recipe_for(entry)
    return "+".join(r.cuda_graph_scope) if r and r.cuda_graph_scope else "none"


def host_pairs(ratio: float = GRACE_HOST_RATIO) -> list[tuple]:
    """``(x86 id, Grace id, x86 missed ms, Grace missed ms, host-sensitive ms on x86,
    its share of the x86 miss, x86 graphs, Grace graphs)`` for every pair of MoE rows that
    differ only in the host CPU (and the GPU that comes with it): ``h = (M_grace - M_x86) /
    (ratio - 1)`` (0 where the Grace row misses less). The recipes' partial CUDA-graph scopes
    are shown, not matched."""
    missed, keys = {}, {}
    for rid, (r, entry, job) in _residuals().items():
        missed[rid] = (host_cpu(r[1]), r[7], _graphs(entry))
        keys.setdefault(_key(entry, job), []).append(rid)
    out = []
    for ids in keys.values():
        x86 = [i for i in ids if missed[i][0] == "x86"]
        grace = [i for i in ids if missed[i][0] == "grace"]
        for a in x86:
            for g in grace:
                mx, mg = missed[a][1], missed[g][1]
                h = max(0.0, (mg - mx) / (ratio - 1.0))
                out.append((a, g, mx, mg, h, h / mx if mx > 0 else float("nan"),
                            missed[a][2], missed[g][2]))
    return sorted(out)


def main() -> int:
    print("| precision | launches forward | launches backward | per local expert |")
    print("|---|---|---|---|")
    for d, (f, b) in LAUNCHES.items():
        print(f"| {d} | {f} | {b} | {f + b} |")
    print(f"\nTE #2897 (fused path, GB200): {1e6 * sum(EXPERT_HOST_S):.1f} µs of host time per "
          f"local expert (forward + backward); PyTorch Linear forward host time (TE #2053): "
          f"{1e6 * TORCH_LINEAR_HOST_S['grace']:.2f} µs Grace, "
          f"{1e6 * TORCH_LINEAR_HOST_S['x86']:.2f} µs x86; Grace/x86 {GRACE_HOST_RATIO:.3f}\n")
    print("| run | GPU | host | precision | mbs | local experts | launches per expert "
          "| implied ms | missed ms | implied µs per launch | missed µs per launch "
          "| torch Linear host µs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (rid, gpu, cpu, d, mbs, local, n, implied, missed, ipl, mpl,
         torch_us) in launch_rows():
        print(f"| {rid} | {gpu} | {cpu} | {d} | {mbs} | {local} | {n} | {implied:.2f} | "
              f"{missed:.2f} | {ipl:.1f} | {mpl:.1f} | {torch_us:.2f} |")
    print("\n| x86 run (graphs) | Grace run (graphs) | x86 missed ms | Grace missed ms "
          "| Grace/x86 miss | host-sensitive ms on x86 (at most) | share of the x86 miss |")
    print("|---|---|---|---|---|---|---|")
    for a, g, mx, mg, h, share, ga, gg in host_pairs():
        print(f"| {a} ({ga}) | {g} ({gg}) | {mx:.2f} | {mg:.2f} | {mg / mx:.2f} | "
              f"{h:.2f} | {100 * share:.0f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
