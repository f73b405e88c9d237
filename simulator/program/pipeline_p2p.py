"""``PipelineTransfers``: the pipeline's point-to-point sends and receives in
``simulator.program.builder.ProgramBuilder`` (a mixin: the builder holds the state): blocking
batched exchanges on the pp-comm stream, ``overlap_p2p_comm`` calls on their own NCCL lanes
(``strategies.schedules.p2p_streams``), and Megatron's tensor-parallel gather of what was
received. Units: bytes.
"""
from __future__ import annotations

from simulator.program.ops import Recv, Send
from strategies.schedules.exchanges import Exchange
from strategies.schedules.p2p_streams import stream_of
from strategies.schedules.placement import Placement


class PipelineTransfers:
    """``ProgramBuilder``'s pipeline transfers (reads the builder's state)."""

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
        its kind (``take_received``). A ``waited`` call is waited for whole before the next
        pass: its sends and its receives (docs/calibration.md §5.207)."""
        streams, produced = self.streams, self.produced    # ``_add`` written out (positional)
        for d, i, c in x.sends:
            dst, name = self._overlapped_lane("send", d, i, c)
            head = "F" if d == "fwd" else "B"
            op_id = self.next_id
            self.next_id = op_id + 1
            if x.waited:
                self.wait.append(op_id)
            streams[name].append(Send(op_id, name, dst, self.c.p2p_bytes, d,
                                      f"send {head}{i}.c{c}", i, c,
                                      tuple([y for y in produced[(head, i, c)]
                                             if y is not None])))
        for d, i, c in x.recvs:
            src, name = self._overlapped_lane("recv", d, i, c)
            what = f"{'F' if d == 'fwd' else 'B'}{i}.c{c}"
            r = self.next_id
            self.next_id = r + 1
            streams[name].append(Recv(r, name, src, d, f"recv {what}", i, c, ()))
            self.received.setdefault(d, []).append((r, what, i, c))
        for d in sorted({d for d, _, _ in x.recvs}) if x.waited else ():
            self.take_received(d)

    def _overlapped_lane(self, kind: str, d: str, i: int, c: int) -> tuple[int, str]:
        """``(peer rank, stream)`` of one transfer (``kind`` ``"send"`` or ``"recv"``) of an
        overlapped call: a forward's output goes to the next stage and a backward's to the
        previous one, each on its ``p2p_streams.stream_of`` lane. Kept per ``(kind, d, c)``
        where the schedule keeps the ring's placement (``Placement``: a peer that does not
        depend on the micro-batch)."""
        memo = self._memo
        key = ("p2p lane", kind, d, c)
        hit = memo.get(key)
        if hit is not None:
            return hit
        peer = self.group["pp"][self.sched.peer(self.stage, c, i, self.p.pp, self.p.vpp, d,
                                                kind == "send")]
        name = self._lanes.get((kind, d))
        if name is None:        # the lane's stream, created at its first transfer
            side = "next" if (d == "fwd") == (kind == "send") else "prev"
            name = self._lanes[(kind, d)] = f"pp-comm {stream_of((kind, side), self.p.pp)}"
            self.streams.setdefault(name, [])
        sched = type(self.sched)
        if sched.virtual_stage is Placement.virtual_stage and \
                sched.rank_chunk is Placement.rank_chunk:
            memo[key] = (peer, name)
        return peer, name

    def take_received(self, d: str) -> None:
        """The next pass of kind ``d`` (``"fwd"``, ``"bwd"``) waits for the receives of
        the ``overlap_p2p_comm`` calls posted since the last one (each with Megatron's
        scatter/gather over the tensor-parallel communicator, issued here)."""
        for r, what, i, c in self.received.pop(d, ()):
            g = self.coll("tp-comm", "allgather", "tp", self.c.p2p_gather_bytes, 1.0,
                          "pp_gather", f"AG p2p {what}", i, c, deps=(r,), tag="tp")
            self.wait += [r] + ([g] if g is not None else [])
