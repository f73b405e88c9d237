"""How long a stage's first forward waits for its overlapped parameter gathers
(``overlap_param_gather`` on the fill path, ``stacks.param_gather``): the one-ahead dispatch
rule the estimate (``estimate.terms.fill_gathers``) reads and the simulator's ``FillGathers``
runs (docs/calibration.md §5.194).

Megatron-Core (NVIDIA/Megatron-LM core_v0.13.0, c550cf6, ``param_and_grad_buffer.py``
L253-289 ``finish_param_sync``, ``distributed_data_parallel.py`` L456-484 the forward
pre-hook): the first module using a bucket's parameters waits for that bucket's all-gather
(dispatching it first when none is in flight), then dispatches the next bucket's. The
gathers run one after another on one NCCL stream, each after the compute stream's work
queued before its dispatch. So, with ``a_i`` bucket ``i``'s gather seconds (forward order:
the embedding's bucket first on stage 0) and ``f_i`` the forward seconds between the point
that waits for bucket ``i`` and the one that waits for bucket ``i + 1``, the point for
bucket ``i + 1`` is reached ``max(f_i, a_{i+1})`` after bucket ``i``'s, and the stage's
exposed seconds are ``a_0 + sum_i max(0, a_{i+1} - f_i)``.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def gather_wait(gathers: Sequence[Any], forwards: Sequence[Any],
                early: Sequence[Any] | None = None) -> Any:
    """Seconds a stage's first forward waits for its parameter gathers, the first dispatched
    when the forward may start (t = 0). ``gathers``: each point's new bucket's gather
    seconds, in forward order (0: no bucket starts there); ``forwards``: the forward seconds
    after each point before the next (one fewer than the points, or as many: the last is
    not read); ``early``: where true, the bucket after this point's is dispatched at the
    point before, not when this point waits (the simulator's one compute op a layer: a
    layer's hook dispatches the gather after its MLP's bucket beside the layer,
    ``FillGathers``). Scalars or arrays over plans (broadcast).

    >>> float(gather_wait([2.0, 1.0, 3.0], [0.5, 2.0]))
    3.5
    >>> float(gather_wait([2.0, 0.0, 1.0], [0.5, 0.5]))
    2.0
    """
    t = g = p = exposed = 0.0
    for i, a in enumerate(gathers):
        u = t + forwards[i - 1] if i else 0.0
        real = np.asarray(a) > 0
        g = np.where(real, np.maximum(g, p) + a, g)
        w = np.where(real, np.maximum(u, g), u)
        exposed = exposed + (w - u)
        # the next bucket's dispatch: when this point waits, or (``early``) at the point before
        ahead = w if early is None else np.where(early[i], t, w)
        p = np.where(real, ahead, p)
        t = w
    return exposed
