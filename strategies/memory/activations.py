"""Activation memory, re-exported from the modules that hold it (docs/memory.md):
``layer_terms`` (the Korthikanti tensor table of one layer, its weight-gradient and
per-part shares), ``saved_precision`` (GEMM inputs saved in low precision: the fp8
activation cache, Transformer Engine's quantised copies), ``recompute_saved`` (what a
layer keeps under each recomputation), ``moe_saved`` (the routed experts' tensors as
they run), ``job_layers`` (one layer of a job), ``stage_ends`` (embedding and output
layer) and ``stage_stash`` (a pipeline rank's activation peak)."""
from __future__ import annotations

from strategies.memory.saved_precision import (E5M6_BYTES, activation_cache_bytes, cache_ratios,
                                               PER_TENSOR_SCALING, TE_BOTH_COPIES,
                                               expert_input_bytes, runs_te_experts)
from strategies.memory.layer_terms import (TERM_KINDS, layer_activation_terms, WGRAD_INPUTS,
                                           layer_wgrad_terms, part_activation_terms, part_bytes,
                                           layer_wgrad_bytes)
from strategies.memory.recompute_saved import (named_remat_terms, named_remat_bytes,
                                               selective_dropped_bytes, layer_activation_bytes,
                                               op_saved_bytes)
from strategies.memory.moe_saved import (routed_token_saved_bytes, routed_activation_bytes,
                                         clamp_activation_bytes, routed_stash_correction,
                                         permutation_buffer_bytes)
from strategies.memory.job_layers import (job_activation_cache, job_dispatch_bytes,
                                          job_expert_input_bytes, job_layer_activation_bytes,
                                          job_te_linear_bytes)
from strategies.memory.te_linear_saved import (TE_NORM_BOTH_COPIES, job_te_linear_inputs,
                                               te_linear_input_bytes, te_linear_saved_delta)
from strategies.memory.stage_ends import (embedding_bytes, output_bytes,
                                          embedding_activation_bytes, output_activation_bytes,
                                          holds_head, holds_embedding)
from strategies.memory.stage_stash import (stash_kinds, job_stash_kinds, stash_peak, chunk_stash,
                                           stash_entry_bytes, stash_at_peak, stash_at_peak_of,
                                           in_flight_microbatches, pending_weight_grads,
                                           stashed_layers, layers_per_chunk,
                                           activation_bytes_per_chunk, entry_extra_bytes,
                                           chunk_layer_activation_bytes,
                                           transient_activation_bytes, wgrad_bytes_per_chunk,
                                           stage_activation_bytes, check_stage)

__all__ = ["E5M6_BYTES", "PER_TENSOR_SCALING", "TERM_KINDS", "TE_BOTH_COPIES",
           "TE_NORM_BOTH_COPIES", "WGRAD_INPUTS", "activation_bytes_per_chunk",
           "activation_cache_bytes", "cache_ratios", "check_stage", "chunk_layer_activation_bytes",
           "chunk_stash", "clamp_activation_bytes", "embedding_activation_bytes",
           "embedding_bytes", "entry_extra_bytes", "expert_input_bytes", "holds_embedding",
           "holds_head", "in_flight_microbatches", "job_activation_cache", "job_dispatch_bytes",
           "job_expert_input_bytes", "job_layer_activation_bytes", "job_stash_kinds",
           "job_te_linear_bytes", "job_te_linear_inputs", "layer_activation_bytes",
           "layer_activation_terms", "layer_wgrad_bytes", "layer_wgrad_terms", "layers_per_chunk",
           "named_remat_bytes", "named_remat_terms", "op_saved_bytes", "output_activation_bytes",
           "output_bytes", "part_activation_terms", "part_bytes", "pending_weight_grads",
           "permutation_buffer_bytes", "routed_activation_bytes", "routed_stash_correction",
           "routed_token_saved_bytes", "runs_te_experts", "selective_dropped_bytes",
           "stage_activation_bytes", "stash_at_peak", "stash_at_peak_of", "stash_entry_bytes",
           "stash_kinds", "stash_peak", "stashed_layers", "te_linear_input_bytes",
           "te_linear_saved_delta", "transient_activation_bytes", "wgrad_bytes_per_chunk"]
