"""Megatron-Core's layer-level CPU activation offloading (``--cpu-offloading-num-layers N``,
plan ``cpu_offloading_num_layers``): the plan's rules, Transformer Engine's offload windows and
the exposed time of the copies.

Sources. NVIDIA/Megatron-LM@d98e8a64dd (2026-08-22): ``megatron/core/model_parallel_config.py``
L458-482 (``cpu_offloading``, ``cpu_offloading_num_layers``, ``cpu_offloading_activations``
True, ``cpu_offloading_weights`` False, ``cpu_offloading_double_buffering`` False);
``megatron/training/arguments.py`` L1950-1951 (``N > 0`` sets ``cpu_offloading``);
``megatron/core/transformer/transformer_config.py`` L1884-1899 (refused: ``N >= num_layers``,
``pipeline_model_parallel_size > 1``, any ``recompute_granularity``), L2127-2130 (not with
fine-grained offloading), L2800-2801 (CUDA graphs only as ``full_iteration``);
``megatron/core/transformer/transformer_block.py`` L304-317 and L736-741 (TE's context around
every layer, ``group_prefetch_offload_commit_async`` on each layer's output).
NVIDIA/TransformerEngine v2.9 (70f536662a) ``transformer_engine/pytorch/cpu_offload.py``:

* what leaves: the tensors a layer's modules mark (``mark_activation_offload``: every saved
  input, norm output and statistics of TE's ``Linear``/``LayerNormLinear``/``LayerNormMLP``/
  grouped linears, ``DotProductAttention``'s q, k, v, output and softmax statistics, L22-41
  and the modules' forwards; Megatron's fused SwiGLU input, ``mlp.py`` L310-316): a dense
  transformer layer's whole stash; weights are not moved (``offload_weights`` is deprecated
  and a no-op, L705-716);
* which layers: the first ``N`` of the block (groups ``0 .. N-1``, ``tensor_push`` L404);
* when: ``layer_window_map`` (L343-350) gives group ``k`` the layer ``w_k =
  q(k+1) - 1 + min(k+1, r)`` (``q, r = divmod(L, N)``); group 0's D2H starts on a side stream
  (``d2h_stream``) when layer 0's forward ends; at the end of layer ``w_k``'s forward the
  compute stream waits for group ``k``'s copy, frees its device tensors and starts group
  ``k+1``'s (L514-539). Backward: at the start of layer ``w_k``'s backward the compute stream
  waits for the reload in flight and group ``k``'s reload starts on ``h2d_stream`` (L641-651);
  layer 0's backward waits for the last (L654-656). So group ``k``'s copy each way has the
  compute of ``s_k = w_k - w_{k-1}`` layers (``s_0 = w_0``) to hide in, and one group is
  reloaded ahead of the layers whose stash is still on the GPU (``RESIDENT_GROUPS``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost.offload import exposed_copy_seconds
from strategies.errors import SpecError

Num = float | np.ndarray

#: offload groups back on the GPU at the stash peak beside the layers never offloaded: the
#: last offloaded group, reloaded when the backward of its window layer starts (TE's
#: ``on_group_commit_backward``), while the later layers' stash is still held
RESIDENT_GROUPS = 1


def check_cpu_offloading(n: Any, pp: int, recompute: str,
                         offload_modules: tuple[str, ...] | None,
                         cuda_graph: bool) -> int | None:
    """The plan's ``cpu_offloading_num_layers`` checked (None or 0: off, returned as None):
    a non-negative integer, not with ``pp > 1``, any recomputation, fine-grained
    ``offload_modules`` or a CUDA graph (Megatron-Core's ``TransformerConfig`` rules, module
    docstring). ``SpecError`` naming the field, the value and the rule."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise SpecError("cpu_offloading_num_layers", n, "must be a whole number of layers >= 0")
    if n == 0:
        return None
    for bad, rule in ((pp > 1, f"needs pp=1, not pp={pp} (Megatron-Core: no pipeline "
                               "parallelism with CPU offloading)"),
                      (recompute != "none", f"needs recompute=none, not {recompute} "
                       "(Megatron-Core: CPU offloading does not work with recomputation)"),
                      (offload_modules is not None, "cannot be combined with offload_modules "
                       "(Megatron-Core: fine-grained offloading excludes cpu_offloading)"),
                      (cuda_graph, "cannot run with cuda_graph (Megatron-Core: CUDA graphs "
                       "not supported with CPU offloading but full_iteration)")):
        if bad:
            raise SpecError("cpu_offloading_num_layers", int(n), rule)
    return int(n)


def check_model_layers(n: int | None, num_layers: int, dense: bool, name: str) -> None:
    """``n`` offloaded layers must be fewer than the model's ``num_layers`` (Megatron-Core),
    and the model a dense transformer: an MoE or hybrid layer's router, token permutation
    and Mamba kernels save tensors TE does not mark, which paraplan does not price."""
    if n is None:
        return
    if n >= num_layers:
        raise SpecError("cpu_offloading_num_layers", n, f"must be below {name}'s {num_layers} "
                        "layers (Megatron-Core: CPU offloading only for layers less than "
                        "num_layers)")
    if not dense:
        raise SpecError("cpu_offloading_num_layers", n, f"not modelled for {name}: paraplan "
                        "prices it on dense transformer layers only (an MoE or hybrid layer "
                        "saves tensors Transformer Engine does not mark)")


def window_layers(num_layers: int, n: int) -> np.ndarray:
    """TE's ``layer_window_map``: the layer ``w_k`` at whose end group ``k``'s D2H is waited
    for (forward) and at whose start its reload begins (backward), ``k = 0 .. n-1``."""
    q, r = divmod(int(num_layers), int(n))
    k = np.arange(int(n))
    return q * (k + 1) - 1 + np.minimum(k + 1, r)


def window_spans(num_layers: int, n: int) -> np.ndarray:
    """Layers of compute each group's copy overlaps, either way: ``s_0 = w_0``,
    ``s_k = w_k - w_{k-1}`` (``window_layers``)."""
    w = window_layers(num_layers, n)
    return np.diff(w, prepend=0)


def offload_exposed_total(nbytes: Num, bandwidth: float, fwd_layer: Num, bwd_layer: Num,
                          num_layers: int, n: int) -> tuple[Num, Num]:
    """``(forward, backward)`` seconds per micro-batch that the copies of ``n`` groups of
    ``nbytes`` (one layer's stash) add to the compute stream over a host link of
    ``bandwidth`` bytes/s per direction, each overlapping its window's layers of
    ``fwd_layer``/``bwd_layer`` seconds (``cost.offload.exposed_copy_seconds``, summed)."""
    spans = window_spans(num_layers, n).astype(float)
    f = np.asarray(fwd_layer, dtype=float)[..., None]
    b = np.asarray(bwd_layer, dtype=float)[..., None]
    c = np.asarray(nbytes, dtype=float)[..., None]
    return (exposed_copy_seconds(c, bandwidth, spans * f).sum(axis=-1)[()],
            exposed_copy_seconds(c, bandwidth, spans * b).sum(axis=-1)[()])
