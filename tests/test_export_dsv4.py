"""``--export megatron`` of a DeepSeek-V4 model is refused by name (exit 2, one line): the
pretrain_gpt.py arguments it wrote built a GQA transformer with one 512-wide KV head, not the
compressed sparse attention Megatron-Core runs through its hybrid model; the estimate
itself still runs."""
from __future__ import annotations

from pathlib import Path

from simulator.cli.main import main

V4 = str(Path(__file__).resolve().parent / "data" / "hf" / "deepseek_v4_flash.json")
ARGS = ["estimate", "--model", V4, "--cluster", "dgx-h100:1", "--plan",
        "tp=1,pp=1,ep=8,mbs=1,gbs=32,recompute=full"]


def test_megatron_export_refuses_deepseek_v4(capsys):
    assert main([*ARGS, "--export", "megatron"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and err.count("\n") == 1, err
    for w in ("--export='megatron'", "DeepSeek-V4", "--csa-compress-ratios"):
        assert w in err, (w, err)
    assert main(ARGS) == 0
