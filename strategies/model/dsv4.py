"""DeepSeek-V4's attention and residual shapes (the ``SparseAttentionShapes`` mixin of
``ModelSpec``): per-layer compressed attention, its compressors and indexer, the grouped
low-rank output projection, hyper-connections and hash-routed first MoE layers.

The layer, as Megatron-Core builds it (``experimental_attention_variant/`` at dev d48bd6be,
``deepseek_v4_hybrid_attention.py``, ``csa.py``; ``transformer/hyper_connection.py``) and
Megatron-Bridge maps the HF checkpoint (``models/deepseek/deepseek_v4_bridge.py`` at
067f987d, ``provider_bridge``):

- attention: ``wq_a`` ``h -> q_lora_rank`` (replicated), a q RMSNorm, ``wq_b`` ``q_lora_rank
  -> a·d`` (``d`` the head size, ``kv_channels``); one key/value head ``wkv`` ``h -> d``
  (replicated, keys and values share it) and its RMSNorm; a sink logit per head; the output
  ``wo_a`` block-diagonal over ``o_groups`` groups, ``a·d/G -> o_lora_rank`` each (``a·d·
  o_lora_rank`` weights), then ``wo_b`` ``G·o_lora_rank -> h`` (row-parallel).
- ``compress_ratios[i]`` per layer: 0 a sliding-window layer (``sliding_window`` keys), 4
  compressed sparse attention (CSA: the window plus the ``index_topk`` compressed entries
  an indexer selects), 128 heavily compressed attention (HCA: the window plus every visible
  compressed entry). ``Compressor`` (csa.py l.1001-1110): ``wkv`` and ``wgate`` ``h ->
  c·d`` with ``c = 2`` (overlapping windows) at ratio 4 and 1 otherwise, ``ape`` ``r x c·d``
  and an RMSNorm over ``d``. ``CSAIndexer`` (l.1435-1530, ratio 4 only): ``wq_b``
  ``q_lora_rank -> H_I·d_I``, ``weights_proj`` ``h -> H_I`` and its own compressor of head
  size ``d_I``.
- hyper-connections (``HyperConnectionModule``, l.169-215): ``n = hc_streams`` residual
  streams; around the attention and around the MLP one ``mapping_proj`` ``n·h -> n²+2n``,
  its bias ``n²+2n`` and three scalars; at the head a learned contraction ``n·h -> n``, a
  bias ``n`` and a scalar (the checkpoint's ``hc_head_fn/base/scale``).
- the first ``num_hash_layers`` MoE layers route by a token-id table (a buffer, not a
  parameter) and carry no expert bias (``moe/router.py`` l.208-244).
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np

from strategies.errors import SpecError

if TYPE_CHECKING:
    from strategies.model.spec import ModelSpec

#: ``compress_ratios`` value -> the attention kind (HF ``layer_types``' names).
RATIO_KINDS = {0: "sliding_attention", 4: "compressed_sparse_attention",
               128: "heavily_compressed_attention"}
#: The fields only a DeepSeek-V4 model sets (``compress_ratios`` set means one).
DSV4_FIELDS = ("o_lora_rank", "o_groups", "index_n_heads", "index_head_dim", "index_topk")


class SparseAttentionShapes:
    """``ModelSpec``'s DeepSeek-V4 shapes (element counts; module docstring)."""

    @property
    def is_dsv4(self) -> bool:
        """DeepSeek-V4 attention: ``compress_ratios`` set."""
        return self.compress_ratios is not None

    def compressor_params(self, ratio: int, head: int) -> int:
        """One ``Compressor`` of ``ratio`` over heads of size ``head``: ``wkv`` and ``wgate``
        ``h -> c·head`` (``c`` 2 at ratio 4, else 1), ``ape`` ``ratio x c·head``, a norm."""
        c = 2 if ratio == 4 else 1
        return 2 * self.hidden_size * c * head + ratio * c * head + head

    def indexer_params(self) -> int:
        """The indexer of a ratio-4 layer: ``wq_b``, ``weights_proj`` and its compressor."""
        hi, di = self.index_n_heads, self.index_head_dim
        return (self.q_lora_rank * hi * di + self.hidden_size * hi
                + self.compressor_params(4, di))

    def compressed_attention_params(self, ratio: int) -> int:
        """Parameters a layer of ``compress_ratios`` value ``ratio`` adds to the sliding-window
        attention block: 0; a compressor and the indexer (4); a compressor (128)."""
        if ratio == 0:
            return 0
        extra = self.compressor_params(ratio, self.head_dim)
        return extra + (self.indexer_params() if ratio == 4 else 0)

    def sparse_attention_params(self) -> int:
        """All compressors and indexers of the main layers (0 without ``compress_ratios``)."""
        if not self.is_dsv4:
            return 0
        return sum(self.compressed_attention_params(r) for r in self.compress_ratios)

    def hc_layer_params(self) -> int:
        """Hyper-connection mappings of one layer: two of ``n·h·(n²+2n) + (n²+2n) + 3``
        (0 with one residual stream)."""
        n = self.hc_streams
        if n == 1:
            return 0
        m = n * n + 2 * n
        return 2 * (n * self.hidden_size * m + m + 3)

    def hc_head_params(self) -> int:
        """The learned contraction of the ``n`` streams before the final norm (and before
        each multi-token-prediction head): ``n·h·n + n + 1`` (0 with one stream)."""
        n = self.hc_streams
        return 0 if n == 1 else n * self.hidden_size * n + n + 1

    def hash_router_bias(self) -> int:
        """Expert biases the hash-routed layers lack: ``num_hash_layers·E`` when the router
        has a bias (``router_bias``), else 0."""
        return self.num_hash_layers * self.num_experts if self.router_bias else 0

    def mtp_layer_model(self) -> "ModelSpec":
        """The model to cost a multi-token-prediction module's layer with: for DeepSeek-V4 a
        view whose every layer is a sliding-window one with a learned router (its MTP
        layer's ratio is ``compress_ratios``' 0 past the main layers: Megatron-Core dev
        d48bd6be ``deepseek_v4_hybrid_attention.py`` l.119-121, Megatron-Bridge 067f987d
        ``deepseek_v4_bridge.py`` ``_dsv4_compress_ratios`` l.187-216; no compressor, no
        indexer; ``moe/router.py`` l.202-205 hash-routes no MTP layer), so its mean layer is
        that layer (docs/calibration.md §5.164). The model itself otherwise. A view for
        costing only, as ``of_kind``'s."""
        if not self.is_dsv4:
            return self
        view = copy.copy(self)
        object.__setattr__(view, "compress_ratios", (0,) * self.num_layers)
        object.__setattr__(view, "num_hash_layers", 0)
        return view

    def attention_kind_counts(self) -> dict[str, int]:
        """Main layers of each attention kind (``RATIO_KINDS``); a model without
        ``compress_ratios``: every layer ``sliding_attention`` with a window, else none."""
        if not self.is_dsv4:
            return {}
        return {k: sum(1 for r in self.compress_ratios if r == ratio)
                for ratio, k in RATIO_KINDS.items()}


def check_dsv4(spec: "ModelSpec") -> None:
    """The rules of DeepSeek-V4's fields: each set only with ``compress_ratios``, which lists
    one value of ``RATIO_KINDS`` per layer; the window, the query rank, one key/value head,
    the grouped output projection and the indexer (with ratio-4 layers) given."""
    from strategies.model.checks import check_positive
    from topologies.limits import MAX_HEADS, MAX_LAYERS, check_int
    check_int("hc_streams", spec.hc_streams, 1, MAX_HEADS)
    check_int("hc_sinkhorn_iters", spec.hc_sinkhorn_iters, 0, MAX_LAYERS)
    check_int("num_hash_layers", spec.num_hash_layers, 0, MAX_LAYERS)
    if spec.num_hash_layers:
        if not spec.is_moe or spec.num_hash_layers > spec.num_moe_layers:
            raise SpecError("num_hash_layers", spec.num_hash_layers,
                            f"must be at most the MoE layers ({spec.num_moe_layers})")
        if spec.first_k_dense_replace or spec.moe_layer_freq != 1 or spec.is_hybrid:
            raise SpecError("num_hash_layers", spec.num_hash_layers, "hash routing of the "
                            "first layers needs every layer MoE (first_k_dense_replace 0, "
                            "moe_layer_freq 1)")
    cr = spec.compress_ratios
    if cr is None:
        for f in DSV4_FIELDS:
            if getattr(spec, f) is not None:
                raise SpecError(f, getattr(spec, f), "needs compress_ratios (DeepSeek-V4 "
                                "attention)")
        return
    if not isinstance(cr, tuple) or len(cr) != spec.num_layers:   # a model file's list: a tuple
        shown = list(cr) if isinstance(cr, tuple) else cr
        given = f" (it lists {len(cr)})" if isinstance(cr, tuple) else ""
        raise SpecError("compress_ratios", shown, f"must list one ratio for each of the "
                        f"{spec.num_layers} layers{given}")
    for r in cr:
        if isinstance(r, bool) or not isinstance(r, int) or r not in RATIO_KINDS:
            raise SpecError("compress_ratios", r, f"must be one of {sorted(RATIO_KINDS)}")
    for f in ("sliding_window", "q_lora_rank", "o_lora_rank", "o_groups", "kv_channels"):
        if getattr(spec, f) is None:
            raise SpecError(f, None, "is required with compress_ratios (DeepSeek-V4 attention)")
    for f in DSV4_FIELDS:
        if getattr(spec, f) is not None:
            check_positive(f, getattr(spec, f))
    if spec.is_mla or spec.is_hybrid:
        raise SpecError("compress_ratios", "set", "excludes kv_lora_rank and hybrid_pattern")
    if spec.kv_heads != 1:
        raise SpecError("num_query_groups", spec.num_query_groups, "must be 1 with "
                        "compress_ratios (one key/value head)")
    if spec.global_attention_every:
        raise SpecError("global_attention_every", spec.global_attention_every,
                        "must be 0 with compress_ratios (the window is in every layer)")
    if (spec.num_attention_heads * spec.head_dim) % spec.o_groups:
        raise SpecError("o_groups", spec.o_groups, "must divide num_attention_heads·kv_channels"
                        f" = {spec.num_attention_heads * spec.head_dim}")
    if 4 in cr:
        for f in ("index_n_heads", "index_head_dim", "index_topk"):
            if getattr(spec, f) is None:
                raise SpecError(f, None, "is required with a compressed sparse attention "
                                "layer (compress_ratios value 4: the indexer)")


def plan_modelled(model: "ModelSpec", cp: Any, flash: Any) -> Any:
    """True where DeepSeek-V4's cost models a plan's context parallelism ``cp`` and attention
    path ``flash``: ``cp == 1`` and the fused path (True for another model). The rule
    ``refuse_cost`` raises and the search's ``cp_seq`` mask applies. Vectorised."""
    if not model.is_dsv4:
        return True
    return (np.asarray(cp) == 1) & np.asarray(flash).astype(bool)


def refuse_cost(model: "ModelSpec", cp: int = 1, flash: bool = True,
                fp8_attention: bool = False) -> None:
    """``SpecError`` for what DeepSeek-V4's cost (``strategies.cost.dsv4_cost``) does not
    model, by name: context parallelism over compressed attention (Megatron-Core's
    ``_forward_thd_cp`` gathers the compressed keys and the window's boundary, not the
    ring or all-gather of the dense kernel), the unfused path (``use_fused_kernels`` off:
    per-query gathers and einsums, not the full score square) and Transformer Engine's
    FP8 attention (FlashMLA's sparse kernel runs in 16 bits). Nothing for another model."""
    if not model.is_dsv4:
        return
    why = " is not modelled for DeepSeek-V4's compressed sparse attention"
    if not bool(plan_modelled(model, cp, True)):
        raise SpecError("cp", cp, "context parallelism (Megatron-Core's _forward_thd_cp)" + why)
    if not bool(plan_modelled(model, 1, flash)):
        raise SpecError("flash_attn", flash, "the unfused path (use_fused_kernels off)" + why)
    if fp8_attention:
        raise SpecError("fp8_attention", fp8_attention, "FP8 attention" + why)
