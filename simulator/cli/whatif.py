"""``paraplan whatif``: the best plan as cluster and job properties change.

``--vary KEY=V1,V2,...`` (repeatable; the variants are the cartesian product of the axes)
changes one property of the base question (``--model``, ``--cluster``, ``--global-batch``,
``--seq-len``); keys and units are in ``simulator/studies/whatif_variants.py``. Each variant gets a plan
search over the same space options (``--fix``, ``--max-mbs``, …) and reports its fastest
plan: step time, MFU, tokens/s, peak memory and, with ``--gpu-hour-cost``, the cost of a
million training tokens. Step time never rises when only bandwidth rises; the run checks it
(``checks.bandwidth_monotone``) and warns if it ever did.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from simulator.workers import MAX_WORKERS, default_workers
from simulator.cli.common import (CliError, Once, add_json, add_model_cluster, check_dtype,
                              check_output, emit_json, fmt_s, positive_float, positive_int,
                              resolve_cluster, resolve_framework, resolve_model, table)
from simulator.cli.search import (check_fixed_for_stack, fixed_plan_and_batch, merge_fixed,
                                  plan_fix, plan_framework)
from simulator.studies.network_cost import parse_network_prices
from simulator.studies.prices import PRICE_SOURCES, parse_prices
from simulator.studies.whatif_variants import KEYS, parse_vary, variants
from simulator.studies.whatif import WhatifConfig, draw, run_whatif
from strategies.search.fix_parse import parse_fix
from strategies.search.space import SpaceOptions
from topologies.gpus import GIB


def register(sub) -> None:
    p = sub.add_parser(
        "whatif", help="the best plan as cluster and job properties change",
        description="Search the best plan for each variant of the base question (the "
                    "cartesian product of the --vary axes) and compare step time, MFU, "
                    "tokens/s and cost per million tokens. Keys: " + ", ".join(KEYS) + ".")
    add_model_cluster(p, required=False)
    p.add_argument("--vary", action="append", default=None, required=True,
                   metavar="KEY=V1,V2,...",
                   help="a property and its values (repeat for more axes); keys: "
                        + ", ".join(KEYS) + " (bandwidths in Gb/s per NIC and GB/s per GPU)")
    p.add_argument("--gpu-hour-cost", action=Once, default=None, metavar="USD|default|GPU=USD,..",
                   help="price of one GPU-hour: one number for every GPU, 'default' (the "
                        "sourced table of simulator/studies/prices.py) or GPU=USD,... (that "
                        "table with these prices); adds the cost of a million training tokens")
    p.add_argument("--network-prices", action=Once, default=None,
                   metavar="switch=USD,optic_400=USD,...",
                   help="prices of the scale-out network's parts (no defaults: give your "
                        "quotes): USD per switch, per transceiver at a port speed "
                        "(optic_200, optic_400, optic_800, ...), and switch_tbps (switch "
                        "capacity per direction, default 51.2); adds the network's price to "
                        "its switch and optics counts (simulator/studies/network_cost.py)")
    p.add_argument("--power", action="store_true",
                   help="add each GPU's TDP and the energy of a million tokens (kWh, every GPU "
                        "at its TDP for the whole step)")
    g = p.add_argument_group("space (the same for every variant)")
    g.add_argument("--fix", action=Once, default=None,
                   help="fix dimensions, e.g. tp=8,schedule=1f1b or cp=8,cp_comm=a2a (the keys "
                        "of --plan less gbs)")
    g.add_argument("--plan", action=Once, default=None, metavar="P",
                   help="the shared --plan input (key=value,... or a plan file, e.g. from "
                        "search --save-plan): its keys are fixed in every variant as with "
                        "--fix, and gbs is the global batch")
    g.add_argument("--allow-cross-node-tp", action="store_true",
                   help="let tensor parallelism span nodes")
    g.add_argument("--memory-limit", action=Once, type=positive_float("--memory-limit"),
                   default=None, metavar="GIB", help="per-GPU memory limit in GiB (default: "
                   "each variant's GPU capacity less 5%%)")
    g.add_argument("--max-bubble", action=Once, type=positive_float("--max-bubble"), default=0.5,
                   help="largest pipeline bubble (pp-1)/(vpp*m) allowed (default 0.5)")
    g.add_argument("--max-mbs", action=Once, type=positive_int("--max-mbs"), default=8,
                   help="largest micro-batch size (powers of two up to it; default 8)")
    g.add_argument("--max-vpp", action=Once, type=positive_int("--max-vpp"), default=None,
                   help="largest number of interleaved model chunks (default: all)")
    g.add_argument("--exhaustive", action="store_true",
                   help="simulate every feasible plan of every variant (slow; a check)")
    e = p.add_argument_group("execution and output")
    e.add_argument("--workers", action=Once, type=positive_int("--workers", MAX_WORKERS), default=None,
                   help="parallel simulations within a variant's search (default: all cores)")
    e.add_argument("--progress", action="store_true", help="one line per variant on stderr "
                   "(default: only when stderr is a terminal)")
    e.add_argument("--plot", action=Once, default=None, metavar="F.png",
                   help="write step time, MFU and cost (or tokens/s) per variant (.png or .svg)")
    add_json(e)
    p.set_defaults(func=run)


def given_and_varied(args: argparse.Namespace, vary: list[tuple[str, list[Any]]]) -> None:
    """Refuse a job property both given (``--global-batch`` or the plan's ``gbs``,
    ``--seq-len``) and varied: every variant would replace the value given without a word."""
    given = {"global_batch": ("--global-batch", args.global_batch),
             "seq_len": ("--seq-len", args.seq_len)}
    if args.plan is not None and plan_fix(args.plan)[1] is not None:
        given["global_batch"] = ("--plan gbs", plan_fix(args.plan)[1])
    for key, values in vary:
        flag, value = given.get(key, (None, None))
        if value is not None:
            raise CliError(f"--vary {key}", ",".join(map(str, values)),
                           f"{key} is also given ({flag}={value}): vary it or give it, not both")


def config_from_args(args: argparse.Namespace) -> WhatifConfig:
    vary = parse_vary(args.vary)
    given_and_varied(args, vary)
    model, cluster = resolve_model(args), resolve_cluster(args)
    dtype = check_dtype(args.dtype)
    plan_fixed, gbs = fixed_plan_and_batch(args, model, cluster, dtype)
    opts = SpaceOptions(max_mbs=args.max_mbs, allow_cross_node_tp=args.allow_cross_node_tp,
                        memory_limit_bytes=args.memory_limit * GIB if args.memory_limit else None,
                        max_bubble=args.max_bubble, max_vpp=args.max_vpp,
                        fixed=merge_fixed(parse_fix(args.fix), plan_fixed))
    framework = resolve_framework(args, plan_framework(args.plan))
    check_fixed_for_stack(opts.fixed, framework)    # refused before any search, as search does
    vs = variants(model, cluster, gbs, vary)
    base = {"model": model.report_dict(), "cluster": cluster.name, "gpus": cluster.num_gpus,
            "gpu": cluster.gpu.name, "gpus_text": cluster.describe_gpus(), "global_batch": gbs,
            "seq_len": model.seq_length}
    return WhatifConfig(variants=vs, vary=vary, base=base, dtype=dtype, options=opts,
                        framework=framework,
                        gpu_hour_cost=(None if args.gpu_hour_cost is None
                                       else parse_prices(args.gpu_hour_cost)),
                        network_prices=parse_network_prices(args.network_prices),
                        power=args.power, exhaustive=args.exhaustive,
                        workers=args.workers or default_workers(),
                        progress=args.progress or (sys.stderr.isatty() and not args.json))


def run(args: argparse.Namespace) -> int:
    check_output(args.plot, "--plot", (".png", ".svg"))
    cfg = config_from_args(args)
    report = run_whatif(cfg)
    if args.plot:
        draw(report, args.plot)
    if args.json:
        emit_json(report)
    else:
        print(render(report))
        if args.plot:
            print(f"\nplot written to {args.plot}")
    return 0


def _num(v: float | None, missing: str) -> str:
    return missing if v is None else f"{v:.4g}"


def _value(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _network_cells(parts: dict[str, Any]) -> list[str]:
    if parts.get("error"):
        return ["?", "?", "n/a"]
    usd = parts["cost_usd"]
    return [f"{parts['switches']:,}", f"{parts['transceivers']:,}",
            "n/a" if usd is None else f"{usd / 1e6:.3g}"]


def render(rep: dict[str, Any]) -> str:
    i = rep["inputs"]
    keys = list(i["vary"])
    cost = i["gpu_hour_cost"] is not None
    power = i.get("power", False)
    gpus = i.get("gpus_text") or f"{i['gpus']} x {i['gpu']}"
    out = [f"What if: {i['model']['name']} on {i['cluster']} ({gpus}), global batch "
           f"{i['global_batch']}, seq {i['seq_len']}, {i['dtype']}, {i['framework']}; {i['variants']} variant(s), "
           "the fastest plan of each (exact top-1 of a plan search over the same space)", ""]
    prices = i.get("network_prices") or {}
    net = bool({"network", "failed_planes"} & set(keys)) or len(prices) > 1
    heads = keys + ["best plan", "step", "MFU", "tokens/s", "peak GiB"]
    heads += ["$/1M tokens"] if cost else []
    heads += ["switches", "optics", "network $M"] if net else []
    heads += ["W/GPU", "kWh/1M tokens"] if power else []
    rows = []
    for r in rep["rows"]:
        vals = [_value(r[k]) for k in keys]
        if not r["feasible"]:
            tail = _network_cells(r["network_parts"]) if net else []
            pad = [""] * (len(heads) - len(vals) - 1 - len(tail))
            rows.append(vals + [f"no feasible plan: {r['error']}"] + pad + tail)
            continue
        line = vals + [r["label"], fmt_s(r["step_time_s"]), f"{100 * r['mfu']:.1f}%",
                       f"{r['tokens_per_s']:,.0f}", f"{r['memory']['peak_gib']:.1f}"]
        line += [_num(r["cost_per_million_tokens"], "no price")] if cost else []
        line += _network_cells(r["network_parts"]) if net else []
        line += [_num(r["power_w_per_gpu"], "?"),
                 _num(r["energy_kwh_per_million_tokens"], "?")] if power else []
        rows.append(line)
    out.append(table(heads, rows, "l" * (len(keys) + 1) + "r" * (len(heads) - len(keys) - 1)))
    price = i["gpu_hour_cost"]
    if isinstance(price, (int, float)):
        out.append(f"\ncost assumes {price:g} USD per GPU-hour (every GPU of the "
                   "variant's cluster, for the whole step)")
    elif cost:
        gpus = sorted({g for r in rep["rows"] for g in r["job"]["gpu_types"]})
        out.append("\ncost per GPU-hour (USD, every GPU of the variant's cluster for the whole "
                   "step): " + "; ".join(
                       f"{g} {price[g]:g}" + (f" ({PRICE_SOURCES[g][1]})"
                                              if PRICE_SOURCES.get(g, (None,))[0] == price[g]
                                              else " (given)")
                       if g in price else f"{g} no price (give --gpu-hour-cost {g}=USD)"
                       for g in gpus))
    if net:
        out.append("\nnetwork: switches and transceivers of the scale-out network (two-tier "
                   f"Clos per plane of {prices.get('switch_tbps', 51.2):g} Tb/s switches, "
                   "two optics per link; simulator/studies/network_cost.py, "
                   "topologies/inventory.py)" + ("; network $M at the --network-prices given"
                                                 if len(prices) > 1 else
                                                 "; give --network-prices for its price"))
    if power:
        out.append("power: each GPU's TDP (topologies/gpus/catalog.py) for the whole step; GPU boards "
                   "only (no CPUs, NICs, switches or cooling): an upper bound on GPU energy")
    mono = rep["checks"]["bandwidth_monotone"]
    if mono["pairs"]:
        out.append(f"\nbandwidth check: {mono['pairs']} pair(s) that differ only by more "
                   "bandwidth; " + ("step time never rises" if mono["ok"] else
                                    f"{len(mono['violations'])} VIOLATION(S), see warnings"))
    carried = [r for r in rep["rows"] if r["feasible"] and r["best_from"] != "search"]
    for r in carried:
        out.append(f"note: {r['variant']}: kept the {r['best_from']} (faster than its own "
                   "search's best)")
    out.append(f"\n{rep['wall_s']:.1f} s wall, {rep['execution']['simulations_run']} "
               f"simulations, {rep['execution']['workers']} worker(s)")
    return "\n".join(out)
