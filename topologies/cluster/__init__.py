"""Clusters: the frozen specs, the presets, the ``--cluster`` syntax and the YAML format.

A *node* is one NVLink (or Infinity Fabric) domain: the GPUs that reach each other through the
scale-up fabric. For an 8-GPU DGX that is the server; for a GB200/GB300 NVL72 rack it is the
rack's used trays (``gpus_per_tray`` GPUs each, up to ``nvlink_domain_gpus`` = 72 GPUs), one
NVLink switch fabric across trays, with the scale-out NICs between racks. Everything that asks
"does this traffic stay on NVLink?" asks ``nvlink_domain.same_nvlink_domain`` /
``nvlink_domain_size``.

Modules (imports point one way: ``network``, ``preset_table`` <- ``spec`` <- ``presets`` <-
``mapping`` <- ``arg``; ``nvlink_domain`` reads ``spec``):

* ``spec``: ``NodeGroup`` and ``Cluster`` (bytes/s and seconds), their checks, views and
  YAML-file form (``Cluster.to_dict``);
* ``network``: the topology names and the ``network:`` section (``network_from_mapping``);
* ``preset_table``: the preset rows (``NODE_PRESETS``, ``RACKS``, ``PLANED``,
  ``RACK_PRESETS``), the default latencies, ``preset_names``, ``preset_description``,
  ``preset_unit_gpus``;
* ``presets``: ``cluster_preset`` and ``cluster_for_gpus``;
* ``mapping``: ``cluster_from_mapping`` (file units, converted once there), ``CLUSTER_KEYS``,
  ``load_cluster_file``;
* ``arg``: ``parse_cluster_arg`` (``PRESET:NODES``, ``A+B``, a file) and ``mixed_cluster``;
* ``nvlink_domain``: ``nvlink_domain_of``, ``same_nvlink_domain``, ``fits_nvlink_domain``.

The names most callers use are re-exported here.
"""
from topologies.cluster.arg import parse_cluster_arg
from topologies.cluster.mapping import cluster_from_mapping
from topologies.cluster.presets import cluster_preset
from topologies.cluster.spec import Cluster, NodeGroup

__all__ = ["Cluster", "NodeGroup", "cluster_from_mapping", "cluster_preset", "parse_cluster_arg"]
