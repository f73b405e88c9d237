"""Helpers of the table-driven bad-input tests (test_cli_errors, test_bad_input_recent,
test_bad_input_sweep): a case's files written into a folder and its argv pointed at them."""
from __future__ import annotations

from pathlib import Path


def materialise(tmp_path: Path, argv: list[str], files: dict) -> list[str]:
    """Write ``files`` (name -> text or bytes; a name may hold a folder) under ``tmp_path``
    and return ``argv`` with ``{d}`` replaced by that folder."""
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
    return [a.replace("{d}", str(tmp_path)) for a in argv]
