"""One transformer layer's costs in the many-plans record: its TP collectives per pass
(``tp_collectives_per_layer``), its kernel seconds (``layer_times``), the small collectives
that block its compute stream (``blocking_small``), and, for a model whose layers are of more
than one kind (``mixes_kinds``), one layer of each kind (``kind_arrays``) and each
multi-token-prediction module (``mtp_arrays``), gathered by ``kinds_by_name``."""
from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from strategies.cost import amax
from strategies.cost import comm as cm
from strategies.cost import attention_time, ep_dispatch, gemm_time, layer_time, param_counts
from strategies.cost import token_counts
from strategies.cost.stage.array_record import KindCostArrays
from strategies.cost.stage.inputs import StageInputs
from strategies.cost.system import SystemConfig
from strategies.model import ModelSpec
from topologies.gpus import GPU


def tp_collectives_per_layer(moe_share: token_counts.Num, ep: token_counts.Num,
                             shared_experts: int, blocks: int = 2) -> token_counts.Num:
    """Tensor-parallel collectives (or SP pairs) per layer and pass: the attention's and the
    MLP's; a MoE layer under expert parallelism has no MLP one unless a shared expert needs
    it (the routed tokens travel by the all-to-all and the etp collectives, ``etp_bytes``).
    ``moe_share``: the share of MoE layers (1 for one MoE layer, 0 for a dense one, the
    model's share for its mean layer). ``blocks``: the layer's blocks
    (``ModelSpec.blocks_per_layer``: a hybrid model's layer is one block, one pair)."""
    return float(blocks) - np.where((np.asarray(ep) > 1) & (shared_experts == 0), moe_share, 0.0)


def layer_times(mk: ModelSpec, si: StageInputs) -> Any:
    """``layer_time.layer_time`` of one mean layer of ``mk`` (the model, or a
    ``ModelSpec.of_kind`` view's only kind) for ``si``'s plans, with the layer's TP
    collective pairs (``tp_collectives_per_layer`` of its MoE share)."""
    P, fw, sy, gpu, dtype = si.P, si.fw, si.sy, si.gpu, si.dtype
    tp, cp, ep, b = P.tp, P.cp, P.ep, P.mbs
    rc, zero, sp, flash, tpo = P.recompute, P.zero, P.sp, P.flash_attn, P.tp_comm_overlap
    etp = P.etp
    return layer_time.layer_time(mk, b=b, tp=tp, cp=cp, ep=ep, sp=sp, flash=flash,
                                 recompute=rc, gpu=gpu, dtype=dtype, tpo=tpo, fw=fw, slow=si.slow,
                                 shard=si.shard_acc, system=sy, etp=etp, load=si.load,
                                 modules=P.recompute_modules, a2a_size=P.hierarchical_cp,
                                 dispatcher=P.moe_dispatcher, dedup=si.dedup_bytes,
                                 graphed=P.cuda_graph, gathered=(zero == 3) & (si.copies > 1),
                                 tp_pairs=tp_collectives_per_layer(
                                     mk.num_moe_layers / mk.num_layers if mk.is_moe else 0.0, ep,
                                     mk.num_shared_experts, mk.blocks_per_layer), pad=si.pad)


def blocking_small(mm: ModelSpec, si: StageInputs) -> tuple[Any, Any]:
    """(forward, backward) seconds per mean layer of ``mm`` of the small collectives that
    block the compute stream: the alltoall dispatcher's count all-gather and
    probabilities' all-to-alls, HybridEP's routing-map all-gather where the dispatch is
    not ``paired`` (``comm.dispatcher_metadata_time``) and Transformer Engine's amax
    all-reduces (``amax.amax_reduction_time``)."""
    P, fw, cl, dtype = si.P, si.fw, si.cl, si.dtype
    tp, dp, cp, ep, b = P.tp, P.dp, P.cp, P.ep, P.mbs
    rc, sp, etp = P.recompute, P.sp, P.etp
    d_f, d_b = cm.dispatcher_metadata_time(mm, b, tp, cp, ep, etp, P.moe_dispatcher, cl,
                                           si.load, si.paired, si.pad)
    r_f, r_b = amax.amax_reduction_time(mm, si.lpc, tp, cp, dp, ep, sp, dtype, fw, cl, rc)
    return d_f + r_f, d_b + r_b


def kind_arrays(mk: ModelSpec, si: StageInputs) -> KindCostArrays:
    """One layer of ``mk``'s (a ``ModelSpec.of_kind`` view's) only kind."""
    P, fw, sy, gpu, full = si.P, si.fw, si.sy, si.gpu, si.full
    tp, cp, ep, b = P.tp, P.cp, P.ep, P.mbs
    flash, etp, share, cap = P.flash_attn, P.etp, si.share, si.cap
    ltk = layer_times(mk, si)
    ak_f, ak_b = attention_time.attention_time_fwd(mk, b, tp, cp, flash, gpu, si.slow, fw, sy,
                                                   P.hierarchical_cp)
    dense_p, expert_p = param_counts.layer_params_split(mk, tp, ep, etp)
    mk_f, mk_b = blocking_small(mk, si)
    lead_p, lead_w = param_counts.layer_lead_split(mk, tp, ep, etp)
    return KindCostArrays(
        layer_fwd=full(ltk.fwd + mk_f), layer_bwd=full(ltk.bwd + mk_b),
        layer_wgrad=full(ltk.wgrad),
        layer_recompute=full(share * ltk.recompute), attn_fwd=full(ak_f),
        attn_bwd=full(ak_b),
        ep_bytes=np.where(ep > 1, ep_dispatch.ep_alltoall_bytes_fwd(mk, b, tp, cp, ep, si.load,
                                                                    si.disp) * si.dedup_bytes, 0.0)
        + si.zeros, layer_params=full(dense_p + expert_p), expert_params=full(expert_p),
        layer_recompute_each=full(np.where(cap > 0, ltk.recompute, 0.0)),
        layer_lead_params=full(lead_p), layer_lead_work=full(lead_w),
        layer_offload_fwd=full(0.0), layer_offload_bwd=full(0.0))


def kinds_by_name(si: StageInputs, head: tuple) -> dict[str, KindCostArrays]:
    """``StageCostArrays.by_kind`` of ``si``'s model: one layer of each kind where its layers
    are of more than one, and its multi-token-prediction module (``mtp_arrays``; ``head``:
    the LM head's forward, backward and weight-gradient seconds); empty for a model of one
    kind of layer."""
    m, P = si.m, si.P
    by_kind: dict[str, KindCostArrays] = {}
    kinds = [k for k, n in m.layer_counts().items() if n]
    if len(kinds) > 1:
        by_kind = {k: kind_arrays(m.of_kind(k), si) for k in kinds}
    if m.num_nextn_predict_layers:
        mm = m.mtp_layer_model()    # DeepSeek-V4's MTP layer: a sliding-window one
        block = [(by_kind.get(k) if mm is m else None) or kind_arrays(mm.of_kind(k), si)
                 for k in m.mtp_block_kinds()]
        layer = block[0] if len(block) == 1 else _summed(block)
        by_kind["mtp"] = mtp_arrays(m, layer, P.mbs, P.tp, P.cp, P.ep, P.tp_comm_overlap, si.gpu,
                                    si.dtype, si.slow, si.sy, head, si.full, P.etp)
    return by_kind


def _summed(layers: list[KindCostArrays]) -> KindCostArrays:
    """The layers of a multi-token-prediction block (a hybrid model's ``mtp_hybrid_pattern``)
    as one ``KindCostArrays``: every field summed."""
    names = [f.name for f in fields(KindCostArrays)]
    return KindCostArrays(**{n: sum(getattr(x, n) for x in layers) for n in names})


def mixes_kinds(m: ModelSpec) -> bool:
    """Whether ``m``'s layers are of more than one kind (dense and MoE layers, or a
    multi-token-prediction module beside them): the record then has ``by_kind`` entries and
    a pipeline's stages differ by the kinds they hold, which the plan columns' mean layer
    cannot say (``estimate.chunk_correction.by_chunk``, ``estimate.kinds``)."""
    return sum(1 for n in m.layer_counts().values() if n) > 1 \
        or bool(m.num_nextn_predict_layers)


def mtp_arrays(m: ModelSpec, layer: KindCostArrays, b, tp, cp, ep, tpo, gpu: GPU, dtype: str,
               slow, sy: SystemConfig, head: tuple, full, etp=None) -> KindCostArrays:
    """One multi-token-prediction module (DeepSeek-V3 §2.2; Megatron's ``m`` slot): the
    ``2h -> h`` projection of the normed hidden state and the next token's embedding (a
    column-parallel GEMM over ``tp``; its backward, data and weight gradient, twice its
    forward), its block's ``layer`` (one transformer layer, or a hybrid block's layers
    summed) and a pass through the shared LM head and the loss (``head``: the LM head's
    forward, backward and weight-gradient seconds); all of it ``mtp_repeats`` times (one
    physical block run at each depth). Parameters, once:
    ``param_counts.mtp_params_split``."""
    h = m.hidden_size
    T = token_counts.tokens_per_gpu(b, m.seq_length, cp)
    proj = slow * gemm_time.gemms_time_fwd([(1, T, h / tp, 2 * h, False)], tp, gpu, dtype, tpo, sy)
    head_f, head_b, head_w = head
    d_mtp, e_mtp = param_counts.mtp_params_split(m, tp, ep, etp)
    r = m.mtp_repeats
    if r == 1:
        def rep(x):
            return x
    else:
        def rep(x):
            return r * x
    return KindCostArrays(
        layer_fwd=full(rep(layer.layer_fwd + proj + head_f)),
        layer_bwd=full(rep(layer.layer_bwd + 2 * proj + head_b)),
        layer_wgrad=full(rep(layer.layer_wgrad + proj + head_w)),
        layer_recompute=rep(layer.layer_recompute), attn_fwd=rep(layer.attn_fwd),
        attn_bwd=rep(layer.attn_bwd), ep_bytes=rep(layer.ep_bytes),
        layer_params=full(d_mtp + e_mtp), expert_params=full(e_mtp),
        layer_recompute_each=rep(layer.layer_recompute_each),
        layer_lead_params=full(0.0), layer_lead_work=full(0.0),
        layer_offload_fwd=full(0.0), layer_offload_bwd=full(0.0))
