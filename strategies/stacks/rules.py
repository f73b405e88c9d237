"""Every limit of a stack as one list of validity rules (``stack_rules``): the plan check
(``check_plan``, ``plan_violations``), the search's mask (``stack_mask``) and the exporters
read it, never a copy; and the precisions a stack trains at (``precision_rule``,
``check_precision``).

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
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from strategies.cost.cp_a2a import TE_FIRST as A2A_TE_FIRST
from strategies.cost.cp_hier import TE_FIRST as HIER_TE_FIRST
from strategies.cost.offload import offload_mask, offloads
from strategies.cost.recompute import METHOD_CODE, modules_mask
from strategies.errors import SpecError
from strategies.plan import DISPATCHERS
from strategies.plan.choices import CP_COMMS, CP_IMPL_OF
from strategies.plan_arrays import RECOMPUTE_CODE
from strategies.schedules import schedule_code, schedule_names
from strategies.schedules.validity import Rule, member

if TYPE_CHECKING:
    from strategies.plan import Plan
    from strategies.stacks.profile import FrameworkProfile


def stack_rules(fw: FrameworkProfile, v: Any) -> list[Rule]:
    """Every limit of stack ``fw`` as one list of validity rules ``(field, value, ok, why)``
    (``strategies.schedules.validity.Rule``), over ``v``: a ``PlanArrays`` (the search's mask,
    ``ok`` arrays) or one plan's ``plan_view`` (``ok`` scalars). ``schedule`` and
    ``recompute`` are their integer codes. The one statement of each limit: the feature
    fields of ``FrameworkProfile`` and the module docstring give the sources."""
    who = f"{fw.name} "
    pp1 = v.pp == 1
    runs = [schedule_code(n) for n in schedule_names() if fw.schedule_for(n) in fw.schedules]
    stages_ok = member(v.zero, fw.zero_stages)
    rules: list[Rule] = []
    if fw.max_pp is not None:     # before the schedule's rule: pp is what a plan asked for
        rules.append(("pp", v.pp, v.pp <= fw.max_pp,
                      lambda: who + f"has no pipeline parallelism (pp <= {fw.max_pp})"))
    rules.append(("schedule", v.schedule, pp1 | member(v.schedule, runs),
                  lambda: who + "runs " + (", ".join(fw.schedules) if fw.schedules
                                           else "no pipeline parallelism")))
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
                  member(v.recompute, [RECOMPUTE_CODE[r] for r in fw.recompute]),
                  lambda: who + f"recomputes {', '.join(fw.recompute)}"
                  + (f" ({fw.recompute_note})" if fw.recompute_note else "")))
    rules.append(("recompute_method", v.recompute_method,
                  (np.asarray(v.recompute_layers) == 0)
                  | member(v.recompute_method, [METHOD_CODE[x] for x in fw.recompute_methods]),
                  lambda: who + (f"runs recompute_method {', '.join(fw.recompute_methods)}"
                                 if fw.recompute_methods else
                                 "has no partial recomputation (recompute_layers)")))
    rules.append(("recompute_modules", v.recompute_modules,
                  (np.asarray(v.recompute_modules) & ~modules_mask(fw.recompute_modules)) == 0,
                  lambda: who + (f"recomputes the modules {', '.join(fw.recompute_modules)}"
                                 if fw.recompute_modules else "has no per-module recomputation")))
    rules += data_parallel_rules(fw, v)
    if fw.tp_comm_overlap and fw.tp_overlap_without_sp == "refused":
        rules.append(("tp_comm_overlap", v.tp_comm_overlap,
                      ~np.asarray(v.tp_comm_overlap, bool) | (np.asarray(v.tp) == 1)
                      | np.asarray(v.sp, bool),
                      lambda: who + _TP_OVERLAP_NEEDS_SP[fw.tp_overlap]))
    groups = getattr(v, "group_microbatches_given", False)   # PlanArrays: none
    rules.append(("group_microbatches", groups, ~np.asarray(groups, bool) | fw.group_microbatches,
                  lambda: who + "gives every data-parallel replica the same batch "
                                "(no group_microbatches)"))
    rules += layout_rules(fw, v)
    rules += ep_overlap_rules(fw, v)
    rules += param_gather_optimizer_rules(fw, v)
    rules += offload_rules(fw, v)
    rules.append(("cuda_graph", v.cuda_graph, ~np.asarray(v.cuda_graph, bool) | fw.cuda_graph,
                  lambda: who + "has no full-iteration CUDA graph"))
    rules.append(("moe_dispatcher", v.moe_dispatcher,
                  member(v.moe_dispatcher, [DISPATCHERS.index(d) for d in fw.moe_dispatchers]),
                  lambda: who + f"runs the token dispatchers {', '.join(fw.moe_dispatchers)}"))
    cpc = getattr(v, "cp_comm", 0)      # PlanArrays: none, the stack's own exchange
    # a2a from Transformer Engine 1.11 on (``cost.cp_a2a.TE_FIRST``), where the stack states one
    # and a2a+p2p from 1.12 on (``cost.cp_hier.TE_FIRST``, §5.189)
    te = tuple(fw.te_version) if fw.te_version is not None else None
    first = {"a2a": A2A_TE_FIRST, "a2a+p2p": HIER_TE_FIRST}
    old = [c for c in fw.cp_comms if c in first and te is not None and te < first[c]]
    comms = [c for c in fw.cp_comms if c not in old]
    # a stack's own exchange stated in plan terms is no choice (jax-xla: all_gather, §5.195)
    own = [c for c in CP_COMMS if fw.context_parallel and CP_IMPL_OF[c] == fw.cp_impl]
    runs = [0] + [1 + CP_COMMS.index(c) for c in comms + own]
    why_a2a = "".join(f"; {c} needs Transformer Engine >= {first[c][0]}.{first[c][1]}, "
                      f"it states {te[0]}.{te[1]}" for c in old)
    rules.append(("cp_comm", cpc, member(cpc, runs),
                  lambda: who + (f"runs cp_comm {', '.join(comms)} (Megatron-Core's "
                                 f"--cp-comm-type{why_a2a})" if fw.cp_comms else
                                 "has no context parallelism: no cp_comm"
                                 if not fw.context_parallel else
                                 f"runs context parallelism only its own way (cp_impl "
                                 f"{fw.cp_impl}): no cp_comm"
                                 + "".join(f" but {c}" for c in own))))
    return rules


#: why a stack that refuses TP overlap without sequence parallelism does, by its TP overlap
#: (``FrameworkProfile.tp_overlap``, ``tp_overlap_without_sp``)
_TP_OVERLAP_NEEDS_SP = {
    "async-tp": "runs TP overlap as async TP, which fuses sequence-parallel all-gathers and "
                "reduce-scatters with their matmuls: needs sp=true with tp > 1 (and "
                "torch.compile, --compile.enable_async_tensor_parallel)",
    "userbuffers": "runs TP overlap as Transformer Engine's userbuffers, which pipeline the "
                   "sequence-parallel all-gathers and reduce-scatters with their GEMMs: needs "
                   "sp=true with tp > 1 (Megatron-LM's arguments.py asserts "
                   "--sequence-parallel for --tp-comm-overlap)"}


def stack_tp_overlap(fw: FrameworkProfile, tp: Any, sp: Any, tpo: Any) -> Any:
    """Plan switch ``tp_comm_overlap`` as stack ``fw`` runs it: off with ``tp > 1`` and no
    sequence parallelism where the stack turns it off (``fw.tp_overlap_without_sp ==
    "disabled"``: NeMo, Megatron-Bridge), as given elsewhere (refused there by
    ``stack_rules``, or a no-op with ``tp = 1``). Scalars or arrays; ``make_job`` and the
    search read it."""
    if fw.tp_overlap_without_sp != "disabled":
        return tpo
    on = np.logical_and(tpo, (np.asarray(tp) == 1) | np.asarray(sp, bool))
    return bool(on) if np.ndim(on) == 0 else on


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
    dps = np.asarray(getattr(v, "dp_shard", dp))       # hybrid sharding's shard group (or dp)
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
        shard = np.where(zero >= 2, dps, 1) * np.asarray(v.cp) * np.where(etp == 1, tp, 1)
        rules.append(("ep", v.ep, shard % ep == 0,
                      lambda: who + "carves expert parallelism from the FSDP ranks: ep must "
                                    "divide dp_shard*cp (*tp when etp = 1), dp_shard the plan's "
                                    "(dp without hybrid sharding) with zero=2/3 and 1 with "
                                    "zero=0 (parallel_dims.py)"))
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
    rules.append(("dp_shard", getattr(v, "dp_shard", None), (dps == dp) | member(
        zero, fw.hybrid_zero), lambda: who + (
            f"runs hybrid sharding (dp_shard < dp) only with zero in {fw.hybrid_zero}"
            if fw.hybrid_zero else "does not run hybrid sharding (dp_shard < dp)")))
    if not fw.hybrid_ep:
        rules.append(("dp_shard", getattr(v, "dp_shard", None), (dps == dp) | (ep == 1),
                      lambda: who + "does not run hybrid sharding (dp_shard < dp) with expert "
                                    "parallelism (ep > 1)"))
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
        ("ep_overlap", v.ep_overlap, ~on | (v.pp == 1) | member(v.schedule, codes),
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


def param_gather_optimizer_rules(fw: FrameworkProfile, v: Any) -> list[Rule]:
    """Where plan switch ``param_gather_with_optimizer`` (Megatron-Core's
    ``--overlap-param-gather-with-optimizer-step``, ``stacks.param_gather.gather_with_optimizer``)
    may be on: a stack that runs it (``fw.param_gather_with_optimizer``), and what Megatron-LM's
    ``validate_args`` asserts (core_v0.13.0 c550cf6 ``megatron/training/arguments.py``
    L622-630): the distributed optimizer (``zero=1``), ``overlap_param_gather`` and the
    interleaved schedule (``--virtual-pipeline-model-parallel-size``: ``vpp > 1``)."""
    on = np.asarray(v.param_gather_with_optimizer, bool)
    who = f"{fw.name} "
    say = "Megatron-LM's arguments.py asserts "
    return [
        ("param_gather_with_optimizer", v.param_gather_with_optimizer,
         ~on | fw.param_gather_with_optimizer,
         lambda: who + "has no parameter gathers inside the optimizer step (Megatron-Core's "
                       "overlap_param_gather_with_optimizer_step)"),
        ("param_gather_with_optimizer", v.param_gather_with_optimizer, ~on | (v.zero == 1),
         lambda: "needs the distributed optimizer, zero=1 (" + say
                 + "--use-distributed-optimizer for it)"),
        ("param_gather_with_optimizer", v.param_gather_with_optimizer,
         ~on | np.asarray(v.overlap_param_gather, bool),
         lambda: "needs overlap_param_gather=true (" + say + "--overlap-param-gather for it)"),
        ("param_gather_with_optimizer", v.param_gather_with_optimizer,
         ~on | ((np.asarray(v.pp) > 1) & (np.asarray(v.vpp) > 1)
                & (v.schedule == schedule_code("interleaved"))),
         lambda: "needs the interleaved schedule, pp > 1 and vpp > 1 (" + say
                 + "--virtual-pipeline-model-parallel-size for it)")]


def offload_rules(fw: FrameworkProfile, v: Any) -> list[Rule]:
    """Where plan keys ``offload_modules`` (Megatron-Core's fine-grained activation offloading,
    ``cost.offload``) and ``cpu_offloading_num_layers`` (its layer-level CPU offloading,
    ``cost.layer_offload``: the same stacks) may be set: a stack that runs it
    (``fw.activation_offload``);
    ``fused_group_mlp`` only on Transformer Engine's fused grouped MLP (``fw.fused_grouped_mlp``:
    Megatron-Core raises "fused_group_mlp requires use_transformer_engine_op_fuser",
    transformer_config.py L2186-2188 at d98e8a64dd); not with ``cuda_graph`` (paraplan's
    full-iteration graph, where Megatron-Core needs ``fine_grained_offloading_max_inflight_
    offloads`` and its joins, which are not modelled)."""
    mask = np.asarray(getattr(v, "offload_modules", 0), dtype=np.int64)
    on = mask != 0
    fused = offloads(mask, "fused_group_mlp")
    cpu = np.asarray(getattr(v, "cpu_offloading_num_layers", 0))
    return [
        ("offload_modules", v.offload_modules, ~on | fw.activation_offload,
         lambda: f"{fw.name} has no fine-grained activation offloading (Megatron-Core's "
                 "--fine-grained-activation-offloading)"),
        ("offload_modules", v.offload_modules, ~fused | fw.fused_grouped_mlp,
         lambda: "fused_group_mlp needs Transformer Engine's fused grouped MLP (the "
                 "fused_grouped_mlp stack variant; Megatron-Core requires "
                 "use_transformer_engine_op_fuser)"),
        ("offload_modules", v.offload_modules, ~on | ~np.asarray(v.cuda_graph, bool),
         lambda: "not with cuda_graph=true: the full-iteration graph needs Megatron-Core's "
                 "fine_grained_offloading_max_inflight_offloads joins, not modelled"),
        # layer-level CPU offloading (cost.layer_offload): Transformer Engine's context, in
        # the same Megatron-Core stacks (transformer_block.py asserts TE is present)
        ("cpu_offloading_num_layers", cpu, ~(cpu > 0) | fw.activation_offload,
         lambda: f"{fw.name} has no Megatron-Core CPU activation offloading "
                 "(--cpu-offloading-num-layers)")]


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
                           cuda_graph=plan.cuda_graph, vpp=plan.vpp,
                           overlap_param_gather=plan.overlap_param_gather,
                           param_gather_with_optimizer=plan.param_gather_with_optimizer,
                           offload_modules=offload_mask(plan.offload_modules),
                           cpu_offloading_num_layers=plan.cpu_offloading_num_layers or 0,
                           moe_dispatcher=DISPATCHERS.index(plan.moe_dispatcher),
                           cp_comm=0 if plan.cp_comm is None else 1 + CP_COMMS.index(plan.cp_comm),
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
    ``stack_rules`` on the one plan, values as the plan gives them (a list of names as plan
    text joins them: ``recompute_modules='core_attn+mlp'``, not a Python tuple)."""
    def given(v: Any) -> Any:
        return "+".join(v) if isinstance(v, tuple) and all(isinstance(x, str) for x in v) else v
    return [(field, given(getattr(plan, field)), why())
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
