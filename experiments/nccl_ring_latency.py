"""NCCL's flat ring vs the hierarchical all-gather / reduce-scatter, on the reference rows.

What NCCL runs (read in ``NVIDIA/nccl`` ``src/graph/tuning.cc``, ``ncclTopoTuneModel``, tags
v2.10.3-1, v2.12.12-1, v2.18.3-1, v2.19.3-1 and master 2.30): all-gather and reduce-scatter
are timed, and so can only be picked, for ``RING`` (all versions), ``NVLS`` (2.19+; between
nodes only with a CollNet plugin that has ``iallgather`` / ``ireducescatter``), ``COLLNET_DIRECT``
(SHARP, when enabled) and ``PAT`` (2.23+, only with one GPU per node). For a group with ``k > 1``
members on each of several nodes and no SHARP that leaves the flat ring over all ``n`` ranks,
whose latency NCCL models as

    baseLat + (nsteps - nInterSteps)·max(intraLat, netOverhead) + nInterSteps·interLat
    nsteps = n - 1, nInterSteps = nodes - 1          (all-gather, reduce-scatter)

paraplan now runs them so (``strategies.collectives.ring.striped``, docs/calibration.md §3.21);
before, it ran those groups ``hierarchical`` (intra-node rings, then rings across nodes of
``S/k``: ``(k-1)`` intra and ``(nodes-1)`` inter latencies, the NVLink phase not overlapped
with the network's).

Part 1 prints, for the data-parallel group (and the expert-data-parallel one) of every
reference row with ``k > 1`` members on each of several nodes, one all-gather's time for a
1 MiB, 16 MiB and 256 MiB buffer both ways, as (bandwidth + latency) microseconds:
``hierarchical.time`` (the former rule) and the model's ``comm.collective_time`` (the striped
flat ring).

Part 2 (``--whatif``) re-runs the analytic validation with all-gathers and reduce-scatters
over those groups timed by the former rule (``hierarchical``) or by the flat ring's bandwidth
with the hierarchical latency (``latency``: the flat ring's latency alone undone) and prints
the rows whose error moves by more than 0.05 points, and the per-family MAPE, model vs
what-if. The simulator is not part of the what-if.

Run:
    python experiments/nccl_ring_latency.py                           # part 1, all tiers
    python experiments/nccl_ring_latency.py --no-table --whatif hierarchical
    python experiments/nccl_ring_latency.py --no-table --whatif latency \
        --reference strategies/reference/data/published_2026.json
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases, mape, validate_cases  # noqa: E402
from strategies.collectives import PASSES, hierarchical  # noqa: E402
from strategies.collectives.select import strided_layout  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.comm.links import hop_rate, hop_relays, nic_rate  # noqa: E402
from topologies.routing import transfer_latency, transfer_rate  # noqa: E402
from strategies.cost.comm import NVLINK_EFFICIENCY  # noqa: E402
from topologies.cluster import Cluster  # noqa: E402

SIZES = (2 ** 20, 2 ** 24, 2 ** 28)
MODEL = cm.collective_time      # the model's, kept while part 2 swaps the module's


def nccl_ring_latency(passes, n, nodes, lat_in, lat_out):
    """NCCL's ring latency (``tuning.cc``): ``passes·(nodes-1)`` steps cross nodes, the other
    ``passes·(n-nodes)`` stay in a node (seconds; baseLat and netOverhead left out: paraplan
    has no per-call base latency, and netOverhead (1-2 us, x3 for Simple) is below NVLink's
    Simple hwLat on Intel hosts)."""
    return passes * ((nodes - 1) * lat_out + (n - nodes) * lat_in)


def _lat_out(cl: Cluster, stride, k):
    """Latency of the striped ring's hop between nodes (relayed where it changes rail)."""
    s = np.asarray(stride, dtype=np.int64)
    relay = hop_relays(cl, (s, -(np.asarray(k, dtype=np.int64) - 1) * s))
    return transfer_latency(cl.intra_node_latency, cl.inter_node_latency, True, relay)


def hier_parts(kind, nbytes, n, stride, cl: Cluster):
    """(bandwidth seconds, latency seconds) of the hierarchical algorithm (the former rule for
    all-gather and reduce-scatter)."""
    _, k, nodes = strided_layout(n, stride, cl.gpus_per_node)
    p = PASSES[kind]
    intra = cl.intra_node_bandwidth * NVLINK_EFFICIENCY
    inter = transfer_rate(hop_rate(cl), nic_rate(cl), True, False, cl.planes)
    lat_in = cl.intra_node_latency
    lat_out = float(transfer_latency(lat_in, cl.inter_node_latency, True, False))
    total = hierarchical.time(p, nbytes, k, nodes, intra, lat_in, inter, lat_out)
    lat = p * ((k - 1) * lat_in + (nodes - 1) * lat_out)
    return total - lat, lat


def flat_parts(kind, nbytes, n, stride, cl: Cluster):
    """(bandwidth seconds, latency seconds) of the model's striped flat ring
    (``comm.collective_time``)."""
    _, k, nodes = strided_layout(n, stride, cl.gpus_per_node)
    lat = nccl_ring_latency(PASSES[kind], n, nodes, cl.intra_node_latency,
                            _lat_out(cl, stride, np.maximum(k, 1)))
    return MODEL(kind, nbytes, n, stride, cl) - lat, lat


def _flat_layout(n, stride, cl: Cluster):
    uniform, k, nodes = strided_layout(n, stride, cl.gpus_per_node)
    return uniform & (nodes > 1) & (k > 1)


def part1(cases) -> None:
    print("## Per-collective time of one all-gather (or reduce-scatter) over each distinct "
          "hierarchical dp group of the rows (us: bandwidth + latency)\n")
    print("| row | group | n | k | nodes | S | hierarchical bw+lat | model (flat ring) bw+lat |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    seen = set()
    for c in cases:
        job = c.job
        if job is None:
            continue
        p, cl = job.plan, job.cluster
        parts = cm.dp_parts(1.0, 1.0 if p.ep > 1 else 0.0, p.tp, p.cp, p.dp, p.ep, p.etp)
        for name, (_, n, stride) in zip(("dp", "edp"), parts):
            if name == "edp" and p.ep <= 1:
                continue
            n, stride = int(n), int(stride)
            if not _flat_layout(n, stride, cl):
                continue
            key = (n, stride, cl.gpus_per_node, cl.intra_node_latency, cl.inter_node_latency,
                   cl.name)
            if key in seen:
                continue
            seen.add(key)
            _, k, nodes = strided_layout(n, stride, cl.gpus_per_node)
            for S in SIZES:
                hb, hl = hier_parts("allgather", S, n, stride, cl)
                fb, fl = flat_parts("allgather", S, n, stride, cl)
                print(f"| {c.id} | {name} | {n} | {int(k)} | {int(nodes)} | {S / 2**20:g} MiB "
                      f"| {hb * 1e6:.0f} + {hl * 1e6:.0f} | {fb * 1e6:.0f} + {fl * 1e6:.0f} |")
    print()


def _patched(mode: str):
    """``comm.collective_time`` with all-gather / reduce-scatter over groups with ``k > 1``
    members on each of several nodes timed by the former hierarchical rule
    (``hierarchical``) or by the flat ring's bandwidth with the hierarchical latency
    (``latency``)."""
    def ct(kind, nbytes, n, stride, cluster, remote_scale=1.0):
        base = MODEL(kind, nbytes, n, stride, cluster, remote_scale)
        if kind not in ("allgather", "reduce_scatter"):
            return base
        hb, hl = hier_parts(kind, nbytes, n, stride, cluster)
        fb, fl = flat_parts(kind, nbytes, n, stride, cluster)
        new = (hb + hl) if mode == "hierarchical" else (fb + hl)
        return np.where(_flat_layout(n, stride, cluster), new, base)[()]
    return ct


def family(case_id: str) -> str:
    from experiments.validate_published import family as fam
    return fam(case_id)


def moved_rows(before, after, digits: int = 1) -> tuple[dict, dict]:
    """Print the table rows (row, plan, GPUs, error before, after, move) of the cases whose
    analytic error moved by more than 0.05 points between ``before`` and ``after`` (the
    ``validate_cases`` lists of the same cases), ``digits`` decimals; return each family's
    errors before and after."""
    fb, fa = defaultdict(list), defaultdict(list)
    for b, a in zip(before, after):
        if b["analytic_error_pct"] is None:
            continue
        fb[family(b["id"])].append(b["analytic_error_pct"])
        fa[family(b["id"])].append(a["analytic_error_pct"])
        d = a["analytic_error_pct"] - b["analytic_error_pct"]
        if abs(d) > 0.05:
            print(f"| {b['id']} | {b['plan']} | {b['gpus']} | {b['analytic_error_pct']:+.{digits}f} % "
                  f"| {a['analytic_error_pct']:+.{digits}f} % | {d:+.{digits}f} |")
    return fb, fa


def print_totals(fb: dict, fa: dict, digits: int = 2) -> None:
    """Print the all-runs line under a ``moved_rows`` table: runs, MAPE and mean signed error
    before -> after, ``digits`` decimals."""
    allb = [x for v in fb.values() for x in v]
    alla = [x for v in fa.values() for x in v]
    print(f"\nall: {len(allb)} runs; MAPE {mape(allb):.{digits}f} % -> {mape(alla):.{digits}f} %; "
          f"mean {np.mean(allb):+.{digits}f} % -> {np.mean(alla):+.{digits}f} %")


def validate_with(cases, collective_time) -> list[dict]:
    """``validate_cases`` (analytic) with ``comm.collective_time`` replaced by
    ``collective_time`` for the call, the model's restored after it."""
    cm.collective_time = collective_time
    try:
        return validate_cases(cases, simulate=False)
    finally:
        cm.collective_time = MODEL


def part2(cases, mode: str) -> None:
    after = validate_cases(cases, simulate=False)
    before = validate_with(cases, _patched(mode))
    print(f"## Analytic error: what-if ({mode}) -> the model (NCCL's striped flat ring)\n")
    print("| row | plan | GPUs | what-if | model | moved |")
    print("| --- | --- | --- | --- | --- | --- |")
    fb, fa = moved_rows(before, after)
    print("\n| family | runs | MAPE what-if | MAPE model | mean what-if | mean model |")
    print("| --- | --- | --- | --- | --- | --- |")
    for f in sorted(fb):
        if fb[f] != fa[f]:
            print(f"| {f} | {len(fb[f])} | {mape(fb[f]):.1f} % | {mape(fa[f]):.1f} % | "
                  f"{np.mean(fb[f]):+.1f} % | {np.mean(fa[f]):+.1f} % |")
    print_totals(fb, fa)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", default=None, help="reference JSON (default: the tiers')")
    ap.add_argument("--tiers", default="all", help="tiers of the default reference")
    ap.add_argument("--whatif", choices=("hierarchical", "latency"), default=None)
    ap.add_argument("--no-table", action="store_true", help="skip part 1")
    a = ap.parse_args(argv)
    from simulator.cli.validate import parse_tiers
    cases = load_cases(a.reference, tiers=None if a.reference else parse_tiers(a.tiers))
    if not a.no_table:
        part1(cases)
    if a.whatif:
        part2(cases, a.whatif)
    return 0


if __name__ == "__main__":
    sys.exit(main())
