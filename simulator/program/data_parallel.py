"""``DataParallelOps``: the data-parallel collectives of
``simulator.program.builder.ProgramBuilder`` (a mixin: the builder holds the state): the
gradient buckets' reductions (dense over dp·cp, routed experts over their expert-data-parallel
group), DualPipe's mirror all-reduce, and ZeRO-3's per-layer or per-tensor gathers and
reduce-scatters. Units: seconds, bytes.
"""
from __future__ import annotations

from simulator.metrics import PARAM_GATHER_PREFIX
from simulator.program.ops import Collective, Compute
from strategies import placement
from strategies.cost.comm import grad_shard_params, measured_scale
from strategies.cost.comm.links import in_one_node
from strategies.cost.comm.zero3_per_tensor import per_tensor_excess
from strategies.stacks.param_gather import chunk_dispatch_forward, optimizer_head_start


def replica_lane(framework) -> str:
    """The stream hybrid sharding's replica all-reduces run on: a lane of their own where
    the stack runs them beside the gathers and reduce-scatters
    (``FrameworkProfile.replica_stream``: PyTorch FSDP's HSDP), else ``dp-comm`` (after each
    reduce-scatter, Megatron-Core's one communication stream)."""
    return "dp-comm replicas" if framework.replica_stream else "dp-comm"


class DataParallelOps:
    """``ProgramBuilder``'s data-parallel collectives (reads the builder's state)."""

    def _per_tensor(self, kind: str, count: float, nbytes: float, label: str, i: int,
                    deps: tuple = ()) -> None:
        """ZeRO-3 one tensor at a time (``StageCosts.z3_*``): ``count`` calls of the dp
        group's collective back to back, then what each call costs beyond it (the ``n`` list
        copies and the HBM passes: ``comm.zero3_per_tensor.per_tensor_excess``) on the communication
        stream; the next compute waits for all of it. Alone on the wire:
        ``comm.per_tensor_time``, the estimate's charge."""
        name = "AG" if kind == "allgather" else "RS"
        ring = self.coll("dp-comm", kind, "dpcp", nbytes / count, count, "dp",
                         f"{name} z3 tensors {label}", i, deps=deps, tag="dp")
        group = self.group["dpcp"]
        dp = len(group)
        stride = (group[1] - group[0]) if dp > 1 else 1
        extra = float(per_tensor_excess(kind, count, nbytes, dp, stride, self.cluster,
                                        self.c.copy_gap, copy_rate=self.c.copy_rate))
        copies = self._add(Compute, "dp-comm", seconds=extra, kind="dp",
                           label=f"calls z3 {label}", microbatch=i, chunk=-1,
                           deps=(ring,) if ring is not None else ())
        self.wait.append(copies)

    def _z3(self, label: str, i: int, fwd: bool = True) -> list[int]:
        """ZeRO-3: gather this stage's parameters, the first layer's share blocking (the
        dense over dp, the routed experts over their expert-data-parallel group:
        ``_dp_parts``); returns the gathers of the rest. A per-tensor stack gathers every
        tensor of the pass before its compute."""
        if self.p.zero != 3 or not self.copies:
            return []
        if self.c.z3_fwd_n > 0:
            n, params = ((self.c.z3_fwd_n, self.c.z3_fwd_params) if fwd
                         else (self.c.z3_bwd_n, self.c.z3_bwd_params))
            if n > 0:
                self._per_tensor("allgather", n, self.c.param_bytes * params, label, i,
                                 deps=(self.last_compute,))
            return []
        L = self.stage_layers
        parts = self._dp_parts(self.stage_params)
        rest: list[int] = []          # the first layer's share blocks, the rest is returned
        # one call per layer (FSDP's unit), each paying the ring's whole latency: ``calls``
        # back to back of ``1/L`` of the stage's parameters (docs/calibration.md §5.26)
        for calls, out in ((1, self.wait), (L - 1, rest)):
            for dim, k, suffix in parts:
                op = self.coll("dp-comm", "allgather", dim, self.c.param_bytes * k / L, calls,
                               "dp", f"AG z3 {label}{suffix}", i, tag="dp")
                out += [op] if op is not None else []
        return rest

    def _close_grads(self, todo: list, final: bool, label: str, i: int, z3: bool,
                     c: int) -> None:
        """After the last gradient work of micro-batch ``i``: the buckets not reduced live
        wait for the end of the schedule (last micro-batch) or, with ZeRO-2 without overlap,
        are reduced now; ZeRO-3 reduce-scatters the gradients."""
        if final and self.grad_sync:
            self.pending_buckets += todo
        elif self.every_mb and todo:
            # ZeRO-2 without overlap: reduced at the end of the backward, the next compute waits
            for _, params in todo:
                self._grad_reduce(params, deps=(self.last_compute,), record=False)
            self.wait += self.dp_tails()
        if z3:
            self._z3_reduce(label, i, c)

    def _launch(self, todo: list, pos: int, live: bool, record: bool = True) -> list:
        """Reduce the buckets complete once ``pos`` items are done (when reducing live);
        ``record``: these are the step's last reductions (their parameters are gathered after
        the optimizer)."""
        while live and todo and todo[0][0] < pos:
            self._grad_reduce(todo.pop(0)[1], deps=(self.last_compute,), record=record)
        return todo

    def _dp_parts(self, params: float) -> list[tuple[str, float, str]]:
        """``(group, parameters, label suffix)`` of a data-parallel collective over ``params``
        of this stage's parameters (a gradient bucket, ZeRO-3's gathers and reduce-scatters):
        the routed experts' share goes over the expert-data-parallel group and the rest over
        the dp·cp ranks that hold the dense copies (group ``dpcp``, ``comm.dp_parts``, the
        estimate's and the bound's rule); a group of one rank (no expert replica) is skipped
        by ``coll``."""
        if self.edp_params <= 0:     # no stage parameters, or none over the experts' group
            return [("dpcp", params, "")]
        e = params * self.edp_params / self.stage_params
        return [("dpcp", params - e, ""), ("edp", e, " experts")]

    def _grad_reduce(self, params: float, deps: tuple, record: bool = True) -> None:
        kind = "allreduce" if self.full_grad_reduce else "reduce_scatter"
        name = "AR" if self.full_grad_reduce else "RS"
        label = f"{name} dp bucket {len(self.reduced)}" if record else f"{name} dp shard"
        for dim, n, suffix in self._dp_parts(params):
            op = self.coll("dp-comm", kind, dim, self.c.grad_bytes * n, 1.0, "dp",
                           label + suffix, deps=deps, tag="dp")
            if kind == "reduce_scatter":
                self._replica_reduce(dim, self.c.grad_bytes * n, 1.0, label + suffix,
                                     (op,) if op is not None else deps)
        if record:
            self.reduced.append(params)

    def _mirror_reduce(self) -> None:
        """DualPipe: ranks ``r`` and ``pp-1-r`` hold the same two stages, so the gradients of
        both copies are summed between them before the optimizer (deepseek-ai/DualPipe's
        example adds each rank's mirror's gradients): one all-reduce of this rank's gradients
        (with ZeRO >= 1 the shard its optimizer steps: the dense 1/dp, the routed experts' 1/edp,
        ``comm.grad_shard_params``) over the two ranks, on the dp-comm stream."""
        pp_group = self.group["pp"]
        pair = tuple(sorted((pp_group[self.stage], pp_group[self.p.pp - 1 - self.stage])))
        p = self.p
        nbytes = self.c.grad_bytes * float(grad_shard_params(
            self.stage_params, self.stage_expert, p.tp, p.cp, p.dp, p.ep, p.expert_tp, p.zero,
            p.shard_dp))
        # a measured profile: the estimate's group (``analytic``: stride 1 when the
        # pipeline's ends share a node, ``(pp-1)·stride < G``, else G)
        G = self.cluster.gpus_per_node
        spread = (p.pp - 1) * (placement.world_size(p) // p.pp) >= G
        scale = float(measured_scale("allreduce", nbytes, 2, in_one_node(2, G if spread else 1,
                                                                         G), self.cluster)) \
            if self.profiled else 1.0
        self._add(Collective, "dp-comm", kind="allreduce", group=pair, nbytes=float(nbytes),
                  algorithm=self.layout.algorithm(pair, "allreduce"), tag="mirror",
                  category="dp", label="AR mirror copies", repeat=scale,
                  deps=(self.last_compute,))

    def _z3_layered(self) -> bool:
        """ZeRO-3 reduce-scatters layer by layer (not one tensor at a time): the backward
        runs one layer per compute op so that each layer's reduce-scatter waits for it."""
        return self.p.zero == 3 and self.copies and self.c.z3_rs_n <= 0

    def _z3_rs(self, share: float, deps: tuple, label: str, i: int) -> None:
        """The reduce-scatters of ``share`` of this stage's gradients (dense over dp, routed
        experts over edp: ``_dp_parts``) after ``deps``: ``share·L`` calls of one layer's
        (FSDP's unit), each paying the ring's whole latency."""
        L = self.stage_layers
        for dim, k, suffix in self._dp_parts(self.stage_params):
            op = self.coll("dp-comm", "reduce_scatter", dim, self.c.grad_bytes * k / L,
                           share * L, "dp", f"RS z3 {label}{suffix}", i, deps=deps, tag="dp")
            self._replica_reduce(dim, self.c.grad_bytes * k / L, share * L,
                                 f"z3 {label}{suffix}", (op,) if op is not None else deps, i)

    def _replica_reduce(self, dim: str, nbytes: float, repeat: float, label: str,
                        deps: tuple, i: int = -1) -> None:
        """Hybrid sharding: after a gradient reduce-scatter of ``nbytes`` per rank over the
        shard group ``dim`` (``dpcp`` the dense, ``edp`` the routed experts' grid within a
        replica), the all-reduce of the rank's ``1/len(group)`` share over the ranks that
        hold the same shard (``dprep``, one group for both: FSDP's HSDP, Megatron-Core's
        all-reduce across distributed-optimizer instances; ``comm.dp_groups.replica_sum``, the
        estimate's charge), ``repeat`` calls after ``deps`` (the reduce-scatter, or what it
        would have waited for where its group is one rank) on the stack's lane
        (``replica_lane``); none with one replica."""
        n = len(self.group[dim])
        self.coll(self.rep_lane, "allreduce", "dprep", nbytes / n, repeat, "dp",
                  f"AR replicas {label}", i, deps=deps, tag="dp")

    def dp_tails(self) -> list[int]:
        """The last op of the dp stream and of the replicas' lane where that is its own
        (``replica_lane``): what the optimizer, or a stall on the reduction, waits for."""
        lanes = ("dp-comm",) if self.rep_lane == "dp-comm" else ("dp-comm", self.rep_lane)
        return [self.streams[s][-1].id for s in lanes if self.streams.get(s)]

    def _z3_reduce_layers(self, nl: int, done: int, c: int, main: int | None, label: str,
                          i: int) -> None:
        """ZeRO-3: the reduce-scatter of the ``nl`` layers whose backward (or ``W``) compute
        ``main`` just produced their gradients, ``done`` layers of chunk ``c`` so far
        (PyTorch FSDP's post-backward hook per unit, DeepSpeed ZeRO-3's per-parameter
        reduce hook: a unit's gradients are reduce-scattered once its backward ends). The
        chunk's last layer is left to ``_z3_reduce`` (after the embedding's backward), so
        the stage's ``(L-1)/L`` share is spread over the chunk's other layers and ``1/L``
        is exposed, the estimate's rule (``sharded_exposed``)."""
        n = len(self.chunk[c])
        if n <= 1:
            return
        own = min(nl, n - 1 - (done - nl))          # this piece's layers but the chunk's last
        if own > 0:
            L = self.stage_layers
            self._z3_rs((L - 1) / L * own / (n - 1), (main,), label, i)

    def _z3_reduce(self, label: str, i: int, c: int) -> None:
        """ZeRO-3 after the pass's last gradient compute: one tensor at a time, or the
        stage's last layer's ``1/L`` share (the others went layer by layer:
        ``_z3_reduce_layers``; all ``(L-1)/L`` here when the chunk is one layer)."""
        if self.c.z3_rs_n > 0:
            self._per_tensor("reduce_scatter", self.c.z3_rs_n,
                             self.c.grad_bytes * self.c.z3_rs_params, label, i,
                             deps=(self.last_compute,))
            return
        L = self.stage_layers
        if len(self.chunk[c]) <= 1 and L > 1:
            self._z3_rs((L - 1) / L, (self.last_compute,), label, i)
        self._z3_rs(1 / L, (self.last_compute,), label, i)


class FillGathers:
    """A one-chunk pipeline's overlapped parameter gathers at the stage's first forward
    (``stacks.param_gather.gathers_on_fill_path``, docs/calibration.md §5.194): Megatron-Core's
    forward pre-hook of a module (``finish_param_sync``) waits for its bucket's all-gather,
    then dispatches the next bucket's, whose NCCL stream waits for the compute stream's work
    so far. So the first bucket (the embedding's and the first layers') is gathered whole
    before the forward, and each later one beside the forward of the module before it.
    Buckets in the gradient buckets' reduction order (``ChunkBuckets.buckets``), gathered
    from the last. ``layers``: for each layer (forward order) ``(wait, upto)``: the bucket of
    its attention, which its forward waits for, and of its MLP, whose gather (and the next
    one, which the MLP's hook dispatches) runs beside the layer's forward; the next layer
    waits for it (a layer is one compute op here). The last layer waits for its MLP's
    bucket too, the LM head for bucket 0."""

    def __init__(self, buckets, layers: int, chunk: int = 0) -> None:
        self.chunk = chunk
        ends = [idx for idx, _ in buckets.buckets]
        h = 1 if buckets.head else 0

        def bucket_of(item: int) -> int:
            return next(k for k, e in enumerate(ends) if e >= item)
        self.params = [p for _, p in buckets.buckets]
        self.embedding = bucket_of(h + 2 * layers) if buckets.embedding else None
        # layer n's MLP is item h + 2b, its attention h + 2b + 1 (b = layers - 1 - n)
        self.layers = [(bucket_of(h + 2 * b + 1), bucket_of(h + 2 * b))
                       for b in range(layers - 1, -1, -1)]
        if layers:
            self.layers[-1] = (self.layers[-1][1], self.layers[-1][1])
        self.head = 0 if buckets.head else None
        self.ops: dict[int, list[int]] = {}     # bucket -> its gathers (dense, experts)
        self.done = len(self.params)            # the lowest bucket waited for so far
        self.sent = len(self.params)            # the lowest bucket dispatched so far

    def counts(self) -> list[int]:
        """The forward's pieces (layer counts): a piece starts at each layer that waits for
        a bucket not waited for before it."""
        out, seen = [], len(self.params)
        for b, _ in self.layers:
            if b < seen or not out:
                out.append(0)
                seen = min(seen, b)
            out[-1] += 1
        return out


class FillGatherOps:
    """``ProgramBuilder``'s parameter gathers at the stage's first forward (``FillGathers``;
    a mixin: the builder holds the state)."""

    def _gather_bucket(self, b: int, deps: tuple | None = None) -> None:
        """Bucket ``b``'s all-gather (the dense over dp·cp, the routed experts over their
        group, ``_dp_parts``) on the dp-comm stream, after ``deps`` (None: the compute
        stream's work so far and what the next compute waits for); once, and none below
        bucket 0."""
        fill = self.fill
        if b < 0 or b >= fill.sent:
            return
        fill.sent = b
        width = (self.c.gather_by_stage[self.stage] if self.c.gather_by_stage
                 else self.c.param_bytes)
        ops = []
        name = f"bucket {b}" if len(self.fills) < 2 else f"chunk {fill.chunk} bucket {b}"
        for dim, k, suffix in self._dp_parts(fill.params[b]):
            op = self.coll("dp-comm", "allgather", dim, width * k, 1.0, "dp",
                           f"{PARAM_GATHER_PREFIX} {name}{suffix}",
                           deps=(*self.wait, self.last_compute) if deps is None else deps,
                           tag="dp")
            if op is not None:
                ops.append(op)
                self.n_param_gathers += 1
        fill.ops[b] = ops

    def fill_dispatch(self, c: int, deps: tuple) -> None:
        """All of chunk ``c``'s buckets, last first, after ``deps`` (the interleaved
        schedule's ``param_sync_func``: ``start_param_sync`` dispatches every bucket of the
        chunk; its forward's pre-hooks then only wait)."""
        self.fill = self.fills[c]
        for b in range(len(self.fill.params) - 1, -1, -1):
            self._gather_bucket(b, deps)

    def fill_before_forward(self, c: int) -> "FillGathers | None":
        """Before the rank's next forward, of chunk ``c``: the chunks the interleaved
        schedule dispatches here (``stacks.param_gather.chunk_dispatch_forward``; chunks 0
        and 1 before the first, after nothing), then the gathers of ``c`` if this is its
        first forward (made current; None otherwise), the first bucket's dispatched if
        nothing dispatched it before (``fill_start``)."""
        n, self.n_forwards = self.n_forwards, self.n_forwards + 1
        if self.at_start:
            # the chunks dispatched before each forward, by its index (a pure function of
            # the plan and the stage: worked out once), in the chunks' order
            due = self._memo.get("fill dispatch")
            if due is None:
                group = self.p.microbatch_group_size or self.p.pp
                due = self._memo["fill dispatch"] = {}
                for k in self.fills:
                    at = chunk_dispatch_forward(k, group, self.stage)
                    due.setdefault(max(at, 0), []).append((k, at))
            for k, at in due.get(n, ()):
                if not self.fills[k].ops:
                    self.fill_dispatch(k, () if at < 0 else (self.last_compute,))
        fill = self.fills.get(c)
        if fill is None or c in self.fill_first:
            return None
        self.fill_first.add(c)
        self.fill = fill
        if not fill.ops:
            self.fill_start()
        return fill

    def optimizer_prologue(self) -> None:
        """Chunk 0's gathers dispatched inside the optimizer step
        (``stacks.param_gather.gather_with_optimizer``, §5.200), the step seen from chunk
        0's update on: chunk 0's gathers at its start, beside the other chunks' update
        (``optimizer_head_start``, ``opt_head`` seconds on the compute stream, left out of
        the optimizer at the step's end); the schedule then dispatches chunk 1 behind them
        and chunk 0's first forward waits for them."""
        p, c = self.p, self.c
        lead = c.embedding_params if self.vs(0) == 0 else 0.0
        trail = c.head_params if self.vs(p.vpp - 1) == self.last_vs else 0.0
        self.opt_head = float(optimizer_head_start(c.optimizer_by_stage[self.stage],
                                                   self.stage_params, lead, trail, p.vpp))
        self.fill_dispatch(0, ())
        self.compute(self.opt_head, "optimizer", "optimizer (chunks 1+, before chunk 0's use)")

    def fill_start(self) -> None:
        """The first bucket's gather, once the stage's first forward may start (after its
        receive of micro-batch 0: what that forward waits for)."""
        self._gather_bucket(len(self.fill.params) - 1)

    def fill_need(self, b: int | None, upto: int | None = None) -> None:
        """The next compute (a forward unit) waits for the gathers down to bucket ``b``
        (waiting for each dispatches the next bucket's); the gathers down to ``upto`` (the
        unit's last bucket) and the one after are dispatched beside it."""
        fill = self.fill
        if b is None:
            return
        while fill.done > b:
            fill.done -= 1
            self.wait += fill.ops[fill.done]
            self._gather_bucket(fill.done - 1)
        for k in range(fill.sent - 1, (b if upto is None else upto) - 2, -1):
            self._gather_bucket(k)
