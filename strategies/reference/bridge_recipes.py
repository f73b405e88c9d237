"""The MoE options NVIDIA's Megatron-Bridge performance recipes run, for the published rows
whose parallel layout is the recipe's.

NVIDIA's performance tables (Megatron-Bridge ``docs/performance-summary*.md``) give each run's
parallel sizes but not its MoE switches; the recipes that produced them do
(``src/megatron/bridge/perf_recipes/<family>/<system>/<model>.py``, read at
NVIDIA-NeMo/Megatron-Bridge commit 067f987df03b, 2026-08-22): whether Megatron-Core's
expert-parallel communication overlap runs (``comm_overlap.overlap_moe_expert_parallel_comm``,
set directly or by the helpers ``_enable_deepseek_full_iteration_mxfp8`` in
``perf_recipes/deepseek/common.py`` and ``_enable_hybridep_full_iteration_mxfp8`` in
``perf_recipes/qwen/common.py``), the token dispatcher (``moe_token_dispatcher_type``
alltoall, or flex with ``moe_flex_dispatcher_backend`` deepep / hybridep) and the expert
tensor-parallel size (``expert_tensor_parallel_size``; Qwen3-235B's base recipe,
``recipes/qwen/h100/qwen3_moe.py``, sets 1).

A recipe at that commit is later than the containers the tables were measured with
(25.11, 26.04.01), so it is applied to a row only when the row's stated layout (tp, pp,
virtual stages, ep, micro-batch, global batch), GPU, GPU count and precision are the
recipe's; a row the recipe no longer matches keeps the stack's defaults. What is applied is
stated with every case (``strategies.reference.cases``). Pure data.
"""
from __future__ import annotations

from dataclasses import dataclass

_REPO = "NVIDIA-NeMo/Megatron-Bridge@067f987df03b src/megatron/bridge/"


@dataclass(frozen=True)
class MoeRecipe:
    """One recipe: the row it fits and the MoE options it runs.

    ``layout``: ``(tp, pp, vpp, ep, mbs, gbs)`` (vpp 1 without interleaving);
    ``dispatcher``: ``"alltoall"``, ``"deepep"`` or ``"hybridep"``; ``etp``: None where
    the recipe leaves Megatron's default (= tp)."""

    model: str
    gpu: str
    n_gpus: int
    precision: str
    layout: tuple[int, int, int, int, int, int]
    ep_overlap: bool
    dispatcher: str
    source: str
    etp: int | None = None


def _r(model, gpu, n, prec, layout, overlap, dispatcher, path, fn, etp=None) -> MoeRecipe:
    return MoeRecipe(model, gpu, n, prec, layout, overlap, dispatcher,
                     f"{_REPO}{path} {fn}", etp)


_DS, _QW, _GO = "perf_recipes/deepseek", "perf_recipes/qwen", "perf_recipes/gpt_oss"

RECIPES: tuple[MoeRecipe, ...] = (
    # DeepSeek-V3 (MXFP8: _enable_deepseek_full_iteration_mxfp8 turns the overlap on with
    # HybridEP; B200 sets DeepEP and the overlap itself)
    _r("deepseek-v3", "GB300", 256, "mxfp8", (1, 2, 8, 32, 1, 4096), True, "hybridep",
       f"{_DS}/gb300/deepseek_v3.py", "deepseek_v3_pretrain_256gpu_gb300_fp8mx_config"),
    _r("deepseek-v3", "GB200", 256, "mxfp8", (1, 4, 4, 64, 1, 4096), True, "hybridep",
       f"{_DS}/gb200/deepseek_v3.py", "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config"),
    _r("deepseek-v3", "B300", 256, "mxfp8", (1, 8, 2, 8, 1, 4096), True, "hybridep",
       f"{_DS}/b300/deepseek_v3.py", "deepseek_v3_pretrain_256gpu_b300_fp8mx_config"),
    _r("deepseek-v3", "B200", 256, "mxfp8", (1, 8, 2, 32, 1, 4096), True, "deepep",
       f"{_DS}/b200/deepseek_v3.py", "deepseek_v3_pretrain_256gpu_b200_fp8mx_config"),
    _r("deepseek-v3", "B200", 256, "bf16", (1, 16, 1, 8, 1, 4096), False, "alltoall",
       f"{_DS}/b200/deepseek_v3.py", "deepseek_v3_pretrain_256gpu_b200_bf16_config"),
    # Qwen3-235B-A22B (MXFP8: _enable_hybridep_full_iteration_mxfp8; H100: the overlap set
    # in its CommOverlapConfig, expert TP 1 from the base recipe)
    _r("qwen3-235b-a22b", "GB300", 256, "mxfp8", (1, 4, 12, 32, 2, 8192), True, "hybridep",
       f"{_QW}/gb300/qwen3_moe.py", "qwen3_235b_a22b_pretrain_256gpu_gb300_fp8mx_config"),
    _r("qwen3-235b-a22b", "GB200", 256, "mxfp8", (1, 8, 3, 32, 1, 8192), True, "hybridep",
       f"{_QW}/gb200/qwen3_moe.py", "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config"),
    _r("qwen3-235b-a22b", "B300", 256, "mxfp8", (1, 8, 3, 8, 2, 8192), True, "hybridep",
       f"{_QW}/b300/qwen3_moe.py", "qwen3_235b_a22b_pretrain_256gpu_b300_fp8mx_config"),
    _r("qwen3-235b-a22b", "B200", 256, "mxfp8", (1, 8, 3, 8, 1, 8192), True, "hybridep",
       f"{_QW}/b200/qwen3_moe.py", "qwen3_235b_a22b_pretrain_256gpu_b200_fp8mx_config"),
    _r("qwen3-235b-a22b", "H100 SXM", 256, "fp8", (2, 8, 4, 32, 1, 8192), True, "alltoall",
       f"{_QW}/h100/qwen3_moe.py", "qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config",
       etp=1),
    # Qwen3-30B-A3B
    _r("qwen3-30b-a3b", "GB300", 8, "mxfp8", (1, 1, 1, 8, 8, 512), True, "hybridep",
       f"{_QW}/gb300/qwen3_moe.py", "qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config"),
    _r("qwen3-30b-a3b", "GB200", 8, "mxfp8", (1, 1, 1, 8, 4, 512), True, "hybridep",
       f"{_QW}/gb200/qwen3_moe.py", "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config"),
    _r("qwen3-30b-a3b", "B300", 8, "mxfp8", (1, 1, 1, 8, 8, 512), True, "hybridep",
       f"{_QW}/b300/qwen3_moe.py", "qwen3_30b_a3b_pretrain_8gpu_b300_fp8mx_config"),
    _r("qwen3-30b-a3b", "B200", 8, "mxfp8", (1, 1, 1, 8, 4, 512), True, "hybridep",
       f"{_QW}/b200/qwen3_moe.py", "qwen3_30b_a3b_pretrain_8gpu_b200_fp8mx_config"),
    _r("qwen3-30b-a3b", "H100 SXM", 16, "fp8", (1, 1, 1, 16, 1, 1024), False, "hybridep",
       f"{_QW}/h100/qwen3_moe.py", "qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config"),
    # gpt-oss-120b (BF16)
    _r("gpt-oss-120b", "GB300", 64, "bf16", (1, 1, 1, 64, 4, 1280), False, "alltoall",
       f"{_GO}/gb300/gpt_oss.py", "gpt_oss_120b_pretrain_64gpu_gb300_bf16_config"),
    _r("gpt-oss-120b", "GB200", 64, "bf16", (1, 1, 1, 64, 4, 1280), True, "alltoall",
       f"{_GO}/gb200/gpt_oss.py", "gpt_oss_120b_pretrain_64gpu_gb200_bf16_config"),
    _r("gpt-oss-120b", "B300", 64, "bf16", (1, 1, 1, 8, 4, 1280), False, "hybridep",
       f"{_GO}/b300/gpt_oss.py", "gpt_oss_120b_pretrain_64gpu_b300_bf16_config"),
    _r("gpt-oss-120b", "B200", 64, "bf16", (1, 1, 1, 8, 4, 1280), False, "alltoall",
       f"{_GO}/b200/gpt_oss.py", "gpt_oss_120b_pretrain_64gpu_b200_bf16_config"),
    _r("gpt-oss-120b", "H100 SXM", 64, "bf16", (1, 4, 1, 8, 1, 1280), False, "alltoall",
       f"{_GO}/h100/gpt_oss.py", "gpt_oss_120b_pretrain_64gpu_h100_bf16_config"),
)


def recipe_for(entry: dict) -> MoeRecipe | None:
    """The recipe of a published entry (a NVIDIA Megatron-Bridge row), or None: the model,
    GPU, GPU count, precision and layout must all be the recipe's."""
    src = entry.get("source") or {}
    if "megatron-bridge" not in str(src.get("ref") or "").lower():
        return None
    pl, hw = entry.get("plan") or {}, entry.get("hardware") or {}
    layout = tuple(int(pl.get(k) or d) for k, d in (
        ("tp", 1), ("pp", 1), ("virtual_stages", 1), ("ep", 1), ("microbatch", 0),
        ("global_batch", 0)))
    key = ((entry.get("model") or {}).get("name"), hw.get("gpu"), hw.get("n_gpus"),
           entry.get("precision"), layout)
    for r in RECIPES:
        if (r.model, r.gpu, r.n_gpus, r.precision, r.layout) == key:
            return r
    return None
