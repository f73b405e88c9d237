"""DeepSpeed's 2021 ZeRO-3 per-tensor collectives through ``torch.distributed``'s tensor-list
forms: the collective, PyTorch's list copies and the HBM passes around each call."""
from __future__ import annotations

import numpy as np

from strategies.cost.comm.collective import collective_time
from strategies.cost.token_counts import Num
from topologies.cluster import Cluster


#: HBM bytes per gathered byte that DeepSpeed's 2021 ZeRO-3 moves on the GPU around each
#: per-tensor all-gather besides the collective: ``_allgather_param`` allocates the whole
#: tensor with ``torch.zeros`` (written once; ``runtime/zero/partition_parameters.py`` at
#: v0.3.13-v0.5.0), and PyTorch's list ``all_gather`` (``ProcessGroupNCCL::allgather``, PyTorch 1.7-1.8)
#: gathers into a flat buffer of its own and copies it into each of the ``n`` list entries
#: (read once, written once): 1 + 2
Z3_GATHER_PASSES = 3.0
#: HBM bytes per reduce-scattered gradient byte beside the collective: ``average_tensor``
#: divides the gradient by the data-parallel size before reducing it (``tensor.div_``: read and
#: written, ``runtime/zero/stage3.py`` v0.3.13-v0.5.0) and PyTorch's list ``reduce_scatter``
#: copies each of the ``n`` input entries into its flat input buffer (read and written): 2 + 2
Z3_SCATTER_PASSES = 4.0


def per_tensor_passes(kind: str) -> float:
    """HBM bytes per byte of the tensor that one DeepSpeed 2021 ZeRO-3 per-tensor call moves
    on the GPU besides the collective (``Z3_GATHER_PASSES`` for ``"allgather"``,
    ``Z3_SCATTER_PASSES`` for ``"reduce_scatter"``); a clear error for any other kind."""
    passes = {"allgather": Z3_GATHER_PASSES, "reduce_scatter": Z3_SCATTER_PASSES}
    if kind not in passes:
        raise ValueError(f"per-tensor ZeRO-3 kind {kind!r}: must be allgather or "
                         "reduce_scatter")
    return passes[kind]


def per_tensor_time(count: Num, nbytes: Num, n: Num, stride: Num, cluster: Cluster,
                    copy_gap: float, kind: str = "allgather", *, copy_rate: float) -> Num:
    """Seconds of ``count`` all-gathers (or reduce-scatters) run one after another, one per
    parameter tensor, ``nbytes`` gathered in all per rank, over ``n`` ranks ``stride`` apart,
    as DeepSpeed's 2021 ZeRO-3 runs them through ``torch.distributed`` (the tensor-list
    forms): each is the collective every other group of that shape runs (``collective_time``:
    NCCL's flat ring, striped over the members of several nodes, ``n - nodes`` steps at the
    NVLink latency and ``nodes - 1`` at the network's, as NCCL's tuning model sums them from
    v2.7 on: ``src/graph/tuning.cc`` at v2.8.4-1, docs/calibration.md §5.115) plus ``n`` copy
    kernels of ``copy_gap`` seconds (PyTorch's ``ProcessGroupNCCL`` copies the flat buffer to,
    or from, each of the ``n`` list entries) plus the bytes those copies and DeepSpeed's own
    pass move in HBM, ``per_tensor_passes(kind) · nbytes`` at ``copy_rate`` bytes/s (the GPU's
    usable HBM rate; docs/calibration.md §5.124). The simulator runs the same collective
    ``count`` times back to back (``repeat``) and the rest after it (``per_tensor_excess``).
    Vectorised; 0 where ``count`` is 0 or ``n < 2``."""
    calls = (np.asarray(count) > 0) & (np.asarray(n) > 1)
    if np.any(calls) and not copy_rate > 0:
        raise ValueError(f"per-tensor ZeRO-3 copy_rate {copy_rate!r}: must be > 0 bytes/s")
    per = nbytes / np.maximum(count, 1)
    one = collective_time(kind, per, n, stride, cluster)
    local = per_tensor_passes(kind) * nbytes / (copy_rate if copy_rate > 0 else 1.0)
    return np.where(calls, count * one + count * n * copy_gap + local, 0.0)[()]


def per_tensor_excess(kind: str, count: Num, nbytes: Num, n: Num, stride: Num,
                      cluster: Cluster, copy_gap: float, *, copy_rate: float) -> Num:
    """Seconds of ``per_tensor_time`` beyond ``count`` calls of the collective the
    simulator runs for the group (``collective_time``): the ``n`` list copies per call and the
    HBM passes. The simulator runs the collective ``count`` times (``repeat``) then this much
    more on the communication stream, so alone on the wire it takes exactly
    ``per_tensor_time``; clipped at 0. Vectorised."""
    per = nbytes / np.maximum(count, 1)
    own = count * collective_time(kind, per, n, stride, cluster)
    return np.maximum(per_tensor_time(count, nbytes, n, stride, cluster, copy_gap, kind,
                                      copy_rate=copy_rate) - own, 0.0)[()]
