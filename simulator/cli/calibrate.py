"""``paraplan calibrate``: measure the GPU and write a GPU profile a cluster file can name
(docs/calibration.md, "calibrate"; docs/cli.md)."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

from simulator.calibrate.backend import BACKENDS, get_backend
from simulator.calibrate.run import CalibrationSpec, calibrate, collective_groups, summarize
from simulator.cli.common import (CliError, Once, add_json, atomic_write_text, check_output,
                                  emit_json, table)
from strategies.hf_config import load_model_arg
from topologies.errors import SpecError
from topologies.gpu_profile import GEMM_DTYPES, profile_to_mapping
from topologies.gpus import get_gpu
from topologies.limits import MAX_SEQ, check_int, parse_int_text

DEFAULT_MODELS = ("llama3-8b", "llama3-70b")


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="measure this machine's GPU and write a GPU profile "
                       "(needs the calibrate extra: PyTorch)")
    p.add_argument("--out", required=True, action=Once, metavar="FILE",
                   help="the profile to write (.yaml, .yml or .json)")
    p.add_argument("--backend", default="torch", action=Once, choices=BACKENDS,
                   help="torch (default: this machine's GPUs) or fake (synthetic timings "
                   "from the catalog's model at known factors, for tests)")
    p.add_argument("--gpu", default=None, action=Once, metavar="NAME",
                   help="the catalog GPU the profile is for (default: guessed from the "
                   "device name; the fake backend imitates it, default H100)")
    p.add_argument("--gpus", default="1", action=Once, metavar="N",
                   help="fake backend only: GPUs it pretends to have (collectives when > 1)")
    p.add_argument("--coll-gpus", default=None, action=Once, metavar="LIST",
                   help="group sizes (GPUs) whose NCCL collectives to measure, each >= 2 and "
                   "dividing the machine's GPU count; each group is consecutive ranks, as "
                   "placement lays tp groups (default: every power of two from 2 dividing "
                   "the count, and the count: 2,4,8 on 8 GPUs)")
    p.add_argument("--model", action="append", default=None, metavar="M",
                   help="a model whose layer shapes to time (repeatable; default "
                   + ", ".join(DEFAULT_MODELS) + ")")
    p.add_argument("--tp", default="1,2,4,8", action=Once, metavar="LIST",
                   help="tensor-parallel degrees whose shards to time (default 1,2,4,8)")
    p.add_argument("--mbs", default="1,2", action=Once, metavar="LIST",
                   help="micro-batch sizes, sequences (default 1,2)")
    p.add_argument("--seqs", default="1024,2048,4096,8192,16384", action=Once, metavar="LIST",
                   help="attention sequence lengths, tokens (default 1024 ... 16384)")
    p.add_argument("--dtypes", default="bf16,fp8", action=Once, metavar="LIST",
                   help="GEMM rates to time, where the GPU has them (default bf16,fp8)")
    add_json(p)
    p.set_defaults(func=run)


def _ints(flag: str, text: str, hi: int) -> tuple[int, ...]:
    items = [t.strip() for t in str(text).split(",")]
    if not items or any(not t for t in items):
        raise CliError(flag, text, "must be a comma-separated list of integers >= 1")
    return tuple(dict.fromkeys(check_int(flag, parse_int_text(flag, t), 1, hi) for t in items))


def run(args: argparse.Namespace) -> int:
    check_output(args.out, "--out", (".yaml", ".yml", ".json"))
    # a precision named twice is measured once (as --tp's and --mbs's repeats)
    dtypes = tuple(dict.fromkeys(t.strip() for t in args.dtypes.split(",")))
    for d in dtypes:
        if d not in GEMM_DTYPES:
            raise CliError("--dtypes", d, f"must be among {', '.join(GEMM_DTYPES)}")
    gpus = _ints("--gpus", args.gpus, 1024)
    if len(gpus) != 1:
        raise CliError("--gpus", args.gpus, "must be one integer >= 1 (the GPUs the fake "
                       "backend pretends to have)")
    gpus = gpus[0]
    if gpus > 1 and args.backend != "fake":
        raise CliError("--gpus", gpus, "is for the fake backend only (torch uses every "
                       "visible GPU)")
    if args.gpu is not None:
        get_gpu(args.gpu)   # an unknown name is refused before any measuring
    coll = None
    if args.coll_gpus is not None:
        items = [t.strip() for t in str(args.coll_gpus).split(",")]
        if any(not t for t in items):
            raise CliError("--coll-gpus", args.coll_gpus, "must be a comma-separated list of "
                           "integers >= 2")
        coll = tuple(parse_int_text("--coll-gpus", t) for t in items)
    spec = CalibrationSpec(
        models=tuple(load_model_arg(m) for m in (args.model or DEFAULT_MODELS)),
        tps=_ints("--tp", args.tp, 1024), mbs=_ints("--mbs", args.mbs, 1024),
        seqs=_ints("--seqs", args.seqs, MAX_SEQ), dtypes=dtypes)
    backend = get_backend(args.backend, args.gpu, gpus)
    # the machine's GPU count is known now: every group size is checked before measuring
    spec = replace(spec, coll_gpus=collective_groups(backend.describe()["count"], coll,
                                                     "--coll-gpus"))
    profile = calibrate(backend, spec, gpu=get_gpu(args.gpu).name if args.gpu else None,
                        flags={"dtypes": "--dtypes", "tps": "--tp"})
    mapping = profile_to_mapping(profile)
    if args.out.lower().endswith(".json"):
        text = json.dumps(mapping, indent=1) + "\n"
    else:
        import yaml
        text = yaml.safe_dump(mapping, sort_keys=False)
    atomic_write_text(args.out, text, "--out")
    try:
        gpu = get_gpu(profile.gpu) if profile.gpu else None
    except SpecError:
        gpu = None
    summary = summarize(profile, gpu)
    summary["out"] = args.out
    if args.json:
        emit_json(summary)
        return 0
    _print(summary)
    return 0


def _f(x, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def _print(s: dict) -> None:
    print(f"GPU profile of {s['device']} ({s['gpu'] or 'no catalog GPU'}, backend "
          f"{s['backend']}) -> {s['out']}")
    print("\nGEMMs (efficiency = fraction of the datasheet peak; vs model = measured / catalog "
          "model seconds, median)")
    print(table(["dtype", "shapes", "eff min", "eff median", "eff max", "catalog large",
                 "vs model"],
                [[d, r["shapes"], _f(r.get("efficiency_min")), _f(r.get("efficiency_median")),
                  _f(r.get("efficiency_max")), _f(r.get("catalog_large_gemm")),
                  _f(r.get("vs_model"))] for d, r in s["gemm"].items()]))
    if s["attention"]:
        print("\nFused attention (fraction of the bf16 peak, medians)")
        print(table(["kernel", "shapes", "fwd", "catalog fwd", "bwd", "catalog bwd"],
                    [[k, r["shapes"], _f(r.get("fwd_efficiency_median")), _f(r.get("catalog_fwd")),
                      _f(r.get("bwd_efficiency_median")), _f(r.get("catalog_bwd"))]
                     for k, r in s["attention"].items()]))
    if "hbm" in s:
        h = s["hbm"]
        print(f"\nHBM: {h['measured_Bps'] / 1e12:.3f} TB/s measured"
              + (f", catalog model {h['catalog_Bps'] / 1e12:.3f} TB/s "
                 f"({h['fraction_of_datasheet']:.3f} of the datasheet)" if "catalog_Bps" in h
                 else ""))
    print(f"launch gap: {_f(s['launch_gap_s'] and s['launch_gap_s'] * 1e6, '{:.2f}')} us")
    if s["collectives"]:
        print("\nNCCL collectives (best bus bandwidth, GB/s; each group of consecutive ranks)")
        gs = sorted({int(g) for per in s["collectives"].values() for g in per})
        print(table(["op", *(f"{g} GPUs" for g in gs)],
                    [[op, *(_f(per.get(g) and per[g] / 1e9, "{:.1f}") for g in gs)]
                     for op, per in s["collectives"].items()]))
