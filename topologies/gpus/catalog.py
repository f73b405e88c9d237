"""The GPU catalog: each part's datasheet figures (dense peaks, HBM, board power, SMs), its
measured efficiencies and the public source of each, looked up by name or alias (``get_gpu``).

Units as ``GPU`` (``topologies.gpus.spec``): FLOP/s, bytes, bytes/s; the table rows give
TFLOP/s, GiB and TB/s (``gpu_from_datasheet``). The sustained-clock rules the Blackwell rows'
efficiencies are derived with live in ``topologies.gpus.sustained``.
"""
from __future__ import annotations

from dataclasses import replace

from topologies.errors import SpecError
from topologies.gpus.host_link import HOST_LINK
from topologies.gpus.spec import ATTN_EXP_REF_RATE, BLACKWELL_ULTRA_EXP_RATE, GPU
from topologies.gpus.spec import gpu_from_datasheet as _g   # short, for the table's rows
from topologies.gpus.sustained import (B200_FP8_MAMF, GB200_FP8_MAMF, GB200_FP8_SUSTAINED_RATIO,
                                       GB300_FP4_PEAK, GB300_FP8_PEAK, HOPPER_FP8,
                                       SM103_FP4_OVER_FP8, sm100_fp8_ratio, sustained_ratio)

# Datasheet values (dense). hbm_gib is the usable capacity the driver reports.
# matmul_efficiency (sustained large-GEMM TFLOP/s / datasheet peak), from mamf-finder
# (github.com/stas00/ml-engineering, compute/accelerator; details in docs/calibration.md):
#   A100 SXM   0.80  MAMF 271.2/312 = 0.869 at the 1410 MHz boost clock, times the clock A100
#                    sustains at its 400 W limit under dense tensor work (1305 MHz, NVIDIA's
#                    HPL Rpeak clock): 0.869 * 1305/1410 = 0.804
#   H100 SXM   0.75  node MSMF of 8 x H200 (same GH100 die, same 700 W): 727-755 TFLOP/s,
#                    slowest GPU 745 -> 745/989 = 0.753; fp8: MAMF 1402.6/1979 = 0.709 times
#                    the bf16 sustained/burst ratio 745/794.5 -> 0.665
#   H200       0.75  as H100 (measured directly: node MSMF 755, slowest 727-745);
#                    fp8 MAMF 1453.4/1979 = 0.734 * 745/834 -> 0.66
#   B200       0.63  node MSMF of 8 x B200: median 1439, slowest 1421 -> 1421/2250 = 0.632;
#                    fp8 MAMF 3432.5/4500 = 0.763 times GB200's measured fp8 ratio carried to
#                    1000 W by the power rule, 0.759 (1000/1200)^(1/3) = 0.714 -> 0.545
#                    (``sm100_fp8_ratio``, §5.77; until §5.77 the bf16 ratio 0.814 -> 0.62)
#   MI300X     0.51  MAMF 668.4/1307.4 = 0.511 (the card sits at its 750 W cap from the first
#                    kernel, so sustained = burst)
#   H100 PCIe  0.62  MAMF 499.5/756 = 0.661 (mag-/gpu_benchmark mamf table) * 745/794.5
#   H100 96GB 500 W (Grand Teton) 0.67: H100 SXM's 0.753 times the clock ratio at 500 W vs
#                    700 W under the cubic power-clock rule, (500/700)^(1/3) = 0.894
#   V100       0.80  not measured by mamf-finder; kept (V100 cuBLAS fp16 ~100 of 125 TFLOP/s)
# Blackwell parts without a node MSMF: their MAMF (burst) times the clock they sustain at their
# own power limit. B200's measured sustained/burst ratio, 1421/1745 = 0.814 at 1000 W over
# 148 SMs, scaled by the power each SM may draw: under DVFS dynamic power ~ f·V² ~ f³, so the
# sustained clock goes as (W per SM)^(1/3) (the rule H100-96GB-500W uses), capped at the burst
# clock (``sustained_ratio``, ``topologies.gpus.sustained``):
#   B300  (160 SMs, 1100 W): 0.814 (1.1 · 148/160)^(1/3) = 0.819; bf16 MAMF 1769.0/2250,
#         fp8 3353.3/4500 -> 0.64, 0.61
#   GB200 (148 SMs, 1200 W, liquid-cooled): bf16 the rule, 0.814 · 1.2^(1/3) = 0.865; fp8
#         measured instead (§5.41): 0.759, the sustained fp8 GEMM rate of one public harness
#         (AZURE_FP8_SUSTAINED) through H100 and H200 over MAMF (the rule is 14 % above it; the
#         harness ran fp8 only); bf16 MAMF 1822.0/2500, fp8 3615.6/5000 -> 0.63, 0.55
#   GB300 (160 SMs, 1400 W, liquid-cooled): 0.814 (1.4 · 148/160)^(1/3) = 0.887 (the same
#         harness gives 0.872: the rule is kept, 1.8 % above it); no MAMF published: GB200's
#         burst fractions (same 2.5/5 PFLOP/s datasheet rates) -> 0.65, 0.64
# AMD parts (sustained = burst, as MI300X), MAMF over the datasheet peak:
#   MI325X     784.9/1307.4 -> 0.60 (1000 W)
#   MI355X     1565.0/2516.6 -> 0.62 (datasheet 2.5 PFLOP/s = 256 CUs x 4096 FLOP/clk x 2.4 GHz)
# fp4 GEMMs have no public MAMF. Blackwell Ultra (B300, GB300; sm_103): the fp8 efficiency times
# GB300's sustained fp4-over-fp8 fraction on the Azure harness (``SM103_FP4_OVER_FP8``, 0.871:
# NVFP4 runs 2.61x fp8 where the peaks are 3x; docs/calibration.md §5.178) -> 0.56, 0.53.
# B200, GB200 (sm_100): the fp8 fraction (GPU.gemm_efficiency; the sm_100 sources disagree).

#: B200's HBM3e bandwidth (TB/s): NVIDIA's Blackwell datasheet (nvdam.widen.net/s/wwnsxrhm2w/
#: blackwell-datasheet-3384703, "Individual Blackwell GPU Specifications", HGX B200 column)
#: gives 7.7, as read by ai-dynamo/aiconfigurator PR #1246 and pytorch/pytorch PR #194297
#: (``dram_bw_gbs=7700``); the DGX B200 datasheet's 64 TB/s per 8 GPUs (8.0) is the older figure.
#: The driver agrees: a 7680-bit bus (not 8 x 1024) at a 3996 MHz memory clock, double data
#: rate, 7680/8 · 3996e6 · 2 = 7.672e12 B/s (pytorch/ao PR #4002, ``cudaDeviceProp`` and
#: ``nvidia-smi clocks.max.mem``); docs/calibration.md §5.117
B200_HBM_TBPS = 7.7
B200_HBM_BUS_BITS = 7680        # memory bus width the driver reports (bits)
B200_HBM_CLOCK_HZ = 3996e6      # maximum memory clock nvidia-smi reports (Hz, DDR)

# hbm_gib of the 288 GB parts: usable capacity as reported on the part (270 GiB B300, 279 GiB
# GB300: Verda, "NVIDIA GB300 NVL72: GPU Architecture & Performance", per-GPU table); MI355X
# publishes no TF32 rate (left out).
# tdp_w: the board power of the part as sold in the preset's system (W).
# Sources (dense rates; "sparse" datasheet figures halved):
_NV_HGX = "NVIDIA HGX platform specifications (nvidia.com/en-us/data-center/hgx)"
_SRC = {
    "H100": "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100)",
    "H800": "NVIDIA H800 Tensor Core GPU (SXM5) specifications: H100 SXM5's dense rates, "
            "80 GB HBM3 at 3.35 TB/s, NVLink 400 GB/s (bidirectional), up to 700 W",
    "H200": "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200): "
            "141 GB HBM3e, 4.8 TB/s, 989 TFLOP/s bf16, 1979 fp8, 700 W",
    "B200": "NVIDIA DGX B200 datasheet (resources.nvidia.com/en-us-dgx-systems/dgx-b200-"
            "datasheet): 72 PFLOP/s fp8 training, 144 PFLOP/s fp4 inference (sparse) per 8 "
            "GPUs, 1,440 GB; NVIDIA Blackwell datasheet (HGX B200): 7.7 TB/s HBM3e; "
            + _NV_HGX + ": 1000 W",
    "B300": "NVIDIA DGX B300 datasheet (resources.nvidia.com/en-us-dgx-systems/dgx-b300-"
            "datasheet) and " + _NV_HGX + ": HGX B300 36 PFLOP/s bf16, 72 fp8 (sparse), "
            "108 PFLOP/s dense fp4 per 8 GPUs, 2.3 TB (288 GB/GPU), 8 TB/s; 1100 W",
    "GB200": "NVIDIA GB200 NVL72 specifications (nvidia.com/en-us/data-center/gb200-nvl72): "
             "per 72 GPUs 360 PFLOP/s bf16, 720 fp8, 1,440 fp4 (sparse), up to 13.4 TB HBM3e "
             "(186 GB/GPU), 576 TB/s, NVLink 130 TB/s; 1200 W per GPU",
    "GB300": "NVIDIA GB300 NVL72 specifications (nvidia.com/en-us/data-center/gb300-nvl72): "
             "per 72 GPUs 1,080 PFLOP/s dense fp4, 720 fp8 and 360 bf16 (sparse), 20 TB HBM3e "
             "(288 GB/GPU), 576 TB/s, 800 Gb/s ConnectX-8 per GPU; 1400 W per GPU",
    "MI325X": "AMD Instinct MI325X specifications (amd.com/en/products/accelerators/instinct/"
              "mi300/mi325x.html): 1307.4 TFLOP/s bf16, 2614.9 fp8, 256 GB HBM3E, 6 TB/s, "
              "1000 W",
    "MI355X": "AMD Instinct MI355X specifications (amd.com/en/products/accelerators/instinct/"
              "mi350/mi355x.html): 2.5 PFLOP/s bf16, 5 fp8, 10 MXFP4 (dense), 288 GB HBM3E, "
              "8 TB/s, 1400 W",
}
_BW = ("mxfp8", "mxfp4", "nvfp4")   # Blackwell block-scaled MMA (tcgen05)
_B300_FP8 = 3353.3 / 4500 * sustained_ratio(1100, 160)           # fp8 efficiencies of the
_GB300_FP8 = GB200_FP8_MAMF / 5000 * sustained_ratio(1400, 160)  # sm_103 parts (above)
# The large-GEMM output tile of Volta/Ampere cuBLAS, one thread block per SM: NVIDIA "Matrix
# Multiplication Background User's Guide" (DU-09799-001), §2.3 (256x128 and 128x256 are the
# most efficient tiles) and §3.2 (A100: 108 SMs, 256x128 tiles, one block per SM, a wave of
# 108 tiles)
AMPERE_WAVE_TILE = (256, 128)
_CATALOG = [
    _g("V100-SXM2-32GB", 15.7, 15.7, 125, None, 32, 0.9, 0.80, 0.45, aliases=("V100",),
       sms=80, tdp=300, wave=AMPERE_WAVE_TILE),
    _g("A100-SXM4-40GB", 19.5, 156, 312, None, 40, 1.555, 0.80, 0.60, aliases=("A100-40GB",),
       sms=108, tdp=400, wave=AMPERE_WAVE_TILE),
    _g("A100-SXM4-80GB", 19.5, 156, 312, None, 80, 2.039, 0.80, 0.60,
       aliases=("A100", "A100-80GB", "A100-SXM-80GB"), sms=108, tdp=400,
       wave=AMPERE_WAVE_TILE),
    _g("H100-SXM5-80GB", 67, 494.7, 989.4, 1978.9, 79.6, 3.35, 0.75, 0.55,
       aliases=("H100", "H100-SXM", "H100-SXM-80GB", "H100-80GB"),
       fp8_eff=HOPPER_FP8["H100-SXM5-80GB"], fa2=0.35,
       sms=132, tdp=700, src=_SRC["H100"], tn_only=True),
    # H800 SXM5: the export variant of H100 SXM5 (same GH100 die, clocks, tensor rates, HBM3
    # and 700 W), NVLink cut to 400 GB/s bidirectional and FP64 to 1 TFLOP/s; efficiencies
    # as H100 SXM (the GEMM path is unchanged)
    _g("H800-SXM5-80GB", 67, 494.7, 989.4, 1978.9, 79.6, 3.35, 0.75, 0.55,
       aliases=("H800", "H800-SXM"), fp8_eff=HOPPER_FP8["H100-SXM5-80GB"], fa2=0.35, sms=132,
       tdp=700, src=_SRC["H800"], tn_only=True),
    _g("H100-PCIe-80GB", 51, 378, 756, 1513, 79.6, 2.0, 0.62, 0.50, aliases=("H100-PCIe",),
       fp8_eff=0.55, fa2=0.32, sms=114, tdp=350, src=_SRC["H100"], tn_only=True),
    _g("H100-96GB-500W", 67, 494.7, 989.4, 1978.9, 94.5, 2.4, 0.67, 0.45,
       aliases=("H100-96GB",), fp8_eff=0.595, fa2=0.29, sms=132, tdp=500, tn_only=True),
    _g("H200-SXM-141GB", 67, 494.7, 989.4, 1978.9, 140.0, 4.8, 0.75, 0.56, aliases=("H200",),
       fp8_eff=HOPPER_FP8["H200-SXM-141GB"], fa2=0.35, sms=132, tdp=700, src=_SRC["H200"],
       tn_only=True),
    _g("B200-SXM-180GB", 80, 1100, 2250, 4500, 180.0, B200_HBM_TBPS, 0.63, 0.55,
       aliases=("B200",),
       fp8_eff=B200_FP8_MAMF / 4500 * sm100_fp8_ratio(1000, 148), sms=148, fp4=9000, blocks=_BW, tdp=1000, src=_SRC["B200"],
       exp=ATTN_EXP_REF_RATE),
    _g("B300-SXM-288GB", 75, 1125, 2250, 4500, 270.0, 8.0,
       1769.0 / 2250 * sustained_ratio(1100, 160), 0.55, aliases=("B300",),
       fp8_eff=_B300_FP8, fp4_eff=_B300_FP8 * SM103_FP4_OVER_FP8, sms=160, fp4=13500,
       blocks=_BW, tdp=1100, src=_SRC["B300"], exp=BLACKWELL_ULTRA_EXP_RATE),
    _g("GB200", 80, 1250, 2500, 5000, 186.0, 8.0, 1822.0 / 2500 * sustained_ratio(1200, 148),
       0.55, aliases=("GB200-NVL72", "B200-NVL72"),
       fp8_eff=GB200_FP8_MAMF / 5000 * GB200_FP8_SUSTAINED_RATIO, sms=148, fp4=10000, blocks=_BW,
       tdp=1200, src=_SRC["GB200"], exp=ATTN_EXP_REF_RATE),
    _g("GB300", 80, 1250, 2500, GB300_FP8_PEAK, 279.0, 8.0,
       1822.0 / 2500 * sustained_ratio(1400, 160), 0.55, aliases=("GB300-NVL72", "B300-NVL72"),
       fp8_eff=_GB300_FP8, fp4_eff=_GB300_FP8 * SM103_FP4_OVER_FP8, sms=160, fp4=GB300_FP4_PEAK,
       blocks=_BW, tdp=1400, src=_SRC["GB300"], exp=BLACKWELL_ULTRA_EXP_RATE),
    _g("MI300X", 163.4, 653.7, 1307.4, 2614.9, 192.0, 5.3, 0.51, 0.40, vendor="amd",
       aliases=("MI300X-192GB",), sms=304, tdp=750),
    _g("MI325X", 163.4, 653.7, 1307.4, 2614.9, 256.0, 6.0, 0.60, 0.40, vendor="amd",
       aliases=("MI325X-256GB",), sms=304, tdp=1000, src=_SRC["MI325X"]),
    _g("MI355X", 157.3, None, 2516.6, 5033.2, 288.0, 8.0, 0.62, 0.40, vendor="amd",
       aliases=("MI355X-288GB",), sms=256, fp4=10066.3, blocks=("mxfp8", "mxfp4"),
       tdp=1400, src=_SRC["MI355X"]),
]

# each part's host link (``topologies.gpus.host_link``: PCIe generation or NVLink-C2C)
_CATALOG = [replace(g, host_link_bandwidth=HOST_LINK.get(g.name)) for g in _CATALOG]
GPUS: dict[str, GPU] = {g.name: g for g in _CATALOG}
_ALIASES: dict[str, str] = {a.lower(): g.name for g in _CATALOG for a in (g.name, *g.aliases)}


def find_gpu(name: str) -> GPU | None:
    """The catalog GPU whose name or alias is ``name`` (case-insensitive), or None."""
    key = _ALIASES.get(name.lower())
    return None if key is None else GPUS[key]


def get_gpu(name: str) -> GPU:
    """Look a GPU up by name or alias (case-insensitive)."""
    gpu = find_gpu(str(name).strip())
    if gpu is None:
        raise SpecError("gpu", name, f"unknown GPU; known: {', '.join(GPUS)}")
    return gpu
