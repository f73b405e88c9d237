"""The plan fields a software stack fills where a plan names none, beyond its switches
(``FrameworkProfile.plan_defaults``): its ZeRO stage, its sequence parallelism, its pipeline
schedule, its activation recomputation (``StackFieldDefaults``, ``stack_fills``), each stated
with its source.

A plan that names no ``zero`` gets ``Plan``'s 0 (plain data parallelism) with no stack named;
with one named it gets what that stack runs when its configuration says nothing:

* torchtitan (b5bcd76c6, 2026-08-21): FSDP2 over every data-parallel rank
  (``torchtitan/config/configs.py:133`` ``data_parallel_shard_degree: int = -1``, "leftover
  ranks"), resharded after forward unless pipelining (``configs.py:145``
  ``fsdp_reshard_after_forward = "default"``; ``torchtitan/distributed/fsdp.py:128-131``:
  ``"default"`` -> ``not pp_enabled``): ZeRO-3 without pipelining, ZeRO-2 with it; sequence
  parallelism with tensor parallelism (``configs.py:169`` ``enable_sequence_parallel: bool =
  True``; v0.2.2's ``apply_tp`` always sharded the norms ``SequenceParallel``). With no data
  parallelism (``dp·cp = 1``) FSDP is not applied (``fsdp_enabled``: ``dp_shard > 1`` or
  ``cp > 1``): the generic 0 stands.
* NeMo AutoModel: ``fully_shard(..., reshard_after_forward=not pp_enabled)`` always
  (``FrameworkProfile.zero_follows_pp``, its source there).
* MosaicML llm-foundry on Composer (``pytorch-eager``): FSDP ``FULL_SHARD`` (llm-foundry
  8c8dd48f7 ``scripts/train/yamls/pretrain/mpt-7b.yaml:92`` ``sharding_strategy:
  FULL_SHARD``, every MPT pretraining YAML): ZeRO-3.
* MaxText (``jax-xla``, e591f30cb): the ``fsdp`` mesh axis takes the devices
  (``src/maxtext/configs/base.yml:674`` ``ici_fsdp_parallelism: -1``): ZeRO-3; with
  pipelining the stack's rule (``zero_with_pp`` 0) holds.
* Megatron-DeepSpeed: ZeRO stage 1 (bigscience-workshop/Megatron-DeepSpeed 8387ae17c
  ``README.md:305`` ``ZERO_STAGE=1`` in its GPT pretraining example; BLOOM's bf16 runs set
  ``ZERO_STAGE=0`` because DeepSpeed's BF16_Optimizer "implements its own zero stage 1
  equivalent", ``tr11-176B-ml.slurm``, docs/calibration.md §3.12: ZeRO-1 in the model).
* NeMo 2 recipes: Megatron-Core's distributed optimizer, ZeRO-1 (NVIDIA/NeMo 06cca550a
  ``nemo/collections/llm/recipes/optim/adam.py:44``
  ``distributed_fused_adam_with_cosine_annealing``: ``use_distributed_optimizer=True``).
* HAI-LLM: "ZeRO-1 data parallelism" (DeepSeek-V3 report §3.2; the code is not public).
* Megatron-Core and Megatron-LM 2021: 0 (``--use-distributed-optimizer`` is opt-in).

The token dispatcher (``moe_dispatcher``), where the plan names none, expert parallelism
runs (``ep > 1``) and the plan does not pad to capacity (DeepEP does not): HAI-LLM's
node-deduplicated dispatch, ``deepep`` (DeepSeek-V3 report §3.2.2: a token goes to at most 4
nodes, sent once per destination node over IB and forwarded over NVLink to its GPUs there;
the design DeepSeek released as DeepEP). Every other stack:
``Plan``'s ``alltoall`` (Megatron-Core's ``--moe-token-dispatcher-type`` default; the flex
dispatcher is opt-in).

The recomputation (``recompute``), where the plan names none:

* torchtitan (b5bcd76c6): per-op selective activation checkpointing, ``recompute=op``
  (``torchtitan/trainer.py:108-110`` ``activation_checkpoint`` ``default_factory=
  SelectiveAC.Config``; ``torchtitan/distributed/activation_checkpoint.py:185`` ``SelectiveAC``
  "Per-op selective activation checkpointing", every second matmul recomputed). That commit's
  ``SelectiveAC`` has no every-N-th-layer option (older torchtitan's
  ``selective_ac_option`` digit), so no ``recompute_layers`` is filled.
* MaxText (e591f30cb): ``src/maxtext/configs/base.yml:358`` ``remat_policy: 'full'``:
  ``recompute=full``.
* Megatron-DeepSpeed (8387ae17c): its GPT pretraining example passes
  ``--checkpoint-activations`` (``README.md:289``), every layer: ``recompute=full``.
* llm-foundry (``pytorch-eager``): none. Its MPT pretraining YAMLs split by size (8c8dd48f7
  ``scripts/train/yamls/pretrain/mpt-{125m,350m,760m,1b}.yaml:94``
  ``activation_checkpointing: false``, ``mpt-{3b,7b,13b,30b,70b}.yaml:94`` ``true``): no one
  stack default.
* NeMo, Megatron-Core, Megatron-LM 2021, HAI-LLM, NeMo AutoModel: none (recomputation is
  opt-in: ``--recompute-granularity`` unset). ``FrameworkProfile.default_recompute`` is
  another thing: what the reference reader assumes for a published run that states none.

The schedule: a pipelined plan that names none takes ``DEFAULT_SCHEDULE`` (1F1B) where the
stack runs it, else the first schedule the stack runs (MaxText: ``gpipe``).

A field the plan gives is never replaced: the stack's rules (``strategies.stacks.rules``)
refuse what it cannot run, as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from strategies.errors import SpecError

if TYPE_CHECKING:
    from strategies.plan import Plan
    from strategies.stacks.profile import FrameworkProfile


@dataclass(frozen=True)
class StackFieldDefaults:
    """The plan fields a stack fixes where a plan names none (``FrameworkProfile.
    field_defaults``): ``zero`` without pipelining and ``zero_with_pp`` with it, applied
    where data parallelism runs (``dp·cp > 1``, or always where the stack has no ZeRO-0);
    ``sp_with_tp``: sequence parallelism on with ``tp > 1``; ``recompute``: the activation
    recomputation (``Plan.recompute``, whole: no ``recompute_layers``) where the plan names
    none; ``moe_dispatcher``: the token dispatcher (``plan.DISPATCHERS``) where expert
    parallelism runs (``ep > 1``) and the plan names none; ``*_source``: where each comes from
    (the stack's code, file:line)."""

    zero: int = 0
    zero_with_pp: int = 0
    zero_source: str = ""
    sp_with_tp: bool = False
    sp_source: str = ""
    recompute: str = "none"
    recompute_source: str = ""
    moe_dispatcher: str = "alltoall"
    moe_dispatcher_source: str = ""


@dataclass(frozen=True)
class PlanFill:
    """One plan field a named stack filled: ``field``, ``value`` and ``why`` (the stack and
    its source), as reports state it (``Job.plan_defaults``)."""

    field: str
    value: Any
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "value": self.value, "why": self.why}

    def setting(self) -> str:
        """``field=value`` as a plan writes it."""
        v = str(self.value).lower() if isinstance(self.value, bool) else self.value
        return f"{self.field}={v}"

    def text(self) -> str:
        return f"{self.setting()}: {self.why}"


def check_field_defaults(fw: "FrameworkProfile") -> None:
    """Refuse defaults the stack's own rules would refuse: SpecError naming
    ``framework.field_defaults``."""
    d = fw.field_defaults
    for name, stage in (("zero", d.zero), ("zero_with_pp", d.zero_with_pp)):
        if stage not in fw.zero_stages:
            raise SpecError(f"framework.field_defaults.{name}", stage,
                            f"must be one of the stack's ZeRO stages {fw.zero_stages}")
    if d.zero_with_pp > min(fw.zero_with_pp, 2):       # Plan refuses ZeRO-3 with pp
        raise SpecError("framework.field_defaults.zero_with_pp", d.zero_with_pp,
                        f"must be <= the stack's zero_with_pp ({fw.zero_with_pp}) and <= 2")
    if d.recompute not in fw.recompute:
        raise SpecError("framework.field_defaults.recompute", d.recompute,
                        f"must be one of the stack's recomputations {fw.recompute}")
    if d.moe_dispatcher not in fw.moe_dispatchers:
        raise SpecError("framework.field_defaults.moe_dispatcher", d.moe_dispatcher,
                        f"must be one of the stack's token dispatchers {fw.moe_dispatchers}")
    if d.sp_with_tp and not fw.sequence_parallel:
        raise SpecError("framework.field_defaults.sp_with_tp", True,
                        "the stack has no sequence parallelism")


def given_fields(raw: Mapping[Any, Any]) -> set[str]:
    """The plan fields a raw plan mapping names (Megatron's long names read as ours)."""
    from strategies.plan.parse import ALIAS
    keys = {str(k).strip().lower() for k in raw}
    return {ALIAS.get(k, k) for k in keys}


def stack_fills(fw: "FrameworkProfile", given: set[str], plan: "Plan",
                gpus: int | None) -> list[PlanFill]:
    """The fields stack ``fw`` fills in ``plan`` (parsed with the generic defaults) whose
    names are not in ``given``; ``gpus``: the cluster's GPU count, which resolves an unset
    ``dp`` (None: unknown, read as data-parallel)."""
    who = fw.name
    d = fw.field_defaults
    out: list[PlanFill] = []
    pipelined = plan.pp > 1
    if "zero" not in given:
        dp = plan.dp
        if dp is None and gpus is not None and gpus % plan.model_parallel == 0:
            dp = gpus // plan.model_parallel
        sharded = dp is None or dp * plan.cp > 1 or 0 not in fw.zero_stages
        stage = d.zero_with_pp if pipelined else d.zero
        if sharded and stage != plan.zero:
            qual = ("" if d.zero == d.zero_with_pp or fw.max_pp == 1 else
                    " with pipelining" if pipelined else " without pipelining")
            out.append(PlanFill("zero", stage, f"{who}'s default{qual}: {d.zero_source}"))
    if "sp" not in given and d.sp_with_tp and plan.tp > 1 and not plan.sp:
        out.append(PlanFill("sp", True, f"{who}'s default with tp > 1: {d.sp_source}"))
    if "recompute" not in given and d.recompute != plan.recompute:
        out.append(PlanFill("recompute", d.recompute, f"{who}'s default: {d.recompute_source}"))
    # DeepEP does not pad to capacity (plan.checks): a plan that pads keeps its dispatcher
    if "moe_dispatcher" not in given and plan.ep > 1 and d.moe_dispatcher != plan.moe_dispatcher \
            and not (plan.moe_pad_to_capacity and d.moe_dispatcher == "deepep"):
        out.append(PlanFill("moe_dispatcher", d.moe_dispatcher,
                            f"{who}'s default with ep > 1: {d.moe_dispatcher_source}"))
    if "schedule" not in given and pipelined \
            and fw.runnable_schedule(plan.schedule) != plan.schedule:
        out.append(PlanFill("schedule", fw.runnable_schedule(plan.schedule),
                            f"{who} runs {', '.join(fw.schedules)} only, not the generic "
                            f"default {plan.schedule}"))
    return out


def restate_for_stack(e: SpecError, fw: "FrameworkProfile") -> SpecError:
    """``e`` with the advice of a plan rule that names dispatchers made true for stack ``fw``
    (drop-and-pad under DeepEP, ``plan.checks.pad_deepep_rule``); other errors as they are."""
    from strategies.plan.checks import PAD_DEEPEP, pad_deepep_rule
    if not e.rule.startswith(PAD_DEEPEP):
        return e
    return SpecError(e.field, e.value, pad_deepep_rule(fw.moe_dispatchers, fw.name))


def plan_with_stack_defaults(raw: Mapping[Any, Any], fw: "FrameworkProfile",
                             gpus: int | None = None) -> tuple[Any, tuple[PlanFill, ...]]:
    """``(Plan, fills)``: the plan of ``raw`` (a plan mapping, ``strategies.plan.
    plan_mapping``) with stack ``fw``'s switches (``plan_defaults``) and the fields it fixes
    (``stack_fills``) where ``raw`` names none. The input is checked as without a stack
    first; an error the filled values cause names them."""
    from strategies.plan import plan_from_mapping
    switches = fw.plan_defaults()
    try:
        plan = plan_from_mapping(raw, switches)
    except SpecError as e:
        raise restate_for_stack(e, fw) from None
    fills = stack_fills(fw, given_fields(raw), plan, gpus)
    if not fills:
        return plan, ()
    try:
        filled = plan_from_mapping({**raw, **{f.field: f.value for f in fills}}, switches)
    except SpecError as e:
        from strategies.stacks.rules import plan_violations
        given = given_fields(raw)
        for field, value, rule in plan_violations(fw, plan):   # the stack refuses a given field
            if field in given:
                raise SpecError(field, value, rule + " (choose another --framework or change "
                                "the plan)") from None
        stated = ", ".join(f.setting() for f in fills)
        raise SpecError(e.field, e.value, f"{e.rule} (with {stated}: {fw.name}'s defaults "
                        "where the plan names none; give them to choose otherwise)") from None
    return filled, tuple(fills)


def stack_default_refusal(fw: "FrameworkProfile", plan: "Plan", err: SpecError) -> SpecError:
    """``err`` (a model rule that refused ``plan``) with the named stack ``fw`` said: where
    the refused field holds the value ``fw`` gives a plan that names none (its ``recompute``
    fill, its ``flash_attn`` switch), the rule adds that it is the stack's default and what
    to give instead (another value the stack runs, or, where it runs none, another
    ``--framework``). A plan that named nothing is then not told only of a value it never
    wrote. Other errors come back unchanged."""
    field = err.field.removeprefix("plan.")
    if field == "recompute" and plan.recompute == fw.field_defaults.recompute:
        value, others = plan.recompute, [r for r in fw.recompute if r != plan.recompute]
    elif field == "flash_attn" and plan.flash_attn == fw.default_flash_attn:
        value = str(plan.flash_attn).lower()
        others = [str(not plan.flash_attn).lower()] if fw.flash_attn or plan.flash_attn else []
    else:
        return err
    instead = (f"give {' or '.join(f'{field}={o}' for o in others)}" if others else
               f"{fw.name} runs no other {field}: choose another --framework")
    return SpecError(err.field, err.value, f"{err.rule} ({field}={value} is {fw.name}'s "
                     f"default where a plan names none; {instead})")

