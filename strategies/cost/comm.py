"""Analytic times of collectives on a cluster: the bandwidth a group really gets.

``collective_time`` is what the estimate reads: the algorithm ``strategies.collectives.select``
picks for the group (the compiler's rule), timed by that algorithm's closed form. A group of
``n`` ranks with ``k`` of them per node runs a ring over NVLink when it fits in a node, a ring
over the NICs with one member per node, and with ``k > 1`` members on each of several nodes
NCCL's flat ring striped over the members for every all-reduce, all-gather and
reduce-scatter (``ring.striped_time``; docs/calibration.md §3.21). Groups laid out
differently from one group to the next (``mixed``: e.g. 12 ranks over 8-GPU nodes) keep
``group_bandwidth``'s ring that crosses node boundaries,
where the ``k`` local members share the node's NICs and the ring's inter-node hop gets ``k``
GPUs' worth of NIC bandwidth (NCCL stripes its channels over the NICs), reduced by the
fabric's oversubscription. Achieved bus bandwidth is
the link bandwidth times ``NCCL_EFFICIENCY`` (nccl-tests on DGX A100/H100 reach about 80% of
NVLink and 90% of InfiniBand line rate for large messages). Latency: one hop per ring step.

Between nodes the path rule is ``topologies.routing``'s, the one the simulator's routes
follow: a hop between nodes crosses the GPU's NIC link and its plane ports (striped over a
multi-plane network: together the NIC), and on a rail topology (rail fat tree, rail-only,
torus, ring) first one hop of the source node's fabric when the destination sits on another
rail (``relays``), which adds that hop's rate to the minimum and its latency to the sum
(``transfer_rate``, ``transfer_latency``). Rings with one member per node join GPUs of the
same rail (no relay); the striped ring's hop to member ``j+1`` of the next node and a ring that
crosses node boundaries elsewhere (``mixed``) and a pipeline hop between GPUs of different
local indices relay.

A GPU profile's measured NCCL collectives (``paraplan calibrate``) scale the time of a
collective whose group lies within one node by measured over modelled seconds
(``measured_scale``; docs/calibration.md §5.71); between nodes the model above stays.

Closed forms (nccl-tests PERFORMANCE.md): all-reduce ``2(n-1)/n · S/B``, reduce-scatter and
all-gather ``(n-1)/n · S/B``, with S the per-rank buffer in bytes; they are the ``time`` of
``strategies.collectives.ring`` and ``.all_to_all``, the definitions the simulator's engine runs
as flows.
"""
from __future__ import annotations

import numpy as np

from strategies import placement
from strategies.collectives import PASSES, all_to_all, ring
from strategies.collectives.select import RING, strided_algorithm, strided_layout
from strategies.cost import ep_dispatch, measured, moe_bytes
from strategies.cost.token_counts import Num
from topologies.cluster import Cluster
from topologies.routing import fabric_hop_share, relays, transfer_latency, transfer_rate

NVLINK_EFFICIENCY = 0.80
NETWORK_EFFICIENCY = 0.90


def _hop_relays(cluster: Cluster, offsets) -> np.ndarray:
    """Whether a hop between nodes from some GPU to the GPU ``offset`` local indices further
    (mod the node) relays through the source node's fabric (``topologies.routing.relays``;
    true when it does for any source GPU: the step waits for its slowest hop). Vectorised
    over ``offsets`` (a tuple of arrays: any of them relaying counts)."""
    G = cluster.gpus_per_node
    rails = min(cluster.nics_per_node, G)
    offsets = np.broadcast_arrays(*(np.asarray(o, dtype=np.int64) for o in offsets))
    key = None
    if offsets[0].ndim == 0:         # one hop's answer, kept (_SCALAR_TIMES' rule: by id)
        key = (id(cluster),) + tuple(int(o) for o in offsets)
        hit = _SCALAR_RELAYS.get(key)
        if hit is not None and hit[0] is cluster:
            return hit[1].copy()
    # the answer depends on the offset mod the node only: one row per residue, then a look-up
    # per offset (not a (GPUs per node, plans) matrix per offset)
    local = np.arange(G)
    per = np.any(relays(cluster.inter_node_topology, rails, local[:, None],
                        np.mod(local[:, None] + local, G)), axis=0)
    out = np.zeros(offsets[0].shape, dtype=bool)
    for off in offsets:
        np.logical_or(out, per[np.mod(off, G)], out=out)
    if key is not None:
        if len(_SCALAR_RELAYS) >= _SCALAR_KEPT:
            _SCALAR_RELAYS.clear()
        _SCALAR_RELAYS[key] = (cluster, out.copy())
    return out


def _hop_rate(cluster: Cluster) -> float:
    """Achievable bytes/s of one GPU-to-GPU hop of the node fabric (a relay's hop)."""
    return (cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
            * fabric_hop_share(cluster.intra_node_topology, cluster.gpus_per_node))


def _nic_rate(cluster: Cluster, k: Num = 1) -> Num:
    """Achievable bytes/s of ``k`` GPUs' share of their node's NICs, reduced by the
    fabric's oversubscription (every GPU of the node sends at once)."""
    return (k * cluster.inter_node_bandwidth_per_gpu * NETWORK_EFFICIENCY
            / cluster.oversubscription)


def group_bandwidth(cluster: Cluster, n: Num, stride: Num) -> tuple[Num, Num]:
    """(bytes/s, per-step latency s) of a ring over ``n`` ranks spaced ``stride`` apart in rank
    order (tp has stride 1; dp has stride tp·cp, the dp·cp copies of a parameter tp; pp
    neighbours are tp·cp·dp apart). Inside a node the fabric's rate; across nodes
    ``topologies.routing.transfer_rate`` and ``transfer_latency`` of the ring's hops between
    nodes (``k`` members' NIC share; the relay when a hop, or the ring's closing hop, joins
    GPUs of different rails, as in the simulator's rank-order ring)."""
    G = cluster.gpus_per_node
    n, stride = np.asarray(n), np.asarray(stride)
    span = n * stride
    in_node = span <= G
    k = np.maximum(1, np.minimum(n, G // np.maximum(stride, 1)))  # group members per node
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    s = np.asarray(stride, dtype=np.int64)
    relay = _hop_relays(cluster, (s, -(np.asarray(n, dtype=np.int64) - 1) * s))
    across = transfer_rate(_hop_rate(cluster), _nic_rate(cluster, k), True, relay,
                           cluster.planes)
    bw = np.where(in_node, intra, across)
    lat = np.where(in_node, cluster.intra_node_latency,
                   transfer_latency(cluster.intra_node_latency, cluster.inter_node_latency,
                                    True, relay))
    return bw[()], lat[()]


# the closed forms live with their algorithms (strategies.collectives); the estimate reads them
allreduce_time = ring.allreduce_time
reduce_scatter_time = ring.reduce_scatter_time
allgather_time = ring.allgather_time
alltoall_time = all_to_all.time


# ``collective_time`` of one collective (Python or numpy scalars, not arrays) on one cluster
# object: a scalar estimate prices the same few collectives over and over (the gradient
# buckets, the ZeRO passes, the bound's floors), each a dozen numpy calls on 0-d arrays
# (validate_published --tiers all --no-sim: 16,362 calls, 4,626 distinct). Kept by the
# cluster's id with the cluster itself (a frozen spec: its id stays its own while kept)
# and each argument's type (a 0-d array's dtype too) and exact value (``float.hex``: -0.0
# is not 0.0); the answer
# is an immutable numpy scalar, the same object a fresh call would equal bit for bit.
_SCALAR_TIMES: dict[tuple, tuple[Cluster, Num]] = {}
_SCALAR_RELAYS: dict[tuple, tuple[Cluster, np.ndarray]] = {}     # _hop_relays of 0-d offsets
_SCALAR_KEPT = 8192
_FLOATS = (float, np.float64)
_INTS = (int, np.int64)


def _exact(x) -> tuple | None:
    """``x`` as a key that tells apart every value and type (None for anything else)."""
    t = type(x)
    if t in _FLOATS:
        return (t, float.hex(float(x)))
    if t in _INTS:
        return (t, int(x))
    if t is np.ndarray and x.ndim == 0 and x.dtype.kind in "fi":  # a 0-d array (np.where's)
        v = x[()]
        return (t, x.dtype.str, float.hex(float(v)) if x.dtype.kind == "f" else int(v))
    return None


def collective_time(kind: str, nbytes: Num, n: Num, stride: Num, cluster: Cluster,
                    remote_scale: Num = 1.0, nvlink_share: Num = 1.0) -> Num:
    """``_collective_time`` (below), kept for scalar arguments (``_SCALAR_TIMES``)."""
    parts = (kind, id(cluster)) + tuple(map(_exact, (nbytes, n, stride, remote_scale,
                                                     nvlink_share)))
    if None in parts:
        return _collective_time(kind, nbytes, n, stride, cluster, remote_scale, nvlink_share)
    hit = _SCALAR_TIMES.get(parts)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    out = _collective_time(kind, nbytes, n, stride, cluster, remote_scale, nvlink_share)
    if type(out) is np.float64:              # immutable: safe to hand out again
        if len(_SCALAR_TIMES) >= _SCALAR_KEPT:
            _SCALAR_TIMES.clear()
        _SCALAR_TIMES[parts] = (cluster, out)
    return out


def _collective_time(kind: str, nbytes: Num, n: Num, stride: Num, cluster: Cluster,
                     remote_scale: Num = 1.0, nvlink_share: Num = 1.0) -> Num:
    """``_catalog_time`` times ``measured_scale`` (the GPU profile's measured collectives,
    for groups within one node: ``in_one_node``). Vectorised."""
    t = _catalog_time(kind, nbytes, n, stride, cluster, remote_scale, nvlink_share)
    if _measured_table(cluster) is None:
        return t
    scale = measured_scale(kind, nbytes, n, in_one_node(n, stride, cluster.gpus_per_node),
                           cluster, nvlink_share)
    return (t * scale)[()]


def in_one_node(n: Num, stride: Num, gpus_per_node: int) -> Num:
    """True where every group of ``n`` ranks ``stride`` apart (placement's layout,
    ``strategies.collectives.select.strided_layout``) lies within one node. Vectorised."""
    uniform, _, nodes = strided_layout(n, stride, gpus_per_node)
    return (uniform & (nodes == 1))[()]


# the GPU profile's collective ratios (``strategies.cost.measured.collective_table``) of a
# cluster, kept by its id with the cluster itself (``_SCALAR_TIMES``' rule)
_MEASURED: dict[int, tuple[Cluster, object]] = {}


def profile_of(cluster: Cluster):
    """The GPU profile every node group's GPU carries (``topologies.gpu_profile``), else
    None: a cluster mixing GPUs measured differently (or not at all) keeps the network
    model for its collectives."""
    profs = [g.gpu.profile for g in cluster.groups]
    first = profs[0]
    return first if first is not None and all(p == first for p in profs[1:]) else None


def _measured_table(cluster: Cluster):
    hit = _MEASURED.get(id(cluster))
    if hit is not None and hit[0] is cluster:
        return hit[1]
    table = measured.collective_table(
        profile_of(cluster),
        lambda kind, nbytes, gpus: _catalog_time(kind, nbytes, gpus, 1, cluster))
    if len(_MEASURED) >= _SCALAR_KEPT:
        _MEASURED.clear()
    _MEASURED[id(cluster)] = (cluster, table)
    return table


def measured_scale(kind: str, nbytes: Num, n: Num, in_node: Num, cluster: Cluster,
                   nvlink_share: Num = 1.0) -> Num:
    """Measured over modelled seconds of collective ``kind`` of ``nbytes`` per rank over
    ``n`` ranks (``strategies.cost.measured.collective_ratio`` of the cluster's GPU profile:
    NCCL measured on ``n`` GPUs of one node, interpolated in log bytes) where ``in_node``
    (the group lies within one node) and the collective is NCCL's (``nvlink_share == 1``:
    DeepEP's and HybridEP's kernels are not what calibrate measured); 1 elsewhere, between
    nodes (calibrate measures one machine: never the network), and without a profile. The
    one rule the estimate (``collective_time``, ``pair_time``), the lower bound and the
    simulator (``ProgramBuilder.coll``: the op's ``repeat``, so that alone on the wire it
    takes this times the model's seconds) read. Vectorised."""
    table = _measured_table(cluster)
    if table is None:
        return 1.0
    r = measured.collective_ratio(table, kind, nbytes, n)
    on = np.asarray(in_node) & (np.asarray(nvlink_share) == 1.0)
    return np.where(on, r, 1.0)[()]


def measured_least(cluster: Cluster, kind: str) -> float:
    """The least of ``measured_scale`` over every size and group of collective ``kind``:
    ``min(1, least measured ratio)`` (the interpolation stays between measured ratios and
    is 1 elsewhere); 1 without a profile. A lower bound's factor."""
    table = _measured_table(cluster)
    ratios = [r for (k, _), (_, ys) in (table or {}).items() if k == kind for r in ys]
    return min([1.0, *ratios])


def _catalog_time(kind: str, nbytes: Num, n: Num, stride: Num, cluster: Cluster,
                  remote_scale: Num = 1.0, nvlink_share: Num = 1.0) -> Num:
    """Seconds of collective ``kind`` of an ``nbytes`` buffer per rank over ``n`` ranks
    ``stride`` apart, alone on its links, with the algorithm ``strategies.collectives.select``
    picks for such groups (the compiler's rule): over ``k > 1`` members on each of
    several nodes ``ring.striped_time`` (NVLink, one GPU's NIC share, the relay where the hop
    between nodes changes rail); otherwise ``ring``'s at ``group_bandwidth``; an all-to-all,
    ``all_to_all.two_level_time`` over the members' NVLink and NIC ports (``remote_scale``:
    the share of its bytes between nodes, node-limited routing; ``nvlink_share``: the share of
    NVLink's rate its kernel reaches, ``ep_dispatch.ep_nvlink_share``). Groups of a shape that is
    laid out differently from one group to the next (``mixed``) keep the NIC-striped ring of
    ``group_bandwidth``. Vectorised."""
    bw, lat = group_bandwidth(cluster, n, stride)
    G = cluster.gpus_per_node
    uniform, k, nodes = strided_layout(n, stride, G)
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    if kind == "alltoall":
        # the NVLink and NIC ports of each member at once (two_level_time); groups laid out
        # unevenly keep the one-port form at group_bandwidth's rate
        relay = pxn_relay(cluster)
        # the slowest pair's route: across nodes, through a PXN relay first, or forwarded
        # over NVLink after (remote_scale != 1: all_to_all.two_level_time), when k > 1
        hop = (relay | (np.asarray(remote_scale) != 1.0) | (np.asarray(nvlink_share) != 1.0)) \
            & (k > 1)
        lat2 = np.where(nodes > 1, cluster.inter_node_latency
                        + np.where(hop, cluster.intra_node_latency, 0.0),
                        cluster.intra_node_latency)
        return np.where(uniform, all_to_all.two_level_time(nbytes, n, k, intra,
                                                           _nic_rate(cluster), lat2, relay,
                                                           remote_scale, nvlink_share),
                        all_to_all.time(nbytes, n, bw, lat))[()]
    passes = PASSES[kind]
    algo = strided_algorithm(n, stride, G, kind)
    lat_in = cluster.intra_node_latency
    # NCCL's flat ring striped over the members of each node (``ring.striped``): member j's
    # hop between nodes goes to member j+1 of the next node, ``stride`` local indices on (the
    # last member's to the first: ``-(k-1)·stride``), relayed where that changes rail
    s = np.asarray(stride, dtype=np.int64)
    relay = _hop_relays(cluster, (s, -(np.maximum(np.asarray(k), 1).astype(np.int64) - 1) * s))
    out = transfer_rate(_hop_rate(cluster), _nic_rate(cluster), True, relay, cluster.planes)
    kk = np.maximum(k, 2.0)     # (priced only where k > 1: no division by k - 1 = 0 elsewhere)
    flat = ring.striped_time(passes, nbytes, n, kk, nodes, intra, lat_in, out,
                             transfer_latency(lat_in, cluster.inter_node_latency, True, relay),
                             relay)
    striped = uniform & (nodes > 1) & (k > 1)
    return np.where((algo == RING) & striped, flat, ring.time(passes, nbytes, n, bw, lat))[()]


def dispatcher_metadata_time(m, b: Num, tp: Num, cp: Num, ep: Num, etp: Num,
                             dispatcher: Num, cluster: Cluster,
                             load: Num = 1.0, ep_overlap: Num = False,
                             pad: Num = False) -> tuple[Num, Num]:
    """Seconds ``(forward, backward)`` per mean layer of the small blocking collectives that
    Megatron-Core's ``alltoall`` token dispatcher (``dispatcher`` code 0, ``plan.DISPATCHERS``)
    runs on the compute stream besides the tokens' dispatch and combine
    (``ep_dispatch.dispatcher_metadata_bytes``): forward, the ring all-gather of the tokens per
    expert over the ``etp·ep`` consecutive ranks of ``tp_ep_group`` (the device-to-host copy
    the dispatcher synchronises on waits for it) and the router probabilities' all-to-all
    over the ``ep`` ranks ``etp`` apart; backward, the probabilities' gradient all-to-all.
    Each priced by ``collective_time`` (latency-bound: a few hundred bytes to KB). HybridEP
    (code 2) gathers the bool routing map over the same ``etp·ep`` ranks before each dispatch
    (``ep_dispatch.hybridep_map_bytes``), forward only, inside its dispatch: where the plan
    pairs a micro-batch's dispatch with another's compute (``ep_overlap``, Megatron-Core
    running the dispatch on the communication stream; the DualPipe orders) it is not charged
    here. DeepEP (code 1) exchanges counts inside its dispatch kernels: 0; 0 with ``ep = 1``
    and for a dense model. Where the plan pads to capacity (``pad``, drop-and-pad) the
    dispatcher knows the counts on the host and gathers none (``moe_bytes.count_exchange``);
    the probabilities' all-to-alls and HybridEP's map stay. The MoE layers' share of the mean
    layer. Vectorised."""
    code = np.asarray(dispatcher)
    ep_a = np.asarray(ep, dtype=float)
    on = (code == 0) & (ep_a > 1)
    hyb = (code == 2) & (ep_a * np.asarray(etp, dtype=float) > 1) & np.logical_not(ep_overlap)
    if not m.is_moe or not np.any(on | hyb):
        z = 0.0 * (ep_a + code)
        return z[()], z[()]
    share = m.layer_shares().get("moe", 0.0)
    etp_a = np.asarray(etp, dtype=float)
    c_bytes, p_bytes = ep_dispatch.dispatcher_metadata_bytes(m, b, tp, cp, ep, etp, load)
    gather = collective_time("allgather", c_bytes, etp_a * ep_a, 1, cluster)
    probs = collective_time("alltoall", p_bytes, ep, etp, cluster)
    rmap = collective_time("allgather", ep_dispatch.hybridep_map_bytes(m, b, tp, cp, ep, etp),
                           etp_a * ep_a, 1, cluster)
    gather = gather * moe_bytes.count_exchange(pad)
    fwd = np.where(on, share * (gather + probs), np.where(hyb, share * rmap, 0.0))
    bwd = np.where(on, share * probs, 0.0)
    return fwd[()], bwd[()]


def dp_parts(params: Num, expert_params: Num, tp: Num, cp: Num, dp: Num, ep: Num,
             etp: Num, shard: Num | None = None
             ) -> tuple[tuple[Num, Num, Num], tuple[Num, Num, Num]]:
    """The two data-parallel collectives over a stage's ``params`` parameters, as
    ``((dense parameters, ranks, stride), (expert parameters, ranks, stride))``: the dense
    ``params - expert_params`` over the group that holds their copies
    (``placement.dense_dp_group``: the ``dp·cp`` ranks ``tp`` apart, the cp ranks holding
    the same weights as the dp ones), then, with expert
    parallelism (``ep > 1``), the routed experts' ``expert_params`` over the group that holds
    their copies (``placement.expert_dp_group``: ``tp·cp·dp/(etp·ep)`` ranks ``etp·ep``
    apart, Megatron-Core's expert grid), in buffers of their own after the dense ones on the
    same stream. With ``ep = 1`` every parameter goes over ``dp·cp`` (an expert part of 0).
    The one rule for every collective over data-parallel copies: the gradient reduction,
    the parameter gathers after the optimizer, ZeRO-3's gathers and reduce-scatters
    (``dp_collective_time``, the lower bound, ``ProgramBuilder._dp_parts``) and the shard a
    rank holds (``grad_shard_params``). ``shard``: the plan's ``shard_dp`` (hybrid sharding,
    ``Plan.dp_shard``): each group is then the one within a replica's ``tp·cp·shard`` ranks,
    the dense ``shard·cp`` ranks a ZeRO shard spans and the experts' grid over them
    (``placement.expert_dp_group`` at ``shard``), the replicas' all-reduce of both added by
    ``dp_collective_time`` (``replica_sum``). Vectorised."""
    moe = (np.asarray(ep, dtype=float) > 1) & (np.asarray(expert_params, dtype=float) > 0)
    e = np.where(moe, expert_params, 0.0)
    within = dp if shard is None else shard          # the data-parallel ranks of one replica
    edp, stride = placement.expert_dp_group(tp, cp, within, ep, etp)
    ddp, d_stride = placement.dense_dp_group(tp, cp, within)
    return ((params - e)[()], ddp, d_stride), (e[()], edp, stride)


def has_dp_copies(params: Num, expert_params: Num, tp: Num, cp: Num, dp: Num, ep: Num,
                  etp: Num) -> Num:
    """True where some of a stage's parameters have copies on other ranks to reduce their
    gradients with (and, sharded, to gather from): ``dp·cp > 1``, or routed experts whose
    expert-data-parallel group (``dp_parts``) holds more than one rank, as at ``dp = 1`` when
    ``etp·ep < tp·cp`` (Megatron-Core reduces them over that group). Vectorised."""
    return parts_have_copies(dp_parts(params, expert_params, tp, cp, dp, ep, etp))[()]


def parts_have_copies(parts) -> Num:
    """``has_dp_copies`` of ``dp_parts``' groups already formed. Vectorised."""
    return (np.asarray(parts[0][1]) > 1) | expert_copies(parts)


def expert_copies(parts) -> Num:
    """True where ``dp_parts``' expert part has copies to reduce: routed parameters over an
    expert-data-parallel group of more than one rank. Vectorised."""
    _, (e, n_e, _) = parts
    return (np.asarray(e) > 0) & (np.asarray(n_e) > 1)


def dp_parts_sum(parts, cost) -> Num:
    """``cost(parameters, ranks, stride)`` of ``dp_parts``' dense collective plus its expert
    one where that runs (``expert_copies``; else 0, priced at a stand-in group of 2 ranks
    stride 1 so that no group of one is priced): the one sum the estimate's
    ``dp_collective_time`` and the lower bound's floors read. Vectorised."""
    (d, n_d, s_d), (e, n_e, s_e) = parts
    on = expert_copies(parts)
    return cost(d, n_d, s_d) + np.where(on, cost(e, np.where(on, n_e, 2.0),
                                                 np.where(on, s_e, 1.0)), 0.0)


def grad_shard_params(params: Num, expert_params: Num, tp: Num, cp: Num, dp: Num, ep: Num,
                      etp: Num, zero: Num, shard: Num | None = None) -> Num:
    """Parameters whose reduced gradients one rank's optimizer reads after the data-parallel
    reduction: all of the stage's (ZeRO-0), or with ZeRO >= 1 the dense ones' ``1/(dp·cp)``
    share plus the routed experts' ``1/edp`` share (``dp_parts``' groups): ZeRO-2/3 shard the
    gradients, and ZeRO-1's sharded optimizer steps only its shard of the reduce-scattered
    gradients (ZeRO paper, P_os; Megatron's distributed optimizer). DualPipe's mirror
    all-reduce sums these between the two ranks that hold the same stages: the two copies
    are data-parallel replicas of the stage, reduced like any other (deepseek-ai/DualPipe
    issue #22: "Optimizer is handled the same as other synchronous pipelines like 1F1B";
    PiPPy's double pipe, pytorch/PiPPy#276: "corresponding stages ... synchronize gradients
    using DDP"), so the pair adds what the optimizer reads, the shard each copy's
    reduce-scatter over dp left, not the whole gradient. With hybrid sharding (``shard``,
    ``dp_parts``) the dense share is ``1/(shard·cp)``. Vectorised."""
    return _group_share(params, expert_params, tp, cp, dp, ep, etp, np.asarray(zero) >= 1,
                        shard)


def grad_buffer_params(params: Num, expert_params: Num, tp: Num, cp: Num, dp: Num, ep: Num,
                       etp: Num, zero_g: Num, shard: Num | None = None) -> Num:
    """Parameters whose gradients one rank's gradient buffer holds, accumulated over the
    micro-batches: all of the stage's, or with sharded gradients (``zero_g >= 2``: the ZeRO
    stage the gradients run with, ``comm_rules.grad_path``) the dense ones' ``1/(dp·cp)``
    share plus the routed experts' ``1/edp`` share, each reduce-scattered over the group that
    holds its copies (``dp_parts``; Megatron-Core keeps the experts' gradients in buffers of
    their own over the expert-data-parallel group). Where ``edp = 1`` the experts' gradients
    stay whole under ZeRO-2 as under ZeRO-1. Vectorised."""
    return _group_share(params, expert_params, tp, cp, dp, ep, etp, np.asarray(zero_g) >= 2,
                        shard)


def _group_share(params, expert_params, tp, cp, dp, ep, etp, sharded, shard):
    """``dp_parts``' dense share over its group plus its expert share over theirs where
    ``sharded``, else ``params``."""
    (d, n_d, _), (e, n_e, _) = dp_parts(params, expert_params, tp, cp, dp, ep, etp, shard)
    return np.where(sharded, d / n_d + e / n_e, params)[()]


def dp_collective_time(kind: str, bytes_per_param: Num, params: Num, expert_params: Num,
                       tp: Num, cp: Num, dp: Num, ep: Num, etp: Num,
                       cluster: Cluster, shard: Num | None = None) -> Num:
    """Seconds of the data-parallel collective ``kind`` over a stage's gradients (or
    parameters) of ``bytes_per_param`` bytes each, alone on its links: ``dp_parts``' dense
    collective over dp·cp, then its routed experts' over their expert-data-parallel group (none
    where that group is one rank: each expert held once). With hybrid sharding (``shard <
    dp``, the plan's ``shard_dp``) the gathers and reduce-scatters run over the ``shard·cp``
    ranks of a shard group and a gradient reduce-scatter is followed by the all-reduce of
    each rank's ``1/(shard·cp)`` share over its ``dp/shard`` replicas
    (``placement.replica_group``; FSDP's HSDP, Megatron-Core's distributed-optimizer
    instances); an all-reduce (ZeRO-0's, never hybrid) spans every copy. Vectorised."""
    if kind == "allreduce":
        shard = None
    parts = dp_parts(params, expert_params, tp, cp, dp, ep, etp, shard)
    t = np.asarray(dp_parts_sum(parts, lambda p, n, s: collective_time(
        kind, bytes_per_param * p, n, s, cluster)))
    if kind == "reduce_scatter" and shard is not None:
        t = t + replica_time(bytes_per_param, parts, tp, cp, dp, shard, cluster)
    return t[()]


def replica_time(bytes_per_param: Num, parts, tp: Num, cp: Num, dp: Num, shard: Num,
                 cluster: Cluster) -> Num:
    """Seconds of hybrid sharding's all-reduces across replicas after a gradient
    reduce-scatter (``dp_collective_time``): ``replica_sum`` of ring all-reduces. 0 where
    there is one replica. Vectorised."""
    return replica_sum(parts, tp, cp, dp, shard, lambda p, n, s: collective_time(
        "allreduce", bytes_per_param * p, n, s, cluster))


def replica_overlap(bytes_per_param: Num, parts, tp: Num, cp: Num, dp: Num, shard: Num,
                    cluster: Cluster) -> Num:
    """Seconds of a gradient reduce-scatter's tail that hybrid sharding's dense replica
    all-reduce hides where it has a lane of its own (``FrameworkProfile.replica_stream``):
    it starts when the dense reduce-scatter ends and runs beside the routed experts'
    reduce-scatter (``dp_parts``' order on the data-parallel stream, the experts' buckets
    after the dense), so the tail is ``RS_d + max(RS_e, AR_d) + AR_e``, not their sum:
    ``min(RS_e, AR_d)``. 0 without experts to reduce-scatter (``expert_copies``) or with one
    replica. Vectorised."""
    (d, n_d, s_d), (e, n_e, s_e) = parts
    on = expert_copies(parts) & (placement.replica_group(tp, cp, dp, shard)[0] > 1)
    if not np.any(on):
        return (0.0 * np.asarray(e, dtype=float) * np.asarray(n_e))[()]
    rs_e = np.where(on, collective_time("reduce_scatter", bytes_per_param * e,
                                        np.where(on, n_e, 2.0), np.where(on, s_e, 1.0),
                                        cluster), 0.0)
    ar_d = replica_time(bytes_per_param, ((d, n_d, s_d), (0.0 * e, n_e, s_e)), tp, cp, dp,
                        shard, cluster)
    return np.minimum(rs_e, ar_d)[()]


def replica_sum(parts, tp: Num, cp: Num, dp: Num, shard: Num, cost) -> Num:
    """``cost(parameters, ranks, stride)`` of hybrid sharding's all-reduces across replicas
    after a gradient reduce-scatter, summed: each rank's share of ``dp_parts``' dense
    gradients (``1/(shard·cp)``) and, in buffers of their own, of its routed experts'
    (``1/n_e``, the expert grid within a replica; all of them where that grid is one rank),
    each over the ``dp/shard`` ranks that hold the same shard (``placement.replica_group``:
    Megatron-Core's one inter-instance group for dense and expert buckets,
    ``get_inter_distributed_optimizer_instance_group``; torchtitan's ``dp_replicate`` in
    both meshes); 0 where there is one replica. The one rule the estimate
    (``replica_time``), the bound and the simulator (``_replica_reduce``) read.
    Vectorised."""
    (d, n_d, _), (e, n_e, _) = parts
    n_r, s_r = placement.replica_group(tp, cp, dp, shard)
    on = np.asarray(n_r) > 1
    if not np.any(on):
        return (0.0 * np.asarray(n_r))[()]
    n, s = np.where(on, n_r, 2.0), np.where(on, s_r, 1.0)
    moe = on & (np.asarray(e) > 0)
    t = cost(d / n_d, n, s) + np.where(moe, cost(np.where(moe, e / n_e, 0.0), n, s), 0.0)
    return np.where(on, t, 0.0)[()]


def pxn_relay(cluster: Cluster) -> bool:
    """True where a flow to another node's GPU of a different local index is relayed over
    NVLink to the local GPU of that index first (NCCL's PXN): ``topologies.routing.relays``,
    the rule the simulator's routes follow, asked for every other local index."""
    G = cluster.gpus_per_node
    return G > 1 and bool(np.any(_hop_relays(cluster, (np.arange(1, G),))))
def pair_time(kind: str, nbytes: Num, in_node: Num, cluster: Cluster) -> Num:
    """Seconds of collective ``kind`` of ``nbytes`` per rank between two ranks (NCCL's ring for
    ``n = 2``, ``strategies.collectives.ring``): over NVLink when both are in one node, else
    over the network at one GPU's NIC share (every pair of the two stages crosses at once, each
    on its own GPU's NIC). The tied embedding's gradient all-reduce between the first and the
    last pipeline stage. Vectorised."""
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    # across nodes the two end ranks share a local index (one rail, no relay):
    # ``topologies.routing``'s path rule
    across = transfer_rate(_hop_rate(cluster), _nic_rate(cluster), True, False, cluster.planes)
    bw = np.where(in_node, intra, across)
    lat = np.where(in_node, cluster.intra_node_latency,
                   transfer_latency(cluster.intra_node_latency, cluster.inter_node_latency,
                                    True, False))
    return (ring.time(PASSES[kind], nbytes, 2, bw, lat)
            * measured_scale(kind, nbytes, 2, in_node, cluster))[()]


def p2p_time(nbytes: Num, cluster: Cluster, stride: Num) -> Num:
    """One point-to-point message from one GPU to its pipeline neighbour ``stride`` ranks
    further (seconds): inside a node at the fabric's rate when ``stride`` is below the node
    size, else between nodes by ``topologies.routing``'s path rule (the relay when the two
    GPUs sit on different rails). Vectorised."""
    stride = np.asarray(stride)
    crosses = stride >= cluster.gpus_per_node
    relay = _hop_relays(cluster, (np.asarray(stride, dtype=np.int64),))
    intra = cluster.intra_node_bandwidth * NVLINK_EFFICIENCY
    across = transfer_rate(_hop_rate(cluster), _nic_rate(cluster), True, relay, cluster.planes)
    lat = transfer_latency(cluster.intra_node_latency, cluster.inter_node_latency, crosses,
                           relay)
    return (nbytes / np.where(crosses, across, intra) + lat)[()]


def path_p2p_time(nbytes: Num, cluster: Cluster, stride: int,
                  hops: tuple[tuple[int, int], ...]) -> Num:
    """Seconds of one point-to-point message on a pipeline's critical path: the mean over
    the hops next to the worst rank (its one or two neighbours on the path,
    ``Schedule.path_hops``: ``(stage, next stage)`` pairs), each hop priced by ``p2p_time``
    at its own distance: inside a node when both ranks are in one, else between nodes (the
    relay when the two GPUs sit on different rails). Pipeline stage ``s`` holds ranks
    ``s·stride + o``; the slowest pipeline (offset ``o``) counts. Where the pipeline spans
    several nodes with stages closer than a node (``stride < gpus_per_node``: 4 stages of
    tp 4 × dp 4 per 64-GPU NVLink domain), a rank next to a node boundary sends and
    receives each steady-state micro-batch once across it and once inside its node (1F1B's
    two exchanges, interleaved's batched exchange waiting on both neighbours), so its
    messages cost ``(t_across + t_inside) / 2`` each; ``p2p_time(stride)`` where every hop
    is alike. Vectorised over ``nbytes``."""
    G = cluster.gpus_per_node
    if not hops:
        return np.asarray(p2p_time(nbytes, cluster, stride))[()]
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    for a, b in hops:                       # a pair of ranks once, the path's direction
        pairs.setdefault((min(a, b), max(a, b)), (a, b))
    o = np.arange(min(stride, G))
    t_in = np.asarray(p2p_time(nbytes, cluster, 0))
    times = {}
    for key, (a, b) in pairs.items():
        across = ((a * stride + o) // G != (b * stride + o) // G).reshape(
            (-1,) + (1,) * t_in.ndim)
        t_x = np.asarray(p2p_time(nbytes, cluster, G + (b - a) * stride % G))
        times[key] = np.where(across, t_x, t_in)            # (pipeline, ...)
    worst = None
    for r in {x for k in pairs for x in k}:
        own = [t for k, t in times.items() if r in k]
        mean = sum(own) / len(own)
        worst = mean if worst is None else np.maximum(worst, mean)
    return worst.max(axis=0)[()]


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


def tree_latency(n: Num, stride: Num, cluster: Cluster) -> Num:
    """Latency seconds of NCCL's tree all-reduce over ``n`` ranks ``stride`` apart with the
    cluster's per-hop latencies: intra-node chains of the ``k`` local members and a double
    binary tree between the nodes, ``2((k-1)·lat_in + log2i(nodes)·lat_out)`` (NVIDIA/nccl
    ``src/graph/tuning.cc`` ``ncclTopoTuneModel``, tag v2.19.3-1; ``log2i`` = floor(log2));
    the tree's hops between nodes join GPUs of one rail (no relay). docs/calibration.md
    §3.21 (nccltree), §5.64. Vectorised."""
    _, k, nodes = strided_layout(n, stride, cluster.gpus_per_node)
    lat_out = transfer_latency(cluster.intra_node_latency, cluster.inter_node_latency, True,
                               False)
    log2i = np.floor(np.log2(np.maximum(np.asarray(nodes, dtype=float), 1.0)))
    return 2 * ((np.asarray(k) - 1) * cluster.intra_node_latency + log2i * lat_out)


def small_allreduce_time(nbytes: Num, n: Num, stride: Num, cluster: Cluster) -> Num:
    """Seconds of an all-reduce of a latency-bound buffer (bytes to kilobytes: amaxes, norms)
    over ``n`` ranks ``stride`` apart: the lesser of ``collective_time``'s ring and NCCL's
    tree, for groups laid out alike over several nodes (one latency per hop for both, the
    tree at the ring's bus bandwidth: ``bw·n/(n-1) + tree_latency``; docs/calibration.md
    §3.21 nccltree states why the model keeps the ring for the gradient buckets, where the
    crossover is not sure; for a few kilobytes over ``nodes > 1`` the tree's
    ``log2(nodes)`` network latencies beat the ring's ``2(nodes-1)`` at any efficiency).
    0 for ``n < 2``. Vectorised."""
    ring_t = collective_time("allreduce", nbytes, n, stride, cluster)
    ring_lat = collective_time("allreduce", 0.0, n, stride, cluster)
    nf = np.asarray(n, dtype=float)
    tree_t = (ring_t - ring_lat) * nf / np.maximum(nf - 1.0, 1.0) \
        + tree_latency(n, stride, cluster)
    uniform, _, nodes = strided_layout(n, stride, cluster.gpus_per_node)
    tree_ok = uniform & (nodes > 1)
    return np.where(nf > 1, np.where(tree_ok, np.minimum(ring_t, tree_t), ring_t), 0.0)[()]
