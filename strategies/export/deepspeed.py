"""DeepSpeed's launch settings of a plan: its JSON config (``deepspeed_config``) where
DeepSpeed can express the plan, a ``SpecError`` naming what it cannot express otherwise
(interleaving, context or Megatron sequence parallelism, expert parallelism, ZeRO-2/3 with
pipelining, AutoTP with pipeline parallelism where no stack is named), and under a named
``megatron-deepspeed`` the Megatron-DeepSpeed ``pretrain_gpt.py`` line that runs it
(``megatron_deepspeed_args``: the tensor parallelism is Megatron's). ``(text, notes)`` as
``strategies.launch.export`` returns it."""
from __future__ import annotations

import json

from strategies.errors import SpecError
from strategies.job import Job
from strategies.schedules import get_schedule
from strategies.stacks.profile import stack_system
from topologies.precision import get_precision


def _refuse(why: str, stack_named: bool = False) -> None:
    """Refuse ``--export deepspeed``; the hint names ``--export megatron`` only where no stack
    was named (a named ``megatron-deepspeed`` refuses that export: ``check_export``)."""
    hint = "change the plan" if stack_named else "use --export megatron"
    raise SpecError("--export", "deepspeed", f"cannot express this plan: {why} "
                    f"({hint}, or --fix the dimension)")


def megatron_deepspeed_args(job: Job) -> str:
    """The Megatron-DeepSpeed ``pretrain_gpt.py`` line that runs ``job``'s plan with the
    exported DeepSpeed config: Megatron's tensor parallelism and the pipeline stages
    (``GPTModelPipe`` from ``--pipeline-model-parallel-size``) are arguments, not config keys
    (microsoft/Megatron-DeepSpeed ``megatron/arguments.py``: ``--zero-stage``,
    ``--deepspeed-activation-checkpointing``, ``--no-pipeline-parallel``; ``deepspeed.
    add_config_arguments``: ``--deepspeed``, ``--deepspeed_config``; ``megatron/model/
    gpt_model.py`` ``GPTModelPipe``: full recomputation uniform over
    ``--recompute-num-layers``; ``examples_deepspeed/pretrain_llama2_distributed.sh``)."""
    p, cl = job.plan, job.cluster
    a = [f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}"]
    if p.pp == 1 and p.zero >= 2:   # the pipeline engine asserts ZeRO < 2 (runtime/pipe/engine.py)
        a.append("--no-pipeline-parallel")
    a += [f"--micro-batch-size {p.mbs}", f"--global-batch-size {p.gbs}",
          f"--seq-length {job.seq_len}", *get_precision(job.dtype).megatron]
    if p.recompute == "full":
        a += ["--recompute-granularity full", "--recompute-method uniform",
              f"--recompute-num-layers {p.recompute_layers or 1}",
              "--deepspeed-activation-checkpointing"]
    elif p.recompute == "selective":
        a.append("--recompute-granularity selective")
    a += ["--deepspeed", "--deepspeed_config ds_config.json", f"--zero-stage {p.zero}"]
    head = f"torchrun --nproc_per_node {cl.gpus_per_host} --nnodes {cl.num_hosts} pretrain_gpt.py"
    return " \\\n    ".join([head] + a)


def deepspeed_config(job: Job) -> tuple[str, list[str]]:
    """A DeepSpeed config (JSON) for the plan, or a SpecError naming what does not map. Under
    a named ``megatron-deepspeed`` the tensor parallelism is Megatron's (an argument of its
    ``pretrain_gpt.py``, given as a note: ``megatron_deepspeed_args``), not DeepSpeed's
    AutoTP, so tensor with pipeline parallelism (BLOOM's plan) is expressed."""
    p = job.plan
    notes: list[str] = []
    from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
    from strategies.stacks.rules import plan_violations, precision_rule
    fw = job.named_framework
    named = fw is not None                            # the refusals' hint (``_refuse``)
    megatron_tp = named and fw.name == MEGATRON_DEEPSPEED.name   # Megatron's TP, not AutoTP
    if p.layers_per_stage is not None or p.group_microbatches is not None:
        _refuse("this exporter writes DeepSpeed's uniform pipeline partition and equal "
                "micro-batch counts per replica (no layers_per_stage, group_microbatches)",
                named)
    if p.flushes > 1:   # (Megatron-LM cannot either: no "use --export megatron" here)
        raise SpecError("--export", "deepspeed", f"cannot express this plan: flushes="
                        f"{p.flushes}: DeepSpeed's pipeline engine runs one schedule over a "
                        "train batch's micro-batches (flushes=1)")
    for field, value, rule in plan_violations(MEGATRON_DEEPSPEED, p):
        if field in ("layout", "first_stage_layers", "last_stage_layers"):
            _refuse(f"{field}={value!r}: {rule}", named)
    why = get_schedule(p.schedule).deepspeed_refusal(job)
    if why:
        _refuse(why, named)
    if p.cp > 1:
        _refuse("DeepSpeed has no ring-attention context parallelism (Ulysses is another "
                "scheme)", named)
    if p.sp:
        _refuse("DeepSpeed's tensor parallelism (AutoTP) has no Megatron sequence parallelism",
                named)
    if p.ep > 1:
        _refuse("DeepSpeed sets expert parallelism in the model code (deepspeed.moe), not in "
                "its config", named)
    if p.pp > 1 and p.zero >= 2:
        _refuse(f"DeepSpeed does not combine ZeRO-{p.zero} with pipeline parallelism", named)
    if p.pp > 1 and p.tp > 1 and not megatron_tp:
        _refuse("DeepSpeed's AutoTP does not combine with its pipeline engine (3D "
                "parallelism needs Megatron-DeepSpeed: --framework megatron-deepspeed)", named)
    if p.tp > 1 and p.zero == 3 and not megatron_tp:
        _refuse("DeepSpeed's AutoTP training supports ZeRO stages 0-2 only", named)
    why = precision_rule(MEGATRON_DEEPSPEED, job.dtype)
    if why is not None:
        _refuse(f"--dtype {job.dtype}: {why}", named)
    cfg = {
        "train_batch_size": p.gbs,
        "train_micro_batch_size_per_gpu": p.mbs,
        "gradient_accumulation_steps": job.num_microbatches,
        "bf16" if job.dtype == "bf16" else "fp16": {"enabled": True},
        "zero_optimization": {"stage": p.zero, "overlap_comm": p.overlap_grad_reduce,
                              "contiguous_gradients": True,
                              # the bucket the job was priced with (its stack's rule, §5.86)
                              "reduce_bucket_size": int(stack_system(
                                  job.framework, job.system).dp_bucket_params(p.dp))},
    }
    if p.tp > 1 and not megatron_tp:
        cfg["tensor_parallel"] = {"autotp_size": p.tp}
    if p.recompute_modules is not None:
        _refuse("DeepSpeed has no per-module selective recomputation (--recompute-modules is "
                "Megatron-Core's)", named)
    if p.recompute_layers is not None and p.recompute_method != "uniform":
        _refuse("DeepSpeed checkpoints groups of layers (uniform), not Megatron's block method "
                "(use recompute_method=uniform)", named)
    if p.recompute_layers is not None and not megatron_tp:   # (megatron_tp: an argument)
        notes.append(f"partial recomputation: build the model with deepspeed.pipe."
                     f"PipelineModule(..., activation_checkpoint_interval={p.recompute_layers}) "
                     f"(one checkpoint per {p.recompute_layers} layers)")
    if p.recompute == "full":
        cfg["activation_checkpointing"] = {"partition_activations": p.tp > 1,
                                           "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False}
        if not megatron_tp:
            notes.append("full recomputation: wrap each layer with "
                         "deepspeed.checkpointing.checkpoint (or enable the model's gradient "
                         "checkpointing)")
    if megatron_tp:
        notes.append("Megatron-DeepSpeed: save this config as ds_config.json and launch "
                     + megatron_deepspeed_args(job).replace(" \\\n    ", " ")
                     + " with the model's shape arguments")
    elif p.pp > 1:
        notes.append(f"pipeline parallelism: build the model as "
                     f"deepspeed.pipe.PipelineModule(..., num_stages={p.pp}); DeepSpeed reads "
                     "the stage count from the model, not from this config")
    if p.pp > 1 and (p.account_embedding or p.account_loss):
        counted = " and ".join(w for w, on in (("embedding", p.account_embedding),
                                               ("LM head", p.account_loss)) if on)
        notes.append("layer slots: PipelineModule(..., partition_method='type:transformer|"
                     "<class names of the " + counted + " layers>'), as BLOOM's "
                     "'type:transformer|embedding' counts its tied embedding at both ends"
                     + (" (bigscience Megatron-DeepSpeed: --pp-partition-method)"
                        if megatron_tp else ""))
    return json.dumps(cfg, indent=2), notes
