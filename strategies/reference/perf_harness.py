"""What NVIDIA's performance harnesses set for every run of a container, for the published
rows they produced: Megatron-Bridge's ``scripts/performance`` (FP8 is current scaling,
gradients reduced in the parameter dtype, ``delay_wgrad_compute`` with the expert-parallel
overlap, quantised weights gathered as such, the Llama scripts' NVFP4 overlap switches) and
NeMo 2's performance scripts (their FP8 runs' gradient reduction and weight gather). Each rule
with its source string, the containers it holds for and the reader of a reference entry
(``harness_fp8_is_current``, ``grad_reduce_in_fp32``, ``harness_delay_wgrad``,
``quantised_param_gather``, ``llama_switches``). Each config's own MoE options are in
``strategies.reference.bridge_recipes``. Pure data.
"""
from __future__ import annotations

from strategies.reference.text import nemo_container


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
#: (Megatron-Bridge v0.3.0 for 26.02, v0.3.1 for 26.02.01, v0.4.0/v0.4.2 for 26.04(.01),
#: v0.5.0 for 26.06; ``FP8_CS_SOURCE``; at v0.3.0 and v0.3.1 too
#: ``scripts/performance/argument_parser.py`` L509-515 offers bf16, fp8_cs, fp8_mx, fp8_sc,
#: nvfp4 and ``utils/precision.py`` L26-43 builds nothing else, calibration §5.214): a plain
#: "FP8" cell of theirs ran current scaling, whether or not the recipe table holds the row's
#: config. "26.02" names 26.02.01 too.
FP8_CS_CONTAINERS = ("26.02", "26.04", "26.06")


def harness_fp8_is_current(row: dict) -> bool:
    """Whether ``row`` (a reference entry) is a Megatron-Bridge performance-table row of a
    container in ``FP8_CS_CONTAINERS``, whose plain "FP8" is current scaling."""
    src = row.get("source") or {}
    table = str(src.get("table", ""))
    return (src.get("ref") == "NVIDIA-NeMo/Megatron-Bridge"
            and any(f"({c}" in table for c in FP8_CS_CONTAINERS))


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
#: ``fp8_params: false``; v25.05.05's ``nemotronh/launch.sh`` runs
#: ``scripts.performance.llm.pretrain_nemotronh_56b`` of NeMo 7a8f1cc7bc40 (``setup.sh``
#: ``NEMO_COMMIT``), whose ``scripts/performance/utils.py`` ``set_primary_perf_configs``
#: (lines 426-437) states the FP8 rule above. Each a ``source.table`` prefix of
#: ``dgxc_2505.json`` or ``hybrid_2026.json``
DGXC_NEMO2_TABLES = ("llama3.1/README.md @v25.05.05", "nemotron/README.md @v25.05.05",
                     "grok1/README.md @v25.05.05", "llama4/README.md @v25.05.05",
                     "llama3.1/README.md @v25.04.02", "nemotron/README.md @v25.04.02",
                     "nemotronh/README.md @v25.05.05")
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


#: NeMo 2's performance scripts set Megatron-Core's ``overlap_param_gather_with_optimizer_step``
#: wherever dp, pp and vp > 1 (the NeMo comm-overlap callback's own default has been off since
#: b6f1051, 2024-10-30, "disable overlap_param_gather_with_optimizer_step")
OPG_OPTIMIZER_SOURCE = ("NVIDIA/NeMo v2.2.0 scripts/llm/performance/utils.py L223, v2.3.0 "
                        "scripts/performance/utils.py L286, v2.4.0 scripts/performance/helpers.py "
                        "L404: overlap_param_gather_with_optimizer_step = bool(dp_size > 1 and "
                        "pp_size > 1 and vp_size > 1)")
#: whether the rows those scripts produced are priced with it (docs/calibration.md §5.200)
OPG_OPTIMIZER_ON = True


def param_gather_with_optimizer(entry: dict) -> bool:
    """Whether ``entry`` ran a stack that sets ``overlap_param_gather_with_optimizer_step``
    where its plan allows it: a NeMo 2 performance-script row (``nemo_perf_row``,
    ``OPG_OPTIMIZER_SOURCE``) while ``OPG_OPTIMIZER_ON``."""
    return OPG_OPTIMIZER_ON and nemo_perf_row(entry)


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


#: The containers whose Nemotron 3 Super NVFP4 rows ran ``quant_scope.NEMOTRON3_SUPER_NVFP4``
#: (Megatron-Bridge v0.4.2 for 26.04(.01), v0.5.0 for 26.06, 4ab94dfad for 26.08: the same
#: ``nemotron_3_super_bf16_with_nvfp4_mixed`` and ``te_quant.cfg`` in each; the file came with
#: PR #3095 of 2026-04-07)
SUPER_NVFP4_CONTAINERS = ("26.04", "26.06", "26.08")


def stated_quant_scope(entry: dict, dtype: str) -> tuple[int, str] | None:
    """``(SystemConfig.quant_scope code, source)`` where ``entry`` is a Nemotron 3 Super NVFP4
    row of a ``SUPER_NVFP4_CONTAINERS`` table of Megatron-Bridge (its recipe keeps the last 14
    layers and the attention linears in BF16 and runs the Mamba out_proj in MXFP8:
    ``strategies.cost.quant_scope``); None otherwise."""
    from strategies.cost.quant_scope import NEMOTRON3_SUPER_NVFP4, QUANT_SCOPES
    src = entry.get("source") or {}
    name = str((entry.get("model") or {}).get("name") or "")
    if (dtype != "nvfp4" or src.get("ref") != "NVIDIA-NeMo/Megatron-Bridge"
            or not name.startswith("Nemotron 3 Super")
            or not any(f"({c}" in str(src.get("table") or "") for c in SUPER_NVFP4_CONTAINERS)):
        return None
    code = next(k for k, v in QUANT_SCOPES.items() if v is NEMOTRON3_SUPER_NVFP4)
    return code, NEMOTRON3_SUPER_NVFP4.source
