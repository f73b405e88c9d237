"""``ProgramBuilder``: turns one rank's pipeline actions into ops on its streams.

Per layer block (a whole model chunk with ``granularity="chunk"``, one layer with
``"layer"``): the compute, then the blocking collectives that close it (EP all-to-all,
TP all-reduce or SP reduce-scatter + all-gather pairs, the tail of the CP ring). With
``tp_comm_overlap`` all but ``1/tp_overlap_chunks`` of the TP traffic runs beside the compute;
CP ring attention runs beside the attention core, its last ``cp_exposed_fraction`` after
(``strategies.cost.system.SystemConfig``, carried by the ``StageCosts`` record).
Gradient buckets (``simulator.program.grad_buckets``) are reduced on the dp-comm stream during the last
micro-batch's backward of each chunk (``overlap_grad_reduce``) or after the schedule. All
durations and bytes come from ``StageCosts``. Units: seconds, bytes.
"""
from __future__ import annotations

from typing import Any, Callable

from simulator.program.grad_buckets import bucket_segments, chunk_buckets
from simulator.metrics import PARAM_GATHER_PREFIX
from simulator.program.ops import STREAMS, Collective, Compute, Program, Recv, Send
from strategies.schedules.exchanges import Exchange
from strategies.schedules.p2p_streams import stream_of
from strategies import placement
from strategies.cost.comm import (collective_time, dp_parts, grad_shard_params, has_dp_copies,
                                  in_one_node, measured_scale, per_tensor_excess, profile_of)
from strategies.cost.stage import (StageCosts, attn_down_ops, attn_full_rc_ops,
                                  attn_rope_bytes, attn_tp_swap, chunk_layers, chunk_sum,
                                  dgrad_reduce_pieces, dgrad_reduce_time,
                                  down_reduce_pieces,
                                  sp_grad_allreduce_bytes, sp_regather_pieces, tp_kind_bytes)
from strategies.stacks.comm_rules import full_grad_reduce, grad_path
from strategies.schedules import Step, get_schedule, head_rank


_TP_KINDS = {False: ("allreduce",), True: ("reduce_scatter", "allgather")}   # by sp
_TP_TAG = {"allreduce": "AR", "reduce_scatter": "RS", "allgather": "AG"}


class ProgramBuilder:
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
                      for d in ("tp", "cp", "dp", "ep", "etp", "edp", "dpcp", "pp")}
        # the tied embedding's gradient group: the first stage and the LM head's
        head = head_rank(p.schedule, p.pp, p.vpp)
        ends = (self.group["pp"][0], self.group["pp"][head])
        self.group["tied"] = ends if self.stage in (0, head) and head != 0 else (rank,)
        self.layout = layout
        self.streams: dict[str, list] = {s: [] for s in STREAMS}
        self.next_id, self.wait, self.last_compute = 0, [], None
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
        # the stack's bucketing by pipeline rank and chunk (``BucketRule.chunk_bucketed``:
        # Megatron-Core cuts only rank 0's first chunk into buckets, §5.92; DualPipe's copies
        # and a split backward, which Megatron-Core does not run, keep the size rule)
        rule = job.framework.dp_bucket
        self.buckets = {c: chunk_buckets(costs, self.vs(c) == 0, self.vs(c) == self.last_vs,
                                         len(self.chunk[c]),
                                         [x.layer_params for x in self.chunk[c]],
                                         rule.chunk_bucketed(self.stage, c, self.mirrored
                                                             or bool(self.sched.splits_backward),
                                                             self.every_mb))
                        for c in chunks}
        # the last micro-batch through each chunk (its backward completes the gradients)
        self.final_mb = {c: self.m - 2 + c if self.mirrored else self.m - 1 for c in chunks}
        self.pending_buckets: list = []
        # a split backward: B (input gradient, communication) then, later, W (weight gradient,
        # compute only, then the chunk's gradient reduction); else one backward pass
        self.split = bool(self.sched.splits_backward)
        self.reduced: list[float] = []      # parameters of each gradient bucket reduced
        self.n_param_gathers = 0
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
        # partner's stash is freed, the memory model's rule, ``schedules.base.stash_frontier``)
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
        self._lanes: dict[tuple[str, str], str] = {}    # ``_overlapped_lane``'s streams
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
             remote_scale: float = 1.0, nvlink_share: float = 1.0) -> int | None:
        group = self.group[dim]
        if len(group) < 2 or nbytes <= 0 or repeat <= 0:
            return None
        algo = self.layout.algorithm(group, kind)
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
                                               deps, float(remote_scale), float(nvlink_share)))
        return op_id

    # ------------------------------------------------------------------ layer blocks
    def _once(self, key: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, worked out once per builder under ``key`` (``make`` must be a pure
        function of ``self.c`` and the plan: the same value every block)."""
        memo = self._memo
        if key in memo:
            return memo[key]
        out = memo[key] = make()
        return out

    def _tp_ops(self, n: float, attn: float, fwd: bool) -> list[tuple[str, float, float]]:
        """``(kind, bytes, repeat)`` of ``n`` tensor-parallel collectives (or SP pairs), of
        which ``attn`` are the attention's: where its column side runs at other widths
        (``cost.stage.attn_tp_swap``: MLA's latents; the backward only where its reduction
        is blocking, ``rd_bytes`` 0) each of those is compiled at its own width, and under
        SP its pair's partner carries the rest of ``2·tp_bytes`` (ring all-gather and
        reduce-scatter times are one affine function of bytes), so a contention-free network
        gives the estimate's ``attn_tp_saved`` less (§5.81)."""
        cs, sp = self.c, bool(self.p.sp)
        kinds = _TP_KINDS[sp]
        swap = attn_tp_swap(cs, sp, fwd) if attn > 0 and (fwd or cs.rd_bytes <= 0) else None
        if swap is None:
            return [(kd, cs.tp_bytes, n) for kd in kinds]
        kind, widths = swap
        nb = tp_kind_bytes(cs, kind)
        ops = []
        for kd in kinds:
            if kd == kind:
                ops += [(kd, cs.tp_bytes, n - attn)] + [(kd, w * nb, attn) for w in widths]
            elif 2 * cs.tp_bytes - nb == cs.tp_bytes:
                ops.append((kd, cs.tp_bytes, n))
            else:
                ops += [(kd, cs.tp_bytes, n - attn), (kd, 2 * cs.tp_bytes - nb, attn)]
        return ops

    def tp_comm(self, n: float, label: str, i: int, c: int, start: tuple, main: int,
                exposed: float = 0.0, after: int | None = None, less: float = 0.0,
                attn: float = 0.0, fwd: bool = True) -> None:
        """``n`` tensor-parallel collectives closing a block (blocking unless overlapped;
        with overlap, the share ``exposed`` of them blocking whole: a backward's
        ``StageCosts.tp_overlap_bwd_exposed``). The blocking ones start after ``main`` and
        ``after`` (the block's expert all-to-all: ``_close_block``). ``less``: reductions of
        them that ran beside the weight gradients (``reduce_split``), not compiled here.
        ``attn``: how many of them are the attention's, in a forward (``fwd``) or backward
        pass (``_tp_ops``)."""
        if n <= 0 or self.c.tp_bytes <= 0:
            return
        tag = _TP_TAG
        last = None
        share = attn / n
        if self.p.tp_comm_overlap:
            k = self.c.tp_overlap_chunks
            whole = n * exposed
            n = n - whole if exposed > 0 else n
            m = n * (1 - 1 / k)
            for kd, nbytes, rep in self._once(("tp_ops", m, m * share, fwd),
                                              lambda: self._tp_ops(m, m * share, fwd)):
                self.coll("tp-comm", kd, "tp", nbytes, rep, "tp",
                          f"{tag[kd]} tp {label}", i, c, deps=start)
            n = n / k + whole if exposed > 0 else n / k
        if less > 0:
            # ``less`` of the reductions ran beside the weight gradients (``reduce_split``):
            # under SP the rest are bf16 reduce-scatters of ``rd_bytes`` and the gathers
            # carry the remainder of the pair's bytes (``tp_bytes`` is the pair's mean;
            # ring all-gather and reduce-scatter times are one affine function of bytes)
            rd = self.c.rd_bytes
            ops = ((("reduce_scatter", rd, n - less), ("allgather", 2 * self.c.tp_bytes - rd, n))
                   if self.p.sp else (("allreduce", self.c.tp_bytes, n - less),))
            for kd, nbytes, rep in ops:
                last = self.coll("tp-comm", kd, "tp", nbytes, rep, "tp", f"{tag[kd]} tp {label}",
                                 i, c, deps=(main, after)) or last
            if last is not None:
                self.wait.append(last)
            return
        for kd, nbytes, rep in self._once(("tp_ops", n, n * share, fwd),
                                          lambda: self._tp_ops(n, n * share, fwd)):
            last = self.coll("tp-comm", kd, "tp", nbytes, rep, "tp",
                             f"{tag[kd]} tp {label}", i, c, deps=(main, after)) or last
        if last is not None:
            self.wait.append(last)

    def rc_gathers(self, nl: float, label: str, i: int, c: int, rc: int | None,
                   after: int | None) -> None:
        """The all-gathers MLA's recomputed up projections run again over ``nl`` mean
        layers (``cost.stage.attn_rc_gathers``): one per column linear at its latent's
        width, blocking, after the recomputation (and its all-to-all)."""
        cs = self.c
        for w in (cs.attn_w, cs.attn_w2):
            if w > 0:
                ag = self.coll("tp-comm", "allgather", "tp", w * cs.tp_ag_bytes,
                               nl * cs.tp_attn_rc, "tp", f"AG tp recompute {label}", i, c,
                               deps=(rc, after))
                if ag is not None:
                    self.wait.append(ag)

    def full_rc_ops(self, nl: float, n_tp: float, label: str, i: int, c: int,
                    rc: int | None, after: int | None) -> None:
        """The blocking collectives of MLA's attention forward that full recomputation reruns
        (``cost.stage.attn_full_rc_ops``) over the recomputed layers of ``nl``: the mean
        layer's share (``tp_attn_full_rc``), or under block partial recomputation the layers
        ``chunk_recompute_comm`` counts (its ``n_tp``, two per layer), after the rerun's TP
        collectives."""
        cs = self.c
        layers = n_tp / 2 if cs.recompute_cap > 0 else nl * cs.tp_attn_full_rc
        for kd, nb in attn_full_rc_ops(cs, bool(self.p.sp)):
            if nb > 0:
                op = self.coll("tp-comm", kd, "tp", nb, layers, "tp",
                               f"{_TP_TAG[kd]} tp recompute attn {label}", i, c,
                               deps=(rc, after))
                if op is not None:
                    self.wait.append(op)

    def regather(self, nl: float, secs: float, label: str, i: int, c: int,
                 start: tuple) -> float:
        """Sequence parallelism's backward re-gathers of ``nl`` mean layers
        (``cost.stage.sp_regather_pieces``) that outlast the data-gradient GEMM they were
        issued before, ``t_ag`` their contention-free all-gather time (the estimate's): one
        all-gather of all their bytes on the tp-comm stream beside a compute op of those
        GEMMs, carved out of the block's ``secs``; the rest of the block waits for both, so
        they expose ``sum(share·(t_ag - dgrad))`` on a contention-free network
        (``cost.stage.sp_regather_exposed``) and more where the flows slow the gather. The
        re-gathers their GEMM hides are not compiled (no exposure, and their link load is
        left out: every one compiled added 39 % events to GPT-3 175B's folded step for a
        step equal to 3e-15; docs/calibration.md §5.70). Pieces of another width (MLA's up
        projections' latents, §5.76) are compiled as their own all-gather, one per width.
        Returns the seconds carved out."""
        cs = self.c
        counts: dict[float, float] = {}     # re-gathers compiled, by width (§5.76)
        d = 0.0
        for share, width, dgrad in self._once(("regather",), lambda: sp_regather_pieces(cs)):
            t_ag = self._piece_time("ag", width)
            if share > 0 and dgrad < t_ag:
                counts[width] = counts.get(width, 0.0) + nl * share
                d += nl * share * dgrad
        if not counts:
            return 0.0
        deps = start + ((self.last_compute,) if self.last_compute is not None else ())
        ags = [ag for width, n in counts.items()
               if (ag := self.coll("tp-comm", "allgather", "tp", cs.rg_bytes * width, n, "tp",
                                   f"AG tp re-gather {label}", i, c, deps=deps)) is not None]
        if not ags:
            return 0.0
        d = min(d, secs)
        self.compute(d, "backward", label, i, c, force=True)
        self.wait += ags
        return d

    def _piece_time(self, kind: str, width: float) -> float:
        """Contention-free seconds of a re-gather (``kind`` "ag") or data-gradient reduction
        ("rd") of ``width`` times the hidden-width bytes (1: QKV, fc1; MLA's up projections'
        latents, §5.76), as the estimate prices it; worked out once per builder."""
        key = (kind, width)
        t = self._piece_s.get(key)
        if t is None:
            t = float(collective_time("allgather", self.c.rg_bytes * width, self.p.tp, 1,
                                      self.cluster)) if kind == "ag" else \
                float(dgrad_reduce_time(self.c, self.p.tp, bool(self.p.sp), self.cluster, width))
            self._piece_s[key] = t
        return t

    def reduce_split(self, nl: float, secs: float) -> float:
        """The column-parallel data gradients' reductions of ``nl`` mean layers' backward
        (``cost.stage.dgrad_reduce_pieces``), each started before its weight-gradient GEMM
        and waited for after it: those that outlast their GEMM are compiled as one
        reduction on the tp-comm stream beside a compute op of those GEMMs carved out of
        the block's ``secs`` (``_close_block`` places both after the block, before its
        blocking collectives), so they expose ``sum(share·(t_red - wgrad))`` on a
        contention-free network (``cost.stage.dgrad_reduce_hidden``); those their GEMM
        hides are taken out of the blocking collectives and not compiled (no exposure,
        their link load left out, as ``regather``'s). The counted hidden-width collective of
        each piece's group leaves the blocking ones; MLA's attention runs it as its up
        projections' two narrower reductions, each compiled at its own width (§5.76).
        MLA's column-parallel down projections' input-gradient reductions
        (``cost.stage.down_reduce_pieces``) join them at the hidden width, each beside its
        own weight gradient (§5.99). Returns the seconds carved out."""
        counts: dict[float, float] = {}     # reductions compiled, by width (§5.76)
        d = n = hid = 0.0
        for share, pieces in self._once(("reduce",), lambda: dgrad_reduce_pieces(self.c)):
            if share <= 0:
                continue
            run = False
            for width, wgrad in pieces:
                t = self._piece_time("rd", width)
                if wgrad < t:
                    counts[width] = counts.get(width, 0.0) + nl * share
                    d += nl * share * wgrad
                    run = True
            # the counted collective leaves the blocking ones: run as these pieces instead
            if run:
                n += nl * share
            else:
                hid += nl * share
        # MLA's column-parallel down projections' input-gradient reductions, each beside its
        # own weight gradient (``cost.stage.down_reduce_hidden``, §5.99): those that outlast
        # it compiled with the rest; all leave ``attn_down_ops``' blocking ones
        # (``_close_block``)
        if self.c.tp_down > 0:
            t = self._piece_time("rd", 1.0)
            for wgrad in self._once(("down_reduce",), lambda: down_reduce_pieces(self.c)):
                if wgrad < t:
                    counts[1.0] = counts.get(1.0, 0.0) + nl
                    d += nl * wgrad
        d = min(d, secs)
        self._reduce = (d, counts, n + hid)
        return d

    def segments(self, c: int, counts: list[int], backward: bool) -> list[list[tuple]]:
        """Chunk ``c``'s layers cut into pieces of ``counts`` layers (in forward order, or
        backward order for a backward), each piece as ``(count, per-layer record)`` runs.
        Worked out once per builder (the callers read it, never change it)."""
        key = (c, tuple(counts), backward)
        hit = self._segments.get(key)
        if hit is not None:
            return hit
        layers = self.chunk[c][::-1] if backward else self.chunk[c]
        out, pos = [], 0
        for n in counts:
            runs: list[list] = []
            for x in layers[pos:pos + n]:
                if runs and runs[-1][1] is x:
                    runs[-1][0] += 1
                else:
                    runs.append([1, x])
            out.append([tuple(r) for r in runs])
            pos += n
        self._segments[key] = out
        return out

    def pieces(self, c: int, backward: bool, by_layer: bool = False) -> list[list[tuple]]:
        """Chunk ``c`` as one piece, or one per layer (``granularity="layer"``, or
        ``by_layer``: an overlapped pair's passes, interleaved layer by layer)."""
        n = len(self.chunk[c])
        return self.segments(c, [1] * n if by_layer or self.gran == "layer" else [n],
                             backward)

    def block(self, fwd: bool, items: list[tuple], label: str, i: int, c: int) -> int:
        """Compute of the layers ``items`` (``(count, per-layer record)`` runs) with their
        communication; returns the main compute id. The backward is the whole pass, or its
        input-gradient part ``B`` when the schedule splits the backward (its ``W`` is
        ``wgrad``)."""
        cs, kind = self.c, "forward" if fwd else "backward"
        nl = sum(n for n, _ in items)
        rc_s = chunk_sum(items, lambda x: x.layer_recompute)
        if not fwd and rc_s > 0:
            start = tuple(self.wait)
            # main's block partial recompute charges the chunk's min(N, n) layers, each
            # kind's share at its own layer's cost; otherwise each kind's own recomputation
            secs, n_tp, n_ep = cs.chunk_recompute_comm(nl, len(self.chunk[c]), items)
            rc = self.compute(secs if cs.recompute_cap > 0 else rc_s, "recompute", label, i, c)
            a2a = None
            for n, x in items:      # the recomputed forward's all-to-all, each kind's bytes
                share = n_ep if n == nl else n_ep * n / nl
                ep = self.coll("ep-comm", "alltoall", "ep", x.ep_bytes, share, "ep",
                               f"A2A ep {label}", i, c, deps=(rc,),
                               remote_scale=cs.ep_remote_scale,
                               nvlink_share=cs.ep_nvlink_share) if n_ep > 0 else None
                self.wait += [ep] if ep is not None else []
                a2a = ep if ep is not None else a2a
            # its TP collectives after its all-to-all, in sequence (``_close_block``)
            self.tp_comm(n_tp, label, i, c, start, rc, after=a2a)
            if cs.tp_attn_rc > 0:   # MLA's recomputed up projections' gathers (§5.81)
                self.rc_gathers(nl, label, i, c, rc, a2a)
            if cs.tp_attn_full_rc > 0:  # full recompute's rerun MLA gathers (§5.85)
                self.full_rc_ops(nl, n_tp, label, i, c, rc, a2a)
        split = self.split
        secs = chunk_sum(items, (lambda x: x.layer_fwd) if fwd else
                         (lambda x: x.layer_bwd - split * x.layer_wgrad))
        if not fwd and self.defer_dw > 0:
            secs, self.defer_dw = secs - self.defer_dw, 0.0
        start = tuple(self.wait)
        if not fwd and self.t_regather > 0:
            secs -= self.regather(nl, secs, label, i, c, start)
        if not fwd and self.t_reduce > 0:
            secs -= self.reduce_split(nl, secs)
        if len(self.group["cp"]) > 1 and cs.cp_bytes > 0:
            attn = chunk_sum(items, (lambda x: x.attn_fwd) if fwd else (lambda x: x.attn_bwd))
            other = self.compute(secs - attn, kind, label, i, c)
            if cs.cp_exposed_fraction >= 1:     # all-gather CP: K/V gathered before the
                # attention core (forward and backward), dK/dV reduce-scattered after it
                pre = self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, nl, "cp",
                                f"CP {label}", i, c,
                                deps=(other,) if other is not None else start)
                self.wait += [pre] if pre is not None else []
                main = self.compute(attn, kind, label, i, c, force=True)
                if not fwd:
                    tail = self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, nl, "cp",
                                     f"CP {label}", i, c, deps=(main,))
                    self.wait += [tail] if tail is not None else []
                return self._close_block(fwd, items, label, i, c, start, main)
            main = self.compute(attn, kind, label, i, c, force=True)
            if cs.cp_torch:     # the waits sit inside the attention, before what closes it
                end = self.torch_ring(fwd, nl, label, i, c, other, start)
                self._close_block(fwd, items, label, i, c, start, main if end is None else end)
                return main
            vol, f = nl * (1 if fwd else 2), cs.cp_exposed_fraction
            self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, vol * (1 - f), "cp",
                      f"CP {label}", i, c, deps=(other,) if other is not None else start)
            tail = self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, vol * f, "cp",
                             f"CP {label}", i, c, deps=(main,))
            self.wait += [tail] if tail is not None else []
        else:
            main = self.compute(secs, kind, label, i, c, force=True)
        return self._close_block(fwd, items, label, i, c, start, main)

    def torch_ring(self, fwd: bool, nl: float, label: str, i: int, c: int, other,
                   start) -> int | None:
        """PyTorch's ring attention over ``nl`` layers (``StageCosts.cp_torch``): its traffic
        on the cp-comm stream beside the attention (the K/V all-gather; in the backward the
        all-gather again, the fp32 dK/dV ring, ``2c/(c-1)`` all-gathers' worth, and with full
        recomputation the rerun forward's gather), and its waits on the network
        (``cp_stall_fwd``/``cp_stall_bwd``, ``ring_attention.torch_ring_stalls``) on the
        compute stream, as the estimate charges them; returns that op (None without a wait)."""
        cs, n = self.c, len(self.group["cp"])
        vol = 1.0 if fwd else 1.0 + 2.0 * n / (n - 1) + (self.p.recompute == "full")
        self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, nl * vol, "cp", f"CP {label}",
                  i, c, deps=(other,) if other is not None else start)
        return self.compute(nl * (cs.cp_stall_fwd if fwd else cs.cp_stall_bwd), "cp",
                            f"CP wait {label}", i, c)

    def _close_block(self, fwd: bool, items: list[tuple], label: str, i: int, c: int,
                     start: tuple, main: int) -> int:
        """The collectives that close a layer block after its compute ``main``: MoE
        all-to-alls and the tensor-parallel collectives."""
        cs, nl = self.c, sum([n for n, _ in items])
        # MoE, each kind's layers (none for a dense layer): dispatch and combine all-to-alls
        # (ep_bytes holds both), and with expert tensor parallelism the all-gather of the
        # dispatched tokens and the reduce-scatter of the expert outputs over the etp group
        # (the mean layer's etp_bytes in the kind's proportion), all on the ep-comm stream
        moe = None
        if self._moe and (fwd or not self.lead_a2a):
            for ep in self.moe_colls(items, label, i, c, (main,)):
                (self.wait if self.hidden is None else self.hidden).append(ep)
                moe = ep
        # A layer's blocking TP collectives and its all-to-all are data-dependent, so they
        # run one after the other: Megatron-Core's MoE layer routes the reduce-scattered
        # (SP) or all-reduced attention output, dispatches, and combines before the next
        # layer's all-gather (moe/moe_layer.py ``MoELayer.forward``: router_and_preprocess
        # -> dispatch -> routed_experts_compute -> combine; the backward reverses it). The
        # exception: an overlapped pair's all-to-all (``hidden``), which its partner's
        # compute hides (DualPipe, ep_overlap's combined 1F1B); docs/calibration.md §5.53
        n_tp = nl * (cs.tp_per_layer_fwd if fwd else cs.tp_per_layer_bwd)
        after = moe if self.hidden is None else None
        less = 0.0
        if not fwd and self.t_reduce > 0:
            d, counts, less = self._reduce
            self._reduce = (0.0, {}, 0.0)
            if counts:
                # the weight-gradient GEMMs after the block's compute (and its all-to-all),
                # their reductions beside them (one per width); what comes next waits for both
                reds = [red for width, n in counts.items()
                        if (red := self.coll("tp-comm", "reduce_scatter" if self.p.sp
                                             else "allreduce", "tp", cs.rd_bytes * width, n,
                                             "tp", f"RD tp {label}", i, c,
                                             deps=(main, after))) is not None]
                saved, self.wait = self.wait, [after] if after is not None else []
                self.compute(d, "backward", label, i, c, force=True)
                self.wait = saved + reds
        self.tp_comm(n_tp, label, i, c, start, main,
                     0.0 if fwd else cs.tp_overlap_bwd_exposed, after=after, less=less,
                     attn=nl, fwd=fwd)
        rope_b = self._rope_b
        if rope_b > 0:      # MLA's rope key under SP, blocking (``attn_rope_time``, §5.81)
            kd = "allgather" if fwd else "reduce_scatter"
            rope = self.coll("tp-comm", kd, "tp", rope_b, nl, "tp",
                             f"{_TP_TAG[kd]} tp rope {label}", i, c, deps=(main, after))
            if rope is not None:
                self.wait.append(rope)
        # MLA's column-parallel down projections' own collectives, blocking
        # (``attn_down_ops``, §5.85): each closing the block after the layer's others; in
        # the backward their input-gradient reductions ran beside their weight gradients
        # where those are asynchronous (``reduce_split``, §5.99)
        async_rd = not fwd and self.t_reduce > 0
        for kd, nb in self._down[fwd]:
            if async_rd and kd in ("reduce_scatter", "allreduce"):
                continue
            dn = self.coll("tp-comm", kd, "tp", nb, nl, "tp",
                           f"{_TP_TAG[kd]} tp down {label}", i, c, deps=(main, after))
            if dn is not None:
                self.wait.append(dn)
        return main

    def moe_colls(self, items: list[tuple], label: str, i: int, c: int,
                  deps: tuple) -> list[int]:
        """The MoE collectives of the layers ``items`` after ``deps``, each kind's on the
        ep-comm stream: dispatch and combine all-to-alls (``ep_bytes`` holds both) and, with
        expert tensor parallelism, the all-gather of the dispatched tokens and the
        reduce-scatter of the expert outputs over the etp group (the mean layer's
        ``etp_bytes`` in the kind's proportion); returns each kind's last op."""
        cs, out = self.c, []
        for n, x in items:
            ep = self.coll("ep-comm", "alltoall", "ep", x.ep_bytes, n, "ep", f"A2A ep {label}",
                           i, c, deps=deps, remote_scale=cs.ep_remote_scale,
                           nvlink_share=cs.ep_nvlink_share)
            etp_bytes = cs.etp_bytes * x.ep_bytes / cs.ep_bytes if cs.ep_bytes > 0 else 0.0
            for kd, tag in (("allgather", "AG"), ("reduce_scatter", "RS")):
                ep = self.coll("ep-comm", kd, "etp", etp_bytes, n, "ep", f"{tag} etp {label}",
                               i, c, deps=deps) or ep
            if ep is not None:
                out.append(ep)
        return out

    # ------------------------------------------------------------------ passes
    def _per_tensor(self, kind: str, count: float, nbytes: float, label: str, i: int,
                    deps: tuple = ()) -> None:
        """ZeRO-3 one tensor at a time (``StageCosts.z3_*``): ``count`` calls of the dp
        group's collective back to back, then what each call costs beyond it (the flat ring's
        extra latency steps, the copies: ``comm.per_tensor_excess``) on the communication
        stream; the next compute waits for all of it. Alone on the wire:
        ``comm.per_tensor_time``, the estimate's charge."""
        name = "AG" if kind == "allgather" else "RS"
        ring = self.coll("dp-comm", kind, "dpcp", nbytes / count, count, "dp",
                         f"{name} z3 tensors {label}", i, deps=deps, tag="dp")
        group = self.group["dpcp"]
        dp = len(group)
        stride = (group[1] - group[0]) if dp > 1 else 1
        extra = float(per_tensor_excess(kind, count, nbytes, dp, stride, self.cluster,
                                        self.c.copy_gap))
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

    def forward(self, i: int, c: int) -> None:
        for _ in self._forward_blocks(i, c):
            pass

    def _forward_blocks(self, i: int, c: int, by_layer: bool = False, lead: bool = False):
        """The forward of micro-batch ``i``, chunk ``c``, yielding after each layer block
        (one layer each with ``by_layer``; ``lead``: once more before the first, after the
        embedding)."""
        label, vs = f"F{i}.c{c}", self.vs(c, i)
        if vs == 0:
            self.compute(self.c.embedding_fwd, "embedding", label, i, c)
        if lead:
            yield
        rest = self._z3(label, i)
        for items in self.pieces(c, False, by_layer):
            self.block(True, items, label, i, c)
            yield
        self.wait += rest
        if vs == self.last_vs:
            self.compute(self.c.head_fwd, "lm_head", label, i, c)
        self.produced[("F", i, c)] = (self.last_compute, *self.wait)

    def backward(self, i: int, c: int) -> None:
        """The backward of micro-batch ``i``, chunk ``c``: the whole pass, or only its
        input-gradient part ``B`` when the schedule splits it (the gradients are then
        complete, and reduced, after ``wgrad``)."""
        if self.split:
            self._input_grad(i, c)
            return
        for _ in self._backward_blocks(i, c):
            pass

    def _backward_blocks(self, i: int, c: int, by_layer: bool = False, lead: bool = False):
        """The whole backward of micro-batch ``i``, chunk ``c``, yielding after each layer
        block (one layer each with ``by_layer``: Megatron's combined 1F1B pairs it whole;
        ``lead``: once more before the first, after the LM head)."""
        label, vs = f"B{i}.c{c}", self.vs(c, i)
        plan = self.buckets[c]
        final = i == self.final_mb[c]
        live = self.grad_sync and self.ogr_g and (final or self.every_mb)
        # a chunk reduced whole after its backward (``reduces_chunk_after_backward``): no
        # bucket starts inside it, all start with ``_launch`` after its last compute
        live_in = live and not (self.sched.reduces_chunk_after_backward and not self.every_mb)
        todo = list(plan.buckets)
        pos = 0
        if vs == self.last_vs:
            if self.p.ep_overlap:       # the loss needs the forward's output, whose last
                # all-to-all a combined pair leaves to its message (``combined_pair``)
                self.wait += [x for x in self.produced.get(("F", i, c), ()) if x is not None
                              and x not in self.wait]
            self.compute(self.c.head_bwd, "lm_head", label, i, c)
        if lead:
            yield
        if plan.head:
            pos = 1
            todo = self._launch(todo, pos, live_in, final)
        rest = self._z3(label, i, fwd=False)
        z3 = self._z3_layered()
        split = self.gran == "layer" or by_layer or (live_in and len(todo) > 1) or z3
        counts = bucket_segments(plan, len(self.chunk[c]), split,
                                 self.gran == "layer" or by_layer or z3)
        done = 0
        for nl, items in zip(counts, self.segments(c, counts, True)):
            main = self.block(False, items, label, i, c)
            pos += nl
            todo = self._launch(todo, pos, live_in, final)
            done += nl
            if z3:
                self._z3_reduce_layers(nl, done, c, main, label, i)
            yield
        self.wait += rest
        if vs == 0:
            self.compute(self.c.embedding_bwd, "embedding", label, i, c)
        pos += 1 if plan.embedding else 0
        todo = self._launch(todo, pos, live, final)
        self._close_grads(todo, final, label, i, self.p.zero == 3 and self.copies, c)
        self.produced[("B", i, c)] = (self.last_compute, *self.wait)

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
            self.wait.append(self.streams["dp-comm"][-1].id)
        if z3:
            self._z3_reduce(label, i, c)

    def _input_grad(self, i: int, c: int) -> None:
        for _ in self._input_grad_blocks(i, c):
            pass

    def _input_grad_blocks(self, i: int, c: int, by_layer: bool = False):
        """``B`` of a split backward: the input-gradient part of the LM head, the layers
        (with their recomputation and communication) and the embedding (none: its backward
        is all weight gradient); no gradient is complete yet. Yields after each layer
        block (one layer each with ``by_layer``)."""
        label, vs = f"B{i}.c{c}", self.vs(c, i)
        if vs == self.last_vs:
            self.compute(self.c.head_bwd - self.c.head_wgrad, "lm_head", label, i, c)
        rest = self._z3(label, i, fwd=False)
        for items in self.pieces(c, True, by_layer):
            self.block(False, items, label, i, c)
            yield
        self.wait += rest
        if vs == 0:
            self.compute(self.c.embedding_bwd - self.c.embedding_wgrad, "embedding", label, i, c)
        self.produced[("B", i, c)] = (self.last_compute, *self.wait)

    def wgrad(self, i: int, c: int) -> None:
        """``W`` of a split backward: the weight-gradient GEMMs (and their accumulation) of
        the LM head, the layers and the embedding, in backward order, compute only; the
        chunk's gradient buckets are reduced as ``backward`` reduces them, here after each
        bucket's last ``W`` (the last micro-batch's)."""
        label, vs, cs = f"W{i}.c{c}", self.vs(c, i), self.c
        plan = self.buckets[c]
        final = i == self.final_mb[c]
        live = self.grad_sync and self.ogr_g and (final or self.every_mb)
        todo, pos = list(plan.buckets), 0
        if vs == self.last_vs:
            self.compute(cs.head_wgrad, "wgrad", label, i, c)
        if plan.head:
            pos = 1
            todo = self._launch(todo, pos, live, final)
        z3 = self._z3_layered()
        split = self.gran == "layer" or (live and len(todo) > 1) or z3
        counts = bucket_segments(plan, len(self.chunk[c]), split, self.gran == "layer" or z3)
        done = 0
        for nl, items in zip(counts, self.segments(c, counts, True)):
            main = self.compute(chunk_sum(items, lambda x: x.layer_wgrad), "wgrad", label, i, c,
                                force=z3)
            pos += nl
            todo = self._launch(todo, pos, live, final)
            done += nl
            if z3:
                self._z3_reduce_layers(nl, done, c, main, label, i)
        if vs == 0:
            self.compute(cs.embedding_wgrad, "wgrad", label, i, c)
        pos += 1 if plan.embedding else 0
        todo = self._launch(todo, pos, live, final)
        self._close_grads(todo, final, label, i, self.p.zero == 3 and self.copies, c)

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
            self.coll("dp-comm", kind, dim, self.c.grad_bytes * n, 1.0, "dp", label + suffix,
                      deps=deps, tag="dp")
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
            self.stage_params, self.stage_expert, p.tp, p.cp, p.dp, p.ep, p.expert_tp, p.zero))
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
            self.coll("dp-comm", "reduce_scatter", dim, self.c.grad_bytes * k / L, share * L,
                      "dp", f"RS z3 {label}{suffix}", i, deps=deps, tag="dp")

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

    # ------------------------------------------------------------------ pipeline
    def exchange(self, x: Exchange) -> None:
        """One blocking batched send/receive call; the next compute waits for all of it
        (an ``overlapped`` call: ``overlapped_exchange``)."""
        if x.overlapped:
            self.overlapped_exchange(x)
            return
        last, pp_group, cs = None, self.group["pp"], self.c
        # a synchronous engine's receive (DeepSpeed's ``p2p.recv``) is enqueued behind the
        # rank's previous pass and the collectives that close it (NCCL's stream waits for the
        # caller's), so a partner's blocking send cannot start under them (docs/calibration.md
        # §5.28); eager exchanges keep their receives free (the message waits in the mailbox
        # either way)
        after = tuple(x for x in (self.last_compute, *self.wait) if x is not None) \
            if self.sched.blocking_sends else ()
        for d, i, c in x.sends:
            what = ("F" if d == "fwd" else "B") + f"{i}.c{c}"
            dst = pp_group[self.sched.peer(self.stage, c, i, self.p.pp, self.p.vpp, d, True)]
            last = self._add(Send, "pp-comm", dst=dst, nbytes=cs.p2p_bytes, tag=d,
                             label=f"send {what}", microbatch=i, chunk=c,
                             deps=tuple(x for x in self.produced[(what[0], i, c)] if x is not None),
                             blocking=self.sched.blocking_sends)
        gathers = []
        for d, i, c in x.recvs:
            what = ("F" if d == "fwd" else "B") + f"{i}.c{c}"
            src = pp_group[self.sched.peer(self.stage, c, i, self.p.pp, self.p.vpp, d, False)]
            last = self._add(Recv, "pp-comm", src=src, tag=d, label=f"recv {what}",
                             microbatch=i, chunk=c, deps=after)
            # Megatron's scatter/gather: the received slices are all-gathered over the
            # tensor-parallel communicator, which serialises with the TP collectives
            g = self.coll("tp-comm", "allgather", "tp", cs.p2p_gather_bytes, 1.0, "pp_gather",
                          f"AG p2p {what}", i, c, deps=(last,), tag="tp")
            gathers += [g] if g is not None else []
        self.wait += ([last] if last is not None else []) + gathers

    def overlapped_exchange(self, x: Exchange) -> None:
        """One ``overlap_p2p_comm`` call (docs/calibration.md §5.68): each transfer a lone op
        on its NCCL stream (``p2p_streams.stream_of``: with pp = 2 a rank's sends on one, its
        receives on another; with pp > 2 one per neighbour), the sends after the pass that
        produced them, the receives posted now; no compute waits for the call here: a
        receive (and its tensor-parallel gather) is waited for just before the next pass of
        its kind (``take_received``)."""
        streams = self.streams      # ``_add`` written out (positional, as ``coll``)
        for d, i, c in x.sends:
            what, dst, name = self._overlapped_lane("send", d, i, c)
            op_id = self.next_id
            self.next_id += 1
            streams[name].append(Send(op_id, name, dst, self.c.p2p_bytes, d, f"send {what}", i,
                                      c, tuple(y for y in self.produced[(what[0], i, c)]
                                               if y is not None)))
        for d, i, c in x.recvs:
            what, src, name = self._overlapped_lane("recv", d, i, c)
            r = self.next_id
            self.next_id += 1
            streams[name].append(Recv(r, name, src, d, f"recv {what}", i, c, ()))
            self.received.setdefault(d, []).append((r, what, i, c))

    def _overlapped_lane(self, kind: str, d: str, i: int, c: int) -> tuple[str, int, str]:
        """``(pass label, peer rank, stream)`` of one transfer (``kind`` ``"send"`` or
        ``"recv"``) of an overlapped call: a forward's output goes to the next stage and a
        backward's to the previous one, each on its ``p2p_streams.stream_of`` lane."""
        what = ("F" if d == "fwd" else "B") + f"{i}.c{c}"
        side = "next" if (d == "fwd") == (kind == "send") else "prev"
        peer = self.group["pp"][self.sched.peer(self.stage, c, i, self.p.pp, self.p.vpp, d,
                                                kind == "send")]
        name = self._lanes.get((kind, side))
        if name is None:        # the lane's stream, created at its first transfer
            name = self._lanes[(kind, side)] = f"pp-comm {stream_of((kind, side), self.p.pp)}"
            self.streams.setdefault(name, [])
        return what, peer, name

    def take_received(self, d: str) -> None:
        """The next pass of kind ``d`` (``"fwd"``, ``"bwd"``) waits for the receives of
        the ``overlap_p2p_comm`` calls posted since the last one (each with Megatron's
        scatter/gather over the tensor-parallel communicator, issued here)."""
        for r, what, i, c in self.received.pop(d, ()):
            g = self.coll("tp-comm", "allgather", "tp", self.c.p2p_gather_bytes, 1.0,
                          "pp_gather", f"AG p2p {what}", i, c, deps=(r,), tag="tp")
            self.wait += [r] + ([g] if g is not None else [])

    def overlapped(self, group: list[Step]) -> None:
        """An overlapped group (``Step.overlap``; DualPipe's ``F& B& W``, a forward and a
        whole backward of two micro-batches; Megatron-Core's combined 1F1B ``F& B``, the
        backward unsplit, ``strategies.schedules.combined``): the compute runs in turn on the one compute
        stream (the two share the SMs, so the pair lasts ``F + B + W``), layer by layer, the
        forward's layer then the backward's; each pass's expert all-to-all is waited for only
        by its own next layer, so it runs beside the partner's layer and is exposed only by
        what outlasts it (DeepSeek-V3 §3.2.1). TP and CP collectives still block the compute
        stream. The weight gradients run after both; the pair's point-to-point messages leave
        once the whole pair has run, in one exchange after the group (deepseek-ai/DualPipe
        posts them after ``_forward_backward_compute_chunk`` and waits for them with the next
        step's receives), which is the model of DeepSeek's ``F&B`` bubble. Megatron's
        combined pair with expert all-to-alls runs in its own sub-layer order instead
        (``combined_pair``)."""
        passes = [s for s in group if s.kind != "W"]
        partner = next((s for s in passes if s.kind == "B"), None)
        if partner is not None:
            for s in passes:
                if s.kind == "F":
                    self.paired[f"F{s.microbatch}.c{s.chunk}"] = \
                        f"B{partner.microbatch}.c{partner.chunk}"
        gens = {}
        # Megatron's combined 1F1B with expert all-to-alls: its own sub-layer order
        # (``combined_pair``)
        combined = (partner is not None and not self.split and self._moe and len(passes) == 2
                    and passes[0].kind == "F")
        for s in passes:
            if s.kind == "F":
                gens[s] = self._forward_blocks(s.microbatch, s.chunk, by_layer=True,
                                               lead=combined)
            elif self.split:
                gens[s] = self._input_grad_blocks(s.microbatch, s.chunk, by_layer=True)
            else:       # Megatron's combined 1F1B: the whole backward is the partner
                gens[s] = self._backward_blocks(s.microbatch, s.chunk, by_layer=True,
                                                lead=combined)
        if combined:
            dw = self.combined_pair(passes[0], partner, gens)
            self._pair_outputs(group, [partner])
            # ``delay_wgrad_compute``: the last backward layer's attention weight gradient
            # after the backward's output is posted, beside its transfer (§5.87)
            self.compute(dw, "wgrad", f"W{partner.microbatch}.c{partner.chunk}",
                         partner.microbatch, partner.chunk)
            return
        own: dict[Step, list] = {s: [] for s in passes}
        live = list(passes)
        while live:
            for s in list(live):
                mine, own[s] = own[s], []
                self.wait += mine
                self.hidden = own[s]
                try:
                    next(gens[s])
                except StopIteration:
                    # the pass ended (its output, ``produced``, waits for its last
                    # all-to-all); what no compute of its own took is not the partner's to wait
                    live.remove(s)
                    left = [x for x in mine if x in self.wait]
                    self.wait = [x for x in self.wait if x not in left]
                    key = (s.kind, s.microbatch, s.chunk)
                    self.produced[key] = self.produced[key] + tuple(
                        x for x in left + own[s] if x not in self.produced[key])
                    own[s] += left
                finally:
                    self.hidden = None
        self._pair_outputs(group, passes)

    def _pair_outputs(self, group: list[Step], passes: list[Step]) -> None:
        """The end of an overlapped group: its weight gradients, then its outputs leave."""
        for s in group:
            if s.kind == "W":
                self.wgrad(s.microbatch, s.chunk)
        # (a pass's last all-to-all is waited for by its output message, ``produced``, and
        # queues the next one on the ep-comm stream; no compute of this rank needs it)
        for s in passes:        # the outputs leave once the whole pair has run
            key = (s.kind, s.microbatch, s.chunk)
            self.produced[key] = self.produced[key] + (self.last_compute,)

    def combined_pair(self, f: Step, b: Step, gens: dict) -> float:
        """Megatron-Core's combined 1F1B pair in its own sub-layer order (Megatron-LM
        d98e8a64 ``models/common/model_chunk_schedule_plan.py``: ``TransformerModelChunk
        SchedulePlan.run`` runs the forward's embedding and the backward's LM head first,
        then layer pairs; ``TransformerLayerSchedulePlan.run`` per pair: comm stream
        ``combine_bwd | dispatch_fwd, dispatch_bwd | combine_fwd`` beside compute
        ``attention_fwd | mlp_bwd, mlp_fwd | attention_bwd``). With a layer's all-to-alls
        lumped, the backward layer's runs ahead of its compute, beside the forward layer's
        compute, and the forward layer's after its compute, beside the backward layer's:
        each exposed only by what outlasts that compute (``combined.pair_exposed``), and
        no pass ends on an all-to-all of its own. Layers left over when one pass is
        longer run alone, their all-to-alls exposed. The forward's output leaves when the
        forward ends (``post_forward`` runs on the communication stream after the forward's
        last op, "overlapped with the pre_dispatch backward"), the backward's when the pair
        ends (``post_backward`` on the compute stream). With pipelining the backward's last
        layer leaves its attention weight gradient (``dw_attn``, Megatron-Bridge's
        ``delay_wgrad_compute``) to run after that message is posted
        (``b_layer.pre_dispatch_computation.backward_dw()`` after ``post_backward``): the
        seconds returned, which the caller runs once the outputs are recorded (§5.87)."""
        inputs = tuple(self.wait)
        dw = self.c.dw_attn if self.p.pp > 1 and self.p.delay_wgrad else 0.0
        label = f"B{b.microbatch}.c{b.chunk}"
        layers = self.pieces(b.chunk, True, by_layer=True)
        next(gens[f])               # the embedding (first virtual stage)
        mark = self.last_compute
        next(gens[b])               # the LM head's backward (last virtual stage)
        # the backward's first all-to-all waits for all the compute queued before it (the
        # plan's event is recorded on the compute stream after the embedding and the LM
        # head: ``b_schedule_plan.record_current_stream()``), the previous pass's deferred
        # weight gradient included (§5.91)
        b_last = tuple(x for x in (self.last_compute, *inputs) if x is not None) \
            if self.last_compute == mark else (self.last_compute,)
        own: list = []
        live_f = live_b = True
        k, f_last = 0, mark
        while live_f or live_b:
            lead = self.moe_colls(layers[k], label, b.microbatch, b.chunk, b_last) \
                if live_b and k < len(layers) else []
            if live_f:
                mine, own = own, []
                self.wait += mine
                self.hidden = own
                before = self.last_compute
                try:
                    next(gens[f])
                    f_last = self.last_compute
                except StopIteration:
                    # the forward ended: its output (``produced``) waits for its own last
                    # compute (the partner's ran since) and its last all-to-all, which no
                    # compute of the partner waits for
                    live_f = False
                    left = [x for x in mine if x in self.wait]
                    self.wait = [x for x in self.wait if x not in left]
                    key = ("F", f.microbatch, f.chunk)
                    done = self.produced[key]
                    if self.last_compute == before:     # no LM head ran after the layers
                        done = (f_last,) + done[1:]
                    self.produced[key] = done + tuple(x for x in left + own if x not in done)
                finally:
                    self.hidden = None
            if live_b:
                self.wait += lead
                self.lead_a2a = True
                self.defer_dw = dw if k == len(layers) - 1 else 0.0
                try:
                    next(gens[b])
                    b_last = (self.last_compute,)
                except StopIteration:
                    live_b = False
                finally:
                    self.lead_a2a = False
                    self.defer_dw = 0.0
            k += 1
        return dw if layers else 0.0

    def run(self, actions: list) -> None:
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
            dp_ops = self.streams["dp-comm"]
            self.wait += [dp_ops[-1].id] if dp_ops else []
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
        # the stack's per-step passes (strategies.cost.step), then the optimizer
        passes = self.c.passes_by_stage[self.stage] if self.c.passes_by_stage else 0.0
        self.compute(passes, "optimizer", "step passes")
        opt = self.compute(self.c.optimizer_by_stage[self.stage], "optimizer", "optimizer",
                           force=True)
        if self.grad_sync and self.p.zero >= 1:
            # each bucket at the stage's mean gathered width (``stage.gather_width``)
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
                "paired_forwards": dict(self.paired)}
        return Program(self.rank, self.stage, {k: tuple(v) for k, v in self.streams.items() if v},
                       meta)
