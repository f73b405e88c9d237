"""The switches each ``heldout_2026e.json`` row's Megatron-Bridge config states, as plan fields
with the file and line they are read from (calibration §5.210).

* **25.11** (Megatron-Bridge v0.2.0): the ``WorkloadBaseConfig`` the performance script loads
  for the row's model, GPU and precision (``<MODEL>_<GPU>_<DTYPE>_BASE_CONFIG`` in
  ``scripts/performance/configs/<family>/workload_base_configs.py``, ``utils/utils.py``
  ``get_workload_base_config``), imported at the tag; ``utils/helpers.py``
  ``set_workload_base_configs`` (L55-83) applies its fields. The table's sizes and batch are
  kept where they differ from the config's (the row's notes list the differences).
* **25.09** (Megatron-Bridge v0.1.0rc3): the model's YAML
  (``scripts/performance/configs/<family>/<model>_llm_pretrain.yaml``): its
  ``ConfigContainer.model`` section and ``perf_matrix.<gpu>.num_gpus_<n>`` (``common``
  merged with the precision's key, ``utils/helpers.py`` ``apply_perf_matrix_overrides``
  L138-169), and what ``run_script.py`` sets per model and GPU.

``read_configs`` reads both from a clone into the kept inputs; ``config_switches`` turns a
row's into ``(plan fields, note)``. A switch paraplan has no field for (per-layer CUDA
graphs, NCCL user buffers) is named in the note, not applied; layer-level CPU activation
offloading is applied as plan ``cpu_offloading_num_layers`` (§5.211).
"""
from __future__ import annotations

from typing import Any

#: the 25.11 configs' model names (``WorkloadBaseConfig`` names) and their files
NAMES_2511 = {"llama3-8b": ("LLAMA3_8B", "llama3"), "llama3-70b": ("LLAMA3_70B", "llama3"),
              "llama3.1-405b": ("LLAMA31_405B", "llama31"),
              "deepseek-v3": ("DEEPSEEK_V3", "deepseek"),
              "gpt-oss-120b": ("GPT_OSS_120B", "gpt_oss"),
              "qwen3-30b-a3b": ("QWEN3_30B_A3B", "qwen3"),
              "qwen3-235b-a22b": ("QWEN3_235B_A22B", "qwen3")}
#: the 25.09 YAML of each model, under ``scripts/performance/configs/``
YAML_2509 = {"llama3-8b": "llama3/llama3_8b_llm_pretrain.yaml",
             "llama3-70b": "llama3/llama3_70b_llm_pretrain.yaml",
             "llama3.1-405b": "llama31/llama31_405b_llm_pretrain.yaml",
             "deepseek-v3": "deepseek/deepseek_v3_llm_pretrain.yaml",
             "qwen3-30b-a3b": "qwen3/qwen3_30b_a3b_llm_pretrain.yaml",
             "qwen3-235b-a22b": "qwen3/qwen3_235b_a22b_llm_pretrain.yaml"}
DTYPE_2511 = {"BF16": "BF16", "FP8-CS": "FP8_CS", "FP8-MX": "FP8_MX"}
DTYPE_2509 = {"BF16": "bf16", "FP8-CS": "fp8_cs", "FP8-MX": "fp8_mx"}
#: the 25.11 config fields read (besides the layout ones, ``LAYOUT``)
FIELDS_2511 = ("use_megatron_fsdp", "cuda_graph_impl", "cuda_graph_scope",
               "cpu_offloading_num_layers", "recompute_num_layers", "recompute_modules",
               "moe_flex_dispatcher_backend", "moe_a2a_overlap")
#: a row's layout cells and each tag's name for them: (row key, v0.2.0 field, YAML key)
LAYOUT = (("tp", "tensor_model_parallel_size", "tp"),
          ("pp", "pipeline_model_parallel_size", "pp"),
          ("cp", "context_parallel_size", "cp"),
          ("vp", "virtual_pipeline_model_parallel_size", "vp"),
          ("ep", "expert_model_parallel_size", "ep"), ("mbs", "micro_batch_size", "mbs"),
          ("gbs", "global_batch_size", "gbs"))
V020 = "NVIDIA-NeMo/Megatron-Bridge@v0.2.0 scripts/performance/"
RC3 = "NVIDIA-NeMo/Megatron-Bridge@v0.1.0rc3 scripts/performance/"
#: HybridEP becomes Megatron's flex dispatcher on GB200/GB300 only; elsewhere the script
#: skips it and the providers' alltoall runs (v0.2.0 ``src/megatron/bridge/training/
#: flex_dispatcher_backend.py`` L54-66); DeepEP on Hopper, B200 and B300 (L47-53)
FLEX_GPUS = {"hybridep": ("GB200", "GB300"), "deepep": ("H100", "B200", "B300")}
#: the v0.2.0 recipe functions' own switches for a model and GPU: Qwen3 recomputes nothing
#: (``qwen3_llm_pretrain.py`` L33-38 ``set_qwen3_common_configs``), Qwen3-235B-A22B on H100
#: turns TP communication overlap off (L141-153 ``CommOverlapConfig(tp_comm_overlap=False)``)
QWEN3_NO_RECOMPUTE_2511 = "configs/qwen3/qwen3_llm_pretrain.py L36-38 (set_qwen3_common_configs)"
TP_OVERLAP_OFF_2511 = {("qwen3-235b-a22b", "H100"): "configs/qwen3/qwen3_llm_pretrain.py L153"}
#: v0.1.0rc3 ``run_script.py``: DeepSeek-V3's ``overlap_grad_reduce`` (L92-95: on on
#: GB200/B200, off on H100), ``delay_wgrad_compute`` with the all-to-all overlap on H100
#: (L80-86), the pipeline layout passed to the recipe (L72); Qwen3's
#: ``CommOverlapConfig(tp_comm_overlap=True)`` (L100, L107)
DSV3_GRAD_REDUCE_2509 = {"GB200": True, "B200": True, "H100": False}


def _line(text: str, needle: str, start: int = 0) -> int:
    """The 1-based number of the first line from ``start`` (0-based) that starts with
    ``needle`` once stripped."""
    lines = text.split("\n")
    return next(i for i in range(start, len(lines)) if lines[i].strip().startswith(needle)) + 1


def read_configs(repo: str, rows: dict[str, list[dict]]) -> dict[str, Any]:
    """From a Megatron-Bridge clone: the v0.2.0 config of every 25.11 run (by name, with its
    file and lines) and the v0.1.0rc3 YAML settings of every 25.09 run (by ``key_2509``, with
    the lines), for ``rows`` = each container's parsed runs."""
    import yaml

    from experiments.bridge_recipe_trace import git_show, workload_configs
    from experiments.transcribe_heldout_2026c import config_lines
    files = tuple(sorted({f"{f}/workload_base_configs.py" for _, f in NAMES_2511.values()}))
    every = workload_configs(repo, "v0.2.0", files)
    out: dict[str, Any] = {"25.11": {}, "25.09": {}}
    for b in rows["25.11"]:
        name = key_2511(b)
        if name in every:
            cf = every[name]
            text = git_show(repo, "v0.2.0", f"scripts/performance/configs/{cf['file']}")
            out["25.11"][name] = {"file": cf["file"], "lines": config_lines(text, name),
                                  **{f: cf[f] for _, f, _ in LAYOUT},
                                  **{f: cf[f] for f in FIELDS_2511}}
    for b in rows["25.09"]:
        path = YAML_2509[b["key"]]
        text = git_show(repo, "v0.1.0rc3", f"scripts/performance/configs/{path}")
        y = yaml.safe_load(text)
        gpu, n = b["sysn"].split("-")[1].lower(), f"num_gpus_{b['n']}"
        pm = y["perf_matrix"][gpu][n]
        merged = {**(pm.get("common") or {}), **(pm.get(DTYPE_2509[b["prec"]]) or {})}
        at = _line(text, f"{gpu}:", _line(text, "perf_matrix:"))
        model = y["ConfigContainer"].get("model") or {}
        out["25.09"][key_2509(b)] = {
            "file": path, "lines": f"L{_line(text, n + ':', at)}", "perf": merged,
            "recompute_granularity": ("unset" if "recompute_granularity" not in model
                                      else model["recompute_granularity"]),
            "pipeline_model_parallel_layout": model.get("pipeline_model_parallel_layout"),
            "model_lines": f"L{_line(text, 'model:')}-{_line(text, 'model:') + len(model)}"}
    return out


def key_2511(b: dict) -> str:
    """The v0.2.0 config name the performance script loads for a 25.11 run."""
    return (f"{NAMES_2511[b['key']][0]}_{b['sysn'].split('-')[1]}_{DTYPE_2511[b['prec']]}"
            "_BASE_CONFIG")


def key_2509(b: dict) -> str:
    """A 25.09 run's YAML entry: ``<file> <gpu> num_gpus_<n> <dtype>``."""
    return (f"{YAML_2509[b['key']]} {b['sysn'].split('-')[1].lower()} num_gpus_{b['n']} "
            f"{DTYPE_2509[b['prec']]}")


def _cell(k: str, v: Any) -> Any:
    return ("n/a" if v in (None, 1) else v) if k == "vp" else v


def _differs(b: dict, mine: dict[str, Any]) -> list[str]:
    """The layout cells where the row (table) and its config differ, "vp n/a vs 12"."""
    return [f"{k} {_cell(k, b[k])} vs {_cell(k, v)}" for k, v in mine.items()
            if _cell(k, b[k]) != _cell(k, v)]


def _recompute_layers(n: int, where: str) -> tuple[dict, str]:
    return ({"recompute": "full", "recompute_layers": n, "recompute_method": "block"},
            f"recompute full, block, {n} layers per chunk (recompute_num_layers {n}: {where}). ")


def switches_2511(cfgs: dict, b: dict) -> tuple[dict, str]:
    """A 25.11 run's plan fields from its v0.2.0 config, and the note."""
    name = key_2511(b)
    cf = cfgs.get(name)
    if cf is None:
        return {}, (f"No Megatron-Bridge v0.2.0 config {name}: the stack's defaults and the "
                    "table's cells. ")
    gpu, moe = b["sysn"].split("-")[1], b["ep"] > 1
    where = f"{V020}configs/{cf['file']} {cf['lines']} {name}"
    sw: dict[str, Any] = {}
    said = [f"Switches from the config the v0.2.0 performance script loads for this model, "
            f"GPU and precision: {where} (imported at the tag; utils/helpers.py L55-83 "
            "set_workload_base_configs applies it). "]
    diff = _differs(b, {k: cf[f] for k, f, _ in LAYOUT})
    if diff:
        said.append(f"Its layout differs from the table's: {', '.join(diff)} (table vs "
                    "config); the row keeps the table's cells and takes the config's switches. ")
    impl, scope = cf["cuda_graph_impl"], cf["cuda_graph_scope"]
    scope = [scope] if isinstance(scope, str) else list(scope or [])
    if impl == "local" and "full_iteration" in scope:
        sw["cuda_graph"] = True
        said.append("cuda_graph: cuda_graph_impl local, scope full_iteration (the whole step "
                    "in one CUDA graph; utils/helpers.py L139-160). ")
    elif impl:
        said.append(f"cuda_graph_impl {impl}, scope {'+'.join(scope)}: per-layer graphs of "
                    "parts of each layer, not the plan's full-iteration graph; stated, not "
                    "modelled. ")
    if cf["recompute_num_layers"] is not None:
        s, n = _recompute_layers(cf["recompute_num_layers"], "utils/helpers.py L174-177")
        sw.update(s)
        said.append(n)
    elif cf["recompute_modules"]:
        sw.update(recompute="selective", recompute_modules="+".join(cf["recompute_modules"]))
        said.append(f"recompute selective, recompute_modules {'+'.join(cf['recompute_modules'])} "
                    "(utils/helpers.py L178-179). ")
    elif b["key"].startswith("qwen3"):
        sw["recompute"] = "none"
        said.append(f"recompute none: {V020}{QWEN3_NO_RECOMPUTE_2511} recompute_granularity "
                    "None. ")
    if cf["cpu_offloading_num_layers"] is not None:
        sw["cpu_offloading_num_layers"] = int(cf["cpu_offloading_num_layers"])
        said.append(f"cpu_offloading_num_layers {cf['cpu_offloading_num_layers']} (activations "
                    "of that many layers offloaded to the host, utils/helpers.py L170-173; "
                    "the plan key of the same name, calibration §5.211). ")
    if bool(cf["use_megatron_fsdp"]) != bool(b["fsdp"]):
        said.append(f"The config's use_megatron_fsdp is {cf['use_megatron_fsdp']}, the table's "
                    f"FSDP column {b['fsdp']}: the table's kept. ")
    tp_off = TP_OVERLAP_OFF_2511.get((b["key"], gpu))
    if tp_off:
        sw["tp_comm_overlap"] = False
        said.append(f"tp_comm_overlap false: {V020}{tp_off}. ")
    if moe:
        backend = cf["moe_flex_dispatcher_backend"]
        used = backend if backend and gpu in FLEX_GPUS.get(backend, ()) else None
        sw["moe_dispatcher"] = used or "alltoall"
        said.append(f"moe_dispatcher {sw['moe_dispatcher']}: moe_flex_dispatcher_backend "
                    f"{backend}" + ("" if used or not backend else
                                    f", which runs on {'/'.join(FLEX_GPUS[backend])} only "
                                    "(src/megatron/bridge/training/flex_dispatcher_backend.py "
                                    "L47-66), so Megatron's alltoall") + ". ")
        sw["ep_overlap"] = bool(cf["moe_a2a_overlap"])
        if sw["ep_overlap"]:
            sw["delay_wgrad"] = True
            said.append("ep_overlap and delay_wgrad: moe_a2a_overlap True "
                        "(utils/helpers.py L182-186: overlap_moe_expert_parallel_comm, "
                        "delay_wgrad_compute). ")
    return sw, "".join(said)


def switches_2509(cfgs: dict, b: dict) -> tuple[dict, str]:
    """A 25.09 run's plan fields from its v0.1.0rc3 YAML and ``run_script.py``, and the note."""
    k = key_2509(b) if b["key"] in YAML_2509 else None
    cf = cfgs.get(k) if k else None
    if cf is None:
        return {}, "No Megatron-Bridge v0.1.0rc3 YAML entry for this run. "
    pm, gpu = cf["perf"], b["sysn"].split("-")[1]
    where = f"{RC3}configs/{cf['file']}"
    sw: dict[str, Any] = {}
    said = [f"Switches from {where} (perf_matrix {cf['lines']}, common merged with "
            f"{DTYPE_2509[b['prec']]}: utils/helpers.py L138-169) and run_script.py. "]
    yaml_cells = {r: pm.get(y, 1 if r in ("tp", "pp", "cp", "ep") else None)
                  for r, _, y in LAYOUT}
    diff = _differs(b, yaml_cells)
    if diff:
        said.append(f"Its layout differs from the table's: {', '.join(diff)} (table vs "
                    "YAML); the row keeps the table's cells. ")
    if pm.get("cuda_graphs"):
        said.append("cuda_graphs true: Megatron-Core's enable_cuda_graph (utils/helpers.py "
                    "L114-120), per-layer graphs, not the plan's full-iteration graph; stated, "
                    "not modelled. ")
    if pm.get("recompute_num_layers") is not None:
        s, n = _recompute_layers(pm["recompute_num_layers"], "utils/helpers.py L123-129")
        sw.update(s)
        said.append(n)
    elif cf["recompute_granularity"] in (None, "selective"):
        rec = "none" if cf["recompute_granularity"] is None else "selective"
        sw["recompute"] = rec
        said.append(f"recompute {rec}: ConfigContainer.model recompute_granularity "
                    f"{cf['recompute_granularity']} ({cf['model_lines']})"
                    + ("; modules: run_script.py's where it names them (L88-91), else "
                       "Megatron-Core's default core_attn" if rec == "selective" else "")
                    + ". ")
    if pm.get("cpu_offloading_num_layers"):
        sw["cpu_offloading_num_layers"] = int(pm["cpu_offloading_num_layers"])
        said.append(f"cpu_offloading_num_layers {pm['cpu_offloading_num_layers']} (activations "
                    "of that many layers offloaded to the host, utils/helpers.py L131-135; "
                    "the plan key of the same name, calibration §5.211). ")
    if bool(pm.get("use_megatron_fsdp")) != bool(b["fsdp"]):
        said.append(f"The YAML's use_megatron_fsdp is {pm.get('use_megatron_fsdp')}, the "
                    f"table's FSDP column {b['fsdp']}: the table's kept. ")
    if pm.get("nccl_ub"):
        said.append("nccl_ub true (NCCL user buffers for FSDP): stated, not modelled. ")
    if b["key"].startswith("qwen3"):
        sw["tp_comm_overlap"] = True
        said.append("tp_comm_overlap true: run_script.py L97-108 CommOverlapConfig("
                    "tp_comm_overlap=True). ")
    if b["key"] == "deepseek-v3":
        sw.update(dsv3_2509(cf, b, gpu, said))
    return sw, "".join(said)


def dsv3_2509(cf: dict, b: dict, gpu: str, said: list[str]) -> dict:
    """DeepSeek-V3's 25.09 switches from ``run_script.py`` and the YAML's pipeline layout
    (appending to the note ``said``)."""
    sw: dict[str, Any] = {"overlap_grad_reduce": DSV3_GRAD_REDUCE_2509[gpu]}
    said.append(f"overlap_grad_reduce {str(sw['overlap_grad_reduce']).lower()}: run_script.py "
                "L92-95. ")
    if gpu == "H100":
        sw["delay_wgrad"] = True
        said.append("delay_wgrad true with the all-to-all overlap: run_script.py L80-83. ")
    lay = cf["pipeline_model_parallel_layout"]
    if not lay:
        return sw
    from strategies.layout import parse_layout
    pp, vp = b["pp"], b["vp"]
    stages = len(parse_layout(lay, "pipeline_model_parallel_layout"))
    what = (f"pipeline layout {lay} ({stages} stages: ConfigContainer.model "
            f"pipeline_model_parallel_layout, {cf['model_lines']}; run_script.py L64-73 passes "
            "it to the recipe)")
    if vp is None and stages % pp == 0 and stages // pp > 1:
        sw.update(pp_layout=lay, virtual_stages=stages // pp, schedule="interleaved 1F1B")
        said.append(f"{what}: the table states pp {pp} and no vp, so Megatron-Core takes vp "
                    f"{stages // pp} from the layout (TransformerConfig.__post_init__: an unset "
                    "virtual_pipeline_model_parallel_size becomes the layout's); the row runs "
                    f"interleaved with {stages // pp} chunks per stage. ")
    elif pp * (vp or 1) == stages:
        sw["pp_layout"] = lay
        said.append(f"{what}: pp {pp} x vp {vp} = {stages} chunks, the layout's. ")
    else:
        said.append(f"{what}: not applied, the table's pp {pp} x vp {vp} = {pp * (vp or 1)} "
                    f"chunks is not the layout's {stages} (Megatron-Core asserts a stated vp "
                    "equal to the layout's; the table's run cannot have used both). ")
    return sw
