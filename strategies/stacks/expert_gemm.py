"""How a stack launches a grouped expert GEMM over a GPU's local experts (``ExpertGemmLaunch``),
and so how many kernel fixed times it pays, with the launch paths read from each stack's code
(docs/calibration.md §5.42)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.errors import SpecError

#: how a stack launches one grouped GEMM over a GPU's ``k`` local experts
#: (``ExpertGemmLaunch.kind``)
EXPERT_GEMM_KINDS = ("per_expert", "multi_stream", "fused")


@dataclass(frozen=True)
class GroupedTiles:
    """The output tiles of a one-launch grouped GEMM kernel on one GPU generation, where the
    tiles of every group share the kernel's persistent waves (docs/calibration.md §5.123):
    ``tile`` (rows x columns), or ``small_tile`` for a pass whose output per group has at most
    ``small_edge`` rows or columns; a group's row tiles round up to ``cluster_m`` (the thread
    block cluster along M). ``generation`` and ``dtype``: the ``gemm_kernel.GEMM_GENERATION``
    and GEMM precision the dispatch was read for (no waves on any other). ``source``: where it
    was read."""

    generation: str
    dtype: str
    tile: tuple[int, int]
    small_tile: tuple[int, int]
    small_edge: int
    cluster_m: int = 1
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("tile", "small_tile"):
            t = getattr(self, name)
            if not (isinstance(t, tuple) and len(t) == 2
                    and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in t)):
                raise SpecError(f"framework.expert_gemm_launch.tiles.{name}", t,
                                "must be two integers > 0 (rows, columns)")
        for name in ("small_edge", "cluster_m"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "small_edge"
                                                                     else 1):
                raise SpecError(f"framework.expert_gemm_launch.tiles.{name}", v,
                                "must be an integer >= " + ("0" if name == "small_edge" else "1"))

    def tile_of(self, rows: Any, cols: Any) -> tuple[Any, Any]:
        """(tile rows, tile columns) of a pass whose output per group is ``rows x cols``
        (vectorised)."""
        small = np.logical_or(np.asarray(rows) <= self.small_edge,
                              np.asarray(cols) <= self.small_edge)
        return (np.where(small, self.small_tile[0], self.tile[0]),
                np.where(small, self.small_tile[1], self.tile[1]))


@dataclass(frozen=True)
class ExpertGemmLaunch:
    """How the stack launches one grouped expert GEMM (fc1 or fc2, forward, data or weight
    gradient) over a GPU's ``k`` local experts, and so how many times that GEMM pays the
    kernel's fixed time (``compute.gemm_fixed_s``; docs/calibration.md §5.42).

    ``"per_expert"``: one kernel per expert, one after another on one stream: ``k`` fixed
    times. ``"multi_stream"``: one kernel per expert, round-robin over ``streams`` CUDA streams
    (expert ``i`` on stream ``i mod s``), the streams joined after the last: each stream runs
    ``ceil(k/s)`` kernels in order, the streams side by side, so a kernel's fill, drain and
    tail on one stream are covered by the others' work and the GEMM pays ``ceil(k/s)`` fixed
    times. ``"fused"``: one kernel for every local expert (a grouped kernel): 1. ``source``:
    where the stack's launch path is read. ``tiles``: a fused kernel's output tiles where read
    (``GroupedTiles``): the tiles of all groups fill its waves together; None: no wave
    quantisation (the per-GEMM price)."""

    kind: str = "per_expert"
    streams: int = 1
    source: str = ("not read: one kernel per expert on one stream, the model's count of "
                   "GEMMs (counts.layer_gemms)")
    tiles: GroupedTiles | None = None

    def __post_init__(self) -> None:
        if self.kind not in EXPERT_GEMM_KINDS:
            raise SpecError("framework.expert_gemm_launch.kind", self.kind,
                            f"must be one of {', '.join(EXPERT_GEMM_KINDS)}")
        if isinstance(self.streams, bool) or not isinstance(self.streams, int) \
                or self.streams < 1:
            raise SpecError("framework.expert_gemm_launch.streams", self.streams,
                            "must be an integer >= 1")
        if self.kind != "multi_stream" and self.streams != 1:
            raise SpecError("framework.expert_gemm_launch.streams", self.streams,
                            f"must be 1 for kind {self.kind!r} (streams apply to "
                            "'multi_stream')")
        if self.tiles is not None and (self.kind != "fused"
                                       or not isinstance(self.tiles, GroupedTiles)):
            raise SpecError("framework.expert_gemm_launch.tiles", self.tiles,
                            "must be None or a GroupedTiles, with kind 'fused' (one kernel "
                            "whose tiles share its waves)")

    def fixed_times(self, local: Any) -> Any:
        """Fixed times one grouped GEMM over ``local`` experts per GPU pays (``k`` =
        ``local``, > 0; vectorised): ``k`` per expert, ``ceil(k/s)`` on ``s`` streams, 1
        fused."""
        k = np.asarray(local, dtype=float)
        if self.kind == "fused":
            out = np.ones_like(k)
        else:
            out = np.ceil(k / self.streams)
        return out[()]

#: Transformer Engine's grouped GEMM (``GroupedLinear`` under Megatron-Core's ``TEGroupedMLP``):
#: ``general_grouped_gemm`` -> ``te_general_grouped_gemm`` -> ``nvte_multi_tensor_gemm`` ->
#: ``multi_stream_cublas_gemm``, one ``cublasLtMatmul`` per expert on compute stream
#: ``i % num_streams``, ``num_compute_streams = 4`` a constant (TE v2.9 and v2.14
#: ``common/gemm/cublaslt_gemm.cu``, ``common/util/multi_stream.cpp``); CUTLASS's grouped
#: kernel only on Hopper with ``NVTE_USE_CUTLASS_GROUPED_GEMM=1``, which no recipe read sets.
#: The legacy ``GroupedMLP`` (``grouped_gemm``) launches the same way off sm_80
#: (``GROUPED_MLP_GEMM``)
TE_GROUPED_GEMM = ExpertGemmLaunch(
    "multi_stream", 4,
    "Transformer Engine v2.9/v2.14 multi_stream_cublas_gemm: one cuBLASLt GEMM per expert "
    "round-robin on 4 compute streams (common/util/multi_stream.cpp num_compute_streams = 4)")
#: fanshiqing/grouped_gemm v1.1.4 ``ops.gmm`` (NeMo AutoModel's ``GroupedExpertsDeepEP``,
#: Megatron-Core's legacy ``GroupedMLP``): ``csrc/grouped_gemm.cu`` ``CublasGroupedGemm`` /
#: ``CublasGroupedGemmVariableK``, one ``cublasGemmEx`` per expert on handle ``i %
#: NUM_STREAM``, ``#define NUM_STREAM 4``, on every build but ``sm_80`` (its CUTLASS grouped
#: kernel is compiled for ``GROUPED_GEMM_DEVICE_CAPABILITY == 80`` only: "Use cuBLAS for SM90")
GROUPED_MLP_GEMM = ExpertGemmLaunch(
    "multi_stream", 4,
    "grouped_gemm v1.1.4 csrc/grouped_gemm.cu CublasGroupedGemm: one cublasGemmEx per expert "
    "round-robin on NUM_STREAM = 4 streams off sm_80")

#: torch._grouped_mm in bf16 (torchtitan's ``GroupedExperts``): ATen
#: ``native/cuda/GroupMM.cu`` (pytorch 06c0cf0) ``bf16bf16_grouped_mm`` ->
#: ``dispatch_bf16_grouped_kernel_on_tile_size``: on sm_90 one CUTLASS ptr-array grouped kernel
#: (``KernelPtrArrayTmaWarpSpecialized{Cooperative,Pingpong}``, cluster 2x1x1, the persistent
#: group tile scheduler: no split-K or stream-K), tile 128x256x64 cooperative, or 64x128x128
#: ping-pong when the per-group M or N is at most 128 (``small``); on sm_100 64x128 for every
#: shape (not priced here: no Blackwell measurement)
TORCH_GROUPED_MM = ExpertGemmLaunch(
    "fused", 1,
    "torchtitan v0.2.2 models/moe/moe.py _run_experts_grouped_mm: torch._grouped_mm, one "
    "kernel for every local expert (ATen GroupMM.cu bf16bf16_grouped_mm, CUTLASS)",
    GroupedTiles("sm_90", "bf16", (128, 256), (64, 128), 128, 2,
                 "pytorch 06c0cf0 aten/src/ATen/native/cuda/GroupMM.cu "
                 "dispatch_bf16_grouped_kernel_on_tile_size: sm_90 128x256 cooperative, "
                 "64x128 ping-pong when M or N <= 128; ClusterShape 2x1x1"))

#: Transformer Engine 2.16's fused grouped MLP (``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1`` under
#: its op fuser): ``ops/fused/forward_grouped_mlp.py`` ``ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8``
#: runs fc1 with the GLU (SwiGLU or the clamped quick-GEGLU) and the probability scale in one
#: cuDNN ``grouped_gemm_glu`` kernel and fc2 in one ``grouped_gemm_quant``, for every local
#: expert at once (``backward_grouped_mlp.py`` likewise)
TE_FUSED_GROUPED_MLP = ExpertGemmLaunch(
    "fused", 1,
    "Transformer Engine v2.16 ops/fused/forward_grouped_mlp.py and backward_grouped_mlp.py: "
    "one cuDNN grouped GEMM kernel (grouped_gemm_glu / grouped_gemm_quant) per fc for all "
    "local experts")
