"""``Job``: a model, a cluster and a resolved plan, checked against each other."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig, get_system
from strategies.errors import SpecError
from strategies.framework import DEFAULT as DEFAULT_FRAMEWORK
from strategies.framework import FrameworkProfile, check_plan, get_profile
from strategies.model import ModelSpec
from strategies.plan import Plan
from strategies.schedules import get_schedule
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

    @property
    def named_framework(self) -> FrameworkProfile | None:
        """The stack the user named (its limits apply to derived jobs), or None."""
        return self.framework if self.framework_named else None

    @property
    def seq_len(self) -> int:
        return self.model.seq_length

    @property
    def num_microbatches(self) -> int:
        p = self.plan
        return p.gbs // (p.mbs * p.dp)

    @property
    def tokens_per_step(self) -> int:
        return self.plan.gbs * self.seq_len

    def to_dict(self) -> dict:
        """The inputs as JSON; ``system`` only when it is not ``DEFAULT_SYSTEM``."""
        d = {"model": self.model.to_dict(), "cluster": self.cluster.to_dict(),
             "plan": self.plan.to_dict(), "dtype": self.dtype, "seq_len": self.seq_len,
             "num_microbatches": self.num_microbatches, "framework": self.framework.name}
        if self.system != DEFAULT_SYSTEM:
            d["system"] = asdict(self.system)
        return d


def make_job(model: ModelSpec, cluster: Cluster, plan: Plan, seq_len: int | None = None,
             global_batch: int | None = None, dtype: str = "bf16",
             framework: FrameworkProfile | str | None = None,
             system: SystemConfig | None = None) -> Job:
    """Resolve ``dp`` and ``gbs`` and check every cross rule; raises SpecError naming the rule.
    ``framework``: a profile or its name; a named stack refuses the plan features it lacks
    (``strategies.framework.check_plan``). ``None``: no stack named, Megatron-Core's costs and
    any plan (the textbook schedules, GPipe included, stay open to studies). ``system``: the
    policy constants (default ``DEFAULT_SYSTEM``)."""
    fw = get_profile(framework)
    sy = get_system(system)
    if framework is not None and plan.schedule != fw.schedule_for(plan.schedule):
        plan = replace(plan, schedule=fw.schedule_for(plan.schedule))
    if dtype not in DTYPES:
        raise SpecError("dtype", dtype, f"must be one of {', '.join(DTYPES)}")
    for g in cluster.groups:  # a precision the chip lacks (nvfp4 on H100) is refused here
        g.gpu.rate_key(dtype)
    if seq_len is not None:
        model = model.with_seq_length(seq_len)
    n = cluster.num_gpus
    mp = plan.tp * plan.pp * plan.cp
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
    check_plan_against_model(model, plan)
    if gbs % (plan.mbs * dp):
        raise SpecError("gbs", gbs, f"must be a multiple of mbs*dp = {plan.mbs}*{dp} = {plan.mbs * dp}")
    get_schedule(plan.schedule).check(plan.pp, gbs // (plan.mbs * dp), plan.vpp,
                                      plan.microbatch_group_size)
    if framework is not None:
        check_plan(fw, plan)
    return Job(model, cluster, plan, dtype, fw, framework is not None, sy)


def check_plan_against_model(model: ModelSpec, plan: Plan) -> None:
    """Divisibility rules between a plan and a model."""
    a, kv = model.num_attention_heads, model.kv_heads
    if a % plan.tp:
        raise SpecError("tp", plan.tp, f"must divide num_attention_heads={a}")
    if kv % plan.tp:
        raise SpecError("tp", plan.tp, f"must divide num_query_groups (KV heads)={kv}")
    chunks = plan.pp * plan.vpp
    if model.num_layers % chunks:
        what = f"pp*vpp = {plan.pp}*{plan.vpp} = {chunks}" if plan.vpp > 1 else f"pp={plan.pp}"
        raise SpecError("num_layers", model.num_layers, f"must be divisible by {what}")
    s = model.seq_length
    if plan.cp > 1 and s % (2 * plan.cp):
        raise SpecError("cp", plan.cp, f"2*cp must divide seq_len={s} (load-balanced ring attention)")
    if plan.sp and s % (plan.tp * plan.cp):
        raise SpecError("sp", True, f"sequence parallelism needs tp*cp={plan.tp * plan.cp} "
                        f"to divide seq_len={s}")
    if plan.ep > 1:
        if not model.is_moe:
            raise SpecError("ep", plan.ep, f"expert parallelism needs an MoE model; {model.name} is dense")
        if model.num_experts % plan.ep:
            raise SpecError("ep", plan.ep, f"must divide num_experts={model.num_experts}")
        if plan.dp is not None and (plan.dp * plan.cp) % plan.ep:
            raise SpecError("ep", plan.ep, f"must divide dp*cp={plan.dp * plan.cp} "
                            "(experts are sharded across data-parallel ranks)")
