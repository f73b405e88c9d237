"""``LayerBlocks``: a layer block of ``simulator.program.builder.ProgramBuilder`` (a mixin:
the builder holds the state): the chunk cut into blocks (a whole chunk, or one layer), each
block's compute with its recomputation, CP ring, all-gather or all-to-all attention traffic,
and the blocking collectives that close it (expert all-to-alls and etp collectives, then the
tensor-parallel ones: ``simulator.program.tensor_parallel``). Units: seconds, bytes.
"""
from __future__ import annotations

from typing import Callable

from simulator.program.tensor_parallel import TP_TAG
from strategies.cost.bucket_cut import lead_tail
from strategies.cost.cp_a2a import pass_copy_seconds, side_copy_seconds
from strategies.cost.cp_ring import PASS_VOLUME
from strategies.cost.stage import chunk_sum


class LayerBlocks:
    """``ProgramBuilder``'s layer blocks (reads the builder's state)."""

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

    def _build_block(self, fwd: bool, items: list[tuple], label: str, i: int,
                     c: int) -> int:
        """Compute of the layers ``items`` (``(count, per-layer record)`` runs) with their
        communication; returns the main compute id. The backward is the whole pass, or its
        input-gradient part ``B`` when the schedule splits the backward (its ``W`` is
        ``wgrad``)."""
        cs, kind = self.c, "forward" if fwd else "backward"
        nl = sum(n for n, _ in items)
        rc_s = chunk_sum(items, lambda x: x.layer_recompute)
        cp_rc = 0.0 if cs.cp_torch else cs.cp_per_layer_recompute
        if not fwd and (rc_s > 0 or cp_rc > 0):
            start = tuple(self.wait)
            # main's block partial recompute charges the chunk's min(N, n) layers, each
            # kind's share at its own layer's cost; otherwise each kind's own recomputation
            secs, n_tp, n_ep = cs.chunk_recompute_comm(nl, len(self.chunk[c]), items)
            secs = secs if cs.recompute_cap > 0 else rc_s
            if cp_rc > 0:   # the rerun cut as the forward block, its attention's CP exchange
                # where the forward's runs (§5.187), before what follows it in the
                # layer: the all-to-all and the TP collectives wait for it
                rc, a2a = self.cp_rerun(cs.chunk_cp_reruns(nl, len(self.chunk[c])), secs,
                                        label, i, c, start)
            else:
                rc, a2a = self.compute(secs, "recompute", label, i, c), None
            cpt = a2a
            for n, x in items:      # the recomputed forward's all-to-all, each kind's bytes
                share = n_ep if n == nl else n_ep * n / nl
                ep = self.coll("ep-comm", "alltoall", "ep", x.ep_bytes, share, "ep",
                               f"A2A ep {label}", i, c, deps=(rc, cpt),
                               remote_scale=cs.ep_remote_scale,
                               nvlink_share=cs.ep_nvlink_share) if n_ep > 0 else None
                self.wait += [ep] if ep is not None else []
                a2a = ep if ep is not None else a2a
            # its TP collectives after its all-to-all, in sequence (``_close_block``)
            self.tp_comm(n_tp, label, i, c, start, rc, cs.rerun_tp_exposed(nl, n_tp),
                         after=a2a)
            if cs.tp_attn_rc > 0:   # MLA's recomputed up projections' gathers (§5.81)
                self.rc_gathers(nl, label, i, c, rc, a2a)
            if cs.tp_attn_full_rc > 0:  # full recompute's rerun MLA gathers (§5.85)
                self.full_rc_ops(nl, n_tp, label, i, c, rc, a2a)
        split = self.split
        secs = chunk_sum(items, (lambda x: x.layer_fwd) if fwd else
                         (lambda x: x.layer_bwd - split * x.layer_wgrad))
        # activation offloading's exposed copies, which the layers' times hold: an op of
        # their own (kind ``offload``) after the block's compute, before what closes it
        off = chunk_sum(items, (lambda x: x.layer_offload_fwd) if fwd else
                        (lambda x: x.layer_offload_bwd))
        secs -= off
        if not fwd and self.defer_dw > 0:
            secs, self.defer_dw = secs - self.defer_dw, 0.0
        start = tuple(self.wait)
        if not fwd and self.t_regather > 0:
            secs -= self.regather(nl, secs, label, i, c, start)
        if not fwd and self.t_reduce > 0:
            secs -= self.reduce_split(nl, secs)
        if len(self.group["cp"]) > 1 and cs.cp_bytes > 0:
            attn = chunk_sum(items, (lambda x: x.attn_fwd) if fwd else (lambda x: x.attn_bwd))
            rest = secs - attn if fwd else self._lead_split(secs - attn, items, label, i, c,
                                                            0.0)
            other = self.compute(rest, kind, label, i, c)
            other = self.offload_op(off, other, label, i, c)
            if cs.cp_a2a:
                return self.a2a_block(fwd, items, label, i, c, start, other, attn)
            if cs.cp_hier:
                return self.hier_block(fwd, items, label, i, c, start, other, attn)
            if cs.cp_exposed_fraction >= 1:     # all-gather CP: K/V gathered before the
                # attention core (forward and backward), dK/dV reduce-scattered after it
                pre = self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, nl, "cp",
                                f"CP {label}", i, c,
                                deps=(other,) if other is not None else start)
                self.wait += [pre] if pre is not None else []
                main = self.compute(attn, kind, label, i, c, force=True)
                tail = None
                if not fwd:
                    tail = self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, nl, "cp",
                                     f"CP {label}", i, c, deps=(main,))
                    self.wait += [tail] if tail is not None else []
                self._close_block(fwd, items, label, i, c, start, main, ring=tail)
                return main
            main = self.compute(attn, kind, label, i, c, force=True)
            if cs.cp_torch:     # the waits sit inside the attention, before what closes it
                end = self.torch_ring(fwd, nl, label, i, c, other, start)
                self._close_block(fwd, items, label, i, c, start, main if end is None else end)
                return main
            vol, f = nl * PASS_VOLUME[fwd], cs.cp_exposed_fraction
            self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, vol * (1 - f), "cp",
                      f"CP {label}", i, c, deps=(other,) if other is not None else start)
            tail = self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, vol * f, "cp",
                             f"CP {label}", i, c, deps=(main,))
            self.wait += [tail] if tail is not None else []
            self._close_block(fwd, items, label, i, c, start, main, ring=tail)
            return main
        else:
            if not fwd:
                secs = self._lead_split(secs, items, label, i, c, 1.0)
            main = self.compute(secs, kind, label, i, c, force=True)
            main = self.offload_op(off, main, label, i, c)
        return self._close_block(fwd, items, label, i, c, start, main)

    def offload_op(self, secs: float, after: int | None, label: str, i: int,
                   c: int) -> int | None:
        """The exposed copies of activation offloading (``secs``; ``cost.stage.offload_time``)
        as a compute op of kind ``offload`` after ``after``; returns its id (what then
        depends on the block's compute), or ``after`` where ``secs`` is 0."""
        op = self.compute(secs, "offload", label, i, c)
        return after if op is None else op

    def _lead_split(self, secs: float, items: list[tuple], label: str, i: int, c: int,
                    core: float) -> float:
        """Where buckets close with the lead (MLP) of this backward block's last layer
        (``lead_cut``): the block's work ``secs`` up to that layer's attention backward, then
        their reductions; returns the seconds left (the layer's attention GEMMs' share of
        its backward outside the core, ``1 - layer_lead_work``, plus ``core`` times its
        attention core's, which ``secs`` holds when ``core`` is 1). docs/calibration.md
        §5.192."""
        cut, self.lead_cut = self.lead_cut, None
        if cut is None:
            return secs
        x = items[-1][1]
        gemm = x.layer_bwd - self.split * x.layer_wgrad - x.attn_bwd
        return self.cut_at_lead(secs, lead_tail(gemm, x.attn_bwd, x.layer_lead_work, core),
                                "backward", label, i, c, cut)

    def cut_at_lead(self, secs: float, rest: float, kind: str, label: str, i: int, c: int,
                    launch: Callable[[], object]) -> float:
        """``secs`` of ``kind`` compute cut where buckets close inside it: all but ``rest``
        (clamped to ``[0, secs]``), then ``launch`` (their reductions); returns the seconds
        left to run after them. The backward block's (``_lead_split``) and the split
        backward's weight gradients (``Passes``) alike. docs/calibration.md §5.192."""
        rest = min(secs, max(0.0, rest))
        self.compute(secs - rest, kind, label, i, c)
        launch()
        return rest

    def a2a_calls(self, sizes: list, nl: float, dim: str, label: str, i: int, c: int,
                  kind: str, deps: tuple, name: str = "A2A cp") -> int | None:
        """One ``flash_attn_a2a_communicate`` of ``nl`` layers (``cost.cp_a2a.group_wait``):
        per tensor (``sizes``, bytes a rank sends) its send copy on the compute stream
        (``cost.cp_a2a.side_copy_seconds``, the first after ``deps``), its
        all-to-all over ``dim`` on the cp-comm stream after that copy (labelled ``name``),
        then each reorder on the compute stream after its all-to-all. The forward, the
        backward and the recomputed forward (``cp_rerun``) alike. Returns the last reorder's
        id (what the kernel or the block's close waits for)."""
        rate = self.c.copy_rate
        self.wait += [d for d in deps if d is not None]
        sent = []
        for n in sizes:
            cp_ = self.compute(nl * side_copy_seconds(n, rate), kind, label, i, c)
            sent.append(self.coll("cp-comm", "alltoall", dim, n, nl, "cp", f"{name} {label}",
                                  i, c, deps=(cp_,) if cp_ is not None else deps))
        last = None
        for n, a in zip(sizes, sent):
            self.wait += [a] if a is not None else []
            last = self.compute(nl * side_copy_seconds(n, rate), kind, label, i, c, force=True)
        return last

    def a2a_block(self, fwd: bool, items: list[tuple], label: str, i: int, c: int,
                  start: tuple, other, attn: float) -> int:
        """Transformer Engine's all-to-all CP (``StageCosts.cp_a2a``, ``cost.cp_a2a``) over
        the layers ``items``, call by call (``a2a_calls``): before the attention core Q, K, V
        (forward, ``cp_bytes`` split by ``cp_qkv_parts``) or dO (backward; with the saved
        output, ``cp_bwd_out``), after it O or dQ, dK, dV; the copies out of the core's
        seconds, on the compute stream between them; what closes the block starts after the
        last. Returns the core's id."""
        return self._a2a_around(fwd, items, label, i, c, start, other, attn, "cp",
                                self.c.cp_bytes)

    def _a2a_around(self, fwd: bool, items: list[tuple], label: str, i: int, c: int,
                    start: tuple, other, attn: float, dim: str, qkv: float,
                    ring: tuple | None = None) -> int:
        """``a2a_block``'s body over group ``dim`` (``cpa`` for a2a+p2p, whose ``ring``,
        ``(share beside, share after)`` of the ring's all-gathers over ``cpr``, runs between
        the first all-to-alls and the second)."""
        cs, kind = self.c, "forward" if fwd else "backward"
        nl = sum(n for n, _ in items)
        parts = [qkv * x for x in cs.cp_qkv_parts]
        outs = [cs.cp_out_bytes] * (1 if fwd else int(cs.cp_bwd_out))
        copies = nl * pass_copy_seconds(cs, qkv)[0 if fwd else 1]
        main, tail = self._a2a_exchange(parts if fwd else outs, outs if fwd else parts, nl,
                                        dim, max(attn - copies, 0.0), kind, label, i, c,
                                        (other,) if other is not None else start, ring)
        self._close_block(fwd, items, label, i, c, start, main, ring=tail)
        return main

    def _a2a_exchange(self, pre: list, post: list, nl: float, dim: str, core: float,
                      kind: str, label: str, i: int, c: int, deps: tuple,
                      ring: tuple | None = None, rerun: bool = False
                      ) -> tuple[int | None, int | None]:
        """An attention core of ``core`` seconds between two ``a2a_calls`` over ``dim`` (the
        tensors ``pre`` before it and ``post`` after it, bytes a rank sends each; the first
        after ``deps``), with a2a+p2p's ``ring`` (``(share beside, share after)`` of its
        all-gathers over ``cpr``: beside the core after the first calls, after the core
        before the second). The forward and backward blocks (``_a2a_around``) and the
        recomputed forward (``cp_rerun``, ``rerun``: labelled ``rc``, the core not forced)
        alike. Returns (the core's id, the last reorder's)."""
        tag = " rc" if rerun else ""
        first = self.a2a_calls(pre, nl, dim, label, i, c, kind, deps, f"A2A cp{tag}")
        if ring is not None:
            self.coll("cp-comm", "allgather", "cpr", self.c.cp_bytes, ring[0], "cp",
                      f"CP{tag} {label}", i, c, deps=(first,) if first is not None else deps)
        main = self.compute(core, kind, label, i, c, force=not rerun)
        last = (main,) if main is not None else (first,)
        if ring is not None:
            r = self.coll("cp-comm", "allgather", "cpr", self.c.cp_bytes, ring[1], "cp",
                          f"CP{tag} {label}", i, c, deps=last)
            last = (r,) if r is not None else last
        return main, self.a2a_calls(post, nl, dim, label, i, c, kind, last, f"A2A cp{tag}")

    def hier_block(self, fwd: bool, items: list[tuple], label: str, i: int, c: int,
                   start: tuple, other, attn: float) -> int:
        """Megatron-Core's a2a+p2p (``StageCosts.cp_hier``, ``cost.cp_hier``) over the layers
        ``items``: ``a2a_block``'s all-to-alls over the all-to-all groups (``cpa``: Q, K, V of
        ``cp_qkv_bytes``, or dO, with the saved output before TE 2.15, before the core; O or
        dQ, dK, dV after), between them the ring over the ring groups (``cpr``, K/V of
        ``cp_bytes``): its share ``1 - f`` beside the core, ``f`` after it; the second
        all-to-alls after the ring's last; what closes the block after that. Returns the
        core's id."""
        vol, f = sum(n for n, _ in items) * PASS_VOLUME[fwd], self.c.cp_exposed_fraction
        return self._a2a_around(fwd, items, label, i, c, start, other, attn, "cpa",
                                self.c.cp_qkv_bytes, (vol * (1 - f), vol * f))

    def cp_rerun(self, n: float, secs: float, label: str, i: int, c: int, start: tuple
                 ) -> tuple[int | None, int | None]:
        """The recomputation of ``secs`` seconds whose ``n`` attention forwards
        (``StageCosts.chunk_cp_reruns``, ``recompute.cp_reruns``) exchange again, cut as the
        forward block is: its non-attention part, then its attention core (``n`` times
        ``StageCosts.cp_rerun_attn``, at most ``secs``) with the forward's flows where the
        forward has them (``cp_ring.with_rerun`` prices the same): Transformer Engine's
        all-to-all, Q/K/V before the core and O after it, call by call with their copies as
        the forward's (``a2a_calls``; the copies, ``cp_a2a.pass_copy_seconds``, out of the
        core); a2a+p2p, Q/K/V over ``cpa``, the ring over ``cpr`` (share ``1 - f`` beside the
        core, ``f`` after it), O over ``cpa``; the ring, ``1 - f`` beside the core and ``f``
        after it; the all-gather (``f`` 1), K/V before the core. ``start``: what the rerun
        waits for; without a non-attention part the exchange starts after it and the compute
        issued before it. The backward waits on the exchange's last flow (the all-to-all's:
        its last reorder). Returns (the rerun's last compute, that flow)."""
        cs, prev = self.c, self.last_compute
        core = min(n * cs.cp_rerun_attn, secs)
        a2a = cs.cp_a2a or cs.cp_hier
        dim, qkv = ("cpa", cs.cp_qkv_bytes) if cs.cp_hier else ("cp", cs.cp_bytes)
        # the all-to-alls' copies, out of the rerun's core as out of the forward's
        copies = n * pass_copy_seconds(cs, qkv)[0] if a2a else 0.0
        other = self.compute(secs - max(core, copies), "recompute", label, i, c)
        after = (other,) if other is not None else (*start, prev)
        vol, f = n * PASS_VOLUME[True], cs.cp_exposed_fraction
        if a2a:     # the forward's calls (``a2a_calls``: TE's rerun is the forward's code):
            # Q, K, V before the core (and the ring), O after it
            _, tail = self._a2a_exchange([qkv * x for x in cs.cp_qkv_parts], [cs.cp_out_bytes],
                                         n, dim, max(core - copies, 0.0), "recompute", label,
                                         i, c, after, (vol * (1 - f), vol * f)
                                         if cs.cp_hier else None, rerun=True)
            return tail, tail
        if f >= 1:                      # the all-gather: K/V gathered before the core
            pre = self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, vol, "cp",
                            f"CP rc {label}", i, c, deps=after)
            self.wait += [pre] if pre is not None else []
            main, tail = self.compute(core, "recompute", label, i, c), None
            if main is None:    # no core: the backward waits on the gather itself
                return other, pre
        else:                           # the ring: its last step's share after the core
            self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, vol * (1 - f), "cp",
                      f"CP rc {label}", i, c, deps=after)
            main = self.compute(core, "recompute", label, i, c)
            tail = self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, vol * f, "cp",
                             f"CP rc {label}", i, c,
                             deps=(main,) if main is not None else after)
        self.wait += [tail] if tail is not None else []
        return (main if main is not None else other), tail

    def torch_ring(self, fwd: bool, nl: float, label: str, i: int, c: int, other,
                   start) -> int | None:
        """PyTorch's ring attention over ``nl`` layers (``StageCosts.cp_torch``): its traffic
        on the cp-comm stream beside the attention (the K/V all-gather; in the backward the
        all-gather again, the fp32 dK/dV ring, ``2c/(c-1)`` all-gathers' worth, and with full
        recomputation the rerun forward's gather), and its waits on the network
        (``cp_stall_fwd``/``cp_stall_bwd``, ``ring_attention.torch_ring_stalls``) on the
        compute stream, as the estimate charges them; returns that op (None without a wait)."""
        cs, n = self.c, len(self.group["cp"])
        vol = 1.0 if fwd else 1.0 + 2.0 * n / (n - 1) + cs.cp_per_layer_recompute
        # its SMs are not charged (``sms`` 0): its waits are its own stalls, as the
        # estimate's ``cp_ring.layer_sm_extra`` has it
        self.coll("cp-comm", "allgather", "cp", cs.cp_bytes, nl * vol, "cp", f"CP {label}",
                  i, c, deps=(other,) if other is not None else start, sms=0.0)
        return self.compute(nl * (cs.cp_stall_fwd if fwd else cs.cp_stall_bwd), "cp",
                            f"CP wait {label}", i, c)

    def _close_block(self, fwd: bool, items: list[tuple], label: str, i: int, c: int,
                     start: tuple, main: int, ring: int | None = None) -> int:
        """The collectives that close a layer block after its compute ``main``: MoE
        all-to-alls and the tensor-parallel collectives. ``ring``: the context-parallel
        traffic the attention's output waits for (Transformer Engine's ring waits on each
        K/V step, and in the backward each dK/dV step, inside ``AttnFuncWithCPAndKVP2P``;
        the all-gather path's dK/dV reduce-scatter precedes the QKV data gradient): what
        closes the block, the carved weight gradients included, starts after it
        (``cost.cp_ring``, docs/calibration.md §5.110)."""
        cs, nl = self.c, sum([n for n, _ in items])
        if ring is not None:
            main = ring
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
                saved, self.wait = self.wait, [d for d in (after, ring) if d is not None]
                self.compute(d, "backward", label, i, c, force=True)
                self.wait = saved + reds
        self.tp_comm(n_tp, label, i, c, start, main,
                     cs.tp_overlap_fwd_exposed if fwd else cs.tp_overlap_bwd_exposed,
                     after=after, less=less,
                     attn=nl, fwd=fwd)
        rope_b = self._rope_b
        if rope_b > 0:      # MLA's rope key under SP, blocking (``attn_rope_time``, §5.81)
            kd = "allgather" if fwd else "reduce_scatter"
            rope = self.coll("tp-comm", kd, "tp", rope_b, nl, "tp",
                             f"{TP_TAG[kd]} tp rope {label}", i, c, deps=(main, after))
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
                           f"{TP_TAG[kd]} tp down {label}", i, c, deps=(main, after))
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
