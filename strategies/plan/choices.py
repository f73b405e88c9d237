"""The values a plan's fields take: recomputation modes, token dispatchers, routings, the
context-parallel K/V exchanges, the default routing imbalance and the MoE factors' bound."""
from __future__ import annotations

RECOMPUTE = ("none", "selective", "full", "op")
#: token dispatchers (plan ``moe_dispatcher``): Megatron-Core's ``alltoall`` (one copy per
#: token and chosen expert) and its ``flex`` dispatcher's backends DeepEP and HybridEP (one
#: copy per destination rank in the node; between nodes one per destination node over RDMA,
#: fanned out over NVLink there: ``strategies.cost.ep_dispatch.ep_dedup``). Codes: their index.
DISPATCHERS = ("alltoall", "deepep", "hybridep")
#: how the run's router spreads a token's ``k`` experts (plan ``moe_routing``; a fact of the
#: run, not of the stack): ``random``, ``k`` distinct experts drawn uniformly (a trained
#: router, Megatron-Core's ``moe_router_force_load_balancing``), or ``contiguous``, token ``t``
#: of a micro-batch takes experts ``t·k ... t·k + k - 1`` (mod ``E``), NeMo AutoModel's
#: benchmark ``FakeBalancedGate`` (``strategies.cost.ep_dispatch.contiguous_hit_probability``).
#: Codes: their index.
ROUTINGS = ("random", "contiguous")
#: how context parallelism exchanges K/V (plan ``cp_comm``; Megatron-Core's ``cp_comm_type``,
#: ``TransformerConfig``): ``p2p``, Transformer Engine's ring of K/V sends overlapped with the
#: attention (``AttnFuncWithCPAndKVP2P``), ``all_gather``, K/V all-gathered before the
#: attention and dK/dV reduce-scattered after it, exposed (``AttnFuncWithCPAndKVAllGather``;
#: Llama 3's CP, Dubey et al. 2024 §3.3.2), or ``a2a``, DeepSpeed-Ulysses' head scatter: Q, K,
#: V all-to-all'd to whole-sequence head shards before the attention and the output back after
#: it, exposed (``AttnFuncWithCPAndQKVOA2A``, Transformer Engine >= 1.11;
#: ``strategies.cost.cp_a2a``), or Megatron-Core's hierarchical ``a2a+p2p``: the all-to-all
#: inside groups of ``hierarchical_cp`` consecutive CP ranks, then the ring across them
#: (Transformer Engine >= 1.12; ``strategies.cost.cp_hier``). Codes in the stack rules: 0 the
#: stack's own, then 1 + the index. The ``FrameworkProfile.cp_impl`` each runs as:
#: ``CP_IMPL_OF``
CP_COMMS = ("p2p", "all_gather", "a2a", "a2a+p2p")
CP_IMPL_OF = {"p2p": "ring", "all_gather": "allgather", "a2a": "a2a", "a2a+p2p": "a2a+p2p"}
#: Megatron-Core ``cp_comm_type`` values a plan cannot name, and why (none now)
CP_COMMS_REFUSED: dict[str, str] = {}

#: The routing imbalance a plan that names none gets (the hottest expert-parallel rank's
#: routed-token load over the mean, ``moe_imbalance``): NaN, "by the rule", which
#: ``strategies.cost.token_counts.moe_load`` resolves with the model and the micro-batch's shape to
#: ``strategies.moe_balance.default_imbalance`` (a trained router balanced without an
#: auxiliary loss: the sampling of a finite micro-batch plus the published lasting skew,
#: docs/models.md "Expert parallelism as it runs", docs/calibration.md §5.73). One object, so
#: memoised functions keyed on it hit.
DEFAULT_MOE_IMBALANCE = float("nan")
#: routings balanced by construction (``contiguous``: every rank's share exact to a token),
#: whose default imbalance is 1 rather than the rule
BALANCED_ROUTINGS = ("contiguous",)
MAX_MOE_FACTOR = 1024.0   # sanity bound on moe_imbalance and moe_capacity_factor
