"""Topology graphs and routing: golden counts and routes, invariants over kinds, determinism,
scale, and the documented YAML example."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from topologies.cluster import (Cluster, NodeGroup, cluster_from_mapping, cluster_preset,
                                parse_cluster_arg)
from topologies.cluster.mapping import CLUSTER_KEYS
from topologies.cluster.network import INTER_TOPOLOGIES, INTRA_TOPOLOGIES
from topologies.cluster.preset_table import preset_names
from topologies.errors import SpecError
from topologies.gpus import get_gpu
from topologies.graph import build_graph, builder_names, get_builder, register, torus_dims
from topologies.routing import (clear_route_cache, path_bandwidth, path_latency, route,
                                stable_hash)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "cluster.yaml"


def small(inter: str = "rail_fat_tree", intra: str = "switch", nodes: int = 6, gpus: int = 4,
          nics: int = 2, per_leaf: int = 2, oversub: float = 1.0) -> Cluster:
    return Cluster(name="t", groups=(NodeGroup(get_gpu("H100"), nodes),), gpus_per_node=gpus,
                   intra_node_bandwidth=400e9, intra_node_latency=2e-6, nics_per_node=nics,
                   inter_node_bandwidth=50e9, inter_node_latency=4e-6, oversubscription=oversub,
                   intra_node_topology=intra, inter_node_topology=inter, nodes_per_leaf=per_leaf)


def assert_well_formed(g) -> None:
    for u, v, d in g.edges(data=True):
        assert d["bandwidth"] > 0 and d["latency"] >= 0
        assert g.edges[v, u] == d, f"link {u}-{v} is not symmetric"


# ---------------------------------------------------------------- building

@pytest.mark.parametrize("name,nodes", list(itertools.product(preset_names(), (1, 2, 64))))
def test_every_preset_builds(name, nodes):
    c = cluster_preset(name, nodes)
    g = build_graph(c)
    gpus = [v for v, k in g.nodes(data="kind") if k == "gpu"]
    assert gpus == list(range(c.num_gpus))
    assert_well_formed(g)
    assert all(g.nodes[r]["gpu"] == c.gpu.name for r in gpus)


@pytest.mark.parametrize("nodes,n_vertices,n_edges", [
    (1, 8 + 1, 2 * 8),                                    # GPUs + NVSwitch
    (2, 16 + 2 + 16 + 8, 2 * (16 + 16 + 16)),             # + 16 NICs, 8 leaves (1 per rail)
    (64, 512 + 64 + 512 + 16 + 8, 2 * (3 * 512 + 16)),    # 2 leaves/rail + 1 spine/rail
])
def test_golden_counts_dgx_h100(nodes, n_vertices, n_edges):
    g = build_graph(cluster_preset("dgx-h100", nodes))
    assert (g.number_of_nodes(), g.number_of_edges()) == (n_vertices, n_edges)


def test_golden_counts_other_kinds():
    mesh = build_graph(cluster_preset("mi300x", 1))
    assert (mesh.number_of_nodes(), mesh.number_of_edges()) == (8, 56)
    assert mesh.edges[0, 7]["bandwidth"] == pytest.approx(448e9 / 7)
    ring = build_graph(small(intra="ring", nodes=1))
    assert (ring.number_of_nodes(), ring.number_of_edges()) == (4, 8)
    # fat_tree, 6 nodes x 2 NICs, 2 nodes per leaf: 3 leaves + 1 spine
    ft = build_graph(small("fat_tree"))
    kinds = [k for _, k in ft.nodes(data="kind")]
    assert [kinds.count(k) for k in ("gpu", "nvswitch", "nic", "leaf", "spine")] == [24, 6, 12, 3, 1]
    assert set(ft.successors(("nic", 2, 1))) == {9, 11, ("leaf", 0, 1)}  # locals 1, 3
    # torus of 6 nodes is 2x3; per rail: 6 x-links (size 2 dedups to 3) + 6 y-links
    assert torus_dims(6) == (2, 3)
    tor = build_graph(small("torus"))
    nic_links = [(u, v) for u, v in tor.edges
                 if tor.nodes[u]["kind"] == tor.nodes[v]["kind"] == "nic"]
    assert len(nic_links) == 2 * 2 * (3 + 6)


def test_shared_nics_and_oversubscription():
    c = small(nodes=4, gpus=4, nics=2, per_leaf=2)
    g = build_graph(c)
    assert set(g.predecessors(("nic", 0, 1))) == {1, 3, ("leaf", 1, 0)}
    # leaf downlinks: 2 nodes x 50 GB/s on its rail; uplink to the aggregated spine equals it
    assert g.edges[("leaf", 0, 0), ("spine", 0, 0)]["bandwidth"] == pytest.approx(100e9)
    g2 = build_graph(replace(c, oversubscription=2))
    assert g2.edges[("leaf", 0, 0), ("spine", 0, 0)]["bandwidth"] == pytest.approx(50e9)
    g4 = build_graph(replace(c, oversubscription=2), spines_per_rail=4)
    ups = [g4.edges[("leaf", 0, 0), ("spine", 0, k)]["bandwidth"] for k in range(4)]
    assert ups == pytest.approx([12.5e9] * 4)


def test_builder_registry_refuses_duplicates_and_unknown_names():
    assert builder_names("intra") == sorted(INTRA_TOPOLOGIES)
    assert builder_names("inter") == sorted(INTER_TOPOLOGIES)
    with pytest.raises(ValueError, match="already registered"):
        register("intra", "switch")(lambda c, n: [])
    with pytest.raises(SpecError, match="must be one of"):
        get_builder("inter", "dragonfly")
    with pytest.raises(SpecError, match="spines_per_rail"):
        build_graph(small(), spines_per_rail=0)


# ---------------------------------------------------------------- routing

def test_route_inside_a_node_crosses_the_nvswitch():
    c = cluster_preset("dgx-h100", 2)
    g = build_graph(c)
    p = route(g, 9, 14)
    assert p == [9, ("nvswitch", 1), 14]
    assert path_latency(g, p) == pytest.approx(c.intra_node_latency, rel=1e-12)
    assert path_bandwidth(g, p) == c.intra_node_bandwidth


def test_route_between_nodes_on_one_rail():
    c = cluster_preset("dgx-h100", 64)
    g = build_graph(c)
    p = route(g, 3, 8 * 5 + 3)                       # node 0 -> node 5, both under leaf 0
    assert p == [3, ("nic", 0, 3), ("leaf", 3, 0), ("nic", 5, 3), 43]
    far = route(g, 3, 8 * 40 + 3)                    # node 0 -> node 40, leaf 0 -> leaf 1
    assert far == [3, ("nic", 0, 3), ("leaf", 3, 0), ("spine", 3, 0), ("leaf", 3, 1),
                   ("nic", 40, 3), 323]
    for path in (p, far):
        assert path_latency(g, path) == pytest.approx(c.inter_node_latency, rel=1e-12)
        assert path_bandwidth(g, path) == c.inter_node_bandwidth


def test_route_across_rails_relays_over_nvlink_then_stays_on_one_rail():
    g = build_graph(cluster_preset("dgx-h100", 64))
    p = route(g, 1, 8 * 40 + 6)
    assert p[:4] == [1, ("nvswitch", 0), 6, ("nic", 0, 6)]
    rails = {v[-1] if v[0] == "nic" else v[1] for v in p[3:] if isinstance(v, tuple)}
    assert rails == {6}


@pytest.mark.parametrize("inter,intra", list(itertools.product(INTER_TOPOLOGIES, INTRA_TOPOLOGIES)))
def test_every_route_is_a_simple_path_of_existing_edges(inter, intra):
    if inter == "rail_only" and intra == "ring":     # refused: no one-hop cross-rail relay
        with pytest.raises(SpecError, match="rail-only"):
            small(inter, intra, nodes=6, gpus=4, nics=2)
        return
    c = small(inter, intra, nodes=6, gpus=4, nics=2)
    g = build_graph(c, spines_per_rail=2)
    for s, d in itertools.permutations(range(c.num_gpus), 2):
        p = route(g, s, d)
        assert p[0] == s and p[-1] == d and len(set(p)) == len(p)
        assert all(g.has_edge(u, v) for u, v in zip(p, p[1:])), p
    assert route(g, 5, 5) == [5]


def test_fat_tree_and_torus_latency():
    ft = small("fat_tree")
    g = build_graph(ft)
    p = route(g, 1, 4 * 5 + 2)
    assert p[2] == ("leaf", 0, 0) and ("spine", 0, 0) in p
    assert path_latency(g, p) == pytest.approx(ft.inter_node_latency)
    ring = build_graph(small("ring", nodes=6))
    p = route(ring, 0, 4 * 3)                        # three NIC hops either way: goes forward
    assert p == [0, ("nic", 0, 0), ("nic", 1, 0), ("nic", 2, 0), ("nic", 3, 0), 12]
    assert path_latency(ring, p) == pytest.approx(4e-6 / 2 + 3 * 4e-6 / 2)


def test_fallback_and_cache():
    g = build_graph(small())
    assert route(g, ("nic", 0, 0), ("leaf", 0, 0)) == [("nic", 0, 0), ("leaf", 0, 0)]
    p = route(g, 0, 9)
    p.append("junk")
    assert route(g, 0, 9)[-1] == 9
    clear_route_cache(g)
    assert route(g, 0, 9) == p[:-1]
    assert path_bandwidth(g, [0]) == float("inf") and path_latency(g, [0]) == 0


_DETERMINISM = """
from topologies.cluster import cluster_preset
from topologies.graph import build_graph
from topologies.routing import route
g = build_graph(cluster_preset("dgx-h100", 64), spines_per_rail=4)
print([route(g, s, (s * 7919 + 13) % 512) for s in range(0, 512, 5)])
"""


def test_routing_is_deterministic_across_processes():
    outs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        outs.append(subprocess.run([sys.executable, "-c", textwrap.dedent(_DETERMINISM)],
                                   env=env, cwd=ROOT, capture_output=True, text=True,
                                   check=True).stdout)
    assert outs[0] == outs[1]
    g = build_graph(cluster_preset("dgx-h100", 64), spines_per_rail=4)
    here = [route(g, s, (s * 7919 + 13) % 512) for s in range(0, 512, 5)]
    assert repr(here) + "\n" == outs[0]
    spines = {v for p in here for v in p if isinstance(v, tuple) and v[0] == "spine"}
    assert len({k for _, _, k in spines}) == 4, "ECMP should spread over all spines"
    assert stable_hash(1, 2) == stable_hash(1, 2) != stable_hash(2, 1)


def test_16k_gpus_build_quickly():
    t0 = time.perf_counter()
    g = build_graph(cluster_preset("dgx-h100", 2048))
    built = time.perf_counter() - t0
    p = route(g, 0, 16383)
    print(f"2048 x dgx-h100: {g.number_of_nodes()} vertices, {g.number_of_edges()} edges, "
          f"built in {built:.2f} s")
    assert g.nodes[16383]["kind"] == "gpu" and p[-1] == 16383


def test_route_plugs_into_the_flow_network():
    simpy = pytest.importorskip("simpy")
    network = pytest.importorskip("simulator.network.flows")
    c = cluster_preset("dgx-h100", 2)
    env = simpy.Environment()
    net = network.FlowNetwork(env, build_graph(c), route_fn=route)
    done = net.transfer(4, 12, 1e9)                  # same rail: no NVLink relay
    env.run(done)
    assert env.now == pytest.approx(c.inter_node_latency + 1e9 / c.inter_node_bandwidth)


# ---------------------------------------------------------------- the YAML example and docs

def test_yaml_example_loads_builds_and_round_trips():
    c = parse_cluster_arg(str(EXAMPLE))
    assert c.heterogeneous and c.num_nodes == 8 and c.num_gpus == 64
    assert [g.gpu.name for g in c.groups] == ["H100-SXM5-80GB", "A100-SXM4-80GB"]
    assert c.inter_node_bandwidth == 400e9 / 8 and c.oversubscription == 2
    g = build_graph(c)
    assert g.nodes[0]["gpu"] == "H100-SXM5-80GB" and g.nodes[63]["gpu"] == "A100-SXM4-80GB"
    assert g.edges[("leaf", 0, 0), ("spine", 0, 0)]["bandwidth"] == pytest.approx(4 * 50e9 / 2)
    again = cluster_from_mapping(c.to_dict())
    assert again.groups == c.groups and again.name == c.name
    for k in ("intra_node_bandwidth", "intra_node_latency", "inter_node_bandwidth",
              "inter_node_latency", "oversubscription"):
        assert getattr(again, k) == pytest.approx(getattr(c, k), rel=1e-12)


def test_clusters_doc_names_every_key_and_preset():
    text = (ROOT / "docs" / "clusters.md").read_text(encoding="utf-8")
    for key in sorted(CLUSTER_KEYS) + preset_names():
        assert f"`{key}`" in text, key
