"""GPUs from datasheets: dense peak FLOP/s per dtype, HBM capacity and bandwidth, and the
measured efficiencies the cost model prices kernels with. Units: FLOP/s, bytes, bytes/s.

``spec``: the record (``GPU``, its fields and checks, ``gpu_from_datasheet``); ``catalog``: the
parts and their sources (``GPUS``, ``get_gpu``); ``sustained``: the sustained-clock rules the
Blackwell efficiencies derive from; ``mapping``: the file form (``gpu_from_mapping``,
``gpu_to_mapping``). The names most callers use are importable from here.
"""
from topologies.gpus.catalog import GPUS, get_gpu
from topologies.gpus.mapping import gpu_from_mapping, gpu_to_mapping
from topologies.gpus.spec import GIB, GPU

__all__ = ["GIB", "GPU", "GPUS", "get_gpu", "gpu_from_mapping", "gpu_to_mapping"]
