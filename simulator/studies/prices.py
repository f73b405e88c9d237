"""GPU-hour prices for the what-if cost column: a sourced default table the user overrides.

Units: USD per GPU-hour, on-demand list prices (a rented GPU, host share included). Prices
move monthly and vary 2-3x between providers; the defaults are one dated public quote each,
for comparing generations, never a forecast. ``--gpu-hour-cost`` takes one price for every
GPU (``3``), the default table (``default``), or the table with overrides (``H100=2.5,
GB200=6``, catalog names or aliases).

>>> parse_prices("H100=2.5")["H100-SXM5-80GB"], parse_prices("H100=2.5")["B200-SXM-180GB"]
(2.5, 6.03)
>>> price_of(3.0, "MI355X"), price_of(DEFAULT_PRICES, "MI355X") is None
(3.0, True)
"""
from __future__ import annotations

from typing import Mapping

from strategies.errors import SpecError
from topologies.gpus import get_gpu
from topologies.limits import check_number

Prices = "float | Mapping[str, float] | None"

#: catalog GPU name -> (USD per GPU-hour, source)
PRICE_SOURCES: dict[str, tuple[float, str]] = {
    "H100-SXM5-80GB": (2.95, "AIMultiple Cloud GPU Rental Price Index, median on-demand H100 "
                             "over 37 providers, May 2026 (aimultiple.com/gpu-index)"),
    "H200-SXM-141GB": (4.54, "Spheron on-demand, 17 March 2026 (spheron.network/blog/"
                             "nvidia-h200-vs-b200-vs-gb200)"),
    "B200-SXM-180GB": (6.03, "Spheron on-demand, 17 March 2026 (spheron.network/blog/"
                             "nvidia-h200-vs-b200-vs-gb200)"),
    "GB200": (4.54, "Spheron on-demand, 17 March 2026: 9.08 USD per GB200 superchip of 2 "
                    "GPUs (spheron.network/blog/nvidia-h200-vs-b200-vs-gb200)"),
}
DEFAULT_PRICES: dict[str, float] = {k: v for k, (v, _) in PRICE_SOURCES.items()}
MAX_PRICE = 1e4


def parse_prices(text: str) -> float | dict[str, float]:
    """``--gpu-hour-cost``: a number (one price for all GPUs), ``default`` or
    ``GPU=USD,...`` (the default table with these entries replaced or added)."""
    t = str(text).strip()
    if t.lower() == "default":
        return dict(DEFAULT_PRICES)
    if "=" not in t:
        try:
            v = float(t)
        except ValueError:
            raise SpecError("--gpu-hour-cost", text, "must be USD per GPU-hour (a number > 0), "
                            "'default' or GPU=USD,... ") from None
        return check_number("--gpu-hour-cost", v, 0.0, MAX_PRICE, lo_open=True)
    out, given = dict(DEFAULT_PRICES), set()
    for item in t.split(","):
        name, _, value = item.partition("=")
        try:
            gpu = get_gpu(name.strip()).name
            v = float(value)
        except (SpecError, ValueError):
            raise SpecError("--gpu-hour-cost", item, "each entry must be GPU=USD with a catalog "
                            "GPU and a number > 0") from None
        if gpu in given:             # H100=2,H100-SXM5-80GB=3: one GPU, two prices
            raise SpecError("--gpu-hour-cost", item, f"{gpu} is given twice")
        given.add(gpu)
        out[gpu] = check_number(f"--gpu-hour-cost {gpu}", v, 0.0, MAX_PRICE, lo_open=True)
    return out


def price_of(prices: float | Mapping[str, float] | None, gpu_name: str) -> float | None:
    """USD per GPU-hour of ``gpu_name`` under ``prices`` (None: no price known)."""
    if prices is None or isinstance(prices, (int, float)):
        return prices
    return prices.get(gpu_name)
