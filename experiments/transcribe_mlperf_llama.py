#!/usr/bin/env python
"""Transcribe the held-out reference file ``strategies/reference/data/heldout_mlperf_llama.json``
(calibration §5.216): MLPerf Training's Llama 3.1 405B pre-training benchmark
(``llama31_405b``) as submitted to mlcommons/training_results_v5.0 and v5.1, one row per
submission on an NVIDIA GPU of the catalog.

    python experiments/transcribe_mlperf_llama.py [--out FILE]
    python experiments/transcribe_mlperf_llama.py --sources MIRROR_V50 MIRROR_V51 \
        [--save-inputs FILE] [--out FILE]

``read_sources`` keeps, per submission, what the row is built from: the launch config the
submission's README names (else the one config whose nodes x GPUs and per-replica batch give
the log's GPU count and global batch), sourced with bash so that ``config_common*.sh`` and the
defaults of the Hydra YAML (``conf/custom.yaml``) fill what it leaves; the Dockerfile's
container and Megatron/NeMo/TE revisions; the system JSON (GPU, nodes, interconnect); and,
per result file, the median of the per-step ``train_step_time`` events the implementation's
``DeltaTimingCallback`` logs (``custom_callbacks.py``: the wall time between two consecutive
``on_train_batch_end`` calls, seconds), the first one dropped (it runs from the post-warm-up
tick to the first real step's end). ``transcribe`` turns them into rows: step time = the
median over result files of those medians (``step_time``).
"""
from __future__ import annotations

import io
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from experiments import mlperf_log  # noqa: E402

OUT = "strategies/reference/data/heldout_mlperf_llama.json"
INPUTS = "strategies/reference/sources/heldout_mlperf_llama_inputs.json"
BENCH = "llama31_405b"
#: the results repositories read, by the version their name carries
REPOS = ("mlcommons/training_results_v5.0", "mlcommons/training_results_v5.1")
#: the launch variables a row reads (the config, its ``config_common*.sh`` and run.sub's
#: defaults); the YAML's ``${oc.env:NAME,default}`` gives the rest
ENV_KEYS = ("DGXNNODES", "DGXNGPU", "MINIBS", "TENSOR_MODEL_PARALLEL", "PIPELINE_MODEL_PARALLEL",
            "INTERLEAVED_PIPELINE", "CONTEXT_PARALLEL", "MICRO_BATCH_SIZE", "FP8", "FP8_HYBRID",
            "FP8_RECIPE", "FP4", "FP4_RECIPE", "FP8_DPA", "FP8_PARAM_GATHER", "TP_COMM_OVERLAP",
            "SEQ_PARALLEL", "FULL_CUDA_GRAPH", "LAYER_CUDA_GRAPH", "MCORE_CUDA_GRAPH",
            "ACT_CKPT_GRANULARITY", "ACT_CKPT_METHOD", "ACT_CKPT_NUM_LAYERS", "USE_DIST_OPTIMIZER",
            "OVERLAP_GRAD_REDUCE", "OVERLAP_PARAM_GATHER", "ASYM_PP_EMBED", "ASYM_PP_LOSS",
            "OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP", "CP_COMM_TYPE",
            "DEFER_EMBEDDING_WGRAD_COMPUTE", "WGRAD_DEFERRAL_LIMIT")
#: the launch variables read beside ``ENV_KEYS`` for a rack-scale row: v5.1's ``SEGMENT``, the
#: Slurm segment the job is placed in (``sbatch --segment``: that many nodes, here 4-GPU trays,
#: in one topology block, one NVL72 rack); nothing in the repository reads it, the launcher does
RACK_KEYS = ("SEGMENT",)
#: a rack-scale system's name gives its racks: ``Carina (16x NVIDIA GB200 NVL72)``
RACKS_IN_NAME = re.compile(r"\((\d+)x NVIDIA GB\d00 NVL72\)")
#: the system JSON fields a row keeps
SYSTEM_KEYS = ("system_name", "number_of_nodes", "accelerators_per_node", "accelerator_model_name",
               "accelerator_interconnect", "host_networking")
#: the catalog's GPU named by a system JSON's ``accelerator_model_name`` (first match wins)
#: (shared with ``transcribe_mlperf_llama8b``; this benchmark has no B300 run)
GPUS = (("GB300", "GB300"), ("GB200", "GB200"), ("B300", "B300"), ("B200", "B200"),
        ("H200", "H200"), ("H100", "H100"))
#: the Llama 3.1 405B shape (the benchmark's model: Llama 3.1 405B with the Mixtral 8x22B
#: tokenizer, the implementations' README "Model details"); vocabulary 32768, Mixtral-8x22B's
#: (strategies/presets.py ``mixtral-8x22b``), model fields as heldout_2026e.json's 405B rows
MODEL = {"name": "llama3.1-405b", "layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8,
         "ffn_hidden": 53248, "vocab": 32768, "params_b": 405,
         "hf_config": {"model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248,
                       "num_hidden_layers": 126, "num_attention_heads": 128,
                       "num_key_value_heads": 8, "vocab_size": 32768,
                       "tie_word_embeddings": False}}
#: the step's formula, said in every row's ``derived``
HOW = ("median over result files of the per-file median of the DeltaTimingCallback "
       "train_step_time events (custom_callbacks.py; seconds between consecutive train batch "
       "ends), the first event of each file dropped")


# ----------------------------------------------------------------------------- reading

def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          errors="replace", check=True).stdout


def _show(repo: str, path: str) -> str:
    return _git(repo, "show", f"HEAD:{path}")


def log_facts(text: str) -> dict[str, Any]:
    """What one result file gives: its global batch, sequence length, platform, the number of
    per-step ``train_step_time`` events and their median with the first dropped (seconds), and
    the median of the ``throughput`` events (samples/s) where the log has them."""
    evs = mlperf_log.events(text.splitlines())
    first = {k: mlperf_log.values(evs, k)[0] for k in
             ("global_batch_size", "max_sequence_length", "submission_platform")
             if mlperf_log.values(evs, k)}
    steps = [float(e["value"]["train_step_time"]) for e in evs
             if e.get("key") == "tracked_stats" and isinstance(e.get("value"), dict)
             and "train_step_time" in e["value"]
             and str((e.get("metadata") or {}).get("file", "")).endswith("custom_callbacks.py")]
    thr = [v for _, v in mlperf_log.tracked(evs, "throughput")]
    return {"gbs": first.get("global_batch_size"), "seq": first.get("max_sequence_length"),
            "platform": first.get("submission_platform"), "step_events": len(steps),
            "median_step_s": statistics.median(steps[1:]) if len(steps) > 1 else None,
            "median_throughput": statistics.median(thr) if thr else None}


def _sourced(text: str) -> list[str]:
    return re.findall(r"^\s*source\s+\$\(dirname \$\{BASH_SOURCE\[0\]\}\)/(\S+)", text, re.M)


def _extract(repo: str, dirs: list[str], into: str) -> None:
    """``git archive`` each of ``dirs`` flat into ``into``, later ones over earlier ones."""
    for d in dirs:
        blob = subprocess.run(["git", "-C", repo, "archive", "HEAD", d], capture_output=True,
                              check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
            for m in tf.getmembers():
                if m.isfile() and m.name.count("/") == d.count("/") + 1:
                    m.name = os.path.basename(m.name)
                    tf.extract(m, into, filter="data")


def sourced_env(repo: str, impl: str, config: str, others: list[str],
                keys: tuple[str, ...] = ENV_KEYS) -> dict[str, Any]:
    """The ``keys`` values after ``source <config>`` in bash, with the files it sources
    (recursively) that its own implementation folder lacks taken from the submitter's other
    implementation folders of the benchmark (``others``), said under ``borrowed``; a sourced
    file found nowhere is said under ``missing``."""
    own = set(_git(repo, "ls-tree", "--name-only", "HEAD", impl + "/").split())
    own = {os.path.basename(p) for p in own}
    with tempfile.TemporaryDirectory() as tmp:
        _extract(repo, others + [impl], tmp)
        todo, seen, borrowed, missing = [config], set(), {}, []
        while todo:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            p = os.path.join(tmp, f)
            if not os.path.exists(p):
                missing.append(f)
                continue
            if f not in own:
                borrowed[f] = next(o for o in others if f in {os.path.basename(x) for x in _git(
                    repo, "ls-tree", "--name-only", "HEAD", o + "/").split()})
            todo += _sourced(open(p, encoding="utf-8").read())
        script = (f"cd {tmp} && source ./{config} >/dev/null 2>&1; "
                  + "; ".join(f'echo "{k}=${{{k}-<unset>}}"' for k in keys))
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {"env": {k: v for k, v in env.items() if v != "<unset>"},
            "borrowed": dict(sorted(borrowed.items())), "missing": sorted(missing)}


def yaml_defaults(repo: str, impl: str, others: list[str]) -> dict[str, str]:
    """``${oc.env:NAME,default}`` defaults of the implementation's Hydra YAMLs
    (``conf/llama31_config_custom.yaml`` then ``conf/custom.yaml``) for ``ENV_KEYS``."""
    out: dict[str, str] = {}
    for d in [impl] + others:
        for y in ("conf/llama31_config_custom.yaml", "conf/custom.yaml"):
            try:
                text = _show(repo, f"{d}/{y}")
            except subprocess.CalledProcessError:
                continue
            for k, v in re.findall(r"oc\.env:([A-Z0-9_]+),([^}]*)\}", text):
                if k in ENV_KEYS:
                    out.setdefault(k, v.strip())
        if out:
            return dict(sorted(out.items()))
    return out


def docker_facts(repo: str, dirs: list[str]) -> dict[str, str]:
    """The first Dockerfile's base image and the Megatron-Core / NeMo / TE revisions it
    builds (``ARG`` lines), with its path."""
    for d in dirs:
        try:
            text = _show(repo, f"{d}/Dockerfile")
        except subprocess.CalledProcessError:
            continue
        args = dict(re.findall(r"^ARG ([A-Z_]+)=(\S+)", text, re.M))
        return {"path": f"{d}/Dockerfile", **{k: args[k] for k in (
            "FROM_IMAGE_NAME", "NEMO_REVISION", "MCORE_REVISION", "TE_REVISION") if k in args}}
    return {}


def choose_config(repo: str, impls: list[str], system: str, n_gpus: int,
                  gbs: int) -> tuple[str, str, str]:
    """``(implementation folder, config file, how it was chosen)``: the config the
    submission's ``README-<system>.md`` names, else the one config whose name's
    ``<nodes>x<gpus>x<minibs>xtp<t>pp<p>cp<c>`` gives ``n_gpus`` and ``gbs``."""
    for d in impls:
        try:
            text = _show(repo, f"{d}/README-{system}.md")
        except subprocess.CalledProcessError:
            continue
        named = re.findall(r"(config_[A-Za-z0-9_.\-]+?\.sh)", text)
        if named:
            return d, named[0], f"named by {d}/README-{system}.md"
    fit = []
    for d in impls:
        for f in _git(repo, "ls-tree", "--name-only", "HEAD", d + "/").split():
            m = re.search(r"config_.*?_(\d+)x(\d+)x(\d+)xtp(\d+)pp(\d+)cp(\d+)", f)
            if m:
                nn, g, mb, t, p, c = map(int, m.groups())
                if nn * g == n_gpus and mb * (n_gpus // (t * p * c)) == gbs:
                    fit.append((d, os.path.basename(f)))
    if len(fit) != 1:
        raise ValueError(f"{system}: {len(fit)} configs fit {n_gpus} GPUs and gbs {gbs}: {fit}")
    return fit[0][0], fit[0][1], ("the only config of the submitter's implementations whose "
                                  "nodes x GPUs x per-replica batch give the log's GPUs and "
                                  "global batch")


def read_sources(mirrors: list[str]) -> dict[str, Any]:
    """Everything ``transcribe`` needs from the results mirrors (one per ``REPOS`` entry, in
    order), with each repository's commit; AMD and other non-catalog submissions counted."""
    out: dict[str, Any] = {"benchmark": BENCH, "repos": []}
    for name, repo in zip(REPOS, mirrors):
        files = _git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()
        results: dict[tuple[str, str], list[str]] = {}
        for f in files:
            parts = f.split("/")
            if len(parts) == 5 and parts[1] == "results" and parts[3] == BENCH \
                    and re.fullmatch(r"result_\d+\.txt", parts[4]):
                results.setdefault((parts[0], parts[2]), []).append(f)
        subs, other = [], []
        for (submitter, system), logs in sorted(results.items()):
            sysj = json.loads(_show(repo, f"{submitter}/systems/{system}.json"))
            gpu = next((g for w, g in GPUS if w in sysj.get("accelerator_model_name", "")), None)
            if gpu is None:
                other.append({"submitter": submitter, "system": system,
                              "accelerator": sysj.get("accelerator_model_name")})
                continue
            facts = {os.path.basename(f): {**log_facts(_show(repo, f)), "blob": _git(
                repo, "rev-parse", f"HEAD:{f}").strip()} for f in sorted(logs)}
            n = int(sysj["number_of_nodes"]) * int(sysj["accelerators_per_node"])
            gbs = {v["gbs"] for v in facts.values()}
            assert len(gbs) == 1, (system, gbs)
            impl_root = f"{submitter}/benchmarks/{BENCH}/implementations/"
            impls = sorted({f[len(impl_root):].split("/")[0] for f in files
                            if f.startswith(impl_root)})
            impls = [impl_root + d for d in ([system] if system in impls else impls)]
            impl, config, how = choose_config(repo, impls, system, n, gbs.pop())
            others = [impl_root + d for d in sorted({f[len(impl_root):].split("/")[0]
                                                     for f in files if f.startswith(impl_root)})
                      if impl_root + d != impl]
            env = sourced_env(repo, impl, config, others, ENV_KEYS + RACK_KEYS)
            subs.append({"submitter": submitter, "system": system, "impl": impl,
                         "config": config, "config_chosen": how, **env,
                         "yaml_defaults": yaml_defaults(repo, impl, others),
                         "docker": docker_facts(repo, [impl] + others),
                         "system_json": {k: sysj.get(k) for k in SYSTEM_KEYS},
                         "gpu": gpu, "logs": facts})
        commit = _git(repo, "rev-parse", "HEAD").strip()
        out["repos"].append({"repo": name, "commit": commit, "submissions": subs,
                             "not_in_catalog": other})
    return out


# ----------------------------------------------------------------------------- rows

def step_time(sub: dict[str, Any]) -> tuple[float, float, float]:
    """(median, min, max) over a submission's result files of their median step (seconds)."""
    meds = [v["median_step_s"] for v in sub["logs"].values()]
    return statistics.median(meds), min(meds), max(meds)


def switch(sub: dict[str, Any], key: str) -> str | None:
    """A launch variable as the run saw it: the sourced config's, else the YAML's default."""
    return sub["env"].get(key, sub["yaml_defaults"].get(key))


def on(sub: dict[str, Any], key: str) -> bool:
    return str(switch(sub, key)).lower() in ("true", "1")


def precision(sub: dict[str, Any]) -> str:
    """The row's precision text: NVFP4 (``FP4=True``), else FP8 with the config's
    ``FP8_RECIPE`` (Megatron-Core's ``fp8_recipe``: ``tensorwise`` is per-tensor current
    scaling, ``delayed`` delayed scaling), else bf16."""
    if on(sub, "FP4"):
        return f"nvfp4 (FP4=True, FP4_RECIPE={switch(sub, 'FP4_RECIPE')})"
    if on(sub, "FP8"):
        r = switch(sub, "FP8_RECIPE")
        kind = {"tensorwise": "current scaling", "delayed": "delayed scaling"}.get(r, r)
        fmt = "hybrid" if on(sub, "FP8_HYBRID") else "e4m3"
        return f"fp8 ({kind}; FP8_RECIPE={r}, format {fmt})"
    return "bf16"


def pp_layout(layers: int, pp: int, vp: int) -> str | None:
    """Megatron-Core's pipeline layout for ``account_for_embedding_in_pipeline_split`` and
    ``account_for_loss_in_pipeline_split`` (``ASYM_PP_EMBED`` / ``ASYM_PP_LOSS``): the
    embedding and the loss each take one layer's slot, so with ``(layers + 2) / (pp * vp)``
    slots a chunk the first chunk holds the embedding and one layer fewer, the last one layer
    fewer and the loss; None where the slots do not divide."""
    chunks = pp * vp
    if (layers + 2) % chunks or chunks < 2:
        return None
    per = (layers + 2) // chunks
    return f"E{'t' * (per - 1)}|({'t' * per}|)*{chunks - 2}{'t' * (per - 1)}L"


def nvlink_domain(sub: dict[str, Any]) -> tuple[int, str] | None:
    """(GPUs per NVLink domain in the job, how it is known) for a rack-scale submission, None
    for the others: the trays (``number_of_nodes``) over the racks the system's name gives
    (v5.0 and v5.1; v5.0's configs state no segment), checked against the config's
    ``SEGMENT`` (trays per Slurm block) where it sets one (v5.1)."""
    sj = sub["system_json"]
    m = RACKS_IN_NAME.search(str(sj.get("system_name") or ""))
    if m is None:
        return None
    trays, racks, per_tray = int(sj["number_of_nodes"]), int(m.group(1)), int(
        sj["accelerators_per_node"])
    if trays % racks:
        raise ValueError(f"{sub['system']}: {trays} trays over {racks} racks")
    per_rack = trays // racks
    how = (f"the system's name gives {racks} NVL72 racks for its {trays} trays: {per_rack} "
           f"trays ({per_rack * per_tray} GPUs) of each rack's 18 in the job, one NVLink "
           f"domain each")
    seg = sub["env"].get("SEGMENT")
    if seg is not None:
        if int(seg) != per_rack:
            raise ValueError(f"{sub['system']}: SEGMENT={seg} but {per_rack} trays a rack")
        how += (f"; the config's SEGMENT={seg} (the Slurm segment: {seg} trays placed in one "
                "block, an NVL72 rack) agrees")
    return per_rack * per_tray, how


def scale_out(host_networking: str) -> str:
    """The row's scale-out text from a system JSON's ``host_networking``: as written where it
    counts its NICs (``4x ConnectX-7 IB NDR 400Gb/s``); else its first clause, said to state
    no NIC count or rate (University of Florida's ``InfiniBand; Data bandwidth for GPU-PCIe:
    504 GB/s; PCIe-NIC: 500 GB/s``: PCIe figures, kept in the row's notes; the reader then
    takes the GPU's node preset's NICs)."""
    if re.search(r"\b\d+\s*x", host_networking):
        return host_networking
    return (f"{host_networking.split(';')[0].strip()} (NIC count and rate not stated in the "
            "systems file)")


def row(repo: dict[str, Any], sub: dict[str, Any]) -> dict[str, Any]:
    """One submission's row."""
    e, sj = sub["env"], sub["system_json"]
    n = int(sj["number_of_nodes"]) * int(sj["accelerators_per_node"])
    tp, pp, cp = (int(e[k]) for k in ("TENSOR_MODEL_PARALLEL", "PIPELINE_MODEL_PARALLEL",
                                      "CONTEXT_PARALLEL"))
    vp = int(e.get("INTERLEAVED_PIPELINE", 1))
    mbs = int(e["MICRO_BATCH_SIZE"])
    dp = n // (tp * pp * cp)
    gbs = int(e["MINIBS"]) * dp
    logs = sub["logs"]
    assert {v["gbs"] for v in logs.values()} == {gbs}, (sub["system"], gbs)
    seq = next(iter(logs.values()))["seq"]
    step, lo, hi = step_time(sub)
    ver = repo["repo"].rsplit("_v", 1)[1]
    d = sub["docker"]
    image = d.get("FROM_IMAGE_NAME", "")
    cont = image.rsplit(":", 1)[-1].split("-")[0]
    te = d.get("TE_REVISION")
    te = f"the base image's" if te in (None, "SKIP") else te
    # (the base image is NGC PyTorch with NeMo, Megatron-Core and TE built over it, not a
    # NeMo container: no text names one, so the reader keeps the newest TE rules)
    stack = (f"NeMo {d.get('NEMO_REVISION')} / Megatron-Core {d.get('MCORE_REVISION')} / "
             f"Transformer Engine {te}, built on {image} ({d.get('path')}; MLPerf Training "
             f"v{ver} {sub['submitter']} implementation)")
    plan: dict[str, Any] = {
        "tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": 1, "microbatch": mbs,
        "global_batch": gbs, "schedule": "interleaved 1F1B" if vp > 1 else "1F1B",
        "virtual_stages": vp,
        "recompute": switch(sub, "ACT_CKPT_GRANULARITY") if switch(
            sub, "ACT_CKPT_GRANULARITY") not in (None, "null") else "none",
        "sequence_parallel": on(sub, "SEQ_PARALLEL") and tp > 1,
        "zero_stage": None, "grad_accum": gbs // (mbs * dp),
        "tp_comm_overlap": on(sub, "TP_COMM_OVERLAP") and tp > 1,
        "cuda_graph": on(sub, "FULL_CUDA_GRAPH")}
    if on(sub, "FP8_DPA"):
        plan["fp8_attention"] = True
    # Megatron-Core's deferred output-layer weight gradient (pretrain.py passes the YAML's
    # model.defer_embedding_wgrad_compute / wgrad_deferral_limit to NeMo's
    # MegatronCommOverlapCallback; calibration §5.232, §5.234)
    defer = on(sub, "DEFER_EMBEDDING_WGRAD_COMPUTE")
    if defer:
        plan["defer_embedding_wgrad_compute"] = True
        plan["wgrad_deferral_limit"] = int(switch(sub, "WGRAD_DEFERRAL_LIMIT") or 0)
    layout = pp_layout(MODEL["layers"], pp, vp) if on(sub, "ASYM_PP_EMBED") and on(
        sub, "ASYM_PP_LOSS") else None
    if layout:
        plan["pp_layout"] = layout
    sid = re.sub(r"[^a-z0-9]+", "", sub["system"].lower())
    rid = f"mlperf{ver.replace('.', '')}_llama31405b_{sid}_{sub['gpu'].lower()}_{n}"
    files = sorted(logs)
    res = f"{sub['submitter']}/results/{sub['system']}/{BENCH}/"
    switches = ", ".join(f"{k}={switch(sub, k)}" for k in (
        "FP8", "FP8_RECIPE", "FP8_HYBRID", "FP4", "FP8_DPA", "FP8_PARAM_GATHER",
        "TP_COMM_OVERLAP", "SEQ_PARALLEL", "FULL_CUDA_GRAPH", "ACT_CKPT_GRANULARITY",
        "USE_DIST_OPTIMIZER", "OVERLAP_GRAD_REDUCE", "OVERLAP_PARAM_GATHER", "ASYM_PP_EMBED",
        "ASYM_PP_LOSS") if switch(sub, k) is not None)
    notes = [f"MLPerf Training v{ver} closed, {sub['submitter']}, system {sub['system']} "
             f"({sj['system_name']}). Config {sub['impl']}/{sub['config']} "
             f"({sub['config_chosen']}), sourced with its config_common*.sh; switches: "
             f"{switches} (the YAML's oc.env default where the scripts set none)."]
    if sub["borrowed"]:
        notes.append("Sourced from the submitter's other implementation folder: " + ", ".join(
            f"{f} ({o})" for f, o in sub["borrowed"].items()) + ".")
    if sub["missing"]:
        notes.append("Sourced but absent from the repository: " + ", ".join(sub["missing"])
                     + " (its settings are unknown; the row takes the rest).")
    notes.append(f"Logs {res}{{{','.join(files)}}} at {repo['repo']}@{repo['commit'][:12]}.")
    if layout:
        notes.append(f"ASYM_PP_EMBED and ASYM_PP_LOSS: the embedding and the loss each take a "
                     f"layer's slot in the pipeline split (pp_layout {layout}).")
    if defer:
        notes.append(f"DEFER_EMBEDDING_WGRAD_COMPUTE=True, WGRAD_DEFERRAL_LIMIT="
                     f"{plan['wgrad_deferral_limit']}: the last stage keeps the output layer's "
                     "input and logits' gradient of the first that many micro-batches and runs "
                     "their weight-gradient GEMMs in the pipeline's drain (Megatron-Core "
                     "tensor_parallel/layers.py, pipeline_parallel/schedules.py "
                     "finish_embedding_wgrad_compute).")
    if on(sub, "FP8_PARAM_GATHER"):
        notes.append("FP8_PARAM_GATHER=True: the distributed optimizer all-gathers FP8 weights "
                     "(not read by the reference reader for this source).")
    if scale_out(sj["host_networking"]) != sj["host_networking"]:
        notes.append(f"The system JSON's host_networking, '{sj['host_networking']}', counts no "
                     "NICs (the row's interconnect keeps its first clause).")
    domain = nvlink_domain(sub)
    if domain:
        notes.append(f"NVLink domain {domain[0]} GPUs: {domain[1]}.")
    thr = [v["median_throughput"] for v in logs.values() if v["median_throughput"]]
    if thr:
        notes.append(f"The log's mlperf_common block 'throughput' (samples/s, block mean) "
                     f"gives gbs / median = {gbs / statistics.median(thr):.4f} s, against "
                     f"{step:.4f} s from the per-step events.")
    return {
        "id": rid, "kind": "measured", "tier": 2,
        "source": {"ref": f"{repo['repo']}",
                   "table": f"{res}result_*.txt, commit {repo['commit'][:12]} (MLPerf Training "
                            f"v{ver} {BENCH}, the NeMo implementation; NGC PyTorch {cont} "
                            "base image)",
                   "row": f"{sub['system']}: {n} x {sub['gpu']}, gbs {gbs}, seq {seq}, "
                          f"median train_step_time {step:.6f} s over {len(files)} result files"},
        "stack": stack,
        "model": {**MODEL, "seq_len": seq},
        "hardware": {"gpu": sub["gpu"], "n_gpus": n,
                     "gpus_per_node": int(sj["accelerators_per_node"]),
                     **({"nvlink_domain_gpus": domain[0]} if domain else {}),
                     "interconnect": f"{sj['accelerator_interconnect']}; scale-out "
                                     f"{scale_out(sj['host_networking'])} "
                                     f"(systems/{sub['system']}.json)"},
        "plan": plan,
        "precision": precision(sub),
        "measured": {"step_time_s": step, "samples_per_s": gbs / step,
                     "tokens_per_s_per_gpu": gbs * seq / (step * n)},
        "derived": {"step_time_s": step, "how": HOW,
                    "per_file_median_step_s": [logs[f]["median_step_s"] for f in files],
                    "spread_s": [lo, hi]},
        "notes": " ".join(notes)}


def transcribe(src: dict[str, Any]) -> list[dict[str, Any]]:
    """Every catalog-GPU submission's row, in repository then submitter/system order; a
    submission whose result files are byte for byte an earlier row's (the same git blobs:
    Nebius's H200 runs, submitted to v5.0 and again to v5.1) is that row's duplicate."""
    rows, seen = [], {}
    for repo in src["repos"]:
        for sub in repo["submissions"]:
            r = row(repo, sub)
            blobs = tuple(sorted(v["blob"] for v in sub["logs"].values()))
            if blobs in seen:
                r["duplicate_of"] = seen[blobs]
                r["notes"] += (f" The result files are the same git blobs as {seen[blobs]}'s "
                               "(the same runs, submitted again): a duplicate, not counted.")
            else:
                seen[blobs] = r["id"]
            rows.append(r)
    return rows


def dump(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    return mlperf_log.transcriber_main(
        argv, __doc__.split("\n")[0], read_sources, lambda src: dump(transcribe(src)),
        os.path.join(ROOT, INPUTS), os.path.join(ROOT, OUT))


if __name__ == "__main__":
    raise SystemExit(main())
