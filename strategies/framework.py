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
* Plan features each stack can run (``FrameworkProfile.schedules`` and the feature fields;
  ``check_plan`` refuses the rest, the search never proposes them). Megatron-Core:
  ``megatron/core/pipeline_parallel/schedules.py`` (``get_forward_backward_func``: no
  pipelining, 1F1B, interleaved 1F1B; no GPipe), the distributed optimizer (ZeRO-1) and
  Megatron-FSDP (``--data-parallel-sharding-strategy optim_grads`` / ``optim_grads_params``:
  ZeRO-2/3), context, sequence and expert parallelism, ``--tp-comm-overlap``. Megatron-LM
  2021-22: 1F1B and interleaving (Narayanan et al. 2021), sequence parallelism and selective
  recomputation (Korthikanti et al. 2022), the distributed optimizer (2022); no context or
  expert parallelism, no TP communication overlap. Megatron-DeepSpeed: DeepSpeed's pipeline
  engine runs its own ``TrainSchedule`` (1F1B order, ``runtime/pipe/schedule.py``) and
  asserts ZeRO stage < 2 with pipelining (``runtime/pipe/engine.py``); no interleaving, no
  Megatron context parallelism, no TP overlap, no sequence parallelism (bigscience-workshop/
  Megatron-DeepSpeed forked Megatron-LM before v3 brought ``--sequence-parallel``, 2022).
  torchtitan (``torch.distributed.pipelining``, ``schedules.py`` ``get_schedule_class``:
  ``GPipe``, ``1F1B``, ``Interleaved1F1B``, ``LoopedBFS``, ``InterleavedZeroBubble``,
  ``ZBVZeroBubble``, ``DualPipeV``; torchtitan's ``distributed/pipeline_parallel.py`` places
  the last two's stages in a V): our gpipe, 1f1b, interleaved, zb-v and dualpipev
  (``TORCHTITAN_SCHEDULE_NAMES``), FSDP2 (ZeRO-3, or ZeRO-2-like with
  ``reshard_after_forward=False``) or DDP (only as the sole parallelism, ``ddp_sole``), TP
  with sequence parallelism, context and expert parallelism (carved from the FSDP ranks,
  ``ep_from_fsdp``); TP communication overlap is PyTorch's async TP (``tp_overlap``
  ``"async-tp"``: ``--compile.enable_async_tensor_parallel``, which needs ``torch.compile``
  and sequence parallelism; docs/calibration.md §5.50); its
  op-level selective activation checkpointing (``recompute=op``, ``SelectiveAC`` in
  ``torchtitan/distributed/activation_checkpoint.py``) is its alone, and its selective modes
  (``op`` or every N-th layer) have no Megatron attention-core recomputation
  (``recompute=selective`` refused). Partial recomputation
  (``recompute_layers``, ``strategies.cost.recompute``): Megatron-Core and Megatron-LM (v3,
  2022: ``--recompute-method uniform|block --recompute-num-layers``) both methods; DeepSpeed's
  pipeline engine checkpoints groups of ``activation_checkpoint_interval`` layers (uniform)
  only; torchtitan's integer ``selective_ac_option`` (every N-th layer) is another rule, not
  modelled. Per-module selective recomputation (``recompute_modules``): Megatron-Core's
  ``--recompute-modules`` (``transformer_config.py``); Megatron-LM 2022 recomputes the core
  attention only.
  MosaicML Composer (``pytorch-eager``): FSDP (``FULL_SHARD`` ZeRO-3, ``SHARD_GRAD_OP``
  ZeRO-2) or DDP only (no tensor or pipeline parallelism). JAX/XLA (MaxText): a GPipe-style pipeline (``pipeline_parallel_layers``,
  circular repeats aside), FSDP-style sharding (ZeRO-3) or replication, an expert mesh axis
  that is one of the batch axes (``ep_in_dp``), remat policies ``minimal_with_context``,
  ``minimal`` and ``full`` (our none, selective, full).
  An exporter (``strategies.export``) refuses what the stack cannot run by these rules
  (``plan_violations``), never by its own copy of them.
* Pipeline layouts (``layouts``, ``pipeline_split``; docs/layout.md): Megatron-Core takes its
  layout string, first/last-stage counts and embedding/loss slots. DeepSpeed's
  ``PipelineModule`` splits by ``partition_method`` (``runtime/pipe/module.py``
  ``_partition_layers``: ``uniform``, ``parameters``, ``type:REGEX`` balanced by
  ``runtime/utils.py`` ``partition_balanced``): BLOOM's ``type:transformer|embedding`` is the
  slot layout; no first/last counts, no layout grammar. torchtitan's
  ``module_fqns_per_model_part`` names any modules per chunk (its default split counts the
  embedding and the output as a layer each). MaxText vmaps one stage body
  (``num_layers_per_pipeline_stage`` layers on every stage): even only.
* ZeRO-3 gathers (``zero3_gather``): DeepSpeed v0.3.13-v0.5 (2021; ``partition_parameters.py``
  ``_allgather_param``, ``stage3.py`` ``fetch_sub_module``) all-gathers one parameter tensor
  at a time after a ``torch.cuda.synchronize()`` and reduce-scatters one gradient at a time,
  so its ZeRO-3 communication is exposed (docs/calibration.md §6); Megatron-FSDP, FSDP and
  XLA gather a layer's worth at once behind compute (``"bucketed"``).
* Full recomputation that stops early (``recompute_early_stop``): PyTorch's non-reentrant
  ``torch.utils.checkpoint`` (``use_reentrant=False``; early stop the default since PyTorch
  2.1, pytorch/pytorch#96866) replays a checkpointed layer in its backward only until every
  tensor the forward saved has been saved again: the pack hook of the last saved tensor
  raises ``_StopRecomputationError``, and autograd saves an op's inputs before it runs the
  op's kernel, so the layer's last GEMM (the MLP's down projection, whose input and weight
  are the last tensors saved) and what follows it are not rerun. Composer wraps the blocks
  with ``checkpoint_wrapper(CheckpointImpl.NO_REENTRANT)`` (llm-foundry's benchmark sweep
  sets ``activation_checkpointing_reentrant: False``); torchtitan's full AC is
  ``ptd_checkpoint_wrapper`` (non-reentrant). Megatron's ``CheckpointFunction`` and
  DeepSpeed's checkpointing are reentrant (the whole forward reruns). JAX's remat stops at
  the same GEMM for another reason: ``jax.checkpoint``'s partial evaluation
  (``jax/_src/ad_checkpoint.py`` ``remat_partial_eval``) dead-code-eliminates the recomputed
  forward down to the residuals the backward reads (``pe.dce_jaxpr``), and XLA's DCE drops
  what is left unused; the down projection's output is read by no backward op (the residual
  add's backward needs no operand, the next layer's input is the scan carry MaxText saves as
  ``decoder_layer_input``), so it is never rerun, under ``full`` or any named policy
  (docs/calibration.md §3.17). The same rule holds for selective recomputation of the
  ``mlp`` module on such a stack: the MLP's first GEMMs and activation are redone, not
  its down projection.
* MaxText's named remat policies (``strategies.remat_policies``): a policy saves some of the
  layer's named tensors (``query_proj`` ... ``mlpwo``, ``context``); what it does not save
  and the backward reads is recomputed, which maps onto selective recomputation of the
  modules ``core_attn`` (the attention output, ``context``, not saved: the fused attention
  forward reruns, ``recompute_flash_fwd``), ``layernorm`` (the norms, never named, always
  redone) and ``mlp`` (``mlpwi_0``/``mlpwi_1`` not saved).
* DeepSpeed's BF16_Optimizer (``bf16_optimizer``; ``runtime/bf16_optimizer.py`` and
  ``runtime/pipe/engine.py`` ``_bf16_reduce_grads``, v0.6): in bf16 each micro-batch's 16-bit
  gradient is cast to fp32 and added into the fp32 gradient (``BF16_ACCUM_BYTES``), and the
  fp32 gradients are all-reduced over dp under its own ZeRO-1 (docs/calibration.md §3.12).
* Sharded data parallelism's passes over the unsharded gradient (``sharded_grad_passes``):
  besides the reduce-scatter itself, PyTorch's FSDP1 (Composer) assembles each unit's flat
  gradient (the backward of the ``split`` that made the weight views), casts it to the reduce
  dtype (Composer's ``mixed_precision: DEFAULT``: bf16 parameters, fp32 reduction) and
  pre-divides it (``reduce_scatter_hook``), every micro-batch; FSDP2 (torchtitan) copies and
  casts it into the reduce-scatter input once. Each is a memory-bound kernel over the whole
  layer's gradient, not its ``1/dp`` shard (docs/calibration.md §3.14).
* Launch gap: the GPU-side idle time between dependent kernels on one stream (launch latency
  plus the tail of the previous kernel's last wave), 2-5 us on A100/H100 in public
  microbenchmarks (NVIDIA CUDA Graphs blog: "a few microseconds per kernel launch").
  Charged once per kernel; it only matters for small per-GPU work. A run with synchronous
  launches (``CUDA_LAUNCH_BLOCKING=1``) pays the host's time per kernel instead
  (``strategies.launch_blocking``).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from strategies.errors import SpecError
from strategies.cost.system import MCORE_BUCKET_FLOOR, MCORE_BUCKET_PER_DP
from strategies.cost.recompute import METHOD_CODE, modules_mask
from strategies.cost.recompute import MODULES as RECOMPUTE_MODULES
from strategies.plan import DISPATCHERS, RECOMPUTE
from strategies.plan_arrays import RECOMPUTE_CODE
from strategies.schedules import schedule_code, schedule_names
from strategies.schedules.base import Rule
from topologies.precision import DTYPES

if TYPE_CHECKING:
    from strategies.plan import Plan
    from topologies.gpus import GPU

#: the ways a plan gives an uneven pipeline layout (docs/layout.md): Megatron's layout string
#: (plan ``layout``), the first/last stage's layer counts (``first_stage_layers``,
#: ``last_stage_layers``), the embedding and the loss as layer slots (``account_embedding``,
#: ``account_loss``), any count per rank (``layers_per_stage``, docs/heterogeneous.md)
LAYOUT_WAYS = ("string", "first_last", "slots", "per_stage")


@dataclass(frozen=True)
class StepPasses:
    """The passes a stack runs once per optimizer step besides Adam's own update (each a
    memory-bound kernel over a whole buffer, ``strategies.cost.step`` times them;
    docs/formulas.md §10). Over the full gradient buffer of the stage (every parameter the
    GPU holds): ``zero_grad`` (the buffer zeroed before the first micro-batch: write),
    ``scale_grad`` (``grad *= 1/dp`` before the reduction: read and write), ``check_grad``
    (a norm of each bucket, the NaN/Inf check, before the reduction: read). Over the
    parameters the GPU updates (its optimizer shard): ``grad_norm`` (the L2 norm for
    clipping: read the fp32 gradient), ``clip_scale`` (the gradient multiplied by the clip
    factor every step, clipped or not: read and write) and ``param_copy`` (the fp32 master weights copied to
    the 16-bit model weights in a separate kernel: read 4, write ``param_bytes``).
    ``tied_reduce``: the gradient of a tied word embedding is all-reduced between the first
    and the last pipeline stage once per step (``pp > 1``, embedding and LM head on
    different ranks). ``adam_elements``: Adam's update as the stack runs it, in fp32
    elements read or written per updated parameter when it is a chain of unfused kernels
    (each kernel streams every tensor it reads and writes once); 0: one fused kernel,
    ``SystemConfig.adam_step_bytes`` (``compute.optimizer_time``)."""

    zero_grad: bool = True
    scale_grad: bool = True
    check_grad: bool = True
    grad_norm: bool = True
    clip_scale: bool = False
    param_copy: bool = True
    tied_reduce: bool = True
    adam_elements: float = 0.0
    #: where each pass comes from, ``(pass, source)``
    sources: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        names = [f for f in self.__dataclass_fields__ if f != "sources"]
        if not (isinstance(self.adam_elements, (int, float)) and 0 <= self.adam_elements < 1e3):
            raise SpecError("framework.step.adam_elements", self.adam_elements,
                            "must be a number of fp32 elements per parameter in [0, 1000)")
        for name, _ in self.sources:
            if name not in names:
                raise SpecError("framework.step.sources", name,
                                f"must name one of {', '.join(names)}")


@dataclass(frozen=True)
class LossPasses:
    """The memory-bound passes of the softmax cross-entropy over the 16-bit logits of the LM
    head, as the stack runs them: ``fwd`` and ``bwd`` are ``(pass, bytes per logit element
    read plus written)``; ``compute.lm_head_time_split`` charges ``fwd_bytes`` and
    ``bwd_bytes`` times the GPU's logit elements (tokens x vocabulary / tp) over the usable
    HBM bandwidth. ``source``: where the passes were read."""

    fwd: tuple[tuple[str, float], ...] = (("pass 1 (fp32, read + write)", 8.0),
                                          ("pass 2 (fp32, read)", 4.0))
    bwd: tuple[tuple[str, float], ...] = (("pass 1 (fp32, read + write)", 8.0),
                                          ("pass 2 (fp32, read)", 4.0))
    source: str = ("assumed: three fp32 passes over the logits each way, 12 bytes per element "
                   "(not read from the stack's code)")
    #: bytes per logit element (per GPU: tokens x vocabulary / tp) alive at the loss's
    #: memory peak, the fp32 softmax it keeps for the backward included
    #: (``strategies.memory.activations.output_bytes``); 4: the fp32 logits of Megatron's
    #: estimator (``theoretical_memory_usage``, Korthikanti Sec. 4.3), an assumption where
    #: the stack's code was not read. docs/calibration.md §5.19.
    peak_bytes: float = 4.0
    peak_source: str = "assumed: the fp32 logits alone (Megatron's estimator)"
    #: bytes per logit element at the peak where the stack computes the loss over logits
    #: sharded on the vocabulary (tp > 1) by another code path (torchtitan's
    #: ``loss_parallel``, docs/calibration.md §5.74); None: ``peak_bytes`` at every tp
    peak_bytes_sharded: float | None = None
    peak_sharded_source: str = ""

    def __post_init__(self) -> None:
        for name in ("peak_bytes", "peak_bytes_sharded"):
            b = getattr(self, name)
            if name == "peak_bytes_sharded" and b is None:
                continue
            if isinstance(b, bool) or not isinstance(b, (int, float)) or not 2 <= b < 100:
                raise SpecError(f"framework.loss.{name}", b,
                                "must be bytes per logit element in [2, 100)")
        for where, passes in (("fwd", self.fwd), ("bwd", self.bwd)):
            for name, b in passes:
                if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b < 100:
                    raise SpecError(f"framework.loss.{where}", f"{name}: {b}",
                                    "must be bytes per logit element in (0, 100)")

    def peak_bytes_at(self, tp):
        """Bytes per logit element at the loss's peak at tensor-parallel size ``tp`` (a
        number, or an array per plan): ``peak_bytes_sharded`` where ``tp > 1`` and the stack
        states one, else ``peak_bytes``. The one rule the scalar and array memory read."""
        if self.peak_bytes_sharded is None:
            return self.peak_bytes
        out = np.where(np.asarray(tp) > 1, self.peak_bytes_sharded, self.peak_bytes)
        return float(out) if out.ndim == 0 else out

    @property
    def fwd_bytes(self) -> float:
        """Bytes per logit element the forward streams."""
        return float(sum(b for _, b in self.fwd))

    @property
    def bwd_bytes(self) -> float:
        """Bytes per logit element the backward streams."""
        return float(sum(b for _, b in self.bwd))


#: Megatron's unfused vocab-parallel cross-entropy (``_VocabParallelCrossEntropy``), read in
#: NVIDIA/Megatron-LM core_r0.8.0 ``megatron/core/tensor_parallel/cross_entropy.py`` (the
#: default: ``cross_entropy_loss_fusion=False``, ``model_parallel_config.py``) and in the 2021
#: ``megatron/mpu/cross_entropy.py`` with ``gpt_model.py``'s ``output.float()``: every step
#: over the ``[s, b, V/tp]`` logits is its own kernel (2-byte logits, 4-byte fp32 copy). The
#: gathers at the target index and the ``[s, b]`` vectors are negligible and not counted.
MEGATRON_CROSS_ENTROPY = LossPasses(
    fwd=(("logits.float(): read 2, write 4", 6.0),
         ("torch.max over the vocabulary: read 4", 4.0),
         ("logits -= max (in place): read 4, write 4", 8.0),
         ("torch.exp(out=logits): read 4, write 4", 8.0),
         ("exp_logits.sum: read 4", 4.0),
         ("exp_logits.div_(sum) -> softmax saved for backward: read 4, write 4", 8.0)),
    bwd=(("softmax.mul_(grad_output): read 4, write 4", 8.0),
         ("fp32 gradient cast to the 16-bit logits' dtype (the .float()'s backward; "
          "autograd's dtype check under core's Function): read 4, write 2", 6.0)),
    source="Megatron's unfused _VocabParallelCrossEntropy: NVIDIA/Megatron-LM core_r0.8.0 "
           "megatron/core/tensor_parallel/cross_entropy.py (cross_entropy_loss_fusion=False "
           "by default, megatron/core/model_parallel_config.py); 2021 megatron/mpu/"
           "cross_entropy.py with megatron/model/gpt_model.py's output.float()",
    # forward: the 16-bit logits (2, still the caller's) beside their fp32 copy, which max,
    # sub_, exp(out=) and div_ turn into the saved softmax in place (4); backward: the
    # gradient is computed in place in that buffer (mul_) and cast to 16 bits (2)
    peak_bytes=6.0,
    peak_source="Megatron's _VocabParallelCrossEntropy (the passes above): 16-bit logits + "
                "their fp32 copy in the forward, the in-place fp32 gradient + its 16-bit cast "
                "in the backward, 2 + 4 = 6 bytes per element")


#: how a stack launches one grouped GEMM over a GPU's ``k`` local experts
#: (``ExpertGemmLaunch.kind``)
@dataclass(frozen=True)
class BucketRule:
    """The stack's data-parallel gradient bucket: ``max(floor_params, per_dp_params x dp)``
    parameters (``SystemConfig.dp_bucket_params`` applies it; ``stack_system`` installs it;
    a job's ``SystemConfig.bucket_params`` > 0 overrides it). docs/calibration.md §5.86.

    >>> NEMO_BUCKET.floor_params == 128 * 1024 ** 2, MCORE_BUCKET.per_dp_params
    (True, 1000000.0)
    """

    floor_params: float
    per_dp_params: float = 0.0
    source: str = ""
    #: only pipeline rank 0's first model chunk is cut into buckets of that size; every
    #: other rank's and chunk's gradient is one bucket per buffer, reduced once its whole
    #: backward has ended (Megatron-Core DDP: ``bucket_size = None`` where ``pp_rank > 0``,
    #: ``training.get_model``'s ``disable_bucketing=(model_chunk_idx > 0)``; §5.92)
    first_chunk_only: bool = False

    def chunk_bucketed(self, pp_rank: int, chunk: int, mirrored: bool = False,
                       zero2: bool = False) -> bool:
        """Whether pipeline rank ``pp_rank``'s model chunk ``chunk`` is cut into buckets
        (else its gradient is one bucket). DualPipe's two copies (``mirrored``) and ZeRO-2's
        per-micro-batch reduce-scatters (``zero2``), neither of which Megatron-Core's DDP
        runs, keep their buckets.

        >>> MCORE_BUCKET.chunk_bucketed(0, 0), MCORE_BUCKET.chunk_bucketed(1, 0), \
MCORE_BUCKET.chunk_bucketed(0, 1), MODEL_BUCKET.chunk_bucketed(3, 1)
        (True, False, False, True)
        """
        return not self.first_chunk_only or mirrored or zero2 or (pp_rank == 0 and chunk == 0)

    def whole_share(self, pp: Any, v: Any, mirrored: Any, zero2: Any) -> Any:
        """Share of a non-first pipeline rank's parameters in its last-reduced bucket (arrays
        over plans): ``1/v`` (a chunk's, one bucket each) where that rank is not bucketed
        (``chunk_bucketed``; ``pp > 1``), else 0 (the size rule applies). Rank 0 keeps
        the size rule (its first chunk is the last one reduced)."""
        whole = self.first_chunk_only & (np.asarray(pp) > 1) & ~np.asarray(mirrored, bool) \
            & ~np.asarray(zero2, bool)
        return np.where(whole, 1.0 / np.maximum(np.asarray(v, float), 1.0), 0.0)


#: Megatron-Core DDP's default (``bucket_size`` None): ``max(40000000, 1000000 * dp)``,
#: megatron/core/distributed/distributed_data_parallel.py, unchanged core_r0.8.0-core_v0.17.0
MCORE_BUCKET = BucketRule(MCORE_BUCKET_FLOOR, MCORE_BUCKET_PER_DP,
                          "megatron/core/distributed/distributed_data_parallel.py: bucket_size = "
                          "max(40000000, 1000000 * get_data_parallel_world_size()); "
                          "bucket_size = None where pp_rank > 0 or disable_bucketing "
                          "(training.py get_model: model_chunk_idx > 0)",
                          first_chunk_only=True)
#: NeMo 2 (``MegatronCommOverlapCallback._get_optimizer_overlap_cfgs``, v2.0.0-v2.5) and
#: Megatron-Bridge (``training/comm_overlap.py``, the same method) set ``bucket_size = 128 *
#: 1024 * 1024`` whenever dp > 1 (at dp = 1 nothing is reduced)
NEMO_BUCKET = BucketRule(128.0 * 1024 ** 2, 0.0,
                         "nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py and "
                         "Megatron-Bridge training/comm_overlap.py: "
                         "comm_overlap_cfg.bucket_size = 128 * 1024 * 1024 if dp > 1; "
                         "Megatron-Core's DDP buckets pp rank 0's first chunk only",
                         first_chunk_only=True)
#: DeepSpeed ZeRO-1/2 ``reduce_bucket_size``, default 5e8 elements
#: (deepspeed/runtime/zero/config.py ``reduce_bucket_size: int = Field(pp_int(5e8), ge=0)``)
DEEPSPEED_BUCKET = BucketRule(5e8, 0.0, "deepspeed/runtime/zero/config.py: "
                                        "reduce_bucket_size default 5e8 elements")
#: stacks whose gradient bucketing the model does not take from their code (Megatron-LM 2021's
#: contiguous buffer, FSDP's per-module units, XLA's combiner, HAI-LLM's unpublished code):
#: the model's former single size, 40M parameters, kept so their figures do not move
MODEL_BUCKET = BucketRule(MCORE_BUCKET_FLOOR, 0.0,
                          "not from the stack's code: the model's 40M-parameter default")


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


@dataclass(frozen=True)
class FrameworkProfile:
    """What a training stack does underneath a plan.

    ``grad_accum_fusion``: the weight-gradient GEMM accumulates into the fp32 main gradient
    (no separate per-micro-batch add kernel). ``kernels_per_layer``: kernels one transformer
    layer's forward launches (the backward launches twice as many). ``launch_gap_s``: GPU idle
    seconds per kernel boundary. ``attention_kernel``: ``"native"`` or ``"fa2"``
    (``GPU.flash_efficiency``). ``recompute_early_stop``: full recomputation reruns a layer's
    forward only up to its last GEMM (PyTorch's non-reentrant checkpoint, module docstring).
    The ``default_*`` fields are the plan switches the stack uses
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
    schedules: tuple[str, ...] = ("1f1b", "interleaved")
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    zero_with_pp: int = 3
    # the ZeRO stages the stack runs with hybrid sharding (plan dp_shard < dp; sources at the
    # profiles); () none
    hybrid_zero: tuple[int, ...] = ()
    max_tp: int | None = None
    max_pp: int | None = None
    context_parallel: bool = True
    #: how the stack runs context parallelism: ``"ring"``, Transformer Engine's p2p ring
    #: (K/V sends hidden under the attention core, ``SystemConfig.cp_exposed_fraction``
    #: exposed), ``"allgather"``, K/V all-gathered before the attention core and their
    #: gradients reduce-scattered after it, exposed (``cp_exposed_fraction``), or
    #: ``"torch"``, PyTorch's ``context_parallel`` (all-gather rotater, fp32 merges and
    #: dK/dV ring: ``strategies.cost.ring_attention``)
    cp_impl: str = "ring"
    #: heads of the K/V block a context-parallel rank sends (``counts.sent_kv_heads``):
    #: ``"kv"``, the model's KV heads, or ``"query"`` where the model repeats K and V to every
    #: query head before attention
    cp_kv_heads: str = "kv"
    #: the memory-bound kernels of a layer (``counts.elementwise_bytes_fwd``): ``"fused"``,
    #: Megatron's fused norm, bias-dropout-add, activation and rotary kernels, or ``"eager"``,
    #: the model's own eager PyTorch ops (torchtitan's Llama without torch.compile:
    #: ``counts.eager_elementwise_bytes_fwd``), or ``"compiled"``, the same ops under
    #: torch.compile (``counts.compiled_elementwise_bytes_fwd``; ``compiled``)
    elementwise_kernels: str = "fused"
    #: each ZeRO-3 all-gather is copied out of the gathered buffer into the parameters on the
    #: compute stream (FSDP2's per-parameter sharding: ``compute.gather_copy_out_time``)
    gather_copy_out: bool = False
    #: the sequence-parallel collectives gather and scatter the activations of ``[b, s, h]``
    #: along the sequence, dim 1 (torchtitan's ``Shard(1)`` TP plan before its batch fold,
    #: 73aed7f6c, 2026-08), so each runs a full-tensor ``cat`` on the compute stream:
    #: after an all-gather, before a reduce-scatter (PyTorch ``_functional_collectives.py``
    #: ``all_gather_tensor``/``reduce_scatter_tensor`` with ``gather_dim``/``scatter_dim``
    #: != 0); Megatron's ``[s, b, h]`` gathers along dim 0, no copy.
    #: ``compute.tp_layout_copy_time`` (docs/calibration.md §5.80)
    tp_seq_dim_copies: bool = False
    #: the TP collectives outside the blocks are priced: the embedding's reduce-scatter
    #: (forward) and all-gather (backward), the output layer's all-gather and reduce-scatter
    #: and the vocabulary-parallel loss's three fp32 all-reduces (torchtitan's
    #: ``tok_embeddings``/``output`` plan and ``loss_parallel``; ``cost.tp_ends``,
    #: docs/calibration.md §5.84; Megatron's ``VocabParallelEmbedding``, vocabulary-parallel
    #: output layer and ``vocab_parallel_cross_entropy``, §5.88); False: unpriced (stacks
    #: whose code is not read: JAX/XLA, plain PyTorch)
    tp_end_collectives: bool = False
    #: fp32 elements per token of each all-reduce over tp of the vocabulary-parallel loss's
    #: forward (``cost.tp_ends``): ``(1, 1, 1)`` the max, the target logit and the sum of
    #: exponentials apart (Megatron's ``_VocabParallelCrossEntropy``, torchtitan's
    #: ``loss_parallel``); ``(1, 2)`` Megatron's fused path (``cross_entropy_loss_fusion``,
    #: ``core/fusions/fused_cross_entropy.py``: the target logit and the sum concatenated
    #: into one all-reduce; NeMo 2's model configs). docs/calibration.md §5.88
    tp_loss_allreduces: tuple[int, ...] = (1, 1, 1)
    expert_parallel: bool = True
    sequence_parallel: bool = True
    tp_comm_overlap: bool = True
    #: how the stack overlaps TP communication with the GEMMs (plan ``tp_comm_overlap``):
    #: ``"userbuffers"``, Transformer Engine's (Megatron-Core ``--tp-comm-overlap``), or
    #: ``"async-tp"``, PyTorch's micro-pipelined TP (``torch/_inductor/fx_passes/
    #: micro_pipeline_tp.py`` rewrites ``all_gather -> mm`` into ``symm_mem.
    #: fused_all_gather_matmul`` and ``mm -> reduce_scatter`` into ``fused_matmul_reduce_
    #: scatter``, one chunk per TP rank copied over symmetric memory with ``copy_``, a copy
    #: engine's ``cudaMemcpyAsync``: no SMs taken). Async TP exists only in the compiled graph
    #: and between sequence-parallel collectives: ``stack_rules`` refuses it without ``sp``
    #: (``TP_OVERLAP_IMPLS``; docs/calibration.md §5.50)
    tp_overlap: str = "userbuffers"
    #: share of a layer's backward TP collectives (``tp_per_layer_bwd``, all-reduce
    #: equivalents) that TP overlap leaves exposed: 0, every one pipelined with its GEMM
    #: (Transformer Engine's ``LayerNormLinear`` runs QKV and fc1 as one GEMM each and
    #: overlaps its dgrad reduce-scatter: ``ub_overlap_rs_dgrad``, ``ub_bulk_wgrad``); 0.5 under
    #: async TP, whose pass fuses a reduce-scatter only when its input is one matmul's output
    #: (``_find_producer_matmul``: ``mm``, ``_scaled_mm`` or ``reshape(mm(reshape))``), and
    #: the backward's reduce-scatter of a sequence-parallel input's gradient is the sum of the
    #: dgrads of the layers that read it (wq + wk + wv, w1 + w3): its two reduce-scatters of
    #: the backward's two all-gathers and two reduce-scatters run as plain collectives. The
    #: one statement the estimate, the bound and the simulator read (``StageCosts``)
    tp_overlap_bwd_exposed: float = 0.0
    #: under sequence parallelism each column-parallel linear saves the local shard of the
    #: input it all-gathered and all-gathers it again in the backward for its weight
    #: gradient, issued before and overlapped with its data-gradient GEMM (Megatron-Core
    #: ``tensor_parallel/layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication``,
    #: Transformer Engine ``layernorm_linear.py``/``layernorm_mlp.py``/``linear.py``
    #: ``ln_out_needs_gather``, ``gather_along_first_dim(..., async_op=True)``; Korthikanti
    #: et al. 2022 §4.2.2). False: the stack saves the gathered input (PyTorch's DTensor
    #: ``ColwiseParallel``: the matmul keeps the all-gather's output; XLA decides).
    #: ``cost.stage.sp_regather_exposed`` (docs/calibration.md §5.70)
    sp_regather: bool = True
    #: which tensor-parallel backward paths reduce a column-parallel linear's data gradient
    #: asynchronously while its weight-gradient GEMM runs, waiting only before returning:
    #: ``"all"`` (the reduce-scatter under SP and the all-reduce without: Megatron-Core
    #: ``tensor_parallel/layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication.
    #: backward``, Transformer Engine ``linear.py``/``layernorm_linear.py``/
    #: ``layernorm_mlp.py``, ``async_op=True``), ``"sp"`` (only the SP reduce-scatter:
    #: Megatron-LM's April 2022 SP code, whose non-SP async all-reduce came in September 2021,
    #: after the 2021 runs; NVIDIA/Megatron-LM 16c90445e7) or ``"none"`` (blocking: BigScience's
    #: Megatron-DeepSpeed ``ColumnParallelLinear``; DTensor's ``ColwiseParallel`` redistributes
    #: the input gradient after the matmul's backward has computed both GEMMs; XLA not read).
    #: ``cost.stage.dgrad_reduce_hidden`` (docs/calibration.md §5.75)
    dgrad_overlap: str = "all"
    #: how tensor parallelism runs MLA's down projections (``linear_q_down_proj``,
    #: ``linear_kv_down_proj``): ``"replicated"`` (Megatron-Core core_v0.14 on, 720c8b40d8
    #: 2025-07-29, and before 1c425a8313: ``TELinear`` with ``parallel_mode="duplicated"``,
    #: no tp collective per micro-batch) or ``"column"`` (core_v0.12.0-v0.13.1, from
    #: 1c425a8313 2025-02-24 "Use TEColumnParallelLinear instead of TELinear in MLA down
    #: proj layers": each all-gathers the hidden state under SP and its latents are gathered
    #: over tp and re-split; ``cost.stage.attn_down_ops``, docs/calibration.md §5.85)
    mla_down_proj: str = "replicated"
    #: under sequence parallelism the GEMMs tensor parallelism leaves whole (the MoE router,
    #: Qwen2-MoE's shared-expert gate, MLA's replicated down projections) run on the rank's
    #: sequence shard, ``T/tp`` rows: Megatron-Core hands the MoE layer and the attention the
    #: SP shard (``moe/router.py`` ``TopKRouter.gating``: ``linear(input, weight)`` on the
    #: shard, the weight ``sequence_parallel``-marked; ``moe/shared_experts.py`` the gate on
    #: the layer's input; ``transformer/multi_latent_attention.py`` ``linear_q_down_proj``/
    #: ``linear_kv_down_proj`` as ``TELinear(parallel_mode="duplicated")`` on ``[s/TP, b,
    #: h]``, core_v0.12.0 lines 378-380, core_v0.14.0 on). False: on all ``T`` rows, the
    #: input gathered first (torchtitan v0.2.2 ``models/deepseek_v3/infra/parallelize.py``:
    #: the attention's input ``Replicate()``, ``wq_a``/``wkv_a`` ``NoParallel``;
    #: ``models/llama4/infra/parallelize.py`` ``apply_moe_ep_tp``: the MoE input
    #: ``Replicate()``, "replicate computation for the router"). ``counts.whole_gemm_split``
    #: (docs/calibration.md §5.99)
    sp_shard_whole_gemms: bool = False
    #: gives data-parallel replicas different micro-batch counts (plan ``group_microbatches``,
    #: docs/heterogeneous.md); False: every replica takes the same batch (torchtitan's
    #: ``train.py``, MaxText's ``per_device_batch_size``, Composer's
    #: ``device_train_microbatch_size`` are one number for every rank)
    group_microbatches: bool = True
    #: ZeRO-0 data parallelism (``dp > 1``) is a DDP that runs only as the sole parallelism:
    #: with ``cp = 1`` the plan must have ``tp = pp = 1`` (torchtitan v0.2.2
    #: ``models/llama3/infra/parallelize.py``: ``replicate`` over the ``dp_replicate`` mesh
    #: raises "DDP has not supported > 1D parallelism" unless it spans the world; with
    #: ``cp > 1`` FSDP over ``dp_shard x cp`` runs instead, HSDP with the replicas)
    ddp_sole: bool = False
    #: expert parallelism is carved from the FSDP ranks (torchtitan v0.2.2
    #: ``distributed/parallel_dims.py``: ``efsdp = dp_shard * cp * tp / (etp * ep)`` must be a
    #: whole mesh dimension, ``dp_shard`` = dp under ZeRO-2/3 and 1 under ZeRO-0; ``etp`` is 1
    #: or tp, asserted)
    ep_from_fsdp: bool = False
    #: FSDP2's resharding follows pipelining, not the plan: ZeRO-3 without pipelining, ZeRO-2
    #: (parameters kept gathered) with it (NeMo AutoModel 89e3a9fdd components/moe/
    #: parallelizer.py apply_fsdp: ``fully_shard(..., reshard_after_forward=not pp_enabled)``)
    zero_follows_pp: bool = False
    #: a pipeline's micro-batches per step (``gbs / (mbs * dp)``) must be a multiple of
    #: ``pp`` (MaxText ``configs/types.py``: ``num_pipeline_microbatches`` a multiple of the
    #: stages)
    microbatches_per_pp: bool = False
    #: runs its pipeline schedule once per local batch, so a step may hold several pipeline
    #: flushes (plan ``flushes`` > 1, ``strategies.flushes``): ``torch.distributed.pipelining``'s
    #: ``schedule.step()`` per gradient-accumulation step (NeMo AutoModel; torchtitan since
    #: 8570415c3, 2025-06-05, "Support gradient accumulation": ``train_step`` calls
    #: ``forward_backward_step``, one ``pp_schedule.step()``, per gradient-accumulation step);
    #: False: one schedule over the step's micro-batches (Megatron's ``forward_backward_func``)
    pipeline_flushes: bool = False
    #: needs at least ``pp`` micro-batches per pipeline flush (AutoModel 89e3a9fdd
    #: ``recipes/llm/train_ft.py``: ``assert pp_batch_size // pp_microbatch_size >= pp_size``;
    #: torchtitan's ``build_pipeline_schedule`` only warns)
    flush_needs_pp_microbatches: bool = False
    #: expert parallelism shards the batch as data parallelism does (``ep`` divides ``dp``):
    #: MaxText's ``expert`` mesh axis is one of the batch axes (base.yml ``logical_axis_rules``)
    ep_in_dp: bool = False
    #: runs Megatron-Core's combined 1F1B (plan ``ep_overlap``; ``stack_rules`` holds its limits)
    ep_overlap: bool = False
    #: runs the interleaved schedule with ``overlap_p2p_comm``: each steady pipeline call is
    #: issued after a pass and waited for just before the next pass of the same kind, its
    #: transfers lone ops on NCCL's per-peer streams (``strategies.schedules.p2p_streams``;
    #: docs/calibration.md §5.63, §5.68). Megatron-LM ``arguments.py``: ``overlap_p2p_comm``
    #: on by default, off without virtual stages, ``batch_p2p_comm = not overlap_p2p_comm``;
    #: NeMo's ``MegatronCommOverlapCallback`` sets it when vp > 1. False: blocking batched
    #: calls (Megatron-LM 2021's ``batch_isend_irecv``, no such option; torch pipelining)
    overlap_p2p_comm: bool = False
    #: token dispatchers the stack runs (plan ``moe_dispatcher``; ``plan.DISPATCHERS``)
    moe_dispatchers: tuple[str, ...] = ("alltoall",)
    #: runs Megatron-Core's model code for a clamped gated activation (the clamp and cat in
    #: eager PyTorch before the fused activation) and for a RoPE scaled by YaRN's attention
    #: factor (the unfused rotary path): ``counts.clamp_bytes``, ``counts.rope_unfused_bytes``
    #: (``compute.eager_variant_time``); False: a stack whose kernels for these are not
    #: modelled (charged as the plain activation and the fused RoPE)
    eager_variants: bool = False
    #: runs routed experts through Transformer Engine's ``GroupedLinear`` with the activation
    #: function in the stack's own code (Megatron-Core's ``TEGroupedMLP``): the activation
    #: writes bf16 and ``GroupedLinear`` quantises fc2's input and fc1's incoming gradient in
    #: passes of their own (``quantise.layer_cast_elements``' ``routed_unfused``); False: the
    #: activation kernels write them quantised (fused)
    grouped_mlp_casts: bool = False
    #: runs Transformer Engine's modules under Megatron-Core's ``fp8_autocast`` (amax group
    #: tp·cp·dp): per-tensor fp8 scaling all-reduces amaxes on the compute stream
    #: (``strategies.cost.amax``; docs/calibration.md §5.64)
    te_amax_reduction: bool = False
    #: tensorwise dynamic float8 under TP runs torchao's ``Float8ColwiseParallel``/
    #: ``Float8RowwiseParallel``/``PrepareFloat8ModuleInput``: each cast of a sharded DTensor
    #: (``tensor_to_amax``'s ``torch.max(torch.abs(x))`` of a ``Shard`` placement) all-reduces
    #: its amax over the TP group (``strategies.cost.amax``; docs/calibration.md §5.84)
    torchao_float8_tp: bool = False
    #: in a quantised precision, copies the routed tokens into and out of per-expert buffers
    #: aligned for the quantised GEMMs (Megatron-Core's ``TEGroupedMLP`` with Transformer
    #: Engine's ``Fp8Padding``/``Fp8Unpadding``, the router not padding): ``counts.
    #: expert_pad_bytes``, ``compute.expert_pad_time``
    quant_padding: bool = False
    #: how the stack launches a grouped expert GEMM over the local experts, hence the fixed
    #: times it pays (``ExpertGemmLaunch``; ``compute.expert_fixed_share``)
    expert_gemm_launch: ExpertGemmLaunch = ExpertGemmLaunch()
    #: runs the routed experts through Transformer Engine's fused grouped MLP
    #: (``with_fused_grouped_mlp``): fc1, the gated activation with its clamp and the
    #: routing-probability scale, and fc2 in cuDNN grouped kernels, so no eager clamp
    #: (``runs_eager_clamp``)
    fused_grouped_mlp: bool = False
    #: runs the attention core in Transformer Engine's MXFP8 fused attention (``with_fp8_
    #: attention``; Megatron-Core's ``fp8_dot_product_attention``): ``strategies.cost.
    #: fp8_attention`` prices the kernel and its casts
    fp8_attention: bool = False
    #: captures the whole training step in one CUDA graph (plan ``cuda_graph``; Megatron-Core's
    #: ``--cuda-graph-impl full_iteration``, docs/user-guide/features/cuda_graph.md)
    cuda_graph: bool = False
    flash_attn: bool = True
    recompute: tuple[str, ...] = ("none", "selective", "full")
    #: what the stack's own recomputation is, where a mode it lacks has a near equivalent
    #: (named in the ``recompute`` refusal)
    recompute_note: str = ""
    #: methods of partial full recomputation (``recompute_layers``) the stack runs
    recompute_methods: tuple[str, ...] = ()
    #: modules it can recompute selectively by name (``recompute_modules``)
    recompute_modules: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    #: the launch-settings exporter the stack is launched with (one of
    #: ``strategies.launch.EXPORTS``; ``"none"``: paraplan has none: HAI-LLM's code is not
    #: public, NeMo AutoModel's YAML recipe has no exporter yet)
    export: str = "megatron"
    #: the stack's own implementation of a generic schedule name a plan gives
    #: (DeepSpeed's pipeline engine runs ``schedule=1f1b`` as its ``TrainSchedule``)
    schedule_impl: tuple[tuple[str, str], ...] = ()
    #: how ZeRO-3 gathers parameters: ``"bucketed"`` (a layer's worth at a time, prefetched
    #: behind compute: Megatron-FSDP, FSDP, XLA) or ``"per-tensor"`` (one host-synchronous
    #: all-gather per parameter tensor and one reduce-scatter per gradient, exposed:
    #: DeepSpeed v0.3.13-v0.5, 2021; ``strategies.cost.counts.zero3_tensor_gathers``)
    zero3_gather: str = "bucketed"
    #: parameters used between two uses of a tensor below which a per-tensor stack keeps it
    #: gathered (DeepSpeed ``stage3_max_reuse_distance``, default 1e9)
    zero3_reuse_params: float = 1e9
    #: where each ``default_*`` switch (``flash_attn``, ``overlap_grad_reduce``,
    #: ``overlap_param_gather``, ``tp_comm_overlap``, ``recompute``) comes from:
    #: ``(switch, source)``; the reference reader states it with every default it applies
    default_sources: tuple[tuple[str, str], ...] = ()
    #: the passes the stack runs once per step (``StepPasses``; default: Megatron-LM's)
    step: StepPasses = StepPasses()
    #: the cross-entropy's passes over the logits (``LossPasses``; default: the assumed three
    #: fp32 passes each way)
    loss: LossPasses = LossPasses()
    #: recomputation never reruns the layer's last GEMM (the dense MLP's down projection):
    #: full recomputation stops before it (PyTorch non-reentrant checkpoint with early stop;
    #: JAX's remat, whose recomputed forward is dead-code-eliminated to what the backward
    #: reads), and so does selective recomputation of the ``mlp`` module; False: the whole
    #: forward (or module) is rerun (reentrant checkpointing)
    recompute_early_stop: bool = False
    #: selective recomputation of ``core_attn`` under FlashAttention reruns the fused attention
    #: kernel's forward (the stack keeps neither its output nor its softmax statistics: MaxText's
    #: ``context`` tensor, remat unless a policy saves it); False: the fused kernel's backward
    #: recomputes the scores itself and nothing is rerun (the model's reading of Megatron's
    #: ``core_attn`` under FlashAttention)
    recompute_flash_fwd: bool = False
    #: selective recomputation is a JAX remat policy (``strategies.remat_policies``): a layer
    #: keeps its input and the named tensors the policy saves and the backward reads
    #: (``remat_policies.saved_names``; the attention output only when ``core_attn`` is not
    #: selected, as ``recompute_flash_fwd`` reruns the kernel that makes it), nothing unnamed
    #: (``strategies.memory.activations.named_remat_bytes``); False: Megatron's table less the
    #: selected modules' parts
    remat_named: bool = False
    #: low-precision GEMM weights are quantised at every forward that uses them, each
    #: micro-batch's and, under recomputation, the backward's rerun (JAX's traced functions
    #: keep no quantised copy between calls: ``quantise.weight_cast_passes``); False: once
    #: per step, the copies reused by every micro-batch (Transformer Engine's
    #: ``is_first_microbatch`` under Megatron-Core)
    weight_cast_per_forward: bool = False
    #: in a quantised precision, caches the activations its GEMMs' backward reads in that
    #: precision instead of 16 bits (``strategies.memory.activations.cache_ratios``: every
    #: Linear's input, the MoE's SwiGLU input, the attention output in E5M6; a pending weight
    #: gradient's output gradients too). DeepSeek-V3 (arXiv 2412.19437 §3.3.3, "Low-Precision
    #: Activation"); False: the 16-bit table (Transformer Engine's saved fp8 inputs are not
    #: modelled, docs/memory.md)
    fp8_activation_cache: bool = False
    #: in a quantised precision, dispatches the MoE's routed tokens in that precision with
    #: their scales, the combine in 16 bits (``counts.dispatch_element_bytes``: the
    #: all-to-all's bytes, the permutations' and the send buffer's). DeepSeek-V3 (arXiv
    #: 2412.19437 §3.3.3, "Low-Precision Communication"); False: 16-bit tokens both ways
    #: (Megatron-Core passes the hidden states to DeepEP's ``Buffer.dispatch`` as they are,
    #: builds DeepEP V2's ``ElasticBuffer`` with ``use_fp8_dispatch=False`` and asserts
    #: "HybridEP dispatcher does not support fp8 dispatch now":
    #: ``megatron/core/transformer/moe/fused_a2a.py``)
    fp8_dispatch: bool = False
    #: optimizer state bytes per parameter, where the stack states them (None:
    #: ``SystemConfig.optimizer_state_bytes``, fp32 master and Adam moments, 12)
    optimizer_state_bytes: float | None = None
    #: bytes of the weight the optimizer updates (the master, inside ``optimizer_state_bytes``)
    #: where the stack builds its model in 16 bits (None: ``SystemConfig.master_bytes``, fp32
    #: 4): with ``fsdp2`` the memory model counts it under params (``stack_system``)
    master_bytes: float | None = None
    #: ZeRO-2/3 is PyTorch FSDP2 (``fully_shard``) over a model built in fp32 with
    #: ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, so the memory model
    #: (``strategies.memory.arrays.state_bytes_per_param``, docs/memory.md "FSDP2") holds:
    #: the fp32 shard is the optimizer's parameter (the master; no 16-bit shard: ZeRO-3
    #: ``16/d`` bytes per parameter, not ``18/d``); the root module's parameters (embedding,
    #: final norm, head) stay gathered from the forward to the backward under ZeRO-3 (FSDP2's
    #: root is not resharded after forward); and under ``torch.distributed.pipelining``
    #: (``pp > 1``) gradient sync is off for every micro-batch's backward, so each stage's
    #: gradients accumulate unsharded in the reduce dtype (fp32) until one reduce-scatter
    #: after the last backward (``grad_sync_once``: the time model reduces those gradients
    #: once per step too, ZeRO-1's path without overlap, ``grad_path``; docs/calibration.md
    #: §3.22, §5.32, §5.34). PyTorch FSDP1 with ``MixedPrecision(param_dtype=bf16)`` over an
    #: fp32 model (Composer) holds the same state: its sharded fp32 ``FlatParameter`` is the
    #: optimizer's parameter, the bf16 shard ``_mp_shard`` is allocated for the all-gather and
    #: freed after it (``torch/distributed/fsdp/_flat_param.py``
    #: ``_use_low_precision_shard``/``_free_low_precision_sharded_param``), and the root's
    #: parameters are not freed after forward (``_runtime_utils.py`` ``_post_forward_reshard``:
    #: ``not state._is_root``); docs/calibration.md §5.46
    fsdp2: bool = False
    #: the data-parallel gradient bucket rule (``BucketRule``; docs/calibration.md §5.86)
    dp_bucket: BucketRule = MCORE_BUCKET
    #: the stack stores its weights in fp32 only and casts a transient 16-bit copy inside each
    #: layer per use, at every ZeRO stage: the fp32 master is the one stored weight, no 16-bit
    #: copy is model state (``SystemConfig.weight_copies`` 0, ``stack_system``; MaxText
    #: ``configs/base.yml`` ``weight_dtype: float32`` beside ``dtype: bfloat16``, flax's
    #: ``promote_dtype`` casting the kernel in each layer's call; docs/calibration.md §5.46)
    master_only: bool = False
    #: the passes over each micro-batch's *unsharded* 16-bit weight gradient that the stack's
    #: sharded data parallelism (ZeRO >= 2 with dp > 1) runs before and around the gradient
    #: reduce-scatter (``SHARDED_GRAD_PASSES``; bytes: ``compute.sharded_grad_pass_bytes``);
    #: empty: none beyond the reduce-scatter itself (Megatron-Core's buffers, XLA)
    sharded_grad_passes: tuple[str, ...] = ()
    #: where each of ``sharded_grad_passes`` comes from, ``(pass, source)``
    sharded_grad_sources: tuple[tuple[str, str], ...] = ()
    #: DeepSpeed's ``BF16_Optimizer`` in bf16 runs with ZeRO <= 1 (``runtime/bf16_optimizer.py``,
    #: v0.6+): each micro-batch's 16-bit gradient is cast to fp32 and added into the fp32
    #: gradient (``BF16_ACCUM_BYTES`` per parameter instead of the main_grad add's), the fp32
    #: gradients are all-reduced over dp after the schedule (``_bf16_reduce_grads``, not
    #: reduce-scattered), then each rank updates its shard and all-gathers the 16-bit weights
    bf16_optimizer: bool = False
    #: HBM bytes per score element the stack spends adding ALiBi's bias into the scores of the
    #: unfused attention path (models with ``position_embedding="alibi"``, no FlashAttention;
    #: ``counts.softmax_bytes_fwd``): Megatron-DeepSpeed's ``baddbmm(alibi, q, k^T, beta=1)``
    #: copies the expanded ``(b·np, 1, s)`` bias into the score tensor (write 2) and the GEMM
    #: reads it back as its ``C`` (read 2): 4.0; 0: not read for the stack
    alibi_score_bytes: float = 0.0
    #: the ways of giving an uneven pipeline layout the stack runs (``LAYOUT_WAYS``;
    #: default: all, Megatron-Core's); ``stack_rules`` refuses the others
    layouts: tuple[str, ...] = LAYOUT_WAYS
    #: how the stack itself splits layers over pipeline stages (named in its refusals)
    pipeline_split: str = ("Megatron's --pipeline-model-parallel-layout (any count per rank), "
                           "--decoder-first/last-pipeline-num-layers, "
                           "--account-for-embedding/loss-in-pipeline-split")
    #: the training precisions (``--dtype``, ``topologies.precision.DTYPES``) the stack runs at
    #: the version the profile describes; ``check_precision`` refuses the others
    precisions: tuple[str, ...] = DTYPES
    #: where ``precisions`` comes from (the stack's code that selects each)
    precision_source: str = ("Megatron-Core --bf16/--fp16, --fp8-format/--fp8-recipe "
                             "delayed|tensorwise|blockwise|mxfp8, --fp4-format e2m1 "
                             "--fp4-recipe nvfp4 (megatron/training/arguments.py) through "
                             "Transformer Engine's recipes (transformer_engine.common.recipe)")
    #: the stack's near equivalent of a precision it lacks, ``(dtype, note)`` (named in the
    #: refusal)
    precision_notes: tuple[tuple[str, str], ...] = ()

    def optimizer_bytes_or(self, default: float) -> float:
        """The stack's optimizer state bytes per parameter, else ``default``."""
        return default if self.optimizer_state_bytes is None else float(self.optimizer_state_bytes)

    def default_source(self, switch: str) -> str:
        """The source of the stack's default for plan switch ``switch`` ("" if none)."""
        return dict(self.default_sources).get(switch, "")

    def schedule_for(self, name: str) -> str:
        """The schedule this stack runs for a plan's ``schedule=name``."""
        return dict(self.schedule_impl).get(name, name)

    def plan_defaults(self) -> dict[str, bool]:
        """The plan switches this stack turns on by default (a plan that names a switch
        overrides it)."""
        return {"flash_attn": self.default_flash_attn,
                "overlap_grad_reduce": self.default_overlap_grad_reduce,
                "overlap_param_gather": self.default_overlap_param_gather,
                "tp_comm_overlap": self.default_tp_comm_overlap}

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("framework.name", self.name, "must be a non-empty string")
        if not (isinstance(self.kernels_per_layer, int) and self.kernels_per_layer >= 0):
            raise SpecError("framework.kernels_per_layer", self.kernels_per_layer,
                            "must be an integer >= 0")
        if self.default_recompute not in RECOMPUTE:
            raise SpecError("framework.default_recompute", self.default_recompute,
                            f"must be one of {', '.join(RECOMPUTE)}")
        for r in self.recompute:
            if r not in RECOMPUTE:
                raise SpecError("framework.recompute", r, f"must be one of {', '.join(RECOMPUTE)}")
        if isinstance(self.alibi_score_bytes, bool) or \
                not isinstance(self.alibi_score_bytes, (int, float)) or \
                not 0 <= self.alibi_score_bytes < 100:
            raise SpecError("framework.alibi_score_bytes", self.alibi_score_bytes,
                            "must be bytes per score element in [0, 100)")
        if not (isinstance(self.tp_loss_allreduces, tuple) and all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 1
                for n in self.tp_loss_allreduces)):
            raise SpecError("framework.tp_loss_allreduces", self.tp_loss_allreduces,
                            "must be a tuple of integers >= 1 (fp32 elements per token)")
        if self.attention_kernel not in ("native", "fa2"):
            raise SpecError("framework.attention_kernel", self.attention_kernel,
                            "must be 'native' or 'fa2'")
        if self.tp_overlap not in TP_OVERLAP_IMPLS:
            raise SpecError("framework.tp_overlap", self.tp_overlap,
                            f"must be one of {', '.join(TP_OVERLAP_IMPLS)}")
        if isinstance(self.tp_overlap_bwd_exposed, bool) or \
                not isinstance(self.tp_overlap_bwd_exposed, (int, float)) or \
                not 0 <= self.tp_overlap_bwd_exposed <= 1:
            raise SpecError("framework.tp_overlap_bwd_exposed", self.tp_overlap_bwd_exposed,
                            "must be a share in [0, 1]")
        if self.cp_impl not in CP_IMPLS:
            raise SpecError("framework.cp_impl", self.cp_impl,
                            f"must be one of {', '.join(CP_IMPLS)}")
        if self.elementwise_kernels not in ELEMENTWISE_KERNELS:
            raise SpecError("framework.elementwise_kernels", self.elementwise_kernels,
                            f"must be one of {', '.join(ELEMENTWISE_KERNELS)}")
        if self.cp_kv_heads not in ("kv", "query"):
            raise SpecError("framework.cp_kv_heads", self.cp_kv_heads,
                            "must be 'kv' or 'query'")
        if self.default_recompute not in self.recompute:
            raise SpecError("framework.default_recompute", self.default_recompute,
                            f"must be one of the stack's recompute modes {self.recompute}")
        for switch, _ in self.default_sources:
            if switch not in DEFAULT_SWITCHES:
                raise SpecError("framework.default_sources", switch,
                                f"must name one of {', '.join(DEFAULT_SWITCHES)}")
        if self.zero3_gather not in ZERO3_GATHERS:
            raise SpecError("framework.zero3_gather", self.zero3_gather,
                            f"must be one of {', '.join(ZERO3_GATHERS)}")
        if not self.zero3_reuse_params >= 0:
            raise SpecError("framework.zero3_reuse_params", self.zero3_reuse_params,
                            "must be a number of parameters >= 0")
        if not isinstance(self.sp_regather, bool):
            raise SpecError("framework.sp_regather", self.sp_regather, "must be true or false")
        if self.dgrad_overlap not in DGRAD_OVERLAPS:
            raise SpecError("framework.dgrad_overlap", self.dgrad_overlap,
                            f"must be one of {', '.join(DGRAD_OVERLAPS)}")
        if self.mla_down_proj not in MLA_DOWN_PROJS:
            raise SpecError("framework.mla_down_proj", self.mla_down_proj,
                            f"must be one of {', '.join(MLA_DOWN_PROJS)}")
        for way in self.layouts:
            if way not in LAYOUT_WAYS:
                raise SpecError("framework.layouts", way,
                                f"must be one of {', '.join(LAYOUT_WAYS)}")
        if not 0 <= self.launch_gap_s < 1e-3:
            raise SpecError("framework.launch_gap_s", self.launch_gap_s,
                            "must be in [0, 1 ms) seconds")
        if not isinstance(self.expert_gemm_launch, ExpertGemmLaunch):
            raise SpecError("framework.expert_gemm_launch", self.expert_gemm_launch,
                            "must be an ExpertGemmLaunch (kind, streams)")
        for name in self.sharded_grad_passes:
            if name not in SHARDED_GRAD_PASSES:
                raise SpecError("framework.sharded_grad_passes", name,
                                f"must be one of {', '.join(SHARDED_GRAD_PASSES)}")
        if len(set(self.sharded_grad_passes)) != len(self.sharded_grad_passes):
            raise SpecError("framework.sharded_grad_passes", self.sharded_grad_passes,
                            "must name each pass at most once")
        for name in self.precisions + tuple(d for d, _ in self.precision_notes):
            if name not in DTYPES:
                raise SpecError("framework.precisions", name,
                                f"must be one of {', '.join(DTYPES)}")
        if not self.precisions:
            raise SpecError("framework.precisions", self.precisions,
                            "must name at least one precision")
        for field_name in ("optimizer_state_bytes", "master_bytes"):
            val = getattr(self, field_name)
            if val is not None and (isinstance(val, bool) or not isinstance(val, (int, float))
                                    or not 0 < val < 100):
                raise SpecError(f"framework.{field_name}", val,
                                "must be bytes per parameter in (0, 100) or None")
        if (self.master_bytes is not None and self.optimizer_bytes_or(12.0) < self.master_bytes):
            raise SpecError("framework.master_bytes", self.master_bytes,
                            "must not exceed optimizer_state_bytes (the master is one of them)")
        if self.master_only and (self.fsdp2 or self.master_bytes is not None):
            raise SpecError("framework.master_only", self.master_only,
                            "must be False with fsdp2 or master_bytes (each states the "
                            "stored weight another way)")
        for name, _ in self.sharded_grad_sources:
            if name not in self.sharded_grad_passes:
                raise SpecError("framework.sharded_grad_sources", name,
                                "must name one of the profile's sharded_grad_passes "
                                f"({', '.join(self.sharded_grad_passes) or 'none'})")
        for f in fields(self):      # every switch is a bool (1, "yes" are not)
            if f.type == "bool" and not isinstance(getattr(self, f.name), bool):
                raise SpecError(f"framework.{f.name}", getattr(self, f.name),
                                "must be true or false")
        known = schedule_names()
        for name in self.schedules:
            if name not in known:
                raise SpecError("framework.schedules", name, f"must be one of {', '.join(known)}")
        for name in self.moe_dispatchers:
            if name not in DISPATCHERS:
                raise SpecError("framework.moe_dispatchers", name,
                                f"must be one of {', '.join(DISPATCHERS)}")


ZERO3_GATHERS = ("bucketed", "per-tensor")
#: ``FrameworkProfile.dgrad_overlap``'s values
DGRAD_OVERLAPS = ("all", "sp", "none")
#: ``FrameworkProfile.mla_down_proj``'s values
MLA_DOWN_PROJS = ("replicated", "column")
#: ``FrameworkProfile.cp_impl``: Transformer Engine's p2p ring, its K/V all-gather (Megatron-Core
#: ``cp_comm_type="all_gather"``; Llama 3's CP), PyTorch's context_parallel
CP_IMPLS = ("ring", "allgather", "torch")
#: the stacks' elementwise kernels (``FrameworkProfile.elementwise_kernels``)
ELEMENTWISE_KERNELS = ("fused", "eager", "compiled")


def cp_exposed_fraction(cp_impl: str, overlapped: float) -> float:
    """Share of a context-parallel layer's K/V collectives left exposed: all of them under
    ``"allgather"`` (Megatron-Core ``TransformerConfig.cp_comm_type``: "all_gather: All-gather
    to get full sequence of KV before attention. The all-gather is not async, and cannot be
    overlapped"; Transformer Engine's ``AttnFuncWithCPAndKVAllGather``, "KV all-gather between
    CP ranks is exposed", gathers K/V in the forward, again in the backward, and reduce-scatters
    dK/dV: the ring's three passes, ``analytic`` ``t_cp``; Dubey et al. 2024 §3.3.2: "the
    all-gather communication latency is exposed in the critical path"), else ``overlapped``
    (``SystemConfig.cp_exposed_fraction``: the ring's tail after its last attention block)."""
    return 1.0 if cp_impl == "allgather" else float(overlapped)
#: ``FrameworkProfile.tp_overlap``: Transformer Engine's userbuffers, PyTorch's async TP
TP_OVERLAP_IMPLS = ("userbuffers", "async-tp")
#: passes over a micro-batch's unsharded gradient of ``p`` elements that a sharded data-parallel
#: stack may run besides the reduce-scatter (``FrameworkProfile.sharded_grad_passes``), with
#: ``a`` the bytes of a 16-bit gradient element and ``g`` the reduce dtype's
#: (``SystemConfig.main_grad_bytes``); HBM bytes each (``compute.sharded_grad_pass_bytes``):
#: ``flat_grad_cat`` (FSDP1's FlatParameter: the per-weight gradients concatenated into the
#: flat gradient by the backward of the ``split`` that made the views: read a, write a),
#: ``reduce_cast`` (the 16-bit gradient cast to the reduce dtype: read a, write g; none when
#: g == a), ``predivide`` (``grad.div_(gradient_predivide_factor)`` before the reduce-scatter:
#: read g, write g), ``reduce_copy_in`` (FSDP2's ``foreach_reduce_scatter_copy_in``: every
#: gradient copied, and cast, into the reduce-scatter input: read a, write g)
SHARDED_GRAD_PASSES = ("flat_grad_cat", "reduce_cast", "predivide", "reduce_copy_in")
#: the plan switches a profile gives defaults for (``FrameworkProfile.default_*``)
DEFAULT_SWITCHES = ("flash_attn", "overlap_grad_reduce", "overlap_param_gather",
                    "tp_comm_overlap", "recompute")
LAUNCH_GAP_S = 3e-6   # seconds of GPU idle per kernel boundary (see the module docstring)
#: fp32 elements read or written per parameter by an unfused Adam update (``StepPasses``):
#: Composer's DecoupledAdamW without weight decay, and torch's foreach AdamW with it, both 20
#: (the sources list each kernel); one fused kernel moves 7 (``SystemConfig.adam_step_bytes``)
COMPOSER_ADAMW_ELEMENTS = 20.0

#: The cross-entropy of llm-foundry's MPT under Composer, as each micro-batch runs it over the
#: 16-bit logits (docs/calibration.md §5.96). The training loss is flash-attn's fused
#: ``CrossEntropyLoss`` (``ComposerMPTCausalLM``'s default ``loss_fn: fused_crossentropy``,
#: llm-foundry v0.3.0 ``llmfoundry/models/mpt/modeling_mpt.py``; the ``.[gpu]`` extra installs
#: flash-attn 1.0.9's ``xentropy_cuda_lib``, ``csrc/xentropy/xentropy_kernel.cu``): its forward
#: reads each row twice (max and sum, then the sum of exponentials) and writes one loss and
#: one log-sum-exp per row, its backward reads the logits and writes their gradient. After
#: every micro-batch's backward Composer updates the model's train metrics on the same logits
#: (``Trainer._train_microbatch`` -> ``_eval_train_metrics``, composer v0.16.4 and v0.17.2,
#: under the run's autocast): ``LanguageCrossEntropy`` and ``LanguagePerplexity``
#: (``composer/metrics/nlp.py``), each ``torch.nn.CrossEntropyLoss(reduction='sum')`` unfused:
#: autocast runs ``cross_entropy`` in fp32 (PyTorch 2.1 amp docs, "CUDA Ops that can autocast
#: to float32"), so the logits are cast (read 2, write 4) and ``log_softmax`` runs PyTorch
#: 2.1's ``cunn_SoftMaxForward`` (a 50k-wide fp32 row does not fit the 48 KB of shared memory
#: per block: max, sum of exponentials and the write each read the row, 3 x 4 + 4); the
#: ``nll_loss`` gather reads one element per row (not charged). The metric passes run outside
#: autograd after the backward and are charged with the forward. The 2024 large-scale sweep
#: installed ``.[gpu-flash2]`` (flash-attn 2.4.2), whose Triton loss reads a row of at most
#: 64K once in the forward (2 bytes, not 4): the 2 bytes more charged here are stated, not
#: split per row.
COMPOSER_CROSS_ENTROPY = LossPasses(
    fwd=(("flash-attn 1.0.9 xentropy forward: max and sum, then sum of exponentials: "
          "read 2 twice", 4.0),
         ("LanguageCrossEntropy (after the backward): autocast's fp32 cast, read 2, write 4",
          6.0),
         ("LanguageCrossEntropy: fp32 log_softmax, cunn_SoftMaxForward: read 4 three "
          "times, write 4", 16.0),
         ("LanguagePerplexity (after the backward): autocast's fp32 cast, read 2, write 4",
          6.0),
         ("LanguagePerplexity: fp32 log_softmax, cunn_SoftMaxForward: read 4 three times, "
          "write 4", 16.0)),
    bwd=(("flash-attn 1.0.9 xentropy backward: read 2, write the 16-bit gradient 2", 4.0),),
    source="llm-foundry v0.3.0 ComposerMPTCausalLM (loss_fn fused_crossentropy; train "
           "metrics LanguageCrossEntropy, LanguagePerplexity); flash-attn v1.0.9 "
           "csrc/xentropy/xentropy_kernel.cu; composer v0.16.4 trainer.py "
           "_eval_train_metrics, metrics/nlp.py; PyTorch 2.1 SoftMax.cu cunn_SoftMaxForward "
           "and the amp docs' fp32 list (cross_entropy)")
TORCH_FOREACH_ADAMW_ELEMENTS = 20.0
#: bytes per parameter and micro-batch of DeepSpeed BF16_Optimizer's accumulation
#: ``hp_grad.add_(lp.grad.to(fp32))``: the cast reads 2 and writes a 4-byte temporary, the add
#: reads the fp32 gradient and the temporary and writes the fp32 gradient (2 + 4 + 4 + 4 + 4)
BF16_ACCUM_BYTES = 18.0


def uses_bf16_optimizer(fw: "FrameworkProfile", dtype: str) -> bool:
    """Whether stack ``fw`` runs DeepSpeed's BF16_Optimizer for a ``dtype`` run (bf16 only)."""
    return bool(fw.bf16_optimizer) and dtype == "bf16"


def full_grad_reduce(fw: "FrameworkProfile", dtype: str, zero: Any) -> Any:
    """Whether the data-parallel gradient reduction is a full all-reduce (not a
    reduce-scatter into the optimizer shard): ZeRO-0, and DeepSpeed's BF16_Optimizer, which
    all-reduces the fp32 gradients under its own ZeRO-1 (``uses_bf16_optimizer``). Scalar or
    array ``zero``; the one rule the estimate, the lower bound and the compiler read."""
    z = np.asarray(zero)
    out = (z == 0) | ((z == 1) & uses_bf16_optimizer(fw, dtype))
    return bool(out) if out.ndim == 0 else out

def grad_sync_once(fsdp2: Any, pp: Any, zero: Any) -> Any:
    """True where the stack's ZeRO-2 is PyTorch FSDP2 (``FrameworkProfile.fsdp2``) run under
    ``torch.distributed.pipelining`` (``pp > 1``, ZeRO-2: torchtitan's only pipelined
    sharding, ``zero_with_pp``): ``_PipelineStageBase.backward_maybe_with_nosync``
    (pytorch/pytorch#127946, in the 2024-12-23 nightly) turns FSDP2's gradient sync and
    reshard-after-backward off for every backward and runs each parameter group's
    ``post_backward`` after the stage's last one (#144535), so the unsharded gradients
    accumulate in the reduce dtype and the stage is reduce-scattered once per step.
    Vectorised; the one rule the memory model (``memory.arrays.state_bytes_per_param``), the
    stage record, the estimate, the bound and the compiler read (docs/calibration.md §5.34)."""
    return np.asarray(fsdp2, dtype=bool) & (np.asarray(pp) > 1) & (np.asarray(zero) == 2)


def grad_path(fsdp2: Any, pp: Any, zero: Any, ogr: Any = True) -> tuple[Any, Any]:
    """``(ZeRO stage, overlap_grad_reduce)`` the gradients are accumulated and reduced with:
    the plan's, or where ``grad_sync_once`` holds, ZeRO-1's without overlap (an unsharded
    gradient buffer every micro-batch adds into; one reduce-scatter into the shard after the
    stage's last backward, not beside it). The optimizer shard and the parameter gathers are
    the plan's. Vectorised (scalars in, scalars out)."""
    on = grad_sync_once(fsdp2, pp, zero)
    zg = np.where(on, 1, np.asarray(zero))
    og = np.asarray(ogr, dtype=bool) & ~on
    return (zg[()] if zg.ndim == 0 else zg), (bool(og) if og.ndim == 0 else og)


#: HBM bytes per score element of Megatron-DeepSpeed's ALiBi (bigscience-workshop/
#: Megatron-DeepSpeed ae6277f5, megatron/model/transformer.py ``ParallelAttention.forward``:
#: ``matmul_result = alibi[:b·np, :, :sk]``, shape ``(b·np, 1, sk)``, then ``torch.baddbmm(
#: matmul_result, q, k^T, beta=1.0, alpha=1/norm_factor)``): PyTorch's CUDA ``baddbmm``
#: expands the bias to ``(b·np, sq, sk)`` and copies it into the result before the GEMM
#: (aten/src/ATen/native/cuda/Blas.cpp, ``baddbmm_out_cuda_impl``: ``result.copy_(self)``
#: when ``beta != 0``; write 2), and the GEMM with ``beta = 1`` reads that result as its ``C`` (read 2). Without
#: ALiBi the same ``baddbmm`` runs with ``beta = 0`` on an empty tensor (no read).
ALIBI_BADDBMM_BYTES = 4.0

#: Megatron-DeepSpeed's loss as BLOOM ran it: the same passes as Megatron's (one source of
#: truth, ``MEGATRON_CROSS_ENTROPY``). bigscience-workshop/Megatron-DeepSpeed at ae6277f5
#: (2022-02-21, the BLOOM prototype's runs): ``GPTModelPipe`` ends with the spec
#: ``float16_to_fp32`` (the 16-bit logits to fp32: read 2, write 4), ``CrossEntropy``'s
#: ``output.contiguous().float()`` is then a no-op, and ``megatron/mpu/cross_entropy.py``'s
#: ``_VocabParallelCrossEntropy`` is Megatron's (max, ``sub_``, ``exp(out=)``, sum, ``div_``;
#: backward ``mul_`` and the cast's backward); docs/calibration.md §3.25.
MEGATRON_DEEPSPEED_CROSS_ENTROPY = replace(
    MEGATRON_CROSS_ENTROPY,
    source="Megatron-DeepSpeed's GPTModelPipe (bigscience-workshop/Megatron-DeepSpeed "
           "megatron/model/gpt_model.py: the float16_to_fp32 spec after the tied LM head, "
           "then megatron/mpu/cross_entropy.py's _VocabParallelCrossEntropy): Megatron's "
           "passes")

MEGATRON_LM_2021 = FrameworkProfile(
    name="megatron-lm-2021", dp_bucket=MODEL_BUCKET,
    description="Megatron-LM v2-v3 (Narayanan et al. 2021, Korthikanti et al. 2022): apex fused "
                "kernels, unfused softmax, blocking communication, main_grad.add_ per micro-batch",
    grad_accum_fusion=False, kernels_per_layer=20, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=False, default_overlap_grad_reduce=False,
    default_overlap_param_gather=False, default_tp_comm_overlap=False, default_recompute="full",
    zero_stages=(0, 1), zero_with_pp=1, context_parallel=False, expert_parallel=False,
    tp_comm_overlap=False, flash_attn=False, recompute_methods=("block", "uniform"),
    recompute_modules=("core_attn",), loss=MEGATRON_CROSS_ENTROPY,
    # Korthikanti et al.'s SP code reduce-scatters the input gradient beside the weight
    # gradient; Narayanan et al.'s April 2021 code all-reduced it blocking
    dgrad_overlap="sp",
    tp_end_collectives=True,   # §5.88
    precisions=("fp16", "bf16"),
    precision_source="Megatron-LM v2-v3 --fp16 / --bf16 (megatron/arguments.py, apex "
                     "mixed precision with megatron/optimizer's loss scaler)",
    precision_notes=tuple((d, "fp8 and fp4 came with Transformer Engine (2023 on): use "
                              "--framework megatron-core")
                          for d in DTYPES if d not in ("fp16", "bf16")),
    default_sources=(
        ("flash_attn", "no FlashAttention before 2023: Megatron-LM v2-v3 ran its fused "
                       "scale-mask-softmax (megatron/model/fused_softmax.py); FlashAttention "
                       "(Dao et al., May 2022) came with Transformer Engine"),
        ("overlap_grad_reduce", "gradients all-reduced after the last micro-batch's backward "
                                "(megatron/training.py, optimizer.reduce_model_grads)"),
        ("overlap_param_gather", "no parameter all-gather overlap (the distributed optimizer "
                                 "of 2022 gathers after the step)"),
        ("tp_comm_overlap", "no TP communication overlap (Transformer Engine userbuffers, 2023)"),
        ("recompute", "full-layer activation checkpointing (--checkpoint-activations, "
                      "Narayanan et al. 2021 §3.5)")),
    step=StepPasses(
        check_grad=False,
        sources=(
            ("zero_grad", "model.zero_grad_buffer() before each step zeroes the contiguous "
                          "main_grad buffer (megatron/model/distributed.py)"),
            ("scale_grad", "allreduce_gradients divides the buffer by the data-parallel size "
                           "before the all-reduce (buffer_.data /= dp)"),
            ("check_grad", "no per-bucket NaN check in 2021 (fp16's loss-scaler unscale is "
                           "not modelled)"),
            ("grad_norm", "clip_grad_norm_fp32, amp_C.multi_tensor_l2norm (--clip-grad 1.0)"),
            ("param_copy", "_copy_main_params_to_model_params after the step"),
            ("tied_reduce", "training.py all-reduces word_embeddings' gradient across the "
                            "first and last stages"))))

MEGATRON_DEEPSPEED = FrameworkProfile(
    name="megatron-deepspeed", dp_bucket=DEEPSPEED_BUCKET,
    description="Megatron-DeepSpeed (BLOOM, 2021-22 DeepSpeed-Megatron runs): Megatron's tensor "
                "parallelism under DeepSpeed's pipeline engine and ZeRO-1, main_grad.add_ per "
                "micro-batch",
    grad_accum_fusion=False, kernels_per_layer=20, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=False, default_overlap_grad_reduce=False,
    default_overlap_param_gather=False, default_tp_comm_overlap=False, default_recompute="full",
    schedules=("deepspeed-1f1b",), zero_stages=(0, 1, 2, 3), zero_with_pp=1,
    context_parallel=False, expert_parallel=False, sequence_parallel=False,
    tp_comm_overlap=False, flash_attn=False, export="deepspeed",
    # ColumnParallelLinear's backward all-reduces the input gradient blocking
    # (copy_to_tensor_model_parallel_region; bigscience-workshop/Megatron-DeepSpeed)
    dgrad_overlap="none",
    tp_end_collectives=True,   # §5.88
    schedule_impl=(("1f1b", "deepspeed-1f1b"),), zero3_gather="per-tensor",
    recompute_methods=("uniform",), bf16_optimizer=True, loss=MEGATRON_DEEPSPEED_CROSS_ENTROPY,
    alibi_score_bytes=ALIBI_BADDBMM_BYTES,
    precisions=("bf16", "fp16"),
    precision_source="DeepSpeed's config \"bf16\": {\"enabled\"} or \"fp16\": {\"enabled\"} "
                     "(deepspeed/runtime/config.py), Megatron-DeepSpeed --bf16 / --fp16; no "
                     "fp8 recipe in its model code",
    layouts=("slots",),  # not per_stage: see pipeline_split
    pipeline_split="DeepSpeed's PipelineModule(partition_method=parameters|uniform|type:REGEX): "
                   "a balanced split of the layers the method weighs; "
                   "type:transformer|embedding counts the embedding and the head as layers "
                   "(BLOOM), the slots of account_embedding/account_loss",
    default_sources=(
        ("flash_attn", "no FlashAttention: Megatron-DeepSpeed's fused softmax (BLOOM, "
                       "bigscience-workshop/Megatron-DeepSpeed, 2022)"),
        ("overlap_grad_reduce", "DeepSpeed's pipeline engine reduces gradients after the "
                                "schedule (TrainSchedule's ReduceGrads instruction, "
                                "runtime/pipe/schedule.py)"),
        ("overlap_param_gather", "ZeRO-1 gathers the updated parameters after the step"),
        ("tp_comm_overlap", "no TP communication overlap (Megatron's 2021 tensor parallelism)"),
        ("recompute", "full-layer checkpointing (BLOOM's --checkpoint-activations)")),
    step=StepPasses(
        zero_grad=False, clip_scale=True,
        sources=(
            ("zero_grad", "ZeRO-1/2 zero_grad(set_to_none=True): no memset "
                          "(runtime/zero/stage_1_and_2.py)"),
            ("scale_grad", "average_tensor / allreduce_bucket divide the gradients by the "
                           "data-parallel size (tensor.div_)"),
            ("check_grad", "step(): check_overflow, _has_inf_or_nan over the gradients"),
            ("grad_norm", "scaled_global_norm before the optimizer"),
            ("clip_scale", "unscale_and_clip_grads multiplies the fp32 partition by "
                           "1/combined_scale every step"),
            ("param_copy", "bit16_partitions[...].data.copy_(fp32_partition.data)"),
            ("tied_reduce", "PipelineEngine._exec_reduce_tied_grads (TrainSchedule's "
                            "ReduceTiedGrads, before ReduceGrads)"))))

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

MEGATRON_CORE = FrameworkProfile(
    name="megatron-core",
    description="Megatron-Core / NeMo 2023+ with Transformer Engine: fused kernels, "
                "FlashAttention, gradient-accumulation fusion, DP and TP communication overlap",
    grad_accum_fusion=True, kernels_per_layer=16, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=True, default_overlap_grad_reduce=True,
    default_overlap_param_gather=True, default_tp_comm_overlap=True, ep_overlap=True,
    # --num-distributed-optimizer-instances (distributed optimizer sharded over dp·cp/R)
    hybrid_zero=(1,),
    overlap_p2p_comm=True,
    moe_dispatchers=("alltoall", "deepep", "hybridep"), cuda_graph=True, eager_variants=True,
    grouped_mlp_casts=True, quant_padding=True, expert_gemm_launch=TE_GROUPED_GEMM,
    te_amax_reduction=True,
    recompute_methods=("block", "uniform"), recompute_modules=RECOMPUTE_MODULES,
    loss=MEGATRON_CROSS_ENTROPY, tp_end_collectives=True,   # §5.88
    sp_shard_whole_gemms=True,                              # §5.99
    default_sources=(
        ("flash_attn", "Transformer Engine's fused attention (Megatron-Core "
                       "--attention-backend auto, NeMo 2 recipes)"),
        ("overlap_grad_reduce", "NeMo performance recipes and Megatron-Core's README set "
                                "--overlap-grad-reduce (DistributedDataParallelConfig)"),
        ("overlap_param_gather", "NeMo performance recipes and Megatron-Core's README set "
                                 "--overlap-param-gather"),
        ("tp_comm_overlap", "NeMo performance recipes turn TP communication overlap on "
                            "(tp_comm_overlap=True with the userbuffers configs, with TP and SP)"),
        ("recompute", "no recomputation unless the recipe names it")),
    step=StepPasses(sources=(
        ("zero_grad", "zero_grad_buffer: _ParamAndGradBuffer.reset, grad_data.zero_() "
                      "(megatron/core/distributed/param_and_grad_buffer.py)"),
        ("scale_grad", "start_grad_sync: bucket.grad_data *= gradient_scaling_factor (1/dp) "
                       "unless --ddp-average-in-collective (off by default; NeMo 2 and "
                       "Megatron-Bridge recipes turn it on: the nemo profile)"),
        ("check_grad", "start_grad_sync: check_grads, grad_data.norm(p=2) per bucket "
                       "(--check-for-nan-in-loss-and-grad, on by default)"),
        ("grad_norm", "get_grad_norm_fp32, multi_tensor_l2norm over the main gradients "
                      "(--clip-grad 1.0); the clip multiply only when the norm exceeds it"),
        ("param_copy", "_copy_main_params_to_model_params, _multi_tensor_copy_this_to_that "
                       "(megatron/core/optimizer/optimizer.py)"),
        ("tied_reduce", "finalize_model_grads: _allreduce_word_embedding_grads over the "
                        "embedding group (first and last stage)"))))

NEMO = replace(
    MEGATRON_CORE, name="nemo", dp_bucket=NEMO_BUCKET,
    # NeMo 2's model configs set cross_entropy_loss_fusion=True (GPTConfig, NemotronConfig in
    # nemo/collections/llm/gpt/model/): Megatron's jit-fused path, whose passes depend on what
    # the fuser merges and are not counted here, so the assumed three passes each way are kept
    loss=LossPasses(),
    # ... and its tp all-reduces are the max and the concatenated [target logit, sum of
    # exponentials] (core/fusions/fused_cross_entropy.py, §5.88)
    tp_loss_allreduces=(1, 2),
    description="NeMo 2 / Megatron-Bridge recipes on Megatron-Core: Megatron-Core's kernels "
                "and defaults, gradients averaged in the data-parallel collective "
                "(average_in_collective=True: no 1/dp scaling pass)",
    step=replace(MEGATRON_CORE.step, scale_grad=False, sources=tuple(
        (k, v) if k != "scale_grad" else
        ("scale_grad", "NeMo 2 recipes (nemo/collections/llm/recipes, the trainer's "
                       "DistributedDataParallelConfig) and Megatron-Bridge's set "
                       "average_in_collective=True: Megatron-Core's DDP then gives the dense "
                       "buckets gradient_scaling_factor 1.0 and reduces with ReduceOp.AVG, so "
                       "start_grad_sync skips grad_data *= 1/dp (expert buckets with ep > 1 "
                       "still scale by edp/dp: not modelled)")
        for k, v in MEGATRON_CORE.step.sources)))

PYTORCH_EAGER = FrameworkProfile(
    name="pytorch-eager", dp_bucket=MODEL_BUCKET,
    description="PyTorch eager with FSDP or DDP (MosaicML Composer, torchtitan without compile): "
                "FlashAttention, unfused elementwise kernels, AccumulateGrad per micro-batch",
    grad_accum_fusion=False, kernels_per_layer=30, launch_gap_s=LAUNCH_GAP_S,
    loss=COMPOSER_CROSS_ENTROPY,
    default_flash_attn=True, default_overlap_grad_reduce=True,
    default_overlap_param_gather=True, default_tp_comm_overlap=False, attention_kernel="fa2",
    schedules=(), zero_stages=(0, 2, 3), max_tp=1, max_pp=1, context_parallel=False,
    group_microbatches=False,
    # FSDP ShardingStrategy.HYBRID_SHARD / _HYBRID_SHARD_ZERO2, FSDP2's 2-D mesh (HSDP)
    hybrid_zero=(2, 3),
    expert_parallel=False, sequence_parallel=False, tp_comm_overlap=False,
    # DTensor's ColwiseParallel: the matmul saves the all-gathered input, no re-gather
    # (torchtitan and NeMo AutoModel inherit it); its input gradient is redistributed after
    # the matmul's backward computed both GEMMs: nothing beside the reduction
    sp_regather=False, dgrad_overlap="none",
    recompute=("none", "full"), export="llm-foundry", recompute_early_stop=True, layouts=(),
    precisions=("bf16", "fp16", "fp8", "fp8-delayed"),
    precision_source="Composer's precision amp_bf16, amp_fp16 or amp_fp8 "
                     "(composer/core/precision.py); amp_fp8 is Transformer Engine's "
                     "fp8_autocast with its default DelayedScaling recipe",
    pipeline_split="no pipeline parallelism",
    # FSDP1 with Composer's MixedPrecision over an fp32 model: FSDP2's state layout (the fp32
    # shard is the master, no persistent bf16 shard, the root kept gathered; the field's
    # sources); with max_pp 1 its pipelined-gradient rule never applies. docs/calibration.md
    # §5.46
    fsdp2=True,
    sharded_grad_passes=("flat_grad_cat", "reduce_cast", "predivide"),
    sharded_grad_sources=(
        ("flat_grad_cat", "FSDP1 (PyTorch 2.1, torch/distributed/fsdp/_flat_param.py "
                          "_get_unflat_views): a unit's weights are views made by torch.split "
                          "of the unsharded FlatParameter, so autograd's SplitWithSizesBackward "
                          "concatenates (at::cat) the per-weight gradients into the flat "
                          "gradient before its AccumulateGrad; Composer wraps with "
                          "use_orig_params=True (composer/trainer/dist_strategy.py, v0.16.4), "
                          "whose forward uses the same split views"),
        ("reduce_cast", "_post_backward_hook (torch/distributed/fsdp/_runtime_utils.py): "
                        "flat_param.grad.to(handle._reduce_dtype) when the gradient's dtype "
                        "differs; Composer's mixed_precision DEFAULT (composer/trainer/"
                        "mosaic_fsdp_utils.py get_mixed_precision, v0.16.4, the MP mode of "
                        "llm-foundry's benchmark tables) is param_dtype = the precision's "
                        "(bf16), reduce_dtype float32, buffer_dtype bf16"),
        ("predivide", "FSDP1's default hook reduce_scatter_hook (torch/distributed/algorithms/"
                      "_comm_hooks/default_hooks.py): grad.div_(gradient_predivide_factor) "
                      "before reduce_scatter_tensor; DefaultState._get_gradient_predivide_factor"
                      " is > 1 for every world size >= 2 (the post-divide runs on the 1/dp "
                      "shard, not charged)")),
    default_sources=(
        ("flash_attn", "FlashAttention (MosaicML llm-foundry attn_impl: flash; torchtitan "
                       "SDPA's flash backend)"),
        ("overlap_grad_reduce", "FSDP reduce-scatters each unit's gradients in its backward "
                                "hook; DDP reduces buckets during the backward"),
        ("overlap_param_gather", "FSDP prefetches the next unit's parameters "
                                 "(backward_prefetch, forward prefetch)"),
        ("tp_comm_overlap", "no TP communication overlap in eager PyTorch (async TP needs "
                            "torch.compile)"),
        ("recompute", "no activation checkpointing unless configured")),
    step=StepPasses(
        zero_grad=False, scale_grad=False, check_grad=False, clip_scale=True,
        param_copy=False, tied_reduce=False, adam_elements=COMPOSER_ADAMW_ELEMENTS,
        sources=(
            ("adam_elements", "Composer DecoupledAdamW.adamw (llm-foundry's MPT yamls: "
                              "decoupled_adamw, weight_decay 0): one Python loop over the "
                              "parameters, unfused: exp_avg.mul_ 2, .add_ 3, exp_avg_sq.mul_ 2, "
                              ".addcmul_ 3, sqrt 2, / 2, .add_(eps) 2, param.addcdiv_ 4"),
            ("zero_grad", "optimizer.zero_grad(set_to_none=True), PyTorch's default"),
            ("scale_grad", "the 1/dp average is taken by the reduce-scatter (not a pass over "
                           "the whole buffer)"),
            ("grad_norm", "torch.nn.utils.clip_grad_norm_ (torchtitan max_norm 1.0; Composer "
                          "gradient clipping)"),
            ("clip_scale", "clip_grad_norm_ multiplies every gradient by the clamped "
                           "coefficient (_foreach_mul_) every step"),
            ("param_copy", "FSDP keeps fp32 sharded weights and casts them in the all-gather"))))

#: ``torch.distributed.pipelining`` schedule (torchtitan's ``pipeline_parallel_schedule``) of
#: each of our schedules torchtitan runs (module docstring); the pipelining module's other
#: schedules have none of ours: ``LoopedBFS`` (breadth-first), ``InterleavedZeroBubble``
#: (ZB-1p over several chunks per rank, a fixed order; our ``zb-1p`` is one chunk per rank,
#: the paper's heuristic, and torchtitan gives a multi-stage schedule >= 2 chunks per rank)
TORCHTITAN_SCHEDULE_NAMES = (("gpipe", "GPipe"), ("1f1b", "1F1B"),
                             ("interleaved", "Interleaved1F1B"), ("zb-v", "ZBVZeroBubble"),
                             ("dualpipev", "DualPipeV"))
TORCHTITAN_SCHEDULES = tuple(ours for ours, _ in TORCHTITAN_SCHEDULE_NAMES)

TORCHTITAN = replace(
    PYTORCH_EAGER, name="torchtitan",
    description="torchtitan (PyTorch FSDP2, eager): FlashAttention (SDPA), unfused elementwise "
                "kernels, AccumulateGrad per micro-batch, torch.distributed.pipelining schedules",
    schedules=TORCHTITAN_SCHEDULES, zero_stages=(0, 2, 3), zero_with_pp=2,
    max_tp=None, max_pp=None, context_parallel=True, expert_parallel=True,
    sequence_parallel=True, recompute=("none", "full", "op"), export="torchtitan",
    ddp_sole=True, ep_from_fsdp=True,
    # async TP (docs/calibration.md §5.50): torchtitan 820504e (the asyncTP benchmark's commit)
    # models/llama3/parallelize_llama.py: TP always shards the norms as SequenceParallel, the
    # attention and feed-forward inputs all-gathered once (Shard(1) -> Replicate) for wq, wk,
    # wv and w1, w3; with enable_async_tp it sets torch._inductor.config._micro_pipeline_tp
    # and enable_symm_mem_for_group over the TP mesh, and raises "Async TP requires
    # --training.compile" without compile; HEAD b5bcd76c6 config/configs.py CompileConfig
    # raises the same ("Async TP requires 'model' in --compile.components and
    # --compile.enable"); enable_async_tensor_parallel defaults to False
    tp_comm_overlap=True, tp_overlap="async-tp", tp_overlap_bwd_exposed=0.5,
    default_sources=tuple((k, v) if k != "tp_comm_overlap" else (
        "tp_comm_overlap", "async TP is off unless --compile.enable_async_tensor_parallel "
                           "(config/configs.py CompileConfig, default False); it needs "
                           "torch.compile")
        for k, v in PYTORCH_EAGER.default_sources),
    # v0.2.2 models/moe/moe.py GroupedExperts(use_grouped_mm=True): torch._grouped_mm, one
    # grouped kernel for all local experts (ATen's CUTLASS bf16bf16_grouped_mm) per GEMM
    expert_gemm_launch=ExpertGemmLaunch(
        "fused", 1, "torchtitan v0.2.2 models/moe/moe.py _run_experts_grouped_mm: "
                    "torch._grouped_mm, one kernel for every local expert"),
    # torchtitan 8570415c3 (2025-06-05) on, HEAD b5bcd76c6 trainer.py train_step: one
    # pp_schedule.step() per gradient-accumulation step (global_batch_size / (local_batch_size
    # · dp) of them, each over the local batch's micro-batches), the optimizer once after;
    # 9dec370 (Dec 2024, the reference rows) had no accumulation: one step() per step
    # (docs/calibration.md §5.46)
    pipeline_flushes=True,
    # FSDP2 over the fp32 model (9dec370 train.py: meta init, model.to_empty, fp32;
    # parallelisms/parallelize_llama.py apply_fsdp: MixedPrecisionPolicy(bf16, fp32),
    # reshard_after_forward=False under pp), docs/calibration.md §5.32
    fsdp2=True,
    # torch.distributed.tensor.experimental.context_parallel (torchtitan
    # experimental.context_parallel_degree, Dec 2024); its Llama repeats K/V before SDPA
    cp_impl="torch", cp_kv_heads="query",
    # models/llama/model.py and models/norms.py run as eager ops (no torch.compile)
    elementwise_kernels="eager",
    gather_copy_out=True,
    # 9dec370 and 2887250bb models/llama3/infra/parallelize.py apply_tp: the blocks' inputs
    # and outputs Shard(1) of [bs, seqlen, dim] (its own note: "we can accelerate Sequence
    # Parallel by folding (and unfolding) the batch dimension and the sequence dimension",
    # pull #437: "an extra aten.cat after each collective"); the fold landed in 73aed7f6c
    # (#4121, 2026-08-20), after every reference row (docs/calibration.md §5.80)
    tp_seq_dim_copies=True,
    # the embedding's and the output's TP collectives and loss_parallel's all-reduces
    # (9dec370 / 2887250bb apply_tp; torch/distributed/tensor/parallel/loss.py), §5.84
    tp_end_collectives=True,
    # torchtitan apply_tp with float8 tensorwise: torchao's Float8 TP styles (§5.84)
    torchao_float8_tp=True,
    precisions=("bf16", "fp8", "fp8-delayed", "fp8-current", "mxfp8"),
    precision_source="torchtitan's training.mixed_precision_param bfloat16 and its torchao "
                     "converters: float8 with dynamic (tensorwise, fp8-current) or, until "
                     "torchao removed it in 2025, delayed scaling (torchtitan 2024 "
                     "float8.scaling_type_input dynamic|delayed, the torchtitan paper's "
                     "runs); quantize.linear.mx mxfp8 (v0.2.2 components/quantization/mx.py)",
    precision_notes=(
        ("fp16", "torchtitan's mixed precision is bfloat16 or float32 "
                 "(training.mixed_precision_param)"),
        ("fp8-blockwise", "torchao's float8 recipes are tensorwise and rowwise, not "
                          "DeepSeek's 1x128/128x128 blocks"),
        ("nvfp4", "torchtitan v0.2.2 has no NVFP4 training converter")),
    recompute_note="its selective AC is per op (recompute=op) or every N-th layer "
                   "(distributed/activation_checkpoint.py), not Megatron's attention-core "
                   "recomputation",
    layouts=LAYOUT_WAYS,
    pipeline_split="module_fqns_per_model_part (any modules per chunk: a layout string, "
                   "first/last counts, slots or a count per rank); its default split counts "
                   "the embedding and the output as layers "
                   "(pipeline_parallel_first/last_stage_less_layers=1)",
    # train.py's loss_fn, F.cross_entropy(pred.flatten(0, 1).float(), labels), eager: the
    # backward's log_softmax_backward holds its saved fp32 output, the fp32 gradient nll_loss
    # wrote and its own fp32 result at once (the time passes stay LossPasses' assumption)
    loss=replace(LossPasses(), peak_bytes=12.0, peak_source=(
        "torchtitan 9dec370 (Dec 2024) train.py loss_fn: F.cross_entropy(pred.flatten(0, 1)"
        ".float(), labels.flatten(0, 1)), eager (loss_fn compile commented out), `del pred` "
        "before loss.backward(): forward 16-bit logits 2 + fp32 copy 4 + log_softmax output 4 "
        "= 10; backward saved log_softmax output 4 + nll_loss's fp32 gradient 4 + "
        "log_softmax_backward's fp32 result 4 = 12 bytes per element"),
        # tp > 1: train.py runs the loss under loss_parallel (enable_loss_parallel = not
        # training.disable_loss_parallel, default on), DTensor's custom handlers in
        # torch/distributed/tensor/parallel/loss.py on the vocabulary-sharded fp32 logits
        peak_bytes_sharded=16.0, peak_sharded_source=(
            "torchtitan 9dec370 train.py train_context(enable_loss_parallel) with tp > 1: "
            "torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward "
            "holds the saved fp32 log_softmax output x 4, grad_input = zeros_like(x) 4, and "
            "(grad_input + exp(x)) 4 while its product with grad_output 4 is written: 16 bytes "
            "per element (forward: 16-bit logits 2 + fp32 copy 4 + shifted 4 + result 4 = 14)")),
    sharded_grad_passes=("reduce_copy_in",),
    sharded_grad_sources=(
        ("reduce_copy_in", "FSDP2 foreach_reduce (torch/distributed/_composable/fsdp/"
                           "_fsdp_collectives.py): foreach_reduce_scatter_copy_in copies every "
                           "unsharded gradient (torch._chunk_cat) into the reduce-scatter input "
                           "in the reduce dtype (torchtitan mixed_precision_reduce float32); "
                           "no pre-divide for fp32/bf16 (_get_gradient_divide_factors: NCCL "
                           "averages), and no flat-gradient concatenation (per-parameter "
                           "sharding)"),),
    step=replace(PYTORCH_EAGER.step, adam_elements=TORCH_FOREACH_ADAMW_ELEMENTS, sources=tuple(
        (k, v) for k, v in PYTORCH_EAGER.step.sources if k != "adam_elements") + (
        ("adam_elements", "torch.optim.AdamW(foreach=True): torchtitan's --optimizer.fused "
                          "defaults to False, weight_decay 0.1; _multi_tensor_adamw: "
                          "_foreach_mul_(params) 2, _foreach_lerp_(exp_avgs) 3, "
                          "_foreach_mul_(exp_avg_sqs) 2, _foreach_addcmul_ 3, _foreach_sqrt 2, "
                          "_foreach_div_ 2, _foreach_add_(eps) 2, _foreach_addcdiv_ 4"),)))

JAX_XLA = FrameworkProfile(
    name="jax-xla", dp_bucket=MODEL_BUCKET,
    description="JAX/XLA (MaxText, PAXML): compiler-fused elementwise work, FSDP-style "
                "sharding, gradients accumulated by a separate fused add",
    grad_accum_fusion=False, kernels_per_layer=16, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=True, default_overlap_grad_reduce=True,
    default_overlap_param_gather=True, default_tp_comm_overlap=False, default_recompute="full",
    schedules=("gpipe",), zero_stages=(0, 3), zero_with_pp=0, expert_parallel=True, ep_in_dp=True,
    hybrid_zero=(3,),        # MaxText's ici_fsdp x dcn_data_parallelism meshes
    microbatches_per_pp=True,
    group_microbatches=False,
    tp_comm_overlap=False, export="maxtext", layouts=(),
    sp_regather=False,   # XLA's SPMD partitioner decides what the backward keeps: not modelled
    dgrad_overlap="none",   # nor what it overlaps: not read
    recompute_modules=("core_attn", "layernorm", "mlp"), recompute_early_stop=True,
    recompute_flash_fwd=True, remat_named=True, weight_cast_per_forward=True,
    # weight_dtype float32: the fp32 weights are the only stored copy (docs/calibration.md §5.46)
    master_only=True,
    recompute_note="MaxText's remat policies are full, or named tensors saved and the rest "
                   "recomputed (strategies.remat_policies: selective with the modules "
                   "core_attn, layernorm, mlp)",
    precisions=("bf16", "fp16", "fp8", "fp8-delayed", "fp8-current", "mxfp8", "nvfp4"),
    precision_source="MaxText dtype bfloat16 or float16 (configs/base.yml) and quantization "
                     "te_fp8_delayedscaling, te_fp8_currentscaling, te_mxfp8, te_nvfp4 "
                     "(Transformer Engine recipes through JAX, layers/quantizations.py)",
    precision_notes=(("fp8-blockwise", "MaxText's quantization has no Transformer Engine "
                                       "blockwise (1x128/128x128) recipe"),),
    pipeline_split="MaxText's Pipeline vmaps one stage body over the stages: every stage builds "
                   "num_layers_per_pipeline_stage layers, the embedding and the head outside "
                   "the pipeline",
    default_sources=(
        ("flash_attn", "cuDNN fused attention through XLA (MaxText attention: "
                       "cudnn_flash_te in its GPU configs)"),
        ("overlap_grad_reduce", "XLA's latency-hiding scheduler overlaps the gradient "
                                "reduce-scatters with the backward"),
        ("overlap_param_gather", "XLA's latency-hiding scheduler overlaps the FSDP "
                                 "all-gathers with compute"),
        ("tp_comm_overlap", "no Transformer Engine userbuffers overlap"),
        ("recompute", "MaxText remat_policy: 'full' (configs/base.yml); Praxis "
                      "checkpoint_policy SAVE_NOTHING")),
    step=StepPasses(
        zero_grad=False, scale_grad=False, check_grad=False, param_copy=False,
        tied_reduce=False,
        sources=(
            ("zero_grad", "functional accumulation: no buffer to zero"),
            ("grad_norm", "optax.clip_by_global_norm (MaxText gradient_clipping_threshold); "
                          "the multiply is fused by XLA into the update"),
            ("param_copy", "fp32 weights cast inside the fused layers"))))

HAI_LLM = replace(
    MEGATRON_CORE, name="hai-llm", loss=LossPasses(),   # HAI-LLM's code is not public
    dp_bucket=MODEL_BUCKET,
    description="DeepSeek's HAI-LLM (DeepSeek-V2/V3 reports): no tensor parallelism, "
                "zero-bubble or DualPipe pipelining, expert parallelism, ZeRO-1, fused kernels",
    default_tp_comm_overlap=False, default_recompute="none",
    schedules=("1f1b", "zb-h1", "dualpipe"), zero_stages=(0, 1), zero_with_pp=1, max_tp=1,
    hybrid_zero=(),
    context_parallel=False, tp_comm_overlap=False, ep_overlap=False,
    # report §3.2.2: a token crosses IB once per destination node, then NVLink to its GPUs
    # (node-deduplicated dispatch, the design DeepSeek released as DeepEP)
    moe_dispatchers=("alltoall", "deepep"), export="none", cuda_graph=False,
    # its expert kernels are not public (not Transformer Engine's GroupedLinear): fused casts
    grouped_mlp_casts=False, quant_padding=False, te_amax_reduction=False,
    # DeepSeek on its released V3 training profile (deepseek-ai/profile-data issue #2,
    # 2025-02-28): "we launch expert GEMMs (one kernel for one expert) on two streams
    # interleavely", an earlier grouped GEMM than DeepGEMM's, kept for V3 training
    expert_gemm_launch=ExpertGemmLaunch(
        "multi_stream", 2, "deepseek-ai/profile-data issue #2 (DeepSeek, 2025-02-28): V3 "
                           "training launches one kernel per expert on two streams"),
    precisions=("bf16", "fp8-blockwise"),
    # DeepSeek-V3 report §3.3.3: activations cached in FP8 (E5M6 after the attention), the
    # AdamW moments in BF16 beside the FP32 master weights: 4 + 2 + 2 bytes per parameter
    fp8_activation_cache=True, optimizer_state_bytes=8.0,
    # §3.3.3 "Low-Precision Communication": FP8 dispatch (DeepEP's 1x128 fp32 scales), BF16
    # combine
    fp8_dispatch=True,
    precision_source="DeepSeek-V2 report (BF16 training) and DeepSeek-V3 report §3.3: "
                     "fine-grained FP8 (1x128 activation tiles, 128x128 weight blocks); "
                     "HAI-LLM's code is not public",
    precision_notes=tuple((d, "DeepSeek-V3's FP8 is block-wise: use --dtype fp8-blockwise")
                          for d in ("fp8", "fp8-delayed", "fp8-current", "mxfp8")),
    default_sources=(
        ("flash_attn", "fused attention kernels (DeepSeek-V3 report §3.2)"),
        ("overlap_grad_reduce", "DualPipe overlaps the data-parallel reductions with the "
                                "pipeline's last backward passes (DeepSeek-V3 report §3.2.1)"),
        ("overlap_param_gather", "ZeRO-1 gathers the updated parameters after the step"),
        ("tp_comm_overlap", "no tensor parallelism in training (DeepSeek-V3 report §3.2: "
                            "'without costly tensor parallelism')"),
        ("recompute", "only RMSNorm and MLA's up-projections are recomputed (report §3.2.3), "
                      "a small share of the FLOPs, charged as none")),
    step=replace(MEGATRON_CORE.step, sources=tuple(
        (k, "assumed as Megatron-Core's (HAI-LLM's code is not public)")
        for k in ("zero_grad", "scale_grad", "check_grad", "grad_norm", "param_copy",
                  "tied_reduce"))))

#: NVIDIA-NeMo/Automodel at 89e3a9fdd (2025-10-06, the commit of its performance summary's MoE
#: rows, docs/calibration.md §5.31, §5.38); every path below is under ``nemo_automodel/``
AUTOMODEL_SOURCE = "NVIDIA-NeMo/Automodel 89e3a9fdd (2025-10-06)"

AUTOMODEL = replace(
    TORCHTITAN, name="automodel",
    description="NeMo AutoModel's PyTorch path for MoE models (FSDP2 over a bf16-built model, "
                "Transformer Engine linear/RMSNorm/attention, DeepEP, "
                "torch.distributed.pipelining): no tensor or context parallelism",
    # components/moe/parallelizer.py parallelize_model asserts "Tensor parallelism not
    # supported for DeepSeek v3 model" and "Context parallelism not supported" (tp = cp = 1)
    max_tp=1, context_parallel=False, sequence_parallel=False,
    tp_comm_overlap=False, tp_overlap="userbuffers", tp_overlap_bwd_exposed=0.0,
    # apply_fsdp: fully_shard(..., reshard_after_forward=not pp_enabled): ZeRO-3 without
    # pipelining, ZeRO-2 (parameters kept gathered) with it; no DDP on this path
    zero_stages=(2, 3), zero_with_pp=2, ddp_sole=False, zero_follows_pp=True, hybrid_zero=(),
    # components/distributed/fsdp2.py FSDP2Manager: assert dp_size % ep_size == 0, the moe
    # mesh (pp, ep_shard = dp/ep, ep) over the data-parallel ranks
    ep_from_fsdp=False, ep_in_dp=True,
    # components/distributed/pipelining/functional.py build_pipeline_schedule:
    # torch.distributed.pipelining's get_schedule_class (torchtitan's set)
    schedules=TORCHTITAN_SCHEDULES,
    # apply_ac: ptd_checkpoint_wrapper per decoder block (full; its ignore_router policy keeps
    # only the router's mm, read as full)
    recompute=("none", "full"), recompute_note="apply_ac wraps whole decoder blocks "
                                               "(ptd_checkpoint_wrapper): full only",
    # components/moe/layers.py: backend.enable_deepep -> GroupedExpertsDeepEP with
    # MoEFlexTokenDispatcher(moe_enable_deepep=True); without it GroupedExperts gathers the
    # tokens over the EP group (DTensor full_tensor), a path not modelled: "alltoall" stands
    # in for it
    moe_dispatchers=("alltoall", "deepep"),
    # GroupedExpertsDeepEP (components/moe/layers.py): grouped_gemm's ops.gmm, one cuBLAS
    # GEMM per expert on 4 streams (the non-DeepEP GroupedExperts loops over its experts)
    expert_gemm_launch=GROUPED_MLP_GEMM,
    # TE's DotProductAttention (backend attn: te) is the chip's fused kernel
    attention_kernel="native",
    # bf16-built model (components/models/{deepseek_v3,qwen3_moe}/model.py:
    # dtype=get_dtype(config.torch_dtype, torch.bfloat16), initialize_weights(dtype=bf16)):
    # FSDP2's shard is bf16 and is the parameter torch.optim.Adam updates; m and v follow its
    # dtype: master 2 + m 2 + v 2 (docs/calibration.md §5.32, §5.38)
    optimizer_state_bytes=6.0, master_bytes=2.0,
    # recipes/llm/train_ft.py _run_train_optim_step, recipes/llm/benchmark.py run_benchmark:
    # schedule.step() once per gradient-accumulation step of local_batch_size sequences
    # (strategies.flushes, docs/calibration.md §5.43); train_ft.py asserts pp micro-batches
    # per flush
    pipeline_flushes=True, flush_needs_pp_microbatches=True,
    precisions=("bf16",),
    precision_source="the benchmark configs' bf16 runs (model built in "
                     "config.torch_dtype, bf16 default; components/moe/parallelizer.py "
                     "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)); fp8 not read",
    precision_notes=(),
    export="none",
    pipeline_split="module_fqns_per_model_part (components/distributed/pipelining/"
                   "functional.py pipeline_model: any modules per stage); its default "
                   "generate_hf_model_fqn_per_model_part gives the first num_layers % stages "
                   "stages one layer more, the embedding to the first and norm and head to "
                   "the last",
    default_sources=(
        ("flash_attn", "Transformer Engine DotProductAttention (backend attn: te)"),
        ("overlap_grad_reduce", "FSDP2 reduce-scatters each block's gradients in its "
                                "post-backward hook"),
        ("overlap_param_gather", "FSDP2 prefetches the next block's all-gather"),
        ("tp_comm_overlap", "no tensor parallelism (moe/parallelizer.py asserts tp = 1)"),
        ("recompute", "activation_checkpointing: false unless the config sets it")))

#: the suffix of a stack's torch.compile variant (``compiled``): ``torchtitan-compile``, which
#: ``get_profile`` resolves (a variant of a stack, so not one of ``PROFILES``)
COMPILE_SUFFIX = "-compile"
#: kernels one compiled torchtitan block launches per forward: attention_norm, wq, wk, wv,
#: rotary q, rotary k with repeat_kv, repeat_kv v, SDPA, wo, add + ffn_norm, w1, w3,
#: silu * mul, w2, add (docs/calibration.md §5.69)
COMPILED_KERNELS_PER_LAYER = 15


#: torchtitan's loss under torch.compile (docs/calibration.md §5.74): since bbb1b616e
#: (2025-04-02) ``components/loss.py`` ``build_cross_entropy_loss`` wraps ``cross_entropy_loss``
#: (``F.cross_entropy(pred.flatten(0, 1).float(), labels)``) in ``torch.compile`` when the
#: model is compiled (e7c0cae, 2025-06; HEAD with ``"loss" in compile.components``). AOTAutograd's
#: min-cut partitioner (torch/_functorch/partitioners.py: ``aten.to``, ``sub``, ``exp``,
#: ``log`` recomputable, reductions' small outputs saved) keeps the 16-bit logits (2 bytes per
#: element) and the rows' max and log-sum-exp, not an fp32 copy; the fused backward writes the
#: gradient in the logits' dtype (2): 4 bytes per logit element at the peak. Memory only: the
#: time passes stay ``LossPasses``' assumption. Before bbb1b616e (9dec370, Dec 2024) the loss
#: ran eager ("TODO: compiling loss function causes CUDA errors"): ``TORCHTITAN.loss``'s 12.
TORCHTITAN_COMPILED_LOSS = replace(TORCHTITAN.loss, peak_bytes=4.0, peak_bytes_sharded=None,
                                   peak_sharded_source="", peak_source=(
    "torchtitan bbb1b616e+ (2025-04) components/loss.py build_cross_entropy_loss: "
    "torch.compile(cross_entropy_loss) with the model; the min-cut partitioner saves the "
    "16-bit logits (2) and row statistics, the fused backward writes the 16-bit gradient (2): "
    "4 bytes per element; with tp > 1 (loss_parallel's DTensor handlers traced) not read, "
    "taken as the same 4"))


def compiled(fw: FrameworkProfile) -> FrameworkProfile:
    """Stack ``fw`` with its model under torch.compile (torchtitan's ``--compile.enable``,
    ``components`` model and loss): the elementwise work of ``counts.
    compiled_elementwise_bytes_fwd`` in ``COMPILED_KERNELS_PER_LAYER`` kernels per layer;
    the quantisation casts keep ``quantise``'s rule (docs/calibration.md §5.69); the loss
    compiled with the model (``TORCHTITAN_COMPILED_LOSS``, its memory, §5.74). SpecError
    for a stack with no such switch."""
    if fw.name == TORCHTITAN.name:
        return replace(
            fw, name=fw.name + COMPILE_SUFFIX, elementwise_kernels="compiled",
            kernels_per_layer=COMPILED_KERNELS_PER_LAYER, loss=TORCHTITAN_COMPILED_LOSS,
            description="torchtitan with torch.compile (--compile.enable, model per "
                        "TransformerBlock): inductor-fused elementwise kernels, FSDP2, "
                        "torch.distributed.pipelining schedules")
    if fw.name.endswith(COMPILE_SUFFIX):
        return fw
    raise SpecError("framework", fw.name + COMPILE_SUFFIX,
                    f"torch.compile is a switch of torchtitan only (--compile.enable); "
                    f"{fw.name} has none")


def with_fused_grouped_mlp(fw: FrameworkProfile) -> FrameworkProfile:
    """Stack ``fw`` with its routed experts in Transformer Engine's fused grouped MLP
    (Megatron-Bridge's ``cutedsl_fused_grouped_mlp``: ``use_transformer_engine_op_fuser`` and
    ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``, ``scripts/performance/utils/overrides.py`` and
    ``perf_plugins.py`` at v0.5.0; Megatron-Core 0.18 ``TEGroupedMLP._fused_forward``; an
    MXFP8 path on compute capability 10, ``TE_FUSED_GROUPED_MLP``): the GLU kernel writes
    fc2's input quantised and the backward's dGLU fc1's ``dY``, so no cast passes of their
    own (``grouped_mlp_casts`` off; NVIDIA's "separate quantization pass", quantise's module
    doc); no ``Fp8Padding`` copies (``quant_padding`` off: HybridEP pads in its dispatch,
    Megatron-Core 0.18 ``moe_utils.skip_routed_expert_padding``, and the router pads
    otherwise under a full-iteration graph); one kernel per grouped GEMM; the activation's
    clamp inside the kernel (``runs_eager_clamp`` False). SpecError for a stack that does
    not run Megatron-Core's ``TEGroupedMLP`` (``grouped_mlp_casts``)."""
    if fw.fused_grouped_mlp:
        return fw
    if not fw.grouped_mlp_casts:
        raise SpecError("framework", fw.name,
                        "Transformer Engine's fused grouped MLP replaces Megatron-Core's "
                        "TEGroupedMLP; this stack does not run it")
    return replace(fw, grouped_mlp_casts=False, quant_padding=False,
                   expert_gemm_launch=TE_FUSED_GROUPED_MLP, fused_grouped_mlp=True)


def with_fp8_attention(fw: FrameworkProfile, dtype: str, gpu: "GPU") -> FrameworkProfile:
    """Stack ``fw`` with its attention core in Transformer Engine's FP8 fused attention
    (Megatron-Core's ``fp8_dot_product_attention``, TE's ``fp8_dpa``) as job precision
    ``dtype`` runs it on ``gpu``: only MXFP8 is modelled (TE 2.16 runs MXFP8 attention
    under the MXFP8 recipe, cuDNN's fused kernel on sm 100 with cuDNN >= 9.21, TE
    ``attention/dot_product_attention/utils.py`` ``get_attention_backend``), on the Blackwell
    chips the public cuDNN timings cover (``strategies.cost.fp8_attention.chip_class``);
    docs/calibration.md §5.98. SpecError naming the field, value and rule otherwise: a stack
    without Transformer Engine's attention (``grouped_mlp_casts``: Megatron-Core with TE)."""
    from strategies.cost.fp8_attention import chip_class
    if dtype != "mxfp8":
        raise SpecError("fp8_attention", dtype, "FP8 attention is modelled under the MXFP8 "
                        "recipe only (TE's MXFP8 fused attention); needs dtype mxfp8")
    if not (fw.grouped_mlp_casts or fw.fused_grouped_mlp):
        raise SpecError("fp8_attention", fw.name, "FP8 attention is Transformer Engine's "
                        "fp8_dpa under Megatron-Core; this stack does not run it")
    if chip_class(gpu) is None:
        raise SpecError("fp8_attention", gpu.name, "MXFP8 attention runs on sm 100 "
                        "(B200/GB200, B300/GB300) only, where the cuDNN timings are public")
    return replace(fw, fp8_attention=True)


def runs_eager_clamp(fw: FrameworkProfile) -> bool:
    """Whether stack ``fw`` runs gpt-oss's activation clamp as eager kernels of its own
    (``eager_variants``, ``compute.eager_variant_time``, its stash in the memory model):
    not inside Transformer Engine's fused grouped MLP (``fused_grouped_mlp``)."""
    return bool(fw.eager_variants and not fw.fused_grouped_mlp)


TORCHTITAN_COMPILE = compiled(TORCHTITAN)

PROFILES: dict[str, FrameworkProfile] = {
    p.name: p for p in (MEGATRON_CORE, NEMO, MEGATRON_LM_2021, MEGATRON_DEEPSPEED, TORCHTITAN,
                        PYTORCH_EAGER, JAX_XLA, HAI_LLM, AUTOMODEL)}
ALIASES: dict[str, str] = {"megatron": "megatron-core", "megatron-bridge": "nemo",
                           "megatron-lm": "megatron-lm-2021", "deepspeed": "megatron-deepspeed",
                           "composer": "pytorch-eager", "maxtext": "jax-xla", "fsdp": "pytorch-eager",
                           "deepseek": "hai-llm", "nemo-automodel": "automodel"}
DEFAULT = MEGATRON_CORE


def stack_system(fw: FrameworkProfile | None, system: Any = None) -> Any:
    """The system constants as stack ``fw``'s costs read them: its bucket rule
    (``FrameworkProfile.dp_bucket``, where ``SystemConfig.bucket_params`` does not override
    it); ``SystemConfig.master_bytes``
    replaced by the stack's (``FrameworkProfile.master_bytes``, a model built in 16 bits) where
    it states one, ``SystemConfig.weight_copies`` 0 where it stores fp32 weights only
    (``FrameworkProfile.master_only``). The one rule the memory model (scalar and arrays)
    and the search read."""
    from strategies.cost.system import get_system
    sy = get_system(system)
    if fw is not None and (sy.bucket_floor_params, sy.bucket_per_dp_params) != (
            fw.dp_bucket.floor_params, fw.dp_bucket.per_dp_params):
        sy = replace(sy, bucket_floor_params=float(fw.dp_bucket.floor_params),
                     bucket_per_dp_params=float(fw.dp_bucket.per_dp_params))
    mb = None if fw is None else fw.master_bytes
    if fw is not None and fw.master_only and sy.weight_copies != 0.0:
        sy = replace(sy, weight_copies=0.0)
    return sy if mb is None or mb == sy.master_bytes else replace(sy, master_bytes=float(mb))


def get_profile(name: str | FrameworkProfile | None) -> FrameworkProfile:
    """A profile by name (``None``: the default, Megatron-Core)."""
    if name is None:
        return DEFAULT
    if isinstance(name, FrameworkProfile):
        return name
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key == TORCHTITAN_COMPILE.name:      # a variant of a stack, not a stack of its own
        return TORCHTITAN_COMPILE
    if key not in PROFILES and key.endswith(COMPILE_SUFFIX):
        base = key[:-len(COMPILE_SUFFIX)]
        base = ALIASES.get(base, base)
        if base in PROFILES:
            return compiled(PROFILES[base])
    if key not in PROFILES:
        raise SpecError("framework", name, f"unknown framework; known: {', '.join(PROFILES)} "
                        f"(aliases: {', '.join(ALIASES)})")
    return PROFILES[key]


def stack_rules(fw: FrameworkProfile, v: Any) -> list[Rule]:
    """Every limit of stack ``fw`` as one list of validity rules ``(field, value, ok, why)``
    (``strategies.schedules.base.Rule``), over ``v``: a ``PlanArrays`` (the search's mask,
    ``ok`` arrays) or one plan's ``plan_view`` (``ok`` scalars). ``schedule`` and
    ``recompute`` are their integer codes. The one statement of each limit: the feature
    fields of ``FrameworkProfile`` and the module docstring give the sources."""
    who = f"{fw.name} "
    pp1 = v.pp == 1
    runs = [schedule_code(n) for n in schedule_names() if fw.schedule_for(n) in fw.schedules]
    stages_ok = np.isin(v.zero, fw.zero_stages)
    rules: list[Rule] = [
        ("schedule", v.schedule, pp1 | np.isin(v.schedule, runs),
         lambda: who + "runs " + (", ".join(fw.schedules) if fw.schedules
                                  else "no pipeline parallelism"))]
    if fw.max_pp is not None:
        rules.append(("pp", v.pp, v.pp <= fw.max_pp,
                      lambda: who + f"has no pipeline parallelism (pp <= {fw.max_pp})"))
    if fw.max_tp is not None:
        rules.append(("tp", v.tp, v.tp <= fw.max_tp,
                      lambda: who + f"has no tensor parallelism (tp <= {fw.max_tp})"))
    rules += [
        ("zero", v.zero, stages_ok, lambda: who + f"runs ZeRO stages {fw.zero_stages}"),
        ("zero", v.zero, ~stages_ok | pp1 | (v.zero <= fw.zero_with_pp),
         lambda: who + f"combines pipelining with ZeRO <= {fw.zero_with_pp}")]
    for field, has, what in (("cp", fw.context_parallel, "context parallelism"),
                             ("ep", fw.expert_parallel, "expert parallelism")):
        rules.append((field, getattr(v, field), (getattr(v, field) == 1) | has,
                      lambda what=what: who + f"has no {what}"))
    for field, has, what in (("sp", fw.sequence_parallel, "sequence parallelism"),
                             ("tp_comm_overlap", fw.tp_comm_overlap, "TP communication overlap"),
                             ("flash_attn", fw.flash_attn, "FlashAttention")):
        rules.append((field, getattr(v, field), ~np.asarray(getattr(v, field), bool) | has,
                      lambda what=what: who + f"has no {what}"))
    rules.append(("recompute", v.recompute,
                  np.isin(v.recompute, [RECOMPUTE_CODE[r] for r in fw.recompute]),
                  lambda: who + f"recomputes {', '.join(fw.recompute)}"
                  + (f" ({fw.recompute_note})" if fw.recompute_note else "")))
    rules.append(("recompute_method", v.recompute_method,
                  (np.asarray(v.recompute_layers) == 0)
                  | np.isin(v.recompute_method, [METHOD_CODE[x] for x in fw.recompute_methods]),
                  lambda: who + (f"runs recompute_method {', '.join(fw.recompute_methods)}"
                                 if fw.recompute_methods else
                                 "has no partial recomputation (recompute_layers)")))
    rules.append(("recompute_modules", v.recompute_modules,
                  (np.asarray(v.recompute_modules) & ~modules_mask(fw.recompute_modules)) == 0,
                  lambda: who + (f"recomputes the modules {', '.join(fw.recompute_modules)}"
                                 if fw.recompute_modules else "has no per-module recomputation")))
    rules += data_parallel_rules(fw, v)
    if fw.tp_overlap == "async-tp":
        rules.append(("tp_comm_overlap", v.tp_comm_overlap,
                      ~np.asarray(v.tp_comm_overlap, bool) | (np.asarray(v.tp) == 1)
                      | np.asarray(v.sp, bool),
                      lambda: who + "runs TP overlap as async TP, which fuses sequence-"
                                    "parallel all-gathers and reduce-scatters with their "
                                    "matmuls: needs sp=true with tp > 1 (and torch.compile, "
                                    "--compile.enable_async_tensor_parallel)"))
    groups = getattr(v, "group_microbatches_given", False)   # PlanArrays: none
    rules.append(("group_microbatches", groups, ~np.asarray(groups, bool) | fw.group_microbatches,
                  lambda: who + "gives every data-parallel replica the same batch "
                                "(no group_microbatches)"))
    rules += layout_rules(fw, v)
    rules += ep_overlap_rules(fw, v)
    rules.append(("cuda_graph", v.cuda_graph, ~np.asarray(v.cuda_graph, bool) | fw.cuda_graph,
                  lambda: who + "has no full-iteration CUDA graph"))
    rules.append(("moe_dispatcher", v.moe_dispatcher,
                  np.isin(v.moe_dispatcher, [DISPATCHERS.index(d) for d in fw.moe_dispatchers]),
                  lambda: who + f"runs the token dispatchers {', '.join(fw.moe_dispatchers)}"))
    return rules


def data_parallel_rules(fw: FrameworkProfile, v: Any) -> list[Rule]:
    """How stack ``fw``'s data parallelism combines with the other dimensions
    (``fw.ddp_sole``, ``fw.ep_from_fsdp``, ``fw.ep_in_dp``, ``fw.zero_follows_pp``,
    ``fw.microbatches_per_pp``, ``fw.pipeline_flushes``, ``fw.flush_needs_pp_microbatches``;
    sources on the fields). Reads ``dp``
    (an unresolved plan's ``None`` reads as 1: checked once a Job resolves it), ``etp``
    (resolved: tp when the plan names none), ``tp``, ``pp``, ``cp``, ``ep``, ``zero``, ``gbs``,
    ``mbs`` and ``flushes`` (1 where the arrays have no such column)."""
    who = f"{fw.name} "
    rules: list[Rule] = []
    zero, dp, ep = np.asarray(v.zero), np.asarray(v.dp), np.asarray(v.ep)
    if fw.ddp_sole:
        ddp = (zero == 0) & (dp > 1) & (np.asarray(v.cp) == 1)
        rules.append(("zero", v.zero, ~ddp | ((np.asarray(v.tp) == 1) & (np.asarray(v.pp) == 1)),
                      lambda: who + "runs zero=0 with dp > 1 as DDP, only as the sole "
                                    "parallelism (tp = pp = 1; 'DDP has not supported > 1D "
                                    "parallelism'); use zero=2 or zero=3 (FSDP)"))
    if fw.ep_from_fsdp:
        tp, etp = np.asarray(v.tp), np.asarray(v.etp)
        rules.append(("etp", v.etp, (ep == 1) | (etp == 1) | (etp == tp),
                      lambda: who + "runs expert tensor parallelism 1 or tp (parallel_dims.py)"))
        shard = np.where(zero >= 2, dp, 1) * np.asarray(v.cp) * np.where(etp == 1, tp, 1)
        rules.append(("ep", v.ep, shard % ep == 0,
                      lambda: who + "carves expert parallelism from the FSDP ranks: ep must "
                                    "divide dp_shard*cp (*tp when etp = 1), dp_shard = dp with "
                                    "zero=2/3 and 1 with zero=0 (parallel_dims.py)"))
    if fw.zero_follows_pp:
        rules.append(("zero", v.zero, zero == np.where(np.asarray(v.pp) > 1, 2, 3),
                      lambda: who + "reshards FSDP2 after forward only without pipelining "
                                    "(reshard_after_forward=not pp_enabled): zero=3 with "
                                    "pp = 1, zero=2 with pp > 1"))
    if fw.microbatches_per_pp and getattr(v, "gbs", None) is not None:
        m = np.asarray(v.gbs) // (np.asarray(v.mbs) * dp)
        pp = np.asarray(v.pp)
        rules.append(("pp", v.pp, (pp == 1) | (m % pp == 0),
                      lambda: who + "runs a number of pipeline micro-batches per step "
                                    "(gbs/(mbs*dp)) that is a multiple of pp"))
    flushes = getattr(v, "flushes", 1)
    if not fw.pipeline_flushes:
        rules.append(("flushes", flushes, np.asarray(flushes) == 1,
                      lambda: who + "runs one pipeline schedule over a step's micro-batches "
                                    "(flushes=1)"))
    elif fw.flush_needs_pp_microbatches and getattr(v, "gbs", None) is not None:
        per_flush = np.asarray(v.gbs) // (np.asarray(v.mbs) * dp * np.asarray(flushes))
        pp = np.asarray(v.pp)
        rules.append(("pp", v.pp, (pp == 1) | (per_flush >= pp),
                      lambda: who + "needs at least pp micro-batches per pipeline flush "
                                    "(gbs/(mbs*dp*flushes) >= pp: local_batch_size // "
                                    "pp_microbatch_size >= pp_size, asserted)"))
    dps = np.asarray(getattr(v, "dp_shard", dp))
    rules.append(("dp_shard", getattr(v, "dp_shard", None), (dps == dp) | np.isin(
        zero, fw.hybrid_zero), lambda: who + (
            f"runs hybrid sharding (dp_shard < dp) only with zero in {fw.hybrid_zero}"
            if fw.hybrid_zero else "does not run hybrid sharding (dp_shard < dp)")))
    if fw.ep_in_dp:
        rules.append(("ep", v.ep, dp % ep == 0,
                      lambda: who + "shards the batch over its expert axis as over data "
                                    "parallelism: ep must divide dp"))
    return rules


def layout_rules(fw: FrameworkProfile, v: Any) -> list[Rule]:
    """Which ways of giving an uneven pipeline layout stack ``fw`` runs (``fw.layouts``, one
    of ``LAYOUT_WAYS`` each; ``fw.pipeline_split`` says how the stack splits instead). Reads
    ``layout_string`` (a layout string is given), ``first_stage_layers`` /
    ``last_stage_layers`` (0: not given), ``account_embedding`` / ``account_loss`` and
    ``layers_per_stage_given`` of a ``plan_view``; a ``PlanArrays`` (the search's array
    space) holds no layout string and no per-rank counts, and one ``account_slots`` column for
    both slots."""
    who = f"{fw.name} "
    slots = getattr(v, "account_slots", False)
    given = {"layout": getattr(v, "layout_string", False),
             "first_stage_layers": np.asarray(v.first_stage_layers) > 0,
             "last_stage_layers": np.asarray(v.last_stage_layers) > 0,
             "account_embedding": getattr(v, "account_embedding", slots),
             "account_loss": getattr(v, "account_loss", slots),
             "layers_per_stage": getattr(v, "layers_per_stage_given", False)}
    way = {"layout": ("string", "a Megatron pipeline layout string"),
           "first_stage_layers": ("first_last", "first/last-stage layer counts"),
           "last_stage_layers": ("first_last", "first/last-stage layer counts"),
           "account_embedding": ("slots", "the embedding as a layer slot"),
           "account_loss": ("slots", "the loss as a layer slot"),
           "layers_per_stage": ("per_stage", "a layer count per pipeline rank")}
    return [(field, given[field], ~np.asarray(given[field], bool) | (w in fw.layouts),
             lambda what=what: who + f"cannot take {what} (its pipeline split: {fw.pipeline_split})")
            for field, (w, what) in way.items()]


def ep_overlap_rules(fw: FrameworkProfile, v: Any) -> list[Rule]:
    """Where plan switch ``ep_overlap`` (Megatron-Core's ``--overlap-moe-expert-parallel-comm``,
    the combined 1F1B of ``strategies.schedules.combined``) may be on. Megatron-Core's
    ``TransformerConfig.__post_init__`` asserts: expert parallelism (``ep > 1``); with
    ``pp > 1`` a virtual pipeline (the interleaved schedule); no full recomputation. Its
    default is off (``overlap_moe_expert_parallel_comm=False``); stacks without it refuse it.
    Megatron-Core also refuses ``moe`` among the recompute modules, and ``delay_wgrad``
    (``delay_wgrad_compute``, default off) without the overlap."""
    from strategies.schedules.combined import COMBINED_SCHEDULES
    on = np.asarray(v.ep_overlap, bool)
    who = f"{fw.name} "
    codes = [schedule_code(n) for n in COMBINED_SCHEDULES]
    return [
        ("ep_overlap", v.ep_overlap, ~on | fw.ep_overlap,
         lambda: who + "has no expert-parallel communication overlap (combined 1F1B)"),
        ("ep_overlap", v.ep_overlap, ~on | (v.ep > 1),
         lambda: "overlaps the expert all-to-all: needs ep > 1 (Megatron-Core asserts it)"),
        ("ep_overlap", v.ep_overlap, ~on | (v.pp == 1) | np.isin(v.schedule, codes),
         lambda: "with pp > 1 Megatron-Core's combined 1F1B runs only "
                 f"schedule={' or '.join(COMBINED_SCHEDULES)} (a virtual pipeline)"),
        ("ep_overlap", v.ep_overlap, ~on | (v.recompute != RECOMPUTE_CODE["full"]),
         lambda: "Megatron-Core refuses full recomputation with the combined 1F1B"),
        ("ep_overlap", v.ep_overlap,
         ~on | ((np.asarray(v.recompute_modules) & modules_mask(("moe",))) == 0),
         lambda: "Megatron-Core refuses the moe recompute module with the combined 1F1B"),
        ("delay_wgrad", v.delay_wgrad, ~np.asarray(v.delay_wgrad, bool) | on,
         lambda: "delay_wgrad_compute needs ep_overlap=true (Megatron-Core's "
                 "TransformerConfig asserts overlap_moe_expert_parallel_comm for it)")]


def plan_view(plan: "Plan") -> SimpleNamespace:
    """The fields ``stack_rules`` reads of one plan, coded as in ``PlanArrays`` (resolved or
    not: an unresolved ``dp`` reads as 1, an unresolved ``gbs`` skips the rules on it)."""
    return SimpleNamespace(tp=plan.tp, pp=plan.pp, cp=plan.cp, ep=plan.ep, sp=plan.sp,
                           dp=plan.dp if plan.dp is not None else 1, etp=plan.expert_tp,
                           dp_shard=plan.dp_shard if plan.dp_shard is not None else
                           (plan.dp if plan.dp is not None else 1),
                           gbs=plan.gbs, mbs=plan.mbs,
                           zero=plan.zero, schedule=schedule_code(plan.schedule),
                           recompute=RECOMPUTE_CODE[plan.recompute],
                           tp_comm_overlap=plan.tp_comm_overlap, flash_attn=plan.flash_attn,
                           recompute_layers=plan.recompute_layers or 0,
                           recompute_method=METHOD_CODE.get(plan.recompute_method, 0),
                           recompute_modules=modules_mask(plan.recompute_modules or ()),
                           ep_overlap=plan.ep_overlap, delay_wgrad=plan.delay_wgrad,
                           cuda_graph=plan.cuda_graph,
                           moe_dispatcher=DISPATCHERS.index(plan.moe_dispatcher),
                           layout_string=plan.layout is not None,
                           first_stage_layers=plan.first_stage_layers or 0,
                           last_stage_layers=plan.last_stage_layers or 0,
                           account_embedding=plan.account_embedding,
                           account_loss=plan.account_loss,
                           layers_per_stage_given=plan.layers_per_stage is not None,
                           group_microbatches_given=plan.group_microbatches is not None,
                           flushes=plan.flushes)


def plan_violations(fw: FrameworkProfile, plan: "Plan") -> list[tuple[str, object, str]]:
    """Every ``(field, value, rule)`` of ``plan`` that stack ``fw`` cannot run (empty: it can):
    ``stack_rules`` on the one plan, values as the plan gives them."""
    return [(field, getattr(plan, field), why())
            for field, _, ok, why in stack_rules(fw, plan_view(plan)) if not bool(ok)]


def stack_mask(fw: FrameworkProfile | None, plans: Any) -> np.ndarray:
    """Which of ``plans`` (``PlanArrays`` or the search space's short columns) stack ``fw``
    can run: ``stack_rules`` and-ed (every plan when no stack is named)."""
    from strategies.plan_arrays import as_plan_arrays
    P = as_plan_arrays(plans)
    ok = np.ones(len(P), dtype=bool)
    if fw is None:
        return ok
    for _, _, rule_ok, _ in stack_rules(fw, P):
        ok &= np.broadcast_to(rule_ok, ok.shape)
    return ok


def precision_rule(fw: FrameworkProfile, dtype: str) -> str | None:
    """Why stack ``fw`` cannot train at precision ``dtype`` (``--dtype``), naming the stack,
    the precisions it runs and their source; None when it can. The one rule estimate,
    simulate, search, compare and the exporters read."""
    if dtype in fw.precisions:
        return None
    note = dict(fw.precision_notes).get(dtype)
    return (f"{fw.name} runs --dtype {', '.join(fw.precisions)} ({fw.precision_source})"
            + (f"; {note}" if note else ""))


def check_precision(fw: FrameworkProfile, dtype: str) -> None:
    """Refuse a precision the stack lacks: SpecError naming the dtype, the stack and the rule."""
    why = precision_rule(fw, dtype)
    if why is not None:
        raise SpecError("dtype", dtype, why + " (choose another --framework or --dtype)")


def check_plan(fw: FrameworkProfile, plan: "Plan") -> None:
    """Refuse a plan feature the stack lacks: SpecError naming the stack, feature and rule."""
    bad = plan_violations(fw, plan)
    if bad:
        field, value, rule = bad[0]
        raise SpecError(field, value, rule + " (choose another --framework or change the plan)")
