"""What-if variants: one base question (model, cluster, batch) changed along named axes.

Pure functions; ``cmd_whatif`` runs a plan search per variant. Keys (``--vary KEY=V1,V2``):

| key | changes | values |
| --- | --- | --- |
| ``cluster`` | the preset, keeping the GPU count (nodes, or trays of a rack-scale preset, follow) and the faults (``--straggler``, ``--degrade``: one the preset lacks is refused) | ``dgx-h100``, ``gb200-nvl72``, … |
| ``gpu`` | the GPU chip only (network unchanged) | a catalog name (``H100``, ``H200``) |
| ``nodes`` | the node count | integers |
| ``inter_node_gbps`` | one NIC's bandwidth, Gb/s per direction (every node group's) | numbers > 0 |
| ``intra_node_GBps`` | one GPU's NVLink/NVSwitch bandwidth, GB/s per direction (every node group's) | numbers > 0 |
| ``oversubscription`` | leaf-switch downlink:uplink ratio | numbers >= 1 |
| ``nics_per_node`` | NICs per node | integers |
| ``straggler`` | GPU 0 computes this many times slower (``topologies.faults``) | numbers >= 1 |
| ``network`` | the scale-out network (docs/clusters.md) | ``rail-fat-tree``, ``fat-tree``, ``rail-only``, ``multi-plane`` (2 planes of a rail fat tree), ``multi-plane:N`` |
| ``failed_planes`` | planes ``0..N-1`` of a multi-plane network failed (``plane:P`` degraded by ``MAX_FACTOR``); a plane already degraded (``--degrade plane:P``) among them is refused, one above them stays degraded | integers >= 0 (a variant with no plane left has no feasible plan) |
| ``global_batch`` | sequences per step | integers |
| ``seq_len`` | tokens per sequence | integers |

Within one variant the node preset is swapped first (``cluster``), so that the other keys
refine it (``--vary cluster=dgx-a100,dgx-h100 --vary inter_node_gbps=200`` gives both
presets 200 Gb/s NICs).

>>> from strategies.presets import model_preset
>>> from topologies.cluster import cluster_preset
>>> vs = variants(model_preset("llama3-8b"), cluster_preset("dgx-h100", 2), 64,
...               parse_vary(["inter_node_gbps=100,400", "global_batch=32"]))
>>> [(v.label, v.cluster.inter_node_bandwidth, v.global_batch) for v in vs]
[('inter_node_gbps=100, global_batch=32', 12500000000.0, 32), \
('inter_node_gbps=400, global_batch=32', 50000000000.0, 32)]
>>> dominated_pairs(vs)
[(0, 1)]
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any, Sequence

from strategies.errors import SpecError
from strategies.model import ModelSpec
from topologies.cluster import Cluster, cluster_preset, parse_cluster_arg
from topologies.cluster.presets import cluster_for_gpus
from topologies.faults import MAX_FACTOR, Faults
from topologies.planes import MAX_PLANES, check_planes
from topologies.gpus import get_gpu
from topologies.limits import (MAX_BANDWIDTH_BPS, MAX_GBS, MAX_GPUS_PER_NODE, MAX_NODES,
                               MAX_OVERSUBSCRIPTION, MAX_SEQ, check_int, check_number,
                               parse_int_text)

CLUSTER_KEYS = ("cluster", "gpu", "nodes", "inter_node_gbps", "intra_node_GBps",
                "oversubscription", "nics_per_node", "straggler", "network", "failed_planes")
#: ``--vary network=`` names -> (inter_node_topology, planes)
NETWORKS = {"rail-fat-tree": ("rail_fat_tree", 1), "fat-tree": ("fat_tree", 1),
            "rail-only": ("rail_only", 1), "multi-plane": ("rail_fat_tree", 2)}
#: the GPU that ``--vary straggler=...`` slows down
STRAGGLER_GPU = 0
JOB_KEYS = ("global_batch", "seq_len")
KEYS = CLUSTER_KEYS + JOB_KEYS
BANDWIDTH_KEYS = ("inter_node_gbps", "intra_node_GBps")
#: integer keys -> largest value (the sanity limits of topologies.limits)
_INT_KEYS = {"failed_planes": MAX_PLANES, "nodes": MAX_NODES, "nics_per_node": MAX_GPUS_PER_NODE, "global_batch": MAX_GBS,
             "seq_len": MAX_SEQ}
#: number keys -> (smallest, lower bound open, largest), in the key's (file) units
_NUM_KEYS = {"inter_node_gbps": (0.0, True, MAX_BANDWIDTH_BPS * 8 / 1e9),
             "intra_node_GBps": (0.0, True, MAX_BANDWIDTH_BPS / 1e9),
             "oversubscription": (1.0, False, MAX_OVERSUBSCRIPTION),
             "straggler": (1.0, False, MAX_FACTOR)}
#: the most variants one command runs (each is a plan search)
MAX_VARIANTS = 256


@dataclass(frozen=True)
class Variant:
    """One point of the what-if grid: the changed values, and what they make."""

    values: tuple[tuple[str, Any], ...]
    model: ModelSpec
    cluster: Cluster
    global_batch: int
    error: str | None = None     # why this variant cannot run at all (no plan is feasible)

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in self.values) or "base"

    def bandwidths(self) -> tuple[float, ...]:
        """The varied bandwidths, in the order the axes were given."""
        return tuple(float(v) for k, v in self.values if k in BANDWIDTH_KEYS)

    def others(self) -> tuple[tuple[str, Any], ...]:
        """Everything varied except the bandwidths."""
        return tuple((k, v) for k, v in self.values if k not in BANDWIDTH_KEYS)


def parse_value(key: str, text: str) -> Any:
    """One value of ``--vary KEY=...``, checked against the key's rule."""
    field = f"--vary {key}"
    try:
        if key == "cluster":
            return _cluster_value(text)
        if key == "gpu":
            return get_gpu(text).name     # the catalog name (H100 -> H100-SXM5-80GB)
        if key == "network":
            return _network_value(text)
        if key in _INT_KEYS:
            lo = 0 if key == "failed_planes" else 1
            return check_int(field, parse_int_text(field, text), lo, _INT_KEYS[key])
        lo, lo_open, hi = _NUM_KEYS[key]
        try:
            v = float(text)
        except ValueError:
            raise SpecError(field, text, f"must be a number {'>' if lo_open else '>='} "
                                         f"{lo:g}") from None
        check_number(field, v, lo, hi, lo_open=lo_open)
        return int(v) if v.is_integer() and abs(v) < 2 ** 53 else v
    except SpecError as e:
        raise SpecError(field, text, e.rule) from None


def _cluster_value(text: str) -> str:
    """A ``--vary cluster=`` value: a preset (the base's GPUs, a rack-scale one over the
    fewest racks), or ``PRESET:N``/``PRESET:NxT`` (racks of ``T`` trays), whose GPU count
    ``apply_cluster`` checks against the base's. Unknown presets, mixed clusters and files
    fail here, before any search."""
    t = text.strip().lower()
    if "+" in t or t.endswith((".yaml", ".yml", ".json")):
        raise SpecError("--vary cluster", text, "must be a preset, PRESET:N or PRESET:NxT "
                        "(T trays per rack, a rack-scale preset), not a mixed cluster or a file")
    if ":" in t:
        parse_cluster_arg(t)
    else:
        cluster_preset(t)
    return t


def _network_value(text: str) -> str:
    t = text.strip().lower()
    name, colon, n = t.partition(":")
    if t in NETWORKS or (name == "multi-plane" and colon):
        if colon:
            try:
                k = check_int("planes", parse_int_text("planes", n), 2, MAX_PLANES)
            except SpecError:
                raise SpecError("--vary network", text, f"multi-plane:N needs N planes, an "
                                f"integer in 2..{MAX_PLANES}") from None
            return f"multi-plane:{k}"
        return "multi-plane:2" if t == "multi-plane" else t   # one name per network
    raise SpecError("--vary network", text, f"must be one of {', '.join(NETWORKS)} or "
                                            "multi-plane:N (N >= 2 planes)")


def network_of(value: str) -> tuple[str, int]:
    """``(inter_node_topology, planes)`` of a ``--vary network=`` value."""
    name, _, n = value.partition(":")
    topology, planes = NETWORKS[name]
    return topology, int(n) if n else planes


class Unrunnable(SpecError):
    """A variant that is well formed but cannot train at all (e.g. every plane failed)."""


def parse_vary(items: Sequence[str]) -> list[tuple[str, list[Any]]]:
    """``["inter_node_gbps=100,200", "gpu=H100,H200"]`` → ``[(key, values), …]``."""
    out: list[tuple[str, list[Any]]] = []
    for item in items:
        key, eq, values = str(item).partition("=")
        key = key.strip()
        if not eq:
            raise SpecError("--vary", item, "must be KEY=V1,V2,...")
        if key not in KEYS:
            raise SpecError("--vary", key, f"unknown key; one of {', '.join(KEYS)}")
        if any(k == key for k, _ in out):
            raise SpecError("--vary", key, "key given twice (give all its values in one "
                                           "--vary KEY=V1,V2,...)")
        texts = [v.strip() for v in values.split(",")]
        if not any(texts) or "" in texts:
            raise SpecError(f"--vary {key}", values, "must be a comma-separated list of "
                                                     "values, none empty")
        vals = [parse_value(key, t) for t in texts]
        if len(set(vals)) != len(vals):
            raise SpecError(f"--vary {key}", values, "a value is given twice")
        out.append((key, vals))
    if not out:
        raise SpecError("--vary", None, "give at least one --vary KEY=V1,V2,...")
    n = 1
    for _, vals in out:
        n *= len(vals)
    if n > MAX_VARIANTS:
        raise SpecError("--vary", n, f"the variants (the product of the value counts) must be "
                                     f"<= {MAX_VARIANTS}")
    return out


def apply_cluster(cluster: Cluster, key: str, value: Any) -> Cluster:
    """``cluster`` with one property changed (``value`` in the key's file units)."""
    try:
        if key == "cluster":   # the preset's nodes, with the faults given (--straggler, ...)
            if ":" not in str(value):
                return cluster_for_gpus(str(value), cluster.num_gpus).with_faults(
                    cluster.faults)
            c = parse_cluster_arg(str(value))
            if c.num_gpus != cluster.num_gpus:
                raise SpecError("--vary cluster", value, f"holds {c.num_gpus} GPUs where the "
                                f"base cluster has {cluster.num_gpus}: the variants keep the "
                                "GPU count (give the preset alone, or a count that holds "
                                f"{cluster.num_gpus} GPUs)")
            return c.with_faults(cluster.faults)
        if key == "nodes":
            return cluster.with_nodes(int(value))
        if key == "gpu":
            if len(cluster.groups) != 1:
                raise SpecError("gpu", value, "cannot change the GPU of a cluster with "
                                              "several GPU types")
            return replace(cluster, groups=(replace(cluster.groups[0], gpu=get_gpu(value)),))
        if key == "inter_node_gbps":   # every NIC: node groups' own rates give way to it
            return replace(cluster, inter_node_bandwidth=float(value) * 1e9 / 8, groups=tuple(
                replace(g, inter_node_bandwidth=None) for g in cluster.groups))
        if key == "intra_node_GBps":   # every GPU's NVLink, in every node group
            return replace(cluster, intra_node_bandwidth=float(value) * 1e9, groups=tuple(
                replace(g, intra_node_bandwidth=None) for g in cluster.groups))
        if key == "oversubscription":
            return replace(cluster, oversubscription=float(value))
        if key == "nics_per_node":
            return replace(cluster, nics_per_node=int(value))
        if key == "straggler":
            if cluster.faults.straggler_factor(STRAGGLER_GPU) != 1.0:
                raise SpecError("--vary straggler", value, f"GPU {STRAGGLER_GPU} is already a "
                                f"straggler ({cluster.faults.straggler_factor(STRAGGLER_GPU):g}"
                                ", --straggler or the cluster file's faults:): vary it or give "
                                "it, not both")
            return cluster.with_faults(Faults(((STRAGGLER_GPU, float(value)),)))
        if key == "network":
            topology, planes = network_of(str(value))
            for bw in sorted({cluster.inter_node_bandwidth} | {
                    g.inter_node_bandwidth for g in cluster.groups} - {None}):
                check_planes(planes, bw * 8 / 1e9)   # every NIC splits into the planes
            return replace(cluster, inter_node_topology=topology, planes=planes)
        if key == "failed_planes":
            k = int(value)
            if k == 0:
                return cluster
            if k >= cluster.planes:
                raise Unrunnable("failed_planes", k, f"the network has {cluster.planes} "
                                 f"plane(s): with {k} failed no path is left between NVLink "
                                 "domains")
            given = sorted(spec.ends[0] for spec, _ in cluster.faults.links()
                           if spec.kind == "plane" and spec.ends[0] < k)
            if given:   # the variant's failure would replace the degrade given
                raise SpecError("--vary failed_planes", value, f"fails planes 0..{k - 1} but "
                                f"plane:{given[0]} is already degraded (--degrade or the "
                                "cluster file's faults:): vary the failed planes or degrade "
                                "them, not both (a degraded plane above them composes)")
            return cluster.with_faults(Faults((), tuple(sorted(
                (f"plane:{p}", MAX_FACTOR) for p in range(k)))))
    except Unrunnable:
        raise
    except SpecError as e:
        raise SpecError(f"--vary {key}", value, f"{e.field}: {e.rule}"
                        if e.field not in (key, f"--vary {key}") else e.rule) from None
    raise SpecError("--vary", key, f"not a cluster key; one of {', '.join(CLUSTER_KEYS)}")


def variants(model: ModelSpec, cluster: Cluster, global_batch: int,
             vary: list[tuple[str, list[Any]]]) -> list[Variant]:
    """The cartesian product of the varied values, in the order given (the first axis
    varies slowest)."""
    keys = [k for k, _ in vary]
    out = []
    first = {"cluster": 0, "network": 1}
    for combo in itertools.product(*(vals for _, vals in vary)):
        m, cl, gbs, error = model, cluster, global_batch, None
        # Swap the node preset first and the network next, so that later keys refine them
        # (stable sort).
        for k, v in sorted(zip(keys, combo), key=lambda kv: first.get(kv[0], 2)):
            if k == "global_batch":
                gbs = int(v)
            elif k == "seq_len":
                m = m.with_seq_length(int(v))
            else:
                try:
                    cl = apply_cluster(cl, k, v)
                except Unrunnable as e:
                    error = str(e)
        out.append(Variant(tuple(zip(keys, combo)), m, cl, gbs, error))
    return out


def dominates(low: Variant, high: Variant) -> bool:
    """``high`` differs from ``low`` only by more (or equal) bandwidth, and is not ``low``."""
    a, b = low.bandwidths(), high.bandwidths()
    return (bool(a) and low.others() == high.others() and a != b
            and all(x <= y for x, y in zip(a, b)))


def dominated_pairs(vs: Sequence[Variant]) -> list[tuple[int, int]]:
    """``(i, j)`` for every pair where variant ``j`` only adds bandwidth to variant ``i``:
    ``j``'s best step time must be no longer than ``i``'s."""
    return [(i, j) for i, j in itertools.permutations(range(len(vs)), 2)
            if dominates(vs[i], vs[j])]


def search_order(vs: Sequence[Variant]) -> list[int]:
    """An order in which every variant comes after those it only adds bandwidth to (the
    bandwidths sorted lexicographically extend the componentwise order)."""
    return sorted(range(len(vs)), key=lambda i: vs[i].bandwidths())


def tokens_per_step(v: Variant) -> int:
    return v.global_batch * v.model.seq_length


def cost_per_million_tokens(gpu_hour_cost: float, num_gpus: int, step_time_s: float,
                            tokens_per_step: int) -> float:
    """Dollars (or any currency) per 10^6 training tokens at ``gpu_hour_cost`` per GPU-hour:
    ``gpu_hour_cost · num_gpus · step_time_s / 3600 / tokens_per_step · 10^6``.

    >>> cost_per_million_tokens(2.0, 8, 1.8, 1_000_000)
    0.008
    """
    return gpu_hour_cost * num_gpus * step_time_s / 3600.0 / tokens_per_step * 1e6


def energy_per_million_tokens(power_w: float, num_gpus: int, step_time_s: float,
                              tokens_per_step: int) -> float:
    """kWh per 10^6 training tokens with every GPU drawing ``power_w`` watts for the whole
    step: ``power_w · num_gpus · step_time_s / 3.6e6 / tokens_per_step · 10^6``.

    >>> energy_per_million_tokens(1000.0, 8, 1.8, 1_000_000)
    0.004
    """
    return power_w * num_gpus * step_time_s / 3.6e6 / tokens_per_step * 1e6
