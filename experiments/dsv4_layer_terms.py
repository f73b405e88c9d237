"""DeepSeek-V4 Flash's terms for one layer and one micro-batch on GB300 (GB200 with
``--gpu gb200``) in MXFP8, milliseconds (docs/calibration.md §5.158, §5.164): the attention
forward and backward (the sparse core and, where priced, the indexer's and its loss's DSA
kernels, each apart), the ``dsv4_gemms`` list's forward and backward (each GEMM's), the memory-bound
passes, the data gradient of the indexer's projections (their inputs are detached in
Megatron-Core; 0 from §5.164), the seconds a step the attention would add at half its rate
(the recipe's 43 layers x 16 micro-batches) and, from §5.164, the Sinkhorn kernels, the MTP
module's sliding-window layer's attention and the sparse core's backward at cuDNN's measured
rate. Runs on a tree before §5.158 too (the DSA and §5.164 lines are then absent). About 2 s.

    python experiments/dsv4_layer_terms.py [--gpu gb300]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import attention_time as at  # noqa: E402
from strategies.cost import dsv4_cost as dc  # noqa: E402
from strategies.cost.attention_counts import attn_core_flops_fwd  # noqa: E402
from strategies.cost.gemm_time import gemms_time_bwd_split, gemms_time_fwd  # noqa: E402
from strategies.cost.hbm_rate import usable_hbm  # noqa: E402
from strategies.framework import get_profile  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

STEP_LAYERS = 43 * 16   # the rows' layers x micro-batches (dsv4_2026.json, gbs 2048 / dp 128)


def _ms(t: float) -> float:
    return round(1e3 * float(t), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="gb300")
    a = ap.parse_args()
    m, g = model_preset("deepseek-v4-flash"), get_gpu(a.gpu)
    T, hbm = m.seq_length, usable_hbm(g)
    f, b = at.attention_time_fwd(m, 1, 1, 1, True, g, 1.0, get_profile("nemo"))
    print(f"attention forward {_ms(f)} ms, backward {_ms(b)} ms")
    core_f, core_b = f, b
    dsa = 0.0
    if hasattr(dc, "dsa_flops_fwd_per_token"):
        fl, core = dc.dsa_flops_fwd_per_token(m), attn_core_flops_fwd(m, 1, 1, 1, True)
        loss = T * dc.loss_bytes_per_token(m) / hbm
        c = (f - loss) / (1 + T * sum(fl.values()) / core)
        dsa = f - c - loss
        core_f = c
        print(f"  sparse core {_ms(c)}; DSA kernels "
              + ", ".join(f"{k} {_ms(c * T * v / core)}" for k, v in fl.items())
              + f"; loss passes {_ms(loss)}")
    fc = attn_core_flops_fwd(m, 1, 1, 1, True)
    print(f"  sparse core {round(fc / 1e9, 1)} GFLOP forward: {round(fc / core_f / 1e15, 2)} "
          f"PFLOPS forward, {round(2.5 * fc / core_b / 1e15, 2)} backward (2.5x the FLOPs)")
    x = dc.dsv4_gemms(m, T)
    print(f"dsv4_gemms ({len(x)} entries) forward {_ms(gemms_time_fwd(x, 1, g, 'mxfp8'))} ms, "
          f"backward {_ms(gemms_time_bwd_split(x, 1, g, 'mxfp8')[0])} ms")
    for e in x:
        ef, eb = gemms_time_fwd([e], 1, g, "mxfp8"), gemms_time_bwd_split([e], 1, g, "mxfp8")[0]
        print(f"  N {round(float(e[2]), 2)}, K {e[3]}: forward {_ms(ef)}, backward {_ms(eb)}")
    mb = dc.elementwise_bytes_fwd(m, 1, 1, 1, 1) / hbm
    print(f"DeepSeek-V4 memory-bound forward {_ms(mb)} ms")
    al, w = gemms_time_bwd_split(x[2:5], 1, g, "mxfp8")   # the indexer's compressor, wq_b,
    print(f"indexer projections' data gradient {_ms(al - w)} ms a layer, "  # weights_proj
          f"{round(float(al - w) * STEP_LAYERS, 3)} s a step (0 where their detached inputs "
          f"are priced, §5.164)")
    if hasattr(dc, "sinkhorn_time"):     # §5.164: Sinkhorn, MTP layer, measured backward
        sf, sb = dc.sinkhorn_time(m, 1, 1, 1, False, hbm)
        print(f"Sinkhorn kernels forward {_ms(sf)} ms, backward {_ms(sb)} ms a layer")
        v = m.mtp_layer_model()
        vf, vb = at.attention_time_fwd(v, 1, 1, 1, True, g, 1.0, get_profile("nemo"))
        print(f"MTP module's sliding-window layer: attention forward {_ms(vf)} ms, "
              f"backward {_ms(vb)} ms")
        print(f"sparse core backward at cuDNN's measured rate {_ms(dc.core_time_bwd(m, 1, 1, g))}"
              f" ms a layer ({round(2.5 * fc / float(dc.core_time_bwd(m, 1, 1, g)) / 1e15, 2)}"
              f" PFLOPS)")
    bound = f + b - (T * dc.loss_bytes_per_token(m) / hbm if dsa else 0.0)
    print(f"attention's compute-bound kernels at half their rate: "
          f"+{round(float(bound) * STEP_LAYERS, 3)} s a step")


if __name__ == "__main__":
    main()
