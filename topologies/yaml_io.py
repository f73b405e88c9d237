"""Safe loading of YAML/JSON files with a size limit; errors name the file and the problem.

Only plain data comes back (YAML's safe loader: no Python objects, no code), a key given
twice is refused (YAML and JSON would silently keep the last one), JSON's non-standard
``NaN``/``Infinity`` are refused, and a file must be a regular file of at most
``MAX_FILE_BYTES`` (a device or a FIFO named ``x.yaml`` is not read forever).
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any

from topologies.errors import SpecError

MAX_FILE_BYTES = 4 * 1024 * 1024


def _read_text(path: str, field: str) -> str:
    if not os.path.exists(path):
        raise SpecError(field, path, "no such file")
    if not os.path.isfile(path):
        raise SpecError(field, path, "is not a regular file")
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise SpecError(field, path, f"file is {size:,} bytes; the limit is {MAX_FILE_BYTES:,}")
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise SpecError(field, path, f"cannot read file ({e.strerror or e})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(field, path, f"file is over the limit of {MAX_FILE_BYTES:,} bytes")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SpecError(field, path, f"is not UTF-8 text (byte {e.start})") from None


def _pairs_no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


class _Duplicate(Exception):
    def __init__(self, key: Any) -> None:
        super().__init__(key)
        self.key = key


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_json(text: str, field: str, path: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_pairs_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise SpecError(field, path, f"malformed JSON at line {e.lineno}: {e.msg}") from None
    except _Duplicate as e:
        raise SpecError(field, path, f"key {e.key!r} given twice") from None
    except (ValueError, RecursionError) as e:
        raise SpecError(field, path, f"malformed JSON: {_one_line(e)}") from None


@functools.lru_cache(maxsize=1)
def _safe_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that refuses duplicate keys and unhashable keys."""

        def construct_mapping(self, node, deep=False):  # type: ignore[override]
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                except TypeError:
                    raise yaml.constructor.ConstructorError(
                        None, None, "a mapping key must be a plain value", key_node.start_mark)
                if dup:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} given twice", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return Loader


def loads_yaml(text: str, field: str, path: str) -> Any:
    import yaml
    try:
        return yaml.load(text, Loader=_safe_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise SpecError(field, path, f"malformed YAML{where}: "
                        f"{_one_line(getattr(e, 'problem', None) or e)}") from None
    except (ValueError, TypeError, RecursionError, OverflowError) as e:
        raise SpecError(field, path, f"malformed YAML: {_one_line(e)}") from None


def _one_line(e: Any) -> str:
    text = " ".join(str(e).split())
    if "integer string conversion" in text:
        return "a number has more than 4300 digits"
    return text if len(text) <= 200 else text[:197] + "..."


def load_mapping_file(path: str, field: str, what: str | None = None) -> Any:
    """Parse a YAML or JSON file with safe loaders; refuse files over 4 MiB. ``what`` (a
    cluster, a model ...): the file must hold a mapping, else a SpecError on ``field`` naming
    the file and what it holds (an empty file, a list)."""
    text = _read_text(path, field)
    if path.lower().endswith(".json"):
        data = loads_json(text, field, path)
    else:
        data = loads_yaml(text, field, path)
    if what is not None and not isinstance(data, dict):
        raise SpecError(field, path, f"a {what} file must hold a mapping of keys, not "
                        f"{held_text(data)}")
    return data


def held_text(data: Any) -> str:
    """What a parsed file holds, in words, where a mapping was wanted.

    >>> held_text(None), held_text([1]), held_text(5), held_text("tp"), held_text(True)
    ('nothing (an empty file)', 'a list', 'a number', 'a text', 'true or false')
    """
    if data is None:
        return "nothing (an empty file)"
    if isinstance(data, bool):
        return "true or false"
    if isinstance(data, (int, float)):
        return "a number"
    return {list: "a list", str: "a text"}.get(type(data), f"a {type(data).__name__}")
