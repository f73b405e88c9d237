"""Plans that offload the attention side's modules (plan ``offload_modules``; docs/calibration.md
§5.213): per plan, the bytes each module takes off the GPU per layer and micro-batch
(``memory.offload_saved.attention_offload_bytes``), the bytes copied, the copy's seconds
over the GPU's host link against the layer's forward and its backward less the offloaded
modules' own (``cost.stage.offload_time``), the estimate's step and its ``offload`` entry,
and the peak memory over HBM, each with and without the key. No reference row offloads
these modules; the plans are illustrative.

Run: python experiments/attention_offload_rows.py
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.cost.offload import ATTENTION_MODULES, offload_mask  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.job import make_job  # noqa: E402
from strategies.memory.offload_saved import attention_offload_bytes  # noqa: E402
from strategies.memory.scalar import peak_memory, stage_hbm_bytes  # noqa: E402
from strategies.memory.stack_terms import job_stack_memory  # noqa: E402
from strategies.plan import parse_plan  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.cluster import cluster_preset  # noqa: E402

#: (model, cluster, nodes, plan, global batch, dtype, modules)
CASES = (
    ("llama3-8b", "dgx-h100", 1, "tp=1,dp=8,mbs=1", 64, "bf16", "qkv_linear+core_attn+attn_proj"),
    ("llama3-8b", "dgx-h100", 1, "tp=2,dp=4,zero=3,mbs=3,sp=true", 96, "bf16",
     "qkv_linear+core_attn+attn_proj"),
    ("llama3-8b", "dgx-a100", 1, "tp=1,dp=8,mbs=1,flash_attn=false", 16, "bf16", "core_attn"),
    ("llama3-70b", "dgx-h100", 8, "tp=8,pp=4,dp=2,mbs=1,sp=true,schedule=interleaved,vpp=5", 128,
     "fp8", "core_attn+attn_proj"),
    ("llama3-70b", "gb200-nvl72", 16, "tp=4,pp=4,dp=4,mbs=1,sp=true,schedule=interleaved,vpp=5",
     128, "fp8", "qkv_linear+core_attn+attn_proj"),
    ("mixtral-8x7b", "dgx-h100", 1, "tp=1,ep=8,dp=8,mbs=1", 64, "bf16",
     "mlp_norm+core_attn+attn_proj"),
)


def row(case) -> str:
    name, cl_name, nodes, plan, gbs, dtype, mods = case
    m, cl = model_preset(name), cluster_preset(cl_name, nodes)
    on = make_job(m, cl, parse_plan(plan + ",offload_modules=" + mods), global_batch=gbs,
                  dtype=dtype)
    off = replace(on, plan=replace(on.plan, offload_modules=None))
    p, st = on.plan, job_stack_memory(on)
    per = []
    for mod in ATTENTION_MODULES:
        if mod in p.offload_modules:
            g = attention_offload_bytes(m, m.seq_length, p.mbs, p.tp, p.cp, p.sp, 0, 0,
                                        p.flash_attn, offload_mask((mod,)), st.act_cache,
                                        st.te_inputs)[0]
            per.append(f"{mod} {g / 1e6:.0f}")
    held, copied = attention_offload_bytes(m, m.seq_length, p.mbs, p.tp, p.cp, p.sp, 0, 0,
                                           p.flash_attn, offload_mask(p.offload_modules),
                                           st.act_cache, st.te_inputs)
    bw = cl.gpu.host_link_bandwidth
    e0, e = estimate(off), estimate(on)
    peaks = []
    for j in (off, on):
        s, mb = peak_memory(j)
        peaks.append(mb.total / stage_hbm_bytes(j, s))
    return (f"| {name} {cl_name}:{nodes} {dtype} `{plan}` | {mods} | {'; '.join(per)} | "
            f"{held / 1e6:.0f} / {copied / 1e6:.0f} | {1e3 * copied / bw:.1f} ({bw / 1e9:.1f}) | "
            f"{e0.step_time_s:.3f} | {e.step_time_s:.3f} | {e.breakdown_s['offload']:.3f} | "
            f"{peaks[0]:.2f} | {peaks[1]:.2f} |")


def main() -> None:
    print("| plan | offload_modules | held MB per layer, by module | held / copied MB | "
          "copy ms (bw GB/s) | step s without | step s with | offload s | peak/HBM without | "
          "peak/HBM with |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        print(row(case))


if __name__ == "__main__":
    main()
