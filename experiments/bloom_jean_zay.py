#!/usr/bin/env python
"""The BLOOM runs on Jean Zay against what BigScience measured beside them (docs/calibration.md
§3.25).

Run (a second, analytic only):

    python experiments/bloom_jean_zay.py           # Markdown tables on stdout

Table 1, the one-node checks of ``train/tr11-176B-ml/chronicles-prequel.md``
(bigscience-workshop/bigscience): TP=8 on one node, no pipeline, no data parallelism, so
neither DeepSpeed's pipeline engine nor the inter-node network is in the step. The model is
the ``megatron-deepspeed`` profile without the BF16 optimizer (written on 02-28, after these
runs), once with asynchronous launches and once with ``CUDA_LAUNCH_BLOCKING=1``
(``strategies.launch_blocking``: whether these runs had it is not stated).

Table 2, the 48-node layouts re-run on 02-25, after "A100s PCI-Express/NUMA was improved today
so all TFLOPs have changed for the better (1-5%)" (the same page, "GBS Variations"), beside
the reference rows of 02-21 where the layout is the same: the reference entry
``bloom_prequel_181B_dp4_pp12_mbs4`` with the layout changed, read as the reference reader
reads it (synchronous launches, no BF16 optimizer).

Table 3, BigScience's own NCCL all-reduce benchmark on four Jean Zay A100 nodes
(``experiments/bandwidth/all_reduce_bench-a100-n4.txt``: 32 ranks, a 4 GB fp32 tensor,
NCCL 2.10.3, ``NCCL_DEBUG=info``), its steady duration against the model's price of the same
collective on the reference rows' cluster (``strategies.cost.comm.collective_time``).

Table 4, the head-count comparison of the same page (48 nodes, dp8 tp8 pp6 mbs4, 02-23/24):
measured seconds per step against the model for each head count; the model's attention
grows with the score tensor, a head dimension it does not see.
"""
from __future__ import annotations

import copy
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import comm                                       # noqa: E402
from strategies.estimate import estimate                                # noqa: E402
from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED                     # noqa: E402
from strategies.job import make_job                                     # noqa: E402
from strategies.launch_blocking import with_launch_blocking             # noqa: E402
from strategies.model import model_from_mapping                         # noqa: E402
from strategies.plan import plan_from_mapping                           # noqa: E402
from strategies.reference import cases                                  # noqa: E402
from strategies.reference import entry_specs                            # noqa: E402
from topologies.cluster import cluster_preset                           # noqa: E402

SOURCE = "bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md"

#: (label, layers, hidden, heads, mbs, gbs, measured seconds, date, precision)
ONE_NODE = (
    ("6 layers, h 14336, 64 heads, mbs 2 (run 1)", 6, 14336, 64, 2, 512, 130.43, "02-21", "bf16"),
    ("6 layers, h 14336, 64 heads, mbs 2 (run 2)", 6, 14336, 64, 2, 512, 119.19, "02-21", "bf16"),
    ("10 layers, h 14336, 64 heads, mbs 1", 10, 14336, 64, 1, 512, 205.52, "02-21", "bf16"),
    ("8 layers, h 14400, 32 heads, mbs 1 (fp16)", 8, 14400, 32, 1, 2048, 769.99, "02-17", "fp16"),
    ("8 layers, h 14400, 32 heads, mbs 1 (bf16)", 8, 14400, 32, 1, 2048, 777.09, "02-17", "bf16"),
)

#: (dp, pp, mbs, gbs, seconds on 02-25, the reference row of 02-21 with the same layout)
RERUNS = (
    (8, 6, 4, 2048, 114.11, "bloom_prequel_181B_dp8_pp6_mbs4"),
    (4, 12, 4, 2048, 117.07, "bloom_prequel_181B_dp4_pp12_mbs4"),
    (4, 12, 2, 2048, 128.82, "bloom_prequel_181B_dp4_pp12_mbs2"),
    (6, 8, 4, 2016, 113.16, None),
    (12, 4, 2, 2016, 125.52, None),
    (12, 4, 4, 2016, 114.81, None),
    (24, 2, 1, 2016, 145.45, None),
    (24, 2, 2, 2016, 136.13, None),
)

#: all_reduce_bench.py: N x M fp32 (500000 x 2000 = 4 GB) over 32 ranks (4 nodes x 8);
#: steady durations of the file's trials 2-5 (trial 1, ~4 s, is the warm-up)
BENCH_BYTES = 500000 * 2000 * 4
BENCH_RANKS = 32
BENCH_STEADY_S = (1.5186, 1.5312)
BENCH_CHANNELS = 2        # "2 coll channels, 2 p2p channels" in the file's NCCL log

#: (heads, hidden, layers, measured seconds), dp8 tp8 pp6 mbs4 gbs2048, 02-23/24
HEADS = (
    (16, 14336, 72, 121.03), (32, 14336, 72, 124.01), (64, 14336, 72, 120.18),
    (112, 14336, 72, 138.72), (128, 14336, 72, 124.89), (256, 14336, 72, 132.85),
    (64, 13824, 78, 121.28), (96, 13824, 78, 124.75), (128, 13824, 78, 162.72),
    (64, 12288, 96, 122.96), (96, 12288, 96, 145.40), (128, 12288, 96, 129.42),
)


def _model(layers: int, hidden: int, heads: int):
    return model_from_mapping(dict(
        name=f"bloom-proto-{layers}l-{hidden}", num_layers=layers, hidden_size=hidden,
        num_attention_heads=heads, ffn_hidden_size=4 * hidden, vocab_size=250880,
        seq_length=2048, bias=True, norm="layernorm", position_embedding="alibi",
        tie_word_embeddings=True))


def one_node_rows() -> list[tuple]:
    """(label, date, measured, asynchronous estimate, synchronous estimate) of Table 1."""
    fw = replace(MEGATRON_DEEPSPEED, bf16_optimizer=False)
    out = []
    for label, layers, h, a, mbs, gbs, meas, date, dtype in ONE_NODE:
        est = []
        for f in (fw, with_launch_blocking(fw)):
            plan = plan_from_mapping(dict(tp=8, pp=1, mbs=mbs, zero=1, recompute="full"),
                                     f.plan_defaults())
            job = make_job(_model(layers, h, a), cluster_preset("dgx-a100", 1), plan,
                           global_batch=gbs, dtype=dtype, framework=f)
            est.append(estimate(job).step_time_s)
        out.append((label, date, meas, est[0], est[1]))
    return out


def _entry(ref: list[dict], rid: str) -> dict:
    return next(c for c in ref if c["id"] == rid)


def _variant(ref: list[dict], **plan) -> float:
    c = copy.deepcopy(_entry(ref, "bloom_prequel_181B_dp4_pp12_mbs4"))
    c["plan"].update(plan)
    return estimate(cases.case_from_entry(c, ref).job).step_time_s


def rerun_rows() -> list[tuple]:
    """(layout, 02-25 seconds, 02-21 seconds or None, estimate) of Table 2."""
    ref = cases.load_reference()
    out = []
    for dp, pp, mbs, gbs, meas, rid in RERUNS:
        before = _entry(ref, rid)["measured"]["step_time_s"] if rid else None
        est = _variant(ref, dp=dp, pp=pp, microbatch=mbs, global_batch=gbs)
        out.append((f"dp{dp} tp8 pp{pp} mbs{mbs} gbs{gbs}", meas, before, est))
    return out


def bench_busbw(seconds: float, nbytes: float = BENCH_BYTES, n: int = BENCH_RANKS) -> float:
    """all_reduce_bench.py's bus bandwidth in bytes/s: ``size / t · 2(n-1)/n``."""
    return nbytes / seconds * 2 * (n - 1) / n


def bench_rows() -> dict[str, float]:
    """The bench's steady duration and bus bandwidth against the model's (Table 3)."""
    ref = cases.load_reference()
    c = _entry(ref, "bloom_prequel_181B_dp4_pp12_mbs2")
    cl, _ = entry_specs.entry_cluster(dict(c, hardware=dict(c["hardware"], n_gpus=BENCH_RANKS)))
    t_model = float(comm.collective_time("allreduce", BENCH_BYTES, BENCH_RANKS, 1, cl))
    t_meas = sum(BENCH_STEADY_S) / 2
    per_channel = bench_busbw(t_meas) / BENCH_CHANNELS
    dp_share = float(comm.group_bandwidth(cl, 4, 8)[0])
    return dict(measured_s=t_meas, model_s=t_model, measured_busbw=bench_busbw(t_meas),
                model_busbw=bench_busbw(t_model), per_channel=per_channel,
                dp_ring_rate=dp_share, nic=cl.inter_node_bandwidth)


def heads_rows() -> list[tuple]:
    """(heads, hidden, head dim, measured, estimate) of Table 4."""
    ref = cases.load_reference()
    out = []
    for a, h, layers, meas in HEADS:
        c = copy.deepcopy(_entry(ref, "bloom_prequel_181B_dp8_pp6_mbs4"))
        c["model"].update(heads=a, hidden=h, ffn_hidden=4 * h, layers=layers)
        est = estimate(cases.case_from_entry(c, ref).job).step_time_s
        out.append((a, h, h // a, meas, est))
    return out


def _pct(est: float, meas: float) -> str:
    return f"{100 * (est / meas - 1):+.1f} %"


def main() -> None:
    print(f"## 1. One node, TP=8, no pipeline ({SOURCE}, 'Best TFLOPs' and 'Max possible "
          "TFLOPs check')\n")
    print("| run | date | measured s | model, async s | error | model, CUDA_LAUNCH_BLOCKING s "
          "| error |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for label, date, meas, a, s in one_node_rows():
        print(f"| {label} | {date} | {meas:.2f} | {a:.2f} | {_pct(a, meas)} | {s:.2f} | "
              f"{_pct(s, meas)} |")
    print(f"\n## 2. 48 nodes re-run on 02-25, after the PCIe/NUMA fix ({SOURCE}, 'GBS "
          "Variations')\n")
    print("| layout | 02-25 s | 02-21 s | model s | error vs 02-25 |\n"
          "| --- | ---: | ---: | ---: | ---: |")
    for lay, meas, before, est in rerun_rows():
        b = f"{before:.2f}" if before else "-"
        print(f"| {lay} | {meas:.2f} | {b} | {est:.2f} | {_pct(est, meas)} |")
    r = bench_rows()
    print("\n## 3. NCCL all-reduce, 4 GB fp32, 32 ranks on 4 Jean Zay A100 nodes "
          "(bigscience experiments/bandwidth/all_reduce_bench-a100-n4.txt)\n")
    print("| | seconds | bus bandwidth GB/s |\n| --- | ---: | ---: |")
    print(f"| measured (steady trials) | {r['measured_s']:.3f} | {r['measured_busbw'] / 1e9:.2f} |")
    print(f"| model (`comm.collective_time`) | {r['model_s']:.3f} | "
          f"{r['model_busbw'] / 1e9:.2f} |")
    print(f"\nPer NCCL channel (2 built): {r['per_channel'] / 1e9:.2f} GB/s, "
          f"{r['per_channel'] * 8 / 1e9:.1f} Gb/s of a {r['nic'] * 8 / 1e9:.0f} Gb/s NIC; the "
          f"model's ring rate for a dp group of one GPU per node: "
          f"{r['dp_ring_rate'] / 1e9:.2f} GB/s.")
    print(f"\n## 4. Head count, dp8 tp8 pp6 mbs4 gbs2048 on 48 nodes ({SOURCE}, 'NHEADs "
          "comparison')\n")
    print("| heads | hidden | head dim | measured s | model s | error |\n"
          "| ---: | ---: | ---: | ---: | ---: | ---: |")
    for a, h, d, meas, est in heads_rows():
        print(f"| {a} | {h} | {d} | {meas:.2f} | {est:.2f} | {_pct(est, meas)} |")


if __name__ == "__main__":
    main()
