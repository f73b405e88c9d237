"""The software stacks a plan runs on: what each does underneath a plan, where it was read.

Modules (imports point one way: ``passes``, ``buckets``, ``expert_gemm``, ``profile_fields``
<- the field groups ``profile_limits``, ``profile_comm``, ``profile_dp``, ``profile_kernels``
<- ``profile`` <- the named stacks <- ``variants``; ``rules`` and ``comm_rules`` read a
profile; ``strategies.framework`` holds the registry of named profiles, ``get_profile``):

* ``profile``: ``FrameworkProfile`` (one stack's fixed properties; its required fields,
  names and plan defaults in ``StackBasics``), ``LAUNCH_GAP_S``, ``stack_system`` (the
  system constants as a stack's costs read them);
* ``profile_limits``, ``profile_comm``, ``profile_dp``, ``profile_kernels``: the profile's
  other fields by concern (``StackLimits``: the plan features it runs; ``StackComm``: its
  model-parallel collectives; ``StackDataParallel``: how it keeps and reduces the model state;
  ``StackKernels``: its kernels and what they save);
* ``profile_fields``: the values each profile field may take and the check of every field;
* ``passes``: ``StepPasses`` and ``LossPasses`` (per-step and cross-entropy passes) and the
  stacks' named passes (``MEGATRON_CROSS_ENTROPY``, ``COMPOSER_CROSS_ENTROPY``, ...);
* ``buckets``: ``BucketRule``, the data-parallel gradient bucket of each stack;
* ``expert_gemm``: ``ExpertGemmLaunch``, how a stack launches a grouped expert GEMM;
* ``megatron``, ``deepspeed``, ``pytorch``, ``jax_xla``: the named profiles;
* ``variants``: a stack with a switch on (``compiled``, ``with_fused_grouped_mlp``,
  ``with_fp8_attention``) and the rules that say where it runs;
* ``rules``: every limit of a stack as validity rules (``stack_rules``, ``check_plan``,
  ``check_precision``) for the plan checks, the search and the exporters;
* ``comm_rules``: how a stack reduces gradients (``full_grad_reduce``, ``grad_path``) and
  how much of its context-parallel traffic is exposed (``cp_exposed_fraction``).

A ``Plan`` says how a job is split and which switches are on (FlashAttention, overlap of the
gradient reduction, TP communication overlap); a ``FrameworkProfile`` says what the software
*does* underneath, which a user cannot switch per plan: whether the weight-gradient GEMM
accumulates straight into the fp32 ``main_grad`` buffer or a separate kernel adds each
micro-batch's gradient to it, how many kernels a layer launches, and the idle gap each
kernel boundary costs the GPU. Published runs pick the profile of the software that produced
them (``strategies.reference.cases``); everything else uses ``MEGATRON_CORE``.

Sources (details and numbers in docs/calibration.md; the plan features and pipeline layouts
each stack runs: ``strategies.stacks.rules``):

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
