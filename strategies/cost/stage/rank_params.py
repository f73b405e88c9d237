"""What each kind of pipeline rank holds, for many plans (``StageCostArrays``'s
``*_first``/``*_mid``/``*_last`` fields: rank 0, rank 1 (the middle rank nearest rank 0),
rank ``pp - 1``): its parameters (dense and the routed experts' part), its optimizer step
and weight quantisation, the stack's per-step passes, the mean width of its all-gather after
the optimizer (``gather_width``), the LM head's parameters on its rank and the tied
embedding's gradient bytes. Seconds, bytes, parameters per GPU."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies import placement
from strategies.cost import elementwise_time, grad_time, param_counts, quantise
from strategies.cost import step as steps
from strategies.cost.stage.inputs import StageInputs
from strategies.cost.system import SystemConfig
from strategies.layout import even_stage_content_arrays, mixed_layers
from strategies.plan_arrays import rank_layers
from strategies.schedules import attr_by_code, dispatch


def rank_param_fields(si: StageInputs) -> dict[str, Any]:
    """``StageCostArrays``' per-rank fields of ``si``'s plans: ``params_*``,
    ``expert_params_*``, ``optimizer_*``, ``passes_*``, ``gather_*`` (each for ``first``,
    ``mid``, ``last``), ``head_params`` and ``tied_bytes``."""
    m, P, fw, sy, gpu, dtype = si.m, si.P, si.fw, si.sy, si.gpu, si.dtype
    tp, pp, dp, cp, ep = P.tp, P.pp, P.dp, P.cp, P.ep
    rc, zero, etp = P.recompute, P.zero, P.etp
    copies, zeros, full = si.copies, si.zeros, si.full
    mb, once, zero_g = si.mb, si.once, si.zero_g
    shard = np.where(zero >= 1, copies, 1.0)
    # expert states are sharded over the expert-data-parallel group, tp·cp·dp/(etp·ep) ranks
    # (with hybrid sharding its grid within a replica: dp_shard in place of dp)
    shard_e = np.where(zero >= 1, placement.expert_dp_group(tp, cp, P.dp_shard, ep, etp)[0],
                       1.0)
    head_at = dispatch(P.schedule, "head_rank_array", pp, P.vpp)   # Schedule.ends
    mirrored = attr_by_code(P.schedule, "mirrored")                  # DualPipe: stages r, p-1-r
    # the layers each kind of rank holds: an uneven layout's (plan_arrays.rank_layers), else
    # the even split's l // p
    n_first, n_mid, n_last, _, uneven = rank_layers(m.num_layers, P)
    held = {k: np.where(uneven, n, m.num_layers // pp)
            for k, n in (("first", n_first), ("mid", n_mid), ("last", n_last))}
    # a model of dense and MoE layers or MTP modules: what each kind of rank holds by kind
    # (``layout.even_stage_content_arrays`` of the plans' columns: the even split, or the
    # search's first/last-stage counts and slots; "mid" is rank 1, the middle rank nearest
    # rank 0, whose data-parallel tail the least compute hides, ``terms.ranks.rank_slack``;
    # DualPipe's ranks both copies), the parameters the memory model reads
    # (``param_counts.content_params``), so the estimate's per-rank data-parallel traffic and
    # optimizer read the layers the rank holds, not the even split's mean layer
    content = dict.fromkeys(("first", "mid", "last"))
    if mixed_layers(m):
        lay = (P.first_stage_layers, P.last_stage_layers, P.account_slots)
        for k, r in (("first", 0 * pp), ("mid", np.minimum(1, pp - 1)), ("last", pp - 1)):
            have = even_stage_content_arrays(m, P.schedule, pp, P.vpp, r, *lay, strict=False)
            mirror = even_stage_content_arrays(m, P.schedule, pp, P.vpp, pp - 1 - r, *lay,
                                               strict=False)
            both = np.asarray(mirrored, dtype=bool) & (pp > 1)
            content[k] = {x: have[x] + np.where(both, mirror[x], 0.0) for x in have}

    def params_split(k: str, s: Any) -> tuple[Any, Any]:
        mean = param_counts.stage_params_split(m, tp, ep, pp, s, layers=held[k], head_stage=head_at,
                                               mirrored=mirrored, etp=etp)
        if content[k] is None:
            return mean
        # (a plan whose columns give no layout, NaN: a job's layout string, which
        # ``stage_costs`` and the scalar estimate read instead; the mean layers here)
        known = np.isfinite(content[k]["dense"])
        own = param_counts.stage_params_split(m, tp, ep, pp, s, layers=held[k], head_stage=head_at,
                                              mirrored=mirrored, etp=etp,
                                              content={x: np.where(known, n, 0.0)
                                                       for x, n in content[k].items()})
        return tuple(np.where(known, o, e) for o, e in zip(own, mean))
    split = {k: params_split(k, s) for k, s in (("first", 0), ("mid", -1), ("last", pp - 1))}
    params = {k: d + e + zeros for k, (d, e) in split.items()}
    # the embedding and the LM head each kind of rank holds (never quantised)
    ends = {k: param_counts.stage_params_split(m, tp, ep, pp, s, layers=0, head_stage=head_at,
                                               mirrored=mirrored, etp=etp)[0]
            for k, s in (("first", 0), ("mid", -1), ("last", pp - 1))}
    w_cast = elementwise_time.weight_cast_time(
        param_counts.layer_params_per_gpu(m, tp, ep, etp) * m.num_layers / pp, gpu, dtype, sy) \
        * quantise.weight_cast_passes(fw.weight_cast_per_forward, mb, rc)
    opt = {k: grad_time.optimizer_time(d / shard + e / shard_e, gpu, sy, fw) + w_cast + zeros
           for k, (d, e) in split.items()}
    # the per-step passes over the gradient buffer a GPU holds and the shard it updates, the
    # dense and the expert parameters each over its own group (reducing once per step, the
    # stack's passes over the unsharded gradient run once, before that reduce-scatter, §3.14)
    passes = {k: steps.stage_pass_time(params[k], e + zeros, tp, cp, dp, ep, etp, zero, zero_g,
                                       once, fw, gpu, dtype, sy, P.dp_shard)
              for k, (_, e) in split.items()}
    return dict(
        # the head's rank: a tied head on the embedding's rank (a V, DualPipe) is one tensor
        head_params=full(param_counts.head_params_per_gpu(m, tp, pp, (head_at == 0) | mirrored)),
        params_first=params["first"], params_mid=params["mid"], params_last=params["last"],
        expert_params_first=split["first"][1] + zeros, expert_params_mid=split["mid"][1] + zeros,
        expert_params_last=split["last"][1] + zeros,
        optimizer_first=opt["first"], optimizer_mid=opt["mid"], optimizer_last=opt["last"],
        passes_first=passes["first"], passes_mid=passes["mid"], passes_last=passes["last"],
        # (DualPipe's mirror all-reduce already sums the end ranks' embedding and head copies)
        tied_bytes=np.where(mirrored, 0.0,
                            steps.tied_grad_bytes(m, tp, pp, head_at, fw.step, dtype, sy)) + zeros,
        **{f"gather_{k}": gather_width(params[k], ends[k], sy) + zeros for k in params})


def gather_width(params: Any, ends: Any, sy: SystemConfig) -> Any:
    """Mean bytes per parameter of a rank's data-parallel all-gather after the optimizer:
    its ``params`` less the embedding and LM head it holds (``ends``, never quantised) at
    ``sy.gather_bytes()``, ``ends`` at ``sy.param_bytes``; ``param_bytes`` itself where the
    stack states no narrower gather. Vectorised."""
    pb, g = float(sy.param_bytes), sy.gather_bytes()
    if g == pb:
        return np.full(np.shape(params), pb)[()]
    p = np.asarray(params, dtype=float)
    e = np.minimum(np.asarray(ends, dtype=float), p)
    return np.where(p > 0, (g * (p - e) + pb * e) / np.maximum(p, 1e-30), g)[()]
