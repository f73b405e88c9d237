"""The step time a published run implies, from what its source prints: a step time, a
throughput, or TFLOP/s or MFU under the FLOP count the source names (docs/formulas.md §2, §9).

Each function returns ``(seconds, how it was read)``; ``(None, "")`` when the entry does
not say enough.
"""
from __future__ import annotations

import math

from strategies.errors import SpecError
from strategies.model import ModelSpec
from topologies.cluster import Cluster


def _dims(mo: dict) -> tuple[float, float, float, float] | None:
    """(layers, hidden, seq_len, vocab) as positive numbers, or None (a missing or non-numeric
    value: never multiplied, so a string cannot turn into a huge repetition)."""
    out = []
    for k in ("layers", "hidden", "seq_len", "vocab"):
        v = _positive(mo.get(k))
        if v is None:
            return None
        out.append(v)
    return tuple(out)


def _positive(v) -> float | None:
    """A printed figure as a positive finite number, else None (text, a flag, zero, negative,
    an integer too large for a float)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _count(field: str, v) -> int:
    """A count an entry prints (sequences, tokens, ranks) as a positive integer; SpecError
    otherwise (a negative or fractional batch made a negative or truncated step time; the
    case is skipped with the reason)."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SpecError(field, v, "must be a positive integer")
    return v


def _section(c: dict, key: str) -> dict:
    """Entry ``c``'s ``key`` section (``measured``, ``source``): a mapping, or empty when it is
    absent or not a mapping (a malformed entry reads as one that prints nothing)."""
    v = c.get(key)
    return v if isinstance(v, dict) else {}


def _eq3_flops(mo: dict, gbs: int) -> float:
    l, h, s, V = _dims(mo)
    return 96 * gbs * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def _model_flops(mo: dict, gbs: int) -> float:
    """Model FLOPs per step without recomputation (docs/formulas.md §2b; Megatron-Core's
    ``num_floating_point_operations`` for a GPT with a 4h MLP and no GQA)."""
    l, h, s, V = _dims(mo)
    return 72 * gbs * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def _megatron_core_readme(c: dict) -> bool:
    src = c.get("source") or {}
    return "megatron-lm readme" in f"{src.get('ref', '')} {src.get('table', '')}".lower() \
        or "model_table" in str(src.get("table", ""))


def _counts_recompute(c: dict) -> bool:
    """Whether the source's TFLOP/s count the recomputed forward (Narayanan eq. 3, BLOOM's
    "hardware TFLOPs"; docs/formulas.md §2a and §9)."""
    text = " ".join(str(x) for x in (c.get("notes"), (c.get("derived") or {}).get("how"),
                                      (c.get("source") or {}).get("table"))).lower()
    return any(k in text for k in ("eq.(3)", "eq. 3", "eq.3", "eq. (3)", "§2a", "4*2",
                                   "recompute-inclusive", "hardware tflops"))


def global_batch(c: dict) -> int | None:
    """Sequences per step: the source's global batch, else (torchtitan) its per-replica
    ``local_batch_size`` times the data-parallel size."""
    pl = c.get("plan") or {}
    if pl.get("global_batch"):
        return _count("plan.global_batch", pl["global_batch"])
    if pl.get("local_batch_size") and pl.get("dp"):
        return _count("plan.local_batch_size", pl["local_batch_size"]) * \
            _count("plan.dp", pl["dp"])
    return None


def seq_len(c: dict) -> tuple[int | None, list[str]]:
    """The training sequence length, with the assumption made when the source omits it
    (torchtitan's default, 8192)."""
    mo = c.get("model") or {}
    if mo.get("seq_len"):
        return _count("model.seq_len", mo["seq_len"]), []
    if "torchtitan" in str((c.get("source") or {}).get("ref", "")).lower():
        return 8192, ["seq_len=8192 (torchtitan default; source does not say)"]
    return None, []


def throughput_step_s(gbs: float, seq: float, tokens_per_s: float) -> float:
    """Seconds per step a throughput implies: ``gbs`` sequences of ``seq`` tokens over
    ``tokens_per_s`` tokens per second (the whole job's rate)."""
    return gbs * seq / tokens_per_s


def measured_step(c: dict) -> tuple[float | None, str]:
    """Seconds per step the source implies from what it prints (a step time, a throughput,
    or TFLOP/s under a FLOP count it names), and how it was read."""
    mo = c.get("model") or {}
    me = {k: _positive(v) for k, v in (c.get("measured") or {}).items()}
    n, gbs, s = _positive(c["hardware"].get("n_gpus")), global_batch(c), seq_len(c)[0]
    shape = gbs and n and _dims(mo) is not None
    if me.get("step_time_s"):
        return float(me["step_time_s"]), "step time as printed"
    if me.get("tokens_per_s") and gbs and s:
        return throughput_step_s(gbs, s, me["tokens_per_s"]), "global batch × seq / tokens per s"
    if me.get("tokens_per_s_per_gpu") and gbs and s and n:
        return (throughput_step_s(gbs, s, me["tokens_per_s_per_gpu"] * n),
                "global batch × seq / (tokens/s/GPU × GPUs)")
    if me.get("gpu_hours_per_trillion_tokens") and gbs and s and n:   # GPU-s per token x tokens / GPUs
        return (gbs * s * me["gpu_hours_per_trillion_tokens"] * 3600 / (1e12 * n),
                "global batch × seq × GPU-hours per 1e12 tokens × 3600 / GPUs")
    if me.get("samples_per_s") and gbs:
        return gbs / me["samples_per_s"], "global batch / samples per s"
    if me.get("tflops_per_gpu") and shape and _counts_recompute(c):
        return _eq3_flops(mo, gbs) / (n * me["tflops_per_gpu"] * 1e12), "eq. 3 FLOPs / (GPUs × TFLOP/s)"
    if me.get("tflops_per_gpu") and shape and _megatron_core_readme(c) \
            and not mo.get("ffn_hidden") and not mo.get("kv_heads"):
        return (_model_flops(mo, gbs) / (n * me["tflops_per_gpu"] * 1e12),
                "model FLOPs (§2b, Megatron-Core's count) / (GPUs × TFLOP/s)")
    derived = _positive((c.get("derived") or {}).get("step_time_s"))
    if derived and not any(me.get(k) for k in ("mfu", "model_tflops_per_gpu", "tflops_per_gpu")):
        how = str((c.get("derived") or {}).get("how") or "the reference's own derivation")
        return derived, f"derived step time ({how[:80]})"
    return None, ""


def utilisation_step(c: dict, model: ModelSpec, cluster: Cluster, dtype: str,
                     gbs: int) -> tuple[float | None, str]:
    """Seconds per step from a utilisation the source prints when nothing more direct is
    given: model TFLOP/s per GPU, or MFU against the datasheet peak of the run's dtype, both
    with the model-FLOP count of ``costs.model_flops_per_step`` (the full attention square,
    docs/formulas.md §2b/§2d; NVIDIA's and Megatron's convention)."""
    from strategies.cost.flop_counts import model_flops_per_step
    me = {k: _positive(v) for k, v in (c.get("measured") or {}).items()}
    n = _positive(c["hardware"].get("n_gpus"))
    if not n:
        return None, ""
    flops = float(model_flops_per_step(model, gbs))
    rate = me.get("model_tflops_per_gpu") or (me.get("tflops_per_gpu")
                                              if not _counts_recompute(c) else None)
    if rate:
        return flops / (n * rate * 1e12), "model FLOPs (costs) / (GPUs × model TFLOP/s)"
    if me.get("mfu"):
        peak = cluster.gpu.peak(dtype)
        return (flops / (n * peak * me["mfu"]),
                f"model FLOPs (costs) / (GPUs × {peak / 1e12:.0f} TFLOP/s × MFU)")
    return None, ""


GIB = 2 ** 30

# What each source's memory figure measures, read from its code or text (docs/calibration.md §5.74).
TORCHTITAN_MEMORY = ("torchtitan's logged peak: the caching allocator's max reserved bytes "
                     "(torchtitan metrics.py DeviceMemoryMonitor, "
                     "memory_stats()['reserved_bytes.all.peak'] / 2**30, GiB)")
BLOOM_MEMORY = ("BigScience's 'Mem' column, nvidia-smi's used memory on the first node "
                "(chronicles-prequel.md: 'getting the memory snapshot with: pdsh -w "
                "jean-zay-iam01 ... nvidia-smi'; 'max memory used by the first (last) nodes'), "
                "unit not stated: taken as GiB (nvidia-smi prints MiB; the page writes '80GB' "
                "for a full 80 GiB A100); it holds the CUDA context ('cuda kernels (1271MiB)') "
                "and the caching allocator's reserve as well as the tensors")


def measured_memory_gib(c: dict) -> tuple[float | None, str]:
    """The peak memory per GPU entry ``c`` prints, in GiB (2**30 bytes), and how it was read
    (the unit and what it measures); ``(None, "")`` when it prints none.

    ``measured.memory_gib`` is GiB; ``measured.memory_gb`` is read in the unit its
    ``memory_unit`` states (``GiB…`` binary, ``GB…`` decimal, 1e9 bytes); with no unit, the
    source's unit as stated in ``BLOOM_MEMORY`` (BigScience) or GiB otherwise (nvidia-smi and
    PyTorch's allocator both report binary multiples), said in the returned text."""
    me = _section(c, "measured")
    ref = str(_section(c, "source").get("ref", "")).lower()
    what = TORCHTITAN_MEMORY if "torchtitan" in ref else ""
    gib = _positive(me.get("memory_gib"))
    if gib is not None:
        return gib, "GiB as printed" + (f"; {what}" if what else "")
    gb = _positive(me.get("memory_gb"))
    if gb is None:
        return None, ""
    unit = str(me.get("memory_unit") or "").strip()
    if unit.lower().startswith("gib"):
        return gb, f"{unit} as printed" + (f"; {what}" if what else "")
    if unit.lower().startswith("gb"):
        return gb * 1e9 / GIB, f"{unit} (1e9 bytes) in GiB" + (f"; {what}" if what else "")
    if unit:
        return None, f"memory_unit {unit!r} not read (GiB or GB)"
    if "bigscience" in ref:
        return gb, BLOOM_MEMORY
    return gb, "unit not stated: taken as GiB (nvidia-smi and PyTorch report binary multiples)"
