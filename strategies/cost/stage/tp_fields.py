"""The stage-cost record's fields that the tensor-parallel collectives' rules
(``strategies.cost.tp_collectives``) read, for many plans: sequence parallelism's backward
re-gathers (``rg_*``), the column-parallel linears' asynchronous data-gradient reductions
(``rd_*``, ``dw_attn``, ``attn_w*``) and MLA's collectives (``tp_ag_bytes``, ``tp_attn_rc``,
``tp_rope_w``, ``tp_down``, ``tp_attn_full_rc``, ``tp_rep_grad_bytes``, ``down_*_w``).
Bytes, seconds per layer and micro-batch on one GPU, widths over the hidden size."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost import comm_bytes, layer_time, quantise
from strategies.cost import recompute as rcp
from strategies.cost.stage.inputs import StageInputs
from strategies.schedules import attr_by_code


def tp_rule_fields(si: StageInputs, lt: Any) -> dict[str, Any]:
    """``StageCostArrays``' TP-rule fields of ``si``'s model and plans; ``lt``: its mean
    layer's ``layer_time.layer_time``."""
    m, P, fw, sy, dtype, full, zeros = si.m, si.P, si.fw, si.sy, si.dtype, si.full, si.zeros
    tp, cp, b = P.tp, P.cp, P.mbs
    rc, sp, tpo = P.recompute, P.sp, P.tp_comm_overlap
    share = si.share
    widths = layer_time.attention_column_widths(m)
    return dict(
        # SP's backward re-gathers: the forward all-gather's bytes again, on stacks that save
        # the local shard (``FrameworkProfile.sp_regather``)
        rg_bytes=np.where((tp > 1) & sp & fw.sp_regather, comm_bytes.tp_comm_bytes_fwd(m, b, cp)
                          * quantise.tp_allgather_bytes_factor(dtype, sp), 0.0) + zeros,
        rg_attn_n=float(lt.regather[0][0]), rg_attn=full(lt.regather[0][1]),
        rg_attn2=full(lt.regather[1][1] if len(lt.regather) > 3 else 0.0),
        rg_dense_n=full(lt.regather[-2][0]),
        rg_dense=full(lt.regather[-2][1]), rg_shared_n=full(lt.regather[-1][0]),
        rg_shared=full(lt.regather[-1][1]),
        rg_down_qw=1.0 if m.is_mla and m.q_lora_rank and fw.mla_down_proj == "column" else 0.0,
        rg_down_kvw=1.0 if m.is_mla and fw.mla_down_proj == "column" else 0.0,
        rg_down_q=full(lt.down_dgrad[0]), rg_down_kv=full(lt.down_dgrad[1]),
        rd_down_q=full(lt.down_wgrad[0]), rd_down_kv=full(lt.down_wgrad[1]),
        # the column-parallel data gradients' reductions, asynchronous beside the weight
        # gradient where the stack's path does it and the backward is whole (a split one
        # defers the weight gradient; TP overlap prices its own, ``tp_overlap_bwd_exposed``)
        rd_bytes=np.where((tp > 1) & ~np.asarray(tpo, dtype=bool)
                          & ~attr_by_code(P.schedule, "splits_backward").astype(bool)
                          & ((fw.dgrad_overlap == "all") | ((fw.dgrad_overlap == "sp") & sp)),
                          comm_bytes.tp_comm_bytes_fwd(m, b, cp), 0.0) + zeros,
        rd_attn=full(lt.col_wgrad[0]),
        rd_attn2=full(lt.col_wgrad[1] if len(lt.col_wgrad) > 3 else 0.0),
        rd_dense=full(lt.col_wgrad[-2]), rd_shared=full(lt.col_wgrad[-1]),
        dw_attn=full(lt.attn_wgrad),
        attn_w=widths[0], attn_w2=widths[1] if len(widths) > 1 else 0.0,
        tp_ag_bytes=np.where(tp > 1, comm_bytes.tp_comm_bytes_fwd(m, b, cp)
                             * quantise.tp_allgather_bytes_factor(dtype, sp), 0.0) + zeros,
        tp_attn_rc=np.where((tp > 1) & sp & m.is_mla
                            & rcp.part_selected(rc, P.recompute_modules, "mla_up"), 1.0, 0.0)
        + zeros,
        # (column-parallel down projections gather the rope key inside the kv latent)
        tp_rope_w=np.where((tp > 1) & sp & m.is_mla & (fw.mla_down_proj != "column"),
                           (m.qk_rope_head_dim or 0) / m.hidden_size, 0.0) + zeros,
        tp_down=np.where((tp > 1) & m.is_mla & (fw.mla_down_proj == "column"), 1.0, 0.0)
        + zeros,
        tp_attn_full_rc=np.where((tp > 1) & m.is_mla & (rc == 2), share, 0.0) + zeros,
        # the replicated down projections (and the latents' norms; with column-parallel
        # down projections the norms only) under SP, in main-gradient bytes
        tp_rep_grad_bytes=np.where((tp > 1) & sp & m.is_mla, sy.main_grad_bytes(dtype) * (
            m.tp_replicated_params() if fw.mla_down_proj == "replicated"
            else (m.q_lora_rank or 0) + (m.kv_lora_rank or 0)), 0.0) + zeros,
        down_q_w=(m.q_lora_rank or 0) / m.hidden_size if m.is_mla else 0.0,
        down_kv_w=((m.kv_lora_rank or 0) + (m.qk_rope_head_dim or 0)) / m.hidden_size
        if m.is_mla else 0.0)
