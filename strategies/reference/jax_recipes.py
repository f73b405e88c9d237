"""The remat policy of the published JAX/MaxText runs whose recipe states one.

NVIDIA's DGX Cloud benchmarking recipe for MaxText Llama 2 70B (NVIDIA/dgxc-benchmarking, tag
v24.11.1, ``maxtext/configure.sh``; its README_70b.md holds the published step times) runs
``remat_policy=custom`` (the ``CONFIG_OVERRIDES`` after ``remat_policy=${POLICY}``) with, in
bf16, ``query_proj key_proj value_proj qkv_proj out_proj mlpwo = device`` (its ``POLICY`` name
``save_dot_except_mlpwi``) and, in fp8, the same without ``mlpwo`` (``save_dot_except_mlp``);
every other tensor keeps base.yml's ``remat``. Later tags (v25.02 on) switched to
``save_qkv_proj`` and 8192-token sequences: other runs, not these rows.

The PaxML GPT-3 175B FP8 rows of the same suite (``paxml/README_175b.md`` @v24.11.1) run
``Synthetic175BCkpt`` (``paxml/paxml_mod_configs.py``: ``CHECKPOINT_POLICY =
SAVE_QKV_OUT_PROJ``) with ``ENABLE_TE=1`` (``paxml/configure.sh``), so each layer is Transformer
Engine's ``TransformerLayer`` (JAX-Toolbox's Praxis ``te_helper``). Praxis's policy is
``save_only_these_names('combined_qkv_proj', 'out_proj')`` (google/praxis
``praxis/layers/checkpoint_policy.py``), and TE (v1.4, ``jax/flax/transformer.py``) tags its
fused QKV projection's output ``combined_qkv_proj`` and the output projection's ``out_proj``:
MaxText's ``qkv_proj`` and ``out_proj``; its fused attention's output and statistics are
``context`` (``jax/fused_attn.py``), not saved, so the attention forward reruns.
``strategies.remat_policies.recompute_of`` turns the saved tensors into the plan's
recomputation.

Both suites run a hybrid mesh (``fsdp_group``): ZeRO-3 over an FSDP group of GPUs, pure data
parallelism across the groups (the plan's ``dp_shard``). MaxText: the README's table headers
give each column's ``FSDP=`` (64/128/256/128/128/128 at 64-2,048 GPUs). PaxML:
``paxml/configure.sh`` sets ``FSDP=16`` nodes and ``DP=nodes/16`` (``DCN_MESH_SHAPE=[DP,16,1]``,
``ICI_MESH_SHAPE=[1,8,1]``): FSDP over 128 GPUs (docs/calibration.md §3.23).
"""
from __future__ import annotations

from typing import Any

#: (source ref, table prefix, precision) -> (tensors saved on device, where it is stated)
_DGXC = "NVIDIA/dgxc-benchmarking maxtext/configure.sh @v24.11.1"
_QKV_OUT = ("query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj")
_PAX = ("NVIDIA/dgxc-benchmarking paxml/paxml_mod_configs.py @v24.11.1 (Synthetic175BCkpt: "
        "CHECKPOINT_POLICY=SAVE_QKV_OUT_PROJ, save_only_these_names('combined_qkv_proj', "
        "'out_proj'); ENABLE_TE=1 in paxml/configure.sh: Transformer Engine's layer, whose "
        "fused QKV output is combined_qkv_proj)")
RECIPES: dict[tuple[str, str, str], tuple[tuple[str, ...], str]] = {
    ("NVIDIA/dgxc-benchmarking", "maxtext/README_70b.md @v24.11.1", "bf16"):
        (_QKV_OUT + ("mlpwo",), _DGXC + " (DTYPE=bf16: remat_policy=custom, "
                                        "save_dot_except_mlpwi's tensors on device)"),
    ("NVIDIA/dgxc-benchmarking", "maxtext/README_70b.md @v24.11.1", "fp8"):
        (_QKV_OUT, _DGXC + " (DTYPE=fp8: remat_policy=custom, save_dot_except_mlp's "
                           "tensors on device)"),
    ("NVIDIA/dgxc-benchmarking", "paxml/README_175b.md @v24.11.1", "fp8"):
        (("qkv_proj", "out_proj"), _PAX),
}


#: (source ref, table prefix) -> (FSDP group size by the run's GPU count, where it is stated)
FSDP_GROUPS: dict[tuple[str, str], tuple[dict[int, int], str]] = {
    ("NVIDIA/dgxc-benchmarking", "maxtext/README_70b.md @v24.11.1"):
        ({64: 64, 128: 128, 256: 256, 512: 128, 1024: 128, 2048: 128},
         "NVIDIA/dgxc-benchmarking maxtext/README_70b.md @v24.11.1, the table headers "
         "'FSDP=64/128/256/128/128/128' at 64..2,048 GPUs; the rest pure data parallelism"),
    ("NVIDIA/dgxc-benchmarking", "paxml/README_175b.md @v24.11.1"):
        ({n: 128 for n in (128, 256, 512, 1024, 2048)},
         "NVIDIA/dgxc-benchmarking paxml/configure.sh @v24.11.1: FSDP=16 nodes x "
         "ICI_MESH_SHAPE=[1,8,1], DP=nodes/16 replicas (DCN_MESH_SHAPE=[DP,16,1])"),
}


def fsdp_group(entry: dict[str, Any]) -> tuple[int, str] | None:
    """``(GPUs in one FSDP group, source)`` of a published JAX run whose recipe states a hybrid
    mesh (``FSDP_GROUPS``), or None."""
    src = entry.get("source") or {}
    ref, table = str(src.get("ref") or ""), str(src.get("table") or "")
    n = (entry.get("hardware") or {}).get("n_gpus")
    for (r, t), (sizes, cite) in FSDP_GROUPS.items():
        if ref == r and table.startswith(t) and n in sizes:
            return sizes[n], cite
    return None


def remat_recipe(entry: dict[str, Any], dtype: str) -> tuple[tuple[str, ...], str] | None:
    """``(tensors saved, source)`` of a published run's JAX remat policy (MaxText's names), or None when its
    recipe is not in ``RECIPES``; ``dtype`` is the run's ``--dtype`` (any fp8 recipe is
    ``fp8``)."""
    src = entry.get("source") or {}
    ref, table = str(src.get("ref") or ""), str(src.get("table") or "")
    prec = "fp8" if dtype.startswith("fp8") else dtype
    for (r, t, p), found in RECIPES.items():
        if ref == r and table.startswith(t) and prec == p:
            return found
    return None
