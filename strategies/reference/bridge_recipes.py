"""The MoE options NVIDIA's Megatron-Bridge performance configs ran, for the published rows
whose parallel layout is the config's.

NVIDIA's performance tables (Megatron-Bridge ``docs/performance-summary*.md``) give each run's
parallel sizes but not its MoE switches; the configs that produced them do. For the 26.04.01
container's rows: Megatron-Bridge v0.4.2 (tag, commit c810129341a8, 2026-05-28; its
configs reproduce those rows' layouts, where v0.4.1's and the 2026-08 recipes differ),
``scripts/performance/configs/<family>/*_workload_base_configs.py``, the ``*_V2`` configs
(``*_V1`` for Qwen3-30B-A3B, which has no V2), each a ``WorkloadBaseConfig``
(``scripts/performance/utils/utils.py``: ``moe_a2a_overlap`` default False,
``moe_flex_dispatcher_backend`` default None = Megatron's alltoall dispatcher, which
``utils/overrides.py`` sets when none is named; ``moe_a2a_overlap`` turns on
``overlap_moe_expert_parallel_comm`` there). Read per config: the expert-parallel overlap,
the token dispatcher (alltoall, DeepEP or HybridEP) and ``expert_tensor_parallel_size``.

A config is applied to a row only when the row's model, GPU, GPU count, precision and
stated layout (tp, pp, virtual stages, ep, micro-batch, global batch) are all the config's
(``recipe_for``); a row no config fits (the 25.11 container's, whose v0.2 configs name other
batches) keeps the stack's defaults. What is applied is stated with every case
(``strategies.reference.cases``). Pure data.
"""
from __future__ import annotations

from dataclasses import dataclass

_REPO = "NVIDIA-NeMo/Megatron-Bridge@v0.4.2 (c810129341a8) scripts/performance/configs/"
_DS = "deepseek/deepseek_workload_base_configs.py"
_QW = "qwen/qwen3_workload_base_configs.py"
_GO = "gpt_oss/gpt_oss_workload_base_configs.py"


@dataclass(frozen=True)
class MoeRecipe:
    """One config: the row it fits and the MoE options it runs.

    ``layout``: ``(tp, pp, vpp, ep, mbs, gbs)`` (vpp 1 without interleaving);
    ``dispatcher``: ``"alltoall"``, ``"deepep"`` or ``"hybridep"`` (``plan.DISPATCHERS``);
    ``etp``: the config's expert tensor-parallel size (None: Megatron's default, = tp);
    ``recompute_modules``: the modules the config recomputes selectively
    (``recompute_modules``; None: not read from the config, the stack's default)."""

    model: str
    gpu: str
    n_gpus: int
    precision: str
    layout: tuple[int, int, int, int, int, int]
    ep_overlap: bool
    dispatcher: str
    source: str
    etp: int | None = None
    recompute_modules: tuple[str, ...] | None = None


def _r(model: str, gpu: str, n: int, prec: str, layout: tuple, overlap: bool, dispatcher: str,
       path: str, name: str, etp: int | None = None,
       recompute_modules: tuple[str, ...] | None = None) -> MoeRecipe:
    return MoeRecipe(model, gpu, n, prec, layout, overlap, dispatcher,
                     f"{_REPO}{path} {name}", etp, recompute_modules)


#: gpt-oss's GB200, B200 and H100 configs (and the FP8 aliases of them) recompute the norms
#: and the experts' activation: ``recompute_modules=["layernorm", "moe_act"]`` in
#: ``GPT_OSS_120B_PRETRAIN_CONFIG_{GB200,B200,H100}_BF16_V1`` (v0.4.2
#: ``gpt_oss_workload_base_configs.py``), which the V2 configs inherit
_GO_RC = ("layernorm", "moe_act")


#: (model, GPU, GPUs, precision, (tp, pp, vpp, ep, mbs, gbs), moe_a2a_overlap, dispatcher,
#: file, config, expert TP), as the v0.4.2 configs resolve
RECIPES: tuple[MoeRecipe, ...] = (
    _r("deepseek-v3", "GB300", 256, "bf16", (1, 4, 4, 64, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_BF16_V2", 1),
    _r("deepseek-v3", "GB300", 256, "fp8", (1, 2, 8, 32, 2, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_CS_V2", 1),
    _r("deepseek-v3", "GB300", 256, "mxfp8", (1, 2, 8, 32, 2, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2", 1),
    _r("deepseek-v3", "GB200", 256, "bf16", (1, 4, 4, 64, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_BF16_V2", 1),
    _r("deepseek-v3", "GB200", 256, "fp8", (1, 4, 4, 64, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_CS_V2", 1),
    _r("deepseek-v3", "GB200", 256, "mxfp8", (1, 4, 4, 64, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2", 1),
    _r("deepseek-v3", "B300", 256, "bf16", (1, 8, 1, 8, 2, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_BF16_V2", 1),
    _r("deepseek-v3", "B300", 256, "fp8", (1, 8, 1, 8, 2, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_CS_V2", 1),
    _r("deepseek-v3", "B300", 256, "mxfp8", (1, 8, 1, 8, 2, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2", 1),
    _r("deepseek-v3", "B200", 256, "bf16", (1, 16, 1, 8, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_BF16_V2", 1),
    _r("deepseek-v3", "B200", 256, "fp8", (1, 16, 1, 8, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_CS_V2", 1),
    _r("deepseek-v3", "B200", 256, "mxfp8", (1, 8, 2, 32, 1, 4096), True, "deepep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2", 1),
    _r("deepseek-v3", "H100 SXM", 1024, "bf16", (2, 8, 4, 64, 1, 16384), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_H100_BF16_V2", 1),
    _r("deepseek-v3", "H100 SXM", 1024, "fp8", (2, 8, 4, 64, 1, 16384), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_H100_FP8_CS_V2", 1),
    _r("qwen3-235b-a22b", "GB300", 256, "bf16", (1, 4, 1, 32, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_BF16_V2", 1),
    _r("qwen3-235b-a22b", "GB300", 256, "fp8", (1, 4, 1, 32, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_CS_V2", 1),
    _r("qwen3-235b-a22b", "GB300", 256, "mxfp8", (1, 4, 12, 32, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2", 1),
    _r("qwen3-235b-a22b", "GB200", 256, "bf16", (1, 8, 1, 8, 1, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_BF16_V2", 1),
    _r("qwen3-235b-a22b", "GB200", 256, "fp8", (1, 8, 1, 32, 1, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_CS_V2", 1),
    _r("qwen3-235b-a22b", "GB200", 256, "mxfp8", (1, 8, 3, 32, 1, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2", 1),
    _r("qwen3-235b-a22b", "B300", 256, "bf16", (1, 8, 1, 8, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_BF16_V2", 1),
    _r("qwen3-235b-a22b", "B300", 256, "fp8", (1, 8, 1, 8, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_CS_V2", 1),
    _r("qwen3-235b-a22b", "B300", 256, "mxfp8", (1, 8, 1, 8, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2", 1),
    _r("qwen3-235b-a22b", "B200", 256, "bf16", (1, 8, 4, 8, 1, 8192), False, "alltoall", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_BF16_V2", 1),
    _r("qwen3-235b-a22b", "B200", 256, "fp8", (1, 8, 1, 8, 1, 8192), False, "alltoall", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_CS_V2", 1),
    _r("qwen3-235b-a22b", "B200", 256, "mxfp8", (1, 8, 1, 8, 1, 8192), False, "alltoall", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_MX_V2", 1),
    _r("qwen3-235b-a22b", "H100 SXM", 256, "bf16", (2, 8, 4, 32, 1, 8192), True, "alltoall", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_BF16_V2", 1),
    _r("qwen3-235b-a22b", "H100 SXM", 256, "fp8", (2, 8, 4, 32, 1, 8192), True, "alltoall", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2", 1),
    _r("qwen3-30b-a3b", "GB300", 8, "bf16", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_BF16_V1", 1),
    _r("qwen3-30b-a3b", "GB300", 8, "fp8", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_CS_V1", 1),
    _r("qwen3-30b-a3b", "GB300", 8, "mxfp8", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1", 1),
    _r("qwen3-30b-a3b", "GB200", 8, "bf16", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_BF16_V1", 1),
    _r("qwen3-30b-a3b", "GB200", 8, "fp8", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_CS_V1", 1),
    _r("qwen3-30b-a3b", "GB200", 8, "mxfp8", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1", 1),
    _r("qwen3-30b-a3b", "B300", 8, "bf16", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_BF16_V1", 1),
    _r("qwen3-30b-a3b", "B300", 8, "fp8", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_CS_V1", 1),
    _r("qwen3-30b-a3b", "B300", 8, "mxfp8", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1", 1),
    _r("qwen3-30b-a3b", "B200", 8, "bf16", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_BF16_V1", 1),
    _r("qwen3-30b-a3b", "B200", 8, "fp8", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_CS_V1", 1),
    _r("qwen3-30b-a3b", "B200", 8, "mxfp8", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1", 1),
    _r("qwen3-30b-a3b", "H100 SXM", 16, "bf16", (1, 1, 1, 16, 1, 1024), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_BF16_V1", 1),
    _r("qwen3-30b-a3b", "H100 SXM", 16, "fp8", (1, 1, 1, 16, 1, 1024), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1", 1),
    _r("gpt-oss-120b", "GB300", 64, "bf16", (1, 1, 1, 64, 4, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_V2", 1),
    _r("gpt-oss-120b", "GB200", 64, "bf16", (1, 1, 1, 64, 4, 1280), True, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2", 1, _GO_RC),
    _r("gpt-oss-120b", "B300", 64, "bf16", (1, 1, 1, 8, 4, 1280), False, "hybridep", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2", 1),
    _r("gpt-oss-120b", "B200", 64, "bf16", (1, 1, 1, 8, 4, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2", 1, _GO_RC),
    _r("gpt-oss-120b", "H100 SXM", 64, "bf16", (1, 4, 1, 8, 1, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2", 1, _GO_RC),
    _r("gpt-oss-120b", "GB300", 64, "mxfp8", (1, 1, 1, 64, 4, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2", 1),
    _r("gpt-oss-120b", "GB200", 64, "mxfp8", (1, 1, 1, 64, 4, 1280), True, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2", 1, _GO_RC),
    _r("gpt-oss-120b", "B300", 64, "mxfp8", (1, 1, 1, 8, 4, 1280), False, "hybridep", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_B300_FP8_MX_V2", 1),
    _r("gpt-oss-120b", "B200", 64, "mxfp8", (1, 1, 1, 8, 4, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_B200_FP8_MX_V2", 1, _GO_RC),
    _r("gpt-oss-120b", "H100 SXM", 64, "fp8", (1, 4, 1, 8, 1, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_H100_FP8_CS_V2", 1, _GO_RC),
)


def recipe_for(entry: dict) -> MoeRecipe | None:
    """The config of a published entry (a NVIDIA Megatron-Bridge row of the 26.04.01
    container), or None: the model, GPU, GPU count, precision and layout must all be the
    config's."""
    src = entry.get("source") or {}
    if "megatron-bridge" not in str(src.get("ref") or "").lower():
        return None
    if "26.04" not in str(src.get("table") or ""):
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


#: Where Megatron-Bridge's performance scripts reduce gradients in the parameter dtype: every
#: ``*_llm_pretrain.py`` of the model families in the reference sets
#: ``cfg.mixed_precision.grad_reduce_in_fp32 = False`` and ``cfg.ddp.grad_reduce_in_fp32 =
#: False`` (so the DDP gradient buffer, its accumulation and its data-parallel reduction are
#: bf16), in the v0.2.2 scripts the 25.11 container's rows were run with and in v0.4.2's;
#: the 26.08 recipes (``src/megatron/bridge/perf_recipes/_common.py`` at 067f987df03b) too
GRAD_REDUCE_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge v0.2.2 and v0.4.2 (c810129341a8) "
                      "scripts/performance/configs/{llama3,llama31,llama,qwen3,qwen,deepseek,"
                      "gpt_oss}/*_llm_pretrain.py, 067f987df03b src/megatron/bridge/"
                      "perf_recipes/_common.py: grad_reduce_in_fp32 = False")
#: the containers whose published rows those scripts produced
GRAD_REDUCE_CONTAINERS = ("25.11", "26.04", "26.08")


def grad_reduce_in_fp32(entry: dict) -> bool | None:
    """False for a published row of NVIDIA's Megatron-Bridge performance tables of the
    ``GRAD_REDUCE_CONTAINERS`` containers (``GRAD_REDUCE_SOURCE``); None (the stack's
    default) for any other entry."""
    src = entry.get("source") or {}
    if "megatron-bridge" not in str(src.get("ref") or "").lower():
        return None
    table = str(src.get("table") or "")
    return False if any(c in table for c in GRAD_REDUCE_CONTAINERS) else None
