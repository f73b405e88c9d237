"""Launch settings of a plan for real frameworks: Megatron-LM arguments, a DeepSpeed config,
torchtitan's TOML job config, MaxText's and llm-foundry's config keys (``EXPORTS``, ``export``).

``megatron_args(job)`` gives the ``pretrain_gpt.py`` arguments (parallelism, batch, schedule,
recomputation, precision, the model's shape); ``deepspeed_config(job)`` the JSON config
where DeepSpeed can express the plan, and a ``SpecError`` naming what it cannot express
otherwise (interleaving, context or Megatron sequence parallelism, expert parallelism,
ZeRO-2/3 with pipelining, AutoTP with pipeline parallelism where no stack is named: under
``megatron-deepspeed`` the tensor parallelism is Megatron's, ``megatron_deepspeed_args``).
Both return ``(text, notes)``:
notes are the caveats a user must act on (printed on stderr by the CLI). The DeepSpeed
config, ``torchtitan``, ``maxtext`` and ``llm-foundry`` live in ``strategies.export`` (one
module each). A stack's
profile names the export it is launched with (``FrameworkProfile.export``); ``check_export``
refuses another.

>>> from strategies.job_text import job_from_text
>>> job = job_from_text("gpt3-175b", "dgx-a100:128",
...                     "tp=8,pp=8,schedule=interleaved,vpp=3,sp=true,zero=1", global_batch=1536)
>>> text, _ = megatron_args(job)
>>> "--num-layers-per-virtual-pipeline-stage 4" in text, "--use-distributed-optimizer" in text
(True, True)
"""
from __future__ import annotations

from strategies.errors import SpecError
from strategies.export.deepspeed import deepspeed_config
from strategies.export.llm_foundry import llm_foundry_config
from strategies.export.maxtext import maxtext_config
from strategies.export.torchtitan import torchtitan_config
from strategies.stacks.profile import FrameworkProfile
from strategies.job import Job
from strategies.model import ModelSpec
from strategies.schedules import get_schedule
from topologies.precision import get_precision

#: the launch-settings exporters (``--export``): the one list the CLI choices and the profiles'
#: ``export`` fields are read against
EXPORTS = ("megatron", "deepspeed", "torchtitan", "maxtext", "llm-foundry")
#: Megatron-FSDP's ``--data-parallel-sharding-strategy`` of the ZeRO stages it gives
MEGATRON_FSDP_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}


def megatron_args(job: Job) -> tuple[str, list[str]]:
    """Megatron-LM launch arguments (a ``torchrun … pretrain_gpt.py`` line)."""
    p, m, cl = job.plan, job.model, job.cluster
    notes: list[str] = []
    from strategies.stacks.megatron import MEGATRON_CORE
    from strategies.stacks.rules import precision_rule
    why = precision_rule(MEGATRON_CORE, job.dtype)     # fp8-rowwise: no Megatron flag
    if why is not None:
        raise SpecError("--export", "megatron",
                        f"cannot express this plan: --dtype {job.dtype}: {why}")
    if p.flushes > 1:     # the launch would run one flush: not the step that was costed
        raise SpecError("--export", "megatron", f"cannot express this plan: flushes="
                        f"{p.flushes}: Megatron-LM runs one pipeline schedule over a step's "
                        "micro-batches (flushes=1)")
    # DeepSeek-V4: refused by check_export (its model rule), before any estimate or search
    a = [f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}",
         f"--context-parallel-size {p.cp}"]
    if p.cp > 1 and p.cp_comm is not None:      # default p2p (arguments.py --cp-comm-type)
        a.append(f"--cp-comm-type {p.cp_comm}")
        if p.hierarchical_cp is not None:   # a2a+p2p's levels (arguments.py L580-585)
            a.append(f"--hierarchical-context-parallel-sizes {p.hierarchical_cp} "
                     f"{p.cp // p.hierarchical_cp}")
    a += _uneven_megatron_args(job)
    if p.ep > 1:
        a.append(f"--expert-model-parallel-size {p.ep}")
    if p.etp is not None and p.etp != p.tp:
        a.append(f"--expert-tensor-parallel-size {p.etp}")
    if p.moe_capacity_factor is not None:
        a.append(f"--moe-expert-capacity-factor {p.moe_capacity_factor:g}")
    if p.moe_pad_to_capacity:
        a.append("--moe-pad-expert-input-to-capacity")
    if p.ep > 1 and p.moe_dispatcher == "alltoall":
        a.append("--moe-token-dispatcher-type alltoall")
    elif p.ep > 1:
        a += ["--moe-token-dispatcher-type flex",
              f"--moe-flex-dispatcher-backend {p.moe_dispatcher}"]
    if p.ep_overlap:
        a.append("--overlap-moe-expert-parallel-comm")   # Megatron-Core's combined 1F1B
        if p.delay_wgrad:       # a pair's last attention weight gradient after its message
            a.append("--delay-wgrad-compute")
    sched_args, sched_notes = get_schedule(p.schedule).megatron_args(job)
    a += sched_args
    notes += sched_notes
    if p.microbatch_group_size is not None:   # interleaved only (the schedule's own rule)
        a.append("--microbatch-group-size-per-virtual-pipeline-stage "
                 f"{p.microbatch_group_size}")
    if p.cuda_graph:   # the whole step as one graph (FrameworkProfile.cuda_graph)
        a.append("--cuda-graph-impl full_iteration")
    if p.sp:
        a.append("--sequence-parallel")
    if p.recompute == "full":   # every layer alone: uniform groups of 1 (strategies.cost.recompute)
        method = p.recompute_method if p.recompute_layers is not None else "uniform"
        a += ["--recompute-granularity full", f"--recompute-method {method}",
              f"--recompute-num-layers {p.recompute_layers or 1}"]
    elif p.recompute == "selective":
        a.append("--recompute-granularity selective")
        if p.recompute_modules is not None:
            a.append("--recompute-modules " + " ".join(p.recompute_modules))
    if p.offload_modules is not None:   # fine-grained activation offloading (cost.offload)
        a += ["--fine-grained-activation-offloading",
              "--offload-modules " + " ".join(p.offload_modules)]
        notes.append("activation offloading: with Transformer Engine >= 2.10 Megatron-LM "
                     "asserts NVTE_CPU_OFFLOAD_V1=1 (megatron/training/arguments.py)"
                     + ("; fused_group_mlp needs --use-transformer-engine-op-fuser"
                        if "fused_group_mlp" in p.offload_modules else ""))
    if p.cpu_offloading_num_layers is not None:     # layer-level (cost.layer_offload)
        a.append(f"--cpu-offloading-num-layers {p.cpu_offloading_num_layers}")
    if p.zero >= 1:
        a.append("--use-distributed-optimizer")
        if p.dp_shard is not None:     # hybrid sharding: the optimizer over dp_shard·cp
            a.append(f"--num-distributed-optimizer-instances {p.dp // p.dp_shard}")
    if p.zero >= 2:   # Megatron-FSDP (v1 runs on the distributed optimizer), docs/user-guide/
        # features/megatron_fsdp.md and parallelism-guide.md: optim_grads is ZeRO-2,
        # optim_grads_params ZeRO-3; its checkpoints are fsdp_dtensor
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy "
              + MEGATRON_FSDP_SHARDING[p.zero], "--ckpt-format fsdp_dtensor"]
        notes.append("Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is unset or > 1 "
                     "(megatron/training/arguments.py): do not export it as 1")
    # (Megatron-Core reduces and shards over dp·cp: placement.dense_dp_group)
    if p.overlap_grad_reduce and p.dp * p.cp > 1:
        a.append("--overlap-grad-reduce")
    if p.overlap_param_gather and p.zero >= 1 and (p.dp * p.cp > 1
                                                   or p.param_gather_with_optimizer):
        a.append("--overlap-param-gather")
    if p.param_gather_with_optimizer:   # (stacks.rules: zero=1, interleaved; arguments.py
        # L622-630 asserts --overlap-param-gather and no distributed checkpoint with it:
        # use_dist_ckpt is ckpt_format != "torch")
        a += ["--overlap-param-gather-with-optimizer-step", "--ckpt-format torch"]
    if p.tp_comm_overlap:
        a.append("--tp-comm-overlap")
    if p.flash_attn:
        a.append("--use-flash-attn")
    a += [f"--micro-batch-size {p.mbs}", f"--global-batch-size {p.gbs}",
          f"--seq-length {job.seq_len}",
          f"--max-position-embeddings {max(job.seq_len, m.max_position_embeddings or 0)}"]
    a += list(get_precision(job.dtype).megatron)
    a += _model_args(m)
    if m.sliding_window is not None:
        notes.append(f"{m.window_kind} attention ({m.sliding_window} tokens"
                     + (f", one layer in {m.global_attention_every} global" if
                        m.global_attention_every else "") + ") has no flag here: set it in "
                     "the model's layer spec (the estimate counts the windowed FLOPs)")
    if m.attention_sinks:
        notes.append("attention sinks (gpt-oss) have no Megatron-LM flag: the model code "
                     "must add them")
    if m.rope_attention_factor != 1.0:
        notes.append(f"YaRN RoPE (attention factor {m.rope_attention_factor:.4f} on cos and "
                     "sin) has no flag here: --position-embedding-type rope is plain RoPE; "
                     "the model's provider must build Megatron-Core's YaRN embedding")
    if m.activation_clamp is not None:
        notes.append(f"the clamped SwiGLU (inputs within +-{m.activation_clamp:g}, gpt-oss "
                     "swiglu_limit) has no flag here: the model's provider must set it")
    script = "pretrain_hybrid.py" if m.is_hybrid else "pretrain_gpt.py"
    head = f"torchrun --nproc_per_node {cl.gpus_per_host} --nnodes {cl.num_hosts} {script}"
    return " \\\n    ".join([head] + a), notes


def _model_args(m) -> list[str]:
    a = [f"--num-layers {m.num_layers}", f"--hidden-size {m.hidden_size}",
         f"--num-attention-heads {m.num_attention_heads}",
         f"--ffn-hidden-size {m.ffn_hidden_size}"]
    if m.kv_heads != m.num_attention_heads:
        a += ["--group-query-attention", f"--num-query-groups {m.kv_heads}"]
    if m.kv_channels:
        a.append(f"--kv-channels {m.kv_channels}")
    if m.qk_norm:
        a.append("--qk-layernorm")
    if m.is_mla:
        a += ["--multi-latent-attention", f"--kv-lora-rank {m.kv_lora_rank}",
              f"--qk-head-dim {m.qk_nope_head_dim}", f"--qk-pos-emb-head-dim {m.qk_rope_head_dim}",
              f"--v-head-dim {m.v_head_dim}"]
        if m.q_lora_rank:
            a.append(f"--q-lora-rank {m.q_lora_rank}")
    if m.gated:
        a.append("--swiglu")
    if m.norm.lower().startswith("rms"):
        a.append("--normalization RMSNorm")
    if m.position_embedding == "rope":
        a.append("--position-embedding-type rope")
    if not m.tie_word_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if not m.bias:
        a.append("--disable-bias-linear")
    if m.is_moe:
        a += [f"--num-experts {m.num_experts}", f"--moe-router-topk {m.moe_router_topk}"]
        if m.moe_ffn_hidden_size:
            a.append(f"--moe-ffn-hidden-size {m.moe_ffn_hidden_size}")
        if m.num_shared_experts:   # Megatron: the summed width of the shared experts
            a.append("--moe-shared-expert-intermediate-size "
                     f"{m.num_shared_experts * m.shared_ffn}")
        if m.shared_expert_gate:
            a.append("--moe-shared-expert-gate")
        if m.num_moe_layers != m.num_layers and not m.is_hybrid:   # (the pattern places them)
            a.append(f"--moe-layer-freq '{_layer_pattern(m)}'")
        if m.router_bias and not m.bias:   # DeepSeek-V3's auxiliary-loss-free balancing bias
            a.append("--moe-router-enable-expert-bias")
        if m.moe_router_num_groups:
            a += [f"--moe-router-num-groups {m.moe_router_num_groups}",
                  f"--moe-router-group-topk {m.moe_router_group_topk}"]
        if m.moe_latent_size:   # TransformerConfig.moe_latent_size (arguments.py L1980)
            a.append(f"--moe-latent-size {m.moe_latent_size}")
    depths = m.num_nextn_predict_layers * m.mtp_repeats
    if m.num_nextn_predict_layers:
        a.append(f"--mtp-num-layers {depths}")
        if m.mtp_repeats > 1:      # TransformerConfig.mtp_use_repeated_layer: one block
            a.append("--mtp-use-repeated-layer")
    if m.is_hybrid:    # Megatron-LM's hybrid model (pretrain_hybrid.py, --hybrid-layer-pattern;
        # the MTP block once per depth after "/", hybrid_layer_allocation.parse_hybrid_pattern)
        mtp = "".join("/" + m.mtp_hybrid_pattern for _ in range(depths)) \
            if m.mtp_hybrid_pattern else ""
        a += [f"--hybrid-layer-pattern '{m.hybrid_pattern}{mtp}'",
              "--position-embedding-type none"]
        if m.activation == "squared_relu":
            a.append("--squared-relu")
        if m.mamba_share:
            a += [f"--mamba-num-heads {m.mamba_num_heads}",
                  f"--mamba-head-dim {m.mamba_head_dim}",
                  f"--mamba-state-dim {m.mamba_state_dim}",
                  f"--mamba-num-groups {m.mamba_num_groups}"]
    return a


def _layer_pattern(m) -> str:
    """Megatron's ``--moe-layer-freq`` list expression: runs of 0 (dense) and 1 (MoE)."""
    runs: list[list] = []
    for k in m.layer_kinds():
        bit = int(k == "moe")
        if runs and runs[-1][0] == bit:
            runs[-1][1] += 1
        else:
            runs.append([bit, 1])
    return "(" + "+".join(f"[{b}]*{n}" for b, n in runs) + ")"


def _uneven_megatron_args(job: Job) -> list[str]:
    """Megatron-LM's pipeline layout switches (docs/layout.md): the layout string, the first
    and the last stage's layers (``--decoder-first/last-pipeline-num-layers``, the middle
    stages even; per-rank counts with unequal middle stages as the layout string), the
    embedding and the loss counted as layers; a refusal for what it cannot express
    (per-group batch shares)."""
    p = job.plan
    if p.group_microbatches is not None:
        raise SpecError("--export", "megatron", "Megatron-LM gives every data-parallel "
                        "replica the same micro-batch count; group_microbatches="
                        f"{'/'.join(map(str, p.group_microbatches))} has no argument")
    if p.layout is not None:
        return [f"--pipeline-model-parallel-layout '{job.layout.text}'"]
    out = []
    if p.first_stage_layers is not None:
        out.append(f"--decoder-first-pipeline-num-layers {p.first_stage_layers}")
    if p.last_stage_layers is not None:
        out.append(f"--decoder-last-pipeline-num-layers {p.last_stage_layers}")
    if p.account_embedding:
        out.append("--account-for-embedding-in-pipeline-split")
    if p.account_loss:
        out.append("--account-for-loss-in-pipeline-split")
    if out:
        return out
    ls = p.layers_per_stage
    if ls is None:
        return []
    if len(set(ls[1:-1])) > 1:
        # unequal middle stages: only the layout string gives each rank its own count
        return [f"--pipeline-model-parallel-layout '{job.layout.text}'"]
    return [f"--decoder-first-pipeline-num-layers {ls[0]}",
            f"--decoder-last-pipeline-num-layers {ls[-1]}"]


def check_export(kind: str, fw: FrameworkProfile | None, model: ModelSpec | None = None
                 ) -> None:
    """Refuse ``--export kind`` for a named stack launched another way (``fw.export``; no
    stack named, ``None``: any export) or for a model its settings cannot build
    (``export_model_rule``; ``None``: not checked). The CLI calls it before the estimate,
    simulation or search, ``export`` again."""
    if kind not in EXPORTS:
        raise SpecError("--export", kind, f"must be one of {', '.join(EXPORTS)}")
    if fw is not None and fw.export != kind:
        rule = (f"{fw.name} is launched with --export {fw.export}" if fw.export in EXPORTS
                else f"paraplan has no launch-settings exporter for {fw.name}")
        raise SpecError("--export", kind, rule)
    why = export_model_rule(kind, model) if model is not None else None
    if why is not None:
        raise SpecError("--export", kind, f"cannot express this model: {why}")


def export_model_rule(kind: str, model: ModelSpec) -> str | None:
    """Why export ``kind`` cannot build ``model`` (None: it can): Megatron-LM's arguments here
    build a GQA transformer or Megatron's hybrid model, not DeepSeek-V4's compressed sparse
    attention; MaxText's keys here are a transformer's (``base_*``), not a hybrid model's
    Mamba-2 layers nor DeepSeek-V4's compressed attention and hyper-connections."""
    if kind == "megatron" and model.is_dsv4:
        return ("DeepSeek-V4's compressed sparse attention runs on Megatron-Core dev "
                "d48bd6be's hybrid model (pretrain_hybrid.py, --hybrid-layer-pattern of C/H/W "
                "layers, --csa-compress-ratios, --o-lora-rank, --o-groups: "
                "megatron/training/arguments.py l.2271-2289, l.4917-4962), which this "
                "export does not write")
    if kind == "maxtext" and model.is_hybrid:
        return (f"{model.name} is a hybrid model (hybrid_pattern of Mamba-2, attention and "
                "MLP layers); the MaxText keys this export writes (base_emb_dim, "
                "base_num_decoder_layers, ...) build a transformer")
    if kind == "maxtext" and model.is_dsv4:
        return (f"{model.name} has DeepSeek-V4's compressed sparse attention and "
                "hyper-connections (compress_ratios, hc_mult); the MaxText keys this export "
                "writes (base_num_kv_heads, head_dim, ...) build a plain transformer's "
                "attention and residual")
    return None


def export(kind: str, job: Job) -> tuple[str, list[str]]:
    """The launch settings of ``job``'s plan for ``kind`` (``EXPORTS``) and their caveats;
    refused for a stack the user named that is launched another way (``check_export``)."""
    check_export(kind, job.named_framework, job.model)
    if kind == "megatron":
        return megatron_args(job)
    if kind == "deepspeed":
        return deepspeed_config(job)
    if kind == "torchtitan":
        return torchtitan_config(job)
    if kind == "maxtext":
        return maxtext_config(job)
    return llm_foundry_config(job)
