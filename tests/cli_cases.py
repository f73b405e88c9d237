"""Helpers of the table-driven bad-input tests (test_cli_errors, test_bad_input_recent,
test_bad_input_sweep, test_bad_input_25): a case's files written into a folder and its argv
pointed at them (``materialise``), and the refusal's contract checked (``refused_in_one_line``)."""
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


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` and its bytes (None for a folder)."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in folder.rglob("*")}


def refused_in_one_line(tmp_path: Path, capsys, argv: list[str], files: dict) -> str:
    """``argv`` (its ``files`` materialised) through ``simulator.cli.main`` in process: exit
    status 2, nothing on stdout, one stderr line without a traceback, nothing written, cut or
    removed under ``tmp_path``. Returns the line."""
    from simulator.cli.main import main
    argv = materialise(tmp_path, argv, files)
    before = tree(tmp_path)
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (rc, err)
    assert out == "", out
    assert err.startswith("paraplan") and "error" in err and "Traceback" not in err, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert tree(tmp_path) == before          # nothing written, nothing cut or removed
    return err
