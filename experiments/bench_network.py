"""Micro-benchmark of the flow network: how many flows per second of wall time.

8 nodes x 8 GPUs; GPUs in a node share an NVSwitch (300 GB/s per direction per
GPU), and each GPU has its own 50 GB/s NIC to one spine switch. Workloads:
concurrent ring all-reduces (one tensor-parallel ring per node plus one
data-parallel ring per local rank across nodes), a 64-rank ring contending with
the data-parallel rings on the NICs, and a 64-rank all-to-all.
Prints figures; asserts nothing.

    python experiments/bench_network.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import networkx as nx
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from simulator.network.stepwise_oracle import start_collective  # noqa: E402
from simulator.network.flows import FlowNetwork  # noqa: E402

NODES, GPUS = 8, 8


def cluster(nvlink: float = 300e9, nic: float = 50e9) -> nx.DiGraph:
    """GPU ("gpu", n, j) -- ("nvsw", n) at nvlink; GPU -- ("nic", n, j) -- ("spine",)."""
    g = nx.DiGraph()

    def duplex(a, b, bandwidth, latency):
        g.add_edge(a, b, bandwidth=bandwidth, latency=latency)
        g.add_edge(b, a, bandwidth=bandwidth, latency=latency)
    for n in range(NODES):
        for j in range(GPUS):
            duplex(("gpu", n, j), ("nvsw", n), nvlink, 0.5e-6)
            duplex(("gpu", n, j), ("nic", n, j), nic, 0.5e-6)
            duplex(("nic", n, j), ("spine",), nic, 1e-6)
    return g


def rings(net: FlowNetwork, rounds: int) -> None:
    """``rounds`` x (8 TP all-reduces of 64 MB || 8 DP all-reduces of 256 MB)."""
    env = net.env

    def driver():
        for _ in range(rounds):
            tp = [[("gpu", n, j) for j in range(GPUS)] for n in range(NODES)]
            dp = [[("gpu", n, j) for n in range(NODES)] for j in range(GPUS)]
            procs = [start_collective(net, "ring_allreduce", r, 64e6) for r in tp]
            procs += [start_collective(net, "ring_allreduce", r, 256e6) for r in dp]
            yield env.all_of(procs)
    env.process(driver())


def contended(net: FlowNetwork, rounds: int) -> None:
    """``rounds`` x (one 64-rank ring all-reduce of 1 GB || 8 DP all-reduces of 256 MB),
    both crossing the same NICs."""
    env = net.env
    world = [("gpu", n, j) for n in range(NODES) for j in range(GPUS)]
    dp = [[("gpu", n, j) for n in range(NODES)] for j in range(GPUS)]

    def driver():
        for _ in range(rounds):
            procs = [start_collective(net, "ring_allreduce", world, 1e9)]
            procs += [start_collective(net, "ring_allreduce", r, 256e6) for r in dp]
            yield env.all_of(procs)
    env.process(driver())


def all_to_all(net: FlowNetwork, rounds: int) -> None:
    """``rounds`` x a 64-rank all-to-all of 64 MB per rank (4032 concurrent flows)."""
    ranks = [("gpu", n, j) for n in range(NODES) for j in range(GPUS)]

    def driver():
        for _ in range(rounds):
            yield start_collective(net, "all_to_all", ranks, 64e6)
    net.env.process(driver())


def measure(name: str, workload, rounds: int) -> None:
    env = simpy.Environment()
    net = FlowNetwork(env, cluster())
    workload(net, rounds)
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    flows, recomputes = net.flows_completed, net.recomputations
    print(f"{name:<28} flows={flows:>7}  recomputes={recomputes:>6}  "
          f"sim={env.now * 1e3:9.3f} ms  wall={wall:7.3f} s  "
          f"flows/s={flows / wall:10.0f}  recomputes/s={recomputes / wall:8.0f}")


if __name__ == "__main__":
    measure("concurrent ring all-reduces", rings, 10)
    measure("64-rank ring vs DP rings", contended, 2)
    measure("all-to-all 64 ranks", all_to_all, 10)
