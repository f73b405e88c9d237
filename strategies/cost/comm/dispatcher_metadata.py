"""The small blocking collectives of an MoE token dispatcher besides the tokens' dispatch and
combine (Megatron-Core's ``alltoall`` dispatcher, HybridEP's routing map)."""
from __future__ import annotations

import numpy as np

from strategies.cost import ep_dispatch, moe_bytes
from strategies.cost.comm.collective import collective_time
from strategies.cost.token_counts import Num
from topologies.cluster import Cluster


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
