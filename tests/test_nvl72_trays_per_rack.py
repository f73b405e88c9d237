"""NVL72 racks run with fewer trays per NVLink domain: ``PRESET:TRAYSxT`` and a cluster file's
``trays_per_rack`` (docs/clusters.md; calibration §5.220)."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.cli.main import main
from topologies.cluster import cluster_from_mapping, cluster_preset, parse_cluster_arg
from topologies.cluster.nvlink_domain import nvlink_domain_of, same_nvlink_domain
from topologies.errors import SpecError
from topologies.graph import build_graph
from topologies.routing import path_bandwidth, route

NVLINK5 = 900e9          # bytes/s per GPU per direction


@pytest.mark.parametrize("preset, gpu, nic_gbps", [("gb200-nvl72", "GB200", 400),
                                                   ("gb300-nvl72", "GB300", 800)])
@pytest.mark.parametrize("trays, per_rack", [(256, 16), (36, 12), (18, 18), (7, 1)])
def test_trays_per_rack_sets_racks_and_domains(preset, gpu, nic_gbps, trays, per_rack):
    """N trays in racks of T: 4N GPUs, N/T racks, one NVLink domain of 4T GPUs each
    (rank r in domain r // 4T); 72 - 4T slots left empty; one NIC per GPU."""
    cl = parse_cluster_arg(f"{preset}:{trays}x{per_rack}")
    assert (cl.num_gpus, cl.num_nodes, cl.nvlink_domain_size) == (4 * trays, trays // per_rack,
                                                                  4 * per_rack)
    assert (cl.gpu.name, cl.nvlink_domain_capacity, cl.gpus_per_host) == (gpu, 72, 4)
    assert cl.nics_per_node == 4 * per_rack and cl.inter_node_bandwidth == nic_gbps * 1e9 / 8
    d = 4 * per_rack
    ranks = np.arange(cl.num_gpus)
    assert (nvlink_domain_of(cl, ranks) == ranks // d).all()
    assert same_nvlink_domain(cl, 0, d - 1) and not same_nvlink_domain(cl, d - 1, d)
    empty = 72 - d
    assert (f"{trays // per_rack} NVLink domain" in cl.describe_domain()
            and (f"{empty} of 72 GPU slots left empty" in cl.describe_domain()) == (empty > 0))


def test_the_default_split_and_its_explicit_form_are_one_cluster():
    """gb200-nvl72:64 is 4 racks of 16: the same cluster, with the same name, as 64x16; a
    split the default does not give keeps the x in its name, and resizing keeps the racks."""
    assert parse_cluster_arg("gb200-nvl72:64x16") == parse_cluster_arg("gb200-nvl72:64")
    assert parse_cluster_arg("gb200-nvl72:64x16").name == "gb200-nvl72:64"
    cl = parse_cluster_arg("gb200-nvl72:256x16")
    assert cl.name == "gb200-nvl72:256x16" and cl != parse_cluster_arg("gb200-nvl72:255")
    assert cl.with_nodes(15).name == "gb200-nvl72:240x16"
    assert cl.with_nodes(15) == parse_cluster_arg("gb200-nvl72:240x16")
    assert cl.with_nodes(2).name == "gb200-nvl72:32"
    planed = parse_cluster_arg("gb300-nvl72-2plane:256x16")
    assert (planed.planes, planed.num_nodes, planed.name) == (2, 16, "gb300-nvl72-2plane:256x16")


def test_cluster_file_trays_per_rack_is_the_preset_form():
    """``trays_per_rack: 16`` over ``preset: gb200-nvl72``: gpus_per_node 64 and one NIC
    per GPU: the racks, domains and links of ``gb200-nvl72:256x16``."""
    f = cluster_from_mapping({"preset": "gb200-nvl72", "trays_per_rack": 16, "nodes": 16})
    p = parse_cluster_arg("gb200-nvl72:256x16")
    keys = ("num_gpus", "num_nodes", "gpus_per_node", "nics_per_node", "gpus_per_tray",
            "nvlink_domain_gpus", "intra_node_bandwidth", "inter_node_bandwidth")
    assert [getattr(f, k) for k in keys] == [getattr(p, k) for k in keys]
    assert f.describe_domain() == p.describe_domain()
    assert cluster_from_mapping(f.to_dict()).gpus_per_node == 64


def test_routes_stay_on_nvlink_inside_a_smaller_domain():
    """Racks of 12 trays: GPUs 3 and 47 share domain 0's switch; GPU 48 is in the next rack,
    reached through the NICs (the NVLink 5 ring closed form inside such a domain:
    ``tests/test_nvl72.py``)."""
    g = build_graph(cluster_preset("gb200-nvl72", 36, trays_per_rack=12))
    assert route(g, 3, 47) == [3, ("nvswitch", 0), 47]
    assert path_bandwidth(g, route(g, 3, 47)) == NVLINK5
    assert path_bandwidth(g, route(g, 3, 48)) == 400e9 / 8


@pytest.mark.parametrize("text, field, words", [
    ("gb200-nvl72:256x17", "trays_per_rack", "must divide the 256 trays"),
    ("gb200-nvl72:256x19", "trays_per_rack", "must be at most 18"),
    ("gb300-nvl72:256x32", "trays_per_rack", "must be at most 18"),
    ("gb200-nvl72:256x0", "trays_per_rack", "must be an integer >= 1"),
    ("gb200-nvl72:256x", "cluster", "PRESET:TRAYSxT"),
    ("dgx-h100:4x8", "cluster", "needs a rack-scale preset"),
    ("gb200-nvl72:256", "cluster", "gb200-nvl72:256x16"),
])
def test_bad_trays_per_rack_is_refused(text, field, words):
    with pytest.raises(SpecError, match=field) as e:
        parse_cluster_arg(text)
    assert words in str(e.value)


@pytest.mark.parametrize("spec, words", [
    ({"trays_per_rack": 19}, "must be at most 18"),
    ({"trays_per_rack": 0}, "must be an integer >= 1"),
    ({"trays_per_rack": 16, "gpus_per_node": 72}, "gives gpus_per_node=64"),
])
def test_bad_cluster_file_trays_per_rack_is_refused(spec, words):
    with pytest.raises(SpecError, match="trays_per_rack") as e:
        cluster_from_mapping({"preset": "gb200-nvl72", "nodes": 2, **spec})
    assert words in str(e.value)
    with pytest.raises(SpecError, match="needs gpus_per_tray"):
        cluster_from_mapping({"preset": "dgx-h100", "trays_per_rack": 2})


def test_cli_exits_2_naming_the_field(capsys):
    rc = main(["estimate", "--model", "llama3-8b", "--cluster", "gb200-nvl72:256x17",
               "--global-batch", "1024", "--plan", "tp=4"])
    err = capsys.readouterr().err
    assert rc == 2 and "trays_per_rack" in err and "17" in err and "Traceback" not in err
