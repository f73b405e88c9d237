"""Which NCCL stream each pipeline transfer of one Megatron-Core p2p call runs on, how many
of them run one after another, and what ``overlap_p2p_comm`` leaves exposed
(docs/calibration.md §5.63). Pure; no SimPy.

The facts, read from the code (nothing fitted):

* PyTorch ``ProcessGroupNCCL::pointToPoint`` (pytorch/pytorch
  ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``): a lone ``isend``/``irecv`` runs on the
  communicator and the stream ``ncclStreams_[key]`` of ``key = getKeySendRecv(rank, peer)``,
  the pair ``low:high``; inside ``batch_isend_irecv`` (``ncclActiveGroupCounter_ > 0``) every
  op takes the device's key and the group is one NCCL launch. The streams belong to the
  process-group object, so two groups never share one. Megatron initialises lazily (no
  ``device_id`` to ``init_process_group``), so the pair key is the one that runs.
* Megatron-Core ``p2p_communication._p2p_ops`` (``batch_p2p_comm`` false): even pipeline
  ranks issue ``send_next, recv_prev, send_prev, recv_next``, odd ranks ``recv_prev,
  send_next, recv_next, send_prev``; with a pipeline group of two ranks the even ranks' sends
  and the odd ranks' receives use the pipeline group and the other direction the WORLD group
  ("to allow the overlap of the independent communications", Megatron-LM commit 3ee489d9ea,
  May 2024, in every release from core_r0.8.0). So with pp = 2 one stream carries the data
  one way and another stream the other way; with pp > 2 one stream per neighbour pair
  (next, previous), each carrying one direction's send and the other's receive.
* ``schedules.forward_backward_pipelining_with_interleaving`` with ``overlap_p2p_comm``
  (Megatron-LM's default for interleaving, ``batch_p2p_comm = not overlap_p2p_comm``;
  NeMo's ``MegatronCommOverlapCallback`` when vp > 1) issues ``send_forward_recv_forward``
  after each forward and ``send_backward_recv_backward`` after each backward, and waits for
  a call's receive just before the next pass of the same kind: one pass of the other kind
  runs between. Without overlap and unbatched, the steady step's four transfers are one
  ``send_forward_backward_recv_forward_backward`` call (refused for pp = 2 with virtual
  stages: "multiple p2p sends and recvs between same 2 ranks", ``arguments.py``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

#: one transfer of a call: ``("send" | "recv", "next" | "prev")``
Op = tuple[str, str]

#: Megatron-Core's calls (``p2p_communication``): the overlapped interleaved pair, the
#: blocking four-transfer steady call, and 1F1B's two steady calls
SEND_FORWARD_RECV_FORWARD: tuple[Op, ...] = (("send", "next"), ("recv", "prev"))
SEND_BACKWARD_RECV_BACKWARD: tuple[Op, ...] = (("send", "prev"), ("recv", "next"))
SEND_FORWARD_BACKWARD_RECV_FORWARD_BACKWARD: tuple[Op, ...] = (
    ("send", "next"), ("recv", "prev"), ("send", "prev"), ("recv", "next"))
SEND_FORWARD_RECV_BACKWARD: tuple[Op, ...] = (("send", "next"), ("recv", "next"))
SEND_BACKWARD_RECV_FORWARD: tuple[Op, ...] = (("send", "prev"), ("recv", "prev"))


def _check(ops: tuple[Op, ...], pp: int) -> None:
    if pp < 2:
        raise ValueError(f"pp={pp}: a pipeline transfer needs pp >= 2")
    for kind, side in ops:
        if kind not in ("send", "recv") or side not in ("next", "prev"):
            raise ValueError(f"op {(kind, side)!r}: kind must be 'send' or 'recv' and side "
                             "'next' or 'prev'")


def stream_of(op: Op, pp: int, batched: bool = False) -> str:
    """The stream ``op`` runs on, named for what sets it: ``"group"`` inside a batched call
    (the device's key, one launch), else with pp = 2 the data's direction (``"out"``: this
    rank's sends, ``"in"``: its receives; Megatron's two groups) and with pp > 2 the peer
    pair (``"next"``, ``"prev"``; ``getKeySendRecv``)."""
    _check((op,), pp)
    if batched:
        return "group"
    kind, side = op
    if pp == 2:
        return "out" if kind == "send" else "in"
    return side


def serial_transfers(ops: tuple[Op, ...], pp: int, batched: bool = False) -> int:
    """The most transfers of one call that share a stream (they run one after another;
    a batched call is one grouped launch: 1). 0 for an empty call."""
    _check(ops, pp)
    if not ops:
        return 0
    if batched:
        return 1
    counts: dict[str, int] = {}
    for op in ops:
        key = stream_of(op, pp)
        counts[key] = counts.get(key, 0) + 1
    return max(counts.values())


def call_time(t_message: Any, ops: tuple[Op, ...], pp: int, batched: bool = False) -> Any:
    """Seconds one call keeps its busiest stream: the serial sum of the transfers on it,
    ``serial_transfers · t_message`` (each transfer one message of ``t_message`` seconds,
    ``strategies.cost.comm.p2p_time``). Vectorised over ``t_message``."""
    return serial_transfers(ops, pp, batched) * np.asarray(t_message, dtype=float)[()]


def overlapped_exposed(t_call: Any, hiding: Any) -> Any:
    """Seconds of one ``overlap_p2p_comm`` call left on the critical path: what its stream
    time outlasts the pass of the other kind run before the call is waited for
    (``hiding``, seconds), ``max(0, t_call − hiding)``. Vectorised."""
    return np.maximum(np.asarray(t_call, dtype=float) - np.asarray(hiding, dtype=float),
                      0.0)[()]
