"""The recipe side of the hybrid Mamba-2 transcription (``experiments/transcribe_hybrid.py``):
the Megatron-Bridge tables' models, systems and precisions, and the plan switches each row's
recipe sets, read from Megatron-Bridge's text at the row's tag: a 26.08 row's perf recipe
(``recipe_2608``, ``bridge_recipe_trace.trace``), an older row's ``WorkloadBaseConfig``
(``recipe_workload``) and its model's base pretrain recipe (``base_recipe_facts``)."""
from __future__ import annotations

import subprocess
from typing import Any

from experiments.bridge_recipe_trace import git_show, literal, trace
from experiments.transcribe_heldout_2026b import BRIDGE_SYS

BRIDGE_REF = "NVIDIA-NeMo/Megatron-Bridge"
#: the commit that published the 26.08 table (docs: update performance summary for 26.08)
BRIDGE_2608 = "4ab94dfad"
#: the table's model -> hybrid_models key and the recipe function / config name stems
BRIDGE_MODELS = {"Nemotron_3_Nano": ("nemotron-3-nano", "nemotron_3_nano", "NEMOTRON_3_NANO"),
                 "Nemotron_3_5_Lightning": ("nemotron-3.5-lightning", "nemotron_3_5_lightning",
                                            "NEMOTRON_3_5_LIGHTNING"),
                 "Nemotron_3_Super": ("nemotron-3-super", "nemotron_3_super",
                                      "NEMOTRON_3_SUPER"),
                 "Nemotron_3_Ultra": ("nemotron-3-ultra", "nemotron_3_ultra",
                                      "NEMOTRON_3_ULTRA")}
#: the base recipes the 26.08 perf recipes start from, by the name they call them
#: (perf_recipes/nemotronh/common.py L23-28 imports; recipes/nemotronh/nemotron_3_nano.py
#: L28-29 and nemotron_3_ultra.py L26-27 re-export the H100 functions under these names)
BASE_ALIASES = {"nemotron_3_nano_pretrain_config": "nemotron_3_nano_pretrain_8gpu_h100_bf16_config",
                "nemotron_3_super_pretrain_config":
                    "nemotron_3_super_pretrain_16gpu_h100_bf16_config",
                "nemotron_3_ultra_pretrain_config":
                    "nemotron_3_ultra_pretrain_24gpu_h100_bf16_config"}
BASE_RECIPES = {k: f"src/megatron/bridge/recipes/nemotronh/h100/{k.rsplit('_pretrain', 1)[0]}.py"
                for k in BASE_ALIASES}
#: the Megatron-Bridge tables' systems (``transcribe_heldout_2026b.BRIDGE_SYS``) and DGX B200
SYSTEMS = {**BRIDGE_SYS,
           "DGX-B200": ("B200", "DGX B200 (8 GPUs per node, NVLink5), scale-out not stated")}
#: the tables' precision -> (``--dtype``, the perf recipe's name stem, the workload config's)
PRECISION = {"MXFP8": ("mxfp8", "fp8mx", "FP8_MX"), "NVFP4": ("nvfp4", "nvfp4", "NVFP4"),
             "FP8": ("fp8", "fp8cs", "FP8_CS"), "BF16": ("bf16", "bf16", "BF16")}


def row_dp(r: dict[str, Any]) -> int:
    """A table row's data-parallel size: its GPUs over ``tp·pp·cp``."""
    return r["n"] // (r["tp"] * r["pp"] * r["cp"])


def recipe_2608(repo: str, r: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The plan switches of a 26.08 row from its perf recipe (``trace``), with the notes
    citing each; ({}, [why]) where no recipe function of the row's name exists or its
    layout is not the row's."""
    _, stem, _ = BRIDGE_MODELS[r["model"]]
    gpu = SYSTEMS[r["system"]][0].split()[0].lower()
    fn = f"{stem}_pretrain_{r['n']}gpu_{gpu}_{PRECISION[r['prec']][1]}_config"
    base = "src/megatron/bridge/perf_recipes/nemotronh/"
    paths = (f"{base}{gpu}/nemotronh.py", f"{base}common.py", *BASE_RECIPES.values())
    files = {p: git_show(repo, BRIDGE_2608, p) for p in paths}
    try:
        t = trace(files, fn, BASE_ALIASES)
    except KeyError as e:
        return {}, [f"No recipe switches: {e}."]

    def cite(k: str) -> str:
        path = t[k][1].replace(base, "perf_recipes/nemotronh/")
        return f"{path.replace('src/megatron/bridge/', '')} L{t[k][2]}"

    def val(k: str) -> Any:
        return literal(t[k][0]) if k in t else None

    for field, want in (("model.tensor_model_parallel_size", r["tp"]),
                        ("model.expert_model_parallel_size", r["ep"]),
                        ("train.micro_batch_size", r["mbs"]),
                        ("train.global_batch_size", r["gbs"])):
        got = val(field)
        if isinstance(got, int) and got != want:
            return {}, [f"The recipe {fn} sets {field}={got} ({cite(field)}), the row {want}: "
                        "no recipe switches read."]
    sw: dict[str, Any] = {}
    said = []
    where = f"{BRIDGE_REF}@{BRIDGE_2608} src/megatron/bridge/perf_recipes/nemotronh/, " \
            f"function {fn}"
    backend = "model.moe_flex_dispatcher_backend"
    if val(backend):
        sw["moe_dispatcher"] = val(backend)
        said.append(f"moe_dispatcher={sw['moe_dispatcher']} ({cite(backend)}; scripts/"
                    "performance/utils/overrides.py L397 apply_flex_dispatcher_backend makes "
                    "the dispatcher 'flex')")
    a2a = "model.overlap_moe_expert_parallel_comm"
    sw["ep_overlap"] = bool(val(a2a))
    said.append(f"ep_overlap=true ({cite(a2a)})" if sw["ep_overlap"] else
                "ep_overlap=false (no overlap_moe_expert_parallel_comm set)")
    impl = val("model.cuda_graph_impl")
    sw["cuda_graph"] = impl == "full_iteration"
    if "model.cuda_graph_impl" in t:
        scope = val("model.cuda_graph_scope")
        said.append(f"cuda_graph={str(sw['cuda_graph']).lower()}: cuda_graph_impl={impl!r} "
                    f"({cite('model.cuda_graph_impl')}), scope {scope} "
                    + (f"({cite('model.cuda_graph_scope')})"
                       if "model.cuda_graph_scope" in t else "")
                    + ("; Transformer Engine graphs of parts of each layer, not the whole-"
                       "iteration graph the plan's switch means"
                       if impl == "transformer_engine" else ""))
    gran = val("model.recompute_granularity") if "model.recompute_granularity" in t else "unset"
    if gran == "unset":
        sw["recompute"] = "none"
        said.append("recompute=none (no recompute_granularity in the recipe chain read nor in "
                    "recipes/common.py _pretrain_common: Megatron-Core's default None, "
                    "transformer_config.py L532 at d98e8a64dd)")
    elif gran is None:
        sw["recompute"] = "none"
        said.append("recompute=none (recompute_granularity None, "
                    f"{cite('model.recompute_granularity')})")
    elif gran == "selective":
        sw["recompute"] = "selective"
        sw["recompute_modules"] = "+".join(val("model.recompute_modules"))
        said.append(f"recompute=selective, modules {sw['recompute_modules']} "
                    f"({cite('model.recompute_granularity')}, {cite('model.recompute_modules')})")
    if val("model.use_transformer_engine_op_fuser"):
        sw["fused_grouped_mlp"] = True
        said.append("fused_grouped_mlp=true: Transformer Engine's op fuser "
                    f"({cite('model.use_transformer_engine_op_fuser')}) with the recipe's "
                    "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (CuteDSL fused grouped MLP)")
    etp = "model.expert_tensor_parallel_size"
    if isinstance(val(etp), int) and r["ep"] > 1:
        sw["etp"] = val(etp)
        said.append(f"etp={sw['etp']} ({cite(etp)})")
    if "model.sequence_parallel" in t:
        sw["sequence_parallel"] = bool(val("model.sequence_parallel"))
    if val("comm_overlap.tp_comm_overlap") is True:
        sw["tp_comm_overlap"] = True
        said.append(f"tp_comm_overlap=true ({cite('comm_overlap.tp_comm_overlap')}; no TP "
                    "traffic to overlap at tp 1)" if r["tp"] == 1 else
                    f"tp_comm_overlap=true ({cite('comm_overlap.tp_comm_overlap')})")
    if val("model.moe_router_force_load_balancing"):
        sw["moe_balance"] = "forced"
        said.append(f"moe_balance=forced ({cite('model.moe_router_force_load_balancing')})")
    sharding = "ddp.data_parallel_sharding_strategy"
    if val("ddp.use_megatron_fsdp") and val(sharding) == "optim_grads_params":
        dp = row_dp(r)
        domains = max(1, r["n"] // 64)        # common.py _GB300_NVLINK_DOMAIN_GPUS = 64 (L39)
        sw["zero_stage"] = 3
        sw["dp_shard"] = dp // domains
        said.append(f"zero_stage=3, dp_shard={dp // domains}: Megatron-FSDP optim_grads_params "
                    f"({cite('ddp.use_megatron_fsdp')}, {cite(sharding)}) "
                    f"sharded within each 64-GPU NVLink domain, {domains} optimizer instances "
                    f"across them ({cite('ddp.num_distributed_optimizer_instances')}, "
                    "_GB300_NVLINK_DOMAIN_GPUS = 64 at common.py L39)")
    if isinstance(val("model.mtp_num_layers"), int):
        sw["mtp_num_layers"] = val("model.mtp_num_layers")
        rep = "model.mtp_use_repeated_layer"
        said.append(f"mtp_num_layers={sw['mtp_num_layers']} ({cite('model.mtp_num_layers')}"
                    + (f", mtp_use_repeated_layer {cite(rep)}: one MTP block run at each depth"
                       if rep in t else "") + ")")
    if val("model.fine_grained_activation_offloading"):
        sw["offload_modules"] = "+".join(val("model.offload_modules"))
        said.append(f"offload_modules={sw['offload_modules']}: activation offloading to host "
                    f"({cite('model.fine_grained_activation_offloading')}; modelled, "
                    "docs/calibration.md §5.209)")
    if "ddp.grad_reduce_in_fp32" in t:
        said.append(f"grad_reduce_in_fp32={val('ddp.grad_reduce_in_fp32')} "
                    f"({cite('ddp.grad_reduce_in_fp32')})")
    notes = [f"Recipe switches from {where} (read from its text, bridge_recipe_trace.trace): "
             + "; ".join(said) + "."]
    return sw, notes


def base_recipe_facts(repo: str, tag: str, r: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """What the model's base pretrain recipe at ``tag`` (``src/megatron/bridge/recipes/
    nemotronh/<model>.py`` ``<model>_pretrain_config``, the function the harness builds the
    run from) sets of recomputation and MTP depth, as plan fields, and the note citing it."""
    _, stem, _ = BRIDGE_MODELS[r["model"]]
    path = f"src/megatron/bridge/recipes/nemotronh/{stem}.py"
    try:
        t = trace({path: git_show(repo, tag, path)}, f"{stem}_pretrain_config")
    except (KeyError, subprocess.CalledProcessError):
        return {}, ""
    out, said = {}, []
    if "model.recompute_granularity" in t and literal(t["model.recompute_granularity"][0]) is None:
        out["recompute"] = "none"
        said.append(f"recompute_granularity None (L{t['model.recompute_granularity'][2]})")
    elif "model.recompute_granularity" not in t:
        out["recompute"] = "none"
        said.append("no recompute_granularity (Megatron-Core's default None)")
    if isinstance(literal(t.get("model.mtp_num_layers", ("",))[0]), int):
        out["mtp_num_layers"] = literal(t["model.mtp_num_layers"][0])
        said.append(f"mtp_num_layers {out['mtp_num_layers']} (L{t['model.mtp_num_layers'][2]})")
    return out, f"The base recipe {BRIDGE_REF}@{tag} {path} {stem}_pretrain_config: " \
                + ", ".join(said) + "."


def recipe_workload(configs: dict[str, dict[str, Any]], tag: str, r: dict[str, Any]
                    ) -> tuple[dict[str, Any], list[str]]:
    """The plan switches of a pre-26.08 row from the ``WorkloadBaseConfig`` of its container's
    tag whose layout is the row's; ({}, [why]) where none is."""
    _, _, upper = BRIDGE_MODELS[r["model"]]
    name = (f"{upper}_PRETRAIN_CONFIG_{r['system'].split('-')[1]}_"
            f"{PRECISION[r['prec']][2]}_V1")
    c = configs.get(name)
    if c is None:
        return {}, [f"No {name} at {tag}: recipe switches are the stack's defaults."]
    mine = (c["num_gpus"], c["tensor_model_parallel_size"], c["expert_model_parallel_size"],
            c["micro_batch_size"], c["global_batch_size"])
    if mine != (r["n"], r["tp"], r["ep"], r["mbs"], r["gbs"]):
        return {}, [f"{name} at {tag} runs (GPUs, tp, ep, mbs, gbs) {mine}, not the row's: "
                    "no recipe switches read."]
    sw: dict[str, Any] = {"ep_overlap": bool(c.get("moe_a2a_overlap")),
                          "cuda_graph": c.get("cuda_graph_impl") == "full_iteration",
                          "moe_balance": "forced"}
    if c.get("moe_flex_dispatcher_backend"):
        sw["moe_dispatcher"] = c["moe_flex_dispatcher_backend"]
    if c.get("expert_tensor_parallel_size") is not None and r["ep"] > 1:
        sw["etp"] = c["expert_tensor_parallel_size"]
    if c.get("recompute_modules"):
        sw["recompute"] = "selective"
        sw["recompute_modules"] = "+".join(c["recompute_modules"])
    notes = [f"Recipe switches from {BRIDGE_REF}@{tag} scripts/performance/configs/{c['file']} "
             f"{name} (imported from the tag): expert_tensor_parallel_size="
             f"{c.get('expert_tensor_parallel_size')}, moe_flex_dispatcher_backend="
             f"{c.get('moe_flex_dispatcher_backend')}, moe_a2a_overlap={c.get('moe_a2a_overlap')}, "
             f"cuda_graph_impl={c.get('cuda_graph_impl')}, cuda_graph_scope="
             f"{c.get('cuda_graph_scope')} (only 'full_iteration' is the plan's cuda_graph), "
             f"recompute_modules={c.get('recompute_modules')}; moe_balance=forced: the harness "
             "sets moe_router_force_load_balancing unless --use_tokendrop "
             "(scripts/performance/utils/overrides.py)."]
    return sw, notes
