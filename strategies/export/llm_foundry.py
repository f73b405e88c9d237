"""MosaicML llm-foundry's training YAML keys for a plan (``--export llm-foundry``, the
``pytorch-eager`` stack: Composer with PyTorch FSDP).

Keys from mosaicml/llm-foundry (2025-07): ``scripts/train/yamls/pretrain/mpt-7b.yaml`` and
``llmfoundry/utils/config_utils.py`` ``TrainConfig`` (``global_train_batch_size``,
``device_train_microbatch_size``, ``max_seq_len``, ``precision``, ``fsdp_config``);
``scripts/train/benchmarking/submit_benchmarks.py`` (the benchmark tables' settings:
``fsdp_config.mixed_precision: DEFAULT``, ``sharding_strategy``, ``activation_checkpointing``,
``attn_config.attn_impl: flash``). Composer runs ``global / (world · microbatch)`` micro-batches
per step; FSDP's ``FULL_SHARD`` is ZeRO-3, ``SHARD_GRAD_OP`` ZeRO-2, ``NO_SHARD`` replicates
(an all-reduce, as DDP); ``activation_checkpointing_reentrant: false`` is the non-reentrant
checkpoint whose early stop the profile models; ``amp_fp8`` is Transformer Engine's
``fp8_autocast`` with its default delayed scaling.
"""
from __future__ import annotations


from strategies.errors import SpecError
from strategies.stacks.pytorch import PYTORCH_EAGER
from strategies.stacks.rules import plan_violations, precision_rule
from strategies.job import Job

#: Composer ``precision`` of our precisions
PRECISION = {"bf16": "amp_bf16", "fp16": "amp_fp16", "fp8": "amp_fp8", "fp8-delayed": "amp_fp8"}
#: FSDP ``sharding_strategy`` of each ZeRO stage the stack runs
SHARDING = {0: "NO_SHARD", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}


def _refuse(why: str) -> None:
    raise SpecError("--export", "llm-foundry", f"cannot express this plan: {why}")


def llm_foundry_config(job: Job) -> tuple[str, list[str]]:
    """llm-foundry's YAML keys for ``job``'s plan and the caveats; a SpecError naming what
    Composer cannot run otherwise."""
    p = job.plan
    for field, value, rule in plan_violations(PYTORCH_EAGER, p):
        _refuse(f"{field}={value!r}: {rule}")
    # group_microbatches: the profile refuses it (FrameworkProfile.group_microbatches)
    why = precision_rule(PYTORCH_EAGER, job.dtype)   # PRECISION covers its precisions
    if why is not None:
        _refuse(f"--dtype {job.dtype}: {why}")
    cfg = {"max_seq_len": job.seq_len, "global_train_batch_size": p.gbs,
           "device_train_microbatch_size": p.mbs, "precision": PRECISION[job.dtype],
           "fsdp_config": {"sharding_strategy": SHARDING[p.zero], "mixed_precision": "DEFAULT",
                           "activation_checkpointing": p.recompute == "full",
                           "activation_checkpointing_reentrant": False,
                           "limit_all_gathers": True},
           "model": {"attn_config": {"attn_impl": "flash" if p.flash_attn else "torch"}}}
    notes = ["llm-foundry train YAML keys (scripts/train/train.py); merge them into the run's "
             f"YAML, whose model section gives {job.model.name}'s architecture"]
    if p.zero == 0 and p.dp > 1:
        notes.append("zero=0 is FSDP's NO_SHARD (parameters replicated, gradients all-reduced "
                     "as DDP does)")
    import yaml     # here: a search or an estimate that exports nothing never loads it
    return yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False), notes
