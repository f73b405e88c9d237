#!/usr/bin/env python
"""Transcribe the held-out reference file ``strategies/reference/data/heldout_2026d.json``
(calibration §5.204): NVIDIA-NeMo/Megatron-Bridge ``docs/performance-summary-archive.md``,
the "26.04 NeMo Container" and "26.02.01 NeMo Container" pre-training tables, every row of
the six models paraplan expresses (Llama 3 70B, Llama 3.1 405B, DeepSeek-V3, GPT-OSS 120B,
Qwen3-30B-A3B, Qwen3-235B-A22B) on GB300, GB200, B300, B200 and H100. No other reference file
holds a row of either container (``megatron_bridge_2604.json`` is 26.04.01, a later
container; ``heldout_2026c.json`` is 26.02).

    python experiments/transcribe_heldout_2026d.py [--out FILE]
    python experiments/transcribe_heldout_2026d.py --sources /path/to/Megatron-Bridge \
        [--save-inputs FILE] [--out FILE]

The reading and the rows are ``transcribe_heldout_2026c``'s, for each container with its
own Megatron-Bridge tag (``docs/versions1.json``: "0.4.0 · 26.04", "0.3.1 · 26.02.01"): the
MoE rows take the switches of the performance config at that tag whose layout is theirs.
Every row's step is gbs x seq / (tokens/s/GPU x GPUs)."""
from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments import transcribe_heldout_2026c as c26  # noqa: E402

OUT = "strategies/reference/data/heldout_2026d.json"
INPUTS = "strategies/reference/sources/heldout_2026d_inputs.json"
#: the two containers; components from docs/releases/software-versions.md where it lists them
#: (26.04), the tag from docs/versions1.json; the deepseek_v3.py layout_map lines at each tag
CONTAINERS = (
    c26.Container("26.04", "v0.4.0", "Megatron-Bridge v0.4.0 / Megatron Core (NeMo Framework "
                  "26.04 container: Megatron Core 0.17.0, Transformer Engine 2.14+71bbefb)",
                  "mbridge2604", "L37-45"),
    c26.Container("26.02.01", "v0.3.1", "Megatron-Bridge v0.3.1 / Megatron Core (NeMo "
                  "Framework 26.02.01 container, a patch of 26.02; software-versions.md lists "
                  "no components for it, docs/versions1.json names it '0.3.1 · 26.02.01')",
                  "mbridge260201", "L37-45"))


def read_sources(repo: str) -> dict[str, Any]:
    """Each container's ``transcribe_heldout_2026c.read_sources`` object, by name."""
    return {c.name: c26.read_sources(repo, c) for c in CONTAINERS}


def transcribe(src: dict[str, Any]) -> list[dict]:
    """The rows of ``OUT``: each container's rows, in ``CONTAINERS`` order."""
    out = [r for c in CONTAINERS for r in c26.transcribe(src[c.name], c)]
    assert len({r["id"] for r in out}) == len(out)
    return out


if __name__ == "__main__":
    c26.cli(__doc__, OUT, INPUTS, read_sources, transcribe)
