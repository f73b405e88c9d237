"""The usable HBM bandwidth every memory-bound time in the cost model divides by: the
datasheet rate times ``SystemConfig.hbm_efficiency``, or a GPU profile's measurement
(``strategies.cost.measured``). Units: bytes/s."""
from __future__ import annotations

from strategies.cost import measured
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from topologies.gpus import GPU


#: The default system's achievable HBM fraction (``SystemConfig.hbm_efficiency``; an alias
#: for GPU profiles and reports that compare against the catalog, not a second constant).
HBM_EFFICIENCY = DEFAULT_SYSTEM.hbm_efficiency


def usable_hbm(gpu: GPU, system: SystemConfig = DEFAULT_SYSTEM) -> float:
    """Usable HBM bandwidth of ``gpu`` (bytes/s): datasheet x ``system.hbm_efficiency``, or a
    GPU profile's measurement (``strategies.cost.measured``)."""
    return measured.hbm_rate(gpu, system.hbm_efficiency)
