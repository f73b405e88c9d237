"""Framework profiles: the fixed properties of a training software stack that change step time.

A ``Plan`` says how a job is split and which switches are on (FlashAttention, overlap of the
gradient reduction, TP communication overlap); a ``FrameworkProfile`` says what the software
*does* underneath, which a user cannot switch per plan: whether the weight-gradient GEMM
accumulates straight into the fp32 ``main_grad`` buffer or a separate kernel adds each
micro-batch's gradient to it, how many kernels a layer launches, and the idle gap each
kernel boundary costs the GPU. Published runs pick the profile of the software that produced
them (``strategies.reference.cases``); everything else uses ``MEGATRON_CORE``.

Sources (details and numbers in docs/calibration.md):

* Gradient accumulation. Megatron-LM 2021 (``megatron/model/distributed.py``,
  ``_make_param_hook``) runs ``param.main_grad.add_(param.grad.data)`` once per parameter and
  micro-batch: read the main gradient, read the fresh gradient (2 bytes), write the main
  gradient. Megatron-Core / NeMo / Transformer Engine fuse it into the weight-gradient GEMM
  (``gradient_accumulation_fusion``: the GEMM epilogue reads and writes the fp32 main_grad,
  ``beta = 1``), so the only extra traffic is the GEMM's own C operand.
  PyTorch eager (FSDP) accumulates ``.grad`` with autograd's AccumulateGrad kernel (unfused).
* Kernels per layer: counted from the forward of one transformer layer in each stack (norm,
  QKV GEMM, rotary, attention, output GEMM, bias-dropout-add, norm, two or three MLP GEMMs,
  activation, bias-dropout-add, TP collectives); backward launches about twice as many.
* Attention kernel: PyTorch eager stacks run FlashAttention-2 (``flash-attn`` or SDPA's flash
  backend), which has no Hopper code path; the others run the chip's native fused kernel
  (cuDNN through Transformer Engine or XLA). ``GPU.flash_efficiency`` gives each its rate.
* Default recompute (a plan default for published runs that do not state it): Megatron-LM
  2021 recomputed full layers; MaxText (``remat_policy: 'full'`` in configs/base.yml) and
  Praxis (``checkpoint_policy = SAVE_NOTHING``) rematerialise the whole layer by default.
* Launch gap: the GPU-side idle time between dependent kernels on one stream (launch latency
  plus the tail of the previous kernel's last wave), 2-5 us on A100/H100 in public
  microbenchmarks (NVIDIA CUDA Graphs blog: "a few microseconds per kernel launch").
  Charged once per kernel; it only matters for small per-GPU work.
"""
from __future__ import annotations

from dataclasses import dataclass

from strategies.errors import SpecError


@dataclass(frozen=True)
class FrameworkProfile:
    """What a training stack does underneath a plan.

    ``grad_accum_fusion``: the weight-gradient GEMM accumulates into the fp32 main gradient
    (no separate per-micro-batch add kernel). ``kernels_per_layer``: kernels one transformer
    layer's forward launches (the backward launches twice as many). ``launch_gap_s``: GPU idle
    seconds per kernel boundary. ``attention_kernel``: ``"native"`` or ``"fa2"``
    (``GPU.flash_efficiency``). The ``default_*`` fields are the plan switches the stack uses
    unless a source says otherwise (``strategies.reference.cases`` reads them).
    """

    name: str
    description: str
    grad_accum_fusion: bool
    kernels_per_layer: int
    launch_gap_s: float
    default_flash_attn: bool
    default_overlap_grad_reduce: bool
    default_overlap_param_gather: bool
    default_tp_comm_overlap: bool
    attention_kernel: str = "native"
    default_recompute: str = "none"

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("framework.name", self.name, "must be a non-empty string")
        if not (isinstance(self.kernels_per_layer, int) and self.kernels_per_layer >= 0):
            raise SpecError("framework.kernels_per_layer", self.kernels_per_layer,
                            "must be an integer >= 0")
        if self.default_recompute not in ("none", "selective", "full"):
            raise SpecError("framework.default_recompute", self.default_recompute,
                            "must be 'none', 'selective' or 'full'")
        if self.attention_kernel not in ("native", "fa2"):
            raise SpecError("framework.attention_kernel", self.attention_kernel,
                            "must be 'native' or 'fa2'")
        if not 0 <= self.launch_gap_s < 1e-3:
            raise SpecError("framework.launch_gap_s", self.launch_gap_s,
                            "must be in [0, 1 ms) seconds")


LAUNCH_GAP_S = 3e-6   # seconds of GPU idle per kernel boundary (see the module docstring)

MEGATRON_LM_2021 = FrameworkProfile(
    name="megatron-lm-2021",
    description="Megatron-LM v2 (Narayanan et al. 2021; also Megatron-DeepSpeed 2022): apex fused "
                "kernels, unfused softmax, blocking communication, main_grad.add_ per micro-batch",
    grad_accum_fusion=False, kernels_per_layer=20, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=False, default_overlap_grad_reduce=False,
    default_overlap_param_gather=False, default_tp_comm_overlap=False, default_recompute="full")

MEGATRON_CORE = FrameworkProfile(
    name="megatron-core",
    description="Megatron-Core / NeMo 2023+ with Transformer Engine: fused kernels, "
                "FlashAttention, gradient-accumulation fusion, DP and TP communication overlap",
    grad_accum_fusion=True, kernels_per_layer=16, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=True, default_overlap_grad_reduce=True,
    default_overlap_param_gather=True, default_tp_comm_overlap=True)

PYTORCH_EAGER = FrameworkProfile(
    name="pytorch-eager",
    description="PyTorch eager with FSDP or DDP (MosaicML Composer, torchtitan without compile): "
                "FlashAttention, unfused elementwise kernels, AccumulateGrad per micro-batch",
    grad_accum_fusion=False, kernels_per_layer=30, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=True, default_overlap_grad_reduce=True,
    default_overlap_param_gather=True, default_tp_comm_overlap=False, attention_kernel="fa2")

JAX_XLA = FrameworkProfile(
    name="jax-xla",
    description="JAX/XLA (MaxText, PAXML): compiler-fused elementwise work, FSDP-style "
                "sharding, gradients accumulated by a separate fused add",
    grad_accum_fusion=False, kernels_per_layer=16, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=True, default_overlap_grad_reduce=True,
    default_overlap_param_gather=True, default_tp_comm_overlap=False, default_recompute="full")

PROFILES: dict[str, FrameworkProfile] = {p.name: p for p in (MEGATRON_LM_2021, MEGATRON_CORE,
                                                            PYTORCH_EAGER, JAX_XLA)}
DEFAULT = MEGATRON_CORE


def get_profile(name: str | FrameworkProfile | None) -> FrameworkProfile:
    """A profile by name (``None``: the default, Megatron-Core)."""
    if name is None:
        return DEFAULT
    if isinstance(name, FrameworkProfile):
        return name
    key = str(name).strip().lower()
    if key not in PROFILES:
        raise SpecError("framework", name, f"unknown framework; known: {', '.join(PROFILES)}")
    return PROFILES[key]
