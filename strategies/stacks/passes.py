"""The passes a stack runs besides its GEMMs: once per optimizer step (``StepPasses``) and over
the LM head's logits in the cross-entropy (``LossPasses``), and the stacks' named passes as
read from their code (docs/calibration.md)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from strategies.errors import SpecError


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
    #: the optimizer of every rank of the grad-stats group waits for the gradient norm's
    #: all-reduce, which waits for the latest rank's reduction (``cost.norm_barrier``; with
    #: ``grad_norm``: only a stack that clips by the global norm; docs/calibration.md §5.202).
    #: On by default: every profile clips (its ``grad_norm`` source); off, the step of
    #: ``max_r(ready_r + post_r)`` without the norm's all-reduce
    norm_barrier: bool = True
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

#: fp32 elements read or written per parameter by an unfused Adam update (``StepPasses``):
#: Composer's DecoupledAdamW without weight decay, and torch's foreach AdamW with it, both 20
#: (the sources list each kernel); one fused kernel moves 7 (``SystemConfig.adam_step_bytes``)
COMPOSER_ADAMW_ELEMENTS = 20.0
TORCH_FOREACH_ADAMW_ELEMENTS = 20.0

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
