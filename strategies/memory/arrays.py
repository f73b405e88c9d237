"""Per-GPU memory of many plans at once, the implementation of ``strategies.memory``
(docs/memory.md), re-exported from the modules that hold it: ``state_arrays`` (the model
states per parameter as ZeRO or FSDP2 shards them, the optimizer's buffers),
``stash_arrays`` (a layer's saved bytes and the schedule's stash moments, per plan),
``rank_components`` (one pipeline rank's bytes by origin and kind,
``memory_component_arrays``, of which ``strategies.memory.scalar`` reads entry 0) and
``peak_arrays`` (the peak over the ranks the search prunes with)."""
from __future__ import annotations

from strategies.memory.state_arrays import optimizer_buffer_arrays, state_bytes_per_param
from strategies.memory.stash_arrays import (layer_act_arrays, layer_wgrad_arrays,
                                            own_chunk_peak, stash_frontier_arrays)
from strategies.memory.rank_components import KINDS, ORIGINS, memory_component_arrays
from strategies.memory.peak_arrays import (peak_memory_arrays, rank_memory_arrays,
                                           stage_memory_arrays)

__all__ = ["KINDS", "ORIGINS", "layer_act_arrays", "layer_wgrad_arrays",
           "memory_component_arrays", "optimizer_buffer_arrays", "own_chunk_peak",
           "peak_memory_arrays", "rank_memory_arrays", "stage_memory_arrays",
           "state_bytes_per_param", "stash_frontier_arrays"]
