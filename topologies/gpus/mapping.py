"""The file form of a GPU: a custom GPU or a measured profile read from a YAML mapping
(``gpu_from_mapping``), written back (``gpu_to_mapping``), and a profile's figures checked
against the datasheet (``check_profile_peaks``). File units: TFLOP/s, GiB, TB/s,
TeraExponentials/s; ``GPU`` holds FLOP/s, bytes, bytes/s (``topologies.gpus.spec``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from topologies.errors import SpecError
from topologies.gpu_profile import load_gpu_profile
from topologies.gpus.catalog import GPUS, find_gpu, get_gpu
from topologies.gpus.host_link import GB
from topologies.gpus.spec import (GIB, GPU, MAX_EXP_RATE, MAX_HOST_LINK, MAX_TILE, TERA,
                                   gpu_from_datasheet)
from topologies.limits import (MAX_HBM_GIB, MAX_HBM_TBPS, MAX_TFLOPS, MIN_FRACTION, MIN_HBM_TBPS,
                               MIN_TFLOPS, check_name, check_number)
from topologies.precision import BLOCK_FORMATS


def gpu_from_mapping(d: Mapping, base_dir: str | None = None) -> GPU:
    """A custom GPU from a YAML mapping: name, bf16_tflops, [fp8_tflops, fp4_tflops,
    fp32_tflops, tf32_tflops], hbm_gib, hbm_tbps, [matmul_efficiency, attention_efficiency,
    fp8_matmul_efficiency, fp4_matmul_efficiency, fa2_attention_efficiency, sm_count, vendor,
    block_formats, tdp_w, fp8_tn_only, wave_tile, exp_tera_per_s (the SFU exponential rate, TeraExponentials/s;
    ``GPU.exp_rate``), host_link_gb_per_s (GB/s per direction to host memory,
    ``GPU.host_link_bandwidth``; absent: activation offloading refused)].

    With ``profile: FILE`` (a ``topologies.gpu_profile`` file, relative to ``base_dir``): the
    GPU named by ``name`` (a catalog name), by the profile's own ``gpu:`` when ``name`` is
    absent, or the custom GPU the other keys describe, carrying the measured profile."""
    if "profile" in d:
        return _with_profile(d, base_dir)
    allowed = {"name", "bf16_tflops", "fp8_tflops", "fp4_tflops", "fp32_tflops", "tf32_tflops",
               "hbm_gib", "hbm_tbps", "matmul_efficiency", "attention_efficiency",
               "fp8_matmul_efficiency", "fp4_matmul_efficiency", "fa2_attention_efficiency",
               "sm_count", "vendor", "block_formats", "tdp_w", "fp8_tn_only", "wave_tile",
               "exp_tera_per_s", "host_link_gb_per_s"}
    unknown = sorted(str(k) for k in set(d) - allowed)
    if unknown:
        raise SpecError("gpu", unknown[0], f"unknown key; allowed: {', '.join(sorted(allowed))}")
    for req in ("name", "bf16_tflops", "hbm_gib", "hbm_tbps"):
        if req not in d:
            raise SpecError(f"gpu.{req}", None, "is required for a custom GPU")
    hi = {"hbm_gib": MAX_HBM_GIB, "hbm_tbps": MAX_HBM_TBPS, "matmul_efficiency": 1.0,
          "attention_efficiency": 1.0, "fp8_matmul_efficiency": 1.0,
          "fp4_matmul_efficiency": 1.0, "fa2_attention_efficiency": 1.0, "sm_count": 4096,
          "tdp_w": 1e5, "exp_tera_per_s": MAX_EXP_RATE / TERA,
          "host_link_gb_per_s": MAX_HOST_LINK / GB}
    # sanity floors on the rates whose reciprocals the cost model takes (a TFLOP/s, TB/s or
    # efficiency of 5e-324 made a step of NaN seconds)
    floor = {"hbm_tbps": MIN_HBM_TBPS, "matmul_efficiency": MIN_FRACTION,
             "attention_efficiency": MIN_FRACTION, "fp8_matmul_efficiency": MIN_FRACTION,
             "fp4_matmul_efficiency": MIN_FRACTION, "fa2_attention_efficiency": MIN_FRACTION,
             "exp_tera_per_s": MIN_TFLOPS,
             **{k: MIN_TFLOPS for k in ("bf16_tflops", "fp8_tflops", "fp4_tflops",
                                        "fp32_tflops", "tf32_tflops")}}
    nums = {}
    for k in ("bf16_tflops", "fp8_tflops", "fp4_tflops", "fp32_tflops", "tf32_tflops",
              "hbm_gib", "hbm_tbps", "matmul_efficiency", "attention_efficiency",
              "fp8_matmul_efficiency", "fp4_matmul_efficiency", "fa2_attention_efficiency",
              "sm_count", "tdp_w", "exp_tera_per_s", "host_link_gb_per_s"):
        if k in d:
            nums[k] = check_number(f"gpu.{k}", d[k], 0.0, hi.get(k, MAX_TFLOPS), lo_open=True,
                                   sane_lo=floor.get(k))
    if "sm_count" in nums and not float(nums["sm_count"]).is_integer():
        raise SpecError("gpu.sm_count", d["sm_count"], "must be an integer > 0")
    blocks = d.get("block_formats", [])
    if not isinstance(blocks, (list, tuple)):
        raise SpecError("gpu.block_formats", blocks,
                        f"must be a list among {', '.join(BLOCK_FORMATS)}")
    blocks = tuple(check_name("gpu.block_formats", b) for b in blocks)
    tn_only = d.get("fp8_tn_only", False)
    if not isinstance(tn_only, bool):
        raise SpecError("gpu.fp8_tn_only", tn_only, "must be true or false")
    wave = d.get("wave_tile")
    if wave is not None:
        if not (isinstance(wave, (list, tuple)) and len(wave) == 2):
            raise SpecError("gpu.wave_tile", wave, "must be a list of two integers (output "
                            "tile rows, columns)")
        sides = [check_number("gpu.wave_tile", x, 1, MAX_TILE) for x in wave]
        if not all(x.is_integer() for x in sides):
            raise SpecError("gpu.wave_tile", wave, "must be two integers (output tile rows, "
                            "columns)")
        wave = (int(sides[0]), int(sides[1]))
    bf16 = nums["bf16_tflops"]
    gpu = gpu_from_datasheet(
        check_name("gpu.name", d["name"]), nums.get("fp32_tflops", bf16 / 16),
        nums.get("tf32_tflops", bf16 / 2),
        bf16, nums.get("fp8_tflops"), nums["hbm_gib"], nums["hbm_tbps"],
        nums.get("matmul_efficiency", 0.8), nums.get("attention_efficiency", 0.5),
        check_name("gpu.vendor", d.get("vendor", "custom")),
        fp8_eff=nums.get("fp8_matmul_efficiency"), fp4_eff=nums.get("fp4_matmul_efficiency"),
        fa2=nums.get("fa2_attention_efficiency"),
        sms=int(nums["sm_count"]) if "sm_count" in nums else None,
        fp4=nums.get("fp4_tflops"), blocks=blocks, tdp=nums.get("tdp_w"),
        tn_only=tn_only, wave=wave,
        exp=nums["exp_tera_per_s"] * TERA if "exp_tera_per_s" in nums else None)
    if "host_link_gb_per_s" in nums:
        gpu = replace(gpu, host_link_bandwidth=nums["host_link_gb_per_s"] * GB)
    return gpu


def _with_profile(d: Mapping, base_dir: str | None) -> GPU:
    prof = load_gpu_profile(d["profile"], base_dir)
    rest = {k: v for k, v in d.items() if k != "profile"}
    if set(rest) <= {"name"}:
        name = rest.get("name", prof.gpu)
        if name is None:
            raise SpecError("gpu.profile", prof.path, "names no GPU (no gpu: key in the file); "
                            "give gpu: {name: GPU, profile: FILE}")
        try:
            base = get_gpu(check_name("gpu.name", name))
        except SpecError as e:
            if "name" in rest:
                raise
            raise SpecError("gpu.profile", prof.path, f"names gpu: {prof.gpu}, not a catalog "
                            f"GPU ({e.rule}); give gpu: {{name: GPU, profile: FILE}}") from None
        measured = find_gpu(prof.gpu) if "name" in rest and prof.gpu is not None else None
        if measured is not None and measured.name != base.name:
            raise SpecError("gpu.profile", prof.path, f"was measured on {prof.gpu}, not on "
                            f"{base.name} (a profile applies to the GPU it measured)")
    else:
        base = gpu_from_mapping(rest)
    check_profile_peaks(prof, base)
    return replace(base, profile=prof)


def check_profile_peaks(prof: Any, gpu: GPU, field: str = "gpu.profile") -> None:
    """Refuse a profile GEMM that ran faster than ``gpu``'s dense peak for its precision
    (``2·m·n·k / seconds > peak``): a datasheet peak is the tensor cores' rate at the highest
    clock, which no measurement exceeds (a 10^-12 s GEMM made the compute time vanish and
    went unnoticed). Points in a precision the GPU lacks are not read (``gemm_ratio``).
    Likewise the usable HBM bandwidth the memory kernels give (``GpuProfile.hbm_bandwidth``,
    the one the cost model reads) above the datasheet's: no copy outruns the DRAM."""
    bw = prof.hbm_bandwidth
    if bw is not None and bw > gpu.hbm_bandwidth:
        raise SpecError(f"{field}.memory", f"{bw / 1e12:.4g} TB/s",
                        f"the memory kernels' usable HBM bandwidth (median of the large "
                        f"copies) is above {gpu.name}'s datasheet {gpu.hbm_bandwidth / 1e12:.4g} "
                        "TB/s (no measurement beats it)")
    for i, p in enumerate(prof.gemm):
        if not gpu.supports(p.dtype):
            continue
        peak = gpu.peak(p.dtype)
        if p.flops / p.seconds > peak:
            raise SpecError(f"{field}.gemm[{i}].seconds", p.seconds,
                            f"a {p.dtype} GEMM {p.m}x{p.n}x{p.k} in that time runs "
                            f"{p.flops / p.seconds / 1e12:.4g} TFLOP/s, above {gpu.name}'s "
                            f"dense peak {peak / 1e12:.4g} TFLOP/s (no measurement beats it)")


def gpu_to_mapping(gpu: GPU) -> str | dict:
    """The file form of ``gpu``: its catalog name, or for a custom GPU the mapping that
    ``gpu_from_mapping`` reads back (so a resolved cluster can be given again as input);
    a profiled GPU adds ``profile:`` (the absolute path of its file)."""
    if gpu.profile is not None:
        plain = gpu_to_mapping(replace(gpu, profile=None))
        out = {"name": plain} if isinstance(plain, str) else dict(plain)
        out["profile"] = gpu.profile.path
        return out
    if GPUS.get(gpu.name) == gpu:
        return gpu.name
    d: dict = {"name": gpu.name}
    for dtype in ("bf16", "fp8", "fp4", "fp32", "tf32"):
        if dtype in gpu.peak_flops:
            d[f"{dtype}_tflops"] = gpu.peak_flops[dtype] / TERA
    d.update(hbm_gib=gpu.hbm_bytes / GIB, hbm_tbps=gpu.hbm_bandwidth / 1e12,
             matmul_efficiency=gpu.matmul_efficiency,
             attention_efficiency=gpu.attention_efficiency, vendor=gpu.vendor)
    if gpu.fp8_matmul_efficiency is not None:
        d["fp8_matmul_efficiency"] = gpu.fp8_matmul_efficiency
    if gpu.fp4_matmul_efficiency is not None:
        d["fp4_matmul_efficiency"] = gpu.fp4_matmul_efficiency
    if gpu.fa2_attention_efficiency is not None:
        d["fa2_attention_efficiency"] = gpu.fa2_attention_efficiency
    if gpu.sm_count is not None:
        d["sm_count"] = gpu.sm_count
    if gpu.block_formats:
        d["block_formats"] = list(gpu.block_formats)
    if gpu.tdp_w is not None:
        d["tdp_w"] = gpu.tdp_w
    if gpu.fp8_tn_only:
        d["fp8_tn_only"] = True
    if gpu.wave_tile is not None:
        d["wave_tile"] = list(gpu.wave_tile)
    if gpu.exp_rate is not None:
        d["exp_tera_per_s"] = gpu.exp_rate / TERA
    if gpu.host_link_bandwidth is not None:
        d["host_link_gb_per_s"] = gpu.host_link_bandwidth / GB
    return d
