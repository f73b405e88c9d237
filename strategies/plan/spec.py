"""``Plan``: the frozen spec of how a job is split (tp, pp, dp, cp, ep, etp, sp, zero, schedule,
recompute, mbs, gbs, ...), its ``__post_init__`` checks (the rules: ``strategies.plan.checks``,
``strategies.plan.recompute_fields``), its derived properties and its short label;
``BOOL_FIELDS``, the plan's boolean switches."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from strategies.cost.layer_offload import check_cpu_offloading
from strategies.cost.offload import check_offload_modules
from strategies.errors import SpecError
from strategies.plan.checks import (check_dp_shard, check_group_microbatches,
                                    check_layers_per_stage, check_layout_fields,
                                    check_moe_factors, check_pad_to_capacity, int_limit)
from strategies.plan.choices import (BALANCED_ROUTINGS, CP_COMMS, CP_COMMS_REFUSED,
                                     DEFAULT_MOE_IMBALANCE, DISPATCHERS, RECOMPUTE, ROUTINGS)
from strategies.plan.recompute_fields import check_partial_recompute
from strategies.schedules import DEFAULT_SCHEDULE, get_schedule
from topologies.limits import check_bool, check_int


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
    # Megatron-Core's --overlap-param-gather-with-optimizer-step: interleaved chunk 0's
    # parameter gathers dispatched inside the optimizer step (off by default, as Megatron-Core's
    # OptimizerConfig; the stack rules hold its needs, ``stacks.rules.param_gather_optimizer_
    # rules``; the physics ``stacks.param_gather.gather_with_optimizer``, docs/calibration.md
    # §5.200)
    param_gather_with_optimizer: bool = False
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
    # FrameworkProfile.cp_impl). Megatron-Core's --cp-comm-type; docs/calibration.md §5.134,
    # §5.185 (a2a), §5.189 (a2a+p2p)
    cp_comm: str | None = None
    # with cp_comm=a2a+p2p: the all-to-all's group size, the first entry of Megatron-Core's
    # --hierarchical-context-parallel-sizes (k, cp/k): k consecutive CP ranks all-to-all
    # their heads, the ring runs across the cp/k groups (strategies.cost.cp_hier, §5.189)
    hierarchical_cp: int | None = None
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
    # Megatron-Core's --fine-grained-activation-offloading --offload-modules: the modules whose
    # saved activations go to host memory (``strategies.cost.offload``; None: none)
    offload_modules: tuple[str, ...] | None = None
    # Megatron-Core's --cpu-offloading-num-layers: the first N layers' activations go to host
    # memory (``strategies.cost.layer_offload``; None or 0: none)
    cpu_offloading_num_layers: int | None = None
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
        check_moe_factors(self)
        for f in BOOL_FIELDS:
            v = getattr(self, f)
            if type(v).__name__ == "bool_":           # numpy's bool, from array-built plans
                object.__setattr__(self, f, bool(v))
            check_bool(f, getattr(self, f))
        sched = get_schedule(self.schedule)     # SpecError naming the registered schedules
        if self.moe_dispatcher not in DISPATCHERS:
            raise SpecError("moe_dispatcher", self.moe_dispatcher,
                            f"must be one of {', '.join(DISPATCHERS)}")
        check_pad_to_capacity(self)
        if self.cp_comm in CP_COMMS_REFUSED:
            raise SpecError("cp_comm", self.cp_comm, CP_COMMS_REFUSED[self.cp_comm])
        if self.cp_comm is not None and self.cp_comm not in CP_COMMS:
            raise SpecError("cp_comm", self.cp_comm, f"must be one of {', '.join(CP_COMMS)} "
                            "(Megatron-Core's cp_comm_type)")
        check_hierarchical_cp(self)
        if self.moe_routing not in ROUTINGS:
            raise SpecError("moe_routing", self.moe_routing,
                            f"must be one of {', '.join(ROUTINGS)}")
        if self.recompute not in RECOMPUTE:
            raise SpecError("recompute", self.recompute, f"must be one of {', '.join(RECOMPUTE)}")
        check_partial_recompute(self)
        object.__setattr__(self, "offload_modules", check_offload_modules(
            self.offload_modules, self.recompute, self.recompute_modules))
        object.__setattr__(self, "cpu_offloading_num_layers", check_cpu_offloading(
            self.cpu_offloading_num_layers, self.pp, self.recompute, self.offload_modules,
            self.cuda_graph))
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise SpecError("zero", self.zero, "must be 0, 1, 2 or 3")
        sched.check_plan(self.pp, self.vpp, self.microbatch_group_size)
        for f in ("layers_per_stage", "group_microbatches"):
            if isinstance(getattr(self, f), list):
                object.__setattr__(self, f, tuple(getattr(self, f)))
        if self.layers_per_stage is not None:
            check_layers_per_stage(self)
        if self.group_microbatches is not None:
            check_group_microbatches(self)
        check_layout_fields(self)
        check_dp_shard(self)
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
        """GPUs one data-parallel replica spans, ``tp·pp·cp`` (the cluster's GPUs over it is
        ``dp``: ``job.make_job``)."""
        return self.tp * self.pp * self.cp

    def to_dict(self) -> dict[str, Any]:
        """Every field by name (``dataclasses.asdict``)."""
        return asdict(self)

    def short(self) -> str:
        """A compact human label, e.g. ``tp8 pp8 dp16 mbs1 1f1b sel sp z1``."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}" + {"all_gather": ":ag", "p2p": ":p2p", "a2a": ":a2a",
                                           "a2a+p2p": f":a2a{self.hierarchical_cp}+p2p"}.get(
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
        if self.offload_modules is not None:
            parts.append("offload:" + "+".join(self.offload_modules))
        if self.cpu_offloading_num_layers is not None:
            parts.append(f"cpu-offload:{self.cpu_offloading_num_layers}")
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


BOOL_FIELDS = {"sp", "flash_attn", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
          "ep_overlap", "delay_wgrad", "cuda_graph", "fp8_attention", "account_embedding",
          "account_loss", "moe_pad_to_capacity", "param_gather_with_optimizer"}


def check_hierarchical_cp(p: "Plan") -> None:
    """``hierarchical_cp`` (Megatron-Core's ``--hierarchical-context-parallel-sizes k cp/k``,
    whose product ``training/arguments.py`` asserts is ``cp``, and which ``a2a+p2p``
    requires): given exactly with ``cp_comm=a2a+p2p``, an integer ``1 < k < cp`` dividing
    ``cp`` (``k = cp`` is ``a2a``, ``k = 1`` ``p2p``). ``SpecError`` naming the field."""
    k = p.hierarchical_cp
    if p.cp_comm != "a2a+p2p":
        if k is not None:
            raise SpecError("hierarchical_cp", k, "is the all-to-all size of cp_comm=a2a+p2p "
                            f"(Megatron-Core's --hierarchical-context-parallel-sizes); the "
                            f"plan's cp_comm is {p.cp_comm}")
        return
    if k is None:
        raise SpecError("cp_comm", p.cp_comm, "a2a+p2p needs hierarchical_cp, the all-to-all "
                        "group size (Megatron-Core requires --hierarchical-context-parallel-"
                        "sizes with --cp-comm-type a2a+p2p)")
    check_int("hierarchical_cp", k, 1, int_limit("hierarchical_cp"))
    if not 1 < k < p.cp or p.cp % k:
        raise SpecError("hierarchical_cp", k, f"must divide cp={p.cp} and lie strictly between "
                        f"1 and cp (the sizes (k, cp/k) multiply to cp; k=cp is cp_comm=a2a, "
                        f"k=1 is p2p)")


def _pos_int(name: str, v: Any) -> None:
    check_int(name, v, 1, int_limit(name))
