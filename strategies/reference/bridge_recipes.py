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

For the 25.11 container's rows: Megatron-Bridge v0.2.0 (tag, commit 7af9601c9da7,
2025-11-26; the version ``docs/releases/software-versions.md`` names for NeMo Framework 25.11),
``scripts/performance/configs/<family>/workload_base_configs.py`` and the model recipes under
``src/megatron/bridge/recipes/``; most of that table's rows ran other batches or sizes than
these configs name, so only the rows a config fits exactly take one (``RECIPES_2511``, which
holds the config of every MoE row's GPU and precision; ``preset_for`` names the unapplied
one in a row's assumptions).

For the 26.04 container's rows (not 26.04.01): Megatron-Bridge v0.4.0 (the version
``docs/releases/software-versions.md`` names for NeMo Framework 26.04), whose Qwen3-235B-A22B
configs differ from v0.4.2's only in B300's token dispatcher, and whose DeepSeek-V3 B200/B300
MXFP8 configs ran pp 16, ep 8 with HybridEP (``RECIPES_2604``).

A config is applied to a row only when the row's container (``MoeRecipe.container``, the
``(<container> NeMo container)`` its ``source.table`` names, ``table_container``), model,
GPU, GPU count, precision and stated layout (tp, pp, virtual stages, ep, micro-batch, global
batch) are all the config's (``recipe_for``); a row no
config fits keeps the stack's defaults and whatever its own plan states. What is applied is
stated with every case (``strategies.reference.cases``). The Llama 3 70B / 3.1 405B rows of the
26.04.01 and 26.06 tables take the Llama scripts' NVFP4 overlap settings instead
(``perf_harness.llama_switches``). A config's record: ``strategies.reference.moe_recipe``.
Pure data.
"""
from __future__ import annotations

from dataclasses import replace

from strategies.reference.moe_recipe import CONTAINERS, MoeRecipe, table_container

_REPO = "NVIDIA-NeMo/Megatron-Bridge@v0.4.2 (c810129341a8) scripts/performance/configs/"
_DS = "deepseek/deepseek_workload_base_configs.py"
_QW = "qwen/qwen3_workload_base_configs.py"
_GO = "gpt_oss/gpt_oss_workload_base_configs.py"


def _r(model: str, gpu: str, n: int, prec: str, layout: tuple, overlap: bool, dispatcher: str,
       path: str, name: str, etp: int | None = None,
       recompute_modules: tuple[str, ...] | None = None,
       graph: tuple[str | None, tuple[str, ...] | None] = (None, None),
       lines: str = "", pp_layout: str | None = None,
       tp_comm_overlap: bool | None = None) -> MoeRecipe:
    return MoeRecipe(model, gpu, n, prec, layout, overlap, dispatcher,
                     f"{_REPO}{path} {name}", etp, recompute_modules, graph[0], graph[1],
                     lines, pp_layout, tp_comm_overlap)


#: gpt-oss's GB200, B200 and H100 configs (and the FP8 aliases of them) recompute the norms
#: and the experts' activation: ``recompute_modules=["layernorm", "moe_act"]`` in
#: ``GPT_OSS_120B_PRETRAIN_CONFIG_{GB200,B200,H100}_BF16_V1`` (v0.4.2
#: ``gpt_oss_workload_base_configs.py``), which the V2 configs inherit
_GO_RC = ("layernorm", "moe_act")
#: Transformer Engine CUDA graphs of parts of each layer, as the configs set them
#: (``cuda_graph_impl="transformer_engine"``, ``cuda_graph_scope=[...]``)
_TE_AMP = ("transformer_engine", ("attn", "moe_router", "moe_preprocess"))
_TE_MP = ("transformer_engine", ("moe_router", "moe_preprocess"))
#: ``cuda_graph_scope=[]`` with no implementation named: no graph
_NO_SCOPE = (None, ())
#: DeepSeek-V3's pipeline layouts (Megatron's layout grammar, docs/layout.md): the config's
#: ``pp_layout`` where it names one, else Megatron-Bridge's
#: ``set_deepseek_v3_pipeline_model_parallel_layout`` (``src/megatron/bridge/recipes/
#: deepseek/deepseek_v3.py`` L37-45, ``layout_map`` by (pp, vp)), which
#: ``deepseek_llm_pretrain.py`` L69-73 applies when the config names none
_DS_L4 = "Et*4|(t*4|)*14tmL"          # 16 chunks: GB300_V1 L49, B200_FP8_MX_V2 L210, map L42-44
_DS_L8 = "Et*8|(t*8|)*6t*5mL"         # (8, 1): map L40
_DS_H100 = "Et|(tt|)*30mL"            # H100_V1 L137
#: ``tp_comm_overlap``: None where the recipe leaves the stack's default; Qwen3-235B-A22B's
#: H100 recipe turns it off (``qwen3_llm_pretrain.py`` L167, ``CommOverlapConfig(
#: tp_comm_overlap=False)``), its other recipes and gpt-oss's run it only with tp > 1
#: (L63-427; ``gpt_oss_llm_pretrain.py`` L81), which the stack's default already is
#: Qwen3's configs name no ``recompute_modules``: ``set_qwen3_common_configs``
#: (``qwen/qwen3_llm_pretrain.py`` L33-35) sets ``recompute_granularity = None``, no
#: recomputation
_QW_RC = ()


#: (model, GPU, GPUs, precision, (tp, pp, vpp, ep, mbs, gbs), moe_a2a_overlap, dispatcher,
#: file, config, expert TP; recompute_modules, (cuda_graph_impl, cuda_graph_scope), the
#: file's lines that set them), as the v0.4.2 configs resolve: the one table every family's
#: recipe fields are read from
RECIPES: tuple[MoeRecipe, ...] = (
    _r("deepseek-v3", "GB300", 256, "bf16", (1, 4, 4, 64, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_BF16_V2", 1,
       ("moe_act",), _TE_AMP, "GB300_BF16_V1 L63-65", _DS_L4),
    _r("deepseek-v3", "GB300", 256, "fp8", (1, 2, 8, 32, 2, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_CS_V2", 1,
       ("mla_up_proj",), _NO_SCOPE, "GB300_V1 L52-53", _DS_L4),
    _r("deepseek-v3", "GB300", 256, "mxfp8", (1, 2, 8, 32, 2, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2", 1,
       ("mla_up_proj",), _NO_SCOPE, "GB300_V1 L52-53", _DS_L4),
    _r("deepseek-v3", "GB200", 256, "bf16", (1, 4, 4, 64, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_BF16_V2", 1,
       ("mla_up_proj",), _TE_AMP, "GB200_V1 L82-83, GB200_BF16_V1 L87", _DS_L4),
    _r("deepseek-v3", "GB200", 256, "fp8", (1, 4, 4, 64, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_CS_V2", 1,
       ("mlp",), _TE_AMP, "GB200_V1 L81-83", _DS_L4),
    _r("deepseek-v3", "GB200", 256, "mxfp8", (1, 4, 4, 64, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2", 1,
       ("mlp",), _TE_AMP, "GB200_V1 L81-83", _DS_L4),
    _r("deepseek-v3", "B300", 256, "bf16", (1, 8, 1, 8, 2, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_BF16_V2", 1,
       ("mla_up_proj",), _TE_AMP, "B300_V2 L186-188", _DS_L8),
    _r("deepseek-v3", "B300", 256, "fp8", (1, 8, 1, 8, 2, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_CS_V2", 1,
       ("mla_up_proj",), _TE_AMP, "B300_V2 L186-188", _DS_L8),
    _r("deepseek-v3", "B300", 256, "mxfp8", (1, 8, 1, 8, 2, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2", 1,
       ("mla_up_proj",), _TE_AMP, "B300_V2 L186-188", _DS_L8),
    _r("deepseek-v3", "B200", 256, "bf16", (1, 16, 1, 8, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_BF16_V2", 1,
       ("mla_up_proj",), (None, None), "B200_V1 L116; no cuda_graph_*", _DS_L4),
    _r("deepseek-v3", "B200", 256, "fp8", (1, 16, 1, 8, 1, 4096), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_CS_V2", 1,
       ("mla_up_proj",), (None, None), "B200_V1 L116; no cuda_graph_*", _DS_L4),
    _r("deepseek-v3", "B200", 256, "mxfp8", (1, 8, 2, 32, 1, 4096), True, "deepep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2", 1,
       ("mla_up_proj", "mlp"), _TE_AMP, "B200_FP8_MX_V2 L211-213", _DS_L4),
    _r("deepseek-v3", "H100 SXM", 1024, "bf16", (2, 8, 4, 64, 1, 16384), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_H100_BF16_V2", 1,
       ("mla_up_proj", "mlp"), (None, None), "H100_V1 L134; no cuda_graph_*", _DS_H100),
    _r("deepseek-v3", "H100 SXM", 1024, "fp8", (2, 8, 4, 64, 1, 16384), False, "hybridep", _DS, "DEEPSEEK_V3_PRETRAIN_CONFIG_H100_FP8_CS_V2", 1,
       ("mla_up_proj", "mlp"), (None, None), "H100_V1 L134; no cuda_graph_*", _DS_H100),
    _r("qwen3-235b-a22b", "GB300", 256, "bf16", (1, 4, 1, 32, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_BF16_V2", 1,
       _QW_RC, _TE_AMP, "GB300_BF16_V1 L62, GB300_BF16_V2 L196"),
    _r("qwen3-235b-a22b", "GB300", 256, "fp8", (1, 4, 1, 32, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_CS_V2", 1,
       _QW_RC, _TE_AMP, "GB300_BF16_V1 L62, GB300_BF16_V2 L196"),
    _r("qwen3-235b-a22b", "GB300", 256, "mxfp8", (1, 4, 12, 32, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2", 1,
       _QW_RC, _TE_AMP, "GB300_BF16_V1 L62, GB300_BF16_V2 L196"),
    _r("qwen3-235b-a22b", "GB200", 256, "bf16", (1, 8, 1, 8, 1, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_BF16_V2", 1,
       _QW_RC, _TE_AMP, "GB200_BF16_V1 L91-92"),
    _r("qwen3-235b-a22b", "GB200", 256, "fp8", (1, 8, 1, 32, 1, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_CS_V2", 1,
       _QW_RC, _TE_AMP, "GB200_FP8_CS_V1 L103-104"),
    _r("qwen3-235b-a22b", "GB200", 256, "mxfp8", (1, 8, 3, 32, 1, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2", 1,
       _QW_RC, _TE_AMP, "GB200_FP8_CS_V1 L103-104"),
    _r("qwen3-235b-a22b", "B300", 256, "bf16", (1, 8, 1, 8, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_BF16_V2", 1,
       _QW_RC, (None, None), "B300_BF16_V1 L112-120; no cuda_graph_*"),
    _r("qwen3-235b-a22b", "B300", 256, "fp8", (1, 8, 1, 8, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_CS_V2", 1,
       _QW_RC, (None, None), "B300_FP8_CS_V1 L123-131; no cuda_graph_*"),
    _r("qwen3-235b-a22b", "B300", 256, "mxfp8", (1, 8, 1, 8, 2, 8192), False, "hybridep", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2", 1,
       _QW_RC, (None, None), "B300_FP8_CS_V1 L123-131; no cuda_graph_*"),
    _r("qwen3-235b-a22b", "B200", 256, "bf16", (1, 8, 4, 8, 1, 8192), False, "alltoall", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_BF16_V2", 1,
       _QW_RC, (None, None), "B200_BF16_V1 L138-146; no cuda_graph_*"),
    _r("qwen3-235b-a22b", "B200", 256, "fp8", (1, 8, 1, 8, 1, 8192), False, "alltoall", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_CS_V2", 1,
       _QW_RC, (None, None), "B200_FP8_CS_V1 L149-156; no cuda_graph_*"),
    _r("qwen3-235b-a22b", "B200", 256, "mxfp8", (1, 8, 1, 8, 1, 8192), False, "alltoall", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_MX_V2", 1,
       _QW_RC, (None, None), "B200_FP8_CS_V1 L149-156; no cuda_graph_*"),
    _r("qwen3-235b-a22b", "H100 SXM", 256, "bf16", (2, 8, 4, 32, 1, 8192), True, "alltoall", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_BF16_V2", 1,
       _QW_RC, (None, None), "H100_BF16_V1 L163-; no cuda_graph_*; qwen3_llm_pretrain.py L167 tp_comm_overlap=False", tp_comm_overlap=False),
    _r("qwen3-235b-a22b", "H100 SXM", 256, "fp8", (2, 8, 4, 32, 1, 8192), True, "alltoall", _QW, "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2", 1,
       _QW_RC, (None, None), "H100_FP8_CS_V1 L175-; no cuda_graph_*; qwen3_llm_pretrain.py L167 tp_comm_overlap=False", tp_comm_overlap=False),
    _r("qwen3-30b-a3b", "GB300", 8, "bf16", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_BF16_V1", 1,
       _QW_RC, _TE_MP, "L325-326"),
    _r("qwen3-30b-a3b", "GB300", 8, "fp8", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_CS_V1", 1,
       _QW_RC, _TE_MP, "L335-336"),
    _r("qwen3-30b-a3b", "GB300", 8, "mxfp8", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1", 1,
       _QW_RC, _TE_MP, "FP8_CS_V1 L335-336, L340"),
    _r("qwen3-30b-a3b", "GB200", 8, "bf16", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_BF16_V1", 1,
       _QW_RC, _TE_AMP, "L348-349"),
    _r("qwen3-30b-a3b", "GB200", 8, "fp8", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_CS_V1", 1,
       _QW_RC, _TE_AMP, "L358-359"),
    _r("qwen3-30b-a3b", "GB200", 8, "mxfp8", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1", 1,
       _QW_RC, _TE_MP, "L368-369"),
    _r("qwen3-30b-a3b", "B300", 8, "bf16", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_BF16_V1", 1,
       _QW_RC, _TE_MP, "L378-379"),
    _r("qwen3-30b-a3b", "B300", 8, "fp8", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_CS_V1", 1,
       _QW_RC, _TE_MP, "L388-389"),
    _r("qwen3-30b-a3b", "B300", 8, "mxfp8", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1", 1,
       _QW_RC, _TE_MP, "FP8_CS_V1 L388-389, L393"),
    _r("qwen3-30b-a3b", "B200", 8, "bf16", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_BF16_V1", 1,
       _QW_RC, _TE_AMP, "L401-402"),
    _r("qwen3-30b-a3b", "B200", 8, "fp8", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_CS_V1", 1,
       _QW_RC, _TE_AMP, "BF16_V1 L401-402, L406"),
    _r("qwen3-30b-a3b", "B200", 8, "mxfp8", (1, 1, 1, 8, 4, 512), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1", 1,
       _QW_RC, _TE_AMP, "BF16_V1 L401-402, L409"),
    _r("qwen3-30b-a3b", "H100 SXM", 16, "bf16", (1, 1, 1, 16, 1, 1024), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_BF16_V1", 1,
       _QW_RC, _TE_MP, "L418-419"),
    _r("qwen3-30b-a3b", "H100 SXM", 16, "fp8", (1, 1, 1, 16, 1, 1024), False, "hybridep", _QW, "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1", 1,
       _QW_RC, (None, None), "L424-431; no cuda_graph_*"),
    _r("gpt-oss-120b", "GB300", 64, "bf16", (1, 1, 1, 64, 4, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_V2", 1,
       None, _TE_AMP, "GB300_BF16_V1 L49-50"),
    _r("gpt-oss-120b", "GB200", 64, "bf16", (1, 1, 1, 64, 4, 1280), True, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2", 1,
       _GO_RC, (None, None), "GB200_BF16_V1 L58; no cuda_graph_*"),
    _r("gpt-oss-120b", "B300", 64, "bf16", (1, 1, 1, 8, 4, 1280), False, "hybridep", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2", 1,
       None, _TE_AMP, "B300_BF16_V1 L66-67"),
    _r("gpt-oss-120b", "B200", 64, "bf16", (1, 1, 1, 8, 4, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2", 1,
       _GO_RC, (None, None), "B200_BF16_V1 L75; no cuda_graph_*"),
    _r("gpt-oss-120b", "H100 SXM", 64, "bf16", (1, 4, 1, 8, 1, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2", 1,
       _GO_RC, (None, None), "H100_BF16_V1 L82; no cuda_graph_*"),
    _r("gpt-oss-120b", "GB300", 64, "mxfp8", (1, 1, 1, 64, 4, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2", 1,
       None, _TE_AMP, "GB300_BF16_V1 L49-50, L129"),
    _r("gpt-oss-120b", "GB200", 64, "mxfp8", (1, 1, 1, 64, 4, 1280), True, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2", 1,
       _GO_RC, (None, None), "GB200_BF16_V1 L58, L130; no cuda_graph_*"),
    _r("gpt-oss-120b", "B300", 64, "mxfp8", (1, 1, 1, 8, 4, 1280), False, "hybridep", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_B300_FP8_MX_V2", 1,
       None, _TE_AMP, "B300_BF16_V1 L66-67, L131"),
    _r("gpt-oss-120b", "B200", 64, "mxfp8", (1, 1, 1, 8, 4, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_B200_FP8_MX_V2", 1,
       _GO_RC, (None, None), "B200_BF16_V1 L75, L132; no cuda_graph_*"),
    _r("gpt-oss-120b", "H100 SXM", 64, "fp8", (1, 4, 1, 8, 1, 1280), False, "alltoall", _GO, "GPT_OSS_120B_PRETRAIN_CONFIG_H100_FP8_CS_V2", 1,
       _GO_RC, (None, None), "H100_BF16_V1 L82, L133; no cuda_graph_*"),
)


_REPO_2511 = "NVIDIA-NeMo/Megatron-Bridge@v0.2.0 (7af9601c9da7) scripts/performance/configs/"
_DS11, _QW11, _GO11 = (f"{f}/workload_base_configs.py" for f in ("deepseek", "qwen3", "gpt_oss"))


def _r11(model: str, gpu: str, n: int, prec: str, layout: tuple, overlap: bool,
         dispatcher: str, path: str, name: str, recompute_modules: tuple[str, ...] | None,
         graph: tuple[str | None, tuple[str, ...] | None], lines: str,
         pp_layout: str | None = None) -> MoeRecipe:
    return MoeRecipe(model, gpu, n, prec, layout, overlap, dispatcher,
                     f"{_REPO_2511}{path} {name}", 1, recompute_modules, graph[0], graph[1],
                     lines, pp_layout, None, "25.11")


#: The 25.11 container's configs (Megatron-Bridge v0.2.0) of the GPU and precision of every
#: MoE row of its table that the reference files hold, each with the layout the config names
#: (``(tp, pp, vpp, ep, mbs, gbs)`` on ``num_gpus``). One fits its row exactly and is applied
#: (``recipe_for``): DeepSeek-V3 on 256 B200, the table's "w/ MTP" run (L63-74, built by
#: ``deepseek_llm_pretrain.py`` ``deepseek_v3_b200_config`` L120-144 with ``layout=None``, so
#: the recipe's ``layout_map[(16, 1)]``, ``src/megatron/bridge/recipes/deepseek/
#: deepseek_v3.py`` L240: the embedding and 4 layers, 14 stages of 4, then 1 layer, the MTP
#: module (``mtp_num_layers`` default 1, L174) and the loss). The others differ from their rows
#: in a size or the batch and are not applied (``preset_for`` names them in the row's
#: assumptions; docs/calibration.md §5.179). What each sets, at v0.2.0: ``expert_tensor_
#: parallel_size=1`` (every family's base config: deepseek L22-24, qwen3 L22-31, gpt_oss
#: L22-28); the dispatcher from ``moe_flex_dispatcher_backend`` (``hybridep`` becomes
#: Megatron's ``flex`` dispatcher on GB200/GB300 only, ``src/megatron/bridge/training/
#: flex_dispatcher_backend.py`` L54-66; none named: the model providers' ``alltoall``,
#: ``models/deepseek/deepseek_provider.py`` L76, ``models/qwen/qwen_provider.py`` L395,
#: ``models/gpt_oss/gpt_oss_provider.py`` L72, and v0.2.0's gpt-oss recipe takes no flex
#: backend at all); Qwen3 recomputes nothing (``qwen3_llm_pretrain.py`` L36
#: ``recompute_granularity = None``); v0.2.1/v0.2.2 change only Qwen3-235B-A22B's GB300 config
#: (tp 2 -> 1, mbs 4 -> 2: ``git diff v0.2.0 v0.2.2 -- scripts/performance/configs``)
RECIPES_2511: tuple[MoeRecipe, ...] = (
    _r11("deepseek-v3", "B200", 256, "mxfp8", (1, 16, 1, 8, 1, 2048), False, "alltoall", _DS11,
         "DEEPSEEK_V3_B200_FP8_MX_BASE_CONFIG", ("mla_up_proj",), (None, None),
         "L63-74; no cuda_graph_*; deepseek_llm_pretrain.py L120-144 layout=None, "
         "src/megatron/bridge/recipes/deepseek/deepseek_v3.py L240 layout_map[(16, 1)]", _DS_L4),
) + tuple(
    _r11("deepseek-v3", gpu, 256, prec, (1, 4, 4, 64, 1, 2048), False, "hybridep", _DS11,
         f"DEEPSEEK_V3_{gpu}_{name}_BASE_CONFIG", mods, ("transformer_engine", scope),
         f"{lines}; deepseek_llm_pretrain.py layout=None: deepseek_v3.py L242 layout_map[(4, 4)]",
         _DS_L4)
    for gpu, mods, scope, lines in (
        ("GB300", ("moe_act",), ("attn", "moe_router", "moe_preprocess"), "L27-39, L40/L42"),
        ("GB200", ("mla_up_proj",), ("moe_router", "moe_preprocess"), "L45-57, L58/L60"))
    for prec, name in (("bf16", "BF16"), ("mxfp8", "FP8_MX"))
) + (
    _r11("qwen3-235b-a22b", "GB300", 64, "bf16", (2, 1, 1, 64, 4, 1024), False, "hybridep", _QW11,
         "QWEN3_235B_A22B_GB300_BF16_BASE_CONFIG", (), _TE_MP,
         "L42-52 (v0.2.1/v0.2.2: tp 1, mbs 2)"),
    _r11("qwen3-235b-a22b", "GB200", 64, "bf16", (1, 8, 1, 8, 1, 1024), False, "hybridep", _QW11,
         "QWEN3_235B_A22B_GB200_BF16_BASE_CONFIG", (), _TE_AMP, "L71-80"),
    _r11("qwen3-235b-a22b", "B200", 64, "mxfp8", (1, 8, 4, 8, 1, 1024), True, "alltoall", _QW11,
         "QWEN3_235B_A22B_B200_FP8_MX_BASE_CONFIG", (), (None, None),
         "L120 = FP8_CS L109-117; no cuda_graph_*"),
    _r11("qwen3-30b-a3b", "GB300", 8, "mxfp8", (1, 1, 1, 8, 8, 512), False, "hybridep", _QW11,
         "QWEN3_30B_A3B_GB300_FP8_MX_BASE_CONFIG", (), _TE_MP, "L170 = FP8_CS L160-167"),
    _r11("gpt-oss-120b", "GB200", 64, "bf16", (1, 1, 1, 64, 4, 512), False, "alltoall", _GO11,
         "GPT_OSS_120B_GB200_BF16_BASE_CONFIG", ("layernorm", "moe_act"), (None, None),
         "L42-47; no cuda_graph_*; no flex backend (gpt_oss_llm_pretrain.py L59-75)"),
)


_REPO_2604 = "NVIDIA-NeMo/Megatron-Bridge@v0.4.0 "
#: the 26.04 container's Qwen3-235B-A22B configs and DeepSeek-V3's B200/B300 MXFP8 ones
#: (Megatron-Bridge v0.4.0, NeMo Framework 26.04, ``docs/releases/software-versions.md``).
#: ``git diff v0.4.0 v0.4.2 -- scripts/performance/configs/qwen/`` changes one thing: B300's
#: configs gain ``moe_flex_dispatcher_backend="hybridep"`` (``qwen3_workload_base_configs.py``
#: B300_{BF16,FP8_CS}_V1) and ``qwen3_235b_a22b_pretrain_config_b300`` sets
#: ``moe_token_dispatcher_type = "flex"`` (v0.4.0 L117: ``"alltoall"``; PR #3490, "Use HybridEP
#: flex dispatcher for Qwen3 235B B300 perf configs"). So the GB300, GB200 and H100 configs are
#: v0.4.2's, and B300's ran Megatron's alltoall dispatcher (no flex backend:
#: ``utils/overrides.py`` ``set_workload_base_configs`` then sets "alltoall")
_QW_2604_SAME = ("GB300", "GB200", "H100 SXM")
RECIPES_2604: tuple[MoeRecipe, ...] = tuple(
    replace(r, container="26.04", source=r.source.replace(_REPO, _REPO_2604 + "scripts/"
                                                         "performance/configs/"),
            lines=r.lines + " (v0.4.2 lines; the config identical in v0.4.0)")
    for r in RECIPES if r.model == "qwen3-235b-a22b" and r.gpu in _QW_2604_SAME
) + (
    MoeRecipe("qwen3-235b-a22b", "B300", 256, "mxfp8", (1, 8, 1, 8, 2, 8192), False,
              "alltoall", _REPO_2604 + "scripts/performance/configs/" + _QW
              + " QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2", 1, _QW_RC, None, None,
              "B300_FP8_CS_V1 L122-129 (no moe_flex_dispatcher_backend), B300_FP8_CS_V2 "
              "L237-242 (mbs 2); qwen/qwen3_llm_pretrain.py L117 moe_token_dispatcher_type="
              "'alltoall'; no cuda_graph_*", None, None, "26.04"),
) + tuple(
    # DeepSeek-V3 on 256 B200/B300 in 26.04: pp 16, ep 8, mbs 1, gbs 4096, HybridEP, no overlap,
    # mla_up_proj recomputed, no CUDA graph, the recipe's layout_map[(16, 1)] with the MTP
    # module (v0.4.0 deepseek_llm_pretrain.py L185-214 for B200, alike for B300; recipes/
    # deepseek/deepseek_v3.py L42); v0.4.2 moved both GPUs' MXFP8 configs to other layouts
    MoeRecipe("deepseek-v3", gpu, 256, "mxfp8", (1, 16, 1, 8, 1, 4096), False, "hybridep",
              _REPO_2604 + "scripts/performance/configs/" + _DS
              + f" DEEPSEEK_V3_PRETRAIN_CONFIG_{gpu}_FP8_MX_V2", 1, ("mla_up_proj",), None, None,
              lines + "; FP8_MX_V2 = FP8_CS_V2 = V2; no cuda_graph_*", _DS_L4, None, "26.04")
    for gpu, lines in (("B200", "B200_V1 L110-118, B200_V2 L195-198 (gbs 4096)"),
                       ("B300", "B300_V1 L94-102, B300_V2 L180-183 (gbs 4096)"))
)


def entry_layout(entry: dict) -> tuple[int, int, int, int, int, int]:
    """An entry's stated ``(tp, pp, vpp, ep, mbs, gbs)``, as ``MoeRecipe.layout`` holds a
    config's (an unstated size 1, an unstated batch 0)."""
    pl = entry.get("plan") or {}
    return tuple(int(pl.get(k) or d) for k, d in (
        ("tp", 1), ("pp", 1), ("virtual_stages", 1), ("ep", 1), ("microbatch", 0),
        ("global_batch", 0)))


def recipe_for(entry: dict) -> MoeRecipe | None:
    """The config of a published entry (a NVIDIA Megatron-Bridge row of the 26.04.01, 26.04
    or 25.11 container, ``CONTAINERS``), or None: the container, model, GPU, GPU count,
    precision and layout must all be the config's."""
    src = entry.get("source") or {}
    if "megatron-bridge" not in str(src.get("ref") or "").lower():
        return None
    container = table_container(str(src.get("table") or ""))
    if container not in CONTAINERS:
        return None
    hw = entry.get("hardware") or {}
    key = ((entry.get("model") or {}).get("name"), hw.get("gpu"), hw.get("n_gpus"),
           entry.get("precision"), entry_layout(entry))
    for r in RECIPES + RECIPES_2604 + RECIPES_2511:
        if r.container == container and (r.model, r.gpu, r.n_gpus, r.precision,
                                         r.layout) == key:
            return r
    return None


def preset_for(entry: dict) -> MoeRecipe | None:
    """The 25.11 config of an entry's model, GPU and precision (``RECIPES_2511``) where none
    fits its layout (``recipe_for`` is None), or None: what the container's scripts would have
    run for that GPU and precision, named in the row's assumptions and not applied."""
    src = entry.get("source") or {}
    if recipe_for(entry) is not None or "megatron-bridge" not in str(src.get("ref") or
                                                                     "").lower():
        return None
    container = table_container(str(src.get("table") or ""))
    key = ((entry.get("model") or {}).get("name"), (entry.get("hardware") or {}).get("gpu"),
           entry.get("precision"))
    return next((r for r in RECIPES_2511 if r.container == container
                 and (r.model, r.gpu, r.precision) == key), None)

