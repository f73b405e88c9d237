#!/usr/bin/env python
"""FSDP2's model state (docs/calibration.md §5.32, ``FrameworkProfile.fsdp2``): each
published torchtitan peak and each AutoModel row's peak with the rule off (``fsdp2=False``,
the model before §5.32) and on (the row's profile: torchtitan, and the ``automodel`` profile,
§5.38), GiB, with the peak stage's parameters, gradients and optimizer state.

A what-if, printed beside the model and not part of it:

* torchtitan 405B rows, the fp8 weights. The model keeps the 16-bit gathered weights and
  Transformer Engine's cached fp8 copies (2 B per weight on Hopper,
  ``quantise.weight_copy_bytes``). torchao's Float8Linear with dynamic scaling casts per
  forward (no cached copy: ``no fp8 copies``), and torchtitan's ``llama3_405b.toml`` at
  9dec370 sets ``enable_fsdp_float8_all_gather`` (the gathered weight is fp8, 1 B:
  ``fp8 gather``, the layers' parameters less ``3 B`` each); which one the Table 6 runs used
  is not published.

The AutoModel rows, built in bf16 (``nemo_automodel/components/models/*/model.py``:
``dtype=get_dtype(config.torch_dtype, torch.bfloat16)``, ``initialize_weights(dtype=
torch.bfloat16)``: the FSDP2 shard is a bf16 tensor, the optimizer's parameter, and Adam's m
and v follow its dtype), were a what-if here (``SystemConfig(master_bytes=2,
optimizer_state_bytes=6)``); the ``automodel`` profile states them now
(``FrameworkProfile.master_bytes``, ``optimizer_state_bytes``), and the rows are filed under it.

Run (a few seconds):

    python experiments/fsdp2_memory.py
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.cost import param_counts  # noqa: E402
from strategies.memory.scalar import memory_components, peak_memory         # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference      # noqa: E402

DATA = os.path.join(ROOT, "strategies", "reference", "data")
GIB = 2 ** 30


def _peak(job) -> tuple[int, float, str]:
    s, b = peak_memory(job)
    return s, b.total / GIB, f"{b.params / GIB:.2f}/{b.grads / GIB:.2f}/{b.optimizer / GIB:.2f}"


def _off(job):
    return replace(job, framework=replace(job.framework, fsdp2=False))


def _cases(name: str, prefix: str):
    ref = load_reference(os.path.join(DATA, name))
    for r in ref:
        if r["id"].startswith(prefix):
            c = case_from_entry(r, ref)
            if c.job is not None:
                yield r, c.job


def torchtitan_rows() -> None:
    print("| row | published | fsdp2 off (p/g/o) | fsdp2 on (p/g/o) | error | "
          "no fp8 copies | fp8 gather |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r, job in _cases("published.json", "torchtitan_2412_"):
        m = r.get("measured") or {}
        pub = m.get("memory_gib", m.get("memory_gb"))
        if pub is None or "compile" in r["id"] or "_t2_" in r["id"] or "_t4_" in r["id"] \
                or "_t5_" in r["id"]:
            continue
        _, before, pb = _peak(_off(job))
        s, after, pa = _peak(job)
        extra = ["", ""]
        if job.dtype != "bf16":
            extra[0] = f"{_peak(replace(job, dtype='bf16'))[1]:.1f}"
            p = job.plan
            dense, expert = param_counts.layer_params_split(job.model, p.tp, p.ep, p.etp)
            layers = memory_components(job, s)["layers"]
            held = (dense + expert) * job.layers_of_stage(s) if hasattr(
                job, "layers_of_stage") else layers.params
            extra[1] = f"{after - 3 * held / GIB:.1f}"
        print(f"| {r['id']} | {float(pub):.1f} | {before:.1f} ({pb}) | {after:.1f} ({pa}) | "
              f"{100 * (after / float(pub) - 1):+.1f} % | {extra[0]} | {extra[1]} |")


def automodel_rows() -> None:
    print("\n| row | fsdp2 off | fsdp2 on (automodel profile: bf16-built) |")
    print("| --- | ---: | ---: |")
    for r, job in _cases("automodel_perf.json", ""):
        cols = [_peak(j) for j in (_off(job), job)]
        print(f"| {r['id']} | " + " | ".join(f"{t:.2f} ({pgo})" for _, t, pgo in cols) + " |")


def main() -> int:
    torchtitan_rows()
    automodel_rows()
    return 0


if __name__ == "__main__":
    sys.exit(main())
