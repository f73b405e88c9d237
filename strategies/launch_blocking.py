"""Synchronous kernel launches (``CUDA_LAUNCH_BLOCKING=1``): what each kernel boundary costs.

With ``CUDA_LAUNCH_BLOCKING=1`` every CUDA call returns only once the GPU has finished it, so
the host cannot queue work ahead: between two kernels the GPU waits for the whole host-side
path of the next operator (Python, the PyTorch dispatcher and autograd, the launch itself, the
return from the synchronisation). That time replaces the asynchronous launch gap
(``profile.LAUNCH_GAP_S``) at every kernel boundary; the cost model already charges one gap
per boundary (``FrameworkProfile.kernels_per_layer`` per layer forward, twice in the
backward, ``strategies.cost.elementwise_time.launch_time``), so a run with synchronous launches is
its stack's profile with ``launch_gap_s = SYNC_LAUNCH_GAP_S`` (``with_launch_blocking``).

Source of the figure (docs/calibration.md §3.12): BigScience ran every large Jean Zay job with
``CUDA_LAUNCH_BLOCKING=1`` because NCCL hung without it (``bigscience-workshop/bigscience``
``train/tr11-176B-ml/chronicles-prequel.md``, "dealing with JZ hanging on the large model":
320 GPUs "always hangs" asynchronous; ``tr11-176B-ml.slurm``: "do not remove or the training
will hang"), and measured a 200B model both ways on 80 GPUs at GBS=512: 97.20 TFLOP/s
asynchronous, 91.04 synchronous (its layout, TP=8 PP=10 DP=1 MBS=1 with full recomputation,
80 layers of hidden 14400, is the one the page's preceding 80-GPU runs state). ``JZ_AB`` holds
that measurement and ``sync_launch_gap_s`` turns it into seconds per kernel boundary (a
closed form, no fit to a validation run). The same page saw no difference on 160 GPUs
(84.59 vs 84.44 TFLOP/s), which this model does not explain (docs/calibration.md §3.12).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
from strategies.stacks.profile import LAUNCH_GAP_S, FrameworkProfile


@dataclass(frozen=True)
class LaunchAB:
    """One model measured with asynchronous and synchronous launches, and a step time of the
    same model under the same TFLOP/s formula (to turn TFLOP/s into seconds).

    ``tflops_async``/``tflops_sync``: the A/B at ``gbs`` sequences per step; ``ref_step_s``
    and ``ref_tflops``: a step of ``ref_gbs`` sequences (FLOPs per step are linear in the
    batch). ``pp``, ``layers``, ``microbatches``: the pipeline (layers evenly split);
    ``passes_per_layer``: kernel-launch passes per layer and micro-batch in units of a
    forward's launches (4 with full recomputation: forward, recomputed forward, backward
    twice)."""

    tflops_async: float
    tflops_sync: float
    gbs: int
    ref_step_s: float
    ref_tflops: float
    ref_gbs: int
    pp: int
    layers: int
    microbatches: int
    passes_per_layer: int = 4

    def async_step_s(self) -> float:
        """Seconds of the asynchronous step at ``gbs``: the reference step's FLOPs scaled to
        ``gbs`` over the asynchronous rate."""
        return self.ref_step_s * (self.gbs / self.ref_gbs) * self.ref_tflops / self.tflops_async

    def extra_s(self) -> float:
        """Seconds per step that synchronous launches add: ``T_async (R_async/R_sync - 1)``."""
        return self.async_step_s() * (self.tflops_async / self.tflops_sync - 1.0)

    def boundaries(self, kernels_per_layer: int) -> int:
        """Kernel boundaries on the critical path of one step: ``(m + pp - 1)`` pipeline slots
        times the layers of a stage times the launches of one layer and micro-batch."""
        return ((self.microbatches + self.pp - 1) * (self.layers // self.pp)
                * self.passes_per_layer * kernels_per_layer)


#: BigScience's A/B on Jean Zay (chronicles-prequel.md): 200B (80 layers, hidden 14400, 96
#: heads, vocab 250k), TP=8 PP=10 DP=1 MBS=1 on 80 A100-80GB; GBS=512: 97.20 TFLOP/s
#: asynchronous, 91.04 synchronous; the same model at GBS=2048: 844.81 s at 98.87 TFLOP/s
#: (02-17 table, the same TFLOP/s formula).
JZ_AB = LaunchAB(tflops_async=97.20, tflops_sync=91.04, gbs=512, ref_step_s=844.81,
                 ref_tflops=98.87, ref_gbs=2048, pp=10, layers=80, microbatches=512)


def sync_launch_gap_s(ab: LaunchAB = JZ_AB,
                      kernels_per_layer: int = MEGATRON_DEEPSPEED.kernels_per_layer,
                      async_gap_s: float = LAUNCH_GAP_S) -> float:
    """Seconds of GPU idle per kernel boundary with synchronous launches: the asynchronous gap
    plus the A/B's extra seconds per step over its kernel boundaries,
    ``g_async + T_async (R_async/R_sync - 1) / ((m + pp - 1) (L/pp) 4 k)``."""
    return async_gap_s + ab.extra_s() / ab.boundaries(kernels_per_layer)


#: seconds per kernel boundary under ``CUDA_LAUNCH_BLOCKING=1`` (``sync_launch_gap_s``:
#: 46.6e-6 for Megatron-DeepSpeed's 20 kernels per layer forward)
SYNC_LAUNCH_GAP_S = sync_launch_gap_s()


#: seconds of the host's own path per kernel it launches (Python, the PyTorch dispatcher and
#: autograd, the launch, 43.6e-6): what synchronous launches add per kernel boundary over the
#: asynchronous gap, ``SYNC_LAUNCH_GAP_S - LAUNCH_GAP_S``. Read where the GPU waits for the
#: host kernel by kernel (``strategies.cost.moe_time.moe_host_time``).
HOST_PATH_S = SYNC_LAUNCH_GAP_S - LAUNCH_GAP_S


def with_launch_blocking(fw: FrameworkProfile) -> FrameworkProfile:
    """Stack ``fw`` run with ``CUDA_LAUNCH_BLOCKING=1``: every kernel boundary costs
    ``SYNC_LAUNCH_GAP_S`` instead of its asynchronous gap."""
    return replace(fw, launch_gap_s=SYNC_LAUNCH_GAP_S,
                   description=fw.description + "; synchronous kernel launches "
                                                "(CUDA_LAUNCH_BLOCKING=1)")
