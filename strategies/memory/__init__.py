"""Memory per GPU and pipeline stage (docs/memory.md): ``activations`` (the Korthikanti
tensor table), ``arrays`` (the vectorised peak the search prunes with) and the per-stage,
per-origin breakdown re-exported here."""
from strategies.memory.scalar import (MemoryBreakdown, fits, memory_by_origin_json,
                                      memory_by_stage, peak_memory)

__all__ = ["MemoryBreakdown", "fits", "memory_by_origin_json", "memory_by_stage", "peak_memory"]
