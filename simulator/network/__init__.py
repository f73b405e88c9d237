"""The network behind the engine's ``NetworkBackend`` interface (``backend``): max-min fair
flows over a networkx graph (``flows``, built on ``routes``, ``flow_table``, ``maxmin`` and
``queue_entry``), its cluster adapter (``cluster_net``, the ``flows``
backend), the ``contention-free`` backend, and the lock-step collective algorithms kept as the
test oracle (``stepwise_oracle``).

Public API: ``BACKEND_NAMES`` (what ``simulate(network=...)`` and ``--network`` accept, the
default first), ``NetworkBackend``, ``new_network``, ``BACKENDS``, ``SimNetwork``,
``ContentionFreeNetwork``, ``FlowNetwork``. Only ``BACKEND_NAMES`` is defined here; the rest
load on first use, so reading the names (the CLI's parser does) imports neither SimPy nor
networkx.
"""
from __future__ import annotations

import importlib

BACKEND_NAMES = ("flows", "contention-free")
_LAZY = {"BACKENDS": "backend", "ContentionFreeNetwork": "backend", "NetworkBackend": "backend",
         "new_network": "backend", "SimNetwork": "cluster_net", "FlowNetwork": "flows"}

__all__ = ["BACKEND_NAMES", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"simulator.network.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'simulator.network' has no attribute {name!r}")
