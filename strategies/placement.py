"""Rank placement: which global rank (GPU) holds which (tp, cp, dp, pp) coordinate.

The ``order`` string lists the dimensions innermost (fastest-varying) first, as Megatron-LM's
``RankGenerator`` does. The default ``"tp-cp-dp-pp"`` is Megatron's: tensor-parallel peers are
consecutive ranks (so they share a node's NVLink), then context parallelism, then data
parallelism, and pipeline stages outermost::

    rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))

Any permutation of ``tp``, ``cp``, ``dp``, ``pp`` may be given (e.g. ``"tp-dp-cp-pp"``).
Global rank ``r`` sits on node ``r // gpus_per_node`` (see :mod:`topologies.graph`).

Expert parallelism (``ep``) does not add a dimension: the expert layers lay the same ranks
out again, as Megatron-Core's second rank generator does (``parallel_state``: order
``tp-cp-ep-dp-pp``, with the expert tensor-parallel size ``etp`` in place of ``tp``, no cp,
and the expert-data-parallel size ``edp = tp·cp·dp/(etp·ep)`` in place of dp). Within one
pipeline stage the ``tp·cp·dp`` ranks, in rank order, are indexed
``etp_rank + etp · (ep_rank + ep · edp_rank)``: expert tensor-parallel peers are consecutive
ranks, then the ``ep`` ranks of an all-to-all group ``etp`` apart, so an expert group fills a
node's NVLink domain first and crosses nodes only when ``etp·ep`` exceeds the node, where its
all-to-all shares the NICs with data- and pipeline-parallel traffic. With ``etp = tp`` (the
default) and the default order this is the same as flattening cp and dp into one index
``e = cp_rank + cp · dp_rank`` and cutting it into consecutive blocks of ``ep``; with
``etp = tp`` the flattening follows any ``order`` given.

Every function needs ``plan.dp`` (set by :func:`strategies.job.make_job`).

>>> from strategies.plan import Plan
>>> p = Plan(tp=2, pp=4, dp=2)
>>> groups(p, "tp")[:2], groups(p, "dp")[:2], groups(p, "pp")[0]
([[0, 1], [2, 3]], [[0, 2], [1, 3]], [0, 4, 8, 12])
>>> rank_of(p, 1, 0, 1, 3), coords_of(p, 15)
(15, {'tp': 1, 'cp': 0, 'dp': 1, 'pp': 3})
"""
from __future__ import annotations

import numpy as np

from strategies.errors import SpecError
from strategies.plan import Plan

DIMS = ("tp", "cp", "dp", "pp")
GROUP_DIMS = ("tp", "cp", "dp", "pp", "ep", "etp", "edp", "dpcp", "dprep", "cpa", "cpr")
DEFAULT_ORDER = "tp-cp-dp-pp"


def parse_order(order: str) -> tuple[str, ...]:
    """``"tp-cp-dp-pp"`` -> ``("tp", "cp", "dp", "pp")``; each of the four exactly once."""
    parts = tuple(p.strip().lower() for p in str(order).split("-"))
    if sorted(parts) != sorted(DIMS):
        raise SpecError("order", order, "must name tp, cp, dp and pp once each, innermost "
                        "first, joined by '-' (e.g. tp-cp-dp-pp)")
    return parts


def sizes(plan: Plan) -> dict[str, int]:
    """``{"tp": .., "cp": .., "dp": .., "pp": ..}``; refuses a plan whose dp is unresolved."""
    if plan.dp is None:
        raise SpecError("dp", None, "placement needs a resolved data-parallel size "
                        "(build the plan with strategies.job.make_job or give dp=)")
    return {"tp": plan.tp, "cp": plan.cp, "dp": plan.dp, "pp": plan.pp}


def world_size(plan: Plan) -> int:
    """Number of ranks: ``tp * cp * dp * pp``."""
    s = sizes(plan)
    return s["tp"] * s["cp"] * s["dp"] * s["pp"]


def rank_of(plan: Plan, tp_rank: int, cp_rank: int, dp_rank: int, pp_rank: int,
            order: str = DEFAULT_ORDER) -> int:
    """Global rank of a coordinate (mixed radix, first dimension of ``order`` innermost)."""
    size = sizes(plan)
    coords = {"tp": tp_rank, "cp": cp_rank, "dp": dp_rank, "pp": pp_rank}
    rank, stride = 0, 1
    for d in parse_order(order):
        c = coords[d]
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < size[d]:
            raise SpecError(f"{d}_rank", c, f"must be an integer in 0..{size[d] - 1} ({d}={size[d]})")
        rank += c * stride
        stride *= size[d]
    return rank


def coords_of(plan: Plan, rank: int, order: str = DEFAULT_ORDER) -> dict[str, int]:
    """``{"tp", "cp", "dp", "pp"}`` coordinates of global ``rank`` (inverse of :func:`rank_of`)."""
    size, n = sizes(plan), world_size(plan)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < n:
        raise SpecError("rank", rank, f"must be an integer in 0..{n - 1}")
    out = {}
    for d in parse_order(order):
        rank, out[d] = divmod(rank, size[d])
    return {d: out[d] for d in DIMS}


def _grid(plan: Plan, order: str) -> tuple[np.ndarray, list[str]]:
    """Ranks as an array whose axes are the dimensions outermost first (C order)."""
    dims = list(reversed(parse_order(order)))
    size = sizes(plan)
    return np.arange(world_size(plan)).reshape([size[d] for d in dims]), dims


def groups(plan: Plan, dim: str, order: str = DEFAULT_ORDER) -> list[list[int]]:
    """The communication groups of ``dim`` (tp, cp, dp, pp, ep, etp, edp, dpcp or dprep):
    lists of global ranks, each ordered by rank in that dimension, the groups ordered by their
    first rank. They partition all ranks. ``dpcp`` is the group a dense parameter's ZeRO
    shard spans (``dense_dp_group``): the ``cp·dp_shard`` ranks of one tp, pp and replica
    coordinate, cp and dp flattened as ``order`` nests them; ``dprep`` the ``dp/dp_shard``
    ranks that hold the same shard (``replica_group``; one rank each without hybrid
    sharding). A data-parallel rank ``d`` is shard ``d mod dp_shard`` of replica
    ``d // dp_shard`` (torchtitan's mesh ``dp_replicate`` outside ``dp_shard``, Megatron-Core's
    consecutive distributed-optimizer instances). A replica is a block of ``tp·cp·dp_shard``
    consecutive ranks of a pipeline stage (default order), so with hybrid sharding ``edp``
    is the expert grid of one replica's block (``expert_dp_group`` over ``dp_shard``,
    Megatron-Core's intra-partial expert group) and the experts' replicas are ``dprep``
    (its inter-instance group, one for dense and expert parameters)."""
    if dim not in GROUP_DIMS:
        raise SpecError("dim", dim, f"must be one of {', '.join(GROUP_DIMS)}")
    if dim in ("cpa", "cpr"):
        return cp_level_groups(plan, dim, order)
    grid, dims = _grid(plan, order)
    if dim in ("ep", "etp", "edp"):
        return _expert_groups(plan, grid, dims, dim, order)
    if dim in ("dpcp", "dprep"):
        size = sizes(plan)
        s = plan.shard_dp
        a = dims.index("dp")            # the dp axis split into (replica, shard), shard inner
        grid = grid.reshape(grid.shape[:a] + (size["dp"] // s, s) + grid.shape[a + 1:])
        dims = dims[:a] + ["rep", "dp"] + dims[a + 1:]
        if dim == "dprep":
            rows = np.moveaxis(grid, dims.index("rep"), -1).reshape(-1, size["dp"] // s)
            return sorted(rows.tolist())
        inner = [dims.index(d) for d in dims if d in ("cp", "dp")]  # the outer of the two first
        arr = np.moveaxis(grid, inner, [-2, -1]).reshape(-1, size["cp"] * s)
        return sorted(arr.tolist())
    rows = np.moveaxis(grid, dims.index(dim), -1).reshape(-1, grid.shape[dims.index(dim)])
    return sorted(rows.tolist())


def cp_level_groups(plan: Plan, dim: str, order: str = DEFAULT_ORDER) -> list[list[int]]:
    """Megatron-Core's two levels of hierarchical context parallelism (``cp_comm=a2a+p2p``,
    ``parallel_state.create_hierarchical_groups`` @d98e8a6 L378-437, sizes ``(k, cp/k)``):
    ``cpa``, the all-to-all groups, ``k = plan.hierarchical_cp`` consecutive members of each
    CP group; ``cpr``, the ring groups, its members ``k`` apart. Without ``hierarchical_cp``
    ``cpa`` is each rank alone and ``cpr`` the CP group (the ring alone)."""
    k = plan.hierarchical_cp or 1
    # every CP group cut as (group, ring position, all-to-all position), all at once
    cut = np.asarray(groups(plan, "cp", order)).reshape(-1, plan.cp // k, k)
    rows = cut.reshape(-1, k) if dim == "cpa" else cut.transpose(0, 2, 1).reshape(-1, plan.cp // k)
    return sorted(rows.tolist())


def expert_sizes(plan: Plan) -> tuple[int, int, int]:
    """``(etp, ep, edp)``: expert tensor-, expert- and expert-data-parallel sizes, their
    product the ``tp·cp·dp`` ranks of one pipeline stage (``SpecError`` when ``etp·ep`` does
    not divide them)."""
    s = sizes(plan)
    ranks, etp, ep = s["tp"] * s["cp"] * s["dp"], plan.expert_tp, plan.ep
    if ranks % (etp * ep):
        raise SpecError("ep", ep, f"etp*ep = {etp}*{ep} must divide tp*cp*dp = {s['tp']}*"
                        f"{s['cp']}*{s['dp']} = {ranks} (expert groups are cut from the ranks "
                        "of a pipeline stage)")
    return etp, ep, ranks // (etp * ep)


def dense_dp_group(tp, cp, dp):
    """``(size, stride)`` of the group that holds the copies of one dense (not routed-expert)
    parameter, or with hybrid sharding the group its ZeRO shard spans (``dp`` given as the
    plan's ``shard_dp``: ``dp_shard``; the replicas: ``replica_group``): the ``dp·cp`` ranks
    of a pipeline stage with the same tensor-parallel rank,
    ``tp`` apart in rank order (``tp-cp-dp-pp``: cp and dp are the two dimensions after tp;
    the layout ``groups(plan, "dpcp")`` builds). The cp ranks hold the same weights and see
    different chunks of the sequence, so their gradients are summed too: Megatron-Core's
    data-parallel group with context parallelism (``parallel_state.
    get_data_parallel_group(with_context_parallel=True)``, which its
    ``DistributedDataParallel`` and distributed optimizer reduce and shard over),
    torchtitan's ``dp_shard_cp`` FSDP mesh. Every collective over a dense parameter's
    copies reads it (``strategies.cost.comm.dp_parts``: the gradient reduction, the
    parameter gathers, ZeRO-3's), and so does the ZeRO shard a rank holds (the step's
    optimizer and the memory model). Vectorised."""
    size = np.asarray(dp, dtype=float) * np.asarray(cp, dtype=float)
    return size[()], (np.asarray(tp, dtype=float) + 0 * size)[()]


def replica_group(tp, cp, dp, dp_shard):
    """``(size, stride)`` of the group of ranks that hold the same ZeRO shard of a dense
    parameter under hybrid sharding (``groups(plan, "dprep")``): the ``dp/dp_shard`` replicas,
    ``tp·cp·dp_shard`` ranks apart (``tp-cp-dp-pp``). They all-reduce their shard of the
    reduce-scattered gradients (FSDP's HSDP; Megatron-Core's all-reduce across
    distributed-optimizer instances): ``strategies.cost.comm.dp_collective_time``. Size 1
    without hybrid sharding (``dp_shard = dp``). Vectorised."""
    shard = np.asarray(dp_shard, dtype=float)
    size = np.asarray(dp, dtype=float) / shard
    return size[()], (np.asarray(tp, dtype=float) * cp * shard)[()]


def expert_dp_group(tp, cp, dp, ep, etp):
    """``(size, stride)`` of the group that holds the copies of one routed expert (its
    expert-data-parallel group): the ``tp·cp·dp/(etp·ep)`` ranks of a pipeline stage
    ``etp·ep`` apart in rank order (the layout ``groups(plan, "edp")`` builds, Megatron-Core's
    expert grid; at least one rank). With hybrid sharding ``dp`` is the plan's ``shard_dp``:
    the expert grid of one replica's ``tp·cp·dp_shard`` ranks, ``edp·dp_shard/dp`` ranks
    (Megatron-Core's ``_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP``: ``expert_data_parallel_size
    / num_distributed_optimizer_instances`` consecutive members of the expert group;
    torchtitan's ``efsdp``), the replicas ``replica_group`` as for the dense parameters.
    Every collective over an expert's copies reads it: the gradient reduction and the
    parameter gathers of its ZeRO shard (``strategies.cost.comm.dp_parts``), its ZeRO
    shard's size. Vectorised."""
    stride = np.asarray(etp, dtype=float) * np.asarray(ep, dtype=float)
    size = np.maximum(np.asarray(tp, dtype=float) * cp * dp / stride, 1.0)
    return size[()], stride[()]


def _expert_groups(plan: Plan, grid: np.ndarray, dims: list[str], dim: str,
                   order: str) -> list[list[int]]:
    etp, ep, edp = expert_sizes(plan)
    if etp == plan.tp and dim == "ep":     # any order: flatten cp and dp as ``order`` does
        inner = [dims.index(d) for d in dims if d in ("cp", "dp")]  # outer of the two first
        arr = np.moveaxis(grid, inner, [-2, -1]).reshape(-1, ep)
        return sorted(arr.tolist())
    if parse_order(order)[-1] != "pp":
        raise SpecError("order", order, "expert groups with etp != tp need pipeline "
                        "parallelism outermost (Megatron's tp-cp-ep-dp-pp)")
    # hybrid sharding: each replica's block its own expert grid (``edp`` its shard group)
    rep = plan.dp // plan.shard_dp
    stages = np.arange(world_size(plan)).reshape(plan.pp * rep, edp // rep, ep, etp)
    axis = {"edp": 1, "ep": 2, "etp": 3}[dim]
    rows = np.moveaxis(stages, axis, -1).reshape(-1, stages.shape[axis])
    return sorted(rows.tolist())


def tp_crosses_node(plan: Plan, gpus_per_node: int, order: str = DEFAULT_ORDER) -> bool:
    """True if some tensor-parallel group spans GPUs of more than one node (node of rank r
    is ``r // gpus_per_node``). With the default order that is when tp > gpus_per_node or
    tp does not divide gpus_per_node."""
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1:
        raise SpecError("gpus_per_node", gpus_per_node, "must be an integer >= 1")
    nodes = np.asarray(groups(plan, "tp", order)) // gpus_per_node
    return bool((nodes != nodes[:, :1]).any())
