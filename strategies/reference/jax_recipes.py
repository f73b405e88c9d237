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
