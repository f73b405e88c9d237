"""Reading ``experiments/transcribe_heldout_2026b.py``'s sources: from clones of
pytorch/torchtitan and NVIDIA-NeMo/Megatron-Bridge, the tables' cells, the commits and the
fields of the Megatron-Bridge configs that fit a row, as one JSON object
(``read_sources``; the repository keeps it as ``transcribe_heldout_2026b.INPUTS``, which
the transcriber reads without the clones)."""
from __future__ import annotations

import subprocess
from typing import Any

from experiments.transcribe_heldout_2026b import (BRIDGE_MODELS, BRIDGE_TAG, CONFIG_FIELDS,
                                                  bridge_row, fitting_config)

#: the MoE models' performance configs (``scripts/performance/configs/``) at ``BRIDGE_TAG``
BRIDGE_FILES = {"deepseek-v3": "deepseek/deepseek_workload_base_configs.py",
                "gpt-oss-120b": "gpt_oss/gpt_oss_workload_base_configs.py",
                "qwen3-30b-a3b": "qwen/qwen3_workload_base_configs.py",
                "qwen3-235b-a22b": "qwen/qwen3_workload_base_configs.py"}
#: the page-wide footnote of the pre-training tables (docs/performance-summary-archive.md
#: ``[^moe-training-note]``): MoE rows then state ``plan.moe_balance = "forced"``
#: (docs/calibration.md §5.73)
FORCED = "we force-balance the token distribution among experts"


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          check=True).stdout


def _last_change(repo: str, path: str) -> str:
    """The commit that last changed ``path`` (its content as read here)."""
    return _git(repo, "log", "-1", "--format=%H", "HEAD", "--", path).strip()[:12]


def _rows(md: str) -> list[list[str]]:
    """The cells of every markdown table row of ``md`` (header and rule rows included)."""
    return [[c.strip() for c in ln.strip().strip("|").split("|")]
            for ln in md.splitlines() if ln.strip().startswith("|")]


def read_async_tp(repo: str) -> dict[str, Any]:
    """The async-TP file's two '####' tables: each title (the plan is in it) and its rows'
    cells."""
    path = "benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md"
    md = _git(repo, "show", f"HEAD:{path}")
    return {"path": path, "commit": _last_change(repo, path),
            "tables": [{"title": block.split("\n")[0],
                        "rows": _rows(block.split("###")[0])[2:]}
                       for block in md.split("#### ")[1:]]}


def read_h200(repo: str) -> dict[str, Any]:
    """The Trainy H200 file's Results rows (its command, which the rows' notes quote, is
    checked here)."""
    path = "benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md"
    md = _git(repo, "show", f"HEAD:{path}")
    assert "--training.local_batch_size=2" in md and "--training.compile" in md
    assert 'quantize.linear.float8' in md
    return {"path": path, "commit": _last_change(repo, path),
            "rows": _rows(md.split("### Results")[1].split("###")[0])[2:]}


def bridge_configs(repo: str) -> dict[str, dict[str, object]]:
    """Every ``WorkloadBaseConfig`` of the MoE models' performance configs at ``BRIDGE_TAG``
    (``scripts/performance/configs/<family>/*_workload_base_configs.py``), by name: the files
    are taken from the tag with ``git archive`` and imported as they are (their only import is
    ``scripts/performance/utils/utils.py``, standard library only;
    ``bridge_recipe_trace.workload_configs``)."""
    from experiments.bridge_recipe_trace import workload_configs
    return workload_configs(repo, BRIDGE_TAG, tuple(sorted(set(BRIDGE_FILES.values()))))


def read_bridge(repo: str) -> dict[str, Any]:
    """The '26.06 NeMo Container' pre-training tables (13 columns, no FSDP column): the rows
    of the models paraplan expresses, by model; whether the page's footnote says the MoE
    benchmarks force-balance (``FORCED``); the ``BRIDGE_TAG`` configs that fit a row, with
    the fields read (``CONFIG_FIELDS``)."""
    path = "docs/performance-summary-archive.md"
    txt = _git(repo, "show", f"HEAD:{path}")
    sec = txt.split("## 26.06 NeMo Container")[1].split("\n## ")[0]
    sec = sec.split("### SFT Performance")[0]
    tables: dict[str, list[list[str]]] = {}
    for block in sec.split("#### Model: ")[1:]:
        name = block.split("\n")[0].strip()
        if name in BRIDGE_MODELS:
            tables[name] = [c for c in _rows(block) if len(c) == 13 and c[0].startswith("DGX")]
    configs = bridge_configs(repo)
    used: dict[str, dict[str, Any]] = {}
    for name, rows in tables.items():
        for cells in rows:
            r = bridge_row(name, cells)
            fit = fitting_config(configs, r["key"], r["sysn"].split("-")[1], r["prec"],
                                 r["layout"])
            if fit is not None:
                used[fit] = {k: configs[fit][k] for k in CONFIG_FIELDS}
    return {"path": path, "commit": _git(repo, "rev-parse", "HEAD").strip()[:12],
            "force_balanced": FORCED in txt, "tables": tables,
            "configs": dict(sorted(used.items()))}


def read_sources(titan: str, bridge: str) -> dict[str, Any]:
    """What ``transcribe`` reads, from clones of pytorch/torchtitan and
    NVIDIA-NeMo/Megatron-Bridge (at the commits the rows cite)."""
    return {"torchtitan_async_tp": read_async_tp(titan), "torchtitan_h200": read_h200(titan),
            "bridge_2606": read_bridge(bridge)}
