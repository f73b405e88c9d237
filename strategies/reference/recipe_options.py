"""Plan options a published entry's recipe or router gives, for the reference reader
(``strategies.reference.cases``): MoE options (stated, else the Megatron-Bridge recipe's),
a JAX recipe's recomputation, the Llama scripts' NVFP4 switches and the hottest
expert-parallel rank's load; each said in the entry's notes with its source.
"""
from __future__ import annotations

from dataclasses import replace

from strategies.cost import token_counts
from strategies.errors import SpecError
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from strategies.moe_balance import forced_imbalance
from strategies.plan import Plan
from strategies.plan.choices import BALANCED_ROUTINGS
from strategies.reference.bridge_recipes import entry_layout, preset_for, recipe_for
from strategies.reference.perf_harness import (LLAMA_NVFP4_PG_SOURCE, LLAMA_NVFP4_SOURCE,
                                               llama_switches)
from strategies.reference.entry_specs import entry_dtype
from strategies.reference.jax_recipes import fsdp_group, remat_recipe
from strategies.reference.moe_recipe import MoeRecipe
from strategies.reference.stated_switches import stated_delay_wgrad, stated_size, stated_bool, stated_number
from strategies.reference.text import recompute_kind
from strategies.remat_policies import recompute_of


def moe_options(c: dict, fw: FrameworkProfile, ep: int, notes: list[str]) -> dict:
    """Expert tensor parallelism and the expert-parallel overlap of an entry: what it states
    (``plan.etp``, ``plan.ep_overlap``, ``plan.moe_dispatcher``, ``plan.moe_routing``,
    ``plan.moe_capacity_factor``, ``plan.moe_pad_to_capacity``: every expert padded to its
    capacity, ``plan.cuda_graph``: the
    whole step as one CUDA graph), else what the Megatron-Bridge recipe of its layout
    runs (``reference.bridge_recipes``), stated with the recipe's file; else the stack's
    defaults (etp = tp, no overlap)."""
    pl = c.get("plan") or {}
    out: dict = {}
    etp = stated_size(pl.get("etp"))
    if etp is not None:
        out["etp"] = etp
    if stated_bool(pl, "ep_overlap") is not None:
        out["ep_overlap"] = pl["ep_overlap"]
    if pl.get("moe_dispatcher"):
        out["moe_dispatcher"] = str(pl["moe_dispatcher"]).lower()
    if pl.get("moe_routing"):
        out["moe_routing"] = str(pl["moe_routing"]).lower()
    if stated_bool(pl, "cuda_graph") is not None:
        out["cuda_graph"] = pl["cuda_graph"]
    if stated_number(pl, "moe_capacity_factor") is not None:   # token dropping stated
        out["moe_capacity_factor"] = stated_number(pl, "moe_capacity_factor")
    if stated_bool(pl, "moe_pad_to_capacity") is not None:    # drop-and-pad stated
        out["moe_pad_to_capacity"] = pl["moe_pad_to_capacity"]
    r = recipe_for(c) if ep > 1 else None
    if r is None:
        stated_delay_wgrad(c, out, notes)
        unfit = preset_for(c) if ep > 1 else None
        if unfit is not None:
            notes.append(unfit_preset_note(c, unfit))
        return out
    if "etp" not in out and r.etp is not None:
        out["etp"] = r.etp
        notes.append(f"etp={r.etp} (the recipe's expert_tensor_parallel_size: {r.source})")
    if "ep_overlap" not in out and fw.ep_overlap:
        out["ep_overlap"] = r.ep_overlap
        notes.append(f"ep_overlap={str(r.ep_overlap).lower()} (the recipe's "
                     f"overlap_moe_expert_parallel_comm: {r.source})")
    stated_delay_wgrad(c, out, notes)
    mods, cite = r.recompute_modules, f"{r.source} {r.lines}".strip()
    if recompute_kind(pl.get("recompute")) is None and mods and \
            set(mods) <= set(fw.recompute_modules) and "selective" in fw.recompute:
        out["recompute_modules"] = mods
        notes.append(f"recompute=selective, recompute_modules={'+'.join(mods)} (the recipe's "
                     f"recompute_modules: {cite})")
    elif recompute_kind(pl.get("recompute")) is None and mods == ():
        out["recompute"] = "none"
        notes.append(f"recompute=none (the recipe's recompute_granularity=None, no "
                     f"recompute_modules: {cite})")
    said_tp = "--tp-comm-overlap" in str(pl.get("overlap") or "").lower()
    if r.tp_comm_overlap is not None and not said_tp:
        out["tp_comm_overlap"] = r.tp_comm_overlap
        notes[:] = [n for n in notes if not n.startswith("tp_comm_overlap=")]
        notes.append(f"tp_comm_overlap={str(r.tp_comm_overlap).lower()} (the recipe's "
                     f"CommOverlapConfig: {cite})")
    if "cuda_graph" not in out and fw.cuda_graph:
        out["cuda_graph"] = r.full_iteration_graph
        if r.full_iteration_graph:
            notes.append(f"cuda_graph=true (the recipe's full-iteration CUDA graph: {cite})")
        elif r.cuda_graph_impl in (None, "none") or not r.cuda_graph_scope:
            notes.append(f"cuda_graph=false (the recipe names no CUDA graph: {cite})")
        else:
            notes.append(f"cuda_graph=false: the recipe's cuda_graph_impl={r.cuda_graph_impl}, "
                         f"cuda_graph_scope={'+'.join(r.cuda_graph_scope)} graphs parts of "
                         "each layer, not the whole iteration the plan's switch means; the "
                         "partial graphs' saved launches are not modelled "
                         f"({cite})")
    if "moe_dispatcher" not in out and r.dispatcher in fw.moe_dispatchers:
        out["moe_dispatcher"] = r.dispatcher
        notes.append(f"moe_dispatcher={r.dispatcher} (the recipe's token dispatcher: "
                     f"{r.source})")
    return out


def unfit_preset_note(c: dict, r: MoeRecipe) -> str:
    """What the container's config of an entry's GPU and precision (``bridge_recipes.
    preset_for``) would have run, where its layout is not the row's: said, not applied (the
    table's run changed the config by switches no source names)."""
    said = entry_layout(c)
    graph = (f"{r.cuda_graph_impl} {'+'.join(r.cuda_graph_scope or ())}"
             if r.cuda_graph_impl else "none")
    rec = "+".join(r.recompute_modules) if r.recompute_modules else "none"
    return (f"no {r.container} config fits the row's (tp, pp, vpp, ep, mbs, gbs) = {said} on "
            f"{c['hardware']['n_gpus']} GPUs: the config of its GPU and precision, "
            f"{r.source} ({r.lines}), names {r.layout} on {r.n_gpus} GPUs with "
            f"moe_dispatcher={r.dispatcher}, ep_overlap={str(r.ep_overlap).lower()}, "
            f"recompute_modules={rec}, cuda_graph={graph}; none of it is applied, the row's "
            "MoE switches are the stack's defaults and what it states (docs/calibration.md "
            "§5.179)")


def stated_remat(c: dict, fw: FrameworkProfile, notes: list[str]) -> dict:
    """The recomputation a JAX run's recipe states (``reference.jax_recipes``: the MaxText
    policy's saved tensors, mapped by ``strategies.remat_policies.recompute_of``), replacing
    the stack default's note; {} when no recipe is known or the stack cannot run it."""
    found = remat_recipe(c, entry_dtype(c))
    if found is None:
        return {}
    saved, cite = found
    rec, mods = recompute_of(saved)
    if rec not in fw.recompute or not set(mods) <= set(fw.recompute_modules):
        return {}
    notes[:] = [n for n in notes if not n.startswith("recompute=")]
    notes.append(f"recompute={rec}" + (f", recompute_modules={'+'.join(mods)}" if mods else "")
                 + f" (the recipe saves {'+'.join(saved)}, the rest is recomputed: {cite})")
    return {"recompute": rec, **({"recompute_modules": mods} if mods else {})}


def hybrid_mesh(c: dict, fw: FrameworkProfile, tp: int, cp: int, dp: int, zero: int,
                 notes: list[str]) -> dict:
    """The hybrid sharding a JAX run's recipe states (``reference.jax_recipes.fsdp_group``:
    ZeRO-3 over an FSDP group of GPUs, replicas across): ``dp_shard`` = the group's GPUs over
    ``tp·cp``, stated with its source; {} when the recipe states none, the group is the whole
    dp, or the stack cannot run it (``FrameworkProfile.hybrid_zero``). A shard group the
    entry's plan states (``plan.dp_shard``: BloombergGPT's MiCS, 128 GPUs, 4 replicas) is
    taken as stated; SpecError when the stack does not run hybrid sharding at ``zero``
    (``Plan`` checks that it divides dp)."""
    said = stated_size((c.get("plan") or {}).get("dp_shard"))
    if said is not None and said != dp:
        if zero not in fw.hybrid_zero:
            raise SpecError("plan.dp_shard", said, f"{fw.name} runs hybrid sharding only at "
                            f"zero in {sorted(fw.hybrid_zero)}, not zero={zero}")
        notes.append(f"dp_shard={said} (stated: ZeRO-{zero} over {said * tp * cp} GPUs, "
                     f"{dp // said if dp % said == 0 else dp / said} data-parallel replicas)")
        return {"dp_shard": said}
    found = fsdp_group(c)
    if found is None or zero not in fw.hybrid_zero:
        return {}
    gpus, cite = found
    shard = gpus // (tp * cp)
    if shard >= dp or dp % shard or gpus % (tp * cp):
        return {}
    notes.append(f"dp_shard={shard}: ZeRO-3 over FSDP groups of {gpus} GPUs, {dp // shard} "
                 f"data-parallel replicas ({cite})")
    return {"dp_shard": shard}


def llama_recipe_switches(c: dict, plan: Plan, notes: list[str]) -> Plan:
    """``plan`` with the overlap switches Megatron-Bridge's Llama scripts set for entry ``c``
    (``perf_harness.llama_switches``: no TP overlap, and for 405B on GB200 no overlapped
    parameter gather, under NVFP4), each replacing the stack default's note; a switch the
    entry's plan states itself is kept."""
    pl = c.get("plan") or {}
    said = {k: v for k, v in llama_switches(c).items() if not isinstance(pl.get(k), bool)}
    if not said:
        return plan
    notes[:] = [n for n in notes if not n.startswith(tuple(f"{k}=" for k in said))]
    for k, v in said.items():
        cite = LLAMA_NVFP4_SOURCE if k == "tp_comm_overlap" else LLAMA_NVFP4_PG_SOURCE
        notes.append(f"{k}={str(v).lower()} (the Llama scripts' NVFP4 setting: {cite})")
    return replace(plan, **said)


#: the row's ``plan.moe_balance`` values: ``forced``, Megatron-Core's
#: ``moe_router_force_load_balancing`` (random router logits, "for benchmark"), which every
#: Megatron-Bridge performance config sets (v0.2.0 and v0.4.2
#: ``scripts/performance/configs/{deepseek,qwen3|qwen,gpt_oss}/*_llm_pretrain.py``;
#: ``utils/overrides.py``: on unless ``--use_tokendrop``); ``trained``, a router that
#: learns (the plan's default rule, ``strategies.moe_balance.default_imbalance``)
BALANCE_KINDS = ("forced", "trained")


def routing_balance(c: dict, model: ModelSpec, plan: Plan, notes: list[str]) -> Plan:
    """The hottest expert-parallel rank's load of an MoE row with ``ep > 1``: what the row
    states (``moe_imbalance``), else by its router (``plan.moe_balance``,
    ``BALANCE_KINDS``): forced balancing's sampling imbalance
    (``moe_balance.forced_imbalance``), else the plan's default rule; each noted."""
    pl = c.get("plan") or {}
    kind = pl.get("moe_balance")
    if kind is not None and kind not in BALANCE_KINDS:
        raise SpecError("plan.moe_balance", kind, f"must be one of {', '.join(BALANCE_KINDS)}")
    if not model.is_moe or plan.ep <= 1:
        return plan
    if stated_number(pl, "moe_imbalance") is not None:
        notes.append(f"moe_imbalance={stated_number(pl, 'moe_imbalance')} (stated by the entry)")
        return replace(plan, moe_imbalance=stated_number(pl, "moe_imbalance"))
    if kind == "forced":
        imb = float(forced_imbalance(model, plan.mbs, plan.tp, plan.cp, plan.ep,
                                     plan.expert_tp))
        notes.append(f"moe_imbalance={imb:.4f}: the benchmark force-balances its router "
                     "(moe_router_force_load_balancing: random logits), so the hottest rank "
                     f"carries the sampling excess of uniform routing over ep={plan.ep} "
                     "(strategies.moe_balance.forced_imbalance; docs/calibration.md §5.73)")
        return replace(plan, moe_imbalance=imb)
    if plan.moe_routing in BALANCED_ROUTINGS:
        return plan
    rule = float(token_counts.moe_load(plan.ep, plan.imbalance, float("inf"), model, plan.mbs,
                                 plan.tp, plan.cp, plan.expert_tp))
    if plan.moe_pad_to_capacity:
        pad = float(token_counts.moe_load(plan.ep, plan.imbalance, plan.capacity_factor, model,
                                          plan.mbs, plan.tp, plan.cp, plan.expert_tp, True))
        notes.append(f"expert load {pad:g}: drop-and-pad at moe_capacity_factor "
                     f"{plan.capacity_factor:g} runs every expert at its capacity whatever "
                     f"the routing (default imbalance {rule:.4f} not read; "
                     "token_counts.padded_load), and the dispatcher neither gathers the "
                     "token counts nor synchronises (moe_bytes.count_exchange)")
    elif plan.capacity_factor < rule:
        notes.append(f"expert load {plan.capacity_factor:g}: token dropping at "
                     f"moe_capacity_factor {plan.capacity_factor:g} caps the default "
                     f"imbalance {rule:.4f} (token_counts.moe_load)")
    else:
        notes.append(f"moe_imbalance by the default rule ({rule:.4f}: a trained router "
                     "balanced without an auxiliary loss, sampling plus Wang et al. 2024's "
                     "MaxVio_global 0.04 per expert; strategies.moe_balance.default_imbalance)")
    return plan
