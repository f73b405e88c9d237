"""MaxText's config overrides for a plan (``--export maxtext``): YAML keys of its
``src/maxtext/configs/base.yml`` (AI-Hypercomputer/maxtext, 2026-08), given on the command line
(``key=value``) or in a config whose ``base_config: "base.yml"``.

Sources, all in that repository: ``configs/base.yml`` and ``configs/types.py`` (the keys,
``RematPolicy``, ``QuantizationType``; ``num_pipeline_microbatches`` a multiple of the stages,
``num_stages · num_layers_per_pipeline_stage · num_pipeline_repeats`` = the decoder layers;
``calculate_global_batch_sizes``: one forward pass takes ``int(devices ·
per_device_batch_size)`` sequences, a step ``gradient_accumulation_steps`` of them);
``utils/maxtext_utils.py`` ``create_device_mesh`` (the ``ici_*`` axes within a slice, the
``dcn_*`` across; every product must come out exact); ``configs/gpu/a3/*/*vm.sh`` (on GPUs the
ICI axes span a node's NVLink, DCN the nodes: ``dcn_data_parallelism=16
ici_fsdp_parallelism=8``); ``layers/decoders.py`` ``get_remat_policy`` (``full`` saves nothing;
``minimal`` saves every projection but not the attention context, so the attention core is
recomputed: Megatron's selective; ``minimal_with_context`` saves them all; selective
recomputation of named modules is ``custom``, ``strategies.remat_policies``) and base.yml's
``logical_axis_rules`` (the batch is sharded over ``data``, ``fsdp`` and ``expert``: expert
parallelism is carved from the data-parallel ranks).

Plan -> mesh axes: ``tp`` -> tensor, ``cp`` -> context, ``ep`` -> expert, ``dp / ep`` -> fsdp
(ZeRO-3) or data (ZeRO-0), with hybrid sharding (``dp_shard``) ``dp_shard`` -> fsdp and
``dp / dp_shard`` -> data, ``pp`` -> stage. Each is split into its ICI (within an NVLink domain)
and DCN (across) factors by walking the dimensions innermost first, as paraplan places ranks
(``strategies.placement``: tp, cp, dp with its ep blocks innermost, pp).
"""
from __future__ import annotations

from math import gcd


from strategies.errors import SpecError
from strategies.stacks.jax_xla import JAX_XLA
from strategies.stacks.rules import plan_violations, precision_rule
from strategies.job import Job
from strategies.remat_policies import custom_policy

#: MaxText's ``quantization`` for our precisions (Transformer Engine recipes through JAX)
QUANTISE = {"bf16": "", "fp8": "te_fp8_delayedscaling", "fp8-delayed": "te_fp8_delayedscaling",
            "fp8-current": "te_fp8_currentscaling", "mxfp8": "te_mxfp8", "nvfp4": "te_nvfp4"}
#: MaxText ``remat_policy`` of each plan recomputation
REMAT = {"none": "minimal_with_context", "selective": "minimal", "full": "full"}
#: the mesh axes a plan fills, innermost first (placement order)
AXES = ("tensor", "context", "expert", "dp", "replica", "pipeline")


def _refuse(why: str) -> None:
    raise SpecError("--export", "maxtext", f"cannot express this plan: {why}")


def mesh_split(sizes: dict[str, int], domain: int) -> dict[str, tuple[int, int]]:
    """``{axis: (ici, dcn)}``: each axis's factor within an NVLink domain of ``domain`` GPUs
    and across domains, filling the domain with the innermost axes first; a SpecError when the
    axes do not tile the domains exactly (a group half in, half out of a node).

    >>> mesh_split({"tensor": 8, "context": 1, "expert": 1, "dp": 4, "pipeline": 2}, 8)
    {'tensor': (8, 1), 'context': (1, 1), 'expert': (1, 1), 'dp': (1, 4), 'pipeline': (1, 2)}
    >>> mesh_split({"tensor": 2, "context": 1, "expert": 1, "dp": 16, "pipeline": 1}, 8)["dp"]
    (4, 4)
    """
    left, out = domain, {}
    for axis in (a for a in AXES if a in sizes):
        n = sizes[axis]
        ici = gcd(n, left)
        if ici < min(n, left):
            _refuse(f"the {axis} axis ({n}) does not tile NVLink domains of {domain} GPUs "
                    f"({left} GPUs of the domain left for it): MaxText's ici_* x dcn_* mesh "
                    "needs each axis to split into a factor within a domain and one across")
        out[axis] = (ici, n // ici)
        left //= ici
    if left != 1:
        _refuse(f"the plan fills {domain // left} of the {domain} GPUs of an NVLink domain")
    return out


def _batch(job: Job) -> dict:
    """``per_device_batch_size``, ``gradient_accumulation_steps`` and the pipeline's
    micro-batches: a forward pass of MaxText takes ``int(devices · per_device_batch_size)``
    sequences, split into ``num_pipeline_microbatches`` when pipelined."""
    p, n = job.plan, job.cluster.num_gpus
    if p.pp > 1:   # the whole batch in one pass, cut into the pipeline's micro-batches
        pass_seqs, accum = p.gbs, 1
    else:          # one micro-batch per replica per pass, accumulated
        pass_seqs, accum = p.mbs * p.dp, job.num_microbatches
    per_device = pass_seqs / n
    per_device = int(per_device) if per_device == int(per_device) else per_device
    if int(n * per_device) != pass_seqs:
        _refuse(f"{pass_seqs} sequences per pass over {n} GPUs is per_device_batch_size "
                f"{per_device!r}, which MaxText rounds to {int(n * per_device)} sequences")
    out = {"per_device_batch_size": per_device, "gradient_accumulation_steps": accum}
    if p.pp > 1:
        # a multiple of the stages: the profile's rule (JAX_XLA.microbatches_per_pp)
        out["num_pipeline_microbatches"] = job.num_microbatches
    return out


def _model(job: Job, notes: list[str]) -> dict:
    m = job.model
    out = {"base_emb_dim": m.hidden_size, "base_num_query_heads": m.num_attention_heads,
           "base_num_kv_heads": m.kv_heads, "head_dim": m.head_dim,
           "base_mlp_dim": m.ffn_hidden_size, "base_num_decoder_layers": m.num_layers,
           "vocab_size": m.vocab_size}
    if m.is_moe:
        out.update({"num_experts": m.num_experts, "num_experts_per_tok": m.moe_router_topk,
                    "base_moe_mlp_dim": m.moe_ffn_hidden_size or m.ffn_hidden_size,
                    "first_num_dense_layers": m.first_k_dense_replace,
                    "shared_experts": m.num_shared_experts})
        if m.moe_layer_freq != 1:
            notes.append(f"MoE every {m.moe_layer_freq} layers has no base.yml key: the "
                         "decoder_block of the model sets it")
    if m.is_mla:
        notes.append("multi-head latent attention: set attention_type: mla and its ranks "
                     "(q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, "
                     "v_head_dim) or use the model's MaxText config")
    if m.sliding_window is not None:
        notes.append(f"{m.window_kind} attention ({m.sliding_window} tokens) comes from the "
                     "model's MaxText config, not from these keys")
    return out


def maxtext_config(job: Job) -> tuple[str, list[str]]:
    """MaxText's config keys (YAML) for ``job``'s plan, and the caveats (``notes``); a
    SpecError naming what MaxText cannot run otherwise."""
    p, m, cl = job.plan, job.model, job.cluster
    notes: list[str] = []
    for field, value, rule in plan_violations(JAX_XLA, p):
        _refuse(f"{field}={value!r}: {rule}")
    # group_microbatches: the profile refuses it (FrameworkProfile.group_microbatches)
    why = precision_rule(JAX_XLA, job.dtype)   # QUANTISE and fp16 cover JAX_XLA.precisions
    if why is not None:
        _refuse(f"--dtype {job.dtype}: {why}")
    # recompute modes, partial and per-module recomputation: the profile's limits
    # (JAX_XLA.recompute is REMAT's keys; no recompute_methods; recompute_modules are a
    # custom policy, strategies.remat_policies.custom_policy)
    if p.pp > 1 and m.num_layers % p.pp:
        _refuse(f"{m.num_layers} layers over pp={p.pp}: MaxText's pipeline gives every stage "
                "the same number of layers")
    # ep | dp: the profile's rule (JAX_XLA.ep_in_dp)
    # hybrid sharding (dp_shard): the fsdp axis over a shard group, the data axis over the
    # replicas, outside it (ep is refused with dp_shard: Plan)
    sizes = {"tensor": p.tp, "context": p.cp, "expert": p.ep, "dp": p.shard_dp // p.ep,
             "replica": p.dp // p.shard_dp, "pipeline": p.pp}
    split = mesh_split(sizes, cl.gpus_per_node)
    dp_axis = "fsdp" if p.zero == 3 else "data"
    other = "data" if dp_axis == "fsdp" else "fsdp"
    cfg: dict = {"hardware": "gpu", "dtype": "float16" if job.dtype == "fp16" else "bfloat16",
                 "quantization": QUANTISE.get(job.dtype, ""),
                 "max_target_length": job.seq_len}
    cfg.update(_batch(job))
    for level, i in (("ici", 0), ("dcn", 1)):
        cfg[f"{level}_{dp_axis}_parallelism"] = split["dp"][i]
        cfg[f"{level}_{other}_parallelism"] = split["replica"][i]
        for axis in ("tensor", "context", "expert", "pipeline"):
            cfg[f"{level}_{axis}_parallelism"] = split[axis][i]
    if p.pp > 1:
        cfg.update({"num_layers_per_pipeline_stage": m.num_layers // p.pp,
                    "num_pipeline_repeats": 1,
                    "scan_layers": False})   # base.yml: scan the pipeline iterations instead
    cfg["remat_policy"] = REMAT[p.recompute]
    if p.recompute == "selective" and p.recompute_modules:
        cfg.update(custom_policy(p.recompute_modules))
    cfg["attention"] = "cudnn_flash_te" if p.flash_attn else "dot_product"
    if p.cp > 1:    # the exchange the profile prices (JAX_XLA.cp_impl, docs/calibration.md §5.195)
        cfg["context_parallel_strategy"] = "all_gather"
    if p.moe_capacity_factor is not None:
        cfg["capacity_factor"] = float(p.moe_capacity_factor)
    cfg.update(_model(job, notes))
    notes.append("MaxText config overrides (base.yml keys); give model_name or the "
                 "decoder_block of the model, and the XLA flags of its GPU scripts "
                 "(configs/gpu/a3: the latency-hiding scheduler overlaps the collectives the "
                 "plan overlaps)")
    if p.recompute == "none":
        notes.append("recompute=none is remat_policy minimal_with_context: every projection "
                     "and the attention output are saved, the elementwise work between them "
                     "is recomputed (MaxText has no policy that saves everything)")
    if p.sp and p.tp > 1:
        notes.append("sp=true has no MaxText key: XLA picks the tensor axis's collectives")
    if p.ep > 1 and p.zero == 0:
        notes.append("MaxText shards the dense weights over the expert axis too (logical "
                     "rule embed -> fsdp, expert): ZeRO-3-like over the ep ranks")
    import yaml     # here: a search or an estimate that exports nothing never loads it
    return yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False), notes
