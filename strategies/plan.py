"""``Plan``: how a job is split (tp, pp, dp, cp, ep, etp, sp, zero, schedule, recompute, mbs,
gbs), how its context parallelism exchanges K/V (``cp_comm``) and how its mixture-of-experts
layers route (``moe_imbalance``, ``moe_capacity_factor``, ``moe_pad_to_capacity``).

Parsed from ``key=value`` strings or YAML; every value checked where it is read, and the
cross-checks against a model and a cluster live in ``strategies.job``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

import numpy as np

from strategies.cost.recompute import DEFAULT_MODULES, METHODS, MODULES
from strategies.errors import SpecError
from strategies.schedules import DEFAULT_SCHEDULE, get_schedule
from topologies.limits import (MAX_GBS, MAX_GPUS, MAX_LAYERS, MAX_MBS, MAX_VPP, check_bool,
                               check_int, check_number,
                               parse_int_text)

RECOMPUTE = ("none", "selective", "full", "op")
#: token dispatchers (plan ``moe_dispatcher``): Megatron-Core's ``alltoall`` (one copy per
#: token and chosen expert) and its ``flex`` dispatcher's backends DeepEP and HybridEP (one
#: copy per destination rank in the node; between nodes one per destination node over RDMA,
#: fanned out over NVLink there: ``strategies.cost.ep_dispatch.ep_dedup``). Codes: their index.
DISPATCHERS = ("alltoall", "deepep", "hybridep")
#: how the run's router spreads a token's ``k`` experts (plan ``moe_routing``; a fact of the
#: run, not of the stack): ``random``, ``k`` distinct experts drawn uniformly (a trained
#: router, Megatron-Core's ``moe_router_force_load_balancing``), or ``contiguous``, token ``t``
#: of a micro-batch takes experts ``t·k ... t·k + k - 1`` (mod ``E``), NeMo AutoModel's
#: benchmark ``FakeBalancedGate`` (``strategies.cost.ep_dispatch.contiguous_hit_probability``).
#: Codes: their index.
ROUTINGS = ("random", "contiguous")
#: how context parallelism exchanges K/V (plan ``cp_comm``; Megatron-Core's ``cp_comm_type``,
#: ``TransformerConfig``): ``p2p``, Transformer Engine's ring of K/V sends overlapped with the
#: attention (``AttnFuncWithCPAndKVP2P``), or ``all_gather``, K/V all-gathered before the
#: attention and dK/dV reduce-scattered after it, exposed (``AttnFuncWithCPAndKVAllGather``;
#: Llama 3's CP, Dubey et al. 2024 §3.3.2). Megatron-Core's ``a2a`` and ``a2a+p2p`` are not
#: modelled. Codes in the stack rules: 0 the stack's own, then 1 + the index. The
#: ``FrameworkProfile.cp_impl`` each runs as: ``CP_IMPL_OF``
CP_COMMS = ("p2p", "all_gather")
CP_IMPL_OF = {"p2p": "ring", "all_gather": "allgather"}
ALIAS = {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
          "data_parallel_size": "dp", "context_parallel_size": "cp",
          "expert_model_parallel_size": "ep", "micro_batch_size": "mbs",
          "global_batch_size": "gbs", "virtual_pipeline_size": "vpp",
          "sequence_parallel": "sp", "zero_stage": "zero",
          # torchtitan's FSDP degree under HSDP (docs/cli.md "Hybrid sharding")
          "data_parallel_shard_degree": "dp_shard",
          "expert_tensor_parallel_size": "etp",
          "moe_expert_capacity_factor": "moe_capacity_factor",
          "moe_pad_expert_input_to_capacity": "moe_pad_to_capacity",
          "cp_comm_type": "cp_comm",
          "overlap_moe_expert_parallel_comm": "ep_overlap",
          "delay_wgrad_compute": "delay_wgrad",
          # Megatron-LM's / NeMo's pipeline layout switches (docs/layout.md)
          "pipeline_layout": "layout", "pipeline_model_parallel_layout": "layout",
          "decoder_first_pipeline_num_layers": "first_stage_layers",
          "num_layers_in_first_pipeline_stage": "first_stage_layers",
          "decoder_last_pipeline_num_layers": "last_stage_layers",
          "num_layers_in_last_pipeline_stage": "last_stage_layers",
          "account_for_embedding_in_pipeline_split": "account_embedding",
          "account_for_loss_in_pipeline_split": "account_loss"}

#: The routing imbalance a plan that names none gets (the hottest expert-parallel rank's
#: routed-token load over the mean, ``moe_imbalance``): NaN, "by the rule", which
#: ``strategies.cost.token_counts.moe_load`` resolves with the model and the micro-batch's shape to
#: ``strategies.moe_balance.default_imbalance`` (a trained router balanced without an
#: auxiliary loss: the sampling of a finite micro-batch plus the published lasting skew,
#: docs/models.md "Expert parallelism as it runs", docs/calibration.md §5.73). One object, so
#: memoised functions keyed on it hit.
DEFAULT_MOE_IMBALANCE = float("nan")
#: routings balanced by construction (``contiguous``: every rank's share exact to a token),
#: whose default imbalance is 1 rather than the rule
BALANCED_ROUTINGS = ("contiguous",)
MAX_MOE_FACTOR = 1024.0   # sanity bound on moe_imbalance and moe_capacity_factor


@dataclass(frozen=True)
class Plan:
    """A parallel plan. ``dp``/``gbs`` may be None until a Job resolves them."""

    tp: int = 1
    pp: int = 1
    dp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None          # expert tensor parallelism (None: = tp, as Megatron)
    moe_imbalance: float | None = None      # hottest EP rank's token load / mean (None: default)
    moe_capacity_factor: float | None = None  # tokens an expert takes / its mean share; drops
    # Megatron-Core's --moe-pad-expert-input-to-capacity (drop-and-pad): every expert runs
    # exactly its capacity (token_counts.expert_capacity), so the dispatcher knows the counts
    # on the host and neither all-gathers them nor synchronises (moe_bytes.count_exchange)
    moe_pad_to_capacity: bool = False
    mbs: int = 1
    gbs: int | None = None
    schedule: str = DEFAULT_SCHEDULE
    vpp: int = 1
    recompute: str = "none"
    sp: bool = False
    zero: int = 0
    # hybrid sharding (FSDP's HSDP, Megatron-Core's --num-distributed-optimizer-instances
    # dp/dp_shard, MaxText's ICI fsdp x DCN data): the ZeRO states sharded over dp_shard·cp
    # ranks, replicated over the dp/dp_shard groups (None: over the whole dp, no replicas)
    dp_shard: int | None = None
    flash_attn: bool = True
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False
    # Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): one micro-batch's
    # forward and another's backward run as an overlapped pair (strategies.schedules.combined)
    ep_overlap: bool = False
    # with ep_overlap: Megatron-Core's --delay-wgrad-compute (a pair's last attention weight
    # gradient after its backward message is posted, §5.87). Off by default, as Megatron-Core
    # (model_parallel_config.py delay_wgrad_compute: bool = False; Megatron-Bridge's
    # performance harness turns it on with the overlap: docs/calibration.md §5.101). Refused
    # without ep_overlap (TransformerConfig.__post_init__ asserts the overlap for it)
    delay_wgrad: bool = False
    moe_dispatcher: str = "alltoall"        # one of DISPATCHERS
    moe_routing: str = "random"             # one of ROUTINGS
    # the whole step replayed as one CUDA graph (Megatron-Core --cuda-graph-impl
    # full_iteration): no host launches or device-to-host synchronisations in it
    cuda_graph: bool = False
    # the attention core in Transformer Engine's MXFP8 fused attention (Megatron-Core
    # fp8_dot_product_attention; strategies.stacks.variants.with_fp8_attention,
    # docs/calibration.md §5.98)
    fp8_attention: bool = False
    # how context parallelism exchanges K/V (one of CP_COMMS; None: the stack's own,
    # FrameworkProfile.cp_impl). Megatron-Core's --cp-comm-type; docs/calibration.md §5.134
    cp_comm: str | None = None
    microbatch_group_size: int | None = None
    layers_per_stage: tuple[int, ...] | None = None   # uneven pipeline stages (None: even)
    group_microbatches: tuple[int, ...] | None = None  # per node group (None: gbs/(mbs·dp))
    layout: str | None = None              # Megatron's pipeline layout string (docs/layout.md)
    first_stage_layers: int | None = None  # --decoder-first-pipeline-num-layers
    last_stage_layers: int | None = None   # --decoder-last-pipeline-num-layers
    account_embedding: bool = False        # the embedding counts as a layer slot (NeMo)
    account_loss: bool = False             # the LM head and loss count as a layer slot
    recompute_layers: int | None = None      # full: layers recomputed per chunk (None: all)
    recompute_method: str | None = None      # full with recompute_layers: block (default) or uniform
    recompute_modules: tuple[str, ...] | None = None   # selective: Megatron-Core's modules
    # pipeline schedules run per optimizer step, each over gbs/(mbs·dp·flushes) micro-batches
    # and each paying its own fill and drain (torch.distributed.pipelining's schedule.step()
    # per local batch: ``strategies.flushes``)
    flushes: int = 1

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "cp", "ep", "mbs", "vpp", "flushes"):
            _pos_int(f, getattr(self, f))
        for f in ("dp", "gbs", "microbatch_group_size", "etp", "dp_shard"):
            if getattr(self, f) is not None:
                _pos_int(f, getattr(self, f))
        _check_moe_factors(self)
        for f in _BOOLS:
            v = getattr(self, f)
            if type(v).__name__ == "bool_":           # numpy's bool, from array-built plans
                object.__setattr__(self, f, bool(v))
            check_bool(f, getattr(self, f))
        sched = get_schedule(self.schedule)     # SpecError naming the registered schedules
        if self.moe_dispatcher not in DISPATCHERS:
            raise SpecError("moe_dispatcher", self.moe_dispatcher,
                            f"must be one of {', '.join(DISPATCHERS)}")
        _check_pad_to_capacity(self)
        if self.cp_comm is not None and self.cp_comm not in CP_COMMS:
            raise SpecError("cp_comm", self.cp_comm, f"must be one of {', '.join(CP_COMMS)} "
                            "(Megatron-Core's cp_comm_type; a2a and a2a+p2p are not modelled)")
        if self.moe_routing not in ROUTINGS:
            raise SpecError("moe_routing", self.moe_routing,
                            f"must be one of {', '.join(ROUTINGS)}")
        if self.recompute not in RECOMPUTE:
            raise SpecError("recompute", self.recompute, f"must be one of {', '.join(RECOMPUTE)}")
        _check_partial_recompute(self)
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise SpecError("zero", self.zero, "must be 0, 1, 2 or 3")
        sched.check_plan(self.pp, self.vpp, self.microbatch_group_size)
        for f in ("layers_per_stage", "group_microbatches"):
            if isinstance(getattr(self, f), list):
                object.__setattr__(self, f, tuple(getattr(self, f)))
        if self.layers_per_stage is not None:
            _check_layers_per_stage(self)
        if self.group_microbatches is not None:
            _check_group_microbatches(self)
        _check_layout_fields(self)
        _check_dp_shard(self)
        if self.zero == 3 and self.pp > 1:
            raise SpecError("zero", 3, f"ZeRO-3 shards parameters across data parallelism and "
                            f"is not combined with pipeline parallelism (pp={self.pp}); use zero<=1")

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size: ``etp``, or ``tp`` when the plan names none
        (Megatron's ``--expert-tensor-parallel-size`` default)."""
        return self.tp if self.etp is None else self.etp

    @property
    def imbalance(self) -> float:
        """``moe_imbalance``; when the plan names none, 1 under a routing balanced by
        construction (``BALANCED_ROUTINGS``), else ``DEFAULT_MOE_IMBALANCE`` (NaN: the default
        rule, resolved by ``token_counts.moe_load``)."""
        if self.moe_imbalance is not None:
            return float(self.moe_imbalance)
        return 1.0 if self.moe_routing in BALANCED_ROUTINGS else DEFAULT_MOE_IMBALANCE

    @property
    def capacity_factor(self) -> float:
        """``moe_capacity_factor``; infinity (no token dropping) when the plan names none."""
        return float("inf") if self.moe_capacity_factor is None else float(self.moe_capacity_factor)

    @property
    def shard_dp(self) -> int | None:
        """The data-parallel ranks a ZeRO shard spans (times ``cp``): ``dp_shard``, or the
        whole ``dp`` when the plan names none."""
        return self.dp if self.dp_shard is None else self.dp_shard

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def short(self) -> str:
        """A compact human label, e.g. ``tp8 pp8 dp16 mbs1 1f1b sel sp z1``."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}" + {"all_gather": ":ag", "p2p": ":p2p"}.get(
                self.cp_comm or "", ""))
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.etp is not None and self.etp != self.tp:
            parts.append(f"etp{self.etp}")
        parts.append(f"mbs{self.mbs}")
        if self.pp > 1:
            parts.append(self.schedule + (f":{self.vpp}" if self.vpp > 1 else ""))
        if self.recompute != "none":
            parts.append({"selective": "sel", "full": "full-rc", "op": "op-rc"}[self.recompute]
                         + (f":{self.recompute_layers}" + ("u" if self.recompute_method
                                                            == "uniform" else "")
                            if self.recompute_layers is not None else "")
                         + (":" + "+".join(self.recompute_modules)
                            if self.recompute_modules is not None else ""))
        if self.sp:
            parts.append("sp")
        if self.ep_overlap:
            parts.append("epo+dw" if self.delay_wgrad else "epo")
        if self.moe_dispatcher != "alltoall":
            parts.append(self.moe_dispatcher)
        if self.moe_routing != "random":
            parts.append(self.moe_routing)
        if self.moe_pad_to_capacity:
            parts.append(f"pad{self.moe_capacity_factor:g}")
        if self.cuda_graph:
            parts.append("cg")
        if self.fp8_attention:
            parts.append("fp8a")
        if self.zero:
            parts.append(f"z{self.zero}")
        if self.dp_shard is not None:
            parts.append(f"shard{self.dp_shard}")
        if self.layers_per_stage is not None:
            parts.append("L" + "/".join(map(str, self.layers_per_stage)))
        if self.group_microbatches is not None:
            parts.append("M" + "/".join(map(str, self.group_microbatches)))
        if self.layout is not None:
            parts.append("layout " + self.layout)
        if self.first_stage_layers is not None or self.last_stage_layers is not None:
            parts.append(f"first{self.first_stage_layers or '-'} "
                         f"last{self.last_stage_layers or '-'}")
        if self.account_embedding or self.account_loss:
            parts.append("slots" + "+E" * self.account_embedding + "+L" * self.account_loss)
        if self.microbatch_group_size is not None:
            parts.append(f"group{self.microbatch_group_size}")
        if self.flushes > 1:
            parts.append(f"flushes{self.flushes}")
        return " ".join(parts)


def _check_moe_factors(p: Plan) -> None:
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


def _check_pad_to_capacity(p: Plan) -> None:
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
    if p.moe_dispatcher == "deepep":
        raise SpecError("moe_pad_to_capacity", True, "is not run by moe_dispatcher=deepep "
                        "(Megatron-Core: the flex dispatcher's DeepEP backend does not support "
                        "moe_pad_expert_input_to_capacity); use alltoall or hybridep")


def expert_shard_whole(tp: Any, cp: Any, dp_shard: Any, ep: Any, etp: Any) -> Any:
    """True where hybrid sharding's routed-expert shard group is whole: ``etp·ep`` divides
    the ``tp·cp·dp_shard`` ranks of one replica in a pipeline stage, whose expert grid
    (``placement.expert_dp_group`` over ``dp_shard``) holds the experts' ZeRO shards
    (Megatron-Core ``parallel_state``: ``_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP`` of
    ``expert_data_parallel_size / num_distributed_optimizer_instances`` ranks, asserted
    whole; torchtitan ``parallel_dims``: ``efsdp = dp_shard·cp·tp/ep``). Vectorised."""
    span = np.asarray(tp) * np.asarray(cp) * np.asarray(dp_shard)
    return (span % (np.asarray(etp) * np.asarray(ep)) == 0)[()]


def _check_dp_shard(p: Plan) -> None:
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


def _check_partial_recompute(p: Plan) -> None:
    """``recompute_layers`` (>= 1) and ``recompute_method`` only with ``recompute=full``
    (Megatron's ``--recompute-granularity full``), the method only with a layer count;
    ``recompute_modules`` only with ``recompute=selective``, each a known module (stored in
    ``MODULES`` order, without repeats; the chunk's layer count and the model's kind are
    checked with the model, ``strategies.job``)."""
    n, method, mods = p.recompute_layers, p.recompute_method, p.recompute_modules
    if n is not None:
        check_int("recompute_layers", n, 1, MAX_LAYERS)
        if p.recompute != "full":
            raise SpecError("recompute_layers", n, "needs recompute=full (Megatron's "
                            f"--recompute-granularity full), not recompute={p.recompute}")
    if method is not None:
        if method not in METHODS:
            raise SpecError("recompute_method", method, f"must be one of {', '.join(METHODS)}")
        if n is None:
            raise SpecError("recompute_method", method, "needs recompute_layers=N (the layers "
                            "per chunk it recomputes, block, or per group, uniform)")
    elif n is not None:
        object.__setattr__(p, "recompute_method", "block")
    if mods is not None:
        if isinstance(mods, str):
            mods = parse_modules(mods)
        for m in mods:
            if m not in MODULES:
                raise SpecError("recompute_modules", m, f"unknown module; valid: "
                                f"{', '.join(MODULES)}")
        if not mods:
            raise SpecError("recompute_modules", "", f"must name at least one of "
                            f"{', '.join(MODULES)}")
        if p.recompute != "selective":
            raise SpecError("recompute_modules", "+".join(mods), "needs recompute=selective "
                            "(Megatron's --recompute-granularity selective), not "
                            f"recompute={p.recompute}")
        object.__setattr__(p, "recompute_modules", tuple(m for m in MODULES if m in mods))


def parse_modules(value: Any) -> tuple[str, ...]:
    """``core_attn,mlp`` (or joined by ``+`` or ``/``, or a YAML list) as a tuple of names."""
    if isinstance(value, str):
        items = value.replace("+", ",").replace("/", ",").split(",")
        return tuple(x.strip().lower() for x in items if x.strip())
    if isinstance(value, (list, tuple)):
        if not all(isinstance(x, str) for x in value):
            raise SpecError("recompute_modules", value, "must be a list of module names")
        return tuple(x.strip().lower() for x in value)
    raise SpecError("recompute_modules", value, f"must be module names joined by ',', from "
                    f"{', '.join(MODULES)}")


def selective_modules(p: Plan) -> tuple[str, ...]:
    """The modules a plan recomputes selectively: its ``recompute_modules``, or Megatron-Core's
    default (``core_attn``) for ``recompute=selective``; () otherwise."""
    if p.recompute != "selective":
        return ()
    return p.recompute_modules if p.recompute_modules is not None else DEFAULT_MODULES


def _check_layers_per_stage(p: Plan) -> None:
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


def _check_layout_fields(p: Plan) -> None:
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


def _check_group_microbatches(p: Plan) -> None:
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


def parse_layers(value: Any, key: str = "layers_per_stage") -> tuple[int, ...] | None:
    """``10/6/6/10`` (or ``10:6:6:10``, or a YAML list) as a tuple of ints; None stays None
    (``layers_per_stage``, ``group_microbatches``)."""
    if value is None:
        return None
    if isinstance(value, str):
        items = [x.strip() for x in value.replace(":", "/").split("/")]
        if not all(items):
            raise SpecError(key, value, "must be counts joined by '/', e.g. 10/6/6/10")
        return tuple(parse_int_text(key, x) for x in items)
    if isinstance(value, (list, tuple)):
        out = []
        for x in value:
            if isinstance(x, bool) or not isinstance(x, int):
                raise SpecError(key, value, "must be a list of integers")
            out.append(x)
        return tuple(out)
    raise SpecError(key, value, "must be counts joined by '/', e.g. 10/6/6/10")


_FIELD_TYPES = {f.name: f.type for f in fields(Plan)}
_BOOLS = {"sp", "flash_attn", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
          "ep_overlap", "delay_wgrad", "cuda_graph", "fp8_attention", "account_embedding",
          "account_loss", "moe_pad_to_capacity"}
_STRS = {"schedule", "recompute", "recompute_method", "moe_dispatcher", "moe_routing",
         "cp_comm"}
_FLOATS = {"moe_imbalance", "moe_capacity_factor"}


_LIMITS = {"mbs": MAX_MBS, "gbs": MAX_GBS, "microbatch_group_size": MAX_GBS, "vpp": MAX_VPP,
           "flushes": MAX_GBS}


def int_limit(name: str) -> int:
    """The sanity upper limit of integer plan field ``name`` (``MAX_GPUS`` unless listed)."""
    return _LIMITS.get(name, MAX_GPUS)


def _pos_int(name: str, v: Any) -> None:
    check_int(name, v, 1, int_limit(name))


def coerce(key: str, value: Any) -> Any:
    if key in ("layers_per_stage", "group_microbatches"):
        return parse_layers(value, key)
    if key == "recompute_modules":
        return None if value is None else parse_modules(value)
    if key in _BOOLS:
        if isinstance(value, bool):
            return value
        if not (isinstance(value, str) or (isinstance(value, int) and value in (0, 1))):
            raise SpecError(key, value, "must be true or false")
        s = str(value).strip().lower()
        if s in ("true", "1", "yes", "on"):
            return True
        if s in ("false", "0", "no", "off"):
            return False
        raise SpecError(key, value, "must be true or false")
    if key == "layout":
        if value is None:
            return None
        if not isinstance(value, str):
            raise SpecError(key, value, "must be a Megatron pipeline layout string")
        return value.strip()
    if value is None and key in ("first_stage_layers", "last_stage_layers"):
        return None
    if key in _STRS and value is None and key not in ("recompute_method", "cp_comm"):
        raise SpecError(key, value, "must be a string (give a value or leave the key out)")
    if key in _STRS and value is not None:
        if not isinstance(value, str):
            raise SpecError(key, value, "must be a string")
        return value.strip().lower()
    if value is None and key in {"dp", "dp_shard", "gbs", "microbatch_group_size", "etp",
                                 "recompute_layers", "cp_comm",
                                 "recompute_method"} | _FLOATS:
        return None
    if key in _FLOATS:
        return _parse_float(key, value)
    if isinstance(value, bool):
        raise SpecError(key, value, "must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, str):
        raise SpecError(key, value, "must be an integer")
    return parse_int_text(key, value)


def _parse_float(key: str, value: Any) -> float:
    """A finite number from YAML or text (``1.3``, ``2``); SpecError naming ``key``."""
    if isinstance(value, bool):
        raise SpecError(key, value, "must be a number")
    try:
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
    except ValueError:
        raise SpecError(key, value, "must be a number") from None
    except OverflowError:    # an integer beyond a float (10**400 in YAML)
        raise SpecError(key, value, f"must be a number <= {MAX_MOE_FACTOR:g} (a sanity "
                        "limit)") from None
    raise SpecError(key, value, "must be a number")


def tp_overlap_default(default: Any, tp: Any, sp: Any) -> Any:
    """A stack's default TP communication overlap (``FrameworkProfile.
    default_tp_comm_overlap``) as a plan of ``tp`` and ``sp`` takes it: on only with ``tp > 1``
    and sequence parallelism, where the stacks run it (Megatron-LM ``arguments.py`` asserts
    ``--sequence-parallel`` for ``--tp-comm-overlap``; NeMo's ``MegatronCommOverlapCallback``
    and Megatron-Bridge's ``CommOverlapConfig`` turn it off with TP < 2 or without SP). Scalars
    or arrays (the search's columns). The one rule ``plan_from_mapping``, the search and the
    keys read."""
    on = np.logical_and(default, np.logical_and(np.asarray(tp) > 1, np.asarray(sp, bool)))
    return bool(on) if np.ndim(on) == 0 else on


def plan_from_mapping(d: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> Plan:
    """A Plan from a mapping (YAML or parsed string); Megatron's long names are accepted.
    ``defaults``: values for keys the mapping does not give (a software stack's switches)."""
    if not isinstance(d, Mapping):
        raise SpecError("plan", type(d).__name__, "a plan file must hold a mapping")
    args: dict[str, Any] = {}
    for raw, value in d.items():
        if not isinstance(raw, str):
            raise SpecError("plan", raw, f"unknown key; allowed: {', '.join(_FIELD_TYPES)}")
        key = ALIAS.get(raw.strip().lower(), raw.strip().lower())
        if key not in _FIELD_TYPES:
            raise SpecError("plan", raw, f"unknown key; allowed: {', '.join(_FIELD_TYPES)}")
        if key in args:
            raise SpecError("plan", raw, "key given twice")
        args[key] = coerce(key, value)
    for key, value in (defaults or {}).items():
        if key == "tp_comm_overlap" and key not in args:
            value = tp_overlap_default(value, args.get("tp", 1), args.get("sp", False))
        args.setdefault(key, value)
    sched = str(args.get("schedule", ""))
    name, colon, chunks = sched.partition(":")
    if colon:                                   # name:V, a chunked schedule with V chunks
        vpp = coerce("vpp", chunks)
        if "vpp" in args and args["vpp"] != vpp:
            raise SpecError("vpp", args["vpp"], f"disagrees with schedule={sched}")
        args["schedule"], args["vpp"] = name, vpp
    elif "schedule" in args and "vpp" not in args:
        args["vpp"] = get_schedule(name).default_vpp
        if isinstance(args.get("layout"), str) and get_schedule(name).chunked \
                and isinstance(args.get("pp", 1), int) and args.get("pp", 1) >= 1:
            # Megatron reads vpp from the layout: its stages over pp
            from strategies.layout import parse_layout
            n = len(parse_layout(args["layout"]))
            if n % args.get("pp", 1) == 0:
                args["vpp"] = n // args.get("pp", 1)
    return Plan(**args)


def parse_plan(text: str) -> Plan:
    """``tp=8,pp=8,mbs=1,schedule=interleaved,vpp=3`` or a path to a YAML or JSON plan file
    (``strategies.plan_file``)."""
    d = plan_mapping(text)
    if "framework" in d:
        raise SpecError("plan", "framework", "a plan's framework key is read where a job is "
                        "built (estimate, simulate, compare, whatif); give it with --framework")
    return plan_from_mapping(d)


def plan_mapping(text: str) -> dict[str, Any]:
    """The raw ``key -> value`` mapping of a plan string or a YAML/JSON plan file (a file's
    ``found_for`` record checked and left out: ``strategies.plan_file``)."""
    text = str(text).strip()
    from strategies.plan_file import is_plan_file, one_framework_key, read_plan_mapping
    if is_plan_file(text):
        return read_plan_mapping(text)[0]
    d: dict[str, str] = {}
    last = None
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq and last is not None:
            # a layout string's cosmetic commas (Megatron's), or a list item
            # (recompute_modules=core_attn,mlp)
            d[last] += "," + item
            continue
        if not eq or not key.strip():
            raise SpecError("plan", item, "each item must be key=value, e.g. tp=8")
        if key.strip() in d:
            raise SpecError("plan", key.strip(), "key given twice")
        d[key.strip()] = value.strip()
        canon = ALIAS.get(key.strip().lower(), key.strip().lower())
        last = key.strip() if canon in _LIST_KEYS or canon == "layout" else None
    return one_framework_key(d)


_LIST_KEYS = {"recompute_modules"}
