"""The ``Plan`` of a published entry, for the reference reader
(``strategies.reference.cases``): its parallel sizes, schedule and chunks, micro-batch,
recomputation, sequence parallelism, ZeRO stage, switches and flushes (what it states, the
rest from the stack's defaults and stated rules, each said in its notes), and the pipeline
splits it states or implies (layer slots, first/last stage layers, a recipe's layout, the
busiest stage's layers on every stage).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from strategies.cost.offload import parse_offload_modules
from strategies.errors import SpecError
from strategies.stacks.megatron import MEGATRON_LM_2021
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from strategies.plan import Plan
from strategies.plan.parse import coerce, tp_overlap_default
from strategies.plan.recompute_fields import parse_modules
from strategies.reference.bridge_recipes import recipe_for
from strategies.reference.recipe_options import hybrid_mesh, moe_options, stated_remat
from strategies.reference.stated_switches import stated_size, stated_plan_switches
from strategies.reference.text import recompute_kind, schedule_kind
from strategies.schedules import DEFAULT_SCHEDULE, get_schedule
from strategies.schedules.registry import chunked_default
from strategies.schedules.validity import all_ok


def _schedule(pl: dict, layers: int, pp: int, m: int) -> tuple[str, int, list[str]]:
    """The schedule, its chunk count and the assumptions made: a named schedule as given; the
    default (1F1B) or an unnamed one with ``virtual_stages`` given, or an unnamed one run with
    pipeline overlap, as the chunked schedule (interleaving; the smallest valid chunk count
    when none is given); else the default."""
    kind = schedule_kind(pl.get("schedule"))
    v = pl.get("virtual_stages")
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        # refused, not read as "not given" (the chunks would be inferred, the stated figure lost)
        raise SpecError("virtual_stages", v, "must be an integer >= 1 (model chunks per "
                        "pipeline rank) or null")
    if pp == 1:
        return DEFAULT_SCHEDULE, 1, []
    named = get_schedule(kind) if kind else None
    chunked = named if named is not None and named.chunked else chunked_default()
    plain = named is not None and not named.chunked and kind != DEFAULT_SCHEDULE
    if v is not None and v > 1 and not plain and chunked:
        return chunked.name, v, [] if named is chunked else [
            f"{chunked.name} (virtual_stages={v} given)"]
    if plain:
        return kind, 1, []
    # Megatron-Core overlaps pipeline sends with compute only in the interleaved schedule, so a
    # source that ran with "PP overlap" on and names no schedule ran interleaved
    implied = not kind and "pp overlap" in str(pl.get("overlap") or "").lower()
    if chunked and ((named is not None and named.chunked) or implied):
        per = layers // pp
        for v in range(2, per + 1):
            if per % v == 0 and all_ok(chunked.batch_rules(pp, m, v, None)):
                why = [f"{chunked.name} (implied by PP communication overlap; not stated)"] \
                    if implied else []
                return chunked.name, v, why + [f"vpp={v} (smallest number of chunks dividing "
                                               f"{per} layers per stage; not stated)"]
        return DEFAULT_SCHEDULE, 1, ["vpp not stated and no valid interleaving: 1F1B"]
    return DEFAULT_SCHEDULE, 1, [] if kind else ["1F1B (schedule not stated)"]


def parallel_sizes(pl: dict, n: int) -> tuple[int, int, int, int, int, list[str]] | None:
    """(tp, pp, cp, dp, ep) of a plan; a plan that gives only its data parallelism over every
    GPU (FSDP, ZeRO) has no model parallelism. Expert parallelism splits the data-parallel
    ranks (Megatron-Core). None: not enough to tell."""
    tp, pp, cp, dp, ep = (stated_size(pl.get(k)) for k in ("tp", "pp", "cp", "dp", "ep"))
    cp, ep = cp or 1, ep or 1
    notes: list[str] = []
    if tp is None and pp is None and dp is not None and dp * cp == n:
        tp, pp = 1, 1
        notes.append("tp=1 pp=1 (data parallel over every GPU)")
    if tp is None or pp is None:
        return None
    return tp, pp, cp, dp or n // (tp * pp * cp), ep, notes


def balanced_layers(model: ModelSpec, pp: int, notes: list[str]) -> ModelSpec:
    """A model whose layers do not split evenly over ``pp`` stages (Llama 3.1 405B's 126 over 8
    or 16) runs with the busiest stage's ``ceil(layers/pp)`` layers on every stage: the
    pipeline's step is set by its slowest stage, so the step time is that of the uneven split
    (the FLOP count is not, and is not what is compared)."""
    if model.num_layers % pp == 0:
        return model
    layers = -(-model.num_layers // pp) * pp
    notes.append(f"layers {model.num_layers} -> {layers}: every stage as the busiest of the "
                 f"uneven split ({layers // pp} layers)")
    return replace(model, num_layers=layers)


def slot_plan(c: dict, model: ModelSpec, sizes: tuple, gbs: int, fw: FrameworkProfile,
               notes: list[str], stated: bool) -> Plan | None:
    """The plan of a Megatron-family run (a stack launched with Megatron's switches,
    ``export == "megatron"``) whose layers do not divide over its chunks but do
    once the embedding and the loss take a layer slot each: Megatron's
    ``--account-for-embedding/loss-in-pipeline-split``, the way NeMo and Megatron-Bridge run
    Llama 3.1 405B's 126 layers (docs/layout.md); also the source's own "embedding counted as
    a block" partition (``stated``, DeepSpeed's). None where it does not apply (the layers
    divide, another stack, slots that do not divide either)."""
    pp = sizes[1]
    if pp == 1 or not (stated or fw.export == "megatron"):
        return None
    if model.num_nextn_predict_layers:
        return None
    plain = entry_plan(c, sizes, gbs, model.num_layers, fw, [])
    if model.num_layers % (pp * plain.vpp) == 0:
        return None                               # the layers divide: the plain plan
    trial: list[str] = []
    plan = entry_plan(c, sizes, gbs, model.num_layers + 2, fw, trial)
    chunks = pp * plan.vpp
    if plan.vpp != plain.vpp or (model.num_layers + 2) % chunks:
        return None
    notes += trial
    notes.append(f"layers {model.num_layers} on {chunks} chunks: the embedding and the loss "
                 "counted as layer slots (" + ("the source's partition" if stated else
                 "Megatron's --account-for-embedding/loss-in-pipeline-split, as NeMo runs it")
                 + ")")
    return replace(plan, account_embedding=True, account_loss=True)


def stated_stages_plan(c: dict, model: ModelSpec, sizes: tuple, gbs: int,
                        fw: FrameworkProfile, notes: list[str]) -> Plan | None:
    """The plan of a pipelined row that states its first and/or last stage's layer counts
    (``plan.first_stage_layers``/``last_stage_layers``: Megatron's
    ``--decoder-first/last-pipeline-num-layers``, NeMo's
    ``num_layers_in_first/last_pipeline_stage``), run on the model's own layers with the rest
    split evenly over the middle stages (``strategies.layout``); None where it states neither."""
    pl = c.get("plan") or {}
    stated = {f: stated_size(pl.get(f)) for f in ("first_stage_layers", "last_stage_layers")
              if pl.get(f) is not None}
    if not stated or sizes[1] == 1:
        return None
    plan = replace(entry_plan(c, sizes, gbs, model.num_layers, fw, notes), **stated)
    notes.append(", ".join(f"{f}={v}" for f, v in stated.items())
                 + " (stated: the recipe's uneven pipeline split)")
    return plan


def recipe_layout_plan(c: dict, model: ModelSpec, sizes: tuple, gbs: int,
                        fw: FrameworkProfile, notes: list[str]) -> Plan | None:
    """The plan of a pipelined row whose Megatron-Bridge recipe (``bridge_recipes.
    recipe_for``) names its pipeline layout (``MoeRecipe.pp_layout``, Megatron's layout
    grammar), run with that layout on the model's own layers, stated with the recipe's file
    (a layout that does not resolve on the model skips the row, ``make_job``'s reason); a
    row that states its own (``plan.pp_layout``, its source in the row's notes) runs with
    that one; None where neither applies (the caller then balances the layers)."""
    pl = c.get("plan") or {}
    own = pl.get("pp_layout") if sizes[1] > 1 else None
    if own:
        trial: list[str] = []
        plan = replace(entry_plan(c, sizes, gbs, model.num_layers, fw, trial), layout=str(own))
        notes += trial
        notes.append(f"pipeline layout {own} (stated: plan.pp_layout; the row's notes name "
                     "its source)")
        return plan
    r = recipe_for(c) if sizes[1] > 1 and sizes[4] > 1 else None
    if r is None or not r.pp_layout or pl.get("layout") or pl.get("pp_layout"):
        return None
    trial = []
    plan = replace(entry_plan(c, sizes, gbs, model.num_layers, fw, trial), layout=r.pp_layout)
    notes += trial
    notes.append(f"pipeline layout {r.pp_layout} (the recipe's pipeline_model_parallel_layout: "
                 f"{r.source}; bridge_recipes._DS_* name the lines)")
    return plan


def entry_plan(c: dict, sizes: tuple[int, int, int, int, int], gbs: int, layers: int,
          fw: FrameworkProfile, notes: list[str]) -> Plan:
    """The plan of an entry: what it states, the rest from the framework's defaults and the
    stated rules (each assumption appended to ``notes``)."""
    pl = c.get("plan") or {}
    tp, pp, cp, dp, ep = sizes
    modern = fw is not MEGATRON_LM_2021
    if not pl.get("global_batch"):
        notes.append(f"gbs={gbs} (local batch {pl.get('local_batch_size')} x dp {dp})")
    mbs, local = pl.get("microbatch"), pl.get("local_batch_size")
    if not mbs and local:
        mbs = local if pp == 1 else max(1, int(local) // pp)
        if pp > 1:
            notes.append(f"mbs={mbs}: the local batch split into pp={pp} micro-batches "
                         "(torchtitan's default; not stated)")
    if not mbs:
        mbs = 1 if pp > 1 else max(1, min(4, gbs // dp))
        notes.append(f"mbs={mbs} (not stated)")
    rec = recompute_kind(pl.get("recompute")) or fw.default_recompute
    if recompute_kind(pl.get("recompute")) is None:
        notes.append(f"recompute={rec} (not stated; {fw.name} default: "
                     f"{fw.default_source('recompute') or 'none given'})")
    elif rec == "op" and rec not in fw.recompute:   # "SAC" under a stack without torchtitan's policy
        rec = "selective"
        notes.append(f"recompute=selective (op-level checkpointing stated; {fw.name} has no op policy)")
    sched, vpp, sn = _schedule(pl, layers, pp, gbs // (mbs * dp))
    notes += sn
    sp = pl.get("sequence_parallel")
    if sp is None:
        sp = modern and tp > 1 and fw.sequence_parallel
        notes.append(f"sp={str(sp).lower()} (not stated)")
    zero = pl.get("zero_stage")
    if zero is None:
        fsdp = stated_fsdp(pl)
        zero = 3 if fsdp and pp == 1 else (1 if modern else 0)
        if fsdp and pp > 1 or zero not in fw.zero_stages:   # FSDP with PP: the stack's rule
            zero = 3 if pp == 1 else fw.zero_with_pp
        how = {3: "FSDP", 2: "FSDP, parameters kept gathered under pipelining"}.get(
            zero, "distributed optimizer" if zero else "no sharding")
        notes.append(f"zero={zero} ({how}; not stated)")
    elif int(zero) == 3 and pp > 1:
        zero = 2
        notes.append("zero=2: FSDP under pipelining keeps parameters gathered for the whole step "
                     "(torchtitan: reshard_after_forward=False with PP)")
    switches = stated_plan_switches(c, fw, tp_overlap_default(True, tp, sp), notes)
    switches.update(moe_options(c, fw, ep, notes))
    if recompute_kind(pl.get("recompute")) is None:
        switches.update(stated_remat(c, fw, notes))
    if pl.get("recompute_modules") and recompute_kind(pl.get("recompute")) == "selective":
        switches["recompute_modules"] = parse_modules(pl["recompute_modules"])
    if pl.get("offload_modules"):       # Megatron-Core's fine-grained activation offloading
        switches["offload_modules"] = parse_offload_modules(pl["offload_modules"])
    if pl.get("cpu_offloading_num_layers"):    # its layer-level CPU offloading (layer_offload)
        switches["cpu_offloading_num_layers"] = coerce("cpu_offloading_num_layers",
                                                       pl["cpu_offloading_num_layers"])
    if "recompute_modules" in switches:
        rec = "selective"
    rec = switches.pop("recompute", rec)
    switches.update(stated_recompute_layers(pl, rec, notes))
    switches.update(hybrid_mesh(c, fw, tp, cp, dp, int(zero), notes))
    k = _flushes(fw, pp, gbs, dp, local)
    if k > 1:
        switches["flushes"] = k
        notes.append(f"flushes={k}: {fw.name} runs its pipeline schedule once per local batch "
                     f"of {local} (gbs/(local_batch_size*dp) = {gbs}/({local}*{dp}); "
                     "strategies.flushes)")
    return Plan(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, mbs=mbs, gbs=gbs, schedule=sched, vpp=vpp,
                recompute=rec, sp=bool(sp), zero=int(zero), **switches)


def stated_recompute_layers(pl: dict, rec: str, notes: list[str]) -> dict:
    """Megatron's partial full recomputation a plan states (``recompute_layers``: the layers
    recomputed per chunk, ``recompute_method``: block, the default, or uniform; Megatron-Core's
    ``recompute_num_layers`` / ``recompute_method``), with full recomputation only; {}
    where none is stated."""
    n = stated_size(pl.get("recompute_layers"))
    if n is None or rec != "full":
        return {}
    method = str(pl.get("recompute_method") or "block").lower()
    notes.append(f"recompute_layers={n}, recompute_method={method} (stated)")
    return {"recompute_layers": n, "recompute_method": method}


def stated_fsdp(pl: dict) -> bool:
    """Whether a plan states FSDP: its ``fsdp`` field, the GPUs FSDP shards over (an integer,
    0: none, as Megatron-Bridge's tables' column), absent where the source states none. Free
    text (notes, techniques) is not read: "FSDP column 0" there means no FSDP (§5.206)."""
    v = pl.get("fsdp")
    if v is None:
        return False
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise SpecError("plan.fsdp", v, "must be an integer >= 0 (the GPUs FSDP shards over; "
                        "0: none) or absent")
    return v > 0


def _flushes(fw: FrameworkProfile, pp: int, gbs: int, dp: int, local: Any) -> int:
    """Pipeline flushes per step of an entry (``strategies.flushes``): ``gbs / (local·dp)``
    where the stack runs its schedule once per local batch and the entry states the local
    batch; else 1."""
    if not (fw.pipeline_flushes and pp > 1 and local):
        return 1
    per = int(local) * dp
    return gbs // per if gbs % per == 0 else 1
