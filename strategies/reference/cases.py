"""Published training runs (``strategies/reference/data/published.json``, a copy of the shared reference)
turned into Jobs, with every value the source does not give filled by a *stated* assumption.

Measured step time comes from the source's step time, or tokens/s, or its TFLOP/s with the
source's own FLOP definition (docs/formulas.md §9); each case says which.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from strategies.errors import SpecError
from strategies.framework import (MEGATRON_LM_2021, FrameworkProfile, compiled, get_profile,
                                  with_fp8_attention, with_fused_grouped_mlp)
from strategies.job import Job, make_job
from strategies.model import ModelSpec
from strategies.cost import token_counts
from strategies.moe_balance import forced_imbalance
from strategies.plan import BALANCED_ROUTINGS, Plan, parse_modules
from strategies.schedules import DEFAULT_SCHEDULE, get_schedule
from strategies.schedules.base import all_ok, chunked_default
from strategies.launch_blocking import SYNC_LAUNCH_GAP_S, with_launch_blocking
from strategies.reference.text import (attention_kernel, bf16_optimizer, cp_comm_type,
                                        framework_name, gpu_preset, intra_node_gbps,
                                        launch_blocking,
                                        model_family, parse_inter_node, recompute_kind,
                                        schedule_kind, vocab_from_notes)
from strategies.reference.measured import global_batch, measured_step, seq_len, utilisation_step
from strategies.cost.system import SystemConfig
from strategies.reference.jax_recipes import remat_recipe
from strategies.remat_policies import recompute_of
from strategies.reference.bridge_recipes import (FP8_CS_SOURCE, GRAD_REDUCE_SOURCE,
                                                 LLAMA_NVFP4_PG_SOURCE, LLAMA_NVFP4_SOURCE,
                                                 NEMO_PERF_SOURCE, quantised_param_gather,
                                                 grad_reduce_in_fp32, harness_fp8_is_current,
                                                 llama_switches, nemo_perf_row, recipe_for,
                                                 harness_delay_wgrad)
from topologies.cluster import (RACK_PRESETS, Cluster, cluster_from_mapping, cluster_preset,
                                preset_unit_gpus)
from topologies.gpus import GPU

DATA = os.path.join(os.path.dirname(__file__), "data", "published.json")


@dataclass(frozen=True)
class Case:
    """One published run ready to estimate, or the reason it cannot be."""

    id: str
    tier: int
    measured_step_s: float | None
    how_measured: str
    job: Job | None
    assumptions: tuple[str, ...] = ()
    skipped: str = ""
    raw: dict = field(default_factory=dict, repr=False, compare=False)


def load_reference(path: str | None = None) -> list[dict[str, Any]]:
    from topologies.yaml_io import load_mapping_file
    data = load_mapping_file(path or DATA, "reference")
    if not isinstance(data, list):
        raise SpecError("reference", path, "must be a JSON list of cases")
    return data


def _model(mo: dict, c: dict, notes: list[str]) -> ModelSpec:
    """The ModelSpec of an entry: its ``hf_config`` (a HuggingFace config.json) where it has
    one, else its dimensions, the family its name implies and, for a
    mixture of experts named ``NxMB`` (Mixtral's convention) with no expert count, N experts
    routed top-2 (said in ``notes``)."""
    name = mo.get("name") or c["id"]
    if isinstance(mo.get("hf_config"), dict):     # the model's own config.json: every field read
        from strategies.hf_config import model_from_hf
        model = model_from_hf(mo["hf_config"], name=name)
        if mo.get("seq_len"):
            model = replace(model, seq_length=int(mo["seq_len"]))
        notes.append(f"model from the entry's config.json ({mo['hf_config'].get('model_type')})")
        return model
    h, a = mo["hidden"], mo.get("heads")
    kv = mo.get("kv_heads")
    fam = model_family(name)
    if a is None and "nemotron" in name.lower():
        a, kv = (96 if h == 18432 else 48), 8
    ffn = mo.get("ffn_hidden") or 4 * h
    experts = int(mo.get("num_experts") or mo.get("experts") or mo.get("moe_experts") or 1)
    topk = int(mo.get("top_k") or mo.get("experts_per_token") or mo.get("moe_top_k")
               or mo.get("router_topk") or 1)
    named = re.search(r"\b(\d+)\s*x\s*\d+(?:\.\d+)?\s*b\b", str(name).lower())
    if experts == 1 and named and int(named.group(1)) > 1:
        experts, topk = int(named.group(1)), 2
        notes.append(f"{experts} experts, top-2 routing (from the name {name!r}; not stated)")
    moe_ffn = mo.get("moe_ffn_hidden") or mo.get("expert_ffn_hidden")
    return ModelSpec(name=name, num_layers=mo["layers"], hidden_size=h, num_attention_heads=a,
                     ffn_hidden_size=ffn, vocab_size=mo["vocab"], seq_length=mo["seq_len"],
                     num_query_groups=kv, num_experts=experts, moe_ffn_hidden_size=moe_ffn,
                     moe_router_topk=min(topk, experts), **fam)


def _cluster(c: dict) -> tuple[Cluster, list[str]]:
    """The cluster of a published run: the GPU its text names, in the node preset of that GPU,
    with the inter-node links the interconnect text states (else the preset's, said so)."""
    hw = c["hardware"]
    gpu_text, n, inter = hw["gpu"], hw["n_gpus"], str(hw.get("interconnect") or "")
    per = min(int(hw.get("gpus_per_node") or 8), n)     # a run on part of one node
    nodes = max(1, n // per)
    found = gpu_preset(gpu_text)
    if found is None:
        raise SpecError("hardware.gpu", gpu_text, "is not a GPU of the catalog (paraplan presets)")
    gpu, preset = found
    notes: list[str] = []
    tray = preset_unit_gpus(preset) if preset else 8
    if preset in RACK_PRESETS and n % tray == 0:
        cl = cluster_preset(preset, n // tray)
        notes.append(f"{preset}: {cl.describe_domain()} (trays spread evenly over racks; "
                     f"the source's gpus_per_node={hw.get('gpus_per_node')} not used)")
        return cl, notes
    links = parse_inter_node(inter, per)
    if preset is not None and per == 8:
        base = cluster_preset(preset, 1).to_dict()
        intra = base["intra_node_GBps"]
    else:
        base = {}
        intra = intra_node_gbps(gpu, gpu_text) or (
            cluster_preset(preset, 1).to_dict()["intra_node_GBps"] if preset else 300.0)
    if links is None:
        nics, gbps = base.get("nics_per_node", per), base.get("inter_node_gbps", 200.0)
        notes.append(f"{nics} x {gbps:g} Gb/s inter-node links (interconnect not stated)")
    else:
        nics, gbps = links
        notes.append(f"{nics} x {gbps:g} Gb/s inter-node links (read from: {inter[:60]})")
    spec = {"name": preset or gpu.lower(), "gpu": gpu, "nodes": nodes, "gpus_per_node": per,
            "intra_node_GBps": intra, "nics_per_node": int(nics), "inter_node_gbps": float(gbps)}
    if base.get("intra_node_topology"):
        spec["intra_node_topology"] = base["intra_node_topology"]
    return cluster_from_mapping(spec), notes


def framework_of(c: dict) -> FrameworkProfile:
    """The software that produced a published run, from its source (``reference.text.
    framework_name``): Megatron-LM 2021 (the SC21 paper) ``megatron-lm-2021``; BLOOM and
    GPT-NeoX ``megatron-deepspeed``; NVIDIA's NeMo benchmarks and Megatron-Bridge ``nemo``;
    Megatron-Core's README ``megatron-core``; MaxText and PAXML ``jax-xla``; torchtitan ``torchtitan``; MosaicML
    llm-foundry ``pytorch-eager``. Otherwise by year: before 2023 ``megatron-lm-2021``, else
    ``megatron-core``. A 2021-stack run with a ZeRO stage that Megatron-LM did not have (the
    SC21 paper's ZeRO-3 baseline) ran under DeepSpeed: ``megatron-deepspeed``. An entry that
    names its profile (``framework``: a ``paraplan presets`` name, its reason in the entry's
    notes, e.g. a paper that pins the Megatron-LM commit it ran) runs under that one."""
    if c.get("framework") is not None:
        return get_profile(str(c["framework"]))
    src = c.get("source") or {}
    text = " ".join(str(src.get(k) or "") for k in ("ref", "table", "also")).lower()
    year = re.search(r"(20\d\d)", text)
    fw = get_profile(framework_name(text, int(year.group(1)) if year else None))
    zero = (c.get("plan") or {}).get("zero_stage")
    if fw is MEGATRON_LM_2021 and isinstance(zero, int) and zero not in fw.zero_stages:
        return get_profile("megatron-deepspeed")
    return fw


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


def _dtype(c: dict) -> str:
    """The ``--dtype`` a run's precision text names: ``mxfp8``, ``nvfp4``, fp8 with current
    scaling (``fp8-current``), fp8 with block-wise scaling (``fp8-blockwise``: DeepSeek-V3's
    1x128 / 128x128 tiles), other fp8 (delayed scaling), fp16, else bf16."""
    prec = str(c.get("precision") or "").lower()
    if "nvfp4" in prec:
        return "nvfp4"
    if "mxfp8" in prec:
        return "mxfp8"
    if "fp8" in c["id"].lower() or "fp8" in prec or "float8" in prec:
        if "current" in prec:
            return "fp8-current"
        blockwise = ("blockwise", "block-wise", "fine-grained", "deepseek")
        return "fp8-blockwise" if any(w in prec for w in blockwise) else "fp8"
    return "fp16" if "fp16" in prec else "bf16"


def _size(v) -> int | None:
    """A parallel size as a positive integer (None when absent); anything else is refused
    before it is multiplied."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SpecError("plan", v, "parallel sizes must be positive integers")
    return v


def _parallel_sizes(pl: dict, n: int) -> tuple[int, int, int, int, int, list[str]] | None:
    """(tp, pp, cp, dp, ep) of a plan; a plan that gives only its data parallelism over every
    GPU (FSDP, ZeRO) has no model parallelism. Expert parallelism splits the data-parallel
    ranks (Megatron-Core). None: not enough to tell."""
    tp, pp, cp, dp, ep = (_size(pl.get(k)) for k in ("tp", "pp", "cp", "dp", "ep"))
    cp, ep = cp or 1, ep or 1
    notes: list[str] = []
    if tp is None and pp is None and dp is not None and dp * cp == n:
        tp, pp = 1, 1
        notes.append("tp=1 pp=1 (data parallel over every GPU)")
    if tp is None or pp is None:
        return None
    return tp, pp, cp, dp or n // (tp * pp * cp), ep, notes


def _balanced_layers(model: ModelSpec, pp: int, notes: list[str]) -> ModelSpec:
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


def _slot_plan(c: dict, model: ModelSpec, sizes: tuple, gbs: int, fw: FrameworkProfile,
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
    plain = _plan(c, sizes, gbs, model.num_layers, fw, [])
    if model.num_layers % (pp * plain.vpp) == 0:
        return None                               # the layers divide: the plain plan
    trial: list[str] = []
    plan = _plan(c, sizes, gbs, model.num_layers + 2, fw, trial)
    chunks = pp * plan.vpp
    if plan.vpp != plain.vpp or (model.num_layers + 2) % chunks:
        return None
    notes += trial
    notes.append(f"layers {model.num_layers} on {chunks} chunks: the embedding and the loss "
                 "counted as layer slots (" + ("the source's partition" if stated else
                 "Megatron's --account-for-embedding/loss-in-pipeline-split, as NeMo runs it")
                 + ")")
    return replace(plan, account_embedding=True, account_loss=True)


def _stated_stages_plan(c: dict, model: ModelSpec, sizes: tuple, gbs: int,
                        fw: FrameworkProfile, notes: list[str]) -> Plan | None:
    """The plan of a pipelined row that states its first and/or last stage's layer counts
    (``plan.first_stage_layers``/``last_stage_layers``: Megatron's
    ``--decoder-first/last-pipeline-num-layers``, NeMo's
    ``num_layers_in_first/last_pipeline_stage``), run on the model's own layers with the rest
    split evenly over the middle stages (``strategies.layout``); None where it states neither."""
    pl = c.get("plan") or {}
    stated = {f: _size(pl.get(f)) for f in ("first_stage_layers", "last_stage_layers")
              if pl.get(f) is not None}
    if not stated or sizes[1] == 1:
        return None
    plan = replace(_plan(c, sizes, gbs, model.num_layers, fw, notes), **stated)
    notes.append(", ".join(f"{f}={v}" for f, v in stated.items())
                 + " (stated: the recipe's uneven pipeline split)")
    return plan


def _recipe_layout_plan(c: dict, model: ModelSpec, sizes: tuple, gbs: int,
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
        plan = replace(_plan(c, sizes, gbs, model.num_layers, fw, trial), layout=str(own))
        notes += trial
        notes.append(f"pipeline layout {own} (stated: plan.pp_layout; the row's notes name "
                     "its source)")
        return plan
    r = recipe_for(c) if sizes[1] > 1 and sizes[4] > 1 else None
    if r is None or not r.pp_layout or pl.get("layout") or pl.get("pp_layout"):
        return None
    trial = []
    plan = replace(_plan(c, sizes, gbs, model.num_layers, fw, trial), layout=r.pp_layout)
    notes += trial
    notes.append(f"pipeline layout {r.pp_layout} (the recipe's pipeline_model_parallel_layout: "
                 f"{r.source}; bridge_recipes._DS_* name the lines)")
    return plan


def _filled_model(c: dict, notes: list[str], siblings: Sequence[dict] = ()) -> dict:
    """The entry's model mapping with the sequence length and vocabulary its source leaves
    out filled where they can be (each assumption appended to ``notes``). A vocabulary the
    entry's own notes do not state is read from a sibling entry (``siblings``) of the same
    source document (``source.ref``) and the same model name that states it, in its model
    mapping or its notes."""
    mo = dict(c.get("model") or {})
    seq, sn = seq_len(c)
    notes += sn
    if not mo.get("seq_len") and seq:
        mo["seq_len"] = seq
    if not mo.get("vocab"):
        vocab = vocab_from_notes(c.get("notes"))
        if vocab:
            mo["vocab"] = vocab
            notes.append(f"vocab={vocab} (read from the source's notes)")
    if not mo.get("vocab"):
        found = _sibling_vocab(c, siblings)
        if found:
            mo["vocab"], other = found
            notes.append(f"vocab={mo['vocab']} (stated for the same model by {other}, "
                         "the same source document)")
    return mo


def _sibling_vocab(c: dict, siblings: Sequence[dict]) -> tuple[int, str] | None:
    """``(vocab, id)`` of the first other entry of ``c``'s source document (``source.ref``)
    and model name whose model mapping or notes state a vocabulary, or None."""
    ref = (c.get("source") or {}).get("ref")
    name = (c.get("model") or {}).get("name")
    if not ref or not name:
        return None
    for o in siblings:
        if (not isinstance(o, dict) or o is c or o.get("id") == c.get("id")
                or (o.get("source") or {}).get("ref") != ref
                or (o.get("model") or {}).get("name") != name):
            continue
        vocab = (o.get("model") or {}).get("vocab") or vocab_from_notes(o.get("notes"))
        if vocab:
            return int(vocab), str(o.get("id"))
    return None


def _plan(c: dict, sizes: tuple[int, int, int, int, int], gbs: int, layers: int,
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
        fsdp = "fsdp" in f"{pl.get('techniques') or ''} {c.get('notes') or ''}".lower()
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
    switches = _switches(c, fw, tp > 1 and bool(sp), notes)
    switches.update(_moe_options(c, fw, ep, notes))
    if recompute_kind(pl.get("recompute")) is None:
        switches.update(_remat_recipe(c, fw, notes))
    if pl.get("recompute_modules") and recompute_kind(pl.get("recompute")) == "selective":
        switches["recompute_modules"] = parse_modules(pl["recompute_modules"])
    if "recompute_modules" in switches:
        rec = "selective"
    rec = switches.pop("recompute", rec)
    k = _flushes(fw, pp, gbs, dp, local)
    if k > 1:
        switches["flushes"] = k
        notes.append(f"flushes={k}: {fw.name} runs its pipeline schedule once per local batch "
                     f"of {local} (gbs/(local_batch_size*dp) = {gbs}/({local}*{dp}); "
                     "strategies.flushes)")
    return Plan(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, mbs=mbs, gbs=gbs, schedule=sched, vpp=vpp,
                recompute=rec, sp=bool(sp), zero=int(zero), **switches)


def _flushes(fw: FrameworkProfile, pp: int, gbs: int, dp: int, local: Any) -> int:
    """Pipeline flushes per step of an entry (``strategies.flushes``): ``gbs / (local·dp)``
    where the stack runs its schedule once per local batch and the entry states the local
    batch; else 1."""
    if not (fw.pipeline_flushes and pp > 1 and local):
        return 1
    per = int(local) * dp
    return gbs // per if gbs % per == 0 else 1


def _stated_bool(pl: dict, *keys: str) -> bool | None:
    """The boolean an entry's plan ``pl`` states under the first of ``keys`` it sets (None:
    not stated); SpecError naming ``plan.<keys[0]>`` for a value that is not a boolean."""
    said = next((pl[k] for k in keys if pl.get(k) is not None), None)
    if said is not None and not isinstance(said, bool):
        raise SpecError(f"plan.{keys[0]}", said, "must be true or false")
    return said


def _delay_wgrad(c: dict, out: dict, notes: list[str]) -> None:
    """``out["delay_wgrad"]`` of entry ``c`` (Megatron-Core's ``delay_wgrad_compute``), said
    with its source: what the entry's plan states (``delay_wgrad`` or Megatron's name); else,
    with the overlap on, what the Megatron-Bridge harness of its table ran
    (``bridge_recipes.harness_delay_wgrad``: on with the overlap); else, with the overlap on,
    the stack's default (off: Megatron-Core ``model_parallel_config.py``), an assumption.
    Without the overlap nothing is said unless stated (a stated ``true`` is refused by the
    plan's rule: Megatron-Core asserts the overlap for it)."""
    pl = c.get("plan") or {}
    said = _stated_bool(pl, "delay_wgrad", "delay_wgrad_compute")
    if said is not None:
        out["delay_wgrad"] = said
        notes.append(f"delay_wgrad_compute={str(said).lower()} (stated)")
        return
    if not out.get("ep_overlap"):
        return
    cite = harness_delay_wgrad(c)
    out["delay_wgrad"] = cite is not None
    notes.append(f"delay_wgrad_compute=true (the harness turns it on with the overlap: {cite}; "
                 "a combined pair's last attention weight gradient runs after its backward "
                 "message is posted)" if cite else
                 "delay_wgrad_compute=false (not stated; Megatron-Core's default, "
                 "model_parallel_config.py delay_wgrad_compute: bool = False)")


def _moe_options(c: dict, fw: FrameworkProfile, ep: int, notes: list[str]) -> dict:
    """Expert tensor parallelism and the expert-parallel overlap of an entry: what it states
    (``plan.etp``, ``plan.ep_overlap``, ``plan.moe_dispatcher``, ``plan.moe_routing``,
    ``plan.moe_capacity_factor``, ``plan.cuda_graph``: the
    whole step as one CUDA graph), else what the Megatron-Bridge recipe of its layout
    runs (``reference.bridge_recipes``), stated with the recipe's file; else the stack's
    defaults (etp = tp, no overlap)."""
    pl = c.get("plan") or {}
    out: dict = {}
    etp = _size(pl.get("etp"))
    if etp is not None:
        out["etp"] = etp
    if pl.get("ep_overlap") is not None:
        out["ep_overlap"] = bool(pl["ep_overlap"])
    if pl.get("moe_dispatcher"):
        out["moe_dispatcher"] = str(pl["moe_dispatcher"]).lower()
    if pl.get("moe_routing"):
        out["moe_routing"] = str(pl["moe_routing"]).lower()
    if pl.get("cuda_graph") is not None:
        out["cuda_graph"] = bool(pl["cuda_graph"])
    if pl.get("moe_capacity_factor") is not None:   # token dropping the recipe states
        out["moe_capacity_factor"] = float(pl["moe_capacity_factor"])
    r = recipe_for(c) if ep > 1 else None
    if r is None:
        _delay_wgrad(c, out, notes)
        return out
    if "etp" not in out and r.etp is not None:
        out["etp"] = r.etp
        notes.append(f"etp={r.etp} (the recipe's expert_tensor_parallel_size: {r.source})")
    if "ep_overlap" not in out and fw.ep_overlap:
        out["ep_overlap"] = r.ep_overlap
        notes.append(f"ep_overlap={str(r.ep_overlap).lower()} (the recipe's "
                     f"overlap_moe_expert_parallel_comm: {r.source})")
    _delay_wgrad(c, out, notes)
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


def _remat_recipe(c: dict, fw: FrameworkProfile, notes: list[str]) -> dict:
    """The recomputation a JAX run's recipe states (``reference.jax_recipes``: the MaxText
    policy's saved tensors, mapped by ``strategies.remat_policies.recompute_of``), replacing
    the stack default's note; {} when no recipe is known or the stack cannot run it."""
    found = remat_recipe(c, _dtype(c))
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


#: a switch a source states: the Megatron flag in the entry's ``overlap`` field, or for
#: FlashAttention the word in its techniques or notes
_STATED = {"overlap_grad_reduce": "--overlap-grad-reduce",
           "overlap_param_gather": "--overlap-param-gather",
           "tp_comm_overlap": "--tp-comm-overlap", "flash_attn": "flash"}


#: async TP named in a plan's techniques (lower case): "tp(async)", "asynctp", "async tp",
#: "async-tp"
_ASYNC_TP = re.compile(r"tp\s*\(\s*async\s*\)|async[\s_-]*tp")


def _switches(c: dict, fw: FrameworkProfile, tp_sp: bool, notes: list[str]) -> dict[str, bool]:
    """FlashAttention and the overlap switches of an entry: what the source states (its
    ``overlap`` flags, FlashAttention named in its techniques or notes), else the stack's
    default, stated as an assumption with the default's source
    (``FrameworkProfile.default_sources``). A switch the entry's plan states as a boolean
    field of its own name (``plan.tp_comm_overlap: false``: a source that lists the overlap
    as something the run did not have) is taken as stated, on only where the stack can run it.
    TP overlap needs TP with sequence parallelism (Transformer Engine's userbuffers)."""
    pl = c.get("plan") or {}
    flags = str(pl.get("overlap") or "").lower()
    words = f"{pl.get('techniques') or ''} {c.get('notes') or ''}".lower()
    out = {}
    for switch, default in fw.plan_defaults().items():
        if isinstance(pl.get(switch), bool):
            value = pl[switch] and getattr(fw, switch, True) and (
                tp_sp or switch != "tp_comm_overlap")
            notes.append(f"{switch}={str(value).lower()} "
                         f"(stated: plan.{switch}={str(pl[switch]).lower()})")
            out[switch] = value
            continue
        said = _STATED[switch] in (words if switch == "flash_attn" else flags)
        if said and getattr(fw, switch, True) and (tp_sp or switch != "tp_comm_overlap"):
            out[switch] = True
            continue
        # a stack whose TP overlap is PyTorch's async TP: its techniques or precision naming
        # it ("TP(async)", "AsyncTP", "async TP") state the switch (docs/calibration.md §5.84)
        async_tp = stated_async_tp(c) if switch == "tp_comm_overlap" \
            and fw.tp_overlap == "async-tp" else None
        if async_tp and getattr(fw, switch, True) and tp_sp:
            notes.append(f"tp_comm_overlap=true (stated: {async_tp}; {fw.name}'s TP overlap "
                         f"is async TP, docs/calibration.md §5.50, §5.84)")
            out[switch] = True
            continue
        value = default and (tp_sp or switch != "tp_comm_overlap")
        why = fw.default_source(switch) or "not stated"
        if default and not value:
            why = "the stack's default needs tp > 1 with sequence parallelism"
        notes.append(f"{switch}={str(value).lower()} ({fw.name} default: {why})")
        out[switch] = value
    return out


def stated_async_tp(c: dict) -> str | None:
    """Where entry ``c`` states that its run used async TP, the statement (``_ASYNC_TP`` in
    its plan's ``techniques`` or its precision); None where it does not."""
    pl = c.get("plan") or {}
    for where, text in (("plan.techniques", pl.get("techniques")),
                        ("precision", c.get("precision"))):
        if isinstance(text, str) and _ASYNC_TP.search(text.lower()):
            return f"{where} {text!r}"
    return None


def stated_compile(c: dict) -> str | None:
    """Where entry ``c`` states that its run used torch.compile, the statement (its
    ``plan.compile`` true, or "compile" in its plan's ``techniques``, its precision or its
    id); None where it does not."""
    pl = c.get("plan") or {}
    if pl.get("compile") is True:
        return "plan.compile true"
    for where, text in (("plan.techniques", pl.get("techniques")),
                        ("precision", c.get("precision")), ("id", c.get("id"))):
        if isinstance(text, str) and "compile" in text.lower():
            return f"{where} {text!r}"
    return None


#: torchtitan's benchmark files carry their month in the name (``llama3_h100_202412_…``,
#: ``asyncTP_llama3_h100_2025-06_…``)
_BENCH_MONTH = re.compile(r"benchmarks/\S*?(20\d\d)-?(0[1-9]|1[0-2])[_.]")
#: the month torchtitan began compiling the loss with the model (bbb1b616e, 2025-04-02;
#: before it, e8977b007 2024-12-18 to d1f62be73: "TODO: compiling loss function causes CUDA
#: errors, turning off for now")
TORCHTITAN_LOSS_COMPILED_FROM = (2025, 4)


def _with_loss_of_its_date(c: dict, fw: FrameworkProfile, notes: list[str]) -> FrameworkProfile:
    """A compiled torchtitan run dated (its benchmark file's month) before torchtitan
    compiled the loss keeps the eager loss's memory (``TORCHTITAN.loss``, 12 bytes per logit
    element) instead of the compiled one's (4, ``framework.TORCHTITAN_COMPILED_LOSS``), said
    in ``notes``; undated runs and other stacks are left as they are (docs/calibration.md
    §5.74)."""
    from strategies.framework import TORCHTITAN
    src = c.get("source") or {}
    found = _BENCH_MONTH.search(f"{src.get('ref', '')} {src.get('table', '')}")
    if found is None or fw.loss is TORCHTITAN.loss or not fw.name.startswith(TORCHTITAN.name):
        return fw
    month = (int(found.group(1)), int(found.group(2)))
    if month >= TORCHTITAN_LOSS_COMPILED_FROM:
        notes.append(f"loss compiled with the model (benchmark of {month[0]}-{month[1]:02d}: "
                     f"{fw.loss.peak_bytes:g} bytes per logit element at its peak)")
        return fw
    notes.append(f"loss eager under torch.compile (benchmark of {month[0]}-{month[1]:02d}, "
                 "before torchtitan bbb1b616e 2025-04 compiled it: "
                 f"{TORCHTITAN.loss.peak_bytes:g} bytes per logit element at its peak)")
    return replace(fw, loss=TORCHTITAN.loss)


#: the Megatron-Core release each NeMo container ships, by the container's year and month:
#: 25.04 (25.04.01, 25.04.02) core_r0.12 (the dgxc-benchmarking v25.05.05 DeepSeek-V3 rows,
#: docs/calibration.md §5.44, §5.81: core_v0.12.0 tagged 2025-05-06), 25.11 core 0.15 and
#: 26.04 core 0.17 (§5.7: the containers' Megatron-Bridge ``pyproject.toml``)
NEMO_CONTAINER_MCORE: dict[str, tuple[int, int]] = {"25.04": (0, 12), "25.11": (0, 15),
                                                    "26.04": (0, 17)}
#: a NeMo container as a row's source or notes name it: ``nvcr.io/nvidia/nemo:25.04.01``,
#: ``NeMo 25.04.01 container``, ``(26.04.01 NeMo container)``
_NEMO_CONTAINER = re.compile(r"nemo:(\d\d\.\d\d)|nemo (\d\d\.\d\d)(?:\.\d\d)? container"
                             r"|\((\d\d\.\d\d)(?:\.\d\d)? nemo container\)", re.IGNORECASE)


def mla_down_layout(mcore: tuple[int, int]) -> str:
    """``FrameworkProfile.mla_down_proj`` of a Megatron-Core release: ``"column"`` from
    core_v0.12.0 to v0.13.1 (NVIDIA/Megatron-LM 1c425a8313, 2025-02-24, is in core_v0.12.0
    and v0.13.1, 720c8b40d8 of 2025-07-29 first in core_v0.14.0), else ``"replicated"``."""
    return "column" if (0, 12) <= tuple(mcore) < (0, 14) else "replicated"


def _with_mla_layout(c: dict, fw: FrameworkProfile, model: ModelSpec,
                     notes: list[str]) -> FrameworkProfile:
    """A Megatron-Core stack's MLA down projections as the row's NeMo container ran them
    (``NEMO_CONTAINER_MCORE``, ``mla_down_layout``), said in ``notes``; rows without MLA,
    on other stacks or naming no known container keep the profile's (docs/calibration.md
    §5.85)."""
    if not model.is_mla or fw.name not in ("nemo", "megatron-core"):
        return fw
    src = c.get("source") or {}
    text = " ".join(str(src.get(k) or "") for k in ("ref", "table", "also"))
    found = _NEMO_CONTAINER.search(f"{text} {c.get('notes') or ''}")
    tag = found and next(g for g in found.groups() if g)
    if tag not in NEMO_CONTAINER_MCORE:
        return fw
    v = NEMO_CONTAINER_MCORE[tag]
    layout = mla_down_layout(v)
    notes.append(f"MLA down projections {layout} (NeMo {tag} container: Megatron-Core "
                 f"{v[0]}.{v[1]}; column-parallel in core_v0.12.0-v0.13.1, 1c425a8313 to "
                 "720c8b40d8)")
    return replace(fw, mla_down_proj=layout)


def _with_stated_kernel(fw: FrameworkProfile, pl: dict, notes: list[str]) -> FrameworkProfile:
    """The stack ``fw`` running the fused attention kernel the entry's ``plan.attn_impl``
    names (``reference.text.attention_kernel``), stated as an assumption. A kernel of the
    FlashAttention-1 class keeps the stack's kernel, said so: the catalog has no rate for it
    that the runs bear out (docs/calibration.md §3.8)."""
    said = pl.get("attn_impl")
    kernel = attention_kernel(said)
    if kernel is None:
        if said:
            notes.append(f"attention kernel {fw.attention_kernel} ({fw.name} default; "
                         f"attn_impl {said!r} names no kernel)")
        return fw
    if kernel == "fa1":
        notes.append(f"attention kernel {fw.attention_kernel} ({fw.name} default): the stated "
                     f"{said.split(' (')[0]!r} is a FlashAttention-1-class kernel, not modelled "
                     "(docs/calibration.md §3.8)")
        return fw
    notes.append(f"attention kernel {kernel} (stated: {said})")
    return replace(fw, attention_kernel=kernel)


def _with_stated_cp(fw: FrameworkProfile, pl: dict, notes: list[str]) -> FrameworkProfile:
    """The stack ``fw`` running the context-parallel exchange the entry's
    ``plan.cp_comm_type`` names (``reference.text.cp_comm_type``: the ring or the exposed K/V
    all-gather), said so; an exchange the model has no form for keeps the stack's, said so, as
    does PyTorch's ``context_parallel`` (``cp_impl`` "torch": its own all-gather rotater,
    ``strategies.cost.ring_attention``)."""
    said = pl.get("cp_comm_type")
    if not said:
        return fw
    impl = cp_comm_type(said)
    if impl is None or not fw.context_parallel or fw.cp_impl == "torch":
        notes.append(f"cp exchange {fw.cp_impl} ({fw.name} default; cp_comm_type {said!r} "
                     "not modelled)")
        return fw
    notes.append(f"cp exchange {impl} (stated: {said})")
    return replace(fw, cp_impl=impl)


def _with_stated_env(fw: FrameworkProfile, pl: dict, notes: list[str]) -> FrameworkProfile:
    """The stack ``fw`` with the optimizer the entry's ``plan.optimizer`` states (DeepSpeed's
    BF16_Optimizer or not: ``FrameworkProfile.bf16_optimizer``) and under the launch
    environment its ``plan.env`` states: with ``CUDA_LAUNCH_BLOCKING=1`` every kernel boundary
    costs ``SYNC_LAUNCH_GAP_S`` (``strategies.launch_blocking``); each stated as an assumption
    with the entry's reason."""
    ran = bf16_optimizer(pl.get("optimizer"))
    if ran is not None and ran != fw.bf16_optimizer:
        fw = replace(fw, bf16_optimizer=ran)
        notes.append(f"bf16_optimizer={str(ran).lower()} (stated: {pl['optimizer']})")
    said = pl.get("env")
    if not launch_blocking(said):
        return fw
    notes.append(f"synchronous kernel launches, {SYNC_LAUNCH_GAP_S * 1e6:.1f} us per kernel "
                 f"boundary (stated: {said})")
    return with_launch_blocking(fw)


def _with_stated_grouped_mlp(fw: FrameworkProfile, pl: dict, dtype: str,
                             notes: list[str]) -> FrameworkProfile:
    """The stack ``fw`` with its routed experts in Transformer Engine's fused grouped MLP
    where the entry's ``plan.fused_grouped_mlp`` says its config ran it (Megatron-Bridge's
    ``cutedsl_fused_grouped_mlp``; ``framework.with_fused_grouped_mlp``), said so; TE's
    fused op is MXFP8's, so another precision, or a stack without Megatron-Core's
    ``TEGroupedMLP``, keeps the stack's experts, said so. SpecError for a value that is
    not a boolean."""
    said = _stated_bool(pl, "fused_grouped_mlp")
    if not said:
        return fw
    if dtype != "mxfp8" or not (fw.grouped_mlp_casts or fw.fused_grouped_mlp):
        notes.append(f"fused_grouped_mlp stated but not modelled ({fw.name}, {dtype}: "
                     "Transformer Engine's fused grouped MLP is an MXFP8 op replacing "
                     "Megatron-Core's TEGroupedMLP)")
        return fw
    notes.append("routed experts in Transformer Engine's fused grouped MLP (stated: "
                 "fused_grouped_mlp): no separate activation casts, no Fp8Padding copies, one "
                 "kernel per grouped GEMM, the clamp inside it (docs/calibration.md §5.90)")
    return with_fused_grouped_mlp(fw)


def _with_stated_fp8_attention(fw: FrameworkProfile, pl: dict, dtype: str, gpu: GPU,
                               notes: list[str]) -> FrameworkProfile:
    """The stack ``fw`` with its attention core in Transformer Engine's MXFP8 fused attention
    where the entry's ``plan.fp8_attention`` says its config ran it (Megatron-Bridge's
    ``fp8_dot_product_attention``; ``framework.with_fp8_attention``), said so; a precision,
    stack or chip the rule refuses keeps BF16 attention, said so. SpecError for a value that
    is not a boolean."""
    said = _stated_bool(pl, "fp8_attention")
    if not said:
        return fw
    try:
        fw = with_fp8_attention(fw, dtype, gpu)
    except SpecError as e:
        notes.append(f"fp8_attention stated but not modelled ({e})")
        return fw
    notes.append("attention core in Transformer Engine's MXFP8 fused attention (stated: "
                 "fp8_attention): cuDNN's BF16/MXFP8 time ratios and the Q/K/V and dO casts "
                 "(docs/calibration.md §5.98)")
    return fw


def _llama_recipe_switches(c: dict, plan: Plan, notes: list[str]) -> Plan:
    """``plan`` with the overlap switches Megatron-Bridge's Llama scripts set for entry ``c``
    (``bridge_recipes.llama_switches``: no TP overlap, and for 405B on GB200 no overlapped
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


def _routing_balance(c: dict, model: ModelSpec, plan: Plan, notes: list[str]) -> Plan:
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
    if pl.get("moe_imbalance") is not None:
        notes.append(f"moe_imbalance={float(pl['moe_imbalance'])} (stated by the entry)")
        return replace(plan, moe_imbalance=float(pl["moe_imbalance"]))
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
    if plan.capacity_factor < rule:
        notes.append(f"expert load {plan.capacity_factor:g}: token dropping at "
                     f"moe_capacity_factor {plan.capacity_factor:g} caps the default "
                     f"imbalance {rule:.4f} (token_counts.moe_load)")
    else:
        notes.append(f"moe_imbalance by the default rule ({rule:.4f}: a trained router "
                     "balanced without an auxiliary loss, sampling plus Wang et al. 2024's "
                     "MaxVio_global 0.04 per expert; strategies.moe_balance.default_imbalance)")
    return plan


def reference_cases(paths: Sequence[str] | None = None) -> Iterator[Case]:
    """Every case of the reference files ``paths`` (default: every file of the shipped
    reference data, in name order; JSON lists, a file that is not a list is skipped), in file
    then row order; a row the reader refuses (``SpecError``, a missing or malformed field) is
    skipped, as ``validate`` skips it."""
    import glob
    import json
    if paths is None:
        paths = sorted(glob.glob(os.path.join(os.path.dirname(DATA), "*.json")))
    for path in paths:
        with open(path) as fh:
            rows = json.load(fh)
        if not isinstance(rows, list):
            continue
        for r in rows:
            try:
                yield case_from_entry(r, rows)
            except (SpecError, ValueError, KeyError):
                continue


def case_from_entry(c: dict, siblings: Sequence[dict] = ()) -> Case:
    """Build the Job for one published entry, or say why not (``siblings``: the other entries
    of its reference file, read only for what the entry's source states elsewhere)."""
    step, how = measured_step(c)
    pl = c.get("plan") or {}
    base = dict(id=c["id"], tier=c.get("tier", 3), measured_step_s=step, how_measured=how, raw=c)

    def skip(why: str) -> Case:
        return Case(job=None, skipped=why, **base)

    if c.get("kind") != "measured":
        return skip("analytic reference, not a measured run")
    if c.get("duplicate_of"):
        return skip(f"the same run as {c['duplicate_of']} (the entry's notes say why)")
    if c.get("skip_reason"):        # recorded as printed, not evaluated (the entry says why)
        return skip(str(c["skip_reason"]))
    n = _size(c["hardware"]["n_gpus"])
    if n is None:
        return skip("hardware.n_gpus not given")
    sizes = _parallel_sizes(pl, n)
    said_compile = stated_compile(c)
    if sizes is None:
        return skip("tp/pp not given")
    partition = str(pl.get("pp_partition") or "")
    if partition and "embedding counted as a block" not in partition:
        return skip(f"pipeline partition {partition!r} not read")
    *sizes, notes = sizes
    mo = _filled_model(c, notes, siblings)
    gbs = global_batch(c)
    if gbs is None:
        return skip("global batch not given")
    try:
        model = _model(mo, c, notes)
        cluster, cn = _cluster(c)
    except SpecError as e:
        return skip(f"does not resolve: {e}")
    notes += cn
    dtype = _dtype(c)
    recipe = recipe_for(c)
    # the harness's plain FP8 is current scaling: said by the row's config where the recipe
    # table holds it, else by the table's container (``harness_fp8_is_current``)
    cs_config = recipe is not None and recipe.current_scaling
    if dtype == "fp8" and (cs_config or harness_fp8_is_current(c)):
        dtype = "fp8-current"
        why = (f"the row's config {recipe.source.split()[-1]}" if cs_config
               else "the table's harness has no delayed-scaling recipe")
        notes.append(f"precision fp8 with current scaling ({why}: {FP8_CS_SOURCE})")
    if step is None:        # from a utilisation: the model's own FLOPs, before any balancing
        step, how = utilisation_step(c, model, cluster, dtype, gbs)
        base.update(measured_step_s=step, how_measured=how)
    if step is None:
        return skip("no step time, tokens/s or TFLOP/s with a known FLOP count")
    fw = _with_stated_cp(_with_stated_env(_with_stated_kernel(framework_of(c), pl, notes), pl,
                                          notes), pl, notes)
    if said_compile is not None:
        try:
            fw = compiled(fw)
        except SpecError:
            return skip(f"torch.compile kernel fusion is not modelled for {fw.name}")
        notes.append(f"torch.compile: {fw.name}'s inductor-fused elementwise kernels "
                     f"(docs/calibration.md §5.69; stated: {said_compile})")
        fw = _with_loss_of_its_date(c, fw, notes)
    fw = _with_mla_layout(c, fw, model, notes)
    try:
        fw = _with_stated_grouped_mlp(fw, pl, dtype, notes)
        fw = _with_stated_fp8_attention(fw, pl, dtype, cluster.gpu, notes)
    except SpecError as e:
        return skip(f"plan does not resolve: {e}")
    try:        # a plan the stack's defaults make invalid (ZeRO-3 with pipelining) is skipped
        plan = _stated_stages_plan(c, model, tuple(sizes), gbs, fw, notes)
        if plan is None:
            plan = _slot_plan(c, model, tuple(sizes), gbs, fw, notes, bool(partition))
        if plan is None:
            plan = _recipe_layout_plan(c, model, tuple(sizes), gbs, fw, notes)
        if plan is None:
            model = _balanced_layers(model, sizes[1], notes)
            plan = _plan(c, tuple(sizes), gbs, model.num_layers, fw, notes)
    except SpecError as e:
        return skip(f"plan does not resolve: {e}")
    plan = _llama_recipe_switches(c, plan, notes)
    try:
        plan = _routing_balance(c, model, plan, notes)
    except SpecError as e:
        return skip(f"plan does not resolve: {e}")
    notes.append(f"framework {fw.name} ({fw.description})"
                 + (" (stated by the entry)" if c.get("framework") is not None else ""))
    system = None
    if grad_reduce_in_fp32(c) is False:
        system = SystemConfig(grad_buffer_bytes=2.0)
        notes.append("gradients accumulated and reduced in bf16 ("
                     + (NEMO_PERF_SOURCE if nemo_perf_row(c) else GRAD_REDUCE_SOURCE) + ")")
    # (not under ZeRO-3, which gathers per layer: NeMo's scripts turn the FP8 gather off with
    # Megatron FSDP, v2.3.0 ``scripts/performance/utils.py``)
    q_ag = quantised_param_gather(c, dtype) if plan.zero < 3 else None
    if q_ag is not None:
        system = replace(system or SystemConfig(), param_gather_bytes=q_ag[0])
        notes.append(f"quantised weights all-gathered after the optimizer, {q_ag[0]:g} byte "
                     f"each ({q_ag[1]})")
    try:
        job = make_job(model, cluster, plan, dtype=dtype, framework=fw, system=system)
    except SpecError as e:
        return skip(f"plan does not resolve: {e}")
    return Case(job=job, assumptions=tuple(notes), **base)


