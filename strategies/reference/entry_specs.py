"""The model, cluster and precision of a published entry, for the reference reader
(``strategies.reference.cases``): the model mapping with what its source leaves out filled
(sequence length, vocabulary from its notes or a sibling entry), the ``ModelSpec``, the
cluster its hardware text names and the ``--dtype`` its precision text names.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Sequence

from strategies.errors import SpecError
from strategies.model import ModelSpec
from strategies.reference.measured import seq_len
from strategies.reference.text import (gpu_preset, intra_node_gbps, model_family,
                                        parse_inter_node, vocab_from_notes)
from topologies.cluster import Cluster, cluster_from_mapping, cluster_preset
from topologies.cluster.preset_table import RACK_PRESETS, preset_unit_gpus


def entry_model(mo: dict, c: dict, notes: list[str]) -> ModelSpec:
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
        return _mtp_depths(model, (c.get("plan") or {}).get("mtp_num_layers"), notes)

    h, a = mo["hidden"], mo.get("heads")
    kv = mo.get("kv_heads")
    fam = model_family(name)
    if mo.get("position_embedding") is not None:   # stated by the entry's source, over the name's
        fam["position_embedding"] = str(mo["position_embedding"])
        notes.append(f"position embedding {fam['position_embedding']!r} (stated by the entry)")
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


def _mtp_depths(model: ModelSpec, depths, notes: list[str]) -> ModelSpec:
    """A hybrid model whose config holds one physical MTP block (``num_nextn_predict_layers``
    1, ``mtp_hybrid_pattern``) run at the plan's ``mtp_num_layers`` depths: Megatron-Core's
    ``mtp_use_repeated_layer`` (the Nemotron 3 recipes set it beside ``mtp_num_layers``),
    ``mtp_repeats`` = depths. Unchanged where the plan states none or as many as the config's
    modules; a count it cannot read so is refused by name."""
    if depths is None or not model.mtp_hybrid_pattern or depths == model.num_nextn_predict_layers:
        return model
    if model.num_nextn_predict_layers != 1 or not isinstance(depths, int) or depths < 1:
        raise SpecError("plan.mtp_num_layers", depths, "must equal the config's "
                        f"num_nextn_predict_layers={model.num_nextn_predict_layers} or run its "
                        "one MTP block repeated (num_nextn_predict_layers=1)")
    notes.append(f"mtp_num_layers={depths}: the config's one MTP block "
                 f"{model.mtp_hybrid_pattern!r} run at {depths} depths (Megatron-Core "
                 "mtp_use_repeated_layer; parameters once)")
    return replace(model, mtp_repeats=depths)


def entry_cluster(c: dict) -> tuple[Cluster, list[str]]:
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
        per_rack = _stated_trays_per_rack(hw, tray)
        cl = cluster_preset(preset, n // tray, per_rack)
        how = "trays spread evenly over racks" if per_rack is None else \
            f"the row's nvlink_domain_gpus={hw['nvlink_domain_gpus']}: {per_rack} trays a rack"
        notes.append(f"{preset}: {cl.describe_domain()} ({how}; the source's "
                     f"gpus_per_node={hw.get('gpus_per_node')} not used)")
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


def _stated_trays_per_rack(hw: dict, tray: int) -> int | None:
    """The trays per rack of a rack-scale row that states its NVLink domain
    (``hardware.nvlink_domain_gpus``: the GPUs of a rack in the job, whole trays); None
    where it states none (the fewest racks of equal tray counts)."""
    domain = hw.get("nvlink_domain_gpus")
    if domain is None:
        return None
    if isinstance(domain, bool) or not isinstance(domain, int) or domain < tray \
            or domain % tray:
        raise SpecError("hardware.nvlink_domain_gpus", domain,
                        f"must be a whole number of {tray}-GPU trays")
    return domain // tray


#: words of a run's precision text that name torchao's rowwise recipe (``entry_dtype``)
ROWWISE_WORDS = ("rowwise", "row-wise", "per-row")


def entry_dtype(c: dict) -> str:
    """The ``--dtype`` a run's precision text names: ``mxfp8``, ``nvfp4``, fp8 with one
    scale per row (``fp8-rowwise``: torchao's rowwise recipe, "rowwise"/"row-wise"/"per-row"),
    fp8 with current scaling (``fp8-current``), fp8 with block-wise scaling
    (``fp8-blockwise``: DeepSeek-V3's 1x128 / 128x128 tiles), other fp8 (delayed scaling),
    fp16, else bf16."""
    prec = str(c.get("precision") or "").lower()
    if "nvfp4" in prec:
        return "nvfp4"
    if "mxfp8" in prec:
        return "mxfp8"
    if "fp8" in c["id"].lower() or "fp8" in prec or "float8" in prec:
        if any(w in prec for w in ROWWISE_WORDS):
            return "fp8-rowwise"
        if "current" in prec:
            return "fp8-current"
        blockwise = ("blockwise", "block-wise", "fine-grained", "deepseek")
        return "fp8-blockwise" if any(w in prec for w in blockwise) else "fp8"
    return "fp16" if "fp16" in prec else "bf16"


def filled_model(c: dict, notes: list[str], siblings: Sequence[dict] = ()) -> dict:
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
