"""Parameter counts of a ``ModelSpec`` (the ``ParamCounts`` mixin): the attention block's weight
matrices and how tensor parallelism cuts them, the MLP of a dense layer, the routed and shared
experts and the router of an MoE layer, whole layers, the embedding and LM head, the model
total and the parameters a token touches, and the multi-token-prediction modules
(docs/models.md gives every count).
"""
from __future__ import annotations

from strategies.model.checks import check_kind


class ParamCounts:
    """``ModelSpec``'s parameter counts (elements, not bytes)."""

    # Attention -------------------------------------------------------------------------------
    def attention_linears(self) -> tuple[tuple[str, int, int, str], ...]:
        """The weight matrices of one attention block: ``(name, in, out, split)``, ``split``
        being how tensor parallelism cuts it: ``"col"`` (out split), ``"row"`` (in split) or
        ``"rep"`` (replicated: MLA's down projections, as Megatron-Core runs them)."""
        h, a = self.hidden_size, self.num_attention_heads
        if self.is_dsv4:        # strategies.model.dsv4: low-rank q, one K=V head, grouped out
            d, q = self.head_dim, self.q_lora_rank
            return (("q_down", h, q, "rep"), ("q_up", q, a * d, "col"), ("kv", h, d, "rep"),
                    ("o_down", a * d, self.o_lora_rank, "col"),
                    ("proj", self.o_groups * self.o_lora_rank, h, "row"))
        if not self.is_mla:
            g, d = self.kv_heads, self.head_dim
            return (("qkv", h, (a + 2 * g) * d, "col"), ("proj", a * d, h, "row"))
        dqk, rope = self.head_dim, self.qk_rope_head_dim
        q = ((("q_down", h, self.q_lora_rank, "rep"), ("q_up", self.q_lora_rank, a * dqk, "col"))
             if self.q_lora_rank else (("q", h, a * dqk, "col"),))
        return q + (("kv_down", h, self.kv_lora_rank + rope, "rep"),
                    ("kv_up", self.kv_lora_rank, a * (self.qk_nope_head_dim + self.v_dim), "col"),
                    ("proj", a * self.v_dim, h, "row"))

    def attention_params(self) -> int:
        """Parameters of one attention block: its weights, biases, MLA's latent norms, Qwen3's
        q/k norms and gpt-oss's sinks (the block's input norm is counted by the layer)."""
        n = sum(i * o for _, i, o, _ in self.attention_linears())
        a, g, d = self.num_attention_heads, self.kv_heads, self.head_dim
        if self.bias:
            n += (a + 2 * g) * d + self.hidden_size
        elif self.qkv_bias:                   # Qwen2: biases on Q, K, V only
            n += (a + 2 * g) * d
        if self.is_mla:
            n += (self.q_lora_rank or 0) + self.kv_lora_rank
        if self.is_dsv4:        # the RMSNorms of the query latent and of the key/value head
            n += self.q_lora_rank + d
        if self.qk_norm:
            n += 2 * d
        if self.attention_sinks:
            n += a
        return n

    def tp_replicated_params(self) -> int:
        """Parameters of the mean layer every tensor-parallel rank holds whole: MLA's down
        projections and the norms of their latents, a latent MoE's duplicated projections
        (``latent_proj_params`` times the MoE layers' share), and DeepSeek-V4's query down
        projection, key/value head and their norms (its compressors and indexers, also
        replicated, are not in this count: ``sparse_attention_params``); 0 without any."""
        latent = (self.layer_shares().get("moe", 0.0) * self.latent_proj_params()
                  if self.moe_latent_size else 0)
        if not (self.is_mla or self.is_dsv4):
            return latent
        rep = sum(i * o for _, i, o, s in self.attention_linears() if s == "rep")
        if self.is_dsv4:
            return rep + self.q_lora_rank + self.head_dim + latent
        return rep + (self.q_lora_rank or 0) + self.kv_lora_rank + latent

    def kv_cache_width(self) -> int:
        """Elements per token per layer a decoder caches: ``2·g·d`` (K and V), or for MLA the
        compressed latent and the shared rope key, ``kv_lora_rank + qk_rope_head_dim``;
        DeepSeek-V4's one key/value head (its compressed entries not counted)."""
        if self.is_dsv4:
            return self.head_dim
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    # MLP -------------------------------------------------------------------------------------
    def _mlp_weights(self, ffn: int, width: int | None = None) -> int:
        return (3 if self.gated else 2) * (width or self.hidden_size) * ffn

    def _mlp_bias(self, ffn: int, width: int | None = None) -> int:
        return ffn * (2 if self.gated else 1) + (width or self.hidden_size) if self.bias else 0

    def mlp_params_per_expert(self) -> int:
        """Weights of one routed expert, ``(2 or 3)·w·F_e`` with ``w`` its input and output
        width ``expert_hidden`` (a latent MoE's ``L``; biases: ``expert_params``)."""
        return self._mlp_weights(self.expert_ffn, self.expert_hidden)

    def expert_params(self) -> int:
        """One routed expert with its biases."""
        return self.mlp_params_per_expert() + self._mlp_bias(self.expert_ffn, self.expert_hidden)

    def dense_mlp_params(self) -> int:
        """The MLP of a dense layer (``ffn_hidden_size``), biases included."""
        return self._mlp_weights(self.ffn_hidden_size) + self._mlp_bias(self.ffn_hidden_size)

    def shared_expert_params(self) -> int:
        """The shared experts of one MoE layer, and Qwen2-MoE's gate on them."""
        per = self._mlp_weights(self.shared_ffn) + self._mlp_bias(self.shared_ffn)
        return self.num_shared_experts * per + (self.hidden_size if self.shared_expert_gate else 0)

    def router_params(self) -> int:
        """The router of one MoE layer: ``h·E`` weights and, with ``router_bias``, ``E``."""
        return self.num_experts * (self.hidden_size + (1 if self.router_bias else 0))

    def routed_expert_params(self) -> int:
        """All routed experts of one MoE layer: what expert parallelism shards."""
        return self.num_experts * self.expert_params()

    def mlp_params(self, kind: str) -> int:
        """The MLP of one layer of ``kind``: a dense MLP, or experts, shared experts, router."""
        check_kind(kind)
        if kind in ("mamba", "attention"):
            return 0
        if kind == "dense":
            return self.dense_mlp_params()
        return (self.routed_expert_params() + self.shared_expert_params() + self.router_params()
                + self.latent_proj_params())

    def mlp_width(self, kind: str) -> int:
        """MLP intermediate width one token passes through in a layer of ``kind``: ``F``
        dense; ``topk·F_expert + shared·F_shared`` MoE."""
        check_kind(kind)
        if kind in ("mamba", "attention"):
            return 0
        if kind == "dense":
            return self.ffn_hidden_size
        return self.moe_router_topk * self.expert_ffn + self.num_shared_experts * self.shared_ffn

    # Layers and the whole model --------------------------------------------------------------
    def norm_params(self) -> int:
        """Parameters of one norm: weight and bias (LayerNorm) or weight only (RMSNorm)."""
        return (2 if self.norm == "layernorm" else 1) * self.hidden_size

    def layer_params(self, kind: str | None = None) -> float:
        """Parameters of one layer of ``kind`` (two norms, attention, MLP, DeepSeek-V4's
        hyper-connections); ``None``: the mean layer, ``(sum over layers)/num_layers`` (the
        exact layer when all are alike). DeepSeek-V4's compressors and indexers differ layer
        by layer: a kind's layer holds their mean over the model's layers
        (``sparse_attention_params``), and so does ``None``."""
        if kind is None:
            total = self.layers_params()
            return total // self.num_layers if total % self.num_layers == 0 else \
                total / self.num_layers
        base = self._uniform_layer_params(kind)
        extra = self.sparse_attention_params() - self.hash_router_bias()
        if not extra:
            return base
        extra_per_layer = extra // self.num_layers if extra % self.num_layers == 0 else \
            extra / self.num_layers
        return base + extra_per_layer

    def _uniform_layer_params(self, kind: str) -> int:
        """``layer_params(kind)`` less what differs layer by layer (DeepSeek-V4's compressors,
        indexers and the hash layers' missing expert biases)."""
        if self.is_hybrid:      # one pre-norm and one block (strategies.model.hybrid)
            block = {"mamba": self.mamba_params, "attention": self.attention_params}
            return self.norm_params() + (block[kind]() if kind in block
                                         else self.mlp_params(kind))
        return (2 * self.norm_params() + self.attention_params() + self.mlp_params(kind)
                + self.hc_layer_params())

    def layers_params(self) -> int:
        """Parameters of all ``num_layers`` transformer layers."""
        return (sum(n * self._uniform_layer_params(k) for k, n in self.layer_counts().items()
                    if n) + self.sparse_attention_params() - self.hash_router_bias())

    def expert_params_per_layer(self) -> float:
        """Routed-expert parameters of the mean layer (``routed_expert_params`` times the share
        of MoE layers): the part of ``layer_params()`` that expert parallelism shards."""
        if not self.is_moe:
            return 0
        total = self.num_moe_layers * self.routed_expert_params()
        return total // self.num_layers if total % self.num_layers == 0 else \
            total / self.num_layers

    def embedding_params(self) -> int:
        pos = self.seq_length * self.hidden_size if self.position_embedding == "learned" else 0
        return self.vocab_size * self.hidden_size + pos

    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def num_params(self) -> int:
        """Total parameters of the main model (all experts, final norm; the multi-token-
        prediction modules are not counted: ``mtp_params``)."""
        return (self.layers_params() + self.embedding_params() + self.lm_head_params()
                + self.norm_params() + self.hc_head_params())

    def active_layer_params(self, kind: str) -> int:
        """Parameters one token touches in a layer of ``kind`` (its top-k experts only)."""
        p = self.layer_params(kind)
        if kind == "moe":
            p -= (self.num_experts - self.moe_router_topk) * self.expert_params()
        return p

    def active_params(self, embedding: bool = True) -> int:
        """Parameters a token touches: top-k experts only, the embedding table counted unless
        ``embedding`` is False (Mistral and Qwen count it in their "active" figures; DeepSeek
        and OpenAI leave the lookup table out). Multi-token prediction not counted."""
        idle = self.num_moe_layers * (self.num_experts - self.moe_router_topk) * \
            self.expert_params() if self.is_moe else 0
        emb = self.embedding_params() if embedding else 0
        return (self.layers_params() - idle + emb + self.lm_head_params() + self.norm_params()
                + self.hc_head_params())

    def mtp_params(self) -> int:
        """Parameters of the multi-token-prediction modules (DeepSeek-V3 §2.2): each holds two
        input norms, the ``2h x h`` projection, its block's layers (``mtp_block_kinds``: one
        transformer layer, MoE when the model is; a hybrid model's ``mtp_hybrid_pattern``)
        and its output norm; the embedding and output head are shared with the main model.
        A module run at several depths (``mtp_repeats``) is counted once."""
        per = self._mtp_extra() + sum(self._uniform_layer_params(k)
                                      for k in self.mtp_block_kinds())
        return self.num_nextn_predict_layers * per

    def _mtp_extra(self) -> int:
        """One prediction module's own parameters: its three norms and the ``2h x h``
        projection (DeepSeek-V4's ``e_proj`` and ``h_proj``, ``h x h`` each: the same count)
        and DeepSeek-V4's stream contraction before its head. Its layer is a sliding-window
        one (DeepSeek-V4's trailing ``compress_ratios`` value 0)."""
        return 3 * self.norm_params() + 2 * self.hidden_size ** 2 + self.hc_head_params()

    def mtp_active_params(self) -> int:
        """Parameters one token touches in the multi-token-prediction modules."""
        idle = (self.num_experts - self.moe_router_topk) * self.expert_params()
        per = self._mtp_extra() + sum(self._uniform_layer_params(k) - (idle if k == "moe" else 0)
                                      for k in self.mtp_block_kinds())
        return self.num_nextn_predict_layers * per
