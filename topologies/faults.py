"""Stragglers and degraded links: a cluster's known faults (docs/faults.md).

A **straggler** ``GPU=FACTOR`` is a GPU whose compute runs ``FACTOR`` times slower (thermal
throttling, a bad HBM stack, a noisy neighbour); a **degraded link** ``LINK=FACTOR`` runs at
``1/FACTOR`` of its bandwidth (a link trained down, a flapping cable, a NIC at half rate).
Factors are >= 1 (1 is healthy; a faster-than-nominal part is not a fault) and at most
``MAX_FACTOR``. ``LINK`` is one of:

=======================  ==============================================================
``nic:G``                GPU ``G``'s link to its NIC (both directions)
``node:N``               every link with an end in node ``N``: its GPUs' NVLink/NVSwitch
                         links, their NIC links and the NICs' links into the fabric
``plane:P``              every link of plane ``P`` of a multi-plane network (its NIC ports,
                         leaves and spines; ``topologies.planes``); a failed plane is
                         ``plane:P=1e6`` (``MAX_FACTOR``)
``A-B``                  the physical link between graph nodes ``A`` and ``B``, each one of
                         ``G`` or ``gpu:G``, ``nvswitch:N``, ``nic:N.I``, ``leaf:R.J``,
                         ``spine:R.K`` (``leaf:R.J.P``, ``spine:R.K.P`` on plane ``P`` of a multi-plane network; the
                         names of ``topologies.graph``)
=======================  ==============================================================

The same faults come from ``--straggler``/``--degrade`` (repeatable) or a ``faults:`` section
of a cluster file::

    faults:
      stragglers: {3: 1.5}            # GPU 3 computes 1.5x slower
      degrade: {"nic:9": 4, "node:1": 2}

A link named by several entries runs at ``1/max(factors)``.

>>> f = Faults.from_texts(["3=1.5"], ["nic:9=4"])
>>> f.straggler_factor(3), f.straggler_factor(4), f.to_dict()
(1.5, 1.0, {'stragglers': {3: 1.5}, 'degrade': {'nic:9': 4.0}})
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from topologies.errors import SpecError
from topologies.planes import striped_factor
from topologies.limits import check_int, check_number, parse_int_text

MAX_FACTOR = 1e6
_NODE_RE = re.compile(r"(?:(gpu):)?([0-9]+)|(nvswitch):([0-9]+)|(nic|leaf|spine):([0-9]+)\.([0-9]+)"
                      r"(?:\.([0-9]+))?", re.ASCII)
MAX_FAULTS = 4096


def check_factor(field: str, value: Any) -> float:
    """A fault factor: a finite number in ``[1, MAX_FACTOR]``."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise SpecError(field, value, "must be a number >= 1 (the slowdown factor)") from None
    f = check_number(field, value, 0.0, MAX_FACTOR, lo_open=True)
    if f < 1.0:
        raise SpecError(field, value, "must be >= 1: a fault slows down (1 = healthy)")
    return f


def parse_link_node(text: str) -> Any:
    """A graph node name (``7``, ``gpu:7``, ``nvswitch:0``, ``nic:0.3``, ``leaf:2.0``,
    ``spine:2.0``) as the node of ``topologies.graph``."""
    m = _NODE_RE.fullmatch(text.strip())
    if not m:
        raise SpecError("--degrade", text, "a link end must be G, gpu:G, nvswitch:N, nic:N.I, "
                        "leaf:R.J or spine:R.K")
    if m.group(2) is not None:
        return int(m.group(2))
    if m.group(3):
        return ("nvswitch", int(m.group(4)))
    if m.group(8) is not None:
        if m.group(5) == "nic":
            raise SpecError("--degrade", text, "a NIC has no plane (nic:N.I); name the plane "
                            "on its leaf (leaf:R.J.P) or the whole plane (plane:P)")
        return (m.group(5), int(m.group(6)), int(m.group(7)), int(m.group(8)))
    return (m.group(5), int(m.group(6)), int(m.group(7)))


@dataclass(frozen=True)
class LinkSpec:
    """One degraded-link entry: ``kind`` ``nic``, ``node`` or ``link`` (two graph nodes)."""

    text: str
    kind: str
    ends: tuple


def _end_text(end: Any) -> str:
    """The canonical name of a graph node ``parse_link_node`` returns."""
    if isinstance(end, int):
        return str(end)
    return f"{end[0]}:" + ".".join(str(x) for x in end[1:])


def parse_link(text: Any) -> LinkSpec:
    """``nic:G``, ``node:N`` or ``A-B`` (see the module docstring). ``text`` is canonical:
    integers as plain digits, ``gpu:G`` as ``G`` and a link's ends in sorted order (every
    link is duplex), so that one link has one name (``nic:00`` is ``nic:0``, ``nvswitch:0-3``
    is ``3-nvswitch:0``) and an entry replaces or repeats another whatever its spelling."""
    if not isinstance(text, (str, int)) or isinstance(text, bool):
        raise SpecError("--degrade", text, "a link must be nic:G, node:N or A-B")
    s = str(text).strip()
    head, colon, rest = s.partition(":")
    if "-" not in s and colon and head in ("nic", "node", "plane") and "." not in rest:
        n = parse_int_text(f"--degrade {head}", rest)
        return LinkSpec(f"{head}:{n}", head, (n,))
    a, dash, b = s.partition("-")
    if not dash:
        raise SpecError("--degrade", s, "a link must be nic:G, node:N or A-B "
                                        "(e.g. 3-nvswitch:0, nic:1.3-leaf:3.0)")
    ends = tuple(sorted((parse_link_node(a), parse_link_node(b)), key=_end_text))
    return LinkSpec("-".join(_end_text(e) for e in ends), "link", ends)


def _split(field: str, text: Any) -> tuple[str, str]:
    key, eq, val = str(text).rpartition("=")
    if not eq or not key.strip() or not val.strip():
        raise SpecError(field, text, "must be KEY=FACTOR (e.g. 3=1.5, nic:9=2)")
    return key.strip(), val.strip()


@dataclass(frozen=True)
class Faults:
    """Stragglers ``((gpu, factor), ...)`` and degraded links ``((link text, factor), ...)``,
    each sorted and without repeats. Empty is a healthy cluster."""

    stragglers: tuple[tuple[int, float], ...] = ()
    degraded: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if len(self.stragglers) + len(self.degraded) > MAX_FAULTS:
            raise SpecError("faults", len(self.stragglers) + len(self.degraded),
                            f"at most {MAX_FAULTS} entries")
        gpus = [g for g, _ in self.stragglers]
        if len(set(gpus)) != len(gpus):
            raise SpecError("straggler", gpus, "a GPU is given twice")
        for g, f in self.stragglers:
            check_int("straggler GPU", g, 0)
            check_factor(f"straggler {g}", f)
        links = [t for t, _ in self.degraded]
        if len(set(links)) != len(links):
            raise SpecError("degrade", links, "a link is given twice")
        for t, f in self.degraded:
            parse_link(t)
            check_factor(f"degrade {t}", f)

    def __bool__(self) -> bool:
        """Any fault at all (entries of factor 1 are healthy)."""
        return any(f > 1.0 for _, f in self.stragglers + self.degraded)

    @staticmethod
    def from_texts(stragglers: Sequence[str] = (), degrade: Sequence[str] = ()) -> "Faults":
        """From ``GPU=FACTOR`` and ``LINK=FACTOR`` texts (the CLI flags)."""
        s = {}
        for t in stragglers or ():
            k, v = _split("--straggler", t)
            g = parse_int_text("--straggler GPU", k)
            if g in s:
                raise SpecError("--straggler", t, f"GPU {g} is given twice")
            s[g] = check_factor(f"--straggler {k}", v)
        d = {}
        for t in degrade or ():
            k, v = _split("--degrade", t)
            spec = parse_link(k)
            if spec.text in d:
                raise SpecError("--degrade", t, f"link {spec.text} is given twice")
            d[spec.text] = check_factor(f"--degrade {k}", v)
        return Faults(tuple(sorted((k, f) for k, f in s.items() if f > 1.0)),
                      tuple(sorted((k, f) for k, f in d.items() if f > 1.0)))

    def merged(self, other: "Faults") -> "Faults":
        """Both sets of faults; an entry in ``other`` replaces the same GPU or link here."""
        s = dict(self.stragglers) | dict(other.stragglers)
        d = dict(self.degraded) | dict(other.degraded)
        return Faults(tuple(sorted((k, f) for k, f in s.items() if f > 1.0)),
                      tuple(sorted((k, f) for k, f in d.items() if f > 1.0)))

    def straggler_factor(self, gpu: int) -> float:
        return dict(self.stragglers).get(gpu, 1.0)

    def links(self) -> list[tuple[LinkSpec, float]]:
        return [(parse_link(t), f) for t, f in self.degraded]

    def bandwidth_factors(self, planes: int = 1) -> tuple[float, float]:
        """The largest slowdown on an intra-node link (GPU–NVSwitch, GPU–GPU) and on a
        GPU–NIC or NIC–fabric link; ``node:N`` counts for both, leaf–spine for neither. Whole
        planes (``plane:P`` of ``planes``) slow the striped NIC down together
        (``topologies.planes.striped_factor``)."""
        intra = inter = 1.0
        by_plane = {spec.ends[0]: f for spec, f in self.links() if spec.kind == "plane"}
        if by_plane:
            inter = striped_factor(planes, by_plane)
        for spec, f in self.links():
            if spec.kind == "plane":
                continue
            if spec.kind == "node":
                intra, inter = max(intra, f), max(inter, f)
            elif spec.kind == "nic":
                inter = max(inter, f)
            else:
                kinds = {e if isinstance(e, int) else e[0] for e in spec.ends}
                kinds = {"gpu" if isinstance(k, int) else k for k in kinds}
                if "nvswitch" in kinds or kinds == {"gpu"}:
                    intra = max(intra, f)
                elif "nic" in kinds:
                    inter = max(inter, f)
        return intra, inter

    def to_dict(self) -> dict[str, Any]:
        """The cluster file's ``faults:`` form."""
        out: dict[str, Any] = {}
        if self.stragglers:
            out["stragglers"] = {g: f for g, f in self.stragglers}
        if self.degraded:
            out["degrade"] = {t: f for t, f in self.degraded}
        return out

    def check_against(self, num_gpus: int, num_nodes: int, gpus_per_node: int,
                      planes: int = 1) -> None:
        """Every GPU and node named exists (``SpecError`` naming the entry otherwise); link
        ends are checked against the graph when it is built (``topologies.graph``)."""
        for g, _ in self.stragglers:
            if g >= num_gpus:
                raise SpecError("straggler", g, f"no such GPU: the cluster has GPUs "
                                                f"0..{num_gpus - 1}")
        for spec, _ in self.links():
            if spec.kind == "nic":
                if spec.ends[0] >= num_gpus:
                    raise SpecError("degrade", spec.text, f"no such GPU: the cluster has GPUs "
                                                          f"0..{num_gpus - 1}")
                if num_nodes == 1:
                    raise SpecError("degrade", spec.text, "a single-node cluster has no NICs")
            elif spec.kind == "plane" and (planes == 1 or spec.ends[0] >= planes):
                raise SpecError("degrade", spec.text,
                                "needs a multi-plane network (network: {kind: multi_plane})"
                                if planes == 1 else f"no such plane: the network has planes "
                                                    f"0..{planes - 1}")
            elif spec.kind == "plane" and num_nodes == 1:
                raise SpecError("degrade", spec.text, "a single-node cluster has no network")
            elif spec.kind == "node" and spec.ends[0] >= num_nodes:
                raise SpecError("degrade", spec.text, f"no such node: the cluster has nodes "
                                                      f"0..{num_nodes - 1}")
            elif spec.kind == "link":
                for end in spec.ends:
                    if isinstance(end, int) and end >= num_gpus:
                        raise SpecError("degrade", spec.text, f"no such GPU: the cluster has "
                                                              f"GPUs 0..{num_gpus - 1}")


def faults_from_mapping(d: Any) -> Faults:
    """The ``faults:`` section of a cluster file: ``stragglers`` and ``degrade``, each a
    mapping ``{key: factor}`` or a list of ``"KEY=FACTOR"`` texts."""
    if d is None:
        return Faults()
    if not isinstance(d, Mapping):
        raise SpecError("faults", d, "must be a mapping with keys stragglers and degrade")
    unknown = sorted(str(k) for k in set(d) - {"stragglers", "degrade"})
    if unknown:
        raise SpecError("faults", unknown[0], "unknown key; allowed: degrade, stragglers")

    def texts(key: str) -> list[str]:
        v = d.get(key) or []
        if isinstance(v, Mapping):
            return [f"{k}={f}" for k, f in v.items()]
        if isinstance(v, list):
            return [str(x) for x in v]
        raise SpecError(f"faults.{key}", v, "must be a mapping {KEY: FACTOR} or a list of "
                                            "KEY=FACTOR")
    try:
        return Faults.from_texts(texts("stragglers"), texts("degrade"))
    except SpecError as e:
        raise SpecError(f"faults: {e.field}", e.value, e.rule) from None
