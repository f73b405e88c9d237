"""``Job``: a model, a cluster and a resolved plan, checked against each other."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable

from strategies.cost.layer_offload import check_model_layers
from strategies.cost.offload import check_offload_model
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig, get_system
from strategies.errors import SpecError
from strategies.framework import DEFAULT as DEFAULT_FRAMEWORK
from strategies.framework import get_profile
from strategies.stacks.comm_rules import stack_grad_bytes
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.plan_defaults import stack_default_refusal
from strategies.stacks.cp_windows import check_window_exchange
from strategies.stacks.rules import (check_plan, check_precision, ep_overlap_rules,
                                     param_gather_optimizer_rules, plan_view, stack_tp_overlap)
from strategies.stacks.variants import with_cp_comm, with_fp8_attention
from strategies.layout import build_layout
from strategies.layout.record import PipelineLayout
from strategies.model import ModelSpec
from strategies.model.dsv4 import refuse_cost
from strategies.plan import Plan
from strategies.schedules import get_schedule
from strategies.flushes import flush_rules
from strategies.schedules.validity import raise_first
from strategies.cost.mamba_mixer import check_hybrid_plan
from strategies.cost.cp_a2a import check_heads
from topologies.cluster import Cluster
from topologies.precision import DTYPES


@dataclass(frozen=True)
class Job:
    """Everything one estimate or simulation needs. ``plan.dp`` and ``plan.gbs`` are set.
    ``framework``: the software stack's fixed properties (``strategies.framework``);
    ``system``: the policy constants (``strategies.cost.system``)."""

    model: ModelSpec
    cluster: Cluster
    plan: Plan
    dtype: str = "bf16"
    framework: FrameworkProfile = DEFAULT_FRAMEWORK
    framework_named: bool = False
    system: SystemConfig = DEFAULT_SYSTEM
    #: the plan fields the named stack filled where the plan gave none
    #: (``strategies.stacks.plan_defaults.PlanFill``), stated by the reports
    plan_defaults: tuple = ()

    @property
    def named_framework(self) -> FrameworkProfile | None:
        """The stack the user named (its limits apply to derived jobs), or None."""
        return self.framework if self.framework_named else None

    @property
    def seq_len(self) -> int:
        return self.model.seq_length

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline: ``gbs / (mbs·dp)``; with ``group_microbatches`` the
        largest count of any replica (what memory and the simulator's size limit read)."""
        p = self.plan
        if p.group_microbatches is not None:
            used = set(replica_groups(self.cluster, p))
            return max(m for g, m in enumerate(p.group_microbatches) if g in used)
        return p.gbs // (p.mbs * p.dp)

    def stage_nodes(self, stage: int) -> range:
        """The nodes holding pipeline stage ``stage``: its global ranks are ``stage·tp·cp·dp``
        to ``(stage+1)·tp·cp·dp - 1`` (pp is the outermost coordinate)."""
        p = self.plan
        first, last = stage_node_bounds(stage, p.tp * p.cp * p.dp, self.cluster.gpus_per_node)
        return range(first, last + 1)

    def microbatches_of_rank(self, rank: int) -> int:
        """Micro-batches rank ``rank`` runs per step: its replica's node group's count in
        ``group_microbatches``, else ``num_microbatches``."""
        p = self.plan
        if p.group_microbatches is None:
            return self.num_microbatches
        dp_index = (rank // (p.tp * p.cp)) % p.dp
        return p.group_microbatches[replica_groups(self.cluster, p)[dp_index]]

    @property
    def layout(self) -> PipelineLayout:
        """The layers each (pipeline rank, chunk) holds (``strategies.layout``): the one
        representation the cost record, the memory model and the compiler read."""
        return build_layout(self.model, self.plan)

    def layers_of_stage(self, stage: int) -> int:
        """Transformer layers held by pipeline stage ``stage`` (all its chunks), read from
        ``layout`` (``num_layers / pp`` for the even split)."""
        return self.layout.layers_of_stage(stage)

    def layers_of_chunk(self, stage: int, chunk: int) -> int:
        """Transformer layers of ``stage``'s model chunk ``chunk`` (``layout``)."""
        return self.layout.layers(stage, chunk)

    @property
    def tokens_per_step(self) -> int:
        return self.plan.gbs * self.seq_len

    def to_dict(self) -> dict:
        """The inputs as JSON; ``system`` only when it is not ``DEFAULT_SYSTEM``."""
        d = {"model": self.model.report_dict(), "cluster": self.cluster.to_dict(),
             "plan": self.plan.to_dict(), "layout": self.layout.to_dict(),
             "dtype": self.dtype, "seq_len": self.seq_len,
             "num_microbatches": self.num_microbatches, "framework": self.framework.name}
        if self.system != DEFAULT_SYSTEM:
            d["system"] = asdict(self.system)
        if self.plan_defaults:
            d["plan_defaults"] = [f.to_dict() for f in self.plan_defaults]
        return d


def stage_node_bounds(stage: Any, per_stage: Any, gpus_per_node: int) -> tuple[Any, Any]:
    """The first and the last node holding pipeline stage ``stage`` when each stage is
    ``per_stage`` (``tp·cp·dp``) consecutive ranks, pp outermost: ranks ``stage·per_stage``
    to ``(stage+1)·per_stage - 1``. Integers (``Job.stage_nodes``) or integer arrays over
    plans (``estimate.mixed_stages.stage_types``)."""
    return (stage * per_stage // gpus_per_node,
            ((stage + 1) * per_stage - 1) // gpus_per_node)


def make_job(model: ModelSpec, cluster: Cluster, plan: Plan, seq_len: int | None = None,
             global_batch: int | None = None, dtype: str = "bf16",
             framework: FrameworkProfile | str | None = None,
             system: SystemConfig | None = None) -> Job:
    """Resolve ``dp`` and ``gbs`` and check every cross rule; raises SpecError naming the rule.
    ``framework``: a profile or its name; a named stack refuses the plan features it lacks
    (``strategies.stacks.rules.check_plan``). ``None``: no stack named, Megatron-Core's costs and
    any plan (the textbook schedules, GPipe included, stay open to studies). ``system``: the
    policy constants (default ``DEFAULT_SYSTEM``); an unset ``grad_buffer_bytes`` takes the
    stack's (``comm_rules.stack_grad_bytes``)."""
    fw = get_profile(framework)
    sy = get_system(system)
    if framework is not None and plan.schedule != fw.schedule_for(plan.schedule):
        plan = replace(plan, schedule=fw.schedule_for(plan.schedule))
    if framework is not None:   # TP overlap the stack turns off (NeMo without sp)
        plan = replace(plan, tp_comm_overlap=stack_tp_overlap(fw, plan.tp, plan.sp,
                                                              plan.tp_comm_overlap))
    if dtype not in DTYPES:
        raise SpecError("dtype", dtype, f"must be one of {', '.join(DTYPES)}")
    # what DeepSeek-V4's cost does not model (context parallelism, the unfused path)
    try:
        refuse_cost(model, plan.cp, plan.flash_attn, fw.fp8_attention)
    except SpecError as e:
        raise (stack_default_refusal(fw, plan, e) if framework is not None else e) from None
    if framework is not None:  # a precision the stack lacks, before any work
        check_precision(fw, dtype)
    if not sy.grad_buffer_bytes and stack_grad_bytes(fw):   # the stack's gradient bytes
        sy = replace(sy, grad_buffer_bytes=stack_grad_bytes(fw))
    for g in cluster.groups:  # a precision the chip lacks (nvfp4 on H100) is refused here
        g.gpu.rate_key(dtype)
    if seq_len is not None:
        model = model.with_seq_length(seq_len)
    n = cluster.num_gpus
    mp = plan.model_parallel
    if n % mp:
        raise SpecError("tp*pp*cp", mp, f"must divide the cluster's {n} GPUs "
                        f"(tp={plan.tp}, pp={plan.pp}, cp={plan.cp})")
    dp = n // mp
    if plan.dp is not None and plan.dp != dp:
        raise SpecError("dp", plan.dp, f"tp*pp*cp*dp must equal the {n} GPUs of the cluster; "
                        f"with tp={plan.tp}, pp={plan.pp}, cp={plan.cp} dp must be {dp}")
    gbs = plan.gbs if plan.gbs is not None else global_batch
    if gbs is None:
        raise SpecError("gbs", None, "give the global batch (plan gbs=N or --global-batch N)")
    if isinstance(gbs, bool) or not isinstance(gbs, int) or gbs < 1:
        raise SpecError("gbs", gbs, "must be an integer >= 1")
    plan = replace(plan, dp=dp, gbs=gbs)
    try:
        check_plan_against_model(model, plan)
    except SpecError as e:      # a stack default the model cannot take says so
        raise (stack_default_refusal(fw, plan, e) if framework is not None else e) from None
    if plan.group_microbatches is not None:
        counts = _check_group_microbatches(cluster, plan)
    elif gbs % (plan.mbs * dp):
        raise SpecError("gbs", gbs, f"must be a multiple of mbs*dp = {plan.mbs}*{dp} = {plan.mbs * dp}")
    else:
        counts = [gbs // (plan.mbs * dp)]
    if plan.flushes > 1:
        counts = [_per_flush(plan, counts)]
    for m in counts:
        get_schedule(plan.schedule).check(plan.pp, m, plan.vpp, plan.microbatch_group_size)
    if framework is not None:
        check_plan(fw, plan)
    else:       # the combined 1F1B's and Megatron-LM's gathers-with-optimizer limits hold
        # whatever stack runs them
        raise_first(ep_overlap_rules(fw, plan_view(plan))
                    + param_gather_optimizer_rules(fw, plan_view(plan)))
    # the exchanges the stack runs windowed layers over (stacks.cp_windows, §5.196)
    check_window_exchange(model, fw, plan.cp, plan.cp_comm)
    fw = with_cp_comm(fw, plan.cp_comm)     # the plan's K/V exchange (checked above)
    if plan.fp8_attention:   # refused with field, value and rule where a chip cannot run it
        for g in cluster.groups:
            fw = with_fp8_attention(fw, dtype, g.gpu)
    return Job(model, cluster, plan, dtype, fw, framework is not None, sy)


def _per_flush(plan: Plan, counts: list[int]) -> int:
    """Micro-batches per pipeline flush of a plan with ``flushes`` > 1 (``strategies.flushes``):
    pipelined, one count for every replica, and a whole number per flush
    (``flushes.flush_rules``, the rule the search's mask applies)."""
    raise_first(flush_rules(plan.pp, counts[0], plan.flushes,
                            plan.group_microbatches is not None))
    return counts[0] // plan.flushes


def check_plan_against_model(model: ModelSpec, plan: Plan) -> None:
    """Divisibility rules between a plan and a model."""
    a, kv = model.num_attention_heads, model.kv_heads
    if a % plan.tp:
        raise SpecError("tp", plan.tp, f"must divide num_attention_heads={a}")
    if kv % plan.tp:
        raise SpecError("tp", plan.tp, f"must divide num_query_groups (KV heads)={kv}")
    check_hybrid_plan(model, plan.tp, plan.cp, plan.recompute)
    lay = build_layout(model, plan)  # the layers each chunk holds; SpecError where it cannot
    _check_recompute_against_model(model, plan, lay)
    s = model.seq_length
    if plan.cp > 1 and s % (2 * plan.cp):
        raise SpecError("cp", plan.cp, f"2*cp must divide seq_len={s} (load-balanced ring attention)")
    if plan.cp_comm == "a2a":   # heads scattered over the CP group (cost.cp_a2a, §5.185)
        check_heads(model, plan.tp, plan.cp)
    if plan.cp_comm == "a2a+p2p":   # ... over the all-to-all's k ranks (cost.cp_hier, §5.189)
        check_heads(model, plan.tp, plan.hierarchical_cp, "hierarchical_cp")
    if plan.sp and s % (plan.tp * plan.cp):
        raise SpecError("sp", True, f"sequence parallelism needs tp*cp={plan.tp * plan.cp} "
                        f"to divide seq_len={s}")
    if plan.ep > 1:
        if not model.is_moe:
            raise SpecError("ep", plan.ep, f"expert parallelism needs an MoE model; {model.name} is dense")
        if model.num_experts % plan.ep:
            raise SpecError("ep", plan.ep, f"must divide num_experts={model.num_experts}")
    check_expert_plan(model, plan)
    check_model_layers(plan.cpu_offloading_num_layers, model.num_layers,
                       not model.is_moe and not model.is_hybrid, model.name)
    check_offload_model(plan.offload_modules, model)


def check_expert_plan(model: ModelSpec, plan: Plan) -> None:
    """The expert-parallel rules (Megatron-Core's ``parallel_state``): the expert tensor- and
    expert-parallel ranks ``etp·ep`` are cut from the ``tp·cp·dp`` ranks of a pipeline stage
    (the rest is the expert-data-parallel size), ``etp`` divides the expert's width, and the
    MoE fields need an MoE model (the routed offload modules: ``cost.offload.
    check_offload_model``)."""
    etp = plan.expert_tp
    for f in ("etp", "moe_imbalance", "moe_capacity_factor"):
        v = getattr(plan, f)
        if v is not None and not model.is_moe and not (f == "etp" and v == plan.tp):
            raise SpecError(f, v, f"applies to mixture-of-experts layers; {model.name} is dense")
    for f, plain in (("moe_dispatcher", "alltoall"), ("moe_routing", "random"),
                     ("moe_pad_to_capacity", False)):
        v = getattr(plan, f)
        if v != plain and not model.is_moe:
            raise SpecError(f, "+".join(v) if isinstance(v, tuple) else v,
                            f"applies to mixture-of-experts layers; {model.name} is dense")
    if not model.is_moe:
        return
    if not expert_width_fits(model, etp):
        raise SpecError("etp", etp, f"must divide the expert width moe_ffn_hidden_size="
                        f"{model.expert_ffn} (expert tensor parallelism splits it)")
    if plan.dp is not None:
        ranks = plan.tp * plan.cp * plan.dp
        if not expert_groups_fit(plan.tp, plan.cp, plan.dp, plan.ep, etp):
            what = "ep" if plan.etp is None else "etp"
            raise SpecError(what, getattr(plan, what) if what == "ep" else etp,
                            f"etp*ep = {etp}*{plan.ep} = {etp * plan.ep} must divide the ranks "
                            f"of a pipeline stage, tp*cp*dp = {plan.tp}*{plan.cp}*{plan.dp} = "
                            f"{ranks} (expert groups are cut from them; the rest is expert "
                            "data parallelism)")


def expert_width_fits(model: ModelSpec, etp: Any) -> Any:
    """``etp`` divides the expert width ``moe_ffn_hidden_size`` (ints or arrays)."""
    return model.expert_ffn % etp == 0


def expert_groups_fit(tp: Any, cp: Any, dp: Any, ep: Any, etp: Any) -> Any:
    """``etp·ep`` divides ``tp·cp·dp``, the ranks of a pipeline stage (ints or arrays):
    Megatron-Core's ``parallel_state`` cuts the expert groups from them."""
    return (tp * cp * dp) % (etp * ep) == 0


def expert_plan_ok(model: ModelSpec, tp: Any, cp: Any, dp: Any, ep: Any, etp: Any) -> Any:
    """The expert rules of ``check_plan_against_model`` and ``check_expert_plan`` over arrays
    (resolved ``etp``; the search's ``ep`` rule): a dense model has ``ep = 1`` and ``etp = tp``;
    an MoE model has ``ep | num_experts``, ``etp | moe_ffn_hidden_size`` and
    ``etp·ep | tp·cp·dp``. The checks above read the same two helpers, so a plan this keeps
    passes them and one it drops fails them (tests/test_search_etp.py)."""
    if not model.is_moe:
        return (ep == 1) & (etp == tp)
    return ((model.num_experts % ep == 0) & expert_width_fits(model, etp)
            & expert_groups_fit(tp, cp, dp, ep, etp))


def _check_recompute_against_model(model: ModelSpec, plan: Plan,
                                   layout: PipelineLayout) -> None:
    """``recompute_layers`` at most the layers of a model chunk (Megatron: between 1 and
    ``num_layers_per_pipeline_rank``; the largest chunk of the ``layout`` where chunks
    differ); each ``recompute_modules`` entry present in the model (MoE modules need an MoE
    model, shared experts need them, ``mla_up_proj`` needs MLA)."""
    n = plan.recompute_layers
    if n is not None:
        lpc = max(layout.layers(r, c) for r, c in layout.positions)
        if n > lpc:
            raise SpecError("recompute_layers", n, f"must be at most the {lpc} layers of the "
                            f"largest model chunk (layout {layout.text}, pp={plan.pp}, "
                            f"vpp={plan.vpp})")
        if plan.offload_modules and plan.recompute_method != "uniform" and n < lpc:
            # Megatron-Core's block method runs the layers past the first N without a
            # checkpoint (megatron/core/recompute.py L167-181 at d98e8a64dd), so their
            # offload groups copy as without recomputation; paraplan prices the groups of
            # a whole-layer recomputation only (none: docs/calibration.md §5.217)
            raise SpecError("offload_modules", "+".join(plan.offload_modules),
                            f"not modelled with block recompute_layers={n} below the {lpc} "
                            "layers of a model chunk: the layers past the first "
                            f"{n} run without a checkpoint and offload their modules, which "
                            "paraplan does not price (recompute every layer, or none)")
    check_modules_against_model(model, plan.recompute_modules or ())


def check_modules_against_model(model: ModelSpec, modules: Iterable[str]) -> None:
    """Each selective ``recompute_modules`` entry present in ``model`` (MoE modules need an
    MoE model, shared experts need them, ``mla_up_proj`` needs MLA, ``mlp`` dense MLP layers);
    ``SpecError`` naming the module otherwise (read by ``make_job`` and a search's ``--fix``)."""
    need = {"moe_act": (model.is_moe, "an MoE model"), "moe": (model.is_moe, "an MoE model"),
            "shared_experts": (model.num_shared_experts > 0, "shared experts"),
            "mla_up_proj": (model.is_mla or model.is_dsv4, "multi-latent attention"),
            "mlp": (model.num_moe_layers < model.num_layers, "dense MLP layers")}
    for mod in modules:
        ok, what = need.get(mod, (True, ""))
        if not ok:
            raise SpecError("recompute_modules", mod, f"needs {what}; {model.name} has none")


def replica_groups(cluster: Cluster, plan: Plan) -> list[int]:
    """The node group of each data-parallel replica (``plan.dp`` resolved): replica ``d`` is
    the ranks whose data-parallel coordinate is ``d`` (Megatron's order: rank = tp_i +
    tp·(cp_i + cp·(d + dp·stage))). ``SpecError`` where a replica spans node groups."""
    tp, cp, dp, pp = plan.tp, plan.cp, plan.dp, plan.pp
    ends, total = [], 0
    for g in cluster.groups:
        total += g.num_nodes * cluster.gpus_per_node
        ends.append(total)
    out = []
    for d in range(dp):
        seen = set()
        for s in range(pp):
            lo = tp * cp * (d + dp * s)
            for r in (lo, lo + tp * cp - 1):
                seen.add(next(i for i, e in enumerate(ends) if r < e))
        if len(seen) != 1:
            text = "/".join(map(str, plan.group_microbatches or ()))
            raise SpecError("group_microbatches", text, f"needs every data-parallel replica on "
                            f"one node group; replica {d} spans groups {sorted(seen)} "
                            f"(tp={tp}, cp={cp}, dp={dp}, pp={pp})")
        out.append(seen.pop())
    return out


def _check_group_microbatches(cluster: Cluster, plan: Plan) -> list[int]:
    """The rules of ``group_microbatches`` against the cluster and the batch; returns the
    counts in use."""
    gm, text = plan.group_microbatches, "/".join(map(str, plan.group_microbatches))
    if len(gm) != len(cluster.groups):
        raise SpecError("group_microbatches", text, f"must give one count per node group "
                        f"({len(cluster.groups)}), not {len(gm)}")
    groups = replica_groups(cluster, plan)
    total = sum(gm[g] for g in groups) * plan.mbs
    if total != plan.gbs:
        raise SpecError("group_microbatches", text, f"must add up to the global batch: "
                        f"sum over the {plan.dp} replicas of micro-batches x mbs={plan.mbs} is "
                        f"{total}, not gbs={plan.gbs}")
    return sorted({gm[g] for g in groups})
