"""The price of a scale-out network: ``topologies.inventory``'s parts times a price table.

No default prices: switch and optics prices are negotiated, move quarterly, and we found no
public, dated list price to cite, so the dollar figure appears only when the user gives the
table (``--network-prices switch=USD,optic_400=USD,...``); the part counts are always given.
Keys: ``switch`` (USD per switch of ``switch_tbps``), ``optic_<Gb/s>`` (USD per transceiver at
that port speed, e.g. ``optic_200``, ``optic_400``, ``optic_800``) and ``switch_tbps`` (the
switch's capacity per direction, Tb/s; default ``topologies.inventory.DEFAULT_SWITCH_TBPS``).

>>> p = parse_network_prices("switch=30000,optic_400=900")
>>> p["switch"], p["optic_400"], p["switch_tbps"]
(30000.0, 900.0, 51.2)
"""
from __future__ import annotations

from typing import Any, Mapping

from strategies.errors import SpecError
from topologies.cluster import Cluster
from topologies.inventory import DEFAULT_SWITCH_TBPS, network_inventory
from topologies.limits import check_number

MAX_PART_PRICE = 1e7
_OPTIC_SPEEDS = (100, 200, 400, 800, 1600)


def parse_network_prices(text: str | None) -> dict[str, float]:
    """``--network-prices``: ``KEY=VALUE,...`` with keys ``switch``, ``optic_<Gb/s>`` and
    ``switch_tbps``; ``switch_tbps`` defaults to ``DEFAULT_SWITCH_TBPS``."""
    out: dict[str, float] = {"switch_tbps": DEFAULT_SWITCH_TBPS}
    if text is None:
        return out
    keys = ("switch", "switch_tbps", *(f"optic_{s}" for s in _OPTIC_SPEEDS))
    given: set[str] = set()
    for item in str(text).split(","):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in keys:
            raise SpecError("--network-prices", item.strip(),
                            f"each entry must be KEY=VALUE with KEY one of {', '.join(keys)}")
        try:
            v = float(value)
        except ValueError:
            raise SpecError(f"--network-prices {key}", value, "must be a number > 0") from None
        if key in given:
            raise SpecError("--network-prices", item.strip(), f"{key} is given twice")
        given.add(key)
        hi = 1e3 if key == "switch_tbps" else MAX_PART_PRICE
        out[key] = check_number(f"--network-prices {key}", v, 0.0, hi, lo_open=True)
    return out


def network_cost(cluster: Cluster, prices: Mapping[str, float] | None) -> dict[str, Any]:
    """The parts of ``cluster``'s network (``topologies.inventory``) and, when ``prices``
    has the switch and the port speed's optic, their price in USD (``cost_usd``; else null
    with ``cost_note`` saying what is missing). A network too large for two tiers gives
    ``error`` and null counts."""
    prices = dict(prices or {"switch_tbps": DEFAULT_SWITCH_TBPS})
    try:
        inv = network_inventory(cluster, prices.get("switch_tbps", DEFAULT_SWITCH_TBPS))
    except SpecError as e:
        return {"kind": network_label(cluster), "error": str(e), "cost_usd": None}
    out: dict[str, Any] = {"kind": network_label(cluster), **inv.to_dict()}
    optic = f"optic_{inv.port_gbps:g}"
    missing = [k for k in ("switch", optic) if k not in prices]
    if missing:
        out["cost_usd"], out["cost_note"] = None, f"no price for {', '.join(missing)}"
    else:
        out["cost_usd"] = inv.switches * prices["switch"] + inv.transceivers * prices[optic]
    return out


def network_label(cluster: Cluster) -> str:
    """``rail_fat_tree``, ``rail_only``, … or ``multi_plane:2 (rail_fat_tree)``."""
    t = cluster.inter_node_topology
    return f"multi_plane:{cluster.planes} ({t})" if cluster.planes > 1 else t
