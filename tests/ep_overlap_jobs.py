"""The small EP-overlap interleaved job the combined-pair tests build (tests/test_combined_pair.py,
tests/test_delay_wgrad.py)."""
from __future__ import annotations

from dataclasses import replace

from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


def pair_job(pp: int, v: int, m: int, bw: float = 50e9, epo: bool = True, dw: bool = True):
    """Mixtral 8x7B's layer, two per chunk, ep 8 inside each 8-GPU node, one stage per node:
    every pipeline message crosses the nodes at ``bw`` bytes/s, nothing else does; ``m``
    micro-batches, ``v`` chunks, Megatron's EP overlap ``epo`` with ``delay_wgrad_compute``
    ``dw`` (as Megatron-Bridge's harness runs it; only with the overlap)."""
    model = replace(model_preset("mixtral-8x7b"), num_layers=pp * v * 2, seq_length=1024)
    plan = parse_plan(f"tp=1,pp={pp},dp=8,ep=8,mbs=1,gbs={8 * m},schedule=interleaved,"
                      f"vpp={v},zero=1,ep_overlap={str(epo).lower()},"
                      f"delay_wgrad={str(epo and dw).lower()}")
    return make_job(model, replace(cluster_preset("dgx-h100", pp), inter_node_bandwidth=bw),
                    plan)
