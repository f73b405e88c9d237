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
these configs name, so only the rows a config fits exactly take one (``RECIPES_2511``).

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
(``llama_switches``). Pure data.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from strategies.cost.recompute import MODULES as RECOMPUTE_MODULES
from strategies.errors import SpecError
from strategies.layout import parse_layout
from strategies.plan import DISPATCHERS
from strategies.reference.text import nemo_container

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
    cuda_graph_impl: str | None = None
    cuda_graph_scope: tuple[str, ...] | None = None
    lines: str = ""
    pp_layout: str | None = None
    tp_comm_overlap: bool | None = None
    container: str = "26.04.01"

    def __post_init__(self) -> None:
        if self.container not in CONTAINERS:
            raise SpecError("container", self.container,
                            f"must be one of {', '.join(CONTAINERS)} ({self.source})")
        if self.dispatcher not in DISPATCHERS:
            raise SpecError("moe_flex_dispatcher_backend", self.dispatcher,
                            f"must be one of {', '.join(DISPATCHERS)} ({self.source})")
        for m in self.recompute_modules or ():
            if m not in RECOMPUTE_MODULES:
                raise SpecError("recompute_modules", m, "unknown module; valid: "
                                f"{', '.join(RECOMPUTE_MODULES)} ({self.source})")
        if self.cuda_graph_impl not in CUDA_GRAPH_IMPLS:
            raise SpecError("cuda_graph_impl", self.cuda_graph_impl, "must be one of "
                            f"{', '.join(map(str, CUDA_GRAPH_IMPLS))} ({self.source})")
        for sc in self.cuda_graph_scope or ():
            if sc not in CUDA_GRAPH_SCOPES:
                raise SpecError("cuda_graph_scope", sc, "must be one of "
                                f"{', '.join(CUDA_GRAPH_SCOPES)} ({self.source})")
        if self.pp_layout is not None:
            chunks = self.layout[1] * self.layout[2]
            if len(parse_layout(self.pp_layout, "pp_layout")) != chunks:
                raise SpecError("pp_layout", self.pp_layout, f"must name pp*vpp = {chunks} "
                                f"chunks, one per '|'-separated stage ({self.source})")

    @property
    def current_scaling(self) -> bool:
        """Whether the config is one of the harness's FP8 current-scaling configs (``*_FP8_CS_*``,
        the only non-block FP8 recipe it runs, ``FP8_CS_SOURCE``): a row whose precision says
        plain ``fp8`` then ran current scaling, not delayed scaling."""
        return "_FP8_CS_" in self.source

    @property
    def full_iteration_graph(self) -> bool:
        """Whether the config captures the whole training step in one CUDA graph (what the
        plan's ``cuda_graph`` switch means): Megatron-Core's ``full_iteration`` scope under
        its own (``local``) implementation. Transformer Engine's per-layer scopes (``attn``,
        ``mlp``, ``moe_router``, ``moe_preprocess``, ...) capture parts of each layer and
        leave the step's other launches and synchronisations: not a full-iteration graph."""
        return self.cuda_graph_impl == "local" and "full_iteration" in (self.cuda_graph_scope
                                                                        or ())


#: What a table's "FP8" ran: Megatron-Bridge's performance harness takes ``--compute_dtype`` in
#: ``bf16, fp8_cs, fp8_mx, fp8_sc, nvfp4`` (no delayed-scaling recipe) and builds "fp8_cs" as
#: ``bf16_with_fp8_current_scaling_mixed()`` with ``first_last_layers_bf16 = False``; the
#: configs a plain-FP8 row fits are its ``*_FP8_CS_*`` ones (``MoeRecipe.current_scaling``)
FP8_CS_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge@v0.4.2 (c810129341a8) scripts/performance/"
                 "utils/precision.py get_precision_config('fp8_cs'): "
                 "bf16_with_fp8_current_scaling_mixed, first_last_layers_bf16=False; "
                 "argument_parser.py --compute_dtype choices bf16/fp8_cs/fp8_mx/fp8_sc/nvfp4, "
                 "no delayed scaling")
#: the containers whose published tables came from a harness with no delayed-scaling recipe
#: (Megatron-Bridge v0.4.2 for 26.04(.01), v0.5.0 for 26.06; ``FP8_CS_SOURCE``): a plain "FP8"
#: cell of theirs ran current scaling, whether or not the recipe table holds the row's config
FP8_CS_CONTAINERS = ("26.04", "26.06")


def harness_fp8_is_current(row: dict) -> bool:
    """Whether ``row`` (a reference entry) is a Megatron-Bridge performance-table row of a
    container in ``FP8_CS_CONTAINERS``, whose plain "FP8" is current scaling."""
    src = row.get("source") or {}
    table = str(src.get("table", ""))
    return (src.get("ref") == "NVIDIA-NeMo/Megatron-Bridge"
            and any(f"({c}" in table for c in FP8_CS_CONTAINERS))


#: the NeMo containers whose published rows a config may fit, as the rows' ``source.table``
#: names them (``table_container``): 26.04.01 from Megatron-Bridge v0.4.2, 26.04 from v0.4.0,
#: 25.11 from v0.2.0. 26.04 and 26.04.01 are two releases with their own tables and configs
#: (Qwen3-235B-A22B on B300 ran Megatron's alltoall dispatcher in 26.04, HybridEP in 26.04.01)
CONTAINERS = ("26.04.01", "26.04", "25.11")
_CONTAINER = re.compile(r"\((\d\d\.\d\d(?:\.\d\d)?) NeMo container\)")


def table_container(table: str) -> str | None:
    """The NeMo container a Megatron-Bridge table names, ``"(26.04.01 NeMo container)"`` ->
    ``"26.04.01"``; None where it names none. Exact: a 26.04 table is not a 26.04.01 one."""
    found = _CONTAINER.search(table or "")
    return found.group(1) if found else None
#: ``cuda_graph_impl`` values Megatron-Core takes (``TransformerConfig.cuda_graph_impl``;
#: None: the config leaves the recipe's default)
CUDA_GRAPH_IMPLS = (None, "none", "local", "transformer_engine")
#: ``cuda_graph_scope`` values Megatron-Core takes (``CudaGraphScope``)
CUDA_GRAPH_SCOPES = ("full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess",
                     "mamba")


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


_REPO_2511 = "NVIDIA-NeMo/Megatron-Bridge@v0.2.0 (7af9601c9da7) "
#: the 25.11 container's configs that fit a published row exactly (``RECIPES`` holds the
#: 26.04 ones): DeepSeek-V3 on 256 B200 (pp16 ep8, mbs 1, gbs 2048), the table's "w/ MTP"
#: run: ``DEEPSEEK_V3_B200_FP8_MX_BASE_CONFIG`` (``scripts/performance/configs/deepseek/
#: workload_base_configs.py`` L63-74: recompute_modules=["mla_up_proj"], moe_a2a_overlap=
#: False, no flex backend = Megatron's alltoall dispatcher, no cuda_graph_*), built by
#: ``deepseek_llm_pretrain.py`` ``deepseek_v3_b200_config`` L120-144 with ``layout=None``,
#: so the recipe's own ``layout_map[(16, 1)]`` (``src/megatron/bridge/recipes/deepseek/
#: deepseek_v3.py`` L240: the embedding and 4 layers, 14 stages of 4, then 1 layer, the MTP
#: module (``mtp_num_layers`` default 1, L174) and the loss) is the layout
RECIPES_2511: tuple[MoeRecipe, ...] = (
    MoeRecipe("deepseek-v3", "B200", 256, "mxfp8", (1, 16, 1, 8, 1, 2048), False, "alltoall",
              _REPO_2511 + "scripts/performance/configs/deepseek/workload_base_configs.py "
              "DEEPSEEK_V3_B200_FP8_MX_BASE_CONFIG", 1, ("mla_up_proj",), None, None,
              "L63-74; no cuda_graph_*; deepseek_llm_pretrain.py L120-144 layout=None, "
              "src/megatron/bridge/recipes/deepseek/deepseek_v3.py L240 layout_map[(16, 1)]",
              _DS_L4, None, "25.11"),
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
    pl, hw = entry.get("plan") or {}, entry.get("hardware") or {}
    layout = tuple(int(pl.get(k) or d) for k, d in (
        ("tp", 1), ("pp", 1), ("virtual_stages", 1), ("ep", 1), ("microbatch", 0),
        ("global_batch", 0)))
    key = ((entry.get("model") or {}).get("name"), hw.get("gpu"), hw.get("n_gpus"),
           entry.get("precision"), layout)
    for r in RECIPES + RECIPES_2604 + RECIPES_2511:
        if r.container == container and (r.model, r.gpu, r.n_gpus, r.precision,
                                         r.layout) == key:
            return r
    return None


#: Where Megatron-Bridge's performance scripts reduce gradients in the parameter dtype: every
#: ``*_llm_pretrain.py`` of the model families in the reference sets
#: ``cfg.mixed_precision.grad_reduce_in_fp32 = False`` and ``cfg.ddp.grad_reduce_in_fp32 =
#: False`` (so the DDP gradient buffer, its accumulation and its data-parallel reduction are
#: bf16), in the v0.2.2 scripts the 25.11 container's rows were run with, in v0.4.2's and in
#: v0.5.0's (the 26.06 container's: ``set_{llama3,qwen3,deepseek_v3,gpt_oss}_common_configs``
#: and the Llama 3.1 script, docs/calibration.md §5.98); the 26.08 recipes
#: (``src/megatron/bridge/perf_recipes/_common.py`` at 067f987df03b) too
GRAD_REDUCE_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge v0.2.2, v0.4.2 (c810129341a8) and v0.5.0 "
                      "scripts/performance/configs/{llama3,llama31,llama,qwen3,qwen,deepseek,"
                      "gpt_oss}/*_llm_pretrain.py, 067f987df03b src/megatron/bridge/"
                      "perf_recipes/_common.py: grad_reduce_in_fp32 = False")
#: the containers whose published rows those scripts produced
GRAD_REDUCE_CONTAINERS = ("25.11", "26.04", "26.06", "26.08")


#: Megatron-Bridge's performance harness turns ``delay_wgrad_compute`` on whenever it turns
#: the expert-parallel overlap on, and never otherwise: v0.2.0 (the 25.11 container's)
#: ``scripts/performance/utils/helpers.py`` ``set_moe_a2a_overlap_overrides``, v0.4.0 (26.04),
#: v0.4.2 (26.04.01) and v0.5.0 (26.06) ``scripts/performance/utils/overrides.py``
#: ``_set_moe_a2a_overlap_overrides`` (each config's ``moe_a2a_overlap``). Bridge's own
#: ``CommOverlapConfig`` leaves it off (``src/megatron/bridge/training/comm_overlap.py``
#: ``_get_model_comm_overlap_cfgs``), as Megatron-Core does (``model_parallel_config.py``
#: ``delay_wgrad_compute: bool = False``). The 26.08 recipes set it per recipe
#: (``src/megatron/bridge/perf_recipes/`` at 067f987df03b: on with the overlap in
#: ``qwen/common.py`` ``_enable_hybridep_full_iteration_mxfp8`` and ``gpt_oss/common.py``,
#: off with it in ``qwen/h100/qwen3_moe.py`` L41-42), so no container-wide rule holds there
DELAY_WGRAD_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge v0.2.0 scripts/performance/utils/helpers.py "
                      "set_moe_a2a_overlap_overrides, v0.4.0 / v0.4.2 (c810129341a8) / v0.5.0 "
                      "scripts/performance/utils/overrides.py _set_moe_a2a_overlap_overrides: "
                      "overlap_moe_expert_parallel_comm = True and delay_wgrad_compute = True "
                      "together")
#: the containers whose published rows that harness produced
DELAY_WGRAD_CONTAINERS = ("25.11", "26.04", "26.06")


def harness_delay_wgrad(entry: dict) -> str | None:
    """``DELAY_WGRAD_SOURCE`` where ``entry`` is a row of NVIDIA's Megatron-Bridge
    performance tables of the ``DELAY_WGRAD_CONTAINERS`` (26.04 covers 26.04.01), whose
    harness ran ``delay_wgrad_compute`` exactly where it ran the expert-parallel overlap;
    None for any other entry (its source is silent)."""
    src = entry.get("source") or {}
    table = str(src.get("table") or "")
    if src.get("ref") == "NVIDIA-NeMo/Megatron-Bridge" and any(
            f"({c}" in table for c in DELAY_WGRAD_CONTAINERS):
        return DELAY_WGRAD_SOURCE
    return None


#: NeMo 2's performance scripts, which produced the NeMo Framework performance summary's
#: 25.02, 25.04 and 25.07 tables (NeMo v2.2.0, v2.3.0, v2.4.0; the rules below read the same
#: in all three, and at d2b21556, the commit dgxc-benchmarking v25.04.02 pins): an FP8 run sets ``grad_reduce_in_fp32 = False`` (v2.2.0
#: ``scripts/llm/performance/pretrain_*.py``, every script; v2.3.0
#: ``scripts/performance/utils.py`` ``set_primary_perf_configs``; v2.4.0
#: ``scripts/performance/helpers.py`` ``set_precision_configs``) and builds its precision with
#: ``bf16_with_fp8_mixed`` (delayed) or ``bf16_with_fp8_current_scaling_mixed``, both
#: ``fp8_param_gather = True`` (v2.2.0: ``fp8_params = True``, which the plugin turns into
#: ``fp8_param_gather``; ``nemo/collections/llm/recipes/precision/mixed_precision.py``)
NEMO_PERF_SOURCE = ("NVIDIA/NeMo v2.2.0 scripts/llm/performance/pretrain_*.py, d2b21556, v2.3.0 "
                    "scripts/performance/utils.py set_primary_perf_configs, v2.4.0 "
                    "scripts/performance/helpers.py set_precision_configs: FP8 runs "
                    "grad_reduce_in_fp32 = False, bf16_with_fp8_mixed / "
                    "bf16_with_fp8_current_scaling_mixed with fp8_param_gather = True")
NEMO_PERF_CONTAINERS = ("25.02", "25.04", "25.07")
#: NVIDIA/dgxc-benchmarking's NeMo 2 recipes, which ran those scripts: v25.05.05's
#: ``{llama3.1,nemotron,grok1,llama4}/launch.sh`` run NeMo 25.04's
#: ``scripts.performance.llm.pretrain_*``; v25.04.02's ``nemotron/launch.sh`` NeMo d2b21556's
#: (25.02.01) and ``llama3.1/pretrain_llama31.py`` its own copy (``bf16_with_fp8_mixed``,
#: ``grad_reduce_in_fp32 = False``); not v25.04.02's Grok-1, a NeMo 1 (24.12) run with
#: ``fp8_params: false``. Each a ``source.table`` prefix of ``dgxc_2505.json``
DGXC_NEMO2_TABLES = ("llama3.1/README.md @v25.05.05", "nemotron/README.md @v25.05.05",
                     "grok1/README.md @v25.05.05", "llama4/README.md @v25.05.05",
                     "llama3.1/README.md @v25.04.02", "nemotron/README.md @v25.04.02")
#: Megatron-Bridge's per-tensor FP8 precisions keep FP8 weights and all-gather them as such:
#: ``bf16_with_fp8_delayed_scaling_mixed`` and ``bf16_with_fp8_current_scaling_mixed`` set
#: ``fp8_param_gather = True`` (``src/megatron/bridge/training/mixed_precision.py`` at v0.2.2,
#: v0.4.2 and v0.5.0), ``bf16_with_nvfp4_mixed`` ``fp4_param_gather = True`` (v0.4.2, v0.5.0);
#: MXFP8 sets ``fp8_param_gather`` too but, with ``reuse_grad_buf_for_mxfp8_param_ag``,
#: gathers the 16-bit weights into the gradient buffer and quantises after (Megatron-Core
#: ``param_and_grad_buffer.py`` ``_post_param_sync``). Megatron-Core (the submodule of
#: Bridge v0.4.2, 2edffadb528e, ``param_and_grad_buffer.py``) keeps FP8 weights in a uint8
#: buffer and NVFP4 weights packed two to a byte, "for storage/communication"
PARAM_GATHER_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge v0.2.2, v0.4.2, v0.5.0 src/megatron/"
                       "bridge/training/mixed_precision.py: fp8_param_gather = True for delayed "
                       "and current scaling, fp4_param_gather = True for NVFP4; Megatron-Core "
                       "2edffadb528e param_and_grad_buffer.py: FP8 weights in a uint8 buffer, "
                       "NVFP4 packed two per byte")
#: the Megatron-Bridge containers whose published rows those precisions produced
PARAM_GATHER_CONTAINERS = ("25.11", "26.04", "26.06")
#: bytes per quantised weight the gather moves, by job dtype: per-tensor FP8 one byte, NVFP4
#: half a byte (its block scales are not in the parameter buffer)
GATHER_BYTES = {"fp8": 1.0, "fp8-current": 1.0, "nvfp4": 0.5}


def nemo_perf_row(entry: dict) -> bool:
    """Whether ``entry`` is a row NeMo 2's performance scripts produced
    (``NEMO_PERF_SOURCE``): the NeMo Framework performance summary's tables of the
    ``NEMO_PERF_CONTAINERS`` containers, or a ``DGXC_NEMO2_TABLES`` row."""
    src = entry.get("source") or {}
    table, ref = str(src.get("table") or ""), str(src.get("ref") or "")
    if ref == "NVIDIA/dgxc-benchmarking (NeMo)":
        return table.startswith(DGXC_NEMO2_TABLES)
    return (ref == "NVIDIA NeMo Framework performance summary"
            and nemo_container(entry) in NEMO_PERF_CONTAINERS)


def grad_reduce_in_fp32(entry: dict) -> bool | None:
    """False for a published row of NVIDIA's Megatron-Bridge performance tables of the
    ``GRAD_REDUCE_CONTAINERS`` containers (``GRAD_REDUCE_SOURCE``) and for an FP8 row of the
    NeMo performance summary's 25.02-25.07 tables (``NEMO_PERF_SOURCE``); None (the stack's
    default) for any other entry."""
    src = entry.get("source") or {}
    if nemo_perf_row(entry) and "fp8" in str(entry.get("precision") or "").lower():
        return False
    if "megatron-bridge" not in str(src.get("ref") or "").lower():
        return None
    table = str(src.get("table") or "")
    return False if any(c in table for c in GRAD_REDUCE_CONTAINERS) else None


def quantised_param_gather(entry: dict, dtype: str) -> tuple[float, str] | None:
    """``(bytes per quantised weight, source)`` of the all-gather after the optimizer where
    ``entry``'s run kept its weights quantised (``SystemConfig.param_gather_bytes``,
    ``GATHER_BYTES``): a per-tensor FP8 ``dtype`` on a NeMo 25.02-25.07 performance row
    (``NEMO_PERF_SOURCE``), per-tensor FP8 or NVFP4 on a Megatron-Bridge performance row of
    the ``PARAM_GATHER_CONTAINERS`` (``PARAM_GATHER_SOURCE``); None otherwise."""
    if dtype not in GATHER_BYTES:
        return None
    # (NVFP4 on the Llama configs only: v0.4.2's DeepSeek-V3 and Nemotron-H configs turn
    # ``fp4_param_gather`` off)
    if dtype == "nvfp4" and (entry.get("model") or {}).get("name") not in LLAMA_MODELS:
        return None
    if nemo_perf_row(entry):
        return (GATHER_BYTES[dtype], NEMO_PERF_SOURCE) if dtype != "nvfp4" else None
    src = entry.get("source") or {}
    table = str(src.get("table") or "")
    if (src.get("ref") == "NVIDIA-NeMo/Megatron-Bridge"
            and any(f"({c}" in table for c in PARAM_GATHER_CONTAINERS)):
        return GATHER_BYTES[dtype], PARAM_GATHER_SOURCE
    return None


#: The Llama models of Megatron-Bridge's performance tables whose scripts
#: ``LLAMA_NVFP4_SOURCE`` reads
LLAMA_MODELS = ("llama3-70b", "llama3.1-405b")
#: The containers whose Llama rows those scripts produced: 26.04(.01) from v0.4.2's
#: ``scripts/performance``; 26.06 between v0.4.2 and the 26.08 flat recipes (067f987df03b
#: ``src/megatron/bridge/perf_recipes/llama/``, the commit the 26.06 rows cite), which state
#: the rule alike
LLAMA_CONTAINERS = ("26.04", "26.06")
#: NVFP4 runs without TP communication overlap: ``cfg.comm_overlap.tp_comm_overlap = False if
#: precision == "nvfp4"`` in every Llama 3 70B / 3.1 405B pretrain function of v0.4.2's
#: ``llama3_llm_pretrain.py`` and ``llama31_llm_pretrain.py``, and in the 26.08 recipes'
#: nvfp4 configs; the 405B GB200 nvfp4 V2 config also turns the overlapped parameter gather
#: off (``disable_param_gather_overlap``, Megatron-Bridge PR #3713, "WAR ... to avoid OOM")
LLAMA_NVFP4_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge v0.4.2 (c810129341a8) scripts/performance/"
                      "configs/llama/llama3{,1}_llm_pretrain.py: tp_comm_overlap = False if "
                      "precision == 'nvfp4'; 067f987df03b src/megatron/bridge/perf_recipes/"
                      "llama/*/llama3{,1}.py nvfp4 configs")
LLAMA_NVFP4_PG_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge v0.4.2 scripts/performance/configs/llama/"
                         "llama31_llm_pretrain.py llama31_405b_pretrain_config_gb200: "
                         "disable_param_gather_overlap for nvfp4 v2 (PR #3713)")


def _llama_row(entry: dict) -> bool:
    """Whether ``entry`` is a Llama row (``LLAMA_MODELS``) of a ``LLAMA_CONTAINERS`` table of
    NVIDIA's Megatron-Bridge."""
    src = entry.get("source") or {}
    if "megatron-bridge" not in str(src.get("ref") or "").lower():
        return False
    table = str(src.get("table") or "")
    name = (entry.get("model") or {}).get("name")
    return name in LLAMA_MODELS and any(c in table for c in LLAMA_CONTAINERS)


def llama_switches(entry: dict) -> dict[str, bool]:
    """The overlap switches the Llama scripts set against the stack's defaults for ``entry``
    (a Llama row of Megatron-Bridge's 26.04 / 26.06 tables): under NVFP4 no TP communication
    overlap (``LLAMA_NVFP4_SOURCE``) and, for 405B on GB200, no overlapped parameter gather
    (``LLAMA_NVFP4_PG_SOURCE``); {} for any other entry."""
    if not _llama_row(entry) or "nvfp4" not in str(entry.get("precision") or "").lower():
        return {}
    out = {"tp_comm_overlap": False}
    if (entry.get("model") or {}).get("name") == "llama3.1-405b" and \
            (entry.get("hardware") or {}).get("gpu") == "GB200":
        out["overlap_param_gather"] = False
    return out
