"""What an entry's plan states in so many words, read for the reference reader
(``strategies.reference.cases``): a parallel size, a boolean switch, the overlap switches and
FlashAttention (stated, else the stack's default, said so), async TP, torch.compile,
Megatron-Core's ``delay_wgrad_compute`` and FP8-stored weights (``fp8_param_gather``).
"""
from __future__ import annotations

import re

from strategies.errors import SpecError
from strategies.stacks.profile import FrameworkProfile
from strategies.reference.perf_harness import (GATHER_BYTES, harness_delay_wgrad,
                                               quantised_param_gather)


def stated_size(v) -> int | None:
    """A parallel size as a positive integer (None when absent); anything else is refused
    before it is multiplied."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SpecError("plan", v, "parallel sizes must be positive integers")
    return v


def stated_bool(pl: dict, *keys: str) -> bool | None:
    """The boolean an entry's plan ``pl`` states under the first of ``keys`` it sets (None:
    not stated); SpecError naming ``plan.<keys[0]>`` for a value that is not a boolean."""
    said = next((pl[k] for k in keys if pl.get(k) is not None), None)
    if said is not None and not isinstance(said, bool):
        raise SpecError(f"plan.{keys[0]}", said, "must be true or false")
    return said


def stated_number(pl: dict, key: str) -> float | None:
    """The number an entry's plan ``pl`` states under ``key`` (None: not stated); SpecError
    naming ``plan.<key>`` for a boolean or a text (the plan checks the range)."""
    said = pl.get(key)
    if said is not None and (isinstance(said, bool) or not isinstance(said, (int, float))):
        raise SpecError(f"plan.{key}", said, "must be a number")
    return None if said is None else float(said)


def stated_delay_wgrad(c: dict, out: dict, notes: list[str]) -> None:
    """``out["delay_wgrad"]`` of entry ``c`` (Megatron-Core's ``delay_wgrad_compute``), said
    with its source: what the entry's plan states (``delay_wgrad`` or Megatron's name); else,
    with the overlap on, what the Megatron-Bridge harness of its table ran
    (``perf_harness.harness_delay_wgrad``: on with the overlap); else, with the overlap on,
    the stack's default (off: Megatron-Core ``model_parallel_config.py``), an assumption.
    Without the overlap nothing is said unless stated (a stated ``true`` is refused by the
    plan's rule: Megatron-Core asserts the overlap for it)."""
    pl = c.get("plan") or {}
    said = stated_bool(pl, "delay_wgrad", "delay_wgrad_compute")
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


#: the precisions whose stated ``fp8_param_gather`` keeps one byte per weight: per-tensor FP8
#: (Transformer Engine's ``Float8Tensor``; MXFP8's gather reuses the 16-bit gradient buffer)
STATED_GATHER_DTYPES = ("fp8", "fp8-current")
STATED_GATHER_SOURCE = ("stated: plan.fp8_param_gather (NeMo's fp8_params: the model built under "
                        "Transformer Engine's fp8_model_init, Float8Tensor weights and no 16-bit "
                        "copy; its distributed Adam gathers them as uint8)")


def stated_param_gather(c: dict, dtype: str, notes: list[str]) -> tuple[float, str] | None:
    """``(bytes per stored weight, source)`` where entry ``c``'s run kept its weights
    quantised and all-gathered them so after the optimizer (``SystemConfig.quantised_weights``
    and ``param_gather_bytes``, docs/calibration.md §5.151, §5.219): what its plan states
    (``fp8_param_gather``, or NeMo's name ``fp8_params``) where the precision is per-tensor
    FP8 (``STATED_GATHER_DTYPES``; any other precision: not applied, said so); stated false:
    None; not stated: the rule of its table (``perf_harness.quantised_param_gather``).
    SpecError for a value that is not a boolean."""
    said = stated_bool(c.get("plan") or {}, "fp8_param_gather", "fp8_params")
    if said is None:
        return quantised_param_gather(c, dtype)
    if said and dtype not in STATED_GATHER_DTYPES:
        notes.append(f"fp8_param_gather stated but not modelled (precision {dtype}: one byte "
                     f"per weight needs per-tensor FP8, {', '.join(STATED_GATHER_DTYPES)})")
        return None
    return (GATHER_BYTES[dtype], STATED_GATHER_SOURCE) if said else None


#: where the deferral is read (docs/calibration.md §5.232)
HEAD_DEFERRAL_SOURCE = ("stated: plan.defer_embedding_wgrad_compute / plan.wgrad_deferral_limit "
                        "(Megatron-Core's switches; the output layer's weight gradients of the "
                        "first `limit` micro-batches, every one at 0, run in the pipeline's drain)")


def stated_head_deferral(c: dict, pp: int, notes: list[str]) -> float | None:
    """``SystemConfig.head_wgrad_deferral`` of entry ``c``: the micro-batches whose output-layer
    weight gradient its last stage defers to the pipeline's drain, where its plan states
    ``defer_embedding_wgrad_compute`` true (``wgrad_deferral_limit`` k > 0: k; 0 or not
    stated: ``inf``, every one, Megatron-Core's default limit 0); None where not stated,
    stated false, or without pipelining (Megatron-Core refuses it at pp 1:
    ``model_parallel_config.py``). SpecError for a non-boolean switch or a negative or
    non-integer limit (``plan.wgrad_deferral_limit``)."""
    pl = c.get("plan") or {}
    said = stated_bool(pl, "defer_embedding_wgrad_compute")
    limit = stated_number(pl, "wgrad_deferral_limit")
    if limit is not None and (limit < 0 or limit != int(limit)):
        raise SpecError("plan.wgrad_deferral_limit", limit, "must be an integer >= 0")
    if not said or pp < 2:
        if said:
            notes.append("defer_embedding_wgrad_compute stated but not modelled at pp 1")
        return None
    k = float(limit) if limit else float("inf")
    notes.append(f"the last stage's output-layer weight gradients of "
                 f"{'every micro-batch' if k == float('inf') else f'the first {k:g} micro-batches'}"
                 f" in the pipeline's drain ({HEAD_DEFERRAL_SOURCE})")
    return k


#: a switch a source states: the Megatron flag in the entry's ``overlap`` field, or for
#: FlashAttention the word in its techniques or notes
_STATED = {"overlap_grad_reduce": "--overlap-grad-reduce",
           "overlap_param_gather": "--overlap-param-gather",
           "tp_comm_overlap": "--tp-comm-overlap", "flash_attn": "flash"}


#: async TP named in a plan's techniques (lower case): "tp(async)", "asynctp", "async tp",
#: "async-tp"
_ASYNC_TP = re.compile(r"tp\s*\(\s*async\s*\)|async[\s_-]*tp")


def stated_plan_switches(c: dict, fw: FrameworkProfile, tp_sp: bool, notes: list[str]) -> dict[str, bool]:
    """FlashAttention and the overlap switches of an entry: what the source states (its
    ``overlap`` flags, FlashAttention named in its techniques or notes), else the stack's
    default, stated as an assumption with the default's source
    (``FrameworkProfile.default_sources``). A switch the entry's plan states as a boolean
    field of its own name (``plan.tp_comm_overlap: false``: a source that lists the overlap
    as something the run did not have) is taken as stated, on only where the stack can run it.
    TP overlap needs TP with sequence parallelism (Transformer Engine's userbuffers):
    ``tp_sp`` is ``plan.parse.tp_overlap_default(True, tp, sp)``, the one rule."""
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
