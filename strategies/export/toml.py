"""A small TOML writer for flat sections of strings, integers, floats, booleans and lists
(the Python standard library reads TOML, ``tomllib``, but does not write it).

>>> print(dumps({"training": {"seq_len": 8192, "dataset": "c4"},
...              "a.b": {"on": True, "fqns": [["x", "y"], ["z"]]}}))
[training]
seq_len = 8192
dataset = "c4"
<BLANKLINE>
[a.b]
on = true
fqns = [["x", "y"], ["z"]]
<BLANKLINE>
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k)


def value(v: Any) -> str:
    """One TOML value; TypeError/ValueError for what TOML cannot hold (None, NaN)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"TOML value {v!r}: only finite numbers are written")
        return repr(v)
    if isinstance(v, str):   # JSON's escapes (\", \\, \n, \uXXXX) are TOML basic-string escapes
        return json.dumps(v, ensure_ascii=True)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(f"TOML value {v!r}: type {type(v).__name__} is not written")


def dumps(sections: dict[str, dict[str, Any]]) -> str:
    """``{"section.sub": {key: value}}`` as TOML tables in the given order (dotted section
    names are nested tables: ``[quantize.linear.float8]``)."""
    out: list[str] = []
    for name, keys in sections.items():
        out.append(f"[{'.'.join(_key(p) for p in name.split('.'))}]")
        out += [f"{_key(k)} = {value(v)}" for k, v in keys.items()]
        out.append("")
    return "\n".join(out)
