"""The pipeline's ends: the embedding's activations on the first rank, the output layer's
(norm, projection input, logits) on the head's rank, and which ranks hold them."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from strategies.cost.token_counts import ACT_BYTES
from strategies.model import ModelSpec
from strategies.schedules import get_schedule, head_rank

if TYPE_CHECKING:
    from strategies.job import Job


def embedding_bytes(model: ModelSpec, seq_len: int, b, tp, sp, cp):
    """First stage, per micro-batch and GPU (numbers or numpy arrays): int64 token ids ``8sb``
    plus the embedding dropout mask ``sbh`` (``/t`` with SP; none without dropout), all
    ``/cp`` (Korthikanti Sec. 4.3; Megatron's estimator); with ``ModelSpec.embedding_norm``
    the norm's saved 16-bit input ``2sbh`` too (BigScience's Megatron-DeepSpeed ae6277f5
    ``VocabParallelEmbedding.forward``: ``self.norm(output)`` after the TP all-reduce, a
    ``torch.nn.LayerNorm`` whose backward reads its input; the embedding stage is not
    checkpointed, DeepSpeed v0.5.10 ``PipelineModule._is_checkpointable``). The scalar and
    the array model read this."""
    s, h = seq_len, model.hidden_size
    seq_div = np.where(sp, tp, 1)
    mask = s * b * h / seq_div if model.dropout else 0.0
    norm = 2 * s * b * h / seq_div if model.embedding_norm else 0.0
    return (8 * s * b + mask + norm) / cp


def stage_output_bytes(model: ModelSpec, seq_len: int, b, tp, cp):
    """A stage's output kept per stashed micro-batch where the schedule's engine holds it
    (``Schedule.keeps_stage_output``: DeepSpeed v0.5.10 ``PipelineEngine._exec_forward_pass``
    stores ``outputs`` in ``pipe_buffers`` until the micro-batch's backward; with tp > 1
    ``is_pipe_partitioned``: a ``PartitionedTensor`` of the output, a 1/t clone, after which
    the full tensor's storage is replaced by ``torch.zeros(1)``): ``2sbh``, ``/t`` where
    ``t > 1``, ``/cp``; numbers or arrays."""
    return 2.0 * seq_len * b * model.hidden_size / np.where(np.asarray(tp) > 1, tp, 1) / cp


def output_bytes(model: ModelSpec, seq_len: int, b, tp, sp, cp, logit_bytes=4.0):
    """Last stage, per micro-batch and GPU (numbers or arrays): final-norm input and
    output-projection input ``4sbh`` (``/t`` with SP) plus ``logit_bytes`` per logit element
    ``sbV/t``, all ``/cp``. With the default 4 (the fp32 logits a stashed micro-batch keeps
    for the cross-entropy's backward) this is Megatron's ``4sbh(1 + V/h)/t`` with SP
    (Korthikanti Sec. 4.3); the loss in progress holds the stack's
    ``FrameworkProfile.loss.peak_bytes`` (Megatron's 6: the 16-bit logits beside the fp32
    copy; torchtitan's eager ``F.cross_entropy(x.float())`` 12: docs/memory.md)."""
    s, h, v = seq_len, model.hidden_size, model.vocab_size
    return (4 * s * b * h / np.where(sp, tp, 1) + logit_bytes * s * b * v / tp) / cp


def deferral_buffer_bytes(model: ModelSpec, seq_len: int, b, tp, sp, cp, pp, nmb,
                          deferral: float):
    """Bytes the last stage holds for the output layer's deferred weight gradients
    (``SystemConfig.head_wgrad_deferral``: Megatron-Core's ``defer_embedding_wgrad_compute``
    with ``wgrad_deferral_limit``, ``cost.head_deferral``; docs/memory.md), per GPU, numbers
    or arrays. Each of the ``min(nmb, deferral)`` deferred micro-batches of a flush keeps,
    from its backward to the pipeline's drain, the layer's input ``2sbh`` (``/t`` with SP:
    ``ColumnParallelLinear.forward`` appends ``input_parallel`` to
    ``embedding_activation_buffer``) and its 16-bit logits' gradient ``2sbV/t``
    (``LinearWithGradAccumulationAndAsyncCommunication.backward`` appends ``grad_output`` to
    ``grad_output_buffer``); with SP the drain gathers the inputs into two more global
    buffers of ``2sbh`` (``utils.drain_embedding_wgrad_compute``: ``mpu_0``, ``mpu_1``, kept
    by ``GlobalMemoryBuffer``); all ``/cp``. 0 at ``deferral`` 0 or ``pp`` 1 (Megatron-Core
    refuses the switch without pipelining).

    >>> m = ModelSpec(name="t", num_layers=2, hidden_size=4, num_attention_heads=1,
    ...               ffn_hidden_size=8, vocab_size=16, seq_length=8)
    >>> float(deferral_buffer_bytes(m, 8, 1, 2, True, 1, 2, 5, 3.0))  # 3 x (32 + 128) + 2 x 64
    608.0
    """
    s, h, v = seq_len, model.hidden_size, model.vocab_size
    sp_on = np.asarray(sp, bool) & (np.asarray(tp) > 1)
    per_mb = ACT_BYTES * s * b * (h / np.where(sp_on, tp, 1) + v / np.asarray(tp, float))
    gathered = np.where(sp_on, 2.0 * ACT_BYTES * s * b * h, 0.0)
    held = np.minimum(np.asarray(nmb, float), deferral)
    return np.where((held > 0) & (np.asarray(pp) > 1), held * per_mb + gathered, 0.0) / cp


def embedding_activation_bytes(job: Job) -> float:
    """``embedding_bytes`` of the job's plan."""
    p = job.plan
    return float(embedding_bytes(job.model, job.seq_len, p.mbs, p.tp, p.sp, p.cp))


def output_activation_bytes(job: Job) -> float:
    """``output_bytes`` of the job's plan."""
    p = job.plan
    return float(output_bytes(job.model, job.seq_len, p.mbs, p.tp, p.sp, p.cp))


def stage_output_activation_bytes(job: Job, stage: int) -> float:
    """``stage_output_bytes`` of the job's plan on ``stage`` where its schedule keeps the
    output (not on the head's rank, whose output is the loss), else 0."""
    p = job.plan
    if not get_schedule(p.schedule).keeps_stage_output or holds_head(job, stage):
        return 0.0
    return float(stage_output_bytes(job.model, job.seq_len, p.mbs, p.tp, p.cp))


def holds_head(job: Job, stage: int) -> bool:
    """Whether pipeline rank ``stage`` holds the LM head (``Schedule.ends``: rank 0 on a V;
    both end ranks where ``Schedule.mirrored``)."""
    p = job.plan
    if get_schedule(p.schedule).mirrored and stage in (0, p.pp - 1):
        return True
    return stage == head_rank(p.schedule, p.pp, p.vpp)


def holds_embedding(job: Job, stage: int) -> bool:
    """Whether pipeline rank ``stage`` holds the embedding (rank 0; both end ranks where
    ``Schedule.mirrored``)."""
    p = job.plan
    return stage == 0 or (get_schedule(p.schedule).mirrored and stage == p.pp - 1)
