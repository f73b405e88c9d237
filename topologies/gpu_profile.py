"""GPU profile files: what ``paraplan calibrate`` measured on one GPU (no torch here).

A profile holds raw timings (seconds) of the kernels the cost model assumes, each with its
shape, so the cost model can compare them with its own time for the same shape
(``strategies.cost.measured``). File schema (YAML or JSON; docs/calibration.md, "calibrate"):

```
schema: paraplan-gpu-profile/1
gpu: H100-SXM5-80GB            # optional: the catalog GPU (name or alias) it was measured on
device: NVIDIA H100 80GB HBM3  # optional: the name the driver gives
backend: torch                 # what measured it (torch, fake)
software: {torch: "2.5.1"}     # optional: versions, free text
gemm:          # at least one; seconds of one (m x k) @ (k x n) GEMM
  - {dtype: bf16, m: 8192, n: 12288, k: 4096, seconds: 2.1e-4}
attention:     # fused attention of `batch` sequences: forward and backward seconds
  - {kernel: fa2, batch: 1, heads: 32, seq: 4096, head_dim: 128, causal: true,
     fwd_seconds: 1.1e-3, bwd_seconds: 3.2e-3}
memory:        # a memory-bound kernel moving `bytes` (read + written) in `seconds`
  - {kernel: copy, bytes: 268435456, seconds: 1.0e-4}
launch_gap_s: 3.5e-6           # optional: GPU idle seconds between dependent kernels
collectives:   # optional (more than one GPU): one NCCL call on `gpus` GPUs; `bytes` as
               # nccl-tests counts them (the whole buffer: all-gather's output,
               # reduce-scatter's input)
  - {op: all_reduce, gpus: 8, bytes: 1073741824, seconds: 7.0e-3}
```

Units: seconds, bytes, counts. Every time must be > 0 and finite, every size an integer
>= 1; a key the schema does not know, a missing one, or the same shape given twice is
refused with the field, the value and the rule (``SpecError``).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from topologies.errors import SpecError
from topologies.limits import check_name, text_hint

SCHEMA = "paraplan-gpu-profile/1"
GEMM_DTYPES = ("bf16", "fp16", "fp8", "tf32", "fp32")
ATTENTION_KERNELS = ("native", "fa2")       # as GPU.flash_efficiency names them
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
MAX_POINTS = 100_000


@dataclass(frozen=True)
class GemmPoint:
    """Seconds of one ``(m x k) @ (k x n)`` GEMM in ``dtype``."""

    dtype: str
    m: int
    n: int
    k: int
    seconds: float

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


@dataclass(frozen=True)
class AttentionPoint:
    """Forward and backward seconds of a fused attention kernel over ``batch`` sequences of
    ``seq`` tokens, ``heads`` heads of ``head_dim``."""

    kernel: str
    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool
    fwd_seconds: float
    bwd_seconds: float


@dataclass(frozen=True)
class MemoryPoint:
    """A memory-bound kernel moving ``bytes`` (read + written) in ``seconds``."""

    kernel: str
    bytes: int
    seconds: float

    @property
    def bandwidth(self) -> float:
        """Bytes/s."""
        return self.bytes / self.seconds


@dataclass(frozen=True)
class CollectivePoint:
    """One NCCL collective over ``gpus`` GPUs in ``seconds``; ``bytes``: the whole buffer, as
    nccl-tests counts it (all-gather's output, reduce-scatter's input)."""

    op: str
    gpus: int
    bytes: int
    seconds: float

    @property
    def bus_bandwidth(self) -> float:
        """nccl-tests' bus bandwidth (bytes/s): algorithm bandwidth ``bytes/seconds`` times
        ``2(n-1)/n`` (all-reduce) or ``(n-1)/n`` (the others)."""
        n = self.gpus
        factor = 2.0 * (n - 1) / n if self.op == "all_reduce" else (n - 1) / n
        return self.bytes / self.seconds * factor


@dataclass(frozen=True)
class GpuProfile:
    """A measured GPU profile (see the module doc). ``path``: the file it was read from."""

    gemm: tuple[GemmPoint, ...]
    attention: tuple[AttentionPoint, ...] = ()
    memory: tuple[MemoryPoint, ...] = ()
    collectives: tuple[CollectivePoint, ...] = ()
    launch_gap_s: float | None = None
    gpu: str | None = None
    device: str = ""
    backend: str = ""
    software: tuple[tuple[str, str], ...] = ()
    path: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.gemm:
            raise SpecError("profile.gemm", [], "must hold at least one measured GEMM shape")
        _unique("profile.gemm", [(p.dtype, p.m, p.n, p.k) for p in self.gemm])
        _unique("profile.attention", [(p.kernel, p.batch, p.heads, p.seq, p.head_dim, p.causal)
                                      for p in self.attention])
        _unique("profile.memory", [(p.kernel, p.bytes) for p in self.memory])
        _unique("profile.collectives", [(p.op, p.gpus, p.bytes) for p in self.collectives])

    def gemm_points(self, dtype: str) -> tuple[GemmPoint, ...]:
        """The GEMMs measured in ``dtype`` (a ``GPU.peak_flops`` key)."""
        return tuple(p for p in self.gemm if p.dtype == dtype)

    def attention_points(self, kernel: str) -> tuple[AttentionPoint, ...]:
        return tuple(p for p in self.attention if p.kernel == kernel)

    @property
    def hbm_bandwidth(self) -> float | None:
        """Usable HBM bytes/s: the median bandwidth of the streaming kernels
        (``STREAMING_KERNELS``: copy, add; every kernel when the profile has none of them) that
        moved at least ``LARGE_BYTES`` (where the launch cost is negligible; all of them when
        none did); None without memory points. A norm kernel's rate is its own (PyTorch's
        eager ``layer_norm``: a Welford pass and a second pass over each row, one block per
        row; 0.56 of the copy rate at 64 MiB to 1 GiB on an H200, docs/calibration.md §5.128),
        not the HBM's."""
        if not self.memory:
            return None
        pts = [p for p in self.memory if p.kernel in STREAMING_KERNELS] or list(self.memory)
        big = [p.bandwidth for p in pts if p.bytes >= LARGE_BYTES] or \
            [p.bandwidth for p in pts]
        big.sort()
        n = len(big)
        return big[n // 2] if n % 2 else 0.5 * (big[n // 2 - 1] + big[n // 2])


LARGE_BYTES = 64 * 1024**2
#: the memory kernels whose rate is the HBM's: pure streaming, one read (two for add) and one
#: write an element, no reduction (``GpuProfile.hbm_bandwidth``)
STREAMING_KERNELS = ("copy", "add")


def _unique(field_: str, keys: list) -> None:
    seen = set()
    for i, k in enumerate(keys):
        if k in seen:
            raise SpecError(f"{field_}[{i}]", k, "the same shape is given twice")
        seen.add(k)


def _int(field_: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 1 <= v <= 2**53 \
            or not float(v).is_integer():
        raise SpecError(field_, v, "must be an integer >= 1 (at most 2**53)")
    return int(v)


def _seconds(field_: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e9 \
            or not math.isfinite(v):
        raise SpecError(field_, v, "must be a finite time > 0 seconds (a rate must be > 0)"
                        + text_hint(v))
    return float(v)


def _entries(d: Mapping, key: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
             ) -> list[tuple[str, Mapping]]:
    items = d.get(key, [])
    if items is None:
        items = []
    if not isinstance(items, list):
        raise SpecError(f"profile.{key}", type(items).__name__, "must be a list of mappings")
    if len(items) > MAX_POINTS:
        raise SpecError(f"profile.{key}", len(items), f"must hold at most {MAX_POINTS} points")
    out = []
    for i, e in enumerate(items):
        f = f"profile.{key}[{i}]"
        if not isinstance(e, Mapping):
            raise SpecError(f, e, "must be a mapping")
        unknown = _unknown_key(e, required + optional)
        if unknown is not None:
            raise SpecError(f"{f}.{unknown}", e[unknown],
                            f"unknown key; allowed: {', '.join(required + optional)}")
        for r in required:
            if r not in e:
                raise SpecError(f"{f}.{r}", None, "is required (a measured shape needs every "
                                f"one of {', '.join(required)})")
        out.append((f, e))
    return out


def _unknown_key(d: Mapping, allowed: tuple[str, ...]) -> Any:
    """The first key of ``d`` (by its text) not in ``allowed``, as the mapping holds it (a
    YAML key may be a number: ``7: x``), or None."""
    unknown = sorted((k for k in d if k not in allowed), key=str)
    return unknown[0] if unknown else None


def _choice(field_: str, v: Any, allowed: tuple[str, ...]) -> str:
    if v not in allowed:
        raise SpecError(field_, v, f"must be one of {', '.join(allowed)}")
    return v


_TOP = ("schema", "gpu", "device", "backend", "software", "gemm", "attention", "memory",
        "launch_gap_s", "collectives")


def profile_from_mapping(d: Any, path: str = "") -> GpuProfile:
    """A ``GpuProfile`` from the file's mapping (schema in the module doc)."""
    if not isinstance(d, Mapping):
        raise SpecError("profile", type(d).__name__, "a GPU profile file must hold a mapping")
    unknown = _unknown_key(d, _TOP)
    if unknown is not None:
        raise SpecError(f"profile.{unknown}", d[unknown],
                        f"unknown key; allowed: {', '.join(_TOP)}")
    if d.get("schema") != SCHEMA:
        raise SpecError("profile.schema", d.get("schema"), f"must be {SCHEMA!r}")
    gemm = tuple(GemmPoint(_choice(f"{f}.dtype", e["dtype"], GEMM_DTYPES),
                           _int(f"{f}.m", e["m"]), _int(f"{f}.n", e["n"]),
                           _int(f"{f}.k", e["k"]), _seconds(f"{f}.seconds", e["seconds"]))
                 for f, e in _entries(d, "gemm", ("dtype", "m", "n", "k", "seconds")))
    attn = []
    for f, e in _entries(d, "attention", ("kernel", "batch", "heads", "seq", "head_dim",
                                          "fwd_seconds", "bwd_seconds"), ("causal",)):
        causal = e.get("causal", True)
        if not isinstance(causal, bool):
            raise SpecError(f"{f}.causal", causal, "must be true or false")
        attn.append(AttentionPoint(
            _choice(f"{f}.kernel", e["kernel"], ATTENTION_KERNELS), _int(f"{f}.batch", e["batch"]),
            _int(f"{f}.heads", e["heads"]), _int(f"{f}.seq", e["seq"]),
            _int(f"{f}.head_dim", e["head_dim"]), causal,
            _seconds(f"{f}.fwd_seconds", e["fwd_seconds"]),
            _seconds(f"{f}.bwd_seconds", e["bwd_seconds"])))
    mem = tuple(MemoryPoint(check_name(f"{f}.kernel", e["kernel"]), _int(f"{f}.bytes", e["bytes"]),
                            _seconds(f"{f}.seconds", e["seconds"]))
                for f, e in _entries(d, "memory", ("kernel", "bytes", "seconds")))
    coll = []
    for f, e in _entries(d, "collectives", ("op", "gpus", "bytes", "seconds")):
        n = _int(f"{f}.gpus", e["gpus"])
        if n < 2:
            raise SpecError(f"{f}.gpus", n, "a collective needs at least 2 GPUs")
        op = _choice(f"{f}.op", e["op"], COLLECTIVE_OPS)
        nbytes = _int(f"{f}.bytes", e["bytes"])
        if op != "all_reduce" and nbytes % n:
            raise SpecError(f"{f}.bytes", nbytes, f"must be a multiple of gpus={n}: "
                            f"nccl-tests counts {op}'s whole buffer, {n} equal shares (one "
                            "per GPU)")
        coll.append(CollectivePoint(op, n, nbytes, _seconds(f"{f}.seconds", e["seconds"])))
    gap = d.get("launch_gap_s")
    if gap is not None:
        gap = _seconds("profile.launch_gap_s", gap)
        if gap >= 1e-3:
            raise SpecError("profile.launch_gap_s", gap, "must be < 1 ms (seconds)")
    soft = d.get("software") or {}
    if not isinstance(soft, Mapping):
        raise SpecError("profile.software", soft, "must be a mapping of name: version")
    gpu = d.get("gpu")
    return GpuProfile(
        gemm=gemm, attention=tuple(attn), memory=mem, collectives=tuple(coll), launch_gap_s=gap,
        gpu=check_name("profile.gpu", gpu) if gpu is not None else None,
        device=check_name("profile.device", d.get("device") or "-"),
        backend=check_name("profile.backend", d.get("backend") or "-"),
        software=tuple(sorted((check_name("profile.software", k), str(v))
                              for k, v in soft.items())),
        path=path)


def profile_to_mapping(p: GpuProfile) -> dict:
    """The file form of ``p`` (``profile_from_mapping`` reads it back equal)."""
    d: dict = {"schema": SCHEMA}
    if p.gpu is not None:
        d["gpu"] = p.gpu
    d.update(device=p.device, backend=p.backend, software=dict(p.software))
    d["gemm"] = [{"dtype": g.dtype, "m": g.m, "n": g.n, "k": g.k, "seconds": g.seconds}
                 for g in p.gemm]
    d["attention"] = [{"kernel": a.kernel, "batch": a.batch, "heads": a.heads, "seq": a.seq,
                       "head_dim": a.head_dim, "causal": a.causal,
                       "fwd_seconds": a.fwd_seconds, "bwd_seconds": a.bwd_seconds}
                      for a in p.attention]
    d["memory"] = [{"kernel": m.kernel, "bytes": m.bytes, "seconds": m.seconds}
                   for m in p.memory]
    if p.launch_gap_s is not None:
        d["launch_gap_s"] = p.launch_gap_s
    d["collectives"] = [{"op": c.op, "gpus": c.gpus, "bytes": c.bytes, "seconds": c.seconds}
                        for c in p.collectives]
    return d


def nccl_buffer_bytes(size: int, gpus: int, element_bytes: int = 2) -> int:
    """The buffer calibrate measures for a nominal ``size`` in bytes over ``gpus`` GPUs:
    ``size`` rounded down to whole elements (bf16: 2 bytes) divisible by ``gpus``, at least
    one element per GPU (nccl-tests' convention: an all-gather's, reduce-scatter's or
    all-to-all's buffer holds ``gpus`` equal shares)."""
    return max(gpus, size // element_bytes // gpus * gpus) * element_bytes


def check_node(profile: GpuProfile, gpus_per_node: int, field_: str = "gpu.profile") -> None:
    """Refuse a profile whose collectives ran on more GPUs than a node of the cluster holds:
    calibrate measures the GPUs of one machine, and the cost model reads a measurement for
    groups within one node (``strategies.cost.comm.measured_scale``)."""
    for i, c in enumerate(profile.collectives):
        if c.gpus > gpus_per_node:
            raise SpecError(f"{field_}.collectives[{i}].gpus", c.gpus,
                            f"must be <= the cluster's gpus_per_node={gpus_per_node} (a "
                            "profile's collectives are measured within one node)")


def load_gpu_profile(path: str, base_dir: str | None = None) -> GpuProfile:
    """Read a profile file (YAML, or JSON by its ``.json`` extension); a relative ``path`` is
    taken from ``base_dir`` (the folder of the cluster file naming it) when given."""
    from topologies.yaml_io import load_mapping_file
    if not isinstance(path, str) or not path.strip():
        raise SpecError("gpu.profile", path, "must be a file path (text): a paraplan "
                        "calibrate profile, YAML or JSON")
    path = check_name("gpu.profile", path, max_len=4096)
    if base_dir and not os.path.isabs(path):
        path = os.path.join(base_dir, path)
    path = os.path.abspath(path)
    return profile_from_mapping(load_mapping_file(path, "gpu.profile", "GPU profile"), path)
