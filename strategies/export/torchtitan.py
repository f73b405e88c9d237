"""torchtitan's TOML job config for a plan (``--export torchtitan``).

Keys and meanings from torchtitan v0.2.2 (2026-02-20), the last release whose trainer reads a
TOML job config (``--job.config_file``; pytorch/torchtitan#2386 replaced it with Python
``Trainer.Config`` functions three days later, same section and field names):
``torchtitan/config/job_config.py`` (sections ``[training]``, ``[parallelism]``,
``[activation_checkpoint]``, ``[compile]``, ``[quantize.linear.*]``), ``torchtitan/train.py``
(gradient accumulation = ``global_batch_size / (local_batch_size · dp_replicate · dp_shard)``),
``torchtitan/distributed/pipeline_parallel.py`` (pipeline micro-batches = ``local_batch_size /
pipeline_parallel_microbatch_size``; ``module_fqns_per_model_part`` lists the modules of each
virtual stage, placed on the ranks by the schedule, ``pipeline_module_split``
``_get_stage_indices``: rank r holds stages r, r + pp, ... (loop), or r and 2pp - 1 - r (V, for
``ZBVZeroBubble`` and ``DualPipeV``), as paraplan's layout places them),
``torchtitan/distributed/parallel_dims.py`` (``dp_replicate · dp_shard · cp · tp · pp`` =
world; expert parallelism carved from ``dp_shard · cp`` (· ``tp`` when etp = 1);
etp is 1 or tp; ``seq_len`` divisible by ``2 · tp · cp``), ``models/llama3/infra/
parallelize.py`` (FSDP2 over ``dp_shard · cp``, HSDP with ``dp_replicate``; DDP only as the
sole parallelism: "DDP has not supported > 1D parallelism"; TP always shards the norms along
the sequence, ``SequenceParallel``), ``distributed/activation_checkpoint.py`` (modes ``none``,
``full``, ``selective`` with ``selective_ac_option = "op"`` or every N-th layer; ``early_stop``
passed to ``torch.utils.checkpoint``), ``components/quantization/{float8,mx}.py`` (model
converters ``quantize.linear.float8`` and ``quantize.linear.mx``, registered names).

Plan -> keys: ZeRO-3 -> ``data_parallel_shard_degree = dp`` with ``fsdp_reshard_after_forward =
"always"``; ZeRO-2 -> the same with ``"never"`` (FSDP2 keeps the gathered parameters from the
forward to the backward); ZeRO-0 -> ``data_parallel_replicate_degree = dp`` (DDP, or HSDP over
the context-parallel ranks); a schedule through ``TORCHTITAN_SCHEDULE_NAMES``; recomputation
``op`` -> selective ``"op"``, ``full`` -> full (``early_stop`` as the profile models it);
``mbs`` -> ``pipeline_parallel_microbatch_size`` with pipelining, else ``local_batch_size``.
"""
from __future__ import annotations

from strategies.errors import SpecError
from strategies.export.toml import dumps
from strategies.stacks.pytorch import TORCHTITAN, TORCHTITAN_SCHEDULE_NAMES
from strategies.stacks.rules import plan_violations, precision_rule
from strategies.job import Job
from strategies.layout.grammar import EMBEDDING, LAYER, LOSS, MTP

RELEASE = "v0.2.2"
#: torchtitan's model converters and quantisation sections for our precisions (``--dtype``);
#: torchao's float8 training has dynamic (current) per-tensor scaling, "tensorwise", and per-row
#: scaling, "rowwise"
QUANTISE = {
    "fp8-current": ("quantize.linear.float8", {"recipe_name": "tensorwise"}),
    # v0.2.2 config/job_config.py Float8Linear.recipe_name "rowwise" (§5.147)
    "fp8-rowwise": ("quantize.linear.float8", {"recipe_name": "rowwise"}),
    "mxfp8": ("quantize.linear.mx", {"recipe_name": "mxfp8_cublas"}),
}
#: the precisions the profile runs (``TORCHTITAN.precisions``, torchtitan 2024) that this
#: release lost: torchao removed float8 delayed scaling in 2025
RELEASE_LACKS = "torchao's float8 training has no delayed scaling (amax history) any more: " \
                "use --dtype fp8-current (recipe tensorwise)"
#: the modules of a torchtitan decoder (llama3, qwen3, deepseek_v3 name them alike)
FQN = {EMBEDDING: ("tok_embeddings",), LOSS: ("norm", "output")}


def _refuse(why: str) -> None:
    raise SpecError("--export", "torchtitan", f"cannot express this plan: {why}")


def model_parts(job: Job) -> list[list[str]]:
    """``module_fqns_per_model_part``: each virtual stage's modules in path order, from the
    plan's layout (``Job.layout``), so torchtitan builds exactly the stages that were costed."""
    parts, layer = [], 0
    for stage in job.layout.stages:
        names: list[str] = []
        for slot in stage:
            if slot == LAYER:
                names.append(f"layers.{layer}")
                layer += 1
            elif slot == MTP:
                _refuse("torchtitan's models have no multi-token-prediction module to place "
                        "(the layout holds one)")
            else:
                names += FQN[slot]
        parts.append(names)
    return parts


def _data_parallel(job: Job, notes: list[str]) -> dict:
    p = job.plan
    if p.zero in (2, 3):
        # hybrid sharding (plan dp_shard): HSDP, FSDP over dp_shard·cp, replicas outside
        return {"data_parallel_replicate_degree": p.dp // p.shard_dp,
                "data_parallel_shard_degree": p.shard_dp,
                "fsdp_reshard_after_forward": "always" if p.zero == 3 else "never"}
    # DDP beside tp or pp: the profile refuses it (FrameworkProfile.ddp_sole)
    if p.cp > 1:
        notes.append(f"zero=0 with cp={p.cp}: torchtitan applies FSDP2 over the context-"
                     "parallel ranks (its fsdp mesh is dp_shard x cp), so parameters are "
                     "sharded over them (HSDP with the replicas); the estimate keeps them whole")
    return {"data_parallel_replicate_degree": p.dp, "data_parallel_shard_degree": 1}


def _batch(job: Job) -> tuple[dict, dict]:
    """``[training]`` batch keys and the pipeline micro-batch keys."""
    p = job.plan
    if p.pp > 1:   # each flush's micro-batches run through the schedule as one local batch;
        # torchtitan's accumulation loop runs the flushes (global / (local · dp) of them)
        return ({"local_batch_size": job.num_microbatches // p.flushes * p.mbs,
                 "global_batch_size": p.gbs},
                {"pipeline_parallel_microbatch_size": p.mbs})
    return {"local_batch_size": p.mbs, "global_batch_size": p.gbs}, {}


def _recompute(job: Job) -> dict:
    """``[activation_checkpoint]``: the profile has refused what torchtitan has no mode for
    (Megatron's selective, partial and per-module recomputation: ``TORCHTITAN.recompute``,
    ``recompute_methods``, ``recompute_modules``)."""
    p = job.plan
    if p.recompute == "none":
        return {"mode": "none"}
    if p.recompute == "op":
        return {"mode": "selective", "selective_ac_option": "op"}
    # recompute=full; the profile refuses Megatron's selective (TORCHTITAN.recompute)
    # the estimate's full recomputation stops early as the stack's profile says
    # (FrameworkProfile.recompute_early_stop); torchtitan's own default is early_stop=false
    return {"mode": "full", "early_stop": TORCHTITAN.recompute_early_stop}


def torchtitan_config(job: Job) -> tuple[str, list[str]]:
    """torchtitan's TOML job config for ``job``'s plan, and the caveats (``notes``); a
    SpecError naming what torchtitan cannot run otherwise."""
    p, m = job.plan, job.model
    notes: list[str] = []
    for field, value, rule in plan_violations(TORCHTITAN, p):
        _refuse(f"{field}={value!r}: {rule}")
    # group_microbatches: the profile refuses it (FrameworkProfile.group_microbatches)
    if job.seq_len % (2 * p.tp * p.cp):
        _refuse(f"seq_len {job.seq_len} must be divisible by 2*tp*cp = {2 * p.tp * p.cp} "
                "(parallel_dims.py seq_len_divisor)")
    why = precision_rule(TORCHTITAN, job.dtype)
    if why is not None:
        _refuse(f"--dtype {job.dtype}: {why}")
    if job.dtype != "bf16" and job.dtype not in QUANTISE:
        _refuse(f"--dtype {job.dtype}: torchtitan {RELEASE}: {RELEASE_LACKS}")
    par = _data_parallel(job, notes)
    par["tensor_parallel_degree"] = p.tp
    # plan tp_comm_overlap is async TP (docs/calibration.md §5.50); v0.2.2 distributed/
    # tensor_parallel.py raises "Async TP requires 'model' in --compile.components and
    # --compile.enable" without compile ([compile] components default ["model", "loss"])
    async_tp = bool(p.tp_comm_overlap and p.tp > 1)
    par["enable_async_tensor_parallel"] = async_tp
    par["context_parallel_degree"] = p.cp
    par["pipeline_parallel_degree"] = p.pp
    training, micro = _batch(job)
    if p.pp > 1:
        par["pipeline_parallel_schedule"] = dict(TORCHTITAN_SCHEDULE_NAMES)[p.schedule]
        par.update(micro)
        par["module_fqns_per_model_part"] = model_parts(job)
    if m.is_moe:
        # etp in (1, tp) and ep | dp_shard*cp(*tp): the profile's rules (ep_from_fsdp)
        etp = p.expert_tp
        par["expert_parallel_degree"] = p.ep
        par["expert_tensor_parallel_degree"] = etp if p.ep > 1 else 1
        if p.schedule == "dualpipev" and p.ep > 1:
            par["pipeline_parallel_expert_parallel_overlap"] = True
            if p.recompute != "none":
                notes.append("DualPipeV's expert-parallel overlap does not support activation "
                             "checkpointing yet (job_config.py TODO): run recompute=none")
        if p.moe_capacity_factor is not None:
            notes.append(f"moe_capacity_factor={p.moe_capacity_factor:g} has no torchtitan key "
                         "(its MoE routes without dropping)")
    training.update({"seq_len": job.seq_len, "mixed_precision_param": "bfloat16",
                     "mixed_precision_reduce": "float32"})
    sections: dict[str, dict] = {
        "job": {"description": f"paraplan: {m.name} on {job.cluster.name}, {p.short()}"},
    }
    quant = QUANTISE.get(job.dtype)
    if quant is not None:
        sections["model"] = {"converters": [quant[0]]}
    sections["training"] = training
    sections["parallelism"] = par
    sections["activation_checkpoint"] = _recompute(job)
    # the torchtitan-compile profile (strategies.stacks.variants.compiled) prices the compiled
    # block; components default ["model", "loss"] (v0.2.2 config/job_config.py Compile)
    on = job.framework.elementwise_kernels == "compiled"
    sections["compile"] = {"enable": async_tp or on}
    if async_tp and not on:
        notes.append("tp_comm_overlap=true: async TP ([parallelism] "
                     "enable_async_tensor_parallel), which needs [compile] enable = true; the "
                     "estimate still prices eager elementwise kernels (calibration.md §5.50; "
                     "--framework torchtitan-compile prices the compiled ones, §5.69)")
    if quant is not None:
        sections[quant[0]] = dict(quant[1])
    notes.append(f"torchtitan {RELEASE} job config (--job.config_file); set [model] name and "
                 f"flavor to torchtitan's definition of {m.name}: it reads the architecture "
                 "from its model registry, not from this file")
    if p.tp > 1 and not p.sp:
        notes.append("torchtitan's tensor parallelism always shards the norms along the "
                     "sequence (SequenceParallel); the plan was costed with sp=false")
    if not p.flash_attn:
        notes.append("flash_attn=false has no key: torchtitan's attention is SDPA (its flash "
                     "backend) unless the model flavor picks flex attention")
    # (FSDP over dp_shard·cp: placement.dense_dp_group)
    if p.dp * p.cp > 1 and not (p.overlap_grad_reduce and p.overlap_param_gather):
        notes.append("FSDP2/DDP always overlap their gradient reduction and parameter gathers "
                     "with compute; the plan was costed without")
    return dumps(sections), notes
