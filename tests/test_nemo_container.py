"""The NeMo container a reference row names (``reference.text.nemo_container``,
docs/calibration.md §5.126): every spelling the reference files use reads its ``yy.mm``;
every row whose text names a container gets it, the NeMo performance summary's
``Container: NeMo 25.02`` rows included, and agrees with the row's ``release``; a row naming
two containers is refused."""
from __future__ import annotations

import glob
import json
import re
from collections import Counter

import pytest

from strategies.errors import SpecError
from strategies.reference.perf_harness import NEMO_PERF_CONTAINERS, nemo_perf_row
from strategies.reference.text import nemo_container

#: each spelling of the reference files (file, field) and the tag it reads
SPELLINGS = [
    ("container nvcr.io/nvidia/nemo:25.04.01", "25.04"),        # dgxc_2505 source.also
    ("container nvcr.io/nvidia/nemo:24.12", "24.12"),           # dgxc_2505 source.also
    ("NeMo 25.02.01 container (launch.sh FW_VERSION at v25.04.02)", "25.02"),  # dgxc notes
    ("NeMo 24.12 container (launch.sh)", "24.12"),              # dgxc_2505 notes
    ("performance_summary.md (NeMo 24.07 container, DGX-H100, FP8)", "24.07"),  # 2407 table
    ("performance-summary-archive.md (26.04.01 NeMo container), commit", "26.04"),  # Bridge
    ("performance-summary.md, 25.11 NeMo container, added in", "25.11"),  # 2026 notes
    ("'Pre-Training Performance', Container: NeMo 25.04, System: DGX-GB200", "25.04"),
    ("'Pretraining', Container: NeMo 25.02, System: DGX-B200", "25.02"),
    ("'Pre-Training Performance', Container: NeMo 25.07, System: DGX-GB200", "25.07"),
    ("model dimensions: NeMo 2.0 GPTConfig175B", None),          # a NeMo release, no container
    ("NVIDIA-NeMo/Automodel performance summary (NeMo AutoModel)", None),
    ("launch.sh FW_VERSION at v25.05.05", None),
]


@pytest.mark.parametrize("text, tag", SPELLINGS)
def test_each_spelling_reads_its_container(text, tag):
    assert nemo_container({"source": {"table": text}}) == tag
    assert nemo_container({"notes": text}) == tag


def test_two_containers_refused():
    row = {"source": {"table": "Container: NeMo 25.02"}, "notes": "NeMo 25.04.01 container"}
    with pytest.raises(SpecError, match="source.*25.02, 25.04"):
        nemo_container(row)
    # the same container twice, patch levels apart, is one
    assert nemo_container({"source": {"also": "nvcr.io/nvidia/nemo:25.04.01"},
                           "notes": "NeMo 25.04.00 container"}) == "25.04"


def _rows():
    for f in sorted(glob.glob("strategies/reference/data/*.json")):
        with open(f) as fh:
            rows = json.load(fh)
        if isinstance(rows, list):
            yield from ((f, e) for e in rows)


def _text_fields(e: dict):
    src = e.get("source") or {}
    return [str(src.get(k) or "") for k in ("ref", "table", "also")] + [str(e.get("notes")
                                                                            or "")]


def test_every_row_naming_a_container_reads_it():
    """A row any of whose text fields says ``container`` or ``nemo:`` next to a ``yy.mm``
    names one, and it is the row's ``release`` where the row states one; the NeMo
    performance summary's 25 rows read 25.02 / 25.04 / 25.07 (9 / 8 / 8)."""
    named, by_file = 0, Counter()
    for f, e in _rows():
        # (``\bnemo:``: MLPerf's system names such as ``eos_n64_ngc24.04_nemo:`` name an NGC
        # PyTorch image, not a NeMo container)
        says = any(re.search(r"(?i)container|\bnemo:", t) and re.search(r"\b\d\d\.\d\d\b", t)
                   for t in _text_fields(e))
        tag = nemo_container(e)
        assert (tag is not None) == says, e["id"]
        if e.get("release") is not None:
            assert tag == e["release"], e["id"]
        if tag is not None:
            named += 1
            if f.endswith("nemo_performance_25.json"):
                by_file[tag] += 1
    assert by_file == {"25.02": 9, "25.04": 8, "25.07": 8}
    # hybrid_2026.json: 16 Megatron-Bridge rows and 7 dgxc-benchmarking rows; dsv4_2026.json:
    # the 26.08 table's 2 DeepSeek-V4 Flash rows; heldout_2026c.json: the 26.02 table's 33 rows;
    # heldout_2026d.json: the 26.04 and 26.02.01 tables' 31 rows each; heldout_2026e.json:
    # the 25.11 table's 20 runs and the 25.09 table's 27
    assert named == 119 + 20 + 33 + 12 + 25 + 12 + 16 + 7 + 2 + 33 + 62 + 47


def test_nemo_perf_rows_by_container():
    """``nemo_perf_row`` reads the container where the reader does: every row of the NeMo
    performance summary's tables is one, each of ``NEMO_PERF_CONTAINERS``."""
    perf = [e for f, e in _rows() if f.endswith("nemo_performance_25.json")]
    assert perf and all(nemo_perf_row(e) for e in perf)
    assert {nemo_container(e) for e in perf} == set(NEMO_PERF_CONTAINERS)
    # another page naming a 25.02 container is not the performance summary
    assert not nemo_perf_row({"source": {"ref": "a blog", "table": "Container: NeMo 25.02"}})
