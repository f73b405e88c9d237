#!/usr/bin/env python
"""The expert all-to-all's bytes between nodes on the HGX B200/B300 MoE rows, beside their
NVL72 twins and the H100 controls, and the all-to-all's achieved share of the NIC's line rate
in the public measurements of the dispatchers (docs/calibration.md §5.176).

Run (analytic only, about 30 s):

    python experiments/hgx_a2a_nic.py            # Markdown tables on stdout

Table 1, the scale-out presets: NICs per GPU, each NIC's line rate, the rate the model's
collectives get from it (``comm.links.nic_rate``: line rate × ``NETWORK_EFFICIENCY`` /
oversubscription, the one place the NIC's rate is read), the fabric, the NVLink domain, and
the public system each preset stands for.

Table 2, every MoE row of ``FILES`` on an 8-GPU node or an NVL72 rack: the dispatcher, the
expert group (``ep`` ranks ``etp`` apart in Megatron-Core's ``tp-cp-ep-dp-pp`` order), the
nodes (NVLink domains) it spans, the bytes per rank of one forward's dispatch and combine
(``stage_costs.ep_bytes``), the share of them that crosses a NIC (``(n-k)/n × remote_scale``,
``all_to_all.two_level_time``'s NIC term), the model's NIC rate, one direction's all-to-all
alone on its links (``comm.collective_time``, the estimate's call) and which port bounds it,
the step's exposed ``ep_comm``, the error as is, and the what-if of table 3's all-to-all
efficiency.

Table 3, the all-to-all over the NIC as published: every NIC-bound case of
``experiments/a2a_measured.py`` (DeepEP V1 normal kernels on H800 with 400 Gb/s ConnectX-7,
HybridEP on H100) and the large-message NCCL ``alltoall_perf`` figures of
``experiments/nccl_alltoall_measured.py``, each as the share of the NIC's line rate it reached
(``NETWORK_EFFICIENCY × model time / published time``: the model's NIC-bound time scales as
one over that share; latency is under 1 % of these calls). The median over the cases at four
nodes or more is table 2's what-if (``A2A_NIC`` below): the all-to-all's NIC term at that share
of the line rate in place of ``NETWORK_EFFICIENCY``, the rings untouched. Not adopted
(§5.176): it moves no B300 row, whose expert group never leaves its node.
"""
from __future__ import annotations

import os
import statistics
import sys
from contextlib import contextmanager
from typing import Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import a2a_measured as a2m  # noqa: E402
import nccl_alltoall_measured as ncm  # noqa: E402
from strategies.collectives import all_to_all  # noqa: E402
from strategies.collectives.select import strided_layout  # noqa: E402
from strategies.cost import comm  # noqa: E402
from strategies.cost.comm import collective as collective_mod  # noqa: E402
from strategies.cost.comm.links import nic_rate  # noqa: E402
from strategies.errors import SpecError  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.estimate.scalar import step_arrays  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

DATA = "strategies/reference/data/"
FILES = ("megatron_bridge_2604", "heldout_2026b", "hybrid_2026", "published_2026",
         "dgxc_2505", "nemo_performance_25", "dsv4_2026")
#: preset -> the public system and its scale-out as the sources give it
PRESETS = {
    "dgx-h100": "DGX H100: 8 x ConnectX-7 400 Gb/s NDR, one per GPU (DGX H100 datasheet)",
    "dgx-b200": "DGX B200: 8 x ConnectX-7 400 Gb/s behind PCIe Gen5 switches on the host "
                "board (DGX B200 datasheet and User Guide)",
    "dgx-b300": "DGX B300: 8 x ConnectX-8 800 Gb/s on the GPU baseboard, PCIe Gen6 switch in "
                "the NIC, cabled to 8 x 800 Gb/s front ports (DGX B300 User Guide, as "
                "vengineer.hatenablog.com read it 2025-12-06)",
    "gb200-nvl72": "GB200 NVL72: 1 x ConnectX-7 400 Gb/s per GPU between racks",
    "gb300-nvl72": "GB300 NVL72: 1 x ConnectX-8 800 Gb/s per GPU between racks",
}
#: the large-message NCCL all-to-alls of ``nccl_alltoall_measured.MEASURED`` over the NICs
#: (the 2 x 1 A100 case left out: NCCL's all-gather on that link falls as far, §5.49; the
#: 8 MiB H800 figures are latency-bound); ``deepep3`` is 2 DGX H100 with NVLink off, every
#: pair over a NIC (the model's 16 one-GPU nodes)
NCCL_KEYS = ("ndmv4_2x8_1G", "ndmv4_2x8_4G", "deepep3")


def preset_rows() -> list[dict]:
    """Table 1: each of ``PRESETS`` as the model holds it (two units of it)."""
    out = []
    for name, doc in PRESETS.items():
        cl = cluster_preset(name, 2)
        per_gpu = cl.inter_node_bandwidth_per_gpu
        out.append({"preset": name, "nics_per_gpu": cl.nics_per_node / cl.gpus_per_node,
                    "gbit": per_gpu * 8 / 1e9, "model_gbs": float(nic_rate(cl)) / 1e9,
                    "fabric": cl.inter_node_topology, "oversub": cl.oversubscription,
                    "domain": cl.nvlink_domain_gpus or cl.gpus_per_node, "doc": doc})
    return out


def kind_of(cluster) -> str:
    """``HGX B200/B300``, ``NVL72`` or ``H100/H800`` (the control) of a row's cluster."""
    name = cluster.name.split(":")[0]
    if name in ("dgx-b200", "dgx-b300"):
        return "HGX B200/B300"
    if "nvl72" in name:
        return "NVL72"
    return "H100/H800"


def a2a_row(job) -> dict:
    """The expert all-to-all of ``job``'s mean stage as the estimate prices it: bytes per rank
    of a forward's dispatch and combine, the share crossing a NIC, one direction alone on its
    links (s), the bounding port."""
    p, cl = job.plan, job.cluster
    sc = step_arrays(job)["stage_costs"]
    ep, etp = int(p.ep), int(p.expert_tp)
    uniform, k, nodes = (float(x) for x in strided_layout(ep, etp, cl.gpus_per_node))
    nbytes, r, s = float(sc.ep_bytes), float(sc.ep_remote_scale), float(sc.ep_nvlink_share)
    nic_share = (ep - k) / ep * r if ep > k else 0.0
    t = float(comm.collective_time("alltoall", nbytes, ep, etp, cl, r, s))
    fwd = nodes > 1 and (r != 1.0 or s != 1.0)
    t_in = (k - 1) * (nodes if fwd else 1.0) * nbytes / (
        ep * cl.intra_node_bandwidth * comm.NVLINK_EFFICIENCY * s) if ep > 1 else 0.0
    t_out = nic_share * nbytes / float(nic_rate(cl))
    return {"ep": ep, "etp": etp, "nodes": nodes, "bytes": nbytes, "remote": r,
            "nic_share": nic_share, "nic_bytes": nic_share * nbytes,
            "nic_gbs": float(nic_rate(cl)) / 1e9, "t_a2a": t,
            "port": "-" if ep < 2 else ("NIC" if t_out > t_in else "NVLink")}


@contextmanager
def a2a_nic_share(share: float) -> Iterator[None]:
    """The all-to-all's NIC term at ``share`` of the line rate in place of
    ``NETWORK_EFFICIENCY`` (every other collective as is), for the block: wraps
    ``all_to_all.two_level_time``'s NIC rate and empties ``comm.collective_time``'s memo
    before and after."""
    base = all_to_all.two_level_time
    f = share / comm.NETWORK_EFFICIENCY

    def scaled(nbytes, n, k, bw_in, bw_out, lat, relay, remote_scale=1.0, nvlink_share=1.0):
        return base(nbytes, n, k, bw_in, bw_out * f, lat, relay, remote_scale, nvlink_share)

    collective_mod._SCALAR_TIMES.clear()
    all_to_all.two_level_time = scaled
    try:
        yield
    finally:
        all_to_all.two_level_time = base
        collective_mod._SCALAR_TIMES.clear()


def moe_rows(share: float | None = None) -> list[dict]:
    """Table 2: every MoE row of ``FILES`` (``share``: the what-if's all-to-all NIC share; its
    estimate in ``what_if``)."""
    share = A2A_NIC if share is None else share
    out = []
    for name in FILES:
        data = load_reference(DATA + name + ".json")
        for e in data:
            try:
                case = case_from_entry(e, data)
            except (SpecError, ValueError, KeyError):
                continue
            job = case.job
            if job is None or job.model.num_experts < 2 or job.cluster.gpus_per_node < 8:
                continue
            est = estimate(job)
            with a2a_nic_share(share):
                alt = estimate(job).step_time_s
            ms, t = case.measured_step_s, est.step_time_s
            out.append({"file": name, "id": e["id"], "kind": kind_of(job.cluster),
                        "cluster": job.cluster.name, "dispatcher": job.plan.moe_dispatcher,
                        **a2a_row(job), "ep_comm": float(est.breakdown_s["ep_comm"]),
                        "measured": ms, "estimate": t, "error": 100 * (t / ms - 1),
                        "what_if": 100 * (alt / ms - 1)})
    return out


def measured_shares() -> list[dict]:
    """Table 3: the NIC's line-rate share each public all-to-all measurement reached."""
    out = []
    for r in a2m.rows():
        if r.bound != "NIC":
            continue
        c = r.case
        nodes = max(1, c.ep // cluster_preset(c.preset, 1).gpus_per_node)
        out.append({"source": c.source, "case": f"{c.op}, EP{c.ep}", "preset": c.preset,
                    "nodes": nodes, "ratio": r.ratio,
                    "share": comm.NETWORK_EFFICIENCY * r.ratio})
    for m in ncm.MEASURED:
        if m.key not in NCCL_KEYS:
            continue
        ratio = ncm.model_time(m) / ncm.measured_time(m)
        out.append({"source": "NCCL, " + m.source, "case": f"alltoall, {m.ranks} ranks",
                    "preset": m.preset, "nodes": m.nodes, "ratio": ratio,
                    "share": comm.NETWORK_EFFICIENCY * ratio})
    return out


def a2a_nic_median() -> float:
    """The median line-rate share of table 3's cases over four nodes or more."""
    return statistics.median(x["share"] for x in measured_shares() if x["nodes"] >= 4)


A2A_NIC = a2a_nic_median()


def mape(rows: list[dict], key: str) -> float:
    return sum(abs(r[key]) for r in rows) / max(1, len(rows))


def main() -> None:
    print("Table 1. Scale-out presets as the model holds them\n")
    print("| preset | NICs per GPU | NIC Gb/s | model's NIC rate GB/s | fabric | "
          "oversubscription | NVLink domain GPUs | public system |")
    print("|---|---:|---:|---:|---|---:|---:|---|")
    for p in preset_rows():
        print(f"| {p['preset']} | {p['nics_per_gpu']:g} | {p['gbit']:g} | "
              f"{p['model_gbs']:.1f} | {p['fabric']} | {p['oversub']:g} | {p['domain']} | "
              f"{p['doc']} |")
    rows = moe_rows()
    print("\nTable 2. The expert all-to-all of every MoE row on 8-GPU nodes and NVL72 racks "
          f"(what-if: the all-to-all's NIC term at {A2A_NIC:.3f} of the line rate, table 3)\n")
    print("| row | kind | dispatcher | ep (etp) | nodes spanned | MB per rank per call | "
          "NIC share | MB over the NIC | NIC GB/s | one a2a ms | bound | ep_comm s | "
          "error | what-if |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in sorted(rows, key=lambda x: (x["kind"], x["id"])):
        print(f"| {r['id']} | {r['kind']} | {r['dispatcher']} | {r['ep']} ({r['etp']}) | "
              f"{r['nodes']:g} | {r['bytes'] / 1e6:.1f} | {r['nic_share']:.3f} | "
              f"{r['nic_bytes'] / 1e6:.1f} | {r['nic_gbs']:.0f} | {r['t_a2a'] * 1e3:.3f} | "
              f"{r['port']} | {r['ep_comm']:.3f} | {r['error']:+.1f} % | "
              f"{r['what_if']:+.1f} % |")
    print("\nMAPE of these rows, as is -> what-if, by kind (rows whose expert group crosses a "
          "NIC in brackets):\n")
    print("| kind | rows | as is | what-if | crossing rows | as is | what-if |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in ("HGX B200/B300", "NVL72", "H100/H800"):
        sub = [r for r in rows if r["kind"] == kind]
        cross = [r for r in sub if r["nic_share"] > 0]
        print(f"| {kind} | {len(sub)} | {mape(sub, 'error'):.2f} % | "
              f"{mape(sub, 'what_if'):.2f} % | {len(cross)} | {mape(cross, 'error'):.2f} % | "
              f"{mape(cross, 'what_if'):.2f} % |")
    print("\nTable 3. The all-to-all's achieved share of the NIC's line rate, published\n")
    print("| source | case | cluster | nodes | model / published time | share of line rate |")
    print("|---|---|---|---:|---:|---:|")
    for m in measured_shares():
        print(f"| {m['source']} | {m['case']} | {m['preset']} | {m['nodes']} | "
              f"{m['ratio']:.3f} | {m['share']:.3f} |")
    print(f"\nmedian over four nodes or more: {A2A_NIC:.3f} of the line rate "
          f"(the model's NETWORK_EFFICIENCY {comm.NETWORK_EFFICIENCY})")


if __name__ == "__main__":
    main()
