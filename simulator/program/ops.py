"""Ops: the small immutable records a rank's program is made of.

A program is a list of ops per *stream* (``compute``, ``tp-comm``, ``cp-comm``, ``ep-comm``,
``dp-comm``, ``pp-comm``). Each stream runs its ops one after the other; an op also waits for
its explicit ``deps`` (ids of ops of the same rank, on any stream). Ranks meet only through
``Send``/``Recv`` pairs (matched first-in first-out per ``(src, dst, tag)``) and through
``Collective`` rendezvous (the ``k``-th collective with a given ``(group, tag)`` on each member).
Overlap is therefore the natural result of independent streams.

Units: seconds, bytes.

>>> c = Compute(0, "compute", 1e-3, "forward", "F0.c0", microbatch=0, chunk=0)
>>> s = Send(1, "pp-comm", dst=8, nbytes=1e6, tag="fwd", deps=(0,))
>>> c.label, s.record_kind, s.deps
('F0.c0', 'pp_send', (0,))
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Iterator, Union

from simulator.result import STREAMS  # noqa: F401  (the stream names: one definition)

COLLECTIVE_KINDS = ("allreduce", "reduce_scatter", "allgather", "alltoall")


def _slot_init(cls: type) -> type:
    """``cls`` (a frozen slotted dataclass) with an ``__init__`` that fills its slots through
    their member descriptors instead of ``object.__setattr__`` by name: the same signature,
    defaults, ``__post_init__`` and frozen instances, half the cost (a large job's programs
    hold hundreds of thousands of ops)."""
    ns: dict = {}
    params, body = [], []
    for f in fields(cls):
        assert f.default_factory is MISSING, f"{cls.__name__}.{f.name}: no default factories"
        ns[f"_set_{f.name}"] = getattr(cls, f.name).__set__
        if f.default is MISSING:
            params.append(f.name)
        else:
            ns[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        body.append(f"    _set_{f.name}(self, {f.name})\n")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()\n")
    exec(f"def __init__(self, {', '.join(params)}):\n{''.join(body)}", ns)
    ns["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = ns["__init__"]
    return cls


@_slot_init
@dataclass(frozen=True, slots=True)
class Compute:
    """``seconds`` of work on a stream (normally ``compute``). ``kind`` is the record kind:
    forward, backward, recompute, embedding, lm_head or optimizer."""

    id: int
    stream: str
    seconds: float
    kind: str
    label: str
    microbatch: int = -1
    chunk: int = -1
    deps: tuple[int, ...] = ()

    @property
    def record_kind(self) -> str:
        return self.kind


@_slot_init
@dataclass(frozen=True, slots=True)
class Send:
    """Send ``nbytes`` to rank ``dst``; the op ends when the last byte has arrived. Eager by
    default (the transfer starts when the op starts, whether or not the receiver is waiting);
    ``blocking``: the transfer starts only once the receiver has posted the matching ``Recv``
    (a rendezvous, as a synchronous ``torch.distributed.send``)."""

    id: int
    stream: str
    dst: int
    nbytes: float
    tag: str
    label: str = ""
    microbatch: int = -1
    chunk: int = -1
    deps: tuple[int, ...] = ()
    blocking: bool = False

    @property
    def record_kind(self) -> str:
        return "pp_send"


@_slot_init
@dataclass(frozen=True, slots=True)
class Recv:
    """Wait for the next message from rank ``src`` with ``tag`` (first-in first-out)."""

    id: int
    stream: str
    src: int
    tag: str
    label: str = ""
    microbatch: int = -1
    chunk: int = -1
    deps: tuple[int, ...] = ()

    @property
    def record_kind(self) -> str:
        return "pp_recv"


@_slot_init
@dataclass(frozen=True, slots=True)
class Collective:
    """A collective over ``group`` (global ranks, in ring order) of an ``nbytes`` buffer per
    rank (NCCL's count: the full vector for all-reduce, the gathered vector for all-gather and
    reduce-scatter, the total sent for all-to-all), ``repeat`` times back to back (a float:
    the bytes and the latency terms scale with it). ``algorithm``: ``ring``,
    ``hierarchical``, ``all_to_all`` or ``ring_stepwise`` (simulator.network.stepwise_oracle's ring, the test oracle).
    ``category`` is the record kind (tp, cp, ep, dp, pp_gather). ``sms``: the SMs its kernel
    holds on each member while it is in flight (``strategies.cost.sm_share.window_sms``; 0:
    the copy engine, or the charge off), which the engine takes from the members' compute
    when ``SystemConfig.comm_sm_share`` is on."""

    id: int
    stream: str
    kind: str
    group: tuple[int, ...]
    nbytes: float
    algorithm: str
    tag: str
    category: str
    label: str = ""
    repeat: float = 1.0
    microbatch: int = -1
    chunk: int = -1
    deps: tuple[int, ...] = ()
    remote_scale: float = 1.0     # all-to-all: share of per-pair bytes between nodes
    nvlink_share: float = 1.0     # all-to-all: share of NVLink's rate its kernel reaches
    sms: float = 0.0              # SMs its kernel holds on each member while in flight

    def __post_init__(self) -> None:
        if self.kind not in COLLECTIVE_KINDS:
            raise ValueError(f"Collective kind={self.kind!r}: must be one of {COLLECTIVE_KINDS}")

    @property
    def record_kind(self) -> str:
        return self.category


Op = Union[Compute, Send, Recv, Collective]


@dataclass(frozen=True)
class Program:
    """What one rank runs in one optimizer step: ops per stream, in order.

    ``meta`` carries facts the metrics need (e.g. ``fwd_window_s``, the forward time of one
    micro-batch that may hide the next step's parameter all-gather)."""

    rank: int
    stage: int
    streams: dict[str, tuple[Op, ...]]
    meta: dict = field(default_factory=dict, compare=False)

    def ops(self) -> Iterator[Op]:
        """Every op, stream by stream in ``STREAMS`` order."""
        for name in sorted(self.streams, key=_stream_key):
            yield from self.streams[name]

    def by_id(self) -> dict[int, Op]:
        return {op.id: op for op in self.ops()}

    def __len__(self) -> int:
        return sum(len(v) for v in self.streams.values())


def _stream_key(name: str) -> tuple[int, str]:
    return (STREAMS.index(name) if name in STREAMS else len(STREAMS), name)
