"""Which GEMMs a low-precision recipe quantises where the stack narrows it: layers kept in BF16
and modules matched to another format (``SystemConfig.quant_scope``; docs/calibration.md
§5.155).

By default every linear of every layer runs in the run's format (``strategies.cost.quantise``
module doc). Megatron-Bridge's Nemotron 3 Super NVFP4 performance recipe narrows it (read at
NVIDIA-NeMo/Megatron-Bridge v0.4.2, v0.5.0 and 4ab94dfad, the 26.04.01, 26.06 and 26.08
containers' sources, identical in each):

* ``nemotron_3_super_bf16_with_nvfp4_mixed`` (``training/mixed_precision.py``):
  ``first_last_layers_bf16 = True``, ``num_layers_at_end_in_bf16 = 14``. Megatron-Core's hybrid
  block (NVIDIA/Megatron-LM d98e8a64 ``megatron/core/models/hybrid/hybrid_block.py``
  l.344-375) enters ``get_fp4_context(config, layer.layer_number - 1)`` per layer, one layer
  per pattern character, and ``fp4_utils.py`` l.247-263 returns a null context (BF16) for
  ``layer_no >= num_layers - num_layers_at_end_in_bf16``: the last 14 of the 88 pattern
  characters run every linear in BF16.
* ``te_quant.cfg`` (``perf_recipes/nemotronh/``; ``scripts/performance/configs/nemotronh/`` in
  v0.4.2 and v0.5.0) as ``model.quant_recipe``: glob matchers, the first that matches wins
  (Megatron-Core ``quantization/quant_config.py`` l.35-38): ``*.linear_qkv`` and
  ``*.linear_proj`` BF16 (the attention's linears), ``*mlp.fc[12]_latent_proj`` BF16 (the
  latent projections, which ``gemm_shapes.latent_gemms`` already prices as BF16), ``mtp.*``
  BF16, ``*mixer.out_proj`` MXFP8 (the Mamba-2 mixer's output projection). Everything else,
  the mixer's ``in_proj`` and the routed and shared experts, runs the NVFP4 recipe.

A scope is applied GEMM by GEMM (``gemm_time.gemm_units``' ``parts``): each GEMM of the mean
layer is split by the share of its layers that run it in each format, and each share is
priced in its format; the casts likewise (``quantise.layer_cast_elements``' ``scope``). In
the BF16 end layers the out_proj's MXFP8 match is taken as BF16 too (no quantisation
context is entered there; a stated assumption). Not applied here: the MTP block's ``mtp.*``
(priced with the main layers' mix), the weights' per-step casts and their cached copies.
"""
from __future__ import annotations

from dataclasses import dataclass

from strategies.errors import SpecError
from strategies.model import ModelSpec
from strategies.model.hybrid import PATTERN_KINDS


@dataclass(frozen=True)
class QuantScope:
    """A recipe's narrowing of its low-precision GEMMs: ``end_bf16`` (``start_bf16``) layers
    at the end (start) of the layer stack run every linear in BF16; the GEMMs whose key
    (``gemm_key``) is in ``bf16`` run BF16 in every layer; ``alt`` maps keys to another
    quantised format (``topologies.precision`` name) in the quantised layers."""

    name: str
    end_bf16: int
    start_bf16: int
    bf16: tuple[str, ...]
    alt: tuple[tuple[str, str], ...]
    source: str


#: Megatron-Bridge's Nemotron 3 Super NVFP4 performance recipe (module doc)
NEMOTRON3_SUPER_NVFP4 = QuantScope(
    name="nemotron3-super-nvfp4", end_bf16=14, start_bf16=0, bf16=("attn", "mla_up"),
    alt=(("mamba_out", "mxfp8"),),
    source=("NVIDIA-NeMo/Megatron-Bridge 4ab94dfad (v0.4.2, v0.5.0 alike) training/"
            "mixed_precision.py nemotron_3_super_bf16_with_nvfp4_mixed (first_last_layers_bf16, "
            "num_layers_at_end_in_bf16 = 14) and perf_recipes/nemotronh/te_quant.cfg "
            "(linear_qkv, linear_proj, fc[12]_latent_proj, mtp.* BF16; mixer.out_proj MXFP8)"))

#: ``SystemConfig.quant_scope`` codes (0: every GEMM in the run's format)
QUANT_SCOPES: dict[int, QuantScope] = {1: NEMOTRON3_SUPER_NVFP4}

#: the layer kind each GEMM part (``gemm_shapes.GEMM_PARTS``) belongs to
PART_KINDS = {"attn": "attention", "mla_up": "attention", "dense_mlp": "dense",
              "routed_mlp": "moe", "shared_mlp": "moe", "mamba": "mamba"}


def scope_of(code: float) -> QuantScope | None:
    """The scope of ``SystemConfig.quant_scope`` ``code``; None for 0. Unknown codes raise."""
    if not code:
        return None
    if code not in QUANT_SCOPES:
        raise SpecError("quant_scope", code, f"must be 0 or one of {sorted(QUANT_SCOPES)}")
    return QUANT_SCOPES[int(code)]


def gemm_key(part: str, row_parallel: bool | None) -> str:
    """The key a scope names a GEMM by: its part (``gemm_shapes.GEMM_PARTS``), the Mamba-2
    mixer's split into ``mamba_in`` (``in_proj``, column-parallel) and ``mamba_out``
    (``out_proj``, row-parallel)."""
    if part == "mamba":
        return "mamba_out" if row_parallel else "mamba_in"
    return part


def quantised_layers(m: ModelSpec, scope: QuantScope, kind: str) -> float:
    """Share of the model's ``kind`` layers outside the scope's BF16 ends (``start_bf16``
    first, ``end_bf16`` last layers of the stack, by layer number as Megatron-Core's
    ``get_fp4_context``/``get_fp8_context`` count them); 1 where the model has none of that
    kind. A transformer's layer holds its attention and its MLP: every kind counts every
    layer (the MoE layers by ``moe_layer_freq`` are not told apart: the MoE share is the
    stack's)."""
    L = m.num_layers
    lo, hi = scope.start_bf16, L - scope.end_bf16
    if lo < 0 or hi < lo:
        raise SpecError("quant_scope", scope.name,
                        f"keeps {scope.start_bf16} + {scope.end_bf16} BF16 layers of {L}")
    if m.is_hybrid:     # a kind's view counts its model's layers (``source_pattern``)
        kinds = [PATTERN_KINDS[c] for c in m.source_pattern]
    else:
        kinds = [kind] * L
    n = sum(1 for k in kinds if k == kind)
    if not n:
        return 1.0
    return sum(1 for i, k in enumerate(kinds) if k == kind and lo <= i < hi) / n


def quantised_share(m: ModelSpec, scope: QuantScope | None, part: str,
                    row_parallel: bool | None) -> float:
    """Share of the mean layer's GEMM (``part``, ``row_parallel``) that runs quantised, in
    the run's format or the scope's ``alt`` one: 0 for a ``bf16`` key, else
    ``quantised_layers`` of its part's kind; 1 without a scope."""
    if scope is None:
        return 1.0
    if gemm_key(part, row_parallel) in scope.bf16:
        return 0.0
    return quantised_layers(m, scope, PART_KINDS[part])


def gemm_formats(m: ModelSpec, scope: QuantScope | None, part: str,
                 row_parallel: bool | None, dtype: str) -> dict[str, float]:
    """Share of one GEMM of the mean layer (``part``, ``row_parallel`` as
    ``gemm_shapes.layer_gemm_parts`` gives them) run in each format: ``{dtype: 1}`` without a
    scope, in 16 bits and for the BF16 router (``row_parallel`` None); else the quantised
    layers' share (``quantised_layers``) in ``dtype`` or the scope's ``alt`` format, nothing
    for a ``bf16`` key, and the rest in ``"bf16"``. The shares sum to 1."""
    if scope is None or dtype == "bf16" or row_parallel is None:
        return {dtype: 1.0}
    q = quantised_share(m, scope, part, row_parallel)
    fmt = dict(scope.alt).get(gemm_key(part, row_parallel), dtype)
    if q >= 1.0:
        return {fmt: 1.0}
    out = {"bf16": 1.0 - q}
    if q > 0.0:
        out[fmt] = q
    return out


def scope_formats(parts: list[tuple[str, tuple]], m: ModelSpec, code: float,
                  dtype: str) -> list[dict[str, float]] | None:
    """``gemm_formats`` of each entry of ``parts`` (``gemm_shapes.layer_gemm_parts``' or
    ``op_sac_gemm_parts``') under ``SystemConfig.quant_scope`` ``code``: the ``formats``
    argument of ``gemm_time.gemm_units``; None without a scope (every GEMM in ``dtype``)."""
    scope = scope_of(code)
    if scope is None or dtype == "bf16":
        return None
    return [gemm_formats(m, scope, part, g[4], dtype) for part, g in parts]
