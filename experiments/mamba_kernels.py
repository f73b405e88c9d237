"""The Mamba-2 SSD scan against its public timings, and one Mamba-2 layer's time by part
(docs/calibration.md §5.149).

Prints (1) every measured point of ``strategies.cost.mamba_kernels`` (vllm-project/vllm#27299,
H100, ``_mamba_chunk_scan_combined_fwd``) beside the roofline the cost model prices and the
rule's time; (2) the scan of one rank of each hybrid row's layout: grid, roofline forward and
backward (the §5.146 rule), the backward's eager bytes, the factor, the rule's seconds;
(3) the mean Mamba layer's forward and backward milliseconds by part on the 56B rows' layout;
(4) the scan's kernels one by one on that layout's rank (``ssd_traffic``, §5.160): HBM MB,
GFLOP, and milliseconds at the usable HBM rate and at the fused-attention FLOP rate.

    python experiments/mamba_kernels.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strategies.cost import mamba_kernels as mk  # noqa: E402
from strategies.cost import mamba_mixer as mx  # noqa: E402
from strategies.cost.hbm_rate import usable_hbm  # noqa: E402
from strategies.presets import model_preset  # noqa: E402
from topologies.gpus import get_gpu  # noqa: E402

#: (model, GPU, micro-batch, tp) of the hybrid_2026.json rows' layouts
LAYOUTS = (("nemotron-h-56b", "H100-SXM5-80GB", 1, 8),
           ("nemotron3-nano-30b-a3b", "H100-SXM5-80GB", 1, 1),
           ("nemotron3-nano-30b-a3b", "B200", 2, 1),
           ("nemotron3-nano-30b-a3b", "B200", 4, 1))


def measured_points() -> None:
    g = get_gpu(mk.BENCH_GPU)
    hbm, flop = usable_hbm(g), g.peak("bf16") * g.attention_efficiency
    H, P, G, N, Q = mk.BENCH_SHAPE
    print(f"(1) vllm#27299 'Original' on H100: H {H}, P {P}, G {G}, N {N}, Q {Q}, batch 1, "
          "no gate")
    print(f"{'tokens':>7} {'prog/SM':>8} {'measured ms':>12} {'bytes ms':>9} {'FLOP ms':>8} "
          f"{'efficiency':>10} {'rule ms':>8}")
    for (T, rate), (w, e) in zip(mk.SSD_FWD_POINTS, mk.efficiency_points()):
        byt = float(mx.shape_bytes(T, 1, H, G, P, N, Q, gate=False)) / hbm
        fl = float(mx.shape_flops(T, 1, H, G, P, N, Q)) / flop
        rule = max(byt, fl) * float(mk.scan_factor(T, 1, H, Q, g))
        print(f"{T:>7} {w:>8.1f} {T / rate * 1e3:>12.3f} {byt * 1e3:>9.3f} {fl * 1e3:>8.3f} "
              f"{e:>10.3f} {rule * 1e3:>8.3f}")


def layouts() -> None:
    print("\n(2) one rank's scan, one micro-batch: roofline (the §5.146 rule), eager bytes, "
          "factor, rule")
    print(f"{'model':<24} {'GPU':<15} {'b':>2} {'tp':>3} {'prog/SM':>8} {'fwd roof':>9} "
          f"{'bwd roof':>9} {'eager MB':>9} {'factor':>7} {'fwd ms':>7} {'bwd ms':>7}")
    for name, gname, b, tp in LAYOUTS:
        m, g = model_preset(name), get_gpu(gname)
        hbm = usable_hbm(g)
        flop = g.peak("bf16") * g.attention_efficiency
        roof = [max(float(mx.ssd_flops(m, b, tp, 1, bw)) / flop,
                    float(mx.ssd_bytes(m, b, tp, 1, bw)) / hbm) for bw in (False, True)]
        eager = float(mx.ssd_eager_bytes_bwd(m, b, tp, 1, g.sm_count))
        H, Q = m.mamba_num_heads / tp, m.mamba_chunk_size
        w = float(mk.programs_per_sm(m.seq_length, b, H, Q, g.sm_count))
        f = float(mk.scan_factor(m.seq_length, b, H, Q, g))
        t = [float(mx.scan_time(m, b, tp, 1, g, hbm, bw)) for bw in (False, True)]
        print(f"{name:<24} {gname:<15} {b:>2} {tp:>3} {w:>8.1f} {roof[0] * 1e3:>9.3f} "
              f"{roof[1] * 1e3:>9.3f} {eager / 1e6:>9.1f} {f:>7.3f} {t[0] * 1e3:>7.3f} "
              f"{t[1] * 1e3:>7.3f}")


def layer_parts() -> None:
    from strategies.cost.elementwise_bytes import norm_bytes_per_token
    from strategies.cost.gemm_time import gemms_time_fwd
    m, g = model_preset("nemotron-h-56b"), get_gpu("H100-SXM5-80GB")
    hbm, b, tp = usable_hbm(g), 1, 8
    gem = float(gemms_time_fwd(mx.mamba_gemms(m, b, tp), tp, g, "fp8"))
    scan = [float(mx.scan_time(m, b, tp, 1, g, hbm, bw)) for bw in (False, True)]
    elem = float(mx.mixer_elementwise_bytes_fwd(m, b, tp)) / hbm
    norm = norm_bytes_per_token(m) * m.seq_length / tp / hbm     # the pre-norm under SP
    print("\n(3) one Mamba-2 layer of the 56B, tp 8 SP, fp8, H100, one micro-batch (ms): "
          "in_proj+out_proj forward GEMMs, scan fwd/bwd, conv+gated norm fwd, pre-norm fwd")
    print(f"  GEMMs fwd {gem * 1e3:.3f}  scan fwd {scan[0] * 1e3:.3f}  scan bwd "
          f"{scan[1] * 1e3:.3f}  conv+norm fwd {elem * 1e3:.3f}  pre-norm fwd {norm * 1e3:.3f}")


def kernel_table() -> None:
    """Print ``ssd_traffic``'s per-kernel table (bytes and FLOP units, their seconds at the
    usable HBM rate and the attention-efficiency peak) for Nemotron-H 56B's mixer at tp 8 on
    an H100."""
    from strategies.cost import ssd_traffic as st
    m, g = model_preset("nemotron-h-56b"), get_gpu("H100-SXM5-80GB")
    hbm, flop, tp = usable_hbm(g), g.peak("bf16") * g.attention_efficiency, 8
    shape = (m.seq_length, 1, m.mamba_num_heads / tp, m.mamba_num_groups / tp,
             m.mamba_head_dim, m.mamba_state_dim, m.mamba_chunk_size)
    ub, uf = st.unit_bytes(*shape), st.flop_units(*shape)
    print("\n(4) the 56B rank's SSD kernels (tp 8: H 32, P 64, G 1, N 256, Q 128, 8192 tokens; "
          "H100 usable HBM, fused-attention FLOP rate)")
    print(f"{'pass':<4} {'kernel':<32} {'line':<6} {'MB':>8} {'GFLOP':>7} {'HBM ms':>7} "
          f"{'FLOP ms':>8}")
    for tag, rows in (("fwd", st.SSD_FWD_KERNELS), ("bwd", st.SSD_BWD_KERNELS)):
        tb = tf = 0.0
        for name, line, kb, kf in rows:
            b_, f_ = float(st.dot(kb, ub)), float(st.dot(kf, uf))
            tb, tf = tb + b_, tf + f_
            print(f"{tag:<4} {name:<32} {line:<6} {b_ / 1e6:>8.1f} {f_ / 1e9:>7.2f} "
                  f"{b_ / hbm * 1e3:>7.3f} {f_ / flop * 1e3:>8.3f}")
        print(f"{tag:<4} {'all':<32} {'':<6} {tb / 1e6:>8.1f} {tf / 1e9:>7.2f} "
              f"{tb / hbm * 1e3:>7.3f} {tf / flop * 1e3:>8.3f}")
    T, H = m.seq_length, m.mamba_num_heads / tp
    for name, per in st.BWD_EAGER_PER_HEAD:
        print(f"bwd  eager {name:<26} {'':<6} {T * H * per / 1e6:>8.1f}")
    eager = float(mx.ssd_eager_bytes_bwd(m, 1, tp, 1, g.sm_count))
    conv = float(mx.conv_recompute_bytes(m, 1, tp))
    print(f"bwd  eager all, head-split partials, conv recompute pass: {eager / 1e6:.1f} MB "
          f"(conv {conv / 1e6:.1f} MB), {eager / hbm * 1e3:.3f} ms")


if __name__ == "__main__":
    measured_points()
    layouts()
    layer_parts()
    kernel_table()
