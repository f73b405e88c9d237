"""The measuring interface of ``paraplan calibrate`` and a fake, deterministic backend.

A ``Backend`` times kernels on one machine (seconds); ``simulator.calibrate.run`` chooses
the shapes. ``FakeBackend`` answers with synthetic timings from a known efficiency curve, the
catalog's own model scaled by fixed factors, so a test can check that a profile written from
it carries exactly that curve and that the cost model then follows it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from strategies.cost import attention_grid
from strategies.cost.attention_time import FLASH_BWD_EFFICIENCY, FLASH_BWD_FACTOR
from strategies.cost.gemm_kernel import gemm_compute, gemm_fixed_s, gemm_waves, k_knee
from strategies.cost.measured import attention_flops_fwd
from strategies.errors import SpecError
from topologies.gpu_profile import nccl_buffer_bytes
from topologies.gpus import GPU, get_gpu

BACKENDS = ("torch", "fake")


class Backend(Protocol):
    """What a measuring backend answers (every time in seconds, every size in bytes)."""

    def describe(self) -> dict:
        """``device`` (driver name), ``gpu`` (catalog name or None), ``count`` (GPUs),
        ``dtypes`` (GEMM rate keys it can run), ``attention_kernels`` (``"native"``,
        ``"fa2"``), ``software`` (name -> version)."""

    def gemm_seconds(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """One ``(m x k) @ (k x n)`` GEMM; None when the shape cannot run in ``dtype``."""

    def attention_seconds(self, kernel: str, batch: int, heads: int, seq: int, head_dim: int,
                          causal: bool) -> tuple[float, float] | None:
        """(forward, backward) of the fused attention ``kernel``; None when it cannot run."""

    def memory_seconds(self, kernel: str, nbytes: int) -> float:
        """A memory-bound ``kernel`` (``copy``, ``add``, ``layernorm``) moving ``nbytes``."""

    def launch_gap_seconds(self) -> float:
        """Time per kernel of a chain of dependent near-empty kernels."""

    def collective_seconds(self, ops: tuple[str, ...], sizes: tuple[int, ...],
                           groups: tuple[int, ...]) -> dict[tuple[str, int, int], float]:
        """Each NCCL ``op`` of each nominal size (bytes) over each group size ``g`` of
        ``groups`` (dividing the machine's GPUs): ``(op, g, bytes) -> seconds``, ``bytes``
        the buffer measured (``nccl_buffer_bytes(size, g)``), the group the consecutive
        ranks ``0 .. g-1`` (placement's tp group; the machine's other groups of ``g`` run
        the same op at the same time)."""


MEMORY_KERNELS = ("copy", "add", "layernorm")


@dataclass(frozen=True)
class FakeBackend:
    """Deterministic timings from a known curve: GEMMs at ``gemm_scale`` times the catalog's
    modelled rate of the shape (``GPU.gemm_efficiency`` with the thin-shape penalty), fused
    attention at ``attention_scale`` times the catalog's (backward as the catalog's ratio),
    memory kernels at ``hbm_fraction`` of the datasheet bandwidth, collectives
    (``fake_collective_seconds``) at ``bus_bandwidth`` bytes/s of nccl-tests' bus bandwidth
    plus ``latency`` seconds per ring step, on any group of its ``count`` GPUs.
    ``processes``: answer the collectives from ``count`` spawned rank processes
    (``simulator.calibrate.ranks``, the torch backend's machinery; same figures), each
    sleeping ``hold_s`` seconds first (so a test can signal the parent while they run)."""

    gpu_name: str = "H100"
    gemm_scale: float = 0.5
    attention_scale: float = 0.5
    hbm_fraction: float = 0.8
    launch_gap: float = 4e-6
    count: int = 1
    bus_bandwidth: float = 360e9
    latency: float = 0.0
    processes: bool = False
    hold_s: float = 0.0

    @property
    def gpu(self) -> GPU:
        return get_gpu(self.gpu_name)

    def describe(self) -> dict:
        g = self.gpu
        return {"device": f"fake {g.name}", "gpu": g.name, "count": self.count,
                "dtypes": tuple(k for k in ("bf16", "fp8") if k in g.peak_flops),
                "backend": "fake",
                "attention_kernels": ("native", "fa2"), "software": {"fake": "1"}}

    def gemm_efficiency(self, dtype: str, m: int, n: int, k: int) -> float:
        """The known curve: fraction of ``peak(dtype)`` a ``(m, n, k)`` GEMM reaches."""
        g = self.gpu
        rate = g.peak(dtype) * g.gemm_efficiency(dtype)
        t = (gemm_compute(m, n, k, rate, k_knee(g, dtype), gemm_waves(g))
             + gemm_fixed_s(g)) / self.gemm_scale
        return 2.0 * m * n * k / t / g.peak(dtype)

    def gemm_seconds(self, dtype: str, m: int, n: int, k: int) -> float | None:
        return 2.0 * m * n * k / (self.gemm_efficiency(dtype, m, n, k) * self.gpu.peak(dtype))

    def attention_efficiency(self, kernel: str) -> tuple[float, float]:
        """The known curve: (forward, backward) fraction of the bf16 peak, in the cost
        model's FLOP convention (backward ``FLASH_BWD_FACTOR`` times the forward's FLOPs)."""
        f = self.attention_scale * self.gpu.flash_efficiency(kernel)
        return f, f * FLASH_BWD_EFFICIENCY

    def attention_seconds(self, kernel: str, batch: int, heads: int, seq: int, head_dim: int,
                          causal: bool) -> tuple[float, float] | None:
        flops = attention_flops_fwd(batch, heads, seq, head_dim, causal)
        ef, eb = self.attention_efficiency(kernel)
        gf, gb = attention_grid.shape_factors(self.gpu, kernel, batch * heads, seq,
                                              2 * head_dim) \
            if causal else (1.0, 1.0)   # the catalog's grid at this shape (causal kernels)
        peak = self.gpu.peak("bf16")
        return flops / (ef * gf * peak), FLASH_BWD_FACTOR * flops / (eb * gb * peak)

    def memory_seconds(self, kernel: str, nbytes: int) -> float:
        return nbytes / (self.hbm_fraction * self.gpu.hbm_bandwidth)

    def launch_gap_seconds(self) -> float:
        return self.launch_gap

    def collective_seconds(self, ops: tuple[str, ...], sizes: tuple[int, ...],
                           groups: tuple[int, ...]) -> dict[tuple[str, int, int], float]:
        args = (self.bus_bandwidth, self.latency, ops, sizes, groups)
        if not self.processes:
            return fake_collective_seconds(*args)
        from simulator.calibrate.ranks import run_ranks
        return run_ranks(self.count, _fake_rank, (args, self.hold_s))


def fake_collective_seconds(bus_bandwidth: float, latency: float, ops: tuple[str, ...],
                            sizes: tuple[int, ...], groups: tuple[int, ...]
                            ) -> dict[tuple[str, int, int], float]:
    """The fake's curve (``Backend.collective_seconds``' answer): over ``g`` GPUs, the
    buffer (``nccl_buffer_bytes``, the torch backend's) times nccl-tests' bus factor
    (``2(g-1)/g`` all-reduce, ``(g-1)/g`` the others) over ``bus_bandwidth``, plus
    ``latency`` per step of a ring (``2(g-1)`` all-reduce, ``g-1`` the others)."""
    out = {}
    for g in groups:
        for op in ops:
            steps = 2.0 * (g - 1) if op == "all_reduce" else float(g - 1)
            for s in sizes:
                s = nccl_buffer_bytes(s, g)
                out[(op, g, s)] = s * (steps / g) / bus_bandwidth + steps * latency
    return out


def _fake_rank(rank: int, n: int, init: str, args: tuple, hold_s: float
               ) -> dict[tuple[str, int, int], float] | None:
    """One rank process of the fake: sleeps ``hold_s``, rank 0 answers the curve."""
    import time
    time.sleep(hold_s)
    return fake_collective_seconds(*args) if rank == 0 else None


def get_backend(name: str, gpu: str | None = None, gpus: int = 1) -> Backend:
    """The backend called ``name`` (``BACKENDS``); ``gpu``: the catalog GPU the fake one
    imitates (default H100), ``gpus`` its GPU count. ``torch`` needs the ``calibrate`` extra."""
    if name == "fake":
        return FakeBackend(gpu_name=gpu or "H100", count=gpus)
    if name == "torch":
        from simulator.calibrate.torch_backend import TorchBackend
        return TorchBackend(gpu=gpu)
    raise SpecError("--backend", name, f"must be one of {', '.join(BACKENDS)}")
