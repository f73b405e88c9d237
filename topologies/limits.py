"""Sane bounds on every number a user can give, and the checks that enforce them.

Each bound is far beyond any machine or model built so far (so no real input is refused)
and far below where arithmetic goes wrong (float overflow, a schedule of 10^12 steps, a
graph of 10^17 GPUs). Refusing early turns "the tool hung" or "step_time_s: null" into a
one-line error that names the field, the value and the rule. docs/robustness.md lists them.

>>> check_int("tp", 8, hi=MAX_GPUS)
8
>>> check_int("tp", True)
Traceback (most recent call last):
...
topologies.errors.SpecError: tp=True: must be an integer >= 1
>>> check_number("latency_us", float("nan"), lo=0.0)
Traceback (most recent call last):
...
topologies.errors.SpecError: latency_us=nan: must be a finite number >= 0.0
"""
from __future__ import annotations

import math
import re
from typing import Any, Iterable, Sequence

from topologies.errors import SpecError

# Cluster
MAX_GPUS = 1 << 20                 # 1,048,576 GPUs in one cluster
MAX_GPUS_PER_NODE = 1024
MAX_NODES = MAX_GPUS
MAX_BANDWIDTH_BPS = 1e15           # 1 PB/s per link (bytes/s)
# the floors: far below any link or chip (a 1 kB/s link is a 1980s modem) and far above the
# rates whose reciprocals overflow a float (5e-324 Gb/s made a step of -inf seconds)
MIN_BANDWIDTH_BPS = 1e3            # 1 kB/s per link (bytes/s)
MIN_TFLOPS = 1e-6                  # 1 MFLOP/s per GPU
MIN_HBM_TBPS = 1e-9                # 1 kB/s of memory bandwidth
MIN_FRACTION = 1e-6                # an efficiency, a fraction of a peak
MAX_LATENCY_S = 1.0
MAX_OVERSUBSCRIPTION = 1024.0
MAX_TFLOPS = 1e6                   # 1 EFLOP/s per GPU
MAX_HBM_GIB = 1 << 20              # 1 PiB per GPU
MAX_HBM_TBPS = 1e4
# Model
MAX_LAYERS = 1 << 16
MAX_HIDDEN = 1 << 20
MAX_HEADS = 1 << 16
MAX_FFN = 1 << 22
MAX_VOCAB = 1 << 24
MAX_SEQ = 1 << 24                  # 16,777,216 tokens
MAX_EXPERTS = 1 << 16
# Plan
MAX_MBS = 1 << 20
MAX_GBS = 1 << 32
MAX_VPP = 1024
# Simulation: virtual micro-batches one pipeline rank runs (m * vpp)
MAX_SIM_MICROBATCHES = 1 << 16

_INT_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)


def check_int(name: str, v: Any, lo: int = 1, hi: int | None = None) -> int:
    """``v`` must be a Python int (not a bool) in ``[lo, hi]``; returns it."""
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise SpecError(name, v, f"must be an integer >= {lo}")
    if hi is not None and v > hi:
        raise SpecError(name, v, f"must be an integer <= {hi:,} (a sanity limit)")
    return v


def check_number(name: str, v: Any, lo: float = 0.0, hi: float | None = None,
                 lo_open: bool = False, sane_lo: float | None = None) -> float:
    """``v`` must be a finite int or float (not a bool) with ``lo <= v`` (``lo < v`` when
    ``lo_open``), ``v <= hi`` and ``v >= sane_lo`` (a sanity floor: a rate so small its
    reciprocal overflows); returns it as a float."""
    op = ">" if lo_open else ">="
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(name, v, f"must be a finite number {op} {lo}" + text_hint(v))
    try:
        f = float(v)
    except OverflowError:
        raise SpecError(name, v, f"must be a finite number <= {hi}") from None
    if not math.isfinite(f) or f < lo or (lo_open and f == lo):
        raise SpecError(name, v, f"must be a finite number {op} {lo}")
    if hi is not None and f > hi:
        raise SpecError(name, v, f"must be a number <= {hi:g} (a sanity limit)")
    if sane_lo is not None and f < sane_lo:
        raise SpecError(name, v, f"must be a number >= {sane_lo:g} (a sanity limit)")
    return f


def text_hint(v: Any) -> str:
    """Why a number written in a YAML file can arrive as text: YAML 1.1 (PyYAML) reads
    ``1e9`` and ``5e-6`` (no dot in the mantissa) as strings, ``1.0e9`` as a number."""
    if not isinstance(v, str):
        return ""
    try:
        float(v)
    except ValueError:
        return ""
    return " (it was read as text: YAML takes an exponent as a number only with a dot and a " \
           "sign, e.g. 1.0e+9; or it was quoted)"


def parse_int_text(name: str, text: Any) -> int:
    """An integer written in ASCII digits (``"８"``, ``"1_0"``, ``"1e3"`` and ``"0x10"`` are
    refused: what is typed is what is read)."""
    s = str(text).strip()
    if not _INT_RE.fullmatch(s):
        raise SpecError(name, text, "must be an integer")
    if len(s) > 40:
        raise SpecError(name, text, "must be an integer of at most 40 digits (a sanity limit)")
    return int(s)


def check_name(name: str, v: Any, max_len: int = 200) -> str:
    """A name: a string (or a plain number, written as text) of at most ``max_len``
    characters; lists, mappings and other structures are refused."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise SpecError(name, v, "must be a string")
    if isinstance(v, int) and v.bit_length() > 64:
        raise SpecError(name, v, "must be a string")
    s = str(v)
    if not s.strip() or len(s) > max_len or not s.isprintable():
        raise SpecError(name, v, f"must be a non-empty printable string of at most {max_len} "
                        "characters")
    return s


def check_choice(name: str, v: Any, choices: Sequence[str]) -> Any:
    """``v`` must be one of ``choices`` (names); returns it."""
    if v not in choices:
        raise SpecError(name, v, f"must be one of {', '.join(choices)}")
    return v


def check_choices(name: str, values: Iterable[Any], choices: Sequence[str]) -> None:
    """Each of ``values`` must be one of ``choices``: the first that is not is named."""
    for v in values:
        check_choice(name, v, choices)


def check_bool(name: str, v: Any) -> bool:
    """``v`` must be ``True`` or ``False`` (not ``"false"``, which Python finds true)."""
    if not isinstance(v, bool):
        raise SpecError(name, v, "must be true or false")
    return v
