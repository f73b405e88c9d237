"""NCCL's all-reduce Tree against the model's striped flat ring: closed forms, crossover
sizes and which reference rows would move (an analysis; the model is not changed).

What NCCL does (NVIDIA/nccl ``src/graph/tuning.cc`` ``ncclTopoTuneModel`` and
``src/enqueue.cc``, read at tag v2.19.3-1; docs/calibration.md §3.21, "Tree: analysis"):
an all-reduce is timed as ``latency + nBytes/bandwidth`` for every enabled algorithm and
protocol, and the cheapest is run. For ``TREE`` (intra-node chain, double binary tree
between nodes, pipelined):

    bandwidth = 0.5 · min(0.92·busBw, nChannels·perChMaxTreeBw)      (ratio .5, line 200)
    latency   = baseLat + 2·((n/nodes - 1)·intraLat + log2i(nodes)·interLat)

against the ring's ``bandwidth = busBw · n/(2(n-1))`` and latency ``baseLat + (nsteps -
nInterSteps)·intraLat + nInterSteps·interLat`` (``nsteps = 2(n-1)``, ``nInterSteps =
2(nodes-1)``). With paraplan's constants (the cluster's ``intra_node_latency`` /
``inter_node_latency``, NVLink and NIC rates; no protocols, no ``baseLat``) the tree alone on
its links is, with ``BW`` the ring's bandwidth term (``comm.collective_time`` minus its
latency, ``2(n-1)/n · S/busBw``) and ``e`` the tree's efficiency against the ring (1: the
same links carry ``2S`` per node, physics only; 0.92: NCCL's tuning factor):

    t_tree = BW · n/((n-1)·e) + 2((k-1)·lat_in + log2i(nodes)·lat_out)

and the crossover (ring = tree) is, with ``L_ring - L_tree`` the latency difference,

    S* = S · (L_ring - L_tree) / (BW · (n/((n-1)e) - 1))        (BW at the buffer S; linear)

Run:
    python experiments/nccl_tree.py                      # closed forms, crossovers, 16 MiB x 512
    python experiments/nccl_tree.py --whatif 0.92        # rows that move if all-reduce took
                                                         # min(ring, tree), e = 0.92
    python experiments/nccl_tree.py --whatif 1 --reference strategies/reference/data/published_2026.json
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.studies.validate import load_cases, validate_cases  # noqa: E402
from strategies.collectives.phase import call_latency  # noqa: E402
from strategies.collectives.select import strided_layout  # noqa: E402
from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.comm.links import hop_relays  # noqa: E402
from strategies.cost.comm import small_allreduce  # noqa: E402
from topologies.cluster import Cluster, cluster_preset  # noqa: E402
from topologies.routing import transfer_latency  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nccl_ring_latency import hier_parts, moved_rows, print_totals, validate_with  # noqa: E402

NCCL_TREE_EFFICIENCY = 0.92     # tuning.cc v2.19.3-1 line 182: busBw*.92 for TREE
MODEL = cm.collective_time      # the model's, kept while --whatif swaps the module's


def log2i(x) -> np.ndarray:
    """NCCL's ``log2i``: floor(log2(x)) for x >= 1."""
    return np.floor(np.log2(np.maximum(np.asarray(x, dtype=float), 1.0)))


def ring_parts(nbytes, n, stride, cl: Cluster):
    """(bandwidth seconds, latency seconds) of the model's all-reduce (``comm.collective_time``):
    the striped flat ring over ``k > 1`` members per node, a ring otherwise; the latency holds
    the call's own (``phase.call_latency``)."""
    uniform, k, nodes = strided_layout(n, stride, cl.gpus_per_node)
    total = MODEL("allreduce", nbytes, n, stride, cl)
    striped = uniform & (nodes > 1) & (k > 1)
    s = np.asarray(stride, dtype=np.int64)
    relay = hop_relays(cl, (s, -(np.maximum(np.asarray(k), 1).astype(np.int64) - 1) * s))
    lat_out = transfer_latency(cl.intra_node_latency, cl.inter_node_latency, True, relay)
    lat_striped = 2 * ((nodes - 1) * lat_out + (n - nodes) * cl.intra_node_latency)
    _, lat = cm.group_bandwidth(cl, n, stride)
    # the steps' latencies and the call's own (``phase.call_latency``, §5.233)
    lat_ring = np.where(striped, lat_striped, 2 * (n - 1) * lat) + call_latency(n)
    return total - lat_ring, lat_ring


def tree_latency(n, stride, cl: Cluster):
    """NCCL's tree latency with the cluster's latencies: ``2((k-1)·lat_in +
    log2i(nodes)·lat_out)``; the tree's hops between nodes join GPUs of one rail (no relay).
    The model's own form, ``comm.small_allreduce.tree_latency`` (docs/calibration.md §5.64)."""
    return small_allreduce.tree_latency(n, stride, cl)


def tree_time(nbytes, n, stride, cl: Cluster, eff: float):
    """Seconds of the tree all-reduce alone on its links (``eff``: its efficiency against the
    ring's bus bandwidth; 1 = physics only, 0.92 = NCCL's), its call's own latency included
    (``phase.call_latency``, as ``comm.small_allreduce_time`` prices it)."""
    bw, _ = ring_parts(nbytes, n, stride, cl)
    n = np.asarray(n, dtype=float)
    return bw * n / (np.maximum(n - 1, 1) * eff) + tree_latency(n, stride, cl) + call_latency(n)


def applies(n, stride, cl: Cluster):
    """Groups over several nodes laid out alike (the tree is all-reduce across nodes only;
    inside one node NCCL's chain has the ring's latency and less bandwidth)."""
    uniform, _, nodes = strided_layout(n, stride, cl.gpus_per_node)
    return uniform & (nodes > 1) & (np.asarray(n) > 1)


def crossover(n, stride, cl: Cluster, eff: float) -> float:
    """Buffer bytes at which ring and tree take the same time (inf: the tree always wins)."""
    S = 2.0 ** 24
    bw, lr = ring_parts(S, n, stride, cl)
    lt = tree_latency(n, stride, cl) + call_latency(n)
    extra = bw * (n / ((n - 1) * eff) - 1)
    return float(S * (lr - lt) / extra) if extra > 0 else float("inf")


def _dgx_h100() -> list[tuple[int, int, Cluster]]:
    """``(nodes, GPUs, cluster)`` of the DGX H100 clusters the closed-form tables walk."""
    return [(nodes, 8 * nodes, cluster_preset("dgx-h100", nodes)) for nodes in (2, 8, 64)]


def part1() -> None:
    print("## All-reduce over the whole of `nodes` DGX H100 nodes (k 8, stride 1), us\n")
    print("| nodes | n | S | hierarchical (before §3.21) | ring (model) | tree e=1 | tree e=0.92 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for nodes, n, cl in _dgx_h100():
        for S in (2 ** 20, 2 ** 24, 2 ** 28):
            h = sum(hier_parts("allreduce", S, n, 1, cl))
            r = sum(ring_parts(S, n, 1, cl))
            t1, t2 = tree_time(S, n, 1, cl, 1.0), tree_time(S, n, 1, cl, NCCL_TREE_EFFICIENCY)
            print(f"| {nodes} | {n} | {S / 2**20:g} MiB | {h * 1e6:.1f} | {r * 1e6:.1f} | "
                  f"{t1 * 1e6:.1f} | {t2 * 1e6:.1f} |")
    print("\n## Crossover (ring = tree), MiB\n")
    print("| nodes | n | ring latency us | tree latency us | S* e=1 | S* e=0.92 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for nodes, n, cl in _dgx_h100():
        _, lr = ring_parts(1.0, n, 1, cl)
        lt = tree_latency(n, 1, cl)
        print(f"| {nodes} | {n} | {lr * 1e6:.1f} | {lt * 1e6:.1f} | "
              f"{crossover(n, 1, cl, 1.0) / 2**20:.1f} | "
              f"{crossover(n, 1, cl, NCCL_TREE_EFFICIENCY) / 2**20:.2f} |")
    print("\n## NCCL's own model (Simple protocol tables, the model's bus bandwidth)\n")
    print("| nodes | n | busBw GB/s | tree picked for | 16 MiB ring / tree us |")
    print("| --- | --- | --- | --- | --- |")
    for nodes, n, cl in _dgx_h100():
        S = 2.0 ** 24
        bw, _ = ring_parts(S, n, 1, cl)
        bus = 2 * (n - 1) / n * S / bw
        r, t = nccl_simple(S, n, nodes, bus)
        print(f"| {nodes} | {n} | {bus / 1e9:.0f} | {nccl_tree_range(n, nodes, bus)} | "
              f"{r * 1e6:.0f} / {t * 1e6:.0f} |")
    print()


# NCCL's own Simple-protocol tables (tuning.cc v2.19.3-1), us: baseLat, hwLat NVLink / NET
NCCL_SIMPLE = {"ring": (8.4, 3.4, 14.0), "tree": (0.0, 28.0, 28.0)}
TREE_CORRECTION_SIMPLE = (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8,
                          .7, .7, .8, .9, .9)       # treeCorrectionFactor[Simple], 64 B .. 256 MB


def nccl_simple(nbytes: float, n: int, nodes: int, bus_bw: float, hopper: bool = True):
    """(ring, tree) seconds of an all-reduce in NCCL's own model, Simple protocol, with
    ``bus_bw`` bytes/s (nChannels·bw) for both: the ring's ``1.4`` plateau factor on Hopper
    past 64 B per channel and rank (taken as 16 channels), the tree's ``0.92``, ratio ``.5``
    and ``treeCorrectionFactor``. latencyInter taken as 0 (no graph latency)."""
    k = n // nodes
    b, li, lo = NCCL_SIMPLE["ring"]
    ring_lat = b + (2 * (n - 1) - 2 * (nodes - 1)) * li + 2 * (nodes - 1) * lo
    if nodes > 1 and nbytes / (16 * n) >= 64:
        ring_lat *= 1.4 if hopper else 1.9
    ring = ring_lat * 1e-6 + nbytes / (bus_bw * n / (2 * (n - 1)))
    b, li, lo = NCCL_SIMPLE["tree"]
    tree_lat = b + 2 * ((k - 1) * li + float(log2i(nodes)) * lo)
    log_size = int(log2i(max(int(nbytes) >> 6, 1)))
    corr = TREE_CORRECTION_SIMPLE[log_size] if log_size < 23 else 1.0
    tree = tree_lat * 1e-6 + nbytes / (bus_bw * NCCL_TREE_EFFICIENCY * 0.5 * corr)
    return ring, tree


def nccl_tree_range(n: int, nodes: int, bus_bw: float) -> str:
    """The buffer sizes (64 B to 64 GiB, 2^(1/8) steps) NCCL's own Simple model runs as tree."""
    sizes = 2.0 ** (np.arange(6 * 8, 36 * 8 + 1) / 8)
    tree = [S for S in sizes if (lambda rt: rt[1] < rt[0])(nccl_simple(S, n, nodes, bus_bw))]
    if not tree:
        return "never"
    return f"{min(tree) / 2**20:.3g}-{max(tree) / 2**20:.4g} MiB ({len(tree)}/{len(sizes)} sizes)"


def _patched(eff: float):
    def ct(kind, nbytes, n, stride, cluster, remote_scale=1.0):
        base = MODEL(kind, nbytes, n, stride, cluster, remote_scale)
        if kind != "allreduce":
            return base
        tree = tree_time(nbytes, n, stride, cluster, eff)
        return np.where(applies(n, stride, cluster), np.minimum(base, tree), base)[()]
    return ct


def part3(cases) -> None:
    """The rows whose gradients are all-reduced (``comm_rules.full_grad_reduce``) over a group
    spanning several nodes: one Megatron DDP bucket (``SystemConfig.dp_bucket_params``
    parameters x ``main_grad_bytes``) by ring and by tree (e = 0.92), and the whole stage's
    gradient as the estimate prices it (one collective)."""
    from strategies.framework import get_profile
    from strategies.stacks.comm_rules import full_grad_reduce
    from strategies.stacks.profile import stack_system
    print("## Rows with a full gradient all-reduce over several nodes (dense dp·cp group)\n")
    print("| row | n | k | nodes | bucket MiB | ring us | tree us | picked |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    seen = 0
    for c in cases:
        job = c.job
        if job is None:
            continue
        p, cl = job.plan, job.cluster
        if not full_grad_reduce(get_profile(job.framework), job.dtype, p.zero):
            continue
        (_, n, stride), _ = cm.dp_parts(1.0, 0.0, p.tp, p.cp, p.dp, p.ep, p.etp)
        n, stride = int(n), int(stride)
        if not applies(n, stride, cl):
            continue
        _, k, nodes = strided_layout(n, stride, cl.gpus_per_node)
        S = stack_system(job.framework, job.system).dp_bucket_params(p.dp) \
            * job.system.main_grad_bytes(job.dtype)
        r = sum(ring_parts(S, n, stride, cl))
        t = tree_time(S, n, stride, cl, NCCL_TREE_EFFICIENCY)
        seen += 1
        print(f"| {c.id} | {n} | {int(k)} | {int(nodes)} | {S / 2**20:.0f} | {r * 1e6:.0f} | "
              f"{t * 1e6:.0f} | {'tree' if t < r else 'ring'} |")
    print(f"\n{seen} rows\n")


def part2(cases, eff: float) -> None:
    before = validate_cases(cases, simulate=False)
    after = validate_with(cases, _patched(eff))
    print(f"## Analytic error: the model (ring) -> all-reduce min(ring, tree), e = {eff}\n")
    print("| row | plan | GPUs | ring | min(ring, tree) | moved |")
    print("| --- | --- | --- | --- | --- | --- |")
    fb, fa = moved_rows(before, after, digits=2)
    print_totals(fb, fa, digits=3)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", default=None, help="reference JSON (default: the tiers')")
    ap.add_argument("--tiers", default="all", help="tiers of the default reference")
    ap.add_argument("--rows", action="store_true", help="part 3: the rows' per-bucket pick")
    ap.add_argument("--whatif", type=float, default=None, help="tree efficiency e (1 or 0.92)")
    a = ap.parse_args(argv)
    if a.whatif is None and not a.rows:
        part1()
        return 0
    if a.whatif is not None and not 0 < a.whatif <= 1:
        print(f"error: --whatif={a.whatif}: the tree efficiency must be in (0, 1]",
              file=sys.stderr)
        return 2
    from simulator.cli.validate import parse_tiers
    cases = load_cases(a.reference, tiers=None if a.reference else parse_tiers(a.tiers))
    if a.rows:
        part3(cases)
    if a.whatif is not None:
        part2(cases, a.whatif)
    return 0


if __name__ == "__main__":
    sys.exit(main())
