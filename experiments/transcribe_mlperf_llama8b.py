#!/usr/bin/env python
"""Transcribe the held-out reference file ``strategies/reference/data/heldout_mlperf_llama8b.json``
(calibration §5.221): MLPerf Training's Llama 3.1 8B pre-training benchmark (``llama31_8b``) as
submitted to mlcommons/training_results_v5.1, one row per run on an NVIDIA GPU of the catalog
whose launch config can be identified.

    python experiments/transcribe_mlperf_llama8b.py [--out FILE]
    python experiments/transcribe_mlperf_llama8b.py --sources MIRROR_V51 [--save-inputs FILE]

The reading, sourcing and row pieces are ``transcribe_mlperf_llama``'s (§5.216); what is this
benchmark's own is *which config a run used*, since many 8B submitters publish several configs
of one shape or none. ``identify`` tries, in order: (1) the config the submission's
``README-<system>.md`` names; (2) the config the log itself names: run.sub echoes
``:::DLPAL <container> <job> <nodes> <nodelist> <cluster> <DGXSYSTEM>`` and ``DGXSYSTEM`` is the
sourced config's file name without ``config_`` and ``.sh``; (3) the submitter's config named
for the system (the system's name, a leading ``<k>x`` node count dropped, inside the file
name); (4) the configs of the system's own implementation folder (else of all the
submitter's) whose ``<nodes>x<gpus>x<minibs>xtp<t>pp<p>cp<c>`` name gives the system's GPUs and
the log's global batch; (5) the DLPAL name found only in other submitters' folders (the
submitter published no implementation). Every candidate is sourced with bash and must give
the log's GPUs, ``global_batch_size`` and ``gradient_accumulation_steps``; where several remain
they must give one plan and precision, else the run is left out, with the reason, under the
repository's ``unidentified``.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from experiments import mlperf_log  # noqa: E402
from experiments import transcribe_mlperf_llama as tr  # noqa: E402

OUT = "strategies/reference/data/heldout_mlperf_llama8b.json"
INPUTS = "strategies/reference/sources/heldout_mlperf_llama8b_inputs.json"
BENCH = "llama31_8b"
#: the results repositories read (v6.0 could not be fetched here: calibration §5.221)
REPOS = ("mlcommons/training_results_v5.1",)
#: Llama 3.1 8B with the Llama 3.1 tokenizer the benchmark ships (the implementation README's
#: ``8b/tokenizer``: 128,256 ids, a multiple of 128 so NeMo pads nothing); pretrain.py builds
#: NeMo's ``Llama31Config8B``; ``config_common_8b.sh`` sets ``OVERWRITTEN_NUM_LAYERS=32``
MODEL = {"name": "llama3.1-8b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
         "ffn_hidden": 14336, "vocab": 128256, "params_b": 8.0,
         "hf_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                       "num_hidden_layers": 32, "num_attention_heads": 32,
                       "num_key_value_heads": 8, "vocab_size": 128256,
                       "tie_word_embeddings": False}}
HOW = ("median over result files of the per-file median of the DeltaTimingCallback "
       "train_step_time events (custom_callbacks.py: one step's wall time, between consecutive "
       "train batch ends, logged every LOG_EVERY_N_STEPS=32 steps), the first event of each "
       "file dropped")
_SHAPE = re.compile(r"_(\d+)x(\d+)x(\d+)xtp(\d+)pp(\d+)cp(\d+)")


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          errors="replace", check=True).stdout


def show(repo: str, path: str) -> str | None:
    try:
        return git(repo, "show", f"HEAD:{path}")
    except subprocess.CalledProcessError:
        return None


def log_more(text: str) -> dict[str, Any]:
    """What ``tr.log_facts`` does not keep: the log's ``gradient_accumulation_steps`` and the
    config name run.sub's ``:::DLPAL`` line ends with (None where the log has none)."""
    ga = mlperf_log.values(mlperf_log.events(text.splitlines()), "gradient_accumulation_steps")
    m = re.search(r"^:::DLPAL .* (\S+)$", text, re.M)
    return {"ga": float(ga[0]) if ga else None, "dlpal": m.group(1) if m else None}


def fits(env: dict[str, str], n: int, per_node: int, gbs: int, ga: float) -> bool:
    """Does a sourced config give ``n`` GPUs (``DGXNNODES`` x ``DGXNGPU``; run.sub's
    ``: "${DGXNGPU:=8}"`` leaves the system's ``per_node`` where a config sets none), global
    batch ``gbs`` (``MINIBS`` x dp) and ``ga`` micro-batches a step (gbs /
    (``MICRO_BATCH_SIZE`` x dp))?"""
    try:
        nodes, per, mini, mbs = (int(env[k]) if k in env or k != "DGXNGPU" else per_node
                                 for k in ("DGXNNODES", "DGXNGPU", "MINIBS", "MICRO_BATCH_SIZE"))
        model = int(env["TENSOR_MODEL_PARALLEL"]) * int(env["PIPELINE_MODEL_PARALLEL"]) * int(
            env["CONTEXT_PARALLEL"])
    except (KeyError, ValueError):
        return False
    dp = n // model
    return nodes * per == n and dp * model == n and mini * dp == gbs and gbs == ga * mbs * dp


def signature(sub: dict[str, Any]) -> tuple[Any, ...]:
    """What two candidate configs must share to count as one: the plan cells and switches a
    row reads, and the precision."""
    e = sub["env"]
    return (tuple(e.get(k) for k in ("TENSOR_MODEL_PARALLEL", "PIPELINE_MODEL_PARALLEL",
                                     "CONTEXT_PARALLEL", "MICRO_BATCH_SIZE", "MINIBS")),
            tuple(tr.on(sub, k) for k in ("TP_COMM_OVERLAP", "FULL_CUDA_GRAPH", "FP8_DPA",
                                          "SEQ_PARALLEL")), tr.precision(sub))


def _folders(files: list[str], submitter: str) -> list[str]:
    root = f"{submitter}/benchmarks/{BENCH}/implementations/"
    return sorted({root + f[len(root):].split("/")[0] for f in files
                   if f.startswith(root) and f.count("/") > root.count("/")})


def _configs(files: list[str], folder: str) -> list[str]:
    return sorted(os.path.basename(f) for f in files if os.path.dirname(f) == folder
                  and re.fullmatch(r"config_.+\.sh", os.path.basename(f)))


def candidate(repo: str, files: list[str], impl: str, config: str) -> list[dict[str, Any]]:
    """A config sourced in its folder, files it sources that the folder lacks taken from the
    same submitter's other folders of the benchmark, with the YAML defaults and the
    Dockerfile. Where a sourced file is in none of them, one reading per other submitter's
    folder that holds it (the NVIDIA reference file copied), each said under ``borrowed``."""
    others = [d for d in _folders(files, impl.split("/")[0]) if d != impl]
    first = tr.sourced_env(repo, impl, config, others)
    lent = [[d] for d in sorted({os.path.dirname(f) for f in files if os.path.basename(f) in
                                 first["missing"] and f"/benchmarks/{BENCH}/implementations/"
                                 in f}) if d.split("/")[0] != impl.split("/")[0]]
    envs = [tr.sourced_env(repo, impl, config, o + others) for o in lent] or [first]
    return [{"impl": impl, "config": config, **e,
             "yaml_defaults": tr.yaml_defaults(repo, impl, others),
             "docker": tr.docker_facts(repo, [impl] + others)} for e in envs]


def identify(repo: str, files: list[str], submitter: str, system: str, n: int, per_node: int,
             gbs: int, ga: float, dlpal: str | None) -> tuple[dict[str, Any] | None, str]:
    """``(sourced config, how it was identified)``, or ``(None, why not)``: the rules of the
    module docstring, in order; a candidate that does not give the log's GPUs, batch and
    accumulation is not one."""
    own = _folders(files, submitter)
    home = [d for d in own if system.startswith(os.path.basename(d))] or own

    def pick(cands: list[tuple[str, str]], how: str) -> tuple[dict[str, Any] | None, str]:
        subs = [s for d, c in cands for s in candidate(repo, files, d, c)]
        ok = [s for s in subs if fits(s["env"], n, per_node, gbs, ga)]
        if not ok:
            return None, (f"{how}: " + ", ".join(f"{d}/{c}" for d, c in cands)
                          + f" do not give {n} GPUs, gbs {gbs}, GA {ga:g}")
        said = ", ".join(f"{s['impl']}/{s['config']}" + "".join(
            f" with {f} of {o}" for f, o in s["borrowed"].items()) for s in ok)
        if len({signature(s) for s in ok}) > 1:
            return None, (f"{how}: {len(ok)} readings fit ({said}) with different plans or "
                          "precisions")
        if len(ok) > 1:
            how += (f"; {len(ok)} readings fit and give one plan and precision ({said}), the "
                    "first kept")
        return ok[0], how

    for d in own:
        text = show(repo, f"{d}/README-{system}.md")
        named = re.findall(r"(config_[A-Za-z0-9_.\-]+?\.sh)", text or "")
        if named:
            return pick([(d, named[0])], f"named by {d}/README-{system}.md")
    if dlpal:
        hit = [(d, f"config_{dlpal}.sh") for d in home if f"config_{dlpal}.sh" in _configs(
            files, d)] or [(d, f"config_{dlpal}.sh") for d in own if f"config_{dlpal}.sh" in
                           _configs(files, d)]
        if hit:
            return pick(hit, f"named by the log's :::DLPAL line ({dlpal})")
    stem = re.sub(r"^\d+x", "", system)
    hit = [(d, c) for d in own for c in _configs(files, d) if stem in c]
    if hit:
        s, how = pick(hit, f"the submitter's config named for the system ({stem})")
        if s is not None:
            return s, how
    hit = []
    for d in home:
        for c in _configs(files, d):
            m = _SHAPE.search(c)
            if m:
                nn, g, mb, t, p, cp = map(int, m.groups())
                if nn * g == n and mb * (n // (t * p * cp)) == gbs:
                    hit.append((d, c))
    if hit:
        where = "its implementation folder" if home != own or len(own) == 1 else \
            "the submitter's implementation folders"
        return pick(hit, f"the configs of {where} whose nodes x GPUs x per-replica batch name "
                         "gives the log's GPUs and global batch")
    if dlpal:
        hit = [(d, f"config_{dlpal}.sh") for d in sorted({os.path.dirname(f) for f in files})
               if f"/benchmarks/{BENCH}/implementations/" in d
               and f"config_{dlpal}.sh" in _configs(files, d)]
        if hit:
            return pick(hit, f"named by the log's :::DLPAL line ({dlpal}); the submitter "
                             "published no implementation, the file is another submitter's "
                             "copy of NVIDIA's reference config")
        return None, f"the log names config_{dlpal}.sh, which no folder of the repository holds"
    return None, "no implementation folder, README or DLPAL line names or fits a config"


def read_sources(mirrors: list[str]) -> dict[str, Any]:
    """Everything ``transcribe`` needs from the results mirrors (one per ``REPOS`` entry), with
    each repository's commit; unidentified and non-catalog runs counted with the reason."""
    out: dict[str, Any] = {"benchmark": BENCH, "repos": []}
    for name, repo in zip(REPOS, mirrors):
        files = git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()
        subs, unknown, other = [], [], []
        for (submitter, system), logs in sorted(mlperf_log.result_files(files, BENCH).items()):
            sysj = json.loads(git(repo, "show", f"HEAD:{submitter}/systems/{system}.json"))
            gpu = next((g for w, g in tr.GPUS if w in sysj.get("accelerator_model_name", "")),
                       None)
            if gpu is None:
                other.append({"submitter": submitter, "system": system,
                              "accelerator": sysj.get("accelerator_model_name")})
                continue
            facts = {}
            for f in sorted(logs):
                text = git(repo, "show", f"HEAD:{f}")
                facts[os.path.basename(f)] = {**tr.log_facts(text), **log_more(text), "blob": git(
                    repo, "rev-parse", f"HEAD:{f}").strip()}
            n = int(sysj["number_of_nodes"]) * int(sysj["accelerators_per_node"])
            (gbs, ga, dlpal), = {(v["gbs"], v["ga"], v["dlpal"]) for v in facts.values()}
            sub, how = identify(repo, files, submitter, system, n,
                                int(sysj["accelerators_per_node"]), gbs, ga, dlpal)
            head = {"submitter": submitter, "system": system, "gpu": gpu}
            if sub is None:
                unknown.append({**head, "n_gpus": n, "gbs": gbs, "ga": ga, "dlpal": dlpal,
                                "reason": how})
                continue
            subs.append({**head, **sub, "config_chosen": how,
                         "system_json": {k: sysj.get(k) for k in tr.SYSTEM_KEYS}, "logs": facts})
        out["repos"].append({"repo": name, "commit": git(repo, "rev-parse", "HEAD").strip(),
                             "submissions": subs, "unidentified": unknown,
                             "not_in_catalog": other})
    return out


def scale_out(host_networking: str | None) -> str:
    """The system JSON's ``host_networking`` without its byte-rate clauses (``;``-separated
    parts with a ``GB/s`` or ``TB/s`` figure: the GPU-PCIe and PCIe-NIC bandwidths some
    systems state there), which the reader would take for a NIC's Gb/s."""
    parts = [p.strip() for p in str(host_networking or "").split(";")]
    return "; ".join(p for p in parts if p and not re.search(r"\d\s*[GT]B/s", p))


def row(repo: dict[str, Any], sub: dict[str, Any]) -> dict[str, Any]:
    """One run's row: ``transcribe_mlperf_llama.row`` (which names its own benchmark and
    model) with this benchmark's name, model and step formula; ``INTERLEAVED_PIPELINE=null``
    (no interleaving) read as 1. ``hardware.interconnect`` holds the scale-out network only
    (``scale_out``): the NVLink text (``accelerator_interconnect``, e.g. "NVLINK Gen5 1800
    GB/s", "14.4 TB/s aggregated") goes to the notes, since the reader parses that field for
    the inter-node NICs and the node preset gives the NVLink."""
    s = dict(sub, env={k: v for k, v in sub["env"].items()
                       if not (k == "INTERLEAVED_PIPELINE" and v == "null")})
    r = json.loads(json.dumps(tr.row(repo, s), ensure_ascii=False).replace(
        tr.BENCH, BENCH).replace(tr.BENCH.replace("_", ""), BENCH.replace("_", "")))
    r["model"] = {**MODEL, "seq_len": r["model"]["seq_len"]}
    r["derived"]["how"] = HOW
    sj = sub["system_json"]
    net = scale_out(sj["host_networking"])
    r["hardware"]["interconnect"] = (
        f"scale-out {net or 'not stated'} (systems/{sub['system']}.json host_networking"
        + (", its GB/s clauses dropped" if net != (sj["host_networking"] or "").strip() else "")
        + ")")
    r["notes"] += (f" NVLink (the system JSON's accelerator_interconnect): "
                   f"{sj['accelerator_interconnect'] or 'not stated'}.")
    if "FP8_PARAM_GATHER" in sub["env"] or "FP8_PARAM_GATHER" in sub["yaml_defaults"]:
        # the YAML's ``optim.fp8_param_gather`` (custom.yaml L166), which pretrain.py passes
        # to ``MegatronMixedPrecision(fp8_param_gather=...)`` (L203, L273): FP8 weights, no
        # 16-bit copy, gathered as one byte each (calibration §5.219, §5.224)
        r["plan"]["fp8_param_gather"] = tr.on(sub, "FP8_PARAM_GATHER")
        r["notes"] = r["notes"].replace(
            "(not read by the reference reader for this source)",
            "(stated as plan.fp8_param_gather; the reader applies it under per-tensor FP8)")
    ga = {v["ga"] for v in sub["logs"].values()}
    assert ga == {r["plan"]["grad_accum"]}, (sub["system"], ga, r["plan"])
    dl = {v["dlpal"] for v in sub["logs"].values()} - {None}
    if dl and f"config_{dl.copy().pop()}.sh" != sub["config"]:
        r["notes"] += (f" The logs' :::DLPAL line names {dl.pop()}, a name no file of the "
                       "repository has; the plan and batch above are the log's.")
    return r


def transcribe(src: dict[str, Any]) -> list[dict[str, Any]]:
    """Every identified run's row, in repository then submitter/system order."""
    return [row(repo, sub) for repo in src["repos"] for sub in repo["submissions"]]


def main(argv: list[str] | None = None) -> int:
    return mlperf_log.transcriber_main(
        argv, __doc__.split("\n")[0], read_sources, lambda src: tr.dump(transcribe(src)),
        os.path.join(ROOT, INPUTS), os.path.join(ROOT, OUT))


if __name__ == "__main__":
    raise SystemExit(main())
