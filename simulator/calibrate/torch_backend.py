"""The PyTorch backend of ``paraplan calibrate`` (the ``calibrate`` extra: ``pip install
'paraplan[calibrate]'``). torch is imported when a ``TorchBackend`` is made, never at import
time of anything else.

Timing: CUDA events around ``inner`` back-to-back calls of a kernel (``inner`` chosen so one
sample lasts about ``SAMPLE_S``), after ``warmup`` calls; the median of ``reps`` samples,
divided by ``inner``. Operands stay resident between calls (as in mamf-finder: small GEMMs may
run from L2). GEMMs: ``torch.matmul`` in bf16/fp16/fp32/tf32 and ``torch._scaled_mm`` in fp8
(e4m3, per-tensor scales, bf16 output; shapes must be multiples of 16). Attention:
``torch.nn.functional.scaled_dot_product_attention`` held to one backend with
``torch.nn.attention.sdpa_kernel``: ``FLASH_ATTENTION`` is FlashAttention-2 (``"fa2"``, and
``"native"`` before Hopper), ``CUDNN_ATTENTION`` the cuDNN fused kernel (``"native"`` on
Hopper and later). The backward is ``torch.autograd.grad`` of the output. Launch gap: the time
per kernel of a chain of 1-element in-place adds. Collectives: one process per GPU
(``simulator.calibrate.ranks``: spawned, each dying with the parent), NCCL through
``torch.distributed`` on each group size asked (groups of consecutive ranks), rank 0's times.
Run on one H200 (docs/calibration.md §7.5); the collective path (several GPUs) is untested on
hardware.
"""
from __future__ import annotations

import statistics
from typing import Callable

from strategies.errors import SpecError
from topologies.gpu_profile import nccl_buffer_bytes

SAMPLE_S = 2e-3
WARMUP = 5
REPS = 15


def _import_torch():
    try:
        import torch
    except ImportError:
        raise SpecError("--backend", "torch", "needs PyTorch: pip install 'paraplan[calibrate]' "
                        "(or use --backend fake for a dry run)") from None
    return torch


def guess_catalog_gpu(device_name: str) -> str | None:
    """The catalog GPU a driver's device name is (None when unsure)."""
    n = device_name.upper()
    table = [("GB200", "GB200"), ("GB300", "GB300"), ("B300", "B300"), ("B200", "B200"),
             ("H200", "H200"), ("H100 PCIE", "H100-PCIe"), ("H100", "H100"),
             ("A100", "A100-SXM4-80GB" if "80GB" in n else "A100-SXM4-40GB"),
             ("V100", "V100"), ("MI355X", "MI355X"), ("MI325X", "MI325X"),
             ("MI300X", "MI300X")]
    for key, name in table:
        if key in n:
            return name
    return None


class TorchBackend:
    """Measures on ``cuda:0`` (collectives: on every visible GPU)."""

    def __init__(self, gpu: str | None = None, warmup: int = WARMUP, reps: int = REPS) -> None:
        torch = _import_torch()
        if not torch.cuda.is_available():
            raise SpecError("--backend", "torch", "PyTorch sees no CUDA/ROCm GPU on this machine")
        self.torch = torch
        self.dev = torch.device("cuda:0")
        self.warmup, self.reps = warmup, reps
        self.gpu = gpu
        torch.backends.cuda.matmul.allow_tf32 = True

    def describe(self) -> dict:
        t = self.torch
        name = t.cuda.get_device_name(self.dev)
        cc = t.cuda.get_device_capability(self.dev)
        dtypes = ["bf16", "fp16", "tf32", "fp32"]
        if cc >= (8, 9) and hasattr(t, "float8_e4m3fn") and hasattr(t, "_scaled_mm"):
            dtypes.append("fp8")
        kernels = ["fa2"]
        from torch.nn.attention import SDPBackend
        if cc >= (9, 0):
            if hasattr(SDPBackend, "CUDNN_ATTENTION"):
                kernels.insert(0, "native")
        else:
            kernels.insert(0, "native")
        soft = {"torch": t.__version__, "cuda": str(t.version.cuda),
                "cudnn": str(t.backends.cudnn.version())}
        return {"device": name, "gpu": self.gpu or guess_catalog_gpu(name),
                "count": t.cuda.device_count(), "dtypes": tuple(dtypes),
                "attention_kernels": tuple(kernels), "software": soft, "backend": "torch",
                "capability": f"{cc[0]}.{cc[1]}"}

    def time_call(self, fn: Callable[[], object]) -> float:
        t = self.torch
        for _ in range(self.warmup):
            fn()
        start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        once = max(start.elapsed_time(end) / 1e3, 1e-7)
        inner = max(1, min(1000, int(SAMPLE_S / once)))
        samples = []
        for _ in range(self.reps):
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / inner)
        return statistics.median(samples)

    def gemm_seconds(self, dtype: str, m: int, n: int, k: int) -> float | None:
        t = self.torch
        try:
            if dtype == "fp8":
                if m % 16 or n % 16 or k % 16:
                    return None
                a = t.randn(m, k, device=self.dev).to(t.float8_e4m3fn)
                b = t.randn(n, k, device=self.dev).to(t.float8_e4m3fn).t()   # column-major
                one = t.ones((), device=self.dev)
                return self.time_call(lambda: t._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                       out_dtype=t.bfloat16))
            dt = {"bf16": t.bfloat16, "fp16": t.float16, "tf32": t.float32,
                  "fp32": t.float32}[dtype]
            t.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            a = t.randn(m, k, device=self.dev, dtype=dt)
            b = t.randn(k, n, device=self.dev, dtype=dt)
            out = t.empty(m, n, device=self.dev, dtype=dt)
            return self.time_call(lambda: t.matmul(a, b, out=out))
        except (RuntimeError, t.cuda.OutOfMemoryError):
            return None
        finally:
            t.cuda.empty_cache()

    def attention_seconds(self, kernel: str, batch: int, heads: int, seq: int, head_dim: int,
                          causal: bool) -> tuple[float, float] | None:
        t = self.torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        cc = t.cuda.get_device_capability(self.dev)
        backend = SDPBackend.CUDNN_ATTENTION if kernel == "native" and cc >= (9, 0) \
            else SDPBackend.FLASH_ATTENTION
        shape = (batch, heads, seq, head_dim)
        try:
            q, k, v = (t.randn(shape, device=self.dev, dtype=t.bfloat16, requires_grad=True)
                       for _ in range(3))
            with sdpa_kernel(backend):
                with t.no_grad():
                    fwd = self.time_call(lambda: F.scaled_dot_product_attention(
                        q, k, v, is_causal=causal))
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                g = t.randn_like(out)
                bwd = self.time_call(lambda: t.autograd.grad(out, (q, k, v), g, retain_graph=True))
            return fwd, bwd
        except (RuntimeError, t.cuda.OutOfMemoryError):
            return None
        finally:
            t.cuda.empty_cache()

    def memory_seconds(self, kernel: str, nbytes: int) -> float:
        t = self.torch
        import torch.nn.functional as F
        moves = {"copy": 2, "add": 3, "layernorm": 2}[kernel]   # tensors read + written
        hidden = 8192
        numel = max(hidden, nbytes // (2 * moves) // hidden * hidden)
        x = t.randn(numel, device=self.dev, dtype=t.bfloat16)
        y = t.empty_like(x)
        if kernel == "copy":
            fn = lambda: y.copy_(x)   # noqa: E731
        elif kernel == "add":
            z = t.randn_like(x)
            fn = lambda: t.add(x, z, out=y)   # noqa: E731
        else:
            x2 = x.view(-1, hidden)
            w = t.ones(hidden, device=self.dev, dtype=t.bfloat16)
            fn = lambda: F.layer_norm(x2, (hidden,), w, w)   # noqa: E731
        sec = self.time_call(fn)
        t.cuda.empty_cache()
        return sec * nbytes / (numel * 2 * moves)   # scaled to the bytes asked

    def launch_gap_seconds(self) -> float:
        t = self.torch
        x = t.zeros(1, device=self.dev)
        return self.time_call(lambda: x.add_(1.0))

    def collective_seconds(self, ops: tuple[str, ...], sizes: tuple[int, ...],
                           groups: tuple[int, ...]) -> dict[tuple[str, int, int], float]:
        from simulator.calibrate.ranks import run_ranks
        n = self.torch.cuda.device_count()
        return run_ranks(n, _collective_worker, (ops, sizes, groups, self.warmup, self.reps))


def _collective_worker(rank: int, n: int, init: str, ops, sizes, groups, warmup: int,
                       reps: int) -> dict | None:
    """One rank (``simulator.calibrate.ranks.run_ranks``): for each group size ``g``, the
    machine's GPUs cut into groups of ``g`` consecutive ranks (``new_subgroups``: placement's
    tp groups; ``g = n``: the whole machine), every group running each op and size at the
    same time, CUDA-event timed between barriers of all the ranks; rank 0 (group ``0 ..
    g-1``) answers. The process group is destroyed whatever happens."""
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=n)
    try:
        out: dict = {}
        for g in groups:
            group = None if g == n else dist.new_subgroups(group_size=g)[0]
            for op in ops:
                for size in sizes:
                    numel = nccl_buffer_bytes(size, g) // 2       # bf16, divisible by g
                    big = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
                    small = torch.randn(numel // g, device="cuda", dtype=torch.bfloat16)
                    other = torch.empty_like(big)
                    call = {"all_reduce": lambda: dist.all_reduce(big, group=group),
                            "all_gather": lambda: dist.all_gather_into_tensor(
                                big, small, group=group),
                            "reduce_scatter": lambda: dist.reduce_scatter_tensor(
                                small, big, group=group),
                            "all_to_all": lambda: dist.all_to_all_single(
                                other, big, group=group)}[op]
                    for _ in range(warmup):
                        call()
                    samples = []
                    for _ in range(reps):
                        dist.barrier()
                        s = torch.cuda.Event(enable_timing=True)
                        e = torch.cuda.Event(enable_timing=True)
                        s.record()
                        call()
                        e.record()
                        e.synchronize()
                        samples.append(s.elapsed_time(e) / 1e3)
                    out[(op, g, numel * 2)] = statistics.median(samples)
                    del big, small, other
            torch.cuda.empty_cache()
        return out if rank == 0 else None
    finally:
        dist.destroy_process_group()
