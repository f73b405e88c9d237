"""Pipeline layouts: which layers each (pipeline rank, model chunk) holds.

``PipelineLayout`` is the one representation of how a plan cuts the model into pipeline
stages: for every virtual stage (a position on the micro-batch's path), the slots it holds,
``E`` (embedding), ``t`` (transformer layer), ``m`` (multi-token-prediction module) and ``L``
(LM head and loss). ``Job.layers_of_stage``, the stage-cost record's per-chunk costs
(``strategies.cost.stage``), memory and the compiler read it; ``Plan.layers_per_stage`` is
one of the ways of giving it and ``PipelineLayout.layers_per_stage`` its view.

It is built (``build_layout``) from the first of:

* ``layout``: Megatron-LM's ``--pipeline-model-parallel-layout`` string (``parse_layout``;
  the grammar: docs/layout.md);
* ``first_stage_layers`` / ``last_stage_layers``: Megatron's
  ``--decoder-first/last-pipeline-num-layers`` (the middle stages even; each stage's layers
  split evenly over its ``vpp`` chunks);
* ``account_embedding`` / ``account_loss``: Megatron's
  ``--account-for-embedding/loss-in-pipeline-split`` (NeMo's Llama 3.1 405B recipe): the
  embedding and the loss each count as one layer slot when the layers are divided;
* ``layers_per_stage`` (one chunk per rank);
* the even split, ``num_layers / (pp·vpp)`` per chunk.

The embedding sits on the first position and the loss on the last (Megatron requires it);
multi-token-prediction modules, unless a layout string places them, on the last position
before the loss (Megatron's default). Pure functions; no SimPy, no numpy.

The package: ``grammar`` (the layout string: ``parse_layout``, ``layout_text``), ``record``
(``PipelineLayout`` and its placement on ranks and chunks), ``build`` (a plan's layout for a
model: ``build_layout``), ``extremes`` (what the lower bound reads of a layout string without
a model) and ``content`` (which kinds of layers each chunk and rank holds, scalar and over the
search's arrays). Imports point one way: ``grammar`` <- ``record`` <- ``build`` <- ``extremes``,
``content``.
"""
from strategies.layout.build import build_layout
from strategies.layout.content import (chunk_kinds, even_chunks_content_arrays,
                                       even_stage_content_arrays, mixed_layers,
                                       order_chunk_kinds, stage_content)
from strategies.layout.extremes import layout_middle_most, layout_string_extremes
from strategies.layout.grammar import parse_layout

__all__ = ["build_layout", "chunk_kinds", "even_chunks_content_arrays",
           "even_stage_content_arrays", "layout_middle_most", "layout_string_extremes",
           "mixed_layers", "order_chunk_kinds", "parse_layout", "stage_content"]
