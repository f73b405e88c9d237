"""The engine's messages and rendezvous (``Messaging``, a base of ``core.Engine``): a send's
transfer (eager, or parked until its receive is posted where the send blocks), a message's
landing (``deliver``: the waiting receive ends, else the message waits in ``mail``), a posted
receive, and a collective's rendezvous (``(group, tag)``, in order; started when the last
simulated member arrives) with the SMs its run holds (``sm_hold``). The state these read is
``core.Engine``'s (set in its ``__init__``); the event loop that calls them is
``core.Engine._loop``."""
from __future__ import annotations

from typing import Callable

from simulator.engine.streams import Rendezvous, Stream
from simulator.program.ops import Collective, Send


class Messaging:
    """``core.Engine``'s messages and rendezvous (module docstring); no state of its own."""

    def _send(self, st: Stream, op: Send) -> None:
        """``st`` starts its send ``op``: the message is the n-th of its channel (counted when
        it starts); its transfer starts now and calls ``st`` back at its last byte (with
        instant communication ``st`` ends now and is queued again). A blocking send whose
        receiver has not posted its receive yet parks until it does."""
        rank = st.rank
        if op.dst not in self.sim:
            raise ValueError(f"rank {rank} sends to rank {op.dst}, which is not simulated "
                             "(folding must keep pipeline peers)")
        key = (rank, op.dst, op.tag)
        n = self.seq[key]
        self.seq[key] = n + 1
        st.key = key = (rank, op.dst, op.tag, n)
        if self.rendezvous:
            if op.blocking and key not in self.posted:
                self.parked[key] = st
                return
            self.posted.discard(key)
        if self.free_comm:
            st()
        else:
            self.net.transfer(rank, op.dst, op.nbytes, op.tag, st, (st.cls, st.idx))

    def deliver(self, key: tuple, sent: float) -> None:
        """Message ``key`` (sent at ``sent``) landed: its receive ends now if it is waiting,
        else the message waits in ``mail`` (no event either way)."""
        mail = self.mail
        st = mail.pop(key, None)
        if st is None:
            mail[key] = sent
            return
        now = self.env._now
        wait = (sent if sent < now else now) - st.start
        st.finish("pp_recv", wait if wait > 0.0 else 0.0, key[0], 0.0)

    def _post_recv(self, key: tuple) -> None:
        """A receive is posted: a blocking send parked on it starts its transfer now."""
        st = self.parked.pop(key, None)
        if st is None:
            self.posted.add(key)
            return
        self.started[key] = self.env._now
        if self.free_comm:
            st()
        else:
            op = st.ops[st.idx]
            self.net.transfer(key[0], op.dst, op.nbytes, op.tag, st, (st.cls, st.idx))

    def _collective(self, st: Stream, op: Collective, i: int) -> Rendezvous:
        """``st`` arrives at its next call of ``op``'s channel (its op ``i``): the rendezvous of
        that call (the n-th of the channel on every member), started when the last simulated
        member arrives (and fired before this returns if it takes no time)."""
        rank, chan = st.rank, st.chan[i]
        expected = self.members[chan]
        if expected == 1:              # the only simulated member (folded): it starts now
            inst = Rendezvous(1, op)
            inst.arrived, inst.go = 1, self.env._now
            self.runner.start(op, self._held(op, inst, st), (st.cls, i))
            return inst
        seq = self.cseq
        k = chan * self.span + rank
        n = seq.get(k, 0)
        seq[k] = n + 1
        key = n * self.nchan + chan
        inst = self.meet.get(key)
        if inst is None:
            inst = self.meet[key] = Rendezvous(expected, op)
        elif inst.op is not op and (inst.op.kind, inst.op.nbytes, inst.op.repeat) != (
                op.kind, op.nbytes, op.repeat):
            raise ValueError(f"rank {rank}: collective {op.label!r} does not match "
                             f"{inst.op.label!r} of the same rendezvous ({op.tag} #{n})")
        inst.arrived += 1
        if inst.arrived == inst.expected:
            inst.go = self.env._now
            del self.meet[key]
            self.runner.start(op, self._held(op, inst, st), (st.cls, i))
        return inst

    def _held(self, op: Collective, inst: Rendezvous, st: Stream) -> Callable:
        """The end callback of ``inst``, a call of ``op`` that starts now with ``st`` the last
        member to arrive: ``inst.fire``, and where ``op`` holds SMs (``op.sms``, with
        ``sm_hold`` on) the members' SMs held until it ends."""
        if self.smh is None or not op.sms:
            return inst.fire
        ranks = [w.rank for w in inst.waiters] + [st.rank]
        return self.smh.around(ranks, op.sms, inst.fire)
