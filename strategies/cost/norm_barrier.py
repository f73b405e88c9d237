"""The gradient-norm barrier before the optimizer step (docs/calibration.md §5.202).

A stack that clips gradients by their global norm sums each rank's local squared norm with an
all-reduce before any rank updates: Megatron-Core ``MixedPrecisionOptimizer.step`` ->
``clip_grad_norm`` -> ``get_grad_norm_fp32`` (``megatron/core/optimizer/clip_grads.py``,
``torch.distributed.all_reduce(total_norm, group=grad_stats_parallel_group)`` then
``total_norm.item()``, core_v0.13.0) over ``get_grad_stats_parallel_group``: the
model-parallel group (tensor x pipeline ranks) by default, the whole world with the
distributed optimizer (``distrib_optimizer.py`` ``get_grad_stats_parallel_group``). Under fp16
loss scaling ``_unscale_main_grads_and_check_for_nan`` all-reduces ``found_inf`` over the same
group first. DeepSpeed (``get_global_norm`` / ``get_grad_norm_direct``: data-parallel then
model-parallel all-reduce) and torchtitan (``clip_grad_norm_`` on DTensors, ``full_tensor`` of
the norm, then across the pipeline mesh) do the same over their groups.

So no rank of the group updates until every one has its gradients reduced: the step ends at
``max_r(ready_r) + allreduce + max_r(post_r)`` (``barrier_step``) rather than
``max_r(ready_r + post_r)``, ``ready_r`` a rank's end of gradient reduction, ``post_r`` its
optimizer, per-step passes and what follows them on that rank. The all-reduce moves one fp32
scalar (``NORM_BYTES``): latency-bound, the project's cost of such all-reduces
(``comm.small_allreduce_time``: the lesser of the ring and NCCL's tree, as for the amaxes)
over the group. The rule the estimate (``terms.tail``), the lower bound
(``bound.pipeline_paths``) and the simulator (``simulator.program.builder``, a ring op whose
``repeat`` is ``ring_share``) read."""
from __future__ import annotations

import numpy as np

from strategies.cost import comm as cm
from strategies.cost.token_counts import Num
from strategies.stacks.passes import StepPasses
from topologies.cluster import Cluster

#: bytes each rank contributes to the norm's all-reduce: one fp32 scalar (``total_norm``,
#: ``torch.zeros(1, dtype=torch.float, device='cuda')`` summed in place; ``found_inf`` too)
NORM_BYTES = 4.0


def barrier_on(step: StepPasses) -> bool:
    """Whether a stack whose per-step passes are ``step`` synchronises its ranks on the
    gradient norm: it clips by the global norm (``grad_norm``) and the barrier is modelled
    (``norm_barrier``)."""
    return bool(step.grad_norm and step.norm_barrier)


def stats_group(tp: Num, pp: Num, cp: Num, dp: Num, zero: Num) -> tuple[Num, Num]:
    """The grad-stats group of plans (``(size, stride)`` in ranks, placement ``tp-cp-dp-pp``):
    with the distributed optimizer (ZeRO >= 1) every rank, consecutive; without, the
    model-parallel group, ``tp`` consecutive ranks on each of ``pp`` stages ``tp·cp·dp``
    apart (a ``tp·pp`` group spanning the same ranks as a stride of ``cp·dp``)."""
    tp, pp, cp, dp, zero = (np.asarray(x) for x in (tp, pp, cp, dp, zero))
    world = tp * pp * cp * dp
    n = np.where(zero >= 1, world, tp * pp)
    stride = np.where((zero >= 1) | (pp == 1), 1, cp * dp)
    return n, stride


def barrier_time(on: Num, tp: Num, pp: Num, cp: Num, dp: Num, zero: Num,
                 cl: Cluster) -> Num:
    """Seconds of the norm's all-reduce over the grad-stats group (``stats_group``) where the
    barrier is ``on`` and the group holds more than one rank, else 0. Vectorised."""
    n, stride = stats_group(tp, pp, cp, dp, zero)
    live = np.asarray(on, bool) & (n > 1)
    if not np.any(live):
        return np.zeros(np.broadcast(n, live).shape) if np.ndim(n) else 0.0
    t = cm.small_allreduce_time(NORM_BYTES, np.where(live, n, 2), np.where(live, stride, 1),
                                cl)
    return np.where(live, t, 0.0)


def ring_share(tp: int, pp: int, cp: int, dp: int, zero: int, cl: Cluster) -> float:
    """``barrier_time`` over the ring's seconds for the same group (``comm.collective_time``):
    the ``repeat`` of the simulator's ring op, which then lasts the estimate's time alone on
    the wire (1 where the group is one rank)."""
    n, stride = stats_group(tp, pp, cp, dp, zero)
    if int(n) < 2:
        return 1.0
    return float(barrier_time(True, tp, pp, cp, dp, zero, cl)
                 / cm.collective_time("allreduce", NORM_BYTES, n, stride, cl))


def barrier_step(ready: list, post: list, barrier_s: Num) -> Num:
    """The end of a step whose ranks (or kinds of rank) ``k`` have their gradients reduced at
    ``ready[k]`` and then run ``post[k]`` seconds (optimizer, passes, what follows), all
    behind the norm's all-reduce of ``barrier_s`` seconds: ``max ready + barrier_s + max
    post`` (``-inf`` entries: no such rank). Numbers or arrays over plans; seconds."""
    return (np.max(np.asarray(ready, dtype=float), axis=0) + barrier_s
            + np.max(np.asarray(post, dtype=float), axis=0))


def unsynchronised_step(ready: list, post: list) -> Num:
    """The same ranks without the barrier: each updates as soon as its own gradients are
    reduced, ``max_k(ready[k] + post[k])``. Seconds."""
    return np.max(np.asarray(ready, dtype=float) + np.asarray(post, dtype=float), axis=0)
