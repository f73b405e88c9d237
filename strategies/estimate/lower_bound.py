"""A lower bound on the simulated step time of many plans at once (seconds).

The search (``strategies.search``) simulates plans in increasing order of this bound and
stops once the next bound exceeds the k-th best simulated time; that is exact only because
``simulator.simulate`` can never beat the bound. Why it cannot:

1. **Each stream is sequential.** A rank runs the ops of each stream (compute, tp-comm,
   dp-comm, pp-comm, …) one after another. Compute ops last exactly what
   ``strategies.cost.stage`` says (the bound reads the same ``StageCostArrays`` record the
   compiler's ``StageCosts`` is an entry of): per model chunk and micro-batch ``layers·fwd`` (+ the embedding on virtual
   stage 0, + the LM head on the last one), ``layers·(bwd + recompute)`` (+ their backward),
   and the optimizer step last.
2. **Communication floors.** A flow never moves faster than its slowest link, and max-min
   sharing only slows it further. Every GPU link's achievable rate is at most
   ``link_rate_cap`` (NVLink or NIC line rate times ``strategies.cost.comm``'s efficiency,
   as ``simulator.network.cluster_net`` scales them) and every route between two nodes crosses a GPU–NIC
   link, so cross-node flows get at most ``nic_rate_cap``. Every GPU-to-GPU route costs at
   least ``min(intra_node_latency, inter_node_latency)``. ``group_floor`` turns this into the
   least time of a ring collective given where its members sit (placement
   ``tp-cp-dp-pp``: tp ranks consecutive, cp strided by tp, dp by tp·cp, stages by N/pp).
   A GPU profile's measured collectives (``comm.measured_scale``: within a node, the
   model's seconds times a measured ratio, which the simulator's op repeats) scale those
   floors by the ratio where it is below 1 (the all-to-all's by the least measured).
3. **What blocks the compute stream.** Without ``tp_comm_overlap`` the TP collectives of a
   block start after its compute and the next compute op waits for them; so does the expert
   all-to-all and the tail of the ring-attention traffic (whose main part runs beside the
   attention core and must finish first); not the all-to-all of a schedule that overlaps
   pairs (``Schedule.overlaps_pairs``: DualPipe's ``F&B``; Megatron's combined 1F1B with
   ``ep_overlap``), which may hide under the
   partner's compute. The all-to-all, the expert-TP collectives and the
   blocking TP collectives run one after the other (``a2a_floor`` bounds the first per
   link), after the ring-attention tail (the attention's output waits for the ring,
   ``cp_ring``): a block lasts at least its compute plus their sum. A pipeline exchange is blocking: the
   next compute waits for its last op, and sends precede receives on the pp stream, so a
   send placed right after the step that produced it adds its transfer to the chain (every
   send with GPipe and 1F1B; with interleaving the backward ones, as a forward's output
   waits for the exchange after the following backward).
4. **Data parallelism.** Gradient buckets are reduced on the dp stream, at the earliest
   during the backward of the last micro-batch of the last chunk to be run backward
   (``overlap_grad_reduce``), and the optimizer waits for the last of them; with ZeRO >= 1 the
   parameter all-gathers after the optimizer count for their excess over the next step's
   first forward (``simulator.metrics.rank_ends``). With ZeRO-2 every micro-batch
   reduce-scatters the gradients; with ZeRO-3 every micro-batch gathers the parameters twice
   and reduce-scatters the gradients, all on the dp stream.
5. **The pipeline chain.** Every schedule starts each stage with the forward of micro-batch
   0, chunk 0 and ends with the backward of micro-batch ``m-1``, chunk 0 (checked in
   ``tests/test_search.py`` for every schedule). So stage ``s`` starts no earlier than the
   forwards of micro-batch 0 on stages ``0..s-1`` (and their messages), and after its last
   backward that micro-batch still passes back through stages ``s-1..0`` before stage 0
   runs its optimizer. DualPipe (``Schedule.mirrored``) starts each rank with a micro-batch
   entering at its nearer end, so there ``s`` is the distance to that end, and all-reduces
   its two parameter copies' gradients with the mirror rank (at least ``group_floor`` over
   two ranks at the fastest links) after its last compute and before its optimizer. A
   schedule that splits the backward (``Schedule.splits_backward``)
   ends each stage with the weight gradients ``W`` still pending after its last ``B``
   (``Schedule.trailing_w_steps``, checked against the order in tests/test_zb_h1.py): they
   run while that micro-batch goes back, so they leave ``T(s)`` on this path, and the
   stages in between pass its ``B`` on without its ``W``; stage 0 still runs both before
   its optimizer. On a V (ZB-V: ``Schedule.head_rank_array`` is 0) rank 0 holds the LM head
   too, and neither rank 0 nor rank ``pp - 1`` sends at the ends of the V.

With ``T(s)`` the stage's compute chain (compute, blocking collectives, exchanges),
``chain_in(s)``/``tail(s)`` the forward/backward path of the micro-batch through the stages
before it, ``R(s)`` its gradient-reduction floor, ``post(s)`` at most the work left after
the first bucket can launch and ``A(s)`` its parameter all-gather tail, the step lasts at
least, for every stage, ``chain_in(s) + max(T(s), T(s) - post(s) + R(s)) + opt(s) + A(s)``
and ``chain_in(s) + T(s) + tail(s) + opt(0) + A(0)``. Middle stages are identical and their
bounds grow with ``s``, so the first, the last and the second-to-last stage suffice (a
layout string or ``layers_per_stage``, ``PlanArrays.layout_*``: those three ranks' own layers,
any stage's fewest for what passes before them, docs/calibration.md §5.36; and the heaviest
middle rank's own path at the least middle position, §5.39). On a mixed cluster every figure
the bound adds up is the least over the GPU types present (``fastest_of_each``). For
balanced stages and free communication this is the closed form ``(m + p - 1)·(t_f + t_b)``
of 1F1B (``m·t + (p-1)·t/v`` interleaved). The result is scaled by ``1 - SAFETY`` against
floating-point reassociation.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from strategies import collectives as colls
from strategies.cost import comm as cm
from strategies.cost.stage import (StageCostArrays, attn_down_time, attn_tp_saved,
                                   dgrad_reduce_hidden, down_reduce_hidden,
                                   sp_regather_exposed, stage_cost_arrays,
                                   tp_collectives_per_layer)
from strategies.cost import layer_time
from strategies.cost.cp_ring import layer_waits as cp_layer_waits
from strategies.cost.system import SystemConfig, get_system
from strategies.framework import get_profile
from strategies.stacks.comm_rules import full_grad_reduce, grad_path
from strategies.stacks.profile import FrameworkProfile
from strategies.layout import even_stage_content_arrays
from strategies.model import ModelSpec
from strategies.placement import dense_dp_group
from strategies.plan_arrays import PlanArrays, as_plan_arrays, rank_layers
from strategies.schedules import attr_by_code, dispatch
from topologies.cluster import Cluster
from topologies.routing import transfer_rate

SAFETY = 1e-9


def link_rate_cap(cl: Cluster) -> float:
    """The fastest achievable rate of any single GPU link of the simulated network (bytes/s)."""
    return max(cl.intra_node_bandwidth * cm.NVLINK_EFFICIENCY,
               cl.inter_node_bandwidth * cm.NETWORK_EFFICIENCY)


def nic_rate_cap(cl: Cluster) -> float:
    """The fastest achievable rate of a flow between two nodes: ``topologies.routing``'s
    path rule for the fastest such path (no relay, one whole NIC, its plane ports striped;
    a relay only adds a hop to the minimum)."""
    return float(transfer_rate(link_rate_cap(cl), cl.inter_node_bandwidth
                               * cm.NETWORK_EFFICIENCY, True, False, cl.planes))


def egress_rate_cap(cl: Cluster) -> float:
    """All of a GPU's links together: one into the node fabric (at most the GPU's NVLink
    bandwidth in any intra-node topology) and one to its NIC (bytes/s, achievable)."""
    return (cl.intra_node_bandwidth * cm.NVLINK_EFFICIENCY
            + cl.inter_node_bandwidth * cm.NETWORK_EFFICIENCY)


def min_route_latency(cl: Cluster) -> float:
    return min(cl.intra_node_latency, cl.inter_node_latency)


def group_floor(nbytes, n, stride, passes, cl: Cluster):
    """Least seconds of a ring collective (``passes``: 2 for all-reduce, 1 for
    reduce-scatter or all-gather; an array or a number) of an ``nbytes`` buffer over ``n``
    ranks ``stride`` apart in rank order.

    The algorithm is ``strategies.collectives.select``'s (the compiler's rule) and its time
    that algorithm's closed form at the fastest rates and least latency the network offers:
    in one node a ring at the fastest link rate; one member per node a ring at the NIC rate;
    ``k > 1`` members on each of several nodes the striped ring (``ring.striped_time`` at
    those rates, no relay, every step at the least latency). Groups of this shape that
    differ (``mixed``): the ``passes·(n-1)/n·S`` bytes every member moves, at the fastest
    link rate."""
    G = cl.gpus_per_node
    n, stride = np.asarray(n, dtype=float), np.asarray(stride, dtype=float)
    lat, B, nic = min_route_latency(cl), link_rate_cap(cl), nic_rate_cap(cl)
    uniform, k, nodes = colls.select.strided_layout(n, stride, G)

    def floor(kind):
        p = colls.PASSES[kind]
        algo = colls.strided_algorithm(n, stride, G, kind)
        striped = uniform & (nodes > 1) & (k > 1) & (algo == colls.RING)
        return np.where(striped, colls.ring.striped_time(p, nbytes, n, np.maximum(k, 2.0),
                                                         nodes, B, lat, nic, lat),
               np.where(algo == colls.RING,
                        colls.ring.time(p, nbytes, n, np.where(nodes > 1, nic, B), lat),
                        p * (n - 1) / np.maximum(n, 1) * nbytes / B))
    t = np.where(np.asarray(passes) == 2, floor("allreduce"), floor("reduce_scatter"))
    if cm.profile_of(cl) is not None:
        # a GPU profile's measured collectives within a node (``comm.measured_scale``) may
        # run faster than the model: the floor times the least of the kinds' ratios (<= 1)
        one = uniform & (nodes == 1)
        r1 = np.minimum(cm.measured_scale("reduce_scatter", nbytes, n, one, cl),
                        cm.measured_scale("allgather", nbytes, n, one, cl))
        r = np.where(np.asarray(passes) == 2,
                     cm.measured_scale("allreduce", nbytes, n, one, cl), r1)
        t = t * np.minimum(r, 1.0)
    return np.where(n > 1, t, 0.0)


def a2a_floor(cl: Cluster, nbytes, n, stride, remote_scale):
    """Least seconds of one all-to-all of ``nbytes`` per member over ``n`` ranks ``stride``
    apart (the expert group: ``ep`` ranks ``etp`` apart, ``placement.groups``), from what
    every member must move over links of its own: at least ``(n-1)/n`` of its buffer times
    the share between nodes (``remote_scale`` ``r`` <= 1 of the per-pair bytes where the
    router is node-limited) through all its links at once (``egress_rate_cap``); and where
    the groups are laid out alike on every node (``select.strided_layout``: ``k`` members on
    each of ``nodes`` nodes, at the same local indices), the ``(k-1)/n`` of it bound for its
    node peers over its node-fabric link and the ``(n-k)/n·r`` bound for other nodes over
    its GPU-NIC link. A flow between nodes leaves the source node by one GPU-NIC link: the
    member's own, or (PXN, a rail topology) that of the source node's GPU with the
    destination's local index, another member of the group (``topologies.routing``); a
    forwarded all-to-all sends between nodes to the member of its own position only
    (``all_to_all.phases``). Every member moves the same, so the busiest GPU-NIC link of a
    node carries at least ``(n-k)/n·r·nbytes`` (``all_to_all.two_level_time``'s NIC term at
    the link's achievable rate). Plus the least route latency; 0 for ``n < 2``. Vectorised."""
    n = np.asarray(n, dtype=float)
    uniform, k, nodes = colls.select.strided_layout(n, stride, cl.gpus_per_node)
    r = np.asarray(remote_scale, dtype=float)
    any_link = (n - 1) / np.maximum(n, 1) * nbytes * np.minimum(r, 1.0) / egress_rate_cap(cl)
    fabric = np.where(uniform, (k - 1) / np.maximum(n, 1) * nbytes
                      / (cl.intra_node_bandwidth * cm.NVLINK_EFFICIENCY), 0.0)
    nic = np.where(uniform & (nodes > 1), (n - k) / np.maximum(n, 1) * nbytes * r
                   / (cl.inter_node_bandwidth * cm.NETWORK_EFFICIENCY), 0.0)
    t = min_route_latency(cl) + np.maximum(any_link, np.maximum(fabric, nic))
    return np.where(n > 1, t * cm.measured_least(cl, "alltoall"), 0.0)


def _block_comm(cl: Cluster, sc: StageCostArrays, tp, cp, ep, etp, tpo, sp=False,
                hide: bool = True):
    """Blocking seconds per layer: (forward, backward, one TP collective). ``sp``: sequence
    parallelism (the data gradients' reductions are reduce-scatters); ``hide``: subtract
    what the weight gradients hide of them (False for the dearest layers, an upper figure).
    A MoE layer's all-to-all, then its expert-TP all-gather and reduce-scatter (the ep-comm
    stream, after the block's compute), then its blocking TP collectives (which wait for the
    last of them: ``ProgramBuilder._close_block``, docs/calibration.md §5.53) run in
    sequence; the ring attention's waits, inside the attention, add to them
    (``cp_ring.ring_exposed``, docs/calibration.md §5.110)."""
    tau_raw = group_floor(sc.tp_bytes, tp, 1, 2, cl)
    tau = tau_raw * np.where(tpo, 1.0 / sc.tp_overlap_chunks, 1.0)
    # the backward's share TP overlap leaves unfused blocks whole (tp_overlap_bwd_exposed)
    s = sc.tp_overlap_bwd_exposed
    tau_b = s * tau_raw + (1 - s) * tau
    moe = (ep > 1) & (sc.ep_bytes > 0)
    a2a = np.where(moe, a2a_floor(cl, sc.ep_bytes, ep, etp, sc.ep_remote_scale), 0.0)
    # expert TP: one all-gather and one reduce-scatter over the etp consecutive ranks
    etp_c = np.where(moe & (etp > 1) & (sc.etp_bytes > 0),
                     2 * group_floor(sc.etp_bytes, etp, 1, 1, cl), 0.0)
    # the ring's waits inside the attention, at its all-gathers' floor, on top of what closes
    # the block (``cp_ring.ring_exposed``, §5.110)
    # (PyTorch's ring: the simulator charges its waits as they are)
    cp_pass = np.where(cp > 1, group_floor(sc.cp_bytes, cp, tp, 1, cl), 0.0)  # one all-gather
    cp_f, cp_b = cp_layer_waits(cp_pass, sc, cp)
    n_f, n_b = sc.tp_per_layer_fwd, sc.tp_per_layer_bwd       # 2, fewer for MoE under EP
    # MLA's attention runs its column-side collective at its latents' widths
    # (``attn_tp_saved``, §5.81): the forward's all-gather under SP, the backward's
    # reduction where it is blocking, at the collectives' floors and TP overlap's share
    # (not for the dearest layers' upper figure, ``hide`` False)
    def t_floor(kind: str, nbytes):
        return group_floor(nbytes, tp, 1, 2 if kind == "allreduce" else 1, cl)
    saved_f = np.where(tp > 1, np.where(sp, attn_tp_saved(t_floor, sc, True, True), 0.0), 0.0)
    saved_b = np.where((tp > 1) & (sc.rd_bytes <= 0),
                       np.where(sp, attn_tp_saved(t_floor, sc, True, False),
                                attn_tp_saved(t_floor, sc, False, False)), 0.0)
    over = np.where(tpo, 1.0 / sc.tp_overlap_chunks, 1.0) * (1.0 if hide else 0.0)
    # SP's backward re-gathers stall the compute stream inside the block, before what closes
    # it: at least their exposure at the all-gather's floor (``sp_regather_exposed``)
    rg = sp_regather_exposed(lambda w: np.where(sc.rg_bytes > 0, group_floor(
        sc.rg_bytes * w, tp, 1, 1, cl), 0.0), sc)
    # the column-parallel data gradients' reductions the weight gradients hide, at most
    # their floor each (``dgrad_reduce_hidden``; rd_bytes 0 under TP overlap)
    tp_b = np.maximum(n_b * tau_b - (s * hide + (1 - s) * over) * saved_b, 0.0)
    if hide:
        rd = sc.rd_bytes

        def t_red(w: float) -> np.ndarray:
            return np.where(rd > 0, np.where(sp, group_floor(rd * w, tp, 1, 1, cl),
                                             group_floor(rd * w, tp, 1, 2, cl)), 0.0)
        tp_b = np.maximum(tp_b - dgrad_reduce_hidden(t_red, sc), 0.0)
    # MLA's column-parallel down projections' own collectives (``attn_down_time``, §5.85),
    # blocking after the block, at their floors (the lower figure only)
    dn_f, dn_b = 0.0, 0.0
    if hide and np.any(sc.tp_down > 0):
        dn_f = np.where(sp, attn_down_time(t_floor, sc, True, True),
                        attn_down_time(t_floor, sc, False, True))
        dn_b = np.where(sp, attn_down_time(t_floor, sc, True, False),
                        attn_down_time(t_floor, sc, False, False))
        # less the input-gradient reductions their weight gradients hide, at the floor
        # (``down_reduce_hidden``, §5.99; ``t_red`` 0 where blocking)
        dn_b = np.maximum(dn_b - down_reduce_hidden(t_red, sc), 0.0)
    return (np.maximum(n_f * tau - over * saved_f, 0.0) + a2a + etp_c + dn_f + cp_f,
            tp_b + a2a + etp_c + dn_b + cp_b + rg, tau)


def _p2p_send(cl: Cluster, sc: StageCostArrays, n, pp):
    """Seconds one pipeline send takes at least (across nodes when stages are whole nodes
    apart). The all-gather over tp after a receive without SP is not counted: a receive
    with no send before it in its exchange may finish early."""
    nbytes = sc.p2p_bytes
    stride = n / pp
    G = cl.gpus_per_node
    cross = (stride >= G) & (np.mod(stride, G) == 0)
    send = min_route_latency(cl) + nbytes / np.where(cross, nic_rate_cap(cl), link_rate_cap(cl))
    return np.where(pp > 1, send, 0.0)


class LayerMix:
    """The layers of a model with dense and MoE layers (``num_dense``, ``num_moe``), for the
    bound: the stage-cost record's per-layer figures are the mean layer's, which a chunk
    holding more of the cheaper kind beats (an uneven layout, or the even split with the
    dense layers on rank 0). A chunk of ``n`` layers costs at least its ``n`` cheapest
    layers' (``fill``: the cheaper kind first, at most as many as the model has, field by
    field) and at most its ``n`` dearest (``dearest=True``, for the windows the bound
    subtracts). ``of`` gives None for a model of one kind (the mean layer is exact)."""

    def __init__(self, num_dense: int, num_moe: int, ep, shared: int):
        self.num_dense, self.num_moe, self.ep, self.shared = num_dense, num_moe, ep, shared

    @classmethod
    def of(cls, m: ModelSpec, ep) -> "LayerMix | None":
        c = m.layer_counts()
        if not (c.get("dense", 0) and c.get("moe", 0)):
            return None
        return cls(c["dense"], c["moe"], np.asarray(ep), m.num_shared_experts)

    def records(self, r: StageCostArrays, dearest: bool) -> list[StageCostArrays]:
        """``r`` with one dense layer's, then one MoE layer's figures (``r.by_kind``): TP
        collectives per layer 2, in a MoE layer under EP without shared experts 1
        (``cost.stage``); recomputed ones none (``dearest``: 2)."""
        from dataclasses import replace
        out = []
        for kind in ("dense", "moe"):
            k = r.by_kind[kind]
            n_tp = tp_collectives_per_layer(1.0 if kind == "moe" else 0.0, self.ep,
                                            self.shared) + 0.0 * r.tp_per_layer_fwd
            out.append(replace(r, **{f: getattr(k, f) for f in (
                "layer_fwd", "layer_bwd", "layer_recompute", "layer_wgrad", "attn_fwd",
                "attn_bwd", "ep_bytes")}, tp_per_layer_fwd=n_tp, tp_per_layer_bwd=n_tp,
                tp_per_layer_recompute=n_tp if dearest else 0.0 * n_tp))
        return out

    def fill(self, n, dense, moe, dearest: bool = False):
        """Sum over ``n`` layers of a per-layer figure worth ``dense``/``moe`` a layer: the
        cheaper kind first (``dearest``: the dearer), each up to its count in the model."""
        n = np.asarray(n, dtype=float)
        first_dense = (dense >= moe) if dearest else (dense <= moe)
        lead_n = np.where(first_dense, self.num_dense, self.num_moe)
        lead, rest = np.where(first_dense, dense, moe), np.where(first_dense, moe, dense)
        return np.minimum(n, lead_n) * lead + np.maximum(0.0, n - lead_n) * rest


def step_time_lower_bound(m: ModelSpec, cl: Cluster, dtype: str,
                          P: PlanArrays | Mapping[str, Any],
                          framework: FrameworkProfile | str | None = None,
                          system: SystemConfig | None = None,
                          costs: StageCostArrays | None = None) -> np.ndarray:
    """Seconds per step that no simulation of these plans can beat (see the module docstring).
    ``P``: ``PlanArrays`` (or the search space's short columns); ``framework``: the jobs'
    software profile (default Megatron-Core); ``system``: the policy constants (default
    ``DEFAULT_SYSTEM``); ``costs``: their ``StageCostArrays`` when already computed (e.g.
    ``estimate_arrays(...)["stage_costs"]``, used on a uniform cluster only), else computed
    here from the same arguments."""
    P = as_plan_arrays(P)
    if np.any(P.flushes != 1):
        return _flushed_bound(m, cl, dtype, P, framework, system, costs)
    sy = get_system(system)
    real, cl = cl, cl.fastest_view()   # mixed cluster: links and upstream stages at the fastest
    gpu = cl.gpu
    # a layout string (``PlanArrays.layout_*``, no search column): its ranks' own layers
    # below; the stage-cost record of the ends from first/last-stage columns giving rank 0's
    # and rank pp-1's layers (exact for a model of one kind, the parameters of a middle rank
    # are not known there: its data-parallel and optimizer terms are left out)
    lay_str = ~np.isnan(P.layout_first)
    one_kind = LayerMix.of(m, P.ep) is None
    if lay_str.any() and one_kind:
        from dataclasses import replace

        def given(x):       # 0 reads "not given": an end with no layer holds almost none
            return np.where(lay_str, np.maximum(np.nan_to_num(x), 1e-9), 0.0)
        P = replace(P, first_stage_layers=np.where(lay_str, given(P.layout_first),
                                                   P.first_stage_layers),
                    last_stage_layers=np.where(lay_str, given(P.layout_last),
                                               P.last_stage_layers),
                    account_slots=P.account_slots & ~lay_str)
        costs = None
    # whose parameters the record holds: a layout string's ends in a model of one kind; its
    # middle rank pp-2 holds ``n`` layers where the record has the other middle ranks' mean
    # ``n_rec``: its parameter-driven terms (data-parallel collectives, the mirror
    # all-reduce, the optimizer and the step's passes, each at most affine in the layers
    # with a non-negative constant) are scaled by min(1, n/n_rec), which only lowers them;
    # in a model of several layer kinds (the record's content by kind is the even split's)
    # they are left out
    known = {"first": np.where(~lay_str | one_kind, 1.0, 0.0),
             "last": np.where(~lay_str | one_kind, 1.0, 0.0)}
    sc = costs if costs is not None and real.uniform else \
        stage_cost_arrays(m, cl, dtype, P, framework, sy, gpu=gpu)
    # the stage-cost record on each GPU type present, each computed once; every figure the
    # bound adds up is the least over those types (``fastest_of_each``), every window it
    # subtracts the largest
    types = [gpu] if real.uniform else list({repr(g.gpu): g.gpu for g in real.groups}.values())
    recs = {repr(gpu): sc}

    def record(g):
        if repr(g) not in recs:
            recs[repr(g)] = stage_cost_arrays(m, cl, dtype, P, framework, sy, gpu=g)
        return recs[repr(g)]

    mix = LayerMix.of(m, P.ep)          # dense and MoE layers: each chunk by kind, see there
    if mix:
        lay = (P.first_stage_layers, P.last_stage_layers, P.account_slots)
        # (strict=False: a layout string's row need not split evenly; its content by kind
        # is not read, see ``cheapest`` below)
        content = {k: even_stage_content_arrays(m, P.schedule, P.pp, P.vpp, r, *lay,
                                                strict=False)
                   for k, r in (("first", 0 * P.pp), ("mid", np.maximum(P.pp - 2, 0)),
                                ("last", P.pp - 1))}
    tp, pp, dp, cp, ep, b = P.tp, P.pp, P.dp, P.cp, P.ep, P.mbs
    rc, zero, sched = P.recompute, P.zero, P.schedule
    tpo, ogr = P.tp_comm_overlap, P.overlap_grad_reduce
    v = P.vpp                                           # model chunks per rank
    n = tp * pp * dp * cp
    nmb = np.floor(P.gbs / (b * dp))
    lps = np.floor(m.num_layers / pp)
    lpc = np.floor(m.num_layers / (pp * v))
    # an uneven layout (plan_arrays.rank_layers): each kind of rank's own layers for its
    # chain, the fewest of any chunk for what crosses other ranks' chunks, the most for what
    # is subtracted (windows that hide work)
    n_first, n_mid, n_last, least, uneven = rank_layers(m.num_layers, P)
    known["mid"] = np.where(lay_str, np.where(one_kind, np.minimum(
        1.0, np.nan_to_num(P.layout_mid) / np.maximum(n_mid, 1e-12)), 0.0), 1.0)
    # a layout string's heaviest middle rank (``PlanArrays.layout_mid_most``) wherever it
    # sits: priced as a middle rank at the least position one has (s = 1: the chain into a
    # rank only grows with s), its own path only, its parameters as rank pp-2's record
    heavy = lay_str & (pp >= 4) & ~np.isnan(P.layout_mid_most)
    known["heavy"] = np.where(heavy & one_kind, np.minimum(
        1.0, np.nan_to_num(P.layout_mid_most) / np.maximum(n_mid, 1e-12)), 0.0)
    # a layout string: its own ranks' layers (rank pp-2 as "mid"; the largest virtual stage
    # times the chunks bounds every rank's layers from above)
    n_first, n_mid, n_last = (np.where(lay_str, x, y) for x, y in (
        (P.layout_first, n_first), (P.layout_mid, n_mid), (P.layout_last, n_last)))
    least = np.where(lay_str, P.layout_least, least)
    uneven = uneven | lay_str
    lpc = np.where(uneven, least, lpc)
    most_rank = np.maximum(np.maximum(n_first, n_last), np.where(pp > 2, n_mid, n_first))
    most_rank = np.where(lay_str, P.layout_most * v, most_rank)
    lpc_most = np.where(lay_str, P.layout_most,
                        np.where(uneven, np.ceil(most_rank / v), lpc))  # the largest chunk
    lps = np.where(uneven, most_rank, lps)
    own = {"first": np.where(uneven, n_first / v, lpc), "mid": np.where(uneven, n_mid / v, lpc),
           "last": np.where(uneven, n_last / v, lpc)}
    own["heavy"] = np.where(heavy, np.nan_to_num(P.layout_mid_most) / v, own["mid"])
    single = pp == 1

    # compute and blocking communication per chunk and micro-batch (points 1-3); in an
    # overlapped pair (DualPipe's F&B) the expert all-to-all may hide entirely under the
    # partner's compute, so it counts for nothing there
    send = _p2p_send(cl, sc, n, pp)
    paired = attr_by_code(sched, "overlaps_pairs").astype(bool) | P.ep_overlap

    def layer_blocks(r, ceiling=False):
        """``(forward, backward, forward compute)`` blocking seconds of one layer of each
        kind (the mean layer for a model of one kind) from the record ``r``."""
        per = []
        for rk in (mix.records(r, ceiling) if mix else [r]):
            c_f, c_b, tau = _block_comm(cl, rk, tp, cp, np.where(paired, 1, ep), P.etp, tpo,
                                        P.sp, hide=not ceiling)
            n_rc = np.where(rk.layer_recompute > 0, rk.tp_per_layer_recompute, 0.0)
            per.append((rk.layer_fwd + c_f,
                        rk.layer_bwd + rk.layer_recompute + c_b + n_rc * tau, rk.layer_fwd))
        return per

    blocks_by_type = {}

    def type_blocks(g):
        """``layer_blocks`` of the record on GPU type ``g``, computed once."""
        if repr(g) not in blocks_by_type:
            blocks_by_type[repr(g)] = layer_blocks(record(g))
        return blocks_by_type[repr(g)]

    def chunk_times(g, lpc=lpc, ceiling=False, chunks=1.0):
        """Per-chunk seconds on GPU type ``g`` with ``lpc`` layers a chunk, from the
        stage-cost record on ``g``; a model of several layer kinds (``LayerMix``): the
        ``chunks·lpc`` cheapest layers (``ceiling``: the dearest) over ``chunks`` chunks (a
        rank's chunks hold distinct layers)."""
        r = record(g)
        per = layer_blocks(r, True) if ceiling else type_blocks(g)
        if mix:
            f_blk = mix.fill(lpc * chunks, per[0][0], per[1][0], ceiling) / chunks
            b_blk = mix.fill(lpc * chunks, per[0][1], per[1][1], ceiling) / chunks
            pick = np.maximum if ceiling else np.minimum
            lt = layer_time.LayerTime(pick(per[0][2], per[1][2]), r.layer_bwd, r.layer_recompute)
        else:
            f_blk, b_blk = lpc * per[0][0], lpc * per[0][1]
            lt = layer_time.LayerTime(r.layer_fwd, r.layer_bwd, r.layer_recompute)
        return lt, r.head_fwd, r.head_bwd, r.embedding_fwd, r.embedding_bwd, f_blk, b_blk, r

    def least_chunk(lpc=lpc, chunks=1.0):
        """``chunk_times``' ``(head_f, head_b, emb, emb_b, f_blk, b_blk)`` at the fastest of
        each GPU type present (``fastest_of_each``)."""
        per = [chunk_times(g, lpc, chunks=chunks) for g in types]
        return tuple(fastest_of_each([t[i] for t in per]) for i in range(1, 7))

    head_f, head_b, emb, emb_b, f_blk, b_blk = least_chunk()

    # parameters and optimizer by stage (the stage-cost record; ZeRO >= 1: the 1/(dp·cp)
    # shard, ``placement.dense_dp_group``)
    shard = np.where(zero >= 1, dense_dp_group(tp, cp, P.dp_shard)[0], 1.0)
    params = {"first": sc.params_first, "last": sc.params_last, "mid": sc.params_mid,
              "heavy": sc.params_mid}
    # their routed experts' part, reduced over the expert-data-parallel group
    # (``comm.dp_collective_time``, the simulator's gradient buckets)
    eparams = {"first": sc.expert_params_first, "last": sc.expert_params_last,
               "mid": sc.expert_params_mid, "heavy": sc.expert_params_mid}
    # (the optimizer and the stack's per-step passes, ``strategies.cost.step``, which the
    # simulator runs on the compute stream just before it)
    opt = {k: fastest_of_each([getattr(record(g), f"optimizer_{k}")
                               + getattr(record(g), f"passes_{k}") for g in types])
           for k in ("first", "last", "mid")}
    # (a model of dense and MoE layers: the record holds each kind of rank's own layers by
    # kind, ``layout.even_stage_content_arrays``, both copies under DualPipe)

    # the stage's compute chain T(s), per kind of stage; blocking sends: those the schedule
    # says block (``Schedule.blocks_fwd_send``/``blocks_bwd_send``: all of them with GPipe and
    # 1F1B, the backward ones with interleaving, where a forward's output waits in the
    # exchange after the next backward, so its transfer may overlap that backward); the first
    # stage sends no backward output and the last no forward output
    fwd_blocks = attr_by_code(sched, "blocks_fwd_send").astype(float)
    bwd_blocks = attr_by_code(sched, "blocks_bwd_send").astype(float)
    # with ``overlap_p2p_comm`` (Megatron-Core's interleaving) no send blocks: a call's
    # receive is waited for only before the next pass of its kind (docs/calibration.md §5.68)
    if get_profile(framework).overlap_p2p_comm:
        bwd_blocks = np.where(attr_by_code(sched, "overlaps_p2p").astype(bool), 0.0, bwd_blocks)
    per_mb = v * (f_blk + b_blk)
    sends_mid = nmb * v * (fwd_blocks + bwd_blocks)
    head_first = (dispatch(sched, "head_rank_array", pp, v) == 0) & ~single   # a V
    mirrored = attr_by_code(sched, "mirrored").astype(bool) & ~single          # DualPipe
    here = {"f_blk": f_blk, "b_blk": b_blk, "emb": emb, "emb_b": emb_b, "head_f": head_f,
            "head_b": head_b, "head_first": head_first, "mirrored": mirrored}
    blocks = {k: least_chunk(own[k], v)[4:6] for k in own}
    if mix:
        # each kind of stage's own layers by kind (``layout.even_stage_content``: the even
        # split, first/last-stage counts, slots; "mid" is rank pp-2, whose bound it feeds);
        # DualPipe's ranks hold two stages: the cheapest layers as above
        per_type = [type_blocks(g) for g in types]
        for k, nk in content.items():
            f_own = fastest_of_each([(nk["dense"] * per[0][0] + nk["moe"] * per[1][0]) / v
                                     for per in per_type])
            b_own = fastest_of_each([(nk["dense"] * per[0][1] + nk["moe"] * per[1][1]) / v
                                     for per in per_type])
            cheapest = mirrored | lay_str     # (a layout string: its kinds not read here)
            blocks[k] = (np.where(cheapest, blocks[k][0], f_own),
                         np.where(cheapest, blocks[k][1], b_own))
    T = {k: _chain(k if k != "heavy" else "mid", nmb, v,
                   dict(here, f_blk=blocks[k][0], b_blk=blocks[k][1]), sends_mid,
                   fwd_blocks, bwd_blocks, send, single)
         for k in ("first", "last", "mid", "heavy")}
    opt["heavy"] = opt["mid"]           # (its GPU type not known: the least of each)
    if not real.uniform:          # a mixed cluster: each stage's own chain on its own GPUs
        own = _own_chains(real, n, pp, {"first": 0.0 * pp, "last": pp - 1.0, "mid": pp - 2.0},
                          lambda g, k, own=own: chunk_times(g, own[k], chunks=v),
                          params, shard, sy,
                          lambda k, c: _chain(k, nmb, v, {**c, "head_first": head_first,
                                                          "mirrored": mirrored},
                                              sends_mid, fwd_blocks, bwd_blocks, send, single))
        for kind, (t, o) in own.items():
            take = t + o > T[kind] + opt[kind]
            T[kind], opt[kind] = np.where(take, t, T[kind]), np.where(take, o, opt[kind])
    most = chunk_times(gpu, lpc_most, True)           # windows: the dearest layers
    b_max = most[6] + emb_b + head_b   # the largest backward chunk
    fwd_layer = most[0].fwd
    if not real.uniform:   # the windows that hide communication: at their longest (slowest GPU)
        slowest = [chunk_times(g.gpu, lpc_most, True) for g in real.groups]
        b_max = np.max([t[6] + t[4] + t[2] for t in slowest], axis=0)
        fwd_layer = np.max([t[0].fwd for t in slowest], axis=0)
    # the ZeRO stage and overlap the gradients run with (``comm_rules.grad_path``: FSDP2 under
    # pipelining reduces once per step, after the stage's last backward)
    zero_g, ogr_g = grad_path(get_profile(framework).fsdp2, pp, zero, ogr)
    post_steps = np.where(ogr_g, dispatch(sched, "reduce_window_steps", pp, v), 0.0)
    # Megatron-Core reduces a rank past the first as one bucket (``BucketRule.whole_share``,
    # §5.92), which leaves such a rank no reduction window after its compute; the bound keeps
    # the window all the same (its floor stays below the estimate of the mixed-kind and
    # uneven plans, whose estimate reads the even plan's slack per rank: a tighter floor beat
    # a candidate's estimate by 0.02 %, tests/test_memory_mixed_layouts.py)
    # a split backward (point 5): the weight gradients a stage runs after its last B overlap
    # that micro-batch's way back, and the stages in between pass on its B alone
    split = attr_by_code(sched, "splits_backward").astype(float)

    def wgrad(r, n):
        """W seconds of ``n`` layers at most (subtracted: the dearest kinds)."""
        return mix.fill(n, *(r.by_kind[x].layer_wgrad for x in ("dense", "moe")), True) \
            if mix else n * r.layer_wgrad

    w_chunk = {"first": wgrad(sc, lpc_most) + sc.embedding_wgrad
               + np.where(head_first, sc.head_wgrad, 0.0),
               "last": np.where(head_first, wgrad(sc, lpc_most),
                                wgrad(sc, lpc_most) + sc.head_wgrad),
               "mid": wgrad(sc, lpc_most)}
    if not real.uniform:   # the longest W on any GPU type (the chains T are per GPU type)
        per_gpu = [record(g) for g in types]
        w_chunk = {"first": np.max([wgrad(r, lpc_most) + r.embedding_wgrad
                                    + np.where(head_first, r.head_wgrad, 0.0)
                                    for r in per_gpu], axis=0),
                   "last": np.max([np.where(head_first, wgrad(r, lpc_most),
                                            wgrad(r, lpc_most) + r.head_wgrad)
                                   for r in per_gpu], axis=0),
                   "mid": np.max([wgrad(r, lpc_most) for r in per_gpu], axis=0)}
    w_chunk["heavy"] = w_chunk["mid"]
    # a middle stage's backward chunk less its W (split backward), at the fastest of each
    b_pass = fastest_of_each([chunk_times(g)[6] - split * (
        lpc * record(g).layer_wgrad if not mix else wgrad(record(g), lpc)) for g in types])
    if mix:   # per layer of each kind: forward, backward, backward less a split-off W
        kf, kb, kbw = [], [], []
        for i, x in enumerate(("dense", "moe")):
            per = [(type_blocks(g)[i], record(g).by_kind[x]) for g in types]
            kf.append(fastest_of_each([p[0] for p, _ in per]))
            kb.append(fastest_of_each([p[1] for p, _ in per]))
            kbw.append(fastest_of_each([p[1] - split * k.layer_wgrad for p, k in per]))

    gb = sc.grad_bytes
    full = full_grad_reduce(get_profile(framework), dtype, zero)   # all-reduce, not RS

    # with expert parallelism the routed experts' share goes over their expert-data-parallel
    # group, tp·cp·dp/(etp·ep) ranks etp·ep apart, after the dense share on the same stream
    # (``comm.dp_parts``: every data-parallel collective, ZeRO-3's included)

    # each kind's groups once (every floor below and the mirror's shard read them)
    parts = {k: cm.dp_parts(params[k], eparams[k], tp, cp, dp, ep, P.etp, P.dp_shard)
             for k in ("first", "last", "mid")}
    # hybrid sharding: each gradient reduce-scatter's all-reduces of the rank's dense and
    # expert shares over its replicas (``comm.replica_sum``; 0 with one replica)

    # the busy seconds of the dp stream's ``work`` and the replicas' ``rep``: their sum on
    # one stream, the larger where the replicas have a lane of their own
    # (``FrameworkProfile.replica_stream``, the simulator's ``replica_lane``)
    own_lane = bool(get_profile(framework).replica_stream)

    def lanes(work, rep):
        return np.maximum(work, rep) if own_lane else work + rep

    def dp_floor(nbytes_per, kind, passes):
        return cm.dp_parts_sum(parts[kind], lambda p, n, s: group_floor(
            nbytes_per * p, n, s, passes, cl))

    def rep_floor(nbytes_per, kind):
        return cm.replica_sum(parts[kind], tp, cp, dp, P.dp_shard, lambda p, n, s: group_floor(
            nbytes_per * p, n, s, 2.0, cl))

    def dp_terms(kind):
        # (some parameter has copies to reduce with: dp·cp > 1, or experts over edp > 1)
        copies = cm.parts_have_copies(parts[kind])
        sync = copies & (zero < 3)
        red = lanes(dp_floor(gb, kind, np.where(full, 2.0, 1.0)),
                    np.where(full, 0.0, rep_floor(gb, kind)))
        red = np.where(sync, red, 0.0)
        ag = np.where(sync & (zero >= 1), dp_floor(getattr(sc, f"gather_{kind}"), kind, 1), 0.0)
        window = lps * fwd_layer
        items = lps + 2.0                                 # at most one bucket per item
        ag_tail = np.where(ogr_gather, np.maximum(ag - window, ag / items), ag)
        z3 = nmb * v * lanes(2 * dp_floor(sc.param_bytes, kind, 1) + dp_floor(gb, kind, 1),
                             rep_floor(gb, kind))
        # ZeRO-2: the dp stream reduce-scatters the stage's gradients once per micro-batch
        # (DualPipe: the one copy the micro-batch passed, half the rank's on the mean)
        half = np.where(mirrored, 0.5, 1.0)
        z2 = nmb * lanes(dp_floor(gb * half, kind, 1), rep_floor(gb * half, kind))
        busy = np.where((zero == 3) & copies, z3, np.where(sync & (zero_g == 2), z2, 0.0))
        return red, ag_tail, busy

    ogr_gather = P.overlap_param_gather
    terms = {k: dp_terms(k) for k in ("first", "last", "mid")}   # each kind's once
    terms["heavy"] = terms["mid"]
    red0, ag0, z30 = terms["first"]

    def stage_bound(kind, s, own_only=False):
        red, ag, z3 = terms[kind]
        # DualPipe: a rank's first micro-batch enters at its nearer end, and its last
        # backward goes back to that end
        s = np.where(mirrored, np.minimum(s, pp - 1 - s), s)
        t, o = T[kind], opt[kind]
        post = post_steps
        pre = np.maximum(0.0, t - post * (b_max + 2 * send))
        if mix:     # s chunks on s ranks: distinct layers, the cheapest s·lpc of them
            chain_in = np.where(s >= 1, mix.fill(s * lpc, *kf) + emb + s * send, 0.0)
            tail = np.where(s >= 1, mix.fill(lpc, *kb) + emb_b + (s - 1) * send
                            + mix.fill((s - 1) * lpc, *kbw), 0.0)
        else:
            chain_in = np.where(s >= 1, f_blk + emb + (s - 1) * f_blk + s * send, 0.0)
            tail = np.where(s >= 1, b_blk + emb_b + (s - 1) * (b_pass + send), 0.0)
        trail = split * dispatch(sched, "trailing_w_steps", s, pp, nmb) * w_chunk[kind]
        # DualPipe: the all-reduce of the two copies' gradients with the mirror rank runs on
        # the dp stream after the last compute and the buckets, before the optimizer (its
        # floor at the fastest links: the pair may share a node)
        # (the gradients its optimizer steps: ``comm.grad_shard_params``)
        held = cm.grad_shard_params(params[kind], eparams[kind], tp, cp, dp, ep, P.etp, zero,
                                    P.dp_shard)
        mirror = np.where(mirrored, group_floor(gb * held, 2, 1, 2.0, cl), 0.0)
        ok = known[kind]
        red, z3, ag, mirror, o = (np.where(ok > 0, ok * x, 0.0)
                                  for x in (red, z3, ag, mirror, o))
        own = chain_in + np.maximum(np.maximum(t, pre + red), z3) + mirror + o + ag
        down = chain_in + t - trail + tail + np.where(known["first"] > 0,
                                                      opt["first"] + ag0, 0.0)
        return own if own_only else np.maximum(own, np.where(s >= 1, down, 0.0))

    bound = stage_bound("first", np.zeros_like(pp))
    bound = np.maximum(bound, np.where(pp >= 2, stage_bound("last", pp - 1), 0.0))
    bound = np.maximum(bound, np.where(pp >= 3, stage_bound("mid", pp - 2), 0.0))
    if heavy.any():
        bound = np.maximum(bound, np.where(heavy, stage_bound("heavy", 0 * pp + 1, True), 0.0))
    return bound * (1.0 - SAFETY)


def _flushed_bound(m: ModelSpec, cl: Cluster, dtype: str, P: PlanArrays,
                   framework: FrameworkProfile | str | None, system: SystemConfig | None,
                   costs: StageCostArrays | None) -> np.ndarray:
    """The bound of plans of ``k`` pipeline flushes (``strategies.flushes``): the simulator
    runs one flush of ``gbs/k`` and composes ``T(k) = k·T_1 − (k−1)·t_opt``, ``t_opt`` the
    critical rank's optimizer. With ``B_1 ≤ T_1`` one flush's bound and ``O`` the longest
    optimizer and per-step passes of any rank on any GPU type present (the stage-cost
    record's, which the simulator runs; ``t_opt ≤ O``), ``T(k) ≥ k·B_1 − (k−1)·O``, and
    ``T(k) ≥ T_1 ≥ B_1`` (``T_1 ≥ t_opt``): the larger of the two. Seconds."""
    from dataclasses import replace
    k = P.flushes
    one = replace(P, gbs=P.gbs / k, flushes=np.ones_like(k))
    b1 = step_time_lower_bound(m, cl, dtype, one, framework, system, costs)
    types = [cl.gpu] if cl.uniform else list({repr(g.gpu): g.gpu for g in cl.groups}.values())
    recs = [costs if costs is not None and cl.uniform else
            stage_cost_arrays(m, cl.fastest_view(), dtype, one, framework,
                              get_system(system), gpu=g) for g in types]
    most = np.maximum.reduce([getattr(r, f"optimizer_{x}") + getattr(r, f"passes_{x}")
                              for r in recs for x in ("first", "mid", "last")])
    return np.where(k == 1, b1, np.maximum(b1, k * b1 - (k - 1) * most))


def fastest_of_each(per_type: list) -> np.ndarray:
    """The least, plan by plan, of one figure (seconds) computed on each GPU type a mixed
    cluster holds: every op of a step runs on one of them, so the sum of these minima over
    the ops bounds any rank's chain from below. Not one type for all: the type of the highest
    peak (``Cluster.fastest_gpu``) can be the slower on small kernels, whose time is set by a
    GEMM's fixed time (``cost.gemm_kernel.gemm_fixed_s``: none on A100, 4.7 us on H100) or the
    launch gap rather than the peak (docs/calibration.md §5.39). One type: its figure."""
    out = per_type[0]
    for x in per_type[1:]:
        out = np.minimum(out, x)
    return out


def _chain(kind: str, nmb, v, c: dict, sends_mid, fwd_blocks, bwd_blocks, send, single):
    """The compute chain T(s) of a stage of ``kind`` (first, last, mid) from its per-chunk
    times ``c`` (seconds)."""
    per_mb = v * (c["f_blk"] + c["b_blk"])
    # a V: the LM head on rank 0 (Schedule.ends); rank 0 sends neither chunk 0's backward
    # output nor chunk 1's forward output, and rank pp-1 hands both on to itself (the turn)
    head_first = c.get("head_first", False)
    ends_sends = np.where(head_first, sends_mid - nmb * (fwd_blocks + bwd_blocks), 0.0)
    # DualPipe (``mirrored``): each end rank embeds half the micro-batches and runs the LM
    # head of the other half, and sends as an end of each direction does
    both = nmb * (per_mb + (c["emb"] + c["emb_b"] + c["head_f"] + c["head_b"]) / 2) \
        + (sends_mid - nmb * (fwd_blocks + bwd_blocks) / 2) * send
    if kind in ("first", "last"):
        return np.where(c.get("mirrored", False), both, _chain_ring(kind, nmb, c, per_mb,
                                                                    sends_mid, fwd_blocks,
                                                                    bwd_blocks, send, single,
                                                                    head_first, ends_sends))
    return nmb * per_mb + sends_mid * send


def _chain_ring(kind, nmb, c, per_mb, sends_mid, fwd_blocks, bwd_blocks, send, single,
                head_first, ends_sends):
    """``_chain`` of the first or the last stage on the ring or a V."""
    if kind == "first":
        return nmb * (per_mb + c["emb"] + c["emb_b"]
                      + np.where(single | head_first, c["head_f"] + c["head_b"], 0.0)) \
            + np.where(head_first, ends_sends, sends_mid - nmb * bwd_blocks) * send
    if kind == "last":
        return np.where(head_first, nmb * per_mb,
                        nmb * (per_mb + c["head_f"] + c["head_b"])) \
            + np.where(head_first, ends_sends, sends_mid - nmb * fwd_blocks) * send
    return nmb * per_mb + sends_mid * send


def _own_chains(cl: Cluster, n, pp, stages: dict, chunk_times, params: dict, shard,
                sy: SystemConfig, chain) -> dict:
    """Per stage kind, ``(T, optimizer seconds)`` of the rank of that stage whose GPU type
    makes its own chain longest (a mixed cluster; stage ``s`` holds ranks ``s·n/pp`` to
    ``(s+1)·n/pp - 1``; ``chunk_times(gpu, kind)``: that kind of stage's own chunks on
    ``gpu``). Every rank runs its own chain, so any one of the stage's ranks bounds the step;
    both figures come from the same GPU type."""
    ends = np.cumsum([g.num_nodes for g in cl.groups])
    G, per = cl.gpus_per_node, n / pp
    gpus = [g.gpu for g in cl.groups]
    out = {}
    for kind, s in stages.items():
        s = np.maximum(s, 0.0)
        lo = np.searchsorted(ends, np.floor(s * per / G), side="right")
        hi = np.searchsorted(ends, np.floor(((s + 1) * per - 1) / G), side="right")
        best_t, best_o = 0.0, 0.0
        for gi, gpu in enumerate(gpus):
            on = (lo <= gi) & (gi <= hi)
            _, head_f, head_b, emb, emb_b, f_blk, b_blk, rec = chunk_times(gpu, kind)
            t = chain(kind, {"f_blk": f_blk, "b_blk": b_blk, "emb": emb, "emb_b": emb_b,
                             "head_f": head_f, "head_b": head_b})
            o = getattr(rec, f"optimizer_{kind}") + getattr(rec, f"passes_{kind}")   # step work
            take = on & (t + o > best_t + best_o)
            best_t, best_o = np.where(take, t, best_t), np.where(take, o, best_o)
        out[kind] = (best_t, best_o)
    return out
