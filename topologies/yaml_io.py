"""Safe loading of YAML/JSON files with a size limit; errors name the file and the problem."""
from __future__ import annotations

import json
import os
from typing import Any

from topologies.errors import SpecError

MAX_FILE_BYTES = 4 * 1024 * 1024


def load_mapping_file(path: str, field: str) -> Any:
    """Parse a YAML or JSON file with safe loaders; refuse files over 4 MiB."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise SpecError(field, path, f"cannot read file ({e.strerror})") from None
    if size > MAX_FILE_BYTES:
        raise SpecError(field, path, f"file is {size} bytes; the limit is {MAX_FILE_BYTES}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(field, path, f"cannot read file as UTF-8 text ({e})") from None
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(field, path, f"malformed JSON at line {e.lineno}: {e.msg}") from None
    import yaml
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise SpecError(field, path, f"malformed YAML{where}: {getattr(e, 'problem', e)}") from None


def load_cluster_file(path: str):
    from topologies.cluster import cluster_from_mapping
    return cluster_from_mapping(load_mapping_file(path, "cluster"))
