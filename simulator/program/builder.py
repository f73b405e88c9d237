"""``ProgramBuilder``: turns one rank's pipeline actions into ops on its streams.

Per layer block (a whole model chunk with ``granularity="chunk"``, one layer with
``"layer"``): the compute, then the blocking collectives that close it (EP all-to-all,
TP all-reduce or SP reduce-scatter + all-gather pairs, the tail of the CP ring). With
``tp_comm_overlap`` all but ``1/tp_overlap_chunks`` of the TP traffic runs beside the compute;
CP ring attention runs beside the attention core, its last ``cp_exposed_fraction`` after
(``strategies.cost.system.SystemConfig``, carried by the ``StageCosts`` record), and the
collectives that close the block wait for it (``strategies.cost.cp_ring``).
Gradient buckets (``simulator.program.grad_buckets``) are reduced on the dp-comm stream during the last
micro-batch's backward of each chunk (``overlap_grad_reduce``) or after the schedule. All
durations and bytes come from ``StageCosts``. Units: seconds, bytes.

The builder's parts, each a mixin of ``ProgramBuilder`` in its own module: the tensor-parallel
collectives (``tensor_parallel``), layer blocks with their CP and expert traffic
(``layer_blocks``), the passes (``passes``), the data-parallel collectives and ZeRO-3
(``data_parallel``), the pipeline's transfers (``pipeline_p2p``), overlapped pairs
(``overlapped_pairs``) and the blocks stamped per micro-batch (``block_memo``); here the
state, the op primitives, the action loop and the step's end.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from simulator.metrics import PARAM_GATHER_PREFIX
from simulator.program.block_memo import BlockMemo
from simulator.program.data_parallel import DataParallelOps, FillGatherOps, FillGathers, \
    replica_lane
from simulator.program.grad_buckets import chunk_buckets
from simulator.program.layer_blocks import LayerBlocks
from simulator.program.ops import STREAMS, Collective, Compute, Program
from simulator.program.overlapped_pairs import OverlappedPairs
from simulator.program.passes import Passes
from simulator.program.pipeline_p2p import PipelineTransfers
from simulator.program.tensor_parallel import TensorParallelOps
from strategies import placement
from strategies.cost.comm import dp_parts, has_dp_copies, measured_scale, profile_of
from strategies.cost.comm.links import in_one_node
from strategies.cost.gemm_kernel import GEMM_GENERATION
from strategies.cost.norm_barrier import NORM_BYTES, barrier_on, ring_share
from strategies.cost.sm_share import window_sms
from strategies.cost.system import get_system
from strategies.plan.choices import DISPATCHERS
from strategies.cost.stage import StageCosts, attn_down_ops, attn_rope_bytes, chunk_layers, \
    sp_grad_allreduce_bytes
from strategies.stacks.comm_rules import full_grad_reduce, grad_path
from strategies.stacks.param_gather import gather_with_optimizer, gathers_at_schedule_start, \
    gathers_on_fill_path
from strategies.schedules import Step, get_schedule, head_rank
from strategies.schedules.exchanges import Exchange

if TYPE_CHECKING:
    from strategies.job import Job

#: the label of the gradient norm's all-reduce (``simulator.fold_stats`` watches it)
NORM_LABEL = "grad norm all-reduce"


class ProgramBuilder(BlockMemo, TensorParallelOps, LayerBlocks, Passes, DataParallelOps,
                     FillGatherOps, PipelineTransfers, OverlappedPairs):
    """Builds the ``Program`` of one rank; ``layout`` gives its groups (see compiler)."""

    def __init__(self, job, costs: StageCosts, layout, rank: int, granularity: str) -> None:
        p = job.plan
        self.p, self.c, self.rank, self.gran = p, costs, rank, granularity
        self.cluster = job.cluster
        # ``comm.measured_scale`` applies (a GPU profile with collectives): each collective
        # op repeats that many times the calls, so that alone on the wire it takes the
        # estimate's measured seconds
        self.profiled = profile_of(job.cluster) is not None \
            and bool(profile_of(job.cluster).collectives)
        # ZeRO-0 and DeepSpeed's BF16_Optimizer all-reduce the gradients (no reduce-scatter)
        self.full_grad_reduce = full_grad_reduce(job.framework, job.dtype, p.zero)
        self.stage = layout.stage(rank)
        self.sched = get_schedule(p.schedule)      # placement: positions and peers
        self.m = job.microbatches_of_rank(rank)    # per node group with group_microbatches
        self.last_vs = self.sched.num_virtual_stages(p.pp, p.vpp) - 1
        # DualPipe (``Schedule.mirrored``): chunk 0 is stage r of direction 0, chunk 1 stage
        # pp-1-r of direction 1 (even micro-batches go one way, odd ones the other)
        self.mirrored = bool(self.sched.mirrored) and p.pp > 1
        chunks = range(2) if self.mirrored else range(p.vpp)
        # each chunk's layers in forward order, one per-layer cost record each (the stage-cost
        # record's mean layer, or its kind's record where the layout says which layers a chunk
        # holds: strategies.cost.stage.chunk_layers); DualPipe's chunk 1 holds what the layout
        # gives stage pp-1-r
        self.chunk = {c: [x for n, x in chunk_layers(costs, *self._source(c),
                                                     job.layers_of_chunk(*self._source(c)))
                          for _ in range(n)] for c in chunks}
        # the layers of the stage the layout gives this rank (DualPipe: its own direction's
        # copy), as ZeRO-3's per-layer share and the forward window count them
        self.stage_layers = sum(len(self.chunk[c]) for c in range(p.vpp))
        self.group = {d: layout.group(d, rank)
                      for d in ("tp", "cp", "dp", "ep", "etp", "edp", "dpcp", "dprep", "pp",
                                "cpa", "cpr")}
        # the tied embedding's gradient group: the first stage and the LM head's
        head = head_rank(p.schedule, p.pp, p.vpp)
        ends = (self.group["pp"][0], self.group["pp"][head])
        self.group["tied"] = ends if self.stage in (0, head) and head != 0 else (rank,)
        # the gradient norm's group (``cost.norm_barrier.stats_group``): every rank with the
        # distributed optimizer, else the model-parallel one (tp x pp)
        self.barrier = barrier_on(job.framework.step)
        if self.barrier:
            self.group["stats"] = layout.group("stats", rank)
        self.layout = layout
        self.streams: dict[str, list] = {s: [] for s in STREAMS}
        self.rep_lane = replica_lane(job.framework)      # hybrid sharding's all-reduces
        self.streams.setdefault(self.rep_lane, [])
        self.next_id, self.wait, self.last_compute = 0, [], None
        self.held = held_by_category(job, rank)     # SMs a collective holds, by category
        self.produced: dict[tuple, tuple] = {}
        # the receives of ``overlap_p2p_comm`` calls not yet waited for, by direction
        self.received: dict[str, list] = {}
        # some parameter here has copies to reduce with: dp > 1, or routed experts whose
        # expert-data-parallel group holds more than one rank (``comm.has_dp_copies``)
        # this stage's parameters and routed-expert parameters, read once (``_dp_parts``,
        # ``_mirror_reduce``): the routed experts' part over their own group (``comm.dp_parts``)
        self.stage_params = costs.params_by_stage[self.stage] if costs.params_by_stage else 0.0
        self.stage_expert = (costs.expert_params_by_stage[self.stage]
                             if costs.expert_params_by_stage else 0.0)
        self.copies = bool(has_dp_copies(self.stage_params, self.stage_expert,
                                         p.tp, p.cp, p.dp, p.ep, p.expert_tp))
        self.edp_params = 0.0        # the experts' part of ``dp_parts`` (0: all over dp)
        if self.stage_params > 0:
            self.edp_params = float(dp_parts(self.stage_params, self.stage_expert, p.tp, p.cp,
                                             p.dp, p.ep, p.expert_tp)[1][0])
        self.grad_sync = self.copies and p.zero < 3
        # the ZeRO stage and overlap the gradients run with (``framework.grad_path``:
        # pipelined torchtitan reduce-scatters once, after the stage's last backward)
        self.zero_g, self.ogr_g = grad_path(job.framework.fsdp2, p.pp, p.zero,
                                            p.overlap_grad_reduce)
        # ZeRO-2 shards the gradients: every micro-batch's are reduce-scattered into the shard
        self.every_mb = self.grad_sync and self.zero_g == 2
        # interleaved: the schedule dispatches each chunk's gathers (chunks 0 and 1 at its
        # start, ``stacks.param_gather.gathers_at_schedule_start``); each chunk's first
        # forward waits for its buckets as above
        self.at_start = bool(gathers_at_schedule_start(p.pp, p.vpp, p.zero,
                                                       p.overlap_param_gather, self.mirrored,
                                                       p.schedule == "interleaved"))
        # chunk 0's gathers dispatched inside the optimizer step, chunk 0 one bucket
        # (``stacks.param_gather.gather_with_optimizer``, §5.200): ``optimizer_prologue``
        self.with_opt = bool(gather_with_optimizer(self.at_start,
                                                   p.param_gather_with_optimizer)) \
            and self.grad_sync and p.zero >= 1
        self.opt_head = 0.0         # seconds of the optimizer run before the step (rotated)
        # the stack's bucketing by pipeline rank and chunk (``BucketRule.chunk_bucketed``:
        # Megatron-Core cuts only rank 0's first chunk into buckets, §5.92; DualPipe's copies
        # and a split backward, which Megatron-Core does not run, keep the size rule)
        rule = job.framework.dp_bucket
        self.buckets = {c: chunk_buckets(costs, self.vs(c) == 0, self.vs(c) == self.last_vs,
                                         len(self.chunk[c]),
                                         [x.layer_params for x in self.chunk[c]],
                                         rule.chunk_bucketed(self.stage, c, self.mirrored
                                                             or bool(self.sched.splits_backward),
                                                             self.every_mb)
                                         and not (self.with_opt and c == 0),
                                         [x.layer_lead_params for x in self.chunk[c]])
                        for c in chunks}
        # the buckets that close with the lead (MLP) of the backward block's last layer,
        # reduced from inside that block (``Passes.lead_cut``); None outside such a block
        self.lead_cut: Callable[[], None] | None = None
        # the last micro-batch through each chunk (its backward completes the gradients)
        self.final_mb = {c: self.m - 2 + c if self.mirrored else self.m - 1 for c in chunks}
        self.pending_buckets: list = []
        # a split backward: B (input gradient, communication) then, later, W (weight gradient,
        # compute only, then the chunk's gradient reduction); else one backward pass
        self.split = bool(self.sched.splits_backward)
        self.reduced: list[float] = []      # parameters of each gradient bucket reduced
        self.n_param_gathers = 0
        # the overlapped parameter gathers at the stage's first forward, on micro-batch 0's
        # fill path (``stacks.param_gather``, §5.194); None: after the optimizer
        self.on_fill = bool(gathers_on_fill_path(p.pp, p.vpp, p.zero, p.overlap_param_gather,
                                                 self.mirrored))
        gathered = (chunks if self.at_start else (0,) if self.on_fill else ()) \
            if self.grad_sync else ()
        self.fills = {c: FillGathers(self.buckets[c], len(self.chunk[c]), c) for c in gathered}
        self.fill = self.fills.get(0)       # the chunk whose gathers ``FillGatherOps`` issues
        self.fill_first: set[int] = set()   # the chunks whose first forward has run
        self.n_forwards = 0                 # the rank's forwards so far
        # inside an overlapped pair: where a pass's expert all-to-all goes (its own next
        # compute waits for it, the partner's does not); None: ``wait``, as everywhere else
        self.hidden: list | None = None
        # inside a combined-1F1B pair (``ep_overlap``): the backward's expert all-to-all of
        # each layer was issued ahead of its compute (``overlapped``), so ``_close_block``
        # issues none after it
        self.lead_a2a = False
        # seconds the next backward block leaves out of its compute: a combined pair's last
        # backward layer's attention weight gradient, which ``delay_wgrad_compute`` runs
        # after the pair's backward message is posted (``combined_pair``, §5.87)
        self.defer_dw = 0.0
        # each overlapped forward's partner backward (labels), for the activation track
        # (``simulator.metrics.activation_series``: the pair's forward is stashed as its
        # partner's stash is freed, the memory model's rule, ``schedules.stash.stash_frontier``)
        self.paired: dict[str, str] = {}
        # ``segments`` of each (chunk, counts, direction): the same runs every micro-batch
        self._segments: dict[tuple, list[list[tuple]]] = {}
        # an all-to-all or an etp collective can close a block: some layer has expert bytes
        # and its ep or etp group more than one rank (else every one of ``_close_block``'s
        # MoE collectives is empty, ``coll`` returns None for each)
        self._moe = (len(self.group["ep"]) > 1 or len(self.group["etp"]) > 1) and any(
            not x.ep_bytes <= 0 for c in chunks for x in self.chunk[c])
        self._piece_s: dict[tuple[str, float], float] = {}     # ``_piece_time``
        # what the cost rules of ``self.c`` (frozen) give each block, worked out once per
        # builder (``_once``): pure functions of the costs and the plan, read per block
        self._memo: dict[tuple, Any] = {}
        self._lanes: dict[tuple[str, str], str] = {}    # ``_overlapped_lane``'s streams, by
        # (send or recv, direction)
        self._coll_to: dict[tuple[str, str], tuple] = {}   # ``coll``: (group, algorithm)
        self._stamps: dict[tuple, Any] = {}     # ``block_memo``: each block shape's ops
        # MLA's rope key bytes under SP and its down projections' collectives, by direction
        # (``_close_block``; none without MLA)
        self._rope_b = attn_rope_bytes(costs) if costs.tp_rope_w > 0 else 0.0
        self._down = {fwd: tuple((kd, nb) for kd, nb in attn_down_ops(costs, bool(p.sp), fwd)
                                 if nb > 0) for fwd in (True, False)}
        tp_group = len(self.group["tp"]) > 1
        # one SP re-gather's contention-free seconds, as the estimate prices it (0: none)
        self.t_regather = self._piece_time("ag", 1.0) if costs.rg_bytes > 0 and tp_group \
            else 0.0
        # one column-parallel data gradient's asynchronous reduction, contention-free, as
        # the estimate prices it (0: blocking, ``cost.stage.dgrad_reduce_hidden``)
        self.t_reduce = self._piece_time("rd", 1.0) if costs.rd_bytes > 0 and tp_group \
            else 0.0
        # the pending block's reductions: (carved weight-gradient seconds, reductions
        # compiled beside them, reductions taken out of the blocking ones)
        self._reduce: tuple[float, dict, float] = (0.0, {}, 0.0)

    def _source(self, c: int) -> tuple[int, int]:
        """``(stage, chunk)`` of the layout whose layers this rank's chunk ``c`` holds: its
        own, or (DualPipe's chunk 1) chunk 0 of stage ``pp-1-r``."""
        if self.mirrored:
            return (self.stage if c == 0 else self.p.pp - 1 - self.stage), 0
        return self.stage, c

    def vs(self, chunk: int, microbatch: int = 0) -> int:
        """Position of this rank's ``chunk`` on ``microbatch``'s path (the schedule's)."""
        return self.sched.virtual_stage(self.stage, chunk, self.p.pp, self.p.vpp, microbatch)

    # ------------------------------------------------------------------ primitives
    def _add(self, cls, stream: str, **kw) -> int:
        op_id = self.next_id
        self.next_id += 1
        self.streams[stream].append(cls(id=op_id, stream=stream, **kw))
        return op_id

    def compute(self, seconds: float, kind: str, label: str, i: int = -1, c: int = -1,
                force: bool = False) -> int | None:
        """A compute op that waits for everything pending; skipped when it lasts 0 s."""
        if seconds <= 0 and not force:
            return None
        deps, self.wait = tuple(self.wait), []
        op_id = self.last_compute = self.next_id      # ``_add`` written out (positional)
        self.next_id += 1
        self.streams["compute"].append(Compute(op_id, "compute", float(seconds), kind, label,
                                               i, c, deps))
        return op_id

    def coll(self, stream: str, kind: str, dim: str, nbytes: float, repeat: float, cat: str,
             label: str, i: int = -1, c: int = -1, deps=(), tag: str | None = None,
             remote_scale: float = 1.0, nvlink_share: float = 1.0,
             sms: float | None = None) -> int | None:
        """A collective of ``kind`` over the ``dim`` group (None where that group is one
        rank), holding ``sms`` SMs on each member while in flight (None: its category's,
        ``held_by_category``; 0 while ``SystemConfig.comm_sm_share`` is off)."""
        if nbytes <= 0 or repeat <= 0:
            return None
        # the group of ``dim`` and its algorithm for ``kind`` (None: a group of one rank,
        # no collective), worked out once per builder: both are fixed for its rank
        hit = self._coll_to.get((dim, kind))
        if hit is None:
            group = self.group[dim]
            hit = self._coll_to[(dim, kind)] = (
                group, self.layout.algorithm(group, kind) if len(group) > 1 else None)
        group, algo = hit
        if algo is None:
            return None
        if self.profiled:           # a GPU profile's measured collectives (within a node)
            G = self.cluster.gpus_per_node
            # the estimate's rule for the group: the tied pair is in one node only when the
            # whole job is (``pair_time``'s caller), the others by placement's layout
            in_node = placement.world_size(self.p) <= G if dim == "tied" else \
                in_one_node(len(group), group[1] - group[0], G)
            repeat = repeat * float(measured_scale(kind, nbytes, len(group), in_node,
                                                   self.cluster, nvlink_share))
        deps = tuple(deps)
        if None in deps:
            deps = tuple([d for d in deps if d is not None])
        op_id = self.next_id                          # ``_add`` written out (positional)
        self.next_id += 1
        self.streams[stream].append(Collective(op_id, stream, kind, group, float(nbytes), algo,
                                               tag or cat, cat, label, float(repeat), i, c,
                                               deps, float(remote_scale), float(nvlink_share),
                                               self.held.get(cat, 0.0) if sms is None
                                               else float(sms)))
        return op_id

    def _once(self, key: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, worked out once per builder under ``key`` (``make`` must be a pure
        function of ``self.c`` and the plan: the same value every block)."""
        memo = self._memo
        if key in memo:
            return memo[key]
        out = memo[key] = make()
        return out

    def run(self, actions: list) -> None:
        if self.with_opt and not self.fills[0].ops:
            self.optimizer_prologue()
        group: list[Step] = []
        for a in actions:
            if isinstance(a, Step) and (a.overlap or group):
                group.append(a)
                if not a.overlap:
                    self.overlapped(group)
                    group = []
            elif isinstance(a, Exchange):
                self.exchange(a)
            elif isinstance(a, Step) and a.kind == "F":
                self.take_received("fwd")
                self.forward(a.microbatch, a.chunk)
            elif isinstance(a, Step) and a.kind == "W":
                self.wgrad(a.microbatch, a.chunk)
            else:
                self.take_received("bwd")
                self.backward(a.microbatch, a.chunk)

    def finish(self) -> Program:
        """Remaining gradient buckets, the optimizer and the parameter all-gathers."""
        for _, params in self.pending_buckets:
            self._grad_reduce(params, deps=(self.last_compute,))
        if self.mirrored:
            self._mirror_reduce()
        if self.grad_sync or (self.p.zero == 3 and self.copies) or self.mirrored:
            self.wait += self.dp_tails()
        # MLA's sequence-parallel-marked replicated gradients over tp, after the reduction
        # (``cost.stage.sp_grad_allreduce_bytes``, §5.85)
        dp_ops = self.streams["dp-comm"]
        rep = self.coll("dp-comm", "allreduce", "tp",
                        sp_grad_allreduce_bytes(self.c, self.stage_layers), 1.0, "dp",
                        "SP-marked grads tp all-reduce",
                        deps=(self.last_compute, dp_ops[-1].id if dp_ops else None), tag="dp")
        self.wait += [rep] if rep is not None else []
        # the tied word embedding's gradient, first stage <-> the LM head's, after the reduction
        dp_ops = self.streams["dp-comm"]
        tied = self.coll("dp-comm", "allreduce", "tied", self.c.tied_bytes, 1.0, "dp",
                         "tied embedding all-reduce",
                         deps=(self.last_compute, dp_ops[-1].id if dp_ops else None), tag="dp")
        self.wait += [tied] if tied is not None else []
        # the gradient norm's all-reduce: no rank of the group updates before every one has
        # its gradients reduced (``cost.norm_barrier``, §5.202)
        if self.barrier:
            dp_ops = self.streams["dp-comm"]
            p = self.p
            share = ring_share(p.tp, p.pp, p.cp, p.dp, p.zero, self.cluster)
            bar = self.coll("dp-comm", "allreduce", "stats", NORM_BYTES, share, "dp",
                            NORM_LABEL,
                            deps=(self.last_compute, dp_ops[-1].id if dp_ops else None,
                                  *self.wait), tag="dp", sms=0.0)
            self.wait += [bar] if bar is not None else []
        # the stack's per-step passes (strategies.cost.step), then the optimizer
        passes = self.c.passes_by_stage[self.stage] if self.c.passes_by_stage else 0.0
        self.compute(passes, "optimizer", "step passes")
        opt = self.compute(self.c.optimizer_by_stage[self.stage] - self.opt_head, "optimizer",
                           "optimizer", force=True)
        if self.grad_sync and self.p.zero >= 1 and not self.fills:
            # each bucket at the stage's mean gathered width (``stage.rank_params.gather_width``)
            width = (self.c.gather_by_stage[self.stage] if self.c.gather_by_stage
                     else self.c.param_bytes)
            for n, params in enumerate(self.reduced):
                for dim, k, suffix in self._dp_parts(params):
                    if self.coll("dp-comm", "allgather", dim, width * k, 1.0, "dp",
                                 f"{PARAM_GATHER_PREFIX} bucket {n}{suffix}", deps=(opt,),
                                 tag="dp") is not None:
                        self.n_param_gathers += 1
        fwd = (self.stage_layers * self.c.layer_fwd if not self.c.chunk_kinds else
               sum(x.layer_fwd for c in range(self.p.vpp) for x in self.chunk[c]))
        meta = {"fwd_window_s": fwd,
                "param_gathers": self.n_param_gathers,
                "overlap_param_gather": self.p.overlap_param_gather,
                # each stage's exposed gather waits at its first forward, on the fill path
                # (``stacks.param_gather``; ``metrics.rank_ends`` sums them over the stages)
                # (interleaved: where the schedule dispatches them, ``at_start``)
                "gathers_on_fill_path": self.on_fill or self.at_start,
                "paired_forwards": dict(self.paired)}
        if self.held["dp"]:
            # the SMs the overlapped gathers hold beside the next forward (``rank_ends``)
            meta["gather_sms"] = (self.cluster.gpu_of_rank(self.rank).sm_count,
                                  self.held["dp"])
        return Program(self.rank, self.stage, {k: tuple(v) for k, v in self.streams.items() if v},
                       meta)


def held_by_category(job: Job, rank: int) -> dict[str, float]:
    """SMs a collective of each record category holds on ``rank``'s GPU while in flight,
    from ``strategies.cost.sm_share.window_sms`` (the estimate's source): the data-parallel
    stream's and the context-parallel ring's NCCL's, the expert all-to-all's its
    dispatcher's; TP collectives hold none here (the userbuffers' overlapped forward ones
    pass their own, ``TensorParallelOps.tp_comm``). Every category 0 (nothing charged) while
    ``job.system.comm_sm_share`` is 0 or the GPU has no SM count."""
    gpu = job.cluster.gpu_of_rank(rank)
    w = window_sms(bool(get_system(job.system).comm_sm_share), gpu.sm_count,
                   GEMM_GENERATION.get(gpu.name), job.framework.tp_overlap,
                   DISPATCHERS.index(job.plan.moe_dispatcher))
    return {"dp": w.nccl, "cp": w.nccl, "ep": float(w.ep), "tp": 0.0, "tp_ub": w.tp,
            "pp_gather": 0.0}
