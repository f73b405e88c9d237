#!/usr/bin/env python
"""Rebuild ``strategies/reference/data/heldout_mlperf_gpt3.json`` (MLPerf Training's GPT-3
175B runs on H100 and B200, calibration §5.215) and its inputs file from the fetched
results repositories (mlcommons/training_results_v3.0, v3.1, v4.0, v4.1).

Per submission it reads, at the repository's HEAD commit: the launch config the system's
name points at (``config_<system>.sh``, following its ``source`` lines: config_common.sh,
config_fp8.sh, config_tp_h100.sh), the defaults of ``conf/custom.yaml`` (``oc.env:NAME,
DEFAULT``) or, in v3.0, of ``run_and_time.sh`` (``: "${NAME:=DEFAULT}"``), the Dockerfile's
release arguments, the ``systems/<system>.json`` file and the three ``result_N.txt`` logs
(``experiments/mlperf_log.py``). Where custom.yaml decides ``defer_embedding_wgrad_compute``
by its rule (``DEFER_RULE``), the rule is kept in the inputs and evaluated per row at the
run's pp, MINIBS and micro-batch (``plan.defer_embedding_wgrad_compute``,
``plan.wgrad_deferral_limit``: §5.232).

The step time: the median, over a result file, of the per-step ``tracked_stats`` timing
that NeMo's step timer logs (``train_step_timing``, v4.1 ``train_step_timing in s``; one
event per step, ``log_every_n_steps`` 1); where a log holds none (v4.0, v4.1's 1,452-node
resubmission: ``LOG_METRICS=OFF``), the median over the log's blocks of
``(block_stop - block_start) / steps per block``, steps per block = the block's
``epoch_count`` tokens / (global batch x 2048). The row's step time is the median of the
three files' medians. The run-level ``throughput`` event (tokens consumed / NeMo's
``train_epoch_timing``, which holds the evaluations) is kept in the inputs, not used.

    python experiments/transcribe_mlperf_gpt3.py --sources /work/.mirror/mlcommons+training_results_v3.0/repo ...
    python experiments/transcribe_mlperf_gpt3.py --sources DIR... --check   # byte-identical?
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from experiments import mlperf_log  # noqa: E402
from simulator.cli.common import atomic_write_text  # noqa: E402
OUT = os.path.join(ROOT, "strategies", "reference", "data", "heldout_mlperf_gpt3.json")
INPUTS = os.path.join(ROOT, "strategies", "reference", "sources", "heldout_mlperf_gpt3_inputs.json")

SEQ = 2048
#: (round, submitter folder, system name, implementation folder, config file)
SUBMISSIONS = (
    ("v3.0", "NVIDIA", "dgxh100_n64_nemo", "pytorch", "config_DGXH100_64x8x128x4x8_mbs1.sh"),
    ("v3.0", "NVIDIA", "dgxh100_n96_nemo", "pytorch", "config_DGXH100_96x8x128x4x8_mbs1.sh"),
    ("v3.0", "NVIDIA_CoreWeave", "coreweave_hgxh100_n96_ngc23.04_pytorch", "pytorch",
     "config_DGXH100_96x8x128x4x8_mbs1.sh"),
    ("v3.0", "NVIDIA_CoreWeave", "coreweave_hgxh100_n192_ngc23.04_pytorch", "pytorch",
     "config_DGXH100_192x8x64x4x8_mbs1.sh"),
    ("v3.0", "NVIDIA_CoreWeave", "coreweave_hgxh100_n448_ngc23.04_pytorch", "pytorch",
     "config_DGXH100_448x8x24x4x8_mbs1.sh"),
    ("v3.1", "NVIDIA", "eos_n64_ngc23.09_nemo", "pytorch", "config_DGXH100_64x8x192x4x8_mbs1.sh"),
    ("v3.1", "NVIDIA", "eos_n96_ngc23.09_nemo", "pytorch", "config_DGXH100_96x8x128x4x8_mbs1.sh"),
    ("v3.1", "NVIDIA", "eos-dfw_n512_ngc23.09_nemo", "pytorch", "config_DGXH100_512x8x16x4x8_mbs1.sh"),
    ("v3.1", "NVIDIA", "eos-dfw_n768_ngc23.09_nemo", "pytorch", "config_DGXH100_768x8x16x4x8_mbs1.sh"),
    ("v3.1", "NVIDIA", "eos-dfw_n1024_ngc23.09_nemo", "pytorch",
     "config_DGXH100_1024x8x16x4x8_mbs1.sh"),
    ("v3.1", "NVIDIA", "eos-dfw_n1280_ngc23.09_nemo", "pytorch",
     "config_DGXH100_1280x8x8x4x8_mbs1.sh"),
    ("v3.1", "NVIDIA", "eos-dfw_n1344_ngc23.09_nemo", "pytorch",
     "config_DGXH100_1344x8x8x4x8_mbs1.sh"),
    ("v3.1", "Azure+NVIDIA", "ND_H100_v5_n1344_pytorch", "pytorch",
     "config_DGXH100_1344x8x8x4x8_mbs1.sh"),
    ("v4.0", "NVIDIA", "eos_n64_ngc24.04_nemo", "nemo", "config_DGXH100_64x8x128x4x8_mbs2.sh"),
    ("v4.0", "NVIDIA", "eos-dfw_n1344_ngc24.04_nemo", "nemo", "config_DGXH100_1344x8x6x4x6_mbs1_cg.sh"),
    ("v4.0", "NVIDIA", "eos-dfw_n1452_ngc24.04_nemo", "nemo", "config_DGXH100_1452x8x6x4x6_mbs1_cg.sh"),
    ("v4.1", "NVIDIA", "eos_n32_ngc24.09_nemo", "eos_n32_ngc24.09_nemo",
     "config_DGXH100_32x8x256x4x8_mbs2.sh"),
    ("v4.1", "NVIDIA", "eos_n64_ngc24.09_nemo", "eos_n64_ngc24.09_nemo",
     "config_DGXH100_64x8x128x4x8_mbs2.sh"),
    ("v4.1", "NVIDIA", "eos-dfw_n1452_ngc24.04_nemo", "eos-dfw_n1452_ngc24.04_nemo",
     "config_DGXH100_1452x8x6x4x6_mbs1_cg.sh"),
    ("v4.1", "NVIDIA", "b200_n8_preview_nemo", "b200_n8_preview_nemo",
     "config_DGXB200_8x8x1024x4x8_mbs2_cg.sh"),
    ("v4.1", "Oracle", "1536xBM.GPU.H100.8", "../DGXH100_128x8x64x4x8_mbs2",
     "config_DGXH100_192x8x64x4x8_mbs2.sh"),
    ("v4.1", "Oracle", "3072xBM.GPU.H100.8", "../DGXH100_128x8x64x4x8_mbs2",
     "config_DGXH100_384x8x32x4x8_mbs2.sh"),
)

_EXPORT = re.compile(r"^\s*export\s+([A-Z_][A-Z0-9_]*)=(.*)$")
_UNSET = re.compile(r"^\s*unset\s+([A-Z_][A-Z0-9_]*)")
_SOURCE = re.compile(r"^\s*source\s+.*/([\w.]+\.sh)\s*$")
_YAML_DEFAULT = re.compile(r"oc\.env:([A-Z_][A-Z0-9_]*),([^}]+)\}")
_SH_DEFAULT = re.compile(r'^:\s*"\$\{([A-Z_][A-Z0-9_]*):=("?)([^}"]*)\2\}"')


class Mirror:
    """A fetched results repository (a bare git directory), read at its HEAD commit."""

    def __init__(self, path: str):
        self.path = path
        self.commit = self._git("rev-parse", "HEAD").strip()

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", self.path, *args], check=True, capture_output=True,
                              text=True, errors="replace").stdout

    def show(self, rel: str) -> str:
        return self._git("show", f"HEAD:{rel}")

    def has(self, rel: str) -> bool:
        r = subprocess.run(["git", "-C", self.path, "cat-file", "-e", f"HEAD:{rel}"],
                           capture_output=True)
        return r.returncode == 0


def _value(raw: str) -> str:
    v = raw.split(" #")[0].strip()
    m = re.fullmatch(r'"?\$\{[A-Z_][A-Z0-9_]*:[=-]([^}]*)\}"?', v)
    if m:
        return m.group(1)
    return v.strip('"').strip("'")


def shell_env(mirror: Mirror, folder: str, name: str, env: dict[str, str]) -> None:
    """The exports of config ``name`` in ``folder``, in file order, following its ``source``
    lines (the v3.1-era ``config_common_v31.sh`` branch is the one not taken:
    ``MLPERF_VERSION`` is unset); exports inside ``if`` blocks are skipped."""
    depth = 0
    for line in mirror.show(f"{folder}/{name}").splitlines():
        s = line.strip()
        m = _SOURCE.match(s)
        if m and m.group(1) != "config_common_v31.sh":
            if mirror.has(f"{folder}/{m.group(1)}"):
                shell_env(mirror, folder, m.group(1), env)
            else:       # (the B200 preview's config_common_blackwell.sh is not published)
                env.setdefault("_unpublished", m.group(1))
            continue
        if re.match(r"^if\b", s):
            depth += 1
        elif re.match(r"^fi\b", s):
            depth -= 1
        elif depth == 0:
            m = _EXPORT.match(s)
            if m and not m.group(2).startswith("$("):
                env[m.group(1)] = _value(m.group(2))
            m = _UNSET.match(s)
            if m:
                env.pop(m.group(1), None)


def defaults(mirror: Mirror, folder: str) -> tuple[dict[str, str], str]:
    """The switches' defaults where the config does not set them: ``conf/custom.yaml``'s
    ``oc.env`` defaults, else (v3.0) ``run_and_time.sh``'s ``${NAME:=DEFAULT}``."""
    out: dict[str, str] = {}
    if mirror.has(f"{folder}/conf/custom.yaml"):
        for m in _YAML_DEFAULT.finditer(mirror.show(f"{folder}/conf/custom.yaml")):
            if "$" not in m.group(2):
                out.setdefault(m.group(1), m.group(2).strip())
        return out, "conf/custom.yaml"
    for line in mirror.show(f"{folder}/run_and_time.sh").splitlines():
        m = _SH_DEFAULT.match(line.strip())
        if m:
            out.setdefault(m.group(1), m.group(3))
    return out, "run_and_time.sh"


#: the model keys a log's printed (resolved) Hydra config names for the config's variables
PRINTED = {"SEQ_PARALLEL": "sequence_parallel", "ACT_CKPT_GRANULARITY":
           "activations_checkpoint_granularity", "FP8": "fp8", "FP8_HYBRID": "fp8_hybrid",
           "FP8_AMAX_HISTORY": "fp8_amax_history_len", "FP8_AMAX_ALGO": "fp8_amax_compute_algo",
           "FP8_PARAMS": "fp8_params", "LAYER_CUDA_GRAPH": "enable_cuda_graph",
           "INTERLEAVED_PIPELINE": "virtual_pipeline_model_parallel_size",
           "DEFER_EMBEDDING_WGRAD_COMPUTE": "defer_embedding_wgrad_compute",
           "WGRAD_DEFERRAL_LIMIT": "wgrad_deferral_limit"}

#: v4.0's and v4.1's ``conf/custom.yaml`` default for ``defer_embedding_wgrad_compute`` where
#: the config exports no ``DEFER_EMBEDDING_WGRAD_COMPUTE``: off at pp 1, at MINIBS (the
#: per-pipeline batch, global batch / dp) over 256 or at a micro-batch other than 1 ("It
#: consumes too much memory for large GA"), else on
DEFER_RULE = ("${if:${or:${eq:1,${oc.decode:${oc.env:PIPELINE_MODEL_PARALLEL}}},${lt:256,"
              "${oc.decode:${oc.env:MINIBS}}},${neq:1,${oc.decode:${oc.env:MICRO_BATCH_SIZE}}}},"
              "False,True}")
#: where the deferral runs: Megatron-LM (24.09-alpha.rc0 dd182053afc6 / core_v0.7.0.beta
#: 3c0f3ef38c64) buffers the output layer's input and output gradient instead of its
#: weight-gradient GEMM (``tensor_parallel/layers.py`` L423-428, L873-877; the limit only from
#: 24.09: core_v0.7.0.beta has no ``wgrad_deferral_limit``, every micro-batch), NeMo drains
#: the buffer after the forward-backward call on the last stage; neither NeMo bd0b818ac2eb
#: nor Megatron-LM df7271285d3e (v3.1's) has the switch
DEFER_SOURCE = ("NeMo v2.0.0.rc0.beta b2eccd270dd9 / 24.09-alpha.rc0 4068955b5add "
                "megatron_gpt_model.py drain_embedding_wgrad_compute after the forward-backward "
                "call (L765 / L877)")


def custom_yaml(mirror: "Mirror", folder: str) -> str:
    """The folder's ``conf/custom.yaml`` text ('' where it has none)."""
    path = f"{folder}/conf/custom.yaml"
    return mirror.show(path) if mirror.has(path) else ""


def printed_config(log: str) -> dict[str, str]:
    """The resolved model config a log prints (Oracle's v4.1 logs: ``0:       key: value``
    lines), first occurrence of each key."""
    out: dict[str, str] = {}
    for m in re.finditer(r"^\s*0:\s+(\w+):\s*(\S+)\s*$", log, re.M):
        out.setdefault(m.group(1), m.group(2))
    return out


def docker_release(mirror: Mirror, folder: str) -> str:
    """The Dockerfile's base image and NeMo / Megatron / TE revisions (the B200 preview
    submission publishes no Dockerfile: its system file's framework is said instead)."""
    if not mirror.has(f"{folder}/Dockerfile"):
        return "no Dockerfile in the submission; the systems file names the framework 'NVIDIA NEMO'"
    text = mirror.show(f"{folder}/Dockerfile")
    got = dict(re.findall(r"^ARG\s+(FROM_IMAGE_NAME|NEMO_REVISION|MEGATRON_REVISION|TE_REVISION)"
                          r"=(\S+)", text, re.M))
    parts = [f"container {got.get('FROM_IMAGE_NAME', '?')}",
             f"NeMo {got.get('NEMO_REVISION', '?')}"]
    if "MEGATRON_REVISION" in got:
        parts.append(f"Megatron-LM {got['MEGATRON_REVISION']}")
    parts.append(f"Transformer Engine {got.get('TE_REVISION', '?')}"
                 + (" (the container's)" if got.get("TE_REVISION") == "SKIP" else ""))
    return ", ".join(parts)


def _step_events(evs: list[dict]) -> list[float]:
    for key in ("train_step_timing", "train_step_timing in s"):
        got = [v for _, v in mlperf_log.tracked(evs, key)]
        if got:
            return got
    return []


def _block_steps(evs: list[dict], gbs: int) -> list[float]:
    """Seconds per step of each block: (block_stop - block_start) / (the block_start's
    epoch_count tokens / (gbs x SEQ))."""
    out, start = [], None
    for e in evs:
        if e["key"] == "block_start":
            start = e
        elif e["key"] == "block_stop" and start is not None:
            steps = (start.get("metadata") or {})["epoch_count"] / (gbs * SEQ)
            out.append((e["time_ms"] - start["time_ms"]) / 1000.0 / steps)
            start = None
    return out


def read_logs(mirror: Mirror, folder: str) -> dict:
    """Per result file: its step-time median and how, the block median, the throughput
    event, the global batch and gradient-accumulation steps the log states."""
    files = sorted(p for p in mirror._git("ls-tree", "--name-only", "HEAD", folder + "/")
                   .split() if re.search(r"result_\d+\.txt$", p))
    out = []
    for path in files:
        evs = mlperf_log.events(mirror.show(path).splitlines())
        gbs = mlperf_log.values(evs, "global_batch_size")[0]
        steps = _step_events(evs)
        # (v3.0's callback opens one block at the train epoch's start and closes it at its
        # end, evaluations included: no per-block step time there)
        blocks = _block_steps(evs, gbs) if len(mlperf_log.values(evs, "block_start")) > 1 else []
        thr = [v for _, v in mlperf_log.tracked(evs, "throughput")]
        out.append({
            "file": path, "global_batch_size": gbs,
            "gradient_accumulation_steps": mlperf_log.values(evs, "gradient_accumulation_steps")[0],
            "max_sequence_length": mlperf_log.values(evs, "max_sequence_length")[0],
            "step_events": len(steps),
            "step_median_s": statistics.median(steps) if steps else None,
            "blocks": len(blocks),
            "block_median_s": statistics.median(blocks) if blocks else None,
            "throughput_tokens_per_s": thr[0] if thr else None,
        })
    return {"files": out}


def _flag(v: str | None) -> bool:
    return str(v).strip().lower() in ("true", "1")


def gather(mirrors: dict[str, Mirror]) -> list[dict]:
    """The inputs of every submission: config switches, release, system, logs."""
    out = []
    for rnd, sub, system, impl, config in SUBMISSIONS:
        m = mirrors[rnd]
        folder = os.path.normpath(f"{sub}/benchmarks/gpt3/implementations/{impl}")
        dflt, dflt_from = defaults(m, folder)
        env: dict[str, str] = {}
        shell_env(m, folder, config, env)
        sysjson = json.loads(m.show(f"{sub}/systems/{system}.json"))
        logs = read_logs(m, f"{sub}/results/{system}/gpt3")
        keys = ("MINIBS", "TENSOR_MODEL_PARALLEL", "PIPELINE_MODEL_PARALLEL", "DGXNNODES",
                "MICRO_BATCH_SIZE", "INTERLEAVED_PIPELINE", "SEQ_PARALLEL", "TP_COMM_OVERLAP",
                "ACT_CKPT_GRANULARITY", "FP8", "FP8_HYBRID", "FP8_AMAX_HISTORY", "FP8_AMAX_ALGO",
                "FP8_PARAMS", "LAYER_CUDA_GRAPH", "USE_DIST_OPTIMIZER",
                "DEFER_EMBEDDING_WGRAD_COMPUTE", "WGRAD_DEFERRAL_LIMIT")
        printed = printed_config(m.show(logs["files"][0]["file"]))
        log0 = os.path.basename(logs["files"][0]["file"])
        switches = {}
        for k in keys:
            if k in env:
                switches[k] = (env[k], config)
            elif k in dflt:
                switches[k] = (dflt[k], dflt_from)
            elif PRINTED.get(k) in printed:
                switches[k] = (printed[PRINTED[k]], f"{log0}'s printed config")
            elif k == "DEFER_EMBEDDING_WGRAD_COMPUTE" and DEFER_RULE in custom_yaml(m, folder):
                switches[k] = (DEFER_RULE, "conf/custom.yaml's rule")
            else:
                switches[k] = (None, "not set")
        out.append({
            "round": rnd, "submitter": sub, "system": system, "commit": m.commit,
            "repo": f"mlcommons/training_results_{rnd}",
            "config": f"{folder}/{config}", "switches": {k: list(v) for k, v in switches.items()},
            "unpublished_source": env.get("_unpublished"),
            "release": docker_release(m, folder),
            "system_json": {k: sysjson.get(k) for k in (
                "system_name", "number_of_nodes", "accelerators_per_node",
                "accelerator_model_name", "accelerator_interconnect", "host_networking",
                "framework")},
            **logs,
        })
    return out


def _id(s: dict) -> str:
    sub = {"NVIDIA": "nvidia", "NVIDIA_CoreWeave": "coreweave", "Azure+NVIDIA": "azure",
           "Oracle": "oracle"}[s["submitter"]]
    return f"mlperf{s['round'][1:].replace('.', '')}_gpt3_{sub}_{s['system'].split('_ngc')[0]}"


def _interconnect(sj: dict) -> str:
    net = str(sj.get("host_networking") or "")
    if "ConnectX-7" in net or "CX7" in net:
        link = "8 x 400 Gb/s InfiniBand NDR (ConnectX-7) per node"
    elif "ROCE" in net.upper():
        link = "RoCE v2 Ethernet (NIC count and speed not stated in the systems file)"
    else:
        link = "scale-out network not stated in the systems file"
    intra = sj.get("accelerator_interconnect") or "NVLink (not stated)"
    return f"{intra} in the node; {link}. systems file: host_networking '{net}'"


def row(s: dict) -> dict:
    """One reference row from a submission's inputs."""
    sw = {k: v[0] for k, v in s["switches"].items()}
    nodes = int(s["system_json"]["number_of_nodes"])
    per = int(s["system_json"]["accelerators_per_node"])
    n = nodes * per
    tp, pp = int(sw["TENSOR_MODEL_PARALLEL"]), int(sw["PIPELINE_MODEL_PARALLEL"])
    mbs = int(sw["MICRO_BATCH_SIZE"])
    dp = n // (tp * pp)
    files = s["files"]
    gbs = files[0]["global_batch_size"]
    ga = files[0]["gradient_accumulation_steps"]
    if any(f["global_batch_size"] != gbs or f["gradient_accumulation_steps"] != ga for f in files):
        raise ValueError(f"{s['system']}: result files disagree on the batch")
    if ga * dp * mbs != gbs:
        raise ValueError(f"{s['system']}: GA {ga} x DP {dp} x MBS {mbs} != GBS {gbs}")
    config_gbs = int(sw["MINIBS"]) * dp
    vp = sw["INTERLEAVED_PIPELINE"]
    vp = 1 if vp in (None, "0", "null") else int(vp)
    tracked = all(f["step_median_s"] is not None for f in files)
    per_file = [f["step_median_s"] if tracked else f["block_median_s"] for f in files]
    step = statistics.median(per_file)
    fp8 = _flag(sw["FP8"])
    gpu = "B200" if "B200" in s["system_json"]["accelerator_model_name"] else "H100 SXM"
    names = ", ".join(os.path.basename(f["file"]) for f in files)
    how = ("median over the result files of each file's median per-step tracked_stats "
           "train_step_timing (NeMo's step timer, seconds, one event per step)" if tracked else
           "median over the result files of each file's median block time per step: "
           "(block_stop - block_start time_ms) / 1000 / (epoch_count / (gbs x 2048)); "
           "the log has no per-step timing (LOG_METRICS=OFF)")
    cg = _flag(sw["LAYER_CUDA_GRAPH"])
    notes = [
        f"MLPerf Training {s['round']} closed division, {s['submitter']} system {s['system']}: "
        f"config {s['config']}, logs {s['submitter']}/results/{s['system']}/gpt3/{{{names}}}, "
        f"{s['repo']}@{s['commit'][:12]}.",
        f"Layout from the config: TP {tp} x PP {pp} x DP {dp}, micro-batch {mbs}, "
        f"interleave {vp} ({s['switches']['INTERLEAVED_PIPELINE'][1]}); the global batch "
        f"{gbs} and gradient accumulation {ga} are the log's (GA x DP x MBS = GBS checks).",
    ]
    if config_gbs != gbs:
        notes.append(f"The config's MINIBS {sw['MINIBS']} gives a global batch of {config_gbs}; "
                     f"the log's {gbs} (with the log's GA {ga}) is kept: the run set MINIBS "
                     f"{gbs // dp} (the config reads it from the environment).")
    notes.append(
        "Switches: sequence parallel "
        f"{sw['SEQ_PARALLEL']}, TP communication overlap (userbuffers) {sw['TP_COMM_OVERLAP']}, "
        f"activation checkpointing {sw['ACT_CKPT_GRANULARITY']}, distributed optimizer "
        f"{sw['USE_DIST_OPTIMIZER']}, FP8 {sw['FP8']} (hybrid E4M3/E5M2 {sw['FP8_HYBRID']}, "
        f"amax history {sw['FP8_AMAX_HISTORY']} {sw['FP8_AMAX_ALGO']}: delayed scaling), "
        f"FP8 weights (fp8_params) {sw['FP8_PARAMS']}, per-layer CUDA graphs "
        f"(LAYER_CUDA_GRAPH) {sw['LAYER_CUDA_GRAPH']}.")
    if cg:
        notes.append("LAYER_CUDA_GRAPH graphs each transformer layer (custom.yaml "
                     "enable_cuda_graph / external_cuda_graph), not the whole step: "
                     "plan.cuda_graph (one graph per step) stays false.")
    defer = sw["DEFER_EMBEDDING_WGRAD_COMPUTE"]
    if defer == DEFER_RULE:
        defer = not (pp == 1 or gbs // dp > 256 or mbs != 1)
        rule = f"conf/custom.yaml's rule at pp {pp}, MINIBS {gbs // dp}, micro-batch {mbs}"
    else:
        defer = _flag(defer)
        rule = s["switches"]["DEFER_EMBEDDING_WGRAD_COMPUTE"][1]
    limit = int(sw["WGRAD_DEFERRAL_LIMIT"] or 0)
    if defer:
        notes.append(f"defer_embedding_wgrad_compute True ({rule}), wgrad_deferral_limit "
                     f"{limit} ({s['switches']['WGRAD_DEFERRAL_LIMIT'][1]}): the last stage "
                     "runs the output layer's weight-gradient GEMMs of "
                     + ("every micro-batch" if not limit else f"the first {limit} micro-batches")
                     + f" in the pipeline's drain ({DEFER_SOURCE}).")
    fp8_weights = fp8 and _flag(sw["FP8_PARAMS"])
    if fp8_weights:
        notes.append("fp8_params builds the model under Transformer Engine's fp8_model_init "
                     "(FP8 weights, no 16-bit copy) and NeMo's distributed Adam all-gathers "
                     "them as uint8 after the optimizer: plan.fp8_param_gather true (NeMo "
                     f"{FP8_PARAMS_SOURCE}).")
    return {
        "id": _id(s),
        "kind": "measured",
        "tier": 2,
        "source": {
            "ref": s["repo"],
            "table": f"MLPerf Training {s['round']} GPT-3 175B, {s['submitter']} "
                     f"{s['system']} (NVIDIA NeMo implementation), commit {s['commit'][:12]}",
            "config": s["config"],
            "logs": [f["file"] for f in files],
        },
        "stack": f"NVIDIA NeMo / Megatron ({s['release']})",
        "model": {"name": "GPT-3 175B", "layers": 96, "hidden": 12288, "heads": 96,
                  "ffn_hidden": 49152, "vocab": 50688, "seq_len": SEQ},
        "hardware": {"gpu": gpu, "n_gpus": n, "gpus_per_node": per,
                     "interconnect": _interconnect(s["system_json"])},
        "plan": {"tp": tp, "pp": pp, "dp": dp, "cp": 1, "ep": 1, "microbatch": mbs,
                 "global_batch": gbs, "schedule": "interleaved 1F1B" if vp > 1 else "1F1B",
                 "virtual_stages": vp,
                 "recompute": "none" if sw["ACT_CKPT_GRANULARITY"] in (None, "null") else
                 sw["ACT_CKPT_GRANULARITY"],
                 "sequence_parallel": _flag(sw["SEQ_PARALLEL"]),
                 "tp_comm_overlap": _flag(sw["TP_COMM_OVERLAP"]),
                 "zero_stage": 1 if _flag(sw["USE_DIST_OPTIMIZER"]) else 0,
                 "fp8_param_gather": fp8_weights,
                 **({"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": limit}
                    if defer else {}),
                 "grad_accum": ga, "cuda_graph": False},
        "precision": "fp8 (delayed scaling)" if fp8 else "bf16",
        "measured": {"step_time_s": step},
        "derived": {
            "step_time_s": step,
            "per_file_step_s": per_file,
            "min_s": min(per_file), "max_s": max(per_file),
            "how": how,
        },
        "notes": " ".join(notes),
    }


#: where NeMo's ``fp8_params`` is read (the releases of the v4.0 and v4.1 rows):
#: ``megatron_gpt_model.py`` builds the model under ``transformer_engine.pytorch.fp8_model_init``
#: when ``fp8`` and ``fp8_params`` are set, and ``nemo/core/optim/distributed_adam.py`` puts
#: the ``Float8Tensor`` weights in buckets with ``param_sync_dtype=torch.uint8``
FP8_PARAMS_SOURCE = ("v2.0.0.rc0.beta b2eccd270dd9 / 24.09-alpha.rc0 4068955b5add: "
                     "nemo/collections/nlp/models/language_modeling/megatron_gpt_model.py "
                     "fp8_model_init (L328 / L361), nemo/core/optim/distributed_adam.py "
                     "param_sync_dtype=torch.uint8 (L283 / L293)")


MODEL_NOTE = ("GPT-3 175B as the benchmark's config states (custom.yaml / config_common.sh: 96 "
              "layers, hidden 12288, FFN 49152, 96 heads, sequence 2048); vocabulary: the "
              "benchmark's C4 SentencePiece model (c4_en_301_5Mexp2_spm, 50,257 ids in the "
              "MLPerf reference's PassThroughVocabulary(size=50257)) padded by NeMo to a "
              "multiple of make_vocab_size_divisible_by 128 x TP 4 = 50,688.")


def rows_text(inputs: list[dict]) -> str:
    """The data file's text from the inputs (no mirror needed: the tests rebuild it)."""
    rows = [row(s) for s in inputs]
    for r in rows:
        r["notes"] += " " + MODEL_NOTE
    return json.dumps(rows, indent=1, ensure_ascii=False) + "\n"


def build(mirrors: dict[str, Mirror]) -> tuple[str, str]:
    inputs = gather(mirrors)
    return rows_text(inputs), json.dumps(inputs, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", nargs="+", required=True,
                    help="fetched training_results_vX.Y git directories")
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    a = ap.parse_args(argv)
    mirrors = {}
    for d in a.sources:
        m = re.search(r"training_results_(v\d\.\d)", d)
        if m is None:
            print(f"--sources: {d!r} names no training_results_vX.Y", file=sys.stderr)
            return 2
        mirrors[m.group(1)] = Mirror(d)
    missing = sorted({s[0] for s in SUBMISSIONS} - set(mirrors))
    if missing:
        print(f"--sources: no mirror for {', '.join(missing)}", file=sys.stderr)
        return 2
    data, inputs = build(mirrors)
    if a.check:
        same = all(open(p).read() == t for p, t in ((OUT, data), (INPUTS, inputs)))
        print("identical" if same else "differs")
        return 0 if same else 1
    for p, t in ((OUT, data), (INPUTS, inputs)):
        atomic_write_text(p, t)
    print(f"wrote {OUT} ({data.count(chr(10) + ' {')} rows) and {INPUTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
