"""Published training runs (``strategies/data/published.json``, a copy of the shared reference)
turned into Jobs, with every value the source does not give filled by a *stated* assumption.

Measured step time comes from the source's step time, or tokens/s, or its TFLOP/s with the
source's own FLOP definition (formulas.md §9); each case says which.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from strategies.errors import SpecError
from strategies.framework import (JAX_XLA, MEGATRON_CORE, MEGATRON_LM_2021, PYTORCH_EAGER,
                                  FrameworkProfile)
from strategies.job import Job, make_job
from strategies.model import ModelSpec
from strategies.plan import Plan
from topologies.cluster import Cluster, cluster_from_mapping, cluster_preset

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


def _eq3_flops(mo: dict, gbs: int) -> float:
    l, h, s, V = mo["layers"], mo["hidden"], mo["seq_len"], mo["vocab"]
    return 96 * gbs * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def _model_flops(mo: dict, gbs: int) -> float:
    """Model FLOPs per step without recomputation (formulas.md §2b; Megatron-Core's
    ``num_floating_point_operations`` for a GPT with a 4h MLP and no GQA)."""
    l, h, s, V = mo["layers"], mo["hidden"], mo["seq_len"], mo["vocab"]
    return 72 * gbs * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def _megatron_core_readme(c: dict) -> bool:
    src = c.get("source") or {}
    return "megatron-lm readme" in f"{src.get('ref', '')} {src.get('table', '')}".lower() \
        or "model_table" in str(src.get("table", ""))


def global_batch(c: dict) -> int | None:
    """Sequences per step: the source's global batch, else (torchtitan) its per-replica
    ``local_batch_size`` times the data-parallel size."""
    pl = c.get("plan") or {}
    if pl.get("global_batch"):
        return int(pl["global_batch"])
    if pl.get("local_batch_size") and pl.get("dp"):
        return int(pl["local_batch_size"]) * int(pl["dp"])
    return None


def seq_len(c: dict) -> tuple[int | None, list[str]]:
    """The training sequence length, with the assumption made when the source omits it
    (torchtitan's default, 8192)."""
    mo = c.get("model") or {}
    if mo.get("seq_len"):
        return int(mo["seq_len"]), []
    if "torchtitan" in str((c.get("source") or {}).get("ref", "")).lower():
        return 8192, ["seq_len=8192 (torchtitan default; source does not say)"]
    return None, []


def measured_step(c: dict) -> tuple[float | None, str]:
    """Seconds per step the source implies, and how it was read."""
    me, mo = c.get("measured") or {}, c.get("model") or {}
    n, gbs, s = c["hardware"].get("n_gpus"), global_batch(c), seq_len(c)[0]
    if me.get("step_time_s"):
        return float(me["step_time_s"]), "step time as printed"
    if me.get("tokens_per_s") and gbs and s:
        return gbs * s / me["tokens_per_s"], "global batch × seq / tokens per s"
    if me.get("tokens_per_s_per_gpu") and gbs and s and n:
        return gbs * s / (me["tokens_per_s_per_gpu"] * n), "global batch × seq / (tokens/s/GPU × GPUs)"
    if me.get("tflops_per_gpu") and "eq.(3)" in (c.get("notes") or "") + str(c.get("derived", {}).get("how", "")) \
            and gbs and all(mo.get(k) for k in ("layers", "hidden", "seq_len", "vocab")):
        return _eq3_flops(mo, gbs) / (n * me["tflops_per_gpu"] * 1e12), "eq. 3 FLOPs / (GPUs × TFLOP/s)"
    if me.get("tflops_per_gpu") and "eq.3" in (c.get("notes") or "") and gbs:
        return _eq3_flops(mo, gbs) / (n * me["tflops_per_gpu"] * 1e12), "eq. 3 FLOPs / (GPUs × TFLOP/s)"
    if me.get("tflops_per_gpu") and _megatron_core_readme(c) and gbs and n \
            and all(mo.get(k) for k in ("layers", "hidden", "seq_len", "vocab")) \
            and not mo.get("ffn_hidden") and not mo.get("kv_heads"):
        return (_model_flops(mo, gbs) / (n * me["tflops_per_gpu"] * 1e12),
                "model FLOPs (§2b, Megatron-Core's count) / (GPUs × TFLOP/s)")
    return None, ""


def _model(mo: dict, c: dict) -> ModelSpec:
    name = mo.get("name") or c["id"]
    h, a = mo["hidden"], mo.get("heads")
    kv = mo.get("kv_heads")
    llama = "llama" in name.lower()
    nemotron = "nemotron" in name.lower()
    if a is None and nemotron:
        a, kv = (96 if h == 18432 else 48), 8
    ffn = mo.get("ffn_hidden") or 4 * h
    act = "swiglu" if llama else ("squared_relu" if nemotron else "gelu")
    pos = "rope" if (llama or nemotron) else ("alibi" if "mpt" in name.lower() or "bloom" in name.lower() else "learned")
    return ModelSpec(name=name, num_layers=mo["layers"], hidden_size=h, num_attention_heads=a,
                     ffn_hidden_size=ffn, vocab_size=mo["vocab"], seq_length=mo["seq_len"],
                     num_query_groups=kv, activation=act, tie_word_embeddings=not (llama or nemotron),
                     position_embedding=pos, bias=not (llama or nemotron or "mpt" in name.lower()))


def _cluster(c: dict) -> tuple[Cluster, list[str]]:
    hw = c["hardware"]
    gpu, n, inter = hw["gpu"], hw["n_gpus"], hw.get("interconnect", "")
    per = hw.get("gpus_per_node") or 8
    nodes = max(1, n // per)
    if "Grand Teton" in inter:
        return cluster_from_mapping({"name": "grand-teton", "gpu": "H100-96GB-500W", "nodes": nodes,
                                     "gpus_per_node": 8, "intra_node_GBps": 450, "nics_per_node": 8,
                                     "inter_node_gbps": 400}), ["Grand Teton: 8 NICs x 400 Gb/s (source: 400 Gb/s per GPU)"]
    if "Omni-Path" in inter:
        return cluster_from_mapping({"name": "jean-zay", "gpu": "A100-SXM4-80GB", "nodes": nodes,
                                     "gpus_per_node": 8, "intra_node_GBps": 300, "nics_per_node": 4,
                                     "inter_node_gbps": 100}), ["Jean Zay: 4 Omni-Path links x 100 Gb/s"]
    if "H100" in gpu:
        return cluster_preset("dgx-h100", nodes), ["DGX H100 with 8 x 400 Gb/s NDR (not stated)"]
    return cluster_preset("dgx-a100", nodes), []


def framework_of(c: dict) -> FrameworkProfile:
    """The software that produced a published run, from its source: Megatron-LM 2021 (the
    SC21 paper) and Megatron-DeepSpeed (BLOOM) use ``megatron-lm-2021``; NVIDIA's NeMo
    benchmarks and Megatron-Core's README ``megatron-core``; MaxText and PAXML ``jax-xla``;
    MosaicML llm-foundry and torchtitan ``pytorch-eager``. Otherwise by year: before 2023
    ``megatron-lm-2021``, else ``megatron-core``."""
    src = c.get("source") or {}
    text = " ".join(str(src.get(k) or "") for k in ("ref", "table", "also")).lower()
    if "maxtext" in text or "paxml" in text:
        return JAX_XLA
    if "llm-foundry" in text or "mosaicml" in text or "torchtitan" in text:
        return PYTORCH_EAGER
    if "narayanan" in text or "bigscience" in text or "megatron-deepspeed" in text:
        return MEGATRON_LM_2021
    if "dgxc" in text or "nemo" in text or "megatron-lm readme" in text or "megatron-core" in text:
        return MEGATRON_CORE
    year = re.search(r"(20\d\d)", text)
    return MEGATRON_LM_2021 if year and int(year.group(1)) < 2023 else MEGATRON_CORE


def _schedule(pl: dict, layers: int, pp: int, m: int) -> tuple[str, int, list[str]]:
    text = str(pl.get("schedule") or "").lower()
    if pp == 1:
        return "1f1b", 1, []
    # Megatron-Core overlaps pipeline sends with compute only in the interleaved schedule, so a
    # source that ran with "PP overlap" on and names no schedule ran interleaved
    implied = not text and "pp overlap" in str(pl.get("overlap") or "").lower()
    if "interleaved" in text or implied:
        v = pl.get("virtual_stages")
        if v:
            return "interleaved", int(v), []
        per = layers // pp
        for v in range(2, per + 1):
            if per % v == 0 and m % pp == 0:
                why = ["interleaved (implied by PP communication overlap; not stated)"] if implied else []
                return "interleaved", v, why + [f"vpp={v} (smallest number of chunks dividing {per} layers per stage; not stated)"]
        return "1f1b", 1, ["vpp not stated and no valid interleaving: 1F1B"]
    return "1f1b", 1, []


def case_from_entry(c: dict) -> Case:
    """Build the Job for one published entry, or say why not."""
    step, how = measured_step(c)
    pl, mo = c.get("plan") or {}, c.get("model") or {}
    base = dict(id=c["id"], tier=c.get("tier", 3), measured_step_s=step, how_measured=how, raw=c)
    if c.get("kind") != "measured":
        return Case(job=None, skipped="analytic reference, not a measured run", **base)
    if step is None:
        return Case(job=None, skipped="no step time, tokens/s or TFLOP/s with a known FLOP count", **base)
    compiled = "compile" in f"{c['id']} {pl.get('techniques', '')}"
    if any(pl.get(k) is None for k in ("tp", "pp")) or compiled:
        why = "torch.compile kernel fusion is not modelled" if compiled else "tp/pp not given"
        return Case(job=None, skipped=why, **base)
    if pl.get("pp_partition"):
        return Case(job=None, skipped="uneven pipeline partition (embedding counted as a stage block) "
                    "not modelled yet", **base)
    seq, notes = seq_len(c)
    if not mo.get("seq_len") and seq:
        mo = {**mo, "seq_len": seq}
    model = _model(mo, c)
    cluster, cn = _cluster(c)
    notes += cn
    tp, pp = pl["tp"], pl["pp"]
    n = c["hardware"]["n_gpus"]
    dp = pl.get("dp") or n // (tp * pp * (pl.get("cp") or 1))
    gbs = global_batch(c)
    if not pl.get("global_batch"):
        notes.append(f"gbs={gbs} (local batch {pl.get('local_batch_size')} x dp {dp})")
    mbs = pl.get("microbatch") or pl.get("local_batch_size")
    if not mbs:
        mbs = 1 if pp > 1 else min(4, gbs // dp)
        notes.append(f"mbs={mbs} (not stated)")
    fw = framework_of(c)
    modern = fw is not MEGATRON_LM_2021
    dtype = "fp8" if "fp8" in c["id"] else ("fp16" if "fp16" in str(c.get("precision")) else "bf16")
    rec = str(pl.get("recompute") or fw.default_recompute).split()[0]
    if pl.get("recompute") is None:
        notes.append(f"recompute={rec} (not stated)")
    sched, vpp, sn = _schedule(pl, model.num_layers, pp, gbs // (mbs * dp))
    notes += sn
    sp = pl.get("sequence_parallel")
    if sp is None:
        sp = modern and tp > 1
        notes.append(f"sp={str(sp).lower()} (not stated)")
    zero = pl.get("zero_stage")
    if zero is None:
        zero = 1 if modern else 0
        notes.append(f"zero={zero} (distributed optimizer; not stated)")
    plan = Plan(tp=tp, pp=pp, dp=dp, cp=pl.get("cp") or 1, mbs=mbs, gbs=gbs, schedule=sched, vpp=vpp,
                recompute=rec if rec in ("none", "selective", "full") else "selective", sp=bool(sp),
                zero=zero, flash_attn=fw.default_flash_attn,
                overlap_grad_reduce=fw.default_overlap_grad_reduce,
                overlap_param_gather=fw.default_overlap_param_gather,
                tp_comm_overlap=fw.default_tp_comm_overlap and tp > 1 and bool(sp))
    notes.append(f"framework {fw.name} ({fw.description})")
    try:
        job = make_job(model, cluster, plan, dtype=dtype, framework=fw)
    except SpecError as e:
        return Case(job=None, skipped=f"plan does not resolve: {e}", **base)
    return Case(job=job, assumptions=tuple(notes), **base)


def reference_cases(path: str | None = None, tiers: tuple[int, ...] = (1,)) -> list[Case]:
    return [case_from_entry(c) for c in load_reference(path) if c.get("tier") in tiers]
