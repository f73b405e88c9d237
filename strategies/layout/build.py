"""Building a plan's ``PipelineLayout`` for a model (``build_layout``): its layout string
checked against its shape and the model (``plan_layout_stages``), or the layer counts of the
first/last-stage, accounted, ``layers_per_stage`` or even splits (the package docstring: which
plan field wins); ``even_layout`` for plans with no layout string (the search's).
"""
from __future__ import annotations

from functools import lru_cache

from strategies.errors import SpecError
from strategies.layout.grammar import EMBEDDING, LAYER, LOSS, MTP, parse_layout
from strategies.layout.record import PipelineLayout, placed, position_rank_chunk
from strategies.model import ModelSpec
from strategies.schedules import get_schedule


def plan_layout_stages(plan, field: str = "layout") -> tuple[tuple[str, ...], ...] | None:
    """The plan's layout string parsed and checked against its shape (``pp·vpp`` virtual
    stages, none empty); None when the plan gives none. The rules that need no model."""
    if plan.layout is None:
        return None
    stages = parse_layout(plan.layout, field)
    n = plan.pp * plan.vpp
    if get_schedule(plan.schedule).num_virtual_stages(plan.pp, plan.vpp) != n:
        raise SpecError(field, plan.layout, f"needs a schedule whose micro-batches cross every "
                        f"chunk (schedule={plan.schedule} runs two directions)")
    if len(stages) != n:
        raise SpecError(field, plan.layout, f"must name pp*vpp = {plan.pp}*{plan.vpp} = {n} "
                        f"stages (separated by '|'), not {len(stages)}")
    for i, st in enumerate(stages):
        if not st:
            raise SpecError(field, plan.layout, f"leaves stage {i} empty (each of the "
                            f"{n} stages must hold at least one of E, t, m, L)")
    return stages


def _check_against_model(stages, model: ModelSpec, text: str, field: str) -> None:
    """Megatron's rules between a layout and a model: one embedding, first; one loss, last;
    ``num_layers`` transformer layers; ``num_nextn_predict_layers`` MTP modules, after every
    transformer layer."""
    flat = [s for st in stages for s in st]
    if flat[0] != EMBEDDING or flat.count(EMBEDDING) != 1:
        raise SpecError(field, text, "must hold the embedding E exactly once, as the first slot")
    if flat[-1] != LOSS or flat.count(LOSS) != 1:
        raise SpecError(field, text, "must hold the loss L exactly once, as the last slot")
    n = flat.count(LAYER)
    if n != model.num_layers:
        raise SpecError(field, text, f"must hold num_layers={model.num_layers} transformer "
                        f"layers t, not {n}")
    k = flat.count(MTP)
    if k != model.num_nextn_predict_layers:
        raise SpecError(field, text, f"must hold num_nextn_predict_layers="
                        f"{model.num_nextn_predict_layers} MTP modules m, not {k}")
    if k and LAYER in flat[flat.index(MTP):]:
        raise SpecError(field, text, "must place the MTP modules m after every transformer "
                        "layer t")


def _even_chunks(n: int, parts: int, field: str, value, what: str) -> list[int]:
    if parts <= 0:
        return []
    if n % parts:
        raise SpecError(field, value, f"{what}: {n} layers must divide evenly over {parts} "
                        "model chunks")
    return [n // parts] * parts


def _counts(model: ModelSpec, plan) -> tuple[list[int], str]:
    """Transformer layers per virtual stage (path order) and the source, for plans without a
    layout string."""
    L, pp, vpp = model.num_layers, plan.pp, plan.vpp
    n, k = pp * vpp, vpp
    f, la = plan.first_stage_layers, plan.last_stage_layers
    if f is not None or la is not None:
        middle_ranks = pp - (f is not None) - (la is not None)
        rest = L - (f or 0) - (la or 0)
        text = f"first_stage_layers={f}, last_stage_layers={la}"
        if rest < 0 or (rest > 0) != (middle_ranks > 0):
            raise SpecError("first_stage_layers" if f is not None else "last_stage_layers",
                            f if f is not None else la,
                            f"leaves {rest} layers for {middle_ranks} middle stages "
                            f"(num_layers={L}, pp={pp})")
        mid = _even_chunks(rest, middle_ranks, "first_stage_layers" if f is not None
                           else "last_stage_layers", text, "the middle stages")
        per_rank = ([f] if f is not None else []) + mid + ([la] if la is not None else [])
        per_rank = [x for x in per_rank]
        by_rank = [_even_chunks(x, k, "first_stage_layers" if r == 0 and f is not None else
                                "last_stage_layers" if r == pp - 1 and la is not None else
                                "num_layers", x, f"stage {r} (vpp={vpp})")
                   for r, x in enumerate(per_rank)]
        return _by_path(by_rank, plan), "first/last"
    if plan.account_embedding or plan.account_loss:
        slots = L + plan.account_embedding + plan.account_loss
        if slots % n:
            raise SpecError("num_layers", L, f"with the embedding ({plan.account_embedding}) "
                            f"and the loss ({plan.account_loss}) counted as layers, "
                            f"num_layers + {slots - L} = {slots} must be divisible by "
                            f"pp*vpp = {n}")
        counts = [slots // n] * n
        counts[0] -= plan.account_embedding
        counts[-1] -= plan.account_loss
        return counts, "account"
    if plan.layers_per_stage is not None:
        if sum(plan.layers_per_stage) != L:
            raise SpecError("layers_per_stage", "/".join(map(str, plan.layers_per_stage)),
                            f"must sum to num_layers={L} (sums to {sum(plan.layers_per_stage)})")
        return _by_path([[x] for x in plan.layers_per_stage], plan), "layers_per_stage"
    if L % n:
        what = f"pp*vpp = {pp}*{vpp} = {n}" if vpp > 1 else f"pp={pp}"
        raise SpecError("num_layers", L, f"must be divisible by {what} (or give layout=, "
                        "first_stage_layers=/last_stage_layers= or account_embedding/"
                        "account_loss: docs/layout.md)")
    return [L // n] * n, "even"


def _by_path(by_rank: list[list[int]], plan) -> list[int]:
    """Per-rank, per-chunk counts in path order (the schedule's placement)."""
    out = []
    for pos in range(plan.pp * plan.vpp):
        r, c = position_rank_chunk(plan.schedule, pos, plan.pp, plan.vpp)
        out.append(by_rank[r][c])
    return out


def build_layout(model: ModelSpec, plan) -> PipelineLayout:
    """The layout of ``plan`` for ``model`` (module docstring: which plan field wins);
    ``SpecError`` naming the field, the value and the rule."""
    return _build_layout(model, plan.pp, plan.vpp, plan.schedule, plan.layout,
                         plan.first_stage_layers, plan.last_stage_layers,
                         plan.account_embedding, plan.account_loss, plan.layers_per_stage)


@lru_cache(maxsize=1024)
def _build_layout(model: ModelSpec, pp: int, vpp: int, schedule: str, layout: str | None,
                  first_stage_layers: int | None, last_stage_layers: int | None,
                  account_embedding: bool, account_loss: bool,
                  layers_per_stage: tuple[int, ...] | None) -> PipelineLayout:
    from types import SimpleNamespace
    plan = SimpleNamespace(pp=pp, vpp=vpp, schedule=schedule, layout=layout,
                           first_stage_layers=first_stage_layers,
                           last_stage_layers=last_stage_layers,
                           account_embedding=account_embedding, account_loss=account_loss,
                           layers_per_stage=layers_per_stage)
    pp, vpp = plan.pp, plan.vpp
    stages = plan_layout_stages(plan)
    if stages is not None:
        _check_against_model(stages, model, plan.layout, "layout")
        return placed(list(stages), plan.schedule, pp, vpp, "layout")
    counts, source = _counts(model, plan)
    return _from_counts(model, plan, counts, source)


def _from_counts(model: ModelSpec, plan, counts: list[int], source: str) -> PipelineLayout:
    """Virtual stages of ``counts`` layers (path order), the embedding first, the
    multi-token-prediction modules and the loss last."""
    pp, vpp = plan.pp, plan.vpp
    out = [[LAYER] * c for c in counts]
    out[0].insert(0, EMBEDDING)
    out[-1] += [MTP] * model.num_nextn_predict_layers + [LOSS]
    for i, st in enumerate(out):
        if not st:
            raise SpecError("num_layers", model.num_layers, f"the {source} split leaves "
                            f"virtual stage {i} empty (pp={pp}, vpp={vpp})")
    return placed([tuple(st) for st in out], plan.schedule, pp, vpp, source)


def even_layout(model: ModelSpec, schedule: str, pp: int, vpp: int, first: int = 0,
                last: int = 0, account: bool = False) -> PipelineLayout:
    """``build_layout`` of a plan with no layout string: the even split, or the search's
    uneven ``first``/``last`` (0: not given) with ``account`` (the embedding and the loss as
    layer slots)."""
    return _build_layout(model, pp, vpp, schedule, None, first or None, last or None,
                         account, account, None)
