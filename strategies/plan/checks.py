"""The rules a ``Plan``'s fields obey, each a function its ``__post_init__`` calls: the MoE
factors, drop-and-pad, hybrid sharding (``expert_shard_whole``), uneven stages, the pipeline
layout switches, per-group micro-batches; ``int_limit``, the sanity bound of each integer
field. SpecError naming the field, the value and the rule. The recomputation fields' rule:
``strategies.plan.recompute_fields``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from strategies.errors import SpecError
from strategies.plan.choices import DISPATCHERS, MAX_MOE_FACTOR
from strategies.schedules import get_schedule
from topologies.limits import (MAX_GBS, MAX_GPUS, MAX_LAYERS, MAX_MBS, MAX_VPP, check_bool,
                               check_int, check_number)

if TYPE_CHECKING:
    from strategies.plan.spec import Plan


def check_moe_factors(p: Plan) -> None:
    """``moe_imbalance`` >= 1 (the hottest rank's load over the mean cannot be below the
    mean) and ``moe_capacity_factor`` > 0 (an expert that takes no tokens drops them all)."""
    if p.moe_imbalance is not None:
        v = p.moe_imbalance
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 1.0:
            raise SpecError("moe_imbalance", v, "must be a number >= 1 (the hottest expert-"
                            "parallel rank's routed tokens over the mean; 1 = balanced)")
        check_number("moe_imbalance", v, 1.0, MAX_MOE_FACTOR)
    if p.moe_capacity_factor is not None:
        v = p.moe_capacity_factor
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0.0:
            raise SpecError("moe_capacity_factor", v, "must be a number > 0 (the tokens an "
                            "expert takes over its mean share; beyond it tokens are dropped)")
        check_number("moe_capacity_factor", v, 0.0, MAX_MOE_FACTOR, lo_open=True)


def check_pad_to_capacity(p: Plan) -> None:
    """``moe_pad_to_capacity`` (drop-and-pad) needs ``moe_capacity_factor`` (the capacity it
    pads to) and is not run by DeepEP: Megatron-Core ``TransformerConfig.__post_init__``
    (``core_v0.17.0``) raises ``ValueError`` for both ("moe_expert_capacity_factor must be set
    to use moe_pad_expert_input_to_capacity"; "Flex token dispatcher with deepep backend does
    not support moe_pad_expert_input_to_capacity")."""
    if not p.moe_pad_to_capacity:
        return
    if p.moe_capacity_factor is None:
        raise SpecError("moe_pad_to_capacity", True, "needs moe_capacity_factor (the capacity "
                        "every expert's input is padded to; Megatron-Core refuses "
                        "--moe-pad-expert-input-to-capacity without "
                        "--moe-expert-capacity-factor)")
    if p.moe_dispatcher == "deepep":       # no stack named: Megatron-Core's dispatchers
        raise SpecError("moe_pad_to_capacity", True,
                        pad_deepep_rule(DISPATCHERS, "Megatron-Core"))


#: drop-and-pad's refusal under DeepEP; ``pad_deepep_rule`` adds the dispatchers to use
PAD_DEEPEP = ("is not run by moe_dispatcher=deepep (Megatron-Core: the flex dispatcher's "
              "DeepEP backend does not support moe_pad_expert_input_to_capacity)")


def pad_deepep_rule(dispatchers: tuple[str, ...], stack: str) -> str:
    """The refusal of drop-and-pad under DeepEP with advice true for ``stack``, which runs
    ``dispatchers`` (``FrameworkProfile.moe_dispatchers``): the others than deepep."""
    others = [d for d in dispatchers if d != "deepep"]
    return (f"{PAD_DEEPEP}; {stack} runs the token dispatchers {', '.join(dispatchers)}: use "
            f"moe_dispatcher={' or '.join(others)}")


def expert_shard_whole(tp: Any, cp: Any, dp_shard: Any, ep: Any, etp: Any) -> Any:
    """True where hybrid sharding's routed-expert shard group is whole: ``etp·ep`` divides
    the ``tp·cp·dp_shard`` ranks of one replica in a pipeline stage, whose expert grid
    (``placement.expert_dp_group`` over ``dp_shard``) holds the experts' ZeRO shards
    (Megatron-Core ``parallel_state``: ``_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP`` of
    ``expert_data_parallel_size / num_distributed_optimizer_instances`` ranks, asserted
    whole; torchtitan ``parallel_dims``: ``efsdp = dp_shard·cp·tp/ep``). Vectorised."""
    span = np.asarray(tp) * np.asarray(cp) * np.asarray(dp_shard)
    return (span % (np.asarray(etp) * np.asarray(ep)) == 0)[()]


def check_dp_shard(p: Plan) -> None:
    """Hybrid sharding (``dp_shard``): the ZeRO states sharded over ``dp_shard·cp`` ranks
    (torchtitan's ``dp_shard_cp`` mesh), replicated across ``dp/dp_shard`` groups, so
    ``dp_shard`` divides ``dp``, needs ``zero >= 1`` (zero 0 shards nothing) and at least two
    ranks to shard over (``dp_shard·cp >= 2``); with routed experts (``ep > 1``) their
    shard group, one instance's expert grid, must be whole (``expert_shard_whole``);
    per-group micro-batch counts are not modelled with it. ``dp_shard = dp`` is the plan
    without it (stored as None, so the two spell one plan)."""
    s = p.dp_shard
    if s is None:
        return
    if p.dp is not None:
        if p.dp % s:
            raise SpecError("dp_shard", s, f"must divide dp={p.dp} (the shards' groups are "
                            "cut from the data-parallel ranks)")
        if s == p.dp:
            object.__setattr__(p, "dp_shard", None)
            return
    if p.zero < 1:
        raise SpecError("dp_shard", s, "needs zero >= 1 (hybrid sharding shards the "
                        "optimizer state; with zero=0 every rank holds all of it)")
    if s * p.cp < 2:
        raise SpecError("dp_shard", s, f"dp_shard*cp = {s}*{p.cp} must be >= 2 (a shard "
                        "group of one rank shards nothing; use zero=0)")
    if p.ep > 1 and not expert_shard_whole(p.tp, p.cp, s, p.ep, p.expert_tp):
        raise SpecError("dp_shard", s, f"with expert parallelism etp*ep = {p.expert_tp}*{p.ep} "
                        f"must divide tp*cp*dp_shard = {p.tp}*{p.cp}*{s} (the routed experts' "
                        "ZeRO shard group is the expert grid of one replica's ranks: "
                        "Megatron-Core asserts expert_data_parallel_size % "
                        "num_distributed_optimizer_instances == 0, torchtitan's efsdp mesh "
                        "is dp_shard*cp*tp/ep)")
    if p.group_microbatches is not None:
        raise SpecError("dp_shard", s, "not modelled with group_microbatches")


def check_layers_per_stage(p: Plan) -> None:
    """Uneven stages: one positive layer count per pipeline stage, one chunk per rank (the
    sum against the model's layers is checked with the model, ``strategies.job``)."""
    v = p.layers_per_stage
    if not isinstance(v, tuple) or not v:
        raise SpecError("layers_per_stage", v, "must be a list of layer counts, one per stage")
    for x in v:
        check_int("layers_per_stage", x, 1, MAX_LAYERS)
    if len(v) != p.pp:
        raise SpecError("layers_per_stage", "/".join(map(str, v)),
                        f"must give one layer count per pipeline stage (pp={p.pp}), not {len(v)}")
    if p.vpp != 1:
        raise SpecError("layers_per_stage", "/".join(map(str, v)),
                        f"uneven stages take one model chunk per rank (vpp=1, not {p.vpp})")
    if get_schedule(p.schedule).mirrored:
        raise SpecError("layers_per_stage", "/".join(map(str, v)),
                        f"schedule={p.schedule} holds stages r and pp-1-r on rank r, so "
                        "per-rank GPU sizing does not apply; give the per-stage layers as "
                        "layout= (e.g. 'Et*3|(t*4|)*14,t*2mL', docs/layout.md)")


def check_layout_fields(p: Plan) -> None:
    """The pipeline layout switches: one way of giving the layout at a time (Megatron's
    rules), the layout string parsed with ``pp·vpp`` non-empty stages
    (``strategies.layout.build.plan_layout_stages``); the rules against the model's layers
    are checked where the job is built (``strategies.layout.build_layout``)."""
    from strategies.layout.build import plan_layout_stages
    for f in ("first_stage_layers", "last_stage_layers"):
        if getattr(p, f) is not None:
            check_int(f, getattr(p, f), 1, MAX_LAYERS)
    for f in ("account_embedding", "account_loss"):
        check_bool(f, getattr(p, f))
    fl = p.first_stage_layers is not None or p.last_stage_layers is not None
    acc = p.account_embedding or p.account_loss
    given = [name for name, on in (("layout", p.layout is not None),
                                   ("layers_per_stage", p.layers_per_stage is not None),
                                   ("first_stage_layers/last_stage_layers", fl),
                                   ("account_embedding/account_loss", acc)) if on]
    def named(group: str) -> str:            # the field of a group that is set
        return next(f for f in group.split("/") if getattr(p, f) not in (None, False))

    if len(given) > 1:
        raise SpecError(named(given[1]), getattr(p, named(given[1])),
                        f"cannot be combined with {given[0]} (give the pipeline layout one "
                        "way; Megatron-LM refuses the same combinations)")
    if p.layout is not None:
        if not isinstance(p.layout, str):
            raise SpecError("layout", p.layout, "must be a Megatron pipeline layout string")
        plan_layout_stages(p)
    if (fl or acc) and p.pp == 1:
        raise SpecError(named(given[0]), getattr(p, named(given[0])),
                        "needs pipeline parallelism (pp > 1)")


def check_group_microbatches(p: Plan) -> None:
    """Micro-batches per pipeline for the data-parallel replicas of each node group: positive
    counts; gradients reduced once per step (ZeRO <= 1) and no expert parallelism, whose
    per-micro-batch collectives would pair replicas that run different counts (the sum
    against the batch and the groups is checked with the cluster, ``strategies.job``)."""
    v = p.group_microbatches
    if not isinstance(v, tuple) or not v:
        raise SpecError("group_microbatches", v, "must be a list of micro-batch counts, one "
                        "per node group")
    for x in v:
        check_int("group_microbatches", x, 1, MAX_GBS)
    text = "/".join(map(str, v))
    if p.zero >= 2:
        raise SpecError("group_microbatches", text, f"needs zero <= 1 (zero={p.zero} reduces "
                        "gradients every micro-batch, pairing replicas that run different counts)")
    if p.ep > 1:
        raise SpecError("group_microbatches", text, f"needs ep=1 (ep={p.ep}: the all-to-all of "
                        "every micro-batch pairs replicas that run different counts)")


_LIMITS = {"mbs": MAX_MBS, "gbs": MAX_GBS, "microbatch_group_size": MAX_GBS, "vpp": MAX_VPP,
           "flushes": MAX_GBS}


def int_limit(name: str) -> int:
    """The sanity upper limit of integer plan field ``name`` (``MAX_GPUS`` unless listed)."""
    return _LIMITS.get(name, MAX_GPUS)
