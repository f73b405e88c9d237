"""The software stack a published entry ran, for the reference reader
(``strategies.reference.cases``): its ``FrameworkProfile`` by source (``framework_of``) and
the variants the entry's facts or statements select, each said in its notes: the loss of a
compiled torchtitan run's date, MLA's down projections and the Transformer Engine release by
NeMo container, the stated attention kernel, CP exchange, optimizer and launch environment,
fused grouped MLP and FP8 attention.
"""
from __future__ import annotations

import re
from dataclasses import replace

from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.stacks.megatron import MEGATRON_LM_2021
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.variants import with_fp8_attention, with_fused_grouped_mlp
from strategies.launch_blocking import SYNC_LAUNCH_GAP_S, with_launch_blocking
from strategies.model import ModelSpec
from strategies.plan import Plan
from strategies.reference.stated_switches import stated_bool
from strategies.reference.text import (attention_kernel, bf16_optimizer, cp_comm_type,
                                        framework_name, is_flex_attention, launch_blocking,
                                        nemo_container)
from topologies.gpus import GPU


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


#: torchtitan's benchmark files carry their month in the name (``llama3_h100_202412_…``,
#: ``asyncTP_llama3_h100_2025-06_…``)
_BENCH_MONTH = re.compile(r"benchmarks/\S*?(20\d\d)-?(0[1-9]|1[0-2])[_.]")


#: the month torchtitan began compiling the loss with the model (bbb1b616e, 2025-04-02;
#: before it, e8977b007 2024-12-18 to d1f62be73: "TODO: compiling loss function causes CUDA
#: errors, turning off for now")
TORCHTITAN_LOSS_COMPILED_FROM = (2025, 4)


def with_loss_of_its_date(c: dict, fw: FrameworkProfile, notes: list[str]) -> FrameworkProfile:
    """A compiled torchtitan run dated (its benchmark file's month) before torchtitan
    compiled the loss keeps the eager loss's memory (``TORCHTITAN.loss``, 12 bytes per logit
    element) instead of the compiled one's (4, ``framework.TORCHTITAN_COMPILED_LOSS``), said
    in ``notes``; undated runs and other stacks are left as they are (docs/calibration.md
    §5.74)."""
    from strategies.stacks.pytorch import TORCHTITAN
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


#: the Transformer Engine release each NeMo container ships, by the container's year and month
#: (``FrameworkProfile.te_version``), as NVIDIA's "Software Component Versions" tables state
#: it (docs/calibration.md §5.122); a repository's CI or installer pin is no source (NeMo
#: v2.0.0 pins TE 7d576ed, 1.8.0.dev0, yet container 24.09 ships TE 1.10; NeMo r2.5.0's
#: manifest pins b97c2bf, 2.6.0, yet 25.09 ships 2.7.0)
NEMO_CONTAINER_TE: dict[str, tuple[int, int]] = {
    # NeMo Framework User Guide 24.09, softwarecomponentversions.html: "1.8.0.dev0", "1.10"
    "24.07": (1, 8), "24.09": (1, 10),
    # Megatron-Bridge docs/releases/software-versions.md ("NeMo Framework 25.09" ... "26.06"):
    # "2.7.0", "2.9", "2.12", "2.14" ("2.14+71bbefb"), "2.16"
    "25.09": (2, 7), "25.11": (2, 9), "26.02": (2, 12), "26.04": (2, 14), "26.06": (2, 16)}
#: containers whose TE release no NVIDIA page in reach states (24.12, 25.02, 25.04, 25.07:
#: the 24.09 page stops at 24.09, Megatron-Bridge's starts at 25.09): a row naming one keeps
#: ``te_version`` None, the newest releases' rules, said in its notes (§5.122)
TE_UNDOCUMENTED = "release not in NVIDIA's component tables: the newest releases' rules"


def mla_down_layout(mcore: tuple[int, int]) -> str:
    """``FrameworkProfile.mla_down_proj`` of a Megatron-Core release: ``"column"`` from
    core_v0.12.0 to v0.13.1 (NVIDIA/Megatron-LM 1c425a8313, 2025-02-24, is in core_v0.12.0
    and v0.13.1, 720c8b40d8 of 2025-07-29 first in core_v0.14.0), else ``"replicated"``."""
    return "column" if (0, 12) <= tuple(mcore) < (0, 14) else "replicated"


def with_mla_layout(c: dict, fw: FrameworkProfile, model: ModelSpec,
                     notes: list[str]) -> FrameworkProfile:
    """A Megatron-Core stack's MLA down projections as the row's NeMo container ran them
    (``NEMO_CONTAINER_MCORE``, ``mla_down_layout``), said in ``notes``; rows without MLA,
    on other stacks or naming no known container keep the profile's (docs/calibration.md
    §5.85)."""
    if not model.is_mla or fw.name not in ("nemo", "megatron-core"):
        return fw
    tag = nemo_container(c)
    if tag not in NEMO_CONTAINER_MCORE:
        return fw
    v = NEMO_CONTAINER_MCORE[tag]
    layout = mla_down_layout(v)
    notes.append(f"MLA down projections {layout} (NeMo {tag} container: Megatron-Core "
                 f"{v[0]}.{v[1]}; column-parallel in core_v0.12.0-v0.13.1, 1c425a8313 to "
                 "720c8b40d8)")
    return replace(fw, mla_down_proj=layout)


def with_te_version(c: dict, fw: FrameworkProfile, notes: list[str]) -> FrameworkProfile:
    """A Megatron-Core stack with the Transformer Engine release of the NeMo container the
    row names (``NEMO_CONTAINER_TE``, ``FrameworkProfile.te_version``), said in ``notes``;
    other stacks and rows naming no container keep the profile's; a row naming a container
    whose release is not documented keeps it too (None: the newest releases' rules), said."""
    if fw.name not in ("nemo", "megatron-core"):
        return fw
    tag = nemo_container(c)
    if tag is None:
        return fw
    if tag not in NEMO_CONTAINER_TE:
        notes.append(f"Transformer Engine of the NeMo {tag} container: {TE_UNDOCUMENTED}")
        return fw
    v = NEMO_CONTAINER_TE[tag]
    notes.append(f"Transformer Engine {v[0]}.{v[1]} (NeMo {tag} container)")
    return replace(fw, te_version=v)


def with_stated_kernel(fw: FrameworkProfile, pl: dict, notes: list[str]) -> FrameworkProfile:
    """The stack ``fw`` running the fused attention kernel the entry's ``plan.attn_impl``
    names (``reference.text.attention_kernel``), stated as an assumption. A kernel of the
    FlashAttention-1 class keeps the stack's kernel, said so: its published bars
    (``cost.attention_fa1``, framework kernel ``"fa1"``) are below the rate the MosaicML runs
    prove at long sequences and make the 97 runs worse (docs/calibration.md §3.8, §5.140)."""
    said = pl.get("attn_impl")
    kernel = attention_kernel(said)
    if fw.elementwise_kernels == "eager_te" and is_flex_attention(said):
        notes.append("FlexAttention's q, k, v and output layout copies (stated: "
                     f"{said.split(' (')[0]!r}; docs/calibration.md §5.157)")
        fw = replace(fw, elementwise_kernels="eager_flex")
    if kernel is None:
        if said:
            notes.append(f"attention kernel {fw.attention_kernel} ({fw.name} default; "
                         f"attn_impl {said!r} names no kernel)")
        return fw
    if kernel == "fa1":
        notes.append(f"attention kernel {fw.attention_kernel} ({fw.name} default): the stated "
                     f"{said.split(' (')[0]!r} is a FlashAttention-1-class kernel, not applied "
                     "(docs/calibration.md §5.140)")
        return fw
    notes.append(f"attention kernel {kernel} (stated: {said})")
    return replace(fw, attention_kernel=kernel)


def with_stated_cp(plan: Plan, fw: FrameworkProfile, pl: dict, notes: list[str]) -> Plan:
    """``plan`` running the context-parallel exchange the entry's ``plan.cp_comm_type`` names
    (plan field ``cp_comm``, ``reference.text.cp_comm_type``: the ring, the exposed K/V
    all-gather or the QKV/O all-to-all), said so; an exchange the model has no form for, or one stack ``fw`` does not
    run (``FrameworkProfile.cp_comms``: PyTorch's ``context_parallel``, ``cp_impl`` "torch",
    has its own all-gather rotater, ``strategies.cost.ring_attention``), keeps the stack's,
    said so. docs/calibration.md §5.134."""
    said = pl.get("cp_comm_type")
    if not said:
        return plan
    comm = cp_comm_type(said)
    if comm is None or comm not in fw.cp_comms:
        notes.append(f"cp exchange {fw.cp_impl} ({fw.name} default; cp_comm_type {said!r} "
                     "not modelled for it)")
        return plan
    notes.append(f"cp_comm={comm} (stated: {said})")
    return replace(plan, cp_comm=comm)


def with_stated_env(fw: FrameworkProfile, pl: dict, notes: list[str]) -> FrameworkProfile:
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


#: BigScience's tr11 prototypes (2022-02) ran its Megatron-DeepSpeed fork after 541b967f
#: (2022-02-17): ``_get_params_for_weight_decay_optimization`` returns the weight-decay list
#: in two optimizer groups ("temp hack to workaround the crash in apex FusedAdam's
#: multi_tensor_applier"), each of which DeepSpeed's ZeRO flattens and partitions on its own
BIGSCIENCE_TR11 = "bigscience-workshop/bigscience train/tr11-"


def with_source_fork(fw: FrameworkProfile, c: dict, notes: list[str]) -> FrameworkProfile:
    """The stack ``fw`` with BigScience's halved weight-decay optimizer groups
    (``zero_buffers`` ``"deepspeed-halved"``; ``memory.deepspeed_zero.optimizer_groups``)
    where the entry's source is a tr11 run (``BIGSCIENCE_TR11``) under DeepSpeed's ZeRO
    optimizer without its BF16_Optimizer, said so; otherwise ``fw``."""
    ref = str((c.get("source") or {}).get("ref") or "")
    if fw.zero_buffers != "deepspeed" or fw.bf16_optimizer or not ref.startswith(BIGSCIENCE_TR11):
        return fw
    notes.append("optimizer groups: BigScience's Megatron-DeepSpeed splits the weight-decay "
                 "parameters in two (541b967f, 2022-02-17; docs/calibration.md §5.129)")
    return replace(fw, zero_buffers="deepspeed-halved")


def with_stated_grouped_mlp(fw: FrameworkProfile, pl: dict, dtype: str,
                             notes: list[str]) -> FrameworkProfile:
    """The stack ``fw`` with its routed experts in Transformer Engine's fused grouped MLP
    where the entry's ``plan.fused_grouped_mlp`` says its config ran it (Megatron-Bridge's
    ``cutedsl_fused_grouped_mlp``; ``variants.with_fused_grouped_mlp``), said so; a
    precision or stack the rule refuses keeps the stack's experts, said so. SpecError for a
    value that is not a boolean."""
    said = stated_bool(pl, "fused_grouped_mlp")
    if not said:
        return fw
    try:
        fused = with_fused_grouped_mlp(fw, dtype)
    except SpecError as e:
        notes.append(f"fused_grouped_mlp stated but not modelled ({e})")
        return fw
    notes.append("routed experts in Transformer Engine's fused grouped MLP (stated: "
                 "fused_grouped_mlp): no separate activation casts, no Fp8Padding copies, one "
                 "kernel per grouped GEMM, the clamp inside it (docs/calibration.md §5.90)")
    return fused


def with_stated_fp8_attention(fw: FrameworkProfile, pl: dict, dtype: str, gpu: GPU,
                               notes: list[str]) -> FrameworkProfile:
    """The stack ``fw`` with its attention core in Transformer Engine's MXFP8 fused attention
    where the entry's ``plan.fp8_attention`` says its config ran it (Megatron-Bridge's
    ``fp8_dot_product_attention``; ``framework.with_fp8_attention``), said so; a precision,
    stack or chip the rule refuses keeps BF16 attention, said so. SpecError for a value that
    is not a boolean."""
    said = stated_bool(pl, "fp8_attention")
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
