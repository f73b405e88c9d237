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
    where the stack's launch path is read."""

    kind: str = "per_expert"
    streams: int = 1
    source: str = ("not read: one kernel per expert on one stream, the model's count of "
                   "GEMMs (counts.layer_gemms)")

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
