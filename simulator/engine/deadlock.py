"""A run that ended with ops still waiting (``DeadlockError``) or messages nobody received
(``UnmatchedSendError``): the check after the run and the report of what each stuck op waits
for, derived from the engine's state.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.engine.streams import COLL, RECV, SEND, Stream

if TYPE_CHECKING:
    from simulator.engine.core import Engine


class DeadlockError(RuntimeError):
    """Ops were still waiting when nothing was left to happen."""


class UnmatchedSendError(RuntimeError):
    """A message was sent that no ``Recv`` ever took."""


def check_finished(eng: Engine) -> None:
    """Raise ``DeadlockError`` naming the ops still waiting (up to 8) and what each waits
    for, else ``UnmatchedSendError`` if a message was never received."""
    stuck = []
    for (rank, stream), st in sorted(eng.where.items()):
        ops = eng.programs[rank].streams[stream]
        if st.idx < len(ops):
            stuck.append(f"rank {rank} stream {stream} op {ops[st.idx].id} "
                         f"{ops[st.idx].label!r} {_why(eng, rank, why(eng, st))}")
    if stuck:
        more = f" (and {len(stuck) - 8} more)" if len(stuck) > 8 else ""
        raise DeadlockError("deadlock: " + "; ".join(stuck[:8]) + more)
    left = sorted(k for k, v in eng.mail.items() if type(v) is not Stream)
    if left:
        src, dst, tag, n = left[0]
        raise UnmatchedSendError(f"{len(left)} message(s) never received, first: rank {src} "
                                 f"-> rank {dst} tag {tag!r} (message #{n})")


def why(eng: Engine, st: Stream) -> tuple:
    """What ``st``'s current op waits for (the deadlock report), derived from the state:
    an op is done when its stream has moved past it."""
    op = st.ops[st.idx]
    at = {o.id: (name, i) for name, ops in eng.programs[st.rank].streams.items()
          for i, o in enumerate(ops)}
    for d in op.deps:
        name, i = at.get(d, (None, 0))
        if name is None or eng.where[(st.rank, name)].idx <= i:
            return ("dep", d)
    code = st.codes[st.idx]
    if code == RECV:
        return ("recv", op)
    if code == COLL:
        return ("coll", op)
    if code == SEND and op.blocking and st.key in eng.parked:
        return ("send", op)
    return ("run", None)


def _why(eng: Engine, rank: int, why: tuple) -> str:
    if why[0] == "dep":
        op = eng.programs[rank].by_id().get(why[1])
        return f"waits for op {why[1]} {op.label if op else '?'!r}"
    if why[0] == "recv":
        return f"waits for a message from rank {why[1].src} tag {why[1].tag!r}"
    if why[0] == "run":
        return "never ended"
    if why[0] == "send":
        return f"waits for rank {why[1].dst} to post its receive of tag {why[1].tag!r}"
    return f"waits for the other members of {why[1].tag} group {list(why[1].group)}"
