"""The sweep of ``paraplan calibrate``: which shapes to time, and the profile they make.

GEMMs: the four weight GEMMs of a transformer layer (QKV, attention output, MLP up, MLP
down; ``strategies.cost.gemm_time.linear_shapes``, the shapes the cost model itself charges) and the
logits GEMM of the LM head ``(tokens, vocab/tp, hidden)``, each in
its three passes (forward ``(M, N, K)``, data gradient ``(M, K, N)``, weight gradient
``(K, N, M)``), for every model, tensor-parallel degree and micro-batch size asked, in bf16
and, where the GPU has it, fp8. Attention: every sequence length and per-GPU head count
(the model's heads over each tp) with the model's head dimension, batch 1, causal. Memory:
``copy``, ``add`` and ``layernorm`` over ``MEMORY_SIZES``. Collectives, when the machine has
more than one GPU: every op of ``COLLECTIVE_OPS`` (the all-to-all of expert parallelism too)
over ``COLLECTIVE_SIZES`` on every group size the cost model reads within a node
(``collective_groups``: by default each power of two from 2 that divides the GPU count, and
the count), each group the consecutive ranks placement gives a tp group
(``strategies.placement``; ``strategies.cost.comm.measured_scale`` reads a size for every
group of that many GPUs within one node).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from simulator.calibrate.backend import MEMORY_KERNELS, Backend
from strategies.cost.gemm_time import linear_shapes
from strategies.errors import SpecError
from strategies.model import ModelSpec
from topologies.gpu_profile import COLLECTIVE_OPS, SCHEMA, GpuProfile, profile_from_mapping

MEMORY_SIZES = tuple(2**p for p in range(20, 31, 2))       # 1 MiB .. 1 GiB moved
COLLECTIVE_SIZES = tuple(2**p for p in range(20, 31, 2))   # 1 MiB .. 1 GiB per GPU


@dataclass(frozen=True)
class CalibrationSpec:
    """What to measure: ``models`` (their layer shapes), tensor-parallel degrees ``tps``,
    micro-batch sizes ``mbs`` (sequences), attention sequence lengths ``seqs`` (tokens),
    GEMM ``dtypes`` (those the backend cannot run are skipped)."""

    models: tuple[ModelSpec, ...]
    tps: tuple[int, ...] = (1, 2, 4, 8)
    mbs: tuple[int, ...] = (1, 2)
    seqs: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384)
    dtypes: tuple[str, ...] = ("bf16", "fp8")
    coll_gpus: tuple[int, ...] | None = None


def collective_groups(count: int, asked: tuple[int, ...] | None = None,
                      field: str = "coll_gpus") -> tuple[int, ...]:
    """The group sizes (GPUs) whose collectives to measure on a machine of ``count`` GPUs,
    ascending: ``asked``, each refused (``SpecError`` naming ``field``) unless ``2 <= g <=
    count`` and ``g`` divides ``count`` (the machine's GPUs tile into groups of ``g``
    consecutive ranks, as placement lays a node's tp groups); by default every power of
    two from 2 dividing ``count``, and ``count`` itself (none on one GPU)."""
    if asked is None:
        return tuple(sorted({g for g in (2**p for p in range(1, count.bit_length()))
                             if count % g == 0} | ({count} if count > 1 else set())))
    for g in asked:
        if isinstance(g, bool) or not isinstance(g, int) or g < 2:
            raise SpecError(field, g, "must be an integer >= 2 (a collective's group of GPUs)")
        if g > count:
            raise SpecError(field, g, f"must be <= the machine's GPU count {count} (groups "
                            "within the machine measured)")
        if count % g:
            raise SpecError(field, g, f"must divide the machine's GPU count {count} (its GPUs "
                            f"tile into groups of {g} consecutive ranks)")
    return tuple(sorted(set(asked)))


def gemm_shapes(spec: CalibrationSpec) -> list[tuple[int, int, int]]:
    """Distinct integer ``(M, N, K)`` of the layer GEMMs in all three passes, in order."""
    out: dict[tuple[int, int, int], None] = {}
    for m in spec.models:
        for tp in spec.tps:
            if m.num_attention_heads % tp or m.kv_heads % tp and tp % m.kv_heads:
                continue
            for b in spec.mbs:
                T = b * m.seq_length
                head = (1, T, m.vocab_size / tp, m.hidden_size, False)   # the logits GEMM
                for _count, M, N, K, row in [*linear_shapes(m, b, tp, 1, 1), head]:
                    if row is None:
                        continue
                    dims = [int(round(float(x))) for x in (M, N, K)]
                    if min(dims) < 1:
                        continue
                    M_, N_, K_ = dims
                    for s in ((M_, N_, K_), (M_, K_, N_), (K_, N_, M_)):
                        out[s] = None
    return list(out)


def attention_shapes(spec: CalibrationSpec) -> list[tuple[int, int, int]]:
    """Distinct ``(heads per GPU, seq, head_dim)``."""
    out: dict[tuple[int, int, int], None] = {}
    for m in spec.models:
        for tp in spec.tps:
            if m.num_attention_heads % tp:
                continue
            for s in spec.seqs:
                out[(m.num_attention_heads // tp, s, m.head_dim)] = None
    return list(out)


def check_measurable(spec: CalibrationSpec, info: Mapping[str, Any],
                     flags: Mapping[str, str] | None = None) -> None:
    """Refuse, before measuring, a sweep that would time no GEMM: none of ``spec.dtypes``
    runs on the device (``info["dtypes"]``), or no tensor-parallel degree of ``spec.tps``
    divides a model's heads (``gemm_shapes``). ``flags``: the name each spec field is given
    by in the refusal (the CLI's flags), default the field's own."""
    name = {"dtypes": "dtypes", "tps": "tps", **(flags or {})}
    if not any(d in info["dtypes"] for d in spec.dtypes):
        raise SpecError(name["dtypes"], ",".join(spec.dtypes),
                        f"{info['device']} runs none of these GEMM precisions (it runs "
                        f"{', '.join(info['dtypes'])})")
    if not gemm_shapes(spec):
        raise SpecError(name["tps"], ",".join(map(str, spec.tps)),
                        "no tensor-parallel degree divides the attention heads (and KV heads) "
                        "of " + ", ".join(f"{m.name} ({m.num_attention_heads} heads)"
                                          for m in spec.models) + ": no GEMM shape to time")


def calibrate(backend: Backend, spec: CalibrationSpec, gpu: str | None = None,
              flags: Mapping[str, str] | None = None) -> GpuProfile:
    """Run the sweep on ``backend``; the profile it measured (``gpu``: the catalog name to
    record, default the backend's guess). Every value passes the profile file's checks.
    ``flags``: the names of the spec's fields in a refusal (``check_measurable``)."""
    info = backend.describe()
    groups = collective_groups(info["count"], spec.coll_gpus)    # refused before measuring
    check_measurable(spec, info, flags)
    d: dict = {"schema": SCHEMA, "device": info["device"], "backend": info.get("backend", ""),
               "software": dict(info.get("software", {}))}
    if gpu or info.get("gpu"):
        d["gpu"] = gpu or info["gpu"]
    d["gemm"] = []
    for dtype in spec.dtypes:
        if dtype not in info["dtypes"]:
            continue
        for M, N, K in gemm_shapes(spec):
            t = backend.gemm_seconds(dtype, M, N, K)
            if t is not None:
                d["gemm"].append({"dtype": dtype, "m": M, "n": N, "k": K, "seconds": t})
    d["attention"] = []
    for kernel in info["attention_kernels"]:
        for heads, seq, hd in attention_shapes(spec):
            r = backend.attention_seconds(kernel, 1, heads, seq, hd, True)
            if r is not None:
                d["attention"].append({"kernel": kernel, "batch": 1, "heads": heads, "seq": seq,
                                       "head_dim": hd, "causal": True, "fwd_seconds": r[0],
                                       "bwd_seconds": r[1]})
    d["memory"] = [{"kernel": k, "bytes": n, "seconds": backend.memory_seconds(k, n)}
                   for k in MEMORY_KERNELS for n in MEMORY_SIZES]
    d["launch_gap_s"] = backend.launch_gap_seconds()
    d["collectives"] = []
    if groups:
        times = backend.collective_seconds(COLLECTIVE_OPS, COLLECTIVE_SIZES, groups)
        d["collectives"] = [{"op": op, "gpus": g, "bytes": n, "seconds": t}
                            for (op, g, n), t in sorted(times.items())]
    return profile_from_mapping(d)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def summarize(profile: GpuProfile, gpu=None) -> dict:
    """What the profile says against the catalog model of ``gpu`` (a ``GPU``; None: the
    measured figures only). Efficiencies are fractions of the datasheet peak; ``vs_model``:
    median of measured over modelled seconds at the same shapes (> 1: the chip is slower
    than the catalog says); ``collectives``: per op, per group size (GPUs), the best
    bus bandwidth measured (bytes/s)."""
    from strategies.cost import attention_time, gemm_kernel, hbm_rate
    from strategies.cost.measured import attention_flops_fwd
    out: dict = {"gpu": profile.gpu, "device": profile.device, "backend": profile.backend,
                 "gemm": {}, "attention": {}}
    for dtype in sorted({p.dtype for p in profile.gemm}):
        pts = profile.gemm_points(dtype)
        row: dict = {"shapes": len(pts)}
        if gpu is not None and gpu.supports(dtype):
            peak = gpu.peak(dtype)
            rate, kn = peak * gpu.gemm_efficiency(dtype), gemm_kernel.k_knee(gpu, dtype)
            eff = [p.flops / p.seconds / peak for p in pts]
            row.update(efficiency_min=min(eff), efficiency_median=_median(eff),
                       efficiency_max=max(eff), catalog_large_gemm=gpu.gemm_efficiency(dtype),
                       vs_model=_median([p.seconds / (gemm_kernel.gemm_compute(
                           p.m, p.n, p.k, rate, kn, gemm_kernel.gemm_waves(gpu))
                           + gemm_kernel.gemm_fixed_s(gpu)) for p in pts]))
        out["gemm"][dtype] = row
    for kernel in sorted({p.kernel for p in profile.attention}):
        pts = profile.attention_points(kernel)
        row = {"shapes": len(pts)}
        if gpu is not None:
            peak = gpu.peak("bf16")
            fl = [attention_flops_fwd(p.batch, p.heads, p.seq, p.head_dim, p.causal) for p in pts]
            ef = [f / p.fwd_seconds / peak for f, p in zip(fl, pts)]
            eb = [attention_time.FLASH_BWD_FACTOR * f / p.bwd_seconds / peak
                  for f, p in zip(fl, pts)]
            row.update(fwd_efficiency_median=_median(ef), bwd_efficiency_median=_median(eb),
                       catalog_fwd=gpu.flash_efficiency(kernel),
                       catalog_bwd=gpu.flash_efficiency(kernel)
                       * attention_time.FLASH_BWD_EFFICIENCY)
        out["attention"][kernel] = row
    if profile.hbm_bandwidth is not None:
        out["hbm"] = {"measured_Bps": profile.hbm_bandwidth}
        if gpu is not None:
            out["hbm"].update(catalog_Bps=gpu.hbm_bandwidth * hbm_rate.HBM_EFFICIENCY,
                              fraction_of_datasheet=profile.hbm_bandwidth / gpu.hbm_bandwidth)
    out["launch_gap_s"] = profile.launch_gap_s
    out["collectives"] = {op: {g: max(c.bus_bandwidth for c in profile.collectives
                                      if (c.op, c.gpus) == (op, g))
                               for g in sorted({c.gpus for c in profile.collectives
                                                if c.op == op})}
                          for op in sorted({c.op for c in profile.collectives})}
    return out
